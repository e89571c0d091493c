"""Performance of the cluster simulator on a Seren-sized trace (450,590 jobs, 72 racks).

Target: each scenario (one replay of the whole trace) in at most 30 s on the 2-core dev machine.
Measures wall and CPU seconds and jobs/s per replay, for FIFO and backfill, 8 and 4 GPUs per
node, and how the cost grows with trace length (shorter synthetic traces at the same arrival rate,
so the same load), with the log-log slope of time against job count.

    python bench/sim_perf.py [--out bench/results/sim-perf.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transit.sim import synthetic
from transit.sim.scenario import Factors, prepare, run_baseline, run_transit

RACKS = 72
TARGET_S = 30.0
LENGTH_FRACTIONS = (0.125, 0.25, 0.5, 1.0)
GROWTH_REPEATS = 3  # the growth fit uses the fastest of these runs at each length, to damp other load


def timed(function, *args):
    wall, cpu = time.perf_counter(), time.process_time()
    result = function(*args)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "load_average_at_start": os.getloadavg()}


def commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def measure(jobs, gpus_per_node: int, backfill: bool, repeats: int = 1) -> dict:
    trace = prepare(jobs, RACKS * 32)
    runs = []
    for _ in range(repeats):
        base, base_wall, base_cpu = timed(run_baseline, trace, RACKS, gpus_per_node, "pack", backfill)
        _, transit_wall, transit_cpu = timed(run_transit, trace, RACKS, gpus_per_node, "pack", backfill, 0.5,
                                             Factors(), base.racks)
        runs.append((base_wall, base_cpu, transit_wall, transit_cpu))
    base_wall, base_cpu, transit_wall, transit_cpu = min(runs, key=lambda run: run[1])
    count = len(trace.submit)
    return {
        "jobs": count, "gpus_per_node": gpus_per_node, "backfill": backfill,
        "baseline": {"wall_s": round(base_wall, 2), "cpu_s": round(base_cpu, 2),
                     "jobs_per_s": round(count / base_wall)},
        "transit": {"wall_s": round(transit_wall, 2), "cpu_s": round(transit_cpu, 2),
                    "jobs_per_s": round(count / transit_wall)},
        "within_target": max(base_wall, transit_wall) <= TARGET_S,
        "repeats": repeats,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "sim-perf.json"))
    args = parser.parse_args()
    full = synthetic.WORKLOADS["seren"].jobs
    generated, gen_wall, _ = timed(synthetic.generate, "seren", None, 1)
    runs = []
    for gpus_per_node, backfill in ((8, False), (4, False), (8, True)):
        runs.append(measure(generated, gpus_per_node, backfill))
        print(json.dumps(runs[-1]), flush=True)
    growth = []
    for fraction in LENGTH_FRACTIONS:
        jobs = generated if fraction == 1.0 else synthetic.generate("seren", int(full * fraction), 1)
        growth.append(measure(jobs, 8, False, GROWTH_REPEATS))
        print(json.dumps(growth[-1]), flush=True)
    first, last = growth[0], growth[-1]
    slope = math.log(last["baseline"]["cpu_s"] / first["baseline"]["cpu_s"]) / math.log(last["jobs"] / first["jobs"])
    document = {
        "schema": "transit.bench-sim-perf/1",
        "command": "python bench/sim_perf.py " + " ".join(sys.argv[1:]),
        "commit": commit(),
        "machine": machine(),
        "target": f"one replay of {full:,} jobs on {RACKS} racks in at most {TARGET_S:g} s",
        "trace": f"synthetic seren-like, seed 1, {full:,} jobs (generated in {gen_wall:.1f} s)",
        "full_size": runs,
        "growth_with_length_fifo_8gpn": growth,
        "cpu_time_growth_exponent": round(slope, 3),
        "slowest_replay_wall_s": max(max(r["baseline"]["wall_s"], r["transit"]["wall_s"]) for r in runs),
        "note": "wall_s is elapsed time and depends on other load on the machine (other work ran beside it); "
                "cpu_s is this process's CPU time. Exponent: slope of log(baseline CPU s) against log(jobs) "
                "between the shortest and the full trace, fastest of the repeats; 1.0 is linear.",
    }
    Path(args.out).write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {args.out}; growth exponent {slope:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
