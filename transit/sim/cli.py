"""`transit simulate` and `transit simulate sweep`: the arguments, the trace they name, one study
or a sweep of them, and the table, JSON, plot and audit files; the model is in the modules __init__.py lists."""

from __future__ import annotations

import argparse
import itertools
import math
import shlex
import sys
from collections.abc import Callable
from dataclasses import replace

from rich.console import Console

from transit import paths
from transit.errors import UsageError
from transit.sim import audit, output, sweep, synthetic
from transit.sim.jobs import TraceLoad
from transit.sim.network import Network
from transit.sim.placement import PLACEMENTS, RACK_GPUS
from transit.sim.project_json import write as write_trace
from transit.sim.scenario import (
    PAPER_EFFICIENCY_CURVE,
    SLOWDOWN_READINGS,
    Efficiency,
    Factors,
    Setup,
    Trace,
    prepare,
    read_factors,
    shape,
)
from transit.sim.study import check_not_all_dropped, study
from transit.sim.traces import FORMATS, read_trace

GPUS_PER_NODE_CHOICES = (4, 8)
DEFAULT_RACKS = 72  # for a user trace: the paper's Seren-sized cluster
SCHEMA = "transit.sim/3"
SWEEP_SCHEMA = "transit.sim-sweep/3"


# Upper bounds that keep a mistyped count from exhausting memory: twice Seren's 450,590 GPU jobs,
# 320,000 GPUs of racks, and `transit plan`'s node limit.
MAX_JOBS = 1_000_000
MAX_RACKS = 10_000
MAX_NODES = 100_000


def _whole(least: int, most: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number from `least` (to `most`, when given)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:80]!r} is not a whole number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{value} must be at least {least}")
        if most is not None and value > most:
            raise argparse.ArgumentTypeError(f"{value} must be at most {most}")
        return value
    return parse


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:80]!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text[:80]!r} is not a finite number")
    return value


def _reduction(text: str) -> float:
    value = _number(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be in [0, 1): the fraction of nodes removed")
    return value


def _curve(text: str) -> tuple[tuple[float, float], ...]:
    """``paper`` or ``R:E,R:E,...`` (fraction of nodes removed : per-GPU efficiency)."""
    if text == "paper":
        return PAPER_EFFICIENCY_CURVE
    try:
        points = tuple(sorted((float(r), float(e)) for r, e in (item.split(":") for item in text.split(","))))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:80]!r}: expected 'paper' or R:E pairs such as 0.25:1,0.5:0.9") from None
    return points


def _list(kind):
    def parse(text: str) -> list:
        items = [kind(item) for item in text.split(",") if item]
        if not items:  # an empty list would make a sweep of no study
            raise argparse.ArgumentTypeError(f"{text[:80]!r} has no value; give one or more, comma-separated")
        return items
    return parse


def _add_input_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_argument_group("input")
    source.add_argument("--trace", metavar="FILE", type=paths.text_file, help="job trace; without it, a synthetic trace")
    source.add_argument("--format", choices=FORMATS, help="trace format (detected when omitted)")
    source.add_argument("--dedupe", action="store_true",
                        help="keep the latest record of a job id that appears more than once (overlapping "
                             "exports) instead of refusing the trace")
    source.add_argument("--cluster", metavar="NAME",
                        help="replay only this cluster's jobs (sacct Cluster; ACME/Helios: the file's name)")
    source.add_argument("--workload", choices=sorted(synthetic.WORKLOADS), default="seren",
                        help="synthetic workload when there is no --trace (default seren)")
    source.add_argument("--jobs", type=_whole(1, MAX_JOBS), metavar="N",
                        help=f"synthetic job count, at most {MAX_JOBS:,} (default: the public trace's GPU-job count)")
    source.add_argument("--seed", type=_whole(0), default=1, help="synthetic trace seed, 0 or more (default 1)")
    model = parser.add_argument_group("model (docs/simulator.md gives each default's source)")
    model.add_argument("--baseline-racks", type=_whole(1, MAX_RACKS), metavar="N",
                       help="replay the baseline on N racks instead (e.g. the full-size cluster)")
    model.add_argument("--backfill", action="store_true", help="EASY backfill instead of strict FIFO")
    model.add_argument("--backfill-interval", type=_number, default=0.0, metavar="S",
                       help="run backfill passes only every S seconds, as Slurm's bf_interval (its default is "
                            "30); default 0: at every event")
    model.add_argument("--efficiency", type=_number, metavar="E",
                       help="per-GPU efficiency of a reduced job (default: measured, 0.898)")
    model.add_argument("--efficiency-curve", type=_curve, metavar="CURVE",
                       help="efficiency by the share of nodes removed: 'paper' or R:E,R:E,...")
    model.add_argument("--factors", metavar="FILE", type=paths.text_file, help="transit.factors/1 or /2 JSON (bench/factors.py)")
    model.add_argument("--speedup", type=_number, metavar="X", help="several racks -> one: throughput gain (0.5 = +50%%)")
    model.add_argument("--slowdown", type=_number, metavar="Y", help="one rack -> several: throughput loss (0.55)")
    model.add_argument("--slowdown-reading", choices=SLOWDOWN_READINGS,
                       help="read the slowdown as a throughput loss (run time / (1 - Y), default) or a run-time "
                            "increase (x (1 + Y))")
    model.add_argument("--unchanged", type=_number, metavar="Z", help="throughput change when the kind stays (0)")
    model.add_argument("--nic-gbps", type=_number, metavar="G", help="NIC bandwidth per GPU (400)")
    model.add_argument("--oversubscription", type=_number, metavar="O", help="rack uplink oversubscription (4)")
    model.add_argument("--comm-fraction", type=_number, metavar="F",
                       help="share of a multi-node step spent in collectives at line rate (0.2)")
    model.add_argument("--no-contention", action="store_true", help="count the bytes but never slow jobs down")
    model.add_argument("--unholdable-study", action="store_true",
                       help="also replay, under TRANSIT, the jobs the baseline's cluster cannot hold, as a separate "
                            "study of how much they delay the others (by default they are left out of both)")
    audit_group = parser.add_argument_group("audit output")
    audit_group.add_argument("--jobs-out", metavar="FILE", type=paths.output_file, help="one row per job per replay (CSV; .parquet needs pyarrow)")
    audit_group.add_argument("--timeline-out", metavar="FILE", type=paths.output_file, help="one row per simulated minute per replay")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "simulate", help="simulate TRANSIT on a cluster trace (queue times, rack traffic)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_input_arguments(parser)
    parser.add_argument("--racks", type=_whole(1, MAX_RACKS), metavar="N",
                        help=f"racks of {RACK_GPUS} GPUs, at most {MAX_RACKS:,} (default: 72 Seren, 76 Kalos, {DEFAULT_RACKS} for a trace)")
    parser.add_argument("--nodes", type=_whole(1, MAX_NODES), metavar="N",
                        help=f"a cluster of N nodes (at most {MAX_NODES:,}) instead of whole racks (a small cluster; the last rack is "
                        "part-filled)")
    parser.add_argument("--gpus-per-node", type=int, choices=GPUS_PER_NODE_CHOICES, default=8)
    parser.add_argument("--reduction", type=_reduction, default=0.5, metavar="R",
                        help="fraction of nodes an eligible job gives up (default 0.5)")
    parser.add_argument("--placement", choices=PLACEMENTS, default="pack")
    parser.add_argument("--json", action="store_true", help=f"print the result as JSON ({SCHEMA})")
    parser.add_argument("--plot", metavar="PNG", type=paths.output_file, help="write a Figure-12-style bar chart")
    parser.add_argument("--save-trace", metavar="FILE", type=paths.output_file, help="write the (synthetic) input as transit.trace/1 JSON")
    parser.set_defaults(func=main)

    actions = parser.add_subparsers(dest="action", metavar="[sweep]", required=False,
                                    title="actions (without one: a single study)")
    sweep = actions.add_parser("sweep", help="one study per combination of settings, in parallel processes",
                               description="Run one study per combination of the listed settings.")
    _add_input_arguments(sweep)
    sweep.add_argument("--racks", dest="racks_list", type=_list(_whole(1, MAX_RACKS)), metavar="N,N",
                       help="rack counts (default: the workload's full size)")
    sweep.add_argument("--gpus-per-node", dest="gpn_list", type=_list(int), default=[4, 8], metavar="4,8")
    sweep.add_argument("--reductions", type=_list(_reduction), default=[0.25, 0.5], metavar="R,R")
    sweep.add_argument("--placements", type=_list(str), default=["pack"], metavar="pack,spread")
    sweep.add_argument("--speedups", type=_list(_number), metavar="X,X",
                       help="inter->intra-rack throughput gains to try (default: the one factor)")
    sweep.add_argument("--slowdowns", type=_list(_number), metavar="Y,Y",
                       help="intra->inter-rack throughput losses to try (default: the one factor)")
    sweep.add_argument("--processes", type=_whole(1), metavar="N", help="worker processes (default: CPUs)")
    sweep.add_argument("--json", action="store_true", help=f"print the results as JSON ({SWEEP_SCHEMA})")
    sweep.add_argument("--plot", metavar="PNG", type=paths.output_file, help="write a Figure-12-style bar chart of every study")
    sweep.add_argument("--markdown", metavar="FILE", type=paths.output_file, help="write the results table as Markdown")
    sweep.set_defaults(func=sweep_main)


def _model(args: argparse.Namespace) -> tuple[Factors, Efficiency, Network]:
    """The model's parameters from the command line, checked before anything runs."""
    if args.backfill_interval < 0 or (args.backfill_interval and not args.backfill):
        raise UsageError(f"--backfill-interval {args.backfill_interval:g}: expected 0 or more seconds, "
                         "with --backfill")
    factors, efficiency = read_factors(args.factors) if args.factors else (Factors(), Efficiency())
    overrides = {name: value for name, value in (("inter_to_intra_speedup", args.speedup),
                                                  ("intra_to_inter_slowdown", args.slowdown),
                                                  ("slowdown_reading", args.slowdown_reading),
                                                  ("unchanged", args.unchanged)) if value is not None}
    if overrides:
        factors = replace(factors, **overrides, source=f"{factors.source}, overridden on the command line")
    if args.efficiency is not None and args.efficiency_curve is not None:
        raise UsageError("--efficiency and --efficiency-curve: give one of them")
    if args.efficiency is not None:
        efficiency = Efficiency(args.efficiency, (), "set on the command line")
    if args.efficiency_curve is not None:
        source = "the paper's section 4.2" if args.efficiency_curve == PAPER_EFFICIENCY_CURVE else "the command line"
        efficiency = Efficiency(efficiency.value, args.efficiency_curve, f"curve from {source}")
    network = Network()
    network = replace(network, **{name: value for name, value in (("nic_gbps", args.nic_gbps),
                                                                  ("oversubscription", args.oversubscription),
                                                                  ("comm_fraction", args.comm_fraction))
                                  if value is not None}, contention=not args.no_contention)
    for part in (factors, efficiency, network):
        part.check()
    for option in ("jobs_out", "timeline_out"):
        audit.check_path(getattr(args, option), "--" + option.replace("_", "-"))
    return factors, efficiency, network


def _load(args: argparse.Namespace) -> tuple[TraceLoad, dict | None]:
    """The trace's jobs, and the synthetic trace's description (None for a user trace)."""
    if args.trace:
        if args.jobs is not None:
            raise UsageError("--jobs sizes a synthetic trace; it cannot be used with --trace")
        load = read_trace(args.trace, args.format, args.dedupe)
        if args.cluster is not None:
            _keep_cluster(load, args.cluster)
        if not load.jobs:
            raise UsageError(f"{args.trace}: no meaningful GPU jobs in {load.rows} rows")
        return load, None
    for option in ("format", "cluster", "dedupe"):
        if getattr(args, option):
            raise UsageError(f"--{option} needs --trace")
    jobs = synthetic.generate(args.workload, args.jobs, args.seed)
    load = TraceLoad(source=f"synthetic {args.workload}-like, seed {args.seed}", fmt="synthetic",
                     jobs=jobs, rows=len(jobs))
    return load, {"workload": args.workload, "seed": args.seed, "jobs": len(jobs),
                  "calibration_max_gap_pp": synthetic.calibration_report(jobs, args.workload)}


def _keep_cluster(load: TraceLoad, name: str) -> None:
    """Keep one cluster's jobs; the others are filtered rows ("other cluster")."""
    clusters = sorted({job.cluster for job in load.jobs})
    if name not in clusters:
        raise UsageError(f"--cluster {name[:80]!r}: the trace's clusters are {', '.join(map(repr, clusters))}")
    others = [job for job in load.jobs if job.cluster != name]
    load.jobs = [job for job in load.jobs if job.cluster == name]
    if others:
        load.filtered["other cluster"] += len(others)


def _default_racks(args: argparse.Namespace) -> int:
    return DEFAULT_RACKS if args.trace else synthetic.WORKLOADS[args.workload].racks


def _check_placements(placements: list[str]) -> None:
    for name in placements:
        if name not in PLACEMENTS:
            raise UsageError(f"--placements {name[:80]!r}: expected {' or '.join(PLACEMENTS)}")


def write_audit(args: argparse.Namespace, trace: Trace, studies: list[tuple[int, Setup, object, object]]) -> None:
    """``--jobs-out`` and ``--timeline-out`` for each (study number, setup, baseline run, TRANSIT run)."""
    for path, columns, rows in ((args.jobs_out, audit.JOB_COLUMNS, "jobs"),
                                (args.timeline_out, audit.TIMELINE_COLUMNS, "timeline")):
        if not path:
            continue
        parts = []
        for number, setup, base, transit in studies:
            sized = shape(trace, setup)
            for name, run in (("baseline", base), ("transit", transit)):
                if rows == "jobs":
                    parts.append(audit.job_rows(number, name, trace, run, sized))
                else:
                    parts.append(audit.timeline_rows(number, name, trace, run))
        audit.write(path, columns, itertools.chain.from_iterable(parts))


def main(args: argparse.Namespace) -> int:
    factors, efficiency, network = _model(args)
    if args.nodes and args.racks:
        raise UsageError("--racks and --nodes both size the cluster: give one of them")
    racks = -(-args.nodes * args.gpus_per_node // RACK_GPUS) if args.nodes else args.racks or _default_racks(args)
    load, synthetic_info = _load(args)
    if args.save_trace:
        write_trace(args.save_trace, load.jobs, load.source)
    trace = prepare(load.jobs)
    setup = Setup(racks, args.gpus_per_node, args.reduction, args.placement, args.backfill, factors,
                  args.baseline_racks, efficiency, network, args.nodes, args.backfill_interval)
    check_not_all_dropped(trace, setup)
    with output.replay_progress(sys.stderr.isatty()) as progress:
        tasks = {name: progress.add_task(f"{name} replay", total=len(trace)) for name in ("baseline", "transit")}
        result, base, transit = study(trace, setup, progress=lambda name, done, jobs: progress.update(
            tasks[name], completed=done, total=jobs), with_unholdable=args.unholdable_study)
    write_audit(args, trace, [(0, setup, base, transit)])
    document = {"schema": SCHEMA, "command": _command(), "trace": load.summary(), "synthetic": synthetic_info,
                **result}
    if args.plot:
        output.plot_studies([document], args.plot, f"TRANSIT vs baseline: {load.source}")
    if args.json:
        output.print_json(document)
    else:
        output.print_study(document, Console(soft_wrap=True))
    return 0


def sweep_main(args: argparse.Namespace) -> int:
    factors, efficiency, network = _model(args)
    _check_placements(args.placements)
    for per_node in args.gpn_list:
        if per_node not in GPUS_PER_NODE_CHOICES:
            raise UsageError(f"--gpus-per-node {per_node}: expected 4 or 8")
    if args.speedups and any(value <= -1 for value in args.speedups):
        raise UsageError("--speedups values must be above -1")
    racks = args.racks_list or [_default_racks(args)]
    load, synthetic_info = _load(args)
    trace = prepare(load.jobs)
    base = Setup(racks[0], 8, 0.5, "pack", args.backfill, factors, args.baseline_racks, efficiency, network,
                 backfill_interval=args.backfill_interval)
    points = sweep.setups(racks, args.gpn_list, args.reductions, args.placements, args.speedups,
                          args.slowdowns, base)
    for point in points:
        point.factors.check()
        check_not_all_dropped(trace, point)
    keep_runs = bool(args.jobs_out or args.timeline_out)
    results = sweep.run(trace, points, args.processes, quiet=not sys.stderr.isatty(), keep_runs=keep_runs,
                        with_unholdable=args.unholdable_study)
    if keep_runs:
        write_audit(args, trace, [(i, point, base_run, transit_run)
                                  for i, (point, (_, base_run, transit_run)) in enumerate(zip(points, results))])
    studies = [document for document, _, _ in results]
    document = {"schema": SWEEP_SCHEMA, "command": _command(), "trace": load.summary(), "synthetic": synthetic_info,
                "studies": studies}
    if args.plot:
        output.plot_studies(studies, args.plot, f"TRANSIT vs baseline: {load.source}")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as handle:
            handle.write(output.markdown_table(studies))
    if args.json:
        output.print_json(document)
    else:
        console = Console(soft_wrap=True)
        for line in output.trace_lines(document["trace"]):
            console.print(line)
        output.print_sweep(studies, console)
    return 0


def _command() -> str:
    return "transit " + " ".join(shlex.quote(arg) for arg in sys.argv[1:]) if sys.argv else "transit"
