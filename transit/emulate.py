"""Emulated nodes: N torchrun agents on one host, each playing one node of a multi-node job.

    scripts/emulate-nodes 2 --transit advise --mem-limit 16G -- bench/train.py --model bench ...

Each agent is `torchrun --nnodes N` against a rendezvous on 127.0.0.1; each rank gets its node's
name (emuI) in SLURMD_NODENAME, as slurmd sets it, so TRANSIT's stats name the node. Every rank
gets its own NCCL_HOSTID: NCCL then takes each rank for a host of its own and connects ranks over
sockets on `lo`, never through shared memory or P2P, which also holds for two ranks of one node on
one GPU ("Duplicate GPU" otherwise). Ranks go round-robin over the GPUs present (global rank r on
GPU r mod G), each seeing only its own (CUDA_VISIBLE_DEVICES): a script picks its device as
LOCAL_RANK modulo the devices it sees. Without a GPU the ranks run on the CPU (gloo).

Under --transit every agent gets the environment the Slurm plugin sets (the rule `transit run`
shares with it). Ranks that share a GPU under TRANSIT need --mem-limit, and their limits plus what
each keeps outside it must fit the GPU's free memory: managed memory beyond the device's physical
memory can hang the GPU, so an emulation that could oversubscribe it is refused before it starts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

from transit import _native, envcheck, run
from transit.errors import UsageError

SCHEMA = "transit.emulate/1"
MAX_NODES = 64
MAX_RANKS_PER_NODE = 64
GIB = 1 << 30
# Device memory a TRANSIT rank uses beside its managed data under L: the CUDA context, NCCL's
# buffers and lazily loaded modules (1.14 GiB per rank measured on an H100, NVML's process peak less
# PyTorch's reserved peak, bench/results/scale-in-sizing.json; bench's margin for them is 1.5 GiB),
# and the bound's slack of one 20 ms tick (256 MiB).
RANK_DEVICE_OVERHEAD_BYTES = 3 * GIB // 2 + (256 << 20)
# NCCL through sockets on the loopback interface, and multicast off (the device's safety rule).
NCCL_ENV = {"NCCL_SOCKET_IFNAME": "lo", "NCCL_NET": "Socket", "NCCL_NVLS_ENABLE": "0",
            "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
STOP_GRACE_S = 15  # after SIGTERM (TRANSIT writes its stats on it), before SIGKILL
GPUS_ENV = "EMULATE_NODES_GPUS"  # the harness -> rank wrapper: the GPUs ranks go round-robin over


@dataclass(frozen=True)
class RankSlot:
    node: str
    node_rank: int
    local_rank: int
    rank: int
    gpu: int | None
    nccl_hostid: str


def node_name(i: int) -> str:
    return f"emu{i}"


def hostid(node_rank: int, local_rank: int) -> str:
    return f"emu{node_rank}-r{local_rank}"


def gpu_of(rank: int, gpus: list[int]) -> int | None:
    return gpus[rank % len(gpus)] if gpus else None


def layout(nodes: int, per_node: int, gpus: list[int]) -> list[RankSlot]:
    """Every rank's node, GPU and NCCL host id, in global rank order (torchrun's: node-major)."""
    return [RankSlot(node_name(n), n, lr, n * per_node + lr, gpu_of(n * per_node + lr, gpus), hostid(n, lr))
            for n in range(nodes) for lr in range(per_node)]


def free_gpu_memory() -> dict[int, int]:
    """Free bytes of each GPU nvidia-smi lists (none without a GPU or nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.free", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    free = {}
    for line in out.splitlines():
        index, mib = (field.strip() for field in line.split(","))
        free[int(index)] = int(mib) << 20
    return free


def visible_gpus(free: dict[int, int], env: dict[str, str]) -> list[int]:
    """The GPUs ranks may use: CUDA_VISIBLE_DEVICES's (indices) where set, else every one found."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not free:  # no GPU: the ranks run on the CPU whatever it names
        return sorted(free)
    picked = []
    for item in filter(None, (v.strip() for v in visible.split(","))):
        if not item.isdigit() or int(item) not in free:
            raise UsageError(f"CUDA_VISIBLE_DEVICES={visible}: expected indices of the GPUs present "
                             f"({','.join(map(str, sorted(free))) or 'none'})")
        picked.append(int(item))
    return picked


def check_fits(slots: list[RankSlot], free: dict[int, int], transit: bool, limit: int | None) -> None:
    """Refuses, in one line, TRANSIT ranks whose device memory could exceed a GPU's free memory."""
    if not transit:
        return  # without TRANSIT nothing is managed: an allocation past the GPU fails, it cannot oversubscribe
    per_gpu: dict[int, int] = {}
    for slot in slots:
        if slot.gpu is not None:
            per_gpu[slot.gpu] = per_gpu.get(slot.gpu, 0) + 1
    for gpu, ranks in sorted(per_gpu.items()):
        if limit is None:
            if ranks > 1:
                raise UsageError(f"{ranks} TRANSIT ranks share GPU {gpu}: give --mem-limit so that their managed "
                                 "memory cannot exceed the GPU's")
            continue
        need = ranks * (limit + RANK_DEVICE_OVERHEAD_BYTES)
        if need > free[gpu]:
            raise UsageError(
                f"{ranks} rank(s) x (--mem-limit {limit / GIB:.1f} GiB + {RANK_DEVICE_OVERHEAD_BYTES / GIB:.2f} GiB "
                f"beside it) = {need / GIB:.1f} GiB exceed GPU {gpu}'s {free[gpu] / GIB:.1f} GiB free; lower "
                "--mem-limit or the ranks per GPU")


def positive(name: str, most: int):
    def parse(text: str) -> int:
        if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= most:
            raise argparse.ArgumentTypeError(f"{name} '{_native.show(text)}': expected a whole number from 1 to {most}")
        return int(text)
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="emulate-nodes",
        description="Run a torchrun training script as a job of N emulated nodes on this host (one torchrun "
        "agent per node, NCCL over sockets on lo, ranks round-robin over the GPUs), natively or under TRANSIT.")
    p.add_argument("nodes", type=positive("nodes", MAX_NODES), help=f"emulated nodes (1-{MAX_NODES})")
    p.add_argument("--nproc-per-node", type=positive("--nproc-per-node", MAX_RANKS_PER_NODE), default=1,
                   metavar="P", help="ranks per node (default 1)")
    p.add_argument("--transit", metavar="POLICY", help="run every rank under TRANSIT with this policy")
    p.add_argument("--mem-limit", metavar="SIZE", help="TRANSIT's limit L per rank, e.g. 16G (needs --transit)")
    p.add_argument("--out", metavar="DIR", help=f"TRANSIT's stats directory (default ./{run.DEFAULT_OUT})")
    p.add_argument("--dry-run", action="store_true", help="print the ranks' layout and the memory check, run nothing")
    p.add_argument("--json", action="store_true",
                   help=f"print the layout and the outcome as JSON ({SCHEMA}); the job's output goes to stderr")
    p.epilog = ("After --: what torchrun would run, a Python script and its arguments (or -m MODULE ...). "
                "Each rank sees only its GPU: a script picks its device as LOCAL_RANK modulo the devices it sees.")

    def one_line(message: str) -> None:  # argparse's usage block would bury the one line that matters
        print(f"emulate-nodes: {message}", file=sys.stderr)
        raise SystemExit(2)

    p.error = one_line  # type: ignore[method-assign]
    return p


@dataclass
class Plan:
    nodes: int
    per_node: int
    gpus: list[int]
    slots: list[RankSlot]
    policy: str | None
    limit_bytes: int | None
    out: str | None
    cmd: list[str]

    def as_dict(self) -> dict:
        return {"schema": SCHEMA, "nodes": self.nodes, "ranks_per_node": self.per_node, "gpus": self.gpus,
                "policy": self.policy, "mem_limit_bytes": self.limit_bytes, "out": self.out, "cmd": self.cmd,
                "ranks": [asdict(s) for s in self.slots]}


def make_plan(args: argparse.Namespace, cmd: list[str], env: dict[str, str],
              free: dict[int, int]) -> tuple[Plan, dict[str, str]]:
    """The layout and the agents' common environment, every check made before anything starts."""
    if not cmd:
        raise UsageError("no script given; use: emulate-nodes N [options] -- SCRIPT ARGS...")
    if args.mem_limit is not None and args.transit is None:
        raise UsageError(f"--mem-limit {_native.show(args.mem_limit)} needs --transit POLICY")
    if args.out is not None and args.transit is None:
        raise UsageError("--out names TRANSIT's stats directory: it needs --transit POLICY")
    gpus = visible_gpus(free, env)
    slots = layout(args.nodes, args.nproc_per_node, gpus)
    agent_env = dict(env) | NCCL_ENV | {GPUS_ENV: ",".join(map(str, gpus))}
    limit = None
    out = None
    if args.transit is not None:
        _native.check_value("TRANSIT_POLICY", "--transit", args.transit)
        if args.mem_limit is not None:
            _native.check_value("TRANSIT_MEM_LIMIT", "--mem-limit", args.mem_limit)
            limit = _native.parse_size(args.mem_limit, "--mem-limit")
        given = run.DEFAULT_OUT if args.out is None else args.out
        run.check_out("--out" if args.out is not None else "the default --out", given)
        out = os.path.abspath(given)
        agent_env = run.build_env(args.transit, args.mem_limit, out, agent_env)
        envcheck.check(agent_env)
    check_fits(slots, free, args.transit is not None, limit)
    if not cmd[0].startswith("-") and not os.path.exists(cmd[0]):  # python's options (-m MODULE) aside
        raise UsageError(f"script '{_native.show(cmd[0])}' does not exist; give a Python script (or -m MODULE) after --")
    return Plan(args.nodes, args.nproc_per_node, gpus, slots, args.transit, limit, out, cmd), agent_env


def agent_argv(plan: Plan, port: int) -> list[str]:
    # c10d rendezvous on a store this harness hosts (is_host=false on every agent): with torchrun's
    # static rendezvous node 0's agent hosts it and may exit while another agent still waits in the
    # exit barrier, which then prints a c10d stack trace at the end of a good run.
    # Rendezvous gives the agents their node ranks in the order they join: each rank takes its
    # node's name from its GROUP_RANK (rank_exec), so names and global ranks agree.
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(plan.nodes),
            "--nproc-per-node", str(plan.per_node), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "emulate-nodes", "--rdzv-conf", "is_host=false",
            "--no-python", sys.executable, "-m", "transit.emulate", "--rank-exec", "--", *plan.cmd]


def stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to every agent's process group that still runs, SIGKILL after STOP_GRACE_S."""
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def launch(plan: Plan, agent_env: dict[str, str], sink) -> list[int]:
    """Starts one agent per node, their output to `sink`, and returns their exit codes. An agent that
    fails stops the others (a node lost mid-job would leave the rest waiting in a collective)."""
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, use_libuv=True)  # 0: a free port
    procs = [subprocess.Popen(agent_argv(plan, store.port), env=agent_env, stdout=sink, start_new_session=True)
             for _ in range(plan.nodes)]

    def forward(signum, _frame) -> None:
        stop(procs)
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while any(p.poll() is None for p in procs):
            if any(p.poll() not in (None, 0) for p in procs):
                stop(procs)
                break
            time.sleep(0.2)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    del store  # only now: every agent has left its exit barrier
    return [p.returncode for p in procs]


def rank_exec(cmd: list[str]) -> None:
    """Inside torchrun, one per rank: the rank's node name (as slurmd sets it, so that TRANSIT's
    stats name the node), its own NCCL host id and its GPU, then the script."""
    cmd = cmd[1:] if cmd[:1] == ["--"] else cmd
    node_rank, local_rank, rank = (int(os.environ[v]) for v in ("GROUP_RANK", "LOCAL_RANK", "RANK"))
    os.environ["SLURMD_NODENAME"] = node_name(node_rank)
    os.environ["NCCL_HOSTID"] = hostid(node_rank, local_rank)
    gpus = [int(g) for g in os.environ.get(GPUS_ENV, "").split(",") if g]
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu_of(rank, gpus))
    os.execvp(sys.executable, [sys.executable, *cmd])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--rank-exec"]:
        rank_exec(argv[1:])
    split = argv.index("--") if "--" in argv else len(argv)
    args = build_parser().parse_args(argv[:split])
    try:
        plan, agent_env = make_plan(args, argv[split + 1:], dict(os.environ), free_gpu_memory())
    except UsageError as exc:
        print(f"emulate-nodes: {exc}", file=sys.stderr)
        return 2
    where = ", ".join(f"{s.node}/rank {s.rank}" + (f" on GPU {s.gpu}" if s.gpu is not None else " on the CPU")
                      for s in plan.slots)
    mode = f"TRANSIT {plan.policy}" + (f", L = {plan.limit_bytes / GIB:.2f} GiB per rank" if plan.limit_bytes else "") \
        if plan.policy else "native"
    print(f"emulate-nodes: {plan.nodes} node(s) x {plan.per_node} rank(s), {mode}: {where}", file=sys.stderr)
    if args.dry_run:
        if args.json:
            print(json.dumps(plan.as_dict(), indent=1))
        return 0
    t0 = time.time()
    sys.stdout.flush()
    codes = launch(plan, agent_env, sys.stderr if args.json else sys.stdout)
    rc = next((c for c in codes if c != 0), 0)
    if args.json:
        print(json.dumps(plan.as_dict() | {"exit_codes": codes, "elapsed_s": round(time.time() - t0, 1)}, indent=1))
    if rc:
        print(f"emulate-nodes: {sum(1 for c in codes if c)} of {len(codes)} node agents failed (exit codes "
              f"{codes}); the others were stopped", file=sys.stderr)
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main())
