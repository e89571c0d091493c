"""`transit replay` on the committed H200 profiles against what the same runs measured
(tests/fixtures/profile/measured.json): per iteration after the window, the predicted HtoD+DtoH
bytes of base and prefetch against CUPTI's migration records, and advise's predicted zero-copy
bytes against NVML's PCIe counters (advise ran alone on the GPU). The step's kernel time is the
native one-GPU run's (bench/results/native-1gpu-uncapped-h200.json: its micro-batch is 8, the
profiled runs' 4).

    python3 bench/replay_vs_measured.py > bench/results/replay-vs-measured-h200.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from transit import _native
from transit import replay as rp

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "profile"
BAR = 0.20  # issue 33: within 20 %


def native_step_s() -> dict[int, float]:
    doc = json.loads((REPO / "bench" / "results" / "native-1gpu-uncapped-h200.json").read_text())
    steps: dict[int, list[float]] = {}
    for run in doc["runs"]:
        steps.setdefault(run["global_batch"], []).extend(run["step_times_s"][run["warmup_steps"]:])
    return {gb: statistics.median(v) for gb, v in steps.items()}


def main() -> int:
    measured = json.loads((FIXTURES / "measured.json").read_text())["runs"]
    compute = native_step_s()
    rows = []
    for name, run in measured.items():
        policy, gb = run["policy"], run["global_batch"]
        t = rp.template(rp.load_profile(FIXTURES / f"h200-{name}.profile.json.gz"), compute[gb])
        by_iteration = {m["iteration"]: m for m in run["iterations"]}
        predicted = rp.replay(t, policy, run["limit_bytes"], 4, rp.DEFAULT_RATES_GBPS)
        for p in predicted:
            m = by_iteration.get(p["iteration"])
            if not m:
                continue
            if policy == "advise":
                pred, meas = p["zero_copy_bytes"], m.get("zero_copy_read_bytes", 0) + m.get("zero_copy_write_bytes", 0)
                what = "zero-copy bytes (PCIe counters)"
            else:
                pred, meas = p["htod_bytes"] + p["dtoh_bytes"], m["htod_bytes"] + m["dtoh_bytes"]
                what = "HtoD+DtoH bytes (CUPTI records)"
            error = (pred - meas) / meas if meas else None
            rows.append({"run": name, "policy": policy, "global_batch": gb, "iteration": p["iteration"], "what": what,
                         "predicted_bytes": pred, "measured_bytes": meas,
                         "relative_error": round(error, 3) if error is not None else None,
                         "within_bar": error is not None and abs(error) <= BAR,
                         "predicted_step_s": round(p["step_s"], 2), "measured_step_s": m["seconds"]})
    doc = {"schema": "transit.replay-check/1", "bar": BAR, "libtransit": _native.version(),
           "compute_s_from_native": compute, "command": "python3 bench/replay_vs_measured.py", "rows": rows}
    json.dump(doc, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
