"""--plot DIR: the report's PNGs (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transit.report.aggregate import HISTOGRAM_BUCKETS, Report

GIB = 1024**3
LEGEND_MAX_RANKS = 8  # above this, per-rank lines carry no legend
BARS_MAX_RANKS = 64  # above this, per-rank bars become one filled outline, without rank labels


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def migration_sizes(report: Report, path: Path) -> Path:
    plt = _pyplot()
    buckets = list(HISTOGRAM_BUCKETS)
    width = 0.4
    fig, ax = plt.subplots(figsize=(7, 4))
    for offset, (label, histogram) in zip(
        (-width / 2, width / 2), (("HtoD", report.job.htod_histogram), ("DtoH", report.job.dtoh_histogram))
    ):
        ax.bar(
            [i + offset for i in range(len(buckets))],
            [histogram.get(b, 0) for b in buckets],
            width=width,
            label=label,
        )
    ax.set_xticks(range(len(buckets)), buckets)
    ax.set_xlabel("migration size")
    ax.set_ylabel("migrations (all ranks)")
    ax.set_title(f"Migration sizes, job {report.header.job_id or '?'}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _stairs(edges: list[float], values: list[float]) -> Any:
    """The polyline of a step plot: each value held from one edge to the next."""
    import numpy as np

    return np.column_stack([np.repeat(edges, 2)[1:-1], np.repeat(values, 2)])


def timeline(report: Report, path: Path) -> Path:
    """One line per rank in three LineCollections (one artist each, not one per rank: a thousand
    ranks plot in about a second)."""
    plt = _pyplot()
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    fig, (moved_ax, resident_ax) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    series = [(row, row.intervals) for row in report.ranks]
    series = [(row, intervals) for row, intervals in series if intervals]
    htod, dtoh, resident = [], [], []
    for _, intervals in series:
        edges = [intervals[0].start_t] + [i.t for i in intervals]
        htod.append(_stairs(edges, [i.htod_bytes / GIB for i in intervals]))
        dtoh.append(_stairs(edges, [i.dtoh_bytes / GIB for i in intervals]))
        resident.append([(i.t, i.resident_bytes / GIB) for i in intervals])
    thin = len(series) > LEGEND_MAX_RANKS
    colours = [f"C{index % 10}" for index in range(len(series))]  # a rank's three lines share one
    style = {"linewidths": 0.6, "alpha": 0.5} if thin else {"linewidths": 1.2}
    moved_ax.add_collection(LineCollection(htod, colors=colours, **style))
    moved_ax.add_collection(LineCollection(dtoh, colors=colours, linestyles="dashed", **style))
    resident_ax.add_collection(LineCollection(resident, colors=colours, **style))
    for ax in (moved_ax, resident_ax):
        ax.autoscale()
    moved_ax.set_ylabel("migrated per interval (GiB)")
    moved_ax.set_title(
        f"Migrations and resident memory over time, job {report.header.job_id or '?'}"
        + ("" if series else " (no timeline samples)")
    )
    resident_ax.set_ylabel("resident on GPU (GiB)")
    resident_ax.set_xlabel("time since rank start (s)")
    kinds = [
        Line2D([], [], color="gray", label="HtoD"),
        Line2D([], [], color="gray", linestyle="--", label="DtoH"),
    ]
    moved_ax.legend(handles=kinds, fontsize="small")
    if series and not thin:
        ranks = [Line2D([], [], color=c, label=f"rank {row.label}") for c, (row, _) in zip(colours, series)]
        resident_ax.legend(handles=ranks, fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _per_rank_bars(ax: Any, values: list[float], colour: str) -> None:
    """Bars with gaps for a few ranks; for many, one filled step outline (a single artist)."""
    import numpy as np

    if len(values) <= BARS_MAX_RANKS:
        ax.bar(range(len(values)), values, color=colour)
    else:
        ax.stairs(values, np.arange(len(values) + 1) - 0.5, fill=True, color=colour)


def ranks(report: Report, path: Path) -> Path:
    plt = _pyplot()
    labels = [row.label for row in report.ranks]
    fig, (spill_ax, step_ax) = plt.subplots(
        2, 1, sharex=True, figsize=(max(6, min(24, 0.25 * len(labels))), 6)
    )
    _per_rank_bars(spill_ax, [row.spilled_peak_bytes / GIB for row in report.ranks], "tab:orange")
    spill_ax.set_ylabel("spilled peak (GiB)")
    spill_ax.set_title(f"Per rank, job {report.header.job_id or '?'}")
    _per_rank_bars(step_ax, [row.step_time_mean_s or 0.0 for row in report.ranks], "tab:blue")
    if report.iterations.step_time_p50_s is not None:
        step_ax.axhline(
            report.iterations.step_time_p50_s,
            color="gray",
            linestyle="--",
            linewidth=1,
            label="median step time",
        )
        step_ax.legend(fontsize="small")
    step_ax.set_ylabel("mean step time (s)")
    step_ax.set_xlabel("rank (in report order)")
    if len(labels) <= BARS_MAX_RANKS:
        step_ax.set_xticks(range(len(labels)), labels)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def control(report: Report, path: Path) -> Path:
    """Limit mode's measured bound over time from the tick logs (TRANSIT_TICK_LOG=1), one line per
    rank in one LineCollection, each limit dashed."""
    plt = _pyplot()
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(8, 4))
    logged, lines = [], []
    for row in report.ranks:
        log = row.tick_log
        line = [(t, b / GIB) for t, b in log.readings()] if log else []
        if line:  # a log without readings has nothing to draw
            logged.append(row)
            lines.append(line)
    colours = [f"C{index % 10}" for index in range(len(lines))]
    ax.add_collection(LineCollection(lines, colors=colours, linewidths=0.7))
    ax.autoscale()
    handles = []
    for limit in sorted({row.limit_bytes for row in logged if row.limit_bytes}):
        ax.axhline(limit / GIB, color="black", linestyle="--", linewidth=1)
        handles.append(Line2D([], [], color="black", linestyle="--", label=f"limit {limit / GIB:.1f} GiB"))
    if len(logged) <= LEGEND_MAX_RANKS:
        handles += [Line2D([], [], color=c, label=f"rank {row.label}") for c, row in zip(colours, logged)]
    if handles:
        ax.legend(handles=handles, fontsize="small")
    ax.set_title(
        f"Managed data on the device (measured bound), job {report.header.job_id or '?'}"
        + ("" if logged else " (no tick log with readings: TRANSIT_TICK_LOG=1 writes them)")
    )
    ax.set_ylabel("GiB")
    ax.set_xlabel("time since libtransit started (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


PLOTS = {"migration-sizes.png": migration_sizes, "timeline.png": timeline, "ranks.png": ranks, "control.png": control}


def write_plots(report: Report, directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    return [plot(report, directory / name) for name, plot in PLOTS.items()]
