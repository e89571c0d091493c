"""`transit doctor` on the dev cluster's node: the Slurm checks pass against the real daemons and plugin,
and fail as they should when plugstack.conf lacks the plugin or names one built for another Slurm release
(srun itself then refuses to load it)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.conftest import REPO, TEST_USER, Cluster
from transit.doctor import FAIL, OK, SKIP, WARN, Elf, slurm_version_text

pytestmark = pytest.mark.slurm
OTHER_RELEASE = (21 << 16) | (8 << 8) | 6  # 21.08.6


def doctor(cluster: Cluster, slurm_conf: Path | None = None, user: str = "root") -> tuple[int, dict[str, dict[str, Any]]]:
    """`transit doctor --json` as an administrator runs it (root, checking as the test user), or as USER."""
    env = cluster.env(SLURM_CONF=str(slurm_conf or cluster.slurm_conf))
    out = cluster.run([sys.executable, "-m", "transit", "doctor", "--json", "--as-user", TEST_USER], env=env,
                      cwd=REPO, user=user)
    assert out.stderr == ""
    return out.returncode, {c["name"]: c for c in json.loads(out.stdout)["checks"]}


def slurmd_version() -> str:
    return subprocess.run(["slurmd", "-V"], capture_output=True, text=True, check=True).stdout.split()[-1]


def test_slurm_checks_pass_on_the_dev_cluster(cluster: Cluster) -> None:
    _, checks = doctor(cluster)
    version = slurmd_version()
    for name in ("slurm", "plugin_registered", "plugin_version", "libtransit", "munge", "slurmd"):
        assert checks[name]["status"] == OK, checks[name]
    assert checks["plugin_version"]["details"]["built_for"] == version
    assert checks["plugin_version"]["details"]["running"] == {"slurmd": version, "srun": version}
    assert checks["plugin_registered"]["details"]["plugin"] == str(cluster.plugin)
    assert checks["libtransit"]["details"]["path"] == cluster.lib
    assert checks["libtransit"]["details"]["source"] == "plugstack.conf lib="
    assert set(checks["slurmd"]["details"]["nodes"]) == {"node1", "node2", "node3", "node4"}
    # The dev cluster's report dir is root's: the plugin creates each job's directory as root and
    # gives it to the user, which the doctor does too, writing in it as the test user.
    report = checks["report_dir"]
    assert report["status"] == OK, report
    assert (report["details"]["path"], report["details"]["probe_user"]) == (str(cluster.report_dir), TEST_USER)
    assert report["details"]["owner"] == "root"


def test_a_user_runs_the_doctor_too(cluster: Cluster) -> None:
    """As the test user: nothing fails; what only root can check says so."""
    rc, checks = doctor(cluster, user=TEST_USER)
    assert rc == 0, {n: c for n, c in checks.items() if c["status"] == FAIL}
    for name in ("slurm", "plugin_registered", "plugin_version", "libtransit", "munge", "slurmd"):
        assert checks[name]["status"] == OK, checks[name]
    assert checks["report_dir"]["status"] == WARN
    assert checks["report_dir"]["summary"].endswith("checked only when the doctor runs as root")
    assert checks["libtransit"]["summary"].endswith(f"preloads as {TEST_USER}")
    assert {c["status"] for c in checks.values()} <= {OK, WARN, SKIP}


def site_copy(cluster: Cluster, tmp_path: Path, plugstack_text: str) -> Path:
    """A copy of the cluster's slurm.conf whose PlugStackConfig holds `plugstack_text`."""
    plugstack = tmp_path / "plugstack.conf"
    plugstack.write_text(plugstack_text)
    lines = [f"PlugStackConfig={plugstack}" if line.startswith("PlugStackConfig=") else line
             for line in cluster.slurm_conf.read_text().splitlines()]
    conf = tmp_path / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def test_plugstack_without_the_plugin_fails(cluster: Cluster, tmp_path: Path) -> None:
    rc, checks = doctor(cluster, site_copy(cluster, tmp_path, "# no plugins\n"))
    assert rc == 1
    for name in ("plugin_registered", "plugin_version"):
        assert checks[name]["status"] == FAIL
        assert checks[name]["summary"] == f"no spank_transit.so line in {tmp_path / 'plugstack.conf'} (or a file it includes)"
    assert checks["munge"]["status"] == OK  # the rest of the site still answers


@pytest.mark.parametrize(("argument", "line"), [
    ("foo=bar", ("srun: error: transit: plugstack.conf: unknown argument 'foo=bar' (allowed: lib=, hook_dir=, "
                "report_dir=, report_dir_mode=, policy=); an administrator must fix the spank_transit.so line in "
                "plugstack.conf")),
    ("hook_dir=/nonexistent-transit", ("srun: error: transit: plugstack.conf: hook_dir=/nonexistent-transit: No such "
                                      "file or directory; an administrator must fix the spank_transit.so line in "
                                      "plugstack.conf")),
])
def test_a_plugstack_argument_error_is_quoted_as_srun_printed_it(cluster: Cluster, tmp_path: Path, argument: str,
                                                                 line: str) -> None:
    """Not "built for this Slurm": srun's own line, which names the argument and the fix."""
    conf = site_copy(cluster, tmp_path, f"required {cluster.plugin} lib={cluster.lib} {argument}\n")
    rc, checks = doctor(cluster, conf)
    registered = checks["plugin_registered"]
    assert rc == 1 and registered["status"] == FAIL
    assert registered["summary"] == f"srun --help shows no --transit: srun did not load {cluster.plugin}: {line}"
    assert registered["fix"] == "fix the spank_transit.so line in plugstack.conf as srun's line says"
    assert registered["details"]["srun_error"] == line


def with_plugin_version(cluster: Cluster, tmp_path: Path, version: int) -> Path:
    """A slurm.conf copy whose plugstack.conf loads a copy of the plugin with plugin_version VERSION (a
    SLURM_VERSION_NUMBER), with the dev cluster's lib= and report_dir=."""
    elf = Elf(cluster.plugin)
    section, value, _ = elf.symbols["plugin_version"]
    _, addr, offset, _, _ = elf.sections[section]
    data = bytearray(cluster.plugin.read_bytes())
    struct.pack_into("<I", data, offset + value - addr, version)
    plugin = tmp_path / "spank_transit.so"
    plugin.write_bytes(bytes(data))
    line = f"required {plugin} lib={cluster.lib} report_dir={cluster.report_dir}\n"
    return site_copy(cluster, tmp_path, line)


def test_plugin_built_for_another_release_fails_as_srun_does(cluster: Cluster, tmp_path: Path) -> None:
    """The plugin's plugin_version patched to 21.08.6: Slurm's loader refuses it, and the doctor says why."""
    rc, checks = doctor(cluster, with_plugin_version(cluster, tmp_path, OTHER_RELEASE))
    plugin = tmp_path / "spank_transit.so"
    assert rc == 1
    version = checks["plugin_version"]
    assert (version["status"], version["details"]["built_for"]) == (FAIL, slurm_version_text(OTHER_RELEASE))
    assert f"was built for Slurm 21.08.6, this node runs slurmd {slurmd_version()}" in version["summary"]
    registered = checks["plugin_registered"]
    assert registered["status"] == FAIL
    assert f"Incompatible Slurm plugin {plugin} version (21.08.6)" in registered["summary"]  # srun's words


def test_another_micro_release_of_the_same_slurm_loads(cluster: Cluster, tmp_path: Path) -> None:
    """Micro release 1 (or 2) of the running major.minor: srun loads it, so a rebuild is needed per
    major.minor only (docs/admin.md)."""
    built = Elf(cluster.plugin).read_u32("plugin_version")
    assert built is not None
    other_micro = (built & ~0xFF) | (2 if built & 0xFF == 1 else 1)
    _, checks = doctor(cluster, with_plugin_version(cluster, tmp_path, other_micro))
    assert checks["plugin_registered"]["status"] == OK, checks["plugin_registered"]
    assert checks["plugin_version"]["status"] == OK
    assert checks["plugin_version"]["details"]["built_for"] == slurm_version_text(other_micro)
