"""The dev cluster as the slurm tier uses it: jobs run as the non-root test users."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.slurm.conftest import OTHER_USER, TEST_USER, Cluster, sbatch_wait

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


def test_every_allocation_has_an_extern_step(cluster: Cluster) -> None:
    """PrologFlags=Contain: the extern step exists on each node while the job runs."""
    rank0 = 'test "$SLURM_PROCID" != 0 || { squeue -h -s -j "$SLURM_JOB_ID" -o "%i %N"; echo "job $SLURM_JOB_NODELIST"; }'
    out = cluster.run(["srun", "-N2", "--transit=off", "bash", "-c", rank0])
    assert out.returncode == 0, out.stderr
    steps = {step.split(".")[-1]: nodes for step, nodes in (line.split() for line in out.stdout.splitlines())}
    assert steps == {"extern": steps["job"], "0": steps["job"], "job": steps["job"]}, out.stdout
