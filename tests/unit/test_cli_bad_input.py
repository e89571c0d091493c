"""Bad input across commands: one clear line naming the value, never a traceback or a silent
default; `submit --to-min` plans the batch for the two node counts that will really train."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from transit import slurm

TRANSIT = [sys.executable, "-m", "transit"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*TRANSIT, *args], check=False, capture_output=True, text=True, env=env, timeout=120)


def test_submit_to_min_global_batch_fits_requested_and_chosen_counts(clean_env) -> None:
    r = run("submit", "--nodes", "8", "--to-min", "--model", "llama3-8b", "--dry-run", "--json",
            "scripts/sbatch-torchrun.sh", "train.py", env=clean_env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    export = next(a for a in doc["command"] if a.startswith("--export="))
    # the default candidates 8, 6, 4 and 1 node (llama3-8b fits in HBM on each): lcm(64, 48, 32, 8) = 192
    assert doc["counts"] == [8, 6, 4, 1] and doc["nodes"] == 1
    assert "TRANSIT_GLOBAL_BATCH=192" in export and "LOCAL_BATCH=1" in export


@pytest.mark.parametrize(("args", "needle"), [
    (["launch", "--dry-run", "--nodes", "0", "--global-batch", "8", "--", "x.py"], "--nodes must be at least 1, got 0"),
    (["launch", "--dry-run", "--nodes", "2", "--global-batch", "8", "--tp", "0", "--nproc-per-node", "1", "--",
      "x.py"], "--tp must be at least 1, got 0"),
    (["plan", "--model", "llama3-8b", "--nodes", "2", "--global-batch", "0"], "--global-batch must be at least 1, got 0"),
    (["plan", "--nodes", "1", "--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "4", "--ffn", "128", "--vocab", "100",
      "--head-dim", "-5"], "--head-dim must be at least 0, got -5"),
])
def test_bad_values_are_named(clean_env, args: list[str], needle: str) -> None:
    r = run(*args, env=clean_env)
    assert r.returncode == 2 and needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("env", [{"SLURM_GPUS_ON_NODE": "0"}, {"CUDA_VISIBLE_DEVICES": ",,"}, {}])
def test_no_gpu_count_is_unknown_not_zero(env: dict[str, str]) -> None:
    assert slurm.gpus_on_node(env) is None


@pytest.mark.parametrize(("fmt", "text", "needle"), [
    ("sacct-json", "[1, 2]", "no 'jobs' list"),
    ("transit-json", "[1, 2]", "schema is None"),
])
def test_trace_that_is_not_an_object(tmp_path, clean_env, fmt: str, text: str, needle: str) -> None:
    trace = tmp_path / "t.json"
    trace.write_text(text)
    r = run("simulate", "--trace", str(trace), "--format", fmt, env=clean_env)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


def test_non_finite_durations_are_bad_rows(tmp_path, clean_env) -> None:
    trace = tmp_path / "t.json"
    jobs = [{"id": "1", "submit": 0, "duration": "nan", "gpus": 8}, {"id": "2", "submit": 1, "duration": 50, "gpus": 8}]
    trace.write_text(json.dumps({"schema": "transit.trace/1", "jobs": jobs}))
    r = run("simulate", "--trace", str(trace), "--format", "transit-json", "--racks", "1", "--json", env=clean_env)
    assert r.returncode == 0, r.stderr
    assert "not a finite number" in r.stdout
