"""TRANSIT_* parsing: sizes, policies, booleans; bad values stop the process with one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from transit import _native
from transit.errors import UsageError

GIB = 1024**3


@pytest.mark.parametrize(
    ("text", "expected"),
    [("40G", 40 * GIB), ("512M", 512 * 1024**2), ("1.5T", int(1.5 * 1024**4)), ("4096", 4096),
     ("128K", 128 * 1024), ("24GiB", 24 * GIB), ("2gb", 2 * GIB), (".5G", GIB // 2)],
)
def test_sizes(text: str, expected: int) -> None:
    assert _native.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "12Q", "G", "-1G", "0", "1.2.3G", "40 G", "nan", "inf", "1e400", "x" * 5000])
def test_bad_sizes_name_the_value_and_what_is_allowed(text: str) -> None:
    with pytest.raises(UsageError) as exc:
        _native.parse_size(text)
    msg = str(exc.value)
    assert "is not a size" in msg and "40G" in msg
    assert len(msg) < 300  # a hostile value cannot flood the line


def run_with_env(cudart, env: dict[str, str]) -> subprocess.CompletedProcess:
    code = f"import ctypes; c=ctypes.c_void_p(); ctypes.CDLL('{cudart}').cudaMalloc(ctypes.byref(c), 64); print('after')"
    env = dict(env, LD_PRELOAD=str(_native.lib_path()))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    ("var", "value", "allowed"),
    [("TRANSIT_POLICY", "fast", "base, prefetch or advise"),
     ("TRANSIT_MEM_LIMIT", "12Q", "e.g. 40G"),
     ("TRANSIT_MEM_LIMIT", "", "e.g. 40G"),
     ("TRANSIT_WARMUP_ITERS", "0", "from 1 to 1000"),
     ("TRANSIT_RECORDER", "maybe", "true/false"),
     ("TRANSIT_EXTERNAL_CORRELATION", "2", "true/false"),
     ("TRANSIT_CUPTI_DETACH", "later", "true/false"),
     ("TRANSIT_TICK_LOG", "often", "true/false"),
     ("TRANSIT_PREFETCH_GAP", "lots", "e.g. 40G")],
)
def test_bad_environment_stops_before_cuda_work(cudart, clean_env, var: str, value: str, allowed: str) -> None:
    r = run_with_env(cudart, dict(clean_env, **{var: value}))
    assert r.returncode == 1
    assert "after" not in r.stdout  # stopped at the first CUDA call
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"transit: {var}='{value}'") and allowed in lines[0]


def test_tick_log_without_out_dir_stops_before_cuda_work(cudart, clean_env) -> None:
    r = run_with_env(cudart, dict(clean_env, TRANSIT_TICK_LOG="1"))
    assert r.returncode == 1 and "after" not in r.stdout
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("transit: TRANSIT_TICK_LOG is on") and "TRANSIT_OUT" in line


def test_good_environment_runs(cudart, clean_env, tmp_path) -> None:
    env = dict(clean_env, TRANSIT_POLICY="prefetch", TRANSIT_MEM_LIMIT="1.5T", TRANSIT_WARMUP_ITERS="3",
               TRANSIT_RECORDER="off", TRANSIT_OUT=str(tmp_path))
    r = run_with_env(cudart, env)
    assert r.returncode == 0 and r.stdout.strip() == "after", r.stderr
