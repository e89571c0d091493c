"""bench/tables.py (`python -m bench table`): the results tables of README.md and bench/README.md agree with the summaries."""

from __future__ import annotations

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


def test_a_changed_figure_fails_the_check(tmp_path, capsys):
    """The earlier global-batch-8 comparison, labelled pre-protocol: advise's 76.4 TFLOPS is 0.51x
    ZeRO-Offload's 148.9, and the table says so; a README with another figure fails the check."""
    made = tables.block(pre_protocol=True, only=["compare-gb8-h200x2.summary"])
    assert "(pre-protocol: one run per system)" in made
    zero_offload = next(line for line in made.splitlines() if line.startswith("| zero-offload |"))
    assert "| 148.9 [148.9-148.9] (1) | 0.51x |" in zero_offload
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{made}\n\nmore\n")
    assert tables.main(["--check", str(readme)]) == 0
    readme.write_text(readme.read_text().replace("0.51x", "0.99x"))
    assert tables.main(["--check", str(readme)]) == 1
    assert "differs from the summaries" in capsys.readouterr().err
    assert tables.main(["--write", str(readme)]) == 0  # --write without --pre-protocol: the protocol's block
    assert tables.file_block(readme.read_text()) == tables.block() and readme.read_text().endswith("more\n")


def test_a_file_without_a_block_is_refused(tmp_path, capsys):
    plain = tmp_path / "plain.md"
    plain.write_text("no block\n")
    assert tables.main(["--check", str(plain)]) == 2
    assert "no <!-- results:begin --> ... <!-- results:end --> block" in capsys.readouterr().err
