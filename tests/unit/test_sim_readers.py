"""Trace readers: every format gives the same normalized jobs, and bad rows are counted by reason
with their line numbers, not lost."""

import json
import time
from pathlib import Path

import pytest

from transit.errors import UsageError
from transit.sim import sacct
from transit.sim.jobs import HET_COMPONENT, MAX_DURATION_DAYS, Job, meaningful_gpu_job
from transit.sim.traces import detect_format, read_trace

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sim"
OVER_MAX = f"run time over {MAX_DURATION_DAYS} days"


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
    assert [j.nodes for j in load.jobs] == [1, 2, 1, 8]
    assert load.rows == 7
    assert load.bad == {"gpu_num or node_num is not a number": 1}
    assert load.bad_lines == {"gpu_num or node_num is not a number": [7]}
    assert load.filtered == {"no GPU": 1, "ran under 1 s": 1}
    # +08:00 offsets: 08:00:10 local is 00:00:10 UTC; the recorded start 2 s later
    assert load.jobs[1].submit - load.jobs[0].submit == 10
    assert load.jobs[0].submit == 1677628800.0
    assert load.jobs[1].start - load.jobs[1].submit == 2
    assert {j.cluster for j in load.jobs} == {"acme_seren"}


def test_acme_kalos_schema_and_bad_time():
    load = read_trace(str(FIXTURES / "acme_kalos.csv"), "acme")
    assert ids(load) == [("k0001", 60, 1), ("k0002", 86400, 256), ("k0003", 300, 8)]
    assert load.bad_lines == {"submit_time, start_time or end_time is not an ISO time": [5]}


def test_helios_short_row_is_bad():
    load = read_trace(str(FIXTURES / "helios.csv"))
    assert ids(load) == [("2", 10800, 8), ("3", 600, 32)]
    assert load.bad_lines == {"11 fields, header has 12": [5]}
    assert load.filtered == {"no GPU": 1}
    assert [j.nodes for j in load.jobs] == [1, 4]


# The jobs of tests/fixtures/sim/capture-sacct.sh as sacct wrote them on the dev cluster (22.05.8,
# slurmdbd, 4 GPUs per node): (JobID, run time s, GPUs, nodes, state); then its rows that are not jobs
CAPTURED_JOBS = [("1", 4, 8, 2, "COMPLETED"), ("2_0", 2, 1, 1, "COMPLETED"), ("2_1", 2, 1, 1, "COMPLETED"),
                 ("3", 2, 2, 1, "FAILED"), ("6", 3, 16, 4, "CANCELLED")]  # 6: "CANCELLED by 0"
CAPTURED_FILTERED = {"no GPU": 1, "ran under 1 s": 1}  # prep (CPU only) and quick (`true`)
CAPTURED_SUBMIT, CAPTURED_TRAIN_START = 1796170346.0, 1796170349.0


def captured(load) -> list[tuple]:
    return sorted((j.job_id, j.duration, j.gpus, j.nodes, j.state) for j in load.jobs)


def test_sacct_epoch_export():
    load = read_trace(str(FIXTURES / "sacct_epoch.txt"))
    assert captured(load) == CAPTURED_JOBS
    assert load.filtered == {"job step row": 17, **CAPTURED_FILTERED}
    assert load.bad_lines == {"job not finished (PENDING)": [20]}  # held, never started
    train = load.jobs[0]
    assert (train.submit, train.start) == (CAPTURED_SUBMIT, CAPTURED_TRAIN_START)


def test_sacct_local_times_follow_the_time_zone(monkeypatch):
    """The same jobs in local times of UTC+8 and Elapsed: the same epoch times when read in that zone."""
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    try:
        load = read_trace(str(FIXTURES / "sacct_local.txt"))
    finally:
        monkeypatch.undo()
        time.tzset()
    assert captured(load) == CAPTURED_JOBS
    assert (load.jobs[0].submit, load.jobs[0].start) == (CAPTURED_SUBMIT, CAPTURED_TRAIN_START)
    assert load.filtered == {"job step row": 17, **CAPTURED_FILTERED}
    assert load.bad_lines == {"job not finished (PENDING)": [20]}


def test_sacct_json_reads_the_jobs_the_text_export_does():
    load = read_trace(str(FIXTURES / "sacct_22.05.json"))
    text = read_trace(str(FIXTURES / "sacct_epoch.txt"))
    assert captured(load) == CAPTURED_JOBS
    assert sorted((j.job_id, j.submit, j.start) for j in load.jobs) == sorted(
        (j.job_id, j.submit, j.start) for j in text.jobs)
    assert load.filtered == CAPTURED_FILTERED  # --json has no step records of its own
    assert load.bad_lines == {"job not finished (PENDING)": [7]}
    assert {j.cluster for j in load.jobs} == {"transit-dev"}


def test_sacct_json_24_11_schema():
    new = read_trace(str(FIXTURES / "sacct_24.11.json"))
    # the untyped gres/gpu entry wins over the typed one (no double counting); typed alone is used
    assert ids(new) == [("31", 7200, 16), ("32", 120, 4)]
    assert new.bad_lines == {"job not finished (PENDING)": [3]}
    assert {j.cluster for j in new.jobs} == {""}


def test_project_json_and_missing_field():
    load = read_trace(str(FIXTURES / "transit_trace.json"))
    assert ids(load) == [("a", 100, 24), ("b", 50, 16), ("c", 30, 8)]
    assert load.summary()["bad_rows"] == 1 and load.line_unit == "record"


def test_rows_add_up():
    for name in ("acme_seren.csv", "helios.csv", "sacct_epoch.txt", "sacct_22.05.json"):
        load = read_trace(str(FIXTURES / name))
        summary = load.summary()
        assert summary["jobs_kept"] + summary["bad_rows"] + summary["filtered_rows"] == summary["rows"], name


ACME_HEADER = "job_id,user,node_num,gpu_num,cpu_num,type,state,submit_time,start_time,end_time,duration,queue,gpu_time"
HELIOS_HEADER = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue"
SACCT_HEADER = "JobID|Submit|Start|End|ElapsedRaw|AllocTRES|NNodes|State"
SACCT_ELAPSED_HEADER = "JobID|Submit|Start|End|Elapsed|AllocTRES|NNodes|State"
T0, T1, T2 = "2023-03-01T08:00:00+08:00", "2023-03-01T08:00:10+08:00", "2023-03-01T09:00:10+08:00"
H0, H1, H2 = "2020-04-01 00:00:00", "2020-04-01 00:00:10", "2020-04-01 01:00:10"
TRES = "cpu=8,gres/gpu=8,node=1"


def acme(node="1", gpus="8", state="COMPLETED", submit=T0, start=T1, end=T2, duration="3600"):
    return f"j1,u1,{node},{gpus},8,Pretrain,{state},{submit},{start},{end},{duration},10,0"


def helios(gpus="8", state="COMPLETED", start=H1, end=H2, duration="3600"):
    return f"h1,u1,vc1,{gpus},8,1,{state},{H0},{start},{end},{duration},10"


def sacct_row(job="300", submit="1700000000", start="1700000010", end="1700003610", elapsed="3600", tres=TRES,
              nodes="1", state="COMPLETED"):
    return f"{job}|{submit}|{start}|{end}|{elapsed}|{tres}|{nodes}|{state}"


def record(elapsed=3600, gpus=8, state="COMPLETED", start=1700000010, end=1700003610, het=0, offset=0, job_id=9):
    return {"job_id": job_id, "state": {"current": [state]}, "allocation_nodes": 1,
            "het": {"job_id": het, "job_offset": offset},
            "time": {"submission": 1700000000, "start": start, "end": end, "elapsed": elapsed},
            "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": gpus}]}}


# (format, header, row(s) after it, bad-row reason, its line / record numbers)
MALFORMED = [
    ("acme", ACME_HEADER, [acme(duration="1000000000000")], OVER_MAX, [2]),
    ("acme", ACME_HEADER, [acme(duration="-5")], "negative run time", [2]),
    ("acme", ACME_HEADER, [acme(start=T2, end=T1, duration="")], "End before Start", [2]),
    ("acme", ACME_HEADER, [acme(gpus="-8")], "negative GPU count", [2]),
    ("acme", ACME_HEADER, [acme(node="-2")], "negative node count", [2]),
    ("acme", ACME_HEADER, [acme(state="RUNNING", end="", duration="")], "job not finished (RUNNING)", [2]),
    ("acme", ACME_HEADER, [acme(state="PENDING", start="", end="", duration="")], "job not finished (PENDING)", [2]),
    ("acme", ACME_HEADER, [acme(gpus="eight")], "gpu_num or node_num is not a number", [2]),
    ("acme", ACME_HEADER, [acme(submit="yesterday")], "submit_time, start_time or end_time is not an ISO time", [2]),
    ("acme", ACME_HEADER, [acme(start="2023-03-01T07:00:00+08:00")], "Start before Submit", [2]),
    ("acme", ACME_HEADER, [acme(), acme() + ",extra"], "14 fields, header has 13", [3]),
    ("helios", HELIOS_HEADER, [helios(duration="40000000")], OVER_MAX, [2]),
    ("helios", HELIOS_HEADER, [helios(gpus="-1")], "negative GPU count", [2]),
    ("helios", HELIOS_HEADER, [helios(state="RUNNING", end="", duration="")], "job not finished (RUNNING)", [2]),
    ("helios", HELIOS_HEADER, [helios(start=H2, end=H1, duration="")], "End before Start", [2]),
    ("sacct", SACCT_HEADER, [sacct_row(elapsed="1000000000000", end="1700003610")], OVER_MAX, [2]),
    ("sacct", SACCT_HEADER, [sacct_row(elapsed="-60")], "negative run time", [2]),
    ("sacct", SACCT_HEADER, [sacct_row(start="1700003610", end="1700000010")], "End before Start", [2]),
    ("sacct", SACCT_HEADER, [sacct_row(tres="cpu=8,gres/gpu=-8,node=1")], "negative GPU count", [2]),
    ("sacct", SACCT_HEADER, [sacct_row(nodes="-2")], "negative node count", [2]),
    ("sacct", SACCT_HEADER, [sacct_row(end="Unknown", state="RUNNING")], "job not finished (RUNNING)", [2]),
    ("sacct", SACCT_HEADER, [sacct_row(start="Unknown", end="Unknown", elapsed="0", state="PENDING")],
     "job not finished (PENDING)", [2]),
    ("sacct", SACCT_HEADER, [sacct_row(state="SUSPENDED")], "job not finished (SUSPENDED)", [2]),
    ("sacct", SACCT_HEADER, [sacct_row(submit="Unknown")], "Submit is unset", [2]),
    ("sacct", SACCT_HEADER, [sacct_row(elapsed="abc")], "Elapsed, a GPU count or NNodes is not a number", [2]),
    ("sacct", SACCT_HEADER, [sacct_row(start="1699999990")], "Start before Submit", [2]),
    ("sacct", SACCT_HEADER, [sacct_row("400+0"), sacct_row("400+1", tres="gres/gpu=16", nodes="2")],
     HET_COMPONENT, [3]),
    ("sacct", SACCT_ELAPSED_HEADER, [sacct_row(elapsed="-00:05:00")], "negative run time", [2]),
    ("sacct", SACCT_ELAPSED_HEADER, [sacct_row(submit="2024-13-45T99:00:00", elapsed="00:01:00")],
     "Submit, Start or End is not a time", [2]),
    ("sacct", SACCT_ELAPSED_HEADER, [sacct_row(elapsed="400-00:00:00", end="1700003610")], OVER_MAX, [2]),
    ("sacct-json", None, [record(elapsed=10**12)], OVER_MAX, [1]),
    ("sacct-json", None, [record(gpus=-8)], "negative GPU count", [1]),
    ("sacct-json", None, [record(state="RUNNING", end=0, elapsed=100)], "job not finished (RUNNING)", [1]),
    ("sacct-json", None, [record(start=1700003610, end=1700000010)], "End before Start", [1]),
    ("sacct-json", None, [record(het=500, job_id=500), record(het=500, offset=1, job_id=501)], HET_COMPONENT, [2]),
    ("sacct-json", None, [{"job_id": 9, "state": {"current": ["COMPLETED"]}}], "job record without a 'time' object",
     [1]),
]


@pytest.mark.parametrize(("fmt", "header", "rows", "reason", "lines"), MALFORMED,
                         ids=[f"{case[0]}-{case[3]}" for case in MALFORMED])
def test_malformed_rows_are_bad_by_reason_with_their_line(tmp_path, fmt, header, rows, reason, lines):
    path = tmp_path / "trace.txt"
    if fmt == "sacct-json":
        path.write_text(json.dumps({"jobs": rows}))
    else:
        path.write_text("".join(f"{line}\n" for line in (header, *rows)))
    load = read_trace(str(path), fmt)
    assert dict(load.bad) == {reason: 1}
    assert load.bad_lines == {reason: lines}
    summary = load.summary()
    assert summary["jobs_kept"] + summary["bad_rows"] + summary["filtered_rows"] == summary["rows"]


def test_het_job_components_merge_into_one_job(tmp_path):
    path = tmp_path / "het.txt"
    path.write_text("\n".join([SACCT_HEADER, sacct_row("400+0", end="1700001810", elapsed="1800"),
                               sacct_row("400+1", tres="gres/gpu=16", nodes="2"), sacct_row("401")]) + "\n")
    load = read_trace(str(path), "sacct")
    assert [(j.job_id, j.gpus, j.nodes, j.duration) for j in load.jobs] == [("401", 8, 1, 3600), ("400", 24, 3, 3600)]


def test_repeated_job_ids_are_refused_naming_them(tmp_path):
    # an overlapping export: job 300 and het job 400's components appear twice
    path = tmp_path / "twice.txt"
    rows = [sacct_row("300"), sacct_row("400+0"), sacct_row("400+1", tres="gres/gpu=16", nodes="2"), sacct_row("401")]
    path.write_text("\n".join([SACCT_HEADER, *rows, *rows[:3]]) + "\n")
    with pytest.raises(UsageError) as refused:
        read_trace(str(path), "sacct")
    assert str(refused.value) == (f"{path}: 3 job ids appear more than once: 300 (lines 2, 6), 400+0 (lines 3, 7), "
                                  "400+1 (lines 4, 8); overlapping exports? --dedupe keeps the latest record of "
                                  "each (latest End, then the later line)")


def test_dedupe_keeps_the_latest_record_of_each_id(tmp_path):
    # job 300 was running when the first export was taken (End unset) and finished by the second;
    # het job 400's components were exported twice and must not merge into one inflated job
    path = tmp_path / "twice.txt"
    path.write_text("\n".join([
        SACCT_HEADER, sacct_row("300", end="1700001000", elapsed="990", state="CANCELLED"),
        sacct_row("400+0", tres="gres/gpu=8"), sacct_row("400+1", tres="gres/gpu=16", nodes="2"),
        sacct_row("300"), sacct_row("400+0", tres="gres/gpu=8"), sacct_row("400+1", tres="gres/gpu=16", nodes="2"),
    ]) + "\n")
    load = read_trace(str(path), "sacct", dedupe=True)
    assert sorted((j.job_id, j.gpus, j.nodes, j.duration) for j in load.jobs) == [
        ("300", 8, 1, 3600), ("400", 24, 3, 3600)]
    summary = load.summary()
    assert summary["duplicate_ids"] == {"ids": 3, "rows_dropped": 3, "named": ["300", "400+0", "400+1"]}
    assert summary["filtered_by_reason"] == {"an older record of a job id that appears again (--dedupe)": 3}
    assert summary["jobs_kept"] + summary["bad_rows"] + summary["filtered_rows"] == summary["rows"]


def test_repeated_ids_in_sacct_json_are_refused_too(tmp_path):
    path = tmp_path / "twice.json"
    path.write_text(json.dumps({"jobs": [record(job_id=7), record(job_id=8), record(job_id=7)]}))
    with pytest.raises(UsageError, match=r"1 job id appears more than once: 7 \(records 1, 3\)"):
        read_trace(str(path))
    assert [j.job_id for j in read_trace(str(path), dedupe=True).jobs] == ["8", "7"]


def test_a_requeued_run_keeps_its_gpu_time():
    # captured: `sacct -P -D -X` of a 2-node 8-GPU job requeued (scontrol requeue) 1 s into its
    # first run; it ran again 146 s later for 8 s. Both runs held the GPUs, under the same JobID.
    load = read_trace(str(FIXTURES / "sacct_requeued.txt"))
    assert [(j.job_id, j.state, j.duration, j.gpus, j.nodes) for j in load.jobs] == [
        ("1", "REQUEUED", 1, 8, 2), ("1", "COMPLETED", 8, 8, 2)]
    assert load.bad == {} and load.summary()["duplicate_ids"]["ids"] == 0


SACCT_ADVICE = ("export with: SLURM_TIME_FORMAT=%s sacct -P -a -X -S START -E END "
                "--format=JobID,Cluster,Submit,Start,End,ElapsedRaw,Timelimit,AllocTRES,NNodes,State")


@pytest.mark.parametrize("fmt", [None, "sacct"])
def test_sacct_with_default_fields_is_told_what_it_lacks_and_the_format_to_use(fmt):
    # captured: `sacct -P -a -j 1,2,3` with sacct's default fields
    path = FIXTURES / "sacct_default_fields.txt"
    with pytest.raises(UsageError) as refused:
        read_trace(str(path), fmt)
    assert str(refused.value) == (f"{path}: the sacct -P header lacks Submit; AllocTRES (or ReqTRES, AllocGRES, "
                                  f"ReqGRES); ElapsedRaw (or Elapsed, or Start and End); {SACCT_ADVICE}")


@pytest.mark.parametrize("fmt", [None, "sacct"])
def test_sacct_without_p_is_told_to_use_p(fmt):
    # captured: `sacct -a -j 1,2,3`, the fixed-width table
    path = FIXTURES / "sacct_fixed_width.txt"
    with pytest.raises(UsageError) as refused:
        read_trace(str(path), fmt)
    assert str(refused.value) == (f"{path}: sacct's fixed-width table, which cannot be split into fields; "
                                  f"{SACCT_ADVICE}")


@pytest.mark.parametrize(("fmt", "message"), [
    (None, "the file is empty; a trace is expected (acme, helios, sacct, sacct-json, transit-json)"),
    ("sacct", f"the file is empty; {SACCT_ADVICE}"),
    ("sacct-json", "the file is empty; JSON is expected"),
    ("transit-json", "the file is empty; JSON is expected"),
])
def test_an_empty_file_is_called_empty(tmp_path, fmt, message):
    path = tmp_path / "jobs.txt"
    path.write_text("")
    with pytest.raises(UsageError) as refused:
        read_trace(str(path), fmt)
    assert str(refused.value) == f"{path}: {message}"


def test_over_a_thousand_malformed_rows_all_counted(tmp_path):
    path = tmp_path / "many.txt"
    path.write_text("\n".join([SACCT_HEADER] + [sacct_row(str(i), elapsed="-1") for i in range(1200)]) + "\n")
    load = read_trace(str(path), "sacct")
    assert load.bad == {"negative run time": 1200}
    assert load.bad_lines["negative run time"][:3] == [2, 3, 4] and len(load.bad_lines["negative run time"]) == 20


@pytest.mark.parametrize(("text", "gpus"), [
    ("billing=8,cpu=8,gres/gpu=4,mem=1G", 4), ("cpu=8,gres/gpu:a100=2,gres/gpu:v100=1", 3),
    ("cpu=8,gres/gpu=4,gres/gpu:a100=4", 4), ("gpu:a100:4(IDX:0-3)", 4), ("cpu=4", 0), ("", 0),
    ("cpu=8,gres/gpu=-8", -8)])
def test_gpu_count_from_tres_and_gres(text, gpus):
    assert sacct.parse_gpus(text) == gpus


@pytest.mark.parametrize(("text", "seconds"), [("00:30:00", 1800), ("1-01:00:00", 90000), ("05:07", 307),
                                               ("-00:00:05", -5)])
def test_elapsed(text, seconds):
    assert sacct.parse_elapsed(text) == seconds


def test_filter_reasons():
    assert meaningful_gpu_job(Job("1", 0, 10, 1, "COMPLETED")) is None
    assert meaningful_gpu_job(Job("1", 0, 10, 0)) == "no GPU"
    assert meaningful_gpu_job(Job("1", 0, 0.5, 8)) == "ran under 1 s"


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
