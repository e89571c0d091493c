"""Notes: what the figures mean for the user, each driven by a named threshold (thresholds.py)."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from transit.report.aggregate import Interval, RankRow, Report, small_share, who
from transit.report.load import as_float
from transit.report.thresholds import (
    FEWER_NODES_TARGET_SHARE,
    MIGRATING_INTERVAL_SHARE,
    MIN_INTERVALS_FOR_PATTERN,
    PREFETCH_ADVISED_FROM,
    SMALL_MIGRATION_BYTES,
    SMALL_MIGRATION_SHARE,
    STEADY_SHARE_OF_POST_WARMUP,
    STRAGGLER_RATIO,
    THRASHING_EVENTS,
    UNDERUSED_CAP_SHARE,
    UNREQUESTED_MIGRATION_SHARE,
)
from transit.report.units import format_count
from transit.units import format_bytes

ADVICE = "advice"  # a change that should make the job faster or cheaper
WARNING = "warning"  # figures are incomplete or something went wrong
INFO = "info"  # worth knowing, nothing to change
READS_IN_PLACE = ("advise", "hybrid")  # policies that already leave data in host memory for the GPU to read


@dataclass(frozen=True)
class Note:
    code: str
    level: str
    message: str
    ranks: list[int] = field(default_factory=list)
    action: str | None = None  # advice: what to change, as the user types it ("--transit=advise")


def _ranks(rows: list[RankRow], predicate: Callable[[RankRow], bool]) -> list[RankRow]:
    return [row for row in rows if row.cuda_active and predicate(row)]


def _numbers(rows: list[RankRow]) -> list[int]:
    return [row.rank for row in rows if row.rank is not None]


def _advice(code: str, action: str, message: str, hit: list[RankRow]) -> Note:
    """An advice note that opens with the action: "try ACTION: why, and what it should change"."""
    return Note(code, ADVICE, f"try {action}: {message}", _numbers(hit), action)


def steady_intervals(row: RankRow) -> list[Interval]:
    """The steady iterations' timeline intervals: the later half of those after warm-up (the first
    ones after it still settle: the policy acts, the working set finds its place); [] without any."""
    after = [i for i in row.intervals if i.iteration > row.warmup_iterations]
    return after[math.floor(len(after) * (1 - STEADY_SHARE_OF_POST_WARMUP)):]


def _still_migrating(row: RankRow) -> bool:
    """Whether the steady iterations still move data to the GPU (most of them do)."""
    steady = steady_intervals(row)
    return bool(steady) and statistics.median(i.htod_bytes for i in steady) > 0


def _small_migrations(report: Report) -> Note | None:
    hit = _ranks(report.ranks, lambda r: r.policy in PREFETCH_ADVISED_FROM
                 and (r.small_htod_share or 0.0) > SMALL_MIGRATION_SHARE and _still_migrating(r))
    if not hit:
        return None
    histogram: Counter[str] = Counter()
    for row in hit:
        histogram.update(row.htod_histogram)
    steady = [steady_intervals(row) for row in hit]
    per_step = statistics.median(statistics.median(i.htod_bytes for i in intervals) for intervals in steady)
    first, last = min(s[0].iteration for s in steady), max(s[-1].iteration for s in steady)
    return _advice(
        "small-migrations",
        "--transit=prefetch",
        f"{small_share(dict(histogram)) or 0.0:.0%} of the {format_count(sum(histogram.values()))} migrations "
        f"to the GPU on {who(hit)} were under {format_bytes(SMALL_MIGRATION_BYTES)}: the driver pulled the data in "
        f"on GPU page faults, a small piece at a time, while the kernels waited "
        f"({format_count(sum(r.gpu_page_faults for r in hit))} faults), and past warm-up, in the steady "
        f"iterations {first}-{last}, {format_bytes(per_step)} a step still migrated; prefetch moves what the next "
        "kernels read ahead of them in large pieces, so most of these faults and waits should go",
        hit,
    )


def _thrashing(report: Report) -> Note | None:
    hit = _ranks(report.ranks, lambda r: r.policy not in READS_IN_PLACE and r.thrashing >= THRASHING_EVENTS)
    if not hit:
        return None
    return _advice(
        "thrashing",
        "--transit=advise",
        f"the driver moved the same pages back and forth between host and GPU "
        f"{format_count(sum(r.thrashing for r in hit))} times on {who(hit)}; advise maps what does not fit so "
        "the GPU reads it in host memory in place, which ends these round trips",
        hit,
    )


def _after_warmup(row: RankRow) -> list[int]:
    """Bytes moved to the GPU in each post-warm-up timeline interval (one interval per iteration)."""
    return [i.htod_bytes for i in row.intervals if i.iteration > row.warmup_iterations]


def migrating_interval_share(row: RankRow) -> float | None:
    """Share of post-warm-up timeline intervals with HtoD migrations; None if too few to judge."""
    after_warmup = _after_warmup(row)
    if len(after_warmup) < MIN_INTERVALS_FOR_PATTERN:
        return None
    return sum(1 for moved in after_warmup if moved > 0) / len(after_warmup)


def _migrations_every_iteration(report: Report) -> Note | None:
    hit = _ranks(
        report.ranks,
        lambda r: r.policy not in READS_IN_PLACE and (migrating_interval_share(r) or 0.0) >= MIGRATING_INTERVAL_SHARE,
    )
    if not hit:
        return None
    # the median rank's figures: what moves in a typical step, and what moved again in every step
    typical = statistics.median(statistics.median(_after_warmup(r)) for r in hit)
    every = statistics.median(min(_after_warmup(r)) for r in hit)
    steps = statistics.median(len(_after_warmup(r)) for r in hit)
    again = (f"{format_bytes(every)} of it moved again in each of the {steps:.0f} steps" if every
             else f"data moved in {max(migrating_interval_share(r) or 0.0 for r in hit):.0%} of the "
                  f"{steps:.0f} steps")
    return _advice(
        "migrations-every-iteration",
        "--transit=advise",
        f"{format_bytes(typical)} per step still migrates to the GPU after warm-up on {who(hit)}, and "
        f"{again}: what does not fit is evicted and fetched again each time; advise leaves it in host memory "
        "for the GPU to read in place, so the steps no longer wait for those migrations",
        hit,
    )


def _fewer_nodes(report: Report) -> Note | None:
    active = [r for r in report.ranks if r.cuda_active and r.cap_bytes]
    nodes = report.header.num_nodes or 0
    if nodes < 2 or not active:
        return None
    peak_share = max(r.resident_peak_bytes / r.cap_bytes for r in active if r.cap_bytes)
    fewer = math.ceil(nodes * peak_share / FEWER_NODES_TARGET_SHARE)
    if peak_share >= UNDERUSED_CAP_SHARE or fewer >= nodes:
        return None
    return Note(
        "fewer-nodes",
        ADVICE,
        f"try {max(1, fewer)} node{'s' if fewer > 1 else ''} instead of {nodes}: peak device memory stayed at or under {peak_share:.0%} of "
        f"the cap on every rank, so the same data on {max(1, fewer)} would fill about "
        f"{peak_share * nodes / max(1, fewer):.0%} of each GPU (if it divides evenly); `transit plan` works out "
        "the batch and gradient accumulation for it",
        action=f"--nodes={max(1, fewer)}",
    )


def _dropped_records(report: Report) -> Note | None:
    hit = _ranks(report.ranks, lambda r: r.dropped_records > 0)
    if not hit:
        return None
    return Note(
        "dropped-records",
        WARNING,
        f"the recorder dropped {sum(r.dropped_records for r in hit)} CUPTI records on "
        f"{who(hit)}: migration and fault figures there are lower bounds",
        _numbers(hit),
    )


def _recorder_degraded(report: Report) -> Note | None:
    hit = _ranks(report.ranks, lambda r: r.recorder_state == "degraded")
    if not hit:
        return None
    reasons = sorted({r.recorder_reason for r in hit if r.recorder_reason})
    limited = [r for r in hit if r.mode == "limit"]
    return Note(
        "recorder-degraded",
        WARNING,
        f"the recorder was degraded on {who(hit)}"
        + (f" ({'; '.join(reasons)})" if reasons else "")
        + ": another CUPTI subscriber (torch.profiler?) held it, so there are no migration records, "
        "prefetch cannot profile, and iterations come from the API or the Python hook only"
        + (f"; in limit mode ({who(limited)}) the measured bound alone kept L, evicting "
           "round the managed memory rather than by recency, so expect more migrations and a looser hold"
           if limited else ""),
        _numbers(hit),
    )


def _policy_errors(report: Report) -> Note | None:
    hit = _ranks(report.ranks, lambda r: r.prefetch_errors + r.advise_errors + r.eviction_errors > 0)
    if not hit:
        return None
    failed = {
        "prefetch": sum(r.prefetch_errors for r in hit),
        "advise": sum(r.advise_errors for r in hit),
        "eviction": sum(r.eviction_errors for r in hit),
    }
    counts = ", ".join(f"{n} {kind}" for kind, n in failed.items() if n)
    return Note(
        "policy-errors",
        WARNING,
        f"CUDA refused TRANSIT's own calls on {who(hit)} ({counts}): the policy did "
        "less than it should; the rank's log has the CUDA errors",
        _numbers(hit),
    )


def _refused_allocations(report: Report) -> Note | None:
    hit = _ranks(report.ranks, lambda r: r.refused > 0)
    if not hit:
        return None
    limits = sorted({r.limit_bytes for r in hit if r.limit_bytes})
    now = f" (now {', '.join(format_bytes(limit) for limit in limits)})" if limits else ""
    return Note(
        "refused-allocations",
        WARNING,
        f"{sum(r.refused for r in hit)} allocations ({format_bytes(sum(r.refused_bytes for r in hit))}) were "
        f"refused on {who(hit)} because they would oversubscribe the GPU's physical memory: raise "
        f"--transit-mem-limit{now} or use more nodes, so that they fit",
        _numbers(hit),
        "--transit-mem-limit",
    )


def _overshoot(report: Report) -> Note | None:
    hit = _ranks(report.ranks, lambda r: r.mode == "limit" and r.overshoot_peak_bytes > 0)
    if not hit:
        return None
    worst = max(r.overshoot_peak_bytes for r in hit)
    return Note(
        "limit-overshoot",
        INFO,
        f"resident memory went above the limit by up to {format_bytes(worst)} on "
        f"{who(hit)} before TRANSIT evicted",
        _numbers(hit),
    )


def _bound_over_limit(report: Report) -> Note | None:
    """libtransit's measured bound (managed memory not on the host) went past the limit."""
    hit = _ranks(report.ranks, lambda r: r.mode == "limit" and r.limit_bytes is not None
                 and (r.device_bound_peak_bytes or 0) > r.limit_bytes)
    if not hit:
        return None
    worst = max(r.device_bound_peak_bytes or 0 for r in hit)
    logged = [r.tick_summary["seconds_over_limit"] for r in hit
              if r.tick_summary and r.tick_summary["seconds_over_limit"] is not None]
    how_long = f" for up to {max(logged):.1f} s (by the tick log)" if logged else " for a while"
    limits = ", ".join(format_bytes(limit) for limit in sorted({r.limit_bytes for r in hit if r.limit_bytes}))
    return Note(
        "limit-bound-over",
        WARNING,
        f"managed memory not on the host reached {format_bytes(worst)} on {who(hit)}, above the limit of "
        f"{limits}: data reached the GPU faster than TRANSIT evicted it, so the device held more than the "
        f"limit{how_long}; {sum(r.sweeps for r in hit)} sweeps found chunks the estimate had lost",
        _numbers(hit),
    )


def _unrequested(report: Report) -> Note | None:
    def share(r: RankRow) -> float:
        moved = r.htod_bytes + r.dtoh_bytes
        return r.unrequested_bytes / moved if moved else 0.0

    hit = _ranks(report.ranks, lambda r: r.mode == "limit" and share(r) > UNREQUESTED_MIGRATION_SHARE)
    if not hit:
        return None
    return Note(
        "unrequested-migrations",
        INFO,
        f"over {UNREQUESTED_MIGRATION_SHARE:.0%} of migrated bytes on {who(hit)} were "
        "moved by the driver, not by TRANSIT (the driver evicted on its own)",
        _numbers(hit),
    )


def _stragglers(report: Report) -> Note | None:
    timed = [r for r in report.ranks if r.step_time_mean_s]
    if len(timed) < 2:
        return None
    median = statistics.median(r.step_time_mean_s or 0.0 for r in timed)
    hit = [r for r in timed if median and (r.step_time_mean_s or 0.0) > STRAGGLER_RATIO * median]
    if not hit:
        return None
    return Note(
        "stragglers",
        INFO,
        f"{who(hit)} took over {STRAGGLER_RATIO:g}x the median step time "
        f"({median:.3g} s): the others wait for them at every collective",
        _numbers(hit),
    )


def _no_iterations(report: Report) -> Note | None:
    hit = _ranks(report.ranks, lambda r: r.iteration_method in (None, "none") or r.iterations == 0)
    if not hit:
        return None
    return Note(
        "no-iterations",
        INFO,
        f"no iteration boundaries were found on {who(hit)}: per-iteration figures "
        "are missing and prefetch/advise never leave warm-up; call transit_mark_iteration() or "
        "use a torch.optim optimizer",
        _numbers(hit),
    )


def _hybrid_never_placed(report: Report) -> Note | None:
    hit = _ranks(report.ranks, lambda r: r.policy == "hybrid" and r.iterations > r.warmup_iterations
                 and r.hybrid_applied == 0)
    if not hit:
        return None
    return Note(
        "hybrid-never-placed",
        WARNING,
        f"hybrid never placed the data on {who(hit)}: it places by the profile of the iterations after "
        "warm-up, and none was built (see the recorder's state), so those ranks ran as base",
        _numbers(hit),
    )


def _hybrid_fallback(report: Report) -> Note | None:
    """Which placement hybrid's guard kept (libtransit/src/model/guard.h), with both median steps."""
    hit = _ranks(report.ranks, lambda r: r.policy == "hybrid" and r.hybrid_fallback.get("kept") in ("hybrid", "advise")
                 and all(as_float(r.hybrid_fallback.get(k)) for k in ("advise_step_s", "hybrid_step_s")))
    if not hit:
        return None

    def steps(row: RankRow) -> str:
        f = row.hybrid_fallback
        return f"advise {as_float(f['advise_step_s']):.2f} s, hybrid {as_float(f['hybrid_step_s']):.2f} s"

    parts = []
    for kept in ("advise", "hybrid"):
        rows = [r for r in hit if r.hybrid_fallback["kept"] == kept]
        shown = steps(rows[0]) if len(rows) == 1 else "; ".join(f"{r.who} {steps(r)}" for r in rows[:4])
        if rows:
            parts.append(f"{kept}'s placement on {who(rows)} (median step: {shown}{'; ...' if len(rows) > 4 else ''})")
    return Note(
        "hybrid-fallback",
        INFO,
        "hybrid's guard timed steady steps with advise's placement and with its own, and kept the faster: "
        + "; ".join(parts),
        _numbers(hit),
    )


def _cuda_errors(report: Report) -> Note | None:
    hit = [r for r in report.ranks if r.cuda_error]
    if not hit:
        return None
    errors = Counter(r.cuda_error for r in hit)
    return Note(
        "cuda-error",
        WARNING,
        f"CUDA errors on {who(hit)}: "
        + "; ".join(f"{error} (x{n})" for error, n in errors.most_common()),
        _numbers(hit),
    )


def _no_cuda(report: Report) -> Note | None:
    if not report.ranks or any(r.cuda_active for r in report.ranks):
        return None
    return Note("no-cuda", INFO, "no rank used CUDA: there are no memory figures to report")


def _signalled(report: Report) -> Note | None:
    hit = [r for r in report.ranks if r.exit_reason in ("SIGTERM", "SIGINT")]
    if not hit:
        return None
    reasons = ", ".join(sorted({r.exit_reason or "" for r in hit}))
    return Note(
        "ended-by-signal",
        INFO,
        f"{who(hit)} wrote {'their' if len(hit) > 1 else 'its'} stats on {reasons} (time limit, scancel or "
        "Ctrl-C): the figures cover the run until then",
        _numbers(hit),
    )


def _library_warnings(report: Report) -> list[Note]:
    by_text: dict[str, list[RankRow]] = {}
    for row in report.ranks:
        for text in row.library_warnings:
            if isinstance(text, str):
                by_text.setdefault(text, []).append(row)
    return [
        Note("library-warning", INFO, f"{who(rows)}: {text}", _numbers(rows))
        for text, rows in by_text.items()
    ]


CHECKS = (
    _small_migrations,
    _thrashing,
    _migrations_every_iteration,
    _fewer_nodes,
    _refused_allocations,
    _dropped_records,
    _recorder_degraded,
    _policy_errors,
    _cuda_errors,
    _overshoot,
    _bound_over_limit,
    _unrequested,
    _stragglers,
    _no_iterations,
    _hybrid_never_placed,
    _hybrid_fallback,
    _signalled,
    _no_cuda,
)


def notes(report: Report) -> list[Note]:
    found = [note for check in CHECKS if (note := check(report)) is not None]
    return found + _library_warnings(report)
