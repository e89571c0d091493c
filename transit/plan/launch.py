"""`transit launch` and `transit submit`: run a training job on whatever nodes it was given.

`submit` plans before anything is queued: the node count to submit (the smallest candidate: a
--scale-in fraction, --candidates, or the plan's default candidates with --to-min) and one
global batch that every candidate can train. It refuses, with nothing submitted, when that batch
would stray more than MAX_BATCH_OVERSHOOT from the target; else it passes the plan to the job
(TRANSIT_GLOBAL_BATCH, TRANSIT_LOCAL_BATCH, TRANSIT_TP, TRANSIT_PP, and the planned counts in
TRANSIT_CANDIDATES). sbatch options the plan sets (--nodes, --export, --transit) are refused in
--sbatch-arg.

`launch` runs inside the allocation (usually an sbatch script). It reads the real node and GPU
counts from Slurm, refuses a node count that is not one of TRANSIT_CANDIDATES, derives the
data-parallel degree and the gradient accumulation that keep the global batch on that count,
exports TRANSIT_GLOBAL_BATCH, TRANSIT_LOCAL_BATCH and TRANSIT_GRAD_ACCUM, and replaces itself with
``srun --ntasks-per-node=1 torchrun --nnodes=N --nproc-per-node=G --rdzv-backend=c10d ...``
(or the same torchrun starting TorchTitan with the batch and parallelism flags its version reads).
The rendezvous port is chosen on the allocation's first node, where torchrun's store will listen.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass

from transit import paths, slurm
from transit.errors import UsageError
from transit.plan import bounds, planner
from transit.plan.arguments import config_from_args

TORCHTITAN_MODULE = "torchtitan.train"
# What `submit` passes to the job, read by `launch` as its defaults; an option that contradicts one is refused.
PLAN_ENV = {"global_batch": "TRANSIT_GLOBAL_BATCH", "local_batch": "TRANSIT_LOCAL_BATCH", "tp": "TRANSIT_TP",
            "pp": "TRANSIT_PP"}
# The node counts `submit` planned the global batch for: `launch` runs on any one of them.
CANDIDATES_ENV = "TRANSIT_CANDIDATES"
LAUNCH_SCHEMA = "transit.launch/1"  # `transit launch --dry-run --json` (schemas/launch-1.schema.json)
SUBMIT_SCHEMA = "transit.submit/1"  # `transit submit --json`
# sbatch options `submit` sets from its plan, which an --sbatch-arg must not set again
SUBMIT_OWNS = {"--nodes": "plan counts with --candidates", "-N": "plan counts with --candidates",
               "--export": "for launch", "--transit": "use --transit"}
PORT_PROBE = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"
PORT_PROBE_TIMEOUT_S = 60


@dataclass(frozen=True)
class Launch:
    job_id: str
    hostnames: tuple[str, ...]
    nproc_per_node: int
    tp: int
    pp: int
    global_batch: int
    local_batch: int
    rdzv_endpoint: str
    rdzv_port_chosen_on: str  # where the port was found free: "<node> (batch script)", "<node> (srun step)"
    cpus_per_node: int | None  # given to the one srun task per node
    cp: int = 1  # TorchTitan's context-parallel degree, fixed by the job
    dp_replicate: int = 1  # TorchTitan's data-parallel replicate degree, fixed by the job

    @property
    def nodes(self) -> int:
        return len(self.hostnames)

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc_per_node

    @property
    def dp(self) -> int:
        """Data-parallel ranks (replicate x shard): what the global batch is split over."""
        model_parallel = self.tp * self.pp * self.cp
        fixed = f"TP x PP{' x CP' if self.cp > 1 else ''} = {model_parallel}"
        if self.world_size % (model_parallel * self.dp_replicate):
            replicate = f" x DP replicate {self.dp_replicate}" if self.dp_replicate > 1 else ""
            raise UsageError(f"{self.nodes} nodes x {self.nproc_per_node} processes = {self.world_size} ranks "
                             f"are not a multiple of {fixed}{replicate}")
        return self.world_size // model_parallel

    @property
    def dp_shard(self) -> int:
        return self.dp // self.dp_replicate

    @property
    def grad_accum(self) -> int:
        return planner.accumulation_steps(self.global_batch, self.local_batch, self.dp)

    def environment(self) -> dict[str, str]:
        return {"TRANSIT_GLOBAL_BATCH": str(self.global_batch), "TRANSIT_LOCAL_BATCH": str(self.local_batch),
                "TRANSIT_GRAD_ACCUM": str(self.grad_accum)}

    def torchrun(self) -> list[str]:
        return ["torchrun", f"--nnodes={self.nodes}", f"--nproc-per-node={self.nproc_per_node}",
                "--rdzv-backend=c10d", f"--rdzv-endpoint={self.rdzv_endpoint}", f"--rdzv-id={self.job_id}"]

    def command(self, program: list[str], torchtitan_flags: list[str] | None = None) -> list[str]:
        """srun torchrun PROGRAM, or with TorchTitan's flags: srun torchrun -m torchtitan.train PROGRAM FLAGS."""
        worker = program if torchtitan_flags is None else ["-m", TORCHTITAN_MODULE, *program, *torchtitan_flags]
        return slurm.srun_command(self.nodes, [*self.torchrun(), *worker], self.cpus_per_node)

    def to_dict(self) -> dict:
        return asdict(self) | {"nodes": self.nodes, "world_size": self.world_size, "dp": self.dp,
                               "dp_shard": self.dp_shard, "grad_accum": self.grad_accum}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def first_node_port(first_host: str) -> tuple[int, str]:
    """A port free on the allocation's first node, found there: by this process when it runs on that
    node (an sbatch script does), else by a one-task step on it (under salloc this runs on the
    submit host, whose free ports say nothing about the first node's)."""
    if os.environ.get("SLURMD_NODENAME") == first_host:
        return free_port(), f"{first_host} (batch script)"
    command = ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={first_host}", "--overlap", "--cpus-per-task=1",
               sys.executable, "-c", PORT_PROBE]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=PORT_PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UsageError(f"no port from {first_host} within {PORT_PROBE_TIMEOUT_S} s ({shlex.join(command)}); "
                         "give --rdzv-port") from None
    if result.returncode != 0 or not result.stdout.strip().isdigit():
        reason = result.stderr.strip().splitlines()[-1:] or [f"exit code {result.returncode}"]
        raise UsageError(f"asking {first_host} for a free port failed: {reason[0]}; give --rdzv-port")
    return int(result.stdout.strip()), f"{first_host} (srun step)"


def nproc_per_node(requested: int | None) -> int:
    if requested is not None:
        return requested
    gpus = slurm.gpus_on_node()
    if gpus is None:
        raise UsageError("cannot tell how many GPUs this node has (no SLURM_GPUS_ON_NODE or "
                         "CUDA_VISIBLE_DEVICES): pass --nproc-per-node (--gpus-per-node)")
    return gpus


def planned_settings(args: argparse.Namespace) -> dict[str, int]:
    """The batch settings: the options given, else what `transit submit` passed in the environment;
    an option that contradicts the passed plan is refused (the job was queued for the plan)."""
    settings: dict[str, int] = {}
    for dest, variable in PLAN_ENV.items():
        given = getattr(args, dest, None)
        text = os.environ.get(variable)
        passed = None if text is None else int(bounds.parse_value(variable, text, bounds.BOUNDS[dest]))
        if given is not None and passed is not None and given != passed:
            raise UsageError(f"{bounds.option_name(dest)} {given} disagrees with {variable}={passed}, which "
                             "transit submit planned for this job")
        value = given if given is not None else passed
        if value is not None:
            settings[dest] = value
    if "global_batch" not in settings:
        raise UsageError("--global-batch is required (or TRANSIT_GLOBAL_BATCH, which transit submit sets)")
    return {"local_batch": 1, "tp": 1, "pp": 1} | settings


def planned_counts() -> list[int] | None:
    """The node counts `transit submit` planned the job's global batch for (TRANSIT_CANDIDATES), if any."""
    text = os.environ.get(CANDIDATES_ENV)
    if text is None:
        return None
    counts = bounds.parse_list(CANDIDATES_ENV, text.replace(":", ","), bounds.BOUNDS["candidates"])
    return [int(n) for n in counts]


def build_launch(args: argparse.Namespace, fixed_degrees: dict[str, int] | None = None) -> Launch:
    settings = planned_settings(args)
    if "SLURM_JOB_ID" in os.environ:
        allocation = slurm.current_allocation()
        job_id, hostnames = allocation.job_id, allocation.hostnames
        if args.nodes is not None and args.nodes != allocation.num_nodes:
            raise UsageError(f"--nodes {args.nodes} disagrees with the allocation's {allocation.num_nodes} nodes "
                             f"({','.join(hostnames)}); leave --nodes out inside an allocation")
        host = slurm.node_address(allocation.first_host)
        cpus = slurm.min_cpus_per_node()
        port, chosen_on = ((args.rdzv_port, "--rdzv-port") if args.rdzv_port is not None
                           else first_node_port(allocation.first_host))
    elif args.dry_run and args.nodes is not None:
        # a preview outside Slurm: this host stands for the first node
        job_id, host, cpus = "preview", socket.gethostname(), None
        hostnames = tuple([host] + [f"<node{i}>" for i in range(2, args.nodes + 1)])
        port, chosen_on = ((args.rdzv_port, "--rdzv-port") if args.rdzv_port is not None
                           else (free_port(), f"{host} (preview)"))
    else:
        raise UsageError("not inside a Slurm allocation: run under sbatch/salloc, or preview with "
                         "--dry-run --nodes N")
    nproc = nproc_per_node(args.nproc_per_node)
    bounds.check_tensor_parallel(settings["tp"], nproc, "processes per node")
    launch = Launch(job_id=job_id, hostnames=hostnames, nproc_per_node=nproc, tp=settings["tp"],
                    pp=settings["pp"], global_batch=settings["global_batch"], local_batch=settings["local_batch"],
                    rdzv_endpoint=f"{host}:{port}", rdzv_port_chosen_on=chosen_on, cpus_per_node=cpus,
                    **(fixed_degrees or {}))
    counts = planned_counts()
    if counts is not None and launch.nodes not in counts:
        raise UsageError(f"{launch.nodes} nodes is not a count transit submit planned global batch "
                         f"{launch.global_batch} for ({CANDIDATES_ENV}={','.join(map(str, counts))})")
    return launch


def launch_main(args: argparse.Namespace) -> int:
    bounds.check_args(args)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        raise UsageError("give the training script (or TorchTitan arguments) after the options")
    titan, fixed = None, None
    if args.framework == "torchtitan":
        from transit.plan import torchtitan

        titan = torchtitan.installed()
        titan.check_program(program)
        fixed = titan.fixed_degrees(program)
    elif args.seq_len is not None:
        raise UsageError("--seq-len is passed to TorchTitan only (--torchtitan): leave it out for torchrun")
    launch = build_launch(args, fixed)
    environment = launch.environment()  # raises when the global batch does not divide
    flags = None if titan is None else titan.flags(launch.global_batch, launch.local_batch, launch.tp, launch.pp,
                                                   args.seq_len, launch.dp_shard)
    command = launch.command(program, flags)
    if args.dry_run:
        if args.json:
            print(json.dumps({"schema": LAUNCH_SCHEMA} | launch.to_dict() | {"framework": args.framework, "env": environment, "command": command}
                             | ({"torchtitan": asdict(titan)} if titan else {}), indent=2))
        else:
            exports = " ".join(f"{k}={v}" for k, v in environment.items())
            print(f"{exports} {shlex.join(command)}")
        return 0
    print(f"transit launch: {launch.nodes} nodes x {launch.nproc_per_node} = {launch.world_size} ranks, "
          f"DP {launch.dp}, global batch {launch.global_batch} = local {launch.local_batch} x DP {launch.dp} "
          f"x accumulation {launch.grad_accum}", flush=True)
    try:
        os.execvpe(command[0], command, os.environ | environment)
    except FileNotFoundError:
        raise UsageError(f"{command[0]} not found on PATH") from None


def submit_plan(args: argparse.Namespace) -> dict:
    """The candidate counts, the one to submit (the smallest) and the common global batch, or a refusal.

    With a model (--model, --hf-config, dimensions) the memory plan is made too, and a count that
    cannot hold the job is refused; without one, the batch arithmetic alone."""
    if not (args.to_min or args.scale_in or args.candidates):
        raise UsageError("give --scale-in FRACTION, --candidates N,N or --to-min")
    if args.to_min or args.model or args.hf_config or args.layers:
        config, cluster = config_from_args(args)
        result = planner.plan(config, cluster, args.nodes, args.scale_in, args.candidates, args.global_batch,
                           args.global_tokens, args.transit)
        counts, submitted = result["counts"], result["candidates"][-1]
        if not submitted["runs"]:
            raise UsageError(f"{submitted['nodes']} nodes cannot run this job: "
                             f"{submitted['host_bytes_per_node'] / planner.GIB:.0f} GiB of host DRAM per node needed, "
                             f"{cluster.host_dram_bytes / planner.GIB:.0f} GiB there (see transit plan)")
        if args.transit == planner.NO_TRANSIT and submitted["spilled_bytes"]:
            raise UsageError(f"{submitted['nodes']} nodes spill {submitted['spilled_bytes'] / planner.GIB:.1f} GiB per "
                             "GPU, which only TRANSIT holds: --transit off needs counts that fit in HBM")
        layout = planner.Layout(cluster.gpus_per_node, config.tp, config.pp, config.local_batch)
        proposals, seq_len = result["proposals"], config.seq_len
    else:
        gpus_per_node = args.gpus_per_node or planner.CLUSTER_PRESETS[args.cluster].gpus_per_node
        bounds.check_tensor_parallel(args.tp, gpus_per_node)
        layout = planner.Layout(gpus_per_node, args.tp, args.pp, args.local_batch)
        counts = planner.candidate_counts(args.nodes, args.scale_in, args.candidates)
        for count in counts:
            layout.check_count(count, "--candidates" if args.candidates else "--scale-in")
        seq_len = args.seq_len
        proposals = None
    target = planner.target_sequences(args.local_batch, layout.dp(args.nodes), seq_len, args.global_batch,
                                   args.global_tokens)
    batch = layout.batch(counts, target, target_given=args.global_batch is not None or args.global_tokens is not None)
    if not batch["within_overshoot"]:
        if proposals is None:
            proposals = planner.nearby_count_sets(layout, counts, target, allowed=lambda count: True)
        nearest = (f"; nearest within: --candidates {','.join(map(str, proposals[0]['counts']))} "
                   f"({proposals[0]['global_batch']})" if proposals else
                   f". {planner.batch_advice(batch, target, layout.local_batch * layout.dp(args.nodes), layout.local_batch)}")
        raise UsageError(f"global batch {target} cannot be kept on {','.join(map(str, counts))} nodes: their common "
                         f"multiple is {batch['global_batch']:.6g}, {batch['overshoot']:+.1%} (over "
                         f"{planner.MAX_BATCH_OVERSHOOT:.0%}){nearest}")
    planner.check_batch_bound(batch, proposals or [])
    return batch | {"target_global_batch": target, "nodes": counts[-1], "local_batch": layout.local_batch,
                    "tp": layout.tp, "pp": layout.pp}


def check_sbatch_args(sbatch_args: list[str]) -> None:
    """An --sbatch-arg may not set what the plan sets (sbatch would take the later one silently)."""
    for arg in sbatch_args:
        if not arg:  # sbatch would take the empty word for the script, and the script for its argument
            raise UsageError("--sbatch-arg='' is empty; give an sbatch option, e.g. --sbatch-arg=--time=01:00:00")
        name = arg.split("=", 1)[0]
        option = next((o for o in SUBMIT_OWNS if name == o or (o == "-N" and name.startswith("-N"))), None)
        if option is not None:
            raise UsageError(f"--sbatch-arg={arg}: the plan sets {option} ({SUBMIT_OWNS[option]})")


def submit_main(args: argparse.Namespace) -> int:
    paths.batch_script(args.script)  # sbatch reads it only when submitting: a dry run would pass a missing one
    bounds.check_args(args)
    check_sbatch_args(args.sbatch_arg)
    planned = submit_plan(args)
    nodes = planned["nodes"]
    # read inside the job by `transit launch`: its defaults, and the counts it may run on
    extra_env = {"TRANSIT_GLOBAL_BATCH": planned["global_batch"], "TRANSIT_LOCAL_BATCH": planned["local_batch"],
                 "TRANSIT_TP": planned["tp"], "TRANSIT_PP": planned["pp"]}
    # sbatch splits --export at commas, so the list of counts is joined with colons there
    export = (f"--export=ALL,{','.join(f'{k}={v}' for k, v in extra_env.items())},"
              f"{CANDIDATES_ENV}={':'.join(map(str, planned['counts']))}")
    command = slurm.sbatch_command(args.script, args.script_args, nodes, args.transit, [export, *args.sbatch_arg])
    summary = {"schema": SUBMIT_SCHEMA, "requested_nodes": args.nodes, "nodes": nodes, "counts": planned["counts"],
               "target_global_batch": planned["target_global_batch"], "global_batch": planned["global_batch"],
               "grad_accum": planned["grad_accum"], "overshoot": planned["overshoot"], "transit": args.transit,
               "command": command}
    if args.dry_run:
        print(json.dumps(summary, indent=2) if args.json else shlex.join(command))
        return 0
    job_id = slurm.submit(command)
    print(json.dumps(summary | {"job_id": job_id}, indent=2) if args.json else
          f"Submitted batch job {job_id} on {nodes} nodes (requested {args.nodes}), --transit={args.transit}, "
          f"global batch {planned['global_batch']} x accumulation {planned['grad_accum'][str(nodes)]}")
    return 0
