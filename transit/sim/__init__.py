"""`transit simulate`: what scale-in with TRANSIT would do to a cluster's rack traffic and queues.

A discrete-event simulator of a multi-rack cluster (the paper's section 4.3). It replays a job
trace twice, as is and with TRANSIT's node-count reduction on multi-node jobs, and compares.
Input: the cluster's own Slurm history (``sacct -P`` or ``sacct --json``), the ACME or Helios
traces, the project's ``transit.trace/1`` JSON, or, with no ``--trace``, a synthetic Seren-like
(or Kalos-like) trace calibrated on the published ACME CDFs.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from rich.console import Console

from transit.errors import UsageError
from transit.sim import output, synthetic
from transit.sim.jobs import TraceLoad
from transit.sim.placement import PLACEMENTS, RACK_GPUS
from transit.sim.project_json import write as write_trace
from transit.sim.scenario import Factors, Trace, prepare, read_factors
from transit.sim.study import Setup, study
from transit.sim.traces import FORMATS, read_trace

GPUS_PER_NODE_CHOICES = (4, 8)
DEFAULT_RACKS = 72  # for a user trace: the paper's Seren-sized cluster


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _reduction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be in [0, 1): the fraction of nodes removed")
    return value


def _list(kind):
    def parse(text: str) -> list:
        return [kind(item) for item in text.split(",") if item]
    return parse


def _add_input_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_argument_group("input")
    source.add_argument("--trace", metavar="FILE", help="job trace; without it, a synthetic trace")
    source.add_argument("--format", choices=FORMATS, help="trace format (detected when omitted)")
    source.add_argument("--workload", choices=sorted(synthetic.WORKLOADS), default="seren",
                        help="synthetic workload when there is no --trace (default seren)")
    source.add_argument("--jobs", type=_positive_int, metavar="N",
                        help="synthetic job count (default: the public trace's GPU-job count)")
    source.add_argument("--seed", type=int, default=1, help="synthetic trace seed (default 1)")
    model = parser.add_argument_group("model")
    model.add_argument("--baseline-racks", type=_positive_int, metavar="N",
                       help="replay the baseline on N racks instead (e.g. the full-size cluster)")
    model.add_argument("--backfill", action="store_true", help="EASY backfill instead of strict FIFO")
    model.add_argument("--factors", metavar="FILE", help="transit.factors/1 JSON from the GPU benchmark")
    model.add_argument("--speedup", type=float, metavar="X", help="inter->intra-rack throughput gain (0.5 = +50%%)")
    model.add_argument("--slowdown", type=float, metavar="Y", help="intra->inter-rack throughput loss (0.3 = -30%%)")
    model.add_argument("--unchanged", type=float, metavar="Z", help="throughput change when the kind stays")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "simulate", help="simulate TRANSIT on a cluster trace (rack traffic, queue times)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_input_arguments(parser)
    parser.add_argument("--racks", type=_positive_int, metavar="N",
                        help=f"racks of {RACK_GPUS} GPUs (default: 72 Seren, 76 Kalos, {DEFAULT_RACKS} for a trace)")
    parser.add_argument("--gpus-per-node", type=int, choices=GPUS_PER_NODE_CHOICES, default=8)
    parser.add_argument("--reduction", type=_reduction, default=0.5, metavar="R",
                        help="fraction of nodes an eligible job gives up (default 0.5)")
    parser.add_argument("--placement", choices=PLACEMENTS, default="pack")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--plot", metavar="PNG", help="write a Figure-12-style bar chart")
    parser.add_argument("--save-trace", metavar="FILE", help="write the (synthetic) input as transit.trace/1 JSON")
    parser.set_defaults(func=main)

    actions = parser.add_subparsers(dest="action", metavar="[sweep]", required=False,
                                    title="actions (without one: a single study)")
    sweep = actions.add_parser("sweep", help="one study per combination of settings, in parallel processes",
                               description="Run one study per combination of the listed settings.")
    _add_input_arguments(sweep)
    sweep.add_argument("--racks", dest="racks_list", type=_list(_positive_int), metavar="N,N",
                       help="rack counts (default: the workload's full size)")
    sweep.add_argument("--gpus-per-node", dest="gpn_list", type=_list(int), default=[4, 8], metavar="4,8")
    sweep.add_argument("--reductions", type=_list(_reduction), default=[0.25, 0.5], metavar="R,R")
    sweep.add_argument("--placements", type=_list(str), default=["pack"], metavar="pack,spread")
    sweep.add_argument("--speedups", type=_list(float), metavar="X,X",
                       help="inter->intra-rack throughput gains to try (default: the one factor)")
    sweep.add_argument("--slowdowns", type=_list(float), metavar="Y,Y",
                       help="intra->inter-rack throughput losses to try (default: the one factor)")
    sweep.add_argument("--processes", type=_positive_int, metavar="N", help="worker processes (default: CPUs)")
    sweep.add_argument("--json", action="store_true", help="print the results as JSON")
    sweep.add_argument("--plot", metavar="PNG", help="write a Figure-12-style bar chart of every study")
    sweep.add_argument("--markdown", metavar="FILE", help="write the results table as Markdown")
    sweep.set_defaults(func=sweep_main)


def _factors(args: argparse.Namespace) -> Factors:
    factors = read_factors(args.factors) if args.factors else Factors()
    overrides = {name: value for name, value in (("inter_to_intra_speedup", args.speedup),
                                                  ("intra_to_inter_slowdown", args.slowdown),
                                                  ("unchanged", args.unchanged)) if value is not None}
    if overrides:
        factors = Factors(**{**factors.__dict__, **overrides,
                             "source": f"{factors.source}, overridden on the command line"})
    factors.check()
    return factors


def _load(args: argparse.Namespace) -> tuple[TraceLoad, dict]:
    """The trace's jobs, and extra facts for the output (calibration of a synthetic trace)."""
    if args.trace:
        if args.jobs is not None:
            raise UsageError("--jobs sizes a synthetic trace; it cannot be used with --trace")
        load = read_trace(args.trace, args.format)
        if not load.jobs:
            raise UsageError(f"{args.trace}: no meaningful GPU jobs in {load.rows} rows")
        return load, {}
    if args.format:
        raise UsageError("--format needs --trace")
    jobs = synthetic.generate(args.workload, args.jobs, args.seed)
    load = TraceLoad(source=f"synthetic {args.workload}-like, seed {args.seed}", fmt="synthetic",
                     jobs=jobs, rows=len(jobs))
    return load, {"calibration_max_gap_pp": synthetic.calibration_report(jobs, args.workload)}


def _default_racks(args: argparse.Namespace) -> int:
    return DEFAULT_RACKS if args.trace else synthetic.WORKLOADS[args.workload].racks


def _prepare(load: TraceLoad, racks: list[int]) -> Trace:
    return prepare(load.jobs, min(racks) * RACK_GPUS)


def _check_placements(placements: list[str]) -> None:
    for name in placements:
        if name not in PLACEMENTS:
            raise UsageError(f"--placements {name!r}: expected {' or '.join(PLACEMENTS)}")


def main(args: argparse.Namespace) -> int:
    factors = _factors(args)
    racks = args.racks or _default_racks(args)
    load, extra = _load(args)
    if args.save_trace:
        write_trace(args.save_trace, load.jobs, load.source)
    trace = _prepare(load, [racks, args.baseline_racks or racks])
    setup = Setup(racks, args.gpus_per_node, args.reduction, args.placement, args.backfill, factors,
                  args.baseline_racks)
    console = Console(stderr=True)
    with console.status(f"replaying {len(trace.submit):,} jobs twice"):
        document = {"schema": "transit.sim/1", "command": _command(), "trace": load.summary(), **extra,
                    **study(trace, setup)}
    if args.plot:
        output.plot_studies([document], args.plot, f"TRANSIT vs baseline: {load.source}")
    if args.json:
        output.print_json(document)
    else:
        output.print_study(document, Console())
    return 0


def sweep_main(args: argparse.Namespace) -> int:
    from transit.sim import sweep

    factors = _factors(args)
    _check_placements(args.placements)
    for per_node in args.gpn_list:
        if per_node not in GPUS_PER_NODE_CHOICES:
            raise UsageError(f"--gpus-per-node {per_node}: expected 4 or 8")
    if args.speedups and any(value <= -1 for value in args.speedups):
        raise UsageError("--speedups values must be above -1")
    if args.slowdowns and any(not 0 <= value < 1 for value in args.slowdowns):
        raise UsageError("--slowdowns values must be in [0, 1)")
    racks = args.racks_list or [_default_racks(args)]
    load, extra = _load(args)
    trace = _prepare(load, racks + ([args.baseline_racks] if args.baseline_racks else []))
    base = Setup(racks[0], 8, 0.5, "pack", args.backfill, factors, args.baseline_racks)
    points = sweep.setups(racks, args.gpn_list, args.reductions, args.placements, args.speedups,
                          args.slowdowns, base)
    studies = sweep.run(trace, points, args.processes, quiet=args.json and not sys.stderr.isatty())
    document = {"schema": "transit.sim-sweep/1", "command": _command(), "trace": load.summary(), **extra,
                "studies": studies}
    if args.plot:
        output.plot_studies(studies, args.plot, f"TRANSIT vs baseline: {load.source}")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as handle:
            handle.write(output.markdown_table(studies))
    if args.json:
        output.print_json(document)
    else:
        for line in output.trace_lines(document["trace"]):
            Console().print(line)
        output.print_sweep(studies, Console())
    return 0


def _command() -> str:
    return "transit " + " ".join(shlex.quote(arg) for arg in sys.argv[1:]) if sys.argv else "transit"


