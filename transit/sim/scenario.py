"""The two scenarios of the paper's section 4.3: the trace as is, and with TRANSIT node reduction.

TRANSIT scenario: an *eligible* job (one that needs more than one node) keeps
``reduced_nodes(nodes, r)`` nodes. Its run time first scales by ``nodes / reduced nodes`` (the
same work on fewer GPUs), then by a placement-transition factor that compares the racks it spans
now with the racks it spanned in the baseline replay:

* inter-rack before, one rack now: run time / (1 + ``inter_to_intra_speedup``)
* one rack before, several now:    run time / (1 - ``intra_to_inter_slowdown``)
* anything else:                   run time / (1 + ``unchanged``)

Factors are throughput changes as fractions. Defaults follow the paper: it assumes a 50 %
speedup for its reduced-cluster result (range 0-137 %); the slowdown is the pessimistic end of its
0-55 % range; ``unchanged`` is the middle of its -5..5 % range.

``--factors FILE`` reads them from a JSON file written by the GPU benchmark, schema
``transit.factors/1``::

    {"schema": "transit.factors/1",
     "inter_to_intra_speedup": 0.5,     # TRANSIT-Advise at 400 Gbps over no offload at 100 Gbps, - 1
     "intra_to_inter_slowdown": 0.3,    # 1 - TRANSIT-Advise at 100 Gbps over no offload at 400 Gbps
     "unchanged": 0.02,                 # TRANSIT-Advise over no offload, same network, - 1
     "source": "bench/results/....json (command, commit, device)"}
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from transit.errors import UsageError
from transit.plan import reduced_nodes
from transit.sim.engine import Replay, replay
from transit.sim.jobs import Job
from transit.sim.placement import Cluster

FACTORS_SCHEMA = "transit.factors/1"


@dataclass(frozen=True)
class Factors:
    inter_to_intra_speedup: float = 0.5
    intra_to_inter_slowdown: float = 0.55
    unchanged: float = 0.0
    source: str = "defaults from the paper's section 4.3"

    def check(self) -> None:
        if self.inter_to_intra_speedup <= -1 or self.unchanged <= -1:
            raise UsageError("speedup factors must be above -1 (a throughput change of more than -100 %)")
        if not 0 <= self.intra_to_inter_slowdown < 1:
            raise UsageError(f"intra_to_inter_slowdown {self.intra_to_inter_slowdown} must be in [0, 1)")


def read_factors(path: str) -> Factors:
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"--factors {path}: cannot read JSON ({exc})") from exc
    schema = document.get("schema") if isinstance(document, dict) else None
    if schema != FACTORS_SCHEMA:
        raise UsageError(f"--factors {path}: schema {schema!r}, expected {FACTORS_SCHEMA!r}")
    try:
        factors = Factors(float(document["inter_to_intra_speedup"]), float(document["intra_to_inter_slowdown"]),
                          float(document["unchanged"]), str(document.get("source", path)))
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"--factors {path}: needs numeric inter_to_intra_speedup, "
                         f"intra_to_inter_slowdown and unchanged ({exc})") from exc
    factors.check()
    return factors



@dataclass
class Trace:
    """A trace ready for replay: sorted by submit time, starting at 0, jobs too big dropped (counted)."""

    submit: list[float]
    gpus: list[int]
    duration: list[float]
    too_big: int          # jobs needing more nodes than the smallest simulated cluster


def prepare(jobs: list[Job], max_gpus: int) -> Trace:
    ordered = sorted((j for j in jobs if j.gpus <= max_gpus), key=lambda j: j.submit)
    first = ordered[0].submit if ordered else 0.0
    return Trace([j.submit - first for j in ordered], [j.gpus for j in ordered],
                 [j.duration for j in ordered], len(jobs) - len(ordered))


def run_baseline(trace: Trace, racks: int, gpus_per_node: int, placement: str, backfill: bool) -> Replay:
    return replay(trace.submit, trace.gpus, trace.duration, Cluster(racks, gpus_per_node, placement), backfill)


def run_transit(trace: Trace, racks: int, gpus_per_node: int, placement: str, backfill: bool,
                reduction: float, factors: Factors, baseline_racks: list[int]) -> Replay:
    """Replay with eligible jobs reduced; transitions compare with ``baseline_racks`` per job."""
    cluster = Cluster(racks, gpus_per_node, placement)
    gpus = list(trace.gpus)
    scaled = list(trace.duration)
    eligible = [False] * len(gpus)
    for job, asked in enumerate(trace.gpus):
        nodes = cluster.nodes_for(asked)
        if nodes > 1:
            kept = reduced_nodes(nodes, reduction)
            gpus[job] = kept * gpus_per_node
            scaled[job] = trace.duration[job] * nodes / kept
            eligible[job] = True
    to_intra = 1 + factors.inter_to_intra_speedup
    to_inter = 1 - factors.intra_to_inter_slowdown
    same = 1 + factors.unchanged

    def duration_at_start(job: int, racks_now: int) -> float:
        if not eligible[job]:
            return scaled[job]
        before = baseline_racks[job]
        if before > 1 and racks_now == 1:
            return scaled[job] / to_intra
        if before == 1 and racks_now > 1:
            return scaled[job] / to_inter
        return scaled[job] / same

    return replay(trace.submit, gpus, scaled, cluster, backfill, duration_at_start)
