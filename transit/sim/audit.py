"""Per-job and per-minute output of the replays (``--jobs-out``, ``--timeline-out``), for audit.

Jobs: one row per job per replay, in the trace's submit order: what it asked for, what it got and
when, or why it was dropped (``JOB_COLUMNS``). Timeline: one row per simulated minute per replay,
each value averaged over the minute (busy GPUs, jobs waiting) or summed in it (bytes across
racks, a job's bytes spread evenly over its run). Both are CSV; a path ending in ``.parquet`` is
written as Parquet, which needs pyarrow. A study column tells the studies of a sweep apart.
"""

from __future__ import annotations

import csv
import importlib.util
import math
from collections.abc import Iterable, Iterator

import numpy as np

from transit.errors import UsageError
from transit.sim.scenario import Run, Shape, Trace

MINUTE_S = 60.0
JOB_COLUMNS = ("study", "run", "job_id", "cluster", "submit_s", "recorded_start_s", "start_s", "end_s", "queue_s",
               "run_time_s", "contention_s", "gpus", "nodes_before", "nodes_after", "held_gpus", "racks",
               "eligible", "reduced", "dropped", "drop_reason", "steps", "cross_rack_bytes", "inter_node_bytes")
TIMELINE_COLUMNS = ("study", "run", "minute", "busy_gpus", "queued_jobs", "cross_rack_bytes")


def check_path(path: str | None, option: str) -> None:
    """Refuse, before any replay, an output that cannot be written as asked."""
    if path and path.endswith(".parquet") and importlib.util.find_spec("pyarrow") is None:
        raise UsageError(f"{option} {path}: Parquet needs pyarrow, which is not installed; use a .csv path")


def _number(value: float) -> str | float:
    return "" if math.isnan(value) else value    # NaN (did not happen) as an empty cell


def job_rows(study: int, name: str, trace: Trace, run: Run, sized: Shape) -> Iterator[tuple]:
    submit = trace.submit
    queue = run.start - submit
    contention = run.contention_s
    cross, inter = run.cross_rack_bytes, run.inter_node_bytes
    for j in range(len(trace)):
        ran = bool(run.ran[j])
        yield (study, name, trace.ids[j], trace.cluster[j], submit[j], _number(trace.recorded_start[j]),
               _number(run.start[j]), _number(run.end[j]), _number(queue[j]), _number(run.run_time[j]),
               contention[j] if ran else "", int(run.gpus[j]), int(sized.nodes[j]), int(run.nodes[j]) if ran else "",
               int(run.held_gpus[j]) if ran else "", int(run.racks[j]) if ran else "", bool(sized.eligible[j]),
               bool(sized.reduced[j]) and name == "transit", not ran, run.drop_reason[j], float(run.steps[j]),
               cross[j], inter[j])


def _integral(times: np.ndarray, begin: np.ndarray, finish: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """For each time t: the integral up to t of sum_j weight_j x [begin_j <= . < finish_j]."""
    def ramp(points: np.ndarray) -> np.ndarray:
        order = np.argsort(points)
        points, weights = points[order], weight[order]
        count = np.concatenate(([0.0], np.cumsum(weights)))
        moment = np.concatenate(([0.0], np.cumsum(weights * points)))
        index = np.searchsorted(points, times, side="left")
        return times * count[index] - moment[index]
    return ramp(begin) - ramp(finish)


def timeline_rows(study: int, name: str, trace: Trace, run: Run) -> Iterator[tuple]:
    ran = run.ran
    if not ran.any():
        return
    start, end, submit = run.start[ran], run.end[ran], trace.submit[ran]
    minutes = int(np.ceil(end.max() / MINUTE_S)) + 1
    edges = np.arange(minutes + 1) * MINUTE_S
    length = np.maximum(end - start, 1e-9)
    busy = np.diff(_integral(edges, start, end, run.held_gpus[ran].astype(float))) / MINUTE_S
    waiting = np.diff(_integral(edges, submit, start, np.ones(len(start)))) / MINUTE_S
    cross = np.diff(_integral(edges, start, end, run.cross_rack_bytes[ran] / length))
    for minute in range(minutes):
        yield study, name, minute, float(busy[minute]), float(waiting[minute]), float(cross[minute])


def write(path: str, columns: tuple[str, ...], rows: Iterable[tuple]) -> None:
    """Rows to one CSV file as they come, or to Parquet (collected, then written) for a .parquet path."""
    if not path.endswith(".parquet"):
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(columns)
            writer.writerows(rows)
        return
    import pyarrow
    import pyarrow.parquet

    values = list(zip(*rows)) or [() for _ in columns]
    table = pyarrow.table({name: [None if v == "" else v for v in column] for name, column in zip(columns, values)})
    pyarrow.parquet.write_table(table, path)
