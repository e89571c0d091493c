"""The project's own trace format, ``transit.trace/1`` (what ``transit simulate --save-trace`` writes).

    {"schema": "transit.trace/1",
     "source": "synthetic seren-like, seed 1",
     "jobs": [{"id": "1", "submit": 0.0, "duration": 3600.0, "gpus": 16, "state": "COMPLETED"}, ...]}

``submit`` and ``duration`` are seconds; ``state`` is optional.
"""

from __future__ import annotations

import json

from transit.errors import UsageError
from transit.sim.jobs import Job, TraceLoad, load_json

SCHEMA = "transit.trace/1"


def read_document(document: dict, source: str) -> TraceLoad:
    schema = document.get("schema") if isinstance(document, dict) else None
    if schema != SCHEMA:
        raise UsageError(f"{source}: schema is {schema!r}, expected {SCHEMA!r}")
    if not isinstance(document.get("jobs", []), list):
        raise UsageError(f"{source}: 'jobs' is not a list")
    load = TraceLoad(source=source, fmt="transit-json")
    for index, record in enumerate(document.get("jobs", []), start=1):
        load.rows += 1
        try:
            if not isinstance(record, dict):
                raise TypeError("not an object")
            job = Job(str(record["id"]), float(record["submit"]), float(record["duration"]),
                      int(record["gpus"]), str(record.get("state", "")).upper())
        except (KeyError, TypeError, ValueError) as exc:
            load.reject(index, f"job record unreadable ({exc.__class__.__name__}: {exc})")
            continue
        load.add(job)
    return load


def read(path: str) -> TraceLoad:
    return read_document(load_json(path), path)


def write(path: str, jobs: list[Job], source: str) -> None:
    records = [{"id": j.job_id, "submit": j.submit, "duration": j.duration, "gpus": j.gpus,
                "state": j.state} for j in jobs]
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"schema": SCHEMA, "source": source, "jobs": records}, handle)
