"""Shared reading of the comma-separated job traces (ACME and Helios share their column names)."""

from __future__ import annotations

import csv
from datetime import datetime, timezone

from transit.errors import UsageError
from transit.sim.jobs import Job, TraceLoad, unfinished


def parse_timestamp(text: str) -> float:
    """Seconds since the epoch from an ISO time; one without an offset is taken as UTC.

    Both traces keep wall-clock strings; only differences between them matter to the simulator.
    """
    moment = datetime.fromisoformat(text.strip())
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _optional_time(text: str) -> float | None:
    """A recorded time, or None where the column is empty (a job that never started or ended)."""
    return parse_timestamp(text) if text.strip() else None


def read_gpu_csv(path: str, fmt: str, required: tuple[str, ...], cluster: str) -> TraceLoad:
    """Read a CSV with ``job_id, gpu_num, state, submit_time, start_time, end_time``, and
    ``duration`` and ``node_num`` where present.

    Run time is ``duration`` when present, else ``end_time - start_time``. Each row that cannot be
    a finished job is counted in ``TraceLoad.bad`` with its reason and line number.
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
        i_duration, i_nodes = col.get("duration"), col.get("node_num")
        for row in reader:
            line = reader.line_num
            if not row:
                continue
            load.rows += 1
            if len(row) != len(header):
                load.reject(line, f"{len(row)} fields, header has {len(header)}")
                continue
            try:
                gpus = int(float(row[i_gpu]))
                nodes = int(float(row[i_nodes])) if i_nodes is not None and row[i_nodes].strip() else None
            except ValueError:
                load.reject(line, "gpu_num or node_num is not a number")
                continue
            try:
                submit = parse_timestamp(row[i_submit])
                start, end = _optional_time(row[i_start]), _optional_time(row[i_end])
            except ValueError:
                load.reject(line, "submit_time, start_time or end_time is not an ISO time")
                continue
            state = row[i_state].strip().upper()
            if unfinished(state):
                load.reject(line, unfinished(state))
                continue
            if start is None:
                load.filtered["never started"] += 1
                continue
            duration = _duration(row, i_duration, start, end)
            if duration is None:
                load.reject(line, "no duration and no end time")
                continue
            load.offer(line, Job(row[i_id], submit, duration, gpus, state, nodes or None, start, cluster), end)
    return load


def _duration(row: list[str], i_duration: int | None, start: float | None, end: float | None) -> float | None:
    if i_duration is not None and row[i_duration].strip():
        try:
            return float(row[i_duration])
        except ValueError:
            pass
    if start is None or end is None:
        return None
    return end - start
