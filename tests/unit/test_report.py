"""`transit report` on synthetic job directories built from the stats schema example."""

from __future__ import annotations

import importlib.util
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from transit.cli import main as transit_main
from transit.errors import UsageError
from transit.report import load_report
from transit.report.as_json import report_json
from transit.report.notes import notes
from transit.report.plots import PLOTS, write_plots
from transit.report.render import render
from transit.report.thresholds import SMALL_MIGRATION_SHARE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
README = Path(__file__).resolve().parents[2] / "transit" / "report" / "README.md"
TICKS_DIR = FIXTURES / "report" / "ticks-h200"  # a real stats file and its TRANSIT_TICK_LOG CSV

_spec = importlib.util.spec_from_file_location("report_synthetic", FIXTURES / "report" / "synthetic.py")
assert _spec is not None and _spec.loader is not None
synthetic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synthetic)


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert transit_main(["report", *args, "--json", "--no-slurm"]) == 0
    return json.loads(capsys.readouterr().out)


def codes(items: list[dict[str, Any]]) -> list[str]:
    return [item["code"] for item in items]


def job(tmp_path: Path, ranks: int = 8, change: Any = None) -> Path:
    return synthetic.write_job(tmp_path / "1234", ranks, ranks_per_node=4, change=change)


def test_healthy_job_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, str(job(tmp_path)))
    example = synthetic.example_stats()
    assert out["schema"] == "transit.report/1"
    assert [r["rank"] for r in out["ranks"]] == list(range(8))
    assert out["job"] == out["job"] | {
        "job_id": "1234",
        "num_nodes": 2,
        "num_gpus": 8,
        "policy": "advise",
        "mode": "limit",
        "limit_bytes": 25769803776,
        "source": "stats-files",
    }
    assert [n["name"] for n in out["nodes"]] == ["node1", "node2"]
    assert out["totals"]["htod_bytes"] == 8 * example["migrations"]["htod"]["bytes"]
    assert out["totals"]["htod_histogram"]["4K-64K"] == 8 * 1100000
    assert sum(n["thrashing"] for n in out["nodes"]) == out["totals"]["thrashing"] == 8 * 12
    assert out["iterations"]["methods"] == ["python-hook"]
    assert out["iterations"]["slowest_rank"] == 6
    assert out["warnings"] == []
    # the example's HtoD migrations are 92% under 64 KiB and its policy is advise, not prefetch
    assert "small-migrations" in codes(out["notes"])
    assert out["ranks"][0]["small_htod_share"] == pytest.approx(1100100 / 1200000)


def test_json_keys_are_documented(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, str(job(tmp_path, 2)))
    documented = set(re.findall(r"`([a-z_0-9]+)`", README.read_text()))
    keys = (
        set(out)
        | set(out["job"])
        | set(out["ranks"][0])
        | set(out["totals"])
        | set(out["iterations"])
        | set(out["notes"][0])
        | set(run_json(capsys, str(TICKS_DIR))["ranks"][0]["tick_log"])
    )
    assert keys - documented == set()


def test_missing_rank_is_a_named_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = job(tmp_path)
    for path in directory.glob("rank3.*"):
        path.unlink()
    for path in directory.glob("rank5.*"):
        path.unlink()
    out = run_json(capsys, str(directory))
    assert [r["rank"] for r in out["ranks"]] == [0, 1, 2, 4, 6, 7]
    (warning,) = out["warnings"]
    assert warning["code"] == "missing-rank"
    assert "ranks 3, 5 of 8" in warning["message"]


@pytest.mark.parametrize(
    ("content", "code"),
    [
        ("", "empty-file"),
        ('{"schema": "transit.rank/1", "identity": {', "truncated-file"),
        (json.dumps({"schema": "transit.rank/2"}), "unknown-schema"),
        ("[1, 2]", "unknown-schema"),
    ],
)
def test_bad_file_is_a_named_warning_and_the_rest_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, code: str
) -> None:
    directory = job(tmp_path, 4)
    (bad,) = directory.glob("rank2.*")
    bad.write_text(content)
    out = run_json(capsys, str(directory))
    assert [r["rank"] for r in out["ranks"]] == [0, 1, 3]
    assert codes(out["warnings"]) == [code, "missing-rank"]
    assert out["warnings"][0]["path"] == str(bad)


def test_launcher_process_yields_to_the_cuda_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = job(tmp_path, 2)
    agent = synthetic.rank_stats(0, 2, 4)
    agent["cuda_active"] = False
    agent["identity"]["pid"] = 99
    (directory / "rank0.node1.99.json").write_text(json.dumps(agent))
    out = run_json(capsys, str(directory))
    assert [(r["rank"], r["cuda_active"]) for r in out["ranks"]] == [(0, True), (1, True)]
    assert out["warnings"] == []


def test_two_cuda_files_for_one_rank_warn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = job(tmp_path, 2)
    again = synthetic.rank_stats(1, 2, 4)
    again["identity"]["pid"] = 77
    again["time"]["end_unix"] += 100
    (directory / "rank1.node1.77.json").write_text(json.dumps(again))
    out = run_json(capsys, str(directory))
    assert codes(out["warnings"]) == ["duplicate-rank"]
    assert out["ranks"][1]["file"].endswith("rank1.node1.77.json")  # the one that ended last


def test_rank_unknown_to_libtransit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def no_rank(rank: int, stats: dict[str, Any]) -> None:
        stats["identity"].update(rank=-1, world_size=-1, local_rank=-1)

    out = run_json(capsys, str(job(tmp_path, 1, no_rank)))
    assert out["ranks"][0]["rank"] is None
    assert out["warnings"] == []


def test_wrong_types_in_a_file_read_as_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def garble(rank: int, stats: dict[str, Any]) -> None:
        if rank == 0:
            stats["migrations"]["htod"] = {"bytes": "lots", "count": None, "histogram": [1, 2]}
            stats["timeline"] = "none"
            stats["faults"] = 5

    out = run_json(capsys, str(job(tmp_path, 2, garble)))
    first = out["ranks"][0]
    assert (first["htod_bytes"], first["htod_count"], first["htod_histogram"], first["thrashing"]) == (
        0,
        0,
        {},
        0,
    )
    assert first["small_htod_share"] is None


def test_unknown_job_id_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert transit_main(["report", "98765", "--report-dir", str(tmp_path), "--no-slurm"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "unknown job id 98765" in err
    with pytest.raises(UsageError, match="neither a directory nor a job id"):
        load_report(str(tmp_path / "no-such-dir"), use_slurm=False)


def test_job_id_found_through_transit_report_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    job(tmp_path, 2)
    monkeypatch.setenv("TRANSIT_REPORT_DIR", str(tmp_path))
    out = run_json(capsys, "1234")
    assert out["directory"] == str(tmp_path / "1234")
    assert len(out["ranks"]) == 2


def _notes_for(tmp_path: Path, change: Any, ranks: int = 8) -> dict[str, dict[str, Any]]:
    report = load_report(str(job(tmp_path, ranks, change)), use_slurm=False)
    return {note.code: {"ranks": note.ranks, "message": note.message} for note in notes(report)}


def test_notes_follow_thresholds(tmp_path: Path) -> None:
    def change(rank: int, stats: dict[str, Any]) -> None:
        stats["config"]["policy"] = "base"
        if rank == 1:
            stats["recorder"].update(state="degraded", dropped_records=17, reason="CUPTI subscriber taken")
            stats["prefetch"]["errors"] = 2
        if rank == 2:
            stats["allocations"].update(refused=3, refused_bytes=3 << 30)
        if rank == 3:
            stats["iterations"]["step_time_mean_s"] = 4.0
            stats["time"]["exit_reason"] = "SIGTERM"
            stats["cuda_error"] = "cudaErrorIllegalAddress"

    found = _notes_for(tmp_path, change)
    assert found["thrashing"]["ranks"] == list(range(8))
    assert found["migrations-every-iteration"]["ranks"] == list(range(8))
    assert found["recorder-degraded"]["ranks"] == [1]
    assert "CUPTI subscriber taken" in found["recorder-degraded"]["message"]
    assert "in limit mode (rank 1) the measured bound alone kept L" in found["recorder-degraded"]["message"]
    assert found["policy-errors"]["ranks"] == [1]
    assert "2 prefetch" in found["policy-errors"]["message"]
    assert found["dropped-records"]["ranks"] == [1]
    assert "17" in found["dropped-records"]["message"]
    assert found["refused-allocations"]["ranks"] == [2]
    assert found["stragglers"]["ranks"] == [3]
    assert found["ended-by-signal"]["ranks"] == [3]
    assert found["cuda-error"]["ranks"] == [3]
    assert "fewer-nodes" not in found  # resident peak = the limit


def test_bound_over_limit_warns_when_the_measured_bound_passed_the_limit(tmp_path: Path) -> None:
    def measured(rank: int, stats: dict[str, Any]) -> None:
        limit = stats["config"]["limit_bytes"]
        # rank 5's device held up to 12 GiB over the limit (the H200 measurement); the others stayed under it
        stats["memory"]["device_bound_peak_bytes"] = limit + (12 << 30) if rank == 5 else limit - (1 << 30)
        stats["evictions"]["sweeps"] = 4 if rank == 5 else 0

    found = _notes_for(tmp_path, measured)
    assert found["limit-bound-over"]["ranks"] == [5]
    assert "4 sweeps" in found["limit-bound-over"]["message"]
    assert "limit-bound-over" not in _notes_for(tmp_path / "none", None)  # the fixture stays under L


def test_advice_already_taken_is_not_repeated(tmp_path: Path) -> None:
    def prefetch(rank: int, stats: dict[str, Any]) -> None:
        stats["config"]["policy"] = "prefetch"

    assert "small-migrations" not in _notes_for(tmp_path / "p", prefetch)
    found = _notes_for(tmp_path / "a", None)  # the example runs advise
    assert "thrashing" not in found and "migrations-every-iteration" not in found


def test_small_migrations_threshold_is_strict(tmp_path: Path) -> None:
    def at_threshold(rank: int, stats: dict[str, Any]) -> None:
        small = int(SMALL_MIGRATION_SHARE * 1000)
        stats["config"]["policy"] = "base"
        stats["migrations"]["htod"]["histogram"] = {
            "<4K": 0,
            "4K-64K": small,
            "64K-1M": 1000 - small,
            "1M-2M": 0,
            ">2M": 0,
        }

    assert "small-migrations" not in _notes_for(tmp_path, at_threshold)


def test_fewer_nodes_when_memory_far_under_the_cap(tmp_path: Path) -> None:
    def small(rank: int, stats: dict[str, Any]) -> None:
        stats["memory"]["resident_peak_bytes"] = stats["config"]["limit_bytes"] // 4

    found = _notes_for(tmp_path, small)
    assert "25%" in found["fewer-nodes"]["message"]
    # one node: no fewer nodes to go to
    assert "fewer-nodes" not in _notes_for(tmp_path / "one", small, ranks=4)


def test_no_cuda_and_no_iterations(tmp_path: Path) -> None:
    def idle(rank: int, stats: dict[str, Any]) -> None:
        stats["cuda_active"] = False
        stats["iterations"].update(count=0, method="none")

    found = _notes_for(tmp_path, idle, ranks=2)
    assert "no-cuda" in found
    assert "no-iterations" not in found  # only ranks that used CUDA are judged


def _render(tmp_path: Path, **console: Any) -> str:
    report = load_report(str(job(tmp_path, 8)), use_slurm=False)
    buffer = io.StringIO()
    render(report, notes(report), Console(file=buffer, width=120, **console))
    return buffer.getvalue()


def test_table_rendering(tmp_path: Path) -> None:
    text = _render(tmp_path / "plain", color_system=None)
    assert "\x1b[" not in text
    assert "job 1234" in text
    assert "[small-migrations]" in text
    assert re.search(r"^\s*7 node2 ", text, re.MULTILINE)
    assert re.search(r"^job\s+8\s+8 ", text, re.MULTILINE)
    coloured = _render(tmp_path / "colour", force_terminal=True, color_system="standard")
    assert "\x1b[" in coloured


def test_no_color_flag_prints_plain_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert transit_main(["report", str(job(tmp_path, 2)), "--no-slurm", "--no-color"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" not in out and "Ranks" in out


def test_plots(tmp_path: Path) -> None:
    report = load_report(str(job(tmp_path, 8)), use_slurm=False)
    written = write_plots(report, tmp_path / "plots")
    assert [p.name for p in written] == list(PLOTS)
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert path.stat().st_size > 10_000


def test_tick_log_beside_a_stats_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A real stats file and its TRANSIT_TICK_LOG CSV (the GPU policy test's base run, L = 1 GiB,
    H200): the summary's peak is the stats file's own, the bound was over L for a few seconds of
    warm-up and the first planned iterations, and --plot draws it."""
    out = run_json(capsys, str(TICKS_DIR))
    (rank,) = out["ranks"]
    assert rank["tick_log"] == {"ticks": 719, "bound_peak_bytes": 1831350272, "seconds_over_limit": 3.08,
                                "longest_tick_ms": 233.006}
    assert rank["tick_log"]["bound_peak_bytes"] == rank["device_bound_peak_bytes"]
    assert out["warnings"] == []
    (bound_over,) = [n for n in out["notes"] if n["code"] == "limit-bound-over"]
    assert "for up to 3.1 s by the tick log" in bound_over["message"]
    report = load_report(str(TICKS_DIR), use_slurm=False)
    (drawn,) = [p for p in write_plots(report, tmp_path) if p.name == "control.png"]
    assert drawn.stat().st_size > 20_000


def copy_ticks_dir(tmp_path: Path) -> Path:
    for f in TICKS_DIR.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    return next(tmp_path.glob("*.ticks.csv"))


@pytest.mark.parametrize(
    ("lines", "summary"),
    [
        # header only: no ticks, nothing to draw, no time over the limit to speak of
        ([], {"ticks": 0, "bound_peak_bytes": None, "seconds_over_limit": None, "longest_tick_ms": None}),
        # no reading in any tick (smaps never showed the UVM mapping)
        (["0.1,0,waiting,0,1,,,0,0,0,0,0,1.5"],
         {"ticks": 1, "bound_peak_bytes": None, "seconds_over_limit": None, "longest_tick_ms": 1.5}),
        # the smaps reading counts where it is the higher; a last line cut short is left out
        (["0.1,0,waiting,0,1,900,2147483648,0,0,0,0,0,1.0", "0.3,0,waiting,0,1,900,,0,0,0,0,0,2.0", "0.5,0,wa"],
         {"ticks": 2, "bound_peak_bytes": 2147483648, "seconds_over_limit": 0.2, "longest_tick_ms": 2.0}),
    ],
)
def test_tick_logs_with_few_readings(capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[str],
                                     summary: dict[str, Any]) -> None:
    log = copy_ticks_dir(tmp_path)
    header = log.read_text().splitlines()[0]
    log.write_text("\n".join([header, *lines]) + "\n")
    out = run_json(capsys, str(tmp_path))
    assert out["ranks"][0]["tick_log"] == summary and out["warnings"] == []
    (bound_over,) = [n for n in out["notes"] if n["code"] == "limit-bound-over"]  # from the stats file
    assert ("by the tick log" in bound_over["message"]) == (summary["seconds_over_limit"] is not None)
    written = write_plots(load_report(str(tmp_path), use_slurm=False), tmp_path / "plots")
    assert (tmp_path / "plots" / "control.png") in written


@pytest.mark.parametrize("row", ["1.0,lots,,2.0", "2.0,5,,nan", "inf,5,,1.0"])
def test_unreadable_tick_log_is_a_named_warning(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                row: str) -> None:
    log = copy_ticks_dir(tmp_path)
    log.write_text(f"t_s,bound_bytes,smaps_bound_bytes,work_ms\n{row}\n")
    out = run_json(capsys, str(tmp_path))
    assert [w["code"] for w in out["warnings"]] == ["unreadable-tick-log"]
    assert out["ranks"][0]["tick_log"] is None and out["ranks"][0]["device_bound_peak_bytes"] == 1831350272


def test_json_is_serialisable_without_slurm_facts(tmp_path: Path) -> None:
    report = load_report(str(job(tmp_path, 2)), use_slurm=False)
    assert json.loads(json.dumps(report_json(report, notes(report))))["job"]["source"] == "stats-files"


def test_colours_mark_the_cells_over_thresholds(tmp_path: Path) -> None:
    def slow_rank_two(rank: int, stats: dict[str, Any]) -> None:
        stats["iterations"]["step_time_mean_s"] = 5.0 if rank == 2 else 1.5
        stats["faults"]["thrashing"] = 0 if rank == 2 else 3

    report = load_report(str(job(tmp_path, 4, slow_rank_two)), use_slurm=False)
    buffer = io.StringIO()
    render(
        report, notes(report), Console(file=buffer, width=140, force_terminal=True, color_system="standard")
    )
    lines = {line.split()[0]: line for line in buffer.getvalue().splitlines() if " node1 " in line}
    red = "\x1b[31m"
    assert re.search(rf"{re.escape(red)}\s*5\x1b\[0m", lines["2"])  # the straggler's step time
    assert not re.search(rf"{re.escape(red)}\s*1.5\x1b\[0m", lines["1"])
    assert re.search(rf"{re.escape(red)}\s*3\x1b\[0m", lines["1"])  # thrashing events


def test_real_stats_files_without_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    """Files libtransit wrote on the dev cluster (job 90, srun -N2 --transit=advise, no GPU): no
    migration sections at all, a CUDA error, rank numbers from SLURM_PROCID."""
    out = run_json(capsys, str(FIXTURES / "report" / "real-no-gpu"))
    assert out["job"]["job_id"] == "90"  # from the files: the directory is not named by the job id
    assert [(r["rank"], r["node"], r["device"]) for r in out["ranks"]] == [
        (0, "node1", None),
        (1, "node2", None),
    ]
    assert {r["htod_bytes"] for r in out["ranks"]} == {0}
    assert out["warnings"] == []
    assert {"cuda-error", "no-cuda"} <= set(codes(out["notes"]))


def test_nodes_in_natural_order_and_steps_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = synthetic.write_job(tmp_path / "77", 12, ranks_per_node=1, job_id="77")

    def second_step(rank: int, stats: dict[str, Any]) -> None:
        stats["identity"].update(step_id="1", pid=9000 + rank, world_size=2)

    synthetic.write_job(directory, 2, ranks_per_node=1, job_id="77", change=second_step)
    out = run_json(capsys, str(directory))
    assert [n["name"] for n in out["nodes"]] == [f"node{i}" for i in range(1, 13)]
    assert [(r["step"], r["rank"]) for r in out["ranks"]] == [("0", r) for r in range(12)] + [
        ("1", 0),
        ("1", 1),
    ]
    assert out["warnings"] == []
    assert transit_main(["report", str(directory), "--no-slurm", "--no-color"]) == 0
    assert "Job step" in capsys.readouterr().out


def test_timeline_intervals_from_cumulative_samples() -> None:
    from transit.report.aggregate import rank_row
    from transit.report.load import RankFile

    def intervals(timeline: list[dict[str, Any]]) -> list[tuple[float, float, int, int]]:
        stats = synthetic.example_stats() | {"timeline": timeline}
        return [
            (i.start_t, i.t, i.iteration, i.htod_bytes)
            for i in rank_row(RankFile(Path("x"), stats)).intervals
        ]

    def sample(t: float, iteration: int, htod: int) -> dict[str, Any]:
        return {"t": t, "iteration": iteration, "resident_bytes": 0, "htod_bytes": htod, "dtoh_bytes": 0}

    # libtransit samples at iteration marks: the rank's start opens the first interval
    assert intervals([sample(1.5, 1, 100), sample(2.5, 2, 130)]) == [(0.0, 1.5, 1, 100), (1.5, 2.5, 2, 30)]
    # a ring buffer that wrapped keeps later marks only: no origin is invented
    assert intervals([sample(90.0, 300, 5000), sample(90.3, 301, 5010)]) == [(90.0, 90.3, 301, 10)]


def test_report_dir_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transit.report import load

    option, env, dev = tmp_path / "option", tmp_path / "env", tmp_path / "dev"
    dev.mkdir()
    monkeypatch.setattr(load, "DEV_CLUSTER_REPORT_DIR", dev)
    monkeypatch.setenv("TRANSIT_REPORT_DIR", str(env))
    assert load.default_report_dir(str(option), use_slurm=False) == option
    assert load.default_report_dir(None, use_slurm=False) == env
    monkeypatch.delenv("TRANSIT_REPORT_DIR")
    assert load.default_report_dir(None, use_slurm=False) == dev
    dev.rmdir()
    with pytest.raises(UsageError, match="no report directory"):
        load.default_report_dir(None, use_slurm=False)
