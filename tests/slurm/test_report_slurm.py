"""`transit report` on real jobs of the local cluster: a 2-node `srun --transit=advise` job whose tasks
call the CUDA runtime (libtransit writes a stats file per rank, with or without a GPU), then the report
as a user runs it, finding the report directory through the cluster's plugstack.conf; an array, several
jobs, a user's jobs, a job without stats. Slurm's facts come from sacct where the cluster keeps
accounting, else from squeue: the tests check the source they got."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.conftest import OTHER_USER, REPO, TEST_USER, Cluster, unique_job_name, user_dir
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
    job_id = results[0][1]
    settled(cluster, job_id)
    return job_id, name, any(int(r[2]) == 0 for r in results)


def accounting(cluster: Cluster) -> bool:
    return cluster.run(["sacct", "-n", "-j", "1"]).returncode == 0


ACCOUNTING_SETTLE_S = 30


def settled(cluster: Cluster, job_id: str) -> None:
    """Waits until accounting has written the job (its record has a submit line: for a few seconds
    after a job ends slurmdbd shows a provisional one), so the tests read the sacct path."""
    deadline = time.monotonic() + ACCOUNTING_SETTLE_S
    while accounting(cluster) and time.monotonic() < deadline:
        out = cluster.run(["sacct", "-n", "-X", "-P", "-j", job_id, "--format=SubmitLine"])
        if out.stdout.strip():
            return
        time.sleep(0.5)
    assert not accounting(cluster), f"accounting did not write job {job_id} in {ACCOUNTING_SETTLE_S} s"


def job_user(cluster: Cluster) -> str:
    """The user the cluster's commands (and so the jobs) run as."""
    return cluster.run(["id", "-un"]).stdout.strip()


def test_report_dir_comes_from_plugstack(cluster: Cluster) -> None:
    slurm.plugstack_arguments.cache_clear()
    assert slurm.plugstack_arguments()["report_dir"] == str(cluster.report_dir)


def test_report_json_of_a_two_node_job(cluster: Cluster, advise_job: tuple[str, str, bool]) -> None:
    job_id, name, gpu = advise_job
    out = transit_report(cluster, job_id, "--json")
    assert out.returncode == 0, out.stderr
    report: dict[str, Any] = json.loads(out.stdout)
    assert report["directory"] == str(cluster.report_dir / job_id)
    job = report["job"]
    # without accounting (sacct fails) the controller (squeue) still remembers the job
    assert job["source"] == ("sacct" if accounting(cluster) else "squeue")
    assert (job["job_id"], job["shown_id"], job["name"], job["state"]) == (job_id, job_id, name, "COMPLETED")
    assert job["user"] == job_user(cluster)
    assert (job["num_nodes"], job["policy"], job["mode"], job["limit_bytes"], job["policy_source"]) == (
        2,
        "advise",
        "physical",
        None,
        "stats-files",
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
    assert "nodes           2  node[" in out.stdout


def test_missing_rank_in_a_copy_of_a_real_job(
    cluster: Cluster, advise_job: tuple[str, str, bool], tmp_path: Path
) -> None:
    job_id, _, _ = advise_job
    copy = tmp_path / job_id  # copied by the job's user: the job directory is theirs alone (0700)
    assert cluster.run(["cp", "-r", str(cluster.report_dir / job_id), str(copy)]).returncode == 0
    for path in copy.glob("rank1.*"):
        path.unlink()
    out = transit_report(cluster, str(copy), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert [r["rank"] for r in report["ranks"]] == [0]
    assert [w["code"] for w in report["warnings"]] == ["missing-rank"]
    assert report["job"]["state"] == "COMPLETED"  # Slurm facts for the job the files name


def test_another_users_job_shows_slurms_facts_and_no_stats(cluster: Cluster) -> None:
    """What Slurm shows every user of a job (its user, state, the submit line's policy), but not its
    stats: the job's directory is its user's alone. One warning says so, and the exit code is 1."""
    out = cluster.run(["srun", "-J", unique_job_name(), "-N1", "--transit=advise", "printenv", "SLURM_JOB_ID"],
                      user=OTHER_USER)
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip()
    settled(cluster, job_id)
    report = cluster.run([sys.executable, "-m", "transit", "report", job_id, "--json"], cwd=REPO, user=TEST_USER)
    assert report.returncode == 1, report.stderr
    parsed = json.loads(report.stdout)
    directory = cluster.report_dir / job_id
    reason = f"cannot read {directory}: Permission denied (a job's directory is readable by the job's user only)"
    assert (parsed["job"]["user"], parsed["job"]["state"], parsed["ranks"]) == (OTHER_USER, "COMPLETED", [])
    assert parsed["no_stats_reason"] == reason
    assert parsed["warnings"] == [{"code": "unreadable-directory", "message": reason, "path": str(directory)}]


def test_unknown_job_id(cluster: Cluster) -> None:
    out = transit_report(cluster, "987654321")
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"transit report: unknown job id 987654321: no {cluster.report_dir / '987654321'} "
        "and Slurm does not know the job"
    )


def test_a_job_id_when_slurm_does_not_answer(cluster: Cluster, tmp_path: Path) -> None:
    """With slurmctld and slurmdbd out of reach (a copy of slurm.conf naming ports no one listens on),
    an id without a directory is refused with why Slurm could not tell: not "Slurm does not know"."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(re.sub(r"^(SlurmctldPort|AccountingStoragePort)=.*$", r"\1=1", cluster.slurm_conf.read_text(),
                           flags=re.MULTILINE))
    out = cluster.run([sys.executable, "-m", "transit", "report", "987654321", "--report-dir", str(tmp_path)],
                      env=cluster.env(SLURM_CONF=str(conf)), cwd=REPO)
    assert out.returncode == 2
    assert out.stderr.strip() == (f"transit report: unknown job id 987654321: no {tmp_path / '987654321'} and Slurm "
                                  "could not be asked about the job: neither sacct nor squeue answered")


def test_report_of_a_pending_job(cluster: Cluster) -> None:
    """A held job: how it was asked to run (from the submit line, where accounting keeps it), and
    no stats because it has not started."""
    out = cluster.run(["sbatch", "--parsable", "--hold", "-J", unique_job_name(), "-N1", "--transit=advise",
                       "--transit-mem-limit=40G", "--wrap", "srun true"])
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip().split(";")[0]
    try:
        settled(cluster, job_id)
        report = transit_report(cluster, job_id, "--json")
        assert report.returncode == 1, report.stderr
        parsed = json.loads(report.stdout)
        assert (parsed["job"]["state"], parsed["ranks"]) == ("PENDING", [])
        assert parsed["no_stats_reason"] == "the job has not started yet"
        assert [w["code"] for w in parsed["warnings"]] == ["job-not-finished"]
        if accounting(cluster):
            assert (parsed["job"]["policy"], parsed["job"]["limit_bytes"], parsed["job"]["policy_source"]) == (
                "advise", 40 << 30, "submit-line")
    finally:
        cluster.run(["scancel", job_id])


def test_report_of_a_job_without_transit(cluster: Cluster) -> None:
    out = cluster.run(["srun", "-J", unique_job_name(), "-N1", "printenv", "SLURM_JOB_ID"])
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip()
    settled(cluster, job_id)
    report = transit_report(cluster, job_id, "--json")
    assert report.returncode == 1, report.stderr
    parsed = json.loads(report.stdout)
    where = f"no stats directory {cluster.report_dir / job_id}"
    if accounting(cluster):
        line = f"srun -J {parsed['job']['name']} -N1 printenv SLURM_JOB_ID"[:60]  # the reason keeps 60 characters
        assert parsed["no_stats_reason"] == (f"TRANSIT was not asked for: no --transit on the submit line ({line}), "
                                             f"and {where} (the plugin makes one for every step it runs, also for "
                                             "#SBATCH --transit)")
    else:
        assert parsed["no_stats_reason"].startswith(f"{where}: no step of this job ran under TRANSIT here")
    assert parsed["job"]["policy"] is None and not (cluster.report_dir / job_id).exists()


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


CPU_TASK = "import os; print('CPU|' + os.environ['SLURM_JOB_ID'])"


def test_a_job_without_stats_says_how_it_ran_and_why(cluster: Cluster) -> None:
    """A CPU-only step under --transit=prefetch: no rank writes stats, so exit code 1 with the reason,
    and the policy from the plugin's step file, else from the submit line where accounting keeps it."""
    python = os.path.realpath(sys.executable)
    out = cluster.run(["srun", "-J", unique_job_name(), "-N1", "--transit=prefetch", python, "-c", CPU_TASK])
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.split("CPU|")[1].split()[0]
    report = transit_report(cluster, job_id, "--json")
    assert report.returncode == 1, report.stderr
    parsed = json.loads(report.stdout)
    assert parsed["ranks"] == [] and parsed["job"]["state"] == "COMPLETED"
    assert parsed["no_stats_reason"] == ("no task called CUDA, so no rank wrote stats (libtransit stays inert in "
                                         "processes that never do)")
    step_files = list((cluster.report_dir / job_id).glob("step-*.json"))
    source = "step-files" if step_files else "submit-line" if accounting(cluster) else None
    assert parsed["job"]["policy_source"] == source
    assert parsed["job"]["policy"] == ("prefetch" if source else None)
    text = transit_report(cluster, job_id, "--no-color")
    assert text.returncode == 1 and "No stats: no task called CUDA" in text.stdout


@pytest.fixture(scope="module")
def array_job(cluster: Cluster) -> tuple[str, list[str]]:
    """(array id, each task's own job id) of a finished 3-task array whose tasks run the CUDA task."""
    tmp = user_dir(cluster)
    task = tmp / "task.py"
    task.write_text(CUDA_TASK)
    script = tmp / "array.sh"
    script.write_text(f"#!/bin/bash\nsrun {os.path.realpath(sys.executable)} {task} {libcudart()}\n")
    out = cluster.run(["sbatch", "--parsable", "--wait", "-J", unique_job_name(), "--array=0-2", "-N1",
                       "--transit=advise", "-o", str(tmp / "out-%A_%a"), str(script)])
    assert out.returncode == 0, out.stderr
    array_id = out.stdout.strip().split(";")[0]
    tasks = []
    for index in range(3):
        log = (tmp / f"out-{array_id}_{index}").read_text()
        tasks.append(log.split("CUDA|")[1].split("|")[0])
    return array_id, tasks


def test_an_arrays_id_lists_every_task(cluster: Cluster, array_job: tuple[str, list[str]]) -> None:
    array_id, tasks = array_job
    out = transit_report(cluster, array_id, "--json")
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    assert listed["schema"] == "transit.report-list/1"
    assert [(j["shown_id"], j["job_id"], j["ranks"], j["policy"]) for j in listed["jobs"]] == [
        (f"{array_id}_{i}", tasks[i], 1, "advise") for i in range(3)]
    assert [j["directory"] for j in listed["jobs"]] == [str(cluster.report_dir / t) for t in tasks]
    text = transit_report(cluster, array_id, "--no-color")
    assert text.returncode == 0
    assert [line.split()[0] for line in text.stdout.splitlines() if line.startswith(f"{array_id}_")] == [
        f"{array_id}_{i}" for i in range(3)]


def test_an_array_task_gets_the_full_report(cluster: Cluster, array_job: tuple[str, list[str]]) -> None:
    array_id, tasks = array_job
    for target in (f"{array_id}_1", tasks[1]):  # as the array shows it, and by the task's own id
        out = transit_report(cluster, target, "--json")
        assert out.returncode == 0, out.stderr
        job = json.loads(out.stdout)["job"]
        assert (job["shown_id"], job["job_id"], job["state"]) == (f"{array_id}_1", tasks[1], "COMPLETED")
    text = transit_report(cluster, f"{array_id}_1", "--no-color")
    assert f"job {array_id}_1 = job {tasks[1]}" in text.stdout


def test_a_heterogeneous_jobs_id_lists_each_component(cluster: Cluster) -> None:
    """Each component is a job of its own, with its own directory; the job's id names them all, as
    an array's does, and 1234+1 names one."""
    out = cluster.run(["srun", "-J", unique_job_name(), "--transit=advise", "-N1", "printenv", "SLURM_JOB_ID", ":",
                       "-N1", "true"])
    assert out.returncode == 0, out.stderr
    leader = out.stdout.strip()
    settled(cluster, leader)
    listed = transit_report(cluster, leader, "--json")
    assert listed.returncode == 1, listed.stderr  # no task called CUDA: no stats
    jobs = json.loads(listed.stdout)["jobs"]
    assert [(j["shown_id"], j["policy"]) for j in jobs] == [(f"{leader}+0", "advise"), (f"{leader}+1", "advise")]
    assert jobs[0]["job_id"] == leader and jobs[1]["job_id"] != leader
    assert [j["directory"] for j in jobs] == [str(cluster.report_dir / j["job_id"]) for j in jobs]
    assert all((cluster.report_dir / j["job_id"] / "step-0.json").is_file() for j in jobs)
    one = transit_report(cluster, f"{leader}+1", "--json")
    assert one.returncode == 1, one.stderr
    job = json.loads(one.stdout)["job"]
    assert (job["shown_id"], job["job_id"], job["policy"]) == (f"{leader}+1", jobs[1]["job_id"], "advise")


def test_several_jobs_and_a_users_jobs(cluster: Cluster, advise_job: tuple[str, str, bool],
                                       array_job: tuple[str, list[str]]) -> None:
    job_id, _, _ = advise_job
    array_id, tasks = array_job
    out = transit_report(cluster, job_id, f"{array_id}_2", "--json")
    assert out.returncode == 0, out.stderr
    assert [j["job_id"] for j in json.loads(out.stdout)["jobs"]] == [job_id, tasks[2]]
    user = job_user(cluster)
    mine = transit_report(cluster, "-u", user, "-S", "now-1hour", "--json")
    assert mine.returncode == 0, mine.stderr
    listed = {j["job_id"]: j for j in json.loads(mine.stdout)["jobs"]}
    assert {job_id, *tasks} <= set(listed)
    assert all(j["user"] == user for j in listed.values())
    assert listed[tasks[0]]["shown_id"] == f"{array_id}_0"
