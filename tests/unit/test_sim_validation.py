"""The simulator against the real Slurm scheduler. The fixtures are one captured history
(tests/fixtures/sim/capture-slurm-validation.sh): 220 short GPU jobs of 1-4 nodes run by Slurm
22.05's sched/backfill on the 4-node dev cluster with 4 GPUs per node, as `sacct -P` and
`sacct --json`. Replayed on the same nodes and GPUs, with backfill planned on the jobs' time
limits every 30 s (Slurm's bf_interval default), the replay must keep the mean wait within 10 %
of Slurm's and start the jobs in Slurm's order (rank correlation at least 0.9)."""

import json
from pathlib import Path

import pytest

from tests.unit.test_sim_cli import run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sim"
SAME_CLUSTER = ["--nodes", "4", "--gpus-per-node", "4", "--backfill"]


def validation(name: str, capsys, *options: str) -> dict:
    code, out = run(["simulate", "--trace", str(FIXTURES / name), *SAME_CLUSTER, *options, "--json"], capsys)
    assert code == 0
    document = json.loads(out)
    assert document["setup"]["nodes"] == 4 and document["trace"]["jobs_kept"] == 220
    (cluster,) = document["validation"]["clusters"]
    return cluster


@pytest.mark.parametrize("name", ["slurm_validation.txt", "slurm_validation.json"])
def test_the_replay_matches_what_real_slurm_did(name, capsys):
    cluster = validation(name, capsys, "--backfill-interval", "30")
    assert cluster["jobs"] == 220
    assert cluster["recorded_queue"]["mean_s"] == pytest.approx(234.53, abs=0.01)
    assert cluster["replayed_queue"]["mean_s"] == pytest.approx(215.98, abs=0.01)
    assert cluster["mean_wait_error_pct"] == pytest.approx(-7.91, abs=0.01)
    assert abs(cluster["mean_wait_error_pct"]) <= 10
    assert cluster["start_order_rank_correlation"] == pytest.approx(0.9996, abs=1e-4)
    assert cluster["start_order_rank_correlation"] >= 0.9
    assert (cluster["abs_error_mean_s"], cluster["abs_error_p50_s"], cluster["abs_error_p90_s"]) == (
        pytest.approx(18.79, abs=0.01), 21.0, 27.0)


def test_backfill_at_every_event_misses_slurm(capsys):
    # Slurm backfills only every bf_interval: a pass at every event starts jobs it never started
    cluster = validation("slurm_validation.txt", capsys)
    assert cluster["mean_wait_error_pct"] == pytest.approx(-50.1, abs=0.05)
    assert cluster["start_order_rank_correlation"] < 0.9
