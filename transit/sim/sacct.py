"""Reader for Slurm ``sacct -P`` exports (pipe-separated, one header line).

A suitable export::

    SLURM_TIME_FORMAT=%s sacct -P -a -X -S 2024-01-01 -E now \\
        --format=JobID,Submit,Start,End,ElapsedRaw,AllocTRES,NNodes,State > jobs.txt

``Submit``/``Start``/``End`` may be epoch seconds (``SLURM_TIME_FORMAT=%s``) or Slurm's default
local times (``2024-05-01T12:00:00``, read in this process's time zone, so export and read on
machines with the same ``TZ``). Run time comes from ``ElapsedRaw``, else ``Elapsed``
(``[D-]HH:MM:SS``), else ``End - Start``. GPUs come from ``AllocTRES`` (``gres/gpu=N``, or the
sum of typed ``gres/gpu:TYPE=N``), else ``ReqTRES``, else ``AllocGRES``/``ReqGRES`` (``gpu:N``).
Step rows (``123.batch``, ``123.0``) are counted as filtered, not read: ``-X`` leaves them out.
"""

from __future__ import annotations

from datetime import datetime

from transit import slurm
from transit.errors import UsageError
from transit.sim.jobs import Job, TraceLoad

GPU_COLUMNS = ("AllocTRES", "ReqTRES", "AllocGRES", "ReqGRES")
UNSET_TIMES = frozenset({"", "Unknown", "None"})


def parse_time(text: str) -> float | None:
    """Epoch seconds from a sacct time (epoch digits or a local ISO time); None when unset."""
    text = text.strip()
    if text in UNSET_TIMES:
        return None
    if text.lstrip("-").isdigit():
        return float(text)
    return datetime.fromisoformat(text).timestamp()


def parse_elapsed(text: str) -> float:
    """Seconds from Slurm's ``[D-]HH:MM:SS`` (also ``MM:SS`` and ``MM:SS.mmm``)."""
    days, _, clock = text.strip().rpartition("-")
    parts = [float(p) for p in clock.split(":")]
    if not 1 <= len(parts) <= 3:
        raise ValueError(text)
    seconds = 0.0
    for part in parts:
        seconds = seconds * 60 + part
    return seconds + (int(days) * 86400 if days else 0)


def parse_gpus(text: str) -> int:
    """GPU count from a TRES string (``cpu=8,gres/gpu=4``) or a GRES string (``gpu:a100:4``)."""
    if "=" in text:
        return slurm.gpus_in_tres(slurm.tres_from_string(text)) or 0
    typed = 0
    for item in filter(None, text.strip().split(",")):
        if item.startswith("gpu"):  # gpu:4, gpu:a100:4, gpu:a100:4(IDX:0-3)
            count = item.split("(")[0].rsplit(":", 1)[-1]
            typed += int(count) if count.isdigit() else 0
    return typed


def read(path: str) -> TraceLoad:
    load = TraceLoad(source=path, fmt="sacct")
    with open(path, encoding="utf-8") as handle:
        header = handle.readline().rstrip("\n").split("|")
        col = {name: i for i, name in enumerate(header)}
        if "JobID" not in col or "Submit" not in col:
            raise UsageError(f"{path}: not a sacct -P export, header lacks JobID and Submit")
        gpu_cols = [col[name] for name in GPU_COLUMNS if name in col]
        if not gpu_cols:
            raise UsageError(f"{path}: sacct export has none of {', '.join(GPU_COLUMNS)}; add AllocTRES")
        has_run_time = "ElapsedRaw" in col or "Elapsed" in col or ("Start" in col and "End" in col)
        if not has_run_time:
            raise UsageError(f"{path}: sacct export needs ElapsedRaw, Elapsed or Start and End")
        for line_no, line in enumerate(handle, start=2):
            line = line.rstrip("\n")
            if not line:
                continue
            load.rows += 1
            row = line.split("|")
            if len(row) != len(header):
                load.reject(line_no, f"{len(row)} fields, header has {len(header)}")
                continue
            job_id = row[col["JobID"]]
            if "." in job_id:
                load.filtered["job step row"] += 1
                continue
            try:
                submit = parse_time(row[col["Submit"]])
            except ValueError:
                load.reject(line_no, f"Submit {row[col['Submit']]!r} is not a time")
                continue
            if submit is None:
                load.reject(line_no, "Submit is unset")
                continue
            try:
                duration = _run_time(row, col)
                gpus = max(parse_gpus(row[i]) for i in gpu_cols)
            except ValueError as exc:
                load.reject(line_no, f"unreadable value {exc}")
                continue
            state = row[col["State"]].split()[0].upper() if "State" in col and row[col["State"]] else ""
            if duration is None:
                # a job that never started has no run time: not bad, just not a job that ran
                load.filtered["never started"] += 1
                continue
            load.add(Job(job_id, submit, duration, gpus, state))
    return load


def _run_time(row: list[str], col: dict[str, int]) -> float | None:
    if "ElapsedRaw" in col and row[col["ElapsedRaw"]].strip():
        return float(row[col["ElapsedRaw"]])
    if "Elapsed" in col and row[col["Elapsed"]].strip():
        return parse_elapsed(row[col["Elapsed"]])
    start = parse_time(row[col["Start"]]) if "Start" in col else None
    end = parse_time(row[col["End"]]) if "End" in col else None
    if start is None or end is None:
        return None
    return end - start
