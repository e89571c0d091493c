"""Heap-based discrete-event replay of a job trace on a ``Cluster``: FIFO, optional EASY backfill.

Events are job arrivals (the trace, in submit order) and job completions (a heap keyed on end
time). At each event time every completion is processed first, then every arrival, then the
scheduler starts jobs from the head of the FIFO queue until one does not fit.

Backfill (optional, EASY style): when the head is blocked, a later queued job may start now if it
fits and ends before the head's *shadow time*, the earliest time enough nodes will have been freed
for the head. The run times given to ``replay`` serve as run-time estimates (in the TRANSIT
scenario, before the placement-transition factor, which is known only once a job is placed). At most
``BACKFILL_DEPTH`` queued jobs are examined per pass, like Slurm's ``bf_max_job_test``.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from transit.sim.placement import Cluster

BACKFILL_DEPTH = 100


@dataclass
class Replay:
    """Per-job outcome of one replay, indexed like the input lists."""

    start: list[float]
    end: list[float]
    racks: list[int]
    nodes: list[int]
    held_gpus: list[int]     # GPUs the job kept from others (whole nodes for multi-node jobs)
    total_gpus: int


def replay(
    submit: list[float],
    gpus: list[int],
    duration: list[float],
    cluster: Cluster,
    backfill: bool = False,
    duration_at_start: Callable[[int, int], float] | None = None,
) -> Replay:
    """Replay jobs (sorted by ``submit``) on ``cluster``; every job must fit the empty cluster.

    ``duration_at_start(job, racks)``, when given, decides a job's run time once its placement is
    known (the TRANSIT scenario's placement-transition factors); otherwise ``duration`` is used.
    """
    count = len(submit)
    start = [0.0] * count
    end = [0.0] * count
    racks = [0] * count
    nodes = [0] * count
    held = [0] * count
    allocations: list[list[tuple[int, int]] | None] = [None] * count
    finishing: list[tuple[float, int]] = []
    queue: deque[int] = deque()
    place = cluster.place
    release = cluster.release
    racks_of = cluster.racks_of
    gpus_per_node = cluster.gpus_per_node

    def try_start(job: int, now: float) -> bool:
        allocation = place(gpus[job])
        if allocation is None:
            return False
        allocations[job] = allocation
        spanned = racks_of(allocation)
        run_time = duration[job] if duration_at_start is None else duration_at_start(job, spanned)
        start[job] = now
        end[job] = now + run_time
        racks[job] = spanned
        nodes[job] = len(allocation)
        held[job] = sum(taken for _, taken in allocation)
        heapq.heappush(finishing, (now + run_time, job))
        return True

    def shadow_time(head: int, now: float) -> float:
        """Earliest time enough nodes free up for ``head`` (GPU-fraction estimate for shared nodes)."""
        if gpus[head] < gpus_per_node:
            return finishing[0][0] if finishing else now
        missing = cluster.nodes_for(gpus[head]) * gpus_per_node - cluster.whole_free * gpus_per_node
        for finish, job in sorted(finishing):
            missing -= held[job]
            if missing <= 0:
                return finish
        return float("inf")

    def schedule(now: float) -> None:
        while queue and try_start(queue[0], now):
            queue.popleft()
        if not backfill or len(queue) < 2:
            return
        shadow = shadow_time(queue[0], now)
        started = []
        for position in range(1, min(len(queue), BACKFILL_DEPTH + 1)):
            job = queue[position]
            if now + duration[job] <= shadow and try_start(job, now):
                started.append(position)
        for position in reversed(started):
            del queue[position]

    arrival = 0
    inf = float("inf")
    while arrival < count or finishing:
        next_arrival = submit[arrival] if arrival < count else inf
        now = min(next_arrival, finishing[0][0]) if finishing else next_arrival
        while finishing and finishing[0][0] <= now:
            _, job = heapq.heappop(finishing)
            release(allocations[job])
            allocations[job] = None
        while arrival < count and submit[arrival] <= now:
            queue.append(arrival)
            arrival += 1
        schedule(now)
    if queue:
        raise ValueError(f"{len(queue)} jobs never fit the cluster; filter them before replaying")
    return Replay(start, end, racks, nodes, held, cluster.total_gpus)
