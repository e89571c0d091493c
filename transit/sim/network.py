"""Collective traffic of multi-node jobs and the rack uplinks it crosses (docs/simulator.md, "Network").

Each multi-node job is taken as data parallel (FSDP/DDP) over its nodes, with tensor parallelism,
if any, inside a node. Per optimizer step its gradients, ``S`` bytes, go through a ring
all-reduce of its ``d`` data-parallel ranks, which moves ``2 (d - 1) / d x S`` bytes over every
edge of the ring (NCCL's ring: nccl-tests ``doc/PERFORMANCE.md``, bus bandwidth = algorithm
bandwidth x 2(n-1)/n). Ranks follow the nodes' order, rack by rack, so a ring over R racks
crosses R rack boundaries (none when R = 1), and each rack's uplink carries one ring edge each
way. Hence per step:

* cross-rack bytes = R x 2 (d - 1) / d x S (R > 1), inter-node bytes = nodes x 2 (d - 1) / d x S;
* collective time at line rate = 2 (d - 1) / d x S / (a node's NIC bandwidth).

``S`` is 2 bytes (bf16) x the model's parameters where the trace gives them, else the proxy
``PARAMS_PER_GPU`` x GPUs (jobs scale out for memory, so model size grows with GPUs). ``d`` is the
trace's ``dp``, else GPUs / ``tp`` (``tp`` 1 unless given). A job's steps are fixed by its
baseline run: there, the collectives take ``comm_fraction`` of the step time, so
steps = run time x comm_fraction / collective time. Under TRANSIT the same steps run on fewer
nodes (``d`` shrinks with them) over a longer run time. The model size cancels out of a job's
total bytes (steps scale as 1 / S): totals are set by the run time, ``comm_fraction``, the node
bandwidth and the racks crossed.

Uplinks: a rack of ``RACK_GPUS`` GPUs with one NIC of ``nic_gbps`` per GPU has
``RACK_GPUS x nic_gbps / oversubscription`` of uplink each way. A multi-rack job offers each of
its racks' uplinks its average rate (bytes per boundary per step / step time); where a rack's
load exceeds its capacity, the engine stretches those jobs' collective time (``engine.Contention``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transit.errors import UsageError
from transit.sim.placement import RACK_GPUS

BITS_PER_BYTE = 8
GRADIENT_BYTES_PER_PARAM = 2.0            # bf16 gradients, as in the paper's runs
# The paper's Llama3-70B needs 24 H100s at least without offload (section 4.2, Figure 7): about
# 2.9B parameters per 80 GB GPU once optimizer state and activations are counted.
PARAMS_PER_GPU = 70e9 / 24


@dataclass(frozen=True)
class Network:
    """Parameters of the network model; defaults and their sources are in docs/simulator.md."""

    nic_gbps: float = 400.0          # per GPU: the paper's ConnectX-7, one per GPU (section 4.1)
    oversubscription: float = 4.0    # the paper's bandwidth-limited setting: 100 of 400 Gb/s
    comm_fraction: float = 0.2       # (rho - 1) / 3 for the paper's rho(400, 100) = 1.6 (Figure 10)
    contention: bool = True

    def check(self) -> None:
        if not self.nic_gbps > 0:
            raise UsageError(f"--nic-gbps {self.nic_gbps:g}: expected a bandwidth above 0")
        if not self.oversubscription >= 1:
            raise UsageError(f"--oversubscription {self.oversubscription:g}: expected 1 (non-blocking) or more")
        if not 0 < self.comm_fraction < 1:
            raise UsageError(f"--comm-fraction {self.comm_fraction:g}: expected a fraction in (0, 1)")

    def node_bytes_per_s(self, gpus_per_node: int) -> float:
        return gpus_per_node * self.nic_gbps * 1e9 / BITS_PER_BYTE

    def uplink_bytes_per_s(self) -> float:
        return RACK_GPUS * self.nic_gbps * 1e9 / BITS_PER_BYTE / self.oversubscription


def ring_factor(ranks: np.ndarray) -> np.ndarray:
    """2 (d - 1) / d: bytes over each ring edge per byte all-reduced, 0 for fewer than 2 ranks."""
    ranks = np.asarray(ranks, dtype=float)
    return np.where(ranks >= 2, 2 * (ranks - 1) / np.maximum(ranks, 1), 0.0)


@dataclass
class Traffic:
    """Per job: gradient bytes per step, baseline data-parallel degree, and steps (0: no network)."""

    gradient_bytes: np.ndarray
    dp: np.ndarray
    steps: np.ndarray

    def boundary_bytes_per_step(self, dp: np.ndarray) -> np.ndarray:
        """Bytes per step over each ring edge (so over each rack boundary crossed) at degree ``dp``."""
        return ring_factor(dp) * self.gradient_bytes


def traffic(network: Network, gpus: np.ndarray, nodes: np.ndarray, duration: np.ndarray,
            params: np.ndarray, dp: np.ndarray, tp: np.ndarray, gpus_per_node: int) -> Traffic:
    """The baseline traffic of every job (``nodes``: the nodes it takes; single-node jobs send nothing)."""
    model = np.where(np.isnan(params), PARAMS_PER_GPU * gpus, params)
    gradient_bytes = GRADIENT_BYTES_PER_PARAM * model
    degree = np.where(dp > 0, dp, gpus / np.maximum(tp, 1)).astype(float)
    comm_s = ring_factor(degree) * gradient_bytes / network.node_bytes_per_s(gpus_per_node)
    sends = (nodes > 1) & (comm_s > 0)
    steps = np.where(sends, duration * network.comm_fraction / np.where(sends, comm_s, 1.0), 0.0)
    return Traffic(gradient_bytes, degree, steps)
