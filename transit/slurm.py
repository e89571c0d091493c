"""Everything that talks to Slurm, in one place.

Two sections: the allocation a launcher runs in and the commands that start work in it
(srun, sbatch), and the job facts a report reads afterwards (sacct/squeue JSON).
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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


def node_address(hostname: str) -> str:
    """The address Slurm reaches `hostname` at (NodeAddr), which need not be a DNS name."""
    result = subprocess.run(["scontrol", "show", "node", "-o", hostname], capture_output=True, text=True,
                            check=False)
    for field in result.stdout.split():
        if field.startswith("NodeAddr="):
            return field.removeprefix("NodeAddr=")
    raise UsageError(f"scontrol show node {hostname} gave no NodeAddr: {result.stderr.strip()}")


def gpus_on_node(env: Mapping[str, str] | None = None) -> int | None:
    """GPUs this node was given, from SLURM_GPUS_ON_NODE or CUDA_VISIBLE_DEVICES; None if unknown."""
    env = os.environ if env is None else env
    if env.get("SLURM_GPUS_ON_NODE", "").isdigit() and int(env["SLURM_GPUS_ON_NODE"]) > 0:
        return int(env["SLURM_GPUS_ON_NODE"])
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if visible and visible[0].strip() not in ("-1", "NoDevFiles"):
        return len(visible)
    return None  # none given (a count of 0 says nothing either: ask for --nproc-per-node)


def min_cpus_per_node(env: Mapping[str, str] | None = None) -> int | None:
    """Fewest CPUs the job has on any of its nodes, from SLURM_JOB_CPUS_PER_NODE (``72(x2),36``)."""
    env = os.environ if env is None else env
    counts = []
    for group in filter(None, env.get("SLURM_JOB_CPUS_PER_NODE", "").split(",")):
        count = group.split("(", 1)[0]
        if not count.isdigit():
            raise UsageError(f"cannot read SLURM_JOB_CPUS_PER_NODE={env['SLURM_JOB_CPUS_PER_NODE']!r}")
        counts.append(int(count))
    return min(counts, default=None)


def srun_command(num_nodes: int, command: Sequence[str], cpus_per_task: int | None = None) -> list[str]:
    """One task per node across the allocation (torchrun then starts the ranks).

    The task gets all the node's CPUs: srun would otherwise confine it, and with it every rank
    torchrun starts, to one CPU (since 22.05 srun no longer inherits --cpus-per-task).
    """
    cpus = [f"--cpus-per-task={cpus_per_task}"] if cpus_per_task else []
    return ["srun", f"--nodes={num_nodes}", "--ntasks-per-node=1", f"--ntasks={num_nodes}", *cpus, *command]


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

# Slurm's JSON differs between releases: 22.05 (data_parser v0.0.38) writes job states as strings and
# times as plain integers; 23.11+ (v0.0.40+, 24.11 writes v0.0.42) writes states as lists and many
# numbers as {"set": bool, "infinite": bool, "number": n}. Every reader below accepts both.

SLURM_QUERY_TIMEOUT_S = 15


@dataclass(frozen=True)
class JobFacts:
    """What Slurm knows about one job; None fields are facts Slurm did not give."""

    job_id: str
    source: str  # "sacct" (accounting) or "squeue" (controller memory, recent jobs only)
    name: str | None = None
    state: str | None = None
    start_unix: int | None = None
    end_unix: int | None = None
    elapsed_s: int | None = None
    nodelist: str | None = None
    num_nodes: int | None = None
    num_gpus: int | None = None


def number(value: Any) -> float | None:
    """A number from either form Slurm's JSON writes (plain, or {"set", "infinite", "number"}
    since 23.02); None if unset, infinite or not a number."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _number(value: Any) -> int | None:
    result = number(value)
    return None if result is None else int(result)


def _timestamp(value: Any) -> int | None:
    """A Unix time; Slurm writes 0 for "not yet"."""
    number = _number(value)
    return number if number else None


def job_state(value: Any) -> str | None:
    """A job state from a string ("COMPLETED"), a list (["CANCELLED", "..."]) or {"current": ...}."""
    if isinstance(value, dict):
        return job_state(value.get("current"))
    if isinstance(value, str):
        return value or None
    if isinstance(value, list):
        names = [v for v in value if isinstance(v, str) and v]
        return "+".join(names) or None
    return None


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def gpus_in_tres(entries: dict[str, int]) -> int | None:
    """GPU count from TRES names: "gres/gpu" when present, else the sum of typed "gres/gpu:<type>"."""
    if "gres/gpu" in entries:
        return entries["gres/gpu"]
    typed = [count for name, count in entries.items() if name.startswith("gres/gpu:")]
    return sum(typed) if typed else None


def tres_from_string(tres: Any) -> dict[str, int]:
    """Parse "cpu=4,mem=2M,node=2,billing=4,gres/gpu=8" (numbers only; sizes like 2M are skipped)."""
    entries: dict[str, int] = {}
    if not isinstance(tres, str):
        return entries
    for item in tres.split(","):
        name, _, count = item.partition("=")
        if count.isdigit():
            entries[name.strip()] = int(count)
    return entries


def tres_from_list(tres: Any) -> dict[str, int]:
    """Parse sacct's [{"type": "gres", "name": "gpu", "count": 8}, ...] into {"gres/gpu": 8}."""
    entries: dict[str, int] = {}
    if not isinstance(tres, list):
        return entries
    for item in tres:
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            continue
        count = _number(item.get("count"))
        if count is None:
            continue
        name = item["type"] + (f"/{item['name']}" if _string(item.get("name")) else "")
        entries[name] = count
    return entries


def _matching_job(document: Any, job_id: str) -> dict[str, Any] | None:
    """The entry of document["jobs"] whose job_id is job_id (sacct may list array/het siblings)."""
    jobs = document.get("jobs") if isinstance(document, dict) else None
    if not isinstance(jobs, list):
        return None
    for job in jobs:
        if isinstance(job, dict) and str(_number(job.get("job_id"))) == str(job_id):
            return job
    return None


def parse_sacct_json(document: Any, job_id: str) -> JobFacts | None:
    """JobFacts from the output of ``sacct --json -j JOBID``; None when the job is not in it."""
    job = _matching_job(document, job_id)
    if job is None:
        return None
    times = job.get("time") if isinstance(job.get("time"), dict) else {}
    tres = job.get("tres") if isinstance(job.get("tres"), dict) else {}
    return JobFacts(
        job_id=str(job_id),
        source="sacct",
        name=_string(job.get("name")),
        state=job_state(job.get("state")),
        start_unix=_timestamp(times.get("start")),
        end_unix=_timestamp(times.get("end")),
        elapsed_s=_number(times.get("elapsed")),
        nodelist=_string(job.get("nodes")),
        num_nodes=_number(job.get("allocation_nodes")),
        num_gpus=gpus_in_tres(tres_from_list(tres.get("allocated"))),
    )


def parse_squeue_json(document: Any, job_id: str, now_unix: float | None = None) -> JobFacts | None:
    """JobFacts from the output of ``squeue --json -j JOBID``; None when the job is not in it.

    squeue has no elapsed time: it is end - start for a finished job, now - start for a running one.
    """
    job = _matching_job(document, job_id)
    if job is None:
        return None
    state = job_state(job.get("job_state"))
    start = _timestamp(job.get("start_time"))
    end = _timestamp(job.get("end_time"))
    elapsed = None
    if start is not None:
        running = state is not None and ("RUNNING" in state or "COMPLETING" in state)
        until = (time.time() if now_unix is None else now_unix) if running or end is None else end
        elapsed = max(0, int(until) - start)
    return JobFacts(
        job_id=str(job_id),
        source="squeue",
        name=_string(job.get("name")),
        state=state,
        start_unix=start,
        end_unix=end,
        elapsed_s=elapsed,
        nodelist=_string(job.get("nodes")),
        num_nodes=_number(job.get("node_count")),
        num_gpus=gpus_in_tres(tres_from_string(job.get("tres_alloc_str"))),
    )


def _query_json(command: Sequence[str]) -> Any:
    """Run a Slurm command that prints JSON; None if it is missing, fails or prints no JSON."""
    try:
        result = subprocess.run(list(command), capture_output=True, text=True, check=False,
                                timeout=SLURM_QUERY_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return None
    try:
        return json.loads(result.stdout)
    except json.JSONDecodeError:
        return None


def job_facts(job_id: str) -> JobFacts | None:
    """Slurm's facts about a job: from accounting (sacct) if it has them, else from the controller
    (squeue, which forgets a job MinJobAge seconds after it ends), else None."""
    facts = parse_sacct_json(_query_json(["sacct", "--json", "-j", str(job_id)]), job_id)
    if facts is None:
        facts = parse_squeue_json(_query_json(["squeue", "--json", "-j", str(job_id)]), job_id)
    return facts


def _plugstack_files(path: str, depth: int = 0) -> list[str]:
    """plugstack.conf and the files its ``include`` lines name (globs), in order."""
    files = [path]
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    for line in lines:
        words = line.split("#", 1)[0].split()
        if depth < 4 and len(words) == 2 and words[0] == "include":
            for included in sorted(glob.glob(words[1])):
                files.extend(_plugstack_files(included, depth + 1))
    return files


def plugstack_report_dir() -> str | None:
    """The ``report_dir=`` argument of spank_transit.so in the running cluster's plugstack.conf
    (found through ``scontrol show config``); None when Slurm does not answer or it is not set."""
    try:
        result = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                                check=False, timeout=SLURM_QUERY_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    plugstack = None
    for line in result.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "PlugStackConfig":
            plugstack = value.strip()
    if result.returncode != 0 or not plugstack:
        return None
    return report_dir_in_plugstack(plugstack)


def report_dir_in_plugstack(plugstack: str) -> str | None:
    """The ``report_dir=`` argument of the spank_transit.so line in a plugstack.conf (or a file it
    includes); None when there is none."""
    for path in _plugstack_files(plugstack):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                words = line.split("#", 1)[0].split()
                if len(words) >= 2 and "spank_transit" in words[1]:
                    for word in words[2:]:
                        if word.startswith("report_dir="):
                            return word.removeprefix("report_dir=")
    return None
