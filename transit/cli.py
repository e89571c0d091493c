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

# subcommand -> the module that registers it, in the order `transit --help` lists them
SUBCOMMANDS = {
    "run": "transit.run",
    "lib-path": "transit.run",
    "plan": "transit.plan",
    "launch": "transit.launch",
    "submit": "transit.launch",
    "report": "transit.report",
    "simulate": "transit.sim",
    "replay": "transit.replay",
    "cluster": "transit.cluster",  # wraps scripts/dev-cluster
    "bench": "transit.bench_link",  # bench link: the machine's PCIe and peer links
    "doctor": "transit.doctor",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """All subcommands, or only the module of `command`: a command imports nothing it does not use."""
    parser = argparse.ArgumentParser(
        prog="transit", description="Transparent scale-in for multi-node LLM training."
    )
    parser.add_argument("--version", action="version", version=f"transit {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = SUBCOMMANDS.get(command or "")
    for module in dict.fromkeys(SUBCOMMANDS.values()):
        if wanted in (None, module):
            importlib.import_module(module).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command)
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
