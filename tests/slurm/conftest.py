"""The slurm tier runs against a real local cluster: scripts/dev-cluster (munge, MariaDB and
slurmdbd for sacct, slurmctld and four slurmd on this host, the TRANSIT SPANK plugin in its
plugstack.conf; by default under <repo>/.dev-cluster, or TRANSIT_DEV_CLUSTER_DIR /
TRANSIT_DEV_CLUSTER_PORT when set).

The session starts the cluster when it is not up and points SLURM_CONF at it. The tier is skipped
only when the Slurm/munge binaries are missing; a cluster that fails to start fails the tests.

Jobs run as a non-root user, TEST_USER (scripts/dev-cluster creates it), as at a site: Cluster.run
and sbatch_wait start their command through `runuser -u TEST_USER --`, unless a test is marked
`job_user("root", reason=...)` or passes user= itself. In this tier tmp_path is a directory the
test user owns (pytest's own are root's, 0700), so jobs can write their output there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEV_CLUSTER = REPO / "scripts" / "dev-cluster"
SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "squeue", "scontrol")
JOB_TIMEOUT_S = 120
# A training job may wait in the queue behind other tests' jobs: longer than JOB_TIMEOUT_S.
TRAINING_JOB_TIMEOUT_S = 600
# PyTorch 2.13's gloo can abort a rank at exit after it destroyed its process group (CI: 3 of 7
# runs on 2026-11-30; 1 of 252 training jobs of 2-8 ranks on the dev cluster here). sbatch_wait
# accepts such a job only when its work was complete before the abort: the result written and
# every rank's TRAIN_TINY_DONE line, which scripts/train_tiny.py prints after
# destroy_process_group. It counts them (end of the run).
GLOO_EXIT_ABORT = "terminate called without an active exception"
TRAIN_TINY_DONE = re.compile(r"^train_tiny: rank (\d+) of (\d+) done$", re.MULTILINE)
TEST_USER = "transit-test"  # the user jobs run as; scripts/dev-cluster up creates both
OTHER_USER = "transit-other"  # a second user, for tests across users
FINISHED_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                   "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.slurm)


_job_user = TEST_USER  # the user of the test being set up, for Cluster.run and sbatch_wait
# pytest imports this file as `conftest`; the test modules import it as tests.slurm.conftest. One
# module, so that they see the _job_user that pytest_runtest_setup sets.
sys.modules.setdefault("tests.slurm.conftest", sys.modules[__name__])
_ran_as_root: list[str] = []
accepted_gloo_aborts: list[str] = []  # "job ID (LOG)": accepted by sbatch_wait after the abort


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the test's fixtures, so a module-scoped job fixture runs as its first test's user."""
    global _job_user
    marker = item.get_closest_marker("job_user")
    _job_user = marker.args[0] if marker else TEST_USER
    if _job_user == "root":
        _ran_as_root.append(f"{item.nodeid} ({marker.kwargs.get('reason', 'no reason given')})")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    aborts = "training jobs hit gloo's exit abort after every rank had finished (accepted)"
    for lines, what in ((accepted_gloo_aborts, aborts), (_ran_as_root, "tests ran their jobs as root")):
        if lines:
            terminalreporter.write_line(f"slurm tier: {len(lines)} {what}:")
            for line in lines:
                terminalreporter.write_line(f"  {line}")


def as_user(args: Sequence[str], user: str | None = None) -> list[str]:
    """The command line that runs ARGS as USER (default: the current test's job user)."""
    user = user or _job_user
    return list(args) if user == "root" else ["runuser", "-u", user, "--", *args]


@dataclass(frozen=True)
class Cluster:
    """The running dev cluster, as the plugin on it is configured."""

    slurm_conf: Path
    plugin: Path  # the spank_transit.so that plugstack.conf loads
    lib: str  # plugstack.conf lib=
    hook_dir: str  # plugstack.conf hook_dir=, or its default <dir of lib>/../pyhook
    report_dir: Path  # plugstack.conf report_dir=
    work_dir: Path  # <dev cluster dir>/work: the tests' directories (emptied at session start)

    def env(self, **overrides: str | None) -> dict[str, str]:
        """This process's environment for a Slurm command; a None value removes the variable."""
        env = dict(os.environ, SLURM_CONF=str(self.slurm_conf))
        for key in [k for k in env if k.startswith(("TRANSIT_", "SLURM_SPANK", "_SLURM_SPANK"))]:
            del env[key]
        for key, value in overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def run(self, args: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None,
            user: str | None = None) -> subprocess.CompletedProcess[str]:
        """ARGS as USER (default: the current test's job user, TEST_USER unless marked)."""
        return subprocess.run(as_user(args, user), capture_output=True, text=True, check=False,
                              env=env or self.env(), cwd=cwd, timeout=JOB_TIMEOUT_S)

    def jobs_named(self, name: str) -> list[str]:
        """Ids of every job with this name that slurmctld still remembers (MinJobAge=300 s)."""
        out = self.run(["squeue", "-h", "-t", "all", "-n", name, "-o", "%i"])
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    def wait_job(self, job_id: str) -> str:
        """Waits for a job to finish; returns its final state."""
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while time.monotonic() < deadline:
            out = self.run(["scontrol", "show", "job", "-o", job_id])
            state = next((f.split("=", 1)[1] for f in out.stdout.split() if f.startswith("JobState=")), "")
            if state in FINISHED_STATES:
                return state
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} did not finish within {JOB_TIMEOUT_S}s")


def finished_before_gloo_abort(log: str, result_file: Path) -> bool:
    """Whether a job that failed by GLOO_EXIT_ABORT had done all its work first: the result file
    written and a TRAIN_TINY_DONE line from each of its ranks."""
    if GLOO_EXIT_ABORT not in log or not result_file.exists():
        return False
    world_size = json.loads(result_file.read_text())["world_size"]
    done = {(int(rank), int(size)) for rank, size in TRAIN_TINY_DONE.findall(log)}
    return done == {(rank, world_size) for rank in range(world_size)}


def sbatch_wait(env: dict[str, str], args: Sequence[str], output: Path, result_file: Path | None = None,
                user: str | None = None) -> str:
    """`sbatch --wait --parsable --output=OUTPUT ARGS...` as USER (default: the test's job user):
    asserts the job succeeded and returns its id. With result_file (what scripts/train_tiny.py
    writes), a job that failed by GLOO_EXIT_ABORT after all its work (finished_before_gloo_abort)
    counts as a success, and is listed at the end of the run."""
    if result_file is not None:
        result_file.unlink(missing_ok=True)
    result = subprocess.run(as_user(["sbatch", "--wait", "--parsable", f"--output={output}", *args], user),
                            env=env, capture_output=True, text=True, timeout=TRAINING_JOB_TIMEOUT_S, check=False)
    job_id = result.stdout.strip()
    log = output.read_text() if output.exists() else ""
    if result.returncode != 0 and result_file is not None and finished_before_gloo_abort(log, result_file):
        accepted_gloo_aborts.append(f"job {job_id} ({output})")
        return job_id
    assert result.returncode == 0, f"job failed: {result.stderr}\n{log}"
    return job_id


def unique_job_name() -> str:
    return f"transit-test-{uuid.uuid4().hex[:12]}"


def _plugstack_line(plugstack: Path) -> tuple[Path, dict[str, str]]:
    """The plugin path and its arguments from the spank_transit.so line of plugstack.conf."""
    for line in plugstack.read_text().splitlines():
        words = line.split()
        if len(words) >= 2 and words[1].endswith("spank_transit.so"):
            return Path(words[1]), dict(w.split("=", 1) for w in words[2:] if "=" in w)
    raise AssertionError(f"spank_transit.so is not in {plugstack}")


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    missing = [b for b in SLURM_BINARIES if not shutil.which(b)]
    if missing:
        pytest.skip(f"Slurm/munge binaries missing: {', '.join(missing)} (apt-get install slurm-wlm munge)")
    up = subprocess.run([str(DEV_CLUSTER), "up"], capture_output=True, text=True, check=False)
    if up.returncode != 0:
        pytest.fail(f"scripts/dev-cluster up failed:\n{up.stdout}{up.stderr}", pytrace=False)
    status = json.loads(subprocess.run([str(DEV_CLUSTER), "status", "--json"], capture_output=True,
                                       text=True, check=False).stdout)
    # Code under test that calls Slurm from this process (transit.slurm) finds the cluster too.
    os.environ["SLURM_CONF"] = status["slurm_conf"]
    # `python3` in a job is this interpreter (not a shim a test user cannot run), as at a site.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    work = Path(status["dir"]) / "work"
    shutil.rmtree(work, ignore_errors=True)  # the last session's test directories
    work.mkdir()
    plugin, args = _plugstack_line(Path(status["dir"]) / "etc" / "plugstack.conf")
    lib = args["lib"]
    yield Cluster(
        slurm_conf=Path(status["slurm_conf"]),
        plugin=plugin,
        lib=lib,
        hook_dir=args.get("hook_dir", f"{os.path.dirname(lib)}/../pyhook"),
        report_dir=Path(args["report_dir"]),
        work_dir=work,
    )


def user_dir(cluster: Cluster) -> Path:
    """A new directory under the cluster's work/ that TEST_USER owns, so the test user's jobs can
    write their output and report directories there (pytest's own are root's, 0700)."""
    path = cluster.work_dir / uuid.uuid4().hex[:8]  # short: slurmd's socket paths below it max at 108
    path.mkdir()
    shutil.chown(path, TEST_USER, TEST_USER)
    return path


@pytest.fixture
def tmp_path(cluster: Cluster) -> Path:
    """Replaces pytest's tmp_path in this tier (module-scoped fixtures call user_dir)."""
    return user_dir(cluster)
