"""`transit report`: the command. Its arguments, which jobs they name, and how one job's report or
the one-line-per-job list is printed, as text or --json; the modules it calls are listed in __init__.py."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import track

from transit import paths, slurm
from transit.errors import UsageError
from transit.report.aggregate import Report, build_report
from transit.report.as_json import report_json
from transit.report.jobs import DEFAULT_SINCE, JOB_ID_FORMS, Job, jobs_named, jobs_of_user
from transit.report.load import SlurmJobs, StatsFiles, StepFiles, SubmitLines, job_id_of
from transit.report.notes import notes
from transit.report.plots import write_plots
from transit.report.predict import predictions
from transit.report.render import DEFAULT_TOP, SORT_METRICS, View, render
from transit.report.summary import LIST_SCHEMA, render_list, summary

PIPE_WIDTH = 132
# Exit codes: a report shown; a job found, but no usable stats (the report says why). Bad input is
# a UsageError, which the CLI turns into one line and exit code 2.
EXIT_SHOWN, EXIT_NO_STATS = 0, 1


def load_report(job: Job, use_slurm: bool = True, now_unix: float | None = None) -> Report:
    """Read a job's stats and step files (and Slurm's facts about it, unless known) into a Report."""
    directory = job.directory
    rank_files, warnings = StatsFiles(directory).load() if directory else ([], [])
    steps, step_warnings = StepFiles(directory).load() if directory else ([], [])
    named = directory.name if directory and directory.name.isdigit() and job.facts is None else None
    job_id = job.job_id or job_id_of(rank_files, steps) or named
    facts = job.facts
    asked = job.facts is not None or bool(job.warnings)
    if facts is None and use_slurm and job_id is not None and not asked:
        known, answered = SlurmJobs.by_id([job_id])
        facts = next((f for f in known[job_id] if f.job_id == job_id), None)
        warnings += [] if facts else [SlurmJobs.unknown(job_id, answered)]
    default_policy = slurm.plugstack_arguments().get("policy") if use_slurm else None
    # a directory that cannot be listed is one warning, not one per kind of file read from it
    unique = list(dict.fromkeys([*job.warnings, *warnings, *step_warnings]))
    return build_report(directory, job_id, rank_files, steps, facts, SubmitLines.of_job(facts, default_policy),
                        unique, now_unix)


def _view(ranks: str, sort: str | None) -> View:
    if sort is not None and sort not in SORT_METRICS:
        raise UsageError(f"--sort {sort[:80]!r}: give one of {', '.join(SORT_METRICS)}")
    if ranks == "all":
        return View(top=None, sort=sort)
    if not ranks.isdigit() or int(ranks) < 1:
        raise UsageError(f"--ranks {ranks[:80]!r}: give 'all' or how many top ranks to show (a number from 1)")
    return View(top=int(ranks), sort=sort)


def _console(no_color: bool, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    # rich lays out for 80 columns when not on a terminal; a file or pipe gets the wide layout
    return Console(color_system=None if no_color else "auto", highlight=False, stderr=stderr,
                   width=None if stream.isatty() else PIPE_WIDTH)


def _jobs(args: argparse.Namespace) -> list[Job]:
    if args.user == "":
        raise UsageError("-u '' is empty: give a user name of this system")
    if args.user and args.targets:
        raise UsageError("give job ids and directories, or -u USER, not both")
    if not args.user and not args.targets:
        raise UsageError(f"nothing to report: give {JOB_ID_FORMS} (several for one line each), or -u USER")
    if (args.since or args.until) and not args.user:
        raise UsageError("-S and -E select the jobs of -u USER; with job ids, give the ids alone")
    if args.user:
        return jobs_of_user(args.user, args.since or DEFAULT_SINCE, args.until or "now", args.report_dir,
                            not args.no_slurm)
    return jobs_named(args.targets, args.report_dir, not args.no_slurm)


def main(args: argparse.Namespace) -> int:
    view = _view(args.ranks, args.sort)
    if args.compute_s is not None and not 0 < args.compute_s < float("inf"):
        raise UsageError(f"--compute-s {args.compute_s} is not a time; give a positive number of seconds")
    jobs = _jobs(args)
    if len(jobs) == 1 and not args.user:
        return _one(jobs[0], args, view)
    for given, name in ((args.plot, "--plot draws"), (args.compute_s, "--compute-s predicts")):
        if given:
            raise UsageError(f"{name} one job, and these are {len(jobs)}: give one job id or directory")
    reports = []
    for job in track(jobs, description="reading stats", console=_console(args.no_color, stderr=True),
                     disable=not sys.stderr.isatty(), transient=True):
        report = load_report(job, use_slurm=not args.no_slurm)
        found = notes(report)
        reports.append((report, found, summary(report, found, job.label)))
    if args.json:
        sys.stdout.write(json.dumps({"schema": LIST_SCHEMA, "jobs": [entry for _, _, entry in reports]}) + "\n")
    elif reports:
        render_list(reports, _console(args.no_color))
    else:
        print(f"transit report: no jobs of {args.user} between {args.since or DEFAULT_SINCE} and "
              f"{args.until or 'now'}", file=sys.stderr)
    return EXIT_SHOWN if any(report.ranks for report, _, _ in reports) else EXIT_NO_STATS


def _one(job: Job, args: argparse.Namespace, view: View) -> int:
    report = load_report(job, use_slurm=not args.no_slurm)
    # one job only: replay takes about a second a profile (predict.py)
    report.predictions, replay_warnings = predictions(report.ranks, args.compute_s)
    report.warnings += replay_warnings
    found = notes(report)
    if args.plot:
        written, skipped = write_plots(report, Path(args.plot))
        for path in written:
            print(f"wrote {path}", file=sys.stderr)
        for line in skipped:
            print(line, file=sys.stderr)
    if args.json:
        # json.dumps without indent runs json's C encoder (json.dump never does): 10x faster
        sys.stdout.write(json.dumps(report_json(report, found)) + "\n")
    else:
        render(report, found, _console(args.no_color), view)
    return EXIT_SHOWN if report.ranks else EXIT_NO_STATS


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="what TRANSIT did in a job: per-rank memory, migrations, advice; one line per job for several",
        description="Report what TRANSIT did in a job, from the per-rank stats files, the plugin's step files "
        "and Slurm's facts. One job gets the full report; several (ids, an array's tasks, -u USER) one line "
        "each. Exit code 0: a report shown; 1: the job (every job) has no usable stats, and the report says "
        "why; 2: bad input.",
    )
    parser.add_argument(
        "targets",
        nargs="*",
        metavar="JOBID|ARRAY_TASK|DIR",
        help="job ids (1234; an array's or a heterogeneous job's id names every task or component), array "
        "tasks (1234_7), heterogeneous job components (1234+1), or jobs' stats directories",
    )
    parser.add_argument("-u", "--user", metavar="USER", help="every job of USER in the time range (sacct -u)")
    parser.add_argument("-S", "--starttime", dest="since", metavar="TIME",
                        help=f"with -u: jobs from TIME (default {DEFAULT_SINCE}; YYYY-MM-DD[THH:MM[:SS]], today, "
                        "now, now-N{minutes,hours,days,weeks})")
    parser.add_argument("-E", "--endtime", dest="until", metavar="TIME", help="with -u: jobs until TIME (default now)")
    parser.add_argument(
        "--report-dir",
        metavar="DIR",
        type=paths.input_dir,
        help="directory holding one sub-directory per job (default: $TRANSIT_REPORT_DIR, "
        "else report_dir= in the cluster's plugstack.conf, else .dev-cluster/reports)",
    )
    parser.add_argument("--ranks", default=str(DEFAULT_TOP), metavar="all|N",
                        help="a job of many ranks shows the spread, the top N ranks and nodes by --sort and the "
                        f"outliers (default {DEFAULT_TOP}); 'all' shows every rank and node")
    parser.add_argument("--sort", metavar="METRIC",
                        help=f"order ranks by METRIC, highest first: {', '.join(SORT_METRICS)} (default: step for "
                        "the top ranks, rank order for all)")
    parser.add_argument("--compute-s", type=float, metavar="S",
                        help="one job: the kernel time of an iteration without offload (e.g. the uncapped run's "
                        "step), for the step time that replay over the ranks' profiles (TRANSIT_PROFILE=1) "
                        "predicts; without it only their bytes are predicted")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (see docs/report.md)")
    parser.add_argument("--plot", metavar="DIR", type=paths.output_dir, help="also write PNG plots of the job into DIR")
    parser.add_argument("--no-color", action="store_true", help="plain text, no colours")
    parser.add_argument(
        "--no-slurm",
        action="store_true",
        help="do not ask Slurm (sacct/squeue/scontrol) about the job: stats and step files only",
    )
    parser.set_defaults(func=main)
