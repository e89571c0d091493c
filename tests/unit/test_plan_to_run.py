"""One global batch from `transit plan` to the run: what `submit` records and what `launch` accepts."""

import json

import pytest

from transit import cli


@pytest.fixture
def no_plan_env(monkeypatch):
    for variable in ("SLURM_JOB_ID", "TRANSIT_GLOBAL_BATCH", "TRANSIT_LOCAL_BATCH", "TRANSIT_CANDIDATES",
                     "TRANSIT_TP", "TRANSIT_PP", "TRANSIT_GRAD_ACCUM"):
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


def submitted_export(capsys, *argv):
    assert cli.main(["submit", *argv, "--dry-run", "--json", "tests/fixtures/job.sh"]) == 0
    command = json.loads(capsys.readouterr().out)["command"]
    export = next(a for a in command if a.startswith("--export="))
    return dict(item.split("=", 1) for item in export.removeprefix("--export=ALL,").split(","))


def test_submit_records_the_candidate_set_and_its_global_batch(no_plan_env, capsys):
    # 16 -> 12 -> 8 nodes of 8 GPUs for 1,024 sequences: lcm(128, 96, 64) = 384, x 3 = 1,152
    env = submitted_export(capsys, "--nodes", "16", "--candidates", "16,12,8", "--global-batch", "1024")
    assert env == {"TRANSIT_GLOBAL_BATCH": "1152", "TRANSIT_LOCAL_BATCH": "1", "TRANSIT_TP": "1", "TRANSIT_PP": "1",
                   "TRANSIT_CANDIDATES": "16:12:8"}


@pytest.mark.parametrize("nodes, accumulation", [(16, 9), (12, 12), (8, 18)])
def test_launch_runs_any_planned_count_with_its_own_accumulation(no_plan_env, capsys, nodes, accumulation):
    no_plan_env.setenv("TRANSIT_GLOBAL_BATCH", "1152")
    no_plan_env.setenv("TRANSIT_CANDIDATES", "16:12:8")
    argv = ["launch", "--dry-run", "--json", "--nodes", str(nodes), "--nproc-per-node", "8", "--", "train.py"]
    assert cli.main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["dp"], doc["grad_accum"]) == (8 * nodes, accumulation)
    assert doc["env"] == {"TRANSIT_GLOBAL_BATCH": "1152", "TRANSIT_LOCAL_BATCH": "1",
                          "TRANSIT_GRAD_ACCUM": str(accumulation)}


def test_launch_refuses_a_count_outside_the_plan(no_plan_env, capsys):
    no_plan_env.setenv("TRANSIT_GLOBAL_BATCH", "1152")
    no_plan_env.setenv("TRANSIT_CANDIDATES", "16:12:8")
    argv = ["launch", "--dry-run", "--nodes", "10", "--nproc-per-node", "8", "--", "train.py"]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == ("transit launch: 10 nodes is not a count transit submit planned global batch "
                                       "1152 for (TRANSIT_CANDIDATES=16,12,8)\n")


def test_submit_without_transit_plans_only_counts_without_a_spill(no_plan_env, capsys):
    # Llama3-70B on 4-GPU H100 nodes: 6 nodes hold it in HBM (within the margin), 4 spill 21.6 GiB per GPU
    argv = ["submit", "--nodes", "8", "--model", "llama3-70b", "--gpus-per-node", "4", "--transit", "off",
            "--dry-run", "--json"]
    assert cli.main([*argv, "--to-min", "tests/fixtures/job.sh"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"] == [8, 6]
    assert cli.main([*argv, "--candidates", "4", "tests/fixtures/job.sh"]) == 2
    assert capsys.readouterr().err == ("transit submit: 4 nodes spill 21.6 GiB per GPU, which only TRANSIT holds: "
                                       "--transit off needs counts that fit in HBM\n")
