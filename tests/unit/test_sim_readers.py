"""Trace readers: every format gives the same normalized jobs, and bad rows are counted, not lost."""

import time
from pathlib import Path

import pytest

from transit.errors import UsageError
from transit.sim import sacct
from transit.sim.jobs import Job, meaningful_gpu_job
from transit.sim.traces import detect_format, read_trace

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sim"


def ids(load):
    return [(j.job_id, j.duration, j.gpus) for j in load.jobs]


@pytest.mark.parametrize(
    ("name", "fmt"),
    [("acme_seren.csv", "acme"), ("acme_kalos.csv", "acme"), ("helios.csv", "helios"),
     ("sacct_epoch.txt", "sacct"), ("sacct_local.txt", "sacct"), ("sacct_22.05.json", "sacct-json"),
     ("sacct_24.11.json", "sacct-json"), ("transit_trace.json", "transit-json")],
)
def test_format_is_detected(name, fmt):
    assert detect_format(str(FIXTURES / name)) == fmt


def test_acme_seren_keeps_gpu_jobs_and_counts_the_rest():
    load = read_trace(str(FIXTURES / "acme_seren.csv"))
    assert ids(load) == [("dlc1a2b3c", 120, 1), ("dlc1a2b3d", 3600, 16), ("dlc1a2b3e", 30, 8),
                         ("dlc1a2b42", 86400, 64)]
    assert load.rows == 7
    assert load.bad == {"gpu_num 'four' is not a number": 1}
    assert load.filtered == {"no GPU": 1, "ran under 1 s": 1}
    # +08:00 offsets: 08:00:10 local is 00:00:10 UTC
    assert load.jobs[1].submit - load.jobs[0].submit == 10
    assert load.jobs[0].submit == 1677628800.0


def test_acme_kalos_schema_and_bad_time():
    load = read_trace(str(FIXTURES / "acme_kalos.csv"), "acme")
    assert ids(load) == [("k0001", 60, 1), ("k0002", 86400, 256), ("k0003", 300, 8)]
    assert sum(load.bad.values()) == 1 and load.bad_examples == ["row 5: submit_time 'not-a-time' is not an ISO time"]


def test_helios_short_row_is_bad():
    load = read_trace(str(FIXTURES / "helios.csv"))
    assert ids(load) == [("2", 10800, 8), ("3", 600, 32)]
    assert load.bad == {"11 fields, header has 12": 1}
    assert load.filtered == {"no GPU": 1}


def test_sacct_epoch_export():
    load = read_trace(str(FIXTURES / "sacct_epoch.txt"))
    assert ids(load) == [("101", 3600, 16), ("102", 300, 2), ("106", 86400, 32)]
    assert load.jobs[2].state == "CANCELLED"   # "CANCELLED by 1000"
    assert load.filtered == {"job step row": 2, "no GPU": 1, "never ran (PENDING)": 1}
    assert sum(load.bad.values()) == 1


def test_sacct_local_times_follow_the_time_zone(monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    try:
        load = read_trace(str(FIXTURES / "sacct_local.txt"))
    finally:
        monkeypatch.undo()
        time.tzset()
    assert ids(load) == [("7", 90000, 32), ("8", 1800, 4)]
    assert load.jobs[0].submit == 1714564800.0 - 8 * 3600   # 12:00 in UTC+8
    assert load.filtered == {"job step row": 1, "ran under 1 s": 1}
    assert sum(load.bad.values()) == 1


def test_sacct_json_both_schemas():
    old = read_trace(str(FIXTURES / "sacct_22.05.json"))
    assert ids(old) == [("21", 1800, 16)]
    assert old.filtered == {"never started": 1, "no GPU": 1}
    assert sum(old.bad.values()) == 1
    new = read_trace(str(FIXTURES / "sacct_24.11.json"))
    # the untyped gres/gpu entry wins over the typed one (no double counting); typed alone is used
    assert ids(new) == [("31", 7200, 16), ("32", 120, 4)]
    assert new.filtered == {"never started": 1}


def test_project_json_and_missing_field():
    load = read_trace(str(FIXTURES / "transit_trace.json"))
    assert ids(load) == [("a", 100, 24), ("b", 50, 16), ("c", 30, 8)]
    assert load.summary()["bad_rows"] == 1


@pytest.mark.parametrize(("text", "gpus"), [
    ("billing=8,cpu=8,gres/gpu=4,mem=1G", 4), ("cpu=8,gres/gpu:a100=2,gres/gpu:v100=1", 3),
    ("cpu=8,gres/gpu=4,gres/gpu:a100=4", 4), ("gpu:a100:4(IDX:0-3)", 4), ("cpu=4", 0), ("", 0)])
def test_gpu_count_from_tres_and_gres(text, gpus):
    assert sacct.parse_gpus(text) == gpus


@pytest.mark.parametrize(("text", "seconds"), [("00:30:00", 1800), ("1-01:00:00", 90000), ("05:07", 307)])
def test_elapsed(text, seconds):
    assert sacct.parse_elapsed(text) == seconds


def test_filter_reasons():
    assert meaningful_gpu_job(Job("1", 0, 10, 1, "COMPLETED")) is None
    assert meaningful_gpu_job(Job("1", 0, 10, 0)) == "no GPU"
    assert meaningful_gpu_job(Job("1", 0, 0.5, 8)) == "ran under 1 s"
    assert meaningful_gpu_job(Job("1", 0, 10, 8, "PENDING")) == "never ran (PENDING)"


def test_unknown_format_is_a_usage_error(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(UsageError, match="cannot tell its format"):
        read_trace(str(path))
    with pytest.raises(UsageError, match="header lacks"):
        read_trace(str(path), "acme")


def test_unreadable_files_are_usage_errors(tmp_path):
    binary = tmp_path / "trace.csv"
    binary.write_bytes(bytes(range(128, 256)))
    with pytest.raises(UsageError, match="not a text file"):
        read_trace(str(binary))
    with pytest.raises(UsageError, match="not a text file"):
        read_trace(str(binary), "acme")
    with pytest.raises(UsageError, match="Is a directory"):
        read_trace(str(tmp_path), "sacct")
