"""The report as one JSON document (schema "transit.report/1"; keys documented in docs/report.md)."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

from transit.report.aggregate import RankRow, Report, Totals
from transit.report.load import StepFile
from transit.report.notes import Note, migrating_interval_share

REPORT_SCHEMA = "transit.report/1"

# RankRow fields left out of "ranks": the timeline and the tick log are for plots, and can be long.
OMITTED_RANK_FIELDS = ("timeline", "tick_log")
RANK_KEYS = [f.name for f in fields(RankRow) if f.name not in OMITTED_RANK_FIELDS]


def _rank(row: RankRow) -> dict[str, Any]:
    out = {name: getattr(row, name) for name in RANK_KEYS}
    out["small_htod_share"] = row.small_htod_share
    out["migrating_interval_share"] = migrating_interval_share(row)
    out["tick_log"] = row.tick_summary
    return out


def _totals(totals: Totals) -> dict[str, Any]:
    return {
        "name": totals.name,
        "ranks": totals.ranks,
        "gpus": totals.gpus,
        **totals.sums,
        "htod_histogram": totals.htod_histogram,
        "dtoh_histogram": totals.dtoh_histogram,
    }


def _step(step: StepFile) -> dict[str, Any]:
    out = asdict(step)
    out["file"] = str(out.pop("path"))
    return out


def report_json(report: Report, notes: list[Note]) -> dict[str, Any]:
    return {
        "schema": REPORT_SCHEMA,
        "directory": report.directory,
        "job": asdict(report.header),
        "steps": [_step(step) for step in report.steps],
        "no_stats_reason": report.no_stats_reason,
        "partial": report.partial,
        "ranks": [_rank(row) for row in report.ranks],
        "nodes": [_totals(node) for node in report.nodes],
        "totals": _totals(report.job),
        "iterations": asdict(report.iterations),
        "predictions": [asdict(prediction) for prediction in report.predictions],
        "notes": [asdict(note) for note in notes],
        "warnings": [asdict(warning) for warning in report.warnings],
    }
