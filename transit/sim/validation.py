"""How well the baseline replay reproduces the trace's recorded queue times, per cluster.

Where the trace records when each job started, the baseline replay (the trace as is, on the
simulated cluster) should reproduce its queues before any TRANSIT figure is believed. Per cluster
of the trace: the recorded and replayed queue times (start - submit; mean, p50, p90) and the
absolute error per job (mean, p50, p90), the mean signed error (positive: the replay queues
longer) and the mean-wait error it makes in per cent of the recorded mean, and the start-order
rank correlation (Spearman's, between the recorded and replayed start times: 1 when the replay
starts the jobs in the order the real scheduler did). A replay whose median error exceeds the larger of the recorded median queue and
``ERROR_FLOOR_S`` does not reproduce the cluster's queues: then TRANSIT's changes are changes to a
simulated cluster that behaves differently from the real one.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr

from transit.sim.scenario import Run, Trace

ERROR_FLOOR_S = 60.0


def _spread(values: np.ndarray) -> dict:
    return {"mean_s": float(values.mean()), "p50_s": float(np.percentile(values, 50)),
            "p90_s": float(np.percentile(values, 90))}


def _cluster(name: str, recorded: np.ndarray, replayed: np.ndarray, recorded_start: np.ndarray,
             replayed_start: np.ndarray) -> dict:
    error = replayed - recorded
    rec = _spread(recorded)
    absolute = np.abs(error)
    ordered = len(recorded) > 1 and np.ptp(recorded_start) > 0 and np.ptp(replayed_start) > 0
    correlation = spearmanr(recorded_start, replayed_start).statistic if ordered else None
    summary = {
        "cluster": name,
        "jobs": len(recorded),
        "recorded_queue": rec,
        "replayed_queue": _spread(replayed),
        "abs_error_mean_s": float(absolute.mean()),
        "abs_error_p50_s": float(np.percentile(absolute, 50)),
        "abs_error_p90_s": float(np.percentile(absolute, 90)),
        "mean_signed_error_s": float(error.mean()),
        "mean_wait_error_pct": float(100 * error.mean() / rec["mean_s"]) if rec["mean_s"] > 0 else None,
        "start_order_rank_correlation": None if correlation is None or np.isnan(correlation) else float(correlation),
    }
    summary["reproduces"] = summary["abs_error_p50_s"] <= max(ERROR_FLOOR_S, rec["p50_s"])
    return summary


def validate(trace: Trace, baseline: Run) -> dict | None:
    """The comparison, or None when the trace records no start time of a job the baseline ran."""
    known = ~np.isnan(trace.recorded_start) & baseline.ran
    if not known.any():
        return None
    recorded_start, replayed_start = trace.recorded_start[known], baseline.start[known]
    recorded = recorded_start - trace.submit[known]
    replayed = replayed_start - trace.submit[known]
    names = np.array([name or "(unnamed)" for name in trace.cluster], dtype=object)[known]
    clusters = [_cluster(str(name), recorded[names == name], replayed[names == name], recorded_start[names == name],
                         replayed_start[names == name]) for name in sorted(set(names))]
    return {"jobs_with_recorded_start": int(known.sum()),
            "jobs_without": int((np.isnan(trace.recorded_start) & baseline.ran).sum()),
            "error_floor_s": ERROR_FLOOR_S, "clusters": clusters}
