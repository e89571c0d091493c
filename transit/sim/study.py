"""One study: replay a trace as is and with TRANSIT, and compare (what `transit simulate` prints).

Both replays run the same jobs (``scenario.left_out``). The notes take each moved figure apart:
how much the reduction itself moved it (longer jobs on fewer nodes, at efficiency 1: a third
replay) and how much the efficiency assumption adds. ``--unholdable-study`` replays TRANSIT once
more with the jobs only it can hold admitted, and reports how much they delay the others.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from transit.errors import UsageError
from transit.sim import metrics
from transit.sim.output import counted, number, signed
from transit.sim.scenario import (
    Efficiency,
    Run,
    Setup,
    Trace,
    describe_model,
    describe_setup,
    held_by_transit,
    left_out,
    run_baseline,
    run_transit,
    shape,
    too_big_for_baseline,
)
from transit.sim.validation import validate

HOUR_S = 3600.0
MEASURED_REDUCTION_MAX = 0.75   # the paper's efficiency curve (section 4.2) ends at 75 % of nodes removed
# The figures whose change the notes take apart into its causes (``_attribution``).
ATTRIBUTED = ("queue_mean_all", "queue_p95_all", "queue_mean_eligible", "queue_p95_eligible", "throughput_eligible",
              "makespan", "gpu_busy", "gpu_idle")
QUEUE_KEYS = ("queue_mean_all", "queue_p95_all", "queue_mean_eligible", "queue_p95_eligible")
# What the separate study of the unholdable jobs reports on the jobs both scenarios replay.
DELAY_KEYS = ("queue_mean_all", "queue_p95_all", "queue_mean_eligible", "throughput_eligible")


def _left_out(trace: Trace, reasons: list[str]) -> dict:
    """The jobs left out of both replays: how many and their GPU-hours in the trace, by reason."""
    gpu_h = trace.gpus * trace.duration / HOUR_S
    by_reason: dict = {}
    for reason, hours in zip(reasons, gpu_h.tolist()):
        if reason:
            entry = by_reason.setdefault(reason, {"count": 0, "gpu_h": 0.0})
            entry["count"] += 1
            entry["gpu_h"] += hours
    return {"count": sum(e["count"] for e in by_reason.values()),
            "gpu_h": sum(e["gpu_h"] for e in by_reason.values()), "by_reason": by_reason}


def check_not_all_dropped(trace: Trace, setup: Setup) -> None:
    """Refuse a setup under which no job could be replayed (before any replay starts)."""
    sized = shape(trace, setup)
    for name, limit, nodes in (("baseline", setup.baseline_cluster_nodes, sized.nodes),
                               ("TRANSIT", setup.cluster_nodes, sized.transit_nodes)):
        if len(trace) and not (nodes <= limit).any():
            raise UsageError(f"all {len(trace):,} jobs dropped from the {name} replay: each is larger than its "
                             f"{limit} nodes (the smallest takes {int(nodes.min())}); raise --racks")
    if len(trace) and all(left_out(setup, sized)):
        raise UsageError(f"all {len(trace):,} jobs left out: none fits both the baseline's and TRANSIT's cluster; "
                         "raise --racks")


def transitions(baseline: Run, transit: Run, reduced: np.ndarray, eligible: np.ndarray) -> dict:
    both = baseline.ran & transit.ran
    before, after = baseline.racks[both & reduced], transit.racks[both & reduced]
    return {
        "inter_to_intra": int(((before > 1) & (after == 1)).sum()),
        "intra_to_inter": int(((before == 1) & (after > 1)).sum()),
        "unchanged": int((((before > 1) & (after > 1)) | ((before == 1) & (after == 1))).sum()),
        "not_reduced": int((both & eligible & ~reduced).sum()),
    }


def efficiency_is_one(setup: Setup) -> bool:
    efficiency = setup.efficiency
    return all(value == 1 for value in ([e for _, e in efficiency.curve] or [efficiency.value]))


def _attribution(comparison: dict, at_efficiency_1: dict | None) -> dict:
    """Per attributed figure, how much of its change each effect made: ``longer_jobs`` (the reduction
    itself: fewer nodes for longer, with the placement factors, at efficiency 1) and ``efficiency``
    (what the efficiency assumption below 1 adds)."""
    parts = {}
    for key in ATTRIBUTED:
        entry = comparison[key]
        if entry["change"] is None:
            parts[key] = {"longer_jobs": None, "efficiency": None}
            continue
        at_one = entry["transit"] if at_efficiency_1 is None else metrics.lookup(at_efficiency_1, metrics.BY_KEY[key].path)
        parts[key] = {"at_efficiency_1": at_one,
                      "longer_jobs": None if at_one is None else at_one - entry["baseline"],
                      "efficiency": None if at_one is None else entry["transit"] - at_one}
    return parts


def _reduction_notes(setup: Setup) -> list[str]:
    if setup.reduction <= MEASURED_REDUCTION_MAX:
        return []
    return [(f"r = {setup.reduction:g} removes more than {100 * MEASURED_REDUCTION_MAX:.0f} % of each eligible "
             "job's nodes: beyond anything the efficiency was measured on (the paper's curve ends at 75 % "
             "removed, this project's 0.898 is at 50 %), so every figure here extrapolates")]


def _moved_note(entry: dict, parts: dict, efficiency: str) -> str:
    unit = entry["unit"]
    head = f"{entry['label']} {'rises' if entry['change'] > 0 else 'falls'} with TRANSIT"
    text = (f"{head}: {number(entry['baseline'], unit)} -> {number(entry['transit'], unit)} "
            f"({signed(entry['change'], unit)})")
    if parts["longer_jobs"] is None:
        return text
    if parts["efficiency"] == 0 and efficiency == "1":
        return f"{text}; all of it from longer jobs (the reduced jobs on fewer nodes, at efficiency 1)"
    return (f"{text}; longer jobs (the reduction at efficiency 1) {signed(parts['longer_jobs'], unit)}, "
            f"the efficiency assumption ({efficiency}) {signed(parts['efficiency'], unit)}")


def backlog_notes(summaries: dict[str, dict]) -> list[str]:
    """A note per replay whose queue still grows over the last quarter of the trace."""
    notes = []
    for name, summary in summaries.items():
        grows = summary["backlog"]
        if grows["settles"]:
            continue
        notes.append(f"the {name}'s backlog does not settle: over the last quarter of the trace, jobs waiting went "
                     f"from {grows['queued_at_first']:,} to {grows['queued_at_last']:,} and the cluster fell "
                     f"{number(grows['work_growth_s'], 's')} further behind; it is offered more than it can run, so "
                     "its queue figures grow with the trace's length: compare them only at one length")
    return notes


def _warnings(comparison: dict, attribution: dict, jobs: dict, validation: dict | None, efficiency: str,
              unholdable: dict | None, unholdable_reason: str) -> list[str]:
    notes = []
    for key in ATTRIBUTED:
        entry = comparison[key]
        if entry["change"] and (key not in QUEUE_KEYS or abs(entry["change"]) >= 1):
            notes.append(_moved_note(entry, attribution[key], efficiency))
    left = jobs["left_out"]
    for reason, entry in left["by_reason"].items():
        note = f"{counted(entry['count'], 'job')} ({number(entry['gpu_h'], 'GPU-h')}) left out of both replays: {reason}"
        if reason == unholdable_reason and unholdable is None:
            note += "; --unholdable-study replays them under TRANSIT as a separate study"
        notes.append(note)
    if unholdable is not None:
        notes.extend(unholdable["notes"])
    if validation:
        for cluster in validation["clusters"]:
            if not cluster["reproduces"]:
                notes.append(f"the baseline does not reproduce cluster {cluster['cluster']}'s recorded queues "
                             f"(median error {cluster['abs_error_p50_s']:,.0f} s against a recorded median of "
                             f"{cluster['recorded_queue']['p50_s']:,.0f} s)")
        if len(validation["clusters"]) > 1:
            notes.append(f"the trace holds {len(validation['clusters'])} clusters, replayed as one "
                         "(--cluster NAME replays one of them)")
    return notes


def unholdable_study(trace: Trace, setup: Setup, baseline: Run, transit: Run, compared: np.ndarray,
                     eligible: np.ndarray) -> dict:
    """TRANSIT replayed again with the jobs only it can hold admitted: how much they delay the
    jobs both scenarios replay (their figures without and with the admitted jobs)."""
    sized = shape(trace, setup)
    reasons = held_by_transit(setup, sized)
    admitted_mask = np.array([not r for r in reasons]) & ~compared
    admitted = _left_out(trace, ["admitted" if a else "" for a in admitted_mask.tolist()])
    both = run_transit(trace, setup, baseline, reasons=reasons)
    without = metrics.summarize(transit, trace.submit, compared, eligible)
    with_them = metrics.summarize(both, trace.submit, compared, eligible)
    comparison = {key: metrics.change(metrics.BY_KEY[key], metrics.lookup(without, metrics.BY_KEY[key].path),
                                      metrics.lookup(with_them, metrics.BY_KEY[key].path)) for key in DELAY_KEYS}
    notes = []
    if admitted["count"]:
        for key in DELAY_KEYS:
            entry = comparison[key]
            unit = entry["unit"]
            if entry["change"] is None:
                continue
            notes.append(f"separate study: admitting the {counted(admitted['count'], 'job')} only TRANSIT can hold "
                         f"({number(admitted['gpu_h'], 'GPU-h')}) moves the {entry['label']} of the others "
                         f"{number(entry['baseline'], unit)} -> {number(entry['transit'], unit)} "
                         f"({signed(entry['change'], unit)})")
    else:
        notes.append("separate study: no job is too large for the baseline's cluster yet fits TRANSIT's")
    return {"admitted_jobs": admitted["count"], "admitted_gpu_h": admitted["gpu_h"],
            "jobs_replayed": int(both.ran.sum()), "comparison": comparison, "notes": notes}


def study(trace: Trace, setup: Setup, baseline: Run | None = None, progress=None,
          with_unholdable: bool = False) -> tuple[dict, Run, Run]:
    """Baseline and TRANSIT replays of ``trace`` under ``setup`` (``baseline`` may be reused), the
    study's document and both runs. ``progress(run, done, total)`` reports replay progress.
    ``with_unholdable``: add the separate study of the jobs only TRANSIT can hold."""
    total = len(trace)

    def reporter(name: str):
        return None if progress is None else (lambda done, jobs: progress(name, done, jobs))

    base = baseline or run_baseline(trace, setup, reporter("baseline"))
    transit = run_transit(trace, setup, base, reporter("transit"))
    sized = shape(trace, setup)
    reasons = left_out(setup, sized)
    compared = base.ran & transit.ran
    base_summary = metrics.summarize(base, trace.submit, compared, sized.eligible)
    transit_summary = metrics.summarize(transit, trace.submit, compared, sized.eligible)
    comparison = metrics.compare(base_summary, transit_summary)
    at_efficiency_1 = None
    if not efficiency_is_one(setup):
        one = replace(setup, efficiency=Efficiency(1.0, (), "1, to take the efficiency assumption apart"))
        at_efficiency_1 = metrics.summarize(run_transit(trace, one, base), trace.submit, compared, sized.eligible)
    attribution = _attribution(comparison, at_efficiency_1)
    jobs = {
        "in_trace": total,
        "compared": int(compared.sum()),
        "eligible": int((compared & sized.eligible).sum()),
        "reduced": int((compared & sized.reduced).sum()),
        "left_out": _left_out(trace, reasons),
    }
    unholdable = unholdable_study(trace, setup, base, transit, compared, sized.eligible) if with_unholdable else None
    validation = validate(trace, base)
    efficiency = "1" if efficiency_is_one(setup) else (
        "a curve" if setup.efficiency.curve else f"{setup.efficiency.value:g}")
    document = {
        "setup": describe_setup(setup),
        "model": describe_model(setup),
        "jobs": jobs,
        "validation": validation,
        "baseline": base_summary,
        "transit": transit_summary,
        "comparison": comparison,
        "attribution": attribution,
        "unholdable_study": unholdable,
        "transitions": transitions(base, transit, sized.reduced, sized.eligible),
        "warnings": _reduction_notes(setup) + backlog_notes({"baseline": base_summary, "TRANSIT replay": transit_summary})
        + _warnings(comparison, attribution, jobs, validation, efficiency,
                                                        unholdable, too_big_for_baseline(setup)),
        "replay_seconds": {"baseline": round(base.seconds, 3), "transit": round(transit.seconds, 3)},
    }
    return document, base, transit
