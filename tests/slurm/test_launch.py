"""`transit launch` and `transit submit` against the real local Slurm cluster.

The central test trains the tiny model (gloo on CPU, fixed seed) through `transit launch` on 2
nodes and then on 1 with the same global batch: gradient accumulation makes up the missing
data-parallel ranks, so both runs must produce the same loss trajectory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm.conftest import TRAINING_JOB_TIMEOUT_S, sbatch_wait
from transit import slurm

REPO = Path(__file__).resolve().parents[2]
TRAIN_TINY = REPO / "scripts" / "train_tiny.py"
TRANSIT_BIN = REPO / "tests" / "fixtures" / "plan" / "bin"  # a `transit` command for this checkout
NPROC_PER_NODE = 2  # CPU processes per emulated node (each node has 4 CPUs)


@pytest.fixture
def env(cluster):
    return cluster.env(PATH=f"{TRANSIT_BIN}:{os.environ['PATH']}", PYTHON=sys.executable)


def run_waiting(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a command that waits for a batch job (sbatch --wait) to finish."""
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=TRAINING_JOB_TIMEOUT_S,
                          check=False)




def train_through_launch(env, tmp_path: Path, nodes: int, parallel: str) -> dict:
    out = tmp_path / f"loss-{parallel}-{nodes}.json"
    output = tmp_path / f"job-{parallel}-{nodes}.out"
    command = (f"transit launch --global-batch 8 --local-batch 2 --nproc-per-node {NPROC_PER_NODE} "
               f"-- {TRAIN_TINY} --parallel {parallel} --steps 5 --out {out}")
    sbatch_wait(env, [f"--nodes={nodes}", "--wrap", command], output, result_file=out)
    log = output.read_text()
    dp = nodes * NPROC_PER_NODE
    assert f"DP {dp}, global batch 8 = local 2 x DP {dp} x accumulation {8 // (2 * dp)}" in log
    return json.loads(out.read_text())


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_nodes_and_one_node_train_the_same_global_batch_and_losses(env, tmp_path, parallel):
    two = train_through_launch(env, tmp_path, nodes=2, parallel=parallel)
    one = train_through_launch(env, tmp_path, nodes=1, parallel=parallel)
    assert (two["world_size"], two["grad_accum"]) == (4, 1)
    assert (one["world_size"], one["grad_accum"]) == (2, 2)
    assert two["global_batch"] == one["global_batch"] == 8
    assert len(two["losses"]) == len(one["losses"]) == 5
    assert two["losses"] == pytest.approx(one["losses"], rel=1e-5, abs=1e-6)
    assert two["losses"][-1] < two["losses"][0]  # it did train


def salloc(cluster, env, nodes: int, command: list[str]):
    return cluster.run(["salloc", f"--nodes={nodes}", *command], env=env)


def test_dry_run_json_reads_the_allocation(cluster, env):
    result = salloc(cluster, env, 2, ["transit", "launch", "--dry-run", "--json", "--global-batch", "12",
                                      "--local-batch", "3", "--nproc-per-node", "2", "--", "train.py", "--x"])
    assert result.returncode == 0, result.stderr
    launch = json.loads(result.stdout)
    job_id = launch["job_id"]
    assert job_id.isdigit() and len(launch["hostnames"]) == 2
    assert all(h.startswith("node") for h in launch["hostnames"])
    assert (launch["dp"], launch["grad_accum"]) == (4, 1)
    assert launch["env"] == {"TRANSIT_GLOBAL_BATCH": "12", "TRANSIT_LOCAL_BATCH": "3", "TRANSIT_GRAD_ACCUM": "1"}
    endpoint = launch["rdzv_endpoint"]
    assert endpoint.startswith("127.0.0.1:")  # the first node's NodeAddr: node1..4 are not DNS names
    assert launch["cpus_per_node"] == 1  # what the dev cluster gives a job by default
    assert launch["command"] == [
        "srun", "--nodes=2", "--ntasks-per-node=1", "--ntasks=2", "--cpus-per-task=1", "torchrun", "--nnodes=2",
        "--nproc-per-node=2", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={job_id}",
        "train.py", "--x"]


def test_global_batch_defaults_to_what_submit_to_min_exports(cluster, env):
    env = env | {"TRANSIT_GLOBAL_BATCH": "240"}  # `transit submit --to-min` passes it through sbatch
    result = salloc(cluster, env, 2, ["transit", "launch", "--dry-run", "--json", "--nproc-per-node", "3",
                                      "train.py"])
    assert result.returncode == 0, result.stderr
    launch = json.loads(result.stdout)
    assert (launch["global_batch"], launch["dp"], launch["grad_accum"]) == (240, 6, 40)


def test_the_torchrun_task_gets_every_cpu_of_its_node(cluster, env):
    result = salloc(cluster, env, 2, ["--cpus-per-task=3", "transit", "launch", "--dry-run", "--json",
                                      "--global-batch", "4", "--nproc-per-node", "2", "train.py"])
    assert result.returncode == 0, result.stderr
    assert "--cpus-per-task=3" in json.loads(result.stdout)["command"]


def test_gpus_per_node_come_from_slurm_when_not_given(cluster, env):
    env = env | {"CUDA_VISIBLE_DEVICES": "0,1,2"}  # what Slurm's GRES would set on a GPU node
    result = salloc(cluster, env, 1, ["transit", "launch", "--dry-run", "--json", "--global-batch", "6",
                                      "train.py"])
    assert result.returncode == 0, result.stderr
    launch = json.loads(result.stdout)
    assert (launch["nproc_per_node"], launch["grad_accum"]) == (3, 2)


def test_indivisible_global_batch_is_a_clear_error(cluster, env):
    result = salloc(cluster, env, 2, ["transit", "launch", "--global-batch", "6", "--nproc-per-node", "2",
                                      str(TRAIN_TINY), "--out", "/dev/null"])
    assert result.returncode == 2
    assert "global batch 6 is not divisible by local batch 1 x DP degree 4 = 4" in result.stderr


def test_launch_outside_an_allocation_says_so(cluster, env):
    result = cluster.run(["transit", "launch", "--global-batch", "8", "train.py"], env=env)
    assert result.returncode == 2 and "not inside a Slurm allocation" in result.stderr


def test_submit_dry_run_shrinks_the_node_count(cluster, env):
    result = cluster.run(["transit", "submit", "--nodes", "10", "--scale-in", "0.3", "--dry-run",
                          "job.sh", "a", "--b"], env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "sbatch --parsable --nodes=7 --transit=advise job.sh a --b"


def test_submit_to_min_uses_the_plan(cluster, env):
    # Llama3-70B on 4-GPU H100 nodes with 400 GiB of DRAM: 1 node would need 900 GiB, 2 need 375
    result = cluster.run(["transit", "submit", "--nodes", "6", "--to-min", "--model", "llama3-70b",
                          "--gpus-per-node", "4", "--host-dram-gib", "400", "--transit", "prefetch",
                          "--dry-run", "--json", "job.sh"], env=env)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["nodes"] == 2
    # only 6 nodes (DP 24) and 2 nodes (DP 8) will train it: the global batch suits those two
    assert summary["command"] == ["sbatch", "--parsable", "--nodes=2", "--transit=prefetch",
                                  "--export=ALL,TRANSIT_GLOBAL_BATCH=24,LOCAL_BATCH=1", "job.sh"]


def test_submit_runs_sbatch_with_transit_on_fewer_nodes(env, tmp_path):
    output = tmp_path / "job.out"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nsrun bash -c 'echo $SLURM_JOB_NUM_NODES $TRANSIT_POLICY'\n")
    result = run_waiting(["transit", "submit", "--nodes", "4", "--scale-in", "0.5", "--json",
                          "--sbatch-arg=--wait", f"--sbatch-arg=--output={output}", str(script)], env)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["job_id"].isdigit() and summary["nodes"] == 2
    assert output.read_text().split("\n")[:2] == ["2 advise", "2 advise"]


@pytest.mark.parametrize("args, message", [
    (["--scale-in", "1.0"], "--scale-in must be in [0, 1), got 1.0"),
    ([], "give --scale-in FRACTION or --to-min"),
])
def test_submit_rejects_bad_shrinking(cluster, env, args, message):
    result = cluster.run(["transit", "submit", "--nodes", "4", *args, "--dry-run", "job.sh"], env=env)
    assert result.returncode == 2 and message in result.stderr


@pytest.mark.parametrize("value, expected", [("72(x2),36", 36), ("4", 4), ("", None)])
def test_fewest_cpus_per_node_from_the_slurm_format(value, expected):
    assert slurm.min_cpus_per_node({"SLURM_JOB_CPUS_PER_NODE": value}) == expected
