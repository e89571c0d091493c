"""`transit report` on synthetic job directories built from the stats schema example, on real stats
files (no GPU, H200 tick log) and on hand-made step and partial-stats files (tests/fixtures/report)."""

from __future__ import annotations

import copy
import importlib.util
import io
import json
import os
import pwd
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from transit.cli import main as transit_main
from transit.errors import UsageError
from transit.report.as_json import report_json
from transit.report.cli import load_report
from transit.report.jobs import Job, default_report_dir, jobs_of_user, parse_time
from transit.report.notes import notes
from transit.report.plots import PLOTS, write_plots
from transit.report.render import View, render
from transit.report.thresholds import SMALL_MIGRATION_SHARE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPO = Path(__file__).resolve().parents[2]
PROFILES = FIXTURES / "profile"
DOCS = REPO / "docs" / "report.md"
TICKS_DIR = FIXTURES / "report" / "ticks-h200"  # a real stats file and its TRANSIT_TICK_LOG CSV
JOBS = FIXTURES / "report" / "jobs"  # hand-made step files and partial stats, from the contracts
CAPTURED = FIXTURES / "report" / "captured"  # the plugin branch's step files and stats of dev-cluster jobs
CPU_ONLY = CAPTURED / "1"  # srun -N2 -n2 --transit=advise --transit-mem-limit=40G, a CPU-only task

_spec = importlib.util.spec_from_file_location("report_synthetic", FIXTURES / "report" / "synthetic.py")
assert _spec is not None and _spec.loader is not None
synthetic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synthetic)


def run_json(capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> dict[str, Any]:
    assert transit_main(["report", *args, "--json", "--no-slurm"]) == code
    return json.loads(capsys.readouterr().out)


def run_text(capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> str:
    assert transit_main(["report", *args, "--no-slurm", "--no-color"]) == code
    return capsys.readouterr().out


def codes(items: list[dict[str, Any]]) -> list[str]:
    return [item["code"] for item in items]


def job(tmp_path: Path, ranks: int = 8, change: Any = None, ranks_per_node: int = 4) -> Path:
    return synthetic.write_job(tmp_path / "1234", ranks, ranks_per_node=ranks_per_node, change=change)


def report_of(directory: Path, now_unix: float | None = None) -> Any:
    return load_report(Job(str(directory), None, directory), use_slurm=False, now_unix=now_unix)


def test_healthy_job_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, str(job(tmp_path)))
    example = synthetic.example_stats()
    assert out["schema"] == "transit.report/1"
    assert [r["rank"] for r in out["ranks"]] == list(range(8))
    assert out["job"] == out["job"] | {
        "job_id": "1234",
        "num_nodes": 2,
        "nodelist": "node[1-2]",
        "num_gpus": 8,
        "policy": "advise",
        "mode": "limit",
        "limit_bytes": 25769803776,
        "policy_source": "stats-files",
        "source": "stats-files",
    }
    assert (out["no_stats_reason"], out["partial"], out["steps"]) == (None, False, [])
    assert [n["name"] for n in out["nodes"]] == ["node1", "node2"]
    assert out["totals"]["htod_bytes"] == 8 * example["migrations"]["htod"]["bytes"]
    assert out["totals"]["htod_histogram"]["4K-64K"] == 8 * 1100000
    assert sum(n["thrashing"] for n in out["nodes"]) == out["totals"]["thrashing"] == 8 * 12
    assert out["iterations"]["methods"] == ["python-hook"]
    assert (out["iterations"]["slowest_rank"], out["iterations"]["slowest"]) == (6, "rank 6")
    assert out["warnings"] == []
    # the example's HtoD migrations are 92% under 64 KiB, but its policy is advise, which the committed
    # measurements show faster than prefetch: no advice to switch
    assert "small-migrations" not in codes(out["notes"])
    assert out["ranks"][0]["small_htod_share"] == pytest.approx(1100100 / 1200000)


def test_json_keys_are_documented(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, str(job(tmp_path, 2)))
    listed = run_json(capsys, str(job(tmp_path, 2)), str(CPU_ONLY))
    documented = set(re.findall(r"`([a-z_0-9]+)`", DOCS.read_text()))
    keys = (
        set(out) | set(out["job"]) | set(out["ranks"][0]) | set(out["totals"]) | set(out["iterations"])
        | set(out["notes"][0])
        | set(run_json(capsys, str(TICKS_DIR))["ranks"][0]["tick_log"])
        | set(run_json(capsys, str(CPU_ONLY), code=1)["steps"][0])
        | set(listed) | set(listed["jobs"][0])
    )
    assert keys - documented == set()


def test_missing_rank_is_a_named_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = job(tmp_path)
    for path in [*directory.glob("rank3.*"), *directory.glob("rank5.*")]:
        path.unlink()
    out = run_json(capsys, str(directory))
    assert [r["rank"] for r in out["ranks"]] == [0, 1, 2, 4, 6, 7]
    (warning,) = out["warnings"]
    assert warning["code"] == "missing-rank"
    assert "ranks 3, 5 of 8" in warning["message"]


@pytest.mark.parametrize(
    ("content", "code", "says"),
    [
        ("", "empty-file", "rank2.node1.4002.json is empty; its rank is left out"),
        ('{"schema": "transit.rank/1", "identity": {"node": "no', "truncated-file",
         "is not complete JSON (Unterminated string at byte 50)"),
        ('{"schema": "transit.rank/1", "identity": {', "truncated-file", "(Expecting property name enclosed in"),
        (json.dumps({"schema": "transit.rank/2"}), "unknown-schema",
         "has schema 'transit.rank/2', this report reads 'transit.rank/1' (a newer transit reads it)"),
        (json.dumps({"schema": "other/1"}), "unknown-schema",
         "has schema 'other/1', this report reads 'transit.rank/1'; its rank is left out"),
        (json.dumps({"identity": {}}), "unknown-schema", 'has no "schema" field (transit.rank/1 expected)'),
        ("null", "unknown-schema", "holds a JSON null, not a transit.rank/1 object"),
        ("[1, 2]", "unknown-schema", "holds a JSON list, not a transit.rank/1 object"),
    ],
)
def test_bad_file_is_a_named_warning_and_the_rest_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, code: str, says: str
) -> None:
    directory = job(tmp_path, 4)
    (bad,) = directory.glob("rank2.*")
    bad.write_text(content)
    out = run_json(capsys, str(directory))
    assert [r["rank"] for r in out["ranks"]] == [0, 1, 3]
    assert codes(out["warnings"]) == [code, "missing-rank"]
    assert out["warnings"][0]["path"] == str(bad)
    assert says in out["warnings"][0]["message"]
    assert " at at " not in out["warnings"][0]["message"] and "NoneType" not in out["warnings"][0]["message"]


def test_every_file_rejected_is_no_usable_stats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = job(tmp_path, 3)
    for i, path in enumerate(sorted(directory.glob("rank*.json"))):
        path.write_text("" if i == 0 else '{"schema": "transit.rank/9"}')
    out = run_json(capsys, str(directory), code=1)
    assert out["ranks"] == []
    assert out["no_stats_reason"] == "every stats file was rejected (2 unknown-schema, 1 empty-file): see the warnings"
    assert "No stats: every stats file was rejected" in run_text(capsys, str(directory), code=1)


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
    assert out["ranks"][1]["file"].endswith("rank1.node1.77.json")  # the one written last


def test_a_run_outside_slurm_is_named_by_its_process(capsys: pytest.CaptureFixture[str]) -> None:
    """The H200 fixture (`transit run`, no SLURM_JOB_ID, rank -1): no `job ?`, no `rank None`, no
    "ranks without a number"."""
    text = run_text(capsys, str(TICKS_DIR))
    assert "TRANSIT report  a run outside Slurm (no job id): pid 1220 (vm)" in text
    assert "job ?" not in text and "None" not in text and "without a number" not in text
    assert "on pid 1220 (vm)" in text
    out = run_json(capsys, str(TICKS_DIR))
    assert (out["job"]["job_id"], out["ranks"][0]["rank"], out["iterations"]["slowest"]) == (None, None, "pid 1220 (vm)")


def test_wrong_types_in_a_file_read_as_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def garble(rank: int, stats: dict[str, Any]) -> None:
        if rank == 0:
            stats["migrations"]["htod"] = {"bytes": "lots", "count": None, "histogram": [1, 2]}
            stats["timeline"] = "none"
            stats["faults"] = 5
            stats["partial"] = "yes"

    out = run_json(capsys, str(job(tmp_path, 2, garble)))
    first = out["ranks"][0]
    assert (first["htod_bytes"], first["htod_count"], first["htod_histogram"], first["thrashing"]) == (0, 0, {}, 0)
    assert (first["small_htod_share"], first["partial"]) == (None, False)


def test_unknown_job_id_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert transit_main(["report", "98765", "--report-dir", str(tmp_path), "--no-slurm"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"transit report: unknown job id 98765: no {tmp_path / '98765'} and Slurm was not asked (--no-slurm)"
    assert transit_main(["report", "98765_3", "--report-dir", str(tmp_path), "--no-slurm"]) == 2
    assert capsys.readouterr().err.strip() == ("transit report: unknown array task 98765_3: Slurm was not asked "
                                               "(--no-slurm) (its directory is named by its own job id: give that "
                                               "id, or the directory)")
    assert transit_main(["report", "98765+1", "--report-dir", str(tmp_path), "--no-slurm"]) == 2
    assert capsys.readouterr().err.strip() == ("transit report: unknown heterogeneous job component 98765+1: Slurm "
                                               "was not asked (--no-slurm) (its directory is named by its own job "
                                               "id: give that id, or the directory)")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["12x"], "'12x' is neither a directory nor a job id: give a job id (1234), an array task (1234_7)"),
        (["1234_"], "'1234_' is neither a directory nor a job id"),
        ([""], "'' is neither a directory nor a job id"),
        ([], "nothing to report: give a job id (1234)"),
        (["1", "-u", "root"], "give job ids and directories, or -u USER, not both"),
        (["1", "-S", "today"], "-S and -E select the jobs of -u USER"),
        (["-u", "no-such-user-here"], "unknown user 'no-such-user-here'"),
        (["-u", "root", "-S", "yesterday"], "time 'yesterday' is not one of YYYY-MM-DD[THH:MM[:SS]]"),
        (["-u", "root", "-S", "now", "-E", "now-2days"], "-S now is after -E now-2days"),
        (["1", "--ranks", "0"], "--ranks '0': give 'all' or how many top ranks to show"),
        (["1", "--sort", "speed"], "--sort 'speed': give one of peak, spill, htod"),
        (["1", "--compute-s", "0"], "--compute-s 0.0 is not a time; give a positive number of seconds"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str],
                                           says: str) -> None:
    assert transit_main(["report", *args, "--no-slurm", "--report-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def test_job_id_found_through_transit_report_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    job(tmp_path, 2)
    monkeypatch.setenv("TRANSIT_REPORT_DIR", str(tmp_path))
    out = run_json(capsys, "1234")
    assert out["directory"] == str(tmp_path / "1234")
    assert len(out["ranks"]) == 2


def _notes_for(tmp_path: Path, change: Any, ranks: int = 8) -> dict[str, dict[str, Any]]:
    report = report_of(job(tmp_path, ranks, change))
    return {note.code: {"ranks": note.ranks, "message": note.message, "action": note.action}
            for note in notes(report)}


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
    assert "raise --transit-mem-limit (now 24.0 GiB) or use more nodes" in found["refused-allocations"]["message"]
    assert found["stragglers"]["ranks"] == [3]
    assert found["ended-by-signal"]["ranks"] == [3]
    assert "rank 3 wrote its stats on SIGTERM" in found["ended-by-signal"]["message"]
    assert found["cuda-error"]["ranks"] == [3]
    assert "fewer-nodes" not in found  # resident peak = the limit


def test_advice_names_the_action_and_its_effect_in_the_jobs_figures(tmp_path: Path) -> None:
    """Each rank of the synthetic job moves 20 GiB in each of two warm-up steps, then 256 MiB in every
    one of the 18 steps after (tests/fixtures/report/synthetic.py)."""
    def base(rank: int, stats: dict[str, Any]) -> None:
        stats["config"]["policy"] = "base"

    found = _notes_for(tmp_path, base)
    assert found["migrations-every-iteration"]["action"] == "--transit=advise"
    assert found["migrations-every-iteration"]["message"] == (
        "try --transit=advise: 256.0 MiB per step still migrates to the GPU after warm-up on ranks 0-7, and "
        "256.0 MiB of it moved again in each of the 18 steps: what does not fit is evicted and fetched again each "
        "time; advise leaves it in host memory for the GPU to read in place, so the steps no longer wait for those "
        "migrations")
    assert found["thrashing"]["message"].startswith(
        "try --transit=advise: the driver moved the same pages back and forth between host and GPU 96 times")
    assert found["small-migrations"]["message"].startswith(
        "try --transit=prefetch: 92% of the 9,600,000 migrations to the GPU on ranks 0-7 were under 64.0 KiB")
    assert "(2,800,000 faults)" in found["small-migrations"]["message"]


def test_bound_over_limit_warns_when_the_measured_bound_passed_the_limit(tmp_path: Path) -> None:
    def measured(rank: int, stats: dict[str, Any]) -> None:
        limit = stats["config"]["limit_bytes"]
        # rank 5's device held up to 12 GiB over the limit (the H200 measurement); the others stayed under it
        stats["memory"]["device_bound_peak_bytes"] = limit + (12 << 30) if rank == 5 else limit - (1 << 30)
        stats["evictions"]["sweeps"] = 4 if rank == 5 else 0

    found = _notes_for(tmp_path, measured)
    assert found["limit-bound-over"]["ranks"] == [5]
    assert "above the limit of 24.0 GiB" in found["limit-bound-over"]["message"]
    assert "4 sweeps found chunks the estimate had lost" in found["limit-bound-over"]["message"]
    assert "limit-bound-over" not in _notes_for(tmp_path / "none", None)  # the fixture stays under L


def test_advice_already_taken_is_not_repeated(tmp_path: Path) -> None:
    def prefetch(rank: int, stats: dict[str, Any]) -> None:
        stats["config"]["policy"] = "prefetch"

    assert "small-migrations" not in _notes_for(tmp_path / "p", prefetch)
    found = _notes_for(tmp_path / "a", None)  # the example runs advise
    assert "thrashing" not in found and "migrations-every-iteration" not in found


def test_hybrid_reads_in_place_and_is_told_when_it_never_placed(tmp_path: Path) -> None:
    def hybrid(rank: int, stats: dict[str, Any]) -> None:
        stats["config"]["policy"] = "hybrid"
        stats["hybrid"] = {"plans": 1, "applied": 0 if rank == 6 else 1}

    found = _notes_for(tmp_path, hybrid)
    assert "thrashing" not in found and "migrations-every-iteration" not in found
    assert found["hybrid-never-placed"]["ranks"] == [6]


def test_hybrids_guard_says_which_placement_it_kept_and_both_steps(tmp_path: Path) -> None:
    def hybrid(rank: int, stats: dict[str, Any]) -> None:
        stats["config"]["policy"] = "hybrid"
        kept, advise_s, hybrid_s = ("advise", 4.52, 6.37) if rank == 3 else ("hybrid", 2.885, 2.203)
        stats["hybrid"] = {"plans": 1, "applied": 1, "fallback": {
            "state": "measuring-hybrid" if rank == 7 else "decided", "kept": None if rank == 7 else kept,
            "hybrid_step_s": hybrid_s, "advise_step_s": advise_s, "hybrid_steps": 3, "advise_steps": 3}}

    note = _notes_for(tmp_path, hybrid)["hybrid-fallback"]
    assert note["ranks"] == [0, 1, 2, 3, 4, 5, 6]  # rank 7 still measures
    assert note["message"] == (
        "hybrid's guard timed steady steps with advise's placement and with its own, and kept the faster: advise's "
        "placement on rank 3 (median step: advise 4.52 s, hybrid 6.37 s); hybrid's placement on ranks 0-2, 4-6 "
        "(median step: rank 0 advise 2.88 s, hybrid 2.20 s; rank 1 advise 2.88 s, hybrid 2.20 s; rank 2 advise "
        "2.88 s, hybrid 2.20 s; rank 4 advise 2.88 s, hybrid 2.20 s; ...)")
    assert "hybrid-fallback" not in _notes_for(tmp_path / "advise", None)


def test_hybrids_placement_is_summed_by_reuse_class(tmp_path: Path) -> None:
    def hybrid(rank: int, stats: dict[str, Any]) -> None:
        stats["config"]["policy"] = "hybrid"
        stats["hybrid"] = {"plans": 1, "applied": 1, "by_reuse": {
            "1": {"resident_bytes": 0, "host_bytes": 3 << 30}, "9+": {"resident_bytes": 5 << 30, "host_bytes": 0}}}

    out = _render(job(tmp_path, 2, hybrid, ranks_per_node=2))
    assert ("Hybrid placement: on the GPU 10.0 GiB (reuse 9+); on the host, read in place, 6.0 GiB (reuse 1)"
            in " ".join(out.split()))


def test_hybrids_streamed_bytes_are_shown_apart_from_those_read_in_place(tmp_path: Path) -> None:
    """The stats count the mover's streamed chunks among the host bytes; the report splits them."""
    def hybrid(rank: int, stats: dict[str, Any]) -> None:
        stats["config"]["policy"] = "hybrid"
        stats["hybrid"] = {"plans": 1, "applied": 1, "by_reuse": {
            "2": {"resident_bytes": 0, "host_bytes": 3 << 30, "streamed_bytes": 1 << 30},
            "9+": {"resident_bytes": 5 << 30, "host_bytes": 0, "streamed_bytes": 0}}}

    out = " ".join(_render(job(tmp_path, 1, hybrid)).split())
    assert ("Hybrid placement: on the GPU 5.0 GiB (reuse 9+); on the host, read in place, 2.0 GiB (reuse 2); "
            "streamed in and back each iteration by its mover, 1.0 GiB (reuse 2)") in out


def _base_settling_after(steps: int) -> Callable[[int, dict[str, Any]], None]:
    """Base, its HtoD migrations 92% small (the example's), moving nothing more after `steps` steps."""
    def change(rank: int, stats: dict[str, Any]) -> None:
        stats["config"]["policy"] = "base"
        last = stats["timeline"][steps]["htod_bytes"]
        for sample in stats["timeline"][steps:]:
            sample["htod_bytes"] = last
    return change


def test_small_migrations_of_warm_up_alone_advise_nothing(tmp_path: Path) -> None:
    """All small faults before the steady iterations (the later half of the 18 after warm-up):
    prefetch would have nothing to fetch ahead in the steady state."""
    assert "small-migrations" not in _notes_for(tmp_path / "a", _base_settling_after(10))
    found = _notes_for(tmp_path / "b", _base_settling_after(19))  # the steady iterations 12-20 still migrate
    assert found["small-migrations"]["action"] == "--transit=prefetch"
    assert "past warm-up, in the steady iterations 12-20, 256.0 MiB a step still migrated" in \
        found["small-migrations"]["message"]


@pytest.mark.parametrize("policy", ["advise", "hybrid", "prefetch"])
def test_prefetch_is_never_advised_where_it_measured_slower(tmp_path: Path, policy: str) -> None:
    def change(rank: int, stats: dict[str, Any]) -> None:
        stats["config"]["policy"] = policy

    assert "small-migrations" not in _notes_for(tmp_path, change)


def test_small_migrations_threshold_is_strict(tmp_path: Path) -> None:
    def at_threshold(rank: int, stats: dict[str, Any]) -> None:
        small = int(SMALL_MIGRATION_SHARE * 1000)
        stats["config"]["policy"] = "base"
        stats["migrations"]["htod"]["histogram"] = {"<4K": 0, "4K-64K": small, "64K-1M": 1000 - small, "1M-2M": 0,
                                                    ">2M": 0}

    assert "small-migrations" not in _notes_for(tmp_path, at_threshold)


def test_fewer_nodes_when_memory_far_under_the_cap(tmp_path: Path) -> None:
    def small(rank: int, stats: dict[str, Any]) -> None:
        stats["memory"]["resident_peak_bytes"] = stats["config"]["limit_bytes"] // 4

    found = _notes_for(tmp_path, small)
    assert found["fewer-nodes"]["message"].startswith(
        "try 1 node instead of 2: peak device memory stayed at or under 25% of the cap on every rank, so the same "
        "data on 1 would fill about 50% of each GPU")
    assert found["fewer-nodes"]["action"] == "--nodes=1"
    # one node: no fewer nodes to go to
    assert "fewer-nodes" not in _notes_for(tmp_path / "one", small, ranks=4)


def test_no_cuda_and_no_iterations(tmp_path: Path) -> None:
    def idle(rank: int, stats: dict[str, Any]) -> None:
        stats["cuda_active"] = False
        stats["iterations"].update(count=0, method="none")

    found = _notes_for(tmp_path, idle, ranks=2)
    assert "no-cuda" in found
    assert "no-iterations" not in found  # only ranks that used CUDA are judged


def _render(directory: Path, view: View | None = None, **console: Any) -> str:
    report = report_of(directory)
    buffer = io.StringIO()
    render(report, notes(report), Console(file=buffer, width=132, **console), view)
    return buffer.getvalue()


def test_table_rendering(tmp_path: Path) -> None:
    text = _render(job(tmp_path / "plain"), color_system=None)
    assert "\x1b[" not in text
    assert "job 1234" in text and "nodes           2  node[1-2]" in text
    assert "[library-warning]" in text
    assert re.search(r"^\s*7 node2 ", text, re.MULTILINE)
    assert re.search(r"^job\s+8\s+8 ", text, re.MULTILINE)
    assert "Colours:" not in text  # no colours, no colour legend
    coloured = _render(job(tmp_path / "colour"), force_terminal=True, color_system="standard")
    assert "\x1b[" in coloured
    for colour in ("red = ", "yellow = ", "cyan = ", "dim = "):  # every colour the tables use is explained
        assert colour in coloured


def test_no_color_flag_prints_plain_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_text(capsys, str(job(tmp_path, 2)))
    assert "\x1b[" not in out and "Ranks" in out


def test_a_thousand_ranks_fit_a_screen(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The default view of 1,000 ranks on 125 nodes: under 60 lines (the spread, the top ranks by a
    metric, the outliers, the top nodes), with the node list as Slurm compresses it; --ranks all
    shows every rank and node."""
    def slow_and_duplicated(rank: int, stats: dict[str, Any]) -> None:
        stats["identity"]["node"] = stats["identity"]["hostname"] = f"gpu{rank // 8 + 1:03d}"
        if rank in (17, 503):
            stats["iterations"]["step_time_mean_s"] = 3.0  # stragglers
        if rank == 900:
            stats["memory"]["overshoot_peak_bytes"] = 1 << 20

    directory = job(tmp_path, 1000, slow_and_duplicated, ranks_per_node=8)
    for rank in range(0, 1000, 2):  # a second, older file for every other rank
        stats = synthetic.rank_stats(rank, 1000, 8)
        stats["identity"]["pid"] = 90000 + rank
        stats["time"]["end_unix"] -= 10
        (directory / f"rank{rank}.old.{90000 + rank}.json").write_text(json.dumps(stats))
    text = run_text(capsys, str(directory))
    lines = text.splitlines()
    assert len(lines) < 60, text
    assert "nodes           125  gpu[001-125]" in text
    assert "Ranks (1000 on 125 nodes): the spread, the 5 highest by Step s, 1 of 1 outliers" in text
    assert re.search(r"^\s+17 gpu003 .* 3 cupti", text, re.MULTILINE) and re.search(r"^\s+900 gpu113 ", text, re.MULTILINE)
    assert [line.split()[0] for line in lines if re.match(r"^\s*(min|median|max) ", line)] == ["min", "median", "max"]
    (folded,) = [line for line in lines if "[duplicate-rank]" in line]
    assert folded == "warning [duplicate-rank] 500 times; 3 of them (--json lists all):"
    assert lines[lines.index(folded) + 1].startswith("    step 0 rank 0 has 2 stats files")
    everything = run_text(capsys, str(directory), "--ranks", "all")
    assert len(re.findall(r"^\s*\d+ gpu\d{3} ", everything, re.MULTILINE)) == 1000
    assert len(re.findall(r"^gpu\d{3} ", everything, re.MULTILINE)) == 125
    by_faults = run_text(capsys, str(directory), "--sort", "faults", "--ranks", "3")
    assert "the 3 highest by Faults" in by_faults


def test_plots(tmp_path: Path) -> None:
    report = report_of(job(tmp_path, 8))
    written, skipped = write_plots(report, tmp_path / "plots")
    assert [p.name for p in written] == ["migration-sizes.png", "timeline.png", "ranks.png"]
    assert skipped == [("control.png not written: no tick log with readings (limit mode with TRANSIT_TICK_LOG=1 "
                       "writes one beside each stats file)")]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert path.stat().st_size > 10_000


def test_no_png_without_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A job whose ranks never used CUDA: every plot says why it is not there, none is written."""
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "ranks.png").write_bytes(b"an old plot of another job")
    assert transit_main(["report", str(FIXTURES / "report" / "real-no-gpu"), "--no-slurm", "--plot",
                         str(plots)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line.split(" not written: ")[0] for line in err] == list(PLOTS)
    assert list(plots.iterdir()) == []


def test_plots_of_a_thousand_ranks(tmp_path: Path) -> None:
    written, _ = write_plots(report_of(job(tmp_path, 1000, ranks_per_node=8)), tmp_path / "plots")
    assert {p.name for p in written} == {"migration-sizes.png", "timeline.png", "ranks.png"}


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
    assert "for up to 3.1 s (by the tick log)" in bound_over["message"]
    written, skipped = write_plots(report_of(TICKS_DIR), tmp_path)
    assert [p.name for p in written] == list(PLOTS) and skipped == []
    assert (tmp_path / "control.png").stat().st_size > 20_000


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
    written, _skipped = write_plots(report_of(tmp_path), tmp_path / "plots")
    assert ((tmp_path / "plots" / "control.png") in written) == (summary["bound_peak_bytes"] is not None)


@pytest.mark.parametrize("row", ["1.0,lots,,2.0", "2.0,5,,nan", "inf,5,,1.0"])
def test_unreadable_tick_log_is_a_named_warning(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                row: str) -> None:
    log = copy_ticks_dir(tmp_path)
    log.write_text(f"t_s,bound_bytes,smaps_bound_bytes,work_ms\n{row}\n")
    out = run_json(capsys, str(tmp_path))
    assert [w["code"] for w in out["warnings"]] == ["unreadable-tick-log"]
    assert out["ranks"][0]["tick_log"] is None and out["ranks"][0]["device_bound_peak_bytes"] == 1831350272


def test_json_is_serialisable_without_slurm_facts(tmp_path: Path) -> None:
    report = report_of(job(tmp_path, 2))
    assert json.loads(json.dumps(report_json(report, notes(report))))["job"]["source"] == "stats-files"


def test_colours_mark_the_cells_over_thresholds(tmp_path: Path) -> None:
    def slow_rank_two(rank: int, stats: dict[str, Any]) -> None:
        stats["iterations"]["step_time_mean_s"] = 5.0 if rank == 2 else 1.5
        stats["faults"]["thrashing"] = 0 if rank == 2 else 3

    text = _render(job(tmp_path, 4, slow_rank_two), force_terminal=True, color_system="standard")
    lines = {line.split()[0]: line for line in text.splitlines() if " node1 " in line}
    red = "\x1b[31m"
    assert re.search(rf"{re.escape(red)}\s*5\x1b\[0m", lines["2"])  # the straggler's step time
    assert not re.search(rf"{re.escape(red)}\s*1.5\x1b\[0m", lines["1"])
    assert re.search(rf"{re.escape(red)}\s*3\x1b\[0m", lines["1"])  # thrashing events


def test_real_stats_files_without_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    """Files libtransit wrote on the dev cluster (job 90, srun -N2 --transit=advise, no GPU): no
    migration sections at all, a CUDA error, rank numbers from SLURM_PROCID."""
    out = run_json(capsys, str(FIXTURES / "report" / "real-no-gpu"))
    assert out["job"]["job_id"] == "90"  # from the files: the directory is not named by the job id
    assert [(r["rank"], r["node"], r["device"]) for r in out["ranks"]] == [(0, "node1", None), (1, "node2", None)]
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
    assert [(r["step"], r["rank"]) for r in out["ranks"]] == [("0", r) for r in range(12)] + [("1", 0), ("1", 1)]
    assert out["warnings"] == []
    assert "Job step" in run_text(capsys, str(directory), "--ranks", "all")


def test_timeline_intervals_from_cumulative_samples() -> None:
    from transit.report.aggregate import rank_row
    from transit.report.load import RankFile

    def intervals(timeline: list[dict[str, Any]]) -> list[tuple[float, float, int, int]]:
        stats = synthetic.example_stats() | {"timeline": timeline}
        return [(i.start_t, i.t, i.iteration, i.htod_bytes) for i in rank_row(RankFile(Path("x"), stats)).intervals]

    def sample(t: float, iteration: int, htod: int) -> dict[str, Any]:
        return {"t": t, "iteration": iteration, "resident_bytes": 0, "htod_bytes": htod, "dtoh_bytes": 0}

    # libtransit samples at iteration marks: the rank's start opens the first interval
    assert intervals([sample(1.5, 1, 100), sample(2.5, 2, 130)]) == [(0.0, 1.5, 1, 100), (1.5, 2.5, 2, 30)]
    # a ring buffer that wrapped keeps later marks only: no origin is invented
    assert intervals([sample(90.0, 300, 5000), sample(90.3, 301, 5010)]) == [(90.0, 90.3, 301, 10)]


def test_report_dir_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transit.report import jobs

    option, env, dev = tmp_path / "option", tmp_path / "env", tmp_path / "dev"
    monkeypatch.setenv("TRANSIT_REPORT_DIR", str(env))
    with pytest.raises(UsageError, match=f"^TRANSIT_REPORT_DIR={env}: no such directory"):
        default_report_dir(None, use_slurm=False)
    env.mkdir()
    dev.mkdir()
    monkeypatch.setattr(jobs, "DEV_CLUSTER_REPORT_DIR", dev)
    monkeypatch.setenv("TRANSIT_REPORT_DIR", str(env))
    assert default_report_dir(str(option), use_slurm=False) == option
    assert default_report_dir(None, use_slurm=False) == env
    monkeypatch.delenv("TRANSIT_REPORT_DIR")
    assert default_report_dir(None, use_slurm=False) == dev
    dev.rmdir()
    assert default_report_dir(None, use_slurm=False) is None
    with pytest.raises(UsageError, match="no report directory"):
        transit_main_raising(["12"])


def transit_main_raising(args: list[str]) -> None:
    from transit.report.jobs import jobs_named

    jobs_named(args, None, use_slurm=False)


# --- how a job ran, without stats (the plugin's step files; hand-made from the contract) ----------------


def test_a_job_without_stats_says_how_it_ran_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    """Job 1 (captured): `srun -N2 -n2 --transit=advise --transit-mem-limit=40G` of a CPU-only task, read
    without Slurm as after MinJobAge: not `policy -`, not `nodes 0`, exit code 1 with the reason."""
    out = run_json(capsys, str(CPU_ONLY), code=1)
    assert out["job"] == out["job"] | {"job_id": "1", "user": "transit-test", "policy": "advise", "mode": "limit",
                                       "limit_bytes": 40 << 30, "policy_source": "step-files", "nodelist": "node[1-2]",
                                       "num_nodes": 2, "num_gpus": None, "source": "step-files"}
    assert out["no_stats_reason"] == ("no task called CUDA, so no rank wrote stats (libtransit stays inert in "
                                      "processes that never do)")
    (step,) = out["steps"]
    assert step | {"file": ""} == step | {
        "file": "", "job_id": "1", "step_id": "0", "ntasks": 2, "options": {"transit": "advise",
                                                                           "transit-mem-limit": "40G"}}
    text = run_text(capsys, str(CPU_ONLY), code=1)
    assert "policy          advise  (from the plugin's step files: no rank wrote stats)" in text
    assert "mode / limit    limit / 40.0 GiB" in text and "nodes           2  node[1-2]" in text
    assert "No stats: no task called CUDA, so no rank wrote stats" in text


def test_captured_jobs_of_the_plugin(capsys: pytest.CaptureFixture[str]) -> None:
    """Jobs 2-4 (captured): a bare --transit (the plugin's default policy, options.transit null), a batch
    job of two steps, #SBATCH --transit=prefetch and an srun --transit=base --transit-mem-limit=1G, of
    which only the second wrote stats, and an array task."""
    bare = run_json(capsys, str(CAPTURED / "2"))
    assert (bare["job"]["policy"], bare["job"]["policy_source"], bare["steps"][0]["options"]) == (
        "base", "stats-files", {})
    two = run_json(capsys, str(CAPTURED / "3"))
    assert (two["job"]["policy"], two["job"]["mode"], two["job"]["policy_source"]) == (
        "mixed", "mixed", "stats-files+step-files")
    assert [(s["step_id"], s["policy"], s["mode"], s["limit_bytes"], s["nodes"]) for s in two["steps"]] == [
        ("0", "prefetch", "physical", None, "node[1-2]"), ("1", "base", "limit", 1 << 30, "node1")]
    assert [(r["step"], r["rank"], r["policy"]) for r in two["ranks"]] == [("1", 0, "base")]
    text = run_text(capsys, str(CAPTURED / "3"))
    assert "step 1          base limit 1.0 GiB on node1, 1 task" in text
    task = run_json(capsys, str(CAPTURED / "4"))
    assert (task["job"]["job_id"], task["job"]["policy"], len(task["ranks"])) == ("4", "advise", 1)


def test_steps_with_different_policies(capsys: pytest.CaptureFixture[str]) -> None:
    """Any policy name the files give is taken (here `hybrid`, which the lead adds later)."""
    out = run_json(capsys, str(JOBS / "4323"), code=1)
    assert (out["job"]["policy"], out["job"]["mode"], out["job"]["nodelist"], out["job"]["num_nodes"]) == (
        "mixed", "mixed", "node[1-3]", 3)
    assert [(s["step_id"], s["policy"]) for s in out["steps"]] == [("0", "advise"), ("1", "hybrid")]
    text = run_text(capsys, str(JOBS / "4323"), code=1)
    assert "step 1          hybrid limit 1.0 GiB on node[2-3], 2 tasks" in text


def test_a_step_file_that_is_not_one_is_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = job(tmp_path, 2)
    (directory / "step-0.json").write_text('{"schema": "transit.step/1", "job_id": 1234, "step_id": 0, "ntasks": "2"}')
    (directory / "step-1.json").write_text('{"schema": "transit.step/7"}')
    out = run_json(capsys, str(directory))
    assert [(s["job_id"], s["step_id"], s["ntasks"]) for s in out["steps"]] == [("1234", "0", None)]
    (warning,) = out["warnings"]
    assert warning["code"] == "unknown-schema" and "this step's record is left out" in warning["message"]


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a directory another user cannot read: needs root")
def test_a_job_directory_the_user_cannot_read() -> None:
    """The plugin makes each job's directory readable by the job's user only: another user is told so."""
    with tempfile.TemporaryDirectory(dir="/tmp") as shared:  # pytest's tmp_path is root's alone
        Path(shared).chmod(0o755)
        directory = job(Path(shared), 2)
        directory.chmod(0o700)
        result = subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-m", "transit", "report",
                                 str(directory), "--no-slurm", "--json"], capture_output=True, text=True, cwd=REPO,
                                check=False, timeout=60)
    assert result.returncode == 1, result.stderr
    out = json.loads(result.stdout)
    assert out["no_stats_reason"] == (f"cannot read {directory}: Permission denied (a job's directory is readable "
                                      "by the job's user only)")
    assert out["warnings"] == [{"code": "unreadable-directory", "message": out["no_stats_reason"],
                                "path": str(directory)}]  # once, though stats and step files are both read


# --- running jobs: partial stats (hand-made from the stats-file contract) ----------------------------


def test_partial_stats_of_a_running_job_are_marked_with_their_age(capsys: pytest.CaptureFixture[str]) -> None:
    """Job 4322: two ranks' periodic refreshes, written at 1764446701 and 1764446721."""
    now = 1764446721.0 + 45
    report = report_of(JOBS / "4322", now_unix=now)
    assert [(row.rank, row.partial, row.end_unix) for row in report.ranks] == [(0, True, None), (1, True, None)]
    doc = report_json(report, notes(report))
    assert doc["partial"] is True and doc["ranks"][0]["written_unix"] == 1764446701.0
    assert doc["job"]["elapsed_s"] == 1764446721.0 - 1764446401.0  # start to the latest refresh
    (warning,) = doc["warnings"]
    assert warning == {"code": "partial-stats", "path": None, "message": (
        "the stats of ranks 0-1 are partial, written 45 s to 65 s ago: the rank was still running then, or was "
        "killed before its final write")}
    buffer = io.StringIO()
    render(report, notes(report), Console(file=buffer, width=132, color_system=None))
    assert f"stats           2 ranks in {JOBS / '4322'} (2 partial, latest written 45 s ago)" in buffer.getvalue()


def test_partial_stats_against_slurms_state(capsys: pytest.CaptureFixture[str]) -> None:
    from transit.report.aggregate import build_report
    from transit.report.load import StatsFiles
    from transit.slurm import JobFacts

    files, _ = StatsFiles(JOBS / "4322").load()
    running = JobFacts("4322", "squeue", state="RUNNING", start_unix=1764446400)
    report = build_report(JOBS / "4322", "4322", files, [], running, [], [], now_unix=1764446721.0 + 5)
    assert [(w.code, w.message) for w in report.warnings] == [("job-not-finished", (
        "job 4322 is RUNNING: the stats of ranks 0-1 are partial (the latest refresh, written 5 s to 25 s ago; "
        "ranks refresh every TRANSIT_STATS_INTERVAL seconds, 60 by default)"))]
    ended = JobFacts("4322", "sacct", state="NODE_FAIL", end_unix=1764446800)
    report = build_report(JOBS / "4322", "4322", files, [], ended, [], [], now_unix=1764446900.0)
    assert [(w.code, w.message) for w in report.warnings] == [("partial-stats", (
        "ranks 0-1 never wrote final stats, the last 79 s before the job ended: the rank was killed outright "
        "(SIGKILL, out of memory, a node failure), so its figures stop at its last refresh"))]


@pytest.mark.parametrize(
    ("facts", "submitted", "reason"),
    [
        ({"state": "PENDING"}, "", "the job has not started yet"),
        ({"state": "COMPLETED", "submit_line": "sbatch job.sh"}, "",
         "TRANSIT was not asked for: no --transit on the submit line (sbatch job.sh), and no stats directory"),
        ({"state": "COMPLETED", "submit_line": "salloc --transit=advise", "step_submit_lines": {"0": "srun x"}},
         "--transit=advise",
         "yet the submit line asks for TRANSIT (--transit=advise): the plugin makes it for every step it runs"),
        ({"state": "COMPLETED", "submit_line": "sbatch --transit=advise --wrap 'sleep 60'"}, "--transit=advise",
         "TRANSIT was asked for (--transit=advise), but no job step ran: TRANSIT runs srun steps, never the batch"),
        ({"state": "COMPLETED"}, "", ("no step of this job ran under TRANSIT here (the plugin makes the directory "
         "for every srun step with --transit; a batch script's own commands never run under it), or the report")),
    ],
)
def test_reasons_without_a_stats_directory(tmp_path: Path, facts: dict[str, Any], submitted: str,
                                           reason: str) -> None:
    from transit.report.aggregate import build_report
    from transit.report.load import SubmitLines
    from transit.slurm import JobFacts

    job_facts = JobFacts("55", "sacct", **facts)
    runs = SubmitLines.of_job(job_facts, None)
    assert bool(runs) == bool(submitted)
    report = build_report(tmp_path / "55", "55", [], [], job_facts, runs, [])
    assert reason in (report.no_stats_reason or "")


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("RUNNING", "the job is RUNNING: none of its ranks has written stats yet"),
        ("OUT_OF_MEMORY", "the job ended OUT_OF_MEMORY before any rank wrote stats: a rank writes them at exit"),
        ("COMPLETED", "no task called CUDA, so no rank wrote stats"),
    ],
)
def test_reasons_with_a_stats_directory(state: str, reason: str) -> None:
    from transit.report.aggregate import build_report
    from transit.report.load import StepFiles
    from transit.slurm import JobFacts

    steps, _ = StepFiles(CPU_ONLY).load()
    report = build_report(CPU_ONLY, "1", [], steps, JobFacts("1", "sacct", state=state), [], [])
    assert (report.no_stats_reason or "").startswith(reason)


# --- several jobs: one line each ----------------------------------------------------------------------


def test_several_jobs_one_line_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    healthy = job(tmp_path, 8)
    text = run_text(capsys, str(healthy), str(CPU_ONLY), str(JOBS / "4322"))
    lines = text.splitlines()
    assert lines[0] == "TRANSIT report: 3 jobs (one line each; give one job id for its full report)"
    rows = [line for line in lines if line.startswith((str(healthy), str(JOBS), str(CAPTURED)))]
    assert len(rows) == 3
    assert "advise limit 24G" in rows[0] and "8 ranks" in rows[0] and "small-migrations" not in rows[0]
    assert "advise limit 40G" in rows[1] and "none" in rows[1] and "no task called CUDA" in rows[1]
    assert "2 ranks, 2 partial" in rows[2]
    out = run_json(capsys, str(healthy), str(CPU_ONLY))
    assert out["schema"] == "transit.report-list/1"
    assert [(j["job_id"], j["ranks"], j["policy_source"]) for j in out["jobs"]] == [
        ("1234", 8, "stats-files"), ("1", 0, "step-files")]
    assert out["jobs"][0]["advice"] == []
    assert out["jobs"][0]["peak_cap_share"] == 1.0
    # exit code 1 only when no job has usable stats
    run_text(capsys, str(CPU_ONLY), str(JOBS / "4323"), code=1)
    assert transit_main(["report", str(healthy), str(CPU_ONLY), "--no-slurm", "--plot", str(tmp_path)]) == 2
    assert "--plot draws one job, and these are 2" in capsys.readouterr().err


def test_jobs_of_a_user_from_the_step_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without Slurm (past MinJobAge, no accounting), -u finds the user's jobs by their step files'
    user and start time; another user's jobs are left out."""
    me = pwd.getpwuid(os.getuid()).pw_name
    for job_id, user, start in (("11", me, 1764446400.0), ("12", me, 1764450000.0), ("13", "someone-else", 1764446500.0),
                                ("14", me, 1700000000.0)):
        step = json.loads((CPU_ONLY / "step-0.json").read_text())
        step.update(job_id=job_id, user=user, start_unix=start)
        (tmp_path / job_id).mkdir()
        (tmp_path / job_id / "step-0.json").write_text(json.dumps(step))
    shutil_copy_ranks(JOBS / "4322", tmp_path / "12")
    found = jobs_of_user(me, "2025-11-29T00:00:00", "2025-12-31", str(tmp_path), use_slurm=False)
    assert [j.job_id for j in found] == ["11", "12"]
    out = run_json(capsys, "-u", me, "-S", "2025-11-29", "-E", "2025-12-31", "--report-dir", str(tmp_path))
    assert [(j["job_id"], j["ranks"]) for j in out["jobs"]] == [("11", 0), ("12", 2)]
    text = run_text(capsys, "-u", me, "-S", "2020-01-01", "-E", "2020-01-02", "--report-dir", str(tmp_path), code=1)
    assert text == ""
    assert transit_main(["report", "-u", me, "-S", "2020-01-01", "-E", "2020-01-02", "--report-dir", str(tmp_path),
                         "--no-slurm"]) == 1
    assert "no jobs of" in capsys.readouterr().err


def shutil_copy_ranks(source: Path, target: Path) -> None:
    for path in source.glob("rank*.json"):
        (target / path.name).write_bytes(path.read_bytes())


def test_times_as_sacct_reads_them() -> None:
    now = 1764446400.0  # 2025-11-29T20:00:00 UTC
    assert parse_time("now", now) == now
    assert parse_time("now-3days", now) == now - 3 * 86400
    assert parse_time("now-1hour", now) == now - 3600
    assert parse_time("now-90minutes", now) == now - 5400
    assert parse_time("2025-11-29T20:00:00", now) == parse_time("2025-11-29T20:00", now)
    assert parse_time("today", now) <= now < parse_time("today", now) + 86400
    with pytest.raises(UsageError, match=r"time 'now\+1day' is not one of"):
        parse_time("now+1day", now)


def test_stats_files_of_both_versions_of_the_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A final write under the refresh contract ("partial": false, written_unix) reads as before."""
    def final(rank: int, stats: dict[str, Any]) -> None:
        stats["partial"] = False
        stats["time"] = copy.deepcopy(stats["time"]) | {"written_unix": stats["time"]["end_unix"]}

    out = run_json(capsys, str(job(tmp_path, 2, final)))
    assert out["partial"] is False and out["warnings"] == []
    assert [r["written_unix"] for r in out["ranks"]] == [r["end_unix"] for r in out["ranks"]]


def test_a_ranks_profile_is_replayed_beside_what_it_measured(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Rank 0 kept a profile (test_replay's model at L = 25 MiB, base): the report's prediction is
    replay's steady iteration, the measurement its timeline's last iteration and its step median."""
    from test_replay import LIMIT_BYTES, profile, rows

    def base_at_l(rank: int, stats: dict[str, Any]) -> None:
        stats["config"].update(policy="base", limit_bytes=LIMIT_BYTES)

    directory = job(tmp_path, 2, change=base_at_l)
    stats_file = next(directory.glob("rank0.*.json"))
    kept = profile(tmp_path).rename(stats_file.with_name(stats_file.name.removesuffix(".json") + ".profile.json.gz"))
    steady = rows(kept, "base", "--compute-s", "0.006")[-1]
    out = run_json(capsys, str(directory), "--compute-s", "0.006")
    (p,) = out["predictions"]
    assert (p["rank"], p["policy"], p["look_ahead"]) == ("0", "base", False)
    assert (p["htod_bytes"], p["dtoh_bytes"], p["step_s"]) == (steady["htod_bytes"], steady["dtoh_bytes"],
                                                               steady["step_s"])
    assert (p["measured_htod_bytes"], p["measured_dtoh_bytes"], p["measured_step_s"]) == (
        synthetic.GIB // 4, synthetic.GIB // 8, 1.5)
    text = run_text(capsys, str(directory), "--compute-s", "0.006")
    assert re.search(r"Replay of rank 0's profile \(base\): a step [0-9.]+ s \(kernels 0.006 s", text)
    assert run_json(capsys, str(directory))["predictions"][0]["step_s"] is None


def test_an_unreadable_profile_is_a_named_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = job(tmp_path, 1)
    stats_file = next(directory.glob("rank0.*.json"))
    stats_file.with_name(stats_file.name.removesuffix(".json") + ".profile.json.gz").write_bytes(b"\x1f\x8b cut")
    out = run_json(capsys, str(directory))
    assert out["predictions"] == [] and codes(out["warnings"]) == ["unreadable-profile"]
    assert out["ranks"][0]["rank"] == 0


def test_hybrids_h200_run_is_replayed_with_its_movers_plan(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Hybrid at global batch 64, micro-batch 8, L = 25.5 GiB on the H200 (49f6d8b; the stats file and
    profile as written, the profile without its per-kernel durations): its mover planned to stream,
    so replay runs its plan. It reads the optimizer's moments in place (15.14 GB: AdamW's two fp32
    states of the 1.89B parameters) and streams the rest of the overflow; the run measured its mover's
    0.40 GB each way in its last iteration and 19.1 s a step."""
    directory = tmp_path / "run"
    directory.mkdir()
    for suffix in (".json", ".profile.json.gz"):
        (directory / f"rank0.vm.967{suffix}").write_bytes((PROFILES / f"h200-gb64-mb8-hybrid{suffix}").read_bytes())
    (p,) = run_json(capsys, str(directory), "--compute-s", "5.02")["predictions"]
    assert (p["policy"], p["look_ahead"]) == ("hybrid", True)
    assert p["zero_copy_bytes"] == pytest.approx(15_142_371_328, rel=0.01)
    assert p["htod_bytes"] == p["dtoh_bytes"] == p["streamed_bytes"] > 0
    assert (p["measured_htod_bytes"], p["measured_step_s"]) == (396_361_728, 19.110751)


def test_a_profile_larger_than_the_ranks_l_is_a_named_warning(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from test_replay import MiB, profile

    directory = job(tmp_path, 1, change=lambda rank, stats: stats["config"].update(limit_bytes=4 * MiB))
    stats_file = next(directory.glob("rank0.*.json"))
    profile(tmp_path).rename(stats_file.with_name(stats_file.name.removesuffix(".json") + ".profile.json.gz"))
    out = run_json(capsys, str(directory))
    (warning,) = out["warnings"]
    assert out["predictions"] == [] and warning["code"] == "unreadable-profile"
    assert "the rank's L (4194304 bytes) is below the working set of the profile's largest kernel" in warning["message"]


# --- files someone else wrote, and the reasons the plugin knows ---------------------------------------

NOBODY = pwd.getpwnam("nobody")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_of_another_user_is_left_out_with_a_warning(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A stats file the job's user did not write (the directory's owner is the job's user) cannot
    be trusted: its policy would otherwise outvote the step file's."""
    directory = job(tmp_path, 2)
    forged = directory / "rank0.evil.1.json"
    stats = json.loads(next(directory.glob("rank0.*.json")).read_text())
    stats["config"]["policy"] = "hybrid"
    forged.write_text(json.dumps(stats))
    os.chown(forged, NOBODY.pw_uid, NOBODY.pw_gid)
    out = run_json(capsys, str(directory))
    assert [r["rank"] for r in out["ranks"]] == [0, 1] and out["job"]["policy"] == "advise"
    assert [(w["code"], w["path"]) for w in out["warnings"]] == [("foreign-file", str(forged))]
    assert out["warnings"][0]["message"].startswith(f"rank0.evil.1.json belongs to nobody (uid {NOBODY.pw_uid}), "
                                                    "not to the job's user root (uid 0)")


def test_a_refused_step_is_the_reason_for_no_stats(tmp_path: Path) -> None:
    from transit.report.aggregate import build_report
    from transit.report.load import StepFiles

    directory = tmp_path / "77"
    directory.mkdir()
    step = json.loads((CPU_ONLY / "step-0.json").read_text())
    step["refused"] = "TRANSIT_WARMUP_ITERS='0' is not allowed; use a whole number from 1 to 1000"
    (directory / "step-0.json").write_text(json.dumps(step))
    steps, warnings = StepFiles(directory).load()
    report = build_report(directory, "77", [], steps, None, [], warnings)
    assert report.no_stats_reason == ("the plugin refused step 0 before its program ran: TRANSIT_WARMUP_ITERS='0' "
                                      "is not allowed; use a whole number from 1 to 1000")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
@pytest.mark.parametrize("planted", ["link", "other-user"])
def test_a_job_directory_the_plugin_refused_is_the_reason(tmp_path: Path, planted: str) -> None:
    from transit.report.aggregate import build_report
    from transit.slurm import JobFacts

    directory = tmp_path / "88"
    if planted == "link":
        directory.symlink_to(tmp_path)
    else:
        directory.mkdir()
        os.chown(directory, NOBODY.pw_uid, NOBODY.pw_gid)
    facts = JobFacts("88", "sacct", state="FAILED", user="transit-test")
    report = build_report(directory, "88", [], [], facts, [], [])
    found = "a symbolic link" if planted == "link" else "a directory of nobody"
    assert report.no_stats_reason == (f"{directory} is {found}, not transit-test's job directory: the plugin refused "
                                      "it, so every step failed before its program ran; an administrator must remove it")


@pytest.mark.parametrize(("directory", "plot", "axis", "limit", "peak"), [
    (REPO / "examples" / "h200-advise", "timeline", 1, 25.5, 26.3),  # the bound over the limit
    (TICKS_DIR, "control", 0, 1.0, 1.7),
])
def test_memory_plots_show_the_limit_and_the_bound_peak(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                        directory: Path, plot: str, axis: int, limit: float,
                                                        peak: float) -> None:
    """The y-axis is fixed after the limit and the peak are drawn: both lines are inside it."""
    from transit.report import plots

    figures: list[Any] = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or path)
    getattr(plots, plot)(report_of(directory), tmp_path / "p.png")
    ax = figures[0].axes[axis]
    heights = {round(float(line.get_ydata()[0]), 1): line.get_linestyle() for line in ax.get_lines()}
    assert heights[limit] == "--" and heights[peak] == ":"
    bottom, top = ax.get_ylim()
    assert bottom == 0 and top > max(limit, peak)
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert f"limit {limit:.1f} GiB" in labels and any(label.endswith(f"peak {peak:.1f} GiB") for label in labels)


def test_a_directory_without_stats_or_step_files_is_not_called_a_cpu_only_job(tmp_path: Path,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, str(tmp_path), code=1)
    assert out["no_stats_reason"] == (f"{tmp_path} holds no stats file (rank*.json) and no step file (step-*.json): "
                                      "it is not a job's stats directory, or nothing ran under TRANSIT there")


def test_non_finite_numbers_in_a_file_read_as_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Python's json reads NaN and Infinity, which no stats file holds. Before, the text report died
    converting NaN to an int, and --json wrote them back, which strict JSON readers refuse."""
    def garble(rank: int, stats: dict[str, Any]) -> None:
        if rank == 0:
            stats["time"]["start_unix"] = float("inf")
            stats["time"]["written_unix"] = float("nan")

    directory = job(tmp_path, 2, garble)
    run_text(capsys, str(directory))

    def refuse(constant: str) -> None:
        raise AssertionError(f"--json wrote {constant}")

    assert transit_main(["report", str(directory), "--json", "--no-slurm"]) == 0
    json.loads(capsys.readouterr().out, parse_constant=refuse)


@pytest.mark.parametrize("planted", ["fifo", "/dev/zero"])
def test_a_file_that_is_not_regular_is_left_out_unread(tmp_path: Path, planted: str) -> None:
    """Before, a FIFO named like a stats file blocked the report for ever, and a link to /dev/zero
    read until memory ran out."""
    directory = job(tmp_path, 2)
    odd = directory / "rank7.odd.1.json"
    os.mkfifo(odd) if planted == "fifo" else odd.symlink_to(planted)
    result = subprocess.run([sys.executable, "-m", "transit", "report", str(directory), "--no-slurm", "--json"],
                            capture_output=True, text=True, cwd=REPO, check=False, timeout=60)
    assert result.returncode == 0, result.stderr
    messages = [w["message"] for w in json.loads(result.stdout)["warnings"] if w["code"] == "unreadable-file"]
    assert messages == ["cannot read rank7.odd.1.json: not a regular file; its rank is left out"]
