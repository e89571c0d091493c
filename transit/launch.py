"""`transit launch` and `transit submit`: run a training job on whatever nodes it was given.

`launch` runs inside an allocation (usually an sbatch script). It reads the real node and GPU
counts from Slurm, recomputes the data-parallel degree and the gradient accumulation that keep
the fixed global batch, exports them as TRANSIT_GLOBAL_BATCH, TRANSIT_LOCAL_BATCH and
TRANSIT_GRAD_ACCUM, and replaces itself with
``srun --ntasks-per-node=1 torchrun --nnodes=N --nproc-per-node=G --rdzv-backend=c10d ...``
(or the same torchrun starting TorchTitan with its batch and parallelism flags).

`submit` shrinks a job's node count (by a fraction, or to the plan's minimum) before handing it
to sbatch with the TRANSIT policy.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
from dataclasses import asdict, dataclass

from transit import plan, slurm
from transit.errors import UsageError

TRANSIT_POLICIES = ("base", "prefetch", "advise", "off")
TORCHTITAN_MODULE = "torchtitan.train"


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
    cpus_per_node: int | None  # given to the one srun task per node

    @property
    def nodes(self) -> int:
        return len(self.hostnames)

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc_per_node

    @property
    def dp(self) -> int:
        model_parallel = self.tp * self.pp
        if self.world_size % model_parallel:
            raise UsageError(f"{self.nodes} nodes x {self.nproc_per_node} processes = {self.world_size} ranks "
                             f"are not a multiple of TP x PP = {model_parallel}")
        return self.world_size // model_parallel

    @property
    def grad_accum(self) -> int:
        return plan.accumulation_steps(self.global_batch, self.local_batch, self.dp)

    def environment(self) -> dict[str, str]:
        return {"TRANSIT_GLOBAL_BATCH": str(self.global_batch), "TRANSIT_LOCAL_BATCH": str(self.local_batch),
                "TRANSIT_GRAD_ACCUM": str(self.grad_accum)}

    def torchrun(self) -> list[str]:
        return ["torchrun", f"--nnodes={self.nodes}", f"--nproc-per-node={self.nproc_per_node}",
                "--rdzv-backend=c10d", f"--rdzv-endpoint={self.rdzv_endpoint}", f"--rdzv-id={self.job_id}"]

    def command(self, framework: str, program: list[str]) -> list[str]:
        if framework == "torchrun":
            worker = program
        else:
            # TorchTitan derives the accumulation itself from the global and local batch.
            worker = ["-m", TORCHTITAN_MODULE, *program,
                      f"--training.global_batch_size={self.global_batch}",
                      f"--training.local_batch_size={self.local_batch}",
                      f"--parallelism.tensor_parallel_degree={self.tp}",
                      f"--parallelism.pipeline_parallel_degree={self.pp}"]
        return slurm.srun_command(self.nodes, [*self.torchrun(), *worker], self.cpus_per_node)

    def to_dict(self) -> dict:
        return asdict(self) | {"nodes": self.nodes, "world_size": self.world_size, "dp": self.dp,
                               "grad_accum": self.grad_accum}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def nproc_per_node(requested: int | None) -> int:
    if requested is not None:
        if requested < 1:
            raise UsageError(f"--nproc-per-node must be at least 1, got {requested}")
        return requested
    gpus = slurm.gpus_on_node()
    if gpus is None:
        raise UsageError("cannot tell how many GPUs this node has (no SLURM_GPUS_ON_NODE or "
                         "CUDA_VISIBLE_DEVICES): pass --nproc-per-node (--gpus-per-node)")
    return gpus


def global_batch_from_env() -> int:
    value = os.environ.get("TRANSIT_GLOBAL_BATCH")
    if value is None:
        raise UsageError("--global-batch is required (or TRANSIT_GLOBAL_BATCH in the environment)")
    if not value.isdigit():
        raise UsageError(f"TRANSIT_GLOBAL_BATCH={value!r} is not a positive integer")
    return int(value)


def build_launch(args: argparse.Namespace) -> Launch:
    if "SLURM_JOB_ID" in os.environ:
        allocation = slurm.current_allocation()
        job_id, hostnames = allocation.job_id, allocation.hostnames
        if args.nodes is not None and args.nodes != allocation.num_nodes:
            raise UsageError(f"--nodes {args.nodes} disagrees with the allocation's {allocation.num_nodes} nodes "
                             f"({','.join(hostnames)}); leave --nodes out inside an allocation")
        host = slurm.node_address(allocation.first_host)
        cpus = slurm.min_cpus_per_node()
    elif args.dry_run and args.nodes is not None:
        if args.nodes < 1:
            raise UsageError(f"--nodes must be at least 1, got {args.nodes}")
        # a preview outside Slurm: this host stands for the first node
        job_id, host, cpus = "preview", socket.gethostname(), None
        hostnames = tuple([host] + [f"<node{i}>" for i in range(2, args.nodes + 1)])
    else:
        raise UsageError("not inside a Slurm allocation: run under sbatch/salloc, or preview with "
                         "--dry-run --nodes N")
    global_batch = args.global_batch if args.global_batch is not None else global_batch_from_env()
    for name, value in (("global batch", global_batch), ("--local-batch", args.local_batch), ("--tp", args.tp),
                        ("--pp", args.pp)):
        if value < 1:
            raise UsageError(f"{name} must be at least 1, got {value}")
    # The batch script runs on the first node of the allocation, where the rendezvous store lives.
    port = args.rdzv_port or free_port()
    return Launch(job_id=job_id, hostnames=hostnames, nproc_per_node=nproc_per_node(args.nproc_per_node),
                  tp=args.tp, pp=args.pp, global_batch=global_batch, local_batch=args.local_batch,
                  rdzv_endpoint=f"{host}:{port}", cpus_per_node=cpus)


def launch_main(args: argparse.Namespace) -> int:
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        raise UsageError("give the training script (or TorchTitan arguments) after the options")
    launch = build_launch(args)
    environment = launch.environment()  # raises when the global batch does not divide
    command = launch.command(args.framework, program)
    if args.dry_run:
        if args.json:
            print(json.dumps(launch.to_dict() | {"framework": args.framework, "env": environment,
                                                 "command": command}, indent=2))
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


def submit_main(args: argparse.Namespace) -> int:
    if args.nodes < 1:
        raise UsageError(f"--nodes must be at least 1, got {args.nodes}")
    # read inside the job by `transit launch` (TRANSIT_GLOBAL_BATCH) and the templates (LOCAL_BATCH, LAUNCH_ARGS)
    extra_env: dict[str, str] = {}
    if args.to_min:
        config, cluster = plan.config_from_args(args)
        result = plan.plan(config, cluster, args.nodes, args.global_batch)
        nodes = result["min_feasible_nodes"]
        # only the requested and the chosen node counts will ever train this job: the global batch
        # must suit those two, not every candidate in between
        dps = [c["dp"] for c in result["candidates"] if c["nodes"] in (args.nodes, nodes)]
        target = args.global_batch if args.global_batch is not None else config.local_batch * dps[0]
        extra_env["TRANSIT_GLOBAL_BATCH"] = str(plan.common_global_batch(config.local_batch, dps, target))
        extra_env["LOCAL_BATCH"] = str(config.local_batch)
        if config.tp > 1 or config.pp > 1:
            extra_env["LAUNCH_ARGS"] = f"--tp {config.tp} --pp {config.pp}"
    else:
        if args.scale_in is None:
            raise UsageError("give --scale-in FRACTION or --to-min")
        if not 0 <= args.scale_in < 1:
            raise UsageError(f"--scale-in must be in [0, 1), got {args.scale_in}")
        nodes = plan.reduced_nodes(args.nodes, args.scale_in)
        if args.global_batch is not None:
            extra_env["TRANSIT_GLOBAL_BATCH"] = str(args.global_batch)
    sbatch_extra = [f"--export=ALL,{','.join(f'{k}={v}' for k, v in extra_env.items())}"] if extra_env else []
    command = slurm.sbatch_command(args.script, args.script_args, nodes, args.transit,
                                   [*sbatch_extra, *args.sbatch_arg])
    summary = {"requested_nodes": args.nodes, "nodes": nodes, "transit": args.transit, "command": command}
    if args.dry_run:
        print(json.dumps(summary, indent=2) if args.json else shlex.join(command))
        return 0
    job_id = slurm.submit(command)
    print(json.dumps(summary | {"job_id": job_id}, indent=2) if args.json else
          f"Submitted batch job {job_id} on {nodes} nodes (requested {args.nodes}), --transit={args.transit}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "launch", help="start torchrun/TorchTitan across the current allocation with re-planned batch settings",
        description="Inside a Slurm allocation: read its nodes and GPUs, recompute DP degree and gradient "
                    "accumulation for the fixed global batch, export TRANSIT_GLOBAL_BATCH, TRANSIT_LOCAL_BATCH "
                    "and TRANSIT_GRAD_ACCUM, and run srun torchrun with the rendezvous on the first node.")
    parser.add_argument("--global-batch", type=int,
                        help="sequences per optimizer step, fixed whatever the node count "
                             "(default: $TRANSIT_GLOBAL_BATCH, which `transit submit --to-min` sets)")
    parser.add_argument("--local-batch", type=int, default=1, help="sequences per rank per micro-batch")
    parser.add_argument("--tp", type=int, default=1, help="tensor parallel degree")
    parser.add_argument("--pp", type=int, default=1, help="pipeline parallel degree")
    parser.add_argument("--nproc-per-node", "--gpus-per-node", dest="nproc_per_node", type=int,
                        help="processes per node (default: SLURM_GPUS_ON_NODE, else CUDA_VISIBLE_DEVICES); "
                             "required for CPU runs")
    parser.add_argument("--framework", choices=("torchrun", "torchtitan"), default="torchrun",
                        help="torchrun SCRIPT ARGS, or torchrun -m torchtitan.train ARGS + batch flags")
    parser.add_argument("--rdzv-port", type=int,
                        help="rendezvous port on the first node (default: a port free on this host, which is "
                             "the first node when this runs in a batch script)")
    parser.add_argument("--nodes", type=int, help="node count for a --dry-run preview outside an allocation")
    parser.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    parser.add_argument("--json", action="store_true", help="with --dry-run: print the launch plan as JSON")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="training script and its arguments")
    parser.set_defaults(func=launch_main)

    parser = subparsers.add_parser(
        "submit", help="sbatch a job on fewer nodes, with TRANSIT",
        description="Shrink --nodes by --scale-in FRACTION, or to the smallest count `transit plan` finds "
                    "feasible (--to-min, with the plan's model options), and submit with sbatch --transit.")
    parser.add_argument("--nodes", type=int, required=True, help="node count the job would ask for without TRANSIT")
    shrink = parser.add_mutually_exclusive_group()
    shrink.add_argument("--scale-in", type=float, help="fraction of the nodes to give up, e.g. 0.5")
    shrink.add_argument("--to-min", action="store_true", help="the plan's smallest feasible node count")
    parser.add_argument("--transit", choices=TRANSIT_POLICIES, default="advise", help="TRANSIT policy (default advise)")
    parser.add_argument("--global-batch", type=int, help="with --to-min: target global batch for the plan")
    parser.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                        help="extra sbatch argument (repeatable), e.g. --sbatch-arg=--time=01:00:00")
    parser.add_argument("--dry-run", action="store_true", help="print the sbatch command instead of running it")
    parser.add_argument("--json", action="store_true")
    plan.add_model_arguments(parser)
    parser.add_argument("script", help="batch script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    parser.set_defaults(func=submit_main)
