"""The bench's measure of TRANSIT's device-resident managed data (smaps of the UVM mappings), the
cap verdict collect.py builds from it, and the memory-over-time plot, on CPU."""

from __future__ import annotations

import copy
import gzip
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import collect
import plots
from common import (
    ANONYMOUS_MAPPING,
    GIB,
    UVM_DEVICE_PATH,
    NvmlMonitor,
    host_resident_bytes,
    read_own_smaps,
    smaps_rss_by_path,
    uvm_host_resident_bytes,
)

SMAPS = (REPO / "tests/fixtures/bench/smaps-uvm.txt").read_text()
# Raw results the device wrote, gzipped: bench/results/<name> at 2bd697f (bench/results/MANIFEST.md).
RAW = REPO / "bench/fixtures/raw-2bd697f"


def raw_file(name: str, directory: Path) -> Path:
    """The raw result bench/results/<name> of 2bd697f, unpacked into `directory` under its own file name."""
    path = directory / Path(name).name
    path.write_bytes(gzip.decompress((RAW / (name.replace("/", "--") + ".gz")).read_bytes()))
    return path


def raw_doc(name: str) -> dict:
    return json.loads(gzip.decompress((RAW / (name.replace("/", "--") + ".gz")).read_bytes()))
# The policies result of the session before the residency monitor (commit 0ddb8bb, H200): real shapes, no timelines
POLICIES = json.loads((REPO / "tests/fixtures/bench/policies-before-residency-monitor.json").read_text())
KB = 1024
L = 24 * GIB


def test_rss_summed_per_path():
    sums = smaps_rss_by_path(SMAPS)
    # Three UVM mappings (2 GiB, 512 MiB and one never touched from the host), two anonymous ones.
    assert sums[UVM_DEVICE_PATH] == (2097152 + 524288 + 0) * KB
    assert sums[ANONYMOUS_MAPPING] == (0 + 98304) * KB
    assert sums["/dev/nvidiactl"] == 2048 * KB
    assert sums["/dev/nvidia0"] == 0
    assert sums["[heap]"] == 34812 * KB
    assert sums["/opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so"] == 20480 * KB


def test_uvm_host_resident_matches_the_full_parse():
    assert uvm_host_resident_bytes(SMAPS) == smaps_rss_by_path(SMAPS)[UVM_DEVICE_PATH] == int(2.5 * GIB)


def test_uvm_host_resident_none_without_a_uvm_mapping():
    assert uvm_host_resident_bytes("") is None
    other_path = SMAPS.replace(f" {UVM_DEVICE_PATH}\n", f" {UVM_DEVICE_PATH}-tools\n")
    assert other_path != SMAPS
    assert uvm_host_resident_bytes(other_path) is None


def test_uvm_mapping_with_nothing_on_the_host_is_zero_not_none():
    untouched = SMAPS.replace("Rss:             2097152 kB", "Rss:                   0 kB").replace(
        "Rss:              524288 kB", "Rss:                   0 kB")
    assert untouched != SMAPS
    assert uvm_host_resident_bytes(untouched) == 0


def test_parser_accounts_for_this_process_rss():
    """The per-path sums of the kernel's own smaps add up to its smaps_rollup Rss."""
    by_path = smaps_rss_by_path(read_own_smaps())
    rollup = Path("/proc/self/smaps_rollup").read_text()
    rollup_rss = next(int(line.split()[1]) * KB for line in rollup.splitlines() if line.startswith("Rss:"))
    assert by_path[ANONYMOUS_MAPPING] > 0
    assert sum(by_path.values()) == pytest.approx(rollup_rss, rel=0.05)


def test_pagemap_counts_the_pages_in_memory_per_range():
    import mmap
    import resource

    page = resource.getpagesize()
    region = mmap.mmap(-1, 64 * page)  # anonymous: no page is in memory until written
    address = ctypes_address(region)
    assert host_resident_bytes([(address, 64 * page)]) == 0
    for i in range(0, 64, 4):  # every fourth page
        region[i * page] = 1
    assert host_resident_bytes([(address, 64 * page)]) == 16 * page
    # Two ranges, one touched page each; a range inside one page counts that page.
    assert host_resident_bytes([(address, page), (address + 4 * page + 100, 8)]) == 2 * page
    assert host_resident_bytes([(address + page, 3 * page)]) == 0
    region.close()


def test_evict_cost_names_the_runs_of_pages_not_in_memory():
    """evict_cost.py evicts, in one of its forms, exactly these runs: what the host lacks."""
    import mmap
    import resource

    from evict_cost import absent_runs

    page = resource.getpagesize()
    region = mmap.mmap(-1, 16 * page)
    address = ctypes_address(region)
    assert absent_runs(address, 16 * page) == [(address, 16 * page)]
    for i in (0, 1, 5, 15):
        region[i * page] = 1
    assert absent_runs(address, 16 * page) == [(address + 2 * page, 3 * page), (address + 6 * page, 9 * page)]
    region.close()


def ctypes_address(region) -> int:
    import ctypes

    return ctypes.addressof(ctypes.c_char.from_buffer(region))


def test_monitor_reports_no_measure_rather_than_zero_without_a_uvm_mapping():
    """This CPU process has no managed mapping: the residency sample leaves the peaks unknown."""
    monitor = object.__new__(NvmlMonitor)  # the residency part only: NVML needs a GPU
    monitor.track_residency, monitor.device_index = True, 0
    monitor.managed_bound = monitor.managed_bound_peak = monitor.uvm_host_peak = None
    monitor.sample_residency()
    assert monitor.managed_bound_peak is None and monitor.uvm_host_peak is None
    assert monitor.residency_source() == f"not measured: no {UVM_DEVICE_PATH} mapping in /proc/self/smaps"
    monitor.track_residency = False
    assert "not under TRANSIT" in monitor.residency_source()


def test_monitor_skips_a_walk_during_which_the_allocator_grew(monkeypatch):
    """Reserved bytes read before and after the smaps walk: when they differ, the reading is no
    bound of any moment and is skipped (counted); when they agree, reserved minus host counts."""
    import common

    monitor = object.__new__(NvmlMonitor)
    monitor.track_residency, monitor.device_index = True, 0
    monitor.managed_bound = monitor.managed_bound_peak = monitor.uvm_host_peak = None
    monitor.residency_samples_skipped = 0
    host = uvm_host_resident_bytes(SMAPS)
    reserved = iter([host + 5 * GIB, host + 9 * GIB, host + 2 * GIB, host + 2 * GIB])
    monkeypatch.setattr(common, "read_own_smaps", lambda: SMAPS)
    monkeypatch.setattr(common.torch.cuda, "memory_reserved", lambda device=None: next(reserved))
    monitor.sample_residency()  # 5 GiB before the walk, 9 GiB after
    assert monitor.residency_samples_skipped == 1 and monitor.managed_bound_peak is None
    assert monitor.uvm_host_peak == host  # the host reading stands on its own
    monitor.sample_residency()
    assert monitor.managed_bound == monitor.managed_bound_peak == 2 * GIB
    assert monitor.uvm_host_peak == host


def transit_run(name: str, managed_peaks: list[int | None]) -> dict:
    """A policies-h200.json TRANSIT run, with one rank per managed peak, as the new monitor writes them."""
    run = copy.deepcopy(POLICIES["runs"][name])
    rank0 = run["result"]["memory"]["per_rank"][0]
    ranks = []
    for peak in managed_peaks:
        rank = dict(rank0, managed_device_resident_peak_bytes=peak, uvm_host_resident_peak_bytes=13 * GIB,
                    residency_source="smaps:/dev/nvidia-uvm")
        ranks.append(rank)
    run["result"]["memory"]["per_rank"] = ranks
    return run


def test_transit_verdict_uses_the_managed_bound_plus_process_memory():
    run = transit_run("transit-advise", [22 * GIB])
    process = run["result"]["memory"]["per_rank"][0]["nvml_process_peak_bytes"]
    verdict = collect.memory_for_cap(run)
    assert verdict["memory_peak_for_cap_bytes"] == 22 * GIB + process
    assert verdict["limit_bytes"] == L == run["transit"]["limit_bytes"]
    assert verdict["cap_bytes"] == L + process  # L plus the process's fixed overhead (issue 3)
    assert verdict["within_cap"] is True
    # NVML's device reading (40 GB, the chunks ever touched) stays beside the verdict.
    assert verdict["nvml_device_used_peak_bytes"] == run["result"]["memory"]["peak_bytes_max"] > L
    assert "uvm-probe-h200.json" in verdict["nvml_note"]
    assert "smaps:/dev/nvidia-uvm" in verdict["source"]


def test_transit_verdict_takes_the_worst_rank_and_fails_over_the_cap():
    verdict = collect.memory_for_cap(transit_run("transit-base", [20 * GIB, 25 * GIB]))
    process = POLICIES["runs"]["transit-base"]["result"]["memory"]["per_rank"][0]["nvml_process_peak_bytes"]
    assert verdict["memory_peak_for_cap_bytes"] == 25 * GIB + process
    assert verdict["within_cap"] is False


def test_transit_verdict_without_a_proof_falls_back_to_transit_s_estimate():
    """The bound can only prove compliance; when it does not, TRANSIT's own estimate (from CUPTI's
    migration records) decides between "over" and "not shown"."""
    run = transit_run("transit-base", [20 * GIB, None])
    run["transit"]["resident_peak_bytes"] = 20 * GIB
    verdict = collect.memory_for_cap(run)
    assert verdict["memory_peak_for_cap_bytes"] is None and verdict["within_cap"] is None
    assert verdict["verdict"].startswith("not shown")
    run = transit_run("transit-base", [30 * GIB])  # bound over the cap, estimate under it
    run["transit"]["resident_peak_bytes"] = 20 * GIB
    assert collect.memory_for_cap(run)["within_cap"] is None
    # The committed run predates the monitor, and its estimate peaked 2.95 GB over L: over.
    verdict = collect.memory_for_cap(POLICIES["runs"]["transit-base"])
    assert verdict["within_cap"] is False and verdict["verdict"].startswith("over")
    assert "predates" in verdict["source"]


def test_other_systems_keep_the_nvml_peak():
    native = copy.deepcopy(POLICIES["runs"]["native"])
    assert collect.memory_for_cap(native)["within_cap"] is None  # the policies' native run has no cap
    native["result"]["memory_cap"] = {"cap_bytes": L}
    verdict = collect.memory_for_cap(native)
    assert verdict["memory_peak_for_cap_bytes"] == native["result"]["memory"]["peak_bytes_max"]
    assert verdict["source"] == "nvml peak_bytes_max"
    assert verdict["within_cap"] is False
    assert "nvml_device_used_peak_bytes" not in verdict


def test_policies_summary_and_table(capsys):
    runs = {"native": POLICIES["runs"]["native"], "transit-advise": transit_run("transit-advise", [22 * GIB]),
            "transit-base": transit_run("transit-base", [25 * GIB])}
    summary = collect.summarize_policies(runs)
    assert "nvml_peak_over_limit_bytes" not in summary
    assert summary["memory_vs_cap"]["transit-advise"]["within_cap"] is True
    assert summary["memory_vs_cap"]["transit-base"]["within_cap"] is False
    collect.print_table("policies", runs, summary)
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("transit")}
    assert " yes " in rows["transit-advise"] and " NO " in rows["transit-base"]


def with_timelines(doc: dict) -> dict:
    doc = copy.deepcopy(doc)
    for i, name in enumerate(plots.POLICIES):
        rank = doc["runs"][name]["result"]["memory"]["per_rank"][0]
        # NVML climbs to the chunks ever touched and stays; the bound rises and falls under L.
        rank["device_used_timeline"] = [[0.0, 0, None], [1.0, 20 * GIB, 20 * GIB],
                                        [2.0, 37 * GIB, (21 + i) * GIB], [3.0, 37 * GIB, 18 * GIB]]
    return doc


def test_memory_plot_written_from_timelines(tmp_path):
    source = tmp_path / "policies.json"
    paths = plots.plot_policies_memory(with_timelines(POLICIES), source, tmp_path)
    assert paths == [tmp_path / "policies-memory.png"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_plots_are_named_after_their_result_file(tmp_path):
    source = raw_file("compare-gb64-h200x2.json", tmp_path)
    paths = plots.plot_compare(json.loads(source.read_text()), source, tmp_path)
    assert [p.name for p in paths] == ["compare-gb64-h200x2-tflops.png", "compare-gb64-h200x2-offloaded.png"]
    assert all(p.stat().st_size > 10_000 for p in paths)


def test_warmup_plot_draws_the_runs_with_a_per_iteration_summary(tmp_path, monkeypatch):
    docs = {raw_file(f"warmup-experiments-h200x2/{name}.json", tmp_path): raw_doc(f"warmup-experiments-h200x2/{name}.json")
            for name in ("final", "map", "follow")}
    drawn = []
    monkeypatch.setattr(plots.plt.Axes, "plot",
                        lambda self, x, y, **kw: drawn.append((kw["label"], list(x), list(y))))
    assert plots.plot_warmup(docs, tmp_path) == [tmp_path / "warmup-advise.png"]
    # the follow-correction run was cut in its fourth iteration: no summary, no line
    assert [label for label, _, _ in drawn] == ["final (4f4faf5): 268 TFLOPS", "map (c308203): 106 TFLOPS"]
    assert all(x == list(range(1, 9)) for _, x, _ in drawn)
    # GiB: final's first warm-up peak, map's held iteration 2
    assert round(drawn[0][2][0], 2) == 29.8 and round(drawn[1][2][1], 2) == 25.87
    assert (tmp_path / "warmup-advise.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_warmup_plot_draws_one_figure_per_policy(tmp_path, monkeypatch):
    """Base and prefetch runs get figures of their own beside advise's."""
    docs = {raw_file(f"cap27-experiments/{name}.json", tmp_path): raw_doc(f"cap27-experiments/{name}.json")
            for name in ("advise-final-h200", "base-sweep1-h200x2", "base-final-h200x2", "prefetch-final-h200x2")}
    titles = []
    monkeypatch.setattr(plots.plt.Axes, "set_title", lambda self, title, **kw: titles.append(title))
    paths = plots.plot_warmup(docs, tmp_path)
    assert [p.name for p in paths] == ["warmup-advise.png", "warmup-base.png", "warmup-prefetch.png"]
    assert [t.split()[1] for t in titles] == ["advise", "base", "prefetch"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def test_ticks_plot_draws_each_log_against_L(tmp_path, monkeypatch):
    """TRANSIT_TICK_LOG files from the H200: one panel each, the bound where a tick read it."""
    logs = [raw_file(f"warmup-experiments-h200x2/{name}.ticks.csv", tmp_path) for name in ("sweep-stream", "held")]
    drawn, lines = [], []
    monkeypatch.setattr(plots.plt.Axes, "plot", lambda self, x, y, **kw: drawn.append((list(x), list(y))))
    monkeypatch.setattr(plots.plt.Axes, "axhline", lambda self, y, **kw: lines.append(y))
    monkeypatch.setattr(plots.plt.Axes, "legend", lambda self, **kw: None)  # nothing labelled was drawn
    assert plots.plot_ticks(logs, 27380416512, tmp_path) == [tmp_path / "ticks.png"]
    assert len(drawn) == 2 and lines == [25.5, 25.5]
    # the tick thread's 2 s stalls at the optimizer steps let the bound reach 33 GiB; held stays near L
    assert round(max(drawn[0][1]), 1) == 33.0 and round(max(drawn[1][1]), 1) == 26.4
    assert all(t == sorted(t) for t, _ in drawn)
    assert (tmp_path / "ticks.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ticks_plot_needs_the_limit(capsys):
    with pytest.raises(SystemExit) as exc:
        plots.main(["--ticks", "x.ticks.csv"])
    assert exc.value.code == 2 and "--ticks needs --limit" in capsys.readouterr().err


def test_memory_plot_skipped_without_timelines(tmp_path):
    assert plots.plot_policies_memory(POLICIES, tmp_path / "policies.json", tmp_path) == []
    assert not (tmp_path / "policies-memory.png").exists()


def test_sweep_measures_what_the_device_held_at_the_end():
    """On the H200 policies result: the residency sweep's DtoH records (what moved off the device)
    against TRANSIT's estimate at the last iteration mark."""
    doc = raw_doc("policies-h200.json")
    run = doc["runs"]["transit-base"]
    verdict = collect.memory_for_cap(run)
    dtoh_after = run["transit_stats"][0]["migrations"]["dtoh"]["bytes"]
    assert verdict["device_resident_at_end_by_sweep_bytes"] == (
        dtoh_after - run["result"]["residency_sweep"]["dtoh_bytes_before"])
    assert verdict["transit_estimate_at_end_bytes"] == run["transit_stats"][0]["timeline"][-1]["resident_bytes"]


def test_faults_after_warmup_come_from_the_iteration_marks(tmp_path):
    """The prefetch target is about steady state; the committed H200 run, summarized again."""
    out = tmp_path / "policies.json"
    source = raw_file("policies-h200.json", tmp_path)
    assert collect.main(["policies", "--resummarize", str(source), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    base = doc["runs"]["transit-base"]
    marks = {e["iteration"]: e["gpu_page_faults"] for e in base["transit_stats"][0]["timeline"]}
    warmup = base["result"]["step_time"]["warmup_steps"]
    assert doc["summary"]["gpu_faults_after_warmup"]["transit-base"] == marks[max(marks)] - marks[warmup]
    assert doc["summary"]["prefetch_fault_reduction"]["met"] is False
    # the runs stay; only what is derived from libtransit's stats files is derived again
    before = raw_doc("policies-h200.json")["runs"]
    assert {n: {k: v for k, v in r.items() if k != "transit"} for n, r in doc["runs"].items()} == {
        n: {k: v for k, v in r.items() if k != "transit"} for n, r in before.items()}
    # a run from before the per-iteration bound: its offloaded bytes are the spilled peak
    assert base["transit"]["offloaded_source"] == "memory.spilled_peak_bytes"


def test_offloaded_is_the_managed_peak_less_the_last_bound():
    """The runner's sweep empties the device after the last step: TRANSIT's offloaded bytes come
    from the last iteration's bound, not from the spilled peak the sweep raised."""
    doc = raw_doc("policies-long-h200x2.json")
    stats = doc["runs"]["transit-prefetch"]["transit_stats"][0]
    last_bound = [e["device_bound_peak_bytes"] for e in stats["timeline"] if e["device_bound_peak_bytes"] is not None][-1]
    summary = collect.transit_summary([stats])
    assert summary["offloaded_bytes_per_gpu"] == stats["allocations"]["managed_bytes_peak"] - last_bound
    assert summary["offloaded_bytes_per_gpu"] < stats["memory"]["spilled_peak_bytes"]


def test_resummarize_keeps_the_gpu_test_summary(tmp_path):
    """The junit summary exists only in the device's work directory: summarizing again keeps it."""
    source = raw_file("overhead-shared-h200x2.json", tmp_path)
    out = tmp_path / "overhead-summarized.json"
    assert collect.main(["overhead", "--resummarize", str(source), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["summary"]["gpu_tests"] == json.loads(source.read_text())["summary"]["gpu_tests"]
    assert doc["summary"]["gpu_tests"]["counts"]["passed"] == 16
    assert doc["summary"]["transparency_hf_trainer"]["bitwise_identical"] is True


def test_steady_faults_are_the_median_of_the_last_iterations():
    """Per-iteration faults are differences of the timeline's cumulative counts; steady state is the
    median of the last STEADY_ITERATIONS, so one burst does not decide it."""
    def run(per_iteration: list[int]) -> dict:
        cumulative = [sum(per_iteration[:i]) for i in range(len(per_iteration) + 1)]
        return {"transit_stats": [{"timeline": [{"iteration": i, "gpu_page_faults": c}
                                                for i, c in enumerate(cumulative)]}]}
    base = run([900, 800, 700, 600, 500, 400, 300])
    prefetch = run([900, 50, 40, 10, 20, 5000, 30])
    assert collect.faults_per_iteration(prefetch) == [900, 50, 40, 10, 20, 5000, 30]
    assert collect.faults_steady(base) == 500 and collect.faults_steady(prefetch) == 30
    assert collect.faults_steady(run([1, 2, 3])) is None  # too short to have a steady state
    summary = collect.summarize_policies({"transit-base": base, "transit-prefetch": prefetch})
    assert summary["prefetch_fault_reduction_steady"] == {"value": 1 - 30 / 500, "threshold": 0.95, "met": False}


def test_merge_adds_the_runs_the_first_lacks_names_their_commit_and_refuses_another_kind(tmp_path):
    """Two device commands become one result (policies-h200x2.json was made so); merged_runs says
    which runs came from which command and commit."""
    whole = raw_doc("policies-h200x2.json")
    first, second = copy.deepcopy(whole), copy.deepcopy(whole)
    del first["runs"]["transit-advise"]
    second["runs"] = {n: whole["runs"][n] for n in ("native", "transit-advise")}
    (tmp_path / "first.json").write_text(json.dumps(first))
    (tmp_path / "second.json").write_text(json.dumps(second))
    out = tmp_path / "merged.json"
    assert collect.main(["policies", "--resummarize", str(tmp_path / "first.json"), "--merge",
                         str(tmp_path / "second.json"), "--out", str(out)]) == 0
    merged = json.loads(out.read_text())
    assert merged["runs"] == whole["runs"]  # native kept from the first
    assert merged["merged_runs"][-1] == {"from": "second.json", "git_commit": whole["git_commit"],
                                         "runs": ["transit-advise"], "replaced_status": {}}
    assert merged["summary"]["ordered_base_prefetch_advise"] is True
    p50 = whole["runs"]["transit-advise"]["result"]["step_time"]["p50_s"]
    assert merged["summary"]["step_time_p50_s"]["transit-advise"] == p50
    # A run the first has only as skipped is replaced by the other's completed one; an ok one stays.
    first["runs"]["transit-advise"] = {"name": "transit-advise", "status": "skipped", "reason": "deadline"}
    second["runs"]["native"] = {"name": "native", "status": "skipped"}
    (tmp_path / "first.json").write_text(json.dumps(first))
    (tmp_path / "second.json").write_text(json.dumps(second))
    collect.main(["policies", "--resummarize", str(tmp_path / "first.json"), "--merge",
                  str(tmp_path / "second.json"), "--out", str(out)])
    merged = json.loads(out.read_text())
    assert merged["runs"] == whole["runs"]
    assert merged["merged_runs"][-1]["replaced_status"] == {"transit-advise": "skipped"}
    second["git_commit"] = "0" * 40
    (tmp_path / "second.json").write_text(json.dumps(second))
    collect.main(["policies", "--resummarize", str(tmp_path / "first.json"), "--merge",
                  str(tmp_path / "second.json"), "--out", str(out)])
    assert json.loads(out.read_text())["merged_runs"][-1]["git_commit"] == "0" * 40
    second["kind"] = "compare"
    (tmp_path / "second.json").write_text(json.dumps(second))
    with pytest.raises(SystemExit):
        collect.main(["policies", "--resummarize", str(tmp_path / "first.json"), "--merge",
                      str(tmp_path / "second.json"), "--out", str(out)])


def test_verdict_gives_the_bound_per_iteration():
    """Where in the run the cap was not held: TRANSIT's bound peak per iteration, plus the fixed
    overhead, and whether the last iteration held the cap."""
    run = raw_doc("policies-h200x2.json")["runs"]["transit-advise"]
    verdict = collect.memory_for_cap(run)
    fixed = verdict["cap_bytes"] - verdict["limit_bytes"]
    timeline = run["transit_stats"][0]["timeline"]
    assert verdict["transit_bound_peak_by_iteration_bytes"] == [
        [e["iteration"], e["device_bound_peak_bytes"] + fixed] for e in timeline]
    assert verdict["last_iteration_within_cap"] is True and verdict["within_cap"] is False  # warm-up went over


def test_recorder_pairs_compare_each_pair_and_give_a_confidence_interval(tmp_path):
    """run_recorder_pairs.sh's work directory: pair i is rec-i and norec-i. Real runs (138109c's
    rounds on an H200) as the pairs; a pair without its partner is named, not compared, and the
    burn-in run is neither."""
    rounds = [raw_doc(f"overhead-rounds-h200x2/this{i}.json")["runs"] for i in (1, 2, 3)]
    for i, runs in enumerate(rounds, 1):
        for name, source in ((f"rec-{i}", "transit-base"), (f"norec-{i}", "transit-base-norec")):
            (tmp_path / f"{name}.cmd").write_text(runs[source]["command"])
            (tmp_path / f"{name}.rc").write_text("0")
            (tmp_path / f"{name}.json").write_text(json.dumps(runs[source]["result"]))
    (tmp_path / "rec-4.cmd").write_text("cut short")
    (tmp_path / "rec-4.rc").write_text("124")
    for name in ("burnin-0.cmd", "burnin-0.rc", "burnin-0.json"):  # the unpaired run before the pairs
        (tmp_path / name).write_bytes((tmp_path / name.replace("burnin-0", "norec-1")).read_bytes())
    out = tmp_path / "recorder.json"
    assert collect.main(["recorder", "--work", str(tmp_path), "--out", str(out)]) == 0
    summary = json.loads(out.read_text())["summary"]
    assert summary["transit_warmup_iters"] == 10 and summary["pairs_complete"] == 3
    assert summary["pairs_incomplete"] == ["4"]
    warm = summary["recorder_warmup_over_no_recorder"]
    steps = [(r["transit-base"]["result"]["step_time"]["all_s"], r["transit-base-norec"]["result"]["step_time"]["all_s"])
             for r in rounds]
    assert warm["ratios"] == pytest.approx([collect.statistics.median(a[1:10]) / collect.statistics.median(b[1:10])
                                            for a, b in steps])
    lo, hi = warm["ci95"]
    assert lo < warm["geometric_mean"] < hi
    assert warm["met"] is False  # 0.94-1.11 in three pairs: too wide to show 1.05
    assert summary["median_step_s"]["norec-2"]["after_warmup"] == collect.statistics.median(steps[1][1][10:])
    fastest = summary["recorder_warmup_over_no_recorder_fastest"]
    assert fastest["ratios"] == pytest.approx([min(a[1:10]) / min(b[1:10]) for a, b in steps])
    assert summary["fastest_step_s"]["rec-3"]["warmup"] == min(steps[2][0][1:10])


def test_paired_ratio_is_met_only_when_the_interval_is_within():
    assert collect.paired_ratio([1.01, 1.02, 1.03, 1.02], 1.05)["met"] is True
    wide = collect.paired_ratio([0.95, 1.10, 0.98, 1.12], 1.05)
    assert wide["point_within"] is True and wide["met"] is False
    assert collect.paired_ratio([1.0], 1.05)["ci95"][1] == float("inf")
    assert collect.paired_ratio([], 1.05)["met"] is None


def test_the_median_of_the_ratios_keeps_its_interval_through_an_outlier():
    """17 pairs: the sign test's interval runs from the 5th to the 13th smallest ratio (P(B <= 4)
    = 2.45 % for B ~ Binomial(17, 1/2)); one whole-run slow side (1.25) widens the t interval
    past the target, not the median's."""
    ratios = [1.000 + i / 1000 for i in range(16)] + [1.25]
    assert collect.median_interval(ratios) == [1.004, 1.012]
    result = collect.paired_ratio(ratios, 1.02)
    assert result["median"] == 1.008 and result["median_met"] is True
    assert result["met"] is False
    assert collect.median_interval([1.0] * 5) == [-float("inf"), float("inf")]  # 1/32 > 2.5 %: no interval
    assert collect.median_interval([3.0, 1.0, 2.0, 6.0, 5.0, 4.0]) == [1.0, 6.0]  # 1/64: min to max


def test_pool_adds_another_commands_pairs_renumbered(tmp_path):
    """Pairs of two device commands of the same code pooled: twice the pairs, the same geometric
    mean when both commands measured the same, a narrower interval; the source of each is named."""
    source = raw_file("recorder-pairs-callbacks-off/run6-5e5ab76.json", tmp_path)
    one, out = json.loads(source.read_text()), tmp_path / "pooled.json"
    assert collect.main(["recorder", "--resummarize", str(source), "--pool", str(source), "--out", str(out)]) == 0
    pooled = json.loads(out.read_text())
    assert set(pooled["runs"]) == set(one["runs"]) | {f"{s}-{int(n) + 100}" for s, n in
                                                     (name.rsplit("-", 1) for name in one["runs"])}
    assert pooled["runs"]["rec-101"]["name"] == "rec-101"
    assert pooled["pooled_from"] == [{"from": source.name, "git_commit": one["git_commit"], "pair_offset": 100}]
    key = "recorder_after_warmup_over_no_recorder_fastest"
    single, both = one["summary"][key], pooled["summary"][key]
    assert both["pairs"] == 2 * single["pairs"]
    assert both["geometric_mean"] == pytest.approx(single["geometric_mean"])
    assert both["ci95"][1] - both["ci95"][0] < single["ci95"][1] - single["ci95"][0]
    with pytest.raises(SystemExit):
        collect.main(["policies", "--resummarize", str(source), "--pool", str(source), "--out", str(out)])
