#!/usr/bin/env python3
"""A tiny, real, deterministic training run for tests and the sbatch templates.

Started by torchrun (one process per GPU, or per CPU slot with gloo). The batch settings come
from the environment that `transit launch` exports: TRANSIT_GLOBAL_BATCH sequences per
optimizer step, TRANSIT_LOCAL_BATCH per rank per micro-batch, TRANSIT_GRAD_ACCUM micro-batches.
Each optimizer step consumes the same sequences whatever the world size (sequence i of step s is
generated from the seed and its global index), so runs on different node counts with the same
global batch follow the same loss trajectory up to floating-point summation order.

The mean loss of every optimizer step is printed and written by rank 0 as JSON to --out. Each
rank prints "train_tiny: rank R of N done" once it has destroyed its process group.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

VOCAB = 64
SEQ_LEN = 16
WIDTH = 32


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON file for the loss of every optimizer step")
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps (default 5)")
    parser.add_argument("--parallel", choices=("ddp", "fsdp", "pp", "tp-pp"), default="ddp",
                        help="DistributedDataParallel, FSDP2 fully_shard, or 2 pipeline stages (GPipe), with TP 2 "
                             "inside each for tp-pp, and data parallelism over the rest (launch them with --pp 2, "
                             "and --tp 2) (default ddp)")
    parser.add_argument("--seed", type=int, default=1234)
    return parser.parse_args()


PIPELINE_STAGES = 2  # --parallel pp and tp-pp: the embedding and first linear layer, then the rest
PIPELINE_TP = {"pp": 1, "tp-pp": 2}  # and the TP degree of each stage's linear layer


def batch_settings(world_size: int) -> tuple[int, int, int]:
    """The batch `transit launch` exported, checked against `world_size` data-parallel ranks."""
    try:
        global_batch, local_batch, accumulation = (int(os.environ[name]) for name in (
            "TRANSIT_GLOBAL_BATCH", "TRANSIT_LOCAL_BATCH", "TRANSIT_GRAD_ACCUM"))
    except KeyError as missing:
        sys.exit(f"train_tiny: {missing} is not set; start this script through `transit launch`")
    if global_batch != local_batch * accumulation * world_size:
        sys.exit(f"train_tiny: global batch {global_batch} != local batch {local_batch} x accumulation "
                 f"{accumulation} x data-parallel ranks {world_size}")
    return global_batch, local_batch, accumulation


def sequences(seed: int, first: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences first..first+count-1: random tokens whose next token is a fixed function of them."""
    inputs = torch.empty(count, SEQ_LEN, dtype=torch.long)
    for row in range(count):
        generator = torch.Generator().manual_seed(seed * 1_000_003 + first + row)
        inputs[row] = torch.randint(0, VOCAB, (SEQ_LEN,), generator=generator)
    return inputs, (inputs * 7 + 3) % VOCAB


def build_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)  # identical initial weights on every rank and every world size
    return nn.Sequential(nn.Embedding(VOCAB, WIDTH), nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(),
                         nn.Linear(4 * WIDTH, VOCAB))


def train(args: argparse.Namespace, device: torch.device, rank: int, world_size: int,
          batch: tuple[int, int, int]) -> list[float]:
    """The mean loss of every optimizer step. The model, and with it DDP's hold on the process group,
    is freed on return, so the process group is torn down by destroy_process_group, not later."""
    global_batch, local_batch, accumulation = batch
    model = build_model(args.seed).to(device)
    if args.parallel == "ddp":
        model = nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard

        fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()

    losses = []
    for step in range(args.steps):
        step_loss = torch.zeros((), device=device)
        for micro in range(accumulation):
            first = step * global_batch + (micro * world_size + rank) * local_batch
            inputs, targets = (t.to(device) for t in sequences(args.seed, first, local_batch))
            last = micro == accumulation - 1
            if args.parallel == "ddp" and not last:
                with model.no_sync():  # gradients are all-reduced once, on the last micro-batch
                    loss = loss_fn(model(inputs).flatten(0, 1), targets.flatten()) / accumulation
                    loss.backward()
            else:
                if args.parallel == "fsdp":
                    model.set_requires_gradient_sync(last)
                loss = loss_fn(model(inputs).flatten(0, 1), targets.flatten()) / accumulation
                loss.backward()
            step_loss += loss.detach()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        dist.all_reduce(step_loss, op=dist.ReduceOp.SUM)
        losses.append(step_loss.item() / world_size)
        if rank == 0:
            print(f"step {step} loss {losses[-1]:.6f}", flush=True)
    return losses


def train_pipeline(args: argparse.Namespace, rank: int, world_size: int, tp: int,
                   batch: tuple[int, int, int]) -> list[float]:
    """train() with the model in PIPELINE_STAGES stages (GPipe over the micro-batches of a step), each
    linear layer split over `tp` ranks (column-wise, its output gathered), and data parallelism across
    the pipelines: the same sequences, losses and updates. Ranks: (data-parallel, stage, TP) row-major."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
    from torch.distributed.tensor import DTensor, Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    global_batch, local_batch, accumulation = batch
    dp = world_size // (PIPELINE_STAGES * tp)
    mesh = init_device_mesh("cpu", (dp, PIPELINE_STAGES, tp), mesh_dim_names=("dp", "pp", "tp"))
    stage_index, dp_rank = mesh["pp"].get_local_rank(), mesh["dp"].get_local_rank()
    model = build_model(args.seed)
    module, linear = (model[:2], "1") if stage_index == 0 else (model[2:], "3")  # slices keep their indices
    if tp > 1:
        parallelize_module(module, mesh["tp"], {linear: ColwiseParallel(output_layouts=Replicate())})
    stage = PipelineStage(module, stage_index, PIPELINE_STAGES, torch.device("cpu"), group=mesh["pp"].get_group())
    loss_fn = nn.CrossEntropyLoss()
    # the schedule divides each micro-batch's gradient by the micro-batch count, as train() divides its loss
    schedule = ScheduleGPipe(stage, n_microbatches=accumulation,
                             loss_fn=lambda out, target: loss_fn(out.flatten(0, 1), target.flatten()))
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-2, foreach=False)
    # one rank of each pipeline's last stage reports its loss
    reports = stage_index == PIPELINE_STAGES - 1 and mesh["tp"].get_local_rank() == 0

    losses = []
    for step in range(args.steps):
        # micro-batch m of this pipeline holds the sequences train() gives data-parallel rank dp_rank
        parts = [sequences(args.seed, step * global_batch + (micro * dp + dp_rank) * local_batch, local_batch)
                 for micro in range(accumulation)]
        inputs, targets = (torch.cat(t) for t in zip(*parts, strict=True))
        micro_losses: list[torch.Tensor] = []
        if stage_index == 0:
            schedule.step(inputs)
        else:
            schedule.step(target=targets, losses=micro_losses)
        for parameter in module.parameters():  # what DDP does: the mean gradient over the replicas
            grad = parameter.grad.to_local() if isinstance(parameter.grad, DTensor) else parameter.grad
            dist.all_reduce(grad, group=mesh["dp"].get_group())
            grad /= dp
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step_loss = torch.stack(micro_losses).sum().detach() / accumulation if reports else torch.zeros(())
        dist.all_reduce(step_loss, op=dist.ReduceOp.SUM)
        losses.append(step_loss.item() / dp)
        if rank == 0:
            print(f"step {step} loss {losses[-1]:.6f}", flush=True)
    return losses


def main() -> int:
    args = parse_args()
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if args.parallel in PIPELINE_TP:
        model_parallel = PIPELINE_STAGES * PIPELINE_TP[args.parallel]
        if use_cuda or world_size % model_parallel:
            sys.exit(f"train_tiny: --parallel {args.parallel} runs on CPU ranks in multiples of {model_parallel}")
        global_batch, local_batch, accumulation = batch = batch_settings(world_size // model_parallel)
        losses = train_pipeline(args, rank, world_size, PIPELINE_TP[args.parallel], batch)
    else:
        global_batch, local_batch, accumulation = batch = batch_settings(world_size)
        losses = train(args, device, rank, world_size, batch)
    if rank == 0:
        result = {"global_batch": global_batch, "local_batch": local_batch, "grad_accum": accumulation,
                  "world_size": world_size, "parallel": args.parallel, "seed": args.seed,
                  # the policy the SPANK plugin gave this task (None without --transit)
                  "transit_policy": os.environ.get("TRANSIT_POLICY"), "losses": losses}
        with open(args.out, "w") as out:
            json.dump(result, out, indent=2)
    dist.barrier()  # no rank tears gloo down while another still has a collective in flight
    dist.destroy_process_group()
    # The slurm tier reads this line: work done, before an abort that gloo may still raise at exit.
    print(f"train_tiny: rank {rank} of {world_size} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
