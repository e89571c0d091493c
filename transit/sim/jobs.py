"""The normalized job record every trace reader produces, row validation, and the "meaningful GPU
job" filter.

A reader turns one trace row into a ``Job`` and offers it to ``TraceLoad.offer`` with the row's
line number; ``TraceLoad.settle`` then refuses repeated job ids (or keeps the latest record of
each, with ``--dedupe``) and keeps the rest. Nothing is dropped silently. Rows whose values cannot be true of a finished job (a
negative GPU count, End before Start, a run time over ``MAX_DURATION_S``, a job still running or
pending) are *bad*, counted by reason with their line numbers. Rows that are valid but are not
meaningful GPU jobs (no GPU, never started, under a second) are *filtered*, counted by reason.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field

from transit.errors import UsageError

# A job that ran for less than this never did GPU work worth simulating (cancelled before start,
# 0-second failures). ACME and Slurm durations are whole seconds, so 1 s keeps every job that ran.
MIN_DURATION_S = 1.0

# The longest run time believed: a year and a day. Longer is a unit or clock error (the issue's
# 1e12-s sacct row); the public traces' longest GPU jobs ran 14 days (ACME Seren) and 50 days
# (Helios), per their cluster summaries.
MAX_DURATION_DAYS = 366
MAX_DURATION_S = MAX_DURATION_DAYS * 86400.0

# Final states that mean the row is not a finished job: replaying it would use a partial run time.
UNFINISHED_STATES = frozenset({"RUNNING", "PENDING", "SUSPENDED", "RESIZING", "CONFIGURING", "COMPLETING",
                               "STOPPED", "SIGNALING", "STAGE_OUT"})
# A run that ended in a requeue: it held its GPUs from Start to End, so it is replayed as a run of
# its own (``sacct -D`` lists each such run beside the job's final one, under the same JobID).
REQUEUED_STATES = frozenset({"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})

HET_COMPONENT = "het-job component (merged into its job)"
OLDER_DUPLICATE = "an older record of a job id that appears again (--dedupe)"
IDS_NAMED = 10   # job ids a duplicate message names; the count is always complete
LINES_KEPT_PER_REASON = 20   # line numbers listed per bad-row reason; the count is always complete


@dataclass(slots=True)
class Job:
    """One job as the simulator sees it: when it arrived, how long it ran, what it held."""

    job_id: str
    submit: float                 # seconds, any epoch (the simulator only uses differences)
    duration: float               # seconds of run time in the trace
    gpus: int                     # GPUs allocated (0 for a CPU-only job)
    state: str = ""               # final state as the trace spells it, upper case
    nodes: int | None = None      # nodes allocated, where the trace says (node_num, NNodes)
    start: float | None = None    # recorded start, same epoch as submit, where the trace has it
    cluster: str = ""             # the cluster the row came from (sacct Cluster, the file's name)
    params: float | None = None   # model parameters, where the trace says (transit.trace/1)
    dp: int | None = None         # data-parallel degree, where the trace says
    tp: int | None = None         # tensor-parallel degree (within a node), where the trace says
    time_limit: float | None = None   # seconds the job asked for (sacct Timelimit), where the trace says


def meaningful_gpu_job(job: Job) -> str | None:
    """Return None when ``job`` is a meaningful GPU job, else the reason it is not.

    The paper's preprocessing keeps "only meaningful GPU jobs"; here that means a job that held
    at least one GPU and actually ran (at least ``MIN_DURATION_S`` seconds). Failed and cancelled
    jobs that ran are kept: they occupied GPUs.
    """
    if job.gpus < 1:
        return "no GPU"
    if job.duration < MIN_DURATION_S:
        return "ran under 1 s"
    return None


def unfinished(state: str) -> str | None:
    """The bad-row reason for a job that had not finished when the trace was taken, or None."""
    return f"job not finished ({state})" if state in UNFINISHED_STATES else None


def row_problem(job: Job, end: float | None = None) -> str | None:
    """Why a parsed row cannot be a finished job (a bad row), or None. ``end``: its recorded End."""
    if not (math.isfinite(job.submit) and math.isfinite(job.duration)):
        return "submit or duration is not a finite number"
    if unfinished(job.state):
        return unfinished(job.state)
    if job.gpus < 0:
        return "negative GPU count"
    if job.nodes is not None and job.nodes < 0:
        return "negative node count"
    if job.start is not None and end is not None and end < job.start:
        return "End before Start"
    if job.duration < 0:
        return "negative run time"
    if job.duration > MAX_DURATION_S:
        return f"run time over {MAX_DURATION_DAYS} days"
    if job.start is not None and job.start < job.submit:
        return "Start before Submit"
    if job.tp is not None and (job.tp < 1 or (job.gpus and job.gpus % job.tp)):
        return "tp does not divide the GPU count"
    return None


@dataclass
class TraceLoad:
    """What a reader returns: the kept jobs and a count of every row that was not kept, by reason."""

    source: str
    fmt: str
    jobs: list[Job] = field(default_factory=list)
    rows: int = 0
    line_unit: str = "line"                              # "line" of a text file, or "record" of JSON
    bad: Counter = field(default_factory=Counter)        # rows that cannot be a finished job, by reason
    bad_lines: dict[str, list[int]] = field(default_factory=dict)
    filtered: Counter = field(default_factory=Counter)   # valid rows that are not meaningful GPU jobs
    # records read, not yet kept: (line, job, recorded End, het leader or ""); ``settle`` keeps them
    offered: list[tuple[int, Job, float | None, str]] = field(default_factory=list)
    duplicates: dict = field(default_factory=lambda: {"ids": 0, "rows_dropped": 0, "named": []})

    def offer(self, line: int, job: Job, end: float | None = None, het_leader: str = "") -> None:
        """A job record as read (``job.job_id`` as the trace spells it, a het component's own id)."""
        self.offered.append((line, job, end, het_leader))

    def settle(self, dedupe: bool, source: str) -> None:
        """Check the offered records for repeated job ids, then keep them (het components merged).

        A repeated id (overlapping ``sacct -S/-E`` exports) would replay a job twice, or inflate a
        het job. Without ``dedupe`` it is refused, naming the ids; with it, the latest record of
        each id wins (the latest End, unset counting as earliest; then the later in the file)."""
        positions: dict[str, list[int]] = {}
        for index, (_, job, _, _) in enumerate(self.offered):
            positions.setdefault(record_key(job), []).append(index)
        repeated = {job_id: where for job_id, where in positions.items() if len(where) > 1}
        if repeated and not dedupe:
            raise UsageError(f"{source}: {counted_ids(repeated, self.offered, self.line_unit)}; overlapping exports? "
                             "--dedupe keeps the latest record of each (latest End, then the later line)")
        dropped = set()
        for where in repeated.values():
            latest = max(where, key=lambda i: (self.offered[i][2] is not None, self.offered[i][2] or 0.0, i))
            for index in where:
                if index != latest:
                    dropped.add(index)
                    self.filtered[OLDER_DUPLICATE] += 1
        self.duplicates = {"ids": len(repeated), "rows_dropped": len(dropped),
                           "named": sorted(repeated, key=lambda job_id: repeated[job_id][0])[:IDS_NAMED]}
        het: dict[str, list[tuple[int, Job, float | None]]] = {}
        for index, (line, job, end, leader) in enumerate(self.offered):
            if index in dropped:
                continue
            if leader:
                het.setdefault(leader, []).append((line, job, end))
            else:
                self.add(line, job, end)
        self.offered = []
        merge_het_components(self, het)

    def add(self, line: int, job: Job, end: float | None = None) -> None:
        """Keep ``job`` (read at ``line``) if it is valid and a meaningful GPU job, else count why not."""
        problem = row_problem(job, end)
        if problem:
            self.reject(line, problem)
            return
        reason = meaningful_gpu_job(job)
        if reason is None:
            self.jobs.append(job)
        else:
            self.filtered[reason] += 1

    def reject(self, line: int, reason: str) -> None:
        """Count a row that could not be turned into a finished job."""
        self.bad[reason] += 1
        lines = self.bad_lines.setdefault(reason, [])
        if len(lines) < LINES_KEPT_PER_REASON:
            lines.append(line)

    def summary(self) -> dict:
        clusters = sorted({job.cluster for job in self.jobs if job.cluster})
        return {
            "source": self.source,
            "format": self.fmt,
            "rows": self.rows,
            "jobs_kept": len(self.jobs),
            "bad_rows": sum(self.bad.values()),
            "line_unit": self.line_unit,
            "bad_by_reason": {reason: {"count": count, "lines": self.bad_lines.get(reason, [])}
                              for reason, count in self.bad.most_common()},
            "filtered_rows": sum(self.filtered.values()),
            "filtered_by_reason": dict(self.filtered.most_common()),
            "duplicate_ids": self.duplicates,
            "clusters": clusters,
            "recorded_starts": sum(job.start is not None for job in self.jobs),
            "node_counts": sum(job.nodes is not None for job in self.jobs),
        }


def record_key(job: Job) -> str:
    """What makes a record one run: its job id, and for a run ended by a requeue its start too."""
    if job.state in REQUEUED_STATES and job.start is not None:
        return f"{job.job_id} (run requeued, started {job.start:.0f})"
    return job.job_id


def counted_ids(repeated: dict[str, list[int]], offered: list, unit: str) -> str:
    """ "2 job ids appear more than once: 7 (lines 2, 9), 8 (lines 3, 10)", the first ``IDS_NAMED``."""
    named = sorted(repeated, key=lambda job_id: repeated[job_id][0])
    shown = ", ".join(f"{job_id} ({unit}s {', '.join(str(offered[i][0]) for i in repeated[job_id])})"
                      for job_id in named[:IDS_NAMED])
    more = f", and {len(named) - IDS_NAMED:,} more" if len(named) > IDS_NAMED else ""
    noun = "job id appears" if len(named) == 1 else "job ids appear"
    return f"{len(named):,} {noun} more than once: {shown}{more}"


def merge_het_components(load: TraceLoad, components: dict[str, list[tuple[int, Job, float | None]]]) -> None:
    """Add each heterogeneous job once: its components (``leader -> [(line, job, end)]``) merged.

    Slurm accounts each component of a het job as its own row (``123+0``, ``123+1``); they were
    one submission that started together, so the merged job holds the sum of their GPUs and nodes
    from the first submit and start to the last end. It stands for the first component's row;
    every other component row is counted under ``HET_COMPONENT`` with its line, so the rows add up.
    """
    for leader, parts in components.items():
        parts = sorted(parts, key=lambda part: part[0])
        first_line = parts[0][0]
        for line, _, _ in parts[1:]:
            load.reject(line, HET_COMPONENT)
        jobs = [job for _, job, _ in parts]
        starts = [job.start for job in jobs if job.start is not None]
        ends = [end for _, _, end in parts if end is not None]
        start = min(starts) if starts else None
        if start is not None and ends:
            duration = max(ends) - start
        else:
            duration = max(job.duration for job in jobs)
        nodes = [job.nodes for job in jobs]
        states = [job.state for job in jobs]
        state = next((s for s in states if s in UNFINISHED_STATES), states[0])
        merged = Job(leader, min(job.submit for job in jobs), duration, sum(job.gpus for job in jobs), state,
                     None if None in nodes else sum(nodes), start, jobs[0].cluster)
        load.add(first_line, merged, max(ends) if ends else None)


def load_json(path: str) -> object:
    """A whole JSON trace document; a file that is not JSON is one clear error."""
    with open(path, encoding="utf-8") as handle:
        if not handle.read(4096).strip():
            raise UsageError(f"{path}: the file is empty; JSON is expected")
        handle.seek(0)
        try:
            return json.load(handle)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}: not JSON ({exc})") from exc
