"""The model, training, cluster and count options that `transit plan` and `transit submit` share."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from transit.errors import UsageError
from transit.plan import bounds
from transit.plan.models import PRESETS, ModelSpec, from_hf_config, preset
from transit.plan.planner import CLUSTER_PRESETS, GIB, PRECISION_BYTES, ClusterSpec, TrainingConfig

MODEL_DIMENSIONS = ("layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "head_dim", "experts",
                    "active_experts", "shared_experts")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Model, training and cluster options, shared with `transit submit`."""
    group = parser.add_argument_group("model (a preset, a Hugging Face config.json, or dimensions)")
    source = group.add_mutually_exclusive_group()
    source.add_argument("--model", help=f"preset: {', '.join(PRESETS)}")
    source.add_argument("--hf-config", metavar="JSON",
                        help="a Hugging Face config.json (Llama, Mistral, Mixtral, Qwen2/2.5, Qwen3, Qwen3-MoE)")
    for name in MODEL_DIMENSIONS:
        group.add_argument(bounds.option_name(name), metavar="N", help="overrides the preset or config" if
                           name != "ffn" else "feed-forward width (of one expert for MoE)")
    group = parser.add_argument_group("training")
    group.add_argument("--precision", choices=sorted(PRECISION_BYTES), default="mixed",
                       help="mixed: fp32 params/grads/Adam, bf16 compute; bf16: all bf16 (default mixed)")
    group.add_argument("--tp", default="1", metavar="N", help="tensor parallel degree (inside a node)")
    group.add_argument("--pp", default="1", metavar="N", help="pipeline parallel degree (divides the layers)")
    group.add_argument("--data-parallel", choices=("fsdp", "ddp"), default="fsdp",
                       help="fsdp shards model states over DP ranks; ddp replicates them (default fsdp)")
    group.add_argument("--local-batch", default="1", metavar="N", help="sequences per GPU per micro-batch")
    group.add_argument("--seq-len", default="8192", metavar="N", help="tokens per sequence (default 8192)")
    group.add_argument("--activation-checkpointing", action=argparse.BooleanOptionalAction, default=True,
                       help="full per-layer recomputation (default on)")
    group = parser.add_argument_group("cluster (defaults from --cluster)")
    group.add_argument("--cluster", choices=sorted(CLUSTER_PRESETS), default="h100",
                       help="node preset: 8 GPUs, 80 GB (h100) or 141 GB (h200) HBM, 2 TiB DRAM, 50 GB/s PCIe")
    group.add_argument("--gpus-per-node", metavar="N")
    group.add_argument("--hbm-gib", metavar="GIB", help="HBM per GPU")
    group.add_argument("--host-dram-gib", metavar="GIB", help="host DRAM per node")
    group.add_argument("--pcie-gbps", metavar="GB/S", help="measured host-to-device bandwidth per GPU")
    group.add_argument("--sustained-tflops", metavar="TFLOPS", help="per-GPU TFLOPS without offload")


def add_count_arguments(parser: argparse.ArgumentParser) -> argparse._MutuallyExclusiveGroup:
    """--nodes and the candidate counts, --global-batch or --global-tokens (plan and submit)."""
    parser.add_argument("--nodes", required=True, metavar="N",
                        help=f"requested (largest) node count, at most {bounds.BOUNDS['nodes'].high:g}")
    counts = parser.add_mutually_exclusive_group()
    counts.add_argument("--scale-in", metavar="F[,F...]",
                        help="fractions of --nodes to give up, e.g. 0.25,0.5: candidates 16 -> 12, 8")
    counts.add_argument("--candidates", metavar="N[,N...]",
                        help="node counts the job may train on, e.g. 16,12,8 (with --nodes)")
    batch = parser.add_mutually_exclusive_group()
    batch.add_argument("--global-batch", metavar="SEQUENCES",
                       help="target sequences per optimizer step (default: local batch x DP at --nodes)")
    batch.add_argument("--global-tokens", metavar="TOKENS",
                       help="target tokens per optimizer step (whole sequences of --seq-len, rounded up)")
    return counts


def model_from_args(args: argparse.Namespace) -> ModelSpec:
    given = {k: getattr(args, k) for k in MODEL_DIMENSIONS if getattr(args, k) is not None}
    if args.model or args.hf_config:
        base = preset(args.model) if args.model else from_hf_config(args.hf_config)
        if not given:
            return base
        dims = asdict(base) | {"name": f"{base.name}(custom)"}
        if "hidden" in given or "heads" in given:
            dims["head_dim"] = 0  # derived again unless given
        return ModelSpec(**(dims | given))
    missing = [bounds.option_name(k) for k in ("layers", "hidden", "ffn", "heads", "vocab") if k not in given]
    if len(missing) == 5:
        raise UsageError("needs a model: --model PRESET, --hf-config JSON, or its dimensions")
    if missing:
        raise UsageError(f"model dimensions missing: {', '.join(missing)} (or give --model, --hf-config)")
    given.setdefault("kv_heads", given["heads"])
    return ModelSpec(name="custom", **given)


def cluster_from_args(args: argparse.Namespace) -> ClusterSpec:
    scaled = {"gpus_per_node": ("gpus_per_node", 1), "hbm_gib": ("hbm_bytes", GIB),
              "host_dram_gib": ("host_dram_bytes", GIB), "pcie_gbps": ("pcie_bytes_per_s", 1e9),
              "sustained_tflops": ("sustained_flops", 1e12)}
    overrides = {field: (round(value * scale) if field.endswith("bytes") else value * scale)
                 for option, (field, scale) in scaled.items() if (value := getattr(args, option)) is not None}
    return ClusterSpec(**(asdict(CLUSTER_PRESETS[args.cluster]) | overrides))


def config_from_args(args: argparse.Namespace) -> tuple[TrainingConfig, ClusterSpec]:
    """The model, training and cluster of `args`, whose numbers bounds.check_args has checked."""
    cluster = cluster_from_args(args)
    bounds.check_tensor_parallel(args.tp, cluster.gpus_per_node)  # before the model's heads are asked
    config = TrainingConfig(model=model_from_args(args), precision=args.precision, tp=args.tp, pp=args.pp,
                            data_parallel=args.data_parallel, local_batch=args.local_batch,
                            seq_len=args.seq_len, activation_checkpointing=args.activation_checkpointing)
    return config, cluster
