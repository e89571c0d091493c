"""--jobs-out and --timeline-out: conservation checked on the committed synthetic traces from the
two files alone (every job once per replay, none before its submit, GPU-seconds, queue-seconds and
cross-rack bytes the same summed per job and per minute, never more GPUs busy than the cluster has)."""

import argparse
import csv
import importlib.util
import json
from collections import defaultdict
from pathlib import Path

import pytest

from transit.sim.cli import register
from transit.sim.placement import RACK_GPUS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sim"
RACKS = 8
RELATIVE = 1e-6


def simulate(argv, capsys):
    parser = argparse.ArgumentParser(prog="transit")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    return json.loads(capsys.readouterr().out)


def read(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def close(a, b):
    return abs(a - b) <= RELATIVE * max(1.0, abs(a), abs(b))


@pytest.mark.parametrize(("trace", "extra"), [
    ("synthetic_seren_2000.json", ["--backfill", "--oversubscription", "16", "--comm-fraction", "0.5"]),
    ("synthetic_kalos_1000.json", ["--reduction", "0.25", "--placement", "spread"]),
])
def test_conservation_from_the_audit_files(tmp_path, capsys, trace, extra):
    jobs_path, timeline_path = tmp_path / "jobs.csv", tmp_path / "timeline.csv"
    document = simulate(["simulate", "--trace", str(FIXTURES / trace), "--racks", str(RACKS), "--json",
                         "--jobs-out", str(jobs_path), "--timeline-out", str(timeline_path), *extra], capsys)
    jobs, minutes = read(jobs_path), read(timeline_path)
    by_run = defaultdict(list)
    for row in jobs:
        by_run[row["run"]].append(row)
    assert set(by_run) == {"baseline", "transit"}
    ids = [row["job_id"] for row in by_run["baseline"]]
    assert len(ids) == len(set(ids)) == len(by_run["transit"])             # every job once per replay
    assert ids == [row["job_id"] for row in by_run["transit"]]
    per_minute = defaultdict(list)
    for row in minutes:
        per_minute[row["run"]].append(row)
    for name, rows in by_run.items():
        ran = [row for row in rows if row["dropped"] == "False"]
        for row in rows:
            if row["dropped"] == "True":
                assert row["start_s"] == "" and row["drop_reason"]
        for row in ran:
            submit, start, end = float(row["submit_s"]), float(row["start_s"]), float(row["end_s"])
            assert start >= submit and end >= start
            assert float(row["contention_s"]) >= -1e-6
            assert close(end - start, float(row["run_time_s"]) + float(row["contention_s"]))
            assert close(float(row["queue_s"]), start - submit)
        timeline = per_minute[name]
        assert [int(row["minute"]) for row in timeline] == list(range(len(timeline)))
        gpu_seconds = sum(int(r["held_gpus"]) * (float(r["end_s"]) - float(r["start_s"])) for r in ran)
        assert close(sum(float(m["busy_gpus"]) for m in timeline) * 60, gpu_seconds)
        assert close(sum(float(m["queued_jobs"]) for m in timeline) * 60, sum(float(r["queue_s"]) for r in ran))
        assert close(sum(float(m["cross_rack_bytes"]) for m in timeline),
                     sum(float(r["cross_rack_bytes"]) for r in ran))
        assert max(float(m["busy_gpus"]) for m in timeline) <= RACKS * RACK_GPUS * (1 + RELATIVE)
        # the files agree with the summary the study printed
        assert len(ran) == document[name]["jobs_replayed"]
        assert close(sum(float(r["cross_rack_bytes"]) for r in ran), document[name]["network"]["cross_rack_bytes"])
        assert close(sum(float(r["contention_s"]) for r in ran) / 3600, document[name]["network"]["contention_h"])
    reduced = [row for row in by_run["transit"] if row["reduced"] == "True" and row["dropped"] == "False"]
    assert reduced and all(int(row["nodes_after"]) < int(row["nodes_before"]) for row in reduced)
    baseline_ran = {row["job_id"] for row in by_run["baseline"] if row["dropped"] == "False"}
    assert sum(row["job_id"] in baseline_ran for row in reduced) == document["jobs"]["reduced"]


def test_contention_shows_in_the_audit_and_the_summary(tmp_path, capsys):
    jobs_path = tmp_path / "jobs.csv"
    document = simulate(["simulate", "--trace", str(FIXTURES / "synthetic_seren_2000.json"), "--racks", str(RACKS),
                         "--json", "--oversubscription", "16", "--comm-fraction", "0.5",
                         "--jobs-out", str(jobs_path)], capsys)
    slowed = [row for row in read(jobs_path) if row["contention_s"] and float(row["contention_s"]) > 1e-6]
    assert slowed and all(int(row["racks"]) > 1 for row in slowed)     # only multi-rack jobs are slowed
    assert document["baseline"]["network"]["jobs_slowed"] == sum(1 for r in slowed if r["run"] == "baseline")


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None, reason="pyarrow is not installed")
def test_parquet_has_the_csv_rows(tmp_path, capsys):
    import pyarrow.parquet

    for suffix in ("csv", "parquet"):
        simulate(["simulate", "--trace", str(FIXTURES / "synthetic_kalos_1000.json"), "--racks", str(RACKS),
                  "--json", "--jobs-out", str(tmp_path / f"jobs.{suffix}")], capsys)
    table = pyarrow.parquet.read_table(tmp_path / "jobs.parquet")
    rows = read(tmp_path / "jobs.csv")
    assert table.num_rows == len(rows) and table.column_names == list(rows[0])
