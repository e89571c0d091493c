"""bench/steady_kernels.py on steady profiles made from the recorded H200 hybrid profile (global
batch 64, micro-batch 8): its last warm-up iteration as the run (each phase's kernel time shared
equally by its launches: the fixture keeps phase times only), the same with every kernel at half
its time as the control."""

from __future__ import annotations

import copy
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_schemas import check

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "tests" / "fixtures" / "profile" / "h200-gb64-mb8-hybrid.profile.json.gz"


def write(doc: dict, path: Path) -> Path:
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, Path]:
    tmp = tmp_path_factory.mktemp("steady")
    warm = json.loads(gzip.decompress(PROFILE.read_bytes()))
    run = copy.deepcopy(warm)
    run["iterations"] = run["iterations"][-1:]
    run["steady"] = True
    it = run["iterations"][0]
    firsts = it["phases"]["first_ordinal"] + [len(it["kernel_name"])]
    it["kernel_duration_ns"] = [k // (b - a) for a, b, k in zip(firsts, firsts[1:], it["phases"]["kernel_ns"])
                                for _ in range(b - a)]
    control = copy.deepcopy(run)
    it = control["iterations"][0]
    it["kernel_duration_ns"] = [d // 2 for d in it["kernel_duration_ns"]]
    return run, write(run, tmp / "run.steady.profile.json.gz"), write(control, tmp / "control.steady.profile.json.gz")


def steady(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "bench/steady_kernels.py", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, check=False)


def test_excess_is_the_run_less_the_control(profiles) -> None:
    run, run_path, control_path = profiles
    r = steady(run_path, control_path, "--warm-up", PROFILE, "--top", "5", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    check(out)
    durations = run["iterations"][0]["kernel_duration_ns"]
    half = sum(d - d // 2 for d in durations) / 1e9
    assert out["same_sequence"] is True
    assert out["run"]["kernel_s"] == pytest.approx(sum(durations) / 1e9)
    assert sum(g["excess_kernel_s"] for g in out["phases_by_kind"].values()) == pytest.approx(half, abs=1e-3)
    excess = [k["excess_s"] for k in out["kernels_by_excess"]]
    assert len(excess) == 5 and excess == sorted(excess, reverse=True)
    # the placement at the profile's L leaves chunks on the host, and some phases touch them
    assert out["host_chunks"] > 0
    assert any(k.endswith("touches host chunks") for k in out["phases_by_kind"])


def test_a_warm_up_profile_is_refused_as_a_run(profiles) -> None:
    _, _, control_path = profiles
    r = steady(PROFILE, control_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "is not a steady profile of one timed iteration" in r.stderr
