"""The benchmark's experiments: each System (one configuration of one system, an experiment's row),
each Experiment (its systems, repeats and the claim it measures), the catalogue EXPERIMENTS, and
an experiment as the command line resolves it (claim (b)'s micro-batches from its searches, another
model, emulated nodes). bench/README.md says what each experiment measures.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, replace
from pathlib import Path

from bench.common import NON_ALLOCATOR_MARGIN_BYTES, SettleRule, parse_size
from bench.model import config_by_name
from transit.errors import UsageError

MODEL = "bench"
REPEATS = 3
# Every system but TRANSIT reaches its step time after step 0 (allocation, autotuning).
FRAMEWORK_SETTLE = SettleRule(first=1, max_start=6)
# TRANSIT profiles TRANSIT_WARMUP_ITERS=2 iterations, drains the third and applies its policy in the
# fourth (bench/run_compare.sh): its steady state can start at step 4.
TRANSIT_SETTLE = SettleRule(first=4, max_start=6)
# A calibration run (fair memory) needs TRANSIT's peak: its warm-up, where the cap-27 experiments saw
# it (bench/README.md), and SETTLE_WINDOW steps after; the timed repeats' peaks are reported too.
CALIBRATION_SETTLE = SettleRule(first=TRANSIT_SETTLE.first, max_start=TRANSIT_SETTLE.first,
                                timed=TRANSIT_SETTLE.window)
KINDS = ("fsdp2", "fsdp2-cpu-offload", "zero-offload", "zero-infinity", "zenflow", "transit")
DEEPSPEED_KINDS = ("zero-offload", "zero-infinity", "zenflow")
# The device machines' kinds and their GPUs: every experiment of issues 53-55 runs on one GPU (issue
# 54 item 1); issue 61's scale-in on GPUs of their own needs several.
MACHINES = {"nvidia-h200": 1, "nvidia-h100-x1": 1, "nvidia-h100-x2": 2, "nvidia-h100-x4": 4}


@dataclass(frozen=True)
class System:
    """One configuration of one system; an experiment's row."""

    name: str
    kind: str
    gpus: int
    global_batch: int
    local_batch: int = 4
    cap: str | None = None  # per-GPU cap: the frameworks' allocator cap; TRANSIT's L before fair memory
    policy: str | None = None
    tp: int = 1
    deterministic: bool = False
    cores_per_rank: int | None = None  # None: every rank may use every core
    reference: str | None = None  # whose losses this one's are compared with, bit for bit
    model: str = MODEL
    # emulated nodes (scripts/emulate-nodes) on the first `gpus` GPUs, ranks round-robin over them,
    # NCCL over sockets on lo; 0: one rank per GPU, NCCL's own transport within the host
    nodes: int = 0
    ranks_per_node: int = 1
    # TRANSIT's L itself, per rank (no cap, so no fair-memory calibration): an experiment that
    # holds L fixed across its systems
    mem_limit: str | None = None
    settle_rule: SettleRule | None = None  # None: the protocol's rule for the kind
    env: tuple[tuple[str, str], ...] = ()  # more environment for the run (e.g. TRANSIT_HYBRID_GUARD=0)
    # more bench/train.py options (e.g. --canary, --pcie-split: issue 55's readings)
    train_args: tuple[str, ...] = ()

    @property
    def transit(self) -> bool:
        return self.kind == "transit"

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node if self.nodes else self.gpus

    @property
    def data_ranks(self) -> int:
        return self.ranks // self.tp

    @property
    def grad_accum(self) -> int:
        return self.global_batch // (self.local_batch * self.data_ranks)

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * config_by_name(self.model).seq_len

    @property
    def settle(self) -> SettleRule:
        return self.settle_rule or (TRANSIT_SETTLE if self.transit else FRAMEWORK_SETTLE)

    def rule(self, repeat: int) -> SettleRule:
        """The settle rule of one run: repeat 0 is a calibration run."""
        return CALIBRATION_SETTLE if repeat == 0 else self.settle

    @property
    def cap_bytes(self) -> int | None:
        return parse_size(self.cap) if self.cap else None

    @property
    def mem_limit_bytes(self) -> int | None:
        return parse_size(self.mem_limit) if self.mem_limit else None

    def check(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: kind {self.kind!r}; known: {', '.join(KINDS)}")
        if self.nodes and self.ranks % self.gpus:
            raise ValueError(f"{self.name}: {self.ranks} emulated ranks do not spread evenly over {self.gpus} GPUs")
        if self.mem_limit and (not self.transit or self.cap):
            raise ValueError(f"{self.name}: mem_limit is TRANSIT's L without a cap; {self.kind} with cap {self.cap}")
        if self.train_args and self.kind in DEEPSPEED_KINDS:
            raise ValueError(f"{self.name}: train_args are bench/train.py's; {self.kind} runs deepspeed_train.py")
        if self.global_batch % (self.local_batch * self.data_ranks):
            raise ValueError(f"{self.name}: global batch {self.global_batch} is not a multiple of "
                             f"{self.local_batch} x {self.data_ranks} ranks")


@dataclass(frozen=True)
class Experiment:
    name: str
    claim: str  # the issue item and the paper's claim it measures
    machine: str  # the device kind (MACHINES)
    systems: tuple[System, ...]
    repeats: int = REPEATS
    search: bool = False  # a micro-batch search: one run per system, no repeats
    # a bitwise loss check: its systems may run deterministic kernels, and its timings are no result
    correctness: bool = False
    note: str = ""

    def check(self) -> None:
        if self.machine not in MACHINES:
            raise ValueError(f"{self.name}: machine {self.machine!r}; known kinds: {', '.join(MACHINES)}")
        for system in self.systems:
            system.check()
            if system.gpus > MACHINES[self.machine]:
                raise ValueError(f"{self.name}: {system.name} needs {system.gpus} GPUs; {self.machine} has "
                                 f"{MACHINES[self.machine]}")
            if system.deterministic and not self.correctness:
                raise ValueError(f"{self.name}: {system.name} is deterministic; timings never are (issue 54 item 2)")


def _control(gpus: int, gb: int, **kw) -> System:
    return System(f"fsdp2-{gpus}gpu-gb{gb}", "fsdp2", gpus, gb, **kw)


def _transit_1gpu(policies: tuple[str, ...], batches: tuple[int, ...]) -> tuple[System, ...]:
    """Each batch's uncapped one-GPU control, then TRANSIT's policies at cap 27 GiB against it."""
    return tuple(system for gb in batches for system in (
        _control(1, gb), *(System(f"transit-{p}-gb{gb}", "transit", 1, gb, cap="27G", policy=p,
                                  reference=f"fsdp2-1gpu-gb{gb}") for p in policies)))


# Claim (b) on one GPU (issue 54 item 3): every offload at the same cap and tokens per step (TRANSIT's
# footprint about 1.36x its L there, bench/README.md "Sizing"), each system at its best micro-batch
# from a recorded search (--search-summary), every core or 10 per GPU (the paper's cluster).
CLAIM_B_CAP = "27G"
CLAIM_B_BATCHES = (8, 64)  # 16,384 and 131,072 tokens per step
CLAIM_B_SEARCH = {"transit-hybrid": (2, 4, 8), "transit-advise": (2, 4, 8), "zero-offload": (4, 8, 16),
                  "zero-infinity": (4, 8, 16), "zenflow": (4, 8, 16), "fsdp2-cpu-offload": (4, 8, 16)}
CLAIM_B_DEFAULT_MICRO = {"transit-hybrid": 4, "transit-advise": 4, "zero-offload": 8, "zero-infinity": 8,
                         "zenflow": 8, "fsdp2-cpu-offload": 8}
# Groups small enough that one experiment fits EXPERIMENT_BUDGET_S: each TRANSIT policy alternates with
# ZeRO-Offload (the fastest framework on record, compare-gb64-mb16-h200) and one more framework; FSDP2's
# CPU offload (36-44 s a step at global batch 64) fits only alone.
CLAIM_B_GROUPS = {"claim-b": ("transit-hybrid", "zero-offload", "zero-infinity"),
                  "claim-b-more": ("transit-advise", "zero-offload", "zenflow"),
                  "claim-b-fsdp": ("fsdp2-cpu-offload",)}
CLAIM_B_CORES = (None, 10)


def _claim_b_system(family: str, gb: int, micro: int, cores: int | None) -> System:
    name = f"{family}-gb{gb}-mb{micro}" + (f"-{cores}cores" if cores else "")
    if family.startswith("transit-"):
        return System(name, "transit", 1, gb, micro, cap=CLAIM_B_CAP, policy=family.removeprefix("transit-"),
                      cores_per_rank=cores)
    return System(name, family, 1, gb, micro, cap=CLAIM_B_CAP, cores_per_rank=cores)


def claim_b_systems(families: tuple[str, ...], gb: int, micro: dict[str, int], cores: int | None) -> tuple[System, ...]:
    """ZenFlow changes the update (its CPU step lags, on the top gradients only): its losses are
    compared with exact AdamW's, ZeRO-Offload's in the same repeat, when the group has both."""
    systems = [_claim_b_system(family, gb, micro[family], cores) for family in families]
    exact = {s.kind: s.name for s in systems}.get("zero-offload")
    return tuple(replace(s, reference=exact) if s.kind == "zenflow" and exact else s for s in systems)


def _claim_b_experiments() -> list[Experiment]:
    out = []
    for gb in CLAIM_B_BATCHES:
        tokens = f"{gb * 2048:,} tokens per step"
        out += [Experiment(f"claim-b-search-gb{gb}-{family}", f"claim (b): {family}'s micro-batches at cap "
                           f"{CLAIM_B_CAP}, {tokens}, one run each", "nvidia-h200",
                           tuple(_claim_b_system(family, gb, m, None) for m in micros if gb % m == 0),
                           repeats=1, search=True)
                for family, micros in CLAIM_B_SEARCH.items()]
        out += [Experiment(group + f"-gb{gb}" + (f"-{cores}cores" if cores else ""),
                           f"claim (b) on one GPU: cap {CLAIM_B_CAP}, {tokens}, {' vs '.join(families)}, each at "
                           "its best micro-batch, " + (f"{cores} CPU cores per GPU (the paper's cluster)" if cores
                                                      else "every CPU core"), "nvidia-h200",
                           claim_b_systems(families, gb, CLAIM_B_DEFAULT_MICRO, cores),
                           note="micro-batches: the defaults until --search-summary names the searches' summaries")
                for group, families in CLAIM_B_GROUPS.items() for cores in CLAIM_B_CORES]
    return out


# Issue 36 item 3 on emulated nodes sharing one GPU: TRANSIT on 2 ranks at a per-rank cap at which the
# model needs 4 ranks without offload (FSDP2's estimated peak: 9.5 GiB per rank on 4, 15.9 on 2,
# bench/estimate_memory.py) against native FSDP2 on 2 uncapped; a bitwise loss check (deterministic
# kernels), so one repeat; once more with TP 2 inside one node. The GPU tier checks the same on the
# small model (tests/gpu/test_emulated_nodes.py).
TWO_RANK_CAP, TWO_RANK_BATCH = "13G", 8


def _two_rank(tp: int) -> tuple[System, ...]:
    tag = "" if tp == 1 else f"-tp{tp}"
    nodes, per_node = (2, 1) if tp == 1 else (1, 2)
    ref = System(f"fsdp2-2rank-uncapped{tag}", "fsdp2", 1, TWO_RANK_BATCH, tp=tp, deterministic=True, nodes=nodes,
                 ranks_per_node=per_node)
    return (ref, System(f"transit-advise-2rank{tag}", "transit", 1, TWO_RANK_BATCH, cap=TWO_RANK_CAP,
                        policy="advise", tp=tp, deterministic=True, reference=ref.name, nodes=nodes,
                        ranks_per_node=per_node))


# Issue 53 item 3, the scale-in (the paper's claim c) on emulated nodes sharing one GPU: native FSDP2
# on N nodes at the smallest per-rank cap C that holds it, against TRANSIT advise and hybrid on fewer
# nodes at L = C less the fair-memory margin; the same micro-batch, more accumulation on fewer ranks
# (what `transit launch` does). The "small" model keeps a whole experiment inside 30 device minutes.
SCALE_IN_MODEL, SCALE_IN_MICRO = "small", 2
# From scale-in-sizing.json (nvidia-h100-x1, 667b977): the uncapped ranks' largest PyTorch reserved
# peak was 3.32 GiB on 4 nodes and 4.26 on 2; C = that + the context (0.5 GiB) + the non-allocator
# margin (1.5 GiB), rounded up to 0.25 GiB. At 5.5G two nodes do not fit (they need 6.26).
SCALE_IN_CAPS: dict[int, str] = {4: "5.5G", 2: "6.5G"}  # native's nodes -> C
SCALE_IN_CASES = ((4, 2), (2, 1))  # (native's nodes, TRANSIT's)


def _scale_in_sizing() -> tuple[System, ...]:
    return tuple(System(f"fsdp2-{n}node-gb8-uncapped", "fsdp2", 1, 8, SCALE_IN_MICRO, model=SCALE_IN_MODEL, nodes=n)
                 for n in (4, 2, 1))


# At global batch 64 both policies with native do not fit one experiment (--dry-run): one per policy.
SCALE_IN_POLICIES = {8: (("advise", "hybrid"),), 64: (("advise",), ("hybrid",))}


def _scale_in(native: int, fewer: int, gb: int, policies: tuple[str, ...]) -> tuple[System, ...]:
    cap = SCALE_IN_CAPS[native]
    return (System(f"fsdp2-{native}node-gb{gb}", "fsdp2", 1, gb, SCALE_IN_MICRO, cap=cap, model=SCALE_IN_MODEL,
                   nodes=native),
            *(System(f"transit-{p}-{fewer}node-gb{gb}", "transit", 1, gb, SCALE_IN_MICRO, cap=cap, policy=p,
                     model=SCALE_IN_MODEL, nodes=fewer) for p in policies))


# Issue 61, the same scale-in on GPUs of their own (kinds with several GPUs): native FSDP2 on N GPUs
# at cap C against TRANSIT advise and hybrid on fewer, once over NCCL's transport within the host
# (NVLink) and once with every GPU an emulated node of its own (its own NCCL host: sockets on lo,
# P2P and shared memory off; the paper's bandwidth-limited case, per-node NCCL bytes from lo).
GPU_MACHINES = {4: "nvidia-h100-x4", 2: "nvidia-h100-x2"}  # native's GPUs -> the kind
SOCKETS_ENV = (("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1"))


def _scale_in_gpus(native: int, fewer: int, gb: int, sockets: bool) -> tuple[System, ...]:
    tag = f"gb{gb}" + ("-sockets" if sockets else "")
    env = SOCKETS_ENV if sockets else ()

    def system(name: str, kind: str, gpus: int, **kw) -> System:
        return System(name, kind, gpus, gb, SCALE_IN_MICRO, cap=SCALE_IN_CAPS[native], model=SCALE_IN_MODEL,
                      nodes=gpus if sockets else 0, env=env, **kw)
    return (system(f"fsdp2-{native}gpu-{tag}", "fsdp2", native),
            *(system(f"transit-{p}-{fewer}gpu-{tag}", "transit", fewer, policy=p) for p in ("advise", "hybrid")))


def _gpus_losses() -> tuple[System, ...]:
    """Issue 61's bitwise check on 2 GPUs: TRANSIT at the 4 -> 2 case's cap against native uncapped."""
    ref = System("fsdp2-2gpu-uncapped", "fsdp2", 2, 8, SCALE_IN_MICRO, model=SCALE_IN_MODEL, deterministic=True)
    return (ref, *(System(f"transit-{p}-2gpu", "transit", 2, 8, SCALE_IN_MICRO, cap=SCALE_IN_CAPS[4], policy=p,
                          model=SCALE_IN_MODEL, deterministic=True, reference=ref.name) for p in ("advise", "hybrid")))


# Issue 55: why hybrid at micro-batch 8 runs every kernel 3-4x slower than with all data resident
# (docs/design-notes.md, "Hybrid at micro-batch 8"). Global batch 8 x micro-batch 8 has 64 x 8's
# per-micro-batch overflow; 10 steps, timed 5-9 (hybrid's guard off: its own placement from step 4).
# E1: hybrid at L = 25.5 GiB with the GPU's clocks, power, PCIe bytes (before and in the optimizer
# step) and the canary logged, beside native (all resident) with the same readings. E2: advise at
# the same L, and hybrid at an L where only the optimizer moments are left on the host (its mover
# idle): the placement figures of hybrid-gb64-placement-reading-h100.json give a footprint of
# 26.52 GB placed on the device + 15.93 GB on the host = 42.46 GB, the moments 15.14 GB, so 27.32 GB
# besides them, and the canary's 2.25 GB if the allocator cannot reuse freed blocks for it: 29.57 GB.
# Hybrid places L x 31/32 (TRANSIT_EVICT_TARGET), so L >= 29.57 x 32/31 = 30.52 GB: 28.5 GiB (30.60 GB).
CAUSE_SETTLE = SettleRule(first=5, max_start=5, timed=5)
CAUSE_READINGS = ("--canary", "--pcie-split", "--host-set")
CAUSE_L, MOMENTS_ONLY_L = "25.5G", "28.5G"
GUARD_OFF = (("TRANSIT_HYBRID_GUARD", "0"),)


def _cause(name: str, kind: str, policy: str | None = None, limit: str | None = None, env=()) -> System:
    return System(name, kind, 1, 8, 8, policy=policy, mem_limit=limit, settle_rule=CAUSE_SETTLE, env=env,
                  train_args=CAUSE_READINGS)


# Issue 55 item 2: the guard on (hybrid's default) against advise at the same L, 3 alternated
# repeats. The guard takes 8 to 12 steady steps from step 4 (design-notes.md): hybrid is timed from
# step 16, once it has decided; advise by the protocol's rule.
GUARD_SETTLE = SettleRule(first=16, max_start=18, timed=4)


def _guard(gb: int, micro: int, limit: str, nodes: int = 0) -> tuple[System, ...]:
    tag = f"gb{gb}-mb{micro}" + (f"-{nodes}node" if nodes else "")
    return (System(f"transit-hybrid-guard-{tag}", "transit", 1, gb, micro, policy="hybrid", mem_limit=limit,
                   settle_rule=GUARD_SETTLE, nodes=nodes),
            System(f"transit-advise-{tag}", "transit", 1, gb, micro, policy="advise", mem_limit=limit, nodes=nodes))


def _experiments() -> list[Experiment]:
    out = [Experiment("controls-1gpu", "what no offload costs on one GPU (native FSDP2, no cap, micro-batch 4 "
                      "as TRANSIT's runs)", "nvidia-h200", (_control(1, 8), _control(1, 64)))]
    out += [Experiment(f"transit-1gpu-{policy}-gb{gb}", f"TRANSIT {policy} on one GPU at cap 27 GiB against the "
                       f"uncapped control, global batch {gb}", "nvidia-h200", _transit_1gpu((policy,), (gb,)))
            for policy in ("advise", "prefetch", "base") for gb in (8, 64)]
    out += _claim_b_experiments()
    out.append(Experiment("scale-in-sizing", "native FSDP2 uncapped on 4, 2 and 1 emulated nodes (one GPU), "
                          "global batch 8: each rank's peak, for the scale-in's caps", "nvidia-h100-x1",
                          _scale_in_sizing(), repeats=1, search=True))
    out += [Experiment(f"scale-in-{n}to{m}-gb{gb}" + (f"-{policies[0]}" if len(policies) == 1 else ""),
                       f"claim (c) on emulated nodes: native FSDP2 on {n} emulated nodes at cap {SCALE_IN_CAPS[n]} "
                       f"per rank against TRANSIT {' and '.join(policies)} on {m}, one GPU, global batch {gb}; job "
                       "tokens/s on the same GPU, NCCL bytes per node", "nvidia-h100-x1", _scale_in(n, m, gb, policies))
            for n, m in SCALE_IN_CASES for gb, cases in SCALE_IN_POLICIES.items() for policies in cases]
    out += [Experiment(f"scale-in-{n}to{m}-gb8-gpus" + ("-sockets" if sockets else ""),
                       f"issue 61, claim (c) on GPUs of their own: native FSDP2 on {n} GPUs at cap {SCALE_IN_CAPS[n]} "
                       f"against TRANSIT advise and hybrid on {m}, global batch 8, NCCL "
                       + ("over sockets on lo between GPUs as emulated nodes, P2P and shared memory off" if sockets
                          else "within the host (NVLink)") + "; per-GPU TFLOPS", GPU_MACHINES[n],
                       _scale_in_gpus(n, m, 8, sockets))
            for n, m in SCALE_IN_CASES for sockets in (False, True)]
    out.append(Experiment("transit-gpus-losses", "issue 61: TRANSIT advise and hybrid on 2 GPUs at cap "
                          f"{SCALE_IN_CAPS[4]} against native FSDP2 on 2 uncapped; deterministic, losses bit for bit",
                          "nvidia-h100-x2", _gpus_losses(), repeats=1, correctness=True))
    out.append(Experiment("transit-2rank", "TRANSIT on 2 emulated nodes (one GPU, FSDP2 + NCCL over sockets, cap "
                          "13 GiB per rank, where the model needs 4 ranks without offload) against native FSDP2 on 2 "
                          "uncapped; deterministic, losses bit for bit; once more with TP 2 in one node",
                          "nvidia-h200", (*_two_rank(1), *_two_rank(2)), repeats=1, correctness=True))
    out += [
        Experiment("hybrid-cause-e1", "issue 55 E1: hybrid (guard off) at L = 25.5 GiB, global batch 8 x micro-batch 8, "
                   "against native, with SM and memory clocks, power, clock event reasons, PCIe bytes before and in "
                   "the optimizer step, and a canary after every step: is the slowdown global or the data's own?",
                   "nvidia-h100-x1", (_cause("transit-hybrid-e1", "transit", "hybrid", CAUSE_L, GUARD_OFF),
                                      _cause("fsdp2-e1", "fsdp2")), repeats=1),
        Experiment("hybrid-cause-e2a", "issue 55 E2 (a): advise at L = 25.5 GiB, global batch 8 x micro-batch 8, the "
                   "same readings: is limit mode slow at micro-batch 8 whatever the policy?", "nvidia-h100-x1",
                   (_cause("transit-advise-e2", "transit", "advise", CAUSE_L),), repeats=1),
        Experiment("hybrid-cause-e2b", "issue 55 E2 (b): hybrid (guard off) at L = 28.5 GiB, where only the optimizer "
                   "moments stay on the host (its mover idle), global batch 8 x micro-batch 8, the same readings",
                   "nvidia-h100-x1", (_cause("transit-hybrid-moments-e2", "transit", "hybrid", MOMENTS_ONLY_L,
                                             GUARD_OFF),), repeats=1),
        Experiment("hybrid-guard-gb64-mb8", "issue 55 item 2: hybrid with its guard against advise at L = 25.5 GiB, "
                   "global batch 64 x micro-batch 8, one GPU", "nvidia-h100-x1", _guard(64, 8, CAUSE_L), repeats=1,
                   note="one repeat: three of each need about 40 device minutes (python -m bench plan)"),
        Experiment("hybrid-guard-gb8-mb8", "issue 55 item 2: hybrid with its guard against advise at L = 25.5 GiB, "
                   "global batch 8 x micro-batch 8 (64 x 8's overflow per micro-batch), one GPU", "nvidia-h100-x1",
                   _guard(8, 8, CAUSE_L)),
        Experiment("hybrid-guard-2node", "issue 55 item 2: hybrid with its guard against advise on two emulated "
                   "nodes sharing one GPU, global batch 8, micro-batch 4, L = 14.5 GiB per rank", "nvidia-h100-x1",
                   _guard(8, 4, "14.5G", nodes=2)),
    ]
    for experiment in out:
        experiment.check()
    return out


EXPERIMENTS = {e.name: e for e in _experiments()}


def transit_limit(system: System, overshoot: int) -> int:
    """TRANSIT's L: the cap less the memory the frameworks keep outside PyTorch's allocator (their
    budget's margin, so that both stay under the cap), less its overshoot in calibration."""
    return system.cap_bytes - NON_ALLOCATOR_MARGIN_BYTES - overshoot


def system_config(system: System) -> dict:
    """A system's settings, as its plan, its runs' records and its summary row give them."""
    return {"model": system.model, "kind": system.kind, "gpus": system.gpus, "ranks": system.ranks,
            "emulated_nodes": system.nodes or None, "ranks_per_node": system.ranks_per_node if system.nodes else None,
            "global_batch": system.global_batch,
            "micro_batch": system.local_batch, "grad_accum": system.grad_accum, "tp": system.tp,
            "tokens_per_step": system.tokens_per_step, "policy": system.policy,
            "transport": ("sockets on lo (emulated nodes)" if system.nodes else
                          "NCCL within the host (NVLink)" if system.gpus > 1 else "none (one rank)"),
            "cap": system.cap, "cap_bytes": system.cap_bytes, "deterministic": system.deterministic,
            "cpu_cores_per_rank": system.cores_per_rank or "all",
            "mem_limit": system.mem_limit, "mem_limit_bytes": system.mem_limit_bytes, "env": dict(system.env) or None,
            "train_args": list(system.train_args) or None}


def claim_b_family(name: str) -> str:
    return next(f for f in CLAIM_B_SEARCH if name.startswith(f + "-"))


def best_micro_batches(search_files: list[Path], gb: int) -> dict[str, int]:
    """Each claim (b) system's micro-batch with the highest median TFLOPS at global batch `gb` in the
    searches' summaries."""
    best: dict[str, tuple[float, int]] = {}
    for path in search_files:
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or not str(doc.get("experiment") or "").startswith("claim-b-search-"):
            raise UsageError(f"--search-summary {path}: not a claim (b) micro-batch search's summary")
        for row in doc["systems"]:
            family = claim_b_family(row["name"])
            tflops = row["tflops_per_gpu"]["median"]
            if row["global_batch"] == gb and tflops is not None and tflops > best.get(family, (0.0, 0))[0]:
                best[family] = (tflops, row["micro_batch"])
    return {family: micro for family, (_, micro) in best.items()}


def resolve(args: argparse.Namespace) -> Experiment:
    experiment = EXPERIMENTS[args.experiment]
    if args.search_summary:
        if not experiment.name.startswith("claim-b") or experiment.search:
            raise UsageError("--search-summary picks claim (b)'s micro-batches: "
                             f"{', '.join(n for n, e in EXPERIMENTS.items() if n.startswith('claim-b') and not e.search)} only")
        families = tuple(claim_b_family(s.name) for s in experiment.systems)
        gb, cores = experiment.systems[0].global_batch, experiment.systems[0].cores_per_rank
        found = best_micro_batches(args.search_summary, gb)
        missing = [f for f in families if f not in found]
        if missing:
            raise UsageError(f"--search-summary: no completed search run of {', '.join(missing)} at global batch {gb}")
        experiment = replace(experiment, systems=claim_b_systems(families, gb, found, cores),
                             note=f"micro-batches from {', '.join(p.name for p in args.search_summary)}: "
                                  + ", ".join(f"{f} {found[f]}" for f in families))
    if args.model != MODEL:
        experiment = replace(experiment, systems=tuple(replace(s, model=args.model) for s in experiment.systems))
    if getattr(args, "nodes", None):  # every system as a job of N emulated nodes on the machine's GPU
        experiment = replace(experiment, systems=tuple(replace(s, nodes=args.nodes, ranks_per_node=1)
                                                       for s in experiment.systems),
                             note=(experiment.note + "; " if experiment.note else "")
                             + f"--nodes {args.nodes}: every system on {args.nodes} emulated nodes")
    experiment.check()
    return experiment
