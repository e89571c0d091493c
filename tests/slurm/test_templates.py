"""The sbatch templates in scripts/, submitted to the real local Slurm cluster on CPU.

sbatch-torchrun.sh trains the tiny model for real. sbatch-torchtitan.sh runs in dry-run mode
(LAUNCH_ARGS="--dry-run --json") with TorchTitan 0.3.0 from scripts/torchtitan-versions (no GPU to
train on here) and the test checks the command it builds from the allocation and that TorchTitan.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm.conftest import sbatch_wait

REPO = Path(__file__).resolve().parents[2]
TRAIN_TINY = REPO / "scripts" / "train_tiny.py"
TRANSIT_BIN = REPO / "tests" / "fixtures" / "plan" / "bin"  # a `transit` command for this checkout
TEMPLATES = {name: REPO / "scripts" / f"sbatch-{name}.sh" for name in ("torchrun", "torchtitan")}
TORCHTITAN_DIR = REPO / ".cache" / "torchtitan"
INSTALL_TIMEOUT_S = 900


@pytest.fixture
def env(cluster):
    return cluster.env(PATH=f"{TRANSIT_BIN}:{os.environ['PATH']}", PYTHON=sys.executable)


def submit_template(env, template: Path, nodes: int, output: Path, args: list[str],
                    result_file: Path | None = None) -> str:
    return sbatch_wait(env, [f"--nodes={nodes}", str(template), *args], output, result_file)


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_template_asks_for_transit_and_hard_codes_no_allocation(name):
    text = TEMPLATES[name].read_text()
    assert "#SBATCH --transit=advise" in text
    assert "transit launch" in text
    assert not re.search(r"^#SBATCH\s+(--nodes|-N)\b", text, re.MULTILINE)
    assert not re.search(r"--nnodes|--rdzv|MASTER_ADDR", text)  # all left to `transit launch`


def test_torchrun_template_trains_the_tiny_model_with_transit(env, tmp_path):
    out = tmp_path / "loss.json"
    env = env | {"GLOBAL_BATCH": "8", "LOCAL_BATCH": "2", "NPROC_PER_NODE": "2"}
    submit_template(env, TEMPLATES["torchrun"], 2, tmp_path / "job.out",
                    [str(TRAIN_TINY), "--steps", "3", "--out", str(out)], result_file=out)
    result = json.loads(out.read_text())
    assert (result["world_size"], result["global_batch"], result["grad_accum"]) == (4, 8, 1)
    assert result["transit_policy"] == "advise"  # #SBATCH --transit=advise reached the srun step
    assert len(result["losses"]) == 3 and result["losses"][-1] < result["losses"][0]


def test_torchtitan_template_builds_the_torchtitan_command(env, tmp_path):
    install = subprocess.run(["bash", str(REPO / "scripts" / "torchtitan-versions")], capture_output=True, text=True,
                             timeout=INSTALL_TIMEOUT_S, check=False)
    assert install.returncode == 0, install.stdout + install.stderr
    output = tmp_path / "job.out"
    env = env | {"GLOBAL_BATCH": "16", "LOCAL_BATCH": "2", "TP": "2", "NPROC_PER_NODE": "2",
                 "LAUNCH_ARGS": "--dry-run --json", "PYTHON": str(TORCHTITAN_DIR / "venv" / "bin" / "python"),
                 "PYTHONPATH": str(TORCHTITAN_DIR / "0.3.0")}
    job_id = submit_template(env, TEMPLATES["torchtitan"], 2, output,
                             ["--module", "llama3", "--config", "llama3_debugmodel"])
    launch = json.loads(output.read_text()[output.read_text().index("{"):])  # after TorchTitan's import warnings
    assert launch["job_id"] == job_id and len(launch["hostnames"]) == 2
    assert (launch["torchtitan"]["version"], launch["torchtitan"]["loader"]) == ("0.3.0", "registry")
    assert (launch["dp"], launch["grad_accum"]) == (2, 4)
    command = launch["command"]
    torchrun = command.index("torchrun")
    assert command[:torchrun] == ["srun", "--nodes=2", "--ntasks-per-node=1", "--ntasks=2", "--cpus-per-task=1"]
    assert command[torchrun:] == [
        "torchrun", "--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
        f"--rdzv-endpoint={launch['rdzv_endpoint']}", f"--rdzv-id={job_id}",
        "-m", "torchtitan.train", "--module", "llama3", "--config", "llama3_debugmodel",
        "--training.global_batch_size=16", "--training.local_batch_size=2",
        "--parallelism.tensor_parallel_degree=2", "--parallelism.pipeline_parallel_degree=1",
        "--parallelism.data_parallel_shard_degree=2"]

