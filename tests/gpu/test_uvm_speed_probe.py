"""Issue 55's E3 probe (bench/uvm_speed_probe.py) on a real GPU at 2 GiB: every state and side-stream
condition measured, the result valid against its schema, and the canary of bench/train.py read."""

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
