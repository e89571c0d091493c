"""CUDA graphs under every policy (run on the device machine): torch.compile's reduce-overhead
mode captures the forward and backward into CUDA graphs and replays them. TRANSIT must never
prefetch or advise on a capturing stream (that breaks the capture): its calls there are skipped
and counted as capture_skips. The losses are bitwise those of the same compiled loop without
TRANSIT, in limit mode below the footprint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from transit import _native

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
LIMIT = "1G"
STEPS = 12
# test_policies.py's model (about 1.5 GiB with Adam), its step compiled with CUDA graphs.
TRAIN = r"""
import json, sys, torch
torch.manual_seed(0)
layers = []
for _ in range(5):
    layers += [torch.nn.Linear(4096, 4096), torch.nn.GELU()]
model = torch.nn.Sequential(*layers).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
g = torch.Generator(device="cuda").manual_seed(1)

@torch.compile(mode="reduce-overhead")
def loss_of(x):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return (model(x) - x).pow(2).mean()

losses = []
for step in range(int(sys.argv[1])):
    torch.compiler.cudagraph_mark_step_begin()
    loss = loss_of(torch.randn(256, 4096, device="cuda", generator=g))
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    losses.append(loss.item())
print(json.dumps(losses))
"""


def run(out: Path | None, policy: str | None) -> list[float]:
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=pythonpath, TORCHINDUCTOR_CACHE_DIR=str(REPO / "build" / "inductor-cache"))
    cmd = [sys.executable, "-c", TRAIN, str(STEPS)]
    if policy:
        cmd = [sys.executable, "-m", "transit", "run", "--policy", policy, "--mem-limit", LIMIT, "--out", str(out),
               "--", *cmd]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, f"{policy}: {r.stderr[-4000:]}"
    return json.loads(r.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def native_losses() -> list[float]:
    pytest.importorskip("triton")
    return run(None, None)


@pytest.mark.parametrize("policy", _native.policies())
def test_cuda_graphs_replay_with_the_same_losses(tmp_path: Path, native_losses: list[float], policy: str) -> None:
    assert run(tmp_path, policy) == native_losses
    (stats_file,) = tmp_path.glob("*.json")
    doc = json.loads(stats_file.read_text())
    assert doc["config"]["policy"] == policy and doc["cuda_error"] is None
    assert doc["iterations"]["count"] == STEPS
