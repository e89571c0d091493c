"""Everything that talks to Slurm, in one place.

Sections: the allocation a launcher runs in and the commands that start work in it (srun,
sbatch); Slurm's compressed hostlists; the job facts a report reads (sacct, squeue); the TRANSIT
plugin's arguments in plugstack.conf.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import re
import shlex
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
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


def said(result: subprocess.CompletedProcess[str]) -> str:
    """What a failed Slurm command wrote to stderr, its lines joined into one (the cause is often
    its last line, after lines of context)."""
    return "; ".join(line.strip() for line in result.stderr.splitlines() if line.strip()) or \
        f"exit code {result.returncode}"


def expand_hostlist(nodelist: str) -> list[str]:
    """Expand a Slurm hostlist expression (``node[1-3]``) through ``scontrol show hostnames``."""
    result = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise UsageError(f"scontrol show hostnames {nodelist!r} failed: {said(result)}")
    return result.stdout.split()


def current_allocation(env: Mapping[str, str] | None = None) -> Allocation:
    """Read the allocation from the SLURM_* variables that sbatch/salloc set."""
    env = os.environ if env is None else env
    job_id = env.get("SLURM_JOB_ID")
    nodelist = env.get("SLURM_JOB_NODELIST")
    if not job_id or not nodelist:
        raise UsageError("not inside a Slurm allocation (SLURM_JOB_ID/SLURM_JOB_NODELIST unset): "
                         "run under sbatch or salloc, or pass --dry-run with --nodes")
    declared = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES")
    if declared and not declared.isdigit():
        raise UsageError(f"SLURM_JOB_NUM_NODES={declared[:80]!r} is not a node count; "
                         "run under sbatch or salloc, which set it")
    hostnames = tuple(expand_hostlist(nodelist))
    if declared and int(declared) != len(hostnames):
        raise UsageError(f"SLURM_JOB_NUM_NODES={declared} but SLURM_JOB_NODELIST={nodelist!r} "
                         f"expands to {len(hostnames)} hosts")
    return Allocation(job_id=job_id, hostnames=hostnames)


def node_address(hostname: str) -> str:
    """The address Slurm reaches `hostname` at (NodeAddr), which need not be a DNS name."""
    result = subprocess.run(["scontrol", "show", "node", "-o", hostname], capture_output=True, text=True,
                            check=False)
    for word in result.stdout.split():
        if word.startswith("NodeAddr="):
            return word.removeprefix("NodeAddr=")
    raise UsageError(f"scontrol show node {hostname} gave no NodeAddr: {said(result)}")


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
        raise UsageError(f"{shlex.join(command)} failed: {said(result)}")
    return result.stdout.strip().split(";")[0]


# ---------------------------------------------------------------------------------------------
# Hostlists: Slurm's compressed node lists ("gpu[001-125]"), as src/common/hostlist.c writes them
# ---------------------------------------------------------------------------------------------


def _natural_compare(a: str, b: str) -> int:
    """Slurm's strnatcmp (Martin Pool's natural order): runs of digits compare as numbers, except
    runs that start with 0, which compare digit by digit ("fractional"); whitespace is skipped."""
    ai = bi = 0
    while True:
        while ai < len(a) and a[ai].isspace():
            ai += 1
        while bi < len(b) and b[bi].isspace():
            bi += 1
        ca, cb = a[ai:ai + 1], b[bi:bi + 1]
        if ca.isdigit() and cb.isdigit():
            result = (_compare_left if "0" in (ca, cb) else _compare_right)(a[ai:], b[bi:])
            if result:
                return result
        if not ca and not cb:
            return 0
        if ca != cb:
            return -1 if ca < cb else 1
        ai, bi = ai + 1, bi + 1


def _digits(text: str) -> str:
    end = 0
    while end < len(text) and text[end].isdigit():
        end += 1
    return text[:end]


def _compare_right(a: str, b: str) -> int:
    """Right-aligned numbers: the longer run wins, else the first differing digit."""
    da, db = _digits(a), _digits(b)
    if len(da) != len(db):
        return -1 if len(da) < len(db) else 1
    return (da > db) - (da < db)


def _compare_left(a: str, b: str) -> int:
    """Left-aligned ("fractional") numbers: the first differing digit wins, else the shorter run."""
    da, db = _digits(a), _digits(b)
    for x, y in zip(da, db):
        if x != y:
            return -1 if x < y else 1
    return (len(da) > len(db)) - (len(da) < len(db))


def _zero_padded(number: int, width: int) -> int:
    """How many zeros pad `number` to `width` digits."""
    return max(0, width - len(str(number)))


@dataclass
class _HostRange:
    """hostrange_t: prefix + numeric suffixes lo..hi, zero-padded to width; a host whose name does
    not end in digits is a single host whose prefix is its whole name."""

    prefix: str
    lo: int = 0
    hi: int = 0
    width: int = 0
    single: bool = False

    @classmethod
    def of(cls, host: str) -> _HostRange:
        suffix = len(host) - len(host.rstrip("0123456789"))
        if not suffix:
            return cls(host, single=True)
        number = int(host[-suffix:])
        return cls(host[:-suffix], number, number, suffix)

    def count(self) -> int:
        return 1 if self.single else self.hi - self.lo + 1

    def prefix_compare(self, other: _HostRange) -> int:
        """Same prefix gives 0 only when both have a suffix or neither has."""
        return _natural_compare(self.prefix, other.prefix) or int(other.single) - int(self.single)

    def width_combines(self, other: _HostRange) -> bool:
        """_width_equiv: equal widths, or one width that changes the zero padding of neither lo;
        when they combine, the width that needed changing takes the other's (as Slurm does)."""
        if self.width == other.width:
            return True
        if _zero_padded(self.lo, self.width) != _zero_padded(self.lo, other.width):
            if _zero_padded(other.lo, other.width) != _zero_padded(other.lo, self.width):
                return False
            other.width = self.width
        else:
            self.width = other.width
        return True

    def joins(self, other: _HostRange) -> bool:
        """`other` continues this range (hostlist_push_range, hostlist_collapse)."""
        return self.hi == other.lo - 1 and not self.prefix_compare(other) and self.width_combines(other)

    def bracketed_with(self, other: _HostRange | None) -> bool:
        """hostrange_within_range: both go inside one prefix[...]."""
        return other is not None and not self.prefix_compare(other) and not (self.single or other.single)

    def numbers(self) -> str:
        if self.single:
            return ""
        text = f"{self.lo:0{self.width}d}"
        return text + (f"-{self.hi:0{self.width}d}" if self.lo < self.hi else "")


def _range_order(a: _HostRange, b: _HostRange) -> int:
    """hostrange_cmp: by prefix, then by first number if the widths combine, else by width."""
    return a.prefix_compare(b) or (a.lo - b.lo if a.width_combines(b) else a.width - b.width)


def _merge_sort(items: list[_HostRange]) -> list[_HostRange]:
    """glibc's qsort (msort.c: top-down merge sort, left half first). Slurm's order depends on the
    comparisons made where widths mix with and without zero padding (comparing may change a width)."""
    if len(items) <= 1:
        return items
    left, right = _merge_sort(items[: len(items) // 2]), _merge_sort(items[len(items) // 2:])
    merged = []
    while left and right:
        merged.append(left.pop(0) if _range_order(left[0], right[0]) <= 0 else right.pop(0))
    return merged + left + right


def _joined(ranges: Iterable[_HostRange]) -> list[_HostRange]:
    """Each range that continues the one before it joined to it (hostlist_push_range, _collapse)."""
    joined: list[_HostRange] = []
    for hostrange in ranges:
        if joined and joined[-1].joins(hostrange):
            joined[-1].hi = hostrange.hi
        else:
            joined.append(hostrange)
    return joined


def _expand_token(token: str) -> list[str]:
    """One hostlist token ("rack[1-2]-n[01-02]"); raises ValueError on a range it cannot read."""
    hosts = [""]
    for literal, ranges in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", token):
        numbers = []
        for part in ranges.split(",") if ranges else []:
            lo, _, hi = part.partition("-")
            first, last = int(lo), int(hi or lo)  # ValueError on "a-b"
            if last < first:
                raise ValueError(part)
            numbers += [f"{n:0{len(lo)}d}" for n in range(first, last + 1)]
        hosts = [host + literal + number for host in hosts for number in numbers or [""]]
    return hosts


def parse_hostlist(text: str) -> list[str]:
    """The hosts of a hostlist ("gpu[001-003,010],login", "rack[1-2]-n[01-02]"), zero padding kept,
    as hostlist_create reads them; a token it cannot read is taken as one host."""
    hosts = []
    for token in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", text):
        try:
            hosts += _expand_token(token)
        except ValueError:
            hosts.append(token)
    return hosts


def compress_hostlist(hosts: Iterable[str]) -> str:
    """Hosts as Slurm writes a sorted hostlist (`scontrol show hostlistsorted`): sorted naturally,
    runs joined ("gpu[001-003,010]"), zero padding kept, one prefix[...] per prefix. Each host once."""
    collapsed = _joined(_merge_sort(_joined(_HostRange.of(host) for host in dict.fromkeys(hosts))))
    groups: list[str] = []
    i = 0
    while i < len(collapsed):
        first = collapsed[i]
        following = collapsed[i + 1] if i + 1 < len(collapsed) else None
        bracket = first.count() > 1 or first.bracketed_with(following)
        numbers = [first.numbers()]
        i += 1
        while i < len(collapsed) and collapsed[i].bracketed_with(collapsed[i - 1]):
            numbers.append(collapsed[i].numbers())
            i += 1
        groups.append(first.prefix + (f"[{','.join(numbers)}]" if bracket else numbers[0]))
    return ",".join(groups)


# ---------------------------------------------------------------------------------------------
# Job facts (used by `transit report`): accounting (sacct --parsable), else the controller's
# memory (squeue --json)
# ---------------------------------------------------------------------------------------------

# squeue's JSON differs between releases: 22.05 (data_parser v0.0.38) writes job states as strings and
# times as plain integers; 23.11+ (v0.0.40+, 24.11 writes v0.0.42) writes states as lists and many
# numbers as {"set": bool, "infinite": bool, "number": n}. Every reader below accepts both.
# sacct is read in its --parsable text form instead: the same from 22.05 to 24.11, and the only form
# that has the SubmitLine in 22.05 (its JSON, openapi/dbv0.0.38, has no submit_line).

SLURM_QUERY_TIMEOUT_S = 15
# `transit report` finds the site's report directory through slurmctld, or, when it does not answer
# this soon, through this node's slurm.conf: the report needs nothing else from the controller.
PLUGSTACK_QUERY_TIMEOUT_S = 2
# Where Slurm's commands find slurm.conf without SLURM_CONF: the usual file, then slurmd's cache on a
# configless node.
SLURM_CONF_PATHS = ("/etc/slurm/slurm.conf", "/run/slurm/conf/slurm.conf")

SACCT_FIELDS = ("JobID", "JobIDRaw", "JobName", "User", "State", "Start", "End", "ElapsedRaw", "NNodes",
                "NodeList", "AllocTRES", "SubmitLine")
# reportseff's delimiter: a SubmitLine may hold "|" and newlines. With --parsable every record ends in
# the delimiter, so records split on delimiter + newline; SubmitLine comes last and keeps the rest.
SACCT_DELIMITER = "^|^"
# Start and End as Unix times ("Unknown" while unset), whatever the site's time format
SACCT_ENV = {"SLURM_TIME_FORMAT": "%s"}
ARRAY_TASK = re.compile(r"^(\d+)_(\d+|\[[^\]]*\])$")  # 1234_7, or a pending array's 1234_[8-10]
HET_COMPONENT = re.compile(r"^(\d+)\+(\d+)$")  # 1234+1: component 1 of heterogeneous job 1234


@dataclass(frozen=True)
class JobFacts:
    """What Slurm knows about one job (an array task is a job); None fields are facts Slurm did not give."""

    job_id: str  # the job's own id (SLURM_JOB_ID, sacct's JobIDRaw): it names <report dir>/<job_id>/
    source: str  # "sacct" (accounting) or "squeue" (controller memory, recent jobs only)
    array_job_id: str | None = None  # an array task's array id (SLURM_ARRAY_JOB_ID)...
    array_task_id: str | None = None  # ...and its task id ("7"; a pending array's "[8-10]")
    het_job_id: str | None = None  # a heterogeneous job's component: the first component's job id...
    het_offset: str | None = None  # ...and which component it is ("1")
    name: str | None = None
    user: str | None = None
    state: str | None = None
    start_unix: int | None = None
    end_unix: int | None = None
    elapsed_s: int | None = None
    nodelist: str | None = None
    num_nodes: int | None = None
    num_gpus: int | None = None
    submit_line: str | None = None  # the command that submitted the job (sacct only)
    step_submit_lines: dict[str, str] = field(default_factory=dict)  # step id -> its srun line (sacct only)
    # sacct's record before slurmdbd has written the job: no submit line (every submitted job has one),
    # name "allocation", a state that may lag; for a few seconds after a job starts or ends
    provisional: bool = False

    @property
    def shown_id(self) -> str:
        """The id as Slurm shows it: 1234_7 for an array task, 1234+1 for a heterogeneous job's component."""
        if self.het_job_id:
            return f"{self.het_job_id}+{self.het_offset}"
        return f"{self.array_job_id}_{self.array_task_id}" if self.array_job_id else self.job_id

    def matches(self, wanted: str) -> bool:
        """Whether a job id as a user gives it names this job: its own id, its array's or heterogeneous
        job's id (every task or component), ARRAY_TASK or HET_COMPONENT (this one), as sacct -j reads them."""
        array, _, task = wanted.partition("_")
        if task:
            return self.array_job_id == array and self.array_task_id == task
        het, _, offset = wanted.partition("+")
        if offset:
            return self.het_job_id == het and self.het_offset == offset
        return wanted in (self.job_id, self.array_job_id, self.het_job_id)

    @property
    def unfinished(self) -> bool:
        return bool(self.state) and any(state in (self.state or "") for state in UNFINISHED_STATES)


# Slurm states in which tasks may still be running
UNFINISHED_STATES = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUED", "RESIZING")


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


def gpus_per_node(tres_per_node: Any) -> int | None:
    """GPUs per node from squeue's tres_per_node ("gres/gpu:h200:2", "gres:gpu:2", "gres/gpu=2", a
    comma list): where a cluster without accounting keeps a job's GPUs out of tres_alloc_str. Its
    entries are read as TRES ("gres/gpu:h200=2"), so typed and untyped GPUs count as in sacct's."""
    entries = []
    for entry in str(tres_per_node or "").replace("gres:", "gres/").split(","):
        name, _, count = entry.replace("=", ":").rpartition(":")
        entries.append(f"{name}={count}")
    return gpus_in_tres(tres_from_string(",".join(entries)))


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


def sacct_command(selection: Sequence[str]) -> list[str]:
    """sacct for the jobs SELECTION names (-j IDS, or -u USER -S START -E END), with their steps."""
    return ["sacct", "--parsable", "--noheader", f"--delimiter={SACCT_DELIMITER}",
            "--format=" + ",".join(SACCT_FIELDS), *selection]


def _sacct_int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def parse_sacct(text: str) -> list[JobFacts]:
    """The jobs in sacct_command's output, in its order; their step rows (1234.0) give each step's
    submit line. A record that is not one (another format, a cut-off tail) is left out."""
    rows: list[dict[str, str]] = []
    steps: dict[str, dict[str, str]] = {}
    for record in text.split(SACCT_DELIMITER + "\n"):
        values = record.split(SACCT_DELIMITER, len(SACCT_FIELDS) - 1)
        if len(values) != len(SACCT_FIELDS):
            continue
        row = dict(zip(SACCT_FIELDS, values, strict=True))
        job_id, _, step = row["JobIDRaw"].partition(".")
        if step:
            steps.setdefault(job_id, {})[step] = row["SubmitLine"]
        elif job_id.isdigit():
            rows.append(row)
    jobs = []
    for row in rows:
        array, het = ARRAY_TASK.match(row["JobID"]), HET_COMPONENT.match(row["JobID"])
        state = row["State"].split(" ", 1)[0]  # "CANCELLED by 1000"
        start, end = _sacct_int(row["Start"]), _sacct_int(row["End"])
        jobs.append(JobFacts(
            job_id=row["JobIDRaw"],
            source="sacct",
            array_job_id=array.group(1) if array else None,
            array_task_id=array.group(2) if array else None,
            het_job_id=het.group(1) if het else None,
            het_offset=het.group(2) if het else None,
            name=row["JobName"] or None,
            user=row["User"] or None,
            state=state or None,
            start_unix=start or None,
            end_unix=end or None,
            elapsed_s=_sacct_int(row["ElapsedRaw"]),
            nodelist=row["NodeList"] if row["NodeList"] not in ("", "None assigned") else None,
            num_nodes=_sacct_int(row["NNodes"]),
            num_gpus=gpus_in_tres(tres_from_string(row["AllocTRES"])),
            submit_line=row["SubmitLine"] or None,
            step_submit_lines={s: line for s, line in steps.get(row["JobIDRaw"], {}).items() if line},
            provisional=not row["SubmitLine"],
        ))
    return jobs


def parse_squeue(document: Any, now_unix: float | None = None) -> list[JobFacts]:
    """Every job in the output of ``squeue --json`` (22.05 ignores -j and -u with --json: callers pick).

    squeue has no elapsed time: it is end - start for a finished job, now - start for a running one.
    """
    jobs = document.get("jobs") if isinstance(document, dict) else None
    facts = []
    for job in jobs if isinstance(jobs, list) else []:
        job_id = _number(job.get("job_id")) if isinstance(job, dict) else None
        if job_id is None:
            continue
        state = job_state(job.get("job_state"))
        start = _timestamp(job.get("start_time"))
        end = _timestamp(job.get("end_time"))
        elapsed = None
        if start is not None:
            running = state is not None and ("RUNNING" in state or "COMPLETING" in state)
            until = (time.time() if now_unix is None else now_unix) if running or end is None else end
            elapsed = max(0, int(until) - start)
        array_job = _number(job.get("array_job_id"))
        array_task = _number(job.get("array_task_id"))
        pending_tasks = _string(job.get("array_task_string"))
        het_job, het_offset = _number(job.get("het_job_id")), _number(job.get("het_job_offset"))
        facts.append(JobFacts(
            job_id=str(job_id),
            source="squeue",
            array_job_id=str(array_job) if array_job else None,
            array_task_id=(str(array_task) if array_task is not None else f"[{pending_tasks}]" if pending_tasks
                           else None) if array_job else None,
            het_job_id=str(het_job) if het_job else None,
            het_offset=str(het_offset) if het_job and het_offset is not None else None,
            name=_string(job.get("name")),
            user=_string(job.get("user_name")),
            state=state,
            start_unix=start,
            end_unix=end,
            elapsed_s=elapsed,
            nodelist=_string(job.get("nodes")),
            num_nodes=_number(job.get("node_count")),
            num_gpus=gpus_in_tres(tres_from_string(job.get("tres_alloc_str"))) or _gpus_of_all_nodes(job),
        ))
    return facts


def _gpus_of_all_nodes(job: dict) -> int | None:
    per_node, nodes = gpus_per_node(job.get("tres_per_node")), _number(job.get("node_count"))
    return per_node * nodes if per_node is not None and nodes else None


def _run(command: Sequence[str], env: Mapping[str, str] | None = None,
         timeout_s: float = SLURM_QUERY_TIMEOUT_S) -> str | None:
    """stdout of a Slurm command; None if it is missing, fails or hangs."""
    try:
        result = subprocess.run(list(command), capture_output=True, text=True, check=False,
                                timeout=timeout_s, env=None if env is None else {**os.environ, **env})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None


def _squeue_jobs() -> list[JobFacts] | None:
    """Every job the controller remembers (it forgets a job MinJobAge seconds after it ends).
    --states=all: 24.11 leaves finished jobs out without it; 22.05 lists them either way."""
    text = _run(["squeue", "--json", "--states=all"])
    try:
        document = None if text is None else json.loads(text)
    except json.JSONDecodeError:
        return None
    # 22.05 exits 0 when it cannot reach slurmctld, with the failure in "errors" and no jobs
    if not isinstance(document, dict) or document.get("errors"):
        return None
    return parse_squeue(document)


def task_order(facts: JobFacts) -> tuple[int, int, str]:
    array = int(facts.array_job_id or facts.job_id)
    task = facts.array_task_id or ""
    return (array, int(task) if task.isdigit() else 1 << 62, task)


def jobs_by_id(ids: Sequence[str]) -> tuple[dict[str, list[JobFacts]], str | None]:
    """For each id (JOBID, an array's id for every task, or ARRAY_TASK), the jobs Slurm knows by it,
    from accounting (sacct) if it has them, else from the controller (squeue); [] when neither knows it.
    An array's tasks come in task order. Also which answered: "sacct", "squeue", or None (neither)."""
    text = _run(sacct_command(["--jobs=" + ",".join(ids)]), SACCT_ENV)
    accounted = parse_sacct(text) if text is not None else []
    found = {wanted: [job for job in accounted if job.matches(wanted)] for wanted in ids}
    answered = "sacct" if text is not None else None
    # accounting writes an array's tasks (a heterogeneous job's components) one by one: for the id of
    # all of them it may hold only some
    of_several = any(wanted in (job.array_job_id, job.het_job_id) for wanted, jobs in found.items() for job in jobs)
    if not all(found.values()) or of_several or any(job.unfinished or job.provisional for job in accounted):
        remembered = _squeue_jobs()
        answered = answered or ("squeue" if remembered is not None else None)
        for wanted, jobs in found.items():
            jobs[:] = with_remembered(jobs, [job for job in remembered or [] if job.matches(wanted)])
    return {wanted: sorted(jobs, key=task_order) for wanted, jobs in found.items()}, answered


def with_remembered(accounted: list[JobFacts], remembered: list[JobFacts]) -> list[JobFacts]:
    """Accounting's jobs, each fresher from the controller where it lags, and the jobs the controller
    remembers that accounting has not written yet (a provisional task record does not name its array)."""
    live = {job.job_id: job for job in remembered}
    known = {job.job_id for job in accounted}
    return [fresher(job, live.get(job.job_id)) for job in accounted] + [
        job for job in remembered if job.job_id not in known]


def fresher(accounted: JobFacts, remembered: JobFacts | None) -> JobFacts:
    """The facts of a job accounting shows unfinished or provisional from the controller, where it
    still remembers the job: accounting lags it, but keeps the submit lines that only it has."""
    if not (accounted.unfinished or accounted.provisional) or remembered is None:
        return accounted
    return replace(remembered, submit_line=accounted.submit_line, step_submit_lines=accounted.step_submit_lines)


def jobs_of_user(user: str, start_unix: float, end_unix: float) -> tuple[list[JobFacts], str | None]:
    """The user's jobs eligible or running between the two times, from accounting (sacct -u -S -E),
    else those the controller remembers that overlap the range; and which answered ("sacct",
    "squeue", or None when neither did)."""
    since, until = (time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) for t in (start_unix, end_unix))
    text = _run(sacct_command([f"--user={user}", f"--starttime={since}", f"--endtime={until}"]), SACCT_ENV)
    remembered = _squeue_jobs()
    mine = [job for job in remembered or [] if job.user == user and (job.start_unix or end_unix) <= end_unix
            and (job.end_unix or start_unix) >= start_unix]
    if text is not None:
        # accounting lags the controller by seconds: the jobs that just ended may not be in it yet
        return sorted(with_remembered(parse_sacct(text), mine), key=task_order), "sacct"
    return sorted(mine, key=task_order), "squeue" if remembered is not None else None


# ---------------------------------------------------------------------------------------------
# The TRANSIT plugin as the cluster configures it (plugstack.conf)
# ---------------------------------------------------------------------------------------------


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


@functools.cache
def plugstack_arguments() -> dict[str, str]:
    """The key=value arguments of spank_transit.so in the running cluster's plugstack.conf (found
    through ``scontrol show config``: report_dir=, policy=, lib=). When slurmctld does not answer
    within PLUGSTACK_QUERY_TIMEOUT_S, this node's own slurm.conf names it, as srun reads it; {} when
    neither does."""
    text = _run(["scontrol", "show", "config"], timeout_s=PLUGSTACK_QUERY_TIMEOUT_S)
    plugstack = None
    for line in (text or "").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "PlugStackConfig":
            plugstack = value.strip()
    plugstack = plugstack or (local_plugstack() if text is None else None)
    return plugin_arguments_in_plugstack(plugstack) if plugstack else {}


def local_plugstack() -> str | None:
    """The plugstack.conf this node's slurm.conf names ($SLURM_CONF, else the usual places):
    PlugStackConfig=, else plugstack.conf beside slurm.conf; None without a readable slurm.conf."""
    for path in [os.environ["SLURM_CONF"]] if "SLURM_CONF" in os.environ else SLURM_CONF_PATHS:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for line in text.splitlines():
            key, _, value = line.split("#", 1)[0].partition("=")
            if key.strip().lower() == "plugstackconfig" and value.strip():
                return value.strip()
        return str(Path(path).parent / "plugstack.conf")
    return None


def plugin_arguments_in_plugstack(plugstack: str) -> dict[str, str]:
    """The key=value arguments of the spank_transit.so line in a plugstack.conf (or a file it
    includes); {} when there is none."""
    for path in _plugstack_files(plugstack):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                words = line.split("#", 1)[0].split()
                if len(words) >= 2 and "spank_transit" in words[1]:
                    return dict(word.split("=", 1) for word in words[2:] if "=" in word)
    return {}
