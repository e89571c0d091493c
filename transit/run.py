"""`transit run` and `transit lib-path`: run a command with libtransit preloaded."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

from transit import _native, envcheck, paths
from transit.errors import UsageError

DEFAULT_OUT = "transit-out"
OFF = "off"  # as --transit=off: the command runs without TRANSIT
PRINT_ENV_SCHEMA = "transit.run-env/1"
LIB_PATH_SCHEMA = "transit.lib-path/1"


def register(subparsers: argparse._SubParsersAction) -> None:
    run = subparsers.add_parser(
        "run",
        help="run a command with TRANSIT preloaded",
        description="Run CMD with libtransit preloaded and the same TRANSIT_* environment the Slurm "
        "plugin sets (srun --transit=...). An option wins over the TRANSIT_* variable it sets; "
        "every TRANSIT_* variable is checked before CMD starts.",
    )
    run.add_argument("--policy", help=f"one of {', '.join(_native.policies())}, or {OFF} (CMD runs without "
                     "TRANSIT, as srun --transit=off); default: $TRANSIT_POLICY, else base")
    run.add_argument("--mem-limit", metavar="SIZE",
                     help="emulated device capacity from 256M to 16T, e.g. 40G (limit mode; default: "
                     "$TRANSIT_MEM_LIMIT, else physical mode)")
    run.add_argument("--out", metavar="DIR",
                     help="directory for the per-process stats files (default: $TRANSIT_OUT, else "
                     f"./{DEFAULT_OUT})")
    run.add_argument("--print-env", action="store_true",
                     help="print the variables CMD would get (NAME=value lines) and run nothing; CMD may be left out")
    run.add_argument("--json", action="store_true", help=f"with --print-env: print them as JSON ({PRINT_ENV_SCHEMA})")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...")
    run.set_defaults(func=main_run)

    lib_path = subparsers.add_parser("lib-path", help="print the absolute path of libtransit.so")
    lib_path.add_argument("--json", action="store_true", help="print JSON")
    lib_path.set_defaults(func=main_lib_path)


def build_env(policy: str | None, mem_limit: str | None, out: str, base: dict[str, str]) -> dict[str, str]:
    """The full environment for CMD: `base` plus what transit_task_env() returns."""
    env = dict(base)
    env.update(_native.task_env(policy, mem_limit, os.path.abspath(out),
                                base.get("LD_PRELOAD"), base.get("PYTHONPATH")))
    return env


def main_run(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd and not args.print_env:
        raise UsageError("no command given; use: transit run [options] -- CMD ARGS...")
    if args.json and not args.print_env:
        raise UsageError("--json prints what --print-env shows; give --print-env too")
    base = dict(os.environ)
    policy, policy_note = envcheck.pick(args.policy, "--policy", base, "TRANSIT_POLICY")
    mem_limit, limit_note = envcheck.pick(args.mem_limit, "--mem-limit", base, "TRANSIT_MEM_LIMIT")
    out, out_note = envcheck.pick(args.out, "--out", base, "TRANSIT_OUT")
    if policy == OFF:
        env = _off(args, base)
        notes: tuple[str | None, ...] = ()
    else:
        env = _transit_env(args, base, policy, mem_limit, out)
        if args.mem_limit is None and mem_limit is not None:
            limit_note = (f"note: TRANSIT_MEM_LIMIT='{_native.show(mem_limit)}' from the environment turns "
                          "limit mode on, as --mem-limit would")
        notes = (policy_note, limit_note, out_note)
    if args.print_env:
        return _print_env(env, base, args.json)
    if shutil.which(cmd[0], path=env.get("PATH")) is None:
        # a path names the file itself: one that is there can only lack the permission to run
        there = os.sep in cmd[0] and os.path.exists(cmd[0])
        raise UsageError(f"command '{_native.show(cmd[0])}' " + ("is not an executable file" if there else "not found"))
    for note in notes:
        if note:
            print(f"transit run: {note}", file=sys.stderr)
    sys.stdout.flush()
    os.execvpe(cmd[0], cmd, env)
    return 127  # not reached


def _off(args: argparse.Namespace, base: dict[str, str]) -> dict[str, str]:
    """--policy off (or TRANSIT_POLICY=off): CMD runs as it would without transit, as under
    srun --transit=off; an option that would act on TRANSIT is refused, as there."""
    given = "--policy off" if args.policy is not None else "TRANSIT_POLICY=off from the environment"
    for option, value in (("--mem-limit", args.mem_limit), ("--out", args.out)):
        if value is not None:
            raise UsageError(f"{given} runs no TRANSIT, so {option} has nothing to act on; drop one of them")
    return {name: value for name, value in base.items() if name != "TRANSIT_POLICY"}


def _print_env(env: dict[str, str], base: dict[str, str], as_json: bool) -> int:
    """The variables transit run sets or changes for CMD."""
    changed = {name: value for name, value in sorted(env.items()) if base.get(name) != value}
    removed = sorted(set(base) - set(env))
    if as_json:
        print(json.dumps({"schema": PRINT_ENV_SCHEMA, "set": changed, "unset": removed}))
        return 0
    for name, value in changed.items():
        print(f"{name}={value}")
    for name in removed:
        print(f"unset {name}")
    return 0


def _transit_env(args: argparse.Namespace, base: dict[str, str], policy: str | None, mem_limit: str | None,
                 out: str | None) -> dict[str, str]:
    """CMD's environment under TRANSIT, every value checked; UsageError names the first bad one."""
    if args.policy is not None:
        _native.check_value("TRANSIT_POLICY", "--policy", args.policy)
    if args.mem_limit is not None:
        _native.check_value("TRANSIT_MEM_LIMIT", "--mem-limit", args.mem_limit)
    shown = "--out" if args.out is not None else "TRANSIT_OUT" if out is not None else "the default --out"
    out = DEFAULT_OUT if out is None else out
    check_out_name(shown, out)
    env = build_env(policy, mem_limit, out, base)
    envcheck.check(env)  # the user's TRANSIT_* values, then whether the stats can be written (as srun)
    check_out_writable(shown, out)
    return env


def check_out_name(shown: str, out: str) -> None:
    """A stats directory name libtransit accepts; UsageError names it as `shown`."""
    # as typed, only made absolute: the message shows what the user gave
    _native.check_dir(shown, os.path.join(os.getcwd(), out) if out else out)


def check_out(shown: str, out: str) -> None:
    """A stats directory libtransit accepts and this user can write; UsageError names it as `shown`.
    The stats files are written at the command's end: an unwritable place is refused before it starts."""
    check_out_name(shown, out)
    check_out_writable(shown, out)


def check_out_writable(shown: str, out: str) -> None:
    try:
        paths.output_dir(out)
    except paths.PathError as exc:
        raise UsageError(f"{shown} {exc}") from None


def main_lib_path(args: argparse.Namespace) -> int:
    path = str(_native.lib_path())
    if args.json:
        print(json.dumps({"schema": LIB_PATH_SCHEMA, "lib_path": path, "hook_dir": str(_native.HOOK_DIR), "version": _native.version()}))
    else:
        print(path)
    return 0
