"""`transit simulate` and `transit simulate sweep` end to end, through their argument parsers and
as a process (exit codes, one-line errors)."""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from transit.errors import UsageError
from transit.sim import output, synthetic
from transit.sim.cli import register

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sim"


def run(argv, capsys):
    parser = argparse.ArgumentParser(prog="transit")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    code = args.func(args)
    return code, capsys.readouterr().out


def test_trace_file_json(capsys):
    code, out = run(["simulate", "--trace", str(FIXTURES / "acme_seren.csv"), "--racks", "4",
                     "--gpus-per-node", "8", "--reduction", "0.5", "--json"], capsys)
    assert code == 0
    document = json.loads(out)
    assert document["schema"] == "transit.sim/3"
    assert document["trace"]["bad_rows"] == 1 and document["trace"]["filtered_rows"] == 2
    assert document["trace"]["bad_by_reason"] == {"gpu_num or node_num is not a number": {"count": 1, "lines": [7]}}
    jobs = document["jobs"]
    assert (jobs["compared"], jobs["eligible"], jobs["reduced"]) == (4, 2, 2)      # 16 and 64 GPUs
    # the 64-GPU job needs 2 racks as is and 1 rack at half the nodes: no byte crosses a rack any more
    assert document["transitions"]["inter_to_intra"] == 1
    assert document["comparison"]["cross_rack_bytes"]["change_pct"] == -100.0
    assert document["model"]["efficiency"]["value"] == 0.898
    assert document["validation"]["clusters"][0]["cluster"] == "acme_seren"


def test_table_output_validates_before_any_transit_figure(capsys):
    code, out = run(["simulate", "--trace", str(FIXTURES / "sacct_epoch.txt"), "--racks", "2"], capsys)
    assert code == 0
    assert "1 bad row not replayed" in out and "1 job not finished (PENDING): line 20" in out
    assert "job step row" in out
    assert out.index("validation, before any TRANSIT figure") < out.index("throughput (all)")
    assert "per-GPU efficiency under reduction: 0.898 (measured: bench/results/compare-gb64-27g-final.summary.json" in out


def test_synthetic_default_with_plot_and_saved_trace(capsys, tmp_path):
    plot, saved = tmp_path / "fig.png", tmp_path / "trace.json"
    code, out = run(["simulate", "--workload", "kalos", "--jobs", "800", "--racks", "8", "--json",
                     "--plot", str(plot), "--save-trace", str(saved), "--factors", str(FIXTURES / "factors.json")],
                    capsys)
    document = json.loads(out)
    assert code == 0 and plot.stat().st_size > 10_000
    # the reported calibration gap is the largest distance between the trace's GPU-count CDF and the
    # published one, recomputed here from the saved trace
    jobs = json.loads(saved.read_text())["jobs"]
    xs, ps = synthetic.gpu_count_cdf("Kalos")
    gap = np.abs(synthetic.empirical_cdf_pct(np.array([j["gpus"] for j in jobs], dtype=float), xs) - 100 * ps).max()
    assert document["synthetic"]["calibration_max_gap_pp"]["gpu_count"] == round(float(gap), 3)
    assert document["model"]["factors"]["inter_to_intra_speedup"] == 0.37
    assert document["model"]["efficiency"]["value"] == 1.0          # a transit.factors/1 file
    # replaying the saved trace gives the same result
    _, again = run(["simulate", "--trace", str(saved), "--racks", "8", "--json",
                    "--factors", str(FIXTURES / "factors.json")], capsys)
    assert json.loads(again)["comparison"] == document["comparison"]


def test_sweep_matches_single_studies(capsys, tmp_path):
    markdown = tmp_path / "table.md"
    code, out = run(["simulate", "sweep", "--workload", "kalos", "--jobs", "600", "--racks", "8",
                     "--gpus-per-node", "4,8", "--reductions", "0.25,0.5", "--processes", "2", "--json",
                     "--markdown", str(markdown)], capsys)
    assert code == 0
    document = json.loads(out)
    assert document["schema"] == "transit.sim-sweep/3"
    studies = document["studies"]
    assert [(s["setup"]["gpus_per_node"], s["setup"]["reduction"]) for s in studies] == [
        (4, 0.25), (4, 0.5), (8, 0.25), (8, 0.5)]
    _, single = run(["simulate", "--workload", "kalos", "--jobs", "600", "--racks", "8",
                     "--gpus-per-node", "8", "--reduction", "0.25", "--json"], capsys)
    assert json.loads(single)["comparison"] == studies[2]["comparison"]
    table = markdown.read_text()
    assert table.count("\n") == 2 + 4
    # each study's row says how many jobs both replays left out, and their GPU-hours
    left = studies[0]["jobs"]["left_out"]
    assert left["count"] > 0
    assert f"| {left['count']} ({output.number(left['gpu_h'], 'GPU-h')}) |" in table.splitlines()[2]


def test_sweep_over_placements_and_slowdowns(capsys):
    code, out = run(["simulate", "sweep", "--workload", "kalos", "--jobs", "300", "--racks", "8,16",
                     "--gpus-per-node", "8", "--reductions", "0.5", "--placements", "pack,spread",
                     "--slowdowns", "0,0.55", "--processes", "2", "--json"], capsys)
    assert code == 0
    setups = [(s["setup"]["racks"], s["setup"]["placement"], s["model"]["factors"]["intra_to_inter_slowdown"])
              for s in json.loads(out)["studies"]]
    assert setups == [(r, p, y) for r in (8, 16) for p in ("pack", "spread") for y in (0.0, 0.55)]


def test_each_study_of_a_sweep_leaves_out_only_what_its_own_cluster_cannot_hold(capsys):
    code, out = run(["simulate", "sweep", "--workload", "kalos", "--jobs", "2000", "--seed", "4",
                     "--racks", "8,76", "--gpus-per-node", "8", "--reductions", "0.5", "--json"], capsys)
    assert code == 0
    studies = json.loads(out)["studies"]
    small, full = (s["jobs"]["left_out"]["count"] for s in studies)
    assert small > 0 and full == 0


def test_queue_rises_are_called_out(capsys):
    # three 8-node jobs back to back on 2 racks (8 nodes): queues 0, 999, 1998 s as is. Halved at an
    # efficiency of 0.5 each holds 4 nodes for 4000 s: A and B run together, C waits until 4000.
    trace = FIXTURES / "queue_rises.json"
    code, out = run(["simulate", "--trace", str(trace), "--racks", "2", "--speedup", "0", "--efficiency", "0.5",
                     "--json"], capsys)
    assert code == 0
    document = json.loads(out)
    entry = document["comparison"]["queue_mean_all"]
    assert (entry["baseline"], entry["transit"]) == (pytest.approx(999.0), pytest.approx(3998 / 3))
    assert any(w.startswith("mean queue time (all) rises with TRANSIT") for w in document["warnings"])


def transit_cli(*args):
    return subprocess.run([sys.executable, "-m", "transit", "simulate", *args], capture_output=True, text=True,
                          timeout=120, check=False)


def test_a_trace_where_every_job_is_dropped_exits_2_with_one_line():
    result = transit_cli("--trace", str(FIXTURES / "acme_kalos.csv"), "--racks", "1", "--reduction", "0")
    assert result.returncode == 0           # the 1- and 8-GPU jobs fit one rack; the 256-GPU one is dropped
    result = transit_cli("--trace", str(FIXTURES / "transit_trace.json"), "--racks", "1", "--gpus-per-node", "4",
                         "--reduction", "0")
    assert result.returncode == 0
    big = FIXTURES / "all_too_big.json"
    result = transit_cli("--trace", str(big), "--racks", "1", "--reduction", "0")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "all 2 jobs dropped from the baseline replay" in result.stderr


@pytest.mark.parametrize(("argv", "message"), [
    (["simulate", "--format", "acme"], "--format needs --trace"),
    (["simulate", "--dedupe"], "--dedupe needs --trace"),
    (["simulate", "--racks", "2", "--nodes", "4"], "--racks and --nodes both size the cluster"),
    (["simulate", "--backfill-interval", "30"], "--backfill-interval 30: expected 0 or more seconds, with --backfill"),
    (["simulate", "--backfill", "--backfill-interval", "-1"], "--backfill-interval -1"),
    (["simulate", "--trace", str(FIXTURES / "helios.csv"), "--jobs", "5"], "--jobs sizes a synthetic trace"),
    (["simulate", "--factors", str(FIXTURES / "helios.csv")], "cannot read JSON"),
    (["simulate", "--slowdown", "1.5"], "intra_to_inter_slowdown"),
    (["simulate", "--oversubscription", "0.5"], "--oversubscription 0.5"),
    (["simulate", "--comm-fraction", "1"], "--comm-fraction 1"),
    (["simulate", "--efficiency", "0.9", "--efficiency-curve", "paper"], "give one of them"),
    (["simulate", "--efficiency", "0"], "efficiency 0"),
    (["simulate", "sweep", "--placements", "random"], "--placements 'random'"),
])
def test_bad_input_is_a_usage_error(argv, message, capsys):
    with pytest.raises(UsageError, match=message):
        run(argv, capsys)


@pytest.mark.parametrize("value", ["NaN", "Infinity"])
def test_factors_that_are_not_finite_are_refused(tmp_path, value: str, capsys) -> None:
    """Python's json reads NaN: before, the replay ran on it and --json printed NaN for every change."""
    factors = tmp_path / "factors.json"
    factors.write_text(f'{{"schema": "transit.factors/1", "inter_to_intra_speedup": {value}, '
                       '"intra_to_inter_slowdown": 0.2, "unchanged": 0}')
    with pytest.raises(UsageError, match=f"^--factors {factors}: needs finite numbers .* \\(inter_to_intra_speedup "
                                         f"is {float(value)}\\)$"):
        run(["simulate", "--jobs", "40", "--racks", "2", "--factors", str(factors)], capsys)


def test_parquet_without_pyarrow_is_refused_before_any_replay(capsys, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "pyarrow" else real(name))
    with pytest.raises(UsageError, match="Parquet needs pyarrow"):
        run(["simulate", "--jobs", "50", "--jobs-out", str(tmp_path / "jobs.parquet")], capsys)
    assert not (tmp_path / "jobs.parquet").exists()


def test_reduction_out_of_range_is_rejected(capsys):
    with pytest.raises(SystemExit):
        run(["simulate", "--reduction", "1.0"], capsys)
    assert "must be in [0, 1)" in capsys.readouterr().err


def test_plots_leave_n_a_out_and_cap_large_changes():
    from transit.sim.output import PLOT_CAP_PCT, PLOTTED, plot_bars

    changes = {key: {"change_pct": 5.0} for key in PLOTTED}
    changes["queue_mean_all"] = {"change_pct": None}          # baseline under the floor
    changes["queue_mean_eligible"] = {"change_pct": 1_407_067.0}
    bars = {bar["slot"]: bar for bar in plot_bars([{"comparison": changes}])}
    slot = PLOTTED.index
    assert bars[slot("queue_mean_all")]["height"] is None and bars[slot("queue_mean_all")]["text"] == "n/a"
    assert bars[slot("queue_mean_eligible")]["height"] == PLOT_CAP_PCT
    assert bars[slot("queue_mean_eligible")]["capped"] and bars[slot("queue_mean_eligible")]["text"] == "+1,407,067%"
    assert bars[slot("cross_rack_bytes")] == {"study": 0, "slot": 0, "x": 0.0, "width": 0.8, "height": 5.0,
                                              "capped": False, "text": ""}


TWO_CLUSTERS = """JobID|Cluster|Submit|Start|End|ElapsedRaw|AllocTRES|NNodes|State
1|alpha|1700000000|1700000010|1700003610|3600|gres/gpu=16|2|COMPLETED
2|beta|1700000000|1700000100|1700003700|3600|gres/gpu=8|1|COMPLETED
3|alpha|1700000050|1700003610|1700007210|3600|gres/gpu=32|4|COMPLETED
"""


def test_one_cluster_of_a_multi_cluster_export(tmp_path, capsys):
    trace = tmp_path / "jobs.txt"
    trace.write_text(TWO_CLUSTERS)
    _, out = run(["simulate", "--trace", str(trace), "--racks", "2", "--json"], capsys)
    both = json.loads(out)
    assert [c["cluster"] for c in both["validation"]["clusters"]] == ["alpha", "beta"]
    assert "the trace holds 2 clusters, replayed as one (--cluster NAME replays one of them)" in both["warnings"]
    _, out = run(["simulate", "--trace", str(trace), "--racks", "2", "--cluster", "alpha", "--json"], capsys)
    alpha = json.loads(out)
    assert alpha["trace"]["filtered_by_reason"] == {"other cluster": 1} and alpha["jobs"]["compared"] == 2
    # job 3 waited 3560 s for job 1's nodes on the real cluster; here 2 racks hold both at once
    validation = alpha["validation"]["clusters"][0]
    assert validation["recorded_queue"]["p50_s"] == pytest.approx((10 + 3560) / 2)
    assert validation["replayed_queue"]["p50_s"] == 0 and validation["abs_error_p90_s"] == pytest.approx(3560 - 0.1 * 3550)
    with pytest.raises(UsageError, match="--cluster 'gamma': the trace's clusters are 'alpha', 'beta'"):
        run(["simulate", "--trace", str(trace), "--cluster", "gamma"], capsys)


def test_dedupe_names_the_repeated_ids_in_one_line(tmp_path, capsys):
    trace = tmp_path / "jobs.txt"
    lines = TWO_CLUSTERS.splitlines()
    trace.write_text("\n".join(lines + lines[1:3]) + "\n")          # jobs 1 and 2 exported twice
    result = transit_cli("--trace", str(trace), "--racks", "2")
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1
    assert "2 job ids appear more than once: 1 (lines 2, 5), 2 (lines 3, 6)" in result.stderr
    _, out = run(["simulate", "--trace", str(trace), "--racks", "2", "--dedupe"], capsys)
    assert ("--dedupe: 2 job ids appeared more than once; the latest record of each kept (latest End, then the "
            "later line), 2 older rows left out: 1, 2") in out


def test_a_reduction_above_three_quarters_carries_a_note(capsys):
    _, out = run(["simulate", "--workload", "kalos", "--jobs", "300", "--racks", "8", "--reduction", "0.95",
                  "--json"], capsys)
    assert json.loads(out)["warnings"][0] == (
        "r = 0.95 removes more than 75 % of each eligible job's nodes: beyond anything the efficiency was measured "
        "on (the paper's curve ends at 75 % removed, this project's 0.898 is at 50 %), so every figure here "
        "extrapolates")
    _, out = run(["simulate", "--workload", "kalos", "--jobs", "300", "--racks", "8", "--reduction", "0.75",
                  "--json"], capsys)
    assert not any(note.startswith("r = ") for note in json.loads(out)["warnings"])
