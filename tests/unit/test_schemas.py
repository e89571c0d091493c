"""Every public file format and every `--json` output has a JSON Schema in schemas/ (draft 2020-12),
and what the code writes, the fixtures the readers are tested on and the committed results match it.

A schema is named after its id: `transit.rank/1` is schemas/rank-1.schema.json. The real outputs are
made here: libtransit's stats file on the CPU, each command's --json on the project's fixtures, and the
bench tools' --json that run on a CPU (bench/1 results and summaries: test_bench_protocol.py's driver run;
steady_kernels.py: test_bench_steady_kernels.py).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from transit import _native, cli

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
FIXTURES = ROOT / "tests" / "fixtures"
# a quoted id, as Python (`"transit.plan/3"`) and C (`\"transit.rank/1\"`, `"transit.step/1"`) write it
WRITTEN_ID = re.compile(r"""["']transit\.([a-z0-9_.-]+)/(\d+)\\?["']""")
WRITERS = ("transit", "libtransit/src", "spank", "bench", "scripts")


def schema_file(schema_id: str) -> Path:
    name, version = schema_id.removeprefix("transit.").split("/")
    return SCHEMAS / f"{name}-{version}.schema.json"


def check(document: dict) -> None:
    """Raises jsonschema.ValidationError, naming the path into the document, where it does not match."""
    schema = json.loads(schema_file(document["schema"]).read_text())
    jsonschema.Draft202012Validator(schema).validate(document)


def load(path: Path) -> object:
    if path.suffix == ".gz":
        with gzip.open(path, "rt") as handle:
            return json.load(handle)
    return json.loads(path.read_text())


def written_ids() -> set[str]:
    """Every id in the code: its sources, and the scripts (which have no suffix)."""
    found = set()
    for folder in WRITERS:
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".c", ".h", ".sh") or (folder == "scripts" and path.is_file() and not path.suffix):
                found |= {f"transit.{m[0]}/{m[1]}" for m in WRITTEN_ID.findall(path.read_text(errors="replace"))}
    return found


def committed_documents() -> dict[Path, object]:
    """Every JSON document of the fixtures and the committed results."""
    return {path: load(path) for folder in (FIXTURES, ROOT / "bench" / "results")
            for path in sorted([*folder.rglob("*.json"), *folder.rglob("*.json.gz")])}


def project_id(document: object) -> str | None:
    """The document's `transit.NAME/V` id; None for another program's JSON (Slurm's, Hugging Face's)."""
    schema_id = document.get("schema") if isinstance(document, dict) else None
    return schema_id if isinstance(schema_id, str) and schema_id.startswith("transit.") else None


@pytest.mark.parametrize("path", sorted(SCHEMAS.glob("*.schema.json")), ids=lambda p: p.name)
def test_each_schema_is_a_draft_2020_12_schema_of_its_id(path: Path) -> None:
    schema = json.loads(path.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema_file(schema["properties"]["schema"]["const"]) == path


def test_every_id_the_code_writes_has_a_schema() -> None:
    ids = written_ids()
    assert {"transit.rank/1", "transit.step/1", "transit.profile/1", "transit.plan/3", "transit.bench/1",
            "transit.bench-plan/1", "transit.profile-reuse/1"} <= ids
    assert sorted(i for i in ids if not schema_file(i).is_file()) == []


def test_every_id_is_a_hyphenated_name_and_a_version() -> None:
    ids = written_ids() | {project_id(d) for d in committed_documents().values()} - {None}
    assert sorted(i for i in ids if not re.fullmatch(r"transit\.[a-z0-9]+(-[a-z0-9]+)*/[1-9]\d*", i)) == []


def test_every_committed_result_and_project_fixture_has_a_schema() -> None:
    """Results whose writer is gone (the tag pre-protocol-bench) are public too: each keeps its schema."""
    documents = committed_documents()
    assert [str(p.relative_to(ROOT)) for p, d in documents.items()
            if p.is_relative_to(ROOT / "bench") and project_id(d) is None] == []
    assert sorted({i for d in documents.values() if (i := project_id(d)) and not schema_file(i).is_file()}) == []


FILES = [path for path, document in committed_documents().items() if project_id(document)]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_fixtures_and_committed_results_match_their_schema(path: Path) -> None:
    check(load(path))


def test_the_fixtures_cover_the_file_formats() -> None:
    found = {load(path)["schema"] for path in FILES}
    assert {"transit.rank/1", "transit.step/1", "transit.profile/1", "transit.trace/1", "transit.factors/1",
            "transit.factors/2", "transit.sim-sweep/3", "transit.bench-summary/1", "transit.bench-link/1",
            "transit.kernel-sequence/1", "transit.bench-sim-perf/2", "transit.bench-report-perf/1"} <= found


def test_a_document_that_drifts_is_refused() -> None:
    document = load(FIXTURES / "stats" / "rank-example.json")
    check(document)
    del document["allocations"]
    with pytest.raises(jsonschema.ValidationError, match="'allocations' is a required property"):
        check(document)


def test_the_c_writers_stats_file(cudart, clean_env, tmp_path) -> None:
    env = dict(clean_env, LD_PRELOAD=str(_native.lib_path()), TRANSIT_OUT=str(tmp_path), TRANSIT_POLICY="advise",
               TRANSIT_MEM_LIMIT="24G", RANK="0")
    code = f"import ctypes; c=ctypes.c_void_p(); ctypes.CDLL('{cudart}').cudaMalloc(ctypes.byref(c), 4096)"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    (stats,) = tmp_path.glob("rank0.*.json")
    document = json.loads(stats.read_text())
    assert document["schema"] == "transit.rank/1"
    check(document)


SIM_TRACE = str(FIXTURES / "sim" / "acme_seren.csv")
PROFILE = str(FIXTURES / "profile" / "h200-gb8-advise.profile.json.gz")
CAPTURED = FIXTURES / "report" / "captured"
# (command line after `transit`, the schema its --json carries): every command that has --json
COMMANDS = [
    (["run", "--print-env", "--policy", "advise", "--json"], "transit.run-env/1"),
    (["lib-path", "--json"], "transit.lib-path/1"),
    (["plan", "--model", "llama3-8b", "--nodes", "4", "--json"], "transit.plan/3"),
    (["launch", "--nodes", "2", "--nproc-per-node", "2", "--global-batch", "8", "--dry-run", "--json", "train.py"],
     "transit.launch/1"),
    (["submit", "--nodes", "4", "--scale-in", "0.5", "--model", "llama3-8b", "--global-batch", "64", "--dry-run",
      "--json", "tests/fixtures/job.sh"], "transit.submit/1"),
    (["report", "--no-slurm", "--json", str(CAPTURED / "2")], "transit.report/1"),
    (["report", "--no-slurm", "--json", str(CAPTURED / "2"), str(CAPTURED / "3")], "transit.report-list/1"),
    (["simulate", "--trace", SIM_TRACE, "--racks", "4", "--json"], "transit.sim/3"),
    (["simulate", "sweep", "--trace", SIM_TRACE, "--racks", "4", "--reductions", "0.25,0.5", "--processes", "1",
      "--json"], "transit.sim-sweep/3"),
    (["replay", PROFILE, "--policy", "advise", "--limit", "60G", "--json"], "transit.replay/1"),
    (["doctor", "--json"], "transit.doctor/1"),
    (["bench", "link", "--from", str(FIXTURES / "bench" / "link-handwritten.json"), "--json"], "transit.bench-link/1"),
]


@pytest.mark.parametrize(("argv", "schema_id"), COMMANDS, ids=lambda v: " ".join(v[:2]) if isinstance(v, list) else v)
def test_each_commands_json_carries_its_schema_and_matches_it(argv: list[str], schema_id: str) -> None:
    # doctor exits 1 on a node without a GPU; its JSON is whole either way
    result = subprocess.run([sys.executable, "-m", "transit", *argv], cwd=ROOT, capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode in (0, 1), result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == schema_id
    check(document)


def test_the_emulated_nodes_layout_matches_its_schema(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "transit.emulate", "2", "--transit", "advise", "--mem-limit", "1G",
                             "--out", str(tmp_path / "out"), "--dry-run", "--json", "--",
                             "tests/fixtures/emulate/allreduce.py"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=True)
    check(json.loads(result.stdout))


# `python3 -m bench` and the bench tools that run on a CPU: (command line after python3, the schema)
BENCH_COMMANDS = [
    (["-m", "bench", "list", "--json"], "transit.bench-list/1"),
    (["-m", "bench", "plan", "controls-1gpu", "--json"], "transit.bench-plan/1"),
    (["-m", "bench", "plan", "claim-b-gb64", "--command-limit", "0", "--json"], "transit.bench-plan/1"),
    (["-m", "bench", "plan", "scale-in-4to2-gb8", "--json"], "transit.bench-plan/1"),
    (["-m", "bench", "plan", "transit-1gpu-advise-gb8", "--nodes", "2", "--json"], "transit.bench-plan/1"),
    (["bench/profile_reuse.py", str(FIXTURES / "profile" / "h200-gb64-mb8-hybrid.profile.json.gz"), "--json"],
     "transit.profile-reuse/1"),
]


@pytest.mark.parametrize(("argv", "schema_id"), BENCH_COMMANDS, ids=lambda v: " ".join(v[:4]) if isinstance(v, list) else v)
def test_each_bench_tools_json_carries_its_schema_and_matches_it(argv: list[str], schema_id: str) -> None:
    result = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == schema_id
    check(document)


def test_every_bench_command_with_json_is_checked_above() -> None:
    from bench.__main__ import parser

    checked = {(argv[2],) for argv, _ in BENCH_COMMANDS if argv[:2] == ["-m", "bench"]}
    # run and merge write summaries (transit.bench-summary/1, checked in bench/results); table writes Markdown
    assert commands_with_json(parser()) == checked == {("list",), ("plan",)}


def commands_with_json(parser, words: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    found = {words} if any("--json" in action.option_strings for action in parser._actions) else set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= commands_with_json(sub, (*words, name))
    return found


def test_every_command_with_json_is_checked_above() -> None:
    checked = {tuple(argv[:2]) if argv[0] in ("simulate", "bench") and argv[1] in ("sweep", "link") else (argv[0],)
               for argv, _ in COMMANDS}
    # `transit cluster --json` passes on scripts/dev-cluster's own status document
    assert commands_with_json(cli.build_parser()) - checked == {("cluster",)}
