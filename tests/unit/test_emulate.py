"""scripts/emulate-nodes (transit/emulate.py): layout, the memory check, refusals, and real torchrun
agents with gloo on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from transit._native import show
from transit.emulate import GIB, RANK_DEVICE_OVERHEAD_BYTES, check_fits, layout
from transit.errors import UsageError

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts/emulate-nodes"
ALLREDUCE = REPO / "tests/fixtures/emulate/allreduce.py"


def emulate(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          check=False)


def test_layout_is_node_major_with_one_host_id_per_rank_and_gpus_round_robin() -> None:
    slots = layout(2, 2, [0, 1, 2])
    assert [(s.node, s.local_rank, s.rank, s.gpu) for s in slots] == [
        ("emu0", 0, 0, 0), ("emu0", 1, 1, 1), ("emu1", 0, 2, 2), ("emu1", 1, 3, 0)]
    assert len({s.nccl_hostid for s in slots}) == 4
    assert {s.gpu for s in layout(4, 1, [0])} == {0}
    assert {s.gpu for s in layout(2, 1, [])} == {None}


def test_transit_ranks_must_fit_the_gpu_they_share() -> None:
    four_on_one = layout(4, 1, [0])
    check_fits(four_on_one, {0: 4 * (10 * GIB + RANK_DEVICE_OVERHEAD_BYTES)}, True, 10 * GIB)
    with pytest.raises(UsageError, match=r"^4 rank\(s\) x \(--mem-limit 10.0 GiB .* exceed GPU 0's"):
        check_fits(four_on_one, {0: 40 * GIB}, True, 10 * GIB)
    with pytest.raises(UsageError, match="4 TRANSIT ranks share GPU 0: give --mem-limit"):
        check_fits(four_on_one, {0: 80 * GIB}, True, None)
    check_fits(layout(2, 1, [0, 1]), {0: GIB, 1: GIB}, True, None)  # physical mode, a GPU each
    check_fits(four_on_one, {0: GIB}, False, None)  # native: nothing managed, nothing to oversubscribe


@pytest.mark.parametrize("args, message", [
    (["0", "--", "x.py"], "emulate-nodes: argument nodes: nodes '0': expected a whole number from 1 to 64"),
    (["２", "--", "x.py"], f"emulate-nodes: argument nodes: nodes '{show('２')}': expected a whole number from 1 to 64"),
    (["2", "--nproc-per-node", "0", "--", "x.py"],
     "emulate-nodes: argument --nproc-per-node: --nproc-per-node '0': expected a whole number from 1 to 64"),
    (["2"], "emulate-nodes: no script given; use: emulate-nodes N [options] -- SCRIPT ARGS..."),
    (["2", "--mem-limit", "4G", "--", "x.py"], "emulate-nodes: --mem-limit 4G needs --transit POLICY"),
    (["2", "--transit", "foo", "--", "x.py"],
     "emulate-nodes: --transit='foo' is not a policy; use base, prefetch, advise or hybrid"),
    # before: torchrun started, and each rank's traceback came out of its agent
    (["2", "--", "x.py"], "emulate-nodes: script 'x.py' does not exist; give a Python script (or -m MODULE) after --"),
    # before: '' was taken for ./transit-out, a path under a file ran the job and lost its stats
    (["2", "--transit", "advise", "--out", "", "--", str(ALLREDUCE)],
     "emulate-nodes: --out='' is not usable; use a directory path of 1 to 4031 bytes without control characters"),
])
def test_bad_input_is_one_line_and_starts_nothing(args, message) -> None:
    r = emulate(*args)
    assert (r.returncode, r.stdout, r.stderr.strip()) == (2, "", message)


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a directory another user cannot write: needs root")
def test_a_stats_directory_the_user_cannot_write_is_refused_before_the_job() -> None:
    """Before: the job ran, and its ranks' stats files were lost at its end."""
    with tempfile.TemporaryDirectory(dir="/tmp") as shared:  # root's, 0755: nobody may not write there
        Path(shared).chmod(0o755)
        r = subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-m", "transit.emulate", "2",
                            "--transit", "advise", "--out", f"{shared}/out", "--", str(ALLREDUCE)], cwd=REPO,
                           capture_output=True, text=True, timeout=120, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (
        2, "", f"emulate-nodes: --out '{shared}/out' cannot be written: {shared}: Permission denied\n")


def test_two_nodes_of_two_ranks_reduce_over_gloo_with_their_own_names(tmp_path: Path) -> None:
    r = emulate("2", "--nproc-per-node", "2", "--json", "--", str(ALLREDUCE))
    assert r.returncode == 0, r.stderr
    ranks = sorted((json.loads(line) for line in r.stderr.splitlines() if line.startswith('{"rank"')),
                   key=lambda d: d["rank"])
    assert [(d["rank"], d["node"], d["local_rank"], d["sum"]) for d in ranks] == [
        (0, "emu0", 0, 10.0), (1, "emu0", 1, 10.0), (2, "emu1", 0, 10.0), (3, "emu1", 1, 10.0)]
    assert [d["hostid"] for d in ranks] == ["emu0-r0", "emu0-r1", "emu1-r0", "emu1-r1"]
    outcome = json.loads(r.stdout)
    assert (outcome["schema"], outcome["exit_codes"], len(outcome["ranks"])) == ("transit.emulate/1", [0, 0], 4)
    assert "Traceback" not in r.stderr and "c10d" not in r.stderr


def test_a_failed_node_stops_the_others_and_fails_the_job(tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text("import os, sys, time\n"
                      "if os.environ['RANK'] == '1': sys.exit(3)\n"
                      "time.sleep(300)\n")
    t0 = time.monotonic()
    r = emulate("2", "--", str(script))
    assert r.returncode == 1
    assert time.monotonic() - t0 < 60  # the sleeping node was stopped, not waited for
    assert r.stderr.strip().endswith("node agents failed (exit codes [1, 1]); the others were stopped") or \
        "node agents failed" in r.stderr.splitlines()[-1]


def test_dry_run_under_transit_shows_the_plan_and_runs_nothing(tmp_path: Path) -> None:
    r = emulate("2", "--transit", "advise", "--mem-limit", "1G", "--out", str(tmp_path / "o"), "--dry-run",
                "--json", "--", str(ALLREDUCE))
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert (plan["policy"], plan["mem_limit_bytes"], plan["nodes"]) == ("advise", GIB, 2)
    assert not (tmp_path / "o").exists()
    assert r.stderr.startswith("emulate-nodes: 2 node(s) x 1 rank(s), TRANSIT advise, L = 1.00 GiB per rank")
