"""Train the benchmark model under DeepSpeed ZeRO-Offload or ZeRO-Infinity; one JSON result (rank 0).

    torchrun --standalone --nproc-per-node 1 bench/deepspeed_train.py --system zero-offload \
        --model bench --global-batch 8 --local-batch 8 --mem-cap 24G --out r.json
    python bench/deepspeed_train.py --system zero-infinity --global-batch 8 --local-batch 8 --print-config

Same model, initial weights, data, activation checkpointing and tokens per optimizer step as
bench/train.py; bf16 compute with fp32 master weights (DeepSpeed's bf16 mode).
- zero-offload:  ZeRO stage 2, optimizer states (and fp32 master weights, gradients) on the CPU.
- zero-infinity: ZeRO stage 3, parameters and optimizer states on the CPU (CPU, not NVMe).
- zenflow:       ZeRO-Offload with DeepSpeed's ZenFlow (stage 2): the top ZENFLOW_TOPK_RATIO of
                 gradient columns updated on the GPU every step, the rest by the CPU optimizer
                 every ZENFLOW_UPDATE_INTERVAL steps, overlapped with the next steps; a different
                 optimizer, so its losses are not comparable bit for bit. Needs DeepSpeedCPUAdam.
The CPU optimizer is DeepSpeedCPUAdam (a JIT-built op) or, with `--cpu-adam torch`, PyTorch's
fused AdamW on the CPU; the result records which.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

# as a script (torchrun bench/train.py): the repository root on the path, for the bench package
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import (
    GpuClocks,
    NvmlMonitor,
    add_protocol_args,
    apply_memory_cap,
    gather_rank_facts,
    parse_size,
    pin_cpu_cores,
    protocol_settings,
    resolve_batch,
    result_doc,
    timed_steps,
    write_json,
)
from bench.model import Transformer, apply_activation_checkpointing, config_by_name, loss_fn, synthetic_batch
from bench.train import ADAM_BETAS, LEARNING_RATE, WEIGHT_DECAY, micro_batch

SYSTEMS = ("zero-offload", "zero-infinity", "zenflow")
# ZenFlow's settings: DeepSpeed's ZenFlow tutorial (topk 5 %, CPU update every 4 steps, overlapped).
ZENFLOW_TOPK_RATIO = 0.05
ZENFLOW_UPDATE_INTERVAL = 4
# Large buckets: one GPU, so these only bound transient buffers; DeepSpeed's defaults are 5e8.
REDUCE_BUCKET_ELEMENTS = 200_000_000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--system", choices=SYSTEMS, required=True)
    p.add_argument("--model", default="bench")
    p.add_argument("--global-batch", type=int)
    p.add_argument("--local-batch", type=int)
    p.add_argument("--grad-accum", type=int)
    add_protocol_args(p, default_steps=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--time-budget", type=float, default=0.0)
    p.add_argument("--cpu-adam", choices=("deepspeed", "torch"), default="deepspeed",
                   help="DeepSpeedCPUAdam (JIT-built op) or torch.optim.AdamW(fused) on the CPU")
    p.add_argument("--mem-cap", type=parse_size, help="cap device memory at this size (PyTorch allocator)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out")
    p.add_argument("--print-config", action="store_true", help="print the DeepSpeed config and exit")
    p.add_argument("--world-size", type=int, default=1, help="world size assumed by --print-config")
    return p.parse_args(argv)


def ds_config(system: str, global_batch: int, local_batch: int, grad_accum: int, cpu_adam: str) -> dict:
    offload = {"device": "cpu", "pin_memory": True}
    zero: dict = {
        "stage": 2 if system == "zero-offload" else 3,
        "offload_optimizer": offload,
        "contiguous_gradients": True,
        "overlap_comm": True,
        "reduce_bucket_size": REDUCE_BUCKET_ELEMENTS,
    }
    if system == "zero-infinity":
        zero["offload_param"] = offload
    if system == "zenflow":
        zero["zenflow"] = {"topk_ratio": ZENFLOW_TOPK_RATIO, "select_strategy": "auto", "select_interval": "auto",
                           "update_interval": ZENFLOW_UPDATE_INTERVAL, "full_warm_up_rounds": 0, "overlap_step": True}
    adam_params: dict = {"lr": LEARNING_RATE, "betas": list(ADAM_BETAS), "weight_decay": WEIGHT_DECAY}
    if cpu_adam == "torch":
        adam_params |= {"torch_adam": True, "fused": True}
    return {
        "train_batch_size": global_batch,
        "train_micro_batch_size_per_gpu": local_batch,
        "gradient_accumulation_steps": grad_accum,
        "bf16": {"enabled": True},
        "zero_optimization": zero,
        "optimizer": {"type": "AdamW", "params": adam_params},
        "gradient_clipping": 0.0,
        "steps_per_print": 1_000_000,
        "wall_clock_breakdown": False,
    }


def host_state_bytes(engine, model: torch.nn.Module) -> dict:
    """Bytes of training state DeepSpeed keeps in host memory, counted from its live tensors:
    the CPU optimizer's fp32 master partitions and their gradients, its states, and (stage 3
    with parameter offload) the bf16 parameter partitions."""
    seen: set[int] = set()

    def host_bytes(t: torch.Tensor | None) -> int:
        if t is None or t.device.type != "cpu" or t.dim() == 0:
            return 0
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:
            return 0
        seen.add(ptr)
        return t.untyped_storage().nbytes()

    zero = engine.optimizer
    inner = zero.optimizer  # the CPU Adam that ZeRO wraps
    # fp32 master partitions: stage 2 and stage 3 name them differently (stage 3 also empties
    # the inner optimizer's param_groups between steps).
    masters = getattr(zero, "single_partition_of_fp32_groups", None) or zero.fp32_partitioned_groups_flat
    out = {
        "master_params": sum(host_bytes(p) for p in masters),
        "master_grads": sum(host_bytes(p.grad) for p in masters),
        "optimizer": sum(host_bytes(v) for state in inner.state.values() for v in state.values()
                         if isinstance(v, torch.Tensor)),
        "params": sum(host_bytes(getattr(p, "ds_tensor", None)) for p in model.parameters()),
    }
    out["total"] = sum(out.values())
    return out


def train(args: argparse.Namespace) -> dict | None:
    import deepspeed
    import torch.distributed as dist

    local_rank = int(os.environ["LOCAL_RANK"])
    cores = pin_cpu_cores(local_rank, args.cpu_cores_per_rank)
    settle = protocol_settings(args)
    if args.system == "zenflow" and args.cpu_adam != "deepspeed":
        raise SystemExit("zenflow runs DeepSpeed's ZenFlowCPUAdam: --cpu-adam deepspeed")
    on_gpu = torch.cuda.is_available()
    # CPU (gloo, DS_ACCELERATOR=cpu) only for the harness's own tests.
    device = torch.device("cuda", local_rank) if on_gpu else torch.device("cpu")
    monitor = NvmlMonitor(local_rank) if on_gpu else None  # baseline before the CUDA context
    if on_gpu:
        torch.cuda.set_device(device)
    cap = apply_memory_cap(args.mem_cap, device, monitor) if (args.mem_cap and monitor) else None
    deepspeed.init_distributed(dist_backend="nccl" if on_gpu else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    batch = resolve_batch(world, args.global_batch, args.local_batch, args.grad_accum)
    cfg = config_by_name(args.model)
    # The same initial weights as bench/train.py: seeded init on the device, then DeepSpeed.
    with torch.device("meta"):
        model = Transformer(cfg)
    model.to_empty(device=device)
    torch.manual_seed(args.seed)
    model.init_weights()
    apply_activation_checkpointing(model)
    config = ds_config(args.system, batch.global_batch, batch.local_batch, batch.grad_accum, args.cpu_adam)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    batches = [synthetic_batch(cfg, args.seed, step, batch.global_batch) for step in range(args.steps)]

    def one_step(step: int) -> torch.Tensor:
        loss_sum = torch.zeros((), device=device)
        for micro in range(batch.grad_accum):
            inputs, targets = micro_batch(batches[step], micro, rank, world, batch.local_batch, device)
            loss = loss_fn(engine(inputs), targets)
            engine.backward(loss)  # DeepSpeed divides by the accumulation steps itself
            engine.step()  # applies the optimizer at the accumulation boundary only
            loss_sum += loss.detach() / batch.grad_accum
        return loss_sum

    clocks = GpuClocks(local_rank) if on_gpu else None
    loop = timed_steps(one_step, args.steps, args.warmup, args.time_budget, device, world, rank,
                       host_state=lambda: host_state_bytes(engine, model), clocks=clocks, settle=settle)
    facts = gather_rank_facts(monitor, device, loop)
    dist.destroy_process_group()
    if rank != 0:
        return None
    return result_doc(
        system=args.system, runner="bench/deepspeed_train.py", model_name=args.model, batch=batch,
        world=world, warmup=args.warmup, loop=loop, rank_facts=facts, cap=cap, settle=settle,
        config={
            "offload": args.system, "deepspeed": deepspeed.__version__, "deepspeed_config": config,
            "optimizer": ("DeepSpeedCPUAdam" if args.cpu_adam == "deepspeed"
                          else "torch.optim.AdamW(fused) on CPU"),
            "activation_checkpointing": True,
            "precision": "DeepSpeed bf16: bf16 params and compute, fp32 master weights and optimizer on CPU",
            "steps_requested": args.steps, "seed": args.seed, "time_budget_s": args.time_budget,
            "cpu_cores_rank0": cores,
        },
    ) | {"gpu_clocks_rank0": clocks.as_dict() if clocks else None}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.print_config:
        batch = resolve_batch(args.world_size, args.global_batch, args.local_batch, args.grad_accum)
        print(json.dumps(ds_config(args.system, batch.global_batch, batch.local_batch, batch.grad_accum,
                                   args.cpu_adam), indent=1))
        return 0
    if "LOCAL_RANK" not in os.environ:
        raise SystemExit("deepspeed_train.py runs under torchrun (e.g. torchrun --standalone --nproc-per-node 1 ...)")
    result = train(args)
    if result is not None:
        if args.out:
            write_json(args.out, result)
        print(f"{result['system']}: {result['tflops_per_gpu'] or 0:.1f} TFLOPS/GPU, "
              f"offloaded {result['offloaded_bytes_per_gpu'] / 2**30:.1f} GiB/GPU", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
