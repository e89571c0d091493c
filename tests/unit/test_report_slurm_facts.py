"""transit.slurm job facts, parsed from captured 22.05 and documented 24.11 JSON (tests/fixtures/slurm)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from transit.slurm import parse_sacct_json, parse_squeue_json, report_dir_in_plugstack

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def test_squeue_22_05_running_job_among_others() -> None:
    doc = load("squeue-22.05-running.json")
    assert len(doc["jobs"]) > 1  # 22.05 ignores -j with --json: the parser must pick the job
    facts = parse_squeue_json(doc, "17", now_unix=1795982775 + 4)
    assert facts is not None
    assert (facts.source, facts.name, facts.state) == ("squeue", "report-capture", "RUNNING")
    assert (facts.nodelist, facts.num_nodes, facts.num_gpus) == ("node[1-2]", 2, None)
    assert facts.start_unix == 1795982775
    assert facts.elapsed_s == 4  # running: now - start, not the expected end time squeue prints


def test_squeue_22_05_completed_job() -> None:
    facts = parse_squeue_json(load("squeue-22.05-completed.json"), "17")
    assert facts is not None
    assert facts.state == "COMPLETED"
    assert facts.elapsed_s == 1795982783 - 1795982775


def test_squeue_22_05_unknown_job_is_none() -> None:
    assert parse_squeue_json(load("squeue-22.05-completed.json"), "99999") is None


def test_sacct_22_05_shape() -> None:
    facts = parse_sacct_json(load("sacct-22.05-shape.json"), "4242")
    assert facts is not None
    assert (facts.source, facts.state, facts.elapsed_s) == ("sacct", "TIMEOUT", 3600)
    assert (facts.num_nodes, facts.num_gpus, facts.nodelist) == (2, 16, "gpu[07-08]")
    assert (facts.start_unix, facts.end_unix) == (1764446400, 1764450000)


def test_sacct_24_11_shape() -> None:
    doc = load("sacct-24.11.json")
    facts = parse_sacct_json(doc, "4242")
    assert facts is not None
    assert (facts.name, facts.state, facts.elapsed_s) == ("llama-8b-fsdp", "COMPLETED", 1834)
    # "gres/gpu" is counted once, not again as its typed twin "gres/gpu:h200"
    assert (facts.num_nodes, facts.num_gpus) == (2, 16)
    sibling = parse_sacct_json(doc, "4243")
    assert sibling is not None
    assert sibling.state == "CANCELLED+REQUEUED"
    assert sibling.num_gpus == 8  # only a typed GPU TRES


def test_squeue_24_11_shape() -> None:
    doc = load("squeue-24.11.json")
    facts = parse_squeue_json(doc, "4242", now_unix=1764446400 + 600)
    assert facts is not None
    assert (facts.state, facts.num_nodes, facts.num_gpus) == ("RUNNING", 2, 16)
    assert facts.elapsed_s == 600
    done = parse_squeue_json(doc, "4244")
    assert done is not None
    assert (done.state, done.elapsed_s, done.num_gpus) == ("COMPLETED", 300, 4)


@pytest.mark.parametrize(
    "document",
    [
        None,
        {},
        [],
        {"jobs": "nope"},
        {"jobs": [None, 3]},
        {"jobs": [{"job_id": {"set": False, "number": 0}}]},
    ],
)
def test_malformed_documents_give_no_facts(document: object) -> None:
    assert parse_sacct_json(document, "0") is None
    assert parse_squeue_json(document, "0") is None


def test_wrong_types_inside_a_job_read_as_unknown() -> None:
    doc = {
        "jobs": [
            {
                "job_id": 5,
                "name": 7,
                "state": {"current": 3},
                "time": "soon",
                "tres": {"allocated": "x"},
                "allocation_nodes": {"set": True, "infinite": True, "number": 0},
            }
        ]
    }
    facts = parse_sacct_json(doc, "5")
    assert facts is not None
    assert (facts.name, facts.state, facts.elapsed_s, facts.num_nodes, facts.num_gpus) == (None,) * 5


def test_report_dir_in_plugstack_follows_includes(tmp_path: Path) -> None:
    included = tmp_path / "plugstack.conf.d"
    included.mkdir()
    (included / "10-other.conf").write_text("optional /usr/lib/slurm/other.so report_dir=/not/ours\n")
    (included / "20-transit.conf").write_text(
        "# required /old/spank_transit.so report_dir=/commented/out\n"
        "required /opt/transit/lib/spank_transit.so lib=/opt/transit/lib/libtransit.so "
        "report_dir=/shared/transit  # site default\n"
    )
    plugstack = tmp_path / "plugstack.conf"
    plugstack.write_text(f"include {included}/*.conf\n")
    assert report_dir_in_plugstack(str(plugstack)) == "/shared/transit"
    plugstack.write_text("required /opt/transit/lib/spank_transit.so lib=/opt/transit/lib/libtransit.so\n")
    assert report_dir_in_plugstack(str(plugstack)) is None
    assert report_dir_in_plugstack(str(tmp_path / "missing.conf")) is None
