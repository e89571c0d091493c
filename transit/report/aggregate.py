"""From stats files to the report: one row per rank, totals per node and per job, iteration stats."""

from __future__ import annotations

import functools
import itertools
import pwd
import re
import stat
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from transit import slurm
from transit.report.load import (
    DUPLICATE_RANK,
    JOB_NOT_FINISHED,
    MISSING_RANK,
    PARTIAL_STATS,
    REJECTED_FILE_CODES,
    UNREADABLE_DIRECTORY,
    HowRun,
    RankFile,
    ReportWarning,
    StepFile,
    TickLog,
    as_float,
    as_int,
    as_text,
)
from transit.report.thresholds import SMALL_MIGRATION_BYTES
from transit.report.units import compact_ranges, format_age, rank_list
from transit.slurm import JobFacts

# Migration size buckets of the stats schema, with the size each one stays under.
HISTOGRAM_BUCKETS: dict[str, float] = {
    "<4K": 4 * 1024,
    "4K-64K": 64 * 1024,
    "64K-1M": 1024 * 1024,
    "1M-2M": 2 * 1024 * 1024,
    ">2M": float("inf"),
}


def _from(path: str, default: Any = None) -> Any:
    """A RankRow field read from the stats document at a dotted path."""
    return field(default=default, metadata={"path": path})


@dataclass
class RankRow:
    """One rank's figures. Counters missing from a file read as 0, facts missing read as None."""

    file: str = ""
    job_id: str | None = _from("identity.job_id")
    step: str | None = _from("identity.step_id")
    rank: int | None = _from("identity.rank")
    world_size: int | None = _from("identity.world_size")
    node: str | None = _from("identity.node")
    local_rank: int | None = _from("identity.local_rank")
    device: int | None = _from("identity.device")
    gpu_name: str | None = _from("identity.gpu_name")
    policy: str | None = _from("config.policy")
    mode: str | None = _from("config.mode")
    limit_bytes: int | None = _from("config.limit_bytes")
    pid: int | None = _from("identity.pid")
    cuda_active: bool = _from("cuda_active", False)
    cuda_error: str | None = _from("cuda_error")
    partial: bool = _from("partial", False)  # a running rank's periodic refresh (TRANSIT_STATS_INTERVAL)
    start_unix: float | None = _from("time.start_unix")
    written_unix: float | None = _from("time.written_unix")
    end_unix: float | None = _from("time.end_unix")
    exit_reason: str | None = _from("time.exit_reason")
    allocations: int = _from("allocations.count", 0)
    managed_peak_bytes: int = _from("allocations.managed_bytes_peak", 0)
    vmm_bytes: int = _from("allocations.vmm_bytes", 0)
    refused: int = _from("allocations.refused", 0)
    refused_bytes: int = _from("allocations.refused_bytes", 0)
    device_total_bytes: int | None = _from("memory.device_total_bytes")
    resident_peak_bytes: int = _from("memory.resident_peak_bytes", 0)
    overshoot_peak_bytes: int = _from("memory.overshoot_peak_bytes", 0)
    spilled_peak_bytes: int = _from("memory.spilled_peak_bytes", 0)
    device_bound_peak_bytes: int | None = _from("memory.device_bound_peak_bytes")
    htod_bytes: int = _from("migrations.htod.bytes", 0)
    htod_count: int = _from("migrations.htod.count", 0)
    htod_histogram: dict[str, int] = field(
        default_factory=dict, metadata={"path": "migrations.htod.histogram"}
    )
    dtoh_bytes: int = _from("migrations.dtoh.bytes", 0)
    dtoh_count: int = _from("migrations.dtoh.count", 0)
    dtoh_histogram: dict[str, int] = field(
        default_factory=dict, metadata={"path": "migrations.dtoh.histogram"}
    )
    unrequested_bytes: int = _from("migrations.unrequested_bytes", 0)
    gpu_page_faults: int = _from("faults.gpu_page_faults", 0)
    thrashing: int = _from("faults.thrashing", 0)
    remote_map_bytes: int = _from("faults.remote_map_bytes", 0)
    prefetch_calls: int = _from("prefetch.calls", 0)
    prefetch_bytes: int = _from("prefetch.bytes", 0)
    prefetch_errors: int = _from("prefetch.errors", 0)
    advise_calls: int = _from("advise.calls", 0)
    advise_errors: int = _from("advise.errors", 0)
    hybrid_applied: int = _from("hybrid.applied", 0)
    hybrid_planned_streamed_bytes: int = _from("hybrid.mover.planned_streamed_bytes", 0)
    hybrid_by_reuse: dict[str, dict[str, int]] = field(
        default_factory=dict, metadata={"path": "hybrid.by_reuse"}
    )
    hybrid_fallback: dict[str, Any] = field(default_factory=dict, metadata={"path": "hybrid.fallback"})
    evictions: int = _from("evictions.count", 0)
    eviction_bytes: int = _from("evictions.bytes", 0)
    eviction_errors: int = _from("evictions.errors", 0)
    sweeps: int = _from("evictions.sweeps", 0)
    iterations: int = _from("iterations.count", 0)
    iteration_method: str | None = _from("iterations.method")
    warmup_iterations: int = _from("iterations.warmup", 0)
    step_time_mean_s: float | None = _from("iterations.step_time_mean_s")
    step_time_p50_s: float | None = _from("iterations.step_time_p50_s")
    recorder_state: str | None = _from("recorder.state")
    recorder_reason: str | None = _from("recorder.reason")
    dropped_records: int = _from("recorder.dropped_records", 0)
    library_warnings: list[str] = field(default_factory=list, metadata={"path": "warnings"})
    timeline: list[dict[str, Any]] = field(default_factory=list, metadata={"path": "timeline"})
    tick_log: TickLog | None = None  # from the CSV beside the stats file, not from the stats document

    @property
    def label(self) -> str:
        return "?" if self.rank is None else str(self.rank)

    @property
    def who(self) -> str:
        """The rank in a sentence: "rank 3", or the process when it has no rank (`transit run`)."""
        return rank_list([self.rank]) if self.rank is not None else f"pid {self.pid or '?'} ({self.node or '?'})"

    @property
    def last_written_unix(self) -> float:
        """When the file was last written: at exit, or a running rank's latest refresh."""
        return self.end_unix or self.written_unix or 0.0

    @property
    def cap_bytes(self) -> int | None:
        """The device capacity this rank ran against: the limit, else the whole GPU."""
        return self.limit_bytes if self.mode == "limit" and self.limit_bytes else self.device_total_bytes

    @property
    def small_htod_share(self) -> float | None:
        return small_share(self.htod_histogram)

    @functools.cached_property
    def tick_summary(self) -> dict[str, Any] | None:
        """The tick log in figures: ticks, the highest bound read, seconds the bound was over the
        limit (each reading held until the next; None without a limit or two readings), and the
        longest tick's work."""
        log = self.tick_log
        if log is None:
            return None
        read = log.readings()
        over = None
        if self.limit_bytes and len(read) >= 2:
            # max(0, ...): the tick's clock is the wall clock, which a time step can move back
            over = round(float(sum(max(0.0, t1 - t0) for (t0, b), (t1, _) in itertools.pairwise(read)
                                   if b > self.limit_bytes)), 3)
        return {
            "ticks": len(log.t_s),
            "bound_peak_bytes": max((b for _, b in read), default=None),
            "seconds_over_limit": over,
            "longest_tick_ms": max(log.work_ms, default=None),
        }

    @functools.cached_property
    def intervals(self) -> list[Interval]:
        """The timeline as intervals between samples. The sample counters are cumulative since the
        rank started, so bytes migrated in an interval are the difference of two samples. libtransit
        samples at iteration marks; when the first kept sample is the first mark, the rank's start
        (t 0, all counters 0) opens the first interval."""
        samples = [s for s in self.timeline if isinstance(s, dict)]
        if (
            samples
            and (as_int(samples[0].get("iteration")) or 0) == 1
            and (as_float(samples[0].get("t")) or 0) > 0
        ):
            samples.insert(0, TIMELINE_ORIGIN)
        return [
            Interval(
                start_t=as_float(before.get("t")) or 0.0,
                t=as_float(after.get("t")) or 0.0,
                iteration=as_int(after.get("iteration")) or 0,
                htod_bytes=(as_int(after.get("htod_bytes")) or 0) - (as_int(before.get("htod_bytes")) or 0),
                dtoh_bytes=(as_int(after.get("dtoh_bytes")) or 0) - (as_int(before.get("dtoh_bytes")) or 0),
                resident_bytes=as_int(after.get("resident_bytes")) or 0,
            )
            for before, after in itertools.pairwise(samples)
        ]


TIMELINE_ORIGIN = {"t": 0.0, "iteration": 0, "resident_bytes": 0, "htod_bytes": 0, "dtoh_bytes": 0}


@dataclass(frozen=True)
class Interval:
    start_t: float  # seconds since the rank started, at the start of the interval
    t: float  # ...and at its end
    iteration: int
    htod_bytes: int
    dtoh_bytes: int
    resident_bytes: int


def _as_count(value: Any) -> int:
    number = as_int(value)
    return 0 if number is None else number


def _as_bool(value: Any) -> bool:
    return value if isinstance(value, bool) else False


def _as_histogram(value: Any) -> dict[str, int]:
    return {k: v for k, v in value.items() if as_int(v) is not None} if isinstance(value, dict) else {}


def _as_histograms(value: Any) -> dict[str, dict[str, int]]:
    return {k: _as_histogram(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _as_section(value: Any) -> dict[str, Any]:
    """A section whose fields are read one by one where used (as_float, as_text)."""
    return dict(value) if isinstance(value, dict) else {}


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _reader(annotation: str, default: Any) -> Callable[[Any], Any]:
    """How a field keeps a value only if it has the field's type; a wrong type reads as missing."""
    if annotation.startswith("int"):
        return _as_count if default == 0 else as_int
    if annotation.startswith("dict[str, dict"):
        return _as_histograms
    if annotation == "dict[str, Any]":
        return _as_section
    kinds = {"float": as_float, "bool": _as_bool, "str": as_text, "dict": _as_histogram, "list": _as_list}
    return kinds[annotation.split(" ")[0].split("[")[0]]


# (field name, path of keys in the stats document, reader), worked out once
_STAT_FIELDS = [
    (f.name, tuple(f.metadata["path"].split(".")), _reader(str(f.type), f.default))
    for f in fields(RankRow)
    if "path" in f.metadata
]

# libtransit writes -1 for an identity number it could not learn (no RANK/SLURM_PROCID, no device).
UNKNOWN_WHEN_NEGATIVE = ("rank", "world_size", "local_rank", "device")


def rank_row(rank_file: RankFile) -> RankRow:
    values: dict[str, Any] = {"file": str(rank_file.path), "tick_log": rank_file.ticks}
    for name, keys, read in _STAT_FIELDS:
        value: Any = rank_file.stats
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        values[name] = read(value)
    for name in UNKNOWN_WHEN_NEGATIVE:
        if values[name] is not None and values[name] < 0:
            values[name] = None
    return RankRow(**values)


def small_share(histogram: dict[str, int] | None) -> float | None:
    """Share of migrations in the buckets under SMALL_MIGRATION_BYTES; None when there were none."""
    if not histogram:
        return None
    total = sum(histogram.values())
    small = sum(
        n
        for bucket, n in histogram.items()
        if HISTOGRAM_BUCKETS.get(bucket, float("inf")) <= SMALL_MIGRATION_BYTES
    )
    return small / total if total else None


# Counters that add up across ranks; per node and per job totals are their sums.
SUMMED = (
    "allocations",
    "refused",
    "refused_bytes",
    "resident_peak_bytes",
    "spilled_peak_bytes",
    "htod_bytes",
    "htod_count",
    "dtoh_bytes",
    "dtoh_count",
    "unrequested_bytes",
    "gpu_page_faults",
    "thrashing",
    "remote_map_bytes",
    "prefetch_bytes",
    "evictions",
    "eviction_bytes",
    "dropped_records",
)


@dataclass
class Totals:
    """Sums over a set of ranks (a node, or the job). resident_peak_bytes is the sum of each rank's
    peak, an upper bound on the simultaneous peak."""

    name: str
    ranks: int
    gpus: int
    sums: dict[str, int]
    htod_histogram: dict[str, int]
    dtoh_histogram: dict[str, int]


def _summed_histogram(histograms: list[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = defaultdict(int)
    for histogram in histograms:
        for bucket, count in histogram.items():
            total[bucket] += count
    return dict(total)


def totals(name: str, rows: list[RankRow]) -> Totals:
    gpus = {(row.node, row.device) for row in rows if row.cuda_active and row.device is not None}
    return Totals(
        name=name,
        ranks=len(rows),
        gpus=len(gpus),
        sums={key: sum(getattr(row, key) for row in rows) for key in SUMMED},
        htod_histogram=_summed_histogram([row.htod_histogram for row in rows]),
        dtoh_histogram=_summed_histogram([row.dtoh_histogram for row in rows]),
    )


@dataclass
class IterationStats:
    methods: list[str]
    iterations_min: int | None
    iterations_max: int | None
    step_time_mean_s: float | None  # mean over ranks of each rank's mean step time
    step_time_p50_s: float | None  # median over ranks of each rank's median step time
    step_time_min_s: float | None  # fastest rank's mean step time
    step_time_max_s: float | None  # slowest rank's mean step time
    slowest_rank: int | None
    slowest: str | None  # the slowest rank in a sentence (also a process without a rank)
    timed_ranks: int


def iteration_stats(rows: list[RankRow]) -> IterationStats:
    timed = [row for row in rows if row.step_time_mean_s is not None]
    p50s = [row.step_time_p50_s for row in rows if row.step_time_p50_s is not None]
    counts = [row.iterations for row in rows if row.cuda_active]
    slowest = max(timed, key=lambda row: row.step_time_mean_s or 0.0) if timed else None
    means = [row.step_time_mean_s for row in timed if row.step_time_mean_s is not None]
    return IterationStats(
        methods=sorted({row.iteration_method for row in rows if row.iteration_method}),
        iterations_min=min(counts) if counts else None,
        iterations_max=max(counts) if counts else None,
        step_time_mean_s=statistics.fmean(means) if means else None,
        step_time_p50_s=statistics.median(p50s) if p50s else None,
        step_time_min_s=min(means) if means else None,
        step_time_max_s=max(means) if means else None,
        slowest_rank=slowest.rank if slowest else None,
        slowest=slowest.who if slowest else None,
        timed_ranks=len(timed),
    )


@dataclass
class JobHeader:
    """The job as a whole: Slurm's facts where it has them, else the step files', else the stats files'.
    How TRANSIT ran (policy, mode, limit) comes from the stats, else the step files, else the submit line."""

    job_id: str | None  # SLURM_JOB_ID (an array task's own id); None for a run outside Slurm
    shown_id: str | None  # as Slurm shows it: 1234_7 for an array task
    name: str | None
    user: str | None
    state: str | None
    elapsed_s: float | None
    nodelist: str | None
    num_nodes: int | None
    num_gpus: int | None
    policy: str | None
    mode: str | None
    limit_bytes: int | None
    policy_source: str | None  # "stats-files", "step-files", both joined by "+", "submit-line"; None: nothing says
    source: str  # where the job's facts came from: "sacct", "squeue", "step-files" or "stats-files"


def _one_or_mixed(values: Iterable[Any]) -> Any:
    """The value all share; "mixed" when they disagree (steps run with different policies)."""
    distinct = set(values) - {None}
    if len(distinct) > 1:
        return "mixed"
    return next(iter(distinct), None)


def _configuration(configs: list[tuple[str | None, str | None, int | None]]) -> tuple[Any, Any, int | None]:
    limit = _one_or_mixed(c[2] for c in configs)
    return (_one_or_mixed(c[0] for c in configs), _one_or_mixed(c[1] for c in configs),
            limit if isinstance(limit, int) else None)


def _step_nodes(steps: list[StepFile]) -> tuple[str | None, int | None]:
    """The steps' nodes as one hostlist, and how many."""
    hosts = {host for step in steps if step.nodes for host in slurm.parse_hostlist(step.nodes)}
    return (slurm.compress_hostlist(hosts), len(hosts)) if hosts else (None, None)


def job_header(job_id: str | None, rows: list[RankRow], steps: list[StepFile], facts: JobFacts | None,
               submitted: list[HowRun]) -> JobHeader:
    starts = [row.start_unix for row in rows if row.start_unix]
    ends = [row.last_written_unix for row in rows if row.last_written_unix]
    stats_nodes = {row.node for row in rows if row.node}
    step_nodes, step_node_count = _step_nodes(steps)
    # each step as its ranks ran it, else as its step file says; the submit line only without either
    with_stats = {row.step for row in rows}
    unreported = [step for step in steps if step.step_id not in with_stats]
    configs = [(row.policy, row.mode, row.limit_bytes) for row in rows]
    configs += [(step.policy, step.mode, step.limit_bytes) for step in unreported]
    sources = ["stats-files"] * bool(rows) + ["step-files"] * bool(unreported)
    if not configs and submitted:
        configs, sources = [(run.policy, run.mode, run.limit_bytes) for run in submitted], ["submit-line"]
    policy, mode, limit = _configuration(configs)
    policy_source = "+".join(sources) or None
    header = JobHeader(
        job_id=job_id,
        shown_id=job_id,
        name=None,
        user=_one_or_mixed(step.user for step in steps),
        state=None,
        elapsed_s=max(ends) - min(starts) if starts and ends else None,
        nodelist=step_nodes or (slurm.compress_hostlist(stats_nodes) if stats_nodes else None),
        num_nodes=step_node_count if step_nodes else (len(stats_nodes) if stats_nodes else None),
        num_gpus=len({(row.node, row.device) for row in rows if row.cuda_active and row.device is not None})
        if rows else None,
        policy=policy,
        mode=mode,
        limit_bytes=limit,
        policy_source=policy_source,
        source="step-files" if steps else "stats-files",
    )
    if facts is not None:
        header.shown_id = facts.shown_id
        header.name = facts.name
        header.user = facts.user or header.user
        header.state = facts.state
        header.source = facts.source
        header.elapsed_s = facts.elapsed_s if facts.elapsed_s is not None else header.elapsed_s
        header.nodelist = facts.nodelist or header.nodelist
        header.num_nodes = facts.num_nodes or header.num_nodes
        header.num_gpus = facts.num_gpus if facts.num_gpus is not None else header.num_gpus
    return header


def _choose_per_rank(rows: list[RankRow]) -> tuple[list[RankRow], list[ReportWarning]]:
    """One row per (step, rank). A process that never touched CUDA (a launcher such as the torchrun
    agent shares SLURM_PROCID with its workers) yields to one that did; otherwise the latest file wins."""
    by_key: dict[tuple[str | None, int], list[RankRow]] = defaultdict(list)
    kept = [row for row in rows if row.rank is None]
    for row in rows:
        if row.rank is not None:
            by_key[(row.step, row.rank)].append(row)
    warnings = []
    for (step, rank), candidates in by_key.items():
        active = [row for row in candidates if row.cuda_active]
        pool = active or candidates
        if len(pool) > 1:
            warnings.append(
                ReportWarning(
                    DUPLICATE_RANK,
                    f"step {step} rank {rank} has {len(pool)} stats files "
                    f"({', '.join(Path(r.file).name for r in pool)}); the one written last is reported",
                )
            )
        kept.append(max(pool, key=lambda row: row.last_written_unix))
    return kept, warnings


def _missing_ranks(rows: list[RankRow]) -> list[ReportWarning]:
    """Per step, ranks below the world size that have no file."""
    warnings = []
    steps: dict[str | None, list[RankRow]] = defaultdict(list)
    for row in rows:
        if row.rank is not None:
            steps[row.step].append(row)
    for step, step_rows in sorted(steps.items(), key=lambda item: natural_key(item[0])):
        world = max(
            [row.world_size or 0 for row in step_rows] + [max(row.rank or 0 for row in step_rows) + 1]
        )
        missing = sorted(set(range(world)) - {row.rank for row in step_rows if row.rank is not None})
        if missing:
            warnings.append(
                ReportWarning(
                    MISSING_RANK,
                    f"step {step}: no stats for rank{'s' if len(missing) > 1 else ''} "
                    f"{compact_ranges(missing)} of {world} (task killed before exit, or its file was lost)",
                )
            )
    return warnings


def who(rows: list[RankRow]) -> str:
    """The ranks in a sentence ("ranks 0-7"), or the processes that have no rank."""
    numbered = [row.rank for row in rows if row.rank is not None]
    unnumbered = [row.who for row in rows if row.rank is None]
    parts = ([rank_list(numbered)] if numbered else []) + unnumbered[:3]
    more = len(unnumbered) - 3
    return ", ".join(parts) + (f" and {more} more processes without a rank" if more > 0 else "")


def _partial_warnings(rows: list[RankRow], facts: JobFacts | None, now_unix: float) -> list[ReportWarning]:
    """What a job's partial stats mean: it runs, or its ranks died before their final write."""
    partial = [row for row in rows if row.partial]
    ages = sorted({format_age(now_unix - row.written_unix): now_unix - row.written_unix
                   for row in partial if row.written_unix}.items(), key=lambda item: item[1])
    written = (f"written {ages[0][0]} to {ages[-1][0]} ago" if len(ages) > 1
               else f"written {ages[0][0]} ago" if ages else "with no time written")
    if facts is not None and facts.unfinished:
        ranks = (f"the stats of {who(partial)} are partial (the latest refresh, {written}; ranks refresh every "
                 "TRANSIT_STATS_INTERVAL seconds, 60 by default)" if partial else
                 "ranks write their stats at exit and every TRANSIT_STATS_INTERVAL seconds while they run: "
                 "this report covers those written so far")
        return [ReportWarning(JOB_NOT_FINISHED, f"job {facts.shown_id} is {facts.state}: {ranks}")]
    if not partial:
        return []
    if facts is not None and facts.end_unix:
        before = [facts.end_unix - row.written_unix for row in partial if row.written_unix]
        when = f", the last {format_age(max(0.0, min(before)))} before the job ended" if before else ""
        return [ReportWarning(PARTIAL_STATS, f"{who(partial)} never wrote final stats{when}: the rank was killed "
                              "outright (SIGKILL, out of memory, a node failure), so its figures stop at its last "
                              "refresh")]
    return [ReportWarning(PARTIAL_STATS, f"the stats of {who(partial)} are partial, {written}: the rank was "
                          "still running then, or was killed before its final write")]


def no_stats_reason(directory: Path | None, rows: list[RankRow], warnings: list[ReportWarning],
                    steps: list[StepFile], facts: JobFacts | None, submitted: list[HowRun]) -> str | None:
    """Why a job has no usable stats, in the user's terms; None when it has some."""
    if rows:
        return None
    rejected = Counter(w.code for w in warnings if w.code in REJECTED_FILE_CODES and w.path
                       and Path(w.path).name.startswith("rank"))
    if rejected:
        counts = ", ".join(f"{n} {code}" for code, n in rejected.most_common())
        return f"every stats file was rejected ({counts}): see the warnings"
    unreadable = [w.message for w in warnings if w.code == UNREADABLE_DIRECTORY]
    if unreadable:
        return unreadable[0]
    refused = [step for step in steps if step.refused]
    if refused:
        return f"the plugin refused step {refused[0].step_id} before its program ran: {refused[0].refused}"
    foreign = _foreign_job_directory(directory, facts)
    if foreign:
        return foreign
    state = facts.state if facts else None
    if state and "PENDING" in state:
        return "the job has not started yet"
    if directory is None or not directory.is_dir():
        where = f"no stats directory {directory}" if directory else "no report directory to look in"
        if submitted and facts is not None and facts.source == "sacct" and not facts.step_submit_lines:
            return (f"TRANSIT was asked for ({_options(submitted[0].options)}), but no job step ran: TRANSIT runs "
                    "srun steps, never the batch script itself, and accounting lists no srun step")
        if submitted:
            return (f"{where}, yet the submit line asks for TRANSIT ({_options(submitted[0].options)}): the plugin "
                    "makes it for every step it runs; is the report directory right (--report-dir)?")
        if facts is not None and facts.submit_line:
            return (f"TRANSIT was not asked for: no --transit on the submit line ({facts.submit_line[:60]}), and "
                    f"{where} (the plugin makes one for every step it runs, also for #SBATCH --transit)")
        # nothing says how the job was submitted (no accounting): whether --transit was given is unknown
        return (f"{where}: no step of this job ran under TRANSIT here (the plugin makes the directory for "
                "every srun step with --transit; a batch script's own commands never run under it), or the "
                "report directory is another one (--report-dir)")
    if facts is not None and facts.unfinished:
        return (f"the job is {state}: none of its ranks has written stats yet (they write them at exit, and "
                "every TRANSIT_STATS_INTERVAL seconds once they use CUDA)")
    if state and not state.startswith("COMPLETED"):
        return (f"the job ended {state} before any rank wrote stats: a rank writes them at exit (also on SIGTERM "
                "or SIGINT), so one killed outright (SIGKILL, out of memory, a node failure) writes none")
    if not steps and facts is None:
        return (f"{directory} holds no stats file (rank*.json) and no step file (step-*.json): it is not a "
                "job's stats directory, or nothing ran under TRANSIT there")
    return "no task called CUDA, so no rank wrote stats (libtransit stays inert in processes that never do)"


def _foreign_job_directory(directory: Path | None, facts: JobFacts | None) -> str | None:
    """What the plugin found where the job's directory goes, when it refused it: a symbolic link or
    another user's directory fails every step before its program runs (and Slurm only says FAILED)."""
    if directory is None or facts is None or not facts.user:
        return None
    try:
        st = directory.lstat()
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        found = "a symbolic link"
    elif stat.S_ISDIR(st.st_mode) and st.st_uid != 0 and _user_name(st.st_uid) != facts.user:
        found = f"a directory of {_user_name(st.st_uid)}"
    else:
        return None
    return (f"{directory} is {found}, not {facts.user}'s job directory: the plugin refused it, so every step "
            "failed before its program ran; an administrator must remove it")


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _options(options: dict[str, str]) -> str:
    return " ".join(f"--{name}={value}" if value else f"--{name}" for name, value in options.items())


@dataclass(frozen=True)
class Prediction:
    """A rank's steady iteration: replay's prediction and, where the stats have it, the measurement."""

    rank: str
    profile: str
    policy: str
    look_ahead: bool  # hybrid replayed with its mover's stream plan
    htod_bytes: int
    dtoh_bytes: int
    zero_copy_bytes: int
    streamed_bytes: int
    step_s: float | None  # None without --compute-s
    compute_s: float | None
    measured_step_s: float | None  # the rank's step-time median
    measured_htod_bytes: int | None  # the last iteration of the rank's timeline
    measured_dtoh_bytes: int | None


@dataclass
class Report:
    directory: str | None
    header: JobHeader
    ranks: list[RankRow]
    nodes: list[Totals]
    job: Totals
    iterations: IterationStats
    warnings: list[ReportWarning]
    steps: list[StepFile] = field(default_factory=list)
    no_stats_reason: str | None = None
    now_unix: float = 0.0
    predictions: list[Prediction] = field(default_factory=list)  # replay over the ranks' profiles

    @property
    def partial(self) -> bool:
        return any(row.partial for row in self.ranks)


def natural_key(text: str | None) -> list[Any]:
    """Sort key putting node2 before node10 and step 2 before step 10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text or "")]


def _sort_key(row: RankRow) -> tuple[list[Any], int, int]:
    return (natural_key(row.step), 1 if row.rank is None else 0, row.rank if row.rank is not None else 0)


def build_report(
    directory: Path | None,
    job_id: str | None,
    rank_files: list[RankFile],
    steps: list[StepFile],
    facts: JobFacts | None,
    submitted: list[HowRun],
    warnings: list[ReportWarning],
    now_unix: float | None = None,
) -> Report:
    now = time.time() if now_unix is None else now_unix
    rows, duplicate_warnings = _choose_per_rank([rank_row(f) for f in rank_files])
    rows.sort(key=_sort_key)
    by_node: dict[str, list[RankRow]] = defaultdict(list)
    for row in rows:
        by_node[row.node or "?"].append(row)
    return Report(
        directory=str(directory) if directory else None,
        header=job_header(job_id, rows, steps, facts, submitted),
        ranks=rows,
        nodes=[totals(node, by_node[node]) for node in sorted(by_node, key=natural_key)],
        job=totals("job", rows),
        iterations=iteration_stats(rows),
        warnings=[*warnings, *_partial_warnings(rows, facts, now), *duplicate_warnings, *_missing_ranks(rows)],
        steps=sorted(steps, key=lambda step: natural_key(step.step_id)),
        no_stats_reason=no_stats_reason(directory, rows, warnings, steps, facts, submitted),
        now_unix=now,
    )
