"""Where a steady iteration's time goes, against a control run of the same program.

    python3 bench/steady_kernels.py RUN CONTROL [--warm-up PROFILE] [--top N] [--json]

RUN and CONTROL are steady profiles (TRANSIT_PROFILE_STEADY, `*.steady.profile.json.gz`) of the
same training step: e.g. hybrid under its cap, and the same program with everything resident.
Per profile: the iteration's span (first kernel start to last kernel end), its kernels' summed
time, and the GPU's idle time between them. Where both ran the same kernel sequence, the kernels
by name with the most time over the control's, and the run's phases by kind (GEMM or attention,
optimizer, other) with their excess kernel time and idle time. With --warm-up (the run's warm-up
profile) the phases are also split by whether they touch a chunk hybrid's placement leaves on the
host (libtransit's own placement at the profile's L, by the busiest iteration's reuse, through
cffi: profile_reuse.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import profile_reuse

from transit import _native, replay
from transit.errors import UsageError

NS = 1e9


def steady_iteration(doc: dict, path: Path) -> dict:
    if len(doc["iterations"]) != 1 or not doc["iterations"][0].get("timed"):
        raise UsageError(f"{path} is not a steady profile of one timed iteration (TRANSIT_PROFILE_STEADY)")
    return doc["iterations"][0]


def totals(it: dict) -> dict:
    busy = sum(it["kernel_duration_ns"])
    return {"kernels": it["kernels"], "span_s": it["span_ns"] / NS, "kernel_s": busy / NS,
            "idle_s": max(it["span_ns"] - busy, 0) / NS}


def phase_ranges(it: dict) -> list[range]:
    firsts = it["phases"]["first_ordinal"]
    return [range(first, firsts[q + 1] if q + 1 < len(firsts) else len(it["kernel_name"]))
            for q, first in enumerate(firsts)]


def host_chunks(warm: dict) -> set[int]:
    """The chunks hybrid's placement leaves on the host, from the run's warm-up profile."""
    capacity = _native.lib().transit_hybrid_capacity(warm["config"]["limit_bytes"])
    return profile_reuse.host_set(profile_reuse.busiest_reuse(warm), capacity)


def analyse(run: dict, control: dict, warm: dict | None, top: int) -> dict:
    """run and control: steady profiles (steady_iteration checked them)."""
    r_it, c_it = run["iterations"][0], control["iterations"][0]
    r_names = [run["kernel_names"][k] if k >= 0 else None for k in r_it["kernel_name"]]
    c_names = [control["kernel_names"][k] if k >= 0 else None for k in c_it["kernel_name"]]
    out: dict = {"schema": "transit.steady-kernels/1", "run": totals(r_it), "control": totals(c_it),
                 "same_sequence": r_names == c_names}
    if not out["same_sequence"]:
        return out
    r_ns, c_ns = r_it["kernel_duration_ns"], c_it["kernel_duration_ns"]
    by_name: dict[str, list[float]] = {}
    for name, a, b in zip(r_names, r_ns, c_ns):
        row = by_name.setdefault(name or "?", [0, 0.0, 0.0])
        row[0] += 1
        row[1] += a / NS
        row[2] += b / NS
    ranked = sorted(by_name.items(), key=lambda kv: kv[1][2] - kv[1][1])
    out["kernels_by_excess"] = [{"name": name, "launches": n, "run_s": round(a, 4), "control_s": round(b, 4),
                                 "excess_s": round(a - b, 4)} for name, (n, a, b) in ranked[:top]]
    kinds = profile_reuse.phase_kinds(run, r_it)
    host = host_chunks(warm) if warm else None
    groups: dict[str, dict[str, float]] = {}
    for q, ordinals in enumerate(phase_ranges(r_it)):
        key = kinds[q]
        if host is not None:
            touched = profile_reuse.phase_chunks(r_it["phases"]["touch"][q]) & host
            key += ", touches host chunks" if touched else ", resident only"
        g = groups.setdefault(key, {"phases": 0, "excess_kernel_s": 0.0, "idle_s": 0.0, "kernel_s": 0.0})
        wall = r_it["phases"]["end_ns"][q] - r_it["phases"]["start_ns"][q]
        kernel = sum(r_ns[o] for o in ordinals)
        g["phases"] += 1
        g["kernel_s"] += kernel / NS
        g["excess_kernel_s"] += sum(r_ns[o] - c_ns[o] for o in ordinals) / NS
        g["idle_s"] += max(wall - kernel, 0) / NS
    out["phases_by_kind"] = {k: {f: round(v, 4) for f, v in g.items()} for k, g in sorted(groups.items())}
    if host is not None:
        out["host_chunks"] = len(host)
    return out


def render(out: dict) -> str:
    lines = [f"{name}: {t['kernels']} kernels, span {t['span_s']:.3f} s, kernels {t['kernel_s']:.3f} s, "
             f"idle {t['idle_s']:.3f} s" for name, t in (("run", out["run"]), ("control", out["control"]))]
    if not out["same_sequence"]:
        return "\n".join(lines + ["the kernel sequences differ: no kernel-by-kernel comparison"])
    lines.append("kernels with the most time over the control's:")
    lines += [f"  {k['excess_s']:+8.3f} s  {k['run_s']:8.3f} vs {k['control_s']:8.3f} s  x{k['launches']:<5} "
              f"{k['name'][:90]}" for k in out["kernels_by_excess"]]
    lines.append("the run's phases by kind:")
    lines += [f"  {k}: {g['phases']:.0f} phases, kernels {g['kernel_s']:.3f} s ({g['excess_kernel_s']:+.3f} s over "
              f"the control), idle {g['idle_s']:.3f} s" for k, g in out["phases_by_kind"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", type=Path, help="the run's *.steady.profile.json.gz")
    p.add_argument("control", type=Path, help="the control's *.steady.profile.json.gz")
    p.add_argument("--warm-up", type=Path, help="the run's warm-up *.profile.json.gz: split phases by host chunks")
    p.add_argument("--top", type=int, default=20, help="kernels listed (default 20)")
    p.add_argument("--json", action="store_true", help="print JSON (schema transit.steady-kernels/1)")
    args = p.parse_args(argv)
    try:
        run, control = replay.load_profile(args.run), replay.load_profile(args.control)
        warm = replay.load_profile(args.warm_up) if args.warm_up else None
        steady_iteration(run, args.run)
        steady_iteration(control, args.control)
        out = analyse(run, control, warm, args.top)
    except UsageError as exc:
        print(f"steady_kernels: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=1) if args.json else render(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
