"""Every committed benchmark summary (transit.bench-summary/1 in bench/results) records what ran:
a run's `deterministic` is whether its recorded command passed --deterministic, and a system's is
that of its runs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[2] / "bench/results"
SUMMARIES = sorted(p for p in RESULTS.glob("*.json")
                   if json.loads(p.read_text()).get("schema") == "transit.bench-summary/1")


def test_there_are_summaries_to_check():
    assert len(SUMMARIES) >= 1


@pytest.mark.parametrize("path", SUMMARIES, ids=lambda p: p.name)
def test_deterministic_is_what_the_command_passed(path):
    doc = json.loads(path.read_text())
    ran: dict[str, set[bool]] = {}
    for run in doc["runs"]:
        if not run.get("command"):
            continue
        passed = "--deterministic" in shlex.split(run["command"])
        assert run["config"]["deterministic"] is passed, run["id"]
        ran.setdefault(run["system"], set()).add(passed)
    for row in doc["systems"]:
        if row["name"] in ran:
            assert ran[row["name"]] == {row["deterministic"]}, row["name"]
