"""The normalized job record every trace reader produces, and the "meaningful GPU job" filter.

A reader turns one trace row into a ``Job`` or a rejection reason; ``TraceLoad`` keeps both
counts so that nothing is dropped silently: rows that cannot be parsed are *bad*, rows that parse
but are not meaningful GPU jobs are *filtered*, and each reason is counted.
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

# Final states of jobs that never started; their (zero) run time is not GPU work.
NEVER_RAN_STATES = frozenset({"PENDING", "REQUEUED", "RESIZING"})


@dataclass(slots=True)
class Job:
    """One job as the simulator sees it: when it arrived, how long it ran, how many GPUs it held."""

    job_id: str
    submit: float        # seconds, any epoch (the simulator only uses differences)
    duration: float      # seconds of run time in the trace
    gpus: int            # GPUs allocated (0 for a CPU-only job)
    state: str = ""      # final state as the trace spells it, upper case


def meaningful_gpu_job(job: Job) -> str | None:
    """Return None when ``job`` is a meaningful GPU job, else the reason it is not.

    The paper's preprocessing keeps "only meaningful GPU jobs"; here that means a job that held
    at least one GPU and actually ran (at least ``MIN_DURATION_S`` seconds, and not in a state
    that means it never started). Failed and cancelled jobs that ran are kept: they occupied GPUs.
    """
    if job.gpus < 1:
        return "no GPU"
    if job.state in NEVER_RAN_STATES:
        return f"never ran ({job.state})"
    if job.duration < MIN_DURATION_S:
        return "ran under 1 s"
    return None


@dataclass
class TraceLoad:
    """What a reader returns: the kept jobs and a count of every row that was not kept, by reason."""

    source: str
    fmt: str
    jobs: list[Job] = field(default_factory=list)
    rows: int = 0
    bad: Counter = field(default_factory=Counter)        # unparseable rows, by reason
    filtered: Counter = field(default_factory=Counter)   # valid rows that are not meaningful GPU jobs
    bad_examples: list[str] = field(default_factory=list)

    MAX_EXAMPLES = 5

    def add(self, job: Job) -> None:
        """Keep ``job`` if it is a meaningful GPU job, else count why not."""
        if not (math.isfinite(job.submit) and math.isfinite(job.duration)):
            self.reject(self.rows, "submit or duration is not a finite number")
            return
        reason = meaningful_gpu_job(job)
        if reason is None:
            self.jobs.append(job)
        else:
            self.filtered[reason] += 1

    def reject(self, line_no: int, reason: str) -> None:
        """Count a row that could not be turned into a job."""
        self.bad[reason] += 1
        if len(self.bad_examples) < self.MAX_EXAMPLES:
            self.bad_examples.append(f"row {line_no}: {reason}")

    def summary(self) -> dict:
        return {
            "source": self.source,
            "format": self.fmt,
            "rows": self.rows,
            "jobs_kept": len(self.jobs),
            "bad_rows": sum(self.bad.values()),
            "bad_by_reason": dict(self.bad),
            "bad_examples": list(self.bad_examples),
            "filtered_rows": sum(self.filtered.values()),
            "filtered_by_reason": dict(self.filtered),
        }


def load_json(path: str) -> object:
    """A whole JSON trace document; a file that is not JSON is one clear error."""
    with open(path, encoding="utf-8") as handle:
        try:
            return json.load(handle)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}: not JSON ({exc})") from exc
