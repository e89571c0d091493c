"""Cluster-level metrics of one replay, and their comparison between the two scenarios.

Per replay (every job it ran, including those only one replay could run): makespan (first
submit to last end), GPU busy and idle hours (held: whole nodes for multi-node jobs) and
utilization, and the network: bytes across rack boundaries and between nodes (``network.py``),
and the contention delay (hours the jobs ran longer than they would have on uncontended uplinks,
and those hours x the GPUs held).

Per group of jobs (``all``: the jobs both replays ran; ``eligible``: those of them that ran on
more than one node): throughput (jobs per hour from the first submit to the group's last end),
queue time (start - submit; mean, p50, p95), racks spanned (mean, share on more than one),
share on a single node, bytes across racks and between nodes, contention delay. The comparison
takes job-level figures from the groups, so both sides count the same jobs. An empty group keeps
every key, with null values.

Comparison: each metric's baseline and TRANSIT values, the absolute change, and the relative
change, which is null when the baseline is under the metric's ``relative_floor`` (a few seconds of
queue read as a huge percentage) or is null itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transit.sim.scenario import Run

HOUR_S = 3600.0


def _stat(values: np.ndarray, how) -> float | None:
    return float(how(values)) if len(values) else None


def _group(run: Run, submit: np.ndarray, mask: np.ndarray, origin: float) -> dict:
    count = int(mask.sum())
    queue = (run.start - submit)[mask]
    racks = run.racks[mask]
    span_h = (float(run.end[mask].max()) - origin) / HOUR_S if count else 0.0
    return {
        "jobs": count,
        "throughput_jobs_per_hour": count / span_h if span_h > 0 else None,
        "queue": {"mean_s": _stat(queue, np.mean), "p50_s": _stat(queue, lambda q: np.percentile(q, 50)),
                  "p95_s": _stat(queue, lambda q: np.percentile(q, 95))},
        "mean_racks": _stat(racks, np.mean),
        "multi_rack_share_pct": _stat(racks, lambda r: 100 * (r > 1).mean()),
        "single_node_share_pct": _stat(run.nodes[mask], lambda n: 100 * (n == 1).mean()),
        "cross_rack_bytes": float(run.cross_rack_bytes[mask].sum()),
        "inter_node_bytes": float(run.inter_node_bytes[mask].sum()),
        "contention_h": float(run.contention_s[mask].sum() / HOUR_S),
    }


BACKLOG_SAMPLES = 200        # moments of the trace's last quarter at which the queue is measured
BACKLOG_GROWTH_SHARE = 0.1   # the cluster falls behind by this share of the quarter's time: "not settled"


def _waiting(moments: np.ndarray, submit: np.ndarray, start: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Sum of ``weight`` over the jobs waiting (submitted, not started) at each moment."""
    def arrived_by(times: np.ndarray) -> np.ndarray:
        order = np.argsort(times, kind="stable")
        total = np.concatenate(([0.0], np.cumsum(weight[order])))
        return total[np.searchsorted(times[order], moments, side="right")]
    return arrived_by(submit) - arrived_by(start)


def backlog(run: Run, submit: np.ndarray) -> dict:
    """Whether the replay's queue settles. At ``BACKLOG_SAMPLES`` moments of the last quarter of
    the trace's submit span: the jobs waiting, and the work waiting in seconds of the whole
    cluster (GPU-seconds asked / the cluster's GPUs). A least-squares line through the work gives
    its growth over the quarter; growth above ``BACKLOG_GROWTH_SHARE`` of the quarter's length
    means the cluster kept falling behind (offered more than it can run): its queue figures then
    grow with the trace's length."""
    ran = run.ran
    arrived, began = submit[ran], run.start[ran]
    if len(arrived) < 2 or arrived.max() <= arrived.min():
        return {"first_s": None, "last_s": None, "queued_at_first": 0, "queued_at_last": 0,
                "work_growth_s": 0.0, "settles": True}
    first, last = arrived.min() + 0.75 * (arrived.max() - arrived.min()), float(arrived.max())
    moments = np.linspace(first, last, BACKLOG_SAMPLES)
    jobs = _waiting(moments, arrived, began, np.ones(len(arrived)))
    work = _waiting(moments, arrived, began, (run.gpus * run.run_time)[ran] / run.total_gpus)
    growth = float(np.polyfit(moments, work, 1)[0] * (last - first))
    return {"first_s": float(first), "last_s": last, "queued_at_first": int(jobs[0]),
            "queued_at_last": int(jobs[-1]), "work_growth_s": growth,
            "settles": bool(growth <= BACKLOG_GROWTH_SHARE * (last - first))}


def summarize(run: Run, submit: np.ndarray, compared: np.ndarray, eligible: np.ndarray) -> dict:
    """Metrics of ``run``; groups over ``compared`` jobs (and those of them ``eligible``)."""
    ran = run.ran
    origin = float(submit[ran].min()) if ran.any() else 0.0
    makespan_h = (float(run.end[ran].max()) - origin) / HOUR_S if ran.any() else 0.0
    busy_h = float((run.held_gpus * np.where(ran, run.end - run.start, 0.0)).sum() / HOUR_S)
    available_h = run.total_gpus * makespan_h
    contention = run.contention_s
    return {
        "jobs_replayed": int(ran.sum()),
        "makespan_h": makespan_h,
        "gpu_busy_h": busy_h,
        "gpu_idle_h": available_h - busy_h,
        "gpu_utilization_pct": 100 * busy_h / available_h if available_h else None,
        "network": {
            "cross_rack_bytes": float(run.cross_rack_bytes.sum()),
            "inter_node_bytes": float(run.inter_node_bytes.sum()),
            "contention_h": float(contention.sum() / HOUR_S),
            "contention_gpu_h": float((contention * run.held_gpus).sum() / HOUR_S),
            "jobs_slowed": int((contention > 0).sum()),
        },
        "backlog": backlog(run, submit),
        "all": _group(run, submit, compared, origin),
        "eligible": _group(run, submit, compared & eligible, origin),
    }


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    path: tuple[str, ...]
    unit: str
    lower_is_better: bool
    relative_floor: float     # a baseline under this shows the absolute change only


QUEUE_FLOOR_S = 60.0   # under a minute of queue, a relative change says little
COMPARED = (
    Metric("throughput_all", "throughput (all)", ("all", "throughput_jobs_per_hour"), "jobs/h", False, 0.1),
    Metric("throughput_eligible", "throughput (eligible)", ("eligible", "throughput_jobs_per_hour"), "jobs/h",
           False, 0.1),
    Metric("makespan", "makespan", ("makespan_h",), "h", True, 1.0),
    Metric("queue_mean_all", "mean queue time (all)", ("all", "queue", "mean_s"), "s", True, QUEUE_FLOOR_S),
    Metric("queue_p50_all", "p50 queue time (all)", ("all", "queue", "p50_s"), "s", True, QUEUE_FLOOR_S),
    Metric("queue_p95_all", "p95 queue time (all)", ("all", "queue", "p95_s"), "s", True, QUEUE_FLOOR_S),
    Metric("queue_mean_eligible", "mean queue time (eligible)", ("eligible", "queue", "mean_s"), "s", True,
           QUEUE_FLOOR_S),
    Metric("queue_p95_eligible", "p95 queue time (eligible)", ("eligible", "queue", "p95_s"), "s", True,
           QUEUE_FLOOR_S),
    Metric("mean_racks_eligible", "mean racks per job (eligible)", ("eligible", "mean_racks"), "racks", True, 1.0),
    Metric("multi_rack_share_eligible", "multi-rack jobs (eligible)", ("eligible", "multi_rack_share_pct"), "%",
           True, 1.0),
    Metric("cross_rack_bytes", "cross-rack traffic", ("all", "cross_rack_bytes"), "B", True, 1e12),
    Metric("inter_node_bytes", "inter-node traffic", ("all", "inter_node_bytes"), "B", True, 1e12),
    Metric("contention", "uplink contention delay", ("all", "contention_h"), "h", True, 1.0),
    # the GPU-hours jobs held: the same jobs on fewer, less efficient GPUs hold more of them, which is
    # also why idle time can fall without any job gaining
    Metric("gpu_busy", "GPU time held by jobs", ("gpu_busy_h",), "GPU-h", True, 1.0),
    Metric("gpu_idle", "GPU idle time", ("gpu_idle_h",), "GPU-h", True, 1.0),
    Metric("gpu_utilization", "GPU utilization", ("gpu_utilization_pct",), "%", False, 1.0),
    Metric("single_node_share_eligible", "single-node eligible jobs", ("eligible", "single_node_share_pct"), "%",
           False, 1.0),
)
BY_KEY = {metric.key: metric for metric in COMPARED}


def lookup(summary: dict, path: tuple[str, ...]) -> float | None:
    value = summary
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return None if value is None else float(value)


def change(metric: Metric, baseline: float | None, transit: float | None) -> dict:
    absolute = None if baseline is None or transit is None else transit - baseline
    relative = None
    if absolute is not None and abs(baseline) >= metric.relative_floor:
        relative = 100 * absolute / baseline
    return {"label": metric.label, "unit": metric.unit, "baseline": baseline, "transit": transit,
            "change": absolute, "change_pct": relative, "relative_floor": metric.relative_floor,
            "lower_is_better": metric.lower_is_better}


def compare(baseline: dict, transit: dict) -> dict:
    return {m.key: change(m, lookup(baseline, m.path), lookup(transit, m.path)) for m in COMPARED}


def worse(entry: dict) -> bool:
    """True when TRANSIT makes the metric worse (by any amount)."""
    if entry["change"] is None or entry["change"] == 0:
        return False
    return entry["change"] > 0 if entry["lower_is_better"] else entry["change"] < 0
