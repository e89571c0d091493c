"""Issue 5 item 6: `transit plan`'s predicted peak device memory against the NVML peak measured
by the benchmark harness on the device, for every native (no offload) run in the given results.

    python bench/plan_accuracy.py bench/results/compare-gb8-h200x2.json bench/results/overhead-h200.json \
        bench/results/policies-h200.json --out bench/results/plan-accuracy.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transit.models import ModelSpec
from transit.plan import TrainingConfig, predict_memory

TOLERANCE = 0.10  # the bar: within 10%
NATIVE_SYSTEMS = ("native", "fsdp2-2gpu")  # no offload, no TRANSIT, NCCL over NVLink


def prediction(result: dict) -> int:
    cfg = result["config"]
    m = cfg["model_config"]
    spec = ModelSpec("bench-" + cfg["model"], layers=m["n_layers"], hidden=m["dim"], ffn=m["ffn_dim"],
                     heads=m["n_heads"], kv_heads=m["n_kv_heads"], vocab=m["vocab_size"])
    config = TrainingConfig(spec, local_batch=cfg["local_batch"], seq_len=m["seq_len"])
    return predict_memory(config, cfg["world_size"]).device_total


def rows(paths: list[Path]) -> list[dict]:
    out = []
    for path in paths:
        doc = json.loads(path.read_text())
        for name, run in doc["runs"].items():
            result = run.get("result")
            if name not in NATIVE_SYSTEMS or not result or run.get("rc") != 0:
                continue
            measured = result["memory"]["peak_bytes_max"]
            predicted = prediction(result)
            cfg = result["config"]
            out.append({
                "source": f"{path.name}:{name}", "model": cfg["model"], "params": cfg["params"],
                "gpus": cfg["world_size"], "local_batch": cfg["local_batch"],
                "deterministic": bool(cfg.get("deterministic")),
                "measured_nvml_peak_bytes": measured, "predicted_bytes": predicted,
                "error": (predicted - measured) / measured,
                "within_tolerance": abs(predicted - measured) <= TOLERANCE * measured,
                "device": result["device"]["name"], "run_commit": result["git_commit"],
            })
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    table = rows(args.results)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], check=False, capture_output=True, text=True).stdout.strip()
    doc = {"schema": "transit.plan-accuracy/1", "command": shlex.join(sys.argv), "commit": commit,
           "tolerance": TOLERANCE, "rows": table,
           "within_tolerance": sum(r["within_tolerance"] for r in table), "count": len(table)}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for r in table:
        print(f"{r['source']:36} {r['gpus']} GPU lb{r['local_batch']} measured "
              f"{r['measured_nvml_peak_bytes'] / 2**30:6.2f} GiB predicted {r['predicted_bytes'] / 2**30:6.2f} GiB "
              f"{100 * r['error']:+6.1f}% {'ok' if r['within_tolerance'] else 'MISS'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
