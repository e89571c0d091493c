"""Rich tables as plain text, for output that goes into a pipe or a string (a plan's table)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def as_text(table: Table) -> str:
    """The table without colour, at its natural width, each line without the spaces rich pads a
    cell to its column's width with."""
    console = Console(width=10_000, force_terminal=False, highlight=False)
    with console.capture() as captured:
        console.print(table)
    return "\n".join(line.rstrip() for line in captured.get().rstrip("\n").split("\n"))
