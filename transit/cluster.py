"""`transit cluster up|down|status`: the local development Slurm cluster (scripts/dev-cluster).

The script does the work (munge, MariaDB and slurmdbd for accounting, slurmctld, four slurmd, the
TRANSIT plugin in plugstack.conf);
this command only finds it in the source checkout and reports its state, as text or JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from transit.errors import UsageError

DEV_CLUSTER_SCRIPT = Path("scripts") / "dev-cluster"
ACTIONS = ("up", "down", "status")


def source_checkout() -> Path | None:
    """The TRANSIT source checkout: the one this package runs from, else the one the working
    directory is in (an installed `transit` run from inside a clone)."""
    for candidate in (Path(__file__).resolve().parents[1], *Path.cwd().resolve().parents, Path.cwd().resolve()):
        if (candidate / DEV_CLUSTER_SCRIPT).is_file():
            return candidate
    return None


def register(subparsers: argparse._SubParsersAction) -> None:
    # a developer's tool: added without help=, so `transit --help` does not list it
    parser = subparsers.add_parser(
        "cluster",
        description="Manage the local Slurm cluster of a source checkout (scripts/dev-cluster): munge, "
                    "MariaDB, slurmdbd, slurmctld and four slurmd on this host, with the TRANSIT SPANK plugin loaded. "
                    "State, configs and logs live in <repo>/.dev-cluster/. Use it with "
                    "`eval $(scripts/dev-cluster env)` or SLURM_CONF=<repo>/.dev-cluster/etc/slurm.conf.")
    parser.add_argument("action", choices=ACTIONS, help="up (idempotent), down, or status (exit 1 when down)")
    parser.add_argument("--json", action="store_true", help="print the cluster state as JSON")
    parser.set_defaults(func=main)


def _script(*args: str, capture: bool) -> subprocess.CompletedProcess[str]:
    checkout = source_checkout()
    if checkout is None:
        raise UsageError(f"{DEV_CLUSTER_SCRIPT} not found: run `transit cluster` inside a TRANSIT source checkout")
    return subprocess.run([str(checkout / DEV_CLUSTER_SCRIPT), *args], capture_output=capture, text=True,
                          check=False)


def status() -> dict[str, object]:
    """The cluster state as scripts/dev-cluster reports it (state is "up" or "down")."""
    return json.loads(_script("status", "--json", capture=True).stdout)


def main(args: argparse.Namespace) -> int:
    if args.action == "status":
        result = _script("status", *(["--json"] if args.json else []), capture=False)
        return result.returncode
    if not args.json:
        return _script(args.action, capture=False).returncode
    # JSON: keep stdout for the document; the script's messages go to stderr.
    result = _script(args.action, capture=True)
    sys.stderr.write(result.stdout + result.stderr)
    print(json.dumps(status()))
    return result.returncode
