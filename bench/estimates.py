"""Estimates of a run's device time from the runs recorded in bench/results: the step times of
the nearest recorded run of the system's kind (or a stand-in), scaled to its batch, under its
settle rule, plus the kind's time outside its steps.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace

from bench.common import REPO_ROOT, SettleRule
from bench.experiments import FRAMEWORK_SETTLE, TRANSIT_SETTLE, System, system_config
from bench.planning import RUN_LIMIT_MIN_S, Run
from bench.summary import SUMMARY_SCHEMA

RESULTS = REPO_ROOT / "bench/results"
# Seconds a run spends outside its steps (start, model build, NCCL, teardown), per kind: the gaps
# between consecutive runs' end times less their step times in compare-gb64-27g-h200x2.json and
# compare-gb8-h200x2.json (raw, at 2bd697f): FSDP2 13-18 s, FSDP2 offload 19-26 s, DeepSpeed
# 32-46 s, TRANSIT 17-23 s (with its residency sweep); the largest of each.
RUN_OVERHEAD_S = {"fsdp2": 18, "fsdp2-cpu-offload": 26, "zero-offload": 46, "zero-infinity": 46,
                  "zenflow": 46, "transit": 23}


# Hybrid on the bench model, recorded only in single runs outside the protocol (transit.bench-runs/1,
# the commands in each file), guard off: the estimates of hybrid at micro-batch 8 (the H100 run, the
# slowest recorded build) and at 4.
SINGLE_RUNS = {("hybrid-gb64-placement-reading-h100.json", "capped"): ("transit", "hybrid", 64, 8),
               ("hybrid-gb64-h200.json", "hybrid-gb64-mb4"): ("transit", "hybrid", 64, 4)}


def recorded_runs() -> list[dict]:
    """Every run of the summaries in bench/results (this driver's and the pre-protocol ones), and
    the SINGLE_RUNS."""
    runs = []
    for path in sorted(RESULTS.glob("*.json")):
        doc = json.loads(path.read_text())
        if doc.get("schema") == SUMMARY_SCHEMA:
            runs += [run | {"source_file": path.name} for run in doc.get("runs", []) if run.get("step_times_s")]
    for (name, key), (kind, policy, gb, micro) in SINGLE_RUNS.items():
        system = System(key, kind, 1, gb, micro, policy=policy)
        runs.append({"system": key, "model": system.model, "config": system_config(system), "source_file": name,
                     "step_times_s": json.loads((RESULTS / name).read_text())["runs"][key]["step_times_s"]})
    return runs


# A kind or policy never recorded is estimated from one that was: ZenFlow is ZeRO-Offload with a
# selective update (at most ZeRO-Offload's step); hybrid's guard keeps advise's placement whenever its
# own is slower (docs/design-notes.md, "Hybrid"), so advise's steps bound it.
STAND_INS = {("zenflow", None): ("zero-offload", None), ("transit", "hybrid"): ("transit", "advise")}


def _per_sequence(run: dict) -> float:
    """A recorded run's steady step (the median of its steps after step 0) per sequence on its GPU."""
    config = run["config"]
    return statistics.median(run["step_times_s"][1:] or run["step_times_s"]) / (config["global_batch"] / config["gpus"])


def _nearest(system: System, runs: list[dict]) -> dict:
    """Of `runs`, the one most like `system`: the same emulated nodes, then the same kernels (deterministic
    ones are slower), the same ranks, not over sockets between GPUs, then the nearest global batch
    and micro-batch."""
    return min(runs, key=lambda r: ((r["config"].get("emulated_nodes") or 0) != system.nodes,
                                    bool(r["config"].get("deterministic")) != system.deterministic,
                                    r["config"].get("ranks", r["config"]["gpus"]) != system.ranks,
                                    r["config"].get("transport") == "sockets",
                                    abs(math.log(r["config"]["global_batch"] / system.global_batch)),
                                    abs(r["config"]["micro_batch"] - system.local_batch)))


def _recorded(history: list[dict], kind: str, policy: str | None, model: str | None) -> list[dict]:
    return [r for r in history if r["config"].get("kind") == kind and r["config"].get("policy") == policy
            and model in (None, r.get("model"))]


def _describe(ref: dict) -> str:
    rc = ref["config"]
    nodes = f", {rc['emulated_nodes']} emulated nodes" if rc.get("emulated_nodes") else ""
    return (f"{ref['source_file']} {ref['system']} ({rc['model']}, {rc['gpus']} GPU(s){nodes}, global batch "
            f"{rc['global_batch']}, micro-batch {rc['micro_batch']}"
            + (", deterministic" if rc.get("deterministic") else "") + ")")


def estimate_steps(system: System, history: list[dict], rule: SettleRule) -> tuple[list[float], str]:
    """Step times a run of `system` should see, and where they come from: the nearest recorded run of
    its kind and policy (or their stand-in) on its model, its steps from the settle rule's first one
    on scaled by the sequences on the GPU; for TRANSIT on a model it never ran, its model's native
    steps times the step-by-step ratio of the nearest TRANSIT run (any model) to its own model's
    native. Beyond the recorded steps: the median of those from the rule's first step on."""
    kind, policy = system.kind, system.policy
    # the stand-in on the system's own model before the system's kind on another model
    if (kind, policy) in STAND_INS and not _recorded(history, kind, policy, system.model) and (
            _recorded(history, *STAND_INS[kind, policy], system.model) or not _recorded(history, kind, policy, None)):
        kind, policy = STAND_INS[kind, policy]
    stand_in = (f"; {' '.join(filter(None, (kind, policy)))} stands in"
                if (kind, policy) != (system.kind, system.policy) else "")
    same = _recorded(history, kind, policy, system.model)
    # the recorded warm-up (the kind's own rule's first step) is not scaled; the steps after it are
    first = (TRANSIT_SETTLE if system.transit else FRAMEWORK_SETTLE).first
    if same:
        ref = _nearest(system, same)
        scale = (system.global_batch / system.gpus) / (ref["config"]["global_batch"] / ref["config"]["gpus"])
        recorded = list(ref["step_times_s"])
        times = recorded[:first] + [t * scale for t in recorded[first:]]
        basis = _describe(ref) + stand_in + (f"; steps from {first} x{scale:.2f}" if scale != 1 else "")
    elif system.transit and _recorded(history, kind, policy, None):
        ref = _nearest(system, _recorded(history, kind, policy, None))
        ref_native = _nearest(ref_like(ref), _recorded(history, "fsdp2", None, ref["model"]))
        native_times, native_basis = estimate_steps(replace(system, kind="fsdp2", policy=None, cap=None, mem_limit=None,
                                                            settle_rule=None), history,
                                                    FRAMEWORK_SETTLE)
        if not native_times:
            return [], f"no recorded native run of {system.model}"
        own = statistics.median(native_times[1:])
        ratio = own / (_per_sequence(ref_native) * ref["config"]["global_batch"] / ref["config"]["gpus"])
        times = [t * ratio for t in ref["step_times_s"]]
        basis = (f"{_describe(ref)}{stand_in}, x{ratio:.2f}: native {system.model} {own:.2f} s a step "
                 f"({native_basis}) over {_describe(ref_native)}'s per-sequence step")
    else:
        return [], "no recorded run of this kind"
    times += [statistics.median(times[first:] or times)] * (rule.max_steps - len(times))
    return times, basis


def ref_like(run: dict) -> System:
    """A recorded run's configuration as a System (to find the native run nearest to it)."""
    rc = run["config"]
    return System(run["system"], rc["kind"], 1, rc["global_batch"], rc["micro_batch"], model=rc["model"],
                  deterministic=bool(rc.get("deterministic")), nodes=rc.get("emulated_nodes") or 0)


def estimate_run(system: System, history: list[dict], repeat: int = 1) -> tuple[float, str]:
    """Seconds of one run under its settle rule, and the estimate's basis."""
    rule = system.rule(repeat)
    times, basis = estimate_steps(system, history, rule)
    if not times:
        return float(RUN_LIMIT_MIN_S), basis + f": {RUN_LIMIT_MIN_S} s assumed"
    steps = next(n for n in range(1, len(times) + 1) if rule.timed_from(times[:n]) is not None)
    settled = "settles" if rule.timed_from(times[:steps])[1] else "does not settle"
    return RUN_OVERHEAD_S[system.kind] + sum(times[:steps]), f"{basis}; {steps} steps, {settled}"


def estimator(history: list[dict]):
    """estimate(run) -> (seconds, basis), each system's estimate made once."""
    cache: dict[tuple[str, bool], tuple[float, str]] = {}

    def estimate(run: Run) -> tuple[float, str]:
        key = (run.system.name, run.repeat == 0)
        if key not in cache:
            cache[key] = estimate_run(run.system, history, run.repeat)
        return cache[key]
    return estimate
