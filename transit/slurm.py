"""Everything that talks to Slurm, in one place.

Two sections: the allocation a launcher runs in and the commands that start work in it
(srun, sbatch), and the job facts a report reads afterwards (sacct/squeue JSON).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from transit.errors import UsageError

# ---------------------------------------------------------------------------------------------
# Allocation and job submission (used by `transit launch` and `transit submit`)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Allocation:
    """The nodes of the Slurm job this process runs in."""

    job_id: str
    hostnames: tuple[str, ...]

    @property
    def num_nodes(self) -> int:
        return len(self.hostnames)

    @property
    def first_host(self) -> str:
        return self.hostnames[0]


def expand_hostlist(nodelist: str) -> list[str]:
    """Expand a Slurm hostlist expression (``node[1-3]``) through ``scontrol show hostnames``."""
    result = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise UsageError(f"scontrol show hostnames {nodelist!r} failed: {result.stderr.strip()}")
    return result.stdout.split()


def current_allocation(env: Mapping[str, str] | None = None) -> Allocation:
    """Read the allocation from the SLURM_* variables that sbatch/salloc set."""
    env = os.environ if env is None else env
    job_id = env.get("SLURM_JOB_ID")
    nodelist = env.get("SLURM_JOB_NODELIST")
    if not job_id or not nodelist:
        raise UsageError("not inside a Slurm allocation (SLURM_JOB_ID/SLURM_JOB_NODELIST unset): "
                         "run under sbatch or salloc, or pass --dry-run with --nodes")
    hostnames = tuple(expand_hostlist(nodelist))
    declared = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES")
    if declared and int(declared) != len(hostnames):
        raise UsageError(f"SLURM_JOB_NUM_NODES={declared} but SLURM_JOB_NODELIST={nodelist!r} "
                         f"expands to {len(hostnames)} hosts")
    return Allocation(job_id=job_id, hostnames=hostnames)


def gpus_on_node(env: Mapping[str, str] | None = None) -> int | None:
    """GPUs this node was given, from SLURM_GPUS_ON_NODE or CUDA_VISIBLE_DEVICES; None if unknown."""
    env = os.environ if env is None else env
    if env.get("SLURM_GPUS_ON_NODE", "").isdigit():
        return int(env["SLURM_GPUS_ON_NODE"])
    visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible and visible not in ("-1", "NoDevFiles"):
        return len([d for d in visible.split(",") if d])
    return None


def srun_command(num_nodes: int, command: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
    """One task per node across the allocation (torchrun then starts the ranks)."""
    return ["srun", f"--nodes={num_nodes}", "--ntasks-per-node=1", f"--ntasks={num_nodes}",
            *extra, *command]


def sbatch_command(script: str, script_args: Sequence[str], nodes: int, transit_policy: str | None,
                   extra: Sequence[str] = ()) -> list[str]:
    args = ["sbatch", "--parsable", f"--nodes={nodes}"]
    if transit_policy:
        args.append(f"--transit={transit_policy}")
    return [*args, *extra, script, *script_args]


def submit(command: Sequence[str]) -> str:
    """Run an ``sbatch --parsable`` command and return the job id."""
    result = subprocess.run(list(command), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise UsageError(f"{shlex.join(command)} failed: {result.stderr.strip()}")
    return result.stdout.strip().split(";")[0]


# ---------------------------------------------------------------------------------------------
# Job facts (sacct/squeue JSON, used by `transit report`)
# ---------------------------------------------------------------------------------------------
