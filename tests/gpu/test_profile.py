"""TRANSIT_PROFILE=1 on a real training loop (run on the device machine): the warm-up profile is
written beside the stats file, its iterations match the recorder's launches, and what the
kernels' parameters point at covers the training state, with the reuse a step gives it:
parameters and gradients touched in several phases of the iteration, Adam's moments in one."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
STEPS = 8
WARMUP = 2
# 5 x Linear(4096, 4096): 84M fp32 parameters; weights, gradients and the two Adam moments are
# 16 bytes per parameter, 1.34 GB; the moments are half of it.
PARAMETERS = 5 * (4096 * 4096 + 4096)
STATE_BYTES = 16 * PARAMETERS
MOMENT_BYTES = 8 * PARAMETERS
PROFILE_MAX_BYTES = 5 << 20  # compressed; docs/profile.md says "a few hundred KB" for the 1.9B model
TRAIN = r"""
import json, sys, torch
torch.manual_seed(0)
layers = []
for _ in range(5):
    layers += [torch.nn.Linear(4096, 4096), torch.nn.GELU()]
model = torch.nn.Sequential(*layers).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
# fp32 and an input that needs its gradient, so that the backward reads every weight (under
# autocast the fp32 weights are read only by the cast and the optimizer)
x = torch.randn(256, 4096, device="cuda", requires_grad=True)
for step in range(int(sys.argv[1])):
    loss = (model(x) - x.detach()).pow(2).mean()
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
"""


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    """(stats, profile) of the loop under base in limit mode (L = 1 GiB, below its footprint)."""
    out = tmp_path_factory.mktemp("profile")
    env = dict(os.environ, TRANSIT_PROFILE="1", TRANSIT_WARMUP_ITERS=str(WARMUP),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-m", "transit", "run", "--policy", "base", "--mem-limit", "1G", "--out",
                        str(out), "--", sys.executable, "-c", TRAIN, str(STEPS)], env=env, capture_output=True,
                       text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-4000:]
    (stats_file,) = [p for p in out.glob("*.json")]
    (profile_file,) = list(out.glob("*.profile.json.gz"))
    assert profile_file.stat().st_size <= PROFILE_MAX_BYTES, profile_file.stat().st_size
    return json.loads(stats_file.read_text()), json.loads(gzip.decompress(profile_file.read_bytes()))


def test_profile_covers_the_warm_up_window(profiled) -> None:
    stats, prof = profiled
    assert prof["schema"] == "transit.profile/1" and prof["complete"] is True
    assert prof["identity"]["pid"] == stats["identity"]["pid"] and prof["config"]["policy"] == "base"
    assert prof["window"] == {"first_iteration": 1, "iterations": WARMUP}
    its = prof["iterations"]
    assert [it["iteration"] for it in its] == [1, 2]
    # the same step twice: the same kernels, all timed
    assert its[0]["kernels"] == its[1]["kernels"] > 0
    assert all(it["timed"] for it in its) and all(d > 0 for d in its[1]["kernel_duration_ns"])
    assert its[0]["kernel_name"] == its[1]["kernel_name"]
    assert prof["dropped"]["launches"] == prof["dropped"]["pointers"] == prof["dropped"]["records"] == 0
    # every launch's parameters were read, and some point into managed memory
    assert prof["scan"]["launches_unread"] == 0 and prof["scan"]["pointers"] > 0, prof["scan"]


def test_pointers_cover_the_training_state(profiled) -> None:
    """Every byte of weights, gradients and moments is in a chunk some phase touched."""
    _, prof = profiled
    touched = sum(r > 0 for r in prof["chunks"]["reuse"]) * prof["chunk_bytes"]
    assert touched >= STATE_BYTES, (touched, STATE_BYTES)


def test_moments_are_touched_once_and_weights_more(profiled) -> None:
    """The fused Adam step is the moments' only use: at least the moments' bytes have reuse 1;
    the weights (read by the forward, the backward and the optimizer) reach reuse 3 or more."""
    _, prof = profiled
    chunk, reuse = prof["chunk_bytes"], prof["chunks"]["reuse"]
    once = sum(r == 1 for r in reuse) * chunk
    many = sum(r >= 3 for r in reuse) * chunk
    histogram = {r: reuse.count(r) for r in sorted(set(reuse))}
    assert once >= MOMENT_BYTES, (once, histogram)
    assert many >= 4 * PARAMETERS, (many, histogram)


def test_migrations_in_the_profile_match_the_records(profiled) -> None:
    """The profile's HtoD bytes are the recorder's HtoD records of the window: at most the whole
    run's, and some (the footprint is over L, so warm-up migrates)."""
    stats, prof = profiled
    window_htod = sum(it["htod_bytes"] for it in prof["iterations"])
    assert 0 < window_htod <= stats["migrations"]["htod"]["bytes"]
    assert sum(prof["chunks"]["htod_bytes"]) >= window_htod


STEADY_ITERATION = 6
STEADY_STEPS = 12


def test_a_steady_iteration_is_observed_not_planned_from(tmp_path: Path) -> None:
    """TRANSIT_PROFILE_STEADY: hybrid (which plans from every full window) profiles the steady
    iteration asked for, writes it apart, and does not plan again: the same kernels as the warm-up's
    iterations, all timed."""
    env = dict(os.environ, TRANSIT_PROFILE="1", TRANSIT_WARMUP_ITERS=str(WARMUP),
               TRANSIT_PROFILE_STEADY=str(STEADY_ITERATION),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-m", "transit", "run", "--policy", "hybrid", "--mem-limit", "1G", "--out",
                        str(tmp_path), "--", sys.executable, "-c", TRAIN, str(STEADY_STEPS)], env=env,
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-4000:]
    (stats_file,) = [p for p in tmp_path.glob("*.json")]
    stats = json.loads(stats_file.read_text())
    warm = json.loads(gzip.decompress(next(tmp_path.glob("*[0-9].profile.json.gz")).read_bytes()))
    (steady_file,) = list(tmp_path.glob("*.steady.profile.json.gz"))
    steady = json.loads(gzip.decompress(steady_file.read_bytes()))
    assert warm["steady"] is False and steady["steady"] is True and steady["complete"] is True
    assert steady["window"] == {"first_iteration": STEADY_ITERATION, "iterations": 1}
    (it,) = steady["iterations"]
    assert it["iteration"] == STEADY_ITERATION and it["timed"] is True
    assert it["kernel_name"] == warm["iterations"][-1]["kernel_name"]
    assert all(d > 0 for d in it["kernel_duration_ns"])
    assert stats["hybrid"]["plans"] == 1, stats["hybrid"]
