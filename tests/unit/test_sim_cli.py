"""`transit simulate` and `transit simulate sweep` end to end, through their argument parsers."""

import argparse
import json
from pathlib import Path

import pytest

from transit.errors import UsageError
from transit.sim import register

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sim"


def run(argv, capsys):
    parser = argparse.ArgumentParser(prog="transit")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    code = args.func(args)
    return code, capsys.readouterr().out


def test_trace_file_json_reports_bad_rows(capsys):
    code, out = run(["simulate", "--trace", str(FIXTURES / "acme_seren.csv"), "--racks", "4",
                     "--gpus-per-node", "8", "--reduction", "0.5", "--json"], capsys)
    assert code == 0
    document = json.loads(out)
    assert document["schema"] == "transit.sim/1"
    assert document["trace"]["bad_rows"] == 1
    assert document["trace"]["filtered_rows"] == 2
    assert document["jobs"] == 4 and document["eligible_jobs"] == 2      # 16 and 64 GPUs
    # the 64-GPU job needs 2 racks as is and 1 rack at half the nodes
    assert document["transitions"]["inter_to_intra"] == 1
    assert document["change_pct"]["inter-rack traffic"] == -100.0


def test_table_output_names_bad_rows(capsys):
    code, out = run(["simulate", "--trace", str(FIXTURES / "sacct_epoch.txt"), "--racks", "2"], capsys)
    assert code == 0
    assert "1 bad rows not read" in out and "job step row" in out
    assert "inter-rack traffic" in out


def test_synthetic_default_with_plot_and_saved_trace(capsys, tmp_path):
    plot, saved = tmp_path / "fig.png", tmp_path / "trace.json"
    code, out = run(["simulate", "--workload", "kalos", "--jobs", "800", "--racks", "8", "--json",
                     "--plot", str(plot), "--save-trace", str(saved), "--factors", str(FIXTURES / "factors.json")],
                    capsys)
    document = json.loads(out)
    assert code == 0 and plot.stat().st_size > 10_000
    assert document["calibration_max_gap_pp"]["gpu_count"] >= 0
    assert document["setup"]["factors"]["inter_to_intra_speedup"] == 0.37
    # replaying the saved trace gives the same result
    _, again = run(["simulate", "--trace", str(saved), "--racks", "8", "--json",
                    "--factors", str(FIXTURES / "factors.json")], capsys)
    assert json.loads(again)["change_pct"] == document["change_pct"]


def test_sweep_matches_single_studies(capsys, tmp_path):
    markdown = tmp_path / "table.md"
    code, out = run(["simulate", "sweep", "--workload", "kalos", "--jobs", "600", "--racks", "8",
                     "--gpus-per-node", "4,8", "--reductions", "0.25,0.5", "--processes", "2", "--json",
                     "--markdown", str(markdown)], capsys)
    assert code == 0
    studies = json.loads(out)["studies"]
    assert [(s["setup"]["gpus_per_node"], s["setup"]["reduction"]) for s in studies] == [
        (4, 0.25), (4, 0.5), (8, 0.25), (8, 0.5)]
    _, single = run(["simulate", "--workload", "kalos", "--jobs", "600", "--racks", "8",
                     "--gpus-per-node", "8", "--reduction", "0.25", "--json"], capsys)
    assert json.loads(single)["change_pct"] == studies[2]["change_pct"]
    assert markdown.read_text().count("\n") == 2 + 4


@pytest.mark.parametrize(("argv", "message"), [
    (["simulate", "--format", "acme"], "--format needs --trace"),
    (["simulate", "--trace", str(FIXTURES / "helios.csv"), "--jobs", "5"], "--jobs sizes a synthetic trace"),
    (["simulate", "--factors", str(FIXTURES / "helios.csv")], "cannot read JSON"),
    (["simulate", "--slowdown", "1.5"], "intra_to_inter_slowdown"),
    (["simulate", "sweep", "--placements", "random"], "--placements 'random'"),
])
def test_bad_input_is_a_usage_error(argv, message, capsys):
    with pytest.raises(UsageError, match=message):
        run(argv, capsys)


def test_reduction_out_of_range_is_rejected(capsys):
    with pytest.raises(SystemExit):
        run(["simulate", "--reduction", "1.0"], capsys)
    assert "must be in [0, 1)" in capsys.readouterr().err


def test_sweep_over_placements_and_slowdowns(capsys):
    code, out = run(["simulate", "sweep", "--workload", "kalos", "--jobs", "300", "--racks", "8,16",
                     "--gpus-per-node", "8", "--reductions", "0.5", "--placements", "pack,spread",
                     "--slowdowns", "0,0.55", "--processes", "2", "--json"], capsys)
    assert code == 0
    setups = [(s["setup"]["racks"], s["setup"]["placement"], s["setup"]["factors"]["intra_to_inter_slowdown"])
              for s in json.loads(out)["studies"]]
    assert setups == [(r, p, y) for r in (8, 16) for p in ("pack", "spread") for y in (0.0, 0.55)]
