"""What the plugin refuses, and where, as a non-root user: a policy written after `--transit`
with a space, `--transit=off` with other TRANSIT options, the task environment that `--export`
builds (checked in slurmstepd, before the program); and what it tells: `--transit=help`, the
line at the end of every srun step."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from pathlib import Path

import pytest

from tests.slurm.conftest import OTHER_USER, Cluster, unique_job_name
from transit import _native

pytestmark = pytest.mark.slurm


@pytest.mark.parametrize("command", ["srun", "sbatch"])
@pytest.mark.parametrize("value", [*_native.policies(), "off", "help"])
def test_a_policy_after_a_space_is_refused_before_a_job(cluster: Cluster, tmp_path: Path, command: str,
                                                        value: str) -> None:
    name = unique_job_name()
    out = cluster.run([command, "-J", name, "--transit", value, "true"], cwd=tmp_path)
    assert out.returncode != 0
    assert out.stderr.splitlines() == [(f"{command}: error: transit: --transit {value}: without '=' Slurm runs "
                                       f"'{value}' as the program; use --transit={value}")]
    assert cluster.jobs_named(name) == []


def test_a_bare_transit_before_a_program_runs(cluster: Cluster) -> None:
    """The control: a bare --transit followed by a program that is no policy name."""
    out = cluster.run(["srun", "-N1", "--transit", "echo", "advise"])
    assert out.returncode == 0, out.stderr
    assert out.stdout == "advise\n"


@pytest.mark.parametrize(("options", "which"), [
    (["--transit=off", "--transit-mem-limit=40G"], "--transit-mem-limit"),
    (["--transit=off", "--transit-report-dir=/tmp"], "--transit-report-dir"),
])
@pytest.mark.parametrize("command", ["srun", "sbatch"])
def test_off_with_another_transit_option_is_refused(cluster: Cluster, tmp_path: Path, command: str,
                                                    options: list[str], which: str) -> None:
    name = unique_job_name()
    tail = ["true"] if command == "srun" else ["--wrap", "true"]
    out = cluster.run([command, "-J", name, *options, *tail], cwd=tmp_path)
    assert out.returncode != 0
    assert out.stderr.splitlines() == [(f"{command}: error: transit: --transit=off runs no TRANSIT, so {which} has "
                                       "nothing to act on; drop one of them")]
    assert cluster.jobs_named(name) == []


def test_a_steps_own_off_leaves_the_jobs_options_unused(cluster: Cluster, tmp_path: Path) -> None:
    """`srun --transit=off` in a job whose #SBATCH lines set --transit-mem-limit and
    --transit-report-dir runs the step without TRANSIT: srun inherited those options, it was not
    given them with the off. Both on the step's own command line still conflict."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --transit=advise\n#SBATCH --transit-mem-limit=40G\n"
                      f"#SBATCH --transit-report-dir={tmp_path}/reports\n"
                      "srun --transit=off bash -c 'env | grep ^TRANSIT_; echo \"preload=${LD_PRELOAD-}\"'\n"
                      "srun --transit=off --transit-mem-limit=30G true || echo \"refused: $?\"\n")
    name = unique_job_name()
    out = cluster.run(["sbatch", "--parsable", "--wait", "-J", name, "-N1", "-o", str(tmp_path / "out.txt"),
                       str(script)], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "out.txt").read_text().splitlines() == [
        "preload=",
        ("srun: error: transit: --transit=off runs no TRANSIT, so --transit-mem-limit has nothing to act on; "
         "drop one of them"),
        "refused: 1"]


def test_a_steps_own_option_in_a_job_with_transit_off_is_refused(cluster: Cluster, tmp_path: Path) -> None:
    """The other way round: the job's --transit=off came from sbatch, the limit from the step."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --transit=off\n"
                      f"srun --transit-mem-limit=30G touch {tmp_path}/ran || echo \"refused: $?\"\n")
    out = cluster.run(["sbatch", "--parsable", "--wait", "-J", unique_job_name(), "-N1", "-o",
                       str(tmp_path / "out.txt"), str(script)], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "out.txt").read_text().splitlines() == [
        ("srun: error: transit: the job's --transit=off (from sbatch or salloc) runs no TRANSIT, so "
         "--transit-mem-limit has nothing to act on; give this srun --transit=POLICY too, or drop "
         "--transit-mem-limit"),
        "refused: 1"]
    assert not (tmp_path / "ran").exists()


def _sbatch_script(cluster: Cluster, tmp_path: Path, directives: list[str], options: list[str],
                   body: str = "true\n") -> tuple[str, subprocess.CompletedProcess[str]]:
    """`sbatch --wait OPTIONS job.sh` as the test user, job.sh holding DIRECTIVES as #SBATCH lines:
    the job's name and sbatch's result."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n" + "".join(f"#SBATCH {d}\n" for d in directives) + body)
    name = unique_job_name()
    return name, cluster.run(["sbatch", "--parsable", "--wait", "-J", name, "-N1", "-o", str(tmp_path / "out.txt"),
                              *options, str(script)], cwd=tmp_path)


@pytest.mark.parametrize("directives", [
    ["--transit-mem-limit=40G"],
    ["--transit-report-dir={reports}"],
    ["--transit=advise", "--transit-mem-limit=40G", "--transit-report-dir={reports}"],
])
def test_sbatchs_own_off_leaves_the_scripts_options_unused(cluster: Cluster, tmp_path: Path,
                                                          directives: list[str]) -> None:
    """`sbatch --transit=off job.sh` turns TRANSIT off for this submission: the command line
    overrides the script's #SBATCH lines, as for every sbatch option, and the script's other
    TRANSIT options have nothing to act on. Neither the batch script nor its step gets TRANSIT."""
    show = "env | grep ^TRANSIT_; echo \"preload=${LD_PRELOAD-}\""
    _, out = _sbatch_script(cluster, tmp_path, [d.format(reports=tmp_path / "reports") for d in directives], ["--transit=off"],
                            f"{show}\nsrun bash -c '{show}'\n")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    assert (tmp_path / "out.txt").read_text().splitlines() == ["preload=", "preload="]
    assert not (tmp_path / "reports").exists()
    assert not (cluster.report_dir / out.stdout.strip().split(";")[0]).exists()


@pytest.mark.parametrize(("directives", "options", "message"), [
    (["--transit=off", "--transit-mem-limit=40G"], [],
     "#SBATCH --transit=off runs no TRANSIT, so #SBATCH --transit-mem-limit has nothing to act on; drop one of them"),
    (["--transit=off", "--transit-report-dir=/tmp"], [],
     "#SBATCH --transit=off runs no TRANSIT, so #SBATCH --transit-report-dir has nothing to act on; drop one of them"),
    (["--transit=off"], ["--transit-mem-limit=40G"],
     ("#SBATCH --transit=off runs no TRANSIT, so --transit-mem-limit has nothing to act on; give this sbatch "
      "--transit=POLICY too, or drop --transit-mem-limit")),
    (["--transit-mem-limit=40G"], [], "#SBATCH --transit-mem-limit='40G' needs --transit (e.g. --transit=advise)"),
])
def test_the_scripts_off_with_another_option_is_refused_saying_where_each_came_from(
        cluster: Cluster, tmp_path: Path, directives: list[str], options: list[str], message: str) -> None:
    name, out = _sbatch_script(cluster, tmp_path, directives, options)
    assert out.returncode != 0
    assert out.stderr.splitlines() == [f"sbatch: error: transit: {message}"]
    assert cluster.jobs_named(name) == []


def test_sbatchs_own_policy_overrides_the_scripts_off(cluster: Cluster, tmp_path: Path) -> None:
    """What the refusal above offers: the command line's --transit=POLICY over the script's off."""
    _, out = _sbatch_script(cluster, tmp_path, ["--transit=off"], ["--transit=advise", "--transit-mem-limit=40G"],
                            "srun echo step-output\n")
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    assert (tmp_path / "out.txt").read_text().splitlines() == [
        "step-output",
        f"srun: transit: step {job}.0: advise, limit 40G; stats in {cluster.report_dir}/{job}/; transit report {job}"]


@pytest.mark.parametrize(("option", "value"), [("transit-mem-limit", "40G"), ("transit-report-dir", "/tmp")])
@pytest.mark.parametrize("command", ["srun", "sbatch"])
def test_an_option_without_transit_is_refused_by_name(cluster: Cluster, tmp_path: Path, command: str, option: str,
                                                      value: str) -> None:
    name = unique_job_name()
    tail = ["true"] if command == "srun" else ["--wrap", "true"]
    out = cluster.run([command, "-J", name, f"--{option}={value}", *tail], cwd=tmp_path)
    assert out.returncode != 0
    assert out.stderr.splitlines() == [
        f"{command}: error: transit: --{option}='{value}' needs --transit (e.g. --transit=advise)"]
    assert cluster.jobs_named(name) == []


def test_transit_policy_off_in_the_environment_is_as_transit_off(cluster: Cluster) -> None:
    out = cluster.run(["srun", "-N1", "--transit", "bash", "-c", "env | grep ^TRANSIT_ | sort; echo ${LD_PRELOAD-}"],
                      env=cluster.env(TRANSIT_POLICY="off"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["TRANSIT_POLICY=off", ""]  # no libtransit, nothing set
    assert out.stderr == ""  # no step line: TRANSIT did not run


def test_another_users_directory_is_refused_as_the_user(cluster: Cluster) -> None:
    other = cluster.work_dir / f"other-{unique_job_name()}"
    other.mkdir(mode=0o755)
    _chown(other, OTHER_USER)
    name = unique_job_name()
    out = cluster.run(["srun", "-J", name, "--transit=advise", f"--transit-report-dir={other}", "true"])
    assert out.returncode != 0
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"srun: error: transit: --transit-report-dir='{other}': uid ") and \
        line.endswith("cannot write in it (Permission denied); use a directory you can write, e.g. $HOME/transit")
    assert cluster.jobs_named(name) == []


def _chown(path: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    os.chown(path, entry.pw_uid, entry.pw_gid)


EXPORTS = [
    ("TRANSIT_WARMUP_ITERS=0", "TRANSIT_WARMUP_ITERS='0' is not allowed; use a whole number from 1 to 1000"),
    ("TRANSIT_POLCY=x", "TRANSIT_POLCY is not a TRANSIT variable (did you mean TRANSIT_POLICY?)"),
    ("TRANSIT_MEM_LIMIT=40_G", "TRANSIT_MEM_LIMIT='40_G' is not a size"),
]


@pytest.mark.parametrize(("export", "message"), EXPORTS)
@pytest.mark.parametrize("form", ["srun --export=", "srun --export ", "sbatch --export=", "SLURM_EXPORT_ENV",
                                  "SBATCH_EXPORT"])
def test_the_exported_environment_is_refused_at_submission(cluster: Cluster, tmp_path: Path, export: str,
                                                           message: str, form: str) -> None:
    """--export's TRANSIT_ items (or the variable standing for the option) are read from the command
    line: refused before a job exists, as the user's own environment is."""
    command = form.split()[0] if form.startswith(("srun", "sbatch")) else (
        "srun" if form == "SLURM_EXPORT_ENV" else "sbatch")
    value = f"ALL,{export}"
    options = {"srun --export=": [f"--export={value}"], "srun --export ": ["--export", value],
               "sbatch --export=": [f"--export={value}"]}.get(form, [])
    env = cluster.env(**({form: value} if not options else {}))
    marker = tmp_path / "ran"
    tail = ["touch", str(marker)] if command == "srun" else ["--wrap", f"touch {marker}"]
    name = unique_job_name()
    out = cluster.run([command, "-J", name, "--transit=advise", *options, *tail], env=env)
    assert out.returncode != 0
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"{command}: error: transit: {message}"), line
    assert cluster.jobs_named(name) == [] and not marker.exists()


@pytest.mark.parametrize("export", ["NONE", "PATH", "ALL,TRANSIT_WARMUP_ITERS=5 --export=NONE"])
def test_the_users_environment_that_export_leaves_out_is_not_checked(cluster: Cluster, export: str) -> None:
    """--export=NONE or a list without ALL keeps the user's own variables from the tasks (the last
    --export counts): a bad one there is not the tasks' and refuses nothing."""
    options = [f"--export={item}" for item in export.split(" --export=")]
    out = cluster.run(["srun", "-N1", *options, "--transit=advise", "/usr/bin/env"],
                      env=cluster.env(TRANSIT_POLCY="x"))
    assert out.returncode == 0, out.stderr
    assert [line for line in out.stdout.splitlines() if line.startswith("TRANSIT_")] == [
        "TRANSIT_POLICY=advise", f"TRANSIT_OUT={cluster.report_dir}/{_job_of(out.stderr)}/"]


SHELL_POLCY = "TRANSIT_POLCY is not a TRANSIT variable (did you mean TRANSIT_POLICY?); fix or unset it"


@pytest.mark.parametrize(("directives", "options", "env", "message"), [
    (["--export=ALL,TRANSIT_WARMUP_ITERS=0"], [], {}, EXPORTS[0][1]),
    (["--export=PATH,TRANSIT_POLCY"], [], {"TRANSIT_POLCY": "x"}, SHELL_POLCY),
    (["--export=NONE"], ["--export=ALL"], {"TRANSIT_POLCY": "x"}, SHELL_POLCY),  # the command line's wins
    (["--export=NONE"], [], {"TRANSIT_POLCY": "x", "SBATCH_EXPORT": "ALL"}, SHELL_POLCY),  # SBATCH_EXPORT wins
    # a SLURM_EXPORT_ENV sbatch found (an srun's, a job's) is not its --export: it passes all
    ([], [], {"TRANSIT_POLCY": "x", "SLURM_EXPORT_ENV": "NONE"}, SHELL_POLCY),
])
def test_the_scripts_export_is_checked_where_sbatch_uses_it(cluster: Cluster, tmp_path: Path, directives: list[str],
                                                            options: list[str], env: dict[str, str],
                                                            message: str) -> None:
    """sbatch takes --export from its command line, else SBATCH_EXPORT, else the script's #SBATCH
    lines: what that passes on to the tasks is checked at submission."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n" + "".join(f"#SBATCH {d}\n" for d in directives) + "srun true\n")
    name = unique_job_name()
    out = cluster.run(["sbatch", "-J", name, "-N1", "-o", str(tmp_path / "out.txt"), "--transit=advise", *options,
                       str(script)], env=cluster.env(**env), cwd=tmp_path)
    assert out.returncode != 0
    assert out.stderr.splitlines() == [f"sbatch: error: transit: {message}"]
    assert cluster.jobs_named(name) == []


@pytest.mark.parametrize(("directives", "options", "env"), [
    (["--export=NONE"], [], {}),
    (["--export=PATH"], [], {}),
    (["--export=ALL,TRANSIT_WARMUP_ITERS=0"], ["--export=NONE"], {}),  # the command line's wins
    (["--export=ALL,TRANSIT_WARMUP_ITERS=0"], [], {"SBATCH_EXPORT": "NONE"}),  # SBATCH_EXPORT wins
])
def test_what_the_scripts_export_leaves_out_is_not_checked(cluster: Cluster, tmp_path: Path, directives: list[str],
                                                           options: list[str], env: dict[str, str]) -> None:
    """The shell's TRANSIT_POLCY=x (or the script's item) that sbatch's --export keeps from the tasks
    refuses nothing, and the tasks get TRANSIT's variables alone."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n" + "".join(f"#SBATCH {d}\n" for d in directives) + "srun /usr/bin/env\n")
    out = cluster.run(["sbatch", "--parsable", "--wait", "-N1", "-o", str(tmp_path / "out.txt"), "--transit=advise",
                       *options, str(script)], env=cluster.env(TRANSIT_POLCY="x", **env), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    assert [line for line in (tmp_path / "out.txt").read_text().splitlines() if "TRANSIT_" in line] == [
        "TRANSIT_POLICY=advise", f"TRANSIT_OUT={cluster.report_dir}/{job}/"]


def test_srun_export_env_wins_over_slurm_export_env(cluster: Cluster) -> None:
    """srun takes --export from SRUN_EXPORT_ENV before SLURM_EXPORT_ENV (which a job of sbatch
    --export=... holds): NONE there keeps the shell's TRANSIT_POLCY=x from the tasks."""
    out = cluster.run(["srun", "-N1", "--transit=advise", "/usr/bin/env"],
                      env=cluster.env(TRANSIT_POLCY="x", SRUN_EXPORT_ENV="NONE", SLURM_EXPORT_ENV="ALL"))
    assert out.returncode == 0, out.stderr
    assert [line for line in out.stdout.splitlines() if line.startswith("TRANSIT_")] == [
        "TRANSIT_POLICY=advise", f"TRANSIT_OUT={cluster.report_dir}/{_job_of(out.stderr)}/"]


@pytest.mark.parametrize("command", ["srun", "sbatch"])
def test_export_all_in_any_case_passes_the_users_environment_on(cluster: Cluster, command: str) -> None:
    """Slurm reads ALL in --export in any case: --export=all,... gives the tasks the user's own
    variables, so a bad one is refused at submission."""
    name = unique_job_name()
    tail = ["true"] if command == "srun" else ["--wrap", "true"]
    out = cluster.run([command, "-J", name, "-N1", "--export=all,PATH", "--transit=advise", *tail],
                      env=cluster.env(TRANSIT_POLCY="x"))
    assert out.returncode != 0
    assert out.stderr.splitlines() == [f"{command}: error: transit: {SHELL_POLCY}"]
    assert cluster.jobs_named(name) == []


def test_a_variable_export_names_is_the_users_and_checked(cluster: Cluster) -> None:
    name = unique_job_name()
    out = cluster.run(["srun", "-J", name, "-N1", "--export=PATH,TRANSIT_POLCY", "--transit=advise", "true"],
                      env=cluster.env(TRANSIT_POLCY="x"))
    assert out.returncode != 0
    assert out.stderr.splitlines() == [("srun: error: transit: TRANSIT_POLCY is not a TRANSIT variable (did you mean "
                                       "TRANSIT_POLICY?); fix or unset it")]
    assert cluster.jobs_named(name) == []


# What Slurm 22.05 gives the tasks from --export's items, measured on the dev cluster (the shell
# holding TRANSIT_WARMUP_ITERS=5): both go through the list in order, a later item over an earlier
# one, NAME=value setting NAME and a bare NAME taking the shell's value. srun stops at NONE (in any
# case), and an ALL before it puts the shell's environment over every item; sbatch reads NONE as a
# variable's name and passes the rest on to the job, and its ALL goes over the items before it only.
PASSED_ON = [
    ("srun", "TRANSIT_WARMUP_ITERS=0,NONE"),
    ("srun", "TRANSIT_WARMUP_ITERS,TRANSIT_WARMUP_ITERS=0"),
    ("srun", "'TRANSIT_WARMUP_ITERS=0',PATH"),  # Slurm takes a quoted item without its quotes
    ("sbatch", "NONE,TRANSIT_WARMUP_ITERS=0"),
    ("sbatch", "none,PATH,TRANSIT_WARMUP_ITERS=0"),
    ("sbatch", "ALL,TRANSIT_WARMUP_ITERS=0"),
]
NOT_PASSED_ON = [
    ("srun", "NONE,TRANSIT_WARMUP_ITERS=0", []),
    ("srun", "none,TRANSIT_WARMUP_ITERS=0", []),
    ("srun", "PATH,NONE,TRANSIT_WARMUP_ITERS=0", []),
    ("srun", "ALL,NONE,TRANSIT_WARMUP_ITERS=0", ["TRANSIT_WARMUP_ITERS=5"]),
    ("srun", "ALL,TRANSIT_WARMUP_ITERS=0", ["TRANSIT_WARMUP_ITERS=5"]),
    ("srun", "TRANSIT_WARMUP_ITERS=0,TRANSIT_WARMUP_ITERS", ["TRANSIT_WARMUP_ITERS=5"]),
    ("sbatch", "TRANSIT_WARMUP_ITERS=0,ALL", ["TRANSIT_WARMUP_ITERS=5"]),
    ("sbatch", "TRANSIT_WARMUP_ITERS=0,TRANSIT_WARMUP_ITERS", ["TRANSIT_WARMUP_ITERS=5"]),
]


@pytest.mark.parametrize(("command", "export"), PASSED_ON)
def test_an_item_slurm_passes_on_is_refused_at_submission(cluster: Cluster, tmp_path: Path, command: str,
                                                         export: str) -> None:
    name = unique_job_name()
    tail = ["true"] if command == "srun" else ["--wrap", "true"]
    out = cluster.run([command, "-J", name, "-N1", f"--export={export}", "--transit=advise", *tail],
                      env=cluster.env(TRANSIT_WARMUP_ITERS="5"), cwd=tmp_path)
    assert out.returncode != 0
    assert out.stderr.splitlines() == [f"{command}: error: transit: {EXPORTS[0][1]}"]
    assert cluster.jobs_named(name) == []


@pytest.mark.parametrize(("command", "export", "passed"), NOT_PASSED_ON)
def test_an_item_slurm_does_not_pass_on_refuses_nothing(cluster: Cluster, tmp_path: Path, command: str, export: str,
                                                        passed: list[str]) -> None:
    """srun's tasks, or sbatch's job (its batch script, whose environment its steps start from),
    get the shell's TRANSIT_WARMUP_ITERS=5 or none, never the item's 0."""
    env = cluster.env(TRANSIT_WARMUP_ITERS="5")
    if command == "srun":
        out = cluster.run(["srun", "-N1", f"--export={export}", "--transit=advise", "/usr/bin/env"], env=env)
        assert out.returncode == 0, out.stderr
        job, lines = _job_of(out.stderr), out.stdout.splitlines()
        passed = [*passed, "TRANSIT_POLICY=advise", f"TRANSIT_OUT={cluster.report_dir}/{job}/"]
    else:
        script = tmp_path / "job.sh"
        script.write_text("#!/bin/bash\n/usr/bin/env\n")
        out = cluster.run(["sbatch", "--wait", "-N1", "-o", str(tmp_path / "out.txt"), f"--export={export}",
                           "--transit=advise", str(script)], env=env, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        lines = (tmp_path / "out.txt").read_text().splitlines()
    assert sorted(line for line in lines if line.startswith("TRANSIT_")) == sorted(passed)


@pytest.mark.parametrize(("export", "policy"), [
    ("NONE", "base"),
    ("NONE,TRANSIT_POLICY=advise", "base"),  # srun stops at NONE
    ("TRANSIT_POLICY=advise,NONE", "advise"),
    ("ALL,TRANSIT_POLICY=advise", "prefetch"),  # srun's ALL: the shell's over the item
])
def test_the_step_line_says_the_policy_the_tasks_get(cluster: Cluster, export: str, policy: str) -> None:
    """A bare --transit takes $TRANSIT_POLICY from the tasks' environment as --export builds it from
    the shell's TRANSIT_POLICY=prefetch: the tasks and the line get the same one (else the site
    default)."""
    out = cluster.run(["srun", "-N1", f"--export={export}", "--transit", "/usr/bin/printenv", "TRANSIT_POLICY"],
                      env=cluster.env(TRANSIT_POLICY="prefetch"))
    assert out.returncode == 0, out.stderr
    job = _job_of(out.stderr)
    assert out.stdout == f"{policy}\n"
    assert out.stderr.splitlines() == [(f"srun: transit: step {job}.0: {policy}, physical mode; stats in "
                                       f"{cluster.report_dir}/{job}/; transit report {job}")]


def _job_of(stderr: str) -> str:
    """The job id in srun's line at the end of a TRANSIT step."""
    return stderr.split("srun: transit: step ")[1].split(".")[0]


@pytest.mark.parametrize(("export", "message"), EXPORTS)
def test_an_export_srun_did_not_read_fails_the_step_before_the_program(cluster: Cluster, tmp_path: Path,
                                                                       export: str, message: str) -> None:
    """What srun's reading of its command line misses (here an abbreviated --expor=, which Slurm
    accepts) slurmstepd finds in the environment Slurm built, before any task runs the program. The
    step file records the refusal, which `transit report` gives as the reason for no stats."""
    marker = tmp_path / "ran"
    out = cluster.run(["srun", "-N2", "--transit=advise", f"--expor=ALL,{export}", "touch", str(marker)])
    assert out.returncode != 0
    lines = [line for line in out.stderr.splitlines() if "error: transit:" in line]
    assert len(lines) == 2 and all(message in line and "(in the job's environment: --export or the submitting "
                                   "shell)" in line for line in lines), out.stderr
    assert not marker.exists()
    job = out.stderr.splitlines()[-1].split("step ")[1].split(".")[0]
    doc = json.loads((cluster.report_dir / job / "step-0.json").read_text())
    assert message in doc["refused"]
    report = cluster.run(["python3", "-m", "transit", "report", job, "--json"],
                         env=cluster.env(PYTHONPATH=str(Path(__file__).resolve().parents[2])))
    assert report.returncode == 1
    assert json.loads(report.stdout)["no_stats_reason"].startswith("the plugin refused step 0 before its program "
                                                                  f"ran: {message}")


def test_help_lists_the_policies_and_options(cluster: Cluster) -> None:
    for command in ("srun", "sbatch", "salloc"):
        out = cluster.run([command, "--transit=help"])
        assert out.returncode == 0 and out.stderr == "", out.stderr
        listed = [line.split()[0] for line in out.stdout.splitlines() if line.startswith("      ")]
        assert listed == [*_native.policies(), "off"], out.stdout
        for option in ("--transit-mem-limit=SIZE", "--transit-report-dir=DIR", "transit report JOBID"):
            assert option in out.stdout
        assert f"this site's default: {cluster.report_dir}" in out.stdout


def test_the_step_line_names_the_stats_and_the_report(cluster: Cluster, tmp_path: Path) -> None:
    """In a batch job the line goes to the job's output, after the step's own."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nsrun --transit=prefetch --transit-mem-limit=24G echo step-output\n")
    out = cluster.run(["sbatch", "--parsable", "-N1", "-o", str(tmp_path / "out.txt"), str(script)], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    assert cluster.wait_job(job) == "COMPLETED"
    assert (tmp_path / "out.txt").read_text().splitlines() == [
        "step-output",
        (f"srun: transit: step {job}.0: prefetch, limit 24G; stats in {cluster.report_dir}/{job}/; "
        f"transit report {job}")]
