"""transit.slurm's job facts and hostlists, on captured and written Slurm outputs (tests/fixtures/slurm,
tests/fixtures/report/slurm, tests/fixtures/report/hostlists-scontrol-22.05.tsv)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from transit.report.load import SubmitLines
from transit.slurm import (
    JobFacts,
    compress_hostlist,
    gpus_in_tres,
    gpus_per_node,
    parse_sacct,
    parse_squeue,
    plugin_arguments_in_plugstack,
    tres_from_string,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SLURM = FIXTURES / "slurm"
SACCT = FIXTURES / "report" / "slurm" / "sacct-22.05-jobs.txt"  # captured: sacct_command(["--jobs=1,2,3,6,7"])
SACCT_USER = FIXTURES / "report" / "slurm" / "sacct-22.05-user.txt"  # captured: --user=root, the last hour
SQUEUE_ARRAYS = FIXTURES / "report" / "slurm" / "squeue-22.05-arrays.json"
SACCT_HET = FIXTURES / "report" / "slurm" / "sacct-22.05-het.txt"  # captured: sacct_command(["--jobs=79"])
HOSTLISTS = FIXTURES / "report" / "hostlists-scontrol-22.05.tsv"


def load(name: str) -> dict:
    return json.loads((SLURM / name).read_text())


def squeue_job(document: dict, job_id: str, now_unix: float | None = None) -> JobFacts:
    (job,) = [job for job in parse_squeue(document, now_unix) if job.job_id == job_id]
    return job


def scontrol_cases() -> list[tuple[str, str]]:
    lines = [line.split("\t") for line in HOSTLISTS.read_text().splitlines() if not line.startswith("#")]
    return [(hosts, expected) for hosts, expected in lines]


@pytest.mark.parametrize(("hosts", "expected"), scontrol_cases())
def test_hostlists_compress_as_scontrol_does(hosts: str, expected: str) -> None:
    """Every case as Slurm 22.05's `scontrol show hostlistsorted` wrote it: zero padding kept, several
    ranges and prefixes, hosts without a number, widths that only combine one way."""
    assert compress_hostlist(hosts.split(",")) == expected


def test_hostlist_of_a_thousand_ranks_nodes() -> None:
    assert compress_hostlist(f"gpu{n:03d}" for n in [*range(1, 126), 1, 2]) == "gpu[001-125]"
    assert compress_hostlist([]) == ""


def test_sacct_jobs_with_steps_arrays_and_pending_tasks() -> None:
    """Captured on the dev cluster with accounting: a batch job of two srun steps, an srun job, a
    3-task array, a --wrap job whose SubmitLine holds "|" and a newline, and an array throttled to one
    task at a time (task 0 cancelled, task 1 running, 2-3 pending)."""
    jobs = parse_sacct(SACCT.read_text())
    assert [(j.shown_id, j.job_id, j.state) for j in jobs] == [
        ("1", "1", "COMPLETED"),
        ("2", "2", "COMPLETED"),
        ("3_0", "4", "COMPLETED"),
        ("3_1", "5", "COMPLETED"),
        ("3_2", "3", "COMPLETED"),  # the array's own record becomes its last task
        ("6", "6", "FAILED"),
        ("7_0", "8", "CANCELLED"),  # "CANCELLED by 0"
        ("7_1", "9", "RUNNING"),
        ("7_[2-3%1]", "7", "PENDING"),
    ]
    first = jobs[0]
    assert (first.name, first.user, first.nodelist, first.num_nodes, first.num_gpus) == (
        "llama-8b", "root", "node[1-2]", 2, None)  # the dev cluster has no GPU TRES
    assert (first.start_unix, first.end_unix, first.elapsed_s) == (1796161194, 1796161195, 1)
    assert first.submit_line == ("sbatch --wait -J llama-8b -N2 --transit=advise --transit-mem-limit=40G "
                                 "-o /tmp/acw/j1.out job.sh")
    assert list(first.step_submit_lines) == ["0", "1"]  # the batch and extern steps have no submit line
    assert first.step_submit_lines["1"].startswith("srun --transit=prefetch ")
    running, pending = jobs[7], jobs[8]
    assert (running.end_unix, running.elapsed_s, running.unfinished) == (None, 15, True)
    assert (pending.start_unix, pending.nodelist, pending.unfinished) == (None, None, True)
    # a SubmitLine with "|" and a newline in it stays whole
    assert jobs[5].submit_line.endswith("python3 /no/such/eval.py | tee eval.log\nexit 3")


def test_sacct_jobs_of_a_user() -> None:
    jobs = parse_sacct(SACCT_USER.read_text())
    assert [j.shown_id for j in jobs] == ["1", "2", "3_0", "3_1", "3_2", "6", "7_0", "7_1"]
    assert {j.user for j in jobs} == {"root"}


def test_gpus_from_tres() -> None:
    assert gpus_in_tres(tres_from_string("billing=64,cpu=64,gres/gpu=16,gres/gpu:h200=16,mem=1000G,node=2")) == 16
    assert gpus_in_tres(tres_from_string("cpu=8,gres/gpu:h200=8,mem=200G,node=1")) == 8  # only a typed GPU TRES
    assert gpus_in_tres(tres_from_string("billing=2,cpu=2,node=2")) is None


def test_job_ids_name_jobs_as_sacct_reads_them() -> None:
    jobs = parse_sacct(SACCT.read_text())

    def named(wanted: str) -> list[str]:
        return [j.shown_id for j in jobs if j.matches(wanted)]

    assert named("3") == ["3_0", "3_1", "3_2"]
    assert named("3_1") == named("5") == ["3_1"]  # as the array shows it, and by the task's own id
    assert named("7") == ["7_0", "7_1", "7_[2-3%1]"]
    assert named("8") == ["7_0"]
    assert named("1") == ["1"] and named("1_0") == [] and named("999") == []


def test_sacct_output_that_is_not_ours_gives_no_jobs() -> None:
    assert parse_sacct("") == []
    assert parse_sacct("JobID|JobName|State\n4242|x|COMPLETED\n") == []


def test_squeue_22_05_running_job_among_others() -> None:
    doc = load("squeue-22.05-running.json")
    assert len(doc["jobs"]) > 1  # 22.05 ignores -j with --json: the caller picks the job
    facts = squeue_job(doc, "17", now_unix=1795982775 + 4)
    assert (facts.source, facts.name, facts.state, facts.user) == ("squeue", "report-capture", "RUNNING", "root")
    assert (facts.nodelist, facts.num_nodes, facts.num_gpus) == ("node[1-2]", 2, None)
    assert (facts.start_unix, facts.array_job_id, facts.shown_id) == (1795982775, None, "17")
    assert facts.elapsed_s == 4  # running: now - start, not the expected end time squeue prints


# sacct_command's record of job 65 on the dev cluster (22.05.8, slurmdbd), read 0.7 s after its srun
# ended: slurmdbd has not written the job yet; 3 s later the row had its name and SubmitLine.
PROVISIONAL = ("65^|^65^|^allocation^|^transit-test^|^COMPLETED^|^1796166505^|^1796166505^|^0^|^1^|^node1^|^"
               "billing=1,cpu=1,node=1^|^^|^\n")


def test_a_provisional_record_is_marked() -> None:
    (job,) = parse_sacct(PROVISIONAL)
    assert (job.provisional, job.name, job.submit_line) == (True, "allocation", None)


@pytest.mark.parametrize(("state", "submit_line"), [("COMPLETED", ""), ("RUNNING", "sbatch x.sh")])
def test_a_job_accounting_has_not_settled_takes_the_controllers_facts(
        monkeypatch: pytest.MonkeyPatch, state: str, submit_line: str) -> None:
    """Job 17 as a provisional record (no submit line), or as an unfinished one: the controller's
    facts win where it remembers the job; the submit line, which only accounting has, stays."""
    from transit import slurm

    row = (PROVISIONAL.replace("65", "17").replace("COMPLETED", state)
           .replace("^|^^|^\n", f"^|^{submit_line}^|^\n"))
    squeue = (SLURM / "squeue-22.05-running.json").read_text()
    monkeypatch.setattr(slurm, "_run", lambda command, env=None: row if command[0] == "sacct" else squeue)
    found, answered = slurm.jobs_by_id(["17"])
    (job,) = found["17"]
    assert (answered, job.source, job.name, job.state) == ("sacct", "squeue", "report-capture", "RUNNING")
    assert job.submit_line == (submit_line or None)


def array_3_in_squeue(*users: str) -> str:
    """squeue --json (22.05 shape, written) remembering array 3's three tasks, run by USERS in turn."""
    tasks = [("4", 0), ("5", 1), ("3", 2)]
    return json.dumps({"jobs": [
        {"job_id": int(job), "array_job_id": 3, "array_task_id": task, "job_state": "COMPLETED", "name": "sweep",
         "user_name": user, "start_time": 1796161196, "end_time": 1796161197, "node_count": 1, "nodes": "node1"}
        for (job, task), user in zip(tasks, users, strict=True)]})


def sacct_rows_of(job_id: str) -> str:
    """The captured sacct records (job and steps) of one job of SACCT."""
    kept = []
    for record in SACCT.read_text().split("^|^\n"):
        fields = record.split("^|^")  # JobIDRaw is the second field: 3, 3.batch, 3.0
        if len(fields) > 1 and fields[1].partition(".")[0] == job_id:
            kept.append(record + "^|^\n")
    return "".join(kept)


def test_an_array_accounting_has_written_in_part_takes_its_other_tasks_from_the_controller(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen in CI just after an array ended: sacct -j 3 holds only the task accounting has written
    (the array's own record, 3_2); the others are provisional records that do not name their array."""
    from transit import slurm

    sacct = sacct_rows_of("3")
    squeue = array_3_in_squeue("root", "root", "root")
    monkeypatch.setattr(slurm, "_run", lambda command, env=None: sacct if command[0] == "sacct" else squeue)
    found, answered = slurm.jobs_by_id(["3"])
    assert answered == "sacct"
    assert [(j.shown_id, j.job_id, j.source) for j in found["3"]] == [
        ("3_0", "4", "squeue"), ("3_1", "5", "squeue"), ("3_2", "3", "sacct")]


def test_a_users_jobs_accounting_has_not_written_come_from_the_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    """sacct -u lists jobs 1 and 3 (3_2); the controller also remembers 3_0 and 3_1, and 3_1 of
    another user, which stays out."""
    from transit import slurm

    sacct = sacct_rows_of("1") + sacct_rows_of("3")
    squeue = array_3_in_squeue("root", "alice", "root")
    monkeypatch.setattr(slurm, "_run", lambda command, env=None: sacct if command[0] == "sacct" else squeue)
    jobs, answered = slurm.jobs_of_user("root", 1796161000, 1796162000)
    assert answered == "sacct"
    assert [(j.shown_id, j.source) for j in jobs] == [("1", "sacct"), ("3_0", "squeue"), ("3_2", "sacct")]


def test_a_controller_squeue_cannot_reach_is_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """squeue 22.05 exits 0 with no jobs and an "errors" entry when slurmctld does not answer: that is
    no answer, not "no such job"."""
    from transit import slurm

    squeue = (SLURM / "squeue-22.05-unreachable.json").read_text()
    monkeypatch.setattr(slurm, "_run", lambda command, env=None: None if command[0] == "sacct" else squeue)
    assert slurm.jobs_by_id(["17"]) == ({"17": []}, None)
    assert slurm.jobs_of_user("root", 1796161000, 1796162000) == ([], None)


def test_a_heterogeneous_jobs_id_names_each_component(monkeypatch: pytest.MonkeyPatch) -> None:
    """Captured: `srun --transit=advise -N1 true : -N1 true`, components 79+0 (job 79) and 79+1 (job 80)."""
    from transit import slurm

    sacct = SACCT_HET.read_text()
    monkeypatch.setattr(slurm, "_run", lambda command, env=None: sacct if command[0] == "sacct" else None)
    found, answered = slurm.jobs_by_id(["79", "79+1", "80"])
    assert answered == "sacct"
    assert {wanted: [(j.shown_id, j.job_id) for j in jobs] for wanted, jobs in found.items()} == {
        "79": [("79+0", "79"), ("79+1", "80")], "79+1": [("79+1", "80")], "80": [("79+1", "80")]}
    assert found["80"][0].step_submit_lines == {"0": "srun --transit=advise -N1 true : -N1 true"}


def test_squeue_22_05_completed_job() -> None:
    facts = squeue_job(load("squeue-22.05-completed.json"), "17")
    assert (facts.state, facts.unfinished) == ("COMPLETED", False)
    assert facts.elapsed_s == 1795982783 - 1795982775


def test_squeue_24_11_shape() -> None:
    doc = load("squeue-24.11.json")
    facts = squeue_job(doc, "4242", now_unix=1764446400 + 600)
    assert (facts.state, facts.num_nodes, facts.num_gpus, facts.user) == ("RUNNING", 2, 16, "alice")
    assert facts.elapsed_s == 600
    done = squeue_job(doc, "4244")
    assert (done.state, done.elapsed_s, done.num_gpus) == ("COMPLETED", 300, 4)


def test_squeue_22_05_array_tasks() -> None:
    """Captured: jobs 1-3, array 4 (tasks 0 and 1, as jobs 5 and 4: the array's own record becomes its
    last task) and array 6 throttled to one task at a time (task 0 running as job 7, 1-3 pending)."""
    jobs = parse_squeue(json.loads(SQUEUE_ARRAYS.read_text()))
    assert [(j.shown_id, j.job_id, j.state, j.user) for j in jobs] == [
        ("1", "1", "COMPLETED", "transit-test"), ("2", "2", "COMPLETED", "transit-test"),
        ("3", "3", "COMPLETED", "transit-test"), ("4_0", "5", "COMPLETED", "transit-test"),
        ("4_1", "4", "COMPLETED", "transit-test"), ("6_0", "7", "RUNNING", "transit-test"),
        ("6_[1-3%1]", "6", "PENDING", "transit-test")]
    assert [j.shown_id for j in jobs if j.matches("4")] == ["4_0", "4_1"]
    assert [j.shown_id for j in jobs if j.matches("6")] == ["6_0", "6_[1-3%1]"]
    assert [j.shown_id for j in jobs if j.matches("7")] == ["6_0"]
    assert [j.shown_id for j in jobs if j.matches("4_1")] == ["4_1"]


def test_squeue_24_11_captured_jobs() -> None:
    """Captured on 24.11.5 (tests/fixtures/slurm/README.md): job 1 running and completed; without
    -t all the completed job is missing, so _squeue_jobs asks for --states=all."""
    running = squeue_job(load("squeue-24.11-running.json"), "1", now_unix=1796159256 + 5)
    assert (running.state, running.name, running.nodelist, running.num_nodes, running.elapsed_s) == (
        "RUNNING", "report-capture", "node[1-2]", 2, 5)
    done = squeue_job(load("squeue-24.11-completed.json"), "1")
    assert (done.state, done.elapsed_s, done.unfinished) == ("COMPLETED", 8, False)
    assert parse_squeue(load("squeue-24.11-completed-no-state-all.json")) == []


def test_squeue_24_11_gpus_without_accounting_come_from_tres_per_node() -> None:
    """Without slurmdbd, 24.11 keeps GPUs out of tres_alloc_str ("cpu=2,node=2,billing=2"); its
    tres_per_node ("gres/gpu:h200:2") times the nodes gives them."""
    for name, states in (("squeue-24.11-gpus.json", ("RUNNING", "RUNNING")),
                         ("squeue-24.11-gpus-finished.json", ("COMPLETED", "CANCELLED"))):
        jobs = parse_squeue(load(name))
        assert [(j.job_id, j.state, j.num_nodes, j.num_gpus) for j in jobs] == [
            ("2", states[0], 2, 4), ("3", states[1], 2, 2)]


@pytest.mark.parametrize(("tres_per_node", "gpus"), [
    ("gres/gpu:h200:2", 2), ("gres:gpu:2", 2), ("gres/gpu=2", 2), ("gres/gpu:4,gres/shard:1", 4),
    ("gres/gpu:a100:2,gres/gpu:h100:1", 3), ("gres/shard:2", None), ("", None), (None, None)])
def test_gpus_per_node_from_tres_per_node(tres_per_node: str | None, gpus: int | None) -> None:
    assert gpus_per_node(tres_per_node) == gpus


def test_squeue_24_11_array_tasks() -> None:
    """24.11's shape, written: ids as {"set", "infinite", "number"} objects, unset ones "set": false."""
    def n(value: int | None) -> dict[str, object]:
        return {"set": value is not None, "infinite": False, "number": value or 0}

    doc = {"jobs": [
        {"job_id": n(7002), "array_job_id": n(7000), "array_task_id": n(2), "job_state": ["COMPLETED"]},
        {"job_id": n(7000), "array_job_id": n(7000), "array_task_id": n(None), "array_task_string": "3-4",
         "job_state": ["PENDING"]},
        {"job_id": n(17), "array_job_id": n(0), "array_task_id": n(None), "job_state": ["COMPLETED"]},
    ]}
    assert [(j.shown_id, j.job_id) for j in parse_squeue(doc)] == [("7000_2", "7002"), ("7000_[3-4]", "7000"),
                                                                   ("17", "17")]


@pytest.mark.parametrize(
    "document",
    [None, {}, [], {"jobs": "nope"}, {"jobs": [None, 3]}, {"jobs": [{"job_id": {"set": False, "number": 0}}]}],
)
def test_malformed_squeue_documents_give_no_jobs(document: object) -> None:
    assert parse_squeue(document) == []


def test_wrong_types_inside_a_job_read_as_unknown() -> None:
    doc = {"jobs": [{"job_id": 5, "name": 7, "job_state": {"current": 3}, "start_time": "soon",
                     "tres_alloc_str": 4, "node_count": {"set": True, "infinite": True, "number": 0}}]}
    (facts,) = parse_squeue(doc)
    assert (facts.name, facts.state, facts.elapsed_s, facts.num_nodes, facts.num_gpus) == (None,) * 5


def test_plugin_arguments_in_plugstack_follow_includes(tmp_path: Path) -> None:
    included = tmp_path / "plugstack.conf.d"
    included.mkdir()
    (included / "10-other.conf").write_text("optional /usr/lib/slurm/other.so report_dir=/not/ours\n")
    (included / "20-transit.conf").write_text(
        "# required /old/spank_transit.so report_dir=/commented/out\n"
        "required /opt/transit/lib/spank_transit.so lib=/opt/transit/lib/libtransit.so "
        "report_dir=/shared/transit policy=advise  # site default\n"
    )
    plugstack = tmp_path / "plugstack.conf"
    plugstack.write_text(f"include {included}/*.conf\n")
    assert plugin_arguments_in_plugstack(str(plugstack)) == {
        "lib": "/opt/transit/lib/libtransit.so", "report_dir": "/shared/transit", "policy": "advise"}
    plugstack.write_text("required /opt/transit/lib/spank_transit.so\n")
    assert plugin_arguments_in_plugstack(str(plugstack)) == {}
    assert plugin_arguments_in_plugstack(str(tmp_path / "missing.conf")) == {}


@pytest.mark.parametrize(
    ("line", "options"),
    [
        ("srun -N2 --transit=advise python train.py", {"transit": "advise"}),
        ("srun --transit python x.py", {"transit": ""}),  # the plugin's default policy
        ("sbatch --transit=prefetch --transit-mem-limit 40G job.sh", {"transit": "prefetch", "transit-mem-limit": "40G"}),
        ("salloc --transit-mem-limit=1.5T --transit-report-dir=/scratch/r", {"transit-mem-limit": "1.5T",
                                                                               "transit-report-dir": "/scratch/r"}),
        ("srun --transit=off python x.py", {"transit": "off"}),
        ("srun --transitx=1 -N2 python --transit-foo x.py", {}),
        # sacct keeps a --wrap's words unquoted; with quotes kept, the wrapped line is read as well
        ("sbatch --wrap=srun --transit=advise python eval.py | tee log", {"transit": "advise"}),
        ("sbatch --wrap='srun --transit=hybrid python eval.py'", {"transit": "hybrid"}),
        ("sbatch --wrap 'srun --transit=base x' --transit-mem-limit=2G", {"transit-mem-limit": "2G", "transit": "base"}),
        ("srun 'unbalanced --transit=advise", {"transit": "advise"}),
    ],
)
def test_transit_options_on_a_submit_line(line: str, options: dict[str, str]) -> None:
    assert SubmitLines.options(line) == options


def test_how_a_submit_line_asked_transit_to_run() -> None:
    def how(line: str | None, default: str | None) -> tuple[str | None, str, int | None] | None:
        run = SubmitLines.how_run(SubmitLines.options(line or ""), default)
        return None if run is None else (run.policy, run.mode, run.limit_bytes)

    assert how("sbatch --transit=advise --transit-mem-limit=40G x.sh", None) == ("advise", "limit", 40 << 30)
    assert how("srun --transit python x.py", "prefetch") == ("prefetch", "physical", None)
    assert how("srun --transit=off x", "advise") is None
    assert how("srun python x.py", "advise") is None
    assert how(None, "advise") is None


def test_each_step_runs_as_the_job_line_and_its_srun_line_say() -> None:
    jobs = {job.job_id: job for job in parse_sacct(SACCT.read_text())}

    def runs(job_id: str) -> list[tuple[str | None, str, int | None]]:
        return [(r.policy, r.mode, r.limit_bytes) for r in SubmitLines.of_job(jobs[job_id], "base")]

    # sbatch's options reach each step; step 1's own --transit=prefetch replaces --transit=advise
    assert runs("1") == [("advise", "limit", 40 << 30), ("prefetch", "limit", 40 << 30)]
    assert runs("2") == [("advise", "physical", None)]  # srun alone: the job's line is the step's
    assert runs("4") == [("base", "physical", None)]  # a bare --transit: the plugin's default policy=
    assert runs("6") == [("advise", "limit", 8 << 30)]  # the wrapped srun's --transit-mem-limit 8G
    assert runs("8") == [("advise", "physical", None)]  # no step ran: the job's own line
    assert SubmitLines.of_job(None, "advise") == []


@pytest.mark.parametrize("scontrol", ["sleep 30", "exit 1"])
def test_the_site_report_dir_from_this_nodes_plugstack_when_slurmctld_is_silent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scontrol: str) -> None:
    """slurmctld unreachable (scontrol hangs or fails): within 2 s, the report directory comes from
    the plugstack.conf this node's slurm.conf names, the file srun itself reads."""
    import time

    from transit import slurm

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\n{scontrol}\n")
    (bin_dir / "scontrol").chmod(0o755)
    (tmp_path / "plugstack.conf").write_text(
        "# the site's\nrequired /opt/transit/lib/spank_transit.so lib=/opt/transit/lib/libtransit.so "
        "report_dir=/shared/transit policy=advise\n")
    (tmp_path / "slurm.conf").write_text(f"ClusterName=x\nPlugStackConfig={tmp_path / 'plugstack.conf'}\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    slurm.plugstack_arguments.cache_clear()
    started = time.monotonic()
    try:
        found = slurm.plugstack_arguments()
    finally:
        slurm.plugstack_arguments.cache_clear()
    assert time.monotonic() - started < slurm.PLUGSTACK_QUERY_TIMEOUT_S + 1
    assert found == {"lib": "/opt/transit/lib/libtransit.so", "report_dir": "/shared/transit", "policy": "advise"}
