"""Combine one driver's runs into one result file, with the derived comparisons, and print a table.

    python3 bench/collect.py compare --work /tmp/bench-work --out $OUT/compare.json

A run NAME in the work directory (bench/lib.sh writes these) is NAME.cmd (the exact command),
NAME.rc, NAME.log, NAME.json (the runner's result), NAME.transit/ (libtransit's per-process
stats files, read here after the process exited) or NAME.skipped. TRANSIT's offloaded bytes
per GPU are its managed peak less the device bound of the last iteration (data resident in host
memory, what the frameworks' offloaded bytes measure too); its PCIe traffic per step is
migrations HtoD + DtoH over iterations.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import statistics
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import GIB, git_commit, write_json

COLLECT_SCHEMA = "transit.bench-collection/1"
LOG_TAIL_LINES = 40
STEP_LINE = re.compile(r"step \d+: loss ([-\d.naif]+) time ([\d.]+)s")  # timed_steps' progress line
TIMELINE_KEEP = 200

# Issue targets, in one place (issue 8 item 3, issue 3 items 5-6, issue 2 item 9).
TARGETS = {
    "advise_vs_no_offload_min": 0.90, "advise_vs_no_offload_aim": 0.95,
    "advise_vs_best_framework_min": 1.42, "advise_vs_best_framework_aim": 1.7,
    "framework_vs_transit_offloaded_min": 3.0,
    "prefetch_fault_reduction_min": 0.95,
    "recorder_warmup_overhead_max": 1.05, "recorder_after_warmup_overhead_max": 1.01,
    "transit_base_overhead_max": 1.01,
}
FRAMEWORK_OFFLOAD_SYSTEMS = ("fsdp-cpu-mb", "fsdp-cpu-accum", "zero-offload", "zero-infinity")
# Student's t, two-sided 95 %, for 1-15 degrees of freedom (more: 15's, a slightly wider interval).
T95 = (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14, 2.13)
STEADY_ITERATIONS = 5  # a run's last iterations, for the steady-state fault count
SMALL_BINS = ("<4K", "4K-64K")
LARGE_BINS = ("1M-2M", ">2M")
UVM_PROBE_RESULT = "bench/results/uvm-probe-h200.json"
NVML_UVM_NOTE = ("NVML's device-used memory keeps the UVM chunks of evicted managed pages until the allocation "
                 f"is freed ({UVM_PROBE_RESULT}): a high-water mark of chunks touched, not what is resident")


def load_transit_stats(directory: Path) -> list[dict]:
    """Per-process stats files of processes that used CUDA (the torchrun agent writes none)."""
    docs = []
    for path in sorted(directory.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            docs.append({"file": path.name, "unreadable": str(exc)})
            continue
        if doc.get("cuda_active"):
            if isinstance(doc.get("timeline"), list):
                doc["timeline"] = doc["timeline"][-TIMELINE_KEEP:]  # the last iterations: steady state
            doc["file"] = path.name
            docs.append(doc)
    return docs


def transit_summary(stats: list[dict]) -> dict | None:
    ranks = [s for s in stats if "unreadable" not in s]
    if not ranks:
        return None

    def get(doc: dict, *keys: str):
        for key in keys:
            if not isinstance(doc, dict):
                return None
            doc = doc.get(key)
        return doc

    def total(*keys: str) -> int | None:
        values = [get(r, *keys) for r in ranks]
        return sum(values) if all(isinstance(v, (int, float)) for v in values) else None

    def beyond_limit(doc: dict) -> int | None:
        managed, limit = get(doc, "allocations", "managed_bytes_peak"), get(doc, "config", "limit_bytes")
        return max(0, managed - limit) if isinstance(managed, int) and isinstance(limit, int) else None

    def host_at_last_mark(doc: dict) -> int | None:
        # The runner's residency sweep moves everything to the host after the last step, so the
        # spilled peak says little: the managed peak less the device bound of the last iteration
        # that has one (a training loop: its data is still live at the last mark).
        managed = get(doc, "allocations", "managed_bytes_peak")
        bounds = [e.get("device_bound_peak_bytes") for e in get(doc, "timeline") or []]
        bound = next((b for b in reversed(bounds) if isinstance(b, int)), None)
        return max(0, managed - bound) if isinstance(managed, int) and bound is not None else None

    per_rank_spill = [host_at_last_mark(r) for r in ranks]
    spill_source = "allocations.managed_bytes_peak - the last timeline device_bound_peak_bytes"
    if not all(isinstance(v, int) for v in per_rank_spill):
        per_rank_spill = [get(r, "memory", "spilled_peak_bytes") for r in ranks]
        spill_source = "memory.spilled_peak_bytes"
    if not all(isinstance(v, int) for v in per_rank_spill):
        # Without a spill count: what cannot be on the device at the peak, managed peak minus L.
        spill_source = "allocations.managed_bytes_peak - config.limit_bytes"
        per_rank_spill = [beyond_limit(r) for r in ranks]
    iterations = [get(r, "iterations", "count") or 0 for r in ranks]
    htod, dtoh = total("migrations", "htod", "bytes"), total("migrations", "dtoh", "bytes")
    hist: dict[str, int] = {}
    for r in ranks:
        for key in ("htod", "dtoh"):
            for bin_name, count in (get(r, "migrations", key, "histogram") or {}).items():
                hist[bin_name] = hist.get(bin_name, 0) + count
    hist_total = sum(hist.values())
    iters = max(iterations) if iterations else 0
    return {
        "ranks": len(ranks),
        "policy": get(ranks[0], "config", "policy"),
        "mode": get(ranks[0], "config", "mode"),
        "limit_bytes": get(ranks[0], "config", "limit_bytes"),
        "offloaded_bytes_per_gpu": (max(per_rank_spill) if all(isinstance(v, int) for v in per_rank_spill)
                                    else None),
        "offloaded_source": spill_source,
        "resident_peak_bytes": max((get(r, "memory", "resident_peak_bytes") or 0) for r in ranks),
        "overshoot_peak_bytes": max((get(r, "memory", "overshoot_peak_bytes") or 0) for r in ranks),
        # TRANSIT's own tick-by-tick reading of the bound the monitor samples (None before it existed).
        "device_bound_peak_bytes": max((get(r, "memory", "device_bound_peak_bytes") for r in ranks
                                        if get(r, "memory", "device_bound_peak_bytes") is not None), default=None),
        # ...and after the profile exists (warm-up, one iteration for late records, one to apply it)
        "device_bound_peak_after_profile_bytes": max(
            (e["device_bound_peak_bytes"] for r in ranks for e in get(r, "timeline") or []
             if e.get("device_bound_peak_bytes") is not None
             and e["iteration"] > (get(r, "config", "warmup_iters") or 0) + 2), default=None),
        "htod_bytes": htod, "dtoh_bytes": dtoh,
        "htod_count": total("migrations", "htod", "count"), "dtoh_count": total("migrations", "dtoh", "count"),
        "migration_bytes_per_step": ((htod + dtoh) / iters / len(ranks)) if htod is not None and dtoh is not None
                                    and iters else None,
        "histogram": hist,
        "small_migration_share": (sum(hist.get(b, 0) for b in SMALL_BINS) / hist_total) if hist_total else None,
        "large_migration_share": (sum(hist.get(b, 0) for b in LARGE_BINS) / hist_total) if hist_total else None,
        "gpu_page_faults": total("faults", "gpu_page_faults"),
        "thrashing": total("faults", "thrashing"),
        "remote_map_bytes": total("faults", "remote_map_bytes"),
        "prefetch_bytes": total("prefetch", "bytes"),
        "advise_calls": total("advise", "calls"),
        "evictions_bytes": total("evictions", "bytes"),
        # limit mode: evictions queued at launches once the profile exists, and the chunks HtoD
        # records brought that the launches had not counted
        "evictions_at_launch_bytes": total("evictions", "at_launch_bytes"),
        "cold_arrival_bytes": total("evictions", "cold_bytes"),
        "unrequested_bytes": total("migrations", "unrequested_bytes"),
        "iterations": iters,
        "iteration_method": get(ranks[0], "iterations", "method"),
        "recorder_state": get(ranks[0], "recorder", "state"),
        "dropped_records": total("recorder", "dropped_records"),
        "refused_allocations": total("allocations", "refused"),
        "cuda_errors": [get(r, "cuda_error") for r in ranks if get(r, "cuda_error")],
        "exit_reasons": [get(r, "time", "exit_reason") for r in ranks],
        "warnings": sorted({w for r in ranks for w in (get(r, "warnings") or [])}),
    }


def load_runs(work: Path) -> dict[str, dict]:
    runs: dict[str, dict] = {}
    for marker in sorted([*work.glob("*.cmd"), *work.glob("*.skipped")]):
        name = marker.stem
        if name in runs:
            continue
        run: dict = {"name": name}
        skipped = work / f"{name}.skipped"
        if skipped.exists():
            run |= {"status": "skipped", "reason": skipped.read_text().strip()}
            runs[name] = run
            continue
        rc_file, result_file, stats_dir = work / f"{name}.rc", work / f"{name}.json", work / f"{name}.transit"
        rc = int(rc_file.read_text()) if rc_file.exists() else None
        run["command"] = (work / f"{name}.cmd").read_text().strip()
        run["rc"] = rc
        run["result"] = json.loads(result_file.read_text()) if result_file.exists() else None
        if stats_dir.is_dir():
            run["transit_stats"] = load_transit_stats(stats_dir)
            run["transit"] = transit_summary(run["transit_stats"])
        run["status"] = "ok" if rc == 0 else "timeout" if rc in (124, 137) else "failed"
        if run["status"] != "ok":
            log = work / f"{name}.log"
            lines = log.read_text(errors="replace").splitlines() if log.exists() else []
            run["log_tail"] = lines[-LOG_TAIL_LINES:]
            # A run stopped by its limit wrote no result: keep the steps its log printed.
            steps = [STEP_LINE.match(line) for line in lines]
            run["steps_from_log"] = {"losses": [float(m[1]) for m in steps if m],
                                     "step_times_s": [float(m[2]) for m in steps if m]}
        runs[name] = run
    return runs


def metric(runs: dict, name: str, key: str):
    run = runs.get(name) or {}
    return (run.get("result") or {}).get(key)


def tflops(runs: dict, name: str) -> float | None:
    return metric(runs, name, "tflops_per_gpu")


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def offloaded(run: dict) -> int | None:
    """Host-resident training state per GPU: TRANSIT's spilled peak, or the framework's own count."""
    if run.get("transit"):
        return run["transit"]["offloaded_bytes_per_gpu"]
    return (run.get("result") or {}).get("offloaded_bytes_per_gpu")


def memory_for_cap(run: dict) -> dict | None:
    """The device-memory peak checked against the cap, and where it comes from.

    TRANSIT in limit mode: per rank, the managed data resident on the device (the monitor's upper
    bound) plus what NVML charges to the process (its memory outside the managed allocations:
    context, NCCL/VMM buffers), against L (its limit_bytes) plus that fixed overhead, issue 3's
    definition. (The comparison gives TRANSIT L = its cap minus the 1.5 GiB the other systems keep
    for the same overhead.) NVML's device-used reading keeps the UVM chunks of evicted pages
    (NVML_UVM_NOTE), so it is kept beside the verdict only. Every other system: NVML's peak
    against the cap its runner set.
    """
    result = run.get("result")
    if not result:
        return None
    memory, tr = result.get("memory") or {}, run.get("transit") or {}
    if tr.get("mode") == "limit" and tr.get("limit_bytes"):
        ranks = memory.get("per_rank") or []
        sums = [(r.get("managed_device_resident_peak_bytes"), r.get("nvml_process_peak_bytes")) for r in ranks]
        measured = bool(sums) and all(m is not None and p is not None for m, p in sums)
        peak = max(m + p for m, p in sums) if measured else None
        fixed = max((p for _, p in sums if p is not None), default=0)
        cap = tr["limit_bytes"] + fixed
        sources = sorted({r.get("residency_source") or "not measured: run predates the residency monitor"
                          for r in ranks})
        # The bound can only prove compliance (host RSS may miss host-resident pages that UVM has
        # unmapped from the CPU); TRANSIT's own estimate, from CUPTI's migration records, is the
        # other witness: over the cap there means over, under it means "not shown" by the bound.
        estimate, own_bound = tr.get("resident_peak_bytes"), tr.get("device_bound_peak_bytes")
        estimate_total = estimate + fixed if estimate is not None else None
        if peak is not None and peak <= cap:
            within, verdict_text = True, "within (the residency bound proves it)"
        elif estimate_total is not None and estimate_total > cap:
            within, verdict_text = False, "over (TRANSIT's own estimate is over the cap)"
        else:
            within, verdict_text = None, "not shown (the bound is over the cap, TRANSIT's estimate is not)"
        sweep = result.get("residency_sweep") or {}
        stats = (run.get("transit_stats") or [{}])[0]
        dtoh_after = ((stats.get("migrations") or {}).get("dtoh") or {}).get("bytes")
        swept = (dtoh_after - sweep["dtoh_bytes_before"]
                 if sweep.get("dtoh_bytes_before") is not None and dtoh_after is not None else None)
        timeline = stats.get("timeline") or [{}]
        # TRANSIT's own bound per iteration (rank 0): where in the run it was over, and whether the
        # last iteration, long after the profile, held the cap.
        by_iteration = [[e["iteration"], e["device_bound_peak_bytes"] + fixed] for e in timeline
                        if e.get("device_bound_peak_bytes") is not None]
        return {"memory_peak_for_cap_bytes": peak,
                "transit_bound_peak_by_iteration_bytes": by_iteration,
                "last_iteration_within_cap": by_iteration[-1][1] <= cap if by_iteration else None,
                # Measured at the end by moving everything to the host (bench/common.py residency_sweep).
                "device_resident_at_end_by_sweep_bytes": swept,
                "transit_estimate_at_end_bytes": timeline[-1].get("resident_bytes"),
                "source": "managed_device_resident_peak_bytes + nvml_process_peak_bytes (max over ranks); "
                          f"residency: {', '.join(sources)}",
                "transit_estimate_peak_bytes": estimate_total,
                "transit_bound_peak_bytes": own_bound + fixed if own_bound is not None else None,
                "nvml_device_used_peak_bytes": memory.get("peak_bytes_max"), "nvml_note": NVML_UVM_NOTE,
                "limit_bytes": tr["limit_bytes"], "cap_bytes": cap, "within_cap": within, "verdict": verdict_text}
    peak, cap = memory.get("peak_bytes_max"), (result.get("memory_cap") or {}).get("cap_bytes")
    within = peak <= cap if peak is not None and cap is not None else None
    return {"memory_peak_for_cap_bytes": peak, "source": "nvml peak_bytes_max", "cap_bytes": cap,
            "within_cap": within}


def memory_vs_cap(runs: dict, names) -> dict:
    return {n: memory_for_cap(runs[n]) for n in names if n in runs}


def losses_compare(runs: dict, name: str, reference: str) -> dict | None:
    a, b = metric(runs, name, "losses"), metric(runs, reference, "losses")
    if not a or not b:
        return None
    n = min(len(a), len(b))
    diffs = [abs(x - y) for x, y in zip(a[:n], b[:n])]
    return {"reference": reference, "steps_compared": n, "bitwise_identical": a[:n] == b[:n],
            "max_abs_diff": max(diffs)}


def step_window(runs: dict, name: str, lo: int, hi: int | None,
                of: Callable[[list[float]], float] = statistics.median) -> float | None:
    """`of` (the median, or min) of the run's step times [lo:hi]."""
    times = ((metric(runs, name, "step_time") or {}).get("all_s") or [])[lo:hi]
    return of(times) if times else None


def check(value: float | None, threshold: float, higher_is_better: bool = True) -> dict:
    if value is None:
        return {"value": None, "threshold": threshold, "met": None}
    met = value >= threshold if higher_is_better else value <= threshold
    return {"value": value, "threshold": threshold, "met": met}


def step_mean(runs: dict, name: str) -> float | None:
    """Mean step time after warm-up; for a run stopped by its limit, the steps its log shows
    after the first (labelled as such in the run's steps_from_log)."""
    mean = (metric(runs, name, "step_time") or {}).get("mean_s")
    if mean is None:
        times = ((runs.get(name) or {}).get("steps_from_log") or {}).get("step_times_s", [])[1:]
        mean = statistics.fmean(times) if times else None
    return mean


def fault_marks(run: dict) -> list[tuple[int, int]]:
    """(iteration, cumulative GPU page faults) at each of libtransit's iteration marks (rank 0)."""
    timeline = ((run.get("transit_stats") or [{}])[0]).get("timeline") or []
    return [(e["iteration"], e["gpu_page_faults"]) for e in timeline if "gpu_page_faults" in e]


def faults_after_warmup(run: dict) -> int | None:
    """GPU page faults between the iteration mark that ends the runner's warm-up and the last mark."""
    warmup = ((run.get("result") or {}).get("step_time") or {}).get("warmup_steps")
    counts = dict(fault_marks(run))
    if warmup not in counts:
        return None
    return counts[max(counts)] - counts[warmup]


def faults_per_iteration(run: dict) -> list[int]:
    """GPU page faults in each iteration: differences of the cumulative counts at the marks."""
    counts = [faults for _, faults in fault_marks(run)]
    return [b - a for a, b in itertools.pairwise(counts)]


def faults_steady(run: dict) -> float | None:
    """Median faults per iteration over the run's last STEADY_ITERATIONS: by then limit mode's profile is
    refined and its correction settled (the median, so that one iteration's burst does not decide)."""
    last = faults_per_iteration(run)[-STEADY_ITERATIONS:]
    return statistics.median(last) if len(last) == STEADY_ITERATIONS else None


def fault_reduction(base: float | None, prefetch: float | None) -> float | None:
    return 1 - prefetch / base if base and prefetch is not None else None


def summarize_policies(runs: dict) -> dict:
    names = [n for n in ("transit-base", "transit-prefetch", "transit-advise") if n in runs]
    step = {n: step_mean(runs, n) for n in ["native", *names]}
    tr = {n: runs[n].get("transit") or {} for n in names}
    whole_run = fault_reduction(tr.get("transit-base", {}).get("gpu_page_faults"),
                                tr.get("transit-prefetch", {}).get("gpu_page_faults"))
    steady = {n: faults_after_warmup(runs[n]) for n in names}
    settled = {n: faults_steady(runs[n]) for n in names}
    order = [step.get(n) for n in ("transit-base", "transit-prefetch", "transit-advise")]
    return {
        "step_time_mean_s": step,
        # Steady state: advise applies SetAccessedBy in the first iteration after libtransit's own
        # warm-up, which may be a step the runner already measures.
        "step_time_p50_s": {n: (metric(runs, n, "step_time") or {}).get("p50_s") for n in ["native", *names]},
        "base_over_prefetch": ratio(step.get("transit-base"), step.get("transit-prefetch")),
        "base_over_advise": ratio(step.get("transit-base"), step.get("transit-advise")),
        "prefetch_over_advise": ratio(step.get("transit-prefetch"), step.get("transit-advise")),
        "ordered_base_prefetch_advise": (order[0] > order[1] > order[2]) if None not in order else None,
        # The target is about steady state: warm-up faults are the same in every policy (prefetch
        # replays only after its profile).
        "gpu_faults_after_warmup": steady,
        "prefetch_fault_reduction": check(fault_reduction(steady.get("transit-base"), steady.get("transit-prefetch")),
                                          TARGETS["prefetch_fault_reduction_min"]),
        "prefetch_fault_reduction_whole_run": whole_run,
        "gpu_faults_per_iteration": {n: faults_per_iteration(runs[n]) for n in names},
        f"gpu_faults_median_last_{STEADY_ITERATIONS}_iterations": settled,
        "prefetch_fault_reduction_steady": check(fault_reduction(settled.get("transit-base"), settled.get("transit-prefetch")),
                                                 TARGETS["prefetch_fault_reduction_min"]),
        "small_migration_share": {n: tr[n].get("small_migration_share") for n in names},
        "large_migration_share": {n: tr[n].get("large_migration_share") for n in names},
        "memory_vs_cap": memory_vs_cap(runs, ["native", *names]),
        "losses_vs_native": {n: losses_compare(runs, n, "native") for n in names},
    }


def warmup_iters(run: dict | None) -> int:
    """The recorder's profiling window of a TRANSIT run, in iterations (libtransit's default: 2)."""
    return int(((run or {}).get("result") or {}).get("transit_env", {}).get("TRANSIT_WARMUP_ITERS", 2))


def summarize_overhead(runs: dict) -> dict:
    warm = warmup_iters(runs.get("transit-base"))
    # Step 0 holds allocation and autotuning: the warm-up window starts at step 1.
    rec_warm = ratio(step_window(runs, "transit-base", 1, warm), step_window(runs, "transit-base-norec", 1, warm))
    rec_after = ratio(step_window(runs, "transit-base", warm, None),
                      step_window(runs, "transit-base-norec", warm, None))
    base_vs_native = ratio((metric(runs, "transit-base", "step_time") or {}).get("p50_s"),
                           (metric(runs, "native", "step_time") or {}).get("p50_s"))
    return {
        "transit_warmup_iters": warm,
        "transit_base_over_native_p50": check(base_vs_native, TARGETS["transit_base_overhead_max"], False),
        "recorder_warmup_over_no_recorder": check(rec_warm, TARGETS["recorder_warmup_overhead_max"], False),
        "recorder_after_warmup_over_no_recorder": check(rec_after, TARGETS["recorder_after_warmup_overhead_max"],
                                                        False),
        "losses_base_vs_native": losses_compare(runs, "transit-base", "native"),
    }


def median_interval(values: list[float]) -> list[float]:
    """A distribution-free 95 % confidence interval for the median (the sign test's): the k-th
    smallest and k-th largest value, k the largest with P(Binomial(n, 1/2) < k) <= 2.5 %.
    [-inf, inf] under 6 values, where no k qualifies."""
    x, n = sorted(values), len(values)
    k, below = 0, 0.0
    while k < n and (below := below + math.comb(n, k) / 2**n) <= 0.025:
        k += 1
    return [x[k - 1], x[n - k]] if k else [-math.inf, math.inf]


def paired_ratio(ratios: list[float], threshold: float) -> dict:
    """The geometric mean of paired ratios with its 95 % confidence interval (Student's t on the
    logarithms); met: the interval's top is within the threshold, so the data show the target;
    point_within: only the mean is. The median of the ratios with the sign test's interval beside
    it: the ratios' tails are heavy (a run that spends its whole window slow, on one side of a
    pair, gave 0.87 and 1.25 among pairs within 1 % of 1), and the t interval widens with them."""
    if not ratios:
        return {"pairs": 0, "threshold": threshold, "met": None}
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    half = (T95[min(len(logs) - 1, len(T95)) - 1] * statistics.stdev(logs) / math.sqrt(len(logs))
            if len(logs) > 1 else math.inf)
    top = math.exp(mean + half)
    median, median_ci = statistics.median(ratios), median_interval(ratios)
    return {"pairs": len(ratios), "ratios": ratios, "geometric_mean": math.exp(mean),
            "ci95": [math.exp(mean - half), top], "threshold": threshold, "met": top <= threshold,
            "point_within": math.exp(mean) <= threshold, "median": median, "median_ci95": median_ci,
            "median_met": median_ci[1] <= threshold}


POOL_OFFSET = 100  # --pool: the k-th pooled result's pair i becomes pair 100 k + i
ESTIMATORS = {"median": statistics.median, "fastest": min}  # summarize_recorder's; the median's keys have no suffix


def summarize_recorder(runs: dict) -> dict:
    """run_recorder_pairs.sh: pair i is rec-i (recorder on) and norec-i (off); each window's
    ratio is that of the two runs' median step times in it, and of their fastest steps: what the
    machine adds to a step (other tenants, the scheduler) only ever adds, and moved the medians of
    one configuration by 31 % between runs on an nvidia-h200-x2, so the fastest step shows the
    recorder's own cost with less noise."""
    pairs = sorted(int(name.split("-")[1]) for name in runs
                   if name.startswith("rec-") and runs[name].get("status") == "ok"
                   and (runs.get(f"norec-{name[4:]}") or {}).get("status") == "ok")
    warm = warmup_iters(runs.get(f"rec-{pairs[0]}")) if pairs else 2
    windows = {"warmup": (1, warm), "after_warmup": (warm, None)}  # step 0 allocates and autotunes
    thresholds = {"warmup": TARGETS["recorder_warmup_overhead_max"],
                  "after_warmup": TARGETS["recorder_after_warmup_overhead_max"]}
    return {
        "transit_warmup_iters": warm,
        "pairs_complete": len(pairs),
        "pairs_incomplete": sorted({name.split("-")[1] for name in runs if name.split("-")[0] in ("rec", "norec")}
                                   - {str(i) for i in pairs}),
        **{f"recorder_{w}_over_no_recorder{'' if kind == 'median' else '_' + kind}": paired_ratio(
            [step_window(runs, f"rec-{i}", lo, hi, of) / step_window(runs, f"norec-{i}", lo, hi, of) for i in pairs],
            thresholds[w]) for w, (lo, hi) in windows.items() for kind, of in ESTIMATORS.items()},
        **{f"{kind}_step_s": {name: {w: step_window(runs, name, lo, hi, of) for w, (lo, hi) in windows.items()}
                              for name in sorted(runs) if runs[name].get("status") == "ok"}
           for kind, of in ESTIMATORS.items()},
    }


def summarize_compare(runs: dict) -> dict:
    baseline = tflops(runs, "fsdp2-2gpu")
    advise = tflops(runs, "transit-advise")
    frameworks = {n: tflops(runs, n) for n in FRAMEWORK_OFFLOAD_SYSTEMS if tflops(runs, n) is not None}
    best_fw = max(frameworks, key=frameworks.get) if frameworks else None
    fw_offloaded = {n: offloaded(runs[n]) for n in frameworks if offloaded(runs[n])}
    advise_off = offloaded(runs["transit-advise"]) if "transit-advise" in runs else None
    socket = tflops(runs, "fsdp2-2gpu-socket")
    advise_socket = tflops(runs, "transit-advise-socket")
    return {
        "tflops_per_gpu": {n: tflops(runs, n) for n in runs},
        "offloaded_bytes_per_gpu": {n: offloaded(runs[n]) for n in runs},
        "memory_vs_cap": memory_vs_cap(runs, runs),
        "advise_vs_no_offload": check(ratio(advise, baseline), TARGETS["advise_vs_no_offload_min"]),
        "advise_vs_no_offload_aim": TARGETS["advise_vs_no_offload_aim"],
        "best_framework": best_fw,
        "advise_vs_best_framework": check(ratio(advise, frameworks.get(best_fw)),
                                          TARGETS["advise_vs_best_framework_min"]),
        "advise_vs_best_framework_aim": TARGETS["advise_vs_best_framework_aim"],
        "framework_over_transit_offloaded_min": check(
            ratio(min(fw_offloaded.values()), advise_off) if fw_offloaded and advise_off else None,
            TARGETS["framework_vs_transit_offloaded_min"]),
        "network": {
            # rho(B1, B2) = throughput at the high bandwidth / throughput at the low one (paper, 4.2).
            "rho_no_offload_2gpu": ratio(baseline, socket),
            "rho_transit_advise_1gpu": ratio(advise, advise_socket),
            "transit_advise_1gpu_over_no_offload_2gpu_socket": ratio(advise, socket),
            "high_bandwidth": "NCCL default transport between the 2 GPUs (NVLink / P2P)",
            "low_bandwidth": "NCCL over TCP sockets on loopback (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 "
                             "NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo)",
        },
        "losses_vs_no_offload": {n: losses_compare(runs, n, "fsdp2-2gpu") for n in runs if n != "fsdp2-2gpu"},
    }


def summarize_junit(path: Path) -> dict | None:
    if not path.exists():
        return None
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    cases = []
    for suite in suites:
        for case in suite.iter("testcase"):
            outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
            detail = next((child.get("message") for child in case if child.tag != "system-out"), None)
            cases.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                          "detail": (detail or "")[:300] or None, "time_s": float(case.get("time") or 0)})
    counts = {o: sum(c["outcome"] == o for c in cases) for o in ("passed", "failure", "error", "skipped")}
    return {"counts": counts, "cases": cases}


SUMMARIES = {"policies": summarize_policies, "overhead": summarize_overhead, "recorder": summarize_recorder,
             "compare": summarize_compare}


def gib(value: float | None) -> str:
    return f"{value / GIB:.1f}" if value is not None else "-"


def num(value: float | None, fmt: str = ".1f") -> str:
    return format(value, fmt) if value is not None else "-"


def print_table(kind: str, runs: dict, summary: dict) -> None:
    header = ("run", "status", "GPUs", "TFLOPS/GPU", "step p50 s", "peak for cap GiB", "cap GiB", "within cap",
              "offloaded GiB/GPU", "PCIe GiB/step", "faults")
    rows = []
    for name, run in runs.items():
        res, tr = run.get("result") or {}, run.get("transit") or {}
        cap = memory_for_cap(run) or {}
        within = {True: "yes", False: "NO", None: "-"}[cap.get("within_cap")]
        rows.append((name, run["status"], str((res.get("config") or {}).get("world_size", "-")),
                     num(res.get("tflops_per_gpu")), num((res.get("step_time") or {}).get("p50_s"), ".3f"),
                     gib(cap.get("memory_peak_for_cap_bytes")), gib(cap.get("cap_bytes")), within,
                     gib(offloaded(run)), gib(tr.get("migration_bytes_per_step")),
                     str(tr.get("gpu_page_faults", "-"))))
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    print(f"\n== {kind} ==")
    for line in (header, *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)))
    print(json.dumps(summary, indent=1, default=str))


def summarize(kind: str, runs: dict, gpu_tests: dict | None) -> dict:
    """The kind's summary, the HF Trainer transparency pair where it ran, and the GPU tests' junit
    summary (kept from the device's run when a result is summarized again)."""
    summary = SUMMARIES[kind](runs)
    if "hf-native" in runs or "hf-transit" in runs:
        summary["transparency_hf_trainer"] = losses_compare(runs, "hf-transit", "hf-native")
    if gpu_tests is not None:
        summary["gpu_tests"] = gpu_tests
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("kind", choices=sorted(SUMMARIES))
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--work", type=Path, help="a driver's work directory (on the device)")
    source.add_argument("--resummarize", type=Path, metavar="RESULT_JSON",
                        help="derive the summary of a committed result again with this collect.py; its runs, "
                             "commit and device stay (each TRANSIT run's summary of its stats files is derived "
                             "again too), and summary_commit names the collect.py used")
    p.add_argument("--merge", type=Path, nargs="+", default=[], metavar="RESULT_JSON",
                   help="with --resummarize: add the runs of these results (of the same kind, from other device "
                        "commands) that the first one lacks or did not complete; merged_runs names each one's "
                        "file, commit, runs and the status of those replaced")
    p.add_argument("--pool", type=Path, nargs="+", default=[], metavar="RESULT_JSON",
                   help="recorder kind, with --resummarize: add the pairs of these results (other device commands "
                        "of the same code) as further pairs, the k-th file's renumbered from 100 k + 1; pooled_from "
                        "names each file, its commit and its offset")
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args(argv)
    if (args.merge or args.pool) and not args.resummarize:
        p.error("--merge and --pool go with --resummarize")
    if args.pool and args.kind != "recorder":
        p.error("--pool adds pairs: recorder kind only")
    if args.resummarize:
        doc = json.loads(args.resummarize.read_text())

        def same_kind(option: str, path: Path) -> dict:
            other = json.loads(path.read_text())
            if other.get("kind") != doc.get("kind"):
                p.error(f"{option} {path}: kind {other.get('kind')!r} differs from {doc.get('kind')!r}")
            return other

        for other_path in args.merge:
            other = same_kind("--merge", other_path)
            # Runs the first lacks, or has only as skipped or cut short while the other completed them.
            added = [name for name, run in other["runs"].items()
                     if name not in doc["runs"] or (doc["runs"][name].get("status") != "ok" and run.get("status") == "ok")]
            replaced = {name: doc["runs"][name].get("status") for name in added if name in doc["runs"]}
            doc["runs"] |= {name: other["runs"][name] for name in added}
            # Each run's result names its own commit too; this says which runs came from which command.
            doc.setdefault("merged_runs", []).append({"from": other_path.name, "git_commit": other.get("git_commit"),
                                                     "runs": added, "replaced_status": replaced})
        for k, other_path in enumerate(args.pool, 1):
            other = same_kind("--pool", other_path)
            offset = POOL_OFFSET * k
            for name, run in other["runs"].items():
                system, pair = name.rsplit("-", 1)
                doc["runs"][f"{system}-{int(pair) + offset}"] = run | {"name": f"{system}-{int(pair) + offset}"}
            doc.setdefault("pooled_from", []).append({"from": other_path.name, "git_commit": other.get("git_commit"),
                                                      "pair_offset": offset})
        for run in doc["runs"].values():
            if "transit_stats" in run:
                run["transit"] = transit_summary(run["transit_stats"])
        doc["summary"] = summarize(args.kind, doc["runs"], (doc.get("summary") or {}).get("gpu_tests"))
        doc["targets"], doc["summary_commit"] = TARGETS, git_commit()
        write_json(args.out, doc)
        print_table(args.kind, doc["runs"], doc["summary"])
        return 0
    runs = load_runs(args.work)
    summary = summarize(args.kind, runs, summarize_junit(args.work / "pytest-gpu.xml"))
    device = next((r["result"]["device"] for r in runs.values() if r.get("result")), None)
    doc = {
        "schema": COLLECT_SCHEMA, "kind": args.kind, "git_commit": git_commit(), "device": device,
        "targets": TARGETS, "summary": summary, "runs": runs,
    }
    write_json(args.out, doc)
    print_table(args.kind, runs, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
