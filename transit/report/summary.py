"""Several jobs (job ids, an array's tasks, -u USER): one line per job, as reportseff lists them,
with how TRANSIT ran, what its stats say, and the first advice (or why there are no stats)."""

from __future__ import annotations

import statistics
from typing import Any

from rich.console import Console
from rich.text import Text

from transit.report.aggregate import Report
from transit.report.notes import ADVICE, WARNING, Note
from transit.report.render import BAD, CAUTION, GOOD, MUTED, Grid, folded_warnings
from transit.report.units import format_age, format_seconds
from transit.units import format_bytes_short

LIST_SCHEMA = "transit.report-list/1"
STATE_STYLES = {"COMPLETED": GOOD, "RUNNING": "cyan", "PENDING": MUTED, "FAILED": BAD, "TIMEOUT": CAUTION,
                "CANCELLED": CAUTION, "OUT_OF_MEMORY": BAD, "NODE_FAIL": BAD}
COLUMNS = ["JobID", "Name", "State", "Elapsed", "Nodes", "TRANSIT", "Stats", "Peak", "Spill", "HtoD", "Step s",
           "Advice, or why there are no stats"]


def summary(report: Report, notes: list[Note], label: str) -> dict[str, Any]:
    """One job in figures (the --json list's entries; keys in docs/report.md)."""
    h = report.header
    caps = [(row.resident_peak_bytes, row.cap_bytes) for row in report.ranks if row.cuda_active and row.cap_bytes]
    p50s = [row.step_time_p50_s for row in report.ranks if row.step_time_p50_s is not None]
    ages = [report.now_unix - row.written_unix for row in report.ranks if row.partial and row.written_unix]
    return {
        "label": label,
        "job_id": h.job_id,
        "shown_id": h.shown_id,
        "name": h.name,
        "user": h.user,
        "state": h.state,
        "elapsed_s": h.elapsed_s,
        "num_nodes": h.num_nodes,
        "nodelist": h.nodelist,
        "policy": h.policy,
        "mode": h.mode,
        "limit_bytes": h.limit_bytes,
        "policy_source": h.policy_source,
        "directory": report.directory,
        "ranks": len(report.ranks),
        "partial_ranks": sum(row.partial for row in report.ranks),
        "stats_age_s": round(min(ages), 1) if ages else None,
        "peak_cap_share": max((peak / cap for peak, cap in caps), default=None),
        "spilled_peak_bytes": max((row.spilled_peak_bytes for row in report.ranks), default=None),
        "htod_bytes": report.job.sums["htod_bytes"] if report.ranks else None,
        "step_time_p50_s": statistics.median(p50s) if p50s else None,
        "advice": [{"code": n.code, "action": n.action} for n in notes if n.level == ADVICE],
        "no_stats_reason": report.no_stats_reason,
        "warnings": sorted({w.code for w in report.warnings}),
    }


def _transit(entry: dict[str, Any]) -> str:
    if entry["policy"] is None:
        return "-"
    limit = f" {format_bytes_short(entry['limit_bytes'])}" if entry["limit_bytes"] else ""
    return f"{entry['policy']} {entry['mode'] or ''}{limit}".strip()


def _stats(entry: dict[str, Any]) -> str:
    if not entry["ranks"]:
        return "none"
    partial = f", {entry['partial_ranks']} partial" if entry["partial_ranks"] else ""
    age = f" {format_age(entry['stats_age_s'])} old" if entry["stats_age_s"] is not None else ""
    return f"{entry['ranks']} rank{'s' if entry['ranks'] > 1 else ''}{partial}{age}"


def _advice(entry: dict[str, Any], notes: list[Note]) -> tuple[str, str]:
    """The first advice; else the first warning, or that no rank used CUDA; else nothing to suggest."""
    if entry["no_stats_reason"]:
        return entry["no_stats_reason"], MUTED
    advice = [n for n in notes if n.level == ADVICE]
    if advice:
        more = f" (+{len(advice) - 1} more)" if len(advice) > 1 else ""
        return f"try {advice[0].action} [{advice[0].code}]{more}", "cyan"
    worth = [n for n in notes if n.level == WARNING or n.code == "no-cuda"]
    if worth:
        return f"[{worth[0].code}] {worth[0].message}", CAUTION if worth[0].level == WARNING else MUTED
    return "nothing to suggest", GOOD


def render_list(jobs: list[tuple[Report, list[Note], dict[str, Any]]], console: Console) -> None:
    table = Grid(f"TRANSIT report: {len(jobs)} jobs (one line each; give one job id for its full report)",
                 COLUMNS, {"JobID", "Name", "State", "TRANSIT", "Stats", COLUMNS[-1]})
    warnings = []
    for report, notes, entry in jobs:
        state = entry["state"] or "-"
        share = entry["peak_cap_share"]
        advice, advice_style = _advice(entry, notes)
        table.add_row([
            (entry["label"], ""),
            ((entry["name"] or "-")[:20], ""),
            (state, STATE_STYLES.get(state.split("+")[0], "")),
            (format_seconds(entry["elapsed_s"]), ""),
            ("-" if entry["num_nodes"] is None else str(entry["num_nodes"]), ""),
            (_transit(entry), ""),
            (_stats(entry), CAUTION if entry["partial_ranks"] else ""),
            ("-" if share is None else f"{share:.0%}", ""),
            (format_bytes_short(entry["spilled_peak_bytes"]), ""),
            (format_bytes_short(entry["htod_bytes"]), ""),
            ("-" if entry["step_time_p50_s"] is None else f"{entry['step_time_p50_s']:.3g}", ""),
            (advice, advice_style),
        ])
        warnings += [w for w in report.warnings if w.code not in ("no-slurm-facts",)]
    console.print(table.text(), soft_wrap=True)
    console.print(Text("Peak: highest peak device memory of a rank, as a share of its cap (the limit, else the "
                       "GPU). Spill: highest peak left on the host. HtoD: bytes moved to the GPUs. Step s: median "
                       "step time.", style=MUTED))
    for line in folded_warnings(warnings):
        console.print(line)
