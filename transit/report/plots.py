"""--plot DIR: the report's PNGs (matplotlib, Agg backend). A plot without data is not written; the
caller prints the one line that says why instead. Every colour has a legend entry, every memory plot
the limit (or the GPU's capacity) and the measured bound's peak as lines on its axis, and many ranks
are drawn as a distribution."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from transit.figures import save_png
from transit.report.aggregate import HISTOGRAM_BUCKETS, RankRow, Report
from transit.report.units import format_count_short

GIB = 1024**3
LEGEND_MAX_RANKS = 8  # up to this many ranks, one colour and legend entry per rank; above, one colour for all
BARS_MAX_RANKS = 64  # up to this many ranks, one bar per rank; above, the distribution over ranks
RANK_COLOUR = "tab:blue"  # every rank's line when there are too many for a colour each
LIMIT_STYLE = {"color": "black", "linestyle": "--", "linewidth": 1, "zorder": 1}  # under the ranks' lines
PEAK_STYLE = {"color": "tab:red", "linestyle": ":", "linewidth": 1.2, "zorder": 1}
HEADROOM = 1.08  # above the highest of the data, the limit and the peak: each line clear of the frame
MEDIAN_STYLE = {"color": "gray", "linestyle": ":", "linewidth": 1.2}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _name(report: Report) -> str:
    h = report.header
    return f"job {h.shown_id or h.job_id}" if h.shown_id or h.job_id else "run outside Slurm"


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    save_png(fig, path, dpi=120)
    _pyplot().close(fig)
    return path


def _caps(rows: list[RankRow]) -> list[tuple[float, str]]:
    """The memory ceilings to draw, in GiB: each limit (limit mode), else each GPU's capacity."""
    limits = sorted({row.limit_bytes for row in rows if row.mode == "limit" and row.limit_bytes})
    if limits:
        return [(limit / GIB, f"limit {limit / GIB:.1f} GiB") for limit in limits]
    totals = sorted({row.device_total_bytes for row in rows if row.cuda_active and row.device_total_bytes})
    return [(total / GIB, f"GPU capacity {total / GIB:.1f} GiB") for total in totals]


def _ceilings(ax: Any, rows: list[RankRow], peak_gib: float | None, peak_label: str) -> list[Any]:
    """Draws each limit (or GPU capacity) and the measured bound's peak as horizontal lines, and
    fixes the y-axis from 0 to above the highest of them and the data, so that neither is ever cut
    off (an axis fixed before the lines were drawn hid a 25.5 GiB limit under a 26.3 GiB peak).
    Returns their legend handles."""
    from matplotlib.lines import Line2D

    ax.autoscale()
    tops = [ax.get_ylim()[1]]
    handles = []
    for cap, label in _caps(rows):
        ax.axhline(cap, **LIMIT_STYLE)
        handles.append(Line2D([], [], label=label, **LIMIT_STYLE))
        tops.append(cap)
    if peak_gib is not None:
        ax.axhline(peak_gib, **PEAK_STYLE)
        handles.append(Line2D([], [], label=f"{peak_label} {peak_gib:.1f} GiB", **PEAK_STYLE))
        tops.append(peak_gib)
    ax.set_ylim(0, max(tops) * HEADROOM)
    return handles


def _bound_peak_gib(rows: list[RankRow]) -> float | None:
    """The highest measured bound on the device's managed data over the ranks (the stats' peak)."""
    peaks = [row.device_bound_peak_bytes for row in rows if row.device_bound_peak_bytes]
    return max(peaks) / GIB if peaks else None


def _rank_colours(rows: list[RankRow]) -> tuple[list[str], list[Any]]:
    """A colour per line and the legend handles that explain them: per rank for a few ranks, one
    colour ("each line one rank") for many."""
    from matplotlib.lines import Line2D

    if len(rows) <= LEGEND_MAX_RANKS:
        colours = [f"C{index % 10}" for index in range(len(rows))]
        return colours, [Line2D([], [], color=c, label=row.who) for c, row in zip(colours, rows)]
    return [RANK_COLOUR] * len(rows), [Line2D([], [], color=RANK_COLOUR, label=f"{len(rows)} ranks, a line each")]


def migration_sizes(report: Report, path: Path) -> Path | str:
    buckets = list(HISTOGRAM_BUCKETS)
    series = (("HtoD (to the GPU)", report.job.htod_histogram, "tab:blue"),
              ("DtoH (to the host)", report.job.dtoh_histogram, "tab:orange"))
    if not any(histogram.get(b, 0) for _, histogram, _ in series for b in buckets):
        return "migrations recorded (no migration histogram in the stats)"
    plt = _pyplot()
    width = 0.4
    fig, ax = plt.subplots(figsize=(7, 4))
    for offset, (label, histogram, colour) in zip((-width / 2, width / 2), series):
        counts = [histogram.get(b, 0) for b in buckets]
        bars = ax.bar([i + offset for i in range(len(buckets))], counts, width=width, label=label, color=colour)
        ax.bar_label(bars, labels=[format_count_short(c) if c else "" for c in counts], fontsize="x-small",
                     padding=2)
    ax.set_yscale("log")  # one size class often outnumbers another a thousandfold
    most = max(h.get(b, 0) for _, h, _ in series for b in buckets)
    ax.set_ylim(0.8, most * 30)  # room above the bars for their counts and the legend
    ax.set_xticks(range(len(buckets)), buckets)
    ax.set_xlabel("migration size")
    ax.set_ylabel("migrations, all ranks (log scale)")
    ax.set_title(f"Migration sizes, {_name(report)}")
    ax.legend(loc="upper right")
    return _save(fig, path)


def _stairs(edges: list[float], values: list[float]) -> Any:
    """The polyline of a step plot: each value held from one edge to the next."""
    import numpy as np

    return np.column_stack([np.repeat(edges, 2)[1:-1], np.repeat(values, 2)])


def timeline(report: Report, path: Path) -> Path | str:
    """One line per rank in three LineCollections (one artist each, not one per rank: a thousand
    ranks plot in about a second)."""
    series = [(row, row.intervals) for row in report.ranks if row.intervals]
    if not series:
        return "timeline samples in the stats (libtransit samples at iteration marks)"
    plt = _pyplot()
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    fig, (moved_ax, resident_ax) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    htod, dtoh, resident = [], [], []
    for _, intervals in series:
        edges = [intervals[0].start_t] + [i.t for i in intervals]
        htod.append(_stairs(edges, [i.htod_bytes / GIB for i in intervals]))
        dtoh.append(_stairs(edges, [i.dtoh_bytes / GIB for i in intervals]))
        resident.append([(i.t, i.resident_bytes / GIB) for i in intervals])
    colours, rank_handles = _rank_colours([row for row, _ in series])
    style = {"linewidths": 0.6, "alpha": 0.4} if len(series) > LEGEND_MAX_RANKS else {"linewidths": 1.2}
    moved_ax.add_collection(LineCollection(htod, colors=colours, **style))
    moved_ax.add_collection(LineCollection(dtoh, colors=colours, linestyles="dashed", **style))
    resident_ax.add_collection(LineCollection(resident, colors=colours, zorder=2, **style))
    moved_ax.autoscale()
    moved_ax.set_ylim(bottom=0)
    rows = [row for row, _ in series]
    cap_handles = _ceilings(resident_ax, rows, _bound_peak_gib(rows), "measured bound peak")
    moved_ax.set_ylabel("migrated per interval (GiB)")
    moved_ax.set_title(f"Migrations and resident memory over time, {_name(report)}")
    resident_ax.set_ylabel("resident on GPU (GiB)")
    resident_ax.set_xlabel("time since rank start (s)")
    kinds = [Line2D([], [], color="gray", label="HtoD (to the GPU)"),
             Line2D([], [], color="gray", linestyle="--", label="DtoH (to the host)")]
    moved_ax.legend(handles=kinds + (rank_handles if len(series) > LEGEND_MAX_RANKS else []), fontsize="small")
    resident_ax.legend(handles=rank_handles + cap_handles, fontsize="small")
    return _save(fig, path)


def _per_rank(ax: Any, rows: list[RankRow], values: list[float], colour: str, label: str) -> None:
    """Bars, one per rank, for a few ranks; for many, the distribution: how many ranks had each value."""
    if len(values) <= BARS_MAX_RANKS:
        ax.bar(range(len(values)), values, color=colour, label=label)
        ax.set_xticks(range(len(rows)), [row.label if row.rank is not None else row.who for row in rows],
                      fontsize="x-small")
        ax.set_xlim(-1, max(len(rows), 4))  # a bar or two stay bars, not a wall
    else:
        ax.hist(values, bins=min(50, max(10, len(set(values)))), color=colour, label=label)
        ax.set_ylabel("ranks")


def ranks(report: Report, path: Path) -> Path | str:
    rows = [row for row in report.ranks if row.cuda_active]
    if not rows:
        return "rank figures (no rank used CUDA)"
    plt = _pyplot()
    many = len(rows) > BARS_MAX_RANKS
    panels: list[tuple[str, Callable[[RankRow], float], str]] = [
        ("peak resident on the GPU (GiB)", lambda r: r.resident_peak_bytes / GIB, "tab:green"),
        ("peak spilled to the host (GiB)", lambda r: r.spilled_peak_bytes / GIB, "tab:orange"),
        ("mean step time (s)", lambda r: r.step_time_mean_s or 0.0, "tab:blue"),
    ]
    fig, axes = plt.subplots(3, 1, figsize=(8 if many else max(6, min(24, 0.25 * len(rows))), 8))
    for ax, (label, value, colour) in zip(axes, panels):
        values = [value(row) for row in rows]
        _per_rank(ax, rows, values, colour, label)
        line = ax.axvline if many else ax.axhline
        if value is panels[0][1]:
            for cap, cap_label in _caps(rows):
                line(cap, label=cap_label, **LIMIT_STYLE)
        if value is panels[2][1] and report.iterations.step_time_p50_s is not None:
            line(report.iterations.step_time_p50_s, label="median step time", **MEDIAN_STYLE)
        (ax.set_xlabel if many else ax.set_ylabel)(label)
        ax.set_ylim(top=ax.get_ylim()[1] * 1.3)  # room for the legend above the bars
        ax.legend(fontsize="small", loc="upper right")
    what = f"distribution over {len(rows)} ranks" if many else "per rank"
    axes[0].set_title(f"Memory and step time, {what}, {_name(report)}")
    return _save(fig, path)


def control(report: Report, path: Path) -> Path | str:
    """Limit mode's measured bound over time from the tick logs (TRANSIT_TICK_LOG=1), one line per
    rank in one LineCollection, each limit dashed."""
    logged, lines = [], []
    for row in report.ranks:
        line = [(t, b / GIB) for t, b in row.tick_log.readings()] if row.tick_log else []
        if line:  # a log without readings has nothing to draw
            logged.append(row)
            lines.append(line)
    if not lines:
        return "tick log with readings (limit mode with TRANSIT_TICK_LOG=1 writes one beside each stats file)"
    plt = _pyplot()
    from matplotlib.collections import LineCollection

    fig, ax = plt.subplots(figsize=(8, 4))
    colours, handles = _rank_colours(logged)
    ax.add_collection(LineCollection(lines, colors=colours, linewidths=0.7))
    peak = max(b for line in lines for _, b in line)
    handles += _ceilings(ax, logged, peak, "bound peak")
    ax.legend(handles=handles, fontsize="small")
    ax.set_title(f"Managed data on the device (measured bound), {_name(report)}")
    ax.set_ylabel("GiB")
    ax.set_xlabel("time since libtransit started (s)")
    return _save(fig, path)


PLOTS = {"migration-sizes.png": migration_sizes, "timeline.png": timeline, "ranks.png": ranks, "control.png": control}


def write_plots(report: Report, directory: Path) -> tuple[list[Path], list[str]]:
    """The PNGs written, and for each plot without data the line that says so."""
    directory.mkdir(parents=True, exist_ok=True)
    written, skipped = [], []
    for name, plot in PLOTS.items():
        result = plot(report, directory / name)
        if isinstance(result, Path):
            written.append(result)
        else:
            (directory / name).unlink(missing_ok=True)  # an old plot of other data would mislead
            skipped.append(f"{name} not written: no {result}")
    return written, skipped
