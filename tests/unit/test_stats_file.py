"""The per-process stats file: written at exit and on SIGTERM/SIGINT, atomically, even without a GPU."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from transit import _native

CALL_CUDA = "import ctypes; c=ctypes.c_void_p(); rc=ctypes.CDLL('{cudart}').cudaMalloc(ctypes.byref(c), 4096)"


# The child's SIGINT and SIGTERM as a Python program started from a terminal has them, whatever the
# test process passes on (a test run in the background inherits SIGINT ignored).
DEFAULT_SIGNALS = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                   "signal.signal(signal.SIGTERM, signal.SIG_DFL)")
IGNORE_SIGINT = "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)"


def run_py(code: str, env: dict[str, str], signals: str = DEFAULT_SIGNALS, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"{signals}; {code}"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def env_for(clean_env, out, **extra) -> dict[str, str]:
    return dict(clean_env, LD_PRELOAD=str(_native.lib_path()), TRANSIT_OUT=str(out), **extra)


def only_stats_file(out) -> dict:
    files = sorted(out.iterdir())
    assert [f.suffix for f in files] == [".json"], files  # no temp file left behind
    return json.loads(files[0].read_text())


def test_written_at_exit_without_gpu(cudart, clean_env, tmp_path) -> None:
    env = env_for(clean_env, tmp_path, TRANSIT_POLICY="advise", TRANSIT_MEM_LIMIT="24G", RANK="3",
                  SLURM_JOB_ID="77", SLURM_STEP_ID="1")
    p = run_py(CALL_CUDA.format(cudart=cudart) + "; print(rc)", env)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0 and int(out) != 0  # the CUDA call failed: no GPU here
    doc = only_stats_file(tmp_path)
    assert doc["schema"] == "transit.rank/1"
    assert doc["cuda_active"] is False and doc["cuda_error"].startswith("cudaError")
    assert doc["identity"]["rank"] == 3 and doc["identity"]["job_id"] == "77" and doc["identity"]["step_id"] == "1"
    assert doc["config"] == {"policy": "advise", "mode": "limit", "limit_bytes": 24 * 1024**3, "warmup_iters": 2,
                             "prefetch_gap_bytes": 131072, "recorder": True}
    assert doc["time"]["exit_reason"] == "exit"
    assert doc["allocations"]["count"] == 0 and doc["allocations"]["refused"] == 0
    assert (tmp_path / f"rank3.{doc['identity']['hostname']}.{doc['identity']['pid']}.json").is_file()


@pytest.mark.parametrize(("sig", "reason"), [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")])
def test_written_on_signal(cudart, clean_env, tmp_path, sig, reason) -> None:
    # Short sleeps, not one of 60 s: CPython loses a SIGINT that lands after its last check and before
    # the sleep's syscall (its handler ran, KeyboardInterrupt waits out the sleep; 2 in 3000 runs on
    # 2 busy cores, with or without libtransit). The next sleep's call raises it.
    code = (CALL_CUDA.format(cudart=cudart) + "; print('ready', flush=True); import time\n"
            "for _ in range(1200): time.sleep(0.05)")
    p = run_py(code, env_for(clean_env, tmp_path))
    assert p.stdout.readline().strip() == "ready"
    p.send_signal(sig)
    p.wait(timeout=30)
    assert p.returncode != 0
    doc = only_stats_file(tmp_path)
    assert doc["time"]["exit_reason"] == reason


def test_an_ignored_signal_stays_ignored(cudart, clean_env, tmp_path) -> None:
    """A process that ignores SIGINT (a background job of a script) runs on through one, and its
    statistics are the exit's, not frozen at the signal."""
    code = CALL_CUDA.format(cudart=cudart) + "; print('ready', flush=True); import sys; sys.stdin.readline()"
    p = run_py(code, env_for(clean_env, tmp_path), signals=IGNORE_SIGINT, stdin=subprocess.PIPE)
    assert p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert p.poll() is None and list(tmp_path.iterdir()) == []
    p.communicate("\n", timeout=30)
    assert p.returncode == 0 and only_stats_file(tmp_path)["time"]["exit_reason"] == "exit"


def test_no_file_without_cuda_call(clean_env, tmp_path) -> None:
    p = run_py("import ctypes; print('no cuda')", env_for(clean_env, tmp_path))
    p.communicate(timeout=60)
    assert list(tmp_path.iterdir()) == []


def test_fork_child_writes_nothing_of_its_own(cudart, clean_env, tmp_path) -> None:
    # the child exits through sys.exit, so the atexit handler it inherited does run in it
    code = CALL_CUDA.format(cudart=cudart) + "; import os, sys; pid=os.fork(); (sys.exit(0) if pid == 0 else os.waitpid(pid, 0))"
    p = run_py(code, env_for(clean_env, tmp_path))
    p.communicate(timeout=60)
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and str(p.pid) in files[0].name


def test_live_stats_through_the_api() -> None:
    """A running process's document is partial: no end, no exit reason yet, the time it was written."""
    doc = json.loads(_native.stats())
    assert doc["schema"] == "transit.rank/1" and doc["partial"] is True
    assert doc["time"]["exit_reason"] is None and doc["time"]["end_unix"] is None
    assert doc["time"]["written_unix"] >= doc["time"]["start_unix"]
    assert _native.version() == "0.1.0"


def test_refreshed_while_running(cudart, clean_env, tmp_path) -> None:
    """TRANSIT_STATS_INTERVAL=5: a running process rewrites its file every 5 s, marked partial,
    and the exit's write replaces it with the final one."""
    code = CALL_CUDA.format(cudart=cudart) + "; print('ready', flush=True); import sys; sys.stdin.readline()"
    p = run_py(code, env_for(clean_env, tmp_path, TRANSIT_STATS_INTERVAL="5"), stdin=subprocess.PIPE)
    assert p.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 20
    while not list(tmp_path.glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    running = only_stats_file(tmp_path)
    assert running["partial"] is True and running["time"]["exit_reason"] is None
    assert running["time"]["written_unix"] - running["time"]["start_unix"] >= 5
    p.communicate("\n", timeout=30)
    final = only_stats_file(tmp_path)
    assert final["partial"] is False and final["time"]["exit_reason"] == "exit"
    assert final["time"]["end_unix"] >= running["time"]["written_unix"]


def test_not_refreshed_with_interval_zero(cudart, clean_env, tmp_path) -> None:
    code = CALL_CUDA.format(cudart=cudart) + "; import time; time.sleep(6)"
    p = run_py(code, env_for(clean_env, tmp_path, TRANSIT_STATS_INTERVAL="0"))
    time.sleep(5.5)
    assert p.poll() is None and list(tmp_path.iterdir()) == []  # running, nothing written yet
    p.communicate(timeout=30)
    assert only_stats_file(tmp_path)["partial"] is False
