"""The benchmark harness on a real GPU, with the tiny model: what the device drivers rely on.

- bench/train.py under a memory cap: TFLOPS computed, the NVML peak read and within the cap, the
  SM clock read at every step; without the memory monitor, step times alone;
- FSDP2 CPU offload: the host-resident state is exactly 16 bytes per parameter (fp32 weights,
  gradients and two Adam moments);
- DeepSpeed ZeRO-Offload (when the carried wheels are installed): the same 16 bytes per parameter.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from model import config_by_name, count_params

TINY_PARAMS = count_params(config_by_name("tiny"))["total"]
CAP = 4 << 30
RUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]
COMMON = ["--model", "tiny", "--global-batch", "8", "--local-batch", "8", "--steps", "4", "--warmup", "1"]


def run_bench(script: str, out: Path, *args: str) -> dict:
    proc = subprocess.run([*RUN, str(REPO / "bench" / script), *COMMON, *args, "--out", str(out)],
                          check=False, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_train_under_cap_reports_throughput_and_nvml_peak(tmp_path: Path) -> None:
    doc = run_bench("train.py", tmp_path / "r.json", "--mem-cap", str(CAP))
    assert doc["device"]["name"]
    assert doc["tflops_per_gpu"] > 0
    assert len(doc["losses"]) == 4 and all(math.isfinite(x) for x in doc["losses"])
    memory = doc["memory"]
    rank0 = memory["per_rank"][0]
    assert rank0["nvml_process_peak_bytes"] is not None, "NVML gave no per-process reading"
    assert rank0["peak_bytes"] >= rank0["nvml_process_peak_bytes"]
    assert 0 < memory["peak_bytes_max"] <= CAP
    assert memory["within_cap"] is True
    assert doc["offloaded_bytes_per_gpu"] == 0
    clocks = doc["gpu_clocks_rank0"]  # one reading per step, a clock an H200 can run at
    assert len(clocks["sm_clock_mhz"]) == len(clocks["clocks_event_reasons"]) == 4
    assert all(300 <= mhz <= 3000 for mhz in clocks["sm_clock_mhz"]), clocks


def test_train_without_memory_monitor_times_steps_only(tmp_path: Path) -> None:
    doc = run_bench("train.py", tmp_path / "r.json", "--no-memory-monitor")
    assert len(doc["step_time"]["all_s"]) == 4 and doc["tflops_per_gpu"] > 0
    rank0 = doc["memory"]["per_rank"][0]
    assert "nvml_process_peak_bytes" not in rank0 and doc["memory"]["peak_bytes_max"] is None


def test_fsdp_cpu_offload_counts_sixteen_bytes_per_parameter(tmp_path: Path) -> None:
    doc = run_bench("train.py", tmp_path / "r.json", "--offload", "fsdp-cpu")
    assert doc["offloaded_bytes_per_gpu"] == 16 * TINY_PARAMS


def test_zero_offload_counts_sixteen_bytes_per_parameter(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed", reason="DeepSpeed wheels not installed (bench/device_setup.sh installs them)")
    doc = run_bench("deepspeed_train.py", tmp_path / "r.json", "--system", "zero-offload", "--cpu-adam", "torch")
    assert doc["offloaded_bytes_per_gpu"] == 16 * TINY_PARAMS
    assert doc["tflops_per_gpu"] > 0
