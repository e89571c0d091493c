"""The planner's commands: `transit plan` (its table, paragraphs and plot), `transit launch` and
`transit submit` (whose work is in launch.py). Each parser is built here; the planning is planner.py's."""

from __future__ import annotations

import argparse
import json
import math
import textwrap

from rich.table import Table

from transit import _native, paths
from transit.errors import UsageError
from transit.figures import save_png
from transit.plan import bounds
from transit.plan.arguments import add_count_arguments, add_model_arguments, config_from_args
from transit.plan.launch import launch_main, submit_main
from transit.plan.planner import (
    DEFAULT_POLICY,
    GIB,
    HBM_SAFETY_MARGIN,
    MAX_BATCH_OVERSHOOT,
    POLICY_TRANSFER_FACTOR,
    plan,
)
from transit.tables import as_text


def register_plan(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan", help="plan node count and batch settings for a scaled-in job",
        description="For the requested node count and its candidates (by default 25% and 50% fewer nodes and "
                    "the smallest count that keeps 80% of the per-GPU throughput): memory per GPU, spill, DP "
                    "degree, the global batch common to all candidates and its gradient accumulation, and the "
                    "predicted step time and tokens per second per GPU under the TRANSIT policy.")
    add_model_arguments(parser)
    add_count_arguments(parser)
    parser.add_argument("--policy", metavar="POLICY", default=DEFAULT_POLICY,
                        help=f"TRANSIT policy the step times are predicted for: {', '.join(POLICY_TRANSFER_FACTOR)} "
                             f"(calibrated) or another of libtransit's (default {DEFAULT_POLICY})")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON (every figure)")
    parser.add_argument("--wide", action="store_true", help="every column, wider than 80 characters")
    parser.add_argument("--plot", metavar="PNG", type=paths.output_file, help="also draw memory per GPU and efficiency per node count")
    parser.set_defaults(func=main)


def register_launch(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "launch", help="start torchrun/TorchTitan across the current allocation with re-planned batch settings",
        description="Inside a Slurm allocation: read its nodes and GPUs (one of $TRANSIT_CANDIDATES when "
                    "transit submit planned them), derive DP degree and gradient accumulation for the fixed "
                    "global batch, export TRANSIT_GLOBAL_BATCH, TRANSIT_LOCAL_BATCH "
                    "and TRANSIT_GRAD_ACCUM, and run srun torchrun with the rendezvous on the first node.")
    parser.add_argument("--global-batch", metavar="SEQUENCES",
                        help="sequences per optimizer step, fixed whatever the node count "
                             "(default: $TRANSIT_GLOBAL_BATCH, which `transit submit` sets)")
    parser.add_argument("--local-batch", metavar="N",
                        help="sequences per rank per micro-batch (default $TRANSIT_LOCAL_BATCH, else 1)")
    parser.add_argument("--tp", metavar="N", help="tensor parallel degree (default $TRANSIT_TP, else 1)")
    parser.add_argument("--pp", metavar="N", help="pipeline parallel degree (default $TRANSIT_PP, else 1)")
    parser.add_argument("--seq-len", metavar="N",
                        help="tokens per sequence: passed to TorchTitan (needed where it counts batches in tokens); "
                             "refused without --torchtitan")
    parser.add_argument("--nproc-per-node", "--gpus-per-node", dest="nproc_per_node", metavar="N",
                        help="processes per node (default: SLURM_GPUS_ON_NODE, else CUDA_VISIBLE_DEVICES); "
                             "required for CPU runs")
    framework = parser.add_mutually_exclusive_group()
    framework.add_argument("--framework", choices=("torchrun", "torchtitan"), default="torchrun",
                           help="torchrun SCRIPT ARGS, or torchrun -m torchtitan.train ARGS + batch flags")
    framework.add_argument("--torchtitan", dest="framework", action="store_const", const="torchtitan",
                           help="same as --framework torchtitan")
    parser.add_argument("--rdzv-port", metavar="PORT",
                        help="rendezvous port on the first node, 1024-65535 (default: one free there, asked of "
                             "that node)")
    parser.add_argument("--nodes", metavar="N", help="node count for a --dry-run preview outside an allocation")
    parser.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    parser.add_argument("--json", action="store_true", help="with --dry-run: print the launch plan as JSON")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="training script and its arguments")
    parser.set_defaults(func=launch_main)

    parser = subparsers.add_parser(
        "submit", help="sbatch a job on fewer nodes, with TRANSIT, after planning its global batch",
        description="Plan the candidate node counts (--nodes and --scale-in, --candidates, or the plan's default "
                    "candidates with --to-min) and one global batch for all of them; refuse if it strays "
                    "more than 25% from the target; else sbatch --transit on the smallest count with the batch "
                    "settings exported for `transit launch`.")
    counts = add_count_arguments(parser)
    counts.add_argument("--to-min", action="store_true",
                        help="the plan's default candidates (25%% and 50%% fewer nodes, the smallest count keeping "
                             "80%% of the per-GPU throughput), submitted on the smallest (needs a model)")
    parser.add_argument("--transit", choices=(*_native.policies(), "off"), default="advise",
                        help="TRANSIT policy (default advise)")
    parser.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                        help="extra sbatch argument (repeatable), e.g. --sbatch-arg=--time=01:00:00")
    parser.add_argument("--dry-run", action="store_true", help="print the sbatch command instead of running it")
    parser.add_argument("--json", action="store_true")
    add_model_arguments(parser)
    parser.add_argument("script", help="batch script (sbatch's: its first line #!...)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    parser.set_defaults(func=submit_main)


def register(subparsers: argparse._SubParsersAction) -> None:
    register_plan(subparsers)
    register_launch(subparsers)


def _gib(value: int) -> str:
    return f"{value / GIB:.1f}"


def _counts(counts: list[int]) -> str:
    return " -> ".join(map(str, counts)) + (" node" if counts == [1] else " nodes")


TEXT_WIDTH = 80  # the table and every paragraph of the plan fit a terminal of this width


# (header, legend, value of a candidate row); the table has the first ones, --wide all of them
def _predicted(value: float | None, form: str) -> str:
    if value is None:
        return "-"
    if form == ".3g" and value >= 100:  # seconds: whole ones up to a million, then as short as they go
        return format(value, ",.0f" if value < 10**6 else ".2g")
    return format(value, form)


COLUMNS = [
    ("nodes", None, lambda c: str(c["nodes"])),
    ("GPUs", None, lambda c: str(c["gpus"])),
    ("DP", "data-parallel degree", lambda c: str(c["dp"])),
    ("memory", "where one GPU's data lives (within margin: fits by less than the safety margin)",
     lambda c: c["verdict"]),
    ("spill", "GiB per GPU beyond HBM, held in host DRAM", lambda c: _gib(c["spilled_bytes"])),
    ("host", "host DRAM used, GiB per node", lambda c: _gib(c["host_bytes_per_node"])),
    ("accum", "gradient accumulation steps", lambda c: str(c["grad_accum"])),
    ("step", "predicted seconds per optimizer step", lambda c: _predicted(c["step_s"], ".3g")),
    ("tok/s", "predicted tokens per second per GPU", lambda c: _predicted(c["tokens_per_s_per_gpu"], ".0f")),
    ("eff", "compute share of the step", lambda c: _predicted(c["efficiency"], ".0%")),
]
WIDE_COLUMNS = [
    ("states", "model states, GiB per GPU", lambda c: _gib(c["model_state_bytes"])),
    ("activ", "activations, GiB per GPU", lambda c: _gib(c["activation_bytes"])),
    ("need", "device bytes needed, GiB per GPU", lambda c: _gib(c["device_bytes_needed"])),
    ("gathered", "FSDP units in flight, GiB per GPU", lambda c: _gib(c["memory"]["gathered"])),
    ("framework", "CUDA context, NCCL, workspaces, GiB per GPU", lambda c: _gib(c["memory"]["framework"])),
    ("compute_s", "compute seconds per step", lambda c: f"{c['compute_s']:.3g}"),
    ("pcie_s", "seconds per step the spill adds", lambda c: _predicted(c["pcie_s"], ".3g")),
    ("global", "global batch, sequences", lambda c: str(c["global_batch"])),
]


def describe(result: dict) -> str:
    """One paragraph naming the model, the training settings and the node."""
    model, training, cluster = result["model"], result["training"], result["cluster"]
    active = f" ({model['active_params'] / 1e9:.1f}B active)" if model["experts"] else ""
    text = (f"{model['name']}: {model['total_params'] / 1e9:.1f}B parameters{active}, {training['precision']}, "
            f"TP {training['tp']} PP {training['pp']} {training['data_parallel']}, local batch "
            f"{training['local_batch']} x {training['seq_len']} tokens. Nodes of {cluster['gpus_per_node']} GPUs: "
            f"HBM {_gib(cluster['hbm_bytes'])} GiB per GPU, host DRAM {_gib(cluster['host_dram_bytes'])} GiB, "
            f"PCIe {cluster['pcie_bytes_per_s'] / 1e9:g} GB/s, {cluster['sustained_flops'] / 1e12:g} TFLOPS. "
            f"TRANSIT policy {result['policy']}.")
    return textwrap.fill(text, TEXT_WIDTH)


def render(result: dict, wide: bool = False) -> str:
    """The plan as text: what is planned, the candidate table (80 columns unless wide), its legend, the verdicts."""
    columns = COLUMNS + (WIDE_COLUMNS if wide else [])
    grid = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False, header_style="")
    for header, _, _ in columns:
        grid.add_column(header, justify="left" if header == "memory" else "right", no_wrap=True)
    for candidate in result["candidates"]:
        grid.add_row(*(value(candidate) for _, _, value in columns))
    table = as_text(grid)
    legend = "; ".join(f"{header}: {legend}" for header, legend, _ in columns if legend)
    return "\n\n".join([describe(result), table, textwrap.fill(legend, TEXT_WIDTH), *verdicts(result)])


def verdicts(result: dict) -> list[str]:
    """What the plan concludes, in paragraphs that cannot be read against each other."""
    seq_len = result["training"]["seq_len"]
    target = (f"{result['target_global_tokens']:,} tokens = {result['target_global_batch']:,} sequences"
              if result["target_global_tokens"] else f"{result['target_global_batch']:,} sequences"
              if result["target_given"] else
              f"one micro-batch per rank on {result['requested_nodes']} nodes (no target given)")
    batch = (f"Global batch: {result['global_batch']:,} sequences ({result['global_tokens']:,} tokens of {seq_len}) "
             f"on {_counts(result['counts'])}, the smallest multiple of {result['batch_lcm']:,} (the least common "
             f"multiple of local batch x DP) at or above the target of {target}"
             + (f": {result['overshoot']:+.1%}." if result["target_given"] else "."))
    paragraphs = [textwrap.fill(batch, TEXT_WIDTH)]
    if not result["within_overshoot"]:
        lines = [f"That misses the target by more than {MAX_BATCH_OVERSHOOT:.0%} (exit code 1). " + result["advice"]]
        if result["proposals"]:
            lines.append(f"Nearest candidate sets within {MAX_BATCH_OVERSHOOT:.0%}:")
        lines += [f"  --candidates {','.join(map(str, p['counts']))}: global batch {p['global_batch']:,} "
                  f"({p['overshoot']:+.1%})" for p in result["proposals"]]
        paragraphs.append("\n".join(textwrap.fill(line, TEXT_WIDTH) for line in lines))
    native, runnable = result["min_native_nodes"], result["min_runnable_nodes"]
    margin = f"{HBM_SAFETY_MARGIN:.0%}"
    memory = (f"Memory: runs with TRANSIT on {_counts([runnable])} or more (what HBM cannot hold fits in host "
              f"DRAM); " + (f"fits in HBM alone, with a {margin} margin, on {_counts([native])} or more." if native
                            else f"needs host DRAM at every count up to {result['requested_nodes']}."))
    close = [c["nodes"] for c in result["candidates"] if c["within_margin"]]
    if close:
        memory += (f" Within margin at {','.join(map(str, close))} nodes: the prediction fits HBM by less than the "
                   f"{margin} the model has under-predicted measured peaks by; TRANSIT holds what may not fit.")
    too_big = [c["nodes"] for c in result["candidates"] if not c["runs"]]
    if too_big:
        memory += f" Too big for {','.join(map(str, too_big))} nodes: their spill does not fit in host DRAM."
    return [*paragraphs, textwrap.fill(memory, TEXT_WIDTH), textwrap.fill(step_paragraph(result), TEXT_WIDTH)]


def step_paragraph(result: dict) -> str:
    """Where the step times come from, and how far they were off on the runs they were fitted to."""
    policy, error = result["policy"], result["step_time_error"]
    if error is None:
        return (f"Step time: no committed GPU summary calibrates --policy {policy}, so step, tok/s and eff "
                f"show '-' (--wide: compute_s, the step without offload). Calibrated: "
                f"{', '.join(POLICY_TRANSFER_FACTOR)}.")
    return (f"Step time under {policy}: compute at the sustained TFLOPS plus {POLICY_TRANSFER_FACTOR[policy]:g} x "
            f"the spill's PCIe time, fitted to {error['runs']} measured {policy} runs (bench/results, one H200); "
            f"off by {error['median_error']:.0%} on the median run, {error['max_error']:.0%} at worst.")


def plot(result: dict, path: str) -> None:
    """Stacked device bytes per GPU against HBM, and the efficiency estimate, per node count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    candidates = result["candidates"]
    labels = [str(c["nodes"]) for c in candidates]
    parts = {"model states": [c["model_state_bytes"] / GIB for c in candidates],
             "activations": [c["activation_bytes"] / GIB for c in candidates],
             "framework": [c["memory"]["framework"] / GIB for c in candidates]}
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    bottom = [0.0] * len(candidates)
    for name, values in parts.items():
        ax.bar(labels, values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.axhline(result["cluster"]["hbm_bytes"] / GIB, color="black", linestyle="--", label="HBM per GPU")
    ax.set_xlabel("nodes")
    ax.set_ylabel("GiB per GPU")
    ax.set_title(f"{result['model']['name']}: global batch {result['global_batch']}")
    eff = ax.twinx()
    eff.plot(labels, [math.nan if c["efficiency"] is None else 100 * c["efficiency"] for c in candidates],
             color="tab:red", marker="o")
    eff.set_ylabel("estimated efficiency (%)", color="tab:red")
    eff.set_ylim(0, 105)
    fig.legend(loc="outside lower center", ncols=4, fontsize="small")
    save_png(fig, path, dpi=120)
    plt.close(fig)


def check_policy(policy: str) -> None:
    """A calibrated policy, or one libtransit has (asked only then: plan runs where it is not built)."""
    if policy not in POLICY_TRANSFER_FACTOR and policy not in _native.policies():
        raise UsageError(f"--policy {policy!r} is not a policy; use {', '.join(_native.policies())}")


def main(args: argparse.Namespace) -> int:
    bounds.check_args(args)
    check_policy(args.policy)
    config, cluster = config_from_args(args)
    result = plan(config, cluster, args.nodes, args.scale_in, args.candidates, args.global_batch,
                  args.global_tokens, args.policy)
    if args.plot:
        plot(result, args.plot)
    print(json.dumps(result, indent=2) if args.json else render(result, args.wide))
    return 0 if result["within_overshoot"] else 1  # the batch misses the target: a script must not go on
