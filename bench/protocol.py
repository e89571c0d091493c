"""The benchmark protocol: the experiments, their plan and estimates, their runs on one GPU, and
one summary JSON (transit.bench-summary/1) per experiment. `python -m bench` is its command line.

The protocol (bench/README.md), the same for every experiment, on one GPU:
- systems alternate, A B C A B C ..., for REPEATS (>= 3) repeats, one run after another;
- every run follows common.SettleRule: it stops once its step times have settled and TIMED_STEPS
  steps are timed (or, not settled by the rule's last start, timed from there, and marked so);
- fair memory: a TRANSIT system with a cap first runs once at L = cap - NON_ALLOCATOR_MARGIN_BYTES
  (its calibration run, in the summary, out of the statistics); its worst overshoot there, its own
  bound's peak over L, is taken off L for its timed repeats. Every row gives its peak by its own
  measure (PyTorch's reserved bytes; TRANSIT's bound) and by NVML, beside the cap;
- one commit for every part of an experiment; the summary says whether the hosts were one.
A device command may be limited (10 minutes on the project's device machines), so a plan is cut
into parts (--part K/N), each writing its own summary and raw archive; `merge` joins them; or one
command runs every slot within --time-limit. The summary records the estimated and the actual
device time.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from bench.common import (
    GIB,
    NON_ALLOCATOR_MARGIN_BYTES,
    SLOWING_REASONS_MASK,
    SettleRule,
    clock_event_names,
    git_commit,
    parse_size,
    window_median,
    write_json,
)
from bench.model import config_by_name
from bench.transit_stats import load_transit_stats, transit_summary

SUMMARY_SCHEMA = "transit.bench-summary/1"
REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench/results"
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
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
KINDS = ("fsdp2", "fsdp2-cpu-offload", "zero-offload", "zero-infinity", "zenflow", "transit")
DEEPSPEED_KINDS = ("zero-offload", "zero-infinity", "zenflow")
# Every experiment runs on one GPU (issue 54 item 1); the kinds of the device machines that have one.
MACHINES = ("nvidia-h200", "nvidia-h100-x1")
# Device time. A command may run 600 s; a part keeps PART_MARGIN_S of it for the setup and the end;
# one experiment, all its parts at one commit, fits EXPERIMENT_BUDGET_S.
COMMAND_LIMIT_S = 600
PART_MARGIN_S = 60
EXPERIMENT_BUDGET_S = 30 * 60
# Seconds a run spends outside its steps (start, model build, NCCL, teardown), per kind: the gaps
# between consecutive runs' end times less their step times in compare-gb64-27g-h200x2.json and
# compare-gb8-h200x2.json (raw, at 2bd697f): FSDP2 13-18 s, FSDP2 offload 19-26 s, DeepSpeed
# 32-46 s, TRANSIT 17-23 s (with its residency sweep); the largest of each.
RUN_OVERHEAD_S = {"fsdp2": 18, "fsdp2-cpu-offload": 26, "zero-offload": 46, "zero-infinity": 46,
                  "zenflow": 46, "transit": 23}
SETUP_S = 20  # bench/device_setup.sh and the wheels: 363 s command less its runs' 345 s (README)
# A run is stopped at this multiple of its estimate (at least RUN_LIMIT_MIN_S), within its part.
RUN_LIMIT_FACTOR, RUN_LIMIT_MIN_S = 2.0, 120
RUN_START_MIN_S = 60  # --time-limit: the least time left in which a run still starts
LOG_TAIL_LINES = 30


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
    # emulated nodes (scripts/emulate-nodes) sharing the machine's `gpus` GPU(s), NCCL over sockets
    # on lo; 0: one rank per GPU, no emulation
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
        if self.gpus != 1:
            raise ValueError(f"{self.name}: {self.gpus} GPUs; every system runs on one (emulated nodes share it)")
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
            raise ValueError(f"{self.name}: machine {self.machine!r}; one-GPU kinds: {', '.join(MACHINES)}")
        for system in self.systems:
            system.check()
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
CAUSE_READINGS = ("--canary", "--pcie-split")
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


# ---------------------------------------------------------------- commands

def transit_limit(system: System, overshoot: int) -> int:
    """TRANSIT's L: the cap less the memory the frameworks keep outside PyTorch's allocator (their
    budget's margin, so that both stay under the cap), less its overshoot in calibration."""
    return system.cap_bytes - NON_ALLOCATOR_MARGIN_BYTES - overshoot


def run_command(system: System, rule: SettleRule, run_dir: Path, limit: int | None,
                profile: bool) -> tuple[list[str], dict]:
    """The argv and the environment additions of one run of `system` under `rule` (on the GPU that
    CUDA_VISIBLE_DEVICES leaves first; emulated nodes spread over every GPU it leaves)."""
    if system.nodes:
        launcher = [sys.executable, "-m", "transit.emulate", str(system.nodes), "--nproc-per-node",
                    str(system.ranks_per_node)]
        if system.transit:
            launcher += ["--transit", system.policy, "--out", str(run_dir / "transit"),
                         *(["--mem-limit", str(limit)] if limit is not None else [])]
        launcher.append("--")
    else:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]
    args = ["--model", system.model, "--global-batch", str(system.global_batch), "--local-batch", str(system.local_batch),
            "--settle-from", str(rule.first), "--settle-by", str(rule.max_start), "--timed-steps", str(rule.timed),
            "--out", str(run_dir / "result.json")]
    if system.cores_per_rank:
        args += ["--cpu-cores-per-rank", str(system.cores_per_rank)]
    if system.kind in DEEPSPEED_KINDS:
        script = ["bench/deepspeed_train.py", "--system", system.kind, "--cpu-adam", "deepspeed"]
    else:
        script = ["bench/train.py", "--label", system.name, "--tp", str(system.tp)]
        if system.kind == "fsdp2-cpu-offload":
            script += ["--offload", "fsdp-cpu"]
        if system.deterministic:
            script += ["--deterministic"]
        if system.transit:
            script += ["--residency-sweep"]
        script += list(system.train_args)
    if system.cap and not system.transit:
        args += ["--mem-cap", system.cap]
    env = dict(MULTICAST_OFF) | dict(system.env)
    if system.cores_per_rank:
        env["OMP_NUM_THREADS"] = str(system.cores_per_rank)
    argv = [*launcher, *script, *args]
    if system.transit and system.nodes:
        if profile:
            env["TRANSIT_PROFILE"] = "1"
    elif system.transit:
        mem = ["--mem-limit", str(limit)] if limit is not None else []
        argv = [sys.executable, "-m", "transit", "run", "--policy", system.policy, *mem,
                "--out", str(run_dir / "transit"), "--", *argv]
        if profile:
            env["TRANSIT_PROFILE"] = "1"
    return argv, env


# ---------------------------------------------------------------- the plan

@dataclass
class Run:
    system: System
    repeat: int  # 0: TRANSIT's calibration run (fair memory), 1..: the timed repeats

    @property
    def id(self) -> str:
        return f"{self.system.name}.r{self.repeat}" if self.repeat else f"{self.system.name}.calibration"

    @property
    def calibrated(self) -> bool:
        """Whether this system's timed repeats wait for a calibration run."""
        return self.system.transit and self.system.cap is not None


def plan(experiment: Experiment) -> list[Run]:
    """The experiment's runs in the order they start: calibrations, then A B C A B C ..."""
    calibrations = [Run(s, 0) for s in experiment.systems if s.transit and s.cap and not experiment.search]
    return calibrations + [Run(s, r) for r in range(1, experiment.repeats + 1) for s in experiment.systems]


@dataclass
class Placement:
    run: Run
    start: float  # seconds after the part's start
    end: float


def schedule(runs: list[Run], seconds) -> list[Placement]:
    """The runs one after another on the GPU; `seconds(run)` is how long each takes."""
    out, t = [], 0.0
    for run in runs:
        out.append(Placement(run, t, t + seconds(run)))
        t += seconds(run)
    return out


def split_parts(runs: list[Run], seconds, command_limit_s: float = COMMAND_LIMIT_S) -> list[list[Run]]:
    """Consecutive runs into parts (commands) that end within command_limit_s - PART_MARGIN_S
    estimated seconds; no limit (0): one part."""
    budget = command_limit_s - PART_MARGIN_S if command_limit_s else math.inf
    parts: list[list[Run]] = [[]]
    for run in runs:
        if parts[-1] and makespan(parts[-1] + [run], seconds) > budget:
            parts.append([run])
        else:
            parts[-1].append(run)
    return parts


def makespan(runs: list[Run], seconds) -> float:
    return sum(seconds(run) for run in runs)


# ---------------------------------------------------------------- estimates from recorded runs

# Hybrid on the bench model, recorded only in single runs outside the protocol (transit.bench-runs/1,
# the commands in each file), guard off: the estimates of hybrid at micro-batch 8 (the H100 run, the
# slowest recorded build) and at 4.
SINGLE_RUNS = {("hybrid-gb64-placement-reading-h100.json", "capped"): ("transit", "hybrid", 64, 8),
               ("hybrid-gb64-h200.json", "hybrid-gb64-mb4"): ("transit", "hybrid", 64, 4)}


def recorded_runs() -> list[dict]:
    """Every run of the summaries in bench/results (this driver's and the pre-protocol ones), and
    the SINGLE_RUNS."""
    runs = []
    for path in sorted(RESULTS.glob("*.json")):
        doc = json.loads(path.read_text())
        if doc.get("schema") == SUMMARY_SCHEMA:
            runs += [run | {"source_file": path.name} for run in doc.get("runs", []) if run.get("step_times_s")]
    for (name, key), (kind, policy, gb, micro) in SINGLE_RUNS.items():
        system = System(key, kind, 1, gb, micro, policy=policy)
        runs.append({"system": key, "model": system.model, "config": system_config(system), "source_file": name,
                     "step_times_s": json.loads((RESULTS / name).read_text())["runs"][key]["step_times_s"]})
    return runs


# A kind or policy never recorded is estimated from one that was: ZenFlow is ZeRO-Offload with a
# selective update (at most ZeRO-Offload's step); hybrid's guard keeps advise's placement whenever its
# own is slower (docs/design-notes.md, "Hybrid"), so advise's steps bound it.
STAND_INS = {("zenflow", None): ("zero-offload", None), ("transit", "hybrid"): ("transit", "advise")}


def _per_sequence(run: dict) -> float:
    """A recorded run's steady step (the median of its steps after step 0) per sequence on its GPU."""
    config = run["config"]
    return statistics.median(run["step_times_s"][1:] or run["step_times_s"]) / (config["global_batch"] / config["gpus"])


def _nearest(system: System, runs: list[dict]) -> dict:
    """Of `runs`, the one most like `system`: the same emulated nodes, then the same kernels (deterministic
    ones are slower), the same ranks, not over sockets between GPUs, then the nearest global batch
    and micro-batch."""
    return min(runs, key=lambda r: ((r["config"].get("emulated_nodes") or 0) != system.nodes,
                                    bool(r["config"].get("deterministic")) != system.deterministic,
                                    r["config"].get("ranks", r["config"]["gpus"]) != system.ranks,
                                    r["config"].get("transport") == "sockets",
                                    abs(math.log(r["config"]["global_batch"] / system.global_batch)),
                                    abs(r["config"]["micro_batch"] - system.local_batch)))


def _recorded(history: list[dict], kind: str, policy: str | None, model: str | None) -> list[dict]:
    return [r for r in history if r["config"].get("kind") == kind and r["config"].get("policy") == policy
            and model in (None, r.get("model"))]


def _describe(ref: dict) -> str:
    rc = ref["config"]
    nodes = f", {rc['emulated_nodes']} emulated nodes" if rc.get("emulated_nodes") else ""
    return (f"{ref['source_file']} {ref['system']} ({rc['model']}, {rc['gpus']} GPU(s){nodes}, global batch "
            f"{rc['global_batch']}, micro-batch {rc['micro_batch']}"
            + (", deterministic" if rc.get("deterministic") else "") + ")")


def estimate_steps(system: System, history: list[dict], rule: SettleRule) -> tuple[list[float], str]:
    """Step times a run of `system` should see, and where they come from: the nearest recorded run of
    its kind and policy (or their stand-in) on its model, its steps from the settle rule's first one
    on scaled by the sequences on the GPU; for TRANSIT on a model it never ran, its model's native
    steps times the step-by-step ratio of the nearest TRANSIT run (any model) to its own model's
    native. Beyond the recorded steps: the median of those from the rule's first step on."""
    kind, policy = system.kind, system.policy
    # the stand-in on the system's own model before the system's kind on another model
    if (kind, policy) in STAND_INS and not _recorded(history, kind, policy, system.model) and (
            _recorded(history, *STAND_INS[kind, policy], system.model) or not _recorded(history, kind, policy, None)):
        kind, policy = STAND_INS[kind, policy]
    stand_in = (f"; {' '.join(filter(None, (kind, policy)))} stands in"
                if (kind, policy) != (system.kind, system.policy) else "")
    same = _recorded(history, kind, policy, system.model)
    # the recorded warm-up (the kind's own rule's first step) is not scaled; the steps after it are
    first = (TRANSIT_SETTLE if system.transit else FRAMEWORK_SETTLE).first
    if same:
        ref = _nearest(system, same)
        scale = system.global_batch / (ref["config"]["global_batch"] / ref["config"]["gpus"])
        recorded = list(ref["step_times_s"])
        times = recorded[:first] + [t * scale for t in recorded[first:]]
        basis = _describe(ref) + stand_in + (f"; steps from {first} x{scale:.2f}" if scale != 1 else "")
    elif system.transit and _recorded(history, kind, policy, None):
        ref = _nearest(system, _recorded(history, kind, policy, None))
        ref_native = _nearest(ref_like(ref), _recorded(history, "fsdp2", None, ref["model"]))
        native_times, native_basis = estimate_steps(replace(system, kind="fsdp2", policy=None, cap=None, mem_limit=None,
                                                            settle_rule=None), history,
                                                    FRAMEWORK_SETTLE)
        if not native_times:
            return [], f"no recorded native run of {system.model}"
        own = statistics.median(native_times[1:])
        ratio = own / (_per_sequence(ref_native) * ref["config"]["global_batch"] / ref["config"]["gpus"])
        times = [t * ratio for t in ref["step_times_s"]]
        basis = (f"{_describe(ref)}{stand_in}, x{ratio:.2f}: native {system.model} {own:.2f} s a step "
                 f"({native_basis}) over {_describe(ref_native)}'s per-sequence step")
    else:
        return [], "no recorded run of this kind"
    times += [statistics.median(times[first:] or times)] * (rule.max_steps - len(times))
    return times, basis


def ref_like(run: dict) -> System:
    """A recorded run's configuration as a System (to find the native run nearest to it)."""
    rc = run["config"]
    return System(run["system"], rc["kind"], 1, rc["global_batch"], rc["micro_batch"], model=rc["model"],
                  deterministic=bool(rc.get("deterministic")), nodes=rc.get("emulated_nodes") or 0)


def estimate_run(system: System, history: list[dict], repeat: int = 1) -> tuple[float, str]:
    """Seconds of one run under its settle rule, and the estimate's basis."""
    rule = system.rule(repeat)
    times, basis = estimate_steps(system, history, rule)
    if not times:
        return float(RUN_LIMIT_MIN_S), basis + f": {RUN_LIMIT_MIN_S} s assumed"
    steps = next(n for n in range(1, len(times) + 1) if rule.timed_from(times[:n]) is not None)
    settled = "settles" if rule.timed_from(times[:steps])[1] else "does not settle"
    return RUN_OVERHEAD_S[system.kind] + sum(times[:steps]), f"{basis}; {steps} steps, {settled}"


def estimator(history: list[dict]):
    """estimate(run) -> (seconds, basis), each system's estimate made once."""
    cache: dict[tuple[str, bool], tuple[float, str]] = {}

    def estimate(run: Run) -> tuple[float, str]:
        key = (run.system.name, run.repeat == 0)
        if key not in cache:
            cache[key] = estimate_run(run.system, history, run.repeat)
        return cache[key]
    return estimate


# ---------------------------------------------------------------- running

def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the run's process group (libtransit writes its stats on it), SIGKILL after 15 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def start_run(run: Run, work: Path, limits: dict[str, int], profile: bool) -> dict:
    """Start one run in the background; the returned dict holds its process and what run_record needs."""
    run_dir = work / run.id
    run_dir.mkdir(parents=True, exist_ok=True)
    limit = run.system.mem_limit_bytes
    if run.calibrated:  # a calibration run, or one whose calibration failed, runs at L itself
        limit = limits.get(run.system.name) if run.repeat else None
        limit = transit_limit(run.system, 0) if limit is None else limit
    argv, env_extra = run_command(run.system, run.system.rule(run.repeat), run_dir, limit, profile)
    command = " ".join(f"{k}={shlex.quote(v)}" for k, v in env_extra.items()) + " " + shlex.join(argv)
    (run_dir / "command.txt").write_text(command + "\n")
    print(f"=== {run.id}: {command}", flush=True)
    log = open(run_dir / "log.txt", "w")  # noqa: SIM115 (closed when the run ends)
    env = os.environ | env_extra | {"BENCH_COMMAND": command}
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return {"run": run, "proc": proc, "log": log, "t0": time.time(), "limit": limit, "command": command,
            "dir": run_dir}


def finish_run(live: dict, rc, estimated_s: float) -> dict:
    live["log"].close()
    record = run_record(live["run"], live["dir"], rc, live["command"], live["limit"])
    record["start_unix"], record["end_unix"] = round(live["t0"], 1), round(time.time(), 1)
    record["elapsed_s"] = round(record["end_unix"] - record["start_unix"], 1)
    record["estimated_s"] = round(estimated_s, 1)
    print(f"    {record['id']}: {record['status']} in {record['elapsed_s']:.0f} s (estimated {estimated_s:.0f} s), "
          f"{record.get('tflops_per_gpu') or 0:.1f} TFLOPS/GPU", flush=True)
    return record


def run_part(runs: list[Run], work: Path, limits: dict[str, int], profile: bool, seconds, window: Budget,
             experiment: Experiment) -> list[dict]:
    """The runs one after another, a timed repeat of a calibrated system with the L its calibration
    gave; each started and stopped by `window`; `seconds(run)`: its estimate, recorded beside its
    actual time."""
    records: list[dict] = []
    live = None
    try:
        for run in runs:
            limits = calibrated_limits(experiment, records, limits)
            left = window.deadline - time.time()
            if window.need(run) > left:
                records.append(skipped(run, f"needs {window.need(run):.0f} s, {left:.0f} s left in this command"))
                continue
            live = start_run(run, work, limits, profile)
            stop_at = min(live["t0"] + window.stop_after(run), window.deadline)
            try:
                rc = live["proc"].wait(timeout=max(0.0, stop_at - time.time()))
            except subprocess.TimeoutExpired:
                _kill_group(live["proc"])
                rc = "timeout"
            records.append(finish_run(live, rc, seconds(run)))
            live = None
    finally:  # stopped (SIGTERM, ^C): the run started its own session, so stop it here
        if live:
            _kill_group(live["proc"])
    return records


def skipped(run: Run, reason: str) -> dict:
    print(f"=== {run.id}: skipped ({reason})", flush=True)
    return {"id": run.id, "system": run.system.name, "repeat": run.repeat,
            "role": "calibration" if run.repeat == 0 else "timed", "status": "skipped", "reason": reason,
            "config": system_config(run.system)}


def run_record(run: Run, run_dir: Path, rc, command: str, limit: int | None) -> dict:
    """One run as the summary keeps it: its settings, step times, losses, memory and PCIe bytes."""
    system = run.system
    result_file = run_dir / "result.json"
    result = json.loads(result_file.read_text()) if result_file.exists() else None
    stats_dir = run_dir / "transit"
    stats = load_transit_stats(stats_dir) if stats_dir.is_dir() else []
    record = {"id": run.id, "system": system.name, "repeat": run.repeat,
              "role": "calibration" if run.repeat == 0 else "timed",
              "status": "ok" if rc == 0 and result else "timeout" if rc == "timeout" else "failed", "rc": rc,
              "command": command, "limit_bytes": limit,
              "config": system_config(system), "raw": f"{run.id}/ (in the part's raw archive)"}
    if record["status"] != "ok":
        log = run_dir / "log.txt"
        record["log_tail"] = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:] if log.exists() else []
    if result:
        record |= compact_result(result, system.rule(run.repeat))
    if stats:
        record["transit"] = compact_transit(transit_summary(stats), stats, record)
        if system.ranks > 1:
            record["transit_report"] = transit_report(stats_dir, run_dir)
    return record


def system_config(system: System) -> dict:
    return {"model": system.model, "kind": system.kind, "gpus": system.gpus, "ranks": system.ranks,
            "emulated_nodes": system.nodes or None, "ranks_per_node": system.ranks_per_node if system.nodes else None,
            "global_batch": system.global_batch,
            "micro_batch": system.local_batch, "grad_accum": system.grad_accum, "tp": system.tp,
            "tokens_per_step": system.tokens_per_step, "policy": system.policy,
            "transport": "sockets on lo (emulated nodes)" if system.nodes else "none (one rank)",
            "cap": system.cap, "cap_bytes": system.cap_bytes, "deterministic": system.deterministic,
            "cpu_cores_per_rank": system.cores_per_rank or "all",
            "mem_limit": system.mem_limit, "mem_limit_bytes": system.mem_limit_bytes, "env": dict(system.env) or None,
            "train_args": list(system.train_args) or None}


def compact_result(result: dict, rule: SettleRule | None) -> dict:
    """What the summary keeps of a runner's result file; without a rule (earlier runs), its steps
    are timed from the runner's fixed warm-up."""
    steps = result.get("step_time") or {}
    times = steps.get("all_s") or []
    timed = rule.timed_from(times) if rule else None
    first, settled = timed if timed else ((steps.get("warmup_steps") or 0), None)
    n = rule.timed if rule else len(times) - first
    window = times[first:first + n]
    per_rank = (result.get("memory") or {}).get("per_rank") or []
    clocks = result.get("gpu_clocks_rank0") or {}
    return {
        "git_commit": result.get("git_commit"), "hostname": result.get("hostname"), "device": result.get("device"),
        "model": (result.get("config") or {}).get("model"),
        "step_times_s": times, "timed_from": first, "timed_steps": len(window), "settled": settled,
        "timed_median_s": statistics.median(window) if window else None,
        # warm-up's cost: the seconds from the first step to the first timed one (settled or not)
        "warmup_s": sum(times[:first]) if window else None,
        "tokens_per_s": (result["config"]["tokens_per_step"] / statistics.median(window) if window else None),
        "loopback_bytes_per_step": counter_per_step(result.get("loopback_tx_bytes_rank0"), first, len(window)),
        "tflops_per_gpu": (result["flops_per_step"] / statistics.median(window) / result["config"]["world_size"] / 1e12
                           if window else None),
        "losses": result.get("losses"),
        "peak_torch_reserved_bytes": max((r.get("torch_max_reserved_bytes") or 0 for r in per_rank), default=None),
        "peak_nvml_bytes": (result.get("memory") or {}).get("peak_bytes_max"),
        # NVML's reading of each process alone: on a GPU that emulated nodes share, the device's
        # used memory counts every rank
        "peak_nvml_process_bytes": max((r.get("nvml_process_peak_bytes") or 0 for r in per_rank), default=None) or None,
        "allocator_budget_bytes": (result.get("memory_cap") or {}).get("allocator_budget_bytes"),
        "pcie_nvml_per_step": pcie_per_step(clocks.get("pcie_counters"), first, len(window)),
        "offloaded_bytes_per_gpu": result.get("offloaded_bytes_per_gpu"),
        "step_phases_median_s": phase_medians((result.get("step_phases_rank0") or {}).get("all_s"), first, len(window)),
        "gpu_readings": gpu_readings(clocks, first, len(window)),
        "canary": canary_summary(result.get("canary_rank0"), first, len(window)),
        # under TRANSIT, after the last step: each kind of state's bytes on the host (pagemap)
        "host_bytes_by_state": result.get("managed_host_resident_by_state"),
    }


def gpu_readings(clocks: dict, first: int, n: int) -> dict | None:
    """Rank 0's GPU over the timed steps: its lowest SM and memory clocks, its highest power, every
    clock event reason seen (any step, warm-up included) and the PCIe bytes of each step."""
    sm = clocks.get("sm_clock_mhz") or []
    if not sm or not n:
        return None
    window = slice(first, first + n)
    mem = [v for v in (clocks.get("mem_clock_mhz") or [])[window] if v is not None]
    power = [v for v in (clocks.get("power_w") or [])[window] if v is not None]
    seen = 0
    for mask in clocks.get("clocks_event_reasons") or []:
        seen |= mask
    counters = clocks.get("pcie_counters") or {}
    per_step = {key: [b - a for a, b in itertools.pairwise(counters.get(f"{key}_bytes") or [])] for key in ("rx", "tx")}
    marks = counters.get("marks_tx_rx") or {}
    if marks.get("start") and marks.get("optimizer"):  # bench/train.py --pcie-split: the canary left out
        ends = (counters.get("tx_bytes") or [])[1:], (counters.get("rx_bytes") or [])[1:]
        for i, key in ((0, "tx"), (1, "rx")):
            per_step[key] = [end - start[i] for start, end in zip(marks["start"], ends[i])]
            per_step[f"{key}_before_optimizer"] = [opt[i] - start[i] for start, opt in zip(marks["start"], marks["optimizer"])]
            per_step[f"{key}_optimizer"] = [end - opt[i] for opt, end in zip(marks["optimizer"], ends[i])]
    return {"sm_clock_mhz_min": min(sm[window], default=None), "sm_clock_mhz_max": max(sm[window], default=None),
            "mem_clock_mhz_min": min(mem, default=None), "power_w_max": max(power, default=None),
            "clock_event_reasons_seen": clock_event_names(seen),
            "slowing_reasons_seen": clock_event_names(seen & SLOWING_REASONS_MASK),
            "pcie_bytes_each_step": per_step if not counters.get("error") else {"error": counters["error"]}}


def canary_summary(canary: dict | None, first: int, n: int) -> dict | None:
    """The canary (bench/train.py --canary) before step 0 and after each step, and its medians over
    the timed steps."""
    if not canary or not n:
        return None
    steps = canary.get("per_step") or []
    out = {"before_step0": canary.get("before_step0")}
    for key in ("gemm_ms", "copy_ms", "gemm_host_bytes", "copy_host_bytes"):
        values = [s.get(key) for s in steps]
        out[f"{key}_each_step"] = values
        timed = [v for v in values[first:first + n] if v is not None]
        out[f"{key}_median"] = statistics.median(timed) if timed else None
    return out


def gpu_row(ok: list[dict]) -> dict:
    """A system's GPU readings and canary over its runs: the lowest SM clock, the slowing clock
    event reasons seen, and the median of the runs' canary medians."""
    readings = [r["gpu_readings"] for r in ok if r.get("gpu_readings")]
    canaries = [r["canary"] for r in ok if r.get("canary")]
    return {"sm_clock_mhz_min": min((g["sm_clock_mhz_min"] for g in readings), default=None),
            "slowing_reasons_seen": sorted({x for g in readings for x in g["slowing_reasons_seen"]}),
            "canary_gemm_ms": _median_of([c["gemm_ms_median"] for c in canaries]),
            "canary_copy_ms": _median_of([c["copy_ms_median"] for c in canaries]),
            "canary_before_step0_gemm_ms": _median_of([(c["before_step0"] or {}).get("gemm_ms") for c in canaries]),
            "canary_before_step0_copy_ms": _median_of([(c["before_step0"] or {}).get("copy_ms") for c in canaries])}


def phase_medians(per_step: dict[str, list[float]] | None, first: int, n: int) -> dict | None:
    """Rank 0's forward, backward and optimizer seconds, median over the timed steps (None for
    runners that do not time them)."""
    if not per_step or not n:
        return None
    return {part: window_median(v, first, n) for part, v in per_step.items()}


def counter_per_step(cumulative: list[int] | None, first: int, n: int) -> float | None:
    """A cumulative counter read before step 0 (index 0) and after each step i (index i + 1): its
    increase per timed step."""
    if not cumulative or len(cumulative) < first + n + 1 or not n:
        return None
    return (cumulative[first + n] - cumulative[first]) / n


PCIE_READ_PER_STEP = ("read once per step: NVML's 32-bit PCIe counters can wrap more than once in a step "
                      "(bench/common.py PcieCounters), so these readings give no byte count")


def pcie_per_step(counters: dict | None, first: int, n: int) -> dict | None:
    """NVML's RX (host to GPU) and TX bytes per timed step, rank 0's GPU (cumulative counters, read
    as counter_per_step reads them). Only counters summed in a thread (`samples`) count bytes."""
    if counters and not counters.get("error") and "samples" not in counters:
        return {"error": PCIE_READ_PER_STEP}
    rx = None if not counters or counters.get("error") else counter_per_step(counters.get("rx_bytes"), first, n)
    if rx is None:
        return {"error": (counters or {}).get("error") or "not recorded"} if counters is not None else None
    return {"rx": rx, "tx": counter_per_step(counters["tx_bytes"], first, n)}


def compact_transit(summary: dict | None, stats: list[dict], record: dict) -> dict:
    """TRANSIT's own figures of a run: its bound's peak against L, and its migrations per timed
    iteration (from libtransit's iteration marks; whole-run averages where the marks are missing)."""
    summary = summary or {}
    first, n = record.get("timed_from") or 0, record.get("timed_steps") or 0
    marks = {e["iteration"]: e for e in (stats[0].get("timeline") or []) if "htod_bytes" in e} if stats else {}
    # the mark of iteration i is set when step i - 1 ends
    if first in marks and first + n in marks and n:
        htod = (marks[first + n]["htod_bytes"] - marks[first]["htod_bytes"]) / n
        dtoh = (marks[first + n]["dtoh_bytes"] - marks[first]["dtoh_bytes"]) / n
        source = f"libtransit iteration marks {first}..{first + n}, rank 0"
    elif summary.get("iterations"):
        htod = summary["htod_bytes"] / summary["iterations"] / summary["ranks"]
        dtoh = summary["dtoh_bytes"] / summary["iterations"] / summary["ranks"]
        source = "libtransit whole-run migrations / iterations (warm-up included)"
    else:
        htod = dtoh = source = None
    nvml = record.get("pcie_nvml_per_step") or {}
    return {"policy": summary.get("policy"), "mode": summary.get("mode"), "limit_bytes": summary.get("limit_bytes"),
            "bound_peak_bytes": summary.get("device_bound_peak_bytes"),
            "bound_peak_after_profile_bytes": summary.get("device_bound_peak_after_profile_bytes"),
            "overshoot_bytes": (max(0, summary["device_bound_peak_bytes"] - summary["limit_bytes"])
                                if summary.get("device_bound_peak_bytes") is not None and summary.get("limit_bytes")
                                else None),
            "htod_bytes_per_step": htod, "dtoh_bytes_per_step": dtoh, "migrations_source": source,
            # what crossed PCIe into the GPU beyond the migrations: kernels reading host memory in place
            "zero_copy_bytes_per_step": (nvml["rx"] - htod) if "rx" in nvml and htod is not None else None,
            "offloaded_bytes_per_gpu": summary.get("offloaded_bytes_per_gpu"),
            "gpu_page_faults": summary.get("gpu_page_faults"), "cuda_errors": summary.get("cuda_errors"),
            "ranks": summary.get("ranks"),
            # rank 0's policy section: hybrid's guard (fallback), placement and mover; advise's fill
            "hybrid": (stats[0].get("hybrid") if stats and summary.get("policy") == "hybrid" else None),
            "advise": (stats[0].get("advise") if stats and summary.get("policy") == "advise" else None),
            "remote_map_bytes": ((stats[0].get("faults") or {}).get("remote_map_bytes") if stats else None)}


def transit_report(stats_dir: Path, run_dir: Path) -> dict:
    """`transit report` over the run's per-rank stats files (the multi-rank report, item 3)."""
    argv = [sys.executable, "-m", "transit", "report", str(stats_dir), "--no-slurm"]
    text = subprocess.run([*argv, "--plot", str(run_dir / "report-plots")], cwd=REPO, capture_output=True,
                          text=True, check=False, timeout=120)
    as_json = subprocess.run([*argv, "--json"], cwd=REPO, capture_output=True, text=True, check=False, timeout=120)
    (run_dir / "report.txt").write_text(text.stdout + text.stderr)
    ranks = None
    if as_json.returncode == 0:
        (run_dir / "report.json").write_text(as_json.stdout)
        ranks = len(json.loads(as_json.stdout).get("ranks") or [])
    return {"command": shlex.join(argv), "rc": text.returncode, "json_rc": as_json.returncode, "ranks": ranks,
            "files": "report.txt, report.json, report-plots/ in the run's raw directory"}


def calibrated_limits(experiment: Experiment, runs: list[dict], given: dict[str, int]) -> dict[str, int]:
    """Each capped TRANSIT system's L for its timed repeats: given on the command line (a later part),
    else from its calibration run: L - its overshoot there."""
    limits = dict(given)
    for run in runs:
        system = next(s for s in experiment.systems if s.name == run["system"])
        if run["role"] == "calibration" and system.name not in limits and run["status"] == "ok":
            overshoot = (run.get("transit") or {}).get("overshoot_bytes")
            if overshoot is not None:
                limits[system.name] = transit_limit(system, overshoot) // (1 << 20) * (1 << 20)
    return limits


# ---------------------------------------------------------------- the summary

def _median_of(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)} \
        if values else {"median": None, "min": None, "max": None, "n": 0}


def summarize_systems(experiment_systems, runs: list[dict]) -> list[dict]:
    """Per system: its configuration, TFLOPS and step time over its timed repeats, PCIe bytes per
    step, peaks by its own measure and by NVML against the cap, and its losses check."""
    rows = []
    by_id = {r["id"]: r for r in runs}
    for system in experiment_systems:
        timed = [r for r in runs if r["system"] == system.name and r["role"] != "calibration"]
        ok = [r for r in timed if r["status"] == "ok" and r.get("tflops_per_gpu")]
        calibration = next((r for r in runs if r["system"] == system.name and r["role"] == "calibration"), None)
        own = [(r.get("transit") or {}).get("bound_peak_bytes") if system.transit else r.get("peak_torch_reserved_bytes")
               for r in ok]
        if system.transit:  # libtransit's migrations; zero-copy: NVML's RX less them
            htod, dtoh, zero_copy = (_median_of([(r.get("transit") or {}).get(key) for r in ok])
                                     for key in ("htod_bytes_per_step", "dtoh_bytes_per_step", "zero_copy_bytes_per_step"))
        else:
            htod, dtoh = (_median_of([(r.get("pcie_nvml_per_step") or {}).get(key) for r in ok]) for key in ("rx", "tx"))
            zero_copy = None
        # what the system may use on the device: TRANSIT's L (before fair memory's correction), the
        # others' allocator budget (the cap less their context and margin)
        budget_key = "limit_bytes" if system.transit else "allocator_budget_bytes"
        budget = (transit_limit(system, 0) if system.transit and system.cap else system.mem_limit_bytes
                  or max((r.get(budget_key) or 0 for r in ok), default=None) or None)
        rows.append({
            "name": system.name, **system_config(system), "settle_rule": system.settle.describe(),
            "runs": [r["id"] for r in timed], "repeats_ok": len(ok), "repeats_planned": len(timed),
            "settled": [r.get("settled") for r in ok],
            "tflops_per_gpu": _spread([r["tflops_per_gpu"] for r in ok]),
            "step_time_s": _spread([r["timed_median_s"] for r in ok]),
            "tokens_per_s": _spread([r["tokens_per_s"] for r in ok if r.get("tokens_per_s")]),
            "warmup_s": _spread([r["warmup_s"] for r in ok if r.get("warmup_s") is not None]),
            # NCCL between emulated nodes crosses lo: the job's loopback bytes per step, per node
            "nccl_bytes_per_node_per_step": (_spread([r["loopback_bytes_per_step"] / system.nodes for r in ok
                                                      if r.get("loopback_bytes_per_step") is not None])
                                             if system.nodes else None),
            "step_times_s": {r["id"]: r["step_times_s"] for r in ok},
            "limit_bytes": sorted({r["limit_bytes"] for r in ok if r.get("limit_bytes") is not None}) or None,
            "calibration": ({"run": calibration["id"], "overshoot_bytes": (calibration.get("transit") or {}).get(
                "overshoot_bytes"), "status": calibration["status"]} if calibration else None),
            "pcie_bytes_per_step": {
                "htod": htod, "dtoh": dtoh, "zero_copy": zero_copy,
                "source": ("libtransit's migrations; zero-copy: NVML RX less them" if system.transit
                           else "NVML PCIe counters RX / TX, rank 0's GPU")},
            "peak_own_bytes": max((v for v in own if v is not None), default=None),
            "peak_own_source": ("libtransit's device bound (memory.device_bound_peak_bytes)" if system.transit
                                else "PyTorch's max_memory_reserved"),
            "peak_nvml_bytes": max((r.get("peak_nvml_bytes") or 0 for r in ok), default=None) or None,
            "budget_bytes": budget,
            "within_budget_by_own_measure": (max(v for v in own if v is not None) <= budget
                                             if budget and any(v is not None for v in own) else None),
            "losses": losses_check(system, timed, by_id, runs),
            "gpu": gpu_row(ok),
        })
    return rows


def losses_check(system: System, timed: list[dict], by_id: dict, runs: list[dict]) -> dict:
    """Each timed repeat's losses against the reference system's run of the same repeat (bit for
    bit over the steps both ran), or, without a reference, against this system's first repeat."""
    checks = []
    for run in timed:
        if not run.get("losses"):
            continue
        ref_id = f"{system.reference}.r{run['repeat']}" if system.reference else f"{system.name}.r1"
        ref = by_id.get(ref_id)
        if ref is None or ref is run or not ref.get("losses"):
            continue
        n = min(len(run["losses"]), len(ref["losses"]))
        checks.append({"run": run["id"], "against": ref_id, "steps": n,
                       "bitwise_equal": run["losses"][:n] == ref["losses"][:n],
                       "max_abs_diff": max(abs(a - b) for a, b in zip(run["losses"][:n], ref["losses"][:n])),
                       "last_abs_diff": abs(run["losses"][n - 1] - ref["losses"][n - 1])})
    return {"reference": system.reference or f"{system.name}.r1 (repeatability)", "checks": checks,
            "all_bitwise_equal": all(c["bitwise_equal"] for c in checks) if checks else None}


def summary_doc(experiment: Experiment, runs: list[dict], parts: list[int], n_parts: int, extra: dict) -> dict:
    commits = sorted({r["git_commit"] for r in runs if r.get("git_commit")})
    hosts = sorted({r["hostname"] for r in runs if r.get("hostname")})
    devices = sorted({json.dumps(r["device"], sort_keys=True) for r in runs if r.get("device")})
    return {
        "schema": SUMMARY_SCHEMA, "experiment": experiment.name, "claim": experiment.claim,
        "machine": experiment.machine, "search": experiment.search, "correctness": experiment.correctness,
        "note": experiment.note,
        "protocol": {"repeats": experiment.repeats, "alternation": "A B C A B C ...; calibrations first",
                     "gpu": "one GPU, the runs one after another (emulated nodes share it)",
                     "settle_rules": {"frameworks": FRAMEWORK_SETTLE.as_dict(), "transit": TRANSIT_SETTLE.as_dict()},
                     "fair_memory": "a capped TRANSIT system's calibration run at L = cap - "
                                    f"{NON_ALLOCATOR_MARGIN_BYTES} bytes; its timed repeats at that L less its "
                                    "overshoot there (its bound's peak over L)",
                     "tflops": "model FLOPs per step / the median of the run's timed steps / GPUs; per system the "
                               "median, min and max over its timed repeats"},
        # parts_total 0: one command ran every slot
        "parts": sorted(parts), "parts_total": n_parts, "complete": sorted(parts) == list(range(1, n_parts + 1)),
        "git_commits": commits, "same_commit": len(commits) == 1, "hostnames": hosts, "same_host": len(hosts) == 1,
        "devices": [json.loads(d) for d in devices],
        "systems": summarize_systems(experiment.systems, runs), "runs": runs, **extra,
    }


# ---------------------------------------------------------------- the command line

def parse_assignments(values: list[str], what: str, conv) -> dict:
    out = {}
    for value in values:
        name, sep, number = value.partition("=")
        try:
            out[name] = conv(number)
        except ValueError:
            sep = ""
        if not sep:
            raise SystemExit(f"{what} {value!r}: give NAME=VALUE, VALUE a {conv.__name__}")
    return out


def claim_b_family(name: str) -> str:
    return next(f for f in CLAIM_B_SEARCH if name.startswith(f + "-"))


def best_micro_batches(search_files: list[Path], gb: int) -> dict[str, int]:
    """Each claim (b) system's micro-batch with the highest median TFLOPS at global batch `gb` in the
    searches' summaries."""
    best: dict[str, tuple[float, int]] = {}
    for path in search_files:
        doc = json.loads(path.read_text())
        if not (doc.get("experiment") or "").startswith("claim-b-search-"):
            raise SystemExit(f"--search-summary {path}: not a claim (b) micro-batch search's summary")
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
            raise SystemExit("--search-summary picks claim (b)'s micro-batches: "
                             f"{', '.join(n for n, e in EXPERIMENTS.items() if n.startswith('claim-b') and not e.search)} only")
        families = tuple(claim_b_family(s.name) for s in experiment.systems)
        gb, cores = experiment.systems[0].global_batch, experiment.systems[0].cores_per_rank
        found = best_micro_batches(args.search_summary, gb)
        missing = [f for f in families if f not in found]
        if missing:
            raise SystemExit(f"--search-summary: no completed search run of {', '.join(missing)} at global batch {gb}")
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


@dataclass(frozen=True)
class Budget:
    """A command's time: its deadline (unix seconds), the seconds a run needs left to start, and
    those after which it is stopped."""

    deadline: float
    need: Callable[[Run], float]
    stop_after: Callable[[Run], float]


def budget(seconds, part: int, time_limit: float | None, t0: float,
           command_limit_s: float = COMMAND_LIMIT_S) -> Budget:
    """--part K/N: the command's limit; a run starts if its estimate fits and is stopped at
    RUN_LIMIT_FACTOR x it (at least RUN_LIMIT_MIN_S). --time-limit S: a run starts while
    RUN_START_MIN_S are left, its estimate notwithstanding (the estimates of runs never recorded are
    guesses), and is stopped only at the deadline. Neither: every slot, no deadline."""
    if time_limit:
        return Budget(t0 + time_limit - SETUP_S - PART_MARGIN_S / 2, lambda run: min(seconds(run), RUN_START_MIN_S),
                      lambda run: math.inf)
    return Budget(t0 + (command_limit_s - SETUP_S - PART_MARGIN_S / 2 if part and command_limit_s else math.inf),
                  seconds,
                  lambda run: max(RUN_LIMIT_MIN_S, RUN_LIMIT_FACTOR * seconds(run)))


def execute(experiment: Experiment, runs: list[Run], part: int, n_parts: int, args, limits, seconds) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # run_part's finally stops the runs
    t0 = time.time()
    work = args.work / experiment.name
    work.mkdir(parents=True, exist_ok=True)
    records = run_part(runs, work, limits, args.transit_profile, seconds,
                       budget(seconds, part, args.time_limit, t0, args.command_limit), experiment)
    limits = calibrated_limits(experiment, records, limits)
    name = f"{experiment.name}-part{part}" if part else experiment.name
    extra = {"command": shlex.join([sys.executable, *sys.argv]), "driver_commit": git_commit(),
             "limits": dict(limits), "elapsed_s": round(time.time() - t0, 1),
             "device_time_s": {"estimated": round(SETUP_S + makespan(runs, seconds)),
                               "actual": round(time.time() - t0 + SETUP_S)},
             "raw": f"{name}-raw.tar.gz (device output, not committed)"}
    doc = summary_doc(experiment, records, [part] if part else [], n_parts, extra)
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / f"{name}.json", doc)
    with tarfile.open(args.out / f"{name}-raw.tar.gz", "w:gz") as tar:
        tar.add(work, arcname=name)
    print_summary(doc)
    if limits and part and part < n_parts:
        print("next part: " + " ".join(f"--limit {k}={v}" for k, v in sorted(limits.items())))
    return 0


def merge(experiment: Experiment, files: list[Path], n_parts: int, out: Path | None) -> int:
    docs = [json.loads(f.read_text()) for f in files]
    for f, doc in zip(files, docs):
        if doc.get("schema") != SUMMARY_SCHEMA or doc.get("experiment") != experiment.name:
            raise SystemExit(f"--merge {f}: not a {SUMMARY_SCHEMA} part of {experiment.name}")
    commits = sorted({c for doc in docs for c in doc["git_commits"]})
    if len(commits) > 1:
        raise SystemExit(f"--merge: the parts ran at {', '.join(commits)}; one experiment runs at one commit")
    runs = [run for doc in docs for run in doc["runs"]]
    parts = [k for doc in docs for k in doc["parts"]]
    extra = {"merged_from": [f.name for f in files], "command": shlex.join([sys.executable, *sys.argv]),
             "raw": [doc.get("raw") for doc in docs],
             "device_time_s": {key: sum((doc.get("device_time_s") or {}).get(key) or 0 for doc in docs)
                               for key in ("estimated", "actual")}}
    doc = summary_doc(experiment, runs, parts, n_parts, extra)
    if out is None:
        raise SystemExit("--merge needs --out FILE")
    write_json(out, doc)
    print_summary(doc)
    return 0


def print_summary(doc: dict) -> None:
    print(f"\n== {doc['experiment']} (parts {doc['parts'] or 'all'}, complete: {doc['complete']}, "
          f"commits {doc['git_commits']}, hosts {doc['hostnames']})")
    header = f"{'system':34s} {'GPUs':>4s} {'mb':>3s} {'ok':>5s} {'TFLOPS/GPU med [min-max]':>26s} " \
             f"{'own peak GiB':>12s} {'NVML GiB':>9s} {'losses':>8s}"
    print(header)
    for row in doc["systems"]:
        tf = row["tflops_per_gpu"]
        spread = f"{tf['median']:.1f} [{tf['min']:.1f}-{tf['max']:.1f}]" if tf["median"] else "-"
        own = f"{row['peak_own_bytes'] / GIB:.2f}" if row["peak_own_bytes"] else "-"
        nvml = f"{row['peak_nvml_bytes'] / GIB:.2f}" if row["peak_nvml_bytes"] else "-"
        losses = {True: "bitwise", False: "differ", None: "-"}[row["losses"]["all_bitwise_equal"]]
        print(f"{row['name']:34s} {row['gpus']:>4d} {row['micro_batch']:>3d} "
              f"{row['repeats_ok']:>2d}/{row['repeats_planned']:<2d} {spread:>26s} {own:>12s} {nvml:>9s} {losses:>8s}")

