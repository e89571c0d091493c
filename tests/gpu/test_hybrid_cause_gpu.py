"""Issue 55's readings on a real GPU: the E3 probe (bench/uvm_speed_probe.py) at 2 GiB, every state
and side-stream condition measured and the result valid against its schema; bench/train.py's canary
and PCIe split, per step, in the result and in its steps file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]


def test_the_probe_measures_every_state_and_matches_its_schema(tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    subprocess.run([sys.executable, "bench/uvm_speed_probe.py", "--out", str(out), "--gib", "2", "--repeats", "2"],
                   cwd=REPO, check=True, timeout=300)
    doc = json.loads(out.read_text())
    schema = json.loads((REPO / "schemas/uvm-speed-probe-1.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(doc)
    assert doc["complete"] is True
    assert set(doc["states"]) == {"populated", "cpu_touched_faulted_64k"}
    assert set(doc["side_mover"]) == {"alone", "mover_rate", "back_to_back"}
    assert doc["states"]["populated"]["host_resident_bytes"] == 0  # memset on the GPU: nothing on the host
    assert doc["side_mover"]["back_to_back"]["round_trips"] > 0 and doc["side_mover"]["back_to_back"]["error"] is None


def test_the_canary_times_fresh_work_on_the_device() -> None:
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(REPO))
    from bench.common import Canary

    record = Canary(torch.device("cuda", 0)).run()
    assert record["gemm_ms"] > 0 and record["copy_ms"] > 0 and record["gemm_tflops"] > 10
    assert record["gemm_host_bytes"] is None  # not under TRANSIT


def test_train_records_the_canary_and_the_pcie_split_per_step(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
                    "bench/train.py", "--model", "tiny", "--global-batch", "8", "--local-batch", "8", "--steps", "4",
                    "--canary", "--pcie-split", "--out", str(out)], cwd=REPO, check=True, timeout=300)
    doc = json.loads(out.read_text())
    canary = doc["canary_rank0"]
    assert canary["before_step0"]["gemm_ms"] > 0 and len(canary["per_step"]) == 4
    clocks = doc["gpu_clocks_rank0"]
    assert len(clocks["mem_clock_mhz"]) == len(clocks["power_w"]) == 4
    counters = clocks["pcie_counters"]
    if counters["error"] is None:  # a GPU with NVML's PCIe counters: marks at each step's start and optimizer
        assert len(counters["marks_tx_rx"]["start"]) == len(counters["marks_tx_rx"]["optimizer"]) == 4
        assert counters["rx_bytes"] == sorted(counters["rx_bytes"])  # wraps undone: never decreasing
    steps = [json.loads(line) for line in out.with_suffix(".steps.jsonl").read_text().splitlines()]
    assert [s.get("step") for s in steps] == [None, 0, 1, 2, 3] and "canary" in steps[1]
