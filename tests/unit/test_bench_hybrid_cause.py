"""Issue 55's device experiments on the CPU: the readings' arithmetic (PCIe wraps, the summary's
GPU readings and canary), the experiments' plans, and the E3 probe's argument handling."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import __main__ as cli
from bench import estimates, experiments, planning, protocol, summary
from bench.common import SettleRule, clock_event_names
from transit.bench_link import PCIE_COUNTER_WRAP, pcie_counter_delta

ROOT = Path(__file__).resolve().parents[2]
CAUSE = ("hybrid-cause-e1", "hybrid-cause-e2a", "hybrid-cause-e2b")


def test_a_pcie_counter_that_wrapped_counts_the_bytes_across_the_wrap():
    assert pcie_counter_delta(100, 350) == 250
    assert pcie_counter_delta(PCIE_COUNTER_WRAP - 100, 50) == 150


def test_clock_event_reasons_are_named_and_unknown_bits_kept():
    assert clock_event_names(0x1 | 0x4 | 0x40) == ["gpu_idle", "sw_power_cap", "hw_thermal"]
    assert clock_event_names(0x1000) == ["0x1000"]


def test_the_summary_splits_pcie_bytes_at_the_optimizer_and_takes_the_timed_canary():
    # 3 steps; steps 1-2 timed. Cumulative counters before step 0 and after each step; marks at
    # each step's start (after the canary) and before its optimizer.
    clocks = {"sm_clock_mhz": [1980, 1755, 1980], "mem_clock_mhz": [2619, 2619, 2619], "power_w": [300.0, 690.5, 650.0],
              "clocks_event_reasons": [0x0, 0x4, 0x1],
              "pcie_counters": {"tx_bytes": [0, 10, 30, 60], "rx_bytes": [0, 100, 300, 600], "error": None,
                                "marks_tx_rx": {"start": [[0, 0], [12, 105], [31, 310]],
                                                "optimizer": [[4, 40], [20, 200], [41, 410]]}}}
    readings = summary.gpu_readings(clocks, 1, 2)
    assert readings["sm_clock_mhz_min"] == 1755 and readings["power_w_max"] == 690.5
    assert readings["slowing_reasons_seen"] == ["sw_power_cap"]
    assert readings["clock_event_reasons_seen"] == ["gpu_idle", "sw_power_cap"]
    steps = readings["pcie_bytes_each_step"]
    assert steps["rx"] == [100, 195, 290]  # from each step's start: the canary's bytes left out
    assert steps["rx_before_optimizer"] == [40, 95, 100] and steps["rx_optimizer"] == [60, 100, 190]
    canary = {"before_step0": {"gemm_ms": 4.0, "copy_ms": 0.8},
              "per_step": [{"gemm_ms": 9.0, "copy_ms": 2.0, "gemm_host_bytes": 0, "copy_host_bytes": 0},
                           {"gemm_ms": 4.2, "copy_ms": 0.9, "gemm_host_bytes": 0, "copy_host_bytes": 2 << 20},
                           {"gemm_ms": 4.4, "copy_ms": 1.1, "gemm_host_bytes": 0, "copy_host_bytes": 0}]}
    medians = summary.canary_summary(canary, 1, 2)
    assert medians["gemm_ms_median"] == pytest.approx(4.3) and medians["copy_ms_median"] == pytest.approx(1.0)
    assert medians["copy_host_bytes_each_step"] == [0, 2 << 20, 0]
    row = summary.gpu_row([{"gpu_readings": readings, "canary": medians}])
    assert row["canary_gemm_ms"] == pytest.approx(4.3) and row["canary_before_step0_gemm_ms"] == 4.0
    assert row["sm_clock_mhz_min"] == 1755 and row["slowing_reasons_seen"] == ["sw_power_cap"]


def test_the_summary_keeps_each_steps_host_set():
    step = {"params": {"host_bytes": 0, "bytes": 4 << 20}, "optimizer": {"host_bytes": 8 << 20, "bytes": 8 << 20},
            "other_host_bytes": 2 << 20}
    result = {"step_time": {"all_s": [2.0, 1.0], "warmup_steps": 1}, "config": {"tokens_per_step": 8, "world_size": 1},
              "flops_per_step": 10, "host_by_state_each_step_rank0": [step, step]}
    assert summary.compact_result(result, None)["host_bytes_by_state_each_step"] == [step, step]


def test_the_cause_experiments_run_ten_steps_at_fixed_l_with_the_readings():
    for name in CAUSE:
        experiment = experiments.EXPERIMENTS[name]
        assert not any(run.calibrated for run in planning.plan(experiment)), name
        for system in experiment.systems:
            assert system.settle == SettleRule(first=5, max_start=5, timed=5) and system.settle.max_steps == 10
            assert (system.global_batch, system.local_batch) == (8, 8)
            argv, env = protocol.run_command(system, system.settle, Path("/tmp/r"), system.mem_limit_bytes, False)
            assert {"--canary", "--pcie-split", "--host-set"} <= set(argv) and "--deterministic" not in argv
            if system.policy == "hybrid":
                assert env["TRANSIT_HYBRID_GUARD"] == "0"
            if system.transit:
                assert argv[argv.index("--mem-limit") + 1] == str(system.mem_limit_bytes)
    limits = {s.name: s.mem_limit for name in CAUSE for s in experiments.EXPERIMENTS[name].systems}
    assert limits == {"transit-hybrid-e1": "25.5G", "fsdp2-e1": None, "transit-advise-e2": "25.5G",
                      "transit-hybrid-moments-e2": "28.5G"}


def test_the_guard_experiments_keep_the_guard_on_and_time_hybrid_after_it():
    for name in ("hybrid-guard-gb64-mb8", "hybrid-guard-gb8-mb8", "hybrid-guard-2node"):
        hybrid, advise = experiments.EXPERIMENTS[name].systems
        assert hybrid.policy == "hybrid" and not hybrid.env and hybrid.settle.first == 16
        assert advise.policy == "advise" and advise.settle == experiments.TRANSIT_SETTLE
        assert hybrid.mem_limit == advise.mem_limit
    two = experiments.EXPERIMENTS["hybrid-guard-2node"].systems[0]
    assert (two.nodes, two.global_batch, two.local_batch, two.mem_limit) == (2, 8, 4, "14.5G")


def test_a_fixed_l_is_transits_alone():
    with pytest.raises(ValueError, match="x: mem_limit is TRANSIT's L without a cap"):
        experiments.System("x", "fsdp2", 1, 8, mem_limit="20G").check()
    with pytest.raises(ValueError, match="x: mem_limit is TRANSIT's L without a cap"):
        experiments.System("x", "transit", 1, 8, policy="advise", cap="27G", mem_limit="20G").check()


def test_each_cause_experiment_fits_one_device_command(capsys):
    for name in CAUSE:
        assert cli.main(["plan", name, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["fits"] and len(doc["parts"]) == 1, name
        assert doc["parts"][0]["seconds"] <= planning.COMMAND_LIMIT_S - planning.PART_MARGIN_S, name


def test_hybrid_on_the_bench_model_is_estimated_from_its_own_recorded_runs():
    history = estimates.recorded_runs()
    _, basis = estimates.estimate_run(experiments.EXPERIMENTS["hybrid-cause-e1"].systems[0], history)
    assert basis.startswith("hybrid-gb64-placement-reading-h100.json capped (bench, 1 GPU(s), global batch 64, "
                            "micro-batch 8)")


def probe(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "bench/uvm_speed_probe.py", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.mark.parametrize(("argv", "line"), [
    (["--out", "p.json", "--gib", "0"], ("uvm_speed_probe.py: argument --gib: --gib '0': expected a whole number "
                                          "from 1 to 1024 (see uvm_speed_probe.py --help)\n")),
    (["--out", "p.json", "--repeats", "x"], ("uvm_speed_probe.py: argument --repeats: --repeats 'x': expected a "
                                             "whole number from 1 to 100 (see uvm_speed_probe.py --help)\n")),
    (["--out", "p.json", "--mover-rate", "0"], ("uvm_speed_probe.py: argument --mover-rate: --mover-rate '0': "
                                                "expected a number from 1 to 100000 (see uvm_speed_probe.py --help)\n")),
    ([], "uvm_speed_probe.py: the following arguments are required: --out (see uvm_speed_probe.py --help)\n"),
])
def test_the_probe_refuses_bad_arguments_in_one_line(argv: list[str], line: str):
    result = probe(*argv)
    assert (result.returncode, result.stderr, result.stdout) == (2, line, "")


def test_the_probe_says_in_one_line_that_it_needs_a_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: tests/gpu/test_hybrid_cause_gpu.py runs the probe")
    result = probe("--out", str(tmp_path / "p.json"))
    assert (result.returncode, result.stderr) == (1, "uvm_speed_probe.py: needs a CUDA GPU (torch sees none)\n")
    assert not (tmp_path / "p.json").exists()


def test_the_canary_needs_a_gpu():
    torch = pytest.importorskip("torch")
    from bench.common import Canary

    with pytest.raises(SystemExit, match="--canary needs a GPU: it times CUDA kernels"):
        Canary(torch.device("cpu"))
