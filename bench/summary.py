"""The summary of an experiment (transit.bench-summary/1): what it keeps of each run's result and
of TRANSIT's stats, each system's row over its timed repeats (throughput, peaks against its
budget, PCIe bytes, losses against its reference), the document, the parts' merge, and its print.
"""

from __future__ import annotations

import itertools
import json
import shlex
import statistics
import sys
from pathlib import Path

from bench.common import (
    GIB,
    NON_ALLOCATOR_MARGIN_BYTES,
    SLOWING_REASONS_MASK,
    SettleRule,
    clock_event_names,
    window_median,
    write_json,
)
from bench.experiments import (
    FRAMEWORK_SETTLE,
    MACHINES,
    TRANSIT_SETTLE,
    Experiment,
    System,
    system_config,
    transit_limit,
)
from transit.errors import UsageError

SUMMARY_SCHEMA = "transit.bench-summary/1"


def compact_result(result: dict, rule: SettleRule | None) -> dict:
    """What the summary keeps of a runner's result file; without a rule (earlier runs), its steps
    are timed from the runner's fixed warm-up."""
    steps = result.get("step_time") or {}
    times = steps.get("all_s") or []
    timed = rule.timed_from(times) if rule else None
    first, settled = timed if timed else ((steps.get("warmup_steps") or 0), None)
    n = rule.timed if rule else len(times) - first
    window = times[first:first + n]
    per_rank = (result.get("memory") or {}).get("per_rank") or []
    clocks = result.get("gpu_clocks_rank0") or {}
    return {
        "git_commit": result.get("git_commit"), "hostname": result.get("hostname"), "device": result.get("device"),
        "model": (result.get("config") or {}).get("model"),
        "step_times_s": times, "timed_from": first, "timed_steps": len(window), "settled": settled,
        "timed_median_s": statistics.median(window) if window else None,
        # warm-up's cost: the seconds from the first step to the first timed one (settled or not)
        "warmup_s": sum(times[:first]) if window else None,
        "tokens_per_s": (result["config"]["tokens_per_step"] / statistics.median(window) if window else None),
        "loopback_bytes_per_step": counter_per_step(result.get("loopback_tx_bytes_rank0"), first, len(window)),
        "tflops_per_gpu": (result["flops_per_step"] / statistics.median(window) / result["config"]["world_size"] / 1e12
                           if window else None),
        "losses": result.get("losses"),
        "peak_torch_reserved_bytes": max((r.get("torch_max_reserved_bytes") or 0 for r in per_rank), default=None),
        "peak_nvml_bytes": (result.get("memory") or {}).get("peak_bytes_max"),
        # NVML's reading of each process alone: on a GPU that emulated nodes share, the device's
        # used memory counts every rank
        "peak_nvml_process_bytes": max((r.get("nvml_process_peak_bytes") or 0 for r in per_rank), default=None) or None,
        "allocator_budget_bytes": (result.get("memory_cap") or {}).get("allocator_budget_bytes"),
        "pcie_nvml_per_step": pcie_per_step(clocks.get("pcie_counters"), first, len(window)),
        "offloaded_bytes_per_gpu": result.get("offloaded_bytes_per_gpu"),
        "step_phases_median_s": phase_medians((result.get("step_phases_rank0") or {}).get("all_s"), first, len(window)),
        "gpu_readings": gpu_readings(clocks, first, len(window)),
        "canary": canary_summary(result.get("canary_rank0"), first, len(window)),
        # under TRANSIT, after the last step: each kind of state's bytes on the host (pagemap)
        "host_bytes_by_state": result.get("managed_host_resident_by_state"),
        # bench/train.py --host-set: the same after every step (warm-up included)
        "host_bytes_by_state_each_step": result.get("host_by_state_each_step_rank0"),
    }


def gpu_readings(clocks: dict, first: int, n: int) -> dict | None:
    """Rank 0's GPU over the timed steps: its lowest SM and memory clocks, its highest power, every
    clock event reason seen (any step, warm-up included) and the PCIe bytes of each step."""
    sm = clocks.get("sm_clock_mhz") or []
    if not sm or not n:
        return None
    window = slice(first, first + n)
    mem = [v for v in (clocks.get("mem_clock_mhz") or [])[window] if v is not None]
    power = [v for v in (clocks.get("power_w") or [])[window] if v is not None]
    seen = 0
    for mask in clocks.get("clocks_event_reasons") or []:
        seen |= mask
    counters = clocks.get("pcie_counters") or {}
    per_step = {key: [b - a for a, b in itertools.pairwise(counters.get(f"{key}_bytes") or [])] for key in ("rx", "tx")}
    marks = counters.get("marks_tx_rx") or {}
    if marks.get("start") and marks.get("optimizer"):  # bench/train.py --pcie-split: the canary left out
        ends = (counters.get("tx_bytes") or [])[1:], (counters.get("rx_bytes") or [])[1:]
        for i, key in ((0, "tx"), (1, "rx")):
            per_step[key] = [end - start[i] for start, end in zip(marks["start"], ends[i])]
            per_step[f"{key}_before_optimizer"] = [opt[i] - start[i] for start, opt in zip(marks["start"], marks["optimizer"])]
            per_step[f"{key}_optimizer"] = [end - opt[i] for opt, end in zip(marks["optimizer"], ends[i])]
    return {"sm_clock_mhz_min": min(sm[window], default=None), "sm_clock_mhz_max": max(sm[window], default=None),
            "mem_clock_mhz_min": min(mem, default=None), "power_w_max": max(power, default=None),
            "clock_event_reasons_seen": clock_event_names(seen),
            "slowing_reasons_seen": clock_event_names(seen & SLOWING_REASONS_MASK),
            "pcie_bytes_each_step": per_step if not counters.get("error") else {"error": counters["error"]}}


def canary_summary(canary: dict | None, first: int, n: int) -> dict | None:
    """The canary (bench/train.py --canary) before step 0 and after each step, and its medians over
    the timed steps."""
    if not canary or not n:
        return None
    steps = canary.get("per_step") or []
    out = {"before_step0": canary.get("before_step0")}
    for key in ("gemm_ms", "copy_ms", "gemm_host_bytes", "copy_host_bytes"):
        values = [s.get(key) for s in steps]
        out[f"{key}_each_step"] = values
        timed = [v for v in values[first:first + n] if v is not None]
        out[f"{key}_median"] = statistics.median(timed) if timed else None
    return out


def gpu_row(ok: list[dict]) -> dict:
    """A system's GPU readings and canary over its runs: the lowest SM clock, the slowing clock
    event reasons seen, and the median of the runs' canary medians."""
    readings = [r["gpu_readings"] for r in ok if r.get("gpu_readings")]
    canaries = [r["canary"] for r in ok if r.get("canary")]
    return {"sm_clock_mhz_min": min((g["sm_clock_mhz_min"] for g in readings), default=None),
            "slowing_reasons_seen": sorted({x for g in readings for x in g["slowing_reasons_seen"]}),
            "canary_gemm_ms": _median_of([c["gemm_ms_median"] for c in canaries]),
            "canary_copy_ms": _median_of([c["copy_ms_median"] for c in canaries]),
            "canary_before_step0_gemm_ms": _median_of([(c["before_step0"] or {}).get("gemm_ms") for c in canaries]),
            "canary_before_step0_copy_ms": _median_of([(c["before_step0"] or {}).get("copy_ms") for c in canaries])}


def phase_medians(per_step: dict[str, list[float]] | None, first: int, n: int) -> dict | None:
    """Rank 0's forward, backward and optimizer seconds, median over the timed steps (None for
    runners that do not time them)."""
    if not per_step or not n:
        return None
    return {part: window_median(v, first, n) for part, v in per_step.items()}


def counter_per_step(cumulative: list[int] | None, first: int, n: int) -> float | None:
    """A cumulative counter read before step 0 (index 0) and after each step i (index i + 1): its
    increase per timed step."""
    if not cumulative or len(cumulative) < first + n + 1 or not n:
        return None
    return (cumulative[first + n] - cumulative[first]) / n


PCIE_READ_PER_STEP = ("read once per step: NVML's 32-bit PCIe counters can wrap more than once in a step "
                      "(bench/common.py PcieCounters), so these readings give no byte count")


def pcie_per_step(counters: dict | None, first: int, n: int) -> dict | None:
    """NVML's RX (host to GPU) and TX bytes per timed step, rank 0's GPU (cumulative counters, read
    as counter_per_step reads them). Only counters summed in a thread (`samples`) count bytes."""
    if counters and not counters.get("error") and "samples" not in counters:
        return {"error": PCIE_READ_PER_STEP}
    rx = None if not counters or counters.get("error") else counter_per_step(counters.get("rx_bytes"), first, n)
    if rx is None:
        return {"error": (counters or {}).get("error") or "not recorded"} if counters is not None else None
    return {"rx": rx, "tx": counter_per_step(counters["tx_bytes"], first, n)}


def compact_transit(summary: dict | None, stats: list[dict], record: dict) -> dict:
    """TRANSIT's own figures of a run: its bound's peak against L, and its migrations per timed
    iteration (from libtransit's iteration marks; whole-run averages where the marks are missing)."""
    summary = summary or {}
    first, n = record.get("timed_from") or 0, record.get("timed_steps") or 0
    marks = {e["iteration"]: e for e in (stats[0].get("timeline") or []) if "htod_bytes" in e} if stats else {}
    # the mark of iteration i is set when step i - 1 ends
    if first in marks and first + n in marks and n:
        htod = (marks[first + n]["htod_bytes"] - marks[first]["htod_bytes"]) / n
        dtoh = (marks[first + n]["dtoh_bytes"] - marks[first]["dtoh_bytes"]) / n
        source = f"libtransit iteration marks {first}..{first + n}, rank 0"
    elif summary.get("iterations"):
        htod = summary["htod_bytes"] / summary["iterations"] / summary["ranks"]
        dtoh = summary["dtoh_bytes"] / summary["iterations"] / summary["ranks"]
        source = "libtransit whole-run migrations / iterations (warm-up included)"
    else:
        htod = dtoh = source = None
    nvml = record.get("pcie_nvml_per_step") or {}
    return {"policy": summary.get("policy"), "mode": summary.get("mode"), "limit_bytes": summary.get("limit_bytes"),
            "bound_peak_bytes": summary.get("device_bound_peak_bytes"),
            "bound_peak_after_profile_bytes": summary.get("device_bound_peak_after_profile_bytes"),
            "overshoot_bytes": (max(0, summary["device_bound_peak_bytes"] - summary["limit_bytes"])
                                if summary.get("device_bound_peak_bytes") is not None and summary.get("limit_bytes")
                                else None),
            "htod_bytes_per_step": htod, "dtoh_bytes_per_step": dtoh, "migrations_source": source,
            # what crossed PCIe into the GPU beyond the migrations: kernels reading host memory in place
            "zero_copy_bytes_per_step": (nvml["rx"] - htod) if "rx" in nvml and htod is not None else None,
            "offloaded_bytes_per_gpu": summary.get("offloaded_bytes_per_gpu"),
            "gpu_page_faults": summary.get("gpu_page_faults"), "cuda_errors": summary.get("cuda_errors"),
            "ranks": summary.get("ranks"),
            # rank 0's policy section: hybrid's guard (fallback), placement and mover; advise's fill
            "hybrid": (stats[0].get("hybrid") if stats and summary.get("policy") == "hybrid" else None),
            "advise": (stats[0].get("advise") if stats and summary.get("policy") == "advise" else None),
            "remote_map_bytes": ((stats[0].get("faults") or {}).get("remote_map_bytes") if stats else None)}


def _median_of(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)} \
        if values else {"median": None, "min": None, "max": None, "n": 0}


def summarize_systems(experiment_systems, runs: list[dict]) -> list[dict]:
    """Per system: its configuration, TFLOPS and step time over its timed repeats, PCIe bytes per
    step, peaks by its own measure and by NVML against the cap, and its losses check."""
    rows = []
    by_id = {r["id"]: r for r in runs}
    for system in experiment_systems:
        timed = [r for r in runs if r["system"] == system.name and r["role"] != "calibration"]
        ok = [r for r in timed if r["status"] == "ok" and r.get("tflops_per_gpu")]
        calibration = next((r for r in runs if r["system"] == system.name and r["role"] == "calibration"), None)
        own = [(r.get("transit") or {}).get("bound_peak_bytes") if system.transit else r.get("peak_torch_reserved_bytes")
               for r in ok]
        if system.transit:  # libtransit's migrations; zero-copy: NVML's RX less them
            htod, dtoh, zero_copy = (_median_of([(r.get("transit") or {}).get(key) for r in ok])
                                     for key in ("htod_bytes_per_step", "dtoh_bytes_per_step", "zero_copy_bytes_per_step"))
        else:
            htod, dtoh = (_median_of([(r.get("pcie_nvml_per_step") or {}).get(key) for r in ok]) for key in ("rx", "tx"))
            zero_copy = None
        # what the system may use on the device: TRANSIT's L (before fair memory's correction), the
        # others' allocator budget (the cap less their context and margin)
        budget_key = "limit_bytes" if system.transit else "allocator_budget_bytes"
        budget = (transit_limit(system, 0) if system.transit and system.cap else system.mem_limit_bytes
                  or max((r.get(budget_key) or 0 for r in ok), default=None) or None)
        rows.append({
            "name": system.name, **system_config(system), "settle_rule": system.settle.describe(),
            "runs": [r["id"] for r in timed], "repeats_ok": len(ok), "repeats_planned": len(timed),
            "settled": [r.get("settled") for r in ok],
            "tflops_per_gpu": _spread([r["tflops_per_gpu"] for r in ok]),
            "step_time_s": _spread([r["timed_median_s"] for r in ok]),
            "tokens_per_s": _spread([r["tokens_per_s"] for r in ok if r.get("tokens_per_s")]),
            "warmup_s": _spread([r["warmup_s"] for r in ok if r.get("warmup_s") is not None]),
            # NCCL between emulated nodes crosses lo: the job's loopback bytes per step, per node (NCCL
            # within a host, over NVLink, is not read)
            "nccl_bytes_per_node_per_step": (_spread([r["loopback_bytes_per_step"] / system.nodes for r in ok
                                                      if r.get("loopback_bytes_per_step") is not None])
                                             if system.nodes else None),
            "step_times_s": {r["id"]: r["step_times_s"] for r in ok},
            "limit_bytes": sorted({r["limit_bytes"] for r in ok if r.get("limit_bytes") is not None}) or None,
            "calibration": ({"run": calibration["id"], "overshoot_bytes": (calibration.get("transit") or {}).get(
                "overshoot_bytes"), "status": calibration["status"]} if calibration else None),
            "pcie_bytes_per_step": {
                "htod": htod, "dtoh": dtoh, "zero_copy": zero_copy,
                "source": ("libtransit's migrations; zero-copy: NVML RX less them" if system.transit
                           else "NVML PCIe counters RX / TX, rank 0's GPU")},
            "peak_own_bytes": max((v for v in own if v is not None), default=None),
            "peak_own_source": ("libtransit's device bound (memory.device_bound_peak_bytes)" if system.transit
                                else "PyTorch's max_memory_reserved"),
            "peak_nvml_bytes": max((r.get("peak_nvml_bytes") or 0 for r in ok), default=None) or None,
            "budget_bytes": budget,
            "within_budget_by_own_measure": (max(v for v in own if v is not None) <= budget
                                             if budget and any(v is not None for v in own) else None),
            "losses": losses_check(system, timed, by_id, runs),
            "gpu": gpu_row(ok),
        })
    return rows


def losses_check(system: System, timed: list[dict], by_id: dict, runs: list[dict]) -> dict:
    """Each timed repeat's losses against the reference system's run of the same repeat (bit for
    bit over the steps both ran), or, without a reference, against this system's first repeat."""
    checks = []
    for run in timed:
        if not run.get("losses"):
            continue
        ref_id = f"{system.reference}.r{run['repeat']}" if system.reference else f"{system.name}.r1"
        ref = by_id.get(ref_id)
        if ref is None or ref is run or not ref.get("losses"):
            continue
        n = min(len(run["losses"]), len(ref["losses"]))
        checks.append({"run": run["id"], "against": ref_id, "steps": n,
                       "bitwise_equal": run["losses"][:n] == ref["losses"][:n],
                       "max_abs_diff": max(abs(a - b) for a, b in zip(run["losses"][:n], ref["losses"][:n])),
                       "last_abs_diff": abs(run["losses"][n - 1] - ref["losses"][n - 1])})
    return {"reference": system.reference or f"{system.name}.r1 (repeatability)", "checks": checks,
            "all_bitwise_equal": all(c["bitwise_equal"] for c in checks) if checks else None}


def summary_doc(experiment: Experiment, runs: list[dict], parts: list[int], n_parts: int, extra: dict) -> dict:
    commits = sorted({r["git_commit"] for r in runs if r.get("git_commit")})
    hosts = sorted({r["hostname"] for r in runs if r.get("hostname")})
    devices = sorted({json.dumps(r["device"], sort_keys=True) for r in runs if r.get("device")})
    return {
        "schema": SUMMARY_SCHEMA, "experiment": experiment.name, "claim": experiment.claim,
        "machine": experiment.machine, "search": experiment.search, "correctness": experiment.correctness,
        "note": experiment.note,
        "protocol": {"repeats": experiment.repeats, "alternation": "A B C A B C ...; calibrations first",
                     "gpu": ("one GPU, the runs one after another (emulated nodes share it)"
                             if MACHINES[experiment.machine] == 1 else
                             f"{MACHINES[experiment.machine]} GPUs of one host, the runs one after another, each "
                             "on its system's first GPUs"),
                     "settle_rules": {"frameworks": FRAMEWORK_SETTLE.as_dict(), "transit": TRANSIT_SETTLE.as_dict()},
                     "fair_memory": "a capped TRANSIT system's calibration run at L = cap - "
                                    f"{NON_ALLOCATOR_MARGIN_BYTES} bytes; its timed repeats at that L less its "
                                    "overshoot there (its bound's peak over L)",
                     "tflops": "model FLOPs per step / the median of the run's timed steps / GPUs; per system the "
                               "median, min and max over its timed repeats"},
        # parts_total 0: one command ran every slot
        "parts": sorted(parts), "parts_total": n_parts, "complete": sorted(parts) == list(range(1, n_parts + 1)),
        "git_commits": commits, "same_commit": len(commits) == 1, "hostnames": hosts, "same_host": len(hosts) == 1,
        "devices": [json.loads(d) for d in devices],
        "systems": summarize_systems(experiment.systems, runs), "runs": runs, **extra,
    }


def merge(experiment: Experiment, files: list[Path], n_parts: int, out: Path | None) -> int:
    docs = []
    for f in files:
        try:
            doc = json.loads(f.read_text())
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or doc.get("schema") != SUMMARY_SCHEMA or doc.get("experiment") != experiment.name:
            raise UsageError(f"--merge {f}: not a {SUMMARY_SCHEMA} part of {experiment.name}")
        docs.append(doc)
    commits = sorted({c for doc in docs for c in doc["git_commits"]})
    if len(commits) > 1:
        raise UsageError(f"--merge: the parts ran at {', '.join(commits)}; one experiment runs at one commit")
    runs = [run for doc in docs for run in doc["runs"]]
    parts = [k for doc in docs for k in doc["parts"]]
    extra = {"merged_from": [f.name for f in files], "command": shlex.join([sys.executable, *sys.argv]),
             "raw": [doc.get("raw") for doc in docs],
             "device_time_s": {key: sum((doc.get("device_time_s") or {}).get(key) or 0 for doc in docs)
                               for key in ("estimated", "actual")}}
    doc = summary_doc(experiment, runs, parts, n_parts, extra)
    if out is None:
        raise UsageError("--merge needs --out FILE")
    write_json(out, doc)
    print_summary(doc)
    return 0


def print_summary(doc: dict) -> None:
    print(f"\n== {doc['experiment']} (parts {doc['parts'] or 'all'}, complete: {doc['complete']}, "
          f"commits {doc['git_commits']}, hosts {doc['hostnames']})")
    header = f"{'system':34s} {'GPUs':>4s} {'mb':>3s} {'ok':>5s} {'TFLOPS/GPU med [min-max]':>26s} " \
             f"{'own peak GiB':>12s} {'NVML GiB':>9s} {'losses':>8s}"
    print(header)
    for row in doc["systems"]:
        tf = row["tflops_per_gpu"]
        spread = f"{tf['median']:.1f} [{tf['min']:.1f}-{tf['max']:.1f}]" if tf["median"] else "-"
        own = f"{row['peak_own_bytes'] / GIB:.2f}" if row["peak_own_bytes"] else "-"
        nvml = f"{row['peak_nvml_bytes'] / GIB:.2f}" if row["peak_nvml_bytes"] else "-"
        losses = {True: "bitwise", False: "differ", None: "-"}[row["losses"]["all_bitwise_equal"]]
        print(f"{row['name']:34s} {row['gpus']:>4d} {row['micro_batch']:>3d} "
              f"{row['repeats_ok']:>2d}/{row['repeats_planned']:<2d} {spread:>26s} {own:>12s} {nvml:>9s} {losses:>8s}")
