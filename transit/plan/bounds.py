"""Every numeric input of `transit plan`, `transit submit` and `transit launch`, checked in one place.

The options are parsed as text and converted here, so that NaN, infinity, a word, a value out of
range or a list with a bad member all end in one line that names the option, the value and what
is allowed (argparse's own errors would add a usage line). The bounds are wide enough for any real
job and small enough that no product of them overflows a float (docs/planner.md lists them).
The rules that tie two values together (TP inside a node, PP over the layers) are here too.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass

from transit.errors import UsageError

SHOWN_VALUE_CHARS = 24  # a bad value is quoted up to this length, so the message stays one short line
MAX_LIST_ITEMS = 16  # --candidates / --scale-in: a handful of counts, not a sweep


@dataclass(frozen=True)
class Bound:
    """Allowed values of one option: integers or finite floats in [low, high] (or (low, high])."""

    kind: type  # int or float
    low: float
    high: float
    low_open: bool = False  # a float that must be more than `low` (sizes, rates, fractions)
    high_open: bool = False

    def shown(self, limit: float) -> str:
        return str(int(limit)) if self.kind is int or float(limit).is_integer() else f"{limit:g}"

    def allowed(self) -> str:
        what = "an integer" if self.kind is int else "a number"
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"{what} in {left}{self.shown(self.low)}, {self.shown(self.high)}{right}"


GIB_LIMIT = 1 << 20  # 1 PiB in GiB: above any GPU or node

BOUNDS: dict[str, Bound] = {
    # node counts and batch settings
    "nodes": Bound(int, 1, 100_000),
    "candidates": Bound(int, 1, 100_000),
    "scale_in": Bound(float, 0, 1, low_open=True, high_open=True),
    "global_batch": Bound(int, 1, 10**9),  # sequences per optimizer step
    "global_tokens": Bound(int, 1, 10**13),  # tokens per optimizer step
    "local_batch": Bound(int, 1, 65_536),
    "seq_len": Bound(int, 1, 1 << 24),
    # parallelism and the cluster
    "tp": Bound(int, 1, 1024),
    "pp": Bound(int, 1, 1024),
    "gpus_per_node": Bound(int, 1, 1024),
    "nproc_per_node": Bound(int, 1, 1024),
    "hbm_gib": Bound(float, 0, GIB_LIMIT, low_open=True),
    "host_dram_gib": Bound(float, 0, GIB_LIMIT, low_open=True),
    "pcie_gbps": Bound(float, 0, 100_000, low_open=True),
    "sustained_tflops": Bound(float, 0, 1_000_000, low_open=True),
    "rdzv_port": Bound(int, 1024, 65_535),  # unprivileged TCP ports
    # model dimensions
    "layers": Bound(int, 1, 10_000),
    "hidden": Bound(int, 1, 1 << 20),
    "ffn": Bound(int, 1, 1 << 22),
    "heads": Bound(int, 1, 1 << 14),
    "kv_heads": Bound(int, 1, 1 << 14),
    "vocab": Bound(int, 1, 1 << 24),
    "head_dim": Bound(int, 0, 1 << 16),
    "experts": Bound(int, 0, 1 << 16),
    "active_experts": Bound(int, 0, 1 << 16),
    "shared_experts": Bound(int, 0, 1 << 16),
}
LIST_OPTIONS = ("candidates", "scale_in")


def _shown(text: str, quoted: bool = False) -> str:
    cut = text if len(text) <= SHOWN_VALUE_CHARS else text[:SHOWN_VALUE_CHARS] + "..."
    return repr(cut) if quoted else cut


# What a number may look like: ASCII digits, a sign, a decimal point and an exponent (floats), and the
# words float() reads for NaN and infinity, which are refused as not finite below. Python's own int()
# and float() also take "8_000" and other scripts' digits ("٨"), which no job means.
NUMBER_TEXT = {int: re.compile(r"[+-]?[0-9]+"),
               float: re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(nan|inf|infinity)",
                                 re.IGNORECASE)}


def parse_value(name: str, text: str, bound: Bound | None = None) -> int | float:
    """`text` as the number option `name` (its BOUNDS entry, or `bound`) allows, else UsageError."""
    bound = bound or BOUNDS[name.lstrip("-").replace("-", "_").lower()]
    text = str(text).strip()
    try:
        value: int | float = int(text, 10) if bound.kind is int else float(text)
    except ValueError:
        raise UsageError(f"{name} must be {bound.allowed()}, got {_shown(text, quoted=True)}") from None
    if not NUMBER_TEXT[bound.kind].fullmatch(text):
        raise UsageError(f"{name} takes plain ASCII digits (no separators), got {_shown(text, quoted=True)}")
    if not math.isfinite(value):
        raise UsageError(f"{name} must be a finite number, got {_shown(text)}")
    if value < bound.low or (bound.low_open and value == bound.low):
        limit = "more than" if bound.low_open else "at least"
        raise UsageError(f"{name} must be {limit} {bound.shown(bound.low)}, got {_shown(text)}")
    if value > bound.high or (bound.high_open and value == bound.high):
        limit = "less than" if bound.high_open else "at most"
        raise UsageError(f"{name} must be {limit} {bound.shown(bound.high)}, got {_shown(text)}")
    return value


def parse_list(name: str, text: str, bound: Bound | None = None) -> list[int | float]:
    """A comma-separated list (`--candidates 16,12,8`), each member checked as `name` (or `bound`) allows."""
    items = [item.strip() for item in str(text).split(",")]
    if not any(items):
        raise UsageError(f"{name} needs at least one value, got {_shown(text, quoted=True)}")
    if "" in items:  # `0.5,,0.25` or a trailing comma: a value lost in editing, not one to guess
        raise UsageError(f"{name} has an empty value in {_shown(text, quoted=True)}; give numbers separated by commas")
    if len(items) > MAX_LIST_ITEMS:
        raise UsageError(f"{name} takes at most {MAX_LIST_ITEMS} values, got {len(items)}")
    return [parse_value(name, item, bound) for item in items]


def option_name(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def check_args(args: argparse.Namespace) -> None:
    """Convert every numeric option of `args` that was given (text) to its checked number(s), in place."""
    for dest in BOUNDS:
        text = getattr(args, dest, None)
        if isinstance(text, str):
            parse = parse_list if dest in LIST_OPTIONS else parse_value
            setattr(args, dest, parse(option_name(dest), text))


def check_tensor_parallel(tp: int, gpus_per_node: int, gpus_name: str = "GPUs per node") -> None:
    """Tensor parallelism stays inside a node: its groups must tile the node's GPUs."""
    if gpus_per_node % tp:
        raise UsageError(f"--tp {tp} does not divide the {gpus_per_node} {gpus_name} (TP stays inside a node)")


def check_pipeline(pp: int, layers: int) -> None:
    """Every pipeline stage gets the same number of layers."""
    if layers % pp:
        raise UsageError(f"--pp {pp} does not divide the model's {layers} layers (stages get equal layers)")
