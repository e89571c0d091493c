"""Cluster state and locality-aware placement: one rack when possible, pack or spread, else several.

A cluster is ``racks`` racks of ``RACK_GPUS`` GPUs, in nodes of 4 or 8 GPUs. A job asking for
fewer GPUs than a node shares a node with others; a larger job takes whole nodes (exclusive,
``ceil(gpus / gpus_per_node)`` of them), as multi-node training jobs do.

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
    """Free GPUs per node, with per-rack and cluster-wide counts kept in step for fast checks."""

    def __init__(self, racks: int, gpus_per_node: int, placement: str = "pack") -> None:
        if RACK_GPUS % gpus_per_node:
            raise ValueError(f"gpus_per_node {gpus_per_node} does not divide a {RACK_GPUS}-GPU rack")
        if placement not in PLACEMENTS:
            raise ValueError(f"placement {placement!r} is not one of {PLACEMENTS}")
        self.racks = racks
        self.gpus_per_node = gpus_per_node
        self.nodes_per_rack = RACK_GPUS // gpus_per_node
        self.nodes = racks * self.nodes_per_rack
        self.total_gpus = racks * RACK_GPUS
        self.pack = placement == "pack"
        self.node_free = [gpus_per_node] * self.nodes
        self.rack_whole_free = [self.nodes_per_rack] * racks   # nodes with every GPU free
        self.rack_free_gpus = [RACK_GPUS] * racks
        self.whole_free = self.nodes
        # nodes_with_free[k]: how many nodes have exactly k free GPUs (k = 0..gpus_per_node)
        self.nodes_with_free = [0] * gpus_per_node + [self.nodes]
        # the same per rack, flattened: rack_nodes_with_free[rack * (gpus_per_node + 1) + k]
        self.rack_nodes_with_free = ([0] * gpus_per_node + [self.nodes_per_rack]) * racks

    def nodes_for(self, gpus: int) -> int:
        """Nodes a job of ``gpus`` GPUs occupies (a part of one node counts as one)."""
        return -(-gpus // self.gpus_per_node)

    def place(self, gpus: int) -> list[tuple[int, int]] | None:
        """Allocate ``gpus`` GPUs; return [(node, gpus taken)] or None when they do not fit now."""
        if gpus < self.gpus_per_node:
            return self._place_in_node(gpus)
        return self._place_whole_nodes(self.nodes_for(gpus))

    def release(self, allocation: list[tuple[int, int]]) -> None:
        per_node = self.gpus_per_node
        per_rack = self.nodes_per_rack
        for node, taken in allocation:
            before = self.node_free[node]
            after = before + taken
            self.node_free[node] = after
            rack = node // per_rack
            self.rack_free_gpus[rack] += taken
            self.nodes_with_free[before] -= 1
            self.nodes_with_free[after] += 1
            self.rack_nodes_with_free[rack * (per_node + 1) + before] -= 1
            self.rack_nodes_with_free[rack * (per_node + 1) + after] += 1
            if after == per_node:
                self.rack_whole_free[rack] += 1
                self.whole_free += 1

    def _take(self, node: int, taken: int) -> None:
        before = self.node_free[node]
        after = before - taken
        self.node_free[node] = after
        rack = node // self.nodes_per_rack
        self.rack_free_gpus[rack] -= taken
        self.nodes_with_free[before] -= 1
        self.nodes_with_free[after] += 1
        self.rack_nodes_with_free[rack * (self.gpus_per_node + 1) + before] -= 1
        self.rack_nodes_with_free[rack * (self.gpus_per_node + 1) + after] += 1
        if before == self.gpus_per_node:
            self.rack_whole_free[rack] -= 1
            self.whole_free -= 1

    def _place_in_node(self, gpus: int) -> list[tuple[int, int]] | None:
        counts = self.nodes_with_free
        sizes = range(gpus, self.gpus_per_node + 1)
        fitting = [k for k in sizes if counts[k]]
        if not fitting:
            return None
        if self.pack:
            free = fitting[0]
            racks = range(self.racks)
        else:
            free = fitting[-1]
            racks = sorted(range(self.racks), key=self.rack_free_gpus.__getitem__, reverse=True)
        per_rack = self.nodes_per_rack
        node_free = self.node_free
        in_rack = self.rack_nodes_with_free
        stride = self.gpus_per_node + 1
        for rack in racks:
            if not in_rack[rack * stride + free]:
                continue
            for node in range(rack * per_rack, (rack + 1) * per_rack):
                if node_free[node] == free:
                    self._take(node, gpus)
                    return [(node, gpus)]
        raise AssertionError("node counts out of step with node state")

    def _place_whole_nodes(self, nodes: int) -> list[tuple[int, int]] | None:
        if nodes > self.whole_free:
            return None
        whole = self.rack_whole_free
        candidates = [(free, rack) for rack, free in enumerate(whole) if free >= nodes]
        if candidates:
            if self.pack:
                chosen = [min(candidates)[1]]
            else:
                chosen = [min(candidates, key=lambda c: (-c[0], c[1]))[1]]
        else:
            chosen = []
            remaining = nodes
            for rack in sorted(range(self.racks), key=lambda r: (-whole[r], r)):
                chosen.append(rack)
                remaining -= whole[rack]
                if remaining <= 0:
                    break
        allocation = []
        per_node = self.gpus_per_node
        per_rack = self.nodes_per_rack
        node_free = self.node_free
        remaining = nodes
        for rack in chosen:
            for node in range(rack * per_rack, (rack + 1) * per_rack):
                if node_free[node] == per_node:
                    self._take(node, per_node)
                    allocation.append((node, per_node))
                    remaining -= 1
                    if not remaining:
                        return allocation
        raise AssertionError("whole-node counts out of step with node state")

    def racks_of(self, allocation: list[tuple[int, int]]) -> int:
        """Distinct racks an allocation spans."""
        per_rack = self.nodes_per_rack
        return len({node // per_rack for node, _ in allocation})
