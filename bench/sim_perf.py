"""Replay speed of the cluster simulator on a Seren-sized trace (450,590 jobs), in one run:

* 72 racks, strict FIFO: target at most 10 s per replay;
* 32 racks (overloaded), EASY backfill: target at most 15 s per replay.

Each repeat replays the baseline and the TRANSIT scenario (r = 0.5, 8 GPUs per node, default
model, contention on) of both setups; the figures are the median over the repeats of each
replay's wall time, with CPU time and the machine's load average (/proc/loadavg: the machine is
shared) beside each. The wall time is of the replay itself (the event loop), as
``Run.seconds`` measures it; the setup around it (sizing the jobs, the traffic model) is timed apart.

    python3 bench/sim_perf.py [--repeats 5] [--out bench/results/sim-perf.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transit.sim import synthetic
from transit.sim.scenario import Setup, prepare, run_baseline, run_transit

SETUPS = (("72 racks, FIFO", Setup(72, 8, 0.5), 10.0), ("32 racks, backfill", Setup(32, 8, 0.5, backfill=True), 15.0))


def machine() -> dict:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def timed(function, *args):
    load = os.getloadavg()[0]
    wall, cpu = time.perf_counter(), time.process_time()
    run = function(*args)
    return run, {"total_wall_s": round(time.perf_counter() - wall, 2), "replay_wall_s": round(run.seconds, 2),
                 "cpu_s": round(time.process_time() - cpu, 2), "load_1min_before": round(load, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "sim-perf.json"))
    args = parser.parse_args()
    began = time.perf_counter()
    trace = prepare(synthetic.generate("seren", None, 1))
    generated_s = time.perf_counter() - began
    runs: dict = {name: {"baseline": [], "transit": []} for name, _, _ in SETUPS}
    for repeat in range(args.repeats):
        for name, setup, _ in SETUPS:
            base, base_times = timed(run_baseline, trace, setup)
            _, transit_times = timed(run_transit, trace, setup, base)
            runs[name]["baseline"].append(base_times)
            runs[name]["transit"].append(transit_times)
            print(json.dumps({"repeat": repeat, "setup": name, "baseline": base_times, "transit": transit_times}),
                  flush=True)
    results = []
    for name, setup, target in SETUPS:
        entry = {"setup": name, "racks": setup.racks, "backfill": setup.backfill, "target_s_per_replay": target}
        for scenario in ("baseline", "transit"):
            times = runs[name][scenario]
            walls = [t["replay_wall_s"] for t in times]
            entry[scenario] = {"median_replay_wall_s": statistics.median(walls), "max_replay_wall_s": max(walls),
                               "median_cpu_s": statistics.median(t["cpu_s"] for t in times),
                               "median_total_wall_s": statistics.median(t["total_wall_s"] for t in times),
                               "load_1min": [t["load_1min_before"] for t in times], "runs": times}
        entry["within_target"] = max(entry[s]["median_replay_wall_s"] for s in ("baseline", "transit")) <= target
        results.append(entry)
    document = {
        "schema": "transit.bench-sim-perf/2",
        "command": "python3 bench/sim_perf.py " + " ".join(sys.argv[1:]),
        "commit": commit(),
        "machine": machine(),
        "trace": f"synthetic seren-like, seed 1, {len(trace):,} jobs (generated in {generated_s:.1f} s)",
        "repeats": args.repeats,
        "results": results,
        "note": ("replay_wall_s: the event loop's elapsed time; total_wall_s adds the per-replay setup; cpu_s is "
                 "this process's CPU time. The machine is shared (2 cores): the 1-minute load average before "
                 "each replay is beside it."),
    }
    Path(args.out).write_text(json.dumps(document, indent=2) + "\n")
    for entry in results:
        print(f"{entry['setup']}: baseline {entry['baseline']['median_replay_wall_s']} s, TRANSIT "
              f"{entry['transit']['median_replay_wall_s']} s (median of {args.repeats}; target "
              f"{entry['target_s_per_replay']:g} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
