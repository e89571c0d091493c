"""Capture the kernel-launch sequence of a bench/train.py run, with its optimizer steps, as a test
fixture for libtransit's kernel-period detector (tests/unit/test_period.py).

Runs train.py in this process under torch.profiler (CUDA activity only, no TRANSIT). Kernels are
ordered by their CUDA correlation id, the order of their launch calls. After each optimizer step a
marker kernel (torch.cuda._sleep) is launched; its place is the step's end, and it is left out of
the sequence:

    torchrun --standalone --nproc-per-node 1 bench/kernel_sequence.py --out seq.json.gz -- \\
        --model small --global-batch 8 --local-batch 8 --steps 12 --no-memory-monitor
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import train

MARKER_KERNEL = "spin_kernel"  # torch.cuda._sleep's kernel (ATen's cuda/Sleep.cu)
MARKER_CYCLES = 1


def kernel_names(trace: dict) -> list[str]:
    """The kernels' names in the order of their launch calls."""
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel" and "correlation" in e.get("args", {})]
    return [e["name"] for e in sorted(kernels, key=lambda e: e["args"]["correlation"])]


def split_at_markers(names: list[str]) -> tuple[list[str], list[int]]:
    """The sequence without the markers, and the number of kernels before each marker."""
    sequence, step_ends = [], []
    for name in names:
        if MARKER_KERNEL in name:
            step_ends.append(len(sequence))
        else:
            sequence.append(name)
    return sequence, step_ends


def fixture(sequence: list[str], step_ends: list[int], train_argv: list[str]) -> dict:
    names = list(dict.fromkeys(sequence))
    index = {n: i for i, n in enumerate(names)}
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    return {
        "schema": "transit.kernel-sequence/1",
        "command": "bench/kernel_sequence.py -- " + " ".join(train_argv),
        "git_commit": os.environ.get("BENCH_GIT_COMMIT") or commit or None,
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "names": names,
        "sequence": [index[n] for n in sequence],
        "step_ends": step_ends,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="fixture path (.json.gz)")
    p.add_argument("train_argv", nargs=argparse.REMAINDER, help="-- then bench/train.py's arguments")
    args = p.parse_args()
    train_argv = args.train_argv[1:] if args.train_argv[:1] == ["--"] else args.train_argv
    register_optimizer_step_post_hook(lambda *_: torch.cuda._sleep(MARKER_CYCLES))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        train.main(train_argv)
    if int(os.environ.get("RANK", "0")) != 0:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        sequence, step_ends = split_at_markers(kernel_names(json.loads(path.read_text())))
    with gzip.open(args.out, "wt") as f:
        json.dump(fixture(sequence, step_ends, train_argv), f)
    print(f"kernel_sequence: {len(sequence)} launches, {len(step_ends)} steps, "
          f"{len(set(sequence))} kernel names -> {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
