"""Calibrate `transit plan`'s step time per policy on the committed GPU summaries, and state its error.

Every TRANSIT run of a `bench/results/*.summary.json` that spills (its limit is below the planner's
predicted peak for the run's model and micro-batch) and has a no-offload reference in the same file
(`fsdp2-2gpu`, else `native`) gives one point:

    compute_s  = measured step x (the run's TFLOPS per GPU / the reference's): its step without offload
    transfer_s = the planner's bytes over PCIe for that spill (plan.transfer_bytes) / the H200's rate
    factor     = (measured step - compute_s) / transfer_s

A policy's factor (plan.POLICY_TRANSFER_FACTOR) is the median of its points; its error
(plan.STEP_TIME_ERROR) is |predicted / measured - 1| of the step time, predicted = compute_s +
factor x transfer_s, over the same runs (median and largest). tests/unit/test_step_calibration.py
recomputes both from the summaries.

    python3 bench/step_calibration.py          # prints the constants transit/plan/planner.py should hold
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from model import CONFIGS

from transit.plan.models import ModelSpec
from transit.plan.planner import CALIBRATION_PCIE_BYTES_PER_S, TrainingConfig, predict_memory, transfer_bytes

SUMMARIES = sorted((REPO / "bench" / "results").glob("*.summary.json"))
REFERENCES = ("fsdp2-2gpu", "native")  # no offload, no TRANSIT; per-GPU TFLOPS


def model_spec(name: str) -> ModelSpec:
    c = CONFIGS[name]
    return ModelSpec(f"bench-{name}", layers=c.n_layers, hidden=c.dim, ffn=c.ffn_dim, heads=c.n_heads,
                     kv_heads=c.n_kv_heads, vocab=c.vocab_size)


def points(paths: list[Path] = SUMMARIES) -> list[dict]:
    """One point per spilling TRANSIT run with a reference in its file."""
    out = []
    for path in paths:
        systems = {s["name"]: s for s in json.loads(path.read_text())["systems"]}
        reference = next((systems[r] for r in REFERENCES if r in systems and systems[r].get("tflops_per_gpu")), None)
        for system in systems.values():
            if reference is None or system["kind"] != "transit" or not system.get("tflops_per_gpu"):
                continue
            config = TrainingConfig(model_spec(system["model"]), local_batch=system["micro_batch"],
                                    seq_len=CONFIGS[system["model"]].seq_len)
            memory = predict_memory(config, system["gpus"])
            spill = max(0, memory.device_total - system["limit_bytes"][0])
            if spill == 0:
                continue
            step = system["step_time_s"]["median"]
            compute = step * system["tflops_per_gpu"]["median"] / reference["tflops_per_gpu"]["median"]
            transfer = transfer_bytes(spill, memory.optimizer, system["grad_accum"]) / CALIBRATION_PCIE_BYTES_PER_S
            out.append({"source": f"{path.name}:{system['name']}", "policy": system["policy"], "step_s": step,
                        "compute_s": compute, "transfer_s": transfer, "factor": (step - compute) / transfer})
    return out


def calibrate(rows: list[dict]) -> dict[str, dict]:
    """Per policy: the median factor (3 significant digits) and the step-time error it leaves."""
    result = {}
    for policy in sorted({r["policy"] for r in rows}):
        mine = [r for r in rows if r["policy"] == policy]
        factor = float(f"{statistics.median(r['factor'] for r in mine):.3g}")
        errors = [abs((r["compute_s"] + factor * r["transfer_s"]) / r["step_s"] - 1) for r in mine]
        result[policy] = {"factor": factor, "runs": len(mine), "median_error": round(statistics.median(errors), 2),
                          "max_error": round(max(errors), 2)}
    return result


def main() -> int:
    rows = points()
    for r in rows:
        print(f"{r['source']:50} {r['policy']:8} step {r['step_s']:6.2f} s compute {r['compute_s']:5.2f} s "
              f"transfer {r['transfer_s']:5.2f} s factor {r['factor']:6.2f}")
    for policy, c in calibrate(rows).items():
        print(f"{policy}: factor {c['factor']}, {c['runs']} runs, |error| median {c['median_error']:.0%}, "
              f"max {c['max_error']:.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
