"""TRANSIT's benchmark suite: run the protocol's experiments on one GPU node, one summary each.

    python -m bench list                               the experiments
    python -m bench plan NAME                          its runs, their estimated time, the commands
    python -m bench run NAME --out DIR                 run it (or --part K/N of it, or within --time-limit S)
    python -m bench merge NAME PART.json ... --out F   the parts' summaries as one
    python -m bench table [--check|--write FILE]       the results table from bench/results

bench/README.md says what each experiment measures and how the protocol runs it.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

from bench import tables
from bench.common import check_tree_commit
from bench.estimates import estimator, recorded_runs
from bench.experiments import EXPERIMENTS, MACHINES, MODEL, Experiment, resolve, system_config
from bench.model import CONFIGS
from bench.planning import (
    COMMAND_LIMIT_S,
    EXPERIMENT_BUDGET_S,
    RUN_START_MIN_S,
    SETUP_S,
    Run,
    plan,
    schedule,
    split_parts,
)
from bench.protocol import check_gpus, execute
from bench.summary import merge
from transit import paths
from transit.cli import OneLineParser
from transit.emulate import MAX_NODES, positive
from transit.errors import UsageError

LIST_SCHEMA = "transit.bench-list/1"
MAX_CORES = 4096
PLAN_SCHEMA = "transit.bench-plan/1"


def plan_doc(experiment: Experiment, estimate, command_limit_s: float, search: list[Path] | None) -> dict:
    """The experiment's runs in their parts (commands), each run's estimate and its basis."""
    seconds = lambda run: estimate(run)[0]
    parts = split_parts(plan(experiment), seconds, command_limit_s)
    extra = f" --search-summary {' '.join(map(str, search))}" if search else ""
    calibrated = any(run.calibrated for run in plan(experiment))
    out = []
    for k, part in enumerate(parts, 1):
        placements = schedule(part, seconds)
        cut = f" --part {k}/{len(parts)}" if len(parts) > 1 else ""
        limits = " --limit NAME=BYTES ... (printed by part 1)" if k > 1 and calibrated else ""
        if command_limit_s != COMMAND_LIMIT_S:
            cut += f" --command-limit {command_limit_s:g}"
        out.append({"part": k, "seconds": round(SETUP_S + placements[-1].end),
                    "command": f"python3 -m bench run {experiment.name}{cut}{extra} --out DIR{limits}",
                    "runs": [{"id": p.run.id, "start_s": round(p.start), "end_s": round(p.end),
                              "basis": estimate(p.run)[1]} for p in placements]})
    total = sum(part["seconds"] for part in out)
    return {"schema": PLAN_SCHEMA, "experiment": experiment.name, "claim": experiment.claim,
            "device_kind": experiment.machine, "repeats": experiment.repeats,
            "systems": [{"name": s.name, **system_config(s), "seconds_a_run": round(estimate(Run(s, 1))[0]),
                         "basis": estimate(Run(s, 1))[1]} for s in experiment.systems],
            "setup_s": SETUP_S, "command_limit_s": command_limit_s or None, "parts": out, "estimated_s": total,
            "budget_s": EXPERIMENT_BUDGET_S, "fits": total <= EXPERIMENT_BUDGET_S}


def print_plan(doc: dict, cores: int) -> None:
    print(f"{doc['experiment']}: {doc['claim']}")
    gpus = MACHINES[doc["device_kind"]]
    print(f"{'one GPU' if gpus == 1 else f'{gpus} GPUs'} (device kind {doc['device_kind']}); {doc['repeats']} "
          f"repeat(s); {cores} cores; the runs one after another, in this order")
    for s in doc["systems"]:
        where = (f"{s['emulated_nodes']} emulated node(s) on {s['gpus']} GPU(s), sockets on lo" if s["emulated_nodes"]
                 else "one rank" if s["ranks"] == 1 else f"{s['ranks']} ranks on {s['gpus']} GPUs")
        print(f"  {s['name']}: {s['kind']}{' ' + s['policy'] if s['policy'] else ''}, global batch "
              f"{s['global_batch']} = micro-batch {s['micro_batch']} x {s['grad_accum']} x "
              f"{s['ranks'] // s['tp']}, cap {s['cap'] or 'none'}, cores/rank {s['cpu_cores_per_rank']}, {where}; "
              f"{s['seconds_a_run']} s a run: {s['basis']}")
    for part in doc["parts"]:
        print(f"part {part['part']}/{len(doc['parts'])}: {part['seconds']} s (setup {doc['setup_s']} s)")
        for run in part["runs"]:
            print(f"  {run['start_s']:6d}-{run['end_s']:4d} s  {run['id']}")
        print(f"  command: {part['command']}")
    limit = f" of at most {doc['command_limit_s'] / 60:g} min" if doc["command_limit_s"] else ""
    verdict = "fits" if doc["fits"] else "does NOT fit"
    print(f"estimated device time: {doc['estimated_s']} s ({doc['estimated_s'] / 60:.1f} min) in "
          f"{len(doc['parts'])} command(s){limit}, every part at one commit; {verdict} {doc['budget_s'] // 60} minutes")


def parse_part(text: str, n_parts: int) -> tuple[int, int]:
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and int(n) == n_parts and 1 <= int(k) <= n_parts):
        raise UsageError(f"--part {text[:40]!r}: this plan has {n_parts} part(s) (K/{n_parts}, K from 1)")
    return int(k), int(n)


def parse_assignments(values: list[str], what: str, conv) -> dict:
    out = {}
    for value in values:
        name, sep, number = value.partition("=")
        try:
            out[name] = conv(number)
        except ValueError:
            sep = ""
        if not sep:
            raise UsageError(f"{what} {value[:80]!r}: give NAME=VALUE, VALUE a {conv.__name__}")
    return out


def seconds(least: float) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds from `least`."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not least <= value < math.inf:
            raise argparse.ArgumentTypeError(f"{text[:40]!r}: give a number of seconds from {least:g}")
        return value
    return parse


def experiment_name(text: str) -> str:
    """An experiment's name; a wrong one is told the closest names, not all fifty."""
    if text in EXPERIMENTS:
        return text
    close = difflib.get_close_matches(text, EXPERIMENTS, n=3, cutoff=0.6)
    hint = f"closest: {', '.join(close)}; " if close else ""
    raise argparse.ArgumentTypeError(f"no experiment {text[:60]!r} ({hint}`python -m bench list` names them all)")


def output_dir(text: str) -> Path:
    """A directory this user can write (or create): checked before any run starts."""
    return Path(paths.output_dir(text))


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m bench", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="the experiments")
    listing.add_argument("--json", action="store_true", help=f"as JSON ({LIST_SCHEMA})")

    def experiment_args(q: argparse.ArgumentParser) -> None:
        q.add_argument("experiment", type=experiment_name, metavar="EXPERIMENT",
                       help="one of `python -m bench list`")
        q.add_argument("--search-summary", type=paths.text_path, nargs="+", metavar="SEARCH_JSON",
                       help="claim-b-*: each system's best micro-batch from these claim-b-search-* summaries")
        q.add_argument("--model", default=MODEL, choices=CONFIGS, help=f"model config (default {MODEL}; tiny: the driver on a CPU)")
        q.add_argument("--nodes", type=positive("--nodes", MAX_NODES), metavar="N",
                       help="every system as a job of N emulated nodes sharing this machine's GPU "
                            "(scripts/emulate-nodes: one rank a node, NCCL over sockets on lo)")
        q.add_argument("--command-limit", type=seconds(0), default=COMMAND_LIMIT_S, metavar="S",
                       help=f"seconds one command may run: the plan is cut into parts that fit (default "
                            f"{COMMAND_LIMIT_S}, the project's device machines'; 0: one command)")

    planning = sub.add_parser("plan", help="the runs, their estimated device time and commands; runs nothing")
    experiment_args(planning)
    planning.add_argument("--cores", type=positive("--cores", MAX_CORES), default=os.cpu_count(),
                          help="CPU cores (default: this machine's)")
    planning.add_argument("--json", action="store_true", help=f"as JSON ({PLAN_SCHEMA})")
    running = sub.add_parser("run", help="run the experiment (on a GPU node), write its summary")
    experiment_args(running)
    running.add_argument("--out", type=output_dir, required=True, help="directory for the summary and the raw archive")
    how = running.add_mutually_exclusive_group()
    how.add_argument("--part", metavar="K/N", help="part K of the plan's N (default: every run)")
    how.add_argument("--time-limit", type=seconds(RUN_START_MIN_S), metavar="S",
                     help="every run in one command of S seconds: runs start while a minute is left and are "
                          "stopped at the limit")
    running.add_argument("--work", type=output_dir, default="/tmp/bench-work", help="the runs' directories")
    running.add_argument("--limit", action="append", default=[], metavar="NAME=BYTES",
                         help="a capped TRANSIT system's calibrated L (printed by the part that calibrated it)")
    running.add_argument("--transit-profile", action="store_true", help="TRANSIT_PROFILE=1 for the TRANSIT runs")
    merging = sub.add_parser("merge", help="join the parts' summaries into one")
    merging.add_argument("experiment", type=experiment_name, metavar="EXPERIMENT")
    merging.add_argument("parts", type=paths.text_path, nargs="+", metavar="PART_JSON")
    merging.add_argument("--out", type=lambda text: Path(paths.output_file(text)), required=True,
                         help="the summary file")
    merging.add_argument("--command-limit", type=seconds(0), default=COMMAND_LIMIT_S, metavar="S",
                         help="the limit the parts were cut by")
    sub.add_parser("table", help="the results table from bench/results (`python -m bench table --help`)",
                   add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    """Bad input found past argparse (a size read where a plan is built; libtransit, whose size
    grammar the caps use, not built yet) is one line too, and so is what the system refused later."""
    try:
        code = dispatch(sys.argv[1:] if argv is None else argv)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return code
    except (UsageError, argparse.ArgumentTypeError) as exc:
        print(f"python -m bench: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`python -m bench list | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"python -m bench: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1


def dispatch(argv: list[str]) -> int:
    if argv[:1] == ["table"]:
        return tables.main(argv[1:])
    args = parser().parse_args(argv)
    if args.command == "list":
        if args.json:
            print(json.dumps({"schema": LIST_SCHEMA, "experiments": [
                {"name": e.name, "device_kind": e.machine, "systems": [s.name for s in e.systems],
                 "repeats": e.repeats, "search": e.search, "correctness": e.correctness, "claim": e.claim}
                for e in EXPERIMENTS.values()]}, indent=1))
        for e in [] if args.json else EXPERIMENTS.values():
            print(f"{e.name:38s} {e.machine:15s} {len(e.systems):2d} systems x {e.repeats}: {e.claim}")
        return 0
    experiment = EXPERIMENTS[args.experiment]
    estimate = estimator(recorded_runs())
    seconds = lambda run: estimate(run)[0]
    if args.command == "merge":
        n_parts = len(split_parts(plan(experiment), seconds, args.command_limit))
        return merge(experiment, args.parts, n_parts, args.out)
    try:
        experiment = resolve(args)
    except ValueError as exc:  # a system the options make impossible (e.g. --nodes that splits no batch)
        print(f"python -m bench {args.command}: {exc}", file=sys.stderr)
        return 2
    if args.command == "plan":
        doc = plan_doc(experiment, estimate, args.command_limit, args.search_summary)
        print(json.dumps(doc, indent=1)) if args.json else print_plan(doc, args.cores)
        return 0
    check_gpus(experiment)
    runs = plan(experiment)
    parts = split_parts(runs, seconds, args.command_limit)
    k, n = parse_part(args.part, len(parts)) if args.part else (0, 0)
    limits = parse_assignments(args.limit, "--limit", int)
    check_tree_commit()
    return execute(experiment, parts[k - 1] if k else runs, k, n, args, limits, seconds)


if __name__ == "__main__":
    sys.exit(main())
