"""The benchmark harness on a real GPU, with the tiny model: what the device drivers rely on.

- bench/train.py under a memory cap: TFLOPS computed, the NVML peak read and within the cap, the
  SM clock read at every step; without the memory monitor, step times alone;
- FSDP2 CPU offload: the host-resident state is exactly 16 bytes per parameter (fp32 weights,
  gradients and two Adam moments);
- DeepSpeed ZeRO-Offload (when the carried wheels are installed): the same 16 bytes per parameter;
- `transit bench link`: every host path measured, the peer paths exactly when 2 GPUs are visible;
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
sys.path.insert(0, str(REPO))
from bench.model import config_by_name, count_params
from transit import bench_link

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


def test_bench_link_measures_every_host_path_and_says_what_it_skips(tmp_path: Path) -> None:
    """`transit bench link` on this GPU, sizes 4 KiB-16 MiB: every host path at every size, the
    peer paths measured exactly when 2 GPUs are visible, NVML's counter check recorded, the PNG drawn."""
    import torch

    proc = subprocess.run([sys.executable, "-m", "transit", "bench", "link", "--json", "--max-size", "16M",
                           "--repeats", "3", "--out", str(tmp_path)],
                          check=False, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc == json.loads((tmp_path / "link.json").read_text())
    assert (tmp_path / "link.png").read_bytes()[:4] == b"\x89PNG"
    sizes = [4096 * 4**k for k in range(7)]
    assert doc["settings"]["sizes"] == sizes
    names = {p["name"] for p in doc["host_paths"]}
    assert names == {f"{d}-{m}" for d in ("htod", "dtoh") for m in
                     ("pinned-copy", "zero-copy-pinned", "managed-prefetch", "zero-copy-managed")}
    for path in doc["host_paths"]:
        assert [p["bytes"] for p in path["points"]] == sizes, path["name"]
        assert all(p["repeats"] == 3 and p["min_s"] <= p["median_s"] <= p["max_s"] for p in path["points"])
    pinned = next(p for p in doc["host_paths"] if p["name"] == "htod-pinned-copy")["points"][-1]
    # a copy over PCIe: above what a Gen3 x4 link carries, below what a Gen5 x16 link can
    assert 4 < pinned["bandwidth_gbps"] < 64, pinned
    if torch.cuda.device_count() < 2:
        assert doc["peer"] == {"status": f"skipped: {torch.cuda.device_count()} GPU visible, the peer paths "
                                         "need 2", "paths": []}
        assert "peer paths skipped" in proc.stderr
    else:
        assert doc["peer"]["status"] == "measured", doc["peer"]
        assert [p["name"] for p in doc["peer"]["paths"]] == list(bench_link.PEER_TRANSPORTS)
        sockets = doc["peer"]["paths"][-1]
        assert sockets["nccl_via"] and all(v.startswith("NET/Socket") for v in sockets["nccl_via"]), sockets
    pcie = doc["nvml_pcie"]
    assert pcie["status"] == "measured" or pcie["status"].startswith(("not supported", "not measured")), pcie
    if pcie["status"] == "measured":
        assert isinstance(pcie["counters_work"], bool)
        assert set(pcie["transfers"]) == {"pinned copy host->gpu", "pinned copy gpu->host",
                                          "zero-copy read of pinned memory (torch.sum)",
                                          "zero-copy read of managed memory (torch.sum)"}
