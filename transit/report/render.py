"""The report as text: a header saying how the job ran, rank and node tables coloured by the
thresholds in thresholds.py, notes and warnings. A job of many ranks gets a view that fits a screen."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Span, Text

from transit.report.aggregate import RankRow, Report, Totals
from transit.report.load import NO_SLURM_FACTS, ReportWarning
from transit.report.notes import ADVICE, WARNING, Note
from transit.report.thresholds import (
    SMALL_MIGRATION_BYTES,
    SMALL_MIGRATION_SHARE,
    STRAGGLER_RATIO,
    THRASHING_EVENTS,
    UNDERUSED_CAP_SHARE,
)
from transit.report.units import (
    format_age,
    format_count_short,
    format_seconds,
)
from transit.units import format_bytes, format_bytes_short

GOOD, CAUTION, BAD, MUTED, UNDERUSED = "green", "yellow", "red", "dim", "cyan"
NOTE_STYLES = {ADVICE: ("→", "cyan"), WARNING: ("!", "yellow"), "info": ("·", "")}
# A job of up to this many ranks (nodes) shows every one; above it, the default view shows the spread,
# the top ranks by a metric and the outliers, and the top nodes, so 1,000 ranks fit in about 60 lines.
ALL_RANKS_UP_TO = 16
ALL_NODES_UP_TO = 16
DEFAULT_TOP = 5
# Each kind of input warning is shown in full this many times; more are folded into a count and examples.
WARNING_EXAMPLES = 3
POLICY_SOURCES = {
    "stats-files": "from the ranks' stats",
    "step-files": "from the plugin's step files: no rank wrote stats",
    "stats-files+step-files": "from the ranks' stats, and the step files of steps without stats",
    "submit-line": "from the submit line (sacct): no rank wrote stats, no step file",
}
FACT_SOURCES = {
    "sacct": "sacct (accounting)",
    "squeue": "squeue (controller)",
    "step-files": "none (header from the step files)",
    "stats-files": "none (header from the stats files)",
}


Cell = tuple[str, str]  # text, style


@dataclass
class Grid:
    """A fixed-width table drawn as one Text. rich's Table costs about a millisecond per row, too slow
    for a job of a thousand ranks; this one prints a row in microseconds."""

    title: str
    columns: list[str]
    left_aligned: set[str]
    rows: list[tuple[list[Cell], str] | None] = field(default_factory=list)  # None: blank line

    def add_row(self, cells: list[Cell], style: str = "") -> None:
        self.rows.append((cells, style))

    def add_section(self) -> None:
        self.rows.append(None)

    def text(self) -> Text:
        widths = [len(name) for name in self.columns]
        for row in self.rows:
            for i, (cell, _) in enumerate(row[0] if row else []):
                widths[i] = max(widths[i], len(cell))
        pads = [str.ljust if name in self.left_aligned else str.rjust for name in self.columns]
        if self.columns[-1] in self.left_aligned:  # no trailing spaces after the last column
            pads[-1] = lambda text, _: text
        header = " ".join(pad(name, w) for pad, name, w in zip(pads, self.columns, widths))
        lines = [self.title, header, "─" * len(header)]
        spans = [Span(0, len(self.title) + 1 + len(header), "bold")]
        offset = sum(len(line) + 1 for line in lines)
        for row in self.rows:
            cells, row_style = row if row else ([], "")
            parts = []
            for i, (cell, style) in enumerate(cells):
                part = pads[i](cell, widths[i])
                if style or row_style:  # most cells have no style: spans only where needed
                    spans.append(Span(offset, offset + len(part), style or row_style))
                parts.append(part)
                offset += len(part) + 1
            lines.append(" ".join(parts))
            offset += 0 if parts else 1
        return Text("\n".join(lines), spans=spans)


@dataclass(frozen=True)
class Column:
    """A rank table column: its heading, the rank's value, how a value is written, and the cell's
    colour (by the thresholds). Spread rows write the min, median and max value the same way."""

    heading: str
    value: Callable[[RankRow], Any]
    write: Callable[[Any], str] = str
    style: Callable[[RankRow, float | None], str] = lambda row, median_step: ""
    numeric: bool = True


def _peak_style(row: RankRow, _: float | None) -> str:
    """Red above the limit; cyan far under the cap (the job could use fewer GPUs)."""
    if row.overshoot_peak_bytes > 0:
        return BAD
    if row.cuda_active and row.cap_bytes and row.resident_peak_bytes < UNDERUSED_CAP_SHARE * row.cap_bytes:
        return UNDERUSED
    return ""


def _straggler(row: RankRow, median_step: float | None) -> bool:
    return bool(median_step and row.step_time_mean_s and row.step_time_mean_s > STRAGGLER_RATIO * median_step)


def _small_style(row: RankRow, _: float | None) -> str:
    small = row.small_htod_share
    return CAUTION if small is not None and small > SMALL_MIGRATION_SHARE and row.policy != "prefetch" else ""


def _recorder(row: RankRow) -> str:
    state = row.recorder_state or "-"
    return f"{state}, {format_count_short(row.dropped_records)} dropped" if row.dropped_records else state


def _recorder_style(row: RankRow, _: float | None) -> str:
    return BAD if row.dropped_records else {"degraded": CAUTION, "off": MUTED}.get(row.recorder_state or "", "")


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _step(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


RANK_COLUMNS = {
    "rank": Column("Rank", lambda r: r.label, numeric=False),
    "node": Column("Node", lambda r: r.node or "?", numeric=False),
    "gpu": Column("GPU", lambda r: "-" if r.device is None or not r.cuda_active else str(r.device), numeric=False),
    "peak": Column("Peak", lambda r: r.resident_peak_bytes, format_bytes_short, _peak_style),
    "spill": Column("Spill", lambda r: r.spilled_peak_bytes, format_bytes_short,
                    lambda r, _: CAUTION if r.spilled_peak_bytes > 0 else ""),
    "htod": Column("HtoD", lambda r: r.htod_bytes, format_bytes_short),
    "small": Column(f"<{format_bytes_short(SMALL_MIGRATION_BYTES)}", lambda r: r.small_htod_share, _share,
                    _small_style),
    "dtoh": Column("DtoH", lambda r: r.dtoh_bytes, format_bytes_short),
    "faults": Column("Faults", lambda r: r.gpu_page_faults, format_count_short),
    "thrash": Column("Thrash", lambda r: r.thrashing, format_count_short,
                     lambda r, _: BAD if r.thrashing >= THRASHING_EVENTS else ""),
    "zero-copy": Column("0-copy", lambda r: r.remote_map_bytes, format_bytes_short),
    "iters": Column("Iters", lambda r: r.iterations, format_count_short),
    "step": Column("Step s", lambda r: r.step_time_mean_s, _step, lambda r, m: BAD if _straggler(r, m) else ""),
    "recorder": Column("Rec.", _recorder, style=_recorder_style, numeric=False),
}
# --sort METRIC: the numeric columns
SORT_METRICS = tuple(key for key, column in RANK_COLUMNS.items() if column.numeric)
DEFAULT_SORT = "step"

COLOUR_LEGEND = (
    f"Colours: red = above the limit (Peak), a straggler (step time over {STRAGGLER_RATIO:g}x the median), "
    f"thrashing, or dropped records; yellow = spilled to the host, over {SMALL_MIGRATION_SHARE:.0%} of "
    "migrations small (policy not prefetch), or the recorder degraded; cyan = peak under "
    f"{UNDERUSED_CAP_SHARE:.0%} of the cap (fewer GPUs would do); dim = a process that never used CUDA."
)
COLUMN_LEGEND = (
    "Peak: peak bytes resident on the GPU. Spill: peak bytes left on the host. "
    f"<{format_bytes_short(SMALL_MIGRATION_BYTES)}: share of HtoD migrations under "
    f"{format_bytes(SMALL_MIGRATION_BYTES)}. 0-copy: bytes the GPU read from host memory in place. "
    "Step s: mean step time. Rec.: recorder state. Sizes in binary units (1.5G = 1.5 GiB)."
)


@dataclass(frozen=True)
class View:
    """What the tables show: every rank and node, or the top ones by `sort` (and the spread)."""

    top: int | None = DEFAULT_TOP  # None: every row (--ranks all)
    sort: str | None = None  # None: in rank order; the top view sorts by DEFAULT_SORT

    @property
    def metric(self) -> str:
        return self.sort or DEFAULT_SORT

    def shows_all(self, count: int, up_to: int) -> bool:
        return self.top is None or count <= up_to


def _title(report: Report) -> str:
    h = report.header
    if h.job_id is None and h.source == "stats-files":
        processes = sorted({row.who for row in report.ranks if row.rank is None})
        return "a run outside Slurm (no job id)" + (f": {', '.join(processes[:2])}" if processes else "")
    shown = h.shown_id or h.job_id or "?"
    own = f" = job {h.job_id}" if h.job_id and shown != h.job_id else ""
    return f"job {shown}{own}" + (f" ({h.name})" if h.name else "")


def _how_run(report: Report) -> list[tuple[str, str]]:
    h = report.header
    if h.policy is None and h.policy_source is None:
        return [("policy", "- (nothing says how TRANSIT ran: no stats, no step file, no submit line)")]
    limit = {"limit": format_bytes(h.limit_bytes), "physical": "none (physical mode)"}.get(h.mode or "", "-")
    lines = [
        ("policy", f"{h.policy or 'the plugin default'}  ({POLICY_SOURCES.get(h.policy_source or '', '')})"),
        ("mode / limit", f"{h.mode or '-'} / {limit}"),
    ]
    if len(report.steps) > 1:
        for step in report.steps[:WARNING_EXAMPLES]:
            limit_text = f" {format_bytes(step.limit_bytes)}" if step.limit_bytes else ""
            tasks = step.ntasks if step.ntasks is not None else "?"
            what = f"{step.policy} {step.mode}{limit_text} on {step.nodes or '?'}, {tasks} task{'s' * (tasks != 1)}"
            lines.append((f"step {step.step_id}", what))
        if len(report.steps) > WARNING_EXAMPLES:
            lines.append(("", f"and {len(report.steps) - WARNING_EXAMPLES} more steps (--json lists them)"))
    return lines


def _stats_line(report: Report) -> str:
    if report.directory is None:
        return "-"
    if not report.ranks:
        return f"none in {report.directory}"
    text = f"{len(report.ranks)} rank{'s' if len(report.ranks) > 1 else ''} in {report.directory}"
    partial = [row for row in report.ranks if row.partial]
    if partial:
        ages = [report.now_unix - row.written_unix for row in partial if row.written_unix]
        written = f", latest written {format_age(min(ages))} ago" if ages else ""
        text += f" ({len(partial)} partial{written})"
    return text


def _header(report: Report) -> Table:
    h = report.header
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    forgotten = any(w.code == NO_SLURM_FACTS for w in report.warnings)
    nodes = f"{h.num_nodes if h.num_nodes is not None else '?'}  {h.nodelist}" if h.nodelist else (
        str(h.num_nodes) if h.num_nodes is not None else "-")
    rows = [
        ("TRANSIT report", _title(report)),
        *([("user", h.user)] if h.user else []),
        *([("state", h.state or ("- (Slurm has no record of the job now)" if forgotten else "-"))]
          if h.job_id else []),
        ("elapsed", format_seconds(h.elapsed_s)),
        ("nodes", nodes),
        ("GPUs", "-" if h.num_gpus is None else str(h.num_gpus)),
        *_how_run(report),
        ("Slurm facts", FACT_SOURCES.get(h.source, h.source)),
        ("stats", _stats_line(report)),
    ]
    for key, value in rows:
        grid.add_row(key, value)
    return grid


def _median_step(rows: list[RankRow]) -> float | None:
    timed = [row.step_time_mean_s for row in rows if row.step_time_mean_s]
    return statistics.median(timed) if timed else None


def _sort_value(row: RankRow, metric: str) -> float:
    value = RANK_COLUMNS[metric].value(row)
    return float(value) if value is not None else float("-inf")


def _outlier(row: RankRow, median_step: float | None, any_cuda: bool) -> bool:
    """A rank outside the thresholds that are about that rank alone (not the job-wide advice)."""
    return (_straggler(row, median_step) or row.overshoot_peak_bytes > 0 or row.dropped_records > 0
            or bool(row.cuda_error) or row.recorder_state == "degraded" or (any_cuda and not row.cuda_active))


def _spread_cells(rows: list[RankRow], columns: list[str], name: str, pick: Callable[[list[float]], float]) -> list[Cell]:
    cells: list[Cell] = []
    for key in columns:
        column = RANK_COLUMNS[key]
        if key == "rank":
            cells.append((name, "bold"))
            continue
        values = [v for v in (column.value(row) for row in rows) if v is not None] if column.numeric else []
        value = pick(values) if values else None
        # the median of counts is written as a count
        value = round(value) if value is not None and all(isinstance(v, int) for v in values) else value
        cells.append((column.write(value) if values else "", ""))
    return cells


def _ranks_table(report: Report, view: View) -> Grid:
    rows = report.ranks
    multi_step = len({row.step for row in rows}) > 1
    keys = list(RANK_COLUMNS)
    columns = (["Job step"] if multi_step else []) + [RANK_COLUMNS[key].heading for key in keys]
    median_step = _median_step(rows)

    def cells(row: RankRow) -> list[Cell]:
        first = [(str(row.step), "")] if multi_step else []
        return first + [(RANK_COLUMNS[k].write(RANK_COLUMNS[k].value(row)), RANK_COLUMNS[k].style(row, median_step))
                        for k in keys]

    if view.shows_all(len(rows), ALL_RANKS_UP_TO):
        shown = sorted(rows, key=lambda r: _sort_value(r, view.metric), reverse=True) if view.sort else rows
        table = Grid("Ranks", columns, {"Job step", "Node", "Rec."})
        for row in shown:
            table.add_row(cells(row), "" if row.cuda_active else MUTED)
        return table
    top = sorted(rows, key=lambda r: _sort_value(r, view.metric), reverse=True)[: view.top]
    any_cuda = any(row.cuda_active for row in rows)
    outliers = [row for row in rows if _outlier(row, median_step, any_cuda) and row not in top]
    heading = RANK_COLUMNS[view.metric].heading
    table = Grid(
        f"Ranks ({len(rows)} on {len(report.nodes)} nodes): the spread, the {len(top)} highest by {heading}"
        + (f", {min(len(outliers), view.top or 0)} of {len(outliers)} outliers" if outliers else "")
        + " (--ranks all shows every rank, --sort METRIC orders them)",
        columns, {"Job step", "Node", "Rec."},
    )
    padding = [("", "")] if multi_step else []
    for name, pick in (("min", min), ("median", statistics.median), ("max", max)):
        table.add_row(padding + _spread_cells(rows, keys, name, pick), MUTED)
    table.add_section()
    for row in top:
        table.add_row(cells(row), "" if row.cuda_active else MUTED)
    if outliers:
        table.add_section()
        for row in outliers[: view.top]:
            table.add_row(cells(row), "" if row.cuda_active else MUTED)
    return table


NODE_COLUMNS = ("Node", "Ranks", "GPUs", "Peaks", "Spill", "HtoD", "DtoH", "Faults", "Thrash", "0-copy", "Prefetch",
                "Evict")
NODE_SUMS = ("resident_peak_bytes", "spilled_peak_bytes", "htod_bytes", "dtoh_bytes", "gpu_page_faults", "thrashing",
             "remote_map_bytes", "prefetch_bytes", "eviction_bytes")


def _node_cells(totals: Totals) -> list[Cell]:
    s = totals.sums
    counts = ("gpu_page_faults", "thrashing")
    values = [totals.name, str(totals.ranks), str(totals.gpus)] + [
        format_count_short(s[key]) if key in counts else format_bytes_short(s[key]) for key in NODE_SUMS]
    return [(value, "") for value in values]


def _totals_table(report: Report, view: View) -> Grid:
    nodes = report.nodes
    if view.shows_all(len(nodes), ALL_NODES_UP_TO):
        table = Grid("Totals per node and for the job", list(NODE_COLUMNS), {"Node"})
    else:
        by_node = {node.name: [row for row in report.ranks if (row.node or "?") == node.name] for node in nodes}
        nodes = sorted(nodes, key=lambda n: max(_sort_value(r, view.metric) for r in by_node[n.name]),
                       reverse=True)[: view.top]
        table = Grid(f"Totals: the {len(nodes)} of {len(report.nodes)} nodes with the highest "
                     f"{RANK_COLUMNS[view.metric].heading} on a rank, and the job", list(NODE_COLUMNS), {"Node"})
    for node in nodes:
        table.add_row(_node_cells(node))
    table.add_section()
    table.add_row(_node_cells(report.job), "bold")
    return table


def _iterations(report: Report) -> Text:
    it = report.iterations
    if it.iterations_max is None:
        return Text("Iterations: no rank used CUDA", style=MUTED)
    counts = (
        str(it.iterations_min)
        if it.iterations_min == it.iterations_max
        else f"{it.iterations_min}-{it.iterations_max}"
    )
    per = "per rank" if len(report.ranks) > 1 else ""
    text = Text.assemble(("Iterations: ", "bold"), f"{counts} {per}".strip() + f", detected by "
                         f"{', '.join(it.methods) or 'nothing'}")
    if it.step_time_mean_s is not None:
        text.append(f"; step time mean {format_seconds(it.step_time_mean_s)}, p50 {format_seconds(it.step_time_p50_s)}")
    if it.timed_ranks > 1:
        text.append(f", rank means {format_seconds(it.step_time_min_s)} to {format_seconds(it.step_time_max_s)} "
                    f"(slowest: {it.slowest})")
    return text


def _hybrid_placement(report: Report) -> Text | None:
    """Where hybrid placed the data, summed over its ranks, by reuse class (the most phases of one
    profiled iteration that touch a 2 MiB chunk): kept on the GPU, or left on the host and read in place,
    or streamed in and back by its mover (a part of the host bytes in the stats file)."""
    placed: dict[str, dict[str, int]] = {}
    for row in report.ranks:
        if row.policy != "hybrid":
            continue
        for reuse, where in row.hybrid_by_reuse.items():
            into = placed.setdefault(reuse, {"resident_bytes": 0, "host_bytes": 0, "streamed_bytes": 0})
            for key in into:
                into[key] += where.get(key, 0)
    if not placed:
        return None
    for where in placed.values():
        where["host_bytes"] -= where["streamed_bytes"]

    def side(key: str) -> str:
        parts = [f"{format_bytes(where[key])} (reuse {reuse})" for reuse, where in placed.items() if where[key]]
        return ", ".join(parts) or "nothing"

    streamed = (f"; streamed in and back each iteration by its mover, {side('streamed_bytes')}"
                if any(where["streamed_bytes"] for where in placed.values()) else "")
    return Text.assemble(("Hybrid placement: ", "bold"), f"on the GPU {side('resident_bytes')}; on the host, "
                         f"read in place, {side('host_bytes')}{streamed}; reuse: the most phases of one profiled "
                         "iteration that touch a 2 MiB chunk")


def _predictions(report: Report) -> list[Text]:
    """Per rank with a profile: replay's steady iteration against the measured one."""
    lines = []
    for p in report.predictions:
        model = f"{p.policy} with its mover's plan" if p.look_ahead else p.policy
        step = (f"a step {format_seconds(p.step_s)} (kernels {format_seconds(p.compute_s)}, --compute-s)"
                if p.step_s is not None else "a step: give --compute-s")
        measured = (f"{format_seconds(p.measured_step_s)} measured (p50)" if p.measured_step_s is not None
                    else "no step measured")
        moved = f"HtoD {format_bytes(p.htod_bytes)}, DtoH {format_bytes(p.dtoh_bytes)}"
        if p.measured_htod_bytes is not None and p.measured_dtoh_bytes is not None:
            moved += (f" against {format_bytes(p.measured_htod_bytes)} and {format_bytes(p.measured_dtoh_bytes)} "
                      "in the last iteration")
        lines.append(Text.assemble((f"Replay of rank {p.rank}'s profile ", "bold"), f"({model}): {step}, against "
                                   f"{measured}; {moved}; read in place {format_bytes(p.zero_copy_bytes)}, streamed "
                                   f"{format_bytes(p.streamed_bytes)} each way per iteration"))
    return lines


def _notes(notes: list[Note]) -> list[Text]:
    lines = [Text("Notes", style="bold")]
    for note in notes:
        mark, style = NOTE_STYLES.get(note.level, ("·", ""))
        lines.append(Text.assemble(f" {mark} ", (f"[{note.code}] ", style or MUTED), note.message))
    if not notes:
        lines.append(Text(" nothing to suggest", style=GOOD))
    return lines


def folded_warnings(warnings: list[ReportWarning]) -> list[Text]:
    """One line per warning; a code seen more than WARNING_EXAMPLES times becomes one line with its count
    and that many examples."""
    by_code: dict[str, list[ReportWarning]] = {}
    for warning in warnings:
        by_code.setdefault(warning.code, []).append(warning)
    lines = []
    for code, group in by_code.items():
        head = Text.assemble(("warning ", "bold yellow"), (f"[{code}] ", "yellow"))
        if len(group) <= WARNING_EXAMPLES:
            lines += [head.copy().append(w.message) for w in group]
            continue
        lines.append(head.append(f"{len(group)} times; {WARNING_EXAMPLES} of them (--json lists all):"))
        lines += [Text(f"    {w.message}") for w in group[:WARNING_EXAMPLES]]
    return lines


def render(report: Report, notes: list[Note], console: Console, view: View | None = None) -> None:
    view = view or View()
    console.print(_header(report))
    console.print()
    if report.no_stats_reason:
        console.print(Text.assemble(("No stats: ", "bold yellow"), report.no_stats_reason))
    if report.ranks:
        # soft_wrap: table rows are never folded or cropped by rich (the terminal may still wrap them)
        console.print(_ranks_table(report, view).text(), soft_wrap=True)
        legend = (COLOUR_LEGEND + " " if console.color_system else "") + COLUMN_LEGEND
        console.print(Text(legend, style=MUTED))
        console.print()
        console.print(_totals_table(report, view).text(), soft_wrap=True)
        console.print()
        console.print(_iterations(report))
        if placement := _hybrid_placement(report):
            console.print(placement)
        for line in _predictions(report):
            console.print(line)
        console.print()
        for line in _notes(notes):
            console.print(line)
    for line in folded_warnings(report.warnings):
        console.print(line)
