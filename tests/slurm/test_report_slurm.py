"""`transit report` on real jobs of the local cluster: a 2-node `srun --transit=advise` job whose tasks
call the CUDA runtime (libtransit writes a stats file per rank, with or without a GPU), then the report
as a user runs it, finding the report directory through the cluster's plugstack.conf."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.conftest import REPO, Cluster, unique_job_name
from tests.slurm.test_spank import CUDA_TASK, libcudart
from transit import slurm

pytestmark = pytest.mark.slurm


def transit_report(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return cluster.run([sys.executable, "-m", "transit", "report", *args], cwd=REPO)


@pytest.fixture(scope="module")
def advise_job(cluster: Cluster) -> tuple[str, str, bool]:
    """(job id, job name, whether CUDA worked) of a finished 2-node --transit=advise job."""
    name = unique_job_name()
    python = os.path.realpath(sys.executable)
    out = cluster.run(
        ["srun", "-J", name, "-N2", "-n2", "--transit=advise", python, "-c", CUDA_TASK, libcudart()]
    )
    assert out.returncode == 0, out.stderr
    results = [line.split("|") for line in out.stdout.splitlines() if line.startswith("CUDA|")]
    assert len(results) == 2, out.stdout
    return results[0][1], name, any(int(r[2]) == 0 for r in results)


def test_report_dir_comes_from_plugstack(cluster: Cluster) -> None:
    assert slurm.plugstack_report_dir() == str(cluster.report_dir)


def test_report_json_of_a_two_node_job(cluster: Cluster, advise_job: tuple[str, str, bool]) -> None:
    job_id, name, gpu = advise_job
    out = transit_report(cluster, job_id, "--json")
    assert out.returncode == 0, out.stderr
    report: dict[str, Any] = json.loads(out.stdout)
    assert report["directory"] == str(cluster.report_dir / job_id)
    job = report["job"]
    # the dev cluster has no accounting (sacct fails): the controller (squeue) still remembers the job
    accounting = cluster.run(["sacct", "--json", "-j", job_id]).returncode == 0
    assert job["source"] == ("sacct" if accounting else "squeue")
    assert (job["job_id"], job["name"], job["state"]) == (job_id, name, "COMPLETED")
    assert (job["num_nodes"], job["policy"], job["mode"], job["limit_bytes"]) == (
        2,
        "advise",
        "physical",
        None,
    )
    assert job["elapsed_s"] is not None and job["elapsed_s"] >= 0
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert len({r["node"] for r in report["ranks"]}) == 2
    assert [n["ranks"] for n in report["nodes"]] == [1, 1]
    for rank in report["ranks"]:
        assert (rank["job_id"], rank["world_size"], rank["policy"]) == (job_id, 2, "advise")
        assert rank["cuda_active"] is gpu
        assert rank["exit_reason"] == "exit"
    assert report["totals"]["ranks"] == 2
    assert report["warnings"] == []
    notes = {note["code"] for note in report["notes"]}
    if not gpu:
        assert {"cuda-error", "no-cuda"} <= notes


def test_table_of_a_two_node_job(cluster: Cluster, advise_job: tuple[str, str, bool]) -> None:
    job_id, name, _ = advise_job
    out = transit_report(cluster, job_id, "--no-color")
    assert out.returncode == 0, out.stderr
    assert f"job {job_id} ({name})" in out.stdout
    assert "COMPLETED" in out.stdout and "\x1b[" not in out.stdout


def test_missing_rank_in_a_copy_of_a_real_job(
    cluster: Cluster, advise_job: tuple[str, str, bool], tmp_path: Path
) -> None:
    job_id, _, _ = advise_job
    copy = Path(shutil.copytree(cluster.report_dir / job_id, tmp_path / job_id))
    for path in copy.glob("rank1.*"):
        path.unlink()
    out = transit_report(cluster, str(copy), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert [r["rank"] for r in report["ranks"]] == [0]
    assert [w["code"] for w in report["warnings"]] == ["missing-rank"]
    assert report["job"]["state"] == "COMPLETED"  # Slurm facts for the job the files name


def test_unknown_job_id(cluster: Cluster) -> None:
    out = transit_report(cluster, "987654321")
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"transit report: unknown job id 987654321: no {cluster.report_dir / '987654321'} "
        "and Slurm does not know the job"
    )


def test_report_of_a_job_still_running(cluster: Cluster, tmp_path: Path) -> None:
    """A step that has ended inside a batch job that is still running: its ranks are reported, and
    a named warning says the job is not finished."""
    task = tmp_path / "task.py"
    task.write_text(CUDA_TASK)
    done = tmp_path / "step-done"
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"srun --transit=advise {os.path.realpath(sys.executable)} {task} {libcudart()}\n"
        f"touch {done}\n"
        "sleep 60\n"
    )
    out = cluster.run(
        ["sbatch", "--parsable", "-J", unique_job_name(), "-N1", "-o", str(tmp_path / "out"), str(script)]
    )
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 60
        while not done.exists():
            assert time.monotonic() < deadline, (tmp_path / "out").read_text()
            time.sleep(0.2)
        report = transit_report(cluster, job_id, "--json")
        assert report.returncode == 0, report.stderr
        parsed = json.loads(report.stdout)
        assert parsed["job"]["state"] == "RUNNING"
        assert [r["rank"] for r in parsed["ranks"]] == [0]
        assert [w["code"] for w in parsed["warnings"]] == ["job-not-finished"]
    finally:
        cluster.run(["scancel", job_id])
