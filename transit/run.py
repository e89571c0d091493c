"""`transit run` and `transit lib-path`: run a command with libtransit preloaded."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

from transit import _native
from transit.errors import UsageError

POLICIES = ("base", "prefetch", "advise")
DEFAULT_OUT = "transit-out"


def register(subparsers: argparse._SubParsersAction) -> None:
    run = subparsers.add_parser(
        "run",
        help="run a command with TRANSIT preloaded",
        description="Run CMD with libtransit preloaded and the same TRANSIT_* environment the Slurm "
        "plugin sets (srun --transit=...).",
    )
    run.add_argument("--policy", default="base", help="base | prefetch | advise (default: base)")
    run.add_argument("--mem-limit", metavar="SIZE", help="emulated device capacity, e.g. 40G (limit mode)")
    run.add_argument("--out", metavar="DIR", default=DEFAULT_OUT,
                     help=f"directory for the per-process stats files (default: ./{DEFAULT_OUT})")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...")
    run.set_defaults(func=main_run)

    lib_path = subparsers.add_parser("lib-path", help="print the absolute path of libtransit.so")
    lib_path.add_argument("--json", action="store_true", help="print JSON")
    lib_path.set_defaults(func=main_lib_path)


def build_env(policy: str, mem_limit: str | None, out: str, base: dict[str, str]) -> dict[str, str]:
    """The full environment for CMD: `base` plus what transit_task_env() returns."""
    env = dict(base)
    env.update(_native.task_env(policy, mem_limit, os.path.abspath(out),
                                base.get("LD_PRELOAD"), base.get("PYTHONPATH")))
    return env


def main_run(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise UsageError("no command given; use: transit run [options] -- CMD ARGS...")
    env = build_env(args.policy, args.mem_limit, args.out, dict(os.environ))
    if shutil.which(cmd[0], path=env.get("PATH")) is None:
        raise UsageError(f"command '{cmd[0]}' not found")
    sys.stdout.flush()
    os.execvpe(cmd[0], cmd, env)
    return 127  # not reached


def main_lib_path(args: argparse.Namespace) -> int:
    path = str(_native.lib_path())
    if args.json:
        print(json.dumps({"lib_path": path, "hook_dir": str(_native.HOOK_DIR), "version": _native.version()}))
    else:
        print(path)
    return 0
