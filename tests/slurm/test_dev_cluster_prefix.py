"""The dev cluster from Slurm and munge unpacked under a prefix (TRANSIT_DEV_CLUSTER_PREFIX), as on a
GPU host with no package registry: the .deb files scripts/fetch-slurm-debs puts in .debs/ are
unpacked with dpkg-deb -x, and tests/slurm/prefix_cluster.sh runs the cluster from them in a mount
namespace where this host's installed Slurm, munge and the carried libraries are hidden, then
2-node steps (one with a GPU per node, declared as GRES), a TRANSIT step, `squeue --json` and the
quickstart's job.

Skipped, saying so, without .debs/ or without a mount namespace to hide the installed Slurm in.
Its cluster listens 10 ports above the tier's (TRANSIT_DEV_CLUSTER_PORT, default 16817).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEBS = REPO / ".debs"
PORT_OFFSET = 10
RUN_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def prefix_run() -> Iterator[dict]:
    debs = sorted(DEBS.glob("*.deb"))
    if not debs:
        pytest.skip("no .debs/*.deb: scripts/fetch-slurm-debs downloads them")
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("unshare --mount fails here: no mount namespace to hide the installed Slurm in")
    work = Path(tempfile.mkdtemp(prefix="transit-prefix-", dir="/tmp"))
    work.chmod(0o755)  # the test user runs the prefix's commands
    try:
        prefix = work / "prefix"
        for deb in debs:
            subprocess.run(["dpkg-deb", "-x", str(deb), str(prefix)], check=True)
        port = int(os.environ.get("TRANSIT_DEV_CLUSTER_PORT", "16817")) + PORT_OFFSET
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TRANSIT_", "SLURM_"))}
        run = subprocess.run(["unshare", "--mount", str(REPO / "tests/slurm/prefix_cluster.sh"), str(prefix),
                              str(work / "dc"), str(port), str(work / "out")],
                             env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
        assert run.returncode == 0, f"prefix_cluster.sh failed:\n{run.stdout}{run.stderr}"
        yield {"prefix": str(prefix), "out": work / "out"}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def lines(run: dict, name: str) -> list[str]:
    return (run["out"] / name).read_text().splitlines()


def test_commands_and_daemons_are_the_prefixs(prefix_run: dict) -> None:
    prefix = prefix_run["prefix"]
    assert all(path.startswith(f"{prefix}/usr/") for path in lines(prefix_run, "commands"))
    daemons = dict(line.split() for line in lines(prefix_run, "daemons"))
    assert daemons == {"munged": f"{prefix}/usr/sbin/munged", "slurmctld": f"{prefix}/usr/sbin/slurmctld-wlm",
                       "slurmd-node1": f"{prefix}/usr/sbin/slurmd-wlm", "slurmd-node4": f"{prefix}/usr/sbin/slurmd-wlm"}
    assert lines(prefix_run, "stepds") == [f"{prefix}/usr/sbin/slurmstepd-wlm"] * 2


def test_daemons_load_slurm_and_munge_from_the_prefix(prefix_run: dict) -> None:
    libraries = set(lines(prefix_run, "daemon-libraries"))
    ours = {lib for lib in libraries if re.search(r"slurm|munge|hwloc|numa|json-c|yaml", Path(lib).name)}
    assert ours and all(lib.startswith(prefix_run["prefix"]) for lib in ours), ours


def test_each_node_gets_its_own_nccl_host_id(prefix_run: dict) -> None:
    tasks = [line.split() for line in lines(prefix_run, "tasks")]
    assert len({node for node, *_ in tasks}) == 2, tasks
    assert all(rest == [node, "lo", "Socket"] for node, *rest in tasks), tasks


def test_gpus_are_gres_and_each_node_sees_its_first(prefix_run: dict) -> None:
    tasks = [line.split() for line in lines(prefix_run, "gpu-tasks")]
    assert len({node for node, *_ in tasks}) == 2 and all(rest == ["1", "0"] for _, *rest in tasks), tasks


def test_transit_steps_run_through_the_plugin(prefix_run: dict) -> None:
    assert lines(prefix_run, "transit-tasks") == ["advise 1G"] * 2


def test_squeue_json_answers(prefix_run: dict) -> None:
    document = json.loads((prefix_run["out"] / "squeue.json").read_text())
    version = document["meta"]["Slurm"]["version"]
    assert (version["major"], version["minor"]) == (22, 5) and document["jobs"]


def test_the_quickstart_job_finishes(prefix_run: dict) -> None:
    output = (prefix_run["out"] / "quickstart").read_text()
    assert re.search(r"^quickstart: job \d+ finished", output, re.MULTILINE), output
    assert "No stats: no task called CUDA" in output
