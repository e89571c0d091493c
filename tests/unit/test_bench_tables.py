"""bench/tables.py (`python -m bench table`): the results tables of README.md and bench/README.md agree with the summaries."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
from bench import tables

DOCS_WITH_RESULTS = [REPO / "README.md"]


@pytest.mark.parametrize("doc", DOCS_WITH_RESULTS, ids=lambda p: str(p.relative_to(REPO)))
def test_a_results_block_agrees_with_the_summaries(doc, capsys):
    """Every results block is what its own first line's command makes of bench/results now."""
    assert tables.file_block(doc.read_text()) is not None, f"{doc.name} lost its results block"
    assert tables.main(["--check", str(doc)]) == 0, capsys.readouterr().err


def test_without_summaries_the_block_says_so(tmp_path):
    block = tables.block(directory=tmp_path)
    assert block.startswith(tables.RESULTS_BEGIN) and block.endswith(tables.RESULTS_END)
    assert "No results under the benchmark protocol yet" in block


def recorded_summary(directory: Path) -> Path:
    """A protocol summary of three real alternated rounds (tests/fixtures/bench: TRANSIT base with
    and without its recorder, model small, global batch 8, one H200 each, 138109c; native in the
    first round only)."""
    from bench import experiments, summary

    ref = experiments.System("transit-base-norec", "transit", 1, 8, 8, policy="base", model="small")
    base = experiments.System("transit-base", "transit", 1, 8, 8, policy="base", reference=ref.name, model="small")
    native = experiments.System("fsdp2-1gpu-gb8", "fsdp2", 1, 8, 8, model="small")
    records = []
    for repeat in (1, 2, 3):
        raw = json.loads(gzip.decompress(
            (REPO / f"tests/fixtures/bench/overhead-rounds-h200x2--this{repeat}.json.gz").read_bytes()))["runs"]
        for system in (native, ref, base):
            name = "native" if system is native else system.name
            if name not in raw:
                continue
            records.append({"id": f"{system.name}.r{repeat}", "system": system.name, "repeat": repeat,
                            "role": "timed", "status": "ok"}
                           | summary.compact_result(raw[name]["result"], system.settle))
    experiment = experiments.Experiment("recorded", "three recorded rounds", "nvidia-h200", (native, ref, base))
    path = directory / "recorded.json"
    path.write_text(json.dumps(summary.summary_doc(experiment, records, [], 0, {})))
    return path


def test_the_table_is_made_of_protocol_summaries_only(tmp_path):
    """The committed pre-protocol summaries never enter the table; a protocol summary does, each
    system's throughput as median [min-max] (n), and the best TRANSIT over each other system."""
    assert all(not doc.get("pre_protocol") for _, doc in tables.summaries())
    recorded_summary(tmp_path)
    made = tables.block(directory=tmp_path)
    rows = {line.split(" | ")[0][2:]: line for line in made.splitlines() if line.startswith("| ") and "---" not in line}
    assert set(rows) == {"system", "fsdp2-1gpu-gb8", "transit-base-norec", "transit-base"}
    doc = json.loads((tmp_path / "recorded.json").read_text())
    by_name = {row["name"]: row for row in doc["systems"]}
    tf = by_name["transit-base"]["tflops_per_gpu"]
    assert tf["n"] == 3 and f"| {tf['median']:.1f} [{tf['min']:.1f}-{tf['max']:.1f}] (3) |" in rows["transit-base"]
    native = by_name["fsdp2-1gpu-gb8"]
    assert native["tflops_per_gpu"]["n"] == 1
    best = max(row["tokens_per_s"]["median"] for row in doc["systems"] if row["kind"] == "transit")
    assert f"| {best / native['tokens_per_s']['median']:.2f}x |" in rows["fsdp2-1gpu-gb8"]


def test_a_changed_figure_fails_the_check(tmp_path, capsys, monkeypatch):
    recorded_summary(tmp_path)
    monkeypatch.setattr(tables, "RESULTS", tmp_path)
    made = tables.block(directory=tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{made}\n\nmore\n")
    assert tables.main(["--check", str(readme)]) == 0
    line = next(line for line in made.splitlines() if line.startswith("| transit-base |"))
    figure = line.split(" | ")[4]
    readme.write_text(readme.read_text().replace(figure, "999.9 [1.0-999.9] (3)"))
    assert tables.main(["--check", str(readme)]) == 1
    assert "differs from the summaries" in capsys.readouterr().err
    assert tables.main(["--write", str(readme)]) == 0
    assert tables.file_block(readme.read_text()) == made and readme.read_text().endswith("more\n")


def test_a_file_without_a_block_is_refused(tmp_path, capsys):
    plain = tmp_path / "plain.md"
    plain.write_text("no block\n")
    assert tables.main(["--check", str(plain)]) == 2
    assert "no <!-- results:begin --> ... <!-- results:end --> block" in capsys.readouterr().err


def test_the_suites_readme_stays_a_page():
    """Issue 54: what each experiment measures and how to run it, in at most 150 lines."""
    assert len((REPO / "bench" / "README.md").read_text().splitlines()) <= 150
