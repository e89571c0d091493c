"""CUPTI has one subscriber per process, and torch.profiler needs it (run on the device machine).
Whichever comes first, the training runs on, the profiler sees the kernels, and TRANSIT's recorder
is degraded and says why: when the profiler held CUPTI first, TRANSIT never takes it; when TRANSIT
held it, it gives CUPTI up as the profiler starts (hooks_cupti.c), during its profiling window or
once it had detached CUPTI after it; and to a tool that subscribes with cuptiSubscribe_v2."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
STEPS = 16
PROFILED_STEPS = 3
# TOOL_AT (env): the step at which torch.profiler starts, for PROFILED_STEPS steps; -1: before
# the first CUDA allocation
LOOP = r"""
import ctypes, json, os, time, torch
from torch.profiler import ProfilerActivity, profile
mark = ctypes.CDLL(None).transit_mark_iteration
at = int(os.environ["TOOL_AT"])
prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
if at < 0:
    prof.start()
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)]).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
x = torch.randn(32, 1024, device="cuda")
losses = []
for step in range(STEPS):
    if step == at:
        prof.start()
    loss = model(x).square().mean()
    loss.backward()
    opt.step(); opt.zero_grad()
    losses.append(loss.item())
    mark()
    time.sleep(0.02)  # a step as long as a tick of the recorder's thread, which acts between steps
    if step == max(at, 0) + PROFILED_STEPS - 1:
        prof.stop()
kernels = sum(e.device_type == torch.autograd.DeviceType.CUDA for e in prof.events())
print(json.dumps({"profiled_kernels": kernels, "losses": losses}))
""".replace("PROFILED_STEPS", str(PROFILED_STEPS)).replace("STEPS", str(STEPS))


# A tool that subscribes with cuptiSubscribe_v2 (CUDA 13), found the way a process-wide lookup
# finds it, at step TOOL_AT: its result code.
SUBSCRIBE_V2_LOOP = r"""
import ctypes, json, os, torch
class SubscriberParams(ctypes.Structure):  # CUpti_SubscriberParams
    _fields_ = [("structSize", ctypes.c_size_t), ("subscriberName", ctypes.c_char_p),
                ("oldSubscriberName", ctypes.c_char_p), ("oldSubscriberSize", ctypes.c_size_t)]
process = ctypes.CDLL(None)
x = torch.ones(1024, device="cuda")
result = None
for step in range(8):
    if step == int(os.environ["TOOL_AT"]):
        handle, params = ctypes.c_void_p(), SubscriberParams(ctypes.sizeof(SubscriberParams), b"test", None, 0)
        result = process.cuptiSubscribe_v2(ctypes.byref(handle), None, None, ctypes.byref(params))
    x = x * 2 - 1
    process.transit_mark_iteration()
torch.cuda.synchronize()
print(json.dumps({"subscribe_v2": result}))
"""


def run_profiled(out: Path, tool_at: int, loop: str = LOOP) -> tuple[dict, dict, str]:
    """The loop under `transit run --policy base --mem-limit 8G`: its output, its stats, its stderr."""
    env = dict(os.environ, TOOL_AT=str(tool_at), TRANSIT_WARMUP_ITERS="4",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-m", "transit", "run", "--policy", "base", "--mem-limit", "8G", "--out",
                        str(out), "--", sys.executable, "-c", loop], env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    (stats_file,) = out.glob("*.json")
    return json.loads(r.stdout.splitlines()[-1]), json.loads(stats_file.read_text()), r.stderr


def test_profiler_first_transit_degraded_from_the_start(tmp_path: Path) -> None:
    out, stats, _ = run_profiled(tmp_path, -1)
    assert out["profiled_kernels"] > 0
    rec = stats["recorder"]
    assert rec["state"] == "degraded" and rec["reason"].startswith("another CUPTI subscriber is active"), rec
    assert rec["kernels"] == 0 and rec["kernel_records"] == 0
    assert stats["iterations"]["count"] == STEPS and stats["iterations"]["method"] == "api"


# The window is iterations 1-4; the launch callbacks go off by 8 and CUPTI is detached by 10.
@pytest.mark.parametrize("profile_at", [2, 13], ids=["in-the-window", "detached"])
def test_transit_first_gives_cupti_up_when_the_profiler_starts(tmp_path: Path, profile_at: int) -> None:
    out, stats, stderr = run_profiled(tmp_path, profile_at)
    assert out["profiled_kernels"] > 0  # the profiler got CUPTI: it saw the kernels
    assert len(out["losses"]) == STEPS and all(math.isfinite(v) for v in out["losses"])
    rec = stats["recorder"]
    assert rec["state"] == "degraded" and "TRANSIT gave CUPTI up" in rec["reason"], rec
    assert f"at iteration {profile_at}" in rec["reason"]
    assert rec["kernels"] > 0  # TRANSIT held CUPTI before: it saw launches
    assert rec["profiling"] is False and rec["unified_memory_counters"] is False
    if profile_at > 10:  # the profiler attached CUPTI anew: the recorder never did
        assert rec["cupti_detaches"] == 1 and rec["cupti_detached_at_iteration"] < profile_at, rec
        assert rec["cupti_reattaches"] == 0
    assert sum("recorder degraded: another tool called" in line for line in stderr.splitlines()) == 1
    assert stats["iterations"]["count"] == STEPS and stats["iterations"]["method"] == "api"


def test_transit_gives_cupti_up_to_cupti_subscribe_v2(tmp_path: Path) -> None:
    """CUPTI has one subscriber: without the hook the tool's subscription would fail
    (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, cupti_callbacks.h)."""
    out, stats, _ = run_profiled(tmp_path, 2, SUBSCRIBE_V2_LOOP)
    assert out["subscribe_v2"] == 0  # CUPTI_SUCCESS
    rec = stats["recorder"]
    assert rec["state"] == "degraded" and "another tool called cuptiSubscribe_v2 at iteration 2" in rec["reason"], rec
