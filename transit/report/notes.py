"""Notes: what the figures mean for the user, each driven by a named threshold (thresholds.py)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from transit.report.aggregate import RankRow, Report, small_share
from transit.report.thresholds import (
    MIGRATING_INTERVAL_SHARE,
    MIN_INTERVALS_FOR_PATTERN,
    SMALL_MIGRATION_BYTES,
    SMALL_MIGRATION_SHARE,
    STRAGGLER_RATIO,
    THRASHING_EVENTS,
    UNDERUSED_CAP_SHARE,
    UNREQUESTED_MIGRATION_SHARE,
)
from transit.report.units import format_bytes, rank_list

ADVICE = "advice"  # a change that should make the job faster or cheaper
WARNING = "warning"  # figures are incomplete or something went wrong
INFO = "info"  # worth knowing, nothing to change


@dataclass(frozen=True)
class Note:
    code: str
    level: str
    message: str
    ranks: list[int] = field(default_factory=list)


def _ranks(rows: list[RankRow], predicate: Callable[[RankRow], bool]) -> list[RankRow]:
    return [row for row in rows if row.cuda_active and predicate(row)]


def _numbers(rows: list[RankRow]) -> list[int]:
    return [row.rank for row in rows if row.rank is not None]


def _small_migrations(report: Report) -> Note | None:
    hit = _ranks(
        report.ranks, lambda r: r.policy != "prefetch" and (r.small_htod_share or 0.0) > SMALL_MIGRATION_SHARE
    )
    if not hit:
        return None
    share = small_share(report.job.htod_histogram) or 0.0
    return Note(
        "small-migrations",
        ADVICE,
        f"most HtoD migrations are under {format_bytes(SMALL_MIGRATION_BYTES)} on "
        f"{rank_list(_numbers(hit))} ({share:.0%} job-wide): page faults are pulling data in small "
        "pieces; try --transit=prefetch",
        _numbers(hit),
    )


def _thrashing(report: Report) -> Note | None:
    hit = _ranks(report.ranks, lambda r: r.policy != "advise" and r.thrashing >= THRASHING_EVENTS)
    if not hit:
        return None
    events = sum(r.thrashing for r in hit)
    return Note(
        "thrashing",
        ADVICE,
        f"{events} thrashing events on {rank_list(_numbers(hit))}: pages moved back and forth "
        "between host and GPU; try --transit=advise (the GPU reads host data in place)",
        _numbers(hit),
    )


def migrating_interval_share(row: RankRow) -> float | None:
    """Share of post-warm-up timeline intervals with HtoD migrations; None if too few to judge."""
    after_warmup = [i.htod_bytes for i in row.intervals if i.iteration > row.warmup_iterations]
    if len(after_warmup) < MIN_INTERVALS_FOR_PATTERN:
        return None
    return sum(1 for moved in after_warmup if moved > 0) / len(after_warmup)


def _migrations_every_iteration(report: Report) -> Note | None:
    hit = _ranks(
        report.ranks,
        lambda r: r.policy != "advise" and (migrating_interval_share(r) or 0.0) >= MIGRATING_INTERVAL_SHARE,
    )
    if not hit:
        return None
    return Note(
        "migrations-every-iteration",
        ADVICE,
        f"data still migrates to the GPU in (nearly) every iteration after warm-up on "
        f"{rank_list(_numbers(hit))}: the working set does not fit and is moved again each time; "
        "try --transit=advise",
        _numbers(hit),
    )


def _fewer_nodes(report: Report) -> Note | None:
    active = [r for r in report.ranks if r.cuda_active and r.cap_bytes]
    if report.header.num_nodes < 2 or not active:
        return None
    peak_share = max(r.resident_peak_bytes / r.cap_bytes for r in active if r.cap_bytes)
    if peak_share >= UNDERUSED_CAP_SHARE:
        return None
    return Note(
        "fewer-nodes",
        ADVICE,
        f"peak device memory stayed at or under {peak_share:.0%} of the cap on every rank: the job "
        f"would likely fit on fewer than {report.header.num_nodes} nodes; see `transit plan`",
    )


def _dropped_records(report: Report) -> Note | None:
    hit = _ranks(report.ranks, lambda r: r.dropped_records > 0)
    if not hit:
        return None
    return Note(
        "dropped-records",
        WARNING,
        f"the recorder dropped {sum(r.dropped_records for r in hit)} CUPTI records on "
        f"{rank_list(_numbers(hit))}: migration and fault figures there are lower bounds",
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
        f"the recorder was degraded on {rank_list(_numbers(hit))}"
        + (f" ({'; '.join(reasons)})" if reasons else "")
        + ": another CUPTI subscriber (torch.profiler?) held it, so there are no migration records, "
        "prefetch cannot profile, and iterations come from the API or the Python hook only"
        + (f"; in limit mode ({rank_list(_numbers(limited))}) the measured bound alone kept L, evicting "
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
        f"CUDA refused TRANSIT's own calls on {rank_list(_numbers(hit))} ({counts}): the policy did "
        "less than it should; the rank's log has the CUDA errors",
        _numbers(hit),
    )


def _refused_allocations(report: Report) -> Note | None:
    hit = _ranks(report.ranks, lambda r: r.refused > 0)
    if not hit:
        return None
    return Note(
        "refused-allocations",
        WARNING,
        f"{sum(r.refused for r in hit)} allocations "
        f"({format_bytes(sum(r.refused_bytes for r in hit))}) were refused on {rank_list(_numbers(hit))} "
        "because they would oversubscribe the GPU's physical memory: raise the limit "
        "(--transit-mem-limit) or use more nodes",
        _numbers(hit),
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
        f"{rank_list(_numbers(hit))} before TRANSIT evicted",
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
    how_long = f" for up to {max(logged):.1f} s by the tick log" if logged else ""
    return Note(
        "limit-bound-over",
        WARNING,
        f"managed memory not on the host reached {format_bytes(worst)} on {rank_list(_numbers(hit))}, above "
        "the limit: data reached the GPU faster than TRANSIT evicted it, so for a while"
        f"{how_long} the device held more than the limit ({sum(r.sweeps for r in hit)} sweeps for chunks "
        "the estimate had lost)",
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
        f"over {UNREQUESTED_MIGRATION_SHARE:.0%} of migrated bytes on {rank_list(_numbers(hit))} were "
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
        f"{rank_list(_numbers(hit))} took over {STRAGGLER_RATIO:g}x the median step time "
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
        f"no iteration boundaries were found on {rank_list(_numbers(hit))}: per-iteration figures "
        "are missing and prefetch/advise never leave warm-up; call transit_mark_iteration() or "
        "use a torch.optim optimizer",
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
        f"CUDA errors on {rank_list(_numbers(hit))}: "
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
        f"{rank_list(_numbers(hit))} wrote their stats on {reasons} (time limit, scancel or "
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
        Note("library-warning", INFO, f"{rank_list(_numbers(rows))}: {text}", _numbers(rows))
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
    _signalled,
    _no_cuda,
)


def notes(report: Report) -> list[Note]:
    found = [note for check in CHECKS if (note := check(report)) is not None]
    return found + _library_warnings(report)
