"""Reader for ``sacct --json`` output (Slurm 22.05 and later; the schemas differ and both are read).

Per job: ``job_id`` (``array.job_id``_``array.task_id`` for an array task, as sacct's JobID column
shows it); ``time.submission``, ``time.start``, ``time.end``, ``time.elapsed`` (epoch
seconds; in 23.02+ each may be ``{"set": bool, "infinite": bool, "number": N}``);
``tres.allocated`` (else ``tres.requested``), a list of ``{"type": "gres", "name": "gpu", "count": N}``;
``allocation_nodes``; ``cluster``; ``state.current`` (a string in 22.05, a list of strings later);
``het.job_id`` (the leader, 0 for an ordinary job) and ``het.job_offset``; ``time.limit`` (minutes). Step records are not
read. Bad records are numbered by their place in ``jobs`` (from 1), not by line.
"""

from __future__ import annotations

from transit import slurm
from transit.errors import UsageError
from transit.sim.jobs import Job, TraceLoad, load_json, unfinished

INFINITE_MINUTES = 0xFFFFFFFE   # Slurm's NO_VAL - 1 and INFINITE (2^32 - 1): no limit


def gpu_count(tres: object) -> int:
    """GPUs in a TRES list: the untyped ``gres/gpu`` entry, else the sum of typed ones; a negative
    count anywhere among the GPU entries wins, so that corrupt data reads as a bad row."""
    entries = slurm.tres_from_list(tres)
    negative = [count for name, count in entries.items() if name.startswith("gres/gpu") and count < 0]
    return min(negative) if negative else (slurm.gpus_in_tres(entries) or 0)


def job_id(record: dict, label: int) -> str:
    """The id as sacct's JobID column shows it: ARRAY_TASK for an array task (``array.job_id`` and
    ``array.task_id``; plain ``job_id`` is the task's own id), else the job's id."""
    array = record.get("array") if isinstance(record.get("array"), dict) else {}
    array_job, task = slurm.number(array.get("job_id")), slurm.number(array.get("task_id"))
    if array_job and task is not None:
        return f"{int(array_job)}_{int(task)}"
    return str(record.get("job_id", label))


def read_document(document: dict, source: str) -> TraceLoad:
    load = TraceLoad(source=source, fmt="sacct-json", line_unit="record")
    jobs = document.get("jobs") if isinstance(document, dict) else None
    if not isinstance(jobs, list):
        raise UsageError(f"{source}: not sacct --json output, no 'jobs' list")
    for label, record in enumerate(jobs, start=1):
        load.rows += 1
        if not isinstance(record, dict) or not isinstance(record.get("time"), dict):
            load.reject(label, "job record without a 'time' object")
            continue
        times = record["time"]
        state = (slurm.job_state(record.get("state")) or "").split("+")[0].upper()
        if unfinished(state):
            load.reject(label, unfinished(state))
            continue
        submit = slurm.number(times.get("submission"))
        if submit is None:
            load.reject(label, "time.submission missing")
            continue
        start, end = slurm.number(times.get("start")), slurm.number(times.get("end"))
        elapsed = slurm.number(times.get("elapsed"))
        if not start:
            load.filtered["never started"] += 1
            continue
        duration = elapsed if elapsed is not None else (end - start if end else None)
        if duration is None:
            load.reject(label, "neither time.elapsed nor time.end")
            continue
        tres = record.get("tres") or {}
        gpus = gpu_count(tres.get("allocated")) or gpu_count(tres.get("requested"))
        nodes = slurm.number(record.get("allocation_nodes"))
        limit = slurm.number(times.get("limit"))     # minutes; 22.05 writes INFINITE as 2^32 - 1
        job = Job(job_id(record, label), submit, duration, gpus, state,
                  int(nodes) if nodes else None, start, str(record.get("cluster") or ""),
                  time_limit=60.0 * limit if limit is not None and 0 < limit < INFINITE_MINUTES else None)
        het = record.get("het") or {}
        leader = slurm.number(het.get("job_id"))
        if leader:      # a component's id as sacct -P shows it: LEADER+OFFSET
            job.job_id = f"{int(leader)}+{int(slurm.number(het.get('job_offset')) or 0)}"
        load.offer(label, job, end or None, str(int(leader)) if leader else "")
    return load


def read(path: str) -> TraceLoad:
    return read_document(load_json(path), path)
