"""The dev cluster as the slurm tier uses it: jobs run as the non-root test users, and sacct
finds them, as at a site."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.slurm.conftest import (
    DEV_CLUSTER,
    FINISHED_STATES,
    GLOO_EXIT_ABORT,
    OTHER_USER,
    TEST_USER,
    Cluster,
    accepted_gloo_aborts,
    sbatch_wait,
    unique_job_name,
)

ACCOUNT = "transit"  # scripts/dev-cluster's account for the test users

WHO_AND_WHICH_PYTHON = "import os, pwd, sys; print(pwd.getpwuid(os.getuid()).pw_name, sys.executable)"


def test_jobs_run_as_the_test_user_with_the_tests_python(cluster: Cluster) -> None:
    out = cluster.run(["srun", "-N2", "--transit=off", "python3", "-c", WHO_AND_WHICH_PYTHON])
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"{TEST_USER} {sys.executable}"] * 2


def test_batch_jobs_run_as_the_test_user_and_write_to_tmp_path(cluster: Cluster, tmp_path: Path) -> None:
    output = tmp_path / "job.out"
    sbatch_wait(cluster.env(), ["-N1", "--transit=off", "--wrap", "id -un; python3 -c 'import torch'"], output)
    assert output.read_text() == f"{TEST_USER}\n"
    assert output.stat().st_uid == tmp_path.stat().st_uid != 0


def test_a_second_user_for_tests_across_users(cluster: Cluster) -> None:
    out = cluster.run(["srun", "-N1", "--transit=off", "id", "-un"], user=OTHER_USER)
    assert (out.returncode, out.stdout) == (0, f"{OTHER_USER}\n"), out.stderr


@pytest.mark.job_user("root", reason="checks that the marker switches the user")
def test_a_marked_test_runs_its_jobs_as_root(cluster: Cluster) -> None:
    out = cluster.run(["srun", "-N1", "--transit=off", "id", "-un"])
    assert (out.returncode, out.stdout) == (0, "root\n"), out.stderr


def test_each_node_is_a_host_of_its_own_for_nccl(cluster: Cluster) -> None:
    """The TaskProlog: NCCL_HOSTID names the task's node, NCCL's sockets use lo, multicast is off."""
    show = 'echo "$SLURMD_NODENAME $NCCL_HOSTID $NCCL_SOCKET_IFNAME $NCCL_NET $NCCL_NVLS_ENABLE"'
    out = cluster.run(["srun", "-N2", "--transit=off", "sh", "-c", show])
    assert out.returncode == 0, out.stderr
    tasks = [line.split() for line in out.stdout.splitlines()]
    assert len({node for node, *_ in tasks}) == 2, out.stdout
    assert all(rest == [node, "lo", "Socket", "0"] for node, *rest in tasks), out.stdout


def test_every_allocation_has_an_extern_step(cluster: Cluster) -> None:
    """PrologFlags=Contain: the extern step exists on each node while the job runs."""
    rank0 = 'test "$SLURM_PROCID" != 0 || { squeue -h -s -j "$SLURM_JOB_ID" -o "%i %N"; echo "job $SLURM_JOB_NODELIST"; }'
    out = cluster.run(["srun", "-N2", "--transit=off", "bash", "-c", rank0])
    assert out.returncode == 0, out.stderr
    steps = {step.split(".")[-1]: nodes for step, nodes in (line.split() for line in out.stdout.splitlines())}
    assert steps == {"extern": steps["job"], "0": steps["job"], "job": steps["job"]}, out.stdout


# --- accounting: slurmdbd with its MariaDB, as at a site ---------------------------------------

ACCOUNTING_DELAY_S = 30  # slurmctld sends a job's end to slurmdbd asynchronously


def accounted(cluster: Cluster, job_id: str) -> dict:
    """The job's record in `sacct --json`, once slurmdbd has its end and its own start record: for
    a moment after the end, slurmdbd shows a record it made from the steps (name "allocation",
    partition "", time.eligible 0)."""
    deadline = time.monotonic() + ACCOUNTING_DELAY_S
    while True:
        out = cluster.run(["sacct", "--json", "-j", job_id])
        assert out.returncode == 0, out.stderr
        jobs = json.loads(out.stdout)["jobs"]
        if jobs and jobs[0]["state"]["current"] in FINISHED_STATES and jobs[0]["time"]["eligible"]:
            return jobs[0]
        assert time.monotonic() < deadline, f"job {job_id} not finished in sacct after {ACCOUNTING_DELAY_S}s"
        time.sleep(0.2)


def test_nodes_planned_after_a_heterogeneous_job_are_ready(cluster: Cluster) -> None:
    """After a heterogeneous job Slurm 22.05 keeps its nodes PLANNED (sinfo: plnd) until the next
    backfill cycle; they take jobs, so `status` counts them ready."""
    out = cluster.run(["srun", "-N1", "true", ":", "-N1", "true"])
    assert out.returncode == 0, out.stderr
    deadline = time.monotonic() + 10
    while "comp" in (states := cluster.run(["sinfo", "-h", "-N", "-o", "%t"]).stdout.split()):
        assert time.monotonic() < deadline, states
        time.sleep(0.2)
    status = subprocess.run([str(DEV_CLUSTER), "status", "--json"], capture_output=True, text=True, check=False)
    assert status.returncode == 0 and json.loads(status.stdout)["nodes_ready"] == 4, (states, status.stdout)


def test_a_test_users_job_is_in_sacct_with_its_user_and_state(cluster: Cluster, tmp_path: Path) -> None:
    name = unique_job_name()
    job_id = sbatch_wait(cluster.env(), ["-N2", "-J", name, "--transit=off", "--wrap", "srun true"],
                         tmp_path / "job.out")
    job = accounted(cluster, job_id)
    assert (job["job_id"], job["name"], job["user"], job["account"], job["cluster"]) == (
        int(job_id), name, TEST_USER, ACCOUNT, "transit-dev")
    assert (job["state"]["current"], job["allocation_nodes"]) == ("COMPLETED", 2)
    assert {step["step"]["name"]: step["state"] for step in job["steps"]} == {
        "batch": "COMPLETED", "extern": "COMPLETED", "true": "COMPLETED"}


def test_another_users_failed_job_is_in_sacct_with_its_exit_code(cluster: Cluster) -> None:
    # -o /dev/null: tmp_path is TEST_USER's
    out = cluster.run(["sbatch", "--parsable", "--wait", "-N1", "--transit=off", "-o", "/dev/null",
                       "--wrap", "exit 3"], user=OTHER_USER)
    job_id = out.stdout.strip()
    assert job_id.isdigit(), out.stderr
    job = accounted(cluster, job_id)
    assert (job["user"], job["account"], job["state"]["current"]) == (OTHER_USER, ACCOUNT, "FAILED")
    # sacct --json of Slurm 22.05 reports exit_code {"status": "SUCCESS", "return_code": 0} here; the
    # parsable listing has the real one.
    listing = cluster.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "ExitCode"])
    assert listing.stdout.strip() == "3:0", listing.stderr


# --- sbatch_wait and gloo's exit abort -----------------------------------------------------------

def fake_training(result: Path, done_ranks: range) -> str:
    """A batch script that writes a 2-rank result, prints the done lines of DONE_RANKS, then fails
    with gloo's exit abort, as scripts/train_tiny.py's ranks can."""
    done = "".join(f"echo 'train_tiny: rank {rank} of 2 done'; " for rank in done_ranks)
    return f"""echo '{{"world_size": 2, "losses": [1.0]}}' > {result}; {done}echo '{GLOO_EXIT_ABORT}' >&2; exit 1"""


def test_a_job_aborted_after_all_its_work_is_accepted_and_counted(cluster: Cluster, tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    output = tmp_path / "job.out"
    job_id = sbatch_wait(cluster.env(), ["-N1", "--transit=off", "--wrap", fake_training(result, range(2))], output,
                         result_file=result)
    assert f"job {job_id} ({output})" in accepted_gloo_aborts
    accepted_gloo_aborts.remove(f"job {job_id} ({output})")  # the run's list is of real training jobs


@pytest.mark.parametrize("done_ranks", [range(1), range(0)], ids=["one-rank-unfinished", "no-rank-finished"])
def test_a_job_aborted_before_all_its_work_fails(cluster: Cluster, tmp_path: Path, done_ranks: range) -> None:
    result = tmp_path / "result.json"
    with pytest.raises(AssertionError, match="job failed"):
        sbatch_wait(cluster.env(), ["-N1", "--transit=off", "--wrap", fake_training(result, done_ranks)],
                    tmp_path / "job.out", result_file=result)


def test_a_job_aborted_without_its_result_fails(cluster: Cluster, tmp_path: Path) -> None:
    script = fake_training(tmp_path / "elsewhere.json", range(2))
    with pytest.raises(AssertionError, match="job failed"):
        sbatch_wait(cluster.env(), ["-N1", "--transit=off", "--wrap", script], tmp_path / "job.out",
                    result_file=tmp_path / "result.json")
