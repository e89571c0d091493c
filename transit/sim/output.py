"""Output of `transit simulate`: rich tables, JSON documents and Figure-12-style PNG plots."""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

from transit.sim import metrics

# metrics the plots show, as in the paper's Figure 12 (change of TRANSIT against the baseline)
PLOTTED = (
    "inter-rack traffic",
    "mean queue time (all)",
    "mean queue time (eligible)",
    "throughput (eligible)",
    "GPU idle time",
)


def _number(value: float) -> str:
    if abs(value) >= 1e5:
        return f"{value:,.0f}"
    return f"{value:,.4g}" if abs(value) < 10 else f"{value:,.1f}"


def _change(value: float | None, smaller_is_better: bool) -> str:
    if value is None:
        return "n/a"
    better = value < 0 if smaller_is_better else value > 0
    colour = "green" if better and abs(value) >= 0.05 else ("red" if abs(value) >= 0.05 else "")
    text = f"{value:+.1f} %"
    return f"[{colour}]{text}[/{colour}]" if colour else text


def trace_lines(load: dict) -> list[str]:
    kept = f"{load['jobs_kept']:,} meaningful GPU jobs kept"
    lines = [f"trace {load['source']} ({load['format']}): {load['rows']:,} rows, {kept}"]
    if load["bad_rows"]:
        reasons = ", ".join(f"{n:,} {reason}" for reason, n in load["bad_by_reason"].items())
        lines.append(f"[yellow]{load['bad_rows']:,} bad rows not read[/yellow]: {reasons}")
        lines.extend(f"  {example}" for example in load["bad_examples"])
    else:
        lines.append("0 bad rows")
    if load["filtered_rows"]:
        reasons = ", ".join(f"{n:,} {reason}" for reason, n in load["filtered_by_reason"].items())
        lines.append(f"{load['filtered_rows']:,} rows are not meaningful GPU jobs: {reasons}")
    return lines


def print_study(document: dict, console: Console | None = None) -> None:
    console = console or Console()
    for line in trace_lines(document["trace"]):
        console.print(line)
    if "calibration_max_gap_pp" in document:
        gaps = document["calibration_max_gap_pp"]
        console.print("synthetic trace, largest gap to the published ACME CDFs (pp): "
                      + ", ".join(f"{k} {v}" for k, v in gaps.items() if not k.endswith("_pct")))
    setup = document["setup"]
    if document["too_big_for_cluster"]:
        console.print(f"[yellow]{document['too_big_for_cluster']:,} jobs need more GPUs than the cluster has "
                      "and were left out of both replays[/yellow]")
    baseline_where = f"{setup['baseline_racks']} racks" + (
        " (same cluster)" if setup["baseline_racks"] == setup["racks"] else "")
    title = (f"{document['jobs']:,} jobs ({document['eligible_jobs']:,} eligible), baseline on {baseline_where}, "
             f"TRANSIT on {setup['racks']} racks; {setup['gpus_per_node']} GPUs/node, r = {setup['reduction']}, "
             f"{setup['placement']}{', backfill' if setup['backfill'] else ', FIFO'}")
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("baseline", justify="right")
    table.add_column("TRANSIT", justify="right")
    table.add_column("change", justify="right")
    for label, path, smaller_is_better in metrics.COMPARED:
        base = metrics.lookup(document["baseline"], path)
        transit = metrics.lookup(document["transit"], path)
        table.add_row(label, _number(base), _number(transit),
                      _change(document["change_pct"][label], smaller_is_better))
    console.print(table)
    moves = document["transitions"]
    factors = setup["factors"]
    console.print(f"eligible jobs: {moves['inter_to_intra']:,} went from several racks to one "
                  f"(x{1 + factors['inter_to_intra_speedup']:.2f} throughput), {moves['intra_to_inter']:,} "
                  f"from one to several (x{1 - factors['intra_to_inter_slowdown']:.2f}), "
                  f"{moves['unchanged']:,} kept their kind (x{1 + factors['unchanged']:.2f}); "
                  f"factors: {factors['source']}")
    console.print("units: throughput jobs/h, makespan and GPU idle in (GPU-)hours, queue in s, "
                  "inter-rack traffic in rack-boundary-hours")


def print_json(document: dict) -> None:
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _label(study: dict) -> str:
    setup = study["setup"]
    racks = f"{setup['racks']}" + (f"/{setup['baseline_racks']}b" if setup["baseline_racks"] != setup["racks"] else "")
    return (f"{racks} racks, {setup['gpus_per_node']} GPU/node, r={setup['reduction']}, "
            f"+{100 * setup['factors']['inter_to_intra_speedup']:.0f}%/-{100 * setup['factors']['intra_to_inter_slowdown']:.0f}%"
            + ("" if setup["placement"] == "pack" else f", {setup['placement']}"))


def plot_studies(studies: list[dict], path: str, title: str) -> None:
    """Grouped bars: change of each plotted metric, one bar per study (Figure 12 of the paper)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    width = 0.8 / max(len(studies), 1)
    figure, axes = plt.subplots(figsize=(max(8.0, 1.6 * len(PLOTTED) + 0.3 * len(studies)) + 3.5, 4.8))
    positions = np.arange(len(PLOTTED))
    colours = plt.get_cmap("tab20" if len(studies) > 10 else "tab10")
    for index, study in enumerate(studies):
        values = [study["change_pct"][label] or 0.0 for label in PLOTTED]
        axes.bar(positions + (index - (len(studies) - 1) / 2) * width, values, width, label=_label(study),
                 color=colours(index % colours.N))
    axes.axhline(0, color="black", linewidth=0.8)
    axes.set_xticks(positions, [label.replace(" (", "\n(") for label in PLOTTED])
    axes.set_ylabel("change with TRANSIT vs baseline (%)")
    axes.set_title(title)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


SWEEP_COLUMNS = (
    ("inter-rack traffic", "inter-rack traffic"),
    ("queue (all)", "mean queue time (all)"),
    ("queue (eligible)", "mean queue time (eligible)"),
    ("throughput (eligible)", "throughput (eligible)"),
    ("GPU idle", "GPU idle time"),
)


def _seconds(value: float) -> str:
    return f"{value / 3600:,.1f} h" if value >= 36_000 else f"{value:,.0f} s"


def sweep_rows(studies: list[dict]) -> list[list[str]]:
    rows = []
    for study in studies:
        setup = study["setup"]
        changes = study["change_pct"]
        queue = [_seconds(study[side]["all"]["queue"]["mean_s"]) for side in ("baseline", "transit")]
        row = [f"{setup['racks']}", f"{setup['baseline_racks']}", f"{setup['gpus_per_node']}",
               f"{setup['reduction']:g}", setup["placement"],
               f"{100 * setup['factors']['inter_to_intra_speedup']:.0f} %",
               f"{100 * setup['factors']['intra_to_inter_slowdown']:.0f} %"]
        row += ["n/a" if changes[key] is None else f"{changes[key]:+.1f} %" for _, key in SWEEP_COLUMNS]
        row.append(f"{queue[0]} -> {queue[1]}")
        row.append(f"{study['baseline']['gpu_utilization_pct']:.0f} %")
        row.append(f"{study['transit']['eligible'].get('single_node_share_pct', 0.0):.1f} %")
        rows.append(row)
    return rows


SWEEP_HEADER = ["racks", "baseline racks", "GPUs/node", "r", "placement", "inter->intra speedup",
                "intra->inter slowdown",
                *[name for name, _ in SWEEP_COLUMNS], "mean queue (all)", "baseline GPU use",
                "eligible on 1 node"]


def print_sweep(studies: list[dict], console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="TRANSIT vs baseline (change in %)")
    for name in SWEEP_HEADER:
        table.add_column(name, justify="right")
    for row in sweep_rows(studies):
        table.add_row(*row)
    console.print(table)


def markdown_table(studies: list[dict]) -> str:
    lines = ["| " + " | ".join(SWEEP_HEADER) + " |", "|" + "---|" * len(SWEEP_HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in sweep_rows(studies)]
    return "\n".join(lines) + "\n"
