"""How long `transit report` takes on a synthetic 1024-rank job (target: under 2 s median wall time,
for the table and for --json). Times the whole command as a user runs it (interpreter start, imports,
reading every file, rendering), several times each, and writes bench/results/report-perf.json.

    python bench/report_perf.py [--ranks 1024] [--repeats 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "bench" / "results" / "report-perf.json"
TARGET_S = 2.0
RANKS_PER_NODE = 8


def _synthetic():
    spec = importlib.util.spec_from_file_location(
        "report_synthetic", REPO / "tests/fixtures/report/synthetic.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def time_command(command: list[str], repeats: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (user + system) seconds of each run. CPU time is reported too because this
    machine is shared: wall time grows with the load others put on it, CPU time much less.
    stdout goes to a file, as in a pipe (the wide table layout)."""
    wall, cpu = [], []
    for _ in range(repeats):
        with tempfile.TemporaryFile() as sink:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run(command, stdout=sink, stderr=subprocess.PIPE, check=True, cwd=REPO)
            wall.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    load_before = round(os.getloadavg()[0], 2)
    with tempfile.TemporaryDirectory() as tmp:
        job = _synthetic().write_job(Path(tmp) / "1234", args.ranks, ranks_per_node=RANKS_PER_NODE)
        files_bytes = sum(p.stat().st_size for p in job.iterdir())
        base = [sys.executable, "-m", "transit", "report", str(job), "--no-slurm"]
        results = {}
        for name, extra in (("table", []), ("json", ["--json"])):
            wall, cpu = time_command(base + extra, args.repeats)
            results[name] = {
                "command": " ".join(["transit", "report", "DIR", "--no-slurm", *extra]),
                "wall_s": [round(s, 3) for s in wall],
                "cpu_s": [round(s, 3) for s in cpu],
                "median_wall_s": round(statistics.median(wall), 3),
                "max_wall_s": round(max(wall), 3),
                "median_cpu_s": round(statistics.median(cpu), 3),
                "under_target": statistics.median(wall) < TARGET_S,
            }
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], check=True, capture_output=True, text=True, cwd=REPO
    ).stdout.strip()
    document = {
        "schema": "transit.bench-report-perf/1",
        "benchmark": "report-perf",
        "command": f"python bench/report_perf.py --ranks {args.ranks} --repeats {args.repeats}",
        "commit": commit,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average_1min_before": load_before,
        },
        "ranks": args.ranks,
        "ranks_per_node": RANKS_PER_NODE,
        "stats_bytes": files_bytes,
        "target_s": TARGET_S,
        "runs": results,
    }
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(document, indent=1) + "\n")
    for name, run in results.items():
        print(
            f"{name}: median {run['median_wall_s']} s wall ({run['median_cpu_s']} s CPU), "
            f"max {run['max_wall_s']} s over {args.repeats} runs "
            f"({'under' if run['under_target'] else 'OVER'} the {TARGET_S} s target)"
        )
    print(f"wrote {RESULT.relative_to(REPO)}")
    return 0 if all(run["under_target"] for run in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
