"""--plot DIR: the report's PNGs (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transit.report.aggregate import HISTOGRAM_BUCKETS, Report

GIB = 1024**3
LEGEND_MAX_RANKS = 8  # above this, per-rank lines carry no legend


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


def timeline(report: Report, path: Path) -> Path:
    plt = _pyplot()
    fig, (moved_ax, resident_ax) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    rows = [row for row in report.ranks if len(row.timeline) > 1]
    thin = len(rows) > LEGEND_MAX_RANKS
    for index, row in enumerate(rows):
        intervals = row.intervals()
        edges = [intervals[0].start_t] + [i.t for i in intervals]
        style = {"linewidth": 0.6, "alpha": 0.5} if thin else {"linewidth": 1.2}
        colour = f"C{index % 10}"  # one colour per rank for its three lines
        moved_ax.stairs(
            [i.htod_bytes / GIB for i in intervals],
            edges,
            color=colour,
            label=f"rank {row.label} HtoD",
            **style,
        )
        moved_ax.stairs(
            [i.dtoh_bytes / GIB for i in intervals],
            edges,
            color=colour,
            linestyle="--",
            label=f"rank {row.label} DtoH",
            **style,
        )
        t = [i.t for i in intervals]
        resident = [i.resident_bytes / GIB for i in intervals]
        resident_ax.plot(t, resident, color=colour, label=f"rank {row.label}", **style)
    moved_ax.set_ylabel("migrated per interval (GiB)")
    moved_ax.set_title(
        f"Migrations and resident memory over time, job {report.header.job_id or '?'}"
        + ("" if rows else " (no timeline samples)")
    )
    resident_ax.set_ylabel("resident on GPU (GiB)")
    resident_ax.set_xlabel("time since rank start (s)")
    if rows and not thin:
        moved_ax.legend(fontsize="small")
        resident_ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def ranks(report: Report, path: Path) -> Path:
    plt = _pyplot()
    labels = [row.label for row in report.ranks]
    fig, (spill_ax, step_ax) = plt.subplots(
        2, 1, sharex=True, figsize=(max(6, min(24, 0.25 * len(labels))), 6)
    )
    positions = range(len(labels))
    spill_ax.bar(positions, [row.spilled_peak_bytes / GIB for row in report.ranks], color="tab:orange")
    spill_ax.set_ylabel("spilled peak (GiB)")
    spill_ax.set_title(f"Per rank, job {report.header.job_id or '?'}")
    step_ax.bar(positions, [row.step_time_mean_s or 0.0 for row in report.ranks], color="tab:blue")
    if report.iterations.step_time_p50_s is not None:
        step_ax.axhline(
            report.iterations.step_time_p50_s,
            color="gray",
            linestyle="--",
            linewidth=1,
            label="median rank step time",
        )
        step_ax.legend(fontsize="small")
    step_ax.set_ylabel("mean step time (s)")
    step_ax.set_xlabel("rank")
    if len(labels) <= 64:
        step_ax.set_xticks(list(positions), labels)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


PLOTS = {"migration-sizes.png": migration_sizes, "timeline.png": timeline, "ranks.png": ranks}


def write_plots(report: Report, directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    return [plot(report, directory / name) for name, plot in PLOTS.items()]
