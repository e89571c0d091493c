"""Paths a user names on the command line, checked when the arguments are parsed.

Each function is an argparse ``type=``: a path that cannot be read or written is refused with one
line before the command does any work, so a plan or a simulation is never computed only to fail
on its output, and a binary file given where text is expected never reaches a parser.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import tempfile
from pathlib import Path

from transit import _native
from transit.errors import UsageError

TEXT_PROBE_BYTES = 65536  # enough to tell a text file from a binary one


class PathError(UsageError, argparse.ArgumentTypeError):
    """A path refused: argparse shows it after the option's name, a command after its own words."""


def _refuse(path: str, why: str) -> PathError:
    return PathError(f"'{_native.show(path)}' {why}")


def _given(path: str) -> Path:
    """`path` as a Path; an empty one is refused (Path('') would be '.', the directory the user is in)."""
    if not path:
        raise _refuse(path, "is an empty path; give a file or directory name")
    return Path(path)


def _probe_dir(path: str, directory: Path) -> None:
    """Raises unless a new file can be created in `directory` (as this user: the kernel decides)."""
    if not directory.is_dir():
        raise _refuse(path, f"cannot be written: {directory} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise _refuse(path, f"cannot be written: {directory}: {exc.strerror}") from exc


def output_file(path: str) -> str:
    """A file to write: not a directory, and its directory exists and takes new files."""
    target = _given(path)
    if target.is_dir():
        raise _refuse(path, "is a directory; give a file name")
    if target.exists() and not os.access(target, os.W_OK):
        raise _refuse(path, "exists and cannot be written")
    _probe_dir(path, target.parent if str(target.parent) else Path("."))
    return path


def _exists(path: str, where: Path) -> bool:
    """Whether `where` exists; one a directory above it keeps out (Path.exists raises then) is refused."""
    try:
        return where.exists()
    except PermissionError as exc:
        raise _refuse(path, f"cannot be written: {where}: {exc.strerror}") from exc


def output_dir(path: str) -> str:
    """A directory to write files into: it exists and takes new files, or it can be created (its
    nearest existing ancestor takes new entries)."""
    target = _given(path)
    if _exists(path, target):
        _probe_dir(path, target)
        return path
    ancestor = target.parent
    while not _exists(path, ancestor) and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    _probe_dir(path, ancestor)
    return path


def input_dir(path: str) -> str:
    """A directory to read: it exists and can be listed."""
    target = _given(path)
    if not target.is_dir():
        raise _refuse(path, "is not a directory" if target.exists() else "does not exist")
    if not os.access(target, os.R_OK | os.X_OK):
        raise _refuse(path, "cannot be read (permission denied)")
    return path


def _open_regular(path: str) -> bytes:
    """The first bytes of a readable regular file."""
    target = _given(path)
    if target.is_dir():
        raise _refuse(path, "is a directory; give a file")
    try:
        with open(os.open(target, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                # a pipe would lose to this probe what its reader needs, a device may never end
                raise _refuse(path, "is not a regular file (a pipe or a device); write it to a file first")
            return handle.read(TEXT_PROBE_BYTES)
    except OSError as exc:
        raise _refuse(path, f"cannot be read: {exc.strerror}") from exc


def input_path(path: str) -> Path:
    """A readable file of any content (its command's parser checks that), as a Path."""
    _open_regular(path)
    return Path(path)


def _text_head(path: str) -> bytes:
    """The first bytes of a readable file of UTF-8 text; refuses anything else."""
    head = _open_regular(path)
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not only a character cut at the probe's end
            raise _refuse(path, f"is not a text file (byte {exc.start} is not UTF-8)") from exc
    if b"\0" in head:
        raise _refuse(path, "is not a text file (it holds NUL bytes)")
    return head


def text_file(path: str) -> str:
    """A readable file of UTF-8 text (JSON, CSV, a trace)."""
    _text_head(path)
    return path


def batch_script(path: str) -> str:
    """A file sbatch will take: readable text whose first line is an interpreter (sbatch's own rule)."""
    if not _text_head(path).startswith(b"#!"):
        raise _refuse(path, "is not a batch script: its first line is not #!INTERPRETER")
    return path


def text_path(path: str) -> Path:
    """text_file(), as a Path."""
    return Path(text_file(path))



def read_regular(path: Path) -> bytes:
    """The bytes of a regular file (a symbolic link is followed). Anything else raises OSError rather
    than being read: a FIFO would block for ever, a device such as /dev/zero never end."""
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return handle.read()
