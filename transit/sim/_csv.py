"""Shared reading of the comma-separated job traces (ACME and Helios share their column names)."""

from __future__ import annotations

import csv
from datetime import datetime, timezone

from transit.errors import UsageError
from transit.sim.jobs import Job, TraceLoad


def parse_timestamp(text: str) -> float:
    """Seconds since the epoch from an ISO time; one without an offset is taken as UTC.

    Both traces keep wall-clock strings; only differences between them matter to the simulator.
    """
    moment = datetime.fromisoformat(text.strip())
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def read_gpu_csv(path: str, fmt: str, required: tuple[str, ...]) -> TraceLoad:
    """Read a CSV with ``job_id, gpu_num, state, submit_time, start_time, end_time, duration``.

    ``duration`` is used when present, else ``end_time - start_time``. Each row that cannot be
    read is counted in ``TraceLoad.bad`` with its reason.
    """
    load = TraceLoad(source=path, fmt=fmt)
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise UsageError(f"{path}: empty file, expected a {fmt} CSV header")
        header = [name.strip() for name in header]
        missing = [name for name in required if name not in header]
        if missing:
            raise UsageError(f"{path}: not a {fmt} trace, header lacks {', '.join(missing)}")
        col = {name: header.index(name) for name in header}
        i_id, i_gpu, i_state = col["job_id"], col["gpu_num"], col["state"]
        i_submit, i_start, i_end = col["submit_time"], col["start_time"], col["end_time"]
        i_duration = col.get("duration")
        for line_no, row in enumerate(reader, start=2):
            if not row:
                continue
            load.rows += 1
            if len(row) != len(header):
                load.reject(line_no, f"{len(row)} fields, header has {len(header)}")
                continue
            try:
                gpus = int(float(row[i_gpu]))
            except ValueError:
                load.reject(line_no, f"gpu_num {row[i_gpu]!r} is not a number")
                continue
            try:
                submit = parse_timestamp(row[i_submit])
            except ValueError:
                load.reject(line_no, f"submit_time {row[i_submit]!r} is not an ISO time")
                continue
            duration = _duration(row, i_duration, i_start, i_end)
            if duration is None:
                load.reject(line_no, "no duration and no start/end times")
                continue
            if duration < 0:
                load.reject(line_no, f"negative duration {duration:g}")
                continue
            load.add(Job(row[i_id], submit, duration, gpus, row[i_state].strip().upper()))
    return load


def _duration(row: list[str], i_duration: int | None, i_start: int, i_end: int) -> float | None:
    if i_duration is not None and row[i_duration].strip():
        try:
            return float(row[i_duration])
        except ValueError:
            pass
    try:
        return parse_timestamp(row[i_end]) - parse_timestamp(row[i_start])
    except ValueError:
        return None
