"""The three iteration sources agree on a real training loop (run on the device machine):
transit_mark_iteration() called by the script, the Python optimizer-step hook that `transit run`
puts on PYTHONPATH, and the kernel-sequence period detector."""

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


def test_three_sources_agree(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-m", "transit", "run", "--policy", "base", "--mem-limit", "8G", "--out",
                        str(tmp_path), "--", sys.executable, "-c", LOOP], env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    (stats_file,) = tmp_path.glob("*.json")
    it = json.loads(stats_file.read_text())["iterations"]
    assert it["method"] == "api" and it["count"] == STEPS
    assert it["by_method"]["python-hook"] == STEPS
    # the detector needs a few periods to lock on; after that it must see every boundary
    assert STEPS - 4 <= it["by_method"]["kernel-period"] <= STEPS
