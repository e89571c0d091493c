"""Model parameters for `transit simulate --factors`, from the network-sensitivity runs of a comparison.

    python3 bench/factors.py bench/results/compare-gb64-27g-final.json --out bench/results/sim-factors.json

The paper (section 4.3) derives three placement-transition factors from its section 4.2 runs at
400 and 100 Gbps, each against the no-offload baseline, so each folds TRANSIT's own efficiency in.
The simulator keeps that efficiency apart (``per_gpu_efficiency``) and takes factors for the
placement change alone; this script writes ``transit.factors/2`` with both. Here the fast link
is NCCL's default transport between the 2 GPUs of one host (NVLink / P2P) and the slow one NCCL
over TCP sockets on loopback, both for the no-offload baseline on 2 GPUs, against TRANSIT-Advise
on 1 GPU (the scaled-in job: no inter-GPU link at all). With rho = no-offload fast / slow:

- per_gpu_efficiency       = advise(1 GPU) / no-offload(2 GPUs, fast link)          (measured)
- inter_to_intra_speedup   = rho - 1: the job stops paying what the slow link costs the baseline
  (measured; efficiency x (1 + it) = advise / no-offload slow, the paper's definition)
- intra_to_inter_slowdown  = 1 - 1 / rho, read as a throughput loss: a scaled-in job that lands
  across racks is assumed to lose what the baseline loses on the slow link (a single-GPU job
  cannot be placed across a link, so this one is an estimate from measured numbers, and says so)
- unchanged                = 0: the same placement changes nothing beyond the efficiency
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# as a script (torchrun bench/train.py): the repository root on the path, for the bench package
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import write_json

FACTORS_SCHEMA = "transit.factors/2"
# The simulator needs the slowdown in [0, 1).
MAX_SLOWDOWN = 0.99


def tflops(doc: dict, run: str) -> float:
    value = ((doc["runs"].get(run) or {}).get("result") or {}).get("tflops_per_gpu")
    if value is None:
        raise SystemExit(f"factors: run {run!r} has no TFLOPS in the comparison file (status: "
                         f"{(doc['runs'].get(run) or {}).get('status', 'absent')})")
    return value


def factors(doc: dict, source: str) -> dict:
    fast, slow, advise = tflops(doc, "fsdp2-2gpu"), tflops(doc, "fsdp2-2gpu-socket"), tflops(doc, "transit-advise")
    rho = fast / slow
    device = (doc.get("device") or {}).get("name")
    return {
        "schema": FACTORS_SCHEMA,
        "per_gpu_efficiency": advise / fast,
        "inter_to_intra_speedup": rho - 1,
        "intra_to_inter_slowdown": min(MAX_SLOWDOWN, 1 - 1 / rho),
        "slowdown_reading": "throughput",
        "unchanged": 0.0,
        "source": (f"{source} (commit {doc.get('git_commit')}, {device}): efficiency and speedup measured; "
                   "slowdown estimated as 1 - 1 / rho"),
        "inputs": {
            "no_offload_2gpu_fast_tflops_per_gpu": fast,
            "no_offload_2gpu_socket_tflops_per_gpu": slow,
            "transit_advise_1gpu_tflops_per_gpu": advise,
            "rho_no_offload_2gpu": rho,
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("compare", type=Path,
                   help="a comparison result (the earlier drivers' collect.py compare, at the tag pre-protocol-bench)")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "sim-factors.json")
    args = p.parse_args(argv)
    doc = json.loads(args.compare.read_text())
    if doc.get("kind") != "compare":
        raise SystemExit(f"factors: {args.compare} is not a comparison result (kind {doc.get('kind')!r})")
    result = factors(doc, str(args.compare))
    write_json(args.out, result)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
