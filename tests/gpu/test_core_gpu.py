"""libtransit on a real GPU (run on the device machine): transparency, managed pointers, the
limit-mode guard. Workloads are tiny; TRANSIT_MEM_LIMIT is always set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
TRAIN = r"""
import json, sys, torch
torch.manual_seed(0); torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
g = torch.Generator(device="cuda").manual_seed(1)
losses = []
for step in range(50):
    x = torch.randn(64, 512, device="cuda", generator=g)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = (model(x) - x).pow(2).mean()
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    losses.append(loss.item())
print(json.dumps(losses))
"""

POINTER = r"""
import ctypes, json, torch
t = torch.empty(1 << 20, device="cuda")
# cudaPointerGetAttributes through the runtime torch uses: type 3 = cudaMemoryTypeManaged
class Attr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("device", ctypes.c_int), ("devicePointer", ctypes.c_void_p),
                ("hostPointer", ctypes.c_void_p), ("reserved", ctypes.c_long * 8)]
libs = [l for l in open("/proc/self/maps").read().split() if "libcudart.so" in l]
cudart = ctypes.CDLL(libs[0])
a = Attr()
rc = cudart.cudaPointerGetAttributes(ctypes.byref(a), ctypes.c_void_p(t.data_ptr()))
print(json.dumps({"rc": rc, "type": a.type}))
"""

OOM = r"""
import json, torch
try:
    torch.empty(200 * 1024**3, dtype=torch.uint8, device="cuda")
    print(json.dumps({"oom": False}))
except torch.OutOfMemoryError as e:
    print(json.dumps({"oom": True, "msg": str(e)[:200]}))
"""


def transit_run(code: str, out: Path, *opts: str, transit: bool = True) -> subprocess.CompletedProcess:
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=pythonpath, CUBLAS_WORKSPACE_CONFIG=":4096:8")
    cmd = [sys.executable, "-c", code]
    if transit:
        cmd = [sys.executable, "-m", "transit", "run", "--out", str(out), *opts, "--", *cmd]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)


def stats(out: Path) -> dict:
    files = sorted(out.glob("*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def test_losses_bitwise_identical(tmp_path) -> None:
    native = transit_run(TRAIN, tmp_path, transit=False)
    under = transit_run(TRAIN, tmp_path, "--policy", "base", "--mem-limit", "8G")
    assert native.returncode == 0 and under.returncode == 0, native.stderr + under.stderr
    assert json.loads(native.stdout.splitlines()[-1]) == json.loads(under.stdout.splitlines()[-1])
    doc = stats(tmp_path)
    assert doc["cuda_active"] is True and doc["allocations"]["count"] > 0
    assert doc["identity"]["gpu_uuid"].startswith("GPU-")


def test_tensors_are_managed(tmp_path) -> None:
    r = transit_run(POINTER, tmp_path, "--mem-limit", "8G")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == {"rc": 0, "type": 3}


def test_limit_mode_refuses_200g_cleanly(tmp_path) -> None:
    r = transit_run(OOM, tmp_path, "--mem-limit", "8G")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1])["oom"] is True
    doc = stats(tmp_path)
    assert doc["allocations"]["refused"] == 1 and doc["allocations"]["refused_bytes"] >= 200 * 1024**3
    assert sum("refused a managed allocation" in line for line in r.stderr.splitlines()) == 1
