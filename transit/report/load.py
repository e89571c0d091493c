"""Where the report's data comes from: the per-rank stats files, and Slurm's facts about the job."""

from __future__ import annotations

import csv
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transit import slurm
from transit.cluster import source_checkout
from transit.errors import UsageError

RANK_SCHEMA = "transit.rank/1"
RANK_FILE_PATTERN = "rank*.json"  # rank<R>.<host>.<pid>.json, R a number or "x"
TICK_LOG_SUFFIX = ".ticks.csv"  # TRANSIT_TICK_LOG=1: rank<R>.<host>.<pid>.ticks.csv beside the stats file
JOB_ID_PATTERN = re.compile(r"^\d+$")  # SLURM_JOB_ID, which names the plugin's <report dir>/<jobid>/

# The development cluster's report directory, under its checkout (scripts/dev-cluster writes report_dir= there).
DEV_CLUSTER_REPORT_DIR = Path(".dev-cluster") / "reports"

# Named warnings: each problem with the inputs has a code a script can match on.
EMPTY_FILE = "empty-file"
TRUNCATED_FILE = "truncated-file"
UNREADABLE_FILE = "unreadable-file"
UNKNOWN_SCHEMA = "unknown-schema"
MISSING_RANK = "missing-rank"
DUPLICATE_RANK = "duplicate-rank"
NO_SLURM_FACTS = "no-slurm-facts"
NO_STATS_FILES = "no-stats-files"
JOB_NOT_FINISHED = "job-not-finished"
UNREADABLE_TICK_LOG = "unreadable-tick-log"

# Slurm states in which tasks may still be running, so stats files may still be missing
UNFINISHED_STATES = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING")


@dataclass(frozen=True)
class ReportWarning:
    """A problem with the inputs; the report goes on without the part it concerns."""

    code: str
    message: str
    path: str | None = None


@dataclass(frozen=True)
class TickLog:
    """libtransit's limit-mode control, one entry per tick (TRANSIT_TICK_LOG=1): seconds since the
    library started, the measured bound on the device's managed data (the higher of the tick's RSS
    and smaps readings; None where it read neither), and how long the tick's work took."""

    t_s: list[float]
    bound_bytes: list[int | None]
    work_ms: list[float]

    def readings(self) -> list[tuple[float, int]]:
        """(seconds, bound) of the ticks that read the bound."""
        return [(t, b) for t, b in zip(self.t_s, self.bound_bytes, strict=True) if b is not None]


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


def _reading(row: dict[str, str]) -> int | None:
    values = [int(row[column]) for column in ("bound_bytes", "smaps_bound_bytes") if row[column]]
    return max(values, default=None)


def read_tick_log(path: Path) -> TickLog:
    """libtransit's tick CSV (TRANSIT_TICK_LOG=1); raises OSError, csv.Error, KeyError, TypeError or
    ValueError on a file that is not one. A last line cut short (the process was killed while
    writing it) is left out."""
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if rows and None in rows[-1].values():
        rows.pop()
    return TickLog(
        t_s=[_finite(r["t_s"]) for r in rows],
        bound_bytes=[_reading(r) for r in rows],
        work_ms=[_finite(r["work_ms"]) for r in rows],
    )


@dataclass(frozen=True)
class RankFile:
    path: Path
    stats: dict[str, Any]
    ticks: TickLog | None = None


class TickLogs:
    """The tick logs beside the stats files; a rank without one has none."""

    COLUMNS = ("t_s", "bound_bytes", "smaps_bound_bytes", "work_ms")

    @classmethod
    def read(cls, stats_path: Path) -> tuple[TickLog | None, ReportWarning | None]:
        path = stats_path.with_name(stats_path.name.removesuffix(".json") + TICK_LOG_SUFFIX)
        if not path.exists():
            return None, None
        try:
            log = read_tick_log(path)
        except (OSError, UnicodeDecodeError, csv.Error, KeyError, TypeError, ValueError) as exc:
            return None, ReportWarning(
                UNREADABLE_TICK_LOG,
                f"cannot read {path.name} (columns {', '.join(cls.COLUMNS)} expected): {exc!r}; "
                "the rank is reported without it",
                str(path),
            )
        return log, None


class StatsFiles:
    """The per-rank stats files (schema transit.rank/1) of one job directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def load(self) -> tuple[list[RankFile], list[ReportWarning]]:
        """Every readable file with the known schema, and one warning per file that is not."""
        files: list[RankFile] = []
        warnings: list[ReportWarning] = []
        paths = sorted(self.directory.glob(RANK_FILE_PATTERN))
        for path in paths:
            stats, warning = self._read(path)
            if warning is not None:
                warnings.append(warning)
            if stats is not None:
                ticks, tick_warning = TickLogs.read(path)
                warnings += [tick_warning] if tick_warning else []
                files.append(RankFile(path=path, stats=stats, ticks=ticks))
        if not paths:
            warnings.append(
                ReportWarning(NO_STATS_FILES, f"no {RANK_FILE_PATTERN} files in {self.directory}: no task called "
                              "CUDA (libtransit stays inert in CPU-only processes) or TRANSIT was off")
            )
        return files, warnings

    @staticmethod
    def _read(path: Path) -> tuple[dict[str, Any] | None, ReportWarning | None]:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            return None, ReportWarning(UNREADABLE_FILE, f"cannot read {path.name}: {exc}", str(path))
        if not text.strip():
            # libtransit writes through temp + rename, so an empty file means the task died oddly
            return None, ReportWarning(EMPTY_FILE, f"{path.name} is empty; its rank is left out", str(path))
        try:
            stats = json.loads(text)
        except json.JSONDecodeError as exc:
            return None, ReportWarning(
                TRUNCATED_FILE,
                f"{path.name} is not complete JSON ({exc.msg} at byte {exc.pos}); its rank is left out",
                str(path),
            )
        if not isinstance(stats, dict) or stats.get("schema") != RANK_SCHEMA:
            schema = stats.get("schema") if isinstance(stats, dict) else type(stats).__name__
            return None, ReportWarning(
                UNKNOWN_SCHEMA,
                f"{path.name} has schema {schema!r}, this report reads {RANK_SCHEMA!r}; "
                "its rank is left out (a newer transit may read it)",
                str(path),
            )
        return stats, None


class SlurmJob:
    """Slurm's facts about one job (sacct, else squeue), through transit.slurm."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id

    def facts(self) -> tuple[slurm.JobFacts | None, list[ReportWarning]]:
        facts = slurm.job_facts(self.job_id)
        if facts is not None:
            if facts.state and any(state in facts.state for state in UNFINISHED_STATES):
                return facts, [
                    ReportWarning(
                        JOB_NOT_FINISHED,
                        f"job {self.job_id} is {facts.state}: ranks write their stats when they exit, "
                        "so this report covers only the tasks that have ended",
                    )
                ]
            return facts, []
        return None, [
            ReportWarning(
                NO_SLURM_FACTS,
                f"Slurm has no record of job {self.job_id} (no accounting, and the controller "
                "has forgotten it or is not running): the header comes from the stats files alone",
            )
        ]


def job_id_of(rank_files: list[RankFile]) -> str | None:
    """The job id every file names, or None when they name none or several."""
    ids = set()
    for rank_file in rank_files:
        identity = rank_file.stats.get("identity")
        if isinstance(identity, dict) and identity.get("job_id") is not None:
            ids.add(str(identity["job_id"]))
    return ids.pop() if len(ids) == 1 else None


def default_report_dir(option: str | None, use_slurm: bool) -> Path:
    """The directory holding one sub-directory per job, first found of:
    --report-dir, $TRANSIT_REPORT_DIR, report_dir= of spank_transit.so in the running cluster's
    plugstack.conf (unless use_slurm is off), the dev cluster's <repo>/.dev-cluster/reports."""
    if option:
        return Path(option)
    if os.environ.get("TRANSIT_REPORT_DIR"):
        return Path(os.environ["TRANSIT_REPORT_DIR"])
    from_plugstack = slurm.plugstack_report_dir() if use_slurm else None
    if from_plugstack:
        return Path(from_plugstack)
    checkout = source_checkout()
    if checkout is not None and (checkout / DEV_CLUSTER_REPORT_DIR).is_dir():
        return checkout / DEV_CLUSTER_REPORT_DIR
    raise UsageError(
        "no report directory: pass --report-dir DIR or set TRANSIT_REPORT_DIR "
        "(or give the job's directory instead of its id)"
    )


def resolve_target(target: str, report_dir_option: str | None, use_slurm: bool) -> tuple[Path, str | None]:
    """The job directory and job id (None if unknown) named by TARGET: a directory, or a job id
    looked up in the report directory."""
    as_path = Path(target)
    if as_path.is_dir():
        return as_path, as_path.name if JOB_ID_PATTERN.match(as_path.name) else None
    if not JOB_ID_PATTERN.match(target):
        raise UsageError(f"{target!r} is neither a directory nor a job id (the numeric SLURM_JOB_ID)")
    report_dir = default_report_dir(report_dir_option, use_slurm)
    job_dir = report_dir / target
    if job_dir.is_dir():
        return job_dir, target
    if use_slurm and slurm.job_facts(target) is not None:
        raise UsageError(
            f"job {target} has no TRANSIT stats in {report_dir}: was it run with --transit, "
            "and is the report directory right (--report-dir)?"
        )
    raise UsageError(f"unknown job id {target}: no {job_dir} and Slurm does not know the job")
