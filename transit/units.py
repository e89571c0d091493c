"""How every command writes a size in bytes."""

from __future__ import annotations

BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(n: float | None, decimals: int = 1) -> str:
    """Binary units with a space: "1.5 GiB"; decimals=0 for sizes that are whole units ("4 KiB")."""
    if n is None:
        return "-"
    value = float(n)
    for unit in BYTE_UNITS:
        if abs(value) < 1024 or unit == BYTE_UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.{decimals}f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_bytes_short(n: float | None) -> str:
    """Narrow table cells: binary units with one letter and 3 digits, "1.5G" is 1.5 GiB."""
    if n is None:
        return "-"
    value = float(n)
    for letter in ("", "K", "M", "G", "T", "P"):
        if abs(value) < 1024 or letter == "P":
            if not letter:
                return f"{value:.0f}"
            return f"{value:.0f}{letter}" if abs(value) >= 100 else f"{value:.3g}{letter}"
        value /= 1024
    raise AssertionError("unreachable")
