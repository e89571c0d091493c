"""`transit plan`: how few nodes a training job can run on, and with which batch settings.

A memory model (model states by precision policy and TP/PP/FSDP degree, activations with or
without recomputation, logits, and what the framework itself holds on the GPU) is set against
HBM per GPU and host DRAM per node. TRANSIT fills the GPU first and spills the rest to host
DRAM, so a node count is feasible as long as its ranks' spill fits in the node's DRAM.

For every feasible node count from the requested one down to the smallest, the plan gives the
data-parallel degree and the gradient accumulation that keep one global batch: the smallest
common multiple of (local batch x DP degree) over all candidate counts that is at least the
target. `transit launch` applies the same rule inside the allocation (`accumulation_steps`).

The benchmark harness gets predictions from `predict_memory` or `transit plan --json`.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass

from transit.errors import UsageError
from transit.models import PRESETS, ModelSpec, preset

GIB = 1024**3
MIB = 1024**2

# --- Memory the framework holds on each GPU beyond tensors (fixed, never spilled: NCCL
# buffers live in VMM memory that TRANSIT leaves on the device) ---
CUDA_CONTEXT_BYTES = 600 * MIB  # CUDA 12/13 context with lazy module loading on H100/H200
NCCL_BUFFER_BYTES = 1 * GIB  # communicator buffers for intra-node NVLink and inter-node rings
WORKSPACE_BYTES = 512 * MIB  # cuBLAS workspaces and caching-allocator rounding
FRAMEWORK_RESERVED_BYTES = CUDA_CONTEXT_BYTES + NCCL_BUFFER_BYTES + WORKSPACE_BYTES

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

# --- Efficiency model ---
# Full activation checkpointing runs every layer's forward twice: per parameter and token the
# hardware does 2 (forward) + 2 (recomputed forward) + 4 (backward) FLOPs instead of 2 + 4.
RECOMPUTE_FLOP_FACTOR = 8 / 6
# Each spilled byte crosses PCIe twice (to the GPU and back) whenever it is used. Optimizer
# states are used once per optimizer step, so they are spilled first; anything spilled beyond
# them is used by every micro-batch. Transfers are not assumed to overlap compute.
PCIE_CROSSINGS_PER_USE = 2


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
            if getattr(self, name) < 1:
                raise UsageError(f"{name.replace('_', ' ')} must be at least 1, got {getattr(self, name)}")
        if self.pp > self.model.layers:
            raise UsageError(f"pipeline degree {self.pp} is larger than the model's {self.model.layers} layers")
        if self.model.heads % self.tp or self.model.kv_heads % self.tp and self.tp % self.model.kv_heads:
            raise UsageError(f"tensor parallel degree {self.tp} does not split {self.model.heads} heads / "
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
        largest_unit = max(model.layer_params(), model.embedding_params + model.hidden) / tp
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


def reduced_nodes(nodes: int, reduction: float) -> int:
    """Nodes left after removing a fraction ``reduction``: nearest whole count, ties keep more, >= 1.

    `transit submit --scale-in` and the simulator's TRANSIT scenario share this rule."""
    return max(1, math.floor(nodes * (1 - reduction) + 0.5))


def common_global_batch(local_batch: int, dp_degrees: list[int], target: int) -> int:
    """Smallest common multiple of local_batch x dp over all degrees that is >= target."""
    base = math.lcm(*(local_batch * dp for dp in dp_degrees))
    return base * max(1, math.ceil(target / base))


def accumulation_steps(global_batch: int, local_batch: int, dp: int) -> int:
    """Gradient accumulation steps that make `dp` ranks of `local_batch` train `global_batch`."""
    per_step = local_batch * dp
    if global_batch % per_step:
        raise UsageError(f"global batch {global_batch} is not divisible by local batch {local_batch} x "
                         f"DP degree {dp} = {per_step}")
    return global_batch // per_step


def spilled_bytes(memory: MemoryEstimate, cluster: ClusterSpec) -> int:
    return max(0, memory.device_total - cluster.hbm_bytes)


def host_bytes_per_node(spill: int, cluster: ClusterSpec) -> int:
    return cluster.gpus_per_node * (spill + HOST_BYTES_PER_RANK)


def efficiency(config: TrainingConfig, memory: MemoryEstimate, cluster: ClusterSpec, global_batch: int,
               world_size: int, accumulation: int) -> dict:
    """Compute time vs PCIe time for one optimizer step on one GPU (see the constants above)."""
    flops_per_token = config.model.model_flops_per_token(config.seq_len)
    if config.activation_checkpointing:
        flops_per_token *= RECOMPUTE_FLOP_FACTOR
    compute_s = flops_per_token * global_batch * config.seq_len / world_size / cluster.sustained_flops
    spill = spilled_bytes(memory, cluster)
    cold = min(spill, memory.optimizer)
    moved = PCIE_CROSSINGS_PER_USE * (cold + (spill - cold) * accumulation)
    transfer_s = moved / cluster.pcie_bytes_per_s
    return {"compute_s": compute_s, "pcie_s": transfer_s, "pcie_bytes": moved,
            "efficiency": compute_s / (compute_s + transfer_s)}


def plan(config: TrainingConfig, cluster: ClusterSpec, nodes: int, target_global_batch: int | None = None,
         min_nodes: int = 1) -> dict:
    """Candidates from `nodes` down to the smallest feasible count (not below `min_nodes`)."""
    gpn = cluster.gpus_per_node
    if gpn % config.tp:
        raise UsageError(f"TP degree {config.tp} does not divide {gpn} GPUs per node "
                         "(tensor parallelism stays inside a node)")
    if nodes < 1 or not 1 <= min_nodes <= nodes:
        raise UsageError(f"need 1 <= --min-nodes ({min_nodes}) <= --nodes ({nodes})")
    if (nodes * gpn) % (config.tp * config.pp):
        raise UsageError(f"{nodes} nodes x {gpn} GPUs is not a multiple of TP x PP = {config.tp * config.pp}")
    if FRAMEWORK_RESERVED_BYTES >= cluster.hbm_bytes:
        raise UsageError(f"HBM per GPU ({cluster.hbm_bytes / GIB:.1f} GiB) does not even hold the framework's "
                         f"{FRAMEWORK_RESERVED_BYTES / GIB:.1f} GiB")

    rows = []
    for n in range(nodes, min_nodes - 1, -1):
        world = n * gpn
        if world % (config.tp * config.pp):
            continue  # this count cannot host whole TP x PP groups
        memory = predict_memory(config, world)
        spill = spilled_bytes(memory, cluster)
        host = host_bytes_per_node(spill, cluster)
        if host > cluster.host_dram_bytes:
            if n == nodes:
                raise UsageError(f"host DRAM too small for the spill: {n} nodes need {host / GIB:.0f} GiB per node "
                                 f"({spill / GIB:.1f} GiB spilled by each of {gpn} GPUs + "
                                 f"{HOST_BYTES_PER_RANK / GIB:.0f} GiB per rank), the node has "
                                 f"{cluster.host_dram_bytes / GIB:.0f} GiB")
            break
        rows.append({"nodes": n, "gpus": world, "dp": dp_degree(config, world), "fits_natively": spill == 0,
                     "memory": memory, "spilled_bytes": spill, "host_bytes_per_node": host})

    if target_global_batch is not None and target_global_batch < 1:
        raise UsageError(f"--global-batch must be at least 1, got {target_global_batch}")
    target = target_global_batch if target_global_batch is not None else config.local_batch * rows[0]["dp"]
    if target < 1:
        raise UsageError(f"target global batch must be at least 1, got {target}")
    global_batch = common_global_batch(config.local_batch, [r["dp"] for r in rows], target)
    candidates = []
    for row in rows:
        accumulation = accumulation_steps(global_batch, config.local_batch, row["dp"])
        memory = row.pop("memory")
        candidates.append(row | {
            "model_state_bytes": memory.model_state,
            "activation_bytes": memory.activation_total,
            "device_bytes_needed": memory.device_total,
            "memory": memory.to_dict(),
            "global_batch": global_batch,
            "grad_accum": accumulation,
            **efficiency(config, memory, cluster, global_batch, row["gpus"], accumulation),
        })
    return {
        "schema": "transit.plan/1",
        "model": config.model.to_dict(),
        "training": config.to_dict(),
        "cluster": cluster.to_dict(),
        "constants": {
            "framework_reserved_bytes": FRAMEWORK_RESERVED_BYTES,
            "cuda_context_bytes": CUDA_CONTEXT_BYTES,
            "nccl_buffer_bytes": NCCL_BUFFER_BYTES,
            "workspace_bytes": WORKSPACE_BYTES,
            "host_bytes_per_rank": HOST_BYTES_PER_RANK,
            "fsdp_prefetched_units": FSDP_PREFETCHED_UNITS,
            "recompute_flop_factor": RECOMPUTE_FLOP_FACTOR,
            "pcie_crossings_per_use": PCIE_CROSSINGS_PER_USE,
        },
        "target_global_batch": target,
        "global_batch": global_batch,
        "min_feasible_nodes": candidates[-1]["nodes"],
        "min_native_nodes": min((c["nodes"] for c in candidates if c["fits_natively"]), default=None),
        "candidates": candidates,
    }


# --- command line -------------------------------------------------------------------------------


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Model and training options, shared with `transit submit --to-min`."""
    group = parser.add_argument_group("model (a preset, or explicit dimensions)")
    group.add_argument("--model", help=f"preset: {', '.join(PRESETS)}")
    for name in ("layers", "hidden", "ffn", "heads", "kv-heads", "vocab", "head-dim", "experts",
                 "active-experts", "shared-experts"):
        group.add_argument(f"--{name}", type=int, help="overrides the preset" if name != "ffn" else
                           "feed-forward width (of one expert for MoE)")
    group = parser.add_argument_group("training")
    group.add_argument("--precision", choices=sorted(PRECISION_BYTES), default="mixed",
                       help="mixed: fp32 params/grads/Adam, bf16 compute; bf16: all bf16 (default mixed)")
    group.add_argument("--tp", type=int, default=1, help="tensor parallel degree (inside a node)")
    group.add_argument("--pp", type=int, default=1, help="pipeline parallel degree")
    group.add_argument("--data-parallel", choices=("fsdp", "ddp"), default="fsdp",
                       help="fsdp shards model states over DP ranks; ddp replicates them (default fsdp)")
    group.add_argument("--local-batch", type=int, default=1, help="sequences per GPU per micro-batch")
    group.add_argument("--seq-len", type=int, default=8192)
    group.add_argument("--activation-checkpointing", action=argparse.BooleanOptionalAction, default=True,
                       help="full per-layer recomputation (default on)")
    group = parser.add_argument_group("cluster (defaults from --cluster)")
    group.add_argument("--cluster", choices=sorted(CLUSTER_PRESETS), default="h100",
                       help="node preset: 8 GPUs, 80 GB (h100) or 141 GB (h200) HBM, 2 TiB DRAM, 50 GB/s PCIe")
    group.add_argument("--gpus-per-node", type=int)
    group.add_argument("--hbm-gib", type=float, help="HBM per GPU")
    group.add_argument("--host-dram-gib", type=float, help="host DRAM per node")
    group.add_argument("--pcie-gbps", type=float, help="measured host-to-device bandwidth, GB/s")
    group.add_argument("--sustained-tflops", type=float, help="per-GPU TFLOPS without offload")


def model_from_args(args: argparse.Namespace) -> ModelSpec:
    dims = {name: getattr(args, name) for name in ("layers", "hidden", "ffn", "heads", "kv_heads", "vocab",
                                                   "head_dim", "experts", "active_experts", "shared_experts")}
    given = {k: v for k, v in dims.items() if v is not None}
    if args.model:
        base = asdict(preset(args.model))
        if given:
            base["name"] = f"{args.model}(custom)"
            base["head_dim"] = given.get("head_dim", 0 if "hidden" in given or "heads" in given else base["head_dim"])
        return ModelSpec(**(base | given))
    missing = [f"--{k.replace('_', '-')}" for k in ("layers", "hidden", "ffn", "heads", "vocab") if k not in given]
    if missing:
        raise UsageError(f"give --model PRESET or all dimensions (missing {', '.join(missing)})")
    given.setdefault("kv_heads", given["heads"])
    return ModelSpec(name="custom", **given)


def config_from_args(args: argparse.Namespace) -> tuple[TrainingConfig, ClusterSpec]:
    config = TrainingConfig(model=model_from_args(args), precision=args.precision, tp=args.tp, pp=args.pp,
                            data_parallel=args.data_parallel, local_batch=args.local_batch,
                            seq_len=args.seq_len, activation_checkpointing=args.activation_checkpointing)
    base = CLUSTER_PRESETS[args.cluster]
    overrides = {
        "gpus_per_node": args.gpus_per_node,
        "hbm_bytes": None if args.hbm_gib is None else int(args.hbm_gib * GIB),
        "host_dram_bytes": None if args.host_dram_gib is None else int(args.host_dram_gib * GIB),
        "pcie_bytes_per_s": None if args.pcie_gbps is None else args.pcie_gbps * 1e9,
        "sustained_flops": None if args.sustained_tflops is None else args.sustained_tflops * 1e12,
    }
    cluster = ClusterSpec(**(asdict(base) | {k: v for k, v in overrides.items() if v is not None}))
    for name, value in asdict(cluster).items():
        if value <= 0:
            raise UsageError(f"cluster {name.replace('_', ' ')} must be positive, got {value}")
    return config, cluster


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan", help="plan node count and batch settings for a scaled-in job",
        description="For every node count from --nodes down to the smallest one whose spill fits in host "
                    "DRAM: memory per GPU, spill, DP degree, a common global batch and its gradient "
                    "accumulation, and an estimated efficiency.")
    add_model_arguments(parser)
    parser.add_argument("--nodes", type=int, required=True, help="requested (largest) node count")
    parser.add_argument("--min-nodes", type=int, default=1, help="do not consider fewer nodes (default 1)")
    parser.add_argument("--global-batch", type=int,
                        help="target global batch in sequences (default: local batch x DP at --nodes)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument("--plot", metavar="PNG", help="also draw memory per GPU and efficiency per node count")
    parser.set_defaults(func=main)


def _gib(value: int) -> str:
    return f"{value / GIB:.1f}"


def print_table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    model, training, cluster = result["model"], result["training"], result["cluster"]
    table = Table(title=f"{model['name']}: {model['total_params'] / 1e9:.1f}B params "
                        f"({model['active_params'] / 1e9:.1f}B active), {training['precision']}, "
                        f"TP {training['tp']} PP {training['pp']} {training['data_parallel']}, "
                        f"local batch {training['local_batch']} x {training['seq_len']} tokens")
    for header in ("nodes", "GPUs", "DP", "fits", "states GiB/GPU", "activ. GiB/GPU", "spilled GiB/GPU",
                   "host GiB/node", "global batch", "accum", "efficiency"):
        table.add_column(header, justify="right")
    for c in result["candidates"]:
        table.add_row(str(c["nodes"]), str(c["gpus"]), str(c["dp"]), "yes" if c["fits_natively"] else "no",
                      _gib(c["model_state_bytes"]), _gib(c["activation_bytes"]), _gib(c["spilled_bytes"]),
                      _gib(c["host_bytes_per_node"]), str(c["global_batch"]), str(c["grad_accum"]),
                      f"{c['efficiency']:.0%}")
    console = Console()
    console.print(table)
    console.print(f"HBM {_gib(cluster['hbm_bytes'])} GiB/GPU, of which the framework holds "
                  f"{_gib(result['constants']['framework_reserved_bytes'])} GiB (CUDA context, NCCL, workspaces); "
                  f"host DRAM {_gib(cluster['host_dram_bytes'])} GiB/node; PCIe {cluster['pcie_bytes_per_s'] / 1e9:.0f} "
                  f"GB/s; {cluster['sustained_flops'] / 1e12:.0f} TFLOPS sustained.")
    console.print(f"Global batch {result['global_batch']} (target {result['target_global_batch']}) is a common "
                  f"multiple of local batch x DP for every count. Smallest feasible node count: "
                  f"{result['min_feasible_nodes']}; smallest without spilling: {result['min_native_nodes'] or 'none'}.")


def plot(result: dict, path: str) -> None:
    """Stacked device bytes per GPU against HBM, and the efficiency estimate, per node count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    candidates = result["candidates"]
    labels = [str(c["nodes"]) for c in candidates]
    parts = {"model states": [c["model_state_bytes"] / GIB for c in candidates],
             "activations": [c["activation_bytes"] / GIB for c in candidates],
             "framework": [c["memory"]["framework"] / GIB for c in candidates]}
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    bottom = [0.0] * len(candidates)
    for name, values in parts.items():
        ax.bar(labels, values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.axhline(result["cluster"]["hbm_bytes"] / GIB, color="black", linestyle="--", label="HBM per GPU")
    ax.set_xlabel("nodes")
    ax.set_ylabel("GiB per GPU")
    ax.set_title(f"{result['model']['name']}: global batch {result['global_batch']}")
    eff = ax.twinx()
    eff.plot(labels, [100 * c["efficiency"] for c in candidates], color="tab:red", marker="o")
    eff.set_ylabel("estimated efficiency (%)", color="tab:red")
    eff.set_ylim(0, 105)
    fig.legend(loc="outside lower center", ncols=4, fontsize="small")
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(args: argparse.Namespace) -> int:
    config, cluster = config_from_args(args)
    result = plan(config, cluster, args.nodes, args.global_batch, args.min_nodes)
    if args.plot:
        plot(result, args.plot)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0
