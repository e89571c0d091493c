"""Which jobs a `transit report` command names (job ids, array ids, directories, -u USER over a time
range) and where each one's stats directory is."""

from __future__ import annotations

import os
import pwd
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from transit import slurm
from transit.cluster import source_checkout
from transit.errors import UsageError
from transit.report.load import STEP_FILE_PATTERN, ReportWarning, SlurmJobs, StepFiles, SubmitLines

JOB_ID = re.compile(r"^\d+([_+]\d+)?$")  # SLURM_JOB_ID, ARRAY_TASK (1234_7) or HET_COMPONENT (1234+1)
JOB_ID_FORMS = ("a job id (1234), an array task (1234_7), a heterogeneous job's component (1234+1) or a job's "
                "stats directory")
# The development cluster's report directory, under its checkout (scripts/dev-cluster writes report_dir= there).
DEV_CLUSTER_REPORT_DIR = Path(".dev-cluster") / "reports"
# -u without -S: the jobs of the last week, as reportseff shows them
DEFAULT_SINCE = "now-7days"
TIME_UNITS_S = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400}
RELATIVE_TIME = re.compile(r"^now(?:-(\d+)(second|minute|hour|day|week)s?)?$")
TIME_FORMS = "YYYY-MM-DD[THH:MM[:SS]], today, now, or now-N{seconds,minutes,hours,days,weeks}"


@dataclass
class Job:
    """One job to report: where its stats are (None: no directory), and Slurm's facts (None: Slurm
    was not asked, or knows nothing)."""

    label: str  # how the report names it: 1234_7 for an array task, the job id, or the directory given
    job_id: str | None  # SLURM_JOB_ID (an array task's own id): names <report dir>/<job_id>/
    directory: Path | None
    facts: slurm.JobFacts | None = None
    warnings: list[ReportWarning] = field(default_factory=list)


def parse_time(text: str, now_unix: float) -> float:
    """A -S/-E time as Unix seconds (local time, as sacct reads it)."""
    relative = RELATIVE_TIME.match(text)
    if relative:
        count, unit = relative.groups()
        return now_unix - (int(count) * TIME_UNITS_S[unit] if count else 0)
    if text in ("today", "midnight"):
        return datetime.fromtimestamp(now_unix).replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise UsageError(f"time {text[:80]!r} is not one of {TIME_FORMS}") from None


def default_report_dir(option: str | None, use_slurm: bool) -> Path | None:
    """The directory holding one sub-directory per job, first found of: --report-dir,
    $TRANSIT_REPORT_DIR, report_dir= of spank_transit.so in the running cluster's plugstack.conf
    (unless use_slurm is off), the dev cluster's <repo>/.dev-cluster/reports; None when none is."""
    if option:
        return Path(option)  # argparse checked that it exists
    from_env = os.environ.get("TRANSIT_REPORT_DIR")
    if from_env:
        if not Path(from_env).is_dir():  # named by the user: a typo there would read as "unknown job"
            raise UsageError(f"TRANSIT_REPORT_DIR={from_env[:120]}: no such directory (give the plugin's report_dir=)")
        return Path(from_env)
    from_plugstack = slurm.plugstack_arguments().get("report_dir") if use_slurm else None
    if from_plugstack:
        return Path(from_plugstack)
    checkout = source_checkout()
    if checkout is not None and (checkout / DEV_CLUSTER_REPORT_DIR).is_dir():
        return checkout / DEV_CLUSTER_REPORT_DIR
    return None


NO_REPORT_DIR = ("no report directory: pass --report-dir DIR or set TRANSIT_REPORT_DIR "
                 "(or give the job's directory instead of its id)")


def _job_directory(report_dir: Path | None, facts: slurm.JobFacts) -> Path | None:
    """<report dir>/<job id>/, or where the submit line's --transit-report-dir put it."""
    candidates = [report_dir] if report_dir else []
    asked = SubmitLines.options(facts.submit_line or "").get("transit-report-dir")
    candidates += [Path(asked)] if asked else []
    for candidate in candidates:
        if (candidate / facts.job_id).is_dir():
            return candidate / facts.job_id
    return candidates[0] / facts.job_id if candidates else None


def jobs_named(targets: list[str], report_dir_option: str | None, use_slurm: bool) -> list[Job]:
    """The jobs the targets name, in their order: a directory is one job; a job id is that job, an
    array's id every task Slurm knows of it. Raises UsageError for a target that is neither."""
    # "" (an unset $SLURM_JOB_ID, quoted) is no directory, though Path("") is the current one
    ids = [target for target in targets if not target or not Path(target).is_dir()]
    for target in ids:
        if not JOB_ID.match(target):
            raise UsageError(f"{target[:80]!r} is neither a directory nor a job id: give {JOB_ID_FORMS}")
    report_dir = default_report_dir(report_dir_option, use_slurm) if ids else None
    known, answered = SlurmJobs.by_id(ids) if ids and use_slurm else ({}, None)
    jobs = []
    for target in targets:
        if target not in ids:
            jobs.append(Job(label=target, job_id=None, directory=Path(target)))
            continue
        facts = known.get(target, [])
        if facts:
            jobs += [Job(f.shown_id, f.job_id, _job_directory(report_dir, f), f) for f in facts]
            continue
        if report_dir is None:
            raise UsageError(NO_REPORT_DIR)
        one_of_several = "_" in target or "+" in target
        if not one_of_several and (report_dir / target).is_dir():
            unknown = [SlurmJobs.unknown(target, answered)] if use_slurm else []
            jobs.append(Job(target, target, report_dir / target, warnings=unknown))
            continue
        kind = "array task" if "_" in target else "heterogeneous job component"
        raise UsageError(f"unknown job id {target}: no {report_dir / target} and {_slurm_said(use_slurm, answered)}"
                         if not one_of_several else
                         f"unknown {kind} {target}: {_slurm_said(use_slurm, answered, 'it')} (its directory "
                         "is named by its own job id: give that id, or the directory)")
    return jobs


def _slurm_said(use_slurm: bool, answered: str | None, job: str = "the job") -> str:
    """Why Slurm named no job: it does not know it, was not asked, or did not answer."""
    if not use_slurm:
        return "Slurm was not asked (--no-slurm)"
    if answered is None:
        return f"Slurm could not be asked about {job}: neither sacct nor squeue answered"
    return f"Slurm does not know {job}"


def jobs_of_user(user: str, since: str, until: str, report_dir_option: str | None, use_slurm: bool,
                 now_unix: float | None = None) -> list[Job]:
    """The user's jobs between the two times: from accounting (sacct -u -S -E), else those the
    controller remembers plus those whose step files (in the report directory) started in the range."""
    try:
        pwd.getpwnam(user)
    except KeyError:
        raise UsageError(f"unknown user {user[:80]!r}: give a user name of this system") from None
    now = time.time() if now_unix is None else now_unix
    start, end = parse_time(since, now), parse_time(until, now)
    if start > end:
        raise UsageError(f"-S {since[:40]} is after -E {until[:40]}: the range is empty")
    report_dir = default_report_dir(report_dir_option, use_slurm)
    known, source = SlurmJobs.of_user(user, start, end) if use_slurm else ([], None)
    jobs = [Job(f.shown_id, f.job_id, _job_directory(report_dir, f), f) for f in known]
    if source != "sacct" and report_dir is not None:
        listed = {job.job_id for job in jobs}
        jobs += [job for job in _jobs_in_report_dir(report_dir, user, start, end) if job.job_id not in listed]
    return sorted(jobs, key=lambda job: slurm.task_order(job.facts or slurm.JobFacts(job.job_id or "0", "")))


def _jobs_in_report_dir(report_dir: Path, user: str, start: float, end: float) -> list[Job]:
    """Jobs whose step files name the user and a start in the range (the user's own job
    directories: the others' cannot be read)."""
    jobs = []
    for directory in report_dir.iterdir() if report_dir.is_dir() else []:
        if not directory.name.isdigit() or not os.access(directory, os.R_OK | os.X_OK):
            continue
        steps, _ = StepFiles(directory).load() if any(directory.glob(STEP_FILE_PATTERN)) else ([], [])
        if any(step.user == user and step.start_unix is not None and start <= step.start_unix <= end
               for step in steps):
            jobs.append(Job(directory.name, directory.name, directory))
    return jobs
