"""The benchmark protocol without a GPU (bench/experiments.py, planning.py, estimates.py, protocol.py,
summary.py): the settle rule and the collection on recorded runs, the plan and its estimates, and
the driver itself on the CPU with the tiny model.

Recorded data: the step times of bench/results/policies-long-h200x2.summary.json and
compare-gb64-27g-final.summary.json (pre-protocol summaries of the raw files of the same names at
2bd697f, H200), and the three rounds of tests/fixtures/bench/overhead-rounds-h200x2--this*.json.gz
(raw results captured on an nvidia-h200-x2 at 138109c: the same two configurations run three times)."""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from bench import __main__ as cli
from bench import estimates, experiments, planning, protocol, summary
from bench.common import NON_ALLOCATOR_MARGIN_BYTES, SettleRule, StepPhases
from tests.unit.test_schemas import check
from transit.errors import UsageError

REPO = Path(__file__).resolve().parents[2]

RESULTS = REPO / "bench/results"


def recorded_steps(name: str) -> dict[str, list[float]]:
    doc = json.loads((RESULTS / name).read_text())
    return {run["system"]: run["step_times_s"] for run in doc["runs"] if run.get("step_times_s")}


LONG = recorded_steps("policies-long-h200x2.summary.json")
CAP27 = recorded_steps("compare-gb64-27g-final.summary.json")


def test_a_flat_run_settles_at_its_first_eligible_step():
    native = LONG["native"]  # 1.82 s from step 1 on
    assert experiments.FRAMEWORK_SETTLE.settled_at(native) == 1
    assert experiments.FRAMEWORK_SETTLE.timed_from(native) == (1, True)
    assert experiments.FRAMEWORK_SETTLE.timed_from(native[:8]) is None  # 7 of the 8 timed steps


def test_a_window_counts_against_its_median():
    # fsdp2 on 2 GPUs: 2.92 is 5.8 % over the first window's median (2.76), 2.89 is 4.7 % over the next's
    steps = CAP27["fsdp2-2gpu"]
    assert steps == pytest.approx([3.94, 2.92, 2.76, 2.74, 2.89, 2.79], abs=0.005)
    assert experiments.FRAMEWORK_SETTLE.settled_at(steps) == 2
    assert experiments.FRAMEWORK_SETTLE.timed_from(steps) is None  # 6 steps recorded: the run goes on


def test_transit_is_not_settled_during_its_profile():
    """advise at 138109c was still speeding up at its last step (6.67, 6.42, 5.91, 5.87 s): no window
    from step 4 on is within 5 %, and its profile steps never count."""
    advise = CAP27["transit-advise"]
    assert experiments.TRANSIT_SETTLE.settled_at(advise) is None
    # steps 1 and 2 (35.55 and 36.47 s, profiling) are within 5 % of each other: only a window of 3 with
    # step 3 (29.45 s) could start there, and TRANSIT's rule starts at step 4 anyway
    assert SettleRule(first=1, window=2).settled_at(advise) == 1
    assert experiments.TRANSIT_SETTLE.first == 4 and experiments.TRANSIT_SETTLE.window == 3


def test_a_run_not_settled_by_the_rule_is_timed_from_its_last_start():
    """prefetch's 24 steps (policies-long): slower again after its profile until step 10, settled
    from step 13 (6.54, 6.25, 6.77 s); under TRANSIT_SETTLE (no start after 6) it is marked not
    settled and timed from step 6, once it has 14 steps."""
    prefetch = LONG["transit-prefetch"]
    assert SettleRule(first=4, max_start=14).settled_at(prefetch) == 13
    rule = experiments.TRANSIT_SETTLE
    assert rule.settled_at(prefetch) is None
    assert rule.timed_from(prefetch[:13]) is None
    assert rule.timed_from(prefetch[:14]) == (6, False)
    assert rule.max_steps == 14


def test_step_stats_time_the_rules_steps():
    from bench.common import step_stats

    stats = step_stats(LONG["native"], warmup=3, settle=experiments.FRAMEWORK_SETTLE)
    assert stats["warmup_steps"] == 1 and stats["measured_steps"] == 8
    assert stats["p50_s"] == statistics.median(LONG["native"][1:9])
    assert stats["settle"]["settled"] is True and stats["settle"]["timed"] == 8


def rounds() -> list[dict]:
    return [json.loads(gzip.decompress((REPO / f"tests/fixtures/bench/overhead-rounds-h200x2--this{i}.json.gz")
                                       .read_bytes()))["runs"] for i in (1, 2, 3)]


def test_collection_of_three_recorded_repeats():
    """Three real repeats of TRANSIT base and of base without its recorder (model small, global batch
    8, one H200 each): per run the rule's timed steps, TFLOPS from their median; per system the
    median, min and max over the repeats, and the losses checked against the reference's same repeat."""
    ref = experiments.System("transit-base-norec", "transit", 1, 8, 8, policy="base", model="small")
    base = experiments.System("transit-base", "transit", 1, 8, 8, policy="base", reference="transit-base-norec",
                              model="small")
    records, expected = [], []
    for repeat, runs in enumerate(rounds(), 1):
        for system in (ref, base):
            result = runs[system.name]["result"]
            record = {"id": f"{system.name}.r{repeat}", "system": system.name, "repeat": repeat, "role": "timed",
                      "status": "ok"} | summary.compact_result(result, system.settle)
            records.append(record)
            if system is base:
                times = result["step_time"]["all_s"]
                start, _ = system.settle.timed_from(times)
                expected.append(result["flops_per_step"] / statistics.median(times[start:start + 8]) / 1e12)
    # round 2's steps 5-7 (0.130, 0.123, 0.124 s) are just over 5 % apart: not settled, timed from step 6
    assert [(r["timed_from"], r["settled"]) for r in records if r["system"] == "transit-base"] == [
        (5, True), (6, False), (5, True)]
    rows = {row["name"]: row for row in summary.summarize_systems((ref, base), records)}
    row = rows["transit-base"]
    assert row["tflops_per_gpu"] == {"median": statistics.median(expected), "min": min(expected),
                                     "max": max(expected), "n": 3}
    assert row["repeats_ok"] == 3 and row["settled"] == [True, False, True]
    checks = row["losses"]["checks"]
    assert [c["against"] for c in checks] == ["transit-base-norec.r1", "transit-base-norec.r2", "transit-base-norec.r3"]
    # not deterministic: the same first loss, then apart (at most 0.036, 0.083 and 0.033 over the 60 steps)
    assert row["losses"]["all_bitwise_equal"] is False and [c["steps"] for c in checks] == [60, 60, 60]
    assert [round(c["max_abs_diff"], 3) for c in checks] == [0.036, 0.083, 0.033]
    last = [abs(r["losses"][-1] - ref_r["losses"][-1]) for r, ref_r in zip(
        [r for r in records if r["system"] == "transit-base"], [r for r in records if r["system"] == "transit-base-norec"])]
    assert [c["last_abs_diff"] for c in checks] == last and all(d <= m for d, m in zip(last, [0.036, 0.083, 0.033]))
    # without a reference, the repeats are checked against the first
    assert rows["transit-base-norec"]["losses"]["reference"] == "transit-base-norec.r1 (repeatability)"


def test_pcie_bytes_per_timed_step_from_the_cumulative_counters():
    counters = {"rx_bytes": [100, 200, 400, 700, 1100], "tx_bytes": [0, 10, 20, 30, 40], "error": None, "samples": 9}
    assert summary.pcie_per_step(counters, first=1, n=3) == {"rx": (1100 - 200) / 3, "tx": (40 - 10) / 3}
    # read only after each step (before the counters were summed in a thread): no byte count. These
    # are native's TX readings on 4 emulated nodes (scale-in-4to2-gb8's raw r1): 32-bit, wrapping
    wrapped = {"tx_bytes": [4125269248, 4088445628, 4120694648, 73111968, 298475136], "rx_bytes": [0] * 5,
               "error": None}
    assert summary.pcie_per_step(wrapped, first=1, n=3) == {"error": summary.PCIE_READ_PER_STEP}
    assert summary.pcie_per_step(counters, first=2, n=3) == {"error": "not recorded"}  # past the last reading
    assert summary.pcie_per_step({"error": "NVML return 3"}, 1, 3) == {"error": "NVML return 3"}
    assert summary.pcie_per_step(None, 1, 3) is None


def test_calibration_takes_the_overshoot_off_l():
    system = experiments.System("transit-advise-gb64", "transit", 1, 64, cap="27G", policy="advise")
    experiment = experiments.Experiment("x", "test", "nvidia-h200", (system,))
    l0 = 27 * 2**30 - NON_ALLOCATOR_MARGIN_BYTES
    calibration = {"system": system.name, "role": "calibration", "status": "ok",
                   "transit": {"overshoot_bytes": 195_695_624}}  # advise-final's bound peak over its L
    limits = protocol.calibrated_limits(experiment, [calibration], {})
    assert limits == {system.name: (l0 - 195_695_624) // 2**20 * 2**20}
    assert protocol.calibrated_limits(experiment, [calibration], {system.name: 123}) == {system.name: 123}


def test_plan_puts_calibrations_first_and_alternates():
    experiment = experiments.EXPERIMENTS["claim-b-gb8"]
    runs = planning.plan(experiment)
    assert runs[0].id == "transit-hybrid-gb8-mb4.calibration"
    names = [r.system.name for r in runs[1:]]
    assert names == [s.name for s in experiment.systems] * 3
    assert [r.repeat for r in runs[1:4]] == [1, 1, 1]


def test_every_experiment_runs_on_one_gpu_and_times_fast_kernels():
    """Issue 54 item 1: one GPU for every experiment, but issue 61's scale-in on GPUs of their own."""
    for experiment in experiments.EXPERIMENTS.values():
        if experiment.claim.startswith("issue 61"):
            assert experiments.MACHINES[experiment.machine] > 1, experiment.name
            continue
        assert experiment.machine in ("nvidia-h200", "nvidia-h100-x1")
        assert all(s.gpus == 1 for s in experiment.systems)
        assert experiment.correctness or not any(s.deterministic for s in experiment.systems), experiment.name
    two_gpus = experiments.System("two", "fsdp2", 2, 8)
    with pytest.raises(ValueError, match="x: two needs 2 GPUs; nvidia-h200 has 1"):
        experiments.Experiment("x", "test", "nvidia-h200", (two_gpus,)).check()
    exact = experiments.System("exact", "fsdp2", 1, 8, deterministic=True)
    with pytest.raises(ValueError, match="x: exact is deterministic; timings never are"):
        experiments.Experiment("x", "test", "nvidia-h200", (exact,)).check()


def test_the_runs_go_one_after_another():
    a = experiments.System("a", "transit", 1, 8, cap="27G", policy="advise")
    b = experiments.System("b", "fsdp2", 1, 8)
    experiment = experiments.Experiment("x", "test", "nvidia-h200", (a, b), repeats=2)
    times = {"a": 100.0, "b": 30.0}
    placements = planning.schedule(planning.plan(experiment),
                                   lambda run: 40.0 if run.repeat == 0 else times[run.system.name])
    assert [(p.run.id, p.start, p.end) for p in placements] == [
        ("a.calibration", 0, 40), ("a.r1", 40, 140), ("b.r1", 140, 170), ("a.r2", 170, 270), ("b.r2", 270, 300)]


def recorded_seconds():
    history = estimates.recorded_runs()
    return lambda run: estimates.estimate_run(run.system, history, run.repeat)[0]


def test_parts_fit_one_device_command():
    experiment = experiments.EXPERIMENTS["transit-1gpu-advise-gb64"]
    seconds = recorded_seconds()
    parts = planning.split_parts(planning.plan(experiment), seconds)
    assert len(parts) > 1 and [run for part in parts for run in part] == planning.plan(experiment)
    limit = planning.COMMAND_LIMIT_S - planning.PART_MARGIN_S
    assert all(planning.makespan(part, seconds) <= limit for part in parts)


def test_every_experiment_fits_its_device_time():
    seconds = recorded_seconds()
    for experiment in experiments.EXPERIMENTS.values():
        parts = planning.split_parts(planning.plan(experiment), seconds)
        total = sum(planning.SETUP_S + planning.makespan(part, seconds) for part in parts)
        assert total <= planning.EXPERIMENT_BUDGET_S, (experiment.name, total)


def test_estimates_name_the_recorded_run_they_scale():
    history = estimates.recorded_runs()
    seconds, basis = estimates.estimate_run(experiments.System("fsdp2-1gpu-gb64", "fsdp2", 1, 64), history)
    # the nearest: no deterministic one-GPU native run at 64; FSDP2 on 2 GPUs over NVLink, per GPU twice the work
    assert basis.startswith("compare-gb64-27g-final.summary.json fsdp2-2gpu (bench, 2 GPU(s), global batch 64")
    steps = CAP27["fsdp2-2gpu"]
    scaled = [steps[0]] + [2 * t for t in steps[1:]]
    # 18 s of start, and the rule stops at step 10 (settled at 2): the recorded 6 steps, 4 at their median
    assert seconds == pytest.approx(estimates.RUN_OVERHEAD_S["fsdp2"] + sum(scaled)
                                    + 4 * statistics.median(scaled[1:]))
    _, basis = estimates.estimate_run(experiments.System("z", "zenflow", 1, 64, 8), history)
    assert "zero-offload stands in" in basis
    # TRANSIT hybrid on the small model on 2 emulated nodes: recorded by the emulated scale-in
    _, basis = estimates.estimate_run(experiments.System("t", "transit", 1, 8, 2, cap="5.5G", policy="hybrid",
                                                         model="small", nodes=2), history)
    assert basis.startswith("scale-in-4to2-gb8.json transit-hybrid-2node-gb8 (small, 1 GPU(s), 2 emulated nodes")
    # prefetch on the small model, never recorded: the small model's native steps on 2 emulated nodes
    # (the 2 -> 1 scale-in's native runs) times prefetch's steps over native's on the bench model
    _, basis = estimates.estimate_run(experiments.System("t", "transit", 1, 8, 2, cap="5.5G", policy="prefetch",
                                                         model="small", nodes=2), history)
    assert basis.startswith("compare-gb8-h200x2.summary.json transit-prefetch (bench, 1 GPU(s), global batch 8")
    assert "native small 1.10 s a step (scale-in-2to1-gb8.json fsdp2-2node-gb8 (small, 1 GPU(s), 2 emulated" in basis


def test_plan_prints_every_experiments_runs_and_device_time(capsys):
    for name in experiments.EXPERIMENTS:
        assert cli.main(["plan", name, "--cores", "32"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"{name}: ") and "estimated device time: " in out and "; fits 30 minutes" in out
        assert f"command: python3 -m bench run {name}" in out


def test_claim_b_takes_each_systems_best_micro_batch_from_the_search(tmp_path):
    rows = [{"name": "zero-offload-gb64-mb4", "micro_batch": 4, "global_batch": 64, "tflops_per_gpu": {"median": 200.0}},
            {"name": "zero-offload-gb64-mb8", "micro_batch": 8, "global_batch": 64, "tflops_per_gpu": {"median": 250.0}},
            {"name": "zero-offload-gb64-mb16", "micro_batch": 16, "global_batch": 64,
             "tflops_per_gpu": {"median": None}},  # OOM
            {"name": "zero-offload-gb8-mb4", "micro_batch": 4, "global_batch": 8, "tflops_per_gpu": {"median": 300.0}},
            {"name": "transit-hybrid-gb64-mb2", "micro_batch": 2, "global_batch": 64, "tflops_per_gpu": {"median": 210.0}},
            {"name": "zero-infinity-gb64-mb16", "micro_batch": 16, "global_batch": 64,
             "tflops_per_gpu": {"median": 190.0}}]
    search = tmp_path / "claim-b-search.json"
    search.write_text(json.dumps({"experiment": "claim-b-search-gb64-zero-offload", "systems": rows}))
    assert experiments.best_micro_batches([search], 64) == {"zero-offload": 8, "transit-hybrid": 2,
                                                            "zero-infinity": 16}
    args = argparse.Namespace(experiment="claim-b-gb64-10cores", search_summary=[search], model=experiments.MODEL)
    experiment = experiments.resolve(args)
    assert [s.name for s in experiment.systems] == ["transit-hybrid-gb64-mb2-10cores", "zero-offload-gb64-mb8-10cores",
                                                    "zero-infinity-gb64-mb16-10cores"]
    args.experiment = "claim-b-more-gb64"
    with pytest.raises(UsageError, match="no completed search run of transit-advise, zenflow at global batch 64"):
        experiments.resolve(args)


def test_the_plan_as_json_and_a_bad_part_in_one_line(capsys, tmp_path):
    assert cli.main(["plan", "transit-1gpu-advise-gb64", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "transit.bench-plan/1" and doc["fits"] and len(doc["parts"]) == 2
    assert doc["parts"][1]["command"].startswith("python3 -m bench run transit-1gpu-advise-gb64 --part 2/2 ")
    assert doc["estimated_s"] == sum(part["seconds"] for part in doc["parts"])
    assert cli.main(["run", "transit-1gpu-advise-gb64", "--part", "3/2", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "python -m bench: --part '3/2': this plan has 2 part(s) (K/2, K from 1)\n"
    # no command limit: one command
    assert cli.main(["plan", "transit-1gpu-advise-gb64", "--json", "--command-limit", "0"]) == 0
    assert len(json.loads(capsys.readouterr().out)["parts"]) == 1


def test_a_time_limit_stops_runs_only_at_its_deadline():
    run = planning.Run(experiments.System("a", "fsdp2", 1, 8), 1)
    by_part = planning.budget(lambda r: 200.0, 1, None, 0.0)
    assert by_part.need(run) == 200.0 and by_part.stop_after(run) == 400.0
    assert by_part.deadline == planning.COMMAND_LIMIT_S - planning.SETUP_S - planning.PART_MARGIN_S / 2
    limited = planning.budget(lambda r: 200.0, 0, 1800.0, 0.0)
    assert limited.need(run) == planning.RUN_START_MIN_S and limited.stop_after(run) == float("inf")


def test_merge_refuses_parts_of_two_commits(tmp_path):
    experiment = experiments.EXPERIMENTS["controls-1gpu"]
    files = []
    for k, commit in ((1, "aaaa"), (2, "bbbb")):
        doc = summary.summary_doc(experiment, [], [k], 2, {"device_time_s": {"estimated": 300, "actual": 280}})
        doc["git_commits"] = [commit]
        files.append(tmp_path / f"part{k}.json")
        files[-1].write_text(json.dumps(doc))
    with pytest.raises(UsageError, match="the parts ran at aaaa, bbbb; one experiment runs at one commit"):
        summary.merge(experiment, files, 2, tmp_path / "out.json")


def test_the_driver_runs_an_experiment_on_the_cpu(tmp_path):
    """The whole driver with the tiny model on the CPU (gloo): two systems alternating (two repeats
    here, to keep the test short), their summary and the raw archive."""
    pytest.importorskip("torch")
    a = experiments.System("tiny-a", "fsdp2", 1, 2, 1, model="tiny")
    b = experiments.System("tiny-b", "fsdp2", 1, 2, 2, model="tiny", reference="tiny-a")
    experiment = experiments.Experiment("cpu-smoke", "the driver on a CPU", "nvidia-h200", (a, b), repeats=2)
    args = argparse.Namespace(work=tmp_path / "work", out=tmp_path / "out", transit_profile=False, time_limit=None,
                              command_limit=planning.COMMAND_LIMIT_S)
    assert protocol.execute(experiment, planning.plan(experiment), 0, 0, args, {}, lambda run: 120.0) == 0
    doc = json.loads((tmp_path / "out/cpu-smoke.json").read_text())
    assert doc["schema"] == "transit.bench-summary/1" and doc["complete"] is True
    assert [r["id"] for r in doc["runs"]] == ["tiny-a.r1", "tiny-b.r1", "tiny-a.r2", "tiny-b.r2"]
    assert all(r["status"] == "ok" for r in doc["runs"]), [r.get("log_tail") for r in doc["runs"]]
    starts = [r["start_unix"] for r in doc["runs"]]
    assert starts == sorted(starts)
    for run in doc["runs"]:
        assert run["timed_steps"] == 8 and len(run["step_times_s"]) in range(9, 15)
    row = {r["name"]: r for r in doc["systems"]}["tiny-b"]
    assert row["repeats_ok"] == 2 and row["tflops_per_gpu"]["n"] == 2 and row["micro_batch"] == 2
    # the same rows in the same order: micro-batch 2 against 1 x 2 accumulated
    assert row["losses"]["checks"][0]["against"] == "tiny-a.r1" and row["losses"]["checks"][0]["steps"] >= 9
    assert (tmp_path / "out/cpu-smoke-raw.tar.gz").stat().st_size > 1000
    check(doc)
    with tarfile.open(tmp_path / "out/cpu-smoke-raw.tar.gz") as raw:
        results = [json.load(raw.extractfile(m)) for m in raw.getmembers() if m.name.endswith("/result.json")]
    assert len(results) == 4
    for result in results:
        check(result)
    assert all(run["estimated_s"] == 120.0 for run in doc["runs"])
    assert doc["device_time_s"]["estimated"] == planning.SETUP_S + 4 * 120
    assert 0 < doc["device_time_s"]["actual"] - planning.SETUP_S <= sum(r["elapsed_s"] for r in doc["runs"]) + 5


def test_step_phases_sum_each_part_per_step_and_take_the_timed_steps_median():
    """Two micro-batches' forward and backward spans add up within their step; the median is over
    the steps step_stats timed (here steps 1 and 2 of 3)."""
    import time

    import torch

    phases = StepPhases(torch.device("cpu"))
    waits = {"forward": 0.002, "backward": 0.004, "optimizer": 0.001}
    for step in range(3):
        phases.begin_step()
        for _ in range(2):
            for part in ("forward", "backward"):
                with phases.span(part):
                    time.sleep(waits[part] * (step + 1))
        with phases.span("optimizer"):
            time.sleep(waits["optimizer"] * (step + 1))
    doc = phases.as_dict(first=1, count=2)
    assert list(doc["all_s"]) == ["forward", "backward", "optimizer"]
    for part, wait in waits.items():
        spans = 1 if part == "optimizer" else 2
        per_step = doc["all_s"][part]
        assert len(per_step) == 3
        assert all(s >= spans * wait * (i + 1) for i, s in enumerate(per_step)), (part, per_step)
        assert doc["p50_s"][part] == statistics.median(per_step[1:3])


def test_nodes_runs_every_system_on_emulated_nodes_or_refuses_in_one_line(capsys):
    assert cli.main(["plan", "controls-1gpu", "--nodes", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {(s["emulated_nodes"], s["ranks"], s["transport"]) for s in doc["systems"]} == {
        (2, 2, "sockets on lo (emulated nodes)")}
    experiment = experiments.resolve(argparse.Namespace(experiment="controls-1gpu", search_summary=None,
                                                     model=experiments.MODEL, nodes=2))
    assert experiment.note.endswith("--nodes 2: every system on 2 emulated nodes")
    assert cli.main(["plan", "controls-1gpu", "--nodes", "3"]) == 2
    assert capsys.readouterr().err == ("python -m bench plan: fsdp2-1gpu-gb8: global batch 8 is not a multiple "
                                       "of 4 x 3 ranks\n")
    with pytest.raises(SystemExit) as bad:
        cli.main(["plan", "controls-1gpu", "--nodes", "0"])
    assert bad.value.code == 2
    assert capsys.readouterr().err == ("python -m bench plan: argument --nodes: --nodes '0': expected a whole "
                                       "number from 1 to 64 (see python -m bench plan --help)\n")


def test_zenflows_losses_are_compared_with_exact_adamw_in_the_same_repeat():
    """ZenFlow changes the update: its summary row says how far its losses end from ZeRO-Offload's."""
    for name in ("claim-b-more-gb8", "claim-b-more-gb64-10cores"):
        systems = {s.kind: s for s in experiments.EXPERIMENTS[name].systems}
        assert systems["zenflow"].reference == systems["zero-offload"].name
        assert systems["zero-offload"].reference is None and systems["transit"].reference is None
    assert all(s.reference is None for s in experiments.EXPERIMENTS["claim-b-gb8"].systems)  # no ZenFlow there


def test_libtransit_not_built_is_one_line_not_a_traceback(monkeypatch, capsys):
    """The caps are sizes in libtransit's grammar: on a fresh clone `plan` says how to build it."""
    from transit import _native
    from transit.errors import UsageError

    def not_built(text: str) -> int:
        raise UsageError("libtransit is not built: transit/lib/libtransit.so is missing")

    monkeypatch.setattr(_native, "parse_size", not_built)
    assert cli.main(["plan", "claim-b-gb8"]) == 2
    err = capsys.readouterr().err
    assert err == "python -m bench: libtransit is not built: transit/lib/libtransit.so is missing\n"


def test_a_system_of_several_gpus_runs_one_rank_on_each_of_its_first_gpus(monkeypatch):
    """Issue 61's shapes: torchrun with a rank per GPU, on the first GPUs CUDA_VISIBLE_DEVICES leaves."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,2,1,0")
    host = experiments.EXPERIMENTS["scale-in-4to2-gb8-gpus"].systems[1]
    argv, env = protocol.run_command(host, host.settle, Path("/tmp/r"), 4 << 30, False)
    assert argv[argv.index("--nproc-per-node") + 1] == "2" and env["CUDA_VISIBLE_DEVICES"] == "3,2"
    assert "torch.distributed.run" in argv and argv[:4] == [sys.executable, "-m", "transit", "run"]


def test_the_driver_runs_emulated_nodes_of_their_own_gpus_on_the_cpu(tmp_path):
    """Issue 61's sockets case with the tiny model on the CPU (gloo): 2 emulated nodes with P2P and
    shared memory off, the NCCL bytes per node read from lo. (Two ranks of one torchrun on the CPU
    abort now and then at exit, in gloo's teardown: not run here.)"""
    pytest.importorskip("torch")
    nodes = experiments.System("tiny-2node", "fsdp2", 2, 4, 1, model="tiny", nodes=2, env=experiments.SOCKETS_ENV)
    experiment = experiments.Experiment("cpu-2gpu", "two ranks on a CPU", "nvidia-h100-x2", (nodes,), repeats=1)
    experiment.check()
    args = argparse.Namespace(work=tmp_path / "work", out=tmp_path / "out", transit_profile=False, time_limit=None,
                              command_limit=planning.COMMAND_LIMIT_S)
    assert protocol.execute(experiment, planning.plan(experiment), 0, 0, args, {}, lambda run: 120.0) == 0
    doc = json.loads((tmp_path / "out/cpu-2gpu.json").read_text())
    assert all(r["status"] == "ok" for r in doc["runs"]), [r.get("log_tail") for r in doc["runs"]]
    (row,) = doc["systems"]
    assert row["ranks"] == 2 and row["transport"] == "sockets on lo (emulated nodes)"
    assert row["nccl_bytes_per_node_per_step"]["median"] > 0
    assert doc["protocol"]["gpu"].startswith("2 GPUs of one host")
    check(doc)


def test_emulated_ranks_spread_evenly_over_their_gpus():
    odd = experiments.System("odd", "fsdp2", 2, 6, 1, model="small", nodes=3)
    with pytest.raises(ValueError, match="3 emulated ranks do not spread evenly over 2 GPUs"):
        odd.check()


def test_a_run_on_a_machine_with_too_few_gpus_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(protocol, "free_gpu_memory", lambda: {0: 80 << 30})
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(UsageError, match=r"scale-in-4to2-gb8-gpus needs 4 GPUs \(nvidia-h100-x4\); this machine "
                                         r"lets it use 1 \(CUDA_VISIBLE_DEVICES=unset\)"):
        protocol.check_gpus(experiments.EXPERIMENTS["scale-in-4to2-gb8-gpus"])
    protocol.check_gpus(experiments.EXPERIMENTS["scale-in-4to2-gb8"])  # one GPU is enough


@pytest.mark.parametrize(("args", "line"), [
    (["plan", "scale-in-4to2-gb6"],
     ("python -m bench plan: argument EXPERIMENT: no experiment 'scale-in-4to2-gb6' (closest: scale-in-4to2-gb8, "
      "scale-in-2to1-gb8, scale-in-4to2-gb8-gpus; `python -m bench list` names them all) (see python -m bench plan "
      "--help)")),
    (["merge", "nonsense", "part.json", "--out", "x.json"],
     ("python -m bench merge: argument EXPERIMENT: no experiment 'nonsense' (`python -m bench list` names them all) "
      "(see python -m bench merge --help)")),
    (["plan", "transit-2rank", "--model", "huge"],
     ("python -m bench plan: argument --model: invalid choice: 'huge' (choose from 'tiny', 'mini', 'small', 'bench') "
     "(see python -m bench plan --help)")),
    (["plan", "transit-2rank", "--command-limit", "-5"],
     ("python -m bench plan: argument --command-limit: '-5': give a number of seconds from 0 (see python -m "
     "bench plan --help)")),
    (["plan", "transit-2rank", "--cores", "0"],
     ("python -m bench plan: argument --cores: --cores '0': expected a whole number from 1 to 4096 (see python "
     "-m bench plan --help)")),
    (["plan", "claim-b-gb8", "--search-summary", "missing.json"],
     ("python -m bench plan: argument --search-summary: 'missing.json' cannot be read: No such file or directory "
     "(see python -m bench plan --help)")),
    (["plan", "claim-b-gb8", "--search-summary", "tests/fixtures/stats/rank-example.json"],
     ("python -m bench: --search-summary tests/fixtures/stats/rank-example.json: not a claim (b) micro-batch "
     "search's summary")),
    (["run", "transit-2rank", "--model", "tiny", "--out", "bench/README.md/out"],
     ("python -m bench run: argument --out: 'bench/README.md/out' cannot be written: bench/README.md is not a "
     "directory (see python -m bench run --help)")),
    (["run", "transit-2rank", "--model", "tiny", "--out", "out", "--work", "bench/README.md/work"],
     ("python -m bench run: argument --work: 'bench/README.md/work' cannot be written: bench/README.md is not a "
     "directory (see python -m bench run --help)")),
    (["run", "transit-2rank", "--model", "tiny", "--out", "out", "--time-limit", "nan"],
     ("python -m bench run: argument --time-limit: 'nan': give a number of seconds from 60 (see python -m bench "
     "run --help)")),
    (["run", "transit-2rank", "--model", "tiny", "--out", "out", "--limit", "x=12Q"],
     "python -m bench: --limit 'x=12Q': give NAME=VALUE, VALUE a int"),
    (["merge", "transit-2rank", "tests", "--out", "m.json"],
     ("python -m bench merge: argument PART_JSON: 'tests' is a directory; give a file (see python -m bench merge "
     "--help)")),
    (["merge", "transit-2rank", "tests/fixtures/sim/all_too_big.json", "--out", "m.json"],
     ("python -m bench: --merge tests/fixtures/sim/all_too_big.json: not a transit.bench-summary/1 part of "
     "transit-2rank")),
    (["table", "--check", "missing.md"],
     ("python -m bench table: argument --check: 'missing.md' cannot be read: No such file or directory "
     "(see python -m bench table --help)")),
    (["table", "--only", "missing"],
     (f"python -m bench: --only 'missing': no summary {REPO}/bench/results/missing.json; give file names of "
     "bench/results without .json")),
])
def test_bad_input_is_one_line_and_runs_nothing(tmp_path, args: list[str], line: str) -> None:
    """Before: tracebacks (an unknown model, a missing or directory file, an unwritable work directory),
    negative limits taken as given, and the --part and --limit messages with exit code 1."""
    r = subprocess.run([sys.executable, "-m", "bench", *args], cwd=REPO, capture_output=True, text=True,
                       timeout=120, check=False)
    assert (r.returncode, r.stdout, r.stderr.splitlines()) == (2, "", [line])
    assert not (REPO / "out").exists() and not (REPO / "m.json").exists()


def test_a_closed_pipe_ends_the_listing_quietly() -> None:
    r = subprocess.run(f"{sys.executable} -m bench list | true", shell=True, cwd=REPO, capture_output=True,
                       text=True, timeout=120, check=False)
    assert r.stderr == ""


def test_a_run_refuses_a_tree_that_is_not_at_its_commit(tmp_path, monkeypatch):
    """One commit per summary: a tree whose tracked files differ from HEAD (local edits, or a copy
    under a stale .git) is refused unless BENCH_GIT_COMMIT names its commit."""
    from bench.common import check_tree_commit

    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "train.py").write_text("steps = 6\n")
    subprocess.run([*git, "add", "train.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    monkeypatch.delenv("BENCH_GIT_COMMIT", raising=False)
    check_tree_commit(tmp_path)
    (tmp_path / "train.py").write_text("steps = 7\n")
    with pytest.raises(UsageError, match=r"^1 tracked files differ from git's HEAD [0-9a-f]{7} \(train.py, \.\.\.\): "
                                         r"commit them, or set BENCH_GIT_COMMIT="):
        check_tree_commit(tmp_path)
    monkeypatch.setenv("BENCH_GIT_COMMIT", "0123456")
    check_tree_commit(tmp_path)
