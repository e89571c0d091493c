"""`transit report JOBID|DIR`: what TRANSIT did in a job, from its per-rank stats files and Slurm.

Modules, one concern each:
  load.py        the data sources: StatsFiles (rank<R>.<host>.<pid>.json) and SlurmJob (sacct/squeue),
                 where the report directory is, and the named warnings about the inputs
  aggregate.py   one row per rank, totals per node and per job, iteration statistics
  thresholds.py  every threshold the notes and colours judge by
  notes.py       advice and warnings for the user, driven by those thresholds
  render.py      the text report: header, tables coloured by threshold, notes (--no-color: plain)
  as_json.py     --json (schema "transit.report/1"; every key is documented in README.md)
  plots.py       --plot DIR: migration-sizes.png, timeline.png, ranks.png, control.png

The report directory, for `transit report JOBID`, is the first found of: --report-dir,
$TRANSIT_REPORT_DIR, the report_dir= argument of spank_transit.so in the plugstack.conf that
`scontrol show config` names (the directory the plugin really wrote to), and the dev cluster's
<repo>/.dev-cluster/reports. The job's files are in <report dir>/<JOBID>/.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from transit.report.aggregate import Report, build_report
from transit.report.as_json import report_json
from transit.report.load import SlurmJob, StatsFiles, job_id_of, resolve_target
from transit.report.notes import notes
from transit.report.plots import write_plots
from transit.report.render import render

PIPE_WIDTH = 132


def load_report(target: str, report_dir: str | None = None, use_slurm: bool = True) -> Report:
    """Read a job's stats files (and Slurm's facts about it) into a Report."""
    directory, job_id_from_target = resolve_target(target, report_dir, use_slurm)
    rank_files, warnings = StatsFiles(directory).load()
    job_id = job_id_of(rank_files) or job_id_from_target
    facts = None
    if use_slurm and job_id is not None:
        facts, slurm_warnings = SlurmJob(job_id).facts()
        warnings += slurm_warnings
    return build_report(directory, job_id, rank_files, facts, warnings)


def main(args: argparse.Namespace) -> int:
    report = load_report(args.target, args.report_dir, use_slurm=not args.no_slurm)
    found = notes(report)
    if args.plot:
        for path in write_plots(report, Path(args.plot)):
            print(f"wrote {path}", file=sys.stderr)
    if args.json:
        # json.dumps without indent runs json's C encoder (json.dump never does): 10x faster
        sys.stdout.write(json.dumps(report_json(report, found)) + "\n")
    else:
        # rich lays out for 80 columns when not on a terminal; a file or pipe gets the wide layout
        width = None if sys.stdout.isatty() else PIPE_WIDTH
        render(
            report,
            found,
            Console(color_system=None if args.no_color else "auto", highlight=False, width=width),
        )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="what TRANSIT did in a job: per-rank memory, migrations, advice",
        description="Report what TRANSIT did in a job, from the per-rank stats files and Slurm's facts.",
    )
    parser.add_argument(
        "target",
        metavar="JOBID|DIR",
        help="a job id (looked up in the report directory) or a job's stats directory",
    )
    parser.add_argument(
        "--report-dir",
        metavar="DIR",
        help="directory holding one sub-directory per job (default: $TRANSIT_REPORT_DIR, "
        "else report_dir= in the cluster's plugstack.conf, else .dev-cluster/reports)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON (see report/README.md)")
    parser.add_argument("--plot", metavar="DIR", help="also write PNG plots into DIR")
    parser.add_argument("--no-color", action="store_true", help="plain text, no colours")
    parser.add_argument(
        "--no-slurm",
        action="store_true",
        help="do not ask Slurm (sacct/squeue) about the job: stats files only",
    )
    parser.set_defaults(func=main)
