"""Reader for Slurm ``sacct -P`` exports (pipe-separated, one header line).

A suitable export (one row per job; ``-X`` leaves out the step rows)::

    SLURM_TIME_FORMAT=%s sacct -P -a -X -S 2024-01-01 -E now \\
        --format=JobID,Cluster,Submit,Start,End,ElapsedRaw,Timelimit,AllocTRES,NNodes,State > jobs.txt

Field forms, from sacct(1) of Slurm 22.05 (the version installed here): ``JobID`` is ``123``,
``123_4`` for an array task, ``123+1`` for a heterogeneous-job component, with ``.batch``,
``.extern`` or ``.0`` appended for a step. ``Submit``/``Start``/``End`` are epoch seconds with
``SLURM_TIME_FORMAT=%s``, else ``YYYY-MM-DDTHH:MM:SS`` local times (read in this process's time
zone, so export and read with the same ``TZ``), ``Unknown``/``None`` when unset. ``Elapsed`` is
``[D-]HH:MM:SS``; ``ElapsedRaw`` seconds. ``State`` may carry a reason (``CANCELLED by 1000``).
Run time comes from ``ElapsedRaw``, else ``Elapsed``, else ``End - Start``. GPUs come from
``AllocTRES`` (``gres/gpu=N``, or the sum of typed ``gres/gpu:TYPE=N``), else ``ReqTRES``, else
``AllocGRES``/``ReqGRES`` (``gpu:N``). Nodes from ``NNodes`` (or ``AllocNodes``). The time limit,
which backfill plans with, from ``TimelimitRaw`` (minutes) or ``Timelimit``, where exported.
Step rows are counted as filtered; het-job components are merged into one job.
"""

from __future__ import annotations

from datetime import datetime

from transit import slurm
from transit.errors import UsageError
from transit.sim.jobs import Job, TraceLoad, unfinished

GPU_COLUMNS = ("AllocTRES", "ReqTRES", "AllocGRES", "ReqGRES")
NODE_COLUMNS = ("NNodes", "AllocNodes")
UNSET_TIMES = frozenset({"", "Unknown", "None"})
EXPORT_FORMAT = "JobID,Cluster,Submit,Start,End,ElapsedRaw,Timelimit,AllocTRES,NNodes,State"
EXPORT_ADVICE = f"export with: SLURM_TIME_FORMAT=%s sacct -P -a -X -S START -E END --format={EXPORT_FORMAT}"


def parse_time(text: str) -> float | None:
    """Epoch seconds from a sacct time (epoch digits or a local ISO time); None when unset."""
    text = text.strip()
    if text in UNSET_TIMES:
        return None
    if text.lstrip("-").isdigit():
        return float(text)
    return datetime.fromisoformat(text).timestamp()


def parse_elapsed(text: str) -> float:
    """Seconds from Slurm's ``[D-]HH:MM:SS`` (also ``MM:SS`` and ``MM:SS.mmm``; a leading ``-`` negates)."""
    text = text.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    days, _, clock = text.lstrip("-").rpartition("-")
    parts = [float(p) for p in clock.split(":")]
    if not 1 <= len(parts) <= 3:
        raise ValueError(text)
    seconds = 0.0
    for part in parts:
        seconds = seconds * 60 + part
    return sign * (seconds + (int(days) * 86400 if days else 0))


def parse_gpus(text: str) -> int:
    """GPU count from a TRES string (``cpu=8,gres/gpu=4``) or a GRES string (``gpu:a100:4``).

    Counts are read as signed integers, so a corrupt ``gres/gpu=-8`` stays negative (a bad row)
    rather than reading as "no GPU".
    """
    if "=" in text:
        entries = {}
        for item in text.split(","):
            name, _, count = item.partition("=")
            if name.strip().startswith("gres/gpu"):
                entries[name.strip()] = int(count)
        return slurm.gpus_in_tres(entries) or 0
    typed = 0
    for item in filter(None, text.strip().split(",")):
        if item.startswith("gpu"):  # gpu:4, gpu:a100:4, gpu:a100:4(IDX:0-3)
            typed += int(item.split("(")[0].rsplit(":", 1)[-1])
    return typed


def fixed_width(first: str, second: str) -> bool:
    """Whether two lines open sacct's default output: a space-aligned header over dashes (no -P)."""
    return "JobID" in first.split() and bool(second.strip()) and set(second.strip()) <= {"-", " "}


def missing_fields(col: dict[str, int]) -> list[str]:
    """The fields an export lacks, each with the ones that can stand in for it."""
    missing = [name for name in ("JobID", "Submit") if name not in col]
    if not any(name in col for name in GPU_COLUMNS):
        missing.append(f"AllocTRES (or {', '.join(GPU_COLUMNS[1:])})")
    if not ("ElapsedRaw" in col or "Elapsed" in col or ("Start" in col and "End" in col)):
        missing.append("ElapsedRaw (or Elapsed, or Start and End)")
    return missing


def read(path: str) -> TraceLoad:
    load = TraceLoad(source=path, fmt="sacct")
    with open(path, encoding="utf-8") as handle:
        first = handle.readline()
        if not first.strip():
            raise UsageError(f"{path}: the file is empty; {EXPORT_ADVICE}")
        if "|" not in first and fixed_width(first, handle.readline()):
            raise UsageError(f"{path}: sacct's fixed-width table, which cannot be split into fields; {EXPORT_ADVICE}")
        handle.seek(0)
        header = handle.readline().rstrip("\n").split("|")
        col = {name: i for i, name in enumerate(header)}
        missing = missing_fields(col)
        if missing:
            raise UsageError(f"{path}: the sacct -P header lacks {'; '.join(missing)}; {EXPORT_ADVICE}")
        gpu_cols = [col[name] for name in GPU_COLUMNS if name in col]
        node_col = next((col[name] for name in NODE_COLUMNS if name in col), None)
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
            state = row[col["State"]].split()[0].upper() if "State" in col and row[col["State"]].strip() else ""
            if unfinished(state):
                load.reject(line_no, unfinished(state))
                continue
            try:
                submit = parse_time(row[col["Submit"]])
                start = parse_time(row[col["Start"]]) if "Start" in col else None
                end = parse_time(row[col["End"]]) if "End" in col else None
            except ValueError:
                load.reject(line_no, "Submit, Start or End is not a time")
                continue
            if submit is None:
                load.reject(line_no, "Submit is unset")
                continue
            try:
                duration = _run_time(row, col, start, end)
                gpus = max(parse_gpus(row[i]) for i in gpu_cols)
                nodes = int(row[node_col]) if node_col is not None and row[node_col].strip() else None
            except ValueError:
                load.reject(line_no, "Elapsed, a GPU count or NNodes is not a number")
                continue
            if duration is None or (start is None and "Start" in col):
                # a job that never started has no run time: not bad, just not a job that ran
                load.filtered["never started"] += 1
                continue
            cluster = row[col["Cluster"]] if "Cluster" in col else ""
            job = Job(job_id, submit, duration, gpus, state, nodes or None, start, cluster,
                      time_limit=_time_limit(row, col))
            leader, plus, _ = job_id.partition("+")
            load.offer(line_no, job, end, leader if plus else "")
    return load


def _time_limit(row: list[str], col: dict[str, int]) -> float | None:
    """Seconds from ``TimelimitRaw`` (minutes) or ``Timelimit`` (``[D-]HH:MM:SS``); None when unset,
    ``UNLIMITED`` or ``Partition_Limit`` (the partition's, which the export does not say)."""
    try:
        if "TimelimitRaw" in col and row[col["TimelimitRaw"]].strip().isdigit():
            return 60.0 * int(row[col["TimelimitRaw"]])
        if "Timelimit" in col and row[col["Timelimit"]].strip()[:1].isdigit():
            return parse_elapsed(row[col["Timelimit"]])
    except ValueError:
        pass
    return None


def _run_time(row: list[str], col: dict[str, int], start: float | None, end: float | None) -> float | None:
    if "ElapsedRaw" in col and row[col["ElapsedRaw"]].strip():
        return float(row[col["ElapsedRaw"]])
    if "Elapsed" in col and row[col["Elapsed"]].strip():
        return parse_elapsed(row[col["Elapsed"]])
    if start is None or end is None:
        return None
    return end - start
