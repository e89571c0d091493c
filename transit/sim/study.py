"""One study: replay a trace as is and with TRANSIT, and compare (what `transit simulate` prints)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from transit.errors import UsageError
from transit.sim import metrics
from transit.sim.scenario import (
    Run,
    Setup,
    Trace,
    describe_model,
    describe_setup,
    nodes_per_cluster,
    run_baseline,
    run_transit,
    shape,
)
from transit.sim.validation import validate


def _dropped(run: Run) -> dict:
    reasons = Counter(reason for reason in run.drop_reason if reason)
    return {"count": int((~run.ran).sum()), "by_reason": dict(reasons.most_common())}


def check_not_all_dropped(trace: Trace, setup: Setup) -> None:
    """Refuse a setup under which a replay would have no job at all (before any replay starts)."""
    sized = shape(trace, setup)
    for name, racks, nodes in (("baseline", setup.baseline_cluster_racks, sized.nodes),
                               ("TRANSIT", setup.racks, sized.transit_nodes)):
        limit = nodes_per_cluster(racks, setup.gpus_per_node)
        if len(trace) and not (nodes <= limit).any():
            raise UsageError(f"all {len(trace):,} jobs dropped from the {name} replay: each is larger than the "
                             f"{limit} nodes of {racks} racks (the smallest takes {int(nodes.min())}); raise --racks")


def transitions(baseline: Run, transit: Run, reduced: np.ndarray, eligible: np.ndarray) -> dict:
    both = baseline.ran & transit.ran
    before, after = baseline.racks[both & reduced], transit.racks[both & reduced]
    return {
        "inter_to_intra": int(((before > 1) & (after == 1)).sum()),
        "intra_to_inter": int(((before == 1) & (after > 1)).sum()),
        "unchanged": int((((before > 1) & (after > 1)) | ((before == 1) & (after == 1))).sum()),
        "not_reduced": int((both & eligible & ~reduced).sum()),
    }


def _warnings(comparison: dict, jobs: dict, validation: dict | None) -> list[str]:
    notes = []
    for key in ("queue_mean_all", "queue_p95_all", "queue_mean_eligible", "queue_p95_eligible"):
        entry = comparison[key]
        if metrics.worse(entry):
            notes.append(f"{entry['label']} rises with TRANSIT: {entry['baseline']:,.0f} s -> "
                         f"{entry['transit']:,.0f} s ({entry['change']:+,.0f} s)")
    for name, dropped in (("baseline", jobs["dropped"]["baseline"]), ("TRANSIT", jobs["dropped"]["transit"])):
        if dropped["count"]:
            reasons = "; ".join(f"{n:,} {why}" for why, n in dropped["by_reason"].items())
            notes.append(f"{dropped['count']:,} jobs dropped from the {name} replay: {reasons}")
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


def study(trace: Trace, setup: Setup, baseline: Run | None = None, progress=None) -> tuple[dict, Run, Run]:
    """Baseline and TRANSIT replays of ``trace`` under ``setup`` (``baseline`` may be reused), the
    study's document and both runs. ``progress(run, done, total)`` reports replay progress."""
    total = len(trace)

    def reporter(name: str):
        return None if progress is None else (lambda done, jobs: progress(name, done, jobs))

    base = baseline or run_baseline(trace, setup, reporter("baseline"))
    transit = run_transit(trace, setup, base, reporter("transit"))
    sized = shape(trace, setup)
    compared = base.ran & transit.ran
    base_summary = metrics.summarize(base, trace.submit, compared, sized.eligible)
    transit_summary = metrics.summarize(transit, trace.submit, compared, sized.eligible)
    comparison = metrics.compare(base_summary, transit_summary)
    jobs = {
        "in_trace": total,
        "compared": int(compared.sum()),
        "eligible": int((compared & sized.eligible).sum()),
        "reduced": int((compared & sized.reduced).sum()),
        "only_baseline": int((base.ran & ~transit.ran).sum()),
        "only_transit": int((transit.ran & ~base.ran).sum()),
        "dropped": {"baseline": _dropped(base), "transit": _dropped(transit)},
    }
    validation = validate(trace, base)
    document = {
        "setup": describe_setup(setup),
        "model": describe_model(setup),
        "jobs": jobs,
        "validation": validation,
        "baseline": base_summary,
        "transit": transit_summary,
        "comparison": comparison,
        "transitions": transitions(base, transit, sized.reduced, sized.eligible),
        "warnings": _warnings(comparison, jobs, validation),
        "replay_seconds": {"baseline": round(base.seconds, 3), "transit": round(transit.seconds, 3)},
    }
    return document, base, transit
