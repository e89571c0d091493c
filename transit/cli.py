"""The `transit` command: parses arguments, then hands over to one module per subcommand.

Each subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``func`` (a callable taking the parsed namespace and returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from transit import __version__
from transit.errors import UsageError

# subcommand modules, in the order `transit --help` lists them
SUBCOMMAND_MODULES = (
    "transit.run",        # run, lib-path
    "transit.plan",       # plan
    "transit.launch",     # launch, submit
    "transit.report",     # report
    "transit.sim",        # simulate
    "transit.cluster",    # cluster (wraps scripts/dev-cluster)
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="transit", description="Transparent scale-in for multi-node LLM training."
    )
    parser.add_argument("--version", action="version", version=f"transit {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"transit {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
