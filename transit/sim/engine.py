"""Heap-based discrete-event replay of a job trace on a ``Cluster``: FIFO, optional EASY backfill,
optional contention on the rack uplinks.

Events are job arrivals (the trace, in submit order) and job completions (a heap keyed on end
time). At each event time every completion is processed first, then every arrival, then the
scheduler starts jobs from the head of the FIFO queue until one does not fit.

Backfill (optional, EASY style): when the head is blocked, a later queued job may start now if it
fits and ends before the head's *shadow time*, the earliest time enough nodes will have been freed
for the head. The shadow is planned when a job becomes the head (and again when contention moves
end times), on that moment's running jobs, as Slurm's backfill plans on a snapshot. Run-time
estimates are the run times given to ``replay`` (in the TRANSIT scenario, before the placement
factor, which is known only once a job is placed). At most ``BACKFILL_DEPTH`` queued jobs are
examined per pass, like Slurm's ``bf_max_job_test``; a pass after arrivals alone examines only
the jobs not examined since resources were last freed.

Contention (optional, ``Contention``): a job spanning several racks offers each of their uplinks
a load (bytes/s); where a rack's load exceeds its capacity, the collective part (``phi``) of the
step time of every multi-rack job on it stretches by load / capacity (a fluid model: rates change
at job starts and ends, and a job's remaining work is re-timed then). A re-timing leaves the old
heap entry behind; such an entry is skipped before it can set the clock, and when starts move end
times the backfill pass runs again at the same moment, so every start is at a real event.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from transit.sim.placement import Cluster

BACKFILL_DEPTH = 100
PROGRESS_EVERY = 8192   # arrivals between progress callbacks


@dataclass
class Contention:
    """What the engine needs to slow multi-rack jobs down: per job, its collective bytes per step
    that cross each rack boundary and its step count; a node's and a rack uplink's bandwidth."""

    boundary_bytes_per_step: list[float]
    steps: list[float]
    node_bytes_per_s: float
    uplink_bytes_per_s: float


@dataclass
class Replay:
    """Per-job outcome of one replay, indexed like the input lists."""

    start: list[float]
    end: list[float]
    racks: list[int]
    nodes: list[int]
    held_gpus: list[int]     # GPUs the job kept from others (whole nodes for multi-node jobs)
    run_time: list[float]    # run time without contention (end - start - contention delay)
    total_gpus: int


def replay(
    submit: list[float],
    gpus: list[int],
    whole: list[int],
    duration: list[float],
    cluster: Cluster,
    backfill: bool = False,
    duration_at_start: Callable[[int, int], float] | None = None,
    contention: Contention | None = None,
    progress: Callable[[int, int], None] | None = None,
    estimate: list[float] | None = None,
    backfill_interval: float = 0.0,
) -> Replay:
    """Replay jobs (sorted by ``submit``) on ``cluster``; every job must fit the empty cluster.

    ``whole[j]``: whole nodes job j takes (0: ``gpus[j]`` GPUs on one shared node).
    ``duration_at_start(job, racks)``, when given, decides a job's run time once its placement is
    known (the TRANSIT scenario's placement-transition factors); otherwise ``duration`` is used.
    ``progress(arrivals, jobs)`` is called every ``PROGRESS_EVERY`` arrivals, and at the end.
    ``estimate[j]``, when given, is what backfill plans job j to run (its time limit, as Slurm's
    backfill plans), instead of its run time: a running job is planned to end at start + estimate.
    ``backfill_interval`` > 0: backfill passes run only every that many seconds (Slurm's
    ``bf_interval``), at multiples of it from the first submit; FIFO starts still happen at every event.
    """
    count = len(submit)
    start = [0.0] * count
    end = [0.0] * count
    racks = [0] * count
    nodes = [0] * count
    held = [0] * count
    run_time = [0.0] * count
    allocations: list[list[tuple[int, int]] | None] = [None] * count
    finishing: list[tuple[float, int]] = []
    queue: deque[int] = deque()
    place = cluster.place
    release = cluster.release
    heappush, heappop = heapq.heappush, heapq.heappop
    gpus_per_node = cluster.gpus_per_node
    fluid = _Fluid(contention, cluster.racks, end, finishing) if contention else None
    # backfill bookkeeping: the head's planned shadow (None until needed); the window positions
    # 1..clean known not to start, and the fewest whole nodes / GPUs any of them lacked room for
    inf = float("inf")
    plan: dict = {"head": -1, "shadow": None, "clean": 0, "whole": inf, "gpus": inf}

    def try_start(job: int, now: float) -> bool:
        nodes_asked = whole[job]
        if nodes_asked:
            if nodes_asked > cluster.whole_free:
                return False
        elif gpus[job] > cluster.max_free:
            return False
        allocation, spanned = place(gpus[job], nodes_asked)
        allocations[job] = allocation
        length = duration[job] if duration_at_start is None else duration_at_start(job, len(spanned))
        start[job] = now
        run_time[job] = length
        racks[job] = len(spanned)
        nodes[job] = len(allocation)
        held[job] = nodes_asked * gpus_per_node if nodes_asked else gpus[job]
        if fluid is None or len(spanned) < 2 or not fluid.starts(job, spanned, now, length):
            end[job] = now + length
            heappush(finishing, (now + length, job))
        return True

    planned = duration if estimate is None else estimate

    def running_by_planned_end(now: float):
        """(planned end, job) of the running jobs, earliest first: their real ends (the heap), or,
        with estimates, start + estimate (never before now: a job past its limit ends any moment)."""
        if estimate is None:
            return ((finish, job) for finish, job in _in_order(finishing) if finish == end[job])
        running = {job for _, job in finishing if allocations[job] is not None}
        return iter(sorted((max(now, start[job] + estimate[job]), job) for job in running))

    def shadow_time(head: int, now: float) -> float:
        """Earliest time enough nodes free up for ``head`` (GPU-fraction estimate for shared nodes)."""
        if not whole[head]:
            return next((t for t, _ in running_by_planned_end(now)), now)
        missing = (whole[head] - cluster.whole_free) * gpus_per_node
        for finish, job in running_by_planned_end(now):
            missing -= held[job]
            if missing <= 0:
                return finish
        return float("inf")

    def schedule(now: float, backfill_now: bool) -> None:
        while queue and try_start(queue[0], now):
            queue.popleft()
        if fluid is not None and fluid.moved:
            fluid.moved = False
            plan["head"] = -1      # end times moved: plan the shadow again
        while backfill_now and backfill_pass(now):
            pass

    def backfill_pass(now: float) -> bool:
        """One backfill pass; True when its starts moved end times, so the shadow must be planned
        again and the queue examined again at this same moment (not at a later, unrelated event)."""
        if not backfill or len(queue) < 2 or not cluster.free_gpus:
            return False
        head = queue[0]
        if plan["head"] != head:
            plan.update(head=head, shadow=None, clean=0, whole=inf, gpus=inf)
        whole_free, max_free = cluster.whole_free, cluster.max_free
        least_whole, least_gpus = plan["whole"], plan["gpus"]
        started = []
        examined = last = min(len(queue), BACKFILL_DEPTH + 1) - 1
        for position in range(plan["clean"] + 1, last + 1):
            job = queue[position]
            asked = whole[job]
            if asked:
                if asked > whole_free:
                    least_whole = min(least_whole, asked)
                    continue
            elif gpus[job] > max_free:
                least_gpus = min(least_gpus, gpus[job])
                continue
            if plan["shadow"] is None:
                plan["shadow"] = shadow_time(head, now)
            if now + planned[job] > plan["shadow"]:
                continue           # too long to end before the head's shadow: fails until the head changes
            try_start(job, now)
            started.append(position)
            if not cluster.free_gpus:
                examined = position
                break
            whole_free, max_free = cluster.whole_free, cluster.max_free
        for position in reversed(started):
            del queue[position]
        plan.update(clean=examined - len(started), whole=least_whole, gpus=least_gpus)
        if fluid is not None and fluid.moved:
            fluid.moved = False
            plan["head"] = -1
            return True
        return False

    periodic = backfill and backfill_interval > 0
    next_tick = backfill_interval if periodic else inf
    arrival = 0
    while arrival < count or finishing:
        # an entry superseded by contention re-timing is no event: never let it set the clock
        while finishing and (finishing[0][0] != end[finishing[0][1]] or allocations[finishing[0][1]] is None):
            heappop(finishing)
        if not (arrival < count or finishing):
            break
        now = submit[arrival] if arrival < count else inf
        if finishing and finishing[0][0] < now:
            now = finishing[0][0]
        tick = periodic and len(queue) > 1 and next_tick <= now
        if tick:
            now = next_tick    # a backfill pass with jobs waiting behind the head
        if periodic:
            next_tick = (now // backfill_interval + 1) * backfill_interval
        freed = False
        while finishing and finishing[0][0] <= now:
            finish, job = heappop(finishing)
            if finish != end[job] or allocations[job] is None:
                continue        # superseded by a re-timed entry
            release(allocations[job])
            allocations[job] = None
            freed = True
            if fluid is not None and racks[job] > 1:
                fluid.ends(job, now)
        if freed and estimate is not None:
            plan.update(shadow=None, clean=0)    # a job ended before its limit: the head's start moves
        if freed and (cluster.whole_free >= plan["whole"] or cluster.max_free >= plan["gpus"]):
            plan.update(clean=0, whole=inf, gpus=inf)     # some examined job may fit now: examine again
        while arrival < count and submit[arrival] <= now:
            queue.append(arrival)
            arrival += 1
            if progress is not None and not arrival % PROGRESS_EVERY:
                progress(arrival, count)
        schedule(now, backfill and (tick or not periodic))
    if queue:
        raise ValueError(f"{len(queue)} jobs never fit the cluster; filter them before replaying")
    if progress is not None:
        progress(count, count)
    return Replay(start, end, racks, nodes, held, run_time, cluster.total_gpus)


def _in_order(heap: list[tuple[float, int]]):
    """The entries of a binary heap in ascending order, lazily (O(k log k) for the first k)."""
    if not heap:
        return
    frontier = [(heap[0], 0)]
    size = len(heap)
    while frontier:
        entry, index = heapq.heappop(frontier)
        yield entry
        for child in (2 * index + 1, 2 * index + 2):
            if child < size:
                heapq.heappush(frontier, (heap[child], child))


class _Fluid:
    """Rack uplink loads and the rates of multi-rack jobs under them (see the module docstring)."""

    def __init__(self, contention: Contention, rack_count: int, end: list[float],
                 finishing: list[tuple[float, int]]) -> None:
        self.model = contention
        self.capacity = contention.uplink_bytes_per_s
        self.load = [0.0] * rack_count
        self.on_rack: list[set[int]] = [set() for _ in range(rack_count)]
        self.end = end
        self.finishing = finishing
        self.moved = False                    # some job's end time changed since the engine last looked
        self.job_racks: dict[int, list[int]] = {}
        self.demand: dict[int, float] = {}
        self.phi: dict[int, float] = {}
        self.rate: dict[int, float] = {}
        self.left: dict[int, float] = {}      # nominal seconds of work left at ``since``
        self.since: dict[int, float] = {}

    def starts(self, job: int, spanned: list[int], now: float, length: float) -> bool:
        """Track a multi-rack job that starts and queue its end; False when it sends nothing."""
        model = self.model
        per_step = model.boundary_bytes_per_step[job] * model.steps[job]
        if per_step <= 0 or length <= 0:
            return False
        self.job_racks[job] = spanned
        self.demand[job] = per_step / length
        self.phi[job] = min(1.0, per_step / (model.node_bytes_per_s * length))
        self.rate[job], self.left[job], self.since[job] = 1.0, length, now
        self.end[job] = now + length
        heapq.heappush(self.finishing, (now + length, job))
        self._change(job, spanned, +1, now)
        return True

    def ends(self, job: int, now: float) -> None:
        """Stop tracking a job that ended, re-timing the jobs its uplinks carried."""
        spanned = self.job_racks.pop(job, None)
        if spanned is None:
            return
        self._change(job, spanned, -1, now)
        for table in (self.demand, self.phi, self.rate, self.left, self.since):
            del table[job]

    def _change(self, job: int, spanned: list[int], sign: int, now: float) -> None:
        load, capacity = self.load, self.capacity
        before = max(load[r] for r in spanned)
        for rack in spanned:
            load[rack] += sign * self.demand[job]
            if sign > 0:
                self.on_rack[rack].add(job)
            else:
                self.on_rack[rack].discard(job)
        if max(before, max(load[r] for r in spanned)) <= capacity:
            return              # no touched uplink is or was over capacity: no rate changes
        for other in set().union(*(self.on_rack[r] for r in spanned)):
            self._retime(other, now)

    def _retime(self, job: int, now: float) -> None:
        stretch = max(self.load[r] for r in self.job_racks[job]) / self.capacity
        rate = 1.0 / (1.0 + self.phi[job] * (stretch - 1.0)) if stretch > 1.0 else 1.0
        if rate == self.rate[job]:
            return
        self.left[job] -= (now - self.since[job]) * self.rate[job]
        self.since[job], self.rate[job] = now, rate
        self.end[job] = now + self.left[job] / rate
        heapq.heappush(self.finishing, (self.end[job], job))
        self.moved = True
