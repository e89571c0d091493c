"""Bad input across commands: one clear line naming the value, never a traceback or a silent
default; `submit --to-min` plans the batch for the two node counts that will really train."""

from __future__ import annotations

import json
import os
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


PROFILE = "tests/fixtures/profile/h200-gb8-advise.profile.json.gz"


@pytest.mark.parametrize(("args", "line"), [
    (["replay", "--policy", "advise", "--limit", "12Q", PROFILE],
     ("transit replay: --limit='12Q' is not a size; use a whole or decimal number with an optional K, M, G or T "
     "(powers of 1024) and an optional B or iB, from 1B to 1024T")),
    (["replay", "--policy", "advise", "--limit", "4G", "tests"],
     "transit replay: argument PROFILE: 'tests' is a directory; give a file (see transit replay --help)"),
    (["replay", "--policy", "advise", "--limit", "4G", ""],
     "transit replay: argument PROFILE: '' is an empty path; give a file or directory name (see transit replay --help)"),
    (["report", "--no-slurm", ""],
     ("transit report: '' is neither a directory nor a job id: give a job id (1234), an array task (1234_7), a "
     "heterogeneous job's component (1234+1) or a job's stats directory")),
    (["report", "-u", ""], "transit report: -u '' is empty: give a user name of this system"),
    (["report", "--no-slurm", "--plot", "", "tests/fixtures/report/jobs/4322"],
     "transit report: argument --plot: '' is an empty path; give a file or directory name (see transit report --help)"),
    (["run", "--mem-limit", "-1G", "--", "true"],
     ("transit run: argument --mem-limit: expected one argument; a value that starts with '-' is given as "
     "--mem-limit=VALUE (see transit run --help)")),
    (["run", "--out", "", "--", "true"],
     "transit run: --out='' is not usable; use a directory path of 1 to 4031 bytes without control characters"),
    (["simulate", "--jobs", "99999999999"],
     "transit simulate: argument --jobs: 99999999999 must be at most 1000000 (see transit simulate --help)"),
    (["simulate", "--jobs", "40", "--racks", "999999999"],
     "transit simulate: argument --racks: 999999999 must be at most 10000 (see transit simulate --help)"),
    (["simulate", "--jobs", "40", "--seed", "-1"],
     "transit simulate: argument --seed: -1 must be at least 0 (see transit simulate --help)"),
    (["simulate", "sweep", "--jobs", "40", "--racks", "2", "--reductions", ""],
     ("transit simulate sweep: argument --reductions: '' has no value; give one or more, comma-separated "
     "(see transit simulate sweep --help)")),
    (["submit", "--nodes", "4", "--candidates", "4,2", "--global-batch", "64", "--sbatch-arg=", "--dry-run",
      "scripts/sbatch-torchrun.sh"],
     "transit submit: --sbatch-arg='' is empty; give an sbatch option, e.g. --sbatch-arg=--time=01:00:00"),
])
def test_bad_value_is_one_line_naming_it(clean_env, args: list[str], line: str) -> None:
    """Before: --limit was called 'size', a directory or '' a truncated profile, '' the current
    directory, --seed -1 and --jobs 99999999999 a traceback, an empty sweep list an empty table,
    and an empty --sbatch-arg took the script's place."""
    r = run(*args, env=clean_env)
    assert (r.returncode, r.stdout, r.stderr.splitlines()) == (2, "", [line])


def test_a_garbled_node_count_is_named_before_slurm_is_asked(clean_env) -> None:
    env = clean_env | {"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_JOB_NUM_NODES": "two"}
    r = run("launch", "--global-batch", "8", "--nproc-per-node", "4", "--", "x.py", env=env)
    assert (r.returncode, r.stderr) == (2, ("transit launch: SLURM_JOB_NUM_NODES='two' is not a node count; run "
                                           "under sbatch or salloc, which set it\n"))


def test_what_a_slurm_command_said_is_one_line() -> None:
    """sbatch's stderr on a host without a Slurm configuration, as captured: its cause comes last."""
    stderr = ("sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
              "sbatch: error: fetch_config: DNS SRV lookup failed\n"
              "sbatch: error: _establish_config_source: failed to fetch config\n"
              "sbatch: fatal: Could not establish a configuration source\n")
    result = subprocess.CompletedProcess(["sbatch"], 1, "", stderr)
    assert slurm.said(result) == ("sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host; "
                                  "sbatch: error: fetch_config: DNS SRV lookup failed; "
                                  "sbatch: error: _establish_config_source: failed to fetch config; "
                                  "sbatch: fatal: Could not establish a configuration source")
    assert slurm.said(subprocess.CompletedProcess(["sbatch"], 1, "", "")) == "exit code 1"


@pytest.mark.parametrize("command", [["simulate", "--racks", "2", "--trace"],
                                     ["replay", "--policy", "advise", "--limit", "4G"]])
@pytest.mark.parametrize("planted", ["fifo", "/dev/zero"])
def test_a_pipe_or_device_is_refused_not_read(tmp_path, clean_env, command: list[str], planted: str) -> None:
    """Before, a trace given as <(sacct ...) lost its first 64 KiB to the text probe (then 'cannot
    read trace /dev/fd/63: None'), and a FIFO with no writer blocked for ever."""
    path = tmp_path / "input"
    os.mkfifo(path) if planted == "fifo" else path.symlink_to(planted)
    r = run(*command, str(path), env=clean_env)
    option = "--trace" if command[0] == "simulate" else "PROFILE"
    assert (r.returncode, r.stderr.splitlines()) == (2, [
        (f"transit {command[0]}: argument {option}: '{path}' is not a regular file (a pipe or a device); write it "
        f"to a file first (see transit {command[0]} --help)")])


@pytest.mark.parametrize(("args", "command"), [
    (["lib-path", "extra"], "lib-path"),
    (["plan", "--model", "llama3-8b", "--nodes", "2", "--bogus"], "plan"),
    (["simulate", "--jobs", "40", "sweep", "--bogus", "1"], "simulate sweep"),
])
def test_an_unknown_argument_is_named_with_its_subcommand(clean_env, args: list[str], command: str) -> None:
    """Before, argparse named `transit` and sent the user to `transit --help`."""
    r = run(*args, env=clean_env)
    unknown = " ".join(args[args.index("--bogus"):] if "--bogus" in args else args[1:])
    assert (r.returncode, r.stderr) == (2, (f"transit {command}: unrecognized arguments: {unknown} "
                                           f"(see transit {command} --help)\n"))
