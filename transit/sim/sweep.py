"""`transit simulate sweep`: many studies of one trace, in parallel processes, with progress bars.

Baselines depend only on the baseline cluster, GPUs per node, placement, backfill, the network
and which jobs both scenarios replay, so each is replayed once and shared by every TRANSIT replay that compares with it. Workers report
their replays' progress through a queue; the parent draws one bar per replay under way.
"""

from __future__ import annotations

import hashlib
import itertools
import multiprocessing
import os
import queue as queue_module
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import replace

import numpy as np

from transit.sim.output import replay_progress
from transit.sim.scenario import Run, Setup, Trace, left_out, run_baseline, shape
from transit.sim.study import study

# Set before the pool forks, so workers share them, never pickled: the trace, the progress queue.
_TRACE: Trace | None = None
_PROGRESS = None
POLL_S = 0.2


def _report(key):
    if _PROGRESS is None:
        return None
    return lambda done, jobs: _PROGRESS.put((key, done, jobs))


def _baseline(key: tuple, setup: Setup) -> Run:
    assert _TRACE is not None
    return run_baseline(_TRACE, setup, _report(("baseline", key)))


def _study(index: int, setup: Setup, baseline: Run, keep_runs: bool, with_unholdable: bool) -> tuple:
    assert _TRACE is not None
    report = _report(("study", index))
    document, base, transit = study(_TRACE, setup, baseline,
                                    None if report is None else lambda name, done, jobs: report(done, jobs),
                                    with_unholdable)
    return (document, base, transit) if keep_runs else (document, None, None)


def setups(racks: list[int], gpus_per_node: list[int], reductions: list[float], placements: list[str],
           speedups: list[float] | None, slowdowns: list[float] | None, base: Setup) -> list[Setup]:
    """Every combination, in a stable order; speedups and slowdowns replace those factors when given."""
    points = []
    for rack_count, per_node, placement, reduction in itertools.product(racks, gpus_per_node, placements, reductions):
        for speedup, slowdown in itertools.product(speedups or [base.factors.inter_to_intra_speedup],
                                                   slowdowns or [base.factors.intra_to_inter_slowdown]):
            factors = replace(base.factors, inter_to_intra_speedup=speedup, intra_to_inter_slowdown=slowdown)
            points.append(replace(base, racks=rack_count, gpus_per_node=per_node, placement=placement,
                                  reduction=reduction, factors=factors))
    return points


def _baseline_key(trace: Trace, setup: Setup) -> tuple:
    """What a baseline replay depends on, including which jobs both scenarios replay."""
    replayed = hashlib.sha1(np.array([not r for r in left_out(setup, shape(trace, setup))]).tobytes()).hexdigest()
    return (setup.baseline_cluster_racks, setup.gpus_per_node, setup.placement, setup.backfill,
            setup.backfill_interval, setup.network, replayed)


def run(trace: Trace, points: list[Setup], processes: int | None = None, quiet: bool = False,
        keep_runs: bool = False, with_unholdable: bool = False) -> list[tuple]:
    """(document, baseline run, TRANSIT run) per point, in the order of ``points``; the runs are None
    unless ``keep_runs`` (they are large)."""
    global _TRACE, _PROGRESS
    _TRACE = trace
    context = multiprocessing.get_context("fork")
    _PROGRESS = None if quiet else context.Queue()
    point_keys = [_baseline_key(trace, point) for point in points]
    keys = {}
    for key, point in zip(point_keys, points):
        keys.setdefault(key, point)
    workers = max(1, min(processes or os.cpu_count() or 1, len(points)))
    results: list = [None] * len(points)
    with replay_progress(not quiet) as progress, ProcessPoolExecutor(workers, mp_context=context) as pool:
        overall = progress.add_task("studies", total=len(points))
        bars: dict = {}
        finished: set = set()

        def bar(key) -> int:
            if key not in bars:
                kind, which = key
                name = f"baseline replay {which[0]} racks, {which[1]} GPUs/node" if kind == "baseline" else \
                    f"study {which + 1}: TRANSIT replay"
                bars[key] = progress.add_task(name, total=len(trace))
            return bars[key]

        def drain() -> None:
            while _PROGRESS is not None:
                try:
                    key, done, jobs = _PROGRESS.get_nowait()
                except queue_module.Empty:
                    return
                if key not in finished:
                    progress.update(bar(key), completed=done, total=jobs)

        def finish(key) -> None:
            finished.add(key)
            if key in bars:
                progress.remove_task(bars.pop(key))

        baselines = {}
        pending = {pool.submit(_baseline, key, setup): key for key, setup in keys.items()}
        studies: dict = {}
        while pending or studies:
            done, _ = wait(list(pending) + list(studies), timeout=POLL_S, return_when=FIRST_COMPLETED)
            drain()
            for future in done:
                if future in pending:
                    key = pending.pop(future)
                    baselines[key] = future.result()
                    finish(("baseline", key))
                    for index, point in enumerate(points):
                        if point_keys[index] == key:
                            studies[pool.submit(_study, index, point, baselines[key], keep_runs,
                                                with_unholdable)] = index
                else:
                    index = studies.pop(future)
                    results[index] = future.result()
                    finish(("study", index))
                    progress.advance(overall)
    _TRACE, _PROGRESS = None, None
    return results
