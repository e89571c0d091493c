"""How the report writes durations, counts and lists of ranks (sizes: transit.units)."""

from __future__ import annotations


def format_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 60:
        return f"{s:.3g} s"
    minutes, seconds = divmod(int(s), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}"


def format_age(s: float) -> str:
    """How long ago, to the precision that matters: "45 s", "12 min", "3.5 h", "2.0 days"."""
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    if s < 48 * 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def format_count(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def format_count_short(n: int | None) -> str:
    """Narrow table cells: 350000 -> "350k", 1200000 -> "1.2M"."""
    if n is None:
        return "-"
    for divisor, letter in ((10**9, "G"), (10**6, "M"), (10**3, "k")):
        if abs(n) >= divisor:
            value = n / divisor
            return f"{value:.0f}{letter}" if abs(value) >= 100 else f"{value:.1f}{letter}"
    return str(n)


def compact_ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5"."""
    spans: list[list[int]] = []
    for n in sorted(set(numbers)):
        if spans and spans[-1][1] == n - 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def rank_list(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> "ranks 0-2, 5"; [3] -> "rank 3"."""
    return f"rank{'s' if len(set(numbers)) > 1 else ''} {compact_ranges(numbers)}"
