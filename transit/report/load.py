"""Where the report's data comes from, one class per source: the per-rank stats files and their tick
logs (libtransit), the step files (the SPANK plugin), the submit lines and Slurm's facts (sacct, squeue)."""

from __future__ import annotations

import csv
import io
import json
import math
import pwd
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transit import paths, slurm

RANK_SCHEMA = "transit.rank/1"
RANK_FILE_PATTERN = "rank*.json"  # rank<R>.<host>.<pid>.json, R a number or "x"
TICK_LOG_SUFFIX = ".ticks.csv"  # TRANSIT_TICK_LOG=1: rank<R>.<host>.<pid>.ticks.csv beside the stats file
STEP_SCHEMA = "transit.step/1"
STEP_FILE_PATTERN = "step-*.json"  # step-<step id>.json, written by the plugin when a step starts

# Named warnings: each problem with the inputs has a code a script can match on.
EMPTY_FILE = "empty-file"
TRUNCATED_FILE = "truncated-file"
UNREADABLE_FILE = "unreadable-file"
UNKNOWN_SCHEMA = "unknown-schema"
MISSING_RANK = "missing-rank"
DUPLICATE_RANK = "duplicate-rank"
NO_SLURM_FACTS = "no-slurm-facts"
JOB_NOT_FINISHED = "job-not-finished"
PARTIAL_STATS = "partial-stats"
UNREADABLE_TICK_LOG = "unreadable-tick-log"
UNREADABLE_DIRECTORY = "unreadable-directory"
FOREIGN_FILE = "foreign-file"
# the codes of warnings that reject a file: when every file got one, the job has no usable stats
REJECTED_FILE_CODES = (EMPTY_FILE, TRUNCATED_FILE, UNREADABLE_FILE, UNKNOWN_SCHEMA, FOREIGN_FILE)


@dataclass(frozen=True)
class ReportWarning:
    """A problem with the inputs; the report goes on without the part it concerns."""

    code: str
    message: str
    path: str | None = None


def beside(stats_path: Path, suffix: str) -> Path:
    """A file libtransit writes beside a stats file: rank<R>.<host>.<pid><suffix>."""
    return stats_path.with_name(stats_path.name.removesuffix(".json") + suffix)


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_float(value: Any) -> float | None:
    """A finite number; NaN and infinities (which Python's json reads) read as missing, like a string."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def as_text(value: Any) -> str | None:
    """A string, or a number written as one (job and step ids); anything else reads as missing."""
    return value if isinstance(value, str) else (str(value) if as_int(value) is not None else None)


def read_document(path: Path, schema: str, what: str) -> tuple[dict[str, Any] | None, ReportWarning | None]:
    """A JSON object with the given schema, or the warning that says why the file is not one.
    `what` is what the report leaves out without it ("its rank", "this step's record")."""
    try:
        text = paths.read_regular(path).decode("utf-8")
    except OSError as exc:
        return None, ReportWarning(UNREADABLE_FILE, f"cannot read {path.name}: {exc.strerror or exc}; {what} is "
                                   "left out", str(path))
    except UnicodeDecodeError as exc:
        return None, ReportWarning(UNREADABLE_FILE, f"cannot read {path.name}: {exc}", str(path))
    if not text.strip():
        # libtransit and the plugin write through temp + rename, so an empty file means something odd
        return None, ReportWarning(EMPTY_FILE, f"{path.name} is empty; {what} is left out", str(path))
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        # json's messages end in "starting at" for strings and objects left open
        return None, ReportWarning(
            TRUNCATED_FILE,
            f"{path.name} is not complete JSON ({exc.msg.removesuffix(' starting at')} at byte {exc.pos}); "
            f"{what} is left out",
            str(path),
        )
    found = document.get("schema") if isinstance(document, dict) else None
    if found == schema:
        return document, None
    if not isinstance(document, dict):
        problem = f"holds a JSON {type(document).__name__.replace('NoneType', 'null')}, not a {schema} object"
    elif found is None:
        problem = f"has no \"schema\" field ({schema} expected)"
    else:
        newer = _schema_version(found, schema)
        problem = f"has schema {found!r}, this report reads {schema!r}" + (
            " (a newer transit reads it)" if newer else "")
    return None, ReportWarning(UNKNOWN_SCHEMA, f"{path.name} {problem}; {what} is left out", str(path))


def _schema_version(found: Any, schema: str) -> bool:
    """Whether `found` is a later version of `schema` (transit.rank/2 against transit.rank/1)."""
    name, _, version = schema.rpartition("/")
    match = re.fullmatch(re.escape(name) + r"/(\d+)", found) if isinstance(found, str) else None
    return bool(match) and int(match.group(1)) > int(version)


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
    rows = list(csv.DictReader(io.StringIO(paths.read_regular(path).decode("utf-8"), newline="")))
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
        path = beside(stats_path, TICK_LOG_SUFFIX)
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


def _listing(directory: Path, pattern: str) -> tuple[list[Path], list[ReportWarning]]:
    """The files matching `pattern` in `directory` that belong to the directory's owner (the job's
    user: the plugin gives the job's directory to them), sorted, and a warning for each file left
    out as someone else's, or for a directory that cannot be listed (it is readable by the job's
    user only)."""
    try:
        owner = directory.stat().st_uid
        found = sorted(p for p in directory.iterdir() if p.match(pattern))
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [ReportWarning(
            UNREADABLE_DIRECTORY,
            f"cannot read {directory}: {exc.strerror} (a job's directory is readable by the job's user only)",
            str(directory),
        )]
    kept, warnings = [], []
    for path in found:
        try:
            uid = path.lstat().st_uid
        except FileNotFoundError:
            continue  # gone since the listing (a temporary file renamed)
        if uid == owner:
            kept.append(path)
            continue
        warnings.append(ReportWarning(
            FOREIGN_FILE, f"{path.name} belongs to {_user(uid)}, not to the job's user {_user(owner)} (the owner "
            f"of {directory}): left out, as no one else can have written a file of this job", str(path)))
    return kept, warnings


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


class StatsFiles:
    """The per-rank stats files (schema transit.rank/1) of one job directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def load(self) -> tuple[list[RankFile], list[ReportWarning]]:
        """Every readable file with the known schema, and one warning per file that is not."""
        files: list[RankFile] = []
        paths, warnings = _listing(self.directory, RANK_FILE_PATTERN)
        for path in paths:
            stats, warning = read_document(path, RANK_SCHEMA, "its rank")
            if warning is not None:
                warnings.append(warning)
            if stats is not None:
                ticks, tick_warning = TickLogs.read(path)
                warnings += [tick_warning] if tick_warning else []
                files.append(RankFile(path=path, stats=stats, ticks=ticks))
        return files, warnings


@dataclass(frozen=True)
class StepFile:
    """The plugin's record of one step it started under TRANSIT (schema transit.step/1): how the
    step was run, whatever its ranks wrote afterwards."""

    path: Path
    job_id: str | None
    step_id: str | None
    user: str | None
    policy: str | None
    mode: str | None
    limit_bytes: int | None
    options: dict[str, str]
    nodes: str | None  # a Slurm hostlist
    ntasks: int | None
    start_unix: float | None
    refused: str | None = None  # the plugin's line when it refused the step before its program ran


class StepFiles:
    """The step files (<report dir>/<job>/step-<step>.json) of one job directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def load(self) -> tuple[list[StepFile], list[ReportWarning]]:
        steps = []
        paths, warnings = _listing(self.directory, STEP_FILE_PATTERN)
        for path in paths:
            document, warning = read_document(path, STEP_SCHEMA, "this step's record")
            if warning is not None:
                warnings.append(warning)
            if document is not None:
                steps.append(self.step(path, document))
        return steps, warnings

    @staticmethod
    def step(path: Path, document: dict[str, Any]) -> StepFile:
        options = document.get("options")
        return StepFile(
            path=path,
            job_id=as_text(document.get("job_id")),
            step_id=as_text(document.get("step_id")),
            user=as_text(document.get("user")),
            policy=as_text(document.get("policy")),
            mode=as_text(document.get("mode")),
            limit_bytes=as_int(document.get("limit_bytes")),
            options={k: v for k, v in options.items() if isinstance(v, str)} if isinstance(options, dict) else {},
            nodes=as_text(document.get("nodes")),
            ntasks=as_int(document.get("ntasks")),
            start_unix=as_float(document.get("start_unix")),
            refused=as_text(document.get("refused")),
        )


@dataclass(frozen=True)
class HowRun:
    """A step's TRANSIT configuration as the submit line asked for it."""

    policy: str | None  # None: --transit without a policy, and the plugin's default policy= unknown
    mode: str
    limit_bytes: int | None
    report_dir: str | None = None
    options: dict[str, str] = field(default_factory=dict)


class SubmitLines:
    """TRANSIT's options on the command lines Slurm's accounting keeps (sacct SubmitLine: the job's
    sbatch/srun/salloc, and each step's srun). They show what was typed, not #SBATCH lines in a
    script nor the site's defaults, so the step files come first."""

    OPTIONS = ("transit", "transit-mem-limit", "transit-report-dir")

    @classmethod
    def options(cls, line: str) -> dict[str, str]:
        """The TRANSIT options on a command line, the first of each ({} when none). --transit takes
        its policy only as --transit=POLICY (an optional argument); a wrapped command
        (sbatch --wrap="srun --transit=advise ...") is read too."""
        try:
            words = shlex.split(line)
        except ValueError:  # unbalanced quotes: read what splits on spaces
            words = line.split()
        found: dict[str, str] = {}
        for i, word in enumerate(words):
            name, equals, value = word.removeprefix("--").partition("=")
            if not word.startswith("--") or name not in cls.OPTIONS and name != "wrap":
                continue
            if name == "wrap":
                found = cls.options(value if equals else " ".join(words[i + 1:i + 2])) | found
            elif name == "transit" or equals:
                found.setdefault(name, value)
            else:
                found.setdefault(name, words[i + 1] if i + 1 < len(words) else "")
        return found

    @staticmethod
    def how_run(options: dict[str, str], default_policy: str | None) -> HowRun | None:
        """How these options asked TRANSIT to run; None without --transit, or with --transit=off."""
        policy = options.get("transit")
        if policy is None or policy == "off":
            return None
        limit = options.get("transit-mem-limit")
        return HowRun(
            policy=policy or default_policy,
            mode="limit" if limit else "physical",
            limit_bytes=_size(limit) if limit else None,
            report_dir=options.get("transit-report-dir"),
            options=options,
        )

    @classmethod
    def of_job(cls, facts: slurm.JobFacts | None, default_policy: str | None) -> list[HowRun]:
        """How each step was asked to run: the job's options (a step inherits sbatch's) with its own
        srun line's on top; the job's alone when sacct listed no step."""
        if facts is None:
            return []
        job = cls.options(facts.submit_line or "")
        steps = [job | cls.options(line) for line in facts.step_submit_lines.values()] or [job]
        return [run for options in steps if (run := cls.how_run(options, default_policy)) is not None]


def _size(text: str) -> int | None:
    """A --transit-mem-limit value in bytes, by libtransit's own parser; None if it reads none."""
    from transit import _native
    from transit.errors import UsageError

    try:
        return _native.parse_size(text)
    except UsageError:
        return None


class SlurmJobs:
    """Slurm's facts about jobs (sacct, else squeue), through transit.slurm, with the warnings they
    call for."""

    @staticmethod
    def by_id(ids: list[str]) -> tuple[dict[str, list[slurm.JobFacts]], str | None]:
        return slurm.jobs_by_id(ids)

    @staticmethod
    def of_user(user: str, start_unix: float, end_unix: float) -> tuple[list[slurm.JobFacts], str | None]:
        return slurm.jobs_of_user(user, start_unix, end_unix)

    @staticmethod
    def unknown(job_id: str, answered: str | None) -> ReportWarning:
        why = ("the controller has forgotten it (MinJobAge), and there is no accounting" if answered == "squeue"
               else "accounting has no record of it" if answered == "sacct"
               else "neither sacct nor squeue answered (no accounting, and no controller reachable)")
        return ReportWarning(
            NO_SLURM_FACTS,
            f"Slurm does not know job {job_id}: {why}; the header comes from the step and stats files alone",
        )


def job_id_of(rank_files: list[RankFile], steps: list[StepFile]) -> str | None:
    """The job id every stats and step file names, or None when they name none or several."""
    ids = {step.job_id for step in steps if step.job_id}
    for rank_file in rank_files:
        identity = rank_file.stats.get("identity")
        if isinstance(identity, dict) and as_text(identity.get("job_id")):
            ids.add(str(identity["job_id"]))
    return ids.pop() if len(ids) == 1 else None
