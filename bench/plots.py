"""PNG figures from the committed benchmark results (bench/collect.py files).

    python3 bench/plots.py --compare bench/results/compare-gb64-h200x2.json --policies bench/results/policies-h200.json

compare  -> STEM-tflops.png         per-GPU TFLOPS per system, no-offload baseline dashed (paper Fig. 7)
            STEM-offloaded.png      host-resident training state per GPU (paper Fig. 8)
            (STEM: the comparison file's name without .json, e.g. compare-gb64-h200x2)
policies -> policies-histogram.png  migration-size histogram per policy (paper Fig. 5)
            policies-faults-pcie.png GPU page faults and PCIe bytes per policy (paper Fig. 6)
            policies-memory.png     device memory over time per policy: NVML device used and the
                                    managed-resident bound, cap L dashed (runs with the 3-field timeline)
warmup   -> warmup-<policy>.png     TRANSIT's memory for the cap per iteration, one figure per policy,
                                    one line per comparison file (libtransit variants), cap dashed
ticks    -> ticks.png               TRANSIT_TICK_LOG files: the measured bound every 20 ms tick, one
                                    panel per file, L dashed (--limit)
Every figure names the commit and device it came from.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from collect import offloaded
from common import GIB, parse_size

from transit.figures import save_png
from transit.report.load import read_tick_log

RESULTS_DIR = Path(__file__).resolve().parent / "results"
# Display order and names; runs absent from a file are left out.
COMPARE_SYSTEMS = {
    "fsdp2-2gpu": "no offload\n(2 GPUs)",
    "transit-advise": "TRANSIT\nadvise",
    "transit-prefetch": "TRANSIT\nprefetch",
    "transit-base": "TRANSIT\nbase",
    "fsdp-cpu-mb": "FSDP2 offload\n(1 x 8)",
    "fsdp-cpu-accum": "FSDP2 offload\n(2 x 4 accum)",
    "zero-offload": "ZeRO-\nOffload",
    "zero-infinity": "ZeRO-\nInfinity",
    "fsdp2-2gpu-socket": "no offload\n(2 GPUs, sockets)",
    "transit-advise-socket": "TRANSIT advise\n(sockets)",
}
POLICIES = ("transit-base", "transit-prefetch", "transit-advise")
HIST_BINS = ("<4K", "4K-64K", "64K-1M", "1M-2M", ">2M")
COLORS = {"baseline": "#4c72b0", "transit": "#55a868", "framework": "#c44e52", "network": "#8172b2"}


def color(name: str) -> str:
    if name.endswith("socket"):
        return COLORS["network"]
    if name.startswith("transit"):
        return COLORS["transit"]
    return COLORS["baseline"] if name == "fsdp2-2gpu" else COLORS["framework"]


def provenance_note(fig: plt.Figure, doc: dict, source: Path) -> None:
    device = (doc.get("device") or {}).get("name", "unknown device")
    # A merged result (collect.py --merge) names the commits of the runs it took from other commands too.
    commits = [doc.get("git_commit") or "unknown"] + [m.get("git_commit") or "unknown" for m in doc.get("merged_runs") or []]
    label = "commit" if len(set(commits)) == 1 else "commits"
    fig.text(0.01, 0.01, f"{source.name} - {label} {', '.join(dict.fromkeys(c[:10] for c in commits))} - {device}",
             fontsize=7, color="gray")


def bar_chart(ax: plt.Axes, names: list[str], values: list[float], ylabel: str, fmt: str) -> None:
    bars = ax.bar(range(len(names)), values, color=[color(n) for n in names])
    ax.bar_label(bars, labels=[format(v, fmt) for v in values], fontsize=8)
    ax.set_xticks(range(len(names)), [COMPARE_SYSTEMS[n] for n in names], fontsize=8)
    ax.set_ylabel(ylabel)


def plot_compare(doc: dict, source: Path, out_dir: Path) -> list[Path]:
    runs = doc["runs"]
    tflops = {n: ((runs.get(n) or {}).get("result") or {}).get("tflops_per_gpu") for n in COMPARE_SYSTEMS}
    names = [n for n in COMPARE_SYSTEMS if tflops[n] is not None]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    bar_chart(ax, names, [tflops[n] for n in names], "per-GPU TFLOPS", ".0f")
    if tflops.get("fsdp2-2gpu"):
        ax.axhline(tflops["fsdp2-2gpu"], color=COLORS["baseline"], linestyle="--", linewidth=1)
    model = ((runs.get("fsdp2-2gpu") or {}).get("result") or {}).get("config", {})
    ax.set_title(f"Per-GPU TFLOPS under the same cap L, {model.get('params', 0) / 1e9:.1f}B model, "
                 f"{model.get('tokens_per_step', '?')} tokens per step")
    provenance_note(fig, doc, source)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    paths = [out_dir / f"{source.stem}-tflops.png"]
    save_png(fig, paths[0], dpi=150)
    plt.close(fig)

    sizes = {n: offloaded(runs[n]) for n in COMPARE_SYSTEMS if n in runs and not n.endswith("socket")}
    names = [n for n, v in sizes.items() if v is not None and n != "fsdp2-2gpu"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    bar_chart(ax, names, [sizes[n] / GIB for n in names], "offloaded GiB per GPU", ".1f")
    ax.set_title("Training state resident in host memory per GPU")
    provenance_note(fig, doc, source)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    paths.append(out_dir / f"{source.stem}-offloaded.png")
    save_png(fig, paths[1], dpi=150)
    plt.close(fig)
    return paths


def plot_policies(doc: dict, source: Path, out_dir: Path) -> list[Path]:
    summaries = {p: (doc["runs"].get(p) or {}).get("transit") for p in POLICIES}
    names = [p for p in POLICIES if summaries[p]]
    labels = [p.removeprefix("transit-") for p in names]
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, name in enumerate(names):
        counts = [summaries[name]["histogram"].get(b, 0) for b in HIST_BINS]
        ax.bar([x + i * width for x in range(len(HIST_BINS))], counts, width, label=labels[i])
    ax.set_xticks([x + width * (len(names) - 1) / 2 for x in range(len(HIST_BINS))], HIST_BINS)
    ax.set_yscale("symlog")
    ax.set_xlabel("migration size")
    ax.set_ylabel("migrations (HtoD + DtoH)")
    ax.set_title("Migration sizes per policy")
    ax.legend()
    provenance_note(fig, doc, source)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    paths = [out_dir / "policies-histogram.png"]
    save_png(fig, paths[0], dpi=150)
    plt.close(fig)

    fig, (faults_ax, bytes_ax) = plt.subplots(1, 2, figsize=(11, 4.5))
    faults_ax.bar(labels, [summaries[n]["gpu_page_faults"] or 0 for n in names], color=COLORS["transit"])
    faults_ax.set_ylabel("GPU page faults")
    faults_ax.set_title("GPU page faults")
    kinds = (("htod_bytes", "HtoD"), ("dtoh_bytes", "DtoH"), ("remote_map_bytes", "remote map (zero-copy)"))
    width = 0.8 / len(kinds)
    for i, (key, label) in enumerate(kinds):
        bytes_ax.bar([x + i * width for x in range(len(names))],
                     [(summaries[n][key] or 0) / GIB for n in names], width, label=label)
    bytes_ax.set_xticks([x + width for x in range(len(names))], labels)
    bytes_ax.set_ylabel("GiB over the run")
    bytes_ax.set_title("PCIe traffic")
    bytes_ax.legend()
    provenance_note(fig, doc, source)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    paths.append(out_dir / "policies-faults-pcie.png")
    save_png(fig, paths[1], dpi=150)
    plt.close(fig)
    return paths + plot_policies_memory(doc, source, out_dir)


def memory_timeline(run: dict) -> list[list] | None:
    """Rank 0's (t, NVML device used, managed-resident bound) samples; None for runs that predate the bound."""
    ranks = (((run.get("result") or {}).get("memory") or {}).get("per_rank")) or []
    timeline = ranks[0].get("device_used_timeline") if ranks else None
    if not timeline or len(timeline[0]) < 3 or all(sample[2] is None for sample in timeline):
        return None
    return timeline


def plot_policies_memory(doc: dict, source: Path, out_dir: Path) -> list[Path]:
    timelines = {p: memory_timeline(doc["runs"].get(p) or {}) for p in POLICIES}
    names = [p for p in POLICIES if timelines[p]]
    if not names:
        return []
    fig, ax = plt.subplots(figsize=(10, 5))
    limits = set()
    for i, name in enumerate(names):
        t, used, bound = zip(*timelines[name])
        label, line_color = name.removeprefix("transit-"), f"C{i}"
        ax.plot(t, [u / GIB for u in used], color=line_color, label=f"{label}: NVML device used")
        ax.plot(t, [b / GIB if b is not None else float("nan") for b in bound], color=line_color,
                linestyle=":", label=f"{label}: managed data on the device (upper bound)")
        limits.add((doc["runs"][name].get("transit") or {}).get("limit_bytes"))
    for limit in sorted(x for x in limits if x):
        ax.axhline(limit / GIB, color="black", linestyle="--", linewidth=1, label=f"L = {limit / GIB:.0f} GiB")
    ax.set_xlabel("seconds since the monitor started")
    ax.set_ylabel("GiB")
    # NVML's device reading keeps the GPU chunks of evicted managed pages; the bound does not.
    ax.set_title("Device memory per policy: NVML device used vs PyTorch reserved - managed bytes on the host",
                 fontsize=10)
    ax.legend(fontsize=8)
    provenance_note(fig, doc, source)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path = out_dir / "policies-memory.png"
    save_png(fig, path, dpi=150)
    plt.close(fig)
    return [path]


def transit_system(doc: dict) -> str | None:
    """The TRANSIT run of a comparison result with one (transit-advise, -base or -prefetch)."""
    return next((name for name in doc["runs"] if name.startswith("transit-")), None)


def plot_warmup(docs: dict[Path, dict], out_dir: Path) -> list[Path]:
    """One figure per TRANSIT policy (warmup-<policy>.png), one line per comparison: the bound plus
    the process's memory outside managed data, per iteration (a run cut before its summary, with
    no such figures, is left out)."""
    by_system: dict[str, dict[Path, dict]] = {}
    for source, doc in docs.items():
        if (system := transit_system(doc)) is not None:
            by_system.setdefault(system, {})[source] = doc
    return [plot_warmup_of(system, runs, out_dir) for system, runs in by_system.items()]


def plot_warmup_of(system: str, docs: dict[Path, dict], out_dir: Path) -> Path:
    policy = system.removeprefix("transit-")
    fig, ax = plt.subplots(figsize=(9, 4.5))
    caps, plotted = set(), []
    for source, doc in docs.items():
        cap = (doc["summary"].get("memory_vs_cap") or {}).get(system) or {}
        points = cap.get("transit_bound_peak_by_iteration_bytes")
        if not points:
            continue
        tflops = (doc["runs"][system].get("result") or {}).get("tflops_per_gpu")
        label = f"{source.stem} ({doc.get('git_commit', '?')[:7]}): {tflops:.0f} TFLOPS" if tflops else source.stem
        ax.plot([i for i, _ in points], [b / GIB for _, b in points], marker="o", label=label)
        caps.add(round(cap["cap_bytes"] / GIB, 1))  # runs differ by MBs outside managed data
        plotted.append(source.name)
    for cap in sorted(caps):
        ax.axhline(cap, color="black", linestyle="--", linewidth=1, label=f"cap {cap:.1f} GiB")
    after = "advise holds still" if policy == "advise" else "the launches evict by the profile"
    ax.set_xlabel(f"iteration (4 warm-up iterations, then {after})")
    ax.set_ylabel("GiB: managed data on the device (bound) + the rest")
    ax.set_title(f"TRANSIT {policy} at the same cap: per-iteration peak, libtransit variants")
    ax.legend(fontsize=8)
    device = (next(iter(docs.values())).get("device") or {}).get("name", "unknown device")
    fig.text(0.01, 0.01, f"{', '.join(plotted)} - {device}", fontsize=7, color="gray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path = out_dir / f"warmup-{policy}.png"
    save_png(fig, path, dpi=150)
    plt.close(fig)
    return path


def plot_ticks(paths: list[Path], limit: int, out_dir: Path) -> list[Path]:
    """One panel per tick log: what libtransit measured every tick, against L."""
    fig, axes = plt.subplots(len(paths), 1, figsize=(10, 2.6 * len(paths)), sharex=True, squeeze=False)
    for ax, path in zip(axes[:, 0], paths):
        read = read_tick_log(path).readings()
        ax.plot([t for t, _ in read], [b / GIB for _, b in read], linewidth=0.7,
                label="bound (managed bytes - host-resident ones)")
        ax.axhline(limit / GIB, color="black", linestyle="--", linewidth=1, label=f"L {limit / GIB:.1f} GiB")
        ax.set_title(path.name, fontsize=9)
        ax.set_ylabel("GiB")
        ax.legend(fontsize=7, loc="lower right")
    axes[-1, 0].set_xlabel("seconds since libtransit started")
    fig.tight_layout()
    path = out_dir / "ticks.png"
    save_png(fig, path, dpi=150)
    plt.close(fig)
    return [path]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--compare", type=Path, help="comparison result (bench/collect.py compare)")
    p.add_argument("--policies", type=Path, help="policies result (bench/collect.py policies)")
    p.add_argument("--warmup", type=Path, nargs="+", default=[],
                   help="comparison results with a TRANSIT run each (libtransit variants): warmup-<policy>.png")
    p.add_argument("--ticks", type=Path, nargs="+", default=[], help="TRANSIT_TICK_LOG CSV files")
    p.add_argument("--limit", type=parse_size, help="the runs' TRANSIT_MEM_LIMIT, for --ticks (e.g. 25.5G)")
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    if not (args.compare or args.policies or args.warmup or args.ticks):
        p.error("give --compare, --policies, --warmup and/or --ticks")
    if args.ticks and not args.limit:
        p.error("--ticks needs --limit, the runs' TRANSIT_MEM_LIMIT (e.g. --limit 25.5G)")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    if args.compare:
        written += plot_compare(json.loads(args.compare.read_text()), args.compare, args.out_dir)
    if args.policies:
        written += plot_policies(json.loads(args.policies.read_text()), args.policies, args.out_dir)
    if args.warmup:
        written += plot_warmup({path: json.loads(path.read_text()) for path in args.warmup}, args.out_dir)
    if args.ticks:
        written += plot_ticks(args.ticks, args.limit, args.out_dir)
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
