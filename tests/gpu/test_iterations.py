"""On a real training loop (run on the device machine): the three iteration sources agree
(transit_mark_iteration() called by the script, the Python optimizer-step hook that `transit run`
puts on PYTHONPATH, and the kernel-sequence period detector), and so do the recorder's two ways of
giving a kernel record its launch ordinal (callback correlation ids, external ids)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
STEPS = 30
LOOP = r"""
import ctypes, torch
mark = ctypes.CDLL(None).transit_mark_iteration
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)]).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
x = torch.randn(32, 1024, device="cuda")
for _ in range(STEPS):
    model(x).square().mean().backward()
    opt.step(); opt.zero_grad()
    mark()
torch.cuda.synchronize()
""".replace("STEPS", str(STEPS))


def run_loop(out: Path, **env: str) -> dict:
    """The loop under `transit run --policy base`; its stats file."""
    env = dict(os.environ, **env,
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-m", "transit", "run", "--policy", "base", "--mem-limit", "8G", "--out",
                        str(out), "--", sys.executable, "-c", LOOP], env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    (stats_file,) = out.glob("*.json")
    return json.loads(stats_file.read_text())


def test_three_sources_agree(tmp_path: Path) -> None:
    it = run_loop(tmp_path)["iterations"]
    assert it["method"] == "api" and it["count"] == STEPS
    assert it["by_method"]["python-hook"] == STEPS
    # the detector needs a few periods to lock on; after that it must see every boundary
    assert STEPS - 4 <= it["by_method"]["kernel-period"] <= STEPS


def test_external_ids_place_kernels_as_callback_ids_do(tmp_path: Path) -> None:
    default = run_loop(tmp_path / "default", TRANSIT_WARMUP_ITERS="4")["recorder"]
    assert default["correlation"]["external_ids"] == "off" and default["api_records"] == 0
    assert default["kernel_records"] > 0  # and callback ids missed too few for the fallback

    forced = run_loop(tmp_path / "external", TRANSIT_WARMUP_ITERS="4", TRANSIT_EXTERNAL_CORRELATION="1")["recorder"]
    corr = forced["correlation"]
    assert corr["external_ids"] == "on: TRANSIT_EXTERNAL_CORRELATION" and forced["api_records"] > 0
    # most kernel records carry an id both ways found, and the two ordinals never differ
    records = forced["kernel_records"]
    assert corr["cross_checked"] > records // 2 and corr["disagree"] == 0, (corr, records)
