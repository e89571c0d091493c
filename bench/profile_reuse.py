"""How stable a profile's reuse is, and what hybrid's host set costs outside the optimizer.

    python3 bench/profile_reuse.py PROFILE [--json]

For a profile (TRANSIT_PROFILE=1) of two or more iterations: how many 2 MiB chunks change reuse
class from one profiled iteration to the next (the caching allocator puts other tensors there),
and, for hybrid's placement at the profile's L by each rule (the last iteration's reuse, as
libtransit placed before f9f4a38, and the busiest iteration's, as it places since), the host set
by reuse class and how often each iteration's phases touch it outside the optimizer, split into
phases that run a GEMM or attention kernel (whose operands a kernel reads again per output tile
when they are read in place) and the rest; where the profile's chunk table counts launches, also
the host set's launches and those of GEMM or attention kernels. The placement, its capacity and
the kernel kinds are libtransit's own (transit_hybrid_place, transit_hybrid_capacity,
transit_kernel_rereads), called through cffi.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections import Counter
from pathlib import Path

from transit import _native, replay
from transit.errors import UsageError

CLASSES = ((1, "1"), (2, "2"), (4, "3-4"), (8, "5-8"))  # the stats' reuse classes; above: "9+"
OPTIMIZER_MARKS = ("adam", "sgd")


def reuse_class(reuse: int) -> str:
    if reuse == 0:
        return "0"
    return next((name for top, name in CLASSES if reuse <= top), "9+")


def phase_chunks(ranges: list[int]) -> set[int]:
    """A phase's touched chunks from its flat inclusive ranges [lo, hi, lo, hi, ...]."""
    return {c for lo, hi in zip(ranges[::2], ranges[1::2]) for c in range(lo, hi + 1)}


def phase_kinds(doc: dict, iteration: dict) -> list[str]:
    """Per phase: 'optimizer', 'gemm' (a GEMM or attention kernel among its launches) or 'other'."""
    lib = _native.lib()
    names = [name.lower() for name in doc["kernel_names"]]
    rereads = [bool(lib.transit_kernel_rereads(name.encode())) for name in doc["kernel_names"]]
    ordinals = iteration["kernel_name"]
    firsts = iteration["phases"]["first_ordinal"]
    kinds = []
    for q, first in enumerate(firsts):
        end = firsts[q + 1] if q + 1 < len(firsts) else len(ordinals)
        kernels = [k for k in ordinals[first:end] if k >= 0]
        kinds.append("optimizer" if any(m in names[k] for k in kernels for m in OPTIMIZER_MARKS)
                     else "gemm" if any(rereads[k] for k in kernels) else "other")
    return kinds


def host_set(reuse: dict[int, int], capacity: int) -> set[int]:
    """The chunks libtransit's placement leaves on the host at this capacity."""
    chunks = sorted(reuse)
    ffi, lib = _native.ffi, _native.lib()
    resident = ffi.new("uint8_t[]", len(chunks) + 1)
    if lib.transit_hybrid_place(ffi.new("uint32_t[]", [reuse[c] for c in chunks]), len(chunks), capacity, resident):
        raise MemoryError("transit_hybrid_place: out of memory")
    return {c for i, c in enumerate(chunks) if not resident[i]}


def busiest_reuse(doc: dict) -> dict[int, int]:
    """Per chunk touched in the profile, its reuse in its busiest profiled iteration (libtransit's rule)."""
    per_iteration = [Counter(c for ranges in it["phases"]["touch"] for c in phase_chunks(ranges))
                     for it in doc["iterations"]]
    return {c: max(it.get(c, 0) for it in per_iteration) for c in set().union(*per_iteration)}


def touches(doc: dict, kinds: list[list[str]], host: set[int]) -> list[dict[str, int]]:
    """Per profiled iteration: touches of host chunks by phase kind (kinds: phase_kinds of each
    iteration), the optimizer's left out."""
    out = []
    for iteration, iteration_kinds in zip(doc["iterations"], kinds):
        count: Counter[str] = Counter()
        for kind, ranges in zip(iteration_kinds, iteration["phases"]["touch"]):
            if kind != "optimizer":
                count[kind] += len(phase_chunks(ranges) & host)
        out.append({"iteration": iteration["iteration"], "gemm": count["gemm"], "other": count["other"]})
    return out


def analyse(doc: dict) -> dict:
    per_iteration = [Counter(c for ranges in it["phases"]["touch"] for c in phase_chunks(ranges))
                     for it in doc["iterations"]]
    chunks = set().union(*per_iteration)
    moves: Counter[str] = Counter()
    for before, after in itertools.pairwise(per_iteration):
        for c in chunks:
            a, b = reuse_class(before.get(c, 0)), reuse_class(after.get(c, 0))
            if a != b:
                moves[f"{a} -> {b}"] += 1
    limit = doc["config"]["limit_bytes"]
    capacity = _native.lib().transit_hybrid_capacity(limit)
    rules = {"last": per_iteration[-1], "busiest": busiest_reuse(doc)}
    table = doc["chunks"]
    launches = {c: (n, g) for c, n, g in zip(table["chunk"], table.get("launches", ()),
                                              table.get("rereading_launches", ()))}
    kinds = [phase_kinds(doc, iteration) for iteration in doc["iterations"]]
    placements = {}
    for name, reuse in rules.items():
        host = host_set({c: reuse.get(c, 0) for c in chunks}, capacity)
        by_class = Counter(reuse_class(reuse.get(c, 0)) for c in host)
        placements[name] = {"host_bytes_by_reuse": {k: n * doc["chunk_bytes"] for k, n in sorted(by_class.items())},
                            "touches_outside_optimizer": touches(doc, kinds, host)}
        if launches:
            placements[name]["host_launches"] = {"all": sum(launches.get(c, (0, 0))[0] for c in host),
                                                 "rereading": sum(launches.get(c, (0, 0))[1] for c in host)}
    return {"schema": "transit.profile-reuse/1", "limit_bytes": limit, "capacity_bytes": capacity,
            "chunks": len(chunks), "class_changes": dict(moves.most_common()), "placements": placements}


def render(result: dict) -> str:
    lines = [f"{result['chunks']} chunks; reuse class changes between consecutive profiled iterations:"]
    lines += [f"  {move}: {n}" for move, n in result["class_changes"].items()]
    for name, p in result["placements"].items():
        host = ", ".join(f"{k}: {v / 2**30:.2f} GiB" for k, v in p["host_bytes_by_reuse"].items())
        lines.append(f"hybrid by the {name} iteration's reuse, host set {host}")
        if "host_launches" in p:
            lines.append(f"  its chunks' launches (busiest iteration): {p['host_launches']['all']}, "
                         f"{p['host_launches']['rereading']} of GEMM or attention kernels")
        lines += [f"  iteration {t['iteration']}'s layout: touched {t['gemm'] + t['other']} times outside the "
                  f"optimizer, {t['gemm']} in GEMM or attention phases" for t in p["touches_outside_optimizer"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("profile", type=Path, help="a rank*.profile.json.gz of two or more profiled iterations")
    p.add_argument("--json", action="store_true", help="print JSON (schema transit.profile-reuse/1)")
    args = p.parse_args(argv)
    try:
        doc = replay.load_profile(args.profile)
    except UsageError as exc:
        print(f"profile_reuse: {exc}", file=sys.stderr)
        return 2
    if len(doc["iterations"]) < 2 or "kernel_name" not in doc["iterations"][0]:
        print(f"profile_reuse: {args.profile} needs two profiled iterations with their kernel_name arrays",
              file=sys.stderr)
        return 2
    result = analyse(doc)
    print(json.dumps(result, indent=1) if args.json else render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
