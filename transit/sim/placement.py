"""Cluster state and locality-aware placement: one rack when possible, pack or spread, else several.

A cluster is ``racks`` racks of ``RACK_GPUS`` GPUs, in nodes of 4 or 8 GPUs. A single-node job
asking for fewer GPUs than a node shares a node with others; any other job takes whole nodes
(exclusive), as multi-node training jobs do: as many as the trace says it ran on, and at least
``ceil(gpus / gpus_per_node)``.

* ``pack``: best fit. A small job goes to the fullest node that still fits it; a whole-node job
  to the rack with the fewest free nodes that can hold all of it.
* ``spread``: worst fit. A small job goes to the emptiest node, in the rack with most free GPUs;
  a whole-node job to the rack with the most free nodes.
* Fallback for either: when no single rack holds the job, take racks in order of most free nodes
  first, so the job spans as few racks as possible.
"""

from __future__ import annotations

RACK_GPUS = 32  # the paper's fixed rack capacity
PLACEMENTS = ("pack", "spread")


class Cluster:
    """Free GPUs per node, with per-rack and cluster-wide counts kept in step for fast choices.

    ``count[k][rack]`` is how many nodes of ``rack`` have exactly ``k`` free GPUs, and
    ``racks_with[k]`` the racks where that count is not 0; ``count[gpus_per_node]`` is so the
    whole free nodes per rack, and ``racks_by_whole[c]`` the racks with exactly ``c`` of them.
    """

    def __init__(self, racks: int, gpus_per_node: int, placement: str = "pack", nodes: int | None = None) -> None:
        """``nodes``: fewer nodes than ``racks`` full racks hold, the last rack taking the rest (a
        small real cluster, such as the 4-node one the simulator is validated on)."""
        if RACK_GPUS % gpus_per_node:
            raise ValueError(f"gpus_per_node {gpus_per_node} does not divide a {RACK_GPUS}-GPU rack")
        if placement not in PLACEMENTS:
            raise ValueError(f"placement {placement!r} is not one of {PLACEMENTS}")
        per_rack = self.nodes_per_rack = RACK_GPUS // gpus_per_node
        self.nodes = racks * per_rack if nodes is None else nodes
        if not (racks - 1) * per_rack < self.nodes <= racks * per_rack:
            raise ValueError(f"{self.nodes} nodes of {gpus_per_node} GPUs do not fill {racks} racks")
        self.racks = racks
        self.gpus_per_node = gpus_per_node
        rack_nodes = [min(per_rack, self.nodes - rack * per_rack) for rack in range(racks)]
        self.total_gpus = self.nodes * gpus_per_node
        self.pack = placement == "pack"
        self.node_free = [gpus_per_node] * self.nodes
        self.rack_free_gpus = [count * gpus_per_node for count in rack_nodes]
        self.whole_free = self.nodes
        self.free_gpus = self.total_gpus
        self.max_free = gpus_per_node          # the most free GPUs any node has
        # nodes_with_free[k]: how many nodes have exactly k free GPUs (k = 0..gpus_per_node)
        self.nodes_with_free = [0] * gpus_per_node + [self.nodes]
        self.count = [[0] * racks for _ in range(gpus_per_node)] + [rack_nodes]
        self.racks_with: list[set[int]] = [set() for _ in range(gpus_per_node)] + [set(range(racks))]
        self.racks_by_whole: list[set[int]] = [set() for _ in range(per_rack + 1)]
        for rack, count in enumerate(rack_nodes):
            self.racks_by_whole[count].add(rack)

    def fits(self, gpus: int, whole: int) -> bool:
        """Whether ``place(gpus, whole)`` would succeed now (counts only)."""
        return whole <= self.whole_free if whole else gpus <= self.max_free

    def place(self, gpus: int, whole: int = 0) -> tuple[list[tuple[int, int]], list[int]] | None:
        """Allocate ``whole`` whole nodes, or ``gpus`` GPUs on one node when ``whole`` is 0.

        Returns ([(node, gpus taken)], [racks used]), or None when they do not fit now.
        """
        if whole:
            return self._place_whole_nodes(whole)
        return self._place_in_node(gpus)

    def _move(self, node: int, before: int, after: int) -> None:
        """Node ``node`` goes from ``before`` to ``after`` free GPUs: keep every count in step."""
        rack = node // self.nodes_per_rack
        self.node_free[node] = after
        delta = after - before
        self.rack_free_gpus[rack] += delta
        self.free_gpus += delta
        counts = self.nodes_with_free
        counts[before] -= 1
        counts[after] += 1
        left = self.count[before]
        remaining = left[rack] - 1
        left[rack] = remaining
        if not remaining:
            self.racks_with[before].discard(rack)
        arrived = self.count[after]
        present = arrived[rack]
        if not present:
            self.racks_with[after].add(rack)
        arrived[rack] = present + 1
        if before == self.gpus_per_node:      # a whole free node less in this rack
            self.racks_by_whole[remaining + 1].discard(rack)
            self.racks_by_whole[remaining].add(rack)
            self.whole_free -= 1
        elif after == self.gpus_per_node:     # a whole free node more
            self.racks_by_whole[present].discard(rack)
            self.racks_by_whole[present + 1].add(rack)
            self.whole_free += 1
        if after > self.max_free:
            self.max_free = after
        elif before == self.max_free and not counts[before]:
            while self.max_free and not counts[self.max_free]:
                self.max_free -= 1

    def release(self, allocation: list[tuple[int, int]]) -> None:
        node_free = self.node_free
        for node, taken in allocation:
            before = node_free[node]
            self._move(node, before, before + taken)

    def _place_in_node(self, gpus: int) -> tuple[list[tuple[int, int]], list[int]] | None:
        if gpus > self.max_free:
            return None
        counts = self.nodes_with_free
        if self.pack:
            free = next(k for k in range(gpus, self.gpus_per_node + 1) if counts[k])
            rack = min(self.racks_with[free])
        else:
            free = self.max_free
            spare = self.rack_free_gpus
            rack = min(self.racks_with[free], key=lambda r: (-spare[r], r))
        per_rack = self.nodes_per_rack
        node_free = self.node_free
        for node in range(rack * per_rack, min((rack + 1) * per_rack, self.nodes)):
            if node_free[node] == free:
                self._move(node, free, free - gpus)
                return [(node, gpus)], [rack]
        raise AssertionError("node counts out of step with node state")

    def _place_whole_nodes(self, nodes: int) -> tuple[list[tuple[int, int]], list[int]] | None:
        if nodes > self.whole_free:
            return None
        per_rack = self.nodes_per_rack
        buckets = self.racks_by_whole
        sizes = range(nodes, per_rack + 1) if self.pack else range(per_rack, nodes - 1, -1)
        chosen = next(([min(buckets[size])] for size in sizes if buckets[size]), None)
        if chosen is None:
            whole = self.count[self.gpus_per_node]
            chosen = []
            remaining = nodes
            for rack in sorted(range(self.racks), key=lambda r: (-whole[r], r)):
                chosen.append(rack)
                remaining -= whole[rack]
                if remaining <= 0:
                    break
        allocation = []
        per_node = self.gpus_per_node
        node_free = self.node_free
        remaining = nodes
        for rack in chosen:
            for node in range(rack * per_rack, min((rack + 1) * per_rack, self.nodes)):
                if node_free[node] == per_node:
                    self._move(node, per_node, 0)
                    allocation.append((node, per_node))
                    remaining -= 1
                    if not remaining:
                        return allocation, chosen
        raise AssertionError("whole-node counts out of step with node state")
