"""TRANSIT on several ranks: emulated nodes sharing one GPU (scripts/emulate-nodes), FSDP2 over
NCCL sockets on lo, in limit mode with every rank's managed peak at least FOOTPRINT_OVER_L x its L.

For each layout (2 nodes, 4 nodes, 2 nodes x 2 ranks with TP 2) the native run comes first; its
smallest rank's reserved peak sets L (= peak / L_DIVISOR). Then every layout's policies run at
their L, side by side as many as their limits fit the GPU together. Each must give its native run's
losses bit for bit (deterministic kernels: this check only), and `transit report` over its ranks'
stats must name every rank and node and sum them per node and for the job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from tests.gpu.conftest import side_by_side
from transit.emulate import RANK_DEVICE_OVERHEAD_BYTES, free_gpu_memory

POLICIES = ("base", "prefetch", "advise", "hybrid")
LAYOUTS = {"2-nodes": (2, 1, 1), "4-nodes": (4, 1, 1), "2-nodes-x2-tp2": (2, 2, 2)}  # nodes, ranks/node, TP
STEPS = 6  # TRANSIT profiles 2 iterations, drains the third and applies its policy from the fourth
# the mini model: every layout's four policy runs (up to 16 ranks) fit the GPU side by side, and the
# file runs in one device command; `small` (4.5x the parameters) took 942 s in three
MODEL, GLOBAL_BATCH, MICRO_BATCH = "mini", 8, 2
FOOTPRINT_OVER_L = 1.3  # issue 53 item 2's floor
L_DIVISOR = 1.45  # L from the native reserved peak, with room above the floor for what the allocator keeps
MIB = 1 << 20
TIMEOUT_S = 900  # a run among others side by side on one GPU; a hang is bench/gpu_tier.sh's to catch


def emulate(nodes: int, per_node: int, tp: int, out: Path, policy: str | None = None,
            limit: int | None = None) -> subprocess.Popen:
    transit = ["--transit", policy, "--mem-limit", str(limit), "--out", str(out / "stats")] if policy else []
    cmd = [str(REPO / "scripts/emulate-nodes"), str(nodes), "--nproc-per-node", str(per_node), *transit, "--",
           str(REPO / "bench/train.py"), "--model", MODEL, "--global-batch", str(GLOBAL_BATCH), "--local-batch",
           str(MICRO_BATCH), "--tp", str(tp), "--steps", str(STEPS), "--warmup", "3", "--deterministic",
           "--out", str(out / "result.json")]
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "log.txt", "w")  # noqa: SIM115 (closed by the process's end)
    return subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))


def outcome(proc: subprocess.Popen, out: Path) -> dict | str:
    """The run's result, or what went wrong (the layout's tests report it)."""
    try:
        rc = proc.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        return f"{out}: still running after {TIMEOUT_S} s"
    if rc != 0:
        return f"{out}: exit {rc}\n{(out / 'log.txt').read_text(errors='replace')[-4000:]}"
    return json.loads((out / "result.json").read_text())


def reserved_peaks(result: dict) -> list[int]:
    """Each rank's PyTorch reserved peak (bench/train.py reads it at the end)."""
    return [r["torch_max_reserved_bytes"] for r in result["memory"]["per_rank"]]


@pytest.fixture(scope="module")
def all_runs(request, tmp_path_factory) -> dict[str, dict]:
    """Each selected layout's native run, one after another (each sets its layout's L), then their
    policy runs, side by side as many as fit the GPU's free memory."""
    root = tmp_path_factory.mktemp("emulated")
    selected = {getattr(item, "callspec", None) and item.callspec.params.get("layout_runs")
                for item in request.session.items}
    layouts: dict[str, dict] = {}
    for name, (nodes, per_node, tp) in LAYOUTS.items():
        if name not in selected:
            continue
        native = outcome(emulate(nodes, per_node, tp, root / name / "native"), root / name / "native")
        layouts[name] = {"name": name, "nodes": nodes, "per_node": per_node, "tp": tp, "ranks": nodes * per_node,
                         "root": root / name, "native": native, "policies": {}}
        if isinstance(native, dict):
            layouts[name]["limit"] = int(min(reserved_peaks(native)) / L_DIVISOR) // MIB * MIB
    planned = {(name, policy): run["ranks"] * (run["limit"] + RANK_DEVICE_OVERHEAD_BYTES)
               for name, run in layouts.items() if "limit" in run for policy in POLICIES}

    def start(key: tuple[str, str]) -> subprocess.Popen:
        run, policy = layouts[key[0]], key[1]
        return emulate(run["nodes"], run["per_node"], run["tp"], run["root"] / policy, policy, run["limit"])

    free = free_gpu_memory()[int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0])]
    done = side_by_side(planned, start, lambda key, proc: outcome(proc, layouts[key[0]]["root"] / key[1]), free)
    for (name, policy), result in done.items():
        layouts[name]["policies"][policy] = result
    return layouts


@pytest.fixture(params=list(LAYOUTS))
def layout_runs(request, all_runs: dict[str, dict]) -> dict:
    """One layout's runs, each of them finished: a run that failed fails this layout's tests."""
    run = all_runs[request.param]
    assert isinstance(run["native"], dict), f"{request.param} native: {run['native']}"
    for policy in POLICIES:
        result = run["policies"][policy]
        assert isinstance(result, dict), f"{request.param} {policy}: {result}"
    return run


def rank_stats(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "stats").glob("rank*.json"))]


def test_losses_bitwise_equal_to_native_and_every_rank_spilled(layout_runs) -> None:
    native = layout_runs["native"]["losses"]
    assert len(native) == STEPS
    for policy, result in layout_runs["policies"].items():
        assert result["losses"] == native, f"{layout_runs['name']} {policy}: {result['losses']} vs {native}"
        stats = rank_stats(layout_runs["root"] / policy)
        assert len(stats) == layout_runs["ranks"], f"{policy}: {len(stats)} stats files"
        for doc in stats:
            assert doc["config"]["policy"] == policy and doc["config"]["limit_bytes"] == layout_runs["limit"]
            peak = doc["allocations"]["managed_bytes_peak"]
            assert peak >= FOOTPRINT_OVER_L * layout_runs["limit"], (
                f"{policy} rank {doc['identity']['rank']}: managed peak {peak / MIB:.0f} MiB is under "
                f"{FOOTPRINT_OVER_L} x L = {FOOTPRINT_OVER_L * layout_runs['limit'] / MIB:.0f} MiB")


def test_report_names_every_rank_and_node_and_sums_them(layout_runs) -> None:
    for policy in POLICIES:
        stats_dir = layout_runs["root"] / policy / "stats"
        r = subprocess.run([sys.executable, "-m", "transit", "report", str(stats_dir), "--no-slurm", "--json"],
                           cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
        ranks = report["ranks"]
        assert sorted(row["rank"] for row in ranks) == list(range(layout_runs["ranks"]))
        expected_nodes = {f"emu{i}" for i in range(layout_runs["nodes"])}
        assert {row["node"] for row in ranks} == expected_nodes
        assert {node["name"] for node in report["nodes"]} == expected_nodes
        for node in report["nodes"]:
            mine = [row for row in ranks if row["node"] == node["name"]]
            assert node["ranks"] == len(mine)
            assert node["htod_bytes"] == sum(row["htod_bytes"] for row in mine)
        assert report["totals"]["htod_bytes"] == sum(row["htod_bytes"] for row in ranks)
        assert report["totals"]["ranks"] == layout_runs["ranks"]
