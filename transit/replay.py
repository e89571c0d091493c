"""`transit replay`: the placement policies' decisions over a recorded profile, on a CPU.

The profile (TRANSIT_PROFILE=1, docs/profile.md) gives the last profiled iteration's phases: the
2 MiB chunks each touches and its kernel time. libtransit's replay (libtransit/src/model/replay.c) runs
the policy's decisions on them against a simulated device and predicts, per iteration after
warm-up, the migrations, faults, zero-copy bytes, evictions, the resident peak and the step time
from the link rates. Nothing here decides: it reads the profile and renders what C returns.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import zlib
from dataclasses import dataclass
from pathlib import Path

from transit import _native, paths
from transit.errors import UsageError

SCHEMA = "transit.profile/1"
CHUNK_SHIFT = 21
GB = 1e9
GIB = 1 << 30
# The H200's measured rates (bench/README.md): prefetch HtoD, DtoH, fault-driven HtoD, zero-copy.
DEFAULT_RATES_GBPS = {"prefetch": 47.7, "dtoh": 12.9, "fault": 5.9, "zero_copy": 51.0}
DEFAULT_ITERATIONS = 4
# Chunk touches (phases x the chunks each touches) one iteration may hold: 32 times the largest
# recorded profile's (0.5 million, an H200 at global batch 64), and what a replay holds in memory.
MAX_TOUCHES = 1 << 24


@dataclass(frozen=True)
class Template:
    """One profiled iteration, as replay.c takes it."""

    phases: int
    touch_offsets: list[int]
    touch: list[tuple[int, int]]  # (address, bytes), whole chunks
    compute_ns: list[int]
    first_launch: list[int]
    launches: int
    chunk_reuse: dict[int, int]  # chunk number -> the most distinct phases of one profiled iteration touching it
    window: int  # iterations the profile's window took: replay's warm-up
    largest_launch_bytes: int  # the largest working set of a phase of one launch
    largest_launch: int  # that phase's launch ordinal


def load_profile(path: Path) -> dict:
    try:
        doc = json.loads(gzip.decompress(paths.read_regular(path)))
    except FileNotFoundError:
        raise UsageError(f"profile {path}: no such file") from None
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, json.JSONDecodeError):
        raise UsageError(f"profile {path}: not a complete gzip-compressed JSON document (truncated or another "
                         "format); give a rank*.profile.json.gz that TRANSIT_PROFILE=1 wrote") from None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if schema != SCHEMA:
        raise UsageError(f"profile {path}: schema {str(schema)[:40]!r} is not {SCHEMA!r}")
    if not doc.get("iterations"):
        raise UsageError(f"profile {path}: no profiled iteration (the run ended before its first window did)")
    return doc


def template(doc: dict, compute_s: float | None, index: int = 0) -> Template:
    """Profiled iteration `index` of the window (the first by default: in profiles built before the
    window's last kernel bounded it, the last iteration's final phase also holds the drain
    iteration's records). A chunk's reuse is the profile's (its busiest profiled iteration's) where
    that is higher than this iteration's, as libtransit places by it. compute_s, when given, is
    spread over the phases in proportion to their recorded kernel time. Raises ValueError, naming
    what is wrong, for a document of the right schema that libtransit did not write so."""
    try:
        t = _template(doc, compute_s, index)
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise ValueError(f"not a profile as TRANSIT_PROFILE=1 writes it ({type(exc).__name__}: {exc})") from None
    counts = [*t.touch_offsets, *(n for pair in t.touch for n in pair), *t.compute_ns, *t.first_launch, t.launches,
              t.window, *t.chunk_reuse.values()]
    if not all(isinstance(n, int) and 0 <= n < 1 << 64 for n in counts):  # what replay.c takes: uint64_t
        raise ValueError("not a profile as TRANSIT_PROFILE=1 writes it (a count or size that is not a whole "
                         "number from 0)")
    return t


def _template(doc: dict, compute_s: float | None, index: int) -> Template:
    it = doc["iterations"][index]
    ph = it["phases"]
    touches = sum(hi - lo + 1 for ranges in ph["touch"] for lo, hi in zip(ranges[::2], ranges[1::2]))
    if not 0 <= touches <= MAX_TOUCHES:  # each touched chunk is expanded below
        raise ValueError(f"not a profile as TRANSIT_PROFILE=1 writes it ({touches} chunk touches in one iteration; "
                         f"at most {MAX_TOUCHES} are read)")
    offsets, touch, sizes = [0], [], []
    reuse: dict[int, int] = {}
    for ranges in ph["touch"]:
        pairs = [(lo << CHUNK_SHIFT, (hi - lo + 1) << CHUNK_SHIFT) for lo, hi in zip(ranges[::2], ranges[1::2])]
        touch += pairs
        offsets.append(len(touch))
        sizes.append(sum(b for _, b in pairs))
        for lo, hi in zip(ranges[::2], ranges[1::2]):
            for c in range(lo, hi + 1):
                reuse[c] = reuse.get(c, 0) + 1
    table = doc.get("chunks", {})  # hand-made profiles may leave the derived table out
    for c, r in zip(table.get("chunk", ()), table.get("reuse", ())):
        if c in reuse:
            reuse[c] = max(reuse[c], r)
    kernel_ns = ph["kernel_ns"]
    total = sum(kernel_ns)
    if compute_s is not None:
        kernel_ns = [round(compute_s * 1e9 * k / total) if total else round(compute_s * 1e9 / len(kernel_ns))
                     for k in kernel_ns]
    firsts = ph["first_ordinal"]
    ends = firsts[1:] + [it["kernels"]]
    single = [q for q in range(len(sizes)) if ends[q] - firsts[q] == 1]
    largest = max(single, key=sizes.__getitem__, default=None)
    return Template(phases=len(firsts), touch_offsets=offsets, touch=touch, compute_ns=kernel_ns,
                    first_launch=firsts, launches=it["kernels"], chunk_reuse=reuse, window=doc["window"]["iterations"],
                    largest_launch_bytes=sizes[largest] if largest is not None else 0,
                    largest_launch=firsts[largest] if largest is not None else 0)


def check_limit(t: Template, limit: int, named: str) -> None:
    """L must hold the largest working set of one launch, or nothing can run within it."""
    if limit < t.largest_launch_bytes:
        raise UsageError(f"{named} is below the working set of the profile's largest kernel (launch "
                         f"{t.largest_launch}, {t.largest_launch_bytes / GIB:.2f} GiB): it cannot run within L")


def replay(t: Template, policy: str, limit: int, iterations: int, rates_gbps: dict[str, float],
           look_ahead: bool = False) -> list[dict]:
    """Per counted iteration: what replay.c predicts (look_ahead: hybrid with its mover's stream plan)."""
    ffi, lib = _native.ffi, _native.lib()
    chunks = sorted(t.chunk_reuse)
    keep = {
        "touch_offsets": ffi.new("uint64_t[]", t.touch_offsets),
        "touch": ffi.new("transit_range[]", [{"addr": a, "bytes": b} for a, b in t.touch] or 1),
        "compute_ns": ffi.new("uint64_t[]", t.compute_ns or 1),
        "first_launch": ffi.new("uint32_t[]", t.first_launch or 1),
        "chunk_addr": ffi.new("uint64_t[]", [c << CHUNK_SHIFT for c in chunks] or 1),
        "chunk_reuse": ffi.new("uint32_t[]", [t.chunk_reuse[c] for c in chunks] or 1),
    }
    inp = ffi.new("transit_replay_input *", dict(keep, nphases=t.phases, launches=t.launches, nchunks=len(chunks)))
    params = ffi.new("transit_replay_params *", {
        "policy": _native.policy_number(policy), "limit": limit, "warmup": t.window, "iterations": iterations,
        "prefetch_htod_bps": rates_gbps["prefetch"] * GB, "dtoh_bps": rates_gbps["dtoh"] * GB,
        "fault_htod_bps": rates_gbps["fault"] * GB, "zero_copy_bps": rates_gbps["zero_copy"] * GB,
        "look_ahead": look_ahead})
    out = ffi.new("transit_replay_iteration[]", iterations)
    err = ffi.new("char[]", 256)
    if lib.transit_replay_run(inp, params, out, err, 256):
        raise UsageError(ffi.string(err).decode())
    fields = ("htod_bytes", "dtoh_bytes", "faults", "zero_copy_bytes", "evicted_chunks", "resident_peak_bytes",
              "fill_bytes", "streamed_bytes", "compute_s", "transfer_s", "step_s")
    return [{"iteration": t.window + 1 + i, **{f: getattr(out[i], f) for f in fields}} for i in range(iterations)]


# A stats timeline's cumulative counters, by the name their per-iteration deltas take.
TIMELINE_COUNTERS = {"htod_bytes": "htod_bytes", "dtoh_bytes": "dtoh_bytes", "faults": "gpu_page_faults",
                     "seconds": "t"}


def iteration_deltas(timeline: list[dict]) -> dict[int, dict]:
    """Per iteration of a stats file's timeline: the migrations CUPTI recorded (the counters it has)."""
    return {e["iteration"]: {name: e[key] - p[key] for name, key in TIMELINE_COUNTERS.items() if key in e and key in p}
            for p, e in itertools.pairwise(timeline)}


def measured(stats_path: Path) -> dict[int, dict]:
    """iteration_deltas of a stats file's timeline."""
    try:
        return iteration_deltas(json.loads(stats_path.read_text())["timeline"])
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"--against {stats_path}: not a TRANSIT stats file with a timeline") from None


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay", help="predict a policy's migrations and step time from a recorded profile (CPU)",
        description="Run a placement policy's decisions over a profile recorded with TRANSIT_PROFILE=1 and "
        "predict, per iteration after warm-up, its PCIe bytes, faults, evictions and step time.")
    p.add_argument("profile", type=paths.input_path, metavar="PROFILE", help="a rank*.profile.json.gz")
    p.add_argument("--policy", required=True, help="the policy to replay, as `transit run --policy` names it "
                   "(base, prefetch, advise, hybrid)")
    p.add_argument("--limit", required=True, metavar="SIZE", help="L, the device capacity to replay at, e.g. 25.5G")
    p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                   help=f"iterations to predict after the profile's window (default {DEFAULT_ITERATIONS})")
    p.add_argument("--compute-s", type=float, metavar="S",
                   help="kernel time of one iteration without offload (default: the profile's recorded kernel time, "
                   "which faults during warm-up inflate)")
    for name, gbps in DEFAULT_RATES_GBPS.items():
        p.add_argument(f"--{name.replace('_', '-')}-gbps", type=float, default=gbps, metavar="GB/S",
                       help=f"{name.replace('_', '-')} rate (default {gbps}, the H200's)")
    p.add_argument("--look-ahead", action="store_true", help="hybrid only: with the design of its look-ahead mover "
                   "(host chunks touched by several phases streamed in ahead of use and back behind the compute, "
                   "not read in place), as libtransit runs it in limit mode")
    p.add_argument("--against", type=paths.text_path, metavar="STATS", help="a stats file of the recorded run: its measured "
                   "migrations per iteration beside the prediction")
    p.add_argument("--json", action="store_true", help="print JSON (schema transit.replay/1)")
    p.set_defaults(func=main)


def check(args: argparse.Namespace) -> dict[str, float]:
    rates = {name: getattr(args, f"{name}_gbps") for name in DEFAULT_RATES_GBPS}
    for name, value in rates.items():
        if not value > 0 or value == float("inf"):
            raise UsageError(f"--{name.replace('_', '-')}-gbps {value} is not a rate; give a positive number of GB/s")
    if not 1 <= args.iterations <= 1000:
        raise UsageError(f"--iterations {args.iterations} is not allowed; give 1 to 1000")
    if args.compute_s is not None and not 0 < args.compute_s < float("inf"):
        raise UsageError(f"--compute-s {args.compute_s} is not a time; give a positive number of seconds")
    if args.look_ahead and args.policy != "hybrid":
        raise UsageError(f"--look-ahead is hybrid's mover; --policy {args.policy} has none (use --policy hybrid)")
    return rates


def main(args: argparse.Namespace) -> int:
    rates = check(args)
    _native.policy_number(args.policy, "--policy")
    limit = _native.parse_size(args.limit, "--limit")
    doc = load_profile(args.profile)
    try:
        t = template(doc, args.compute_s)
    except ValueError as exc:
        raise UsageError(f"profile {args.profile}: {exc}") from None
    check_limit(t, limit, f"--limit {args.limit}")
    rows = replay(t, args.policy, limit, args.iterations, rates, args.look_ahead)
    against = measured(args.against) if args.against else {}
    for row in rows:
        if row["iteration"] in against:
            row["measured"] = against[row["iteration"]]
    compute = "--compute-s" if args.compute_s is not None else "the profile's recorded kernel time"
    result = {"schema": "transit.replay/1", "profile": str(args.profile), "policy": args.policy, "limit_bytes": limit,
              "look_ahead": args.look_ahead, "rates_gbps": rates, "compute_from": compute, "iterations": rows}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        render(result)
    return 0


def render(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    mover = " with the look-ahead mover" if result["look_ahead"] else ""
    table = Table(title=f"replay: {result['policy']}{mover} at L = {result['limit_bytes'] / GIB:.2f} GiB", box=None)
    for col in ("iter", "HtoD GB", "DtoH GB", "faults", "zero-copy GB", "evicted", "resident GiB", "step s"):
        table.add_column(col, justify="right")
    measured_any = any("measured" in r for r in result["iterations"])
    if measured_any:
        table.add_column("measured HtoD+DtoH GB", justify="right")
    for r in result["iterations"]:
        cells = [str(r["iteration"]), f"{r['htod_bytes'] / GB:.1f}", f"{r['dtoh_bytes'] / GB:.1f}", str(r["faults"]),
                 f"{r['zero_copy_bytes'] / GB:.1f}", str(r["evicted_chunks"]), f"{r['resident_peak_bytes'] / GIB:.2f}",
                 f"{r['step_s']:.2f}"]
        if measured_any:
            m = r.get("measured")
            cells.append(f"{(m['htod_bytes'] + m['dtoh_bytes']) / GB:.1f}" if m else "-")
        table.add_row(*cells)
    console = Console()
    console.print(table)
    console.print(f"compute time from {result['compute_from']}; rates (GB/s): "
                  + ", ".join(f"{k} {v:g}" for k, v in result["rates_gbps"].items()))
