"""Estimate the per-GPU memory peak of bench/train.py without a GPU (the README's sizing numbers).

    python3 bench/estimate_memory.py --world 1 --local-batch 4 --grad-accum 2

PyTorch's FSDP2 memory tracker follows a forward and backward of the real model, with FSDP2
sharding and the same mixed precision and activation checkpointing, on fake tensors (no memory
is used) and a fake process group of `--world` ranks. It runs on the CPU here, so attention
takes the CPU kernels' memory, an upper bound for the GPU's flash attention. The fused AdamW
states (two fp32 moments per sharded parameter, no temporaries) are added from their size: the
tracker's fake optimizer step does not stand for the fused kernel.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

# as a script (torchrun bench/train.py): the repository root on the path, for the bench package
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import GIB
from bench.model import Transformer, apply_activation_checkpointing, config_by_name, count_params, loss_fn


def estimate(model_name: str, world: int, local_batch: int, grad_accum: int) -> dict:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    mesh = init_device_mesh("cpu", (world,))
    cfg = config_by_name(model_name)
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    with FakeTensorMode():
        model = Transformer(cfg)
        apply_activation_checkpointing(model)
        for block in model.layers:
            fully_shard(block, mesh=mesh, mp_policy=mp_policy)
        fully_shard(model, mesh=mesh, mp_policy=mp_policy)
        tracker = FSDPMemTracker(model, None)
        with tracker:
            for micro in range(grad_accum):
                if micro:
                    tracker.reset_mod_stats()  # the tracker follows one forward/backward at a time
                tokens = torch.randint(0, cfg.vocab_size, (local_batch, cfg.seq_len))
                (loss_fn(model(tokens), tokens) / grad_accum).backward()
        peak = next(iter(tracker.get_tracker_snapshot("peak").values()))
    dist.destroy_process_group()
    by_kind = {str(getattr(k, "value", k)): v for k, v in peak.items()}
    adam_states = 8 * count_params(cfg)["total"] // world
    return {
        "model": model_name, "world": world, "local_batch": local_batch, "grad_accum": grad_accum,
        "forward_backward_peak_gib": {k: round(v / GIB, 2) for k, v in by_kind.items()},
        "adam_states_gib": round(adam_states / GIB, 2),
        "estimated_peak_gib": round((by_kind["Total"] + adam_states) / GIB, 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="bench")
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--local-batch", type=int, default=4)
    p.add_argument("--grad-accum", type=int, default=1)
    args = p.parse_args(argv)
    print(json.dumps(estimate(args.model, args.world, args.local_batch, args.grad_accum), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
