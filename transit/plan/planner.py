"""`transit plan`: how few nodes a training job can run on, and with which batch settings.

A memory model (model states by precision policy and TP/PP/FSDP degree, activations with or
without recomputation, logits, and what the framework itself holds on the GPU) is set against
HBM per GPU and host DRAM per node. TRANSIT fills the GPU first and spills the rest to host
DRAM, so a node count can run the job as long as its ranks' spill fits in the node's DRAM.

The job may run on a few node counts (the candidates: the requested count, the counts 25% and 50%
fewer nodes leave and the smallest count that keeps 80% of its per-GPU throughput, or --scale-in
fractions, or --candidates). Each count's step time under a TRANSIT policy is compute at the
sustained rate plus the spill's PCIe time times a factor fitted to the committed GPU summaries.
One global batch must suit all of them: the smallest multiple of the least common multiple of
(local batch x DP degree) over the candidates that is at least the target. When that rounds the
target up by more than MAX_BATCH_OVERSHOOT, the plan misses it: it says what helps, proposes
nearby candidate sets that keep it within, and exits 1. `transit submit` plans the same way
before it queues anything; `transit launch` runs on any count of the plan inside the allocation.

The benchmark harness gets predictions from `predict_memory` or `transit plan --json`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

from transit.errors import UsageError
from transit.plan import bounds
from transit.plan.models import ModelSpec

GIB = 1024**3
MIB = 1024**2

# --- Memory the framework holds on each GPU beyond tensors (fixed, never spilled: NCCL
# buffers live in VMM memory that TRANSIT leaves on the device) ---
CUDA_CONTEXT_BYTES = 600 * MIB  # CUDA 12/13 context with lazy module loading on H100/H200
NCCL_BUFFER_BYTES = 1 * GIB  # communicator buffers for intra-node NVLink and inter-node rings
WORKSPACE_BYTES = 512 * MIB  # cuBLAS workspaces and caching-allocator rounding
FRAMEWORK_RESERVED_BYTES = CUDA_CONTEXT_BYTES + NCCL_BUFFER_BYTES + WORKSPACE_BYTES

# A count fits in HBM without offload only with this much to spare: the model under-predicted the
# measured peak by 2-9% (bench/results/plan-accuracy.json; tests/unit/test_plan.py checks the margin
# covers every run there). A count that fits by less is "within margin": TRANSIT covers the rest.
HBM_SAFETY_MARGIN = 0.10

# Host memory each rank uses besides the spilled device data (Python, torch, CUDA host
# state, data loader workers).
HOST_BYTES_PER_RANK = 8 * GIB

# In backward, FSDP2 holds one unit's unsharded parameters, gradients and reduce-scatter input
# while the next unit's parameters are being all-gathered (prefetch): parameters only.
FSDP_PREFETCHED_UNITS = 1

# Precision policies: bytes per parameter of each kind of model state.
# mixed: fp32 params (bf16 copies only while gathered), fp32 grads, fp32 Adam m and v.
# bf16: everything bf16.
PRECISION_BYTES = {
    "mixed": {"param": 4, "grad": 4, "optimizer": 8, "compute": 2, "reduce": 4},
    "bf16": {"param": 2, "grad": 2, "optimizer": 4, "compute": 2, "reduce": 2},
}

# --- Step time ---
# Full activation checkpointing runs every layer's forward twice: per parameter and token the
# hardware does 2 (forward) + 2 (recomputed forward) + 4 (backward) FLOPs instead of 2 + 4.
RECOMPUTE_FLOP_FACTOR = 8 / 6
# Each spilled byte crosses PCIe twice (to the GPU and back) whenever it is used. Optimizer
# states are used once per optimizer step, so they are spilled first; anything spilled beyond
# them is used by every micro-batch.
PCIE_CROSSINGS_PER_USE = 2
# A step takes compute + factor x (those bytes / PCIe bandwidth): how much longer than a plain copy
# each policy takes over the same spill (faults, waits, migrations that do not overlap compute).
# Calibrated by bench/step_calibration.py on every spilling TRANSIT run of the committed GPU
# summaries (bench/results/*.summary.json, H200, the "bench" model), with the H200's measured
# host-to-device rate; STEP_TIME_ERROR is what that leaves on their step times (|predicted /
# measured - 1|), recomputed by tests/unit/test_step_calibration.py. No summary has hybrid.
CALIBRATION_PCIE_BYTES_PER_S = 47.7e9
POLICY_TRANSFER_FACTOR = {"advise": 2.56, "base": 47.7, "prefetch": 29.4}
STEP_TIME_ERROR = {"advise": {"runs": 6, "median_error": 0.18, "max_error": 0.9},
                   "base": {"runs": 6, "median_error": 0.2, "max_error": 1.93},
                   "prefetch": {"runs": 7, "median_error": 0.44, "max_error": 1.39}}
DEFAULT_POLICY = "advise"
NO_TRANSIT = "off"  # `submit --transit off`: nothing holds a spill, so no candidate may have one


@dataclass(frozen=True)
class ClusterSpec:
    gpus_per_node: int
    hbm_bytes: int
    host_dram_bytes: int
    pcie_bytes_per_s: float  # measured host<->device bandwidth of one GPU
    sustained_flops: float  # per GPU, what a well-tuned run of this model reaches

    def to_dict(self) -> dict:
        return asdict(self)


# Node defaults. HBM is the total nvidia-smi reports; host DRAM and the sustained TFLOPS are
# the paper's H100 nodes (2 TB, 418 TFLOPS no-offload baseline for Llama3-70B); PCIe is a
# typical pinned host-to-device copy on PCIe Gen5 x16 and should be replaced by a measurement.
CLUSTER_PRESETS = {
    "h100": ClusterSpec(8, 81559 * MIB, 2048 * GIB, 50e9, 400e12),
    "h200": ClusterSpec(8, 143771 * MIB, 2048 * GIB, 50e9, 450e12),
}


@dataclass(frozen=True)
class TrainingConfig:
    model: ModelSpec
    precision: str = "mixed"  # "mixed" | "bf16"
    tp: int = 1
    pp: int = 1
    data_parallel: str = "fsdp"  # "fsdp": states sharded over DP ranks | "ddp": replicated
    local_batch: int = 1
    seq_len: int = 8192
    activation_checkpointing: bool = True

    def __post_init__(self) -> None:
        if self.precision not in PRECISION_BYTES:
            raise UsageError(f"precision {self.precision!r} unknown; use one of {', '.join(PRECISION_BYTES)}")
        if self.data_parallel not in ("fsdp", "ddp"):
            raise UsageError(f"data parallelism {self.data_parallel!r} unknown; use fsdp or ddp")
        for name in ("tp", "pp", "local_batch", "seq_len"):
            bounds.parse_value(bounds.option_name(name), str(getattr(self, name)))
        bounds.check_pipeline(self.pp, self.model.layers)
        if self.model.heads % self.tp or self.model.kv_heads % self.tp and self.tp % self.model.kv_heads:
            raise UsageError(f"--tp {self.tp} does not split the model's {self.model.heads} heads / "
                             f"{self.model.kv_heads} kv heads evenly")

    def to_dict(self) -> dict:
        return asdict(self) | {"model": self.model.name}


@dataclass(frozen=True)
class MemoryEstimate:
    """Predicted peak bytes on one GPU (the busiest pipeline stage)."""

    params: int
    grads: int
    optimizer: int
    gathered: int  # FSDP's unsharded parameters and gradients of the units in flight
    activations: int  # kept for backward: layer inputs with checkpointing, everything without
    transient: int  # the larger of the logits with the loss's fp32 copies and one recomputed layer
    framework: int  # CUDA context, NCCL buffers (only with more than one rank), workspaces

    @property
    def model_state(self) -> int:
        return self.params + self.grads + self.optimizer + self.gathered

    @property
    def activation_total(self) -> int:
        return self.activations + self.transient

    @property
    def device_total(self) -> int:
        return self.model_state + self.activation_total + self.framework

    def to_dict(self) -> dict:
        return asdict(self) | {"model_state": self.model_state, "activation_total": self.activation_total,
                               "device_total": self.device_total}


def dp_degree(config: TrainingConfig, world_size: int) -> int:
    model_parallel = config.tp * config.pp
    if world_size % model_parallel:
        raise UsageError(f"{world_size} GPUs are not a multiple of TP x PP = {model_parallel}")
    return world_size // model_parallel


def predict_memory(config: TrainingConfig, world_size: int) -> MemoryEstimate:
    """Peak device bytes per GPU for `config` trained on `world_size` GPUs.

    FSDP units are the layers and the output head (with the final norm), as TorchTitan wraps
    them; the largest one is counted as being reduced and as prefetched. Pipeline stages get an equal share of
    the parameters. With 1F1B the first stage keeps the activations of up to `pp` micro-batches
    (TorchTitan's micro-batch is one sequence) and the last stage one micro-batch plus the
    logits; the larger of the two is reported. With checkpointing the logits (at the loss) and
    a recomputed layer (in backward) never coexist, so only the larger counts.
    """
    model, tp, pp = config.model, config.tp, config.pp
    dp = dp_degree(config, world_size)
    sizes = PRECISION_BYTES[config.precision]
    shard = dp if config.data_parallel == "fsdp" else 1
    params_per_gpu = model.total_params() / (tp * pp * shard)
    if config.data_parallel == "fsdp":
        largest_unit = max(model.layer_params(), model.vocab * model.hidden + model.hidden) / tp
        # the unit being reduced: compute-dtype parameters and gradients, plus a reduce-dtype copy
        # of the gradients for the reduce-scatter when the dtypes differ (fp32 reduce in mixed)
        reduce_copy = sizes["reduce"] if sizes["reduce"] != sizes["compute"] else 0
        gathered = largest_unit * (2 * sizes["compute"] + reduce_copy + FSDP_PREFETCHED_UNITS * sizes["compute"])
    elif config.precision == "mixed":
        gathered = model.total_params() / (tp * pp) * sizes["compute"]  # autocast's bf16 weight copies
    else:
        gathered = 0

    layers_per_stage = math.ceil(model.layers / pp)
    if pp == 1:
        micro_tokens, in_flight_first = config.local_batch * config.seq_len, 1
    else:
        micro_tokens, in_flight_first = config.seq_len, min(pp, config.local_batch)

    def stage(in_flight: int, has_logits: bool) -> tuple[int, int]:
        logits = model.logits_bytes(micro_tokens, tp) if has_logits else 0
        if config.activation_checkpointing:
            kept = layers_per_stage * model.layer_input_bytes(micro_tokens, tp) * in_flight
            return kept, max(logits, model.layer_activation_bytes(micro_tokens, tp))
        return layers_per_stage * model.layer_activation_bytes(micro_tokens, tp) * in_flight, logits

    first = stage(in_flight_first, has_logits=pp == 1)
    activations, transient = first if pp == 1 else max(first, stage(1, has_logits=True), key=sum)
    return MemoryEstimate(
        params=round(params_per_gpu * sizes["param"]),
        grads=round(params_per_gpu * sizes["grad"]),
        optimizer=round(params_per_gpu * sizes["optimizer"]),
        gathered=round(gathered),
        activations=activations,
        transient=transient,
        framework=FRAMEWORK_RESERVED_BYTES - (NCCL_BUFFER_BYTES if world_size == 1 else 0),
    )


# --- node counts and the common global batch -----------------------------------------------------

# The common multiple may round the target global batch up by this much before the plan proposes
# other candidate sets: beyond it the job would no longer train with the batch it was tuned for.
MAX_BATCH_OVERSHOOT = 0.25
MAX_PROPOSALS = 3
# Counts tried on each side of the smallest candidate when the plan looks for a replacement for it.
REPLACEMENT_SEARCH = 64
# The default candidates: the counts these reductions leave, and the smallest count whose predicted
# per-GPU throughput keeps KEPT_THROUGHPUT of the requested count's; a count whose per-token cost (GPU
# seconds per token) is over MAX_TOKEN_COST times the requested count's is left to --candidates.
DEFAULT_REDUCTIONS = (0.25, 0.5)
KEPT_THROUGHPUT = 0.8
MAX_TOKEN_COST = 2


def reduced_nodes(nodes: int, reduction: float) -> int:
    """Nodes left after removing a fraction ``reduction``: nearest whole count, ties keep more, >= 1.

    `transit submit --scale-in` and the simulator's TRANSIT scenario share this rule."""
    return max(1, math.floor(nodes * (1 - reduction) + 0.5))


def common_global_batch(step_sizes: list[int], target: int) -> int:
    """Smallest common multiple of the sequences per micro-step (local batch x DP) that is >= target."""
    base = math.lcm(*step_sizes)
    return base * max(1, -(-target // base))  # integer ceiling: exact at any size


def accumulation_steps(global_batch: int, local_batch: int, dp: int) -> int:
    """Gradient accumulation steps that make `dp` ranks of `local_batch` train `global_batch`."""
    per_step = local_batch * dp
    if global_batch % per_step:
        raise UsageError(f"global batch {global_batch} is not divisible by local batch {local_batch} x "
                         f"DP degree {dp} = {per_step}")
    return global_batch // per_step


@dataclass(frozen=True)
class Layout:
    """How ranks split into TP x PP groups and data-parallel replicas on nodes of one size."""

    gpus_per_node: int
    tp: int
    pp: int
    local_batch: int

    @property
    def count_step(self) -> int:
        """Node counts must be multiples of this to host whole TP x PP groups."""
        model_parallel = self.tp * self.pp
        return model_parallel // math.gcd(model_parallel, self.gpus_per_node)

    def check_count(self, nodes: int, what: str) -> None:
        if nodes % self.count_step:
            raise UsageError(f"{what} {nodes}: {nodes} nodes x {self.gpus_per_node} GPUs are not a multiple of "
                             f"TP x PP = {self.tp * self.pp}")

    def dp(self, nodes: int) -> int:
        return nodes * self.gpus_per_node // (self.tp * self.pp)

    def batch(self, counts: list[int], target: int, target_given: bool = True) -> dict:
        """The common global batch of `counts` for `target` sequences, and what it costs. Without a
        target given (one micro-batch per rank of the largest count stands for it) no batch misses it."""
        step_sizes = [self.local_batch * self.dp(n) for n in counts]
        global_batch = common_global_batch(step_sizes, target)
        overshoot = global_batch / target - 1
        return {"counts": counts, "lcm": math.lcm(*step_sizes), "global_batch": global_batch, "overshoot": overshoot,
                "within_overshoot": overshoot <= MAX_BATCH_OVERSHOOT or not target_given,
                "grad_accum": {str(n): global_batch // (self.local_batch * self.dp(n)) for n in counts}}


def candidate_counts(nodes: int, scale_in: list[float] | None = None, candidates: list[int] | None = None,
                     defaults: list[int] | None = None) -> list[int]:
    """The node counts the job may train on, largest first: always `nodes`, plus the counts that
    --scale-in fractions leave, or --candidates, or else `defaults` (MemoryPlanner.default_counts)."""
    if candidates is not None:
        above = [c for c in candidates if c > nodes]
        if above:
            raise UsageError(f"--candidates {above[0]} is more than --nodes {nodes}")
        extra = candidates
    elif scale_in is not None:
        extra = [reduced_nodes(nodes, f) for f in scale_in]
        unchanged = next((f for f, count in zip(scale_in, extra, strict=True) if count == nodes), None)
        if unchanged is not None:  # rounds back to N: the job would queue all of N under TRANSIT
            raise UsageError(f"--scale-in {unchanged:g} rounds to all {nodes} nodes; give more than "
                             f"{0.5 / nodes:g} ({1 / nodes:.3g}: {nodes - 1} nodes)")
    else:
        extra = defaults or []
    return sorted({nodes, *extra}, reverse=True)


def nearby_count_sets(layout: Layout, counts: list[int], target: int, allowed: Callable[[int], bool]) -> list[dict]:
    """Candidate sets near `counts` whose common global batch stays within MAX_BATCH_OVERSHOOT.

    First the largest subsets of `counts` that keep the requested (largest) count, those keeping the
    smallest count ahead (16 -> 8 for 16 -> 12 -> 8); then the requested count with one count near the
    smallest candidate for which `allowed` holds (it runs, at no more than MAX_TOKEN_COST times the
    requested count's per-token cost), nearest first.
    """
    nodes, others = counts[0], counts[1:]
    proposals: list[dict] = []
    for size in range(len(others) - 1, 0, -1):
        subsets = sorted(itertools.combinations(others, size), key=lambda s: others[-1] not in s)
        proposals += [b for s in subsets if (b := layout.batch([nodes, *s], target))["within_overshoot"]]
        if len(proposals) >= MAX_PROPOSALS:
            return proposals[:MAX_PROPOSALS]
    smallest, step = (others[-1] if others else nodes), layout.count_step
    for distance in range(1, REPLACEMENT_SEARCH + 1):
        for count in (smallest - distance * step, smallest + distance * step):
            if 1 <= count < nodes and count not in counts and allowed(count):
                batch = layout.batch([nodes, count], target)
                if batch["within_overshoot"]:
                    proposals.append(batch)
                    if len(proposals) >= MAX_PROPOSALS:
                        return proposals
    return proposals


def target_sequences(local_batch: int, dp: int, seq_len: int, global_batch: int | None,
                     global_tokens: int | None) -> int:
    """The target global batch in sequences: --global-batch, --global-tokens rounded up to whole
    sequences, or else one micro-batch on every rank of the requested count."""
    if global_tokens is not None:
        return -(-global_tokens // seq_len)
    return global_batch if global_batch is not None else local_batch * dp


def workable_targets(lcm: int, target: int) -> list[int]:
    """The targets a candidate set keeps exactly that are nearest `target`: the multiples of `lcm` around it."""
    below, above = lcm * (target // lcm), lcm * -(-target // lcm)
    return sorted({t for t in (below, above) if t >= lcm})


def batch_advice(batch: dict, target: int, smallest_step: int, local_batch: int) -> str:
    """What helps a candidate set whose common batch misses `target`, in one sentence.
    `smallest_step`: the sequences one micro-step trains on the requested count, which every set has."""
    if target * (1 + MAX_BATCH_OVERSHOOT) < smallest_step:
        lower = " or --local-batch" if local_batch > 1 else ""
        return (f"Fewer counts cannot help: the requested count alone trains {smallest_step:,} sequences a "
                f"micro-step; raise the target to {smallest_step:,} or lower --nodes{lower}.")
    shown = " or ".join(f"{t:,}" for t in workable_targets(batch["lcm"], target))
    return f"This set keeps a target of {shown} sequences exactly (--global-batch)."


def check_batch_bound(batch: dict, proposals: list[dict]) -> None:
    """The planned global batch stays inside the bound every input has; else name a set that does."""
    bound = bounds.BOUNDS["global_batch"]
    if batch["global_batch"] > bound.high:
        counts = ",".join(map(str, batch["counts"]))
        nearest = (f"; nearest within {MAX_BATCH_OVERSHOOT:.0%}: --candidates "
                   f"{','.join(map(str, proposals[0]['counts']))}" if proposals else "")
        size = batch["global_batch"]
        shown = f"{size:,}" if size < 10**15 else f"{size:.3g}"
        raise UsageError(f"the global batch common to {counts} nodes is {shown} sequences, "
                         f"above {bound.shown(bound.high)}{nearest}")


# --- memory over node counts ------------------------------------------------------------------------


def spilled_bytes(memory: MemoryEstimate, cluster: ClusterSpec) -> int:
    return max(0, memory.device_total - cluster.hbm_bytes)


def host_bytes_per_node(spill: int, cluster: ClusterSpec) -> int:
    return cluster.gpus_per_node * (spill + HOST_BYTES_PER_RANK)


def transfer_bytes(spill: int, optimizer: int, accumulation: int) -> int:
    """Bytes over PCIe per optimizer step for `spill` bytes held in host DRAM (see the constants)."""
    cold = min(spill, optimizer)
    return PCIE_CROSSINGS_PER_USE * (cold + (spill - cold) * accumulation)


def step_time(config: TrainingConfig, memory: MemoryEstimate, cluster: ClusterSpec, global_batch: int,
              world_size: int, accumulation: int, policy: str) -> dict:
    """One optimizer step on one GPU under `policy`: compute, the spill's PCIe time, the step and the
    per-GPU throughput (None where no summary calibrates the policy)."""
    flops_per_token = config.model.model_flops_per_token(config.seq_len)
    if config.activation_checkpointing:
        flops_per_token *= RECOMPUTE_FLOP_FACTOR
    tokens = global_batch * config.seq_len
    compute_s = flops_per_token * tokens / world_size / cluster.sustained_flops
    moved = transfer_bytes(spilled_bytes(memory, cluster), memory.optimizer, accumulation)
    factor = POLICY_TRANSFER_FACTOR.get(policy)
    if factor is None:
        return {"compute_s": compute_s, "pcie_bytes": moved, "pcie_s": None, "step_s": None,
                "tokens_per_s_per_gpu": None, "efficiency": None}
    transfer_s = factor * moved / cluster.pcie_bytes_per_s
    step_s = compute_s + transfer_s
    return {"compute_s": compute_s, "pcie_bytes": moved, "pcie_s": transfer_s, "step_s": step_s,
            "tokens_per_s_per_gpu": tokens / step_s / world_size, "efficiency": compute_s / step_s}


class MemoryPlanner:
    """Memory per GPU, host DRAM per node and step time of one job at any node count."""

    def __init__(self, config: TrainingConfig, cluster: ClusterSpec, policy: str = DEFAULT_POLICY):
        bounds.check_tensor_parallel(config.tp, cluster.gpus_per_node)
        if FRAMEWORK_RESERVED_BYTES >= cluster.hbm_bytes:
            raise UsageError(f"HBM per GPU ({cluster.hbm_bytes / GIB:.1f} GiB) does not even hold the framework's "
                             f"{FRAMEWORK_RESERVED_BYTES / GIB:.1f} GiB")
        self.config, self.cluster, self.policy = config, cluster, policy
        self.layout = Layout(cluster.gpus_per_node, config.tp, config.pp, config.local_batch)

    def row(self, nodes: int) -> dict:
        memory = predict_memory(self.config, nodes * self.cluster.gpus_per_node)
        spill = spilled_bytes(memory, self.cluster)
        host = host_bytes_per_node(spill, self.cluster)
        runs = host <= self.cluster.host_dram_bytes
        fits = memory.device_total * (1 + HBM_SAFETY_MARGIN) <= self.cluster.hbm_bytes
        within_margin = spill == 0 and not fits
        verdict = ("fits in HBM" if fits else "within margin" if within_margin else "spills to host" if runs
                   else "too big")
        return {"nodes": nodes, "gpus": nodes * self.cluster.gpus_per_node, "dp": self.layout.dp(nodes),
                "verdict": verdict, "fits_natively": fits, "within_margin": within_margin, "runs": runs,
                "memory": memory, "spilled_bytes": spill, "host_bytes_per_node": host}

    def timing(self, nodes: int, global_batch: int) -> dict:
        """step_time at `nodes` for `global_batch` sequences (accumulation rounded up to whole micro-steps)."""
        memory = predict_memory(self.config, nodes * self.cluster.gpus_per_node)
        accumulation = -(-global_batch // (self.config.local_batch * self.layout.dp(nodes)))
        return step_time(self.config, memory, self.cluster, global_batch, nodes * self.cluster.gpus_per_node,
                         accumulation, self.policy)

    def smallest(self, nodes: int, holds: Callable[[int], bool]) -> int | None:
        """Smallest count <= nodes (a multiple of the count step) for which `holds` is true.

        Memory per GPU never grows with the node count (sharding only divides it), and neither the
        spill nor the accumulation shrinks with fewer nodes, so what holds at a count holds at every
        larger one: the counts are searched by bisection, instant at 100,000 nodes. One exception is
        checked by itself: a job of one GPU needs no NCCL buffers, so it may fit where two would not."""
        step = self.layout.count_step
        low, high = 1, nodes // step  # multiples k * step; high * step is tried first
        if not holds(high * step):
            return step if holds(step) else None
        while low < high:
            middle = (low + high) // 2
            if holds(middle * step):
                high = middle
            else:
                low = middle + 1
        return step if low > 1 and holds(step) else low * step

    def smallest_with(self, nodes: int, key: str) -> int | None:
        """Smallest count whose row has `key` ("runs", "fits_natively") true."""
        return self.smallest(nodes, lambda count: self.row(count)[key])

    def keeps(self, nodes: int, count: int, target: int, share: float) -> bool:
        """`count` can run the job (without a spill under NO_TRANSIT) and its per-GPU throughput at
        `target` sequences is at least `share` of `nodes`'s (any, for an uncalibrated policy)."""
        row = self.row(count)
        if not (row["spilled_bytes"] == 0 if self.policy == NO_TRANSIT else row["runs"]):
            return False
        reference = self.timing(nodes, target)["tokens_per_s_per_gpu"]
        return reference is None or self.timing(count, target)["tokens_per_s_per_gpu"] >= share * reference

    def default_counts(self, nodes: int, target: int) -> list[int]:
        """What a user would try: `nodes`, the counts DEFAULT_REDUCTIONS leave, and the smallest count
        whose per-GPU throughput stays within KEPT_THROUGHPUT of `nodes`'s; none that cannot run, and
        none whose per-token cost is over MAX_TOKEN_COST times `nodes`'s (they are asked for by name)."""
        step = self.layout.count_step
        reductions = {max(step, reduced_nodes(nodes, f) // step * step) for f in DEFAULT_REDUCTIONS}
        counts = {nodes} | {c for c in reductions if self.keeps(nodes, c, target, 1 / MAX_TOKEN_COST)}
        if POLICY_TRANSFER_FACTOR.get(self.policy) is not None:
            counts.add(self.smallest(nodes, lambda count: self.keeps(nodes, count, target, KEPT_THROUGHPUT)) or nodes)
        return sorted(counts, reverse=True)


def plan(config: TrainingConfig, cluster: ClusterSpec, nodes: int, scale_in: list[float] | None = None,
         candidates: list[int] | None = None, target_global_batch: int | None = None,
         target_global_tokens: int | None = None, policy: str = DEFAULT_POLICY) -> dict:
    """Memory, spill, DP degree, the common global batch and its accumulation, and the step time under
    `policy`, for every candidate count."""
    planner = MemoryPlanner(config, cluster, policy)
    layout = planner.layout
    layout.check_count(nodes, "--nodes")
    smallest_runs = planner.smallest_with(nodes, "runs")
    if smallest_runs is None:
        row = planner.row(nodes)
        raise UsageError(f"host DRAM too small for the spill: {nodes} nodes need {row['host_bytes_per_node'] / GIB:.0f}"
                         f" GiB per node ({row['spilled_bytes'] / GIB:.1f} GiB spilled by each of "
                         f"{cluster.gpus_per_node} GPUs + {HOST_BYTES_PER_RANK / GIB:.0f} GiB per rank), the node "
                         f"has {cluster.host_dram_bytes / GIB:.0f} GiB")
    target = target_sequences(config.local_batch, layout.dp(nodes), config.seq_len, target_global_batch,
                              target_global_tokens)
    defaults = planner.default_counts(nodes, target) if scale_in is None and candidates is None else None
    counts = candidate_counts(nodes, scale_in, candidates, defaults)
    for count in counts:
        layout.check_count(count, "--candidates" if candidates else "--scale-in" if scale_in else "--nodes")
    batch = layout.batch(counts, target, target_given=target_global_batch is not None or target_global_tokens is not None)
    proposals = [] if batch["within_overshoot"] else nearby_count_sets(
        layout, counts, target, lambda count: planner.keeps(nodes, count, target, 1 / MAX_TOKEN_COST))
    check_batch_bound(batch, proposals)
    advice = None if batch["within_overshoot"] else batch_advice(batch, target, layout.local_batch * layout.dp(nodes),
                                                                 config.local_batch)
    global_batch = batch["global_batch"]
    rows = []
    for count in counts:
        row = planner.row(count)
        memory = row.pop("memory")
        accumulation = accumulation_steps(global_batch, config.local_batch, row["dp"])
        rows.append(row | {
            "model_state_bytes": memory.model_state,
            "activation_bytes": memory.activation_total,
            "device_bytes_needed": memory.device_total,
            "memory": memory.to_dict(),
            "global_batch": global_batch,
            "grad_accum": accumulation,
            **step_time(config, memory, cluster, global_batch, row["gpus"], accumulation, policy),
        })
    return {
        "schema": "transit.plan/3",
        "model": config.model.to_dict(),
        "training": config.to_dict(),
        "cluster": cluster.to_dict(),
        "constants": {
            "framework_reserved_bytes": FRAMEWORK_RESERVED_BYTES,
            "cuda_context_bytes": CUDA_CONTEXT_BYTES,
            "nccl_buffer_bytes": NCCL_BUFFER_BYTES,
            "workspace_bytes": WORKSPACE_BYTES,
            "host_bytes_per_rank": HOST_BYTES_PER_RANK,
            "hbm_safety_margin": HBM_SAFETY_MARGIN,
            "fsdp_prefetched_units": FSDP_PREFETCHED_UNITS,
            "recompute_flop_factor": RECOMPUTE_FLOP_FACTOR,
            "pcie_crossings_per_use": PCIE_CROSSINGS_PER_USE,
            "policy_transfer_factor": POLICY_TRANSFER_FACTOR,
            "step_time_error": STEP_TIME_ERROR,
            "calibration_pcie_bytes_per_s": CALIBRATION_PCIE_BYTES_PER_S,
            "max_batch_overshoot": MAX_BATCH_OVERSHOOT,
        },
        "policy": policy,
        "step_time_error": STEP_TIME_ERROR.get(policy),
        "requested_nodes": nodes,
        "counts": counts,
        "target_given": target_global_batch is not None or target_global_tokens is not None,
        "target_global_batch": target,
        "target_global_tokens": target_global_tokens,
        "global_batch": global_batch,
        "global_tokens": global_batch * config.seq_len,
        "batch_lcm": batch["lcm"],
        "overshoot": batch["overshoot"],
        "within_overshoot": batch["within_overshoot"],
        "proposals": [p | {"global_tokens": p["global_batch"] * config.seq_len} for p in proposals],
        "workable_targets": workable_targets(batch["lcm"], target),
        "advice": advice,
        "min_runnable_nodes": smallest_runs,
        "min_native_nodes": planner.smallest_with(nodes, "fits_natively"),
        "candidates": rows,
    }
