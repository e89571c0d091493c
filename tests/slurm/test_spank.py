"""The SPANK plugin on the real local cluster, as a non-root user (TEST_USER) unless a test is
about root: options, checks before submission, the task environment in every task of srun and
sbatch steps, the job's report directory and step file, other users kept out, untouched jobs,
extern and batch steps, and stats files."""

from __future__ import annotations

import glob
import json
import os
import pwd
import random
import re
import shutil
import socket
import stat
import subprocess
import sys
import textwrap
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.slurm.conftest import DEV_CLUSTER, OTHER_USER, REPO, TEST_USER, Cluster, unique_job_name
from transit import _native

POLICY_CHOICES = "|".join((*_native.policies(), "off"))

pytestmark = pytest.mark.slurm

# A harmless library a user might already preload; the plugin must keep it after libtransit.
USER_PRELOAD_CANDIDATES = ("/usr/lib/x86_64-linux-gnu/libm.so.6", "/lib/x86_64-linux-gnu/libm.so.6",
                           "/usr/lib64/libm.so.6", "/usr/lib/aarch64-linux-gnu/libm.so.6")
USER_PYTHONPATH = "/opt/user/site"
# Prints what a task sees, one line per task.
SHOW_TASK_ENV = ('echo "TASK|$SLURM_PROCID|$SLURM_JOB_ID|$SLURM_STEP_ID|$SLURMD_NODENAME|'
                 '${LD_PRELOAD-}|${PYTHONPATH-}|$(env | grep ^TRANSIT_ | sort | tr "\\n" ,)|'
                 '$SLURM_STEP_NODELIST"')
GIB = 1024**3
JOB_DIR_MODE = 0o700  # the plugin's default for <report_dir>/<jobid>/


def user_preload() -> str:
    for path in USER_PRELOAD_CANDIDATES:
        if os.path.exists(path):
            return path
    pytest.skip("no libm.so.6 to preload as the user's own library")


def parse_tasks(stdout: str) -> list[dict[str, object]]:
    tasks = []
    for line in stdout.splitlines():
        if not line.startswith("TASK|"):
            continue
        _, rank, job, step, node, preload, pythonpath, transit, nodelist = line.split("|")
        tasks.append({
            "rank": int(rank), "job": job, "step": step, "node": node, "nodelist": nodelist,
            "preload": preload.split(":") if preload else [],
            "pythonpath": pythonpath.split(":") if pythonpath else [],
            "transit": dict(kv.split("=", 1) for kv in transit.split(",") if kv),
        })
    return sorted(tasks, key=lambda t: (t["step"], t["rank"]))


def owner_and_mode(path: Path) -> tuple[str, int]:
    st = path.lstat()
    return pwd.getpwuid(st.st_uid).pw_name, stat.S_IMODE(st.st_mode)


def step_file(job_dir: Path, step: str) -> dict[str, object]:
    return json.loads((job_dir / f"step-{step}.json").read_text())


def test_help_lists_the_options(cluster: Cluster) -> None:
    for command in ("srun", "sbatch", "salloc"):
        out = cluster.run([command, "--help"])
        assert out.returncode == 0, out.stderr
        assert f"--transit={POLICY_CHOICES}" in out.stdout, command
        assert "--transit-mem-limit=SIZE" in out.stdout, command
        assert "--transit-report-dir=DIR" in out.stdout, command
        plugin_part = out.stdout.split("Options provided by plugins:")[1]
        helps = re.findall(r"(?m)^\s+--transit\S*\s+(\S+)", plugin_part)
        assert helps == ["[transit]"] * 3, plugin_part


# What Slurm's plugin loader looks up; spank/spank_transit.map must export nothing else.
SPANK_EXPORTS = {"plugin_name", "plugin_type", "plugin_version", "spank_plugin_version",
                 "slurm_spank_init", "slurm_spank_init_post_opt", "slurm_spank_local_user_init",
                 "slurm_spank_user_init", "slurm_spank_task_init", "slurm_spank_exit"}


def test_plugin_exports_only_spank_symbols_and_is_hardened(cluster: Cluster) -> None:
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(cluster.plugin)],
                             capture_output=True, text=True, check=True).stdout
    assert {line.split()[-1] for line in symbols.splitlines() if line.strip()} == SPANK_EXPORTS
    dynamic = subprocess.run(["readelf", "-dlW", str(cluster.plugin)],
                             capture_output=True, text=True, check=True).stdout
    assert "GNU_RELRO" in dynamic and re.search(r"FLAGS.*\bNOW\b", dynamic)  # -z relro -z now
    imports = subprocess.run(["nm", "-D", "--undefined-only", str(cluster.plugin)],
                             capture_output=True, text=True, check=True).stdout
    assert "__stack_chk_fail" in imports  # -fstack-protector-strong
    assert re.search(r"__\w+_chk\b", imports.replace("__stack_chk_fail", ""))  # _FORTIFY_SOURCE=2


def test_advise_on_two_nodes_as_a_user(cluster: Cluster) -> None:
    """A user's 2-node step: every task gets libtransit first and its TRANSIT_* variables; the job's
    directory in the root-owned site report_dir is the user's, 0700, with the step file in it."""
    preload = user_preload()
    env = cluster.env(LD_PRELOAD=preload, PYTHONPATH=USER_PYTHONPATH)
    before = time.time()
    out = cluster.run(["srun", "-N2", "-n4", "--transit=advise", "--transit-mem-limit=40G",
                       "bash", "-c", SHOW_TASK_ENV], env=env)
    assert out.returncode == 0, out.stderr
    tasks = parse_tasks(out.stdout)
    job = tasks[0]["job"]
    # one line at the step's end: what it ran with, where the stats are, what to run next
    assert out.stderr.splitlines() == [(f"srun: transit: step {job}.0: advise, limit 40G; stats in "
                                       f"{cluster.report_dir}/{job}/; transit report {job}")]
    assert [t["rank"] for t in tasks] == [0, 1, 2, 3]
    assert len({t["node"] for t in tasks}) == 2
    job = tasks[0]["job"]
    for task in tasks:
        assert task["preload"] == [cluster.lib, preload]
        assert task["pythonpath"] == [cluster.hook_dir, USER_PYTHONPATH]
        assert task["transit"] == {"TRANSIT_POLICY": "advise", "TRANSIT_MEM_LIMIT": "40G",
                                   "TRANSIT_OUT": f"{cluster.report_dir}/{job}/"}
    job_dir = cluster.report_dir / str(job)
    assert owner_and_mode(cluster.report_dir) == ("root", 0o755)  # the site's stays as it was
    assert owner_and_mode(job_dir) == (TEST_USER, JOB_DIR_MODE)
    assert owner_and_mode(job_dir / "step-0.json") == (TEST_USER, 0o600)
    assert [p.name for p in job_dir.iterdir()] == ["step-0.json"]  # the temporary file is gone
    doc = step_file(job_dir, "0")
    start = doc.pop("start_unix")
    assert before <= start <= time.time()
    assert doc == {"schema": "transit.step/1", "job_id": job, "step_id": "0", "user": TEST_USER,
                   "uid": pwd.getpwnam(TEST_USER).pw_uid, "policy": "advise", "mode": "limit",
                   "limit_bytes": 40 * GIB, "report_dir": str(cluster.report_dir),
                   "options": {"transit": "advise", "transit-mem-limit": "40G"},
                   "nodes": tasks[0]["nodelist"], "ntasks": 4, "refused": None}


def test_other_users_cannot_read_or_write_a_users_job_dir(cluster: Cluster) -> None:
    out = cluster.run(["srun", "-N1", "--transit=base", "bash", "-c", SHOW_TASK_ENV])
    assert out.returncode == 0, out.stderr
    (task,) = parse_tasks(out.stdout)
    job_dir = cluster.report_dir / task["job"]
    step = job_dir / "step-0.json"
    assert cluster.run(["cat", str(step)]).returncode == 0  # its user reads it
    for attempt in (["ls", str(job_dir)], ["cat", str(step)], ["touch", str(job_dir / "planted")],
                    ["mkdir", str(job_dir / "planted")], ["rm", "-f", str(step)]):
        other = cluster.run(attempt, user=OTHER_USER)
        assert other.returncode != 0 and "Permission denied" in other.stderr, attempt
    assert [p.name for p in job_dir.iterdir()] == ["step-0.json"]


def test_a_long_preload_list_is_kept_whole(cluster: Cluster) -> None:
    # Far beyond any fixed buffer the plugin might have used for the task's LD_PRELOAD.
    preload = ":".join([user_preload()] * 2000)
    out = cluster.run(["srun", "-N1", "--transit=base", "bash", "-c", SHOW_TASK_ENV],
                      env=cluster.env(LD_PRELOAD=preload))
    assert out.returncode == 0, out.stderr
    (task,) = parse_tasks(out.stdout)
    assert task["preload"] == [cluster.lib, *preload.split(":")]


def test_report_dir_option_overrides_the_site_default(cluster: Cluster, tmp_path: Path) -> None:
    # The user's own directory, which does not exist yet: its parent does.
    reports = tmp_path / "reports"
    out = cluster.run(["srun", "-N2", f"--transit-report-dir={reports}", "--transit", "bash", "-c",
                       SHOW_TASK_ENV])
    assert out.returncode == 0, out.stderr
    tasks = parse_tasks(out.stdout)
    job = tasks[0]["job"]
    for task in tasks:
        assert task["transit"] == {"TRANSIT_POLICY": "base", "TRANSIT_OUT": f"{reports}/{job}/"}
    assert owner_and_mode(reports / job) == (TEST_USER, JOB_DIR_MODE)
    doc = step_file(reports / job, "0")
    assert doc["report_dir"] == str(reports) and doc["options"] == {"transit": None,
                                                                    "transit-report-dir": str(reports)}
    assert not (cluster.report_dir / job).exists()


def test_a_report_dir_with_a_trailing_slash_names_the_same_directory(cluster: Cluster, tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    out = cluster.run(["srun", "-N1", f"--transit-report-dir={reports}//", "--transit=advise", "bash", "-c",
                       SHOW_TASK_ENV])
    assert out.returncode == 0, out.stderr
    (task,) = parse_tasks(out.stdout)
    job = task["job"]
    assert task["transit"]["TRANSIT_OUT"] == f"{reports}/{job}/"
    assert out.stderr.splitlines()[-1] == (f"srun: transit: step {job}.0: advise, physical mode; stats in "
                                           f"{reports}/{job}/; transit report {job}")
    assert step_file(reports / job, "0")["report_dir"] == str(reports)


def test_a_report_dir_the_user_cannot_write_is_refused_at_submission(cluster: Cluster, tmp_path: Path) -> None:
    """srun and sbatch run as the user: the kernel answers there whether the tasks could write."""
    marker = tmp_path / "ran"
    for command in ("srun", "sbatch"):
        name = unique_job_name()
        tail = ["touch", str(marker)] if command == "srun" else ["--wrap", f"touch {marker}"]
        out = cluster.run([command, "-J", name, "-N2", "--transit", f"--transit-report-dir={cluster.report_dir}",
                           *tail])
        assert out.returncode != 0
        assert out.stderr.splitlines() == [
            (f"{command}: error: transit: --transit-report-dir='{cluster.report_dir}': uid "
             f"{pwd.getpwnam(TEST_USER).pw_uid} cannot write in it (Permission denied); use a directory you can "
             "write, e.g. $HOME/transit")]
        assert cluster.jobs_named(name) == []
    assert not marker.exists()


def test_a_report_dir_made_unwritable_after_submission_refuses_the_jobs_steps(cluster: Cluster,
                                                                             tmp_path: Path) -> None:
    """What sbatch could not see (the directory changed while the job waited): each srun in the job
    inherits the option and checks it again before its step starts, with one line."""
    reports = tmp_path / "reports"
    reports.mkdir()
    shutil.chown(reports, TEST_USER, TEST_USER)
    marker = tmp_path / "ran"
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\nsrun -N2 touch {marker}\n")
    out = cluster.run(["sbatch", "--hold", "--parsable", "-N2", "--transit", f"--transit-report-dir={reports}",
                       "-o", str(tmp_path / "out.txt"), str(script)], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    reports.chmod(0o555)
    assert release_and_wait(cluster, job) == "FAILED"
    assert (tmp_path / "out.txt").read_text().splitlines() == [
        (f"srun: error: transit: --transit-report-dir='{reports}': uid {pwd.getpwnam(TEST_USER).pw_uid} cannot "
         "write in it (Permission denied); use a directory you can write, e.g. $HOME/transit")]
    assert not marker.exists()


@pytest.mark.parametrize("env, options, task_env, notes", [
    ({"TRANSIT_POLICY": "advise"}, ["--transit"], {"TRANSIT_POLICY": "advise"}, []),
    ({"TRANSIT_POLICY": "advise"}, ["--transit=prefetch"], {"TRANSIT_POLICY": "prefetch"},
     ["note: --transit=prefetch overrides TRANSIT_POLICY='advise' from the environment"]),
    ({"TRANSIT_MEM_LIMIT": "24G"}, ["--transit"], {"TRANSIT_POLICY": "base", "TRANSIT_MEM_LIMIT": "24G"},
     [("note: TRANSIT_MEM_LIMIT='24G' from the environment turns limit mode on, as --transit-mem-limit "
      "would")]),
    ({"TRANSIT_MEM_LIMIT": "24G", "TRANSIT_OUT": "/tmp/elsewhere"}, ["--transit", "--transit-mem-limit=40G"],
     {"TRANSIT_POLICY": "base", "TRANSIT_MEM_LIMIT": "40G"},
     ["note: --transit-mem-limit=40G overrides TRANSIT_MEM_LIMIT='24G' from the environment",
      ("note: the report directory <report_dir>/<jobid>/ overrides TRANSIT_OUT='/tmp/elsewhere' from the "
      "environment")]),
])
def test_the_environment_applies_and_an_option_wins_over_it(cluster: Cluster, env: dict[str, str],
                                                            options: list[str], task_env: dict[str, str],
                                                            notes: list[str]) -> None:
    out = cluster.run(["srun", "-N1", *options, "bash", "-c", SHOW_TASK_ENV], env=cluster.env(**env))
    assert out.returncode == 0, out.stderr
    (task,) = parse_tasks(out.stdout)
    assert out.stderr.splitlines()[:-1] == [f"srun: transit: {note}" for note in notes]
    assert out.stderr.splitlines()[-1].startswith(f"srun: transit: step {task['job']}.0: ")
    assert task["transit"] == {**task_env, "TRANSIT_OUT": f"{cluster.report_dir}/{task['job']}/"}
    doc = step_file(cluster.report_dir / task["job"], "0")
    limit = task_env.get("TRANSIT_MEM_LIMIT")
    assert (doc["policy"], doc["limit_bytes"]) == (task_env["TRANSIT_POLICY"],
                                                   limit and _native.parse_size(limit))


# --- bad values: every one refused before the job exists, with one line that names it ------------

SRUN_SBATCH, RUN = ("srun", "sbatch"), ("transit run",)
ALL = (*SRUN_SBATCH, *RUN)
# transit run's option for each of the plugin's
RUN_OPTIONS = {"transit": "--policy", "transit-mem-limit": "--mem-limit", "transit-report-dir": "--out"}
LONG = "x" * 5000


def _bad(kind: str, key: str, values: list[str],
         commands: tuple[str, ...] = ALL) -> list[tuple[str, str, str, tuple[str, ...]]]:
    return [(kind, key, value, commands) for value in values]


BAD_VALUES = [
    *_bad("option", "transit", [
        "fast", "", "BASE", "Advise", "advise ", " advise", "base,advise", "prefetch|advise", "basee", "bas",
        LONG, "advise\n", "none", "true", "0", "$TRANSIT_POLICY", "on"]),
    *_bad("option", "transit-mem-limit", [
        "12Q", "0x10G", "1e3G", "1K", "0", "-1G", "G", "1.2.3G", "40 G", " 40G", "40G ", "nan", "inf",
        "1e400", "40GiBB", "40iB", "17T", "255M", "1.", ".G", "1,5G", "+40G", "40GG", "\u0664\u0660G",
        "40\nG", LONG, "", "1.0000000001G", "99999999999999999999", "4096", "0x1p9", "40Gb!", "\uff11G"]),
    *_bad("option", "transit-report-dir", [
        "", "/proc/transit", "/sys/transit", "/dev/transit", "/dev/shm/transit", "/etc/passwd/x", "/tmp/a\nb",
        "/tmp/a\tb", "/tmp/\x1b[31mred", "/" + LONG, "/proc", "/tmp/../proc/x"]),
    # directories the user cannot write, or cannot create: refused as the user, at submission
    *_bad("option", "transit-report-dir", ["/etc", "/", "/usr/share/transit", "/root", "/root/transit"]),
    # a path `transit run --out` may take (relative, or libtransit creates its missing parents)
    *_bad("option", "transit-report-dir", ["reports", "./reports", "~/reports", "/nonexistent-transit/a"],
          SRUN_SBATCH),
    *_bad("env", "TRANSIT_POLICY", ["fast", ""]),
    *_bad("env", "TRANSIT_MEM_LIMIT", ["12Q", "0x10G", "1K", ""]),
    *_bad("env", "TRANSIT_WARMUP_ITERS", ["abc", "0", "1001", "-1", ""]),
    *_bad("env", "TRANSIT_PREFETCH_GAP", ["lots", "1", "2G"]),
    *_bad("env", "TRANSIT_RECORDER", ["maybe", ""]),
    *_bad("env", "TRANSIT_VERBOSE", ["2"]),
    *_bad("env", "TRANSIT_EXTERNAL_CORRELATION", ["yes please"]),
    *_bad("env", "TRANSIT_CUPTI_DETACH", ["later"]),
    *_bad("env", "TRANSIT_TICK_LOG", ["often"]),
    *_bad("env", "TRANSIT_PROFILE", ["sometimes"]),
    *_bad("env", "TRANSIT_HYBRID_MOVER", ["later"]),
    *_bad("env", "TRANSIT_HYBRID_REMAP", ["twice"]),
    *_bad("env", "TRANSIT_HYBRID_GUARD", ["auto"]),
    *_bad("env", "TRANSIT_PROFILE_STEADY", ["later", "-1", "1000001"]),
    *_bad("env", "TRANSIT_STATS_INTERVAL", ["1", "abc", "86401", "-5"]),
    # under the plugin the report directory replaces TRANSIT_OUT; `transit run` takes it as --out
    *_bad("env", "TRANSIT_OUT", ["", "/proc/x", "/tmp/a\nb"], RUN),
    *[("name", name, "1", ALL) for name in (
        "TRANSIT_POLCY", "TRANSIT_MEMLIMIT", "TRANSIT_MEM_LIMT", "TRANSIT_WARMUP", "TRANSIT_RECORDR",
        "TRANSIT_", "TRANSIT_X", "TRANSIT_policy", "TRANSIT_OUTDIR", "TRANSIT_STATS", "TRANSIT_LIB",
        "TRANSIT_LIB_PATH")],
]


def test_the_table_has_at_least_80_bad_values_for_each_command() -> None:
    for command in ALL:
        assert sum(command in commands for *_, commands in BAD_VALUES) >= 80, command


def _command(command: str, kind: str, key: str, value: str, marker: Path,
             name: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that give `value`; its task would create `marker`."""
    env = {key: value} if kind in ("env", "name") else {}
    if command == "transit run":
        options = [f"{RUN_OPTIONS[key]}={value}"] if kind == "option" else []
        return [sys.executable, "-m", "transit", "run", *options, "--", "touch", str(marker)], env
    options = [f"--{key}={value}"] if kind == "option" else []
    if not (kind == "option" and key == "transit"):
        options.append("--transit")
    tail = ["touch", str(marker)] if command == "srun" else ["--wrap", f"touch {marker}"]
    return [command, "-J", name, *options, *tail], env


@pytest.mark.parametrize("command", ALL)
def test_every_bad_value_fails_before_the_job_starts_with_one_line(cluster: Cluster, tmp_path: Path,
                                                                   command: str) -> None:
    cases = [case for case in BAD_VALUES if command in case[3]]
    names = [unique_job_name() for _ in cases]

    def run(i: int) -> str | None:
        kind, key, value, _ = cases[i]
        marker = tmp_path / f"ran-{i}"
        args, env = _command(command, kind, key, value, marker, names[i])
        out = cluster.run(args, env=cluster.env(PYTHONPATH=str(REPO), **env), cwd=REPO)
        needle = key if kind == "name" else f"'{_native.show(value)}'"
        lines = out.stderr.splitlines()
        if out.returncode == 0 or len(lines) != 1 or "transit" not in lines[0] or needle not in lines[0]:
            return f"{kind} {key}={value[:40]!r}: rc={out.returncode} stderr={out.stderr[:300]!r}"
        return None

    # `transit run` is a Python start each; srun and sbatch refuse in a few milliseconds
    with ThreadPoolExecutor(max_workers=4 if command == "transit run" else 1) as pool:
        failures = [f for f in pool.map(run, range(len(cases))) if f]
    assert failures == [], "\n".join(failures)
    assert not list(tmp_path.glob("ran-*"))  # no task ran
    if command != "transit run":
        out = cluster.run(["squeue", "-h", "-t", "all", "-o", "%j"])
        assert out.returncode == 0 and not set(names) & set(out.stdout.split())  # no job was created


@pytest.mark.parametrize("plugstack_args, message", [
    ("lib={lib} policy=fast", "plugstack.conf: policy='fast' is not a policy"),
    ("lib=libtransit.so", "plugstack.conf: lib='libtransit.so' must be an absolute path"),
    ("lib={lib} colour=blue", "plugstack.conf: unknown argument 'colour=blue'"),
    ("policy=advise", "plugstack.conf: the spank_transit.so line has no lib=/path/to/libtransit.so"),
    ("lib=/nonexistent/libtransit.so",
     "plugstack.conf: lib=/nonexistent/libtransit.so: No such file or directory"),
    ("lib=/etc/passwd", "plugstack.conf: lib=/etc/passwd is not a 64-bit ELF shared object for this machine"),
    ("lib={plugin}",
     "plugstack.conf: lib={plugin} is not libtransit.so (it does not define transit_mark_iteration)"),
    ("lib={lib} lib={lib}", "plugstack.conf: lib= is given twice"),
    ("lib={lib} report_dir=/nonexistent-transit",
     "plugstack.conf: report_dir=/nonexistent-transit: No such file"),
    ("lib={lib} hook_dir=/etc/passwd", "plugstack.conf: hook_dir=/etc/passwd: not a directory"),
    ("lib={lib} report_dir_mode=0644", "plugstack.conf: report_dir_mode='0644' is not allowed"),
])
def test_bad_site_configuration_fails_srun_with_a_line_for_the_administrator(
        cluster: Cluster, tmp_path: Path, plugstack_args: str, message: str) -> None:
    # srun reads plugstack.conf itself, so a private copy of the client configuration is enough.
    plugstack = tmp_path / "plugstack.conf"
    args = plugstack_args.format(lib=cluster.lib, plugin=cluster.plugin)
    plugstack.write_text(f"required {cluster.plugin} {args}\n")
    conf = re.sub(r"(?m)^PlugStackConfig=.*$", f"PlugStackConfig={plugstack}", cluster.slurm_conf.read_text())
    (tmp_path / "slurm.conf").write_text(conf)
    name = unique_job_name()
    out = cluster.run(["srun", "-J", name, "--transit", "true"],
                      env=cluster.env(SLURM_CONF=str(tmp_path / "slurm.conf")))
    assert out.returncode != 0
    first = out.stderr.splitlines()[0]
    assert first.startswith(f"srun: error: transit: {message.format(plugin=cluster.plugin)}"), out.stderr
    assert first.endswith("; an administrator must fix the spank_transit.so line in plugstack.conf"), first
    assert cluster.jobs_named(name) == []


def test_job_lookup_sees_jobs_that_ran(cluster: Cluster) -> None:
    # The control for the tests above: a job that was created is found by its name.
    name = unique_job_name()
    out = cluster.run(["srun", "-J", name, "--transit=base", "true"])
    assert out.returncode == 0, out.stderr
    assert len(cluster.jobs_named(name)) == 1


@contextmanager
def site_plugstack_args(cluster: Cluster, extra: str):
    """The running cluster's plugstack.conf with more arguments, for the steps started meanwhile
    (each slurmstepd reads it when it starts)."""
    path = cluster.slurm_conf.parent / "plugstack.conf"
    original = path.read_text()
    path.write_text(original.rstrip("\n") + f" {extra}\n")
    try:
        yield
    finally:
        path.write_text(original)


def test_the_site_sets_the_job_dir_mode_and_its_files_get_the_same(cluster: Cluster) -> None:
    """report_dir_mode=0750: the group may read the job's directory; the step file and the stats
    files get the same mode (0640), so no one but the job's user can write any of them."""
    with site_plugstack_args(cluster, "report_dir_mode=0750"):
        out = cluster.run(["srun", "-N1", "--transit=advise", os.path.realpath(sys.executable), "-c", CUDA_TASK,
                           libcudart()])
    assert out.returncode == 0, out.stderr
    job = next(line.split("|")[1] for line in out.stdout.splitlines() if line.startswith("CUDA|"))
    job_dir = cluster.report_dir / job
    assert owner_and_mode(job_dir) == (TEST_USER, 0o750)
    files = sorted(job_dir.iterdir())
    assert [f.name.split(".")[0] for f in files] == ["rank0", "step-0"], files
    assert {owner_and_mode(f) for f in files} == {(TEST_USER, 0o640)}


@pytest.mark.parametrize("mode", ["0755", "0775", "0777", "0751", "0760"])
def test_a_job_dir_mode_others_could_write_or_enter_is_refused(cluster: Cluster, tmp_path: Path, mode: str) -> None:
    plugstack = tmp_path / "plugstack.conf"
    plugstack.write_text(f"required {cluster.plugin} lib={cluster.lib} report_dir_mode={mode}\n")
    conf = re.sub(r"(?m)^PlugStackConfig=.*$", f"PlugStackConfig={plugstack}", cluster.slurm_conf.read_text())
    (tmp_path / "slurm.conf").write_text(conf)
    out = cluster.run(["srun", "--transit", "true"], env=cluster.env(SLURM_CONF=str(tmp_path / "slurm.conf")))
    assert out.returncode != 0
    assert out.stderr.splitlines()[0].startswith(f"srun: error: transit: plugstack.conf: report_dir_mode='{mode}' "
                                                 "is not allowed; use 0700 to 0750"), out.stderr


# --- what the privileged code finds where the job's directory goes --------------------------------

HELD_SCRIPT = "#!/bin/bash\nsrun -N1 --transit=base touch {marker}\n"


def held_job(cluster: Cluster, tmp_path: Path) -> str:
    """A job of TEST_USER that is held, so that something can be planted where its directory goes."""
    script = tmp_path / "job.sh"
    script.write_text(HELD_SCRIPT.format(marker=tmp_path / "ran"))
    out = cluster.run(["sbatch", "--hold", "--parsable", "-N1", "-o", str(tmp_path / "out.txt"), str(script)],
                      cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


def release_and_wait(cluster: Cluster, job: str) -> str:
    out = cluster.run(["scontrol", "release", job], user="root")
    assert out.returncode == 0, out.stderr
    return cluster.wait_job(job)


def snapshot(path: Path) -> list[tuple[str, int, int, int, bytes]]:
    """Owner, group, mode and content of a directory and everything in it."""
    return [(str(p), p.lstat().st_uid, p.lstat().st_gid, p.lstat().st_mode,
             p.read_bytes() if p.is_file() else b"") for p in [path, *sorted(path.rglob("*"))]]


def test_a_symbolic_link_where_the_job_dir_goes_is_refused_and_nothing_outside_changes(
        cluster: Cluster, tmp_path: Path) -> None:
    victim = cluster.work_dir / f"victim-{uuid.uuid4().hex[:8]}"  # root's, outside the report dir
    victim.mkdir(mode=0o755)
    (victim / "keep").write_text("root's file\n")
    before = snapshot(victim)
    job = held_job(cluster, tmp_path)
    link = cluster.report_dir / job
    link.symlink_to(victim)
    try:
        assert release_and_wait(cluster, job) == "FAILED"
        output = (tmp_path / "out.txt").read_text()
        assert (f"transit: {cluster.report_dir}/{job} is not a directory this job can use (a symbolic link); "
                "an administrator must remove it") in output, output
        assert not (tmp_path / "ran").exists()
        assert snapshot(victim) == before
        assert link.is_symlink() and os.readlink(link) == str(victim)
    finally:
        link.unlink()


def test_another_users_directory_where_the_job_dir_goes_is_refused(cluster: Cluster, tmp_path: Path) -> None:
    job = held_job(cluster, tmp_path)
    planted = cluster.report_dir / job
    planted.mkdir(mode=0o777)
    os.chown(planted, pwd.getpwnam(OTHER_USER).pw_uid, -1)
    before = snapshot(planted)
    assert release_and_wait(cluster, job) == "FAILED"
    output = (tmp_path / "out.txt").read_text()
    assert (f"transit: {planted} belongs to uid {pwd.getpwnam(OTHER_USER).pw_uid}, not to the job's user "
            f"(uid {pwd.getpwnam(TEST_USER).pw_uid}); an administrator must remove it") in output, output
    assert snapshot(planted) == before and not (tmp_path / "ran").exists()


# --- jobs, allocations and their steps -----------------------------------------------------------

BATCH_SCRIPT = """\
#!/bin/bash
{directive}
echo "BATCH|${{LD_PRELOAD-}}|$(env | grep ^TRANSIT_ | tr '\\n' ,)"
srun -N2 -n2 bash -c '{show}'
srun -N1 -n1 bash -c '{show}'
"""


@pytest.mark.parametrize("directive, cli, policy", [
    ("", ["--transit=prefetch"], "prefetch"),
    ("#SBATCH --transit=prefetch", [], "prefetch"),
    ("#SBATCH --transit", [], "base"),  # bare: the site default (the dev cluster sets no policy=)
])
def test_sbatch_option_reaches_srun_steps(cluster: Cluster, tmp_path: Path, directive: str,
                                          cli: list[str], policy: str) -> None:
    script = tmp_path / "job.sh"
    script.write_text(BATCH_SCRIPT.format(directive=directive, show=SHOW_TASK_ENV.replace("'", "'\\''")))
    out = cluster.run(["sbatch", "--parsable", "-N2", "-o", str(tmp_path / "out.txt"), *cli, str(script)],
                      cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    assert cluster.wait_job(job) == "COMPLETED", (tmp_path / "out.txt").read_text()
    output = (tmp_path / "out.txt").read_text()
    batch = [line for line in output.splitlines() if line.startswith("BATCH|")]
    assert batch == ["BATCH||"], output  # the batch step itself is left alone
    tasks = parse_tasks(output)
    assert [(t["step"], t["rank"]) for t in tasks] == [("0", 0), ("0", 1), ("1", 0)], output
    for task in tasks:
        assert task["job"] == job
        assert task["preload"] == [cluster.lib]
        assert task["transit"] == {"TRANSIT_POLICY": policy, "TRANSIT_OUT": f"{cluster.report_dir}/{job}/"}
    job_dir = cluster.report_dir / job
    # not the batch step, not the extern step
    assert sorted(p.name for p in job_dir.iterdir()) == ["step-0.json", "step-1.json"]
    assert [step_file(job_dir, s)["ntasks"] for s in ("0", "1")] == [2, 1]


def extern_step_ran(cluster: Cluster, job: str) -> bool:
    logs = (cluster.slurm_conf.parent.parent / "log").glob("slurmd-node*.log")
    return any(f"[{job}.extern]" in log.read_text(errors="replace") for log in logs)


def test_extern_and_batch_steps_are_left_alone(cluster: Cluster, tmp_path: Path) -> None:
    """With PrologFlags=Contain every allocation has an extern step on its nodes; neither it nor the
    batch step is a step of the user's program, so neither makes a job directory or step file."""
    config = cluster.run(["scontrol", "show", "config"]).stdout
    assert re.search(r"(?m)^PrologFlags\s*=.*\bContain\b", config), "no PrologFlags=Contain in the cluster"
    alloc = cluster.run(["salloc", "-N2", "--transit=advise", "true"])
    assert alloc.returncode == 0, alloc.stderr
    salloc_job = re.search(r"Granted job allocation (\d+)", alloc.stderr).group(1)
    out = cluster.run(["sbatch", "--wait", "--parsable", "-N2", "--transit=advise", "-o",
                       str(tmp_path / "out.txt"), "--wrap", "echo BATCH $TRANSIT_POLICY"], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    sbatch_job = out.stdout.strip().split(";")[0]
    assert (tmp_path / "out.txt").read_text() == "BATCH\n"
    for job in (salloc_job, sbatch_job):
        deadline = time.monotonic() + 10  # slurmd logs the extern step's end after the job's
        while not extern_step_ran(cluster, job) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert extern_step_ran(cluster, job), job
        assert not (cluster.report_dir / job).exists(), job


@pytest.mark.parametrize("options, step_options, policy", [
    (["--transit=prefetch"], [], "prefetch"),
    (["--transit"], [], "base"),
    (["--transit=prefetch"], ["--transit=advise"], "advise"),  # the step's own option wins
])
def test_salloc_option_reaches_srun_steps(cluster: Cluster, options: list[str], step_options: list[str],
                                          policy: str) -> None:
    out = cluster.run(["salloc", "-N2", *options, "srun", "-N2", *step_options, "bash", "-c", SHOW_TASK_ENV])
    assert out.returncode == 0, out.stderr
    tasks = parse_tasks(out.stdout)
    assert len(tasks) == 2
    for task in tasks:
        assert task["preload"] == [cluster.lib]
        assert task["transit"]["TRANSIT_POLICY"] == policy


def test_the_step_line_of_a_het_group_names_that_components_job(cluster: Cluster) -> None:
    """Each component of a heterogeneous job is a job of its own, with its own directory: a step in
    component 1 (--het-group=1) is named by that component's job id, where its stats are."""
    out = cluster.run(["salloc", "-N1", "--transit=advise", ":", "-N1", "srun", "--het-group=1", "bash", "-c",
                       "echo $SLURM_JOB_ID_HET_GROUP_0 $SLURM_JOB_ID_HET_GROUP_1 $TRANSIT_OUT"])
    assert out.returncode == 0, out.stderr
    leader, component, transit_out = out.stdout.split()
    assert component != leader and transit_out == f"{cluster.report_dir}/{component}/"
    assert [line for line in out.stderr.splitlines() if "transit:" in line] == [
        (f"srun: transit: step {component}.0: advise, physical mode; stats in {cluster.report_dir}/{component}/; "
         f"transit report {component}")]


@pytest.mark.parametrize("options", [[], ["--transit=off"], ["--transit=advise", "--transit=off"]])
def test_jobs_without_transit_are_untouched(cluster: Cluster, options: list[str]) -> None:
    preload = user_preload()
    # without --transit nothing is checked either: TRANSIT_* variables are the user's business
    env = cluster.env(LD_PRELOAD=preload, PYTHONPATH=USER_PYTHONPATH, TRANSIT_POLCY="advise")
    out = cluster.run(["srun", "-N2", "-n2", *options, "bash", "-c", SHOW_TASK_ENV], env=env)
    assert out.returncode == 0, out.stderr
    tasks = parse_tasks(out.stdout)
    assert len(tasks) == 2
    for task in tasks:
        assert task["preload"] == [preload]
        assert task["pythonpath"] == [USER_PYTHONPATH]
        assert task["transit"] == {"TRANSIT_POLCY": "advise"}
    assert not (cluster.report_dir / str(tasks[0]["job"])).exists()


def test_user_supplied_library_path_is_ignored(cluster: Cluster, tmp_path: Path) -> None:
    rogue = str(tmp_path / "libtransit.so")
    # No option names a library: srun refuses it before any job exists.
    name = unique_job_name()
    out = cluster.run(["srun", "-J", name, "--transit", f"--transit-lib={rogue}", "true"])
    assert out.returncode != 0 and "unrecognized option" in out.stderr
    assert cluster.jobs_named(name) == []
    # Nor does a variable: TRANSIT_LIB is no TRANSIT variable, and Slurm's own option variable for a
    # --transit-lib that does not exist is ignored; the plugin uses plugstack.conf's lib= only.
    out = cluster.run(["srun", "-N1", "--transit=base", "true"], env=cluster.env(TRANSIT_LIB=rogue))
    assert out.returncode != 0 and "transit: TRANSIT_LIB is not a TRANSIT variable" in out.stderr
    env = cluster.env(SLURM_SPANK__SLURM_SPANK_OPTION_transit_lib=rogue)
    out = cluster.run(["srun", "-N1", "--transit=base", "bash", "-c", SHOW_TASK_ENV], env=env)
    assert out.returncode == 0, out.stderr
    (task,) = parse_tasks(out.stdout)
    assert task["preload"] == [cluster.lib]


def libcudart() -> str:
    """A CUDA runtime library to call: the nvidia-cuda-runtime wheel's or a toolkit's."""
    patterns = [os.path.join(p, "cu13", "lib", "libcudart.so*") for p in _nvidia_paths()]
    patterns += ["/usr/local/cuda/lib64/libcudart.so*", "/usr/local/cuda*/lib*/libcudart.so*",
                 "/usr/local/cuda*/targets/*/lib/libcudart.so*"]
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    pytest.skip("no libcudart.so (pip install nvidia-cuda-runtime)")


def _nvidia_paths() -> list[str]:
    try:
        import nvidia  # type: ignore[import-not-found]
    except ImportError:
        return []
    return list(nvidia.__path__)


# Loads the CUDA runtime into the global namespace, as a linked application would, then calls
# cudaMalloc through it: the preloaded libtransit's entry point comes first.
CUDA_TASK = textwrap.dedent("""\
    import ctypes, os, sys
    ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    ptr = ctypes.c_void_p()
    err = ctypes.CDLL(None).cudaMalloc(ctypes.byref(ptr), 1 << 20)
    print("CUDA|%s|%d" % (os.environ["SLURM_JOB_ID"], err))
""")


def test_two_node_job_writes_stats_files(cluster: Cluster) -> None:
    cudart = libcudart()
    python = os.path.realpath(sys.executable)
    out = cluster.run(["srun", "-N2", "-n2", "--transit=advise", python, "-c", CUDA_TASK, cudart])
    assert out.returncode == 0, out.stderr
    results = [line.split("|") for line in out.stdout.splitlines() if line.startswith("CUDA|")]
    assert len(results) == 2, out.stdout
    job = results[0][1]
    files = sorted((cluster.report_dir / str(job)).glob("rank*.json"))
    assert [f.name.split(".")[0] for f in files] == ["rank0", "rank1"], files
    assert {owner_and_mode(f)[0] for f in files} == {TEST_USER}
    gpu = any(int(r[2]) == 0 for r in results)  # cudaMalloc succeeded: a real device
    all_stats = [json.loads(path.read_text()) for path in files]
    assert len({s["identity"]["node"] for s in all_stats}) == 2  # one file from each node
    for stats in all_stats:
        assert stats["schema"] == "transit.rank/1"
        assert stats["identity"]["job_id"] == job
        assert stats["identity"]["world_size"] == 2
        assert stats["config"]["policy"] == "advise"
        assert stats["cuda_active"] is gpu
        if not gpu:
            assert stats["cuda_error"]


# --- the cluster itself: a second, private instance so the shared one is never stopped ----------

UP_BUDGET_S = 30
CLUSTER_PORTS = 7  # slurmctld, four slurmd, slurmdbd and MariaDB


def _free_port_base() -> int:
    for _ in range(50):
        base = random.randrange(20000, 60000 - CLUSTER_PORTS)
        try:
            for port in range(base, base + CLUSTER_PORTS):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise AssertionError("no free port range for a second dev cluster")


def test_dev_cluster_up_status_down(cluster: Cluster, tmp_path: Path) -> None:
    env = dict(os.environ, TRANSIT_DEV_CLUSTER_DIR=str(tmp_path / "dc"),
               TRANSIT_DEV_CLUSTER_PORT=str(_free_port_base()))

    def script(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(DEV_CLUSTER), *args], capture_output=True, text=True, check=False,
                              env=env, timeout=120)

    assert script("status").returncode != 0
    try:
        start = time.monotonic()
        up = script("up")
        elapsed = time.monotonic() - start
        assert up.returncode == 0, up.stderr
        assert elapsed < UP_BUDGET_S
        again = script("up")
        assert again.returncode == 0 and "already up" in again.stderr
        status = json.loads(script("status", "--json").stdout)
        assert status["state"] == "up" and status["nodes_ready"] == 4
        conf = status["slurm_conf"]
        hosts = subprocess.run(["srun", "-N4", "--transit=off", "printenv", "SLURMD_NODENAME"],
                               capture_output=True, text=True, check=False, env=dict(env, SLURM_CONF=conf),
                               timeout=120)
        assert sorted(hosts.stdout.split()) == ["node1", "node2", "node3", "node4"], hosts.stderr
        logs = sorted(p.name for p in (tmp_path / "dc" / "log").iterdir())
        accounting = ["mariadb.log", "slurmdbd.log"] if os.environ.get("TRANSIT_DEV_CLUSTER_ACCOUNTING") != "0" else []
        assert logs == sorted(["munged.log", "slurmctld.log", *accounting]
                              + [f"slurmd-node{i}.log" for i in range(1, 5)])
    finally:
        assert script("down").returncode == 0
    assert script("status").returncode != 0


def test_transit_cluster_status_json(cluster: Cluster) -> None:
    out = subprocess.run([sys.executable, "-m", "transit", "cluster", "status", "--json"],
                         capture_output=True, text=True, check=False, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert status["state"] == "up" and Path(status["slurm_conf"]) == cluster.slurm_conf
