"""Reader for ``sacct --json`` output (Slurm 22.05 and later; the schemas differ and both are read).

Per job: ``job_id``; ``time.submission``, ``time.start``, ``time.end``, ``time.elapsed`` (epoch
seconds; in 23.02+ each may be ``{"set": bool, "infinite": bool, "number": N}``);
``tres.allocated`` (else ``tres.requested``), a list of ``{"type": "gres", "name": "gpu", "count": N}``;
``state.current`` (a string in 22.05, a list of strings later). Step records are not read.
"""

from __future__ import annotations

from transit import slurm
from transit.errors import UsageError
from transit.sim.jobs import Job, TraceLoad, load_json


def number(value: object) -> float | None:
    """A number from either form Slurm writes (plain, or ``{"set", "infinite", "number"}``)."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def gpu_count(tres: list) -> int:
    """GPUs in a TRES list: the untyped ``gres/gpu`` entry, else the sum of typed ones."""
    untyped = 0
    typed = 0
    for item in tres:
        if item.get("type") != "gres":
            continue
        name = item.get("name") or ""
        count = int(number(item.get("count")) or 0)
        if name == "gpu":
            untyped = count
        elif name.startswith("gpu:"):
            typed += count
    return untyped or typed


def read_document(document: dict, source: str) -> TraceLoad:
    load = TraceLoad(source=source, fmt="sacct-json")
    jobs = document.get("jobs") if isinstance(document, dict) else None
    if not isinstance(jobs, list):
        raise UsageError(f"{source}: not sacct --json output, no 'jobs' list")
    for index, record in enumerate(jobs):
        load.rows += 1
        label = index + 1
        if not isinstance(record, dict) or not isinstance(record.get("time"), dict):
            load.reject(label, "job record without a 'time' object")
            continue
        times = record["time"]
        submit = number(times.get("submission"))
        if submit is None:
            load.reject(label, "time.submission missing")
            continue
        start, end = number(times.get("start")), number(times.get("end"))
        elapsed = number(times.get("elapsed"))
        state = (slurm.job_state(record.get("state")) or "").split("+")[0]
        if not start:
            load.filtered["never started"] += 1
            continue
        duration = elapsed if elapsed is not None else (end - start if end else None)
        if duration is None:
            load.reject(label, "neither time.elapsed nor time.end")
            continue
        tres = record.get("tres") or {}
        gpus = gpu_count(tres.get("allocated") or []) or gpu_count(tres.get("requested") or [])
        load.add(Job(str(record.get("job_id", label)), submit, duration, gpus, state.upper()))
    return load


def read(path: str) -> TraceLoad:
    return read_document(load_json(path), path)
