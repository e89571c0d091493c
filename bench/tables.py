"""README.md's results table, generated from the benchmark protocol's summaries only.

    python -m bench table                       the block, from the protocol's summaries in bench/results
    python -m bench table --check README.md     exit 1 if the file's block is not that block
    python -m bench table --write README.md     replace the file's block with it
    python -m bench table --only scale-in-4to2-gb8     these summaries only (file names without .json)
    python -m bench table --brief ...           device, model and protocol a line each, no commits

The block lies between RESULTS_BEGIN and RESULTS_END; its first line names the command that made
it, which --check runs again. Each experiment's complete summary (transit.bench-summary/1, not
pre-protocol, not a micro-batch search, not a correctness check) gets one table: per system its
throughput as median [min-max] (n) over its repeats (TFLOPS per GPU; job tokens/s, the only
figure of emulated nodes sharing a GPU), the best TRANSIT system's median over its own at the same
tokens per step, its peak by its own measure and by NVML against its budget (no verdict: the
numbers), PCIe GiB per step, and its losses against the reference. Without any summary the block
says so in one line.
"""

from __future__ import annotations

import json
import shlex
import statistics
import sys
from pathlib import Path

from transit import paths
from transit.cli import OneLineParser
from transit.errors import UsageError

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench/results"
SUMMARY_SCHEMA = "transit.bench-summary/1"
RESULTS_BEGIN, RESULTS_END = "<!-- results:begin -->", "<!-- results:end -->"
COMMAND = "python -m bench table"
GIB = 1 << 30
HEADER = ("system", "ranks", "micro-batch", "tokens/step", "TFLOPS/GPU median [min-max] (n)",
          "tokens/s median [min-max] (n)", "best TRANSIT / this", "peak own / NVML / budget GiB",
          "PCIe GiB/step in / out / zero-copy", "losses")


def summaries(only: list[str] | None = None, directory: Path | None = None) -> list[tuple[Path, dict]]:
    """The protocol's complete result summaries (in bench/results unless `directory`), by name, or
    those named in `only`, in that order."""
    out = []
    directory = directory or RESULTS
    files = [directory / f"{name}.json" for name in only] if only else sorted(directory.glob("*.json"))
    for path in files:
        if not path.is_file():
            raise UsageError(f"--only {path.stem[:80]!r}: no summary {path}; give file names of bench/results without .json")
        doc = json.loads(path.read_text())
        if (doc.get("schema") == SUMMARY_SCHEMA and not doc.get("pre_protocol") and doc.get("complete")
                and not doc.get("search") and not doc.get("correctness")):
            out.append((path, doc))
    return out


def _gib(value) -> str:
    return f"{value / GIB:.1f}" if value else "-"


def _spread(stat: dict, fmt: str) -> str:
    return f"{stat['median']:{fmt}} [{stat['min']:{fmt}}-{stat['max']:{fmt}}] ({stat['n']})" if stat["median"] else "- (0)"


def _best_transit(doc: dict) -> dict[int, float]:
    """The best TRANSIT system's median tokens/s per tokens per step in one summary."""
    best: dict[int, float] = {}
    for row in doc["systems"]:
        median = (row.get("tokens_per_s") or {}).get("median")
        if row.get("kind") == "transit" and median:
            best[row["tokens_per_step"]] = max(best.get(row["tokens_per_step"], 0.0), median)
    return best


def row_cells(row: dict, best: dict[int, float]) -> tuple[str, ...]:
    # emulated nodes share one GPU: their per-GPU TFLOPS mean nothing
    tflops = "-" if row.get("emulated_nodes") else _spread(row["tflops_per_gpu"], ".1f")
    tokens = row.get("tokens_per_s") or {"median": None}
    mine = best.get(row["tokens_per_step"])
    ratio = f"{mine / tokens['median']:.2f}x" if mine and tokens["median"] and row.get("kind") != "transit" else "-"
    budget = row.get("budget_bytes")
    # NVML reads the whole GPU: with emulated nodes, every rank's memory and PCIe bytes together
    shared = bool(row.get("emulated_nodes"))
    nvml = "-" if shared else _gib(row.get("peak_nvml_bytes"))
    peaks = f"{_gib(row.get('peak_own_bytes'))} / {nvml} / {_gib(budget)}"
    pcie = {} if shared and row.get("kind") != "transit" else row.get("pcie_bytes_per_step") or {}
    traffic = " / ".join(_gib(pcie.get(k)) if pcie.get(k) is not None and not (shared and k == "zero_copy") else "-"
                         for k in ("htod", "dtoh", "zero_copy"))
    losses = row.get("losses") or {}
    verdict = {True: "bitwise equal", False: "differ", None: "-"}[losses.get("all_bitwise_equal")]
    last = [c["last_abs_diff"] for c in losses.get("checks", []) if "last_abs_diff" in c]
    if losses.get("all_bitwise_equal") is False and last:  # how far an inexact update (ZenFlow) ends up
        verdict += f" by {statistics.median(last):.3f} at the last step"
    if losses.get("checks"):
        verdict += f" ({losses['reference'].split(' ')[0]})"
    nodes = row.get("emulated_nodes")
    ranks = f"{row['ranks']} ({nodes} node{'s' if nodes > 1 else ''})" if nodes else str(row["ranks"])
    return (row["name"], ranks, str(row["micro_batch"]), f"{row['tokens_per_step']:,}", tflops, _spread(tokens, ",.0f"),
            ratio, peaks, traffic, verdict)


def _model_line(doc: dict) -> str:
    """The models of a summary's systems, by name and size (bench/model.py)."""
    from bench.model import config_by_name, count_params  # imports torch: only for --brief
    names = sorted({row["model"] for row in doc["systems"] if row.get("model")})
    described = []
    for name in names:
        cfg = config_by_name(name)
        described.append(f"`{name}`, {count_params(cfg)['total'] / 1e9:.1f}B parameters ({cfg.n_layers} layers of "
                         f"width {cfg.dim}, sequence {cfg.seq_len})")
    return "; ".join(described) or "-"


def table(path: Path, doc: dict, brief: bool = False) -> list[str]:
    commits = ", ".join(c[:7] for c in doc.get("git_commits", [])) or "-"
    devices = ", ".join(sorted({d.get("name", "?") for d in doc.get("devices") or [] if d})) or "-"
    hosts = "" if doc.get("same_host", True) else ", several hosts"
    if brief:
        lines = [f"**{doc['experiment']}**: {doc.get('claim', '')} (`bench/results/{path.name}`).", "",
                 f"- device: {devices}{hosts}", f"- model: {_model_line(doc)}",
                 (f"- protocol: {doc['protocol']['repeats']} alternated repeats per system, the settle rule, "
                 f"fair memory (bench/README.md)"), ""]
    else:
        lines = [(f"**{doc['experiment']}**: {doc.get('claim', '')}. `bench/results/{path.name}`, commit "
                  f"{commits}, {devices}{hosts}."), ""]
    lines += ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    best = _best_transit(doc)
    lines += ["| " + " | ".join(row_cells(row, best)) + " |" for row in doc["systems"]]
    return lines + [""]


def block(only: list[str] | None = None, directory: Path | None = None, brief: bool = False) -> str:
    found = summaries(only, directory)
    flags = (" --brief" if brief else "") + (" --only " + " ".join(only) if only else "")
    lines = [RESULTS_BEGIN, f"<!-- generated by `{COMMAND}{flags}` from bench/results: edit those, not this -->",
             ""]
    if not found:
        lines += ["No results under the benchmark protocol yet: `python -m bench run` writes them (bench/README.md).",
                  ""]
    for path, doc in found:
        lines += table(path, doc, brief)
    return "\n".join(lines + [RESULTS_END])


def command_of(block_text: str) -> list[str]:
    """The tables.py arguments a block was generated with (its first line)."""
    header = block_text.splitlines()[1]
    start, end = header.find(f"`{COMMAND}"), header.rfind("`")
    return shlex.split(header[start + len(COMMAND) + 1:end]) if 0 <= start < end else []


def file_block(text: str) -> str | None:
    """The file's RESULTS_BEGIN..RESULTS_END block, markers included, or None."""
    start, end = text.find(RESULTS_BEGIN), text.find(RESULTS_END)
    return text[start:end + len(RESULTS_END)] if start >= 0 and end > start else None


def _rewritable(text: str) -> Path:
    """A text file this user can read and write back."""
    paths.output_file(text)
    return paths.text_path(text)


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog=COMMAND, description=__doc__.split("\n")[0])
    action = p.add_mutually_exclusive_group()
    action.add_argument("--check", type=paths.text_path, metavar="FILE", help="exit 1 if FILE's block differs")
    action.add_argument("--write", type=_rewritable, metavar="FILE", help="replace FILE's block")
    p.add_argument("--brief", action="store_true", help="device, model and protocol a line each; no commits")
    p.add_argument("--only", nargs="+", metavar="NAME", help="these summaries (bench/results/NAME.json), in this order")
    args = p.parse_args(argv)
    generated = block(args.only, brief=args.brief)
    target = args.check or args.write
    if target is None:
        print(generated)
        return 0
    text = target.read_text()
    current = file_block(text)
    if current is None:
        print(f"{target}: no {RESULTS_BEGIN} ... {RESULTS_END} block; put `python -m bench table`'s output there",
              file=sys.stderr)
        return 2
    if args.check:
        made_with = p.parse_args(command_of(current))  # the block is checked against what made it
        generated = block(made_with.only, brief=made_with.brief)
        if current != generated:
            print(f"{target}: the results block differs from the summaries; `python -m bench table --write "
                  f"{target}` writes it", file=sys.stderr)
            return 1
        return 0
    target.write_text(text.replace(current, generated))
    return 0


if __name__ == "__main__":
    sys.exit(main())
