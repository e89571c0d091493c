"""The report as text tables, coloured by the thresholds in thresholds.py."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table
from rich.text import Span, Text

from transit.report.aggregate import RankRow, Report, Totals
from transit.report.load import ReportWarning
from transit.report.notes import ADVICE, WARNING, Note
from transit.report.thresholds import (
    SMALL_MIGRATION_BYTES,
    SMALL_MIGRATION_SHARE,
    STRAGGLER_RATIO,
    THRASHING_EVENTS,
    UNDERUSED_CAP_SHARE,
)
from transit.report.units import (
    format_bytes,
    format_bytes_short,
    format_count_short,
    format_seconds,
)

GOOD, CAUTION, BAD, MUTED, UNDERUSED = "green", "yellow", "red", "dim", "cyan"
RANKS_LEGEND = (
    f"Peak: peak bytes resident on the GPU (cyan: under {UNDERUSED_CAP_SHARE:.0%} of the cap). "
    "Spill: peak bytes left on the host. "
    f"<{format_bytes_short(SMALL_MIGRATION_BYTES)}: share of HtoD migrations under "
    f"{format_bytes(SMALL_MIGRATION_BYTES)}. 0-copy: bytes the GPU read from host memory in place. "
    "Step s: mean step time in seconds. Rec.: recorder state. Sizes in binary units (1.5G = 1.5 GiB)."
)
NOTE_STYLES = {ADVICE: ("→", "cyan"), WARNING: ("!", "yellow"), "info": ("·", "")}


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


def _header(report: Report) -> Table:
    h = report.header
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    title = f"job {h.job_id or '?'}" + (f" ({h.name})" if h.name else "")
    limit = {"limit": format_bytes(h.limit_bytes), "physical": "none (physical mode)"}.get(h.mode or "", "-")
    source = {
        "sacct": "sacct (accounting)",
        "squeue": "squeue (controller)",
        "stats-files": "none (header from the stats files)",
    }.get(h.source, h.source)
    for key, value in (
        ("TRANSIT report", title),
        ("state", h.state or "-"),
        ("elapsed", format_seconds(h.elapsed_s)),
        ("nodes", f"{h.num_nodes}" + (f"  {h.nodelist}" if h.nodelist else "")),
        ("GPUs", str(h.num_gpus)),
        ("policy", h.policy or "-"),
        ("mode / limit", f"{h.mode or '-'} / {limit}"),
        ("Slurm facts", source),
        ("stats from", report.directory),
    ):
        grid.add_row(key, value)
    return grid


def _ranks_table(report: Report) -> Grid:
    multi_step = len({row.step for row in report.ranks}) > 1
    timed = [row.step_time_mean_s for row in report.ranks if row.step_time_mean_s]
    median_step = statistics.median(timed) if timed else None
    columns = ["Job step"] if multi_step else []
    columns += [
        "Rank",
        "Node",
        "GPU",
        "Peak",
        "Spill",
        "HtoD",
        f"<{format_bytes_short(SMALL_MIGRATION_BYTES)}",
        "DtoH",
        "Faults",
        "Thrash",
        "0-copy",
        "Iters",
        "Step s",
        "Rec.",
    ]
    table = Grid("Ranks", columns, {"Job step", "Node", "Rec."})
    for row in report.ranks:
        cells = [(str(row.step), "")] if multi_step else []
        table.add_row(cells + _rank_cells(row, median_step), "" if row.cuda_active else MUTED)
    return table


def _peak_style(row: RankRow) -> str:
    """Red above the limit; cyan far under the cap (the job could use fewer GPUs)."""
    if row.overshoot_peak_bytes > 0:
        return BAD
    if row.cuda_active and row.cap_bytes and row.resident_peak_bytes < UNDERUSED_CAP_SHARE * row.cap_bytes:
        return UNDERUSED
    return ""


def _rank_cells(row: RankRow, median_step: float | None) -> list[Cell]:
    small = row.small_htod_share
    small_style = (
        CAUTION if small is not None and small > SMALL_MIGRATION_SHARE and row.policy != "prefetch" else ""
    )
    straggler = bool(
        median_step and row.step_time_mean_s and row.step_time_mean_s > STRAGGLER_RATIO * median_step
    )
    recorder = row.recorder_state or "-"
    recorder_style = {"degraded": CAUTION, "off": MUTED}.get(recorder, "")
    if row.dropped_records:
        recorder, recorder_style = f"{recorder}, {format_count_short(row.dropped_records)} dropped", BAD
    return [
        (row.label, ""),
        (row.node or "?", ""),
        ("-" if row.device is None or not row.cuda_active else str(row.device), ""),
        (format_bytes_short(row.resident_peak_bytes), _peak_style(row)),
        (format_bytes_short(row.spilled_peak_bytes), CAUTION if row.spilled_peak_bytes > 0 else ""),
        (format_bytes_short(row.htod_bytes), ""),
        ("-" if small is None else f"{small:.0%}", small_style),
        (format_bytes_short(row.dtoh_bytes), ""),
        (format_count_short(row.gpu_page_faults), ""),
        (format_count_short(row.thrashing), BAD if row.thrashing >= THRASHING_EVENTS else ""),
        (format_bytes_short(row.remote_map_bytes), ""),
        (format_count_short(row.iterations), ""),
        ("-" if row.step_time_mean_s is None else f"{row.step_time_mean_s:.3g}", BAD if straggler else ""),
        (recorder, recorder_style),
    ]


def _totals_table(report: Report) -> Grid:
    columns = [
        "Node",
        "Ranks",
        "GPUs",
        "Peaks",
        "Spill",
        "HtoD",
        "DtoH",
        "Faults",
        "Thrash",
        "0-copy",
        "Prefetch",
        "Evict",
    ]
    table = Grid("Totals per node and for the job", columns, {"Node"})

    def add(totals: Totals, style: str = "") -> None:
        s = totals.sums
        values = [
            totals.name,
            str(totals.ranks),
            str(totals.gpus),
            format_bytes_short(s["resident_peak_bytes"]),
            format_bytes_short(s["spilled_peak_bytes"]),
            format_bytes_short(s["htod_bytes"]),
            format_bytes_short(s["dtoh_bytes"]),
            format_count_short(s["gpu_page_faults"]),
            format_count_short(s["thrashing"]),
            format_bytes_short(s["remote_map_bytes"]),
            format_bytes_short(s["prefetch_bytes"]),
            format_bytes_short(s["eviction_bytes"]),
        ]
        table.add_row([(value, "") for value in values], style)

    for node in report.nodes:
        add(node)
    table.add_section()
    add(report.job, "bold")
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
    text = Text.assemble(
        ("Iterations: ", "bold"), f"{counts} per rank, detected by {', '.join(it.methods) or 'nothing'}"
    )
    if it.step_time_mean_s is not None:
        text.append(
            f"; step time mean {format_seconds(it.step_time_mean_s)}, p50 "
            f"{format_seconds(it.step_time_p50_s)}, ranks {format_seconds(it.step_time_min_s)}"
            f" to {format_seconds(it.step_time_max_s)} (slowest: rank {it.slowest_rank})"
        )
    return text


def _notes(notes: list[Note]) -> list[Text]:
    lines = [Text("Notes", style="bold")]
    for note in notes:
        mark, style = NOTE_STYLES.get(note.level, ("·", ""))
        lines.append(Text.assemble(f" {mark} ", (f"[{note.code}] ", style or MUTED), note.message))
    if not notes:
        lines.append(Text(" nothing to suggest", style=GOOD))
    return lines


def _warnings(warnings: list[ReportWarning]) -> list[Text]:
    return [
        Text.assemble(("warning ", "bold yellow"), (f"[{w.code}] ", "yellow"), w.message) for w in warnings
    ]


def render(report: Report, notes: list[Note], console: Console) -> None:
    console.print(_header(report))
    console.print()
    if report.ranks:
        # soft_wrap: table rows are never folded or cropped by rich (the terminal may still wrap them)
        console.print(_ranks_table(report).text(), soft_wrap=True)
        console.print(Text(RANKS_LEGEND, style=MUTED))
        console.print()
        console.print(_totals_table(report).text(), soft_wrap=True)
        console.print()
        console.print(_iterations(report))
        console.print()
    for line in (_notes(notes) if report.ranks else []) + _warnings(report.warnings):
        console.print(line)
