"""Train the benchmark model with FSDP2 and write one JSON result (rank 0).

Launch with torchrun, one process per GPU (or CPU processes with gloo for tests):

    torchrun --standalone --nproc-per-node 2 bench/train.py --model bench --local-batch 4 --out r.json
    transit run --policy advise --mem-limit 24G --out DIR -- \
        torchrun --standalone --nproc-per-node 1 bench/train.py --model bench --global-batch 8 --local-batch 4

Mixed precision as TorchTitan does it: fp32 parameters sharded by `fully_shard`, bf16 compute,
fp32 gradient reduction; every block recomputed in backward; fused (or foreach) AdamW.
`--offload fsdp-cpu` is FSDP2's CPUOffloadPolicy (TorchTitan's enable_cpu_offload). Batch
settings come from TRANSIT_GLOBAL_BATCH / TRANSIT_LOCAL_BATCH / TRANSIT_GRAD_ACCUM when the
launcher sets them, else from the arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

# as a script (torchrun bench/train.py): the repository root on the path, for the bench package
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import (
    Canary,
    GpuClocks,
    NvmlMonitor,
    StepPhases,
    add_protocol_args,
    apply_memory_cap,
    gather_rank_facts,
    host_resident_bytes,
    parse_size,
    pin_cpu_cores,
    protocol_settings,
    read_own_smaps,
    residency_sweep,
    resolve_batch,
    result_doc,
    timed_steps,
    under_transit,
    uvm_host_resident_bytes,
    write_json,
)
from bench.model import Transformer, apply_activation_checkpointing, config_by_name, loss_fn, synthetic_batch

LEARNING_RATE = 3e-4
ADAM_BETAS = (0.9, 0.95)
WEIGHT_DECAY = 0.1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="bench", help="model config name (bench/model.py)")
    p.add_argument("--global-batch", type=int, help="sequences per optimizer step, all ranks together")
    p.add_argument("--local-batch", type=int, help="sequences per micro-batch per rank")
    p.add_argument("--grad-accum", type=int, help="micro-batches per optimizer step")
    add_protocol_args(p, default_steps=8)
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the timing statistics (no settle rule)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (FSDP over world / tp ranks)")
    p.add_argument("--time-budget", type=float, default=0.0,
                   help="stop after the first measured step that ends past this many seconds (0: none)")
    p.add_argument("--offload", choices=("none", "fsdp-cpu"), default="none")
    p.add_argument("--optimizer", choices=("fused", "foreach"), default="fused")
    p.add_argument("--residency-sweep", action="store_true",
                   help="under TRANSIT, after training: prefetch all managed memory to the host, so that "
                        "TRANSIT's DtoH records measure what the device held (bench/common.py)")
    p.add_argument("--no-activation-checkpointing", action="store_true")
    p.add_argument("--mem-cap", type=parse_size,
                   help="cap device memory at this size through PyTorch's allocator (non-TRANSIT systems)")
    p.add_argument("--deterministic", action="store_true",
                   help="deterministic kernels (for bitwise loss comparisons)")
    p.add_argument("--no-memory-monitor", action="store_true",
                   help="no NVML/smaps monitor thread (its polls take the GIL every 20 ms and perturb the step "
                        "times a timing comparison reads); the result then has no memory readings")
    p.add_argument("--canary", action="store_true",
                   help=f"once before step 0 and after every step, outside the steps' timing: {Canary.describe()}")
    p.add_argument("--pcie-split", action="store_true",
                   help="wait for the training stream before each optimizer step and read the PCIe counters "
                        "there and at the step's start: each step's PCIe bytes before its optimizer step and of it, "
                        "the canary's left out (one synchronization more a step)")
    p.add_argument("--host-set", action="store_true",
                   help="under TRANSIT, after every step, outside its timing: each kind of training state's bytes "
                        "on the host (pagemap) and the rest of the managed data there (smaps): which data a "
                        "placement reads in place, step by step")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--label", default="fsdp2", help="system name recorded in the result")
    p.add_argument("--out", help="result JSON path (rank 0 writes it)")
    return p.parse_args(argv)


def device_index(local_rank: int) -> int:
    """This rank's CUDA device: LOCAL_RANK, modulo the devices it sees (emulated nodes give each
    rank only its own GPU, scripts/emulate-nodes)."""
    return local_rank % max(1, torch.cuda.device_count())


def init_distributed(local_rank: int) -> tuple[int, int, torch.device]:
    if torch.cuda.is_available():
        device = torch.device("cuda", device_index(local_rank))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size(), device


def build_model(args: argparse.Namespace, device: torch.device, world: int) -> Transformer:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    # Same full initial weights on every rank and for every system: seeded init on the device,
    # then sharded (fast; the fp32 model fits under every cap before sharding).
    with torch.device("meta"):
        model = Transformer(config_by_name(args.model))
    model.to_empty(device=device)
    torch.manual_seed(args.seed)
    model.init_weights()
    if args.tp > 1:
        mesh = init_device_mesh(device.type, (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
        apply_tensor_parallel(model, mesh["tp"])
        data_mesh = mesh["dp"]
    else:
        data_mesh = init_device_mesh(device.type, (world,))
    if not args.no_activation_checkpointing:
        apply_activation_checkpointing(model)
    fsdp_kwargs = {
        "mesh": data_mesh,
        "mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
        # Pinned host memory needs a GPU; the CPU-only tests run the same path unpinned.
        "offload_policy": (CPUOffloadPolicy(pin_memory=device.type == "cuda") if args.offload == "fsdp-cpu"
                           else OffloadPolicy()),
    }
    for block in model.layers:
        fully_shard(block, **fsdp_kwargs)
    fully_shard(model, **fsdp_kwargs)
    return model


def apply_tensor_parallel(model: Transformer, tp_mesh) -> None:
    """Megatron-style TP in every block, as TorchTitan does it: the attention's q/k/v and the
    FFN's w1/w3 split by output features (heads), wo and w2 by input features; embeddings, norms
    and the output layer replicated."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan = {"attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(), "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w3": ColwiseParallel(), "feed_forward.w2": RowwiseParallel()}
    for block in model.layers:
        parallelize_module(block, tp_mesh, plan)


def build_optimizer(args: argparse.Namespace, model: torch.nn.Module) -> torch.optim.Optimizer:
    impl = {"fused": True} if args.optimizer == "fused" else {"foreach": True}
    return torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, betas=ADAM_BETAS,
                             weight_decay=WEIGHT_DECAY, **impl)


def micro_batch(global_batch: tuple[torch.Tensor, torch.Tensor], micro: int, rank: int, world: int,
                local_batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of the global batch that `rank` trains in micro-batch `micro` (same split for every system)."""
    start = (micro * world + rank) * local_batch
    inputs, targets = global_batch
    rows = slice(start, start + local_batch)
    return inputs[rows].to(device, non_blocking=True), targets[rows].to(device, non_blocking=True)


def state_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, list[torch.Tensor]]:
    """This rank's training state by kind: sharded parameters, their gradients and the optimizer
    states (0-dim step counters left out), as local tensors, each storage once."""
    from torch.distributed.tensor import DTensor

    seen: set[int] = set()

    def local(tensors) -> list[torch.Tensor]:
        out = []
        for t in tensors:
            t = t.to_local() if isinstance(t, DTensor) else t
            if t is not None and t.dim() > 0 and t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                out.append(t)
        return out

    params = list(model.parameters())
    return {
        "params": local(params),
        "grads": local(p.grad for p in params),
        "optimizer": local(v for state in optimizer.state.values() for v in state.values()
                           if isinstance(v, torch.Tensor)),
    }


def host_state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Bytes of this rank's training state that live in host memory (FSDP2 CPU offload), after a step."""
    out = {kind: sum(t.numel() * t.element_size() for t in tensors if t.device.type == "cpu")
           for kind, tensors in state_tensors(model, optimizer).items()}
    out["total"] = sum(out.values())
    return out


def managed_host_resident_by_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Under TRANSIT: of each kind of training state (all managed memory), the bytes resident on the
    host now, and the state's size; the rest of the managed data on the host (activations, buffers)
    is what smaps counts beyond them. Shows which data a policy left on the host."""
    out = {}
    for kind, tensors in state_tensors(model, optimizer).items():
        ranges = [(t.data_ptr(), t.numel() * t.element_size()) for t in tensors]
        out[kind] = {"host_bytes": host_resident_bytes(ranges), "bytes": sum(size for _, size in ranges)}
    all_host = uvm_host_resident_bytes(read_own_smaps())
    out["other_host_bytes"] = None if all_host is None else max(0, all_host - sum(v["host_bytes"] for v in out.values()))
    return out


def train(args: argparse.Namespace) -> dict | None:
    if "LOCAL_RANK" not in os.environ:
        raise SystemExit("train.py runs under torchrun (e.g. torchrun --standalone --nproc-per-node 1 ...)")
    local_rank = int(os.environ["LOCAL_RANK"])
    cores = pin_cpu_cores(local_rank, args.cpu_cores_per_rank)
    settle = protocol_settings(args)
    if args.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before cuBLAS starts
        torch.use_deterministic_algorithms(True, warn_only=True)
        # cuDNN, flash and memory-efficient attention backward accumulate with atomics: the math
        # backend is the one SDPA path that repeats bit for bit.
        torch.backends.cuda.enable_cudnn_sdp(False)
        torch.backends.cuda.enable_flash_sdp(False)
        torch.backends.cuda.enable_mem_efficient_sdp(False)
    # NVML's baseline is read before this process creates its CUDA context.
    monitor = NvmlMonitor(device_index(local_rank)) if torch.cuda.is_available() and not args.no_memory_monitor else None
    rank, world, device = init_distributed(local_rank)
    canary = Canary(device) if args.canary else None  # refuses a CPU device before the model is built
    cap = apply_memory_cap(args.mem_cap, device, monitor) if (args.mem_cap and monitor) else None
    if world % args.tp:
        raise SystemExit(f"--tp {args.tp} does not divide the world size {world}")
    data_world, data_rank = world // args.tp, rank // args.tp  # TP ranks of one group train the same rows
    batch = resolve_batch(data_world, args.global_batch, args.local_batch, args.grad_accum)
    cfg = config_by_name(args.model)
    model = build_model(args, device, world)
    optimizer = build_optimizer(args, model)
    # Data first, outside the timed region: the global batch of each step, sliced per rank and micro-batch.
    batches = [synthetic_batch(cfg, args.seed, step, batch.global_batch) for step in range(args.steps)]

    phases = StepPhases(device)
    clocks = GpuClocks(device.index) if device.type == "cuda" else None
    pcie_split = args.pcie_split and clocks is not None

    def one_step(step: int) -> torch.Tensor:
        # Gradients are cleared at the start, not the end, so that the host-state count after
        # step 0 sees them (they live through backward and the optimizer step either way).
        if pcie_split:
            clocks.mark("start")
        optimizer.zero_grad(set_to_none=True)
        phases.begin_step()
        loss_sum = torch.zeros((), device=device)
        for micro in range(batch.grad_accum):
            inputs, targets = micro_batch(batches[step], micro, data_rank, data_world, batch.local_batch, device)
            with phases.span("forward"):
                loss = loss_fn(model(inputs), targets) / batch.grad_accum
            with phases.span("backward"):
                loss.backward()
            loss_sum += loss.detach()
        if pcie_split:  # the training stream only: TRANSIT's mover keeps its side streams going
            torch.cuda.current_stream(device).synchronize()
            clocks.mark("optimizer")
        with phases.span("optimizer"):
            optimizer.step()
        return loss_sum

    canary_before = canary.run() if canary else None
    canary_steps: list[dict] = []
    # rank 0's steps as they end, one JSON line each: what a run stopped before its result file keeps
    step_log = Path(args.out).with_suffix(".steps.jsonl") if args.out and rank == 0 else None
    if step_log:
        step_log.parent.mkdir(parents=True, exist_ok=True)
        step_log.write_text(json.dumps({"canary_before_step0": canary_before}) + "\n")

    host_sets: list[dict] = []
    read_host_set = args.host_set and under_transit() and device.type == "cuda"

    def after_step(step: int, seconds: float, loss: float) -> None:
        entry: dict = {"step": step, "time_s": round(seconds, 4), "loss": loss,
                       "gpu": clocks.latest() if clocks else None}
        if canary:
            entry["canary"] = canary.run()
            canary_steps.append(entry["canary"])
        if read_host_set:
            entry["host_by_state"] = managed_host_resident_by_state(model, optimizer)
            host_sets.append(entry["host_by_state"])
        if step_log:
            with step_log.open("a") as f:
                f.write(json.dumps(entry) + "\n")
        if rank == 0 and (clocks or canary):
            print(f"  after step {step}: {json.dumps({k: entry[k] for k in ('gpu', 'canary') if entry.get(k)})}",
                  flush=True)

    loop = timed_steps(one_step, args.steps, args.warmup, args.time_budget, device, world, rank,
                       host_state=lambda: host_state_bytes(model, optimizer), clocks=clocks, settle=settle,
                       after_step=after_step)
    # Where the state is after the last step, before the sweep moves it all (TRANSIT runs).
    placement = managed_host_resident_by_state(model, optimizer) if under_transit() and device.type == "cuda" else None
    facts = gather_rank_facts(monitor, device, loop)
    sweep = residency_sweep(device) if args.residency_sweep and under_transit() else None
    dist.destroy_process_group()
    if rank != 0:
        return None
    result = result_doc(
        system=args.label, runner="bench/train.py", model_name=args.model, batch=batch, world=world,
        warmup=args.warmup, loop=loop, rank_facts=facts, cap=cap, settle=settle,
        config={
            "offload": args.offload, "optimizer": f"torch.optim.AdamW({args.optimizer})",
            "activation_checkpointing": not args.no_activation_checkpointing,
            "precision": "fp32 params, bf16 compute, fp32 reduce (FSDP2 MixedPrecisionPolicy)",
            "steps_requested": args.steps, "seed": args.seed, "deterministic": args.deterministic,
            "time_budget_s": args.time_budget, "tp": args.tp, "cpu_cores_rank0": cores,
        },
    ) | {"residency_sweep": sweep, "managed_host_resident_by_state": placement,
         "host_by_state_each_step_rank0": host_sets or None,
         "loopback_tx_bytes_rank0": loop.loopback_tx_bytes,
         "gpu_clocks_rank0": clocks.as_dict() if clocks else None,
         "canary_rank0": ({"what": Canary.describe(), "before_step0": canary_before, "per_step": canary_steps}
                          if canary else None)}
    timing = result["step_time"]
    return result | {"step_phases_rank0": phases.as_dict(timing["warmup_steps"], timing["measured_steps"])}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = train(args)
    if result is not None:
        if args.out:
            write_json(args.out, result)
        print(f"{result['system']}: {result['tflops_per_gpu'] or 0:.1f} TFLOPS/GPU, "
              f"step {result['step_time']['mean_s'] or 0:.3f}s mean, peak {result['memory']['peak_bytes_max']}",
              flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    if not torch.cuda.is_available():
        # On the CPU a gloo rank aborts now and then in the interpreter's teardown, its work done and
        # written ("terminate called without an active exception", about 1 run in 25 of two emulated
        # nodes; pytorch/pytorch#179291): leave without the teardown. On a GPU, libtransit's stats are
        # written in it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
