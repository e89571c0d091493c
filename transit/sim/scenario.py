"""The two scenarios of the paper's section 4.3: the trace as is, and with TRANSIT node reduction.

TRANSIT scenario: an *eligible* job (one that ran on more than one node) keeps
``reduced_nodes(nodes, r)`` nodes, with as many GPUs per node as before. A job whose count does
not change (a 2-node job at r = 0.25) is left as it is. A reduced job's run time:

1. scales by its GPUs before / after (the same work on fewer GPUs), divided by the per-GPU
   efficiency under reduction (``Efficiency``: measured by this project by default, or a curve
   over the fraction of nodes removed, which for a job sized at its memory minimum is the share of
   its data spilled to host memory);
2. then by a placement-transition factor that compares the racks it spans now with the racks it
   spanned in the baseline replay (``Factors``):

   * several racks before, one now: run time / (1 + ``inter_to_intra_speedup``)
   * one rack before, several now:  run time / (1 - ``intra_to_inter_slowdown``) when the slowdown
     is read as a throughput loss, run time x (1 + it) when read as a run-time increase
   * otherwise:                     run time / (1 + ``unchanged``)

The paper normalises its factors against the no-offload baseline, so they fold TRANSIT's own
efficiency in; here efficiency is separate, and ``--efficiency 1`` gives the paper's model.
Both scenarios replay the same jobs: a job the baseline's cluster cannot hold as is (or, when
TRANSIT has fewer racks, that TRANSIT's cannot hold even reduced) is left out of both replays and
counted with the reason (``left_out``), so no figure counts jobs only one scenario ran.

``--factors FILE``: ``transit.factors/2`` (bench/factors.py) carries a measured efficiency and
network-only factors; ``transit.factors/1`` (factors normalised as the paper does) is read as
such, with efficiency 1.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field

import numpy as np

from transit.errors import UsageError
from transit.plan.planner import reduced_nodes
from transit.sim.engine import Contention, Replay, replay
from transit.sim.jobs import Job
from transit.sim.network import Network, Traffic, traffic
from transit.sim.placement import RACK_GPUS, Cluster

ROUNDING_S = 1e-6      # end - start - run time below this is float rounding, not contention
FACTORS_SCHEMAS = ("transit.factors/1", "transit.factors/2")
SLOWDOWN_READINGS = ("throughput", "runtime")

# Per-GPU efficiency of a scaled-in job: TRANSIT advise on 1 H200 kept 89.8 % of the per-GPU
# TFLOPS of FSDP2 on 2 without offload (collect_summary.advise_vs_no_offload in the file below; README,
# "Scale-in against framework offloading"). A unit test keeps this figure equal to the file's.
MEASURED_EFFICIENCY = 0.898
MEASURED_EFFICIENCY_FILE = "bench/results/compare-gb64-27g-final.summary.json"
MEASURED_EFFICIENCY_SOURCE = (f"measured: {MEASURED_EFFICIENCY_FILE} (TRANSIT advise on 1 H200 against FSDP2 "
                              "on 2, 131,072 tokens per step, footprint 1.36x the device limit)")
# The paper's per-GPU TFLOPS of TRANSIT-Advise against no offload by the share of GPUs removed
# (section 4.2, Figures 7 and 11): +3-4 % at 16-32 % fewer GPUs, about 90 % at 50 %, 18 % lost at
# 60 % and 25 % at 75 %.
PAPER_EFFICIENCY_CURVE = ((0.0, 1.0), (0.16, 1.035), (0.32, 1.035), (0.5, 0.90), (0.6, 0.82), (0.75, 0.75))
PAPER_FACTORS = "the paper's section 4.3: +50 % (of 0-137 %), -55 % (of 0-55 %), 0 % (of -5..5 %)"


@dataclass(frozen=True)
class Efficiency:
    """Per-GPU throughput of a reduced job relative to the job as it was (1 = no loss)."""

    value: float = MEASURED_EFFICIENCY
    curve: tuple[tuple[float, float], ...] = ()    # (fraction of nodes removed, efficiency), sorted
    source: str = MEASURED_EFFICIENCY_SOURCE

    def check(self) -> None:
        values = [self.value, *(e for _, e in self.curve)]
        if not all(0 < v <= 2 for v in values):
            raise UsageError(f"efficiency {min(values):g}: expected values in (0, 2]")
        if any(not 0 <= removed < 1 for removed, _ in self.curve):
            raise UsageError("--efficiency-curve: each removed fraction must be in [0, 1)")

    def at(self, removed: np.ndarray) -> np.ndarray:
        if not self.curve:
            return np.full(len(removed), self.value)
        xs, ys = zip(*self.curve)
        return np.interp(removed, xs, ys)

    def describe(self) -> dict:
        return {"value": None if self.curve else self.value,
                "curve": [{"removed_fraction": x, "efficiency": y} for x, y in self.curve],
                "source": self.source}


@dataclass(frozen=True)
class Factors:
    """Placement-transition factors (throughput changes as fractions)."""

    inter_to_intra_speedup: float = 0.5
    intra_to_inter_slowdown: float = 0.55
    slowdown_reading: str = "throughput"
    unchanged: float = 0.0
    source: str = PAPER_FACTORS

    def check(self) -> None:
        if self.inter_to_intra_speedup <= -1 or self.unchanged <= -1:
            raise UsageError("speedup factors must be above -1 (a throughput change of more than -100 %)")
        if self.slowdown_reading not in SLOWDOWN_READINGS:
            raise UsageError(f"slowdown reading {self.slowdown_reading!r}: expected throughput or runtime")
        if self.slowdown_reading == "throughput" and not 0 <= self.intra_to_inter_slowdown < 1:
            raise UsageError(f"intra_to_inter_slowdown {self.intra_to_inter_slowdown} must be in [0, 1) "
                             "when read as a throughput loss")
        if self.intra_to_inter_slowdown < 0:
            raise UsageError(f"intra_to_inter_slowdown {self.intra_to_inter_slowdown} must be 0 or more")

    def run_time_multipliers(self) -> tuple[float, float, float]:
        """Run-time multipliers for (several racks -> one, one -> several, kind kept)."""
        if self.slowdown_reading == "throughput":
            to_inter = 1 / (1 - self.intra_to_inter_slowdown)
        else:
            to_inter = 1 + self.intra_to_inter_slowdown
        return 1 / (1 + self.inter_to_intra_speedup), to_inter, 1 / (1 + self.unchanged)


def read_factors(path: str) -> tuple[Factors, Efficiency | None]:
    """Factors from a ``transit.factors/1`` or ``/2`` file, and the efficiency it implies (None: the default)."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"--factors {path}: cannot read JSON ({exc})") from exc
    schema = document.get("schema") if isinstance(document, dict) else None
    if schema not in FACTORS_SCHEMAS:
        raise UsageError(f"--factors {path}: schema {schema!r}, expected one of {', '.join(FACTORS_SCHEMAS)}")
    source = str(document.get("source", path))

    def number(key: str) -> float:
        value = float(document[key])
        if not math.isfinite(value):  # Python's json reads NaN and Infinity; no factor is either
            raise ValueError(f"{key} is {value}")
        return value

    try:
        factors = Factors(number("inter_to_intra_speedup"), number("intra_to_inter_slowdown"),
                          str(document.get("slowdown_reading", "throughput")), number("unchanged"), source)
        if schema == FACTORS_SCHEMAS[0]:
            efficiency = Efficiency(1.0, (), f"1 ({schema}: factors already relative to the no-offload baseline)")
        else:
            efficiency = Efficiency(number("per_gpu_efficiency"), (), source)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"--factors {path}: needs finite numbers inter_to_intra_speedup, intra_to_inter_slowdown, "
                         f"unchanged (and per_gpu_efficiency in /2) ({exc})") from exc
    factors.check()
    efficiency.check()
    return factors, efficiency


@dataclass
class Trace:
    """A trace ready for replay: sorted by submit time, times from the first submit."""

    ids: list[str]
    submit: np.ndarray
    duration: np.ndarray
    gpus: np.ndarray
    nodes: np.ndarray            # nodes the trace says the job ran on, 0 when it does not say
    recorded_start: np.ndarray   # NaN where the trace has no start
    cluster: list[str]
    params: np.ndarray           # NaN where unknown
    dp: np.ndarray               # 0 where unknown
    tp: np.ndarray               # 1 where unknown
    time_limit: np.ndarray       # seconds, NaN where the trace does not say

    def __len__(self) -> int:
        return len(self.ids)


def prepare(jobs: list[Job]) -> Trace:
    ordered = sorted(jobs, key=lambda j: j.submit)
    first = ordered[0].submit if ordered else 0.0
    nan = float("nan")
    return Trace(
        ids=[j.job_id for j in ordered],
        submit=np.array([j.submit - first for j in ordered], dtype=float),
        duration=np.array([j.duration for j in ordered], dtype=float),
        gpus=np.array([j.gpus for j in ordered], dtype=np.int64),
        nodes=np.array([j.nodes or 0 for j in ordered], dtype=np.int64),
        recorded_start=np.array([nan if j.start is None else j.start - first for j in ordered], dtype=float),
        cluster=[j.cluster for j in ordered],
        params=np.array([nan if j.params is None else j.params for j in ordered], dtype=float),
        dp=np.array([j.dp or 0 for j in ordered], dtype=np.int64),
        tp=np.array([j.tp or 1 for j in ordered], dtype=np.int64),
        time_limit=np.array([nan if j.time_limit is None else j.time_limit for j in ordered], dtype=float),
    )


@dataclass(frozen=True)
class Setup:
    racks: int
    gpus_per_node: int
    reduction: float
    placement: str = "pack"
    backfill: bool = False
    factors: Factors = field(default_factory=Factors)
    baseline_racks: int | None = None    # replay the baseline on another cluster size
    efficiency: Efficiency = field(default_factory=Efficiency)
    network: Network = field(default_factory=Network)
    nodes: int | None = None             # both clusters have this many nodes (the last rack partly filled)
    backfill_interval: float = 0.0       # seconds between backfill passes (Slurm's bf_interval); 0: every event

    @property
    def baseline_cluster_racks(self) -> int:
        return self.baseline_racks or self.racks

    @property
    def cluster_nodes(self) -> int:
        """Nodes of TRANSIT's cluster."""
        return self.nodes or nodes_per_cluster(self.racks, self.gpus_per_node)

    @property
    def baseline_cluster_nodes(self) -> int:
        if self.baseline_racks:
            return nodes_per_cluster(self.baseline_racks, self.gpus_per_node)
        return self.cluster_nodes


def nodes_per_cluster(racks: int, gpus_per_node: int) -> int:
    return racks * RACK_GPUS // gpus_per_node


@dataclass
class Shape:
    """How each job is sized under a setup: nodes and GPUs as is and with TRANSIT."""

    nodes: np.ndarray           # nodes as is: the trace's count, at least enough for its GPUs
    eligible: np.ndarray        # ran on more than one node
    reduced: np.ndarray         # eligible and given fewer nodes by TRANSIT
    transit_nodes: np.ndarray
    transit_gpus: np.ndarray
    transit_duration: np.ndarray   # before the placement-transition factor
    efficiency: np.ndarray         # applied to the reduced jobs (1 elsewhere)


def shape(trace: Trace, setup: Setup) -> Shape:
    per_node = setup.gpus_per_node
    nodes = np.maximum(trace.nodes, -(-trace.gpus // per_node))
    eligible = nodes > 1
    counts = np.unique(nodes[eligible])
    kept = nodes.copy()
    if len(counts):
        rule = np.array([reduced_nodes(int(n), setup.reduction) for n in counts], dtype=np.int64)
        kept[eligible] = rule[np.searchsorted(counts, nodes[eligible])]
    reduced = eligible & (kept < nodes)
    gpus_per_job_node = -(-trace.gpus // np.maximum(nodes, 1))
    transit_gpus = np.where(reduced, gpus_per_job_node * kept, trace.gpus)
    efficiency = np.where(reduced, setup.efficiency.at(1 - kept / np.maximum(nodes, 1)), 1.0)
    transit_duration = trace.duration * trace.gpus / np.maximum(transit_gpus, 1) / efficiency
    return Shape(nodes, eligible, reduced, kept, transit_gpus, transit_duration, efficiency)


@dataclass
class Run:
    """One replay over the whole trace: per job, what happened (NaN / 0 where it did not run)."""

    ran: np.ndarray
    drop_reason: list[str]
    start: np.ndarray
    end: np.ndarray
    run_time: np.ndarray        # without contention
    racks: np.ndarray
    nodes: np.ndarray
    held_gpus: np.ndarray
    gpus: np.ndarray            # GPUs asked for in this scenario
    dp: np.ndarray              # data-parallel degree in this scenario
    boundary_bytes_per_step: np.ndarray
    steps: np.ndarray
    total_gpus: int
    seconds: float              # wall time of the replay

    @property
    def contention_s(self) -> np.ndarray:
        """Seconds each job ran longer than its run time (under ``ROUNDING_S``: float rounding, 0)."""
        delay = np.where(self.ran, self.end - self.start - self.run_time, 0.0)
        return np.where(delay > ROUNDING_S, delay, 0.0)

    @property
    def cross_rack_bytes(self) -> np.ndarray:
        return np.where(self.ran & (self.racks > 1), self.racks * self.boundary_bytes_per_step * self.steps, 0.0)

    @property
    def inter_node_bytes(self) -> np.ndarray:
        return np.where(self.ran & (self.nodes > 1), self.nodes * self.boundary_bytes_per_step * self.steps, 0.0)


def too_big_for_baseline(setup: Setup) -> str:
    """The reason a job the baseline's cluster cannot hold is left out."""
    return f"larger than the baseline's {_size(setup.baseline_cluster_nodes, setup.baseline_cluster_racks, setup)}"


def _size(nodes: int, racks: int, setup: Setup) -> str:
    """ "8 nodes of 2 racks", or "4 nodes" for a cluster of ``--nodes``."""
    return f"{nodes} nodes" if nodes != nodes_per_cluster(racks, setup.gpus_per_node) else f"{nodes} nodes of {racks} racks"


def left_out(setup: Setup, sized: Shape) -> list[str]:
    """Why each job is left out of both replays ('' for the jobs both replay): the baseline's
    cluster cannot hold it as is, or TRANSIT's cannot hold it even reduced."""
    base_limit, transit_limit = setup.baseline_cluster_nodes, setup.cluster_nodes
    transit_reason = f"larger than TRANSIT's {_size(transit_limit, setup.racks, setup)}, even reduced"
    base_reason = too_big_for_baseline(setup)
    return [base_reason if before > base_limit else transit_reason if after > transit_limit else ""
            for before, after in zip(sized.nodes.tolist(), sized.transit_nodes.tolist())]


def held_by_transit(setup: Setup, sized: Shape) -> list[str]:
    """Why each job is left out of a TRANSIT replay that admits every job TRANSIT's cluster holds."""
    limit = setup.cluster_nodes
    reason = f"larger than TRANSIT's {_size(limit, setup.racks, setup)}, even reduced"
    return [reason if after > limit else "" for after in sized.transit_nodes.tolist()]


def backfill_estimate(trace: Trace, duration: np.ndarray) -> np.ndarray | None:
    """What backfill plans each job to run: its time limit where the trace records one (scaled as
    its run time is, in the TRANSIT scenario), as Slurm's backfill plans; None: the run times."""
    known = ~np.isnan(trace.time_limit)
    if not known.any():
        return None
    return np.where(known, trace.time_limit * duration / np.maximum(trace.duration, 1e-9), duration)


def _run(trace: Trace, racks: int, cluster_nodes: int, setup: Setup, gpus: np.ndarray, nodes: np.ndarray,
         duration: np.ndarray, dp: np.ndarray, traffic_of: Traffic, reasons: list[str], duration_at_start=None,
         progress=None) -> Run:
    per_node = setup.gpus_per_node
    ran = np.array([not reason for reason in reasons], dtype=bool)
    index = np.flatnonzero(ran)
    cluster = Cluster(racks, per_node, setup.placement, cluster_nodes)
    boundary = traffic_of.boundary_bytes_per_step(dp)
    contention = None
    if setup.network.contention:
        contention = Contention(boundary[index].tolist(), traffic_of.steps[index].tolist(),
                                setup.network.node_bytes_per_s(per_node), setup.network.uplink_bytes_per_s())
    # a job takes whole nodes unless it is a single-node job smaller than a node (placement.py)
    whole = np.where((nodes > 1) | (gpus >= per_node), nodes, 0)[index].tolist()
    began = time.perf_counter()
    estimate = backfill_estimate(trace, duration)
    result = replay(trace.submit[index].tolist(), gpus[index].tolist(), whole, duration[index].tolist(), cluster,
                    setup.backfill, duration_at_start(index) if duration_at_start else None, contention, progress,
                    None if estimate is None else estimate[index].tolist(), setup.backfill_interval)
    seconds = time.perf_counter() - began
    return _spread(result, index, len(trace), ran, reasons, gpus, dp, boundary, traffic_of.steps, seconds)


def _spread(result: Replay, index: np.ndarray, count: int, ran: np.ndarray, reasons: list[str], gpus: np.ndarray,
            dp: np.ndarray, boundary: np.ndarray, steps: np.ndarray, seconds: float) -> Run:
    def full(values: list, fill: float = np.nan, dtype=float) -> np.ndarray:
        array = np.full(count, fill, dtype=dtype)
        array[index] = values
        return array

    return Run(ran, reasons, full(result.start), full(result.end), full(result.run_time),
               full(result.racks, 0, np.int64), full(result.nodes, 0, np.int64), full(result.held_gpus, 0, np.int64),
               gpus, dp, boundary, steps, result.total_gpus, seconds)


def baseline_traffic(trace: Trace, setup: Setup, sized: Shape) -> Traffic:
    return traffic(setup.network, trace.gpus, sized.nodes, trace.duration, trace.params, trace.dp, trace.tp,
                   setup.gpus_per_node)


def run_baseline(trace: Trace, setup: Setup, progress=None) -> Run:
    """The trace as is, over the jobs both scenarios replay."""
    sized = shape(trace, setup)
    flows = baseline_traffic(trace, setup, sized)
    return _run(trace, setup.baseline_cluster_racks, setup.baseline_cluster_nodes, setup, trace.gpus, sized.nodes,
                trace.duration, flows.dp, flows, left_out(setup, sized), progress=progress)


def baseline_racks_before(baseline: Run, sized: Shape, gpus_per_node: int) -> np.ndarray:
    """Racks each job spanned as is: in the baseline replay, else the fewest its nodes need."""
    fewest = -(-sized.nodes // (RACK_GPUS // gpus_per_node))
    return np.where(baseline.ran, baseline.racks, fewest)


def run_transit(trace: Trace, setup: Setup, baseline: Run, progress=None, reasons: list[str] | None = None) -> Run:
    """Replay with eligible jobs reduced; transitions compare with ``baseline``'s racks per job.
    ``reasons``: why each job is left out (default: ``left_out``, the jobs the baseline replays)."""
    sized = shape(trace, setup)
    flows = baseline_traffic(trace, setup, sized)
    dp = np.where(sized.reduced, flows.dp * sized.transit_nodes / np.maximum(sized.nodes, 1), flows.dp)
    before = baseline_racks_before(baseline, sized, setup.gpus_per_node)
    to_intra, to_inter, same = setup.factors.run_time_multipliers()

    def duration_at_start(index: np.ndarray):
        reduced = sized.reduced[index].tolist()
        racks_before = before[index].tolist()
        scaled = sized.transit_duration[index].tolist()

        def at_start(job: int, racks_now: int) -> float:
            if not reduced[job]:
                return scaled[job]
            if racks_before[job] > 1 and racks_now == 1:
                return scaled[job] * to_intra
            if racks_before[job] == 1 and racks_now > 1:
                return scaled[job] * to_inter
            return scaled[job] * same
        return at_start

    return _run(trace, setup.racks, setup.cluster_nodes, setup, sized.transit_gpus, sized.transit_nodes,
                sized.transit_duration, dp, flows, left_out(setup, sized) if reasons is None else reasons,
                duration_at_start, progress)


def describe_setup(setup: Setup) -> dict:
    return {
        "racks": setup.racks,
        "baseline_racks": setup.baseline_cluster_racks,
        "rack_gpus": RACK_GPUS,
        "gpus_per_node": setup.gpus_per_node,
        "nodes": setup.cluster_nodes,
        "baseline_nodes": setup.baseline_cluster_nodes,
        "reduction": setup.reduction,
        "placement": setup.placement,
        "backfill": setup.backfill,
        "backfill_interval_s": setup.backfill_interval,
    }


def describe_model(setup: Setup) -> dict:
    to_intra, to_inter, same = setup.factors.run_time_multipliers()
    network = setup.network
    return {
        "efficiency": setup.efficiency.describe(),
        "factors": {
            "inter_to_intra_speedup": setup.factors.inter_to_intra_speedup,
            "intra_to_inter_slowdown": setup.factors.intra_to_inter_slowdown,
            "slowdown_reading": setup.factors.slowdown_reading,
            "unchanged": setup.factors.unchanged,
            "run_time_multipliers": {"inter_to_intra": to_intra, "intra_to_inter": to_inter, "unchanged": same},
            "source": setup.factors.source,
        },
        "network": {
            "nic_gbps": network.nic_gbps,
            "oversubscription": network.oversubscription,
            "comm_fraction": network.comm_fraction,
            "contention": network.contention,
            "uplink_gbps": RACK_GPUS * network.nic_gbps / network.oversubscription,
            "node_gbps": setup.gpus_per_node * network.nic_gbps,
        },
    }
