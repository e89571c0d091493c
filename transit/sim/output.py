"""Output of `transit simulate`: rich tables, JSON documents, Markdown and Figure-12-style PNG plots.

Every metric shows baseline, TRANSIT, the absolute change and the relative change; the relative
change is "n/a" where the baseline is under the metric's floor or missing, and a plot leaves such
a bar out (marked "n/a") rather than drawing it as zero. Relative changes beyond
``PLOT_CAP_PCT`` are drawn to the cap with their value written on the bar. Queue-time increases
and jobs left out are called out in yellow, after the table and in the study's ``warnings``.
"""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from transit.figures import save_png
from transit.sim import metrics

PLOTTED = ("cross_rack_bytes", "contention", "queue_mean_all", "queue_mean_eligible", "throughput_eligible",
           "gpu_busy", "gpu_idle")
PLOT_CAP_PCT = 100.0
SWEEP_CHANGES = ("cross_rack_bytes", "inter_node_bytes", "contention", "queue_mean_all", "queue_mean_eligible",
                 "throughput_eligible", "gpu_busy", "gpu_idle")
BYTE_UNITS = ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"))


def number(value: float | None, unit: str = "") -> str:
    """A value for a table cell, in a unit that keeps it readable (bytes scaled, long queues in hours)."""
    if value is None:
        return "n/a"
    if unit == "B":
        scale, name = next(((s, n) for s, n in BYTE_UNITS if abs(value) >= s), (1, "B"))
        return f"{value / scale:,.3g} {name}"
    if unit == "s" and abs(value) >= 36_000:
        return f"{value / 3600:,.1f} h"
    suffix = {"s": " s", "h": " h", "GPU-h": " GPU-h", "%": " %"}.get(unit, "")
    if abs(value) >= 1e5:
        return f"{value:,.0f}{suffix}"
    return (f"{value:,.4g}" if abs(value) < 10 else f"{value:,.1f}") + suffix


def signed(value: float | None, unit: str = "") -> str:
    """A change: a difference of percentages is in percentage points."""
    if value is None:
        return "n/a"
    text = f"{abs(value):,.3g} pp" if unit == "%" else number(abs(value), unit)
    return ("+" if value >= 0 else "-") + text


def floor_text(floor: float, unit: str) -> str:
    if unit in ("B", "s", "h", "GPU-h"):
        return number(floor, unit)
    return f"{floor:g} {'pp' if unit == '%' else unit}"


def _percent(entry: dict) -> str:
    value = entry["change_pct"]
    if value is None:
        return "n/a"
    text = f"{value:+.1f} %"
    if abs(value) < 0.05:
        return text
    return f"[red]{text}[/red]" if metrics.worse(entry) else f"[green]{text}[/green]"


def counted(n: int, noun: str) -> str:
    """ "1 row", "2 rows", "1,000 rows"."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def trace_lines(load: dict) -> list[str]:
    kept = f"{counted(load['jobs_kept'], 'meaningful GPU job')} kept"
    lines = [f"trace {load['source']} ({load['format']}): {counted(load['rows'], 'row')}, {kept}"]
    if load["bad_rows"]:
        lines.append(f"[yellow]{counted(load['bad_rows'], 'bad row')} not replayed[/yellow] (by reason, with "
                     f"{load['line_unit']} numbers):")
        for reason, entry in load["bad_by_reason"].items():
            shown = ", ".join(str(n) for n in entry["lines"])
            more = ", ..." if entry["count"] > len(entry["lines"]) else ""
            unit = load["line_unit"] if len(entry["lines"]) == 1 and not more else load["line_unit"] + "s"
            lines.append(f"  {entry['count']:,} {reason}: {unit} {shown}{more}")
    else:
        lines.append("0 bad rows")
    repeated = load["duplicate_ids"]
    if repeated["ids"]:
        more = ", ..." if repeated["ids"] > len(repeated["named"]) else ""
        lines.append(f"[yellow]--dedupe: {counted(repeated['ids'], 'job id')} appeared more than once[/yellow]; the "
                     f"latest record of each kept (latest End, then the later line), "
                     f"{counted(repeated['rows_dropped'], 'older row')} left out: "
                     f"{', '.join(repeated['named'])}{more}")
    if load["filtered_rows"]:
        reasons = ", ".join(f"{n:,} {reason}" for reason, n in load["filtered_by_reason"].items())
        noun = "row is not a meaningful GPU job" if load["filtered_rows"] == 1 else "rows are not meaningful GPU jobs"
        lines.append(f"{load['filtered_rows']:,} {noun}: {reasons}")
    return lines


def model_lines(model: dict) -> list[str]:
    efficiency = model["efficiency"]
    if efficiency["curve"]:
        points = ", ".join(f"{p['removed_fraction']:g}: {p['efficiency']:g}" for p in efficiency["curve"])
        eff = f"by share of nodes removed ({points})"
    else:
        eff = f"{efficiency['value']:g}"
    factors, network = model["factors"], model["network"]
    times = factors["run_time_multipliers"]
    return [
        f"per-GPU efficiency under reduction: {eff} ({efficiency['source']})",
        (f"placement factors: +{100 * factors['inter_to_intra_speedup']:g} % several racks -> one (run time "
         f"x{times['inter_to_intra']:.3g}), -{100 * factors['intra_to_inter_slowdown']:g} % one -> several read as "
         f"{'a throughput loss' if factors['slowdown_reading'] == 'throughput' else 'a run-time increase'} "
         f"(x{times['intra_to_inter']:.3g}), {100 * factors['unchanged']:+g} % otherwise; {factors['source']}"),
        (f"network: {network['nic_gbps']:g} Gb/s per GPU, rack uplinks {network['uplink_gbps']:,.0f} Gb/s each way "
         f"({network['oversubscription']:g}:1), collectives {100 * network['comm_fraction']:g} % of a step at line "
         f"rate, contention {'on' if network['contention'] else 'off'}"),
    ]


def jobs_lines(study: dict) -> list[str]:
    jobs = study["jobs"]
    lines = [(f"{jobs['compared']:,} of {jobs['in_trace']:,} jobs replayed in both scenarios, {jobs['eligible']:,} "
              f"eligible (multi-node), {jobs['reduced']:,} given fewer nodes")]
    left = jobs["left_out"]
    if not left["count"]:
        lines.append("0 jobs left out: both clusters hold every job")
    for reason, entry in left["by_reason"].items():
        lines.append(f"[yellow]{entry['count']:,} jobs left out of both replays[/yellow] "
                     f"({number(entry['gpu_h'], 'GPU-h')} in the trace): {reason}")
    return lines


def unholdable_lines(study: dict) -> list[str]:
    separate = study.get("unholdable_study")
    if separate is None:
        return []
    head = (f"separate study: TRANSIT replayed again with the {separate['admitted_jobs']:,} jobs only it can hold "
            f"({number(separate['admitted_gpu_h'], 'GPU-h')}); the jobs both scenarios replay, without -> with them:")
    return [head] + [
        f"  {entry['label']}: {number(entry['baseline'], entry['unit'])} -> {number(entry['transit'], entry['unit'])} "
        f"({signed(entry['change'], entry['unit'])})" for entry in separate["comparison"].values()]


def validation_lines(validation: dict | None) -> list[str]:
    if validation is None:
        return [("validation: the trace records no start times, so the baseline's queues cannot be checked "
                 "against reality")]
    lines = [(f"validation, before any TRANSIT figure: the baseline replay against "
              f"{validation['jobs_with_recorded_start']:,} recorded start times")]
    for cluster in validation["clusters"]:
        rec, rep = cluster["recorded_queue"], cluster["replayed_queue"]
        verdict = "reproduces" if cluster["reproduces"] else "[yellow]does not reproduce[/yellow]"
        lines.append(f"  {cluster['cluster']}: {cluster['jobs']:,} jobs, queue recorded p50 {number(rec['p50_s'], 's')} "
                     f"p90 {number(rec['p90_s'], 's')}, replayed p50 {number(rep['p50_s'], 's')} p90 "
                     f"{number(rep['p90_s'], 's')}; absolute error p50 {number(cluster['abs_error_p50_s'], 's')} "
                     f"p90 {number(cluster['abs_error_p90_s'], 's')}: the replay {verdict} its queues")
        wait_error, order = cluster["mean_wait_error_pct"], cluster["start_order_rank_correlation"]
        lines.append(f"    mean queue recorded {number(rec['mean_s'], 's')}, replayed {number(rep['mean_s'], 's')} "
                     f"({'n/a' if wait_error is None else f'{wait_error:+.1f} %'}); per-job absolute error mean "
                     f"{number(cluster['abs_error_mean_s'], 's')}; start-order rank correlation "
                     f"{'n/a' if order is None else f'{order:.4f}'}")
    return lines


def _title(study: dict) -> str:
    setup = study["setup"]
    same = setup["baseline_nodes"] == setup["nodes"]
    where = f"{setup['baseline_nodes']} nodes in {setup['baseline_racks']} racks" + (" (same cluster)" if same else "")
    return (f"baseline on {where}, TRANSIT on {setup['nodes']} nodes in {setup['racks']} racks; "
            f"{setup['gpus_per_node']} GPUs/node, "
            f"r = {setup['reduction']}, {setup['placement']}, {'backfill' if setup['backfill'] else 'FIFO'}")


def print_study(document: dict, console: Console | None = None) -> None:
    console = console or Console(soft_wrap=True)
    for line in trace_lines(document["trace"]):
        console.print(line)
    synthetic = document.get("synthetic")
    if synthetic:
        gaps = synthetic["calibration_max_gap_pp"]
        console.print("synthetic trace, largest gap to the published ACME CDFs (pp): "
                      + ", ".join(f"{k} {v}" for k, v in gaps.items() if not k.endswith("_pct")))
    for line in validation_lines(document["validation"]) + model_lines(document["model"]) + jobs_lines(document):
        console.print(line)
    table = Table(title=_title(document))
    for name in ("metric", "baseline", "TRANSIT", "change", "change %"):
        table.add_column(name, justify="left" if name == "metric" else "right")
    for entry in document["comparison"].values():
        unit = entry["unit"]
        table.add_row(entry["label"], number(entry["baseline"], unit), number(entry["transit"], unit),
                      signed(entry["change"], unit), _percent(entry))
    console.print(table)
    floors = {}
    for entry in document["comparison"].values():
        floors.setdefault(floor_text(entry["relative_floor"], entry["unit"]), None)
    console.print("change % is n/a where the baseline is under the floor of its unit: " + ", ".join(floors))
    moves = document["transitions"]
    for line in unholdable_lines(document):
        console.print(line)
    console.print(f"reduced jobs: {moves['inter_to_intra']:,} went from several racks to one, {moves['intra_to_inter']:,} "
                  f"from one to several, {moves['unchanged']:,} kept their kind; {moves['not_reduced']:,} eligible jobs "
                  "kept every node (rounding)")
    for warning in document["warnings"]:
        console.print(f"[yellow]note: {warning}[/yellow]")


def print_json(document: dict) -> None:
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")


def label(study: dict) -> str:
    setup, model = study["setup"], study["model"]
    racks = f"{setup['racks']}" + (f"/{setup['baseline_racks']}b" if setup["baseline_racks"] != setup["racks"] else "")
    return (f"{racks} racks, {setup['gpus_per_node']} GPU/node, r={setup['reduction']}, "
            f"+{100 * model['factors']['inter_to_intra_speedup']:.0f}%/-"
            f"{100 * model['factors']['intra_to_inter_slowdown']:.0f}%"
            + ("" if setup["placement"] == "pack" else f", {setup['placement']}")
            + f"; left out {study['jobs']['left_out']['count']:,}")


def plot_bars(studies: list[dict]) -> list[dict]:
    """What the plot draws, one entry per (study, metric): the bar's slot and offset, its height
    (capped at +-``PLOT_CAP_PCT``), and the text written on it; ``height`` None: no bar, "n/a"."""
    width = 0.8 / max(len(studies), 1)
    bars = []
    for index, study in enumerate(studies):
        offset = (index - (len(studies) - 1) / 2) * width
        for slot, key in enumerate(PLOTTED):
            value = study["comparison"][key]["change_pct"]
            height = None if value is None else max(-PLOT_CAP_PCT, min(PLOT_CAP_PCT, value))
            text = "n/a" if value is None else (f"{value:+,.0f}%" if height != value else "")
            bars.append({"study": index, "slot": slot, "x": slot + offset, "width": width, "height": height,
                         "capped": height is not None and height != value, "text": text})
    return bars


def plot_studies(studies: list[dict], path: str, title: str) -> None:
    """Grouped bars: relative change of each plotted metric, one bar per study (the paper's Figure 12)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(max(8.0, 1.6 * len(PLOTTED) + 0.3 * len(studies)) + 4.5, 5.2))
    colours = plt.get_cmap("tab20" if len(studies) > 10 else "tab10")
    for bar in plot_bars(studies):
        if bar["height"] is None:
            axes.text(bar["x"], 0, bar["text"], rotation=90, ha="center", va="bottom", fontsize=7, color="dimgrey")
            continue
        axes.bar(bar["x"], bar["height"], bar["width"], color=colours(bar["study"] % colours.N),
                 hatch="//" if bar["capped"] else None, edgecolor="black" if bar["capped"] else None)
        if bar["text"]:
            axes.text(bar["x"], bar["height"] / 2, bar["text"], rotation=90, ha="center", va="center", fontsize=7,
                      bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours(i % colours.N)) for i in range(len(studies))]
    axes.legend(handles, [label(s) for s in studies], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                title="TRANSIT racks[/baseline racks], GPUs/node, r, speedup/slowdown; jobs left out of both",
                title_fontsize=7)
    axes.axhline(0, color="black", linewidth=0.8)
    axes.set_ylim(-PLOT_CAP_PCT * 1.08, PLOT_CAP_PCT * 1.08)
    axes.set_xticks(range(len(PLOTTED)), [metrics.BY_KEY[key].label.replace(" (", "\n(").replace(" delay", "\ndelay")
                                          .replace(" held", "\nheld") for key in PLOTTED])
    axes.set_ylabel(f"change with TRANSIT vs baseline (%), capped at ±{PLOT_CAP_PCT:.0f}")
    axes.set_title(title, fontsize=9)
    axes.grid(axis="y", alpha=0.3)
    figure.text(0.01, 0.01, "hatched: beyond the cap (value written); n/a: baseline under the metric's floor, "
                "relative change not meaningful. Lower is better except throughput. Jobs left out: larger than "
                "a cluster can hold, replayed in neither scenario.", fontsize=7)
    figure.tight_layout(rect=(0, 0.03, 1, 1))
    save_png(figure, path, dpi=120)
    plt.close(figure)


SWEEP_HEADER = ["racks", "baseline racks", "GPUs/node", "r", "placement", "inter->intra speedup",
                "intra->inter slowdown", "left out of both (jobs, GPU-h)", "cross-rack traffic", "inter-node traffic",
                "contention delay", "mean queue (all)", "mean queue (eligible)", "eligible throughput",
                "GPU time held", "GPU idle", "baseline GPU use", "eligible on 1 node", "backlog settles (base / TRANSIT)"]


def _change_cell(entry: dict) -> str:
    unit = entry["unit"]
    text = f"{number(entry['baseline'], unit)} -> {number(entry['transit'], unit)}"
    if entry["change_pct"] is not None:
        text += f" ({entry['change_pct']:+.1f} %)"
    elif entry["change"] is not None:
        text += f" ({signed(entry['change'], unit)})"
    return text + (" ▲" if metrics.worse(entry) and entry["key_is_queue"] else "")


def sweep_rows(studies: list[dict]) -> list[list[str]]:
    rows = []
    for study in studies:
        setup, factors = study["setup"], study["model"]["factors"]
        left = study["jobs"]["left_out"]
        row = [f"{setup['racks']}", f"{setup['baseline_racks']}", f"{setup['gpus_per_node']}", f"{setup['reduction']:g}",
               setup["placement"], f"{100 * factors['inter_to_intra_speedup']:.0f} %",
               f"{100 * factors['intra_to_inter_slowdown']:.0f} % ({factors['slowdown_reading']})",
               f"{left['count']:,} ({number(left['gpu_h'], 'GPU-h')})"]
        for key in SWEEP_CHANGES:
            entry = dict(study["comparison"][key], key_is_queue=key.startswith("queue"))
            row.append(_change_cell(entry))
        row.append(number(study["baseline"]["gpu_utilization_pct"], "%"))
        row.append(number(study["transit"]["eligible"]["single_node_share_pct"], "%"))
        row.append(" / ".join("yes" if study[name]["backlog"]["settles"] else "**no**" for name in ("baseline", "transit")))
        rows.append(row)
    return rows


TERMINAL_HEADER = ["racks", "base", "GPU/n", "r", "speedup/slowdown", "left out", "cross-rack", "inter-node",
                   "contention", "queue (all)", "queue (elig.)", "thru. (elig.)", "GPU held", "GPU idle"]


def print_sweep(studies: list[dict], console: Console | None = None) -> None:
    """The sweep as a table that fits a terminal: relative changes (absolute where n/a)."""
    console = console or Console(soft_wrap=True)
    table = Table(title="TRANSIT vs baseline: change (absolute where the relative change is n/a; ▲ queue rises)")
    for name in TERMINAL_HEADER:
        table.add_column(name, justify="right")
    for study in studies:
        setup, factors = study["setup"], study["model"]["factors"]
        row = [f"{setup['racks']}", f"{setup['baseline_racks']}", f"{setup['gpus_per_node']}", f"{setup['reduction']:g}",
               f"+{100 * factors['inter_to_intra_speedup']:.0f}/-{100 * factors['intra_to_inter_slowdown']:.0f} %",
               f"{study['jobs']['left_out']['count']:,}"]
        for key in SWEEP_CHANGES:
            entry = study["comparison"][key]
            cell = _percent(entry) if entry["change_pct"] is not None else signed(entry["change"], entry["unit"])
            row.append(cell + (" ▲" if key.startswith("queue") and metrics.worse(entry) else ""))
        table.add_row(*row)
    console.print(table)
    for study in studies:
        for warning in study["warnings"]:
            console.print(f"[yellow]{label(study)}: {warning}[/yellow]")


def markdown_table(studies: list[dict]) -> str:
    lines = ["| " + " | ".join(SWEEP_HEADER) + " |", "|" + "---|" * len(SWEEP_HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in sweep_rows(studies)]
    return "\n".join(lines) + "\n"


def replay_progress(enabled: bool) -> Progress:
    """Progress bars on stderr (stdout carries the table or the JSON), shown only on a terminal."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, console=Console(stderr=True), disable=not enabled, transient=False)
