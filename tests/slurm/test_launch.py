"""`transit launch` and `transit submit` against the real local Slurm cluster.

The central tests train the tiny model (gloo on CPU, fixed seed) with one global batch on different
node counts: through `transit launch` on 2 nodes and on 1, and on 4 nodes against what `transit
submit` plans for 4 -> 2 (--scale-in 0.5) and 4 -> 3 (--candidates 4,3, where only the common
multiple of the two DP degrees keeps one batch). Gradient accumulation makes up the missing
data-parallel ranks, so every run must produce the same loss trajectory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm.conftest import TRAINING_JOB_TIMEOUT_S, as_user, sbatch_wait, unique_job_name
from transit import slurm

REPO = Path(__file__).resolve().parents[2]
TRAIN_TINY = REPO / "scripts" / "train_tiny.py"
TRANSIT_BIN = REPO / "tests" / "fixtures" / "plan" / "bin"  # a `transit` command for this checkout
TEMPLATE = REPO / "scripts" / "sbatch-torchrun.sh"
NPROC_PER_NODE = 2  # CPU processes per emulated node (each node has 4 CPUs)


@pytest.fixture
def env(cluster):
    return cluster.env(PATH=f"{TRANSIT_BIN}:{os.environ['PATH']}", PYTHON=sys.executable)


def run_waiting(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a command that waits for a batch job (sbatch --wait) to finish, as the test's job user."""
    return subprocess.run(as_user(args), env=env, capture_output=True, text=True, timeout=TRAINING_JOB_TIMEOUT_S,
                          check=False)


def train_through_launch(env, tmp_path: Path, nodes: int, parallel: str, global_batch: int = 8,
                         steps: int = 5, nproc: int = NPROC_PER_NODE, tp: int = 1, pp: int = 1) -> dict:
    out = tmp_path / f"loss-{parallel}-{nodes}.json"
    output = tmp_path / f"job-{parallel}-{nodes}.out"
    command = (f"transit launch --global-batch {global_batch} --local-batch 2 --nproc-per-node {nproc} --tp {tp} "
               f"--pp {pp} -- {TRAIN_TINY} --parallel {parallel} --steps {steps} --out {out}")
    sbatch_wait(env, [f"--nodes={nodes}", "--wrap", command], output, result_file=out)
    log = output.read_text()
    dp = nodes * nproc // (tp * pp)
    accumulation = global_batch // (2 * dp)
    assert f"DP {dp}, global batch {global_batch} = local 2 x DP {dp} x accumulation {accumulation}" in log
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


@pytest.mark.parametrize("parallel, tp, accumulation", [("pp", 1, 2), ("tp-pp", 2, 4)])
def test_a_pipeline_trains_like_data_parallelism_alone(env, tmp_path, parallel, tp, accumulation):
    # 2 nodes x 2 ranks with PP 2 (train_tiny's two GPipe stages), and TP 2 inside each stage for
    # tp-pp: DP 2 or 1, so launch derives accumulation 2 or 4 for 8 sequences of local batch 2 (the
    # schedule's micro-batches); DDP over the same 4 ranks takes 1. The same sequences make the same
    # losses.
    ddp = train_through_launch(env, tmp_path, nodes=2, parallel="ddp")
    pipeline = train_through_launch(env, tmp_path, nodes=2, parallel=parallel, tp=tp, pp=2)
    assert (pipeline["world_size"], pipeline["grad_accum"]) == (4, accumulation)
    assert len(pipeline["losses"]) == len(ddp["losses"]) == 5
    assert pipeline["losses"] == pytest.approx(ddp["losses"], rel=1e-5, abs=1e-6)


SUBMIT_STEPS = 3
SUBMIT_NPROC = 1  # one rank per node keeps the three jobs of 4, 2 and 3 nodes quick on 2 CPUs


def train_as_submit_plans(env, tmp_path: Path, name: str, plan_args: list[str]) -> tuple[dict, dict]:
    """`transit submit` plans the job (4 nodes of SUBMIT_NPROC ranks, local batch 2), and its sbatch
    command runs the torchrun template: the plan, and what the job trained. The batch plan is under
    test, not a policy: --transit off (libtransit would stay inert on these CPU nodes anyway)."""
    out = tmp_path / f"loss-{name}.json"
    result = subprocess.run(as_user(["transit", "submit", "--nodes", "4", *plan_args, "--gpus-per-node",
                                     str(SUBMIT_NPROC), "--local-batch", "2", "--transit", "off", "--dry-run",
                                     "--json", str(TEMPLATE), str(TRAIN_TINY), "--steps", str(SUBMIT_STEPS),
                                     "--out", str(out)]),
                            env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    planned = json.loads(result.stdout)
    assert planned["command"][:2] == ["sbatch", "--parsable"]
    # the batch settings reach `transit launch` through the job's environment, NPROC_PER_NODE the template
    sbatch_wait(env | {"NPROC_PER_NODE": str(SUBMIT_NPROC)}, planned["command"][2:], tmp_path / f"job-{name}.out",
                result_file=out)
    return planned, json.loads(out.read_text())


def test_submitted_scale_in_and_candidate_plans_train_like_four_nodes(env, tmp_path):
    # 4 nodes x 1 rank x local batch 2: 8 sequences per micro-step; 2 nodes: 4; 3 nodes: 6
    four = train_through_launch(env, tmp_path, nodes=4, parallel="ddp", global_batch=24, steps=SUBMIT_STEPS,
                                nproc=SUBMIT_NPROC)
    assert (four["world_size"], four["grad_accum"]) == (4, 3)
    # 4 -> 2 nodes: 24 is a multiple of 8 and 4, so the target stays
    planned, two = train_as_submit_plans(env, tmp_path, "scale-in", ["--scale-in", "0.5", "--global-batch", "24"])
    assert (planned["nodes"], planned["global_batch"], planned["grad_accum"]) == (2, 24, {"4": 3, "2": 6})
    assert (two["world_size"], two["global_batch"], two["grad_accum"]) == (2, 24, 6)
    # 4 -> 3 nodes for a target of 20: neither 8 nor 6 divides it; lcm(8, 6) = 24 is the batch both train
    planned, three = train_as_submit_plans(env, tmp_path, "candidates", ["--candidates", "4,3", "--global-batch", "20"])
    assert (planned["nodes"], planned["global_batch"], planned["grad_accum"]) == (3, 24, {"4": 3, "3": 4})
    assert (three["world_size"], three["global_batch"], three["grad_accum"]) == (3, 24, 4)
    assert len(four["losses"]) == len(two["losses"]) == len(three["losses"]) == SUBMIT_STEPS
    assert two["losses"] == pytest.approx(four["losses"], rel=1e-5, abs=1e-6)
    assert three["losses"] == pytest.approx(four["losses"], rel=1e-5, abs=1e-6)
    assert four["losses"][-1] < four["losses"][0]  # it did train


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
    # salloc runs `transit launch` on the submit host: the port was asked of the first node, by a step there
    assert launch["rdzv_port_chosen_on"] == f"{launch['hostnames'][0]} (srun step)"
    assert 1024 <= int(endpoint.rsplit(":", 1)[1]) <= 65535
    assert launch["cpus_per_node"] == 1  # what the dev cluster gives a job by default
    assert launch["command"] == [
        "srun", "--nodes=2", "--ntasks-per-node=1", "--ntasks=2", "--cpus-per-task=1", "torchrun", "--nnodes=2",
        "--nproc-per-node=2", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={job_id}",
        "train.py", "--x"]


def test_a_batch_script_picks_the_port_on_the_first_node_itself(env, tmp_path):
    output = tmp_path / "job.out"
    sbatch_wait(env, ["--nodes=2", "--wrap", ("transit launch --dry-run --json --global-batch 4 --nproc-per-node 2 "
                      "train.py")], output)
    launch = json.loads(output.read_text())
    assert launch["rdzv_port_chosen_on"] == f"{launch['hostnames'][0]} (batch script)"


def test_a_given_port_is_used_as_it_is(cluster, env):
    result = salloc(cluster, env, 1, ["transit", "launch", "--dry-run", "--json", "--global-batch", "2",
                                      "--nproc-per-node", "2", "--rdzv-port", "29555", "train.py"])
    assert result.returncode == 0, result.stderr
    launch = json.loads(result.stdout)
    assert (launch["rdzv_endpoint"], launch["rdzv_port_chosen_on"]) == ("127.0.0.1:29555", "--rdzv-port")


def test_global_batch_defaults_to_what_submit_exports(cluster, env):
    env = env | {"TRANSIT_GLOBAL_BATCH": "240"}  # `transit submit` passes it through sbatch
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


def test_launch_takes_any_planned_count_and_refuses_others(cluster, env):
    # submit planned 16 sequences of local batch 2 on 4 or 2 nodes: 2 nodes derive accumulation 4
    env = env | {"TRANSIT_GLOBAL_BATCH": "16", "TRANSIT_LOCAL_BATCH": "2", "TRANSIT_CANDIDATES": "4:2"}
    result = salloc(cluster, env, 2, ["transit", "launch", "--dry-run", "--json", "--nproc-per-node", "1", "train.py"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["env"]["TRANSIT_GRAD_ACCUM"] == "4"
    env["TRANSIT_CANDIDATES"] = "4:3"
    result = salloc(cluster, env, 2, ["transit", "launch", "--dry-run", "--nproc-per-node", "1", "train.py"])
    assert result.returncode == 2 and result.stdout == ""
    assert "2 nodes is not a count transit submit planned global batch 16 for (TRANSIT_CANDIDATES=4,3)" in result.stderr


def batch_script(directory: Path) -> Path:
    """A job.sh that sbatch would take, in `directory` (where the dry runs run, so the line says job.sh)."""
    script = directory / "job.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    return script


def test_submit_dry_run_shrinks_the_node_count(cluster, env, tmp_path):
    # 10 nodes of 8 GPUs -> 7: lcm(80, 56) = 560 sequences
    batch_script(tmp_path)
    result = cluster.run(["transit", "submit", "--nodes", "10", "--scale-in", "0.3", "--global-batch", "560",
                          "--dry-run", "job.sh", "a", "--b"], env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ("sbatch --parsable --nodes=7 --transit=advise --export=ALL,TRANSIT_GLOBAL_BATCH=560,"
                                     "TRANSIT_LOCAL_BATCH=1,TRANSIT_TP=1,TRANSIT_PP=1,TRANSIT_CANDIDATES=10:7 "
                                     "job.sh a --b")


def test_submit_refuses_a_batch_the_counts_cannot_share_and_queues_nothing(cluster, env, tmp_path):
    script = batch_script(tmp_path)
    name = unique_job_name()
    result = cluster.run(["transit", "submit", "--nodes", "16", "--scale-in", "0.25", "--global-batch", "128",
                          f"--sbatch-arg=--job-name={name}", str(script)], env=env)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("transit submit: global batch 128 cannot be kept on 16,12 nodes: their common multiple "
                             "is 384, +200.0% (over 25%); nearest within: --candidates 16,8 (128)\n")
    assert cluster.jobs_named(name) == []


def test_submit_names_what_sbatch_said(cluster, env, tmp_path):
    script = batch_script(tmp_path)
    result = cluster.run(["transit", "submit", "--nodes", "4", "--scale-in", "0.5", "--sbatch-arg=--partition=nope",
                          str(script)], env=env)
    assert result.returncode == 2
    assert "failed: sbatch: error: invalid partition specified: nope" in result.stderr


def test_submit_to_min_uses_the_plan(cluster, env, tmp_path):
    # Llama3-70B on 4-GPU H100 nodes with 400 GiB of DRAM under prefetch, at the target of 24
    # sequences: 5 nodes (25% fewer) spill 8.5 GiB per GPU and keep 60% of 6 nodes' tokens per GPU;
    # 3 nodes (50% fewer) keep 32%, over twice the per-token cost; no count below 6 keeps 80%
    result = cluster.run(["transit", "submit", "--nodes", "6", "--to-min", "--model", "llama3-70b",
                          "--gpus-per-node", "4", "--host-dram-gib", "400", "--transit", "prefetch",
                          "--dry-run", "--json", "job.sh"], env=env, cwd=batch_script(tmp_path).parent)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["counts"], summary["nodes"]) == ([6, 5], 5)
    # DP 24 and 20: lcm 120, which launch will take on either count
    assert summary["command"] == ["sbatch", "--parsable", "--nodes=5", "--transit=prefetch",
                                  ("--export=ALL,TRANSIT_GLOBAL_BATCH=120,TRANSIT_LOCAL_BATCH=1,TRANSIT_TP=1,"
                                   "TRANSIT_PP=1,TRANSIT_CANDIDATES=6:5"), "job.sh"]


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
    (["--scale-in", "1.0"], "--scale-in must be less than 1, got 1.0"),
    ([], "give --scale-in FRACTION, --candidates N,N or --to-min"),
])
def test_submit_rejects_bad_shrinking(cluster, env, args, message, tmp_path):
    result = cluster.run(["transit", "submit", "--nodes", "4", *args, "--dry-run", "job.sh"], env=env,
                         cwd=batch_script(tmp_path).parent)
    assert result.returncode == 2 and message in result.stderr


@pytest.mark.parametrize("value, expected", [("72(x2),36", 36), ("4", 4), ("", None)])
def test_fewest_cpus_per_node_from_the_slurm_format(value, expected):
    assert slurm.min_cpus_per_node({"SLURM_JOB_CPUS_PER_NODE": value}) == expected
