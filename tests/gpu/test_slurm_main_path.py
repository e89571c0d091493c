"""The main path on a GPU host, through real Slurm: `srun -N2 --transit=POLICY` on the dev cluster
(scripts/dev-cluster: its nodes share this host's GPUs as GRES and each gets its own NCCL host id),
the plugin preloading libtransit into both nodes' ranks, and `transit report JOBID` over their stats.

A 2-node FSDP2 job (bench/train.py, one rank per node, deterministic kernels: this check only) runs
without --transit first; its smallest rank's reserved peak sets L (= peak / L_DIVISOR). Then the same
job runs under advise and under hybrid with --transit-mem-limit=L, side by side as many as their limits fit
the GPU together. Each must give the first job's losses bit for bit, every rank must spill, and the
report must name both nodes' ranks, with the job's policy and limit.

Needs a running dev cluster on this host, and the environment `scripts/dev-cluster env` prints
(bench/slurm_e2e.sh does both); skipped otherwise. Jobs run as the non-root test user.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from tests.gpu.conftest import side_by_side
from transit.emulate import RANK_DEVICE_OVERHEAD_BYTES, free_gpu_memory

DEV_CLUSTER = REPO / "scripts" / "dev-cluster"
TEST_USER = "transit-test"  # scripts/dev-cluster up creates it
POLICIES = ("advise", "hybrid")
STEPS = 6  # TRANSIT profiles 2 iterations, drains the third and applies its policy from the fourth
MODEL, GLOBAL_BATCH, MICRO_BATCH = "small", 8, 2
L_DIVISOR = 1.45  # as tests/gpu/test_emulated_nodes.py: the managed peak stays well above L
MIB = 1 << 20
JOB_TIMEOUT_S = 360


@pytest.fixture(scope="module")
def cluster() -> dict:
    out = subprocess.run([str(DEV_CLUSTER), "status", "--json"], capture_output=True, text=True, check=False)
    status = json.loads(out.stdout)
    if status["state"] != "up":
        pytest.skip("no running dev cluster: start one with scripts/dev-cluster up and eval "
                    "\"$(scripts/dev-cluster env)\" (bench/slurm_e2e.sh does both)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSIT_")}
    env |= {"SLURM_CONF": status["slurm_conf"],
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"}
    work = Path(status["dir"]) / "work" / f"main-path-{uuid.uuid4().hex[:6]}"
    work.mkdir(parents=True)
    subprocess.run(["chown", TEST_USER, str(work)], check=True)
    return {"env": env, "work": work}


def slurm(cluster: dict, *args: str) -> str:
    out = subprocess.run(list(args), env=cluster["env"], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, f"{' '.join(args)}: {out.stderr}"
    return out.stdout


class Job:
    """One 2-node torchrun job as `srun -N2`, under TRANSIT when given a policy. The rendezvous
    store is this process's (is_host=false on both agents), as scripts/emulate-nodes hosts it: an
    agent that hosted it could leave while the other still waits in its exit barrier."""

    def __init__(self, cluster: dict, label: str, policy: str | None = None, limit: int | None = None) -> None:
        from torch.distributed import TCPStore

        self.cluster, self.label, self.policy, self.limit = cluster, label, policy, limit
        self.name = f"main-path-{label}-{uuid.uuid4().hex[:6]}"
        self.out = cluster["work"] / label
        self.out.mkdir()
        subprocess.run(["chown", TEST_USER, str(self.out)], check=True)
        self.store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, use_libuv=True)
        port = self.store.port  # bound by the store itself: no probe-then-bind race
        transit = [f"--transit={policy}", f"--transit-mem-limit={limit}"] if policy else []
        cmd = ["runuser", "-u", TEST_USER, "--", "srun", "-N2", "--ntasks-per-node=1", "--gpus-per-node=1",
               f"--job-name={self.name}", *transit, sys.executable, "-m", "torch.distributed.run",
               "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
               f"--rdzv-id={self.name}", "--rdzv-conf=is_host=false", str(REPO / "bench" / "train.py"),
               "--model", MODEL, "--global-batch", str(GLOBAL_BATCH), "--local-batch", str(MICRO_BATCH),
               "--steps", str(STEPS), "--warmup", "3", "--deterministic", "--out", str(self.out / "result.json")]
        self.log = open(self.out / "log.txt", "w")  # noqa: SIM115 (closed in finish)
        self.proc = subprocess.Popen(cmd, cwd=self.out, env=cluster["env"], stdout=self.log,
                                     stderr=subprocess.STDOUT)

    def finish(self) -> dict:
        try:
            rc = self.proc.wait(timeout=JOB_TIMEOUT_S)
        finally:
            self.log.close()
            del self.store  # only now: both agents have left their exit barrier
        log = (self.out / "log.txt").read_text(errors="replace")
        assert rc == 0, f"{self.label}: srun exit {rc}\n{log[-4000:]}"
        self.job_id = slurm(self.cluster, "squeue", "-h", "-t", "all", "-n", self.name, "-o", "%i").strip()
        nodelist = slurm(self.cluster, "squeue", "-h", "-t", "all", "-j", self.job_id, "-o", "%N").strip()
        self.nodes = set(slurm(self.cluster, "scontrol", "show", "hostnames", nodelist).split())
        return json.loads((self.out / "result.json").read_text())


@pytest.fixture(scope="module")
def jobs(cluster: dict) -> dict:
    native_job = Job(cluster, "native")
    native = native_job.finish()
    peaks = [r["torch_max_reserved_bytes"] for r in native["memory"]["per_rank"]]
    limit = int(min(peaks) / L_DIVISOR) // MIB * MIB
    # Slurm gives each node its first GPU, this host's first: every job's ranks share it.
    free = free_gpu_memory()
    results = side_by_side({policy: 2 * (limit + RANK_DEVICE_OVERHEAD_BYTES) for policy in POLICIES},
                           lambda policy: Job(cluster, policy, policy, limit),
                           lambda policy, job: (job, job.finish()), free[min(free)])
    return {"native": (native_job, native), "limit": limit, "policies": results}


def test_losses_bitwise_equal_without_transit(jobs: dict) -> None:
    native = jobs["native"][1]["losses"]
    assert len(native) == STEPS
    for policy, (_, result) in jobs["policies"].items():
        assert result["losses"] == native, f"{policy}: {result['losses']} vs {native}"


def test_report_names_both_nodes_ranks_and_each_spilled(jobs: dict) -> None:
    for policy, (job, _) in jobs["policies"].items():
        r = subprocess.run([sys.executable, "-m", "transit", "report", job.job_id, "--json"], cwd=REPO,
                           env=job.cluster["env"], capture_output=True, text=True, timeout=120, check=False)
        assert r.returncode == 0, f"{policy}: {r.stderr}"
        ranks = json.loads(r.stdout)["ranks"]
        assert sorted(row["rank"] for row in ranks) == [0, 1], f"{policy}: {ranks}"
        assert {row["node"] for row in ranks} == job.nodes and len(job.nodes) == 2
        for row in ranks:
            assert (row["job_id"], row["policy"], row["limit_bytes"]) == (job.job_id, policy, jobs["limit"])
            assert row["spilled_peak_bytes"] > 0, f"{policy} rank {row['rank']} did not spill: {row}"
