"""Cluster-level metrics of one replay, for all jobs and for eligible (multi-node) jobs.

* throughput: jobs completed per hour over the makespan (first submit to last end); for eligible
  jobs, over first submit to the last eligible end.
* queue time: start - submit; mean, p50, p95.
* rack traversal: racks a job spans; mean, and share of jobs on more than one rack.
* inter-rack traffic proxy: sum over jobs of (racks spanned - 1) x the job's work, where work is
  its run time in the original trace in hours. A job's bytes across rack boundaries grow with the
  boundaries its collectives cross and with its number of training steps; the steps are fixed
  by the work, so stretching a job's run time on fewer nodes does not add traffic. Unit:
  rack-boundary-hours.
* GPU idle time: GPU-hours not held by any job over the makespan (held: whole nodes for
  multi-node jobs), and utilization = held / available.
* single-node share: eligible jobs that ran on one node (after reduction, in the TRANSIT scenario).
"""

from __future__ import annotations

import numpy as np

from transit.sim.engine import Replay

HOUR_S = 3600.0


def _queue_stats(queue: np.ndarray) -> dict:
    if not len(queue):
        return {"mean_s": 0.0, "p50_s": 0.0, "p95_s": 0.0}
    return {"mean_s": float(queue.mean()), "p50_s": float(np.percentile(queue, 50)),
            "p95_s": float(np.percentile(queue, 95))}


def _group(submit: np.ndarray, start: np.ndarray, end: np.ndarray, racks: np.ndarray,
           nodes: np.ndarray, work_h: np.ndarray, origin: float) -> dict:
    count = len(submit)
    if not count:
        return {"jobs": 0}
    span_h = (end.max() - origin) / HOUR_S
    return {
        "jobs": count,
        "throughput_jobs_per_hour": count / span_h if span_h > 0 else 0.0,
        "queue": _queue_stats(start - submit),
        "mean_racks": float(racks.mean()),
        "multi_rack_share_pct": float(100 * (racks > 1).mean()),
        "inter_rack_traffic": float(((racks - 1) * work_h).sum()),
        "single_node_share_pct": float(100 * (nodes == 1).mean()),
    }


def summarize(submit: list[float], original_duration: list[float], eligible: np.ndarray, result: Replay) -> dict:
    """Metrics of ``result`` (one replay of a trace whose submits start at 0)."""
    sub = np.asarray(submit)
    start = np.asarray(result.start)
    end = np.asarray(result.end)
    racks = np.asarray(result.racks)
    nodes = np.asarray(result.nodes)
    work_h = np.asarray(original_duration) / HOUR_S
    held_gpu_h = float((np.asarray(result.held_gpus) * (end - start)).sum() / HOUR_S)
    origin = float(sub.min()) if len(sub) else 0.0
    makespan_h = (float(end.max()) - origin) / HOUR_S if len(sub) else 0.0
    available_gpu_h = result.total_gpus * makespan_h
    summary = {
        "makespan_h": makespan_h,
        "gpu_idle_h": available_gpu_h - held_gpu_h,
        "gpu_utilization_pct": 100 * held_gpu_h / available_gpu_h if available_gpu_h else 0.0,
        "all": _group(sub, start, end, racks, nodes, work_h, origin),
        "eligible": _group(sub[eligible], start[eligible], end[eligible], racks[eligible],
                           nodes[eligible], work_h[eligible], origin),
    }
    return summary


# (label, path into a summary, True when a smaller value is better)
COMPARED = (
    ("throughput (all)", ("all", "throughput_jobs_per_hour"), False),
    ("throughput (eligible)", ("eligible", "throughput_jobs_per_hour"), False),
    ("makespan", ("makespan_h",), True),
    ("mean queue time (all)", ("all", "queue", "mean_s"), True),
    ("p50 queue time (all)", ("all", "queue", "p50_s"), True),
    ("p95 queue time (all)", ("all", "queue", "p95_s"), True),
    ("mean queue time (eligible)", ("eligible", "queue", "mean_s"), True),
    ("p95 queue time (eligible)", ("eligible", "queue", "p95_s"), True),
    ("mean racks per job (eligible)", ("eligible", "mean_racks"), True),
    ("multi-rack jobs (eligible, %)", ("eligible", "multi_rack_share_pct"), True),
    ("inter-rack traffic", ("all", "inter_rack_traffic"), True),
    ("GPU idle time", ("gpu_idle_h",), True),
    ("GPU utilization (%)", ("gpu_utilization_pct",), False),
    ("single-node eligible jobs (%)", ("eligible", "single_node_share_pct"), False),
)


def lookup(summary: dict, path: tuple[str, ...]) -> float:
    value = summary
    for key in path:
        value = value.get(key, 0.0) if isinstance(value, dict) else 0.0
    return float(value)


def change_pct(baseline: float, transit: float) -> float | None:
    """Relative change from baseline to TRANSIT in percent; None when the baseline is 0."""
    if baseline == 0:
        return None
    return 100 * (transit - baseline) / baseline


def compare(baseline: dict, transit: dict) -> dict:
    return {label: change_pct(lookup(baseline, path), lookup(transit, path)) for label, path, _ in COMPARED}
