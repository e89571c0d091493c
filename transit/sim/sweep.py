"""`transit simulate sweep`: many studies of one trace, in parallel processes, with a progress bar.

Baselines depend only on (baseline racks, GPUs per node, placement, backfill), so each is
replayed once and shared by every TRANSIT replay that compares with it.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from transit.sim.engine import Replay
from transit.sim.scenario import Factors, Trace
from transit.sim.study import Setup, baseline_result, study

# The trace each worker replays: set before the pool forks, so it is shared, never pickled.
_TRACE: Trace | None = None


def _baseline(setup: Setup) -> tuple[Replay, float]:
    assert _TRACE is not None
    return baseline_result(_TRACE, setup)


def _study(setup: Setup, baseline: tuple[Replay, float]) -> dict:
    assert _TRACE is not None
    return study(_TRACE, setup, baseline)


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


def _baseline_key(setup: Setup) -> tuple:
    return (setup.baseline_cluster_racks, setup.gpus_per_node, setup.placement, setup.backfill)


def run(trace: Trace, points: list[Setup], processes: int | None = None, quiet: bool = False) -> list[dict]:
    """Run every study of ``points``; results come back in the order of ``points``."""
    global _TRACE
    _TRACE = trace
    keys = {}
    for point in points:
        keys.setdefault(_baseline_key(point), replace(point, factors=Factors(), reduction=0.0))
    workers = max(1, min(processes or os.cpu_count() or 1, len(points)))
    context = multiprocessing.get_context("fork")
    results: list[dict | None] = [None] * len(points)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    # progress goes to stderr: stdout carries the table or the --json document
    with Progress(*columns, console=Console(stderr=True), disable=quiet, transient=False) as progress, \
            ProcessPoolExecutor(workers, mp_context=context) as pool:
        base_task = progress.add_task("baselines", total=len(keys))
        study_task = progress.add_task("TRANSIT replays", total=len(points))
        baselines = {}
        futures = {pool.submit(_baseline, setup): key for key, setup in keys.items()}
        for future in as_completed(futures):
            baselines[futures[future]] = future.result()
            progress.advance(base_task)
        study_futures = {pool.submit(_study, point, baselines[_baseline_key(point)]): index
                         for index, point in enumerate(points)}
        for future in as_completed(study_futures):
            results[study_futures[future]] = future.result()
            progress.advance(study_task)
    _TRACE = None
    return [result for result in results if result is not None]
