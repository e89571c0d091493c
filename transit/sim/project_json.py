"""The project's own trace format, ``transit.trace/1`` (what ``transit simulate --save-trace`` writes).

    {"schema": "transit.trace/1",
     "source": "synthetic seren-like, seed 1",
     "jobs": [{"id": "1", "submit": 0.0, "duration": 3600.0, "gpus": 16, "state": "COMPLETED"}, ...]}

``submit`` and ``duration`` are seconds. Optional per job: ``state``; ``nodes`` (nodes it ran
on); ``start`` (recorded start, same clock as ``submit``); ``cluster``; ``time_limit`` (seconds,
what backfill plans with); and, for the network
model, ``params`` (model parameters), ``dp`` and ``tp`` (data- and tensor-parallel degrees).
"""

from __future__ import annotations

import json

from transit.errors import UsageError
from transit.sim.jobs import Job, TraceLoad, load_json

SCHEMA = "transit.trace/1"
OPTIONAL = (("nodes", int), ("start", float), ("params", float), ("dp", int), ("tp", int), ("time_limit", float))


def _job(record: object) -> Job:
    if not isinstance(record, dict):
        raise TypeError("not an object")
    extra = {name: None if record.get(name) is None else kind(record[name]) for name, kind in OPTIONAL}
    return Job(str(record["id"]), float(record["submit"]), float(record["duration"]), int(record["gpus"]),
               str(record.get("state", "")).upper(), cluster=str(record.get("cluster", "")), **extra)


def read_document(document: dict, source: str) -> TraceLoad:
    schema = document.get("schema") if isinstance(document, dict) else None
    if schema != SCHEMA:
        raise UsageError(f"{source}: schema is {schema!r}, expected {SCHEMA!r}")
    if not isinstance(document.get("jobs", []), list):
        raise UsageError(f"{source}: 'jobs' is not a list")
    load = TraceLoad(source=source, fmt="transit-json", line_unit="record")
    for index, record in enumerate(document.get("jobs", []), start=1):
        load.rows += 1
        try:
            job = _job(record)
        except (KeyError, TypeError, ValueError) as exc:
            load.reject(index, f"job record unreadable ({exc.__class__.__name__}: {exc})")
            continue
        load.offer(index, job, None if job.start is None else job.start + job.duration)
    return load


def read(path: str) -> TraceLoad:
    return read_document(load_json(path), path)


def write(path: str, jobs: list[Job], source: str) -> None:
    records = []
    for job in jobs:
        record = {"id": job.job_id, "submit": job.submit, "duration": job.duration, "gpus": job.gpus,
                  "state": job.state}
        record.update({name: getattr(job, name) for name, _ in OPTIONAL if getattr(job, name) is not None})
        if job.cluster:
            record["cluster"] = job.cluster
        records.append(record)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"schema": SCHEMA, "source": source, "jobs": records}, handle)
