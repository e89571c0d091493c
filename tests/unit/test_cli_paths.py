"""Every path a `transit` command takes, given a path it cannot use: one line naming the path,
exit 1 or 2, never a Python traceback; and a closed pipe on stdout ends a command quietly."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from transit import cli, paths

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "tests/fixtures/profile/h200-gb8-advise.profile.json.gz"
STATS = REPO / "tests/fixtures/stats/rank-example.json"

# the arguments that make each command reach its path option, and a value for the option itself
# where it needs one beside the path under test
BASE_ARGS = {
    ("plan",): ["--model", "llama3-8b", "--nodes", "2", "--scale-in", "0.5"],
    ("plan", "--hf-config"): ["--nodes", "2", "--scale-in", "0.5"],
    ("report",): ["--no-slurm", str(REPO / "tests/fixtures/report/jobs")],
    ("report", "--report-dir"): ["--no-slurm", "1"],
    ("simulate",): ["--jobs", "40"],
    ("simulate", "sweep"): ["--jobs", "40", "--racks", "2", "--reductions", "0.5", "--gpus-per-node", "8"],
    ("replay",): ["--policy", "advise", "--limit", "1G", str(PROFILE)],
    ("replay", "profile"): ["--policy", "advise", "--limit", "1G"],
    ("submit",): ["--nodes", "2", "--scale-in", "0.5", "--dry-run", "scripts/sbatch-torchrun.sh"],
    ("bench", "link"): ["--from", str(REPO / "bench/fixtures/link-handwritten.json")],
    ("bench", "link", "--from"): [],
    ("run",): [],
    ("doctor",): [],
}
TRAILING_ARGS = {("run",): ["--", "true"]}

# options that name a path but are checked by their command rather than by a transit.paths type
COMMAND_CHECKED = {
    (("run",), "--out"): "output_dir",
    (("report",), "targets"): "input_dir",
    (("doctor",), "--report-dir"): "doctor_check",
    (("bench", "link"), "--from"): "text_file",
    (("plan",), "--hf-config"): "text_file",
    (("submit",), "--hf-config"): "text_file",
    (("bench", "link"), "--out"): "output_dir",
}
PATH_METAVARS = {"FILE", "DIR", "PNG", "JSON", "STATS", "PROFILE", "JOBID|ARRAY_TASK|DIR"}


def _subparsers(parser: argparse.ArgumentParser, prefix: tuple[str, ...]):
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _subparsers(sub, (*prefix, name))


def path_options() -> list[tuple[tuple[str, ...], str, str]]:
    """(command words, option or positional dest, kind) for every path every command takes."""
    found = []
    for command, parser in _subparsers(cli.build_parser(), ()):
        for action in parser._actions:
            name = action.option_strings[-1] if action.option_strings else action.dest
            kind = getattr(action.type, "__name__", None)
            if action.type in (paths.output_file, paths.output_dir, paths.text_file, paths.text_path,
                               paths.input_dir, paths.input_path):
                found.append((command, name, kind))
            elif (command, name) in COMMAND_CHECKED:
                found.append((command, name, COMMAND_CHECKED[(command, name)]))
            elif action.metavar in PATH_METAVARS:
                found.append((command, name, "unchecked"))
    return found


def test_every_path_option_is_checked() -> None:
    """A new option that names a path gets a transit.paths type (or its command's own check)."""
    unchecked = [(" ".join(c), n) for c, n, kind in path_options() if kind == "unchecked"]
    assert unchecked == []
    assert len(path_options()) >= 20


@pytest.fixture(scope="module")
def bad_paths(tmp_path_factory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("paths")
    (tmp / "file").write_text("x")
    (tmp / "binary.json").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\xff\xfe" * 64)
    return {
        "missing": str(tmp / "missing" / "x.out"),
        "unwritable": "/proc/transit-test/x.out",  # /proc takes no new files, even from root
        "under a file": str(tmp / "file" / "x.out"),
        "a directory": str(tmp),
        "binary": str(tmp / "binary.json"),
    }


CASES_BY_KIND = {
    "output_file": ("missing", "unwritable", "under a file", "a directory"),
    "output_dir": ("unwritable", "under a file", "binary"),  # a missing one is created
    "text_file": ("missing", "unwritable", "under a file", "a directory", "binary"),
    "text_path": ("missing", "unwritable", "under a file", "a directory", "binary"),
    "input_path": ("missing", "unwritable", "under a file", "a directory"),
    "input_dir": ("missing", "under a file", "binary"),
    "doctor_check": ("missing", "unwritable", "under a file", "binary"),
}
CASES = [(c, n, bad) for c, n, kind in path_options() if kind in CASES_BY_KIND for bad in CASES_BY_KIND[kind]]


def _base(command: tuple[str, ...], name: str) -> list[str]:
    for key in ((*command, name), command):
        if key in BASE_ARGS:
            return BASE_ARGS[key]
    raise AssertionError(f"no BASE_ARGS for {command}")


@pytest.mark.parametrize(("command", "name", "bad"), CASES, ids=[f"{' '.join(c)} {n} {b}" for c, n, b in CASES])
def test_bad_path_is_one_line(command, name, bad, bad_paths, clean_env) -> None:
    value = bad_paths[bad]
    base = [a for a in _base(command, name) if not (name == "targets" and a.endswith("jobs"))]
    given = [name, value] if name.startswith("--") else [value]
    argv = [*command, *given, *base, *TRAILING_ARGS.get(command, [])]
    r = subprocess.run([sys.executable, "-m", "transit", *argv], capture_output=True, text=True, timeout=300,
                       env=clean_env, check=False, cwd=REPO)
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    assert r.returncode in (1, 2), (r.returncode, r.stdout[-500:], r.stderr)
    if command == ("doctor",):  # a check among the others, on stdout, with its fix
        assert any(line.startswith("fail  report_dir") and value in line for line in r.stdout.splitlines())
        return
    lines = r.stderr.strip().splitlines()
    assert len(lines) >= 1 and value in lines[-1], r.stderr
    assert "usage:" not in r.stderr


@pytest.mark.parametrize("argv", [
    ["plan", "--model", "llama3-8b", "--nodes", "16", "--scale-in", "0.25,0.5", "--wide"],
    ["plan", "--model", "llama3-8b", "--nodes", "16", "--scale-in", "0.5", "--json"],
    ["--help"],
    ["plan", "--help"],
    ["simulate", "--jobs", "40"],
])
def test_closed_pipe_is_quiet(argv: list[str], clean_env) -> None:
    """`transit plan | head`: the reader is gone before the command writes; nothing on stderr."""
    r = subprocess.run(f"{sys.executable} -m transit {' '.join(argv)} | true", shell=True, capture_output=True,
                       text=True, timeout=300, env=clean_env, check=False, cwd=REPO)
    assert r.stderr == ""


def test_bad_argument_is_one_line_without_usage(clean_env) -> None:
    r = subprocess.run([sys.executable, "-m", "transit", "plan", "--nodes", "2", "--precision", "fp8"],
                       capture_output=True, text=True, timeout=120, env=clean_env, check=False, cwd=REPO)
    assert r.returncode == 2
    line = "transit plan: argument --precision: invalid choice: 'fp8' (choose from 'bf16', 'mixed') (see transit plan --help)"
    assert r.stderr.splitlines() == [line]


@pytest.mark.parametrize(("argv", "command"), [
    (["launch", "--bogus", "--", "train.py"], "transit launch"),
    (["report", "1", "--bogus"], "transit report"),
    (["--bogus"], "transit"),
])
def test_an_unknown_argument_is_refused_by_its_subcommand(capsys, argv: list[str], command: str) -> None:
    """`LAUNCH_ARGS=--bogus sbatch scripts/sbatch-torchrun.sh`: the line names `transit launch`."""
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{command}: unrecognized arguments: --bogus (see {command} --help)"]


def test_an_output_dir_behind_a_closed_directory_is_refused_by_name(monkeypatch) -> None:
    """A non-root user's --out under /root (mode 0700): stat says EACCES, not "absent". Root passes
    every permission check here, so the kernel's answer is played by Path.exists for /root's child;
    the slurm tier meets the real one as its test user."""
    real_exists = Path.exists

    def exists(self: Path) -> bool:
        if str(self).startswith("/root/"):
            raise PermissionError(13, "Permission denied", str(self))
        return real_exists(self)

    monkeypatch.setattr(Path, "exists", exists)
    with pytest.raises(paths.PathError, match=r"^'/root/transit' cannot be written: /root/transit: Permission denied$"):
        paths.output_dir("/root/transit")
