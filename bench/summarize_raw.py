"""A raw result of the earlier drivers (transit.bench-collection/1: run_compare.sh, run_policies.sh,
run_overhead.sh) as a transit.bench-summary/1, labelled pre-protocol.

    python3 bench/summarize_raw.py RAW.json --source bench/results/RAW.json@2bd697f --out SUMMARY.json
    git show 2bd697f:bench/results/compare-gb8-h200x2.json | python3 bench/summarize_raw.py - --source ...

Pre-protocol: one run per system, no alternation, a fixed warm-up chosen by the driver instead of the
settle rule, TFLOPS from the median of the steps after it (the protocol's statistic; the raw file's
mean-based figure stays beside it as tflops_per_gpu_as_recorded). Every run names the raw file,
its commit and the run's key in it, so that each figure can be traced and derived again.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collect import transit_summary
from common import write_json
from paper import SUMMARY_SCHEMA, System, compact_result, compact_transit, summarize_systems, system_config

PRE_PROTOCOL = ("pre-protocol: one run per system, no alternation, timed from the driver's fixed warm-up "
                "(not the settle rule), no fair-memory calibration")
SOCKETS_MARK = "NCCL_NET=Socket"
TRAINING_RUNNERS = ("bench/train.py", "bench/deepspeed_train.py")


def system_of(name: str, run: dict) -> System:
    """The System a raw run was, from its result: runner, offload, TRANSIT policy, GPUs, transport."""
    result = run["result"]
    config = result["config"]
    transit = run.get("transit") or (transit_summary(run["transit_stats"]) if run.get("transit_stats") else None)
    if transit:
        kind = "transit"
    elif result["runner"] == "bench/deepspeed_train.py":
        kind = result["system"]
    else:
        kind = "fsdp2-cpu-offload" if config.get("offload") == "fsdp-cpu" else "fsdp2"
    cap = (result.get("memory_cap") or {}).get("cap_bytes")
    if transit and transit.get("mode") == "limit":
        cap = None  # TRANSIT's L is in its stats (limit_bytes), not a cap the runner set
    return System(name, kind, config["world_size"], config["global_batch"], config["local_batch"],
                  cap=str(cap) if cap else None, policy=(transit or {}).get("policy"),
                  transport="sockets" if SOCKETS_MARK in run.get("command", "") else "nvlink",
                  # what the runner ran with (bench/train.py records --deterministic; DeepSpeed never is)
                  deterministic=bool(config.get("deterministic")))


# the earlier drivers' reference run for the losses (collect.py's losses_vs_no_offload, losses_vs_native)
REFERENCE_RUN = {"compare": "fsdp2-2gpu", "policies": "native", "overhead": "native"}


def summarize(doc: dict, source: str) -> dict:
    systems, runs = [], []
    reference = REFERENCE_RUN.get(doc.get("kind"))
    for name, run in doc["runs"].items():
        runner = (run.get("result") or {}).get("runner")
        if run.get("status") != "ok" or runner not in TRAINING_RUNNERS:
            status = run.get("status") if run.get("status") != "ok" else f"not a training run ({runner})"
            runs.append({"id": f"{name}.r1", "system": name, "repeat": 1, "role": "other", "status": status,
                         "raw": f"{source}: runs.{name}"})
            continue
        system = system_of(name, run)
        if reference in doc["runs"] and name != reference:
            system = replace(system, reference=reference)
        systems.append(system)
        record = {"id": f"{name}.r1", "system": name, "repeat": 1, "role": "timed", "status": "ok",
                  "command": run.get("command"), "config": system_config(system), "raw": f"{source}: runs.{name}",
                  "tflops_per_gpu_as_recorded": run["result"].get("tflops_per_gpu"),
                  "limit_bytes": (run.get("transit") or {}).get("limit_bytes")}
        record |= compact_result(run["result"], None)
        if run.get("transit_stats"):
            record["transit"] = compact_transit(transit_summary(run["transit_stats"]), run["transit_stats"], record)
        runs.append(record)
    commits = sorted({r["git_commit"] for r in runs if r.get("git_commit")})
    hosts = sorted({r["hostname"] for r in runs if r.get("hostname")})
    return {"schema": SUMMARY_SCHEMA, "experiment": f"pre-protocol:{Path(source.split('@')[0]).stem}",
            "claim": "earlier single runs, kept for what the protocol's runs replace", "pre_protocol": True,
            "protocol": PRE_PROTOCOL, "source": source, "kind": doc.get("kind"),
            "git_commits": commits, "same_commit": len(commits) == 1, "hostnames": hosts,
            "same_host": len(hosts) == 1, "devices": [doc.get("device")] if doc.get("device") else [],
            "systems": summarize_systems(systems, runs), "runs": runs,
            # collect.py's derived comparisons in the raw file, as they were (docs quote some)
            "collect_summary": doc.get("summary"),
            "command": shlex.join(["python3", *sys.argv])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("raw", help="the raw result file, or - for standard input")
    p.add_argument("--source", required=True, metavar="PATH@COMMIT", help="where the raw file lives in history")
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args(argv)
    text = sys.stdin.read() if args.raw == "-" else Path(args.raw).read_text()
    doc = json.loads(text)
    if doc.get("schema") != "transit.bench-collection/1":
        raise SystemExit(f"{args.raw}: not a transit.bench-collection/1 result")
    write_json(args.out, summarize(doc, args.source))
    return 0


if __name__ == "__main__":
    sys.exit(main())
