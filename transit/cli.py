"""The `transit` command: parses arguments, then hands over to one module per subcommand.

Each subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``func`` (a callable taking the parsed namespace and returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import NoReturn

from transit import __version__
from transit.errors import UsageError

# subcommand -> "module:function" that registers it (function `register` unless named), in the order
# `transit --help` lists them. `cluster` (wraps scripts/dev-cluster) and `bench link` (the machine's
# PCIe and peer links) are developer tools: they register without a help line, so the list omits them.
SUBCOMMANDS = {
    "run": "transit.run",
    "lib-path": "transit.run",
    "plan": "transit.plan.cli:register_plan",
    "launch": "transit.plan.cli:register_launch",
    "submit": "transit.plan.cli:register_launch",
    "report": "transit.report.cli",
    "simulate": "transit.sim.cli",
    "replay": "transit.replay",
    "doctor": "transit.doctor",
    "cluster": "transit.cluster",
    "bench": "transit.bench_link",
}


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line (``transit plan: argument --tp: ...``), not the usage
    block first; ``--help`` still shows the usage. Subcommand parsers are of the same class."""

    # the subcommands' parsers by name (the top-level parser's), so that an argument no parser took
    # is refused by its subcommand's parser: `transit launch: unrecognized arguments: ...`
    commands: dict[str, argparse.ArgumentParser]

    def error(self, message: str) -> NoReturn:
        if message.endswith(": expected one argument"):  # argparse took a value such as -1G for an option
            option = message.removeprefix("argument ").split(":")[0].split("/")[-1]
            message += f"; a value that starts with '-' is given as {option}=VALUE"
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> OneLineParser:
    """All subcommands, or only the module of `command`: a command imports nothing it does not use."""
    parser = OneLineParser(
        prog="transit", description="Transparent scale-in for multi-node LLM training."
    )
    parser.add_argument("--version", action="version", version=f"transit {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = SUBCOMMANDS.get(command or "")
    for registrar in dict.fromkeys(SUBCOMMANDS.values()):
        if wanted in (None, registrar):
            module, _, function = registrar.partition(":")
            getattr(importlib.import_module(module), function or "register")(subparsers)
    parser.commands = subparsers.choices
    return parser


def _subparser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The parser of the (sub)subcommand `argv` names: `transit simulate sweep`'s for its words."""
    for word in argv:
        choices = next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})
        parser = choices.get(word, parser)
    return parser


def run(argv: list[str]) -> int:
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command)
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # argparse would name `transit`, not the subcommand whose --help tells what it takes
            _subparser(parser, argv).error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as exc:  # --help, --version, or the one line of a bad argument: its exit code
        return exc.code if isinstance(exc.code, int) else 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code = int(args.func(args) or 0)
    except UsageError as exc:
        print(f"transit {args.command}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        # the paths a user names are checked when the arguments are parsed; this is what the
        # system refused later (a disk filled, a directory removed meanwhile)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"transit {args.command}: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
    return code


def main(argv: list[str] | None = None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`transit plan | head`): stop quietly, and point stdout at
        # /dev/null so that Python's own flush at exit does not fail on the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a shell reports a command ended by SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
