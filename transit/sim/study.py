"""One study: replay a trace as is and with TRANSIT, and compare (what `transit simulate` prints)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np

from transit.sim import metrics
from transit.sim.engine import Replay
from transit.sim.placement import RACK_GPUS
from transit.sim.scenario import Factors, Trace, run_baseline, run_transit


@dataclass(frozen=True)
class Setup:
    racks: int
    gpus_per_node: int
    reduction: float
    placement: str = "pack"
    backfill: bool = False
    factors: Factors = field(default_factory=Factors)
    baseline_racks: int | None = None    # replay the baseline on another cluster size

    @property
    def baseline_cluster_racks(self) -> int:
        return self.baseline_racks or self.racks


def eligible_mask(trace: Trace, gpus_per_node: int) -> np.ndarray:
    """Eligible jobs: those that need more than one node."""
    return np.asarray(trace.gpus) > gpus_per_node


def transitions(baseline: Replay, transit: Replay, eligible: np.ndarray) -> dict:
    before = np.asarray(baseline.racks)[eligible]
    after = np.asarray(transit.racks)[eligible]
    return {
        "inter_to_intra": int(((before > 1) & (after == 1)).sum()),
        "intra_to_inter": int(((before == 1) & (after > 1)).sum()),
        "unchanged": int((((before > 1) & (after > 1)) | ((before == 1) & (after == 1))).sum()),
    }


def baseline_result(trace: Trace, setup: Setup) -> tuple[Replay, float]:
    began = time.perf_counter()
    result = run_baseline(trace, setup.baseline_cluster_racks, setup.gpus_per_node, setup.placement,
                          setup.backfill)
    return result, time.perf_counter() - began


def study(trace: Trace, setup: Setup, baseline: tuple[Replay, float] | None = None) -> dict:
    """Baseline and TRANSIT replays of ``trace`` under ``setup``; ``baseline`` may be reused."""
    base, base_seconds = baseline or baseline_result(trace, setup)
    began = time.perf_counter()
    transit = run_transit(trace, setup.racks, setup.gpus_per_node, setup.placement, setup.backfill,
                          setup.reduction, setup.factors, base.racks)
    transit_seconds = time.perf_counter() - began
    eligible = eligible_mask(trace, setup.gpus_per_node)
    base_summary = metrics.summarize(trace.submit, trace.duration, eligible, base)
    transit_summary = metrics.summarize(trace.submit, trace.duration, eligible, transit)
    return {
        "setup": {
            "racks": setup.racks,
            "baseline_racks": setup.baseline_cluster_racks,
            "rack_gpus": RACK_GPUS,
            "gpus_per_node": setup.gpus_per_node,
            "nodes": setup.racks * RACK_GPUS // setup.gpus_per_node,
            "reduction": setup.reduction,
            "placement": setup.placement,
            "backfill": setup.backfill,
            "factors": asdict(setup.factors),
        },
        "jobs": len(trace.submit),
        "eligible_jobs": int(eligible.sum()),
        "too_big_for_cluster": trace.too_big,
        "baseline": base_summary,
        "transit": transit_summary,
        "change_pct": metrics.compare(base_summary, transit_summary),
        "transitions": transitions(base, transit, eligible),
        "replay_seconds": {"baseline": round(base_seconds, 3), "transit": round(transit_seconds, 3)},
    }
