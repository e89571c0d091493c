"""CUDA graphs under every policy (run on the device machine): torch.compile's reduce-overhead
mode captures the forward and backward of test_policies.py's model into CUDA graphs and replays
them, in limit mode below the footprint. TRANSIT must never prefetch or advise on a capturing
stream (that breaks the capture): its calls there are skipped and counted as capture_skips. The
losses are bitwise those of the same compiled loop without TRANSIT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gpu.test_policies import MODEL, REPO, STEPS, run
from transit import _native

pytestmark = pytest.mark.gpu
COMPILED = MODEL + r"""
@torch.compile(mode="reduce-overhead")
def loss_of(x):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return (model(x) - x).pow(2).mean()

losses = []
for step in range(STEPS):
    torch.compiler.cudagraph_mark_step_begin()
    loss = loss_of(torch.randn(256, 4096, device="cuda", generator=g))
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    losses.append(loss.item())
print(json.dumps(losses))
"""
INDUCTOR_CACHE = {"TORCHINDUCTOR_CACHE_DIR": str(REPO / "build" / "inductor-cache")}


@pytest.fixture(scope="module")
def native_losses() -> list[float]:
    pytest.importorskip("triton")
    return run(None, None, COMPILED, **INDUCTOR_CACHE)


@pytest.mark.parametrize("policy", _native.policies())
def test_cuda_graphs_replay_with_the_same_losses(tmp_path: Path, native_losses: list[float], policy: str) -> None:
    assert run(tmp_path, policy, COMPILED, **INDUCTOR_CACHE) == native_losses
    (stats_file,) = tmp_path.glob("*.json")
    doc = json.loads(stats_file.read_text())
    assert doc["config"]["policy"] == policy and doc["cuda_error"] is None
    assert doc["iterations"]["count"] == STEPS
