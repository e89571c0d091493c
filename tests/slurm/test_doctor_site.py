"""docs/admin.md, run: its tested blocks install TRANSIT as a site would (a venv, the plugin built against
this Slurm, the plugstack line with every argument, a root-owned report dir) on the dev cluster, and
transit doctor then passes; a user's job gets its directory with the site's mode; a node whose
plugstack.conf lacks the line runs --transit steps without TRANSIT. (That a plugin of another micro
release loads is in test_doctor_slurm.py.)"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm.conftest import REPO, TEST_USER, Cluster, as_user
from tests.slurm.test_doctor_slurm import doctor, site_copy
from tests.slurm.test_spank import POLICY_CHOICES
from transit.doctor import OK

pytestmark = pytest.mark.slurm
GUIDE = REPO / "docs" / "admin.md"
BLOCK = re.compile(r"<!-- admin-test: (\S+) -->\n```bash\n(.*?)```", re.DOTALL)
SITE_NAMES = ["PREFIX", "SRC", "REPORT_DIR", "PLUGSTACK_D"]
INSTALL_TIMEOUT_S = 300  # pip builds both libraries, fetching the build's wheels
OFF_NODE = "node4"
NODE_TIMEOUT_S = 30


def guide_blocks() -> dict[str, str]:
    return dict(BLOCK.findall(GUIDE.read_text()))


def run_blocks(names: list[str], site: dict[str, str], user: str = "root") -> subprocess.CompletedProcess[str]:
    """The guide's blocks NAMES in one bash, after the site block with the test's paths in it."""
    blocks = guide_blocks()
    prelude = "".join(f"{k}={v}\n" for k, v in site.items())
    script = prelude + "".join(blocks[n] for n in names)
    return subprocess.run(as_user(["bash", "-euo", "pipefail", "-c", script], user), capture_output=True,
                          text=True, timeout=INSTALL_TIMEOUT_S, check=False, cwd="/",
                          env=dict(os.environ))


def test_the_site_block_names_what_the_test_replaces() -> None:
    site = guide_blocks()["site"]
    assert [line.split("=", 1)[0] for line in site.splitlines()] == SITE_NAMES
    assert list(guide_blocks()) == ["site", "packages", "install", "plugstack", "check", "user-job", "off"]


@pytest.fixture(scope="module")
def site(cluster: Cluster) -> Iterator[dict[str, str]]:
    """The guide's install on the dev cluster: its plugstack.conf includes the guide's directory for the
    module's tests (the dev cluster's own line comes back after them)."""
    work = cluster.work_dir / f"site-{uuid.uuid4().hex[:6]}"
    paths = {"PREFIX": work / "transit", "SRC": REPO, "REPORT_DIR": work / "reports",
             "PLUGSTACK_D": work / "plugstack.conf.d"}
    paths["PLUGSTACK_D"].mkdir(parents=True)
    work.chmod(0o755)
    site = {k: str(v) for k, v in paths.items()}
    plugstack = cluster.slurm_conf.parent / "plugstack.conf"
    dev_line = plugstack.read_text()
    plugstack.write_text(f"include {paths['PLUGSTACK_D']}/*.conf\n")
    try:
        out = run_blocks(["packages", "install", "plugstack"], site)
        assert out.returncode == 0, out.stdout + out.stderr
        yield site
    finally:
        plugstack.write_text(dev_line)


def test_installed_plugin_and_library_are_the_built_ones(site: dict[str, str]) -> None:
    (line,) = Path(site["PLUGSTACK_D"], "transit.conf").read_text().splitlines()
    words = line.split()
    libdir = Path(words[1]).parent
    assert words[0] == "required" and Path(words[1]).name == "spank_transit.so"
    assert dict(w.split("=", 1) for w in words[2:]) == {
        "lib": f"{libdir}/libtransit.so", "hook_dir": f"{libdir.parent}/pyhook", "report_dir": site["REPORT_DIR"],
        "report_dir_mode": "0750", "policy": "advise"}
    assert str(libdir).startswith(site["PREFIX"])
    report_dir = os.stat(site["REPORT_DIR"])
    assert (report_dir.st_uid, stat.S_IMODE(report_dir.st_mode)) == (0, 0o755)


def test_check_block_passes_and_the_doctor_agrees(cluster: Cluster, site: dict[str, str]) -> None:
    out = run_blocks(["check"], site)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"--transit={POLICY_CHOICES}" in out.stdout
    rc, checks = doctor(cluster)
    assert rc == 0
    for name in ("plugin_registered", "plugin_version", "libtransit", "report_dir", "munge", "slurmd"):
        assert checks[name]["status"] == OK, checks[name]
    assert checks["report_dir"]["details"]["job_dir_mode"] == "0o750"
    assert checks["libtransit"]["details"]["path"].startswith(site["PREFIX"])


def test_a_users_job_gets_its_directory_with_the_sites_mode(site: dict[str, str]) -> None:
    before = set(os.listdir(site["REPORT_DIR"]))
    out = run_blocks(["user-job"], site, user=TEST_USER)
    assert out.returncode == 0, out.stdout + out.stderr
    (job_id,) = set(os.listdir(site["REPORT_DIR"])) - before
    job_dir = os.stat(Path(site["REPORT_DIR"], job_id))
    user = pwd.getpwnam(TEST_USER)
    assert (job_dir.st_uid, job_dir.st_gid, stat.S_IMODE(job_dir.st_mode)) == (user.pw_uid, user.pw_gid, 0o750)
    assert f"drwxr-x--- 2 {TEST_USER} {TEST_USER}" in out.stdout
    step = json.loads(Path(site["REPORT_DIR"], job_id, "step-0.json").read_text())
    assert step["policy"] == "advise"  # a bare --transit gets the site's policy=


def restart_slurmd(cluster: Cluster, node: str, slurm_conf: Path) -> None:
    """The node's slurmd stopped and started again on SLURM_CONF; returns once the node is usable."""
    pid = int((cluster.slurm_conf.parents[1] / "run" / f"slurmd-{node}.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + NODE_TIMEOUT_S
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    subprocess.run(["slurmd", "-N", node, "-f", str(slurm_conf)], check=True)
    while time.monotonic() < deadline:
        if cluster.run(["sinfo", "-h", "-n", node, "-o", "%t"]).stdout.strip() in ("idle", "mix", "alloc"):
            return
        time.sleep(0.2)
    raise AssertionError(f"{node} not usable {NODE_TIMEOUT_S}s after its slurmd restarted")


def test_a_node_without_the_line_runs_transit_steps_without_transit(
    cluster: Cluster, site: dict[str, str], tmp_path: Path
) -> None:
    """The guide's `off` block on a copy of the plugstack directory, read by one node's slurmd."""
    node_d = tmp_path / "node-plugstack.conf.d"
    shutil.copytree(site["PLUGSTACK_D"], node_d)
    out = run_blocks(["off"], dict(site, PLUGSTACK_D=str(node_d)))
    assert out.returncode == 0, out.stderr
    assert list(node_d.iterdir()) == []
    node_conf = site_copy(cluster, tmp_path, f"include {node_d}/*.conf\n")
    show = 'echo "$SLURMD_NODENAME ${LD_PRELOAD-} $(env | grep -c ^TRANSIT_)"'
    try:
        restart_slurmd(cluster, OFF_NODE, node_conf)
        off = cluster.run(["srun", "-w", OFF_NODE, "--transit=advise", "sh", "-c", show])
        on = cluster.run(["srun", "-w", "node3", "--transit=advise", "sh", "-c", show])
    finally:
        restart_slurmd(cluster, OFF_NODE, cluster.slurm_conf)
    assert off.returncode == 0, off.stderr
    assert off.stdout.split() == [OFF_NODE, "0"]  # no LD_PRELOAD, no TRANSIT_* variable
    name, preload, count = on.stdout.split()
    assert (name, Path(preload.split(":")[0]).name, int(count) > 0) == ("node3", "libtransit.so", True)
