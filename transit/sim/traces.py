"""Format detection and dispatch to the one reader module per trace format."""

from __future__ import annotations

import json

from transit.errors import UsageError
from transit.sim import acme, helios, project_json, sacct, sacct_json
from transit.sim.jobs import TraceLoad

FORMATS = ("acme", "helios", "sacct", "sacct-json", "transit-json")


def detect_format(path: str) -> str:
    """Name the format of ``path`` from its first line (CSV header, pipes) or its JSON keys."""
    try:
        with open(path, encoding="utf-8") as handle:
            head = handle.read(4096)
    except OSError as exc:
        raise UsageError(f"cannot read trace {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not a text file ({exc.reason})") from exc
    if head.lstrip().startswith("{"):
        with open(path, encoding="utf-8") as handle:
            try:
                document = json.load(handle)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}: looks like JSON but is not ({exc})") from exc
        if document.get("schema") == project_json.SCHEMA:
            return "transit-json"
        if isinstance(document.get("jobs"), list):
            return "sacct-json"
        raise UsageError(f"{path}: JSON that is neither sacct --json nor {project_json.SCHEMA}")
    lines = head.splitlines()
    if not head.strip():
        raise UsageError(f"{path}: the file is empty; a trace is expected ({', '.join(FORMATS)})")
    first = lines[0]
    if "|" in first:
        return "sacct"
    if len(lines) > 1 and sacct.fixed_width(first, lines[1]):
        raise UsageError(f"{path}: sacct's fixed-width table, which cannot be split into fields; "
                         f"{sacct.EXPORT_ADVICE}")
    columns = {name.strip() for name in first.split(",")}
    if "vc" in columns and "gpu_num" in columns:
        return "helios"
    if "gpu_num" in columns and "submit_time" in columns:
        return "acme"
    raise UsageError(f"{path}: cannot tell its format; pass --format {'|'.join(FORMATS)}")


def read_trace(path: str, fmt: str | None = None, dedupe: bool = False) -> TraceLoad:
    """Every row of ``path`` read and accounted for; repeated job ids refused unless ``dedupe``."""
    fmt = fmt or detect_format(path)
    readers = {"acme": acme.read, "helios": helios.read, "sacct": sacct.read,
               "sacct-json": sacct_json.read, "transit-json": project_json.read}
    if fmt not in readers:
        raise UsageError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    try:
        load = readers[fmt](path)
    except OSError as exc:
        raise UsageError(f"cannot read trace {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not a text file ({exc.reason})") from exc
    load.settle(dedupe, path)
    return load
