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


def gpu_count(tres: list) -> int:
    """GPUs in a TRES list: the untyped ``gres/gpu`` entry, else the sum of typed ones."""
    return slurm.gpus_in_tres(slurm.tres_from_list(tres)) or 0


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
        submit = slurm.number(times.get("submission"))
        if submit is None:
            load.reject(label, "time.submission missing")
            continue
        start, end = slurm.number(times.get("start")), slurm.number(times.get("end"))
        elapsed = slurm.number(times.get("elapsed"))
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
