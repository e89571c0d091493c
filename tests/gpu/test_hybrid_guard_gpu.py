"""Hybrid's guard on a real GPU (run on the device machine), in limit mode: a small training loop
over L (about 1.5 GiB against L = 1G, as in test_policies.py) runs long enough for the guard to time
advise's placement and hybrid's and decide; the stats carry the decision in `hybrid.fallback` and
`transit report` says it. Which placement wins on a model this small is not asserted: only that the
verdict follows the rule (model/guard.h) from the medians it reports. About 30 s."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
LIMIT = "1G"
# Warm-up and profile (2 + 1 to drain), advise's block (its fill settles within 4 marks, then 3
# steps), the switch, hybrid's block (3 steps), and a margin.
STEPS = 24
GUARD_STEPS = 3  # libtransit/src/model/guard.h: TRANSIT_GUARD_STEPS
GUARD_TIE = 0.02  # TRANSIT_GUARD_TIE
TRAIN = r"""
import sys, torch
torch.manual_seed(0)
layers = []
for _ in range(5):
    layers += [torch.nn.Linear(4096, 4096), torch.nn.GELU()]
model = torch.nn.Sequential(*layers).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
for step in range(int(sys.argv[1])):
    x = torch.randn(256, 4096, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = (model(x) - x).pow(2).mean()
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    loss.item()
"""


def test_the_guard_decides_and_the_stats_and_report_say_so(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("TRANSIT_HYBRID_GUARD", None)  # on by default
    r = subprocess.run([sys.executable, "-m", "transit", "run", "--policy", "hybrid", "--mem-limit", LIMIT, "--out",
                        str(tmp_path), "--", sys.executable, "-c", TRAIN, str(STEPS)], env=env,
                       capture_output=True, text=True, timeout=75, check=False)
    assert r.returncode == 0, r.stderr[-4000:]
    (stats_file,) = tmp_path.glob("*.json")
    doc = json.loads(stats_file.read_text())
    fallback = doc["hybrid"]["fallback"]
    assert fallback["state"] == "decided" and fallback["kept"] in ("hybrid", "advise"), fallback
    assert (fallback["hybrid_steps"], fallback["advise_steps"]) == (GUARD_STEPS, GUARD_STEPS), fallback
    hybrid_s, advise_s = fallback["hybrid_step_s"], fallback["advise_step_s"]
    assert isinstance(hybrid_s, float) and isinstance(advise_s, float) and hybrid_s > 0 and advise_s > 0, fallback
    assert fallback["kept"] == ("advise" if advise_s < hybrid_s * (1 - GUARD_TIE) else "hybrid"), fallback
    # the medians are step times of this run: within the range of its timeline's steps after warm-up
    t = [e["t"] for e in doc["timeline"]]
    steps = [b - a for a, b in itertools.pairwise(t[3:])]
    assert min(steps) / 2 <= min(hybrid_s, advise_s) and max(hybrid_s, advise_s) <= 2 * max(steps), (fallback, steps)
    # hybrid's placement applied (again if the kernel sequence changed); advise's in its place once
    # more when advise was kept
    assert doc["hybrid"]["applied"] >= (2 if fallback["kept"] == "advise" else 1), doc["hybrid"]
    assert doc["advise"]["applied"] is True

    report = subprocess.run([sys.executable, "-m", "transit", "report", str(tmp_path), "--json", "--no-slurm"],
                            env=env, capture_output=True, text=True, timeout=10, check=False)
    assert report.returncode == 0, report.stderr
    (note,) = [n for n in json.loads(report.stdout)["notes"] if n["code"] == "hybrid-fallback"]
    assert f"{fallback['kept']}'s placement on" in note["message"]
    assert f"advise {advise_s:.2f} s, hybrid {hybrid_s:.2f} s" in note["message"]
