"""Event engine, placement, TRANSIT transform and metrics on traces small enough to check by hand."""

import numpy as np
import pytest

from transit.sim import metrics
from transit.sim.engine import replay
from transit.sim.jobs import Job
from transit.sim.placement import Cluster
from transit.sim.scenario import Factors, prepare, reduced_nodes, run_baseline, run_transit
from transit.sim.study import Setup, study

# One rack of 32 GPUs = 4 nodes of 8. A: 3 nodes for 100 s; B (t=10): 2 nodes, must wait for A;
# C (t=20): 1 node, fits at once but is behind B in the queue.
SUBMIT = [0.0, 10.0, 20.0]
GPUS = [24, 16, 8]
DURATION = [100.0, 50.0, 30.0]


def test_fifo_three_jobs():
    result = replay(SUBMIT, GPUS, DURATION, Cluster(1, 8))
    assert result.start == [0.0, 100.0, 100.0]
    assert result.end == [100.0, 150.0, 130.0]
    assert result.racks == [1, 1, 1]
    assert result.nodes == [3, 2, 1]
    assert result.held_gpus == [24, 16, 8]


def test_backfill_starts_the_short_job_before_the_blocked_head():
    result = replay(SUBMIT, GPUS, DURATION, Cluster(1, 8), backfill=True)
    assert result.start == [0.0, 100.0, 20.0]    # C ends at 50, before B's shadow time of 100


def test_backfill_never_delays_the_head():
    # C would run 200 s, past B's shadow time (100): it must not start early
    result = replay(SUBMIT, GPUS, [100.0, 50.0, 200.0], Cluster(1, 8), backfill=True)
    assert result.start == [0.0, 100.0, 100.0]


def test_pack_and_spread_place_differently():
    # two racks of 4 nodes: A takes 2 nodes, B 1 node, then C wants a whole rack
    submit, gpus, duration = [0.0, 1.0, 2.0], [16, 8, 32], [100.0] * 3
    packed = replay(submit, gpus, duration, Cluster(2, 8, "pack"))
    spread = replay(submit, gpus, duration, Cluster(2, 8, "spread"))
    assert packed.racks == [1, 1, 1]        # A and B share rack 0, C gets rack 1 whole
    assert spread.racks == [1, 1, 2]        # B went to rack 1, so C must span both racks
    assert packed.start == spread.start == [0.0, 1.0, 2.0]


def test_small_jobs_share_nodes_pack_fills_the_fullest_node():
    cluster = Cluster(1, 8, "pack")
    first = cluster.place(3)
    second = cluster.place(2)
    assert first == [(0, 3)] and second == [(0, 2)]     # same node: best fit
    spread = Cluster(1, 8, "spread")
    assert spread.place(3) == [(0, 3)] and spread.place(2) == [(1, 2)]   # emptiest node
    cluster.release(first)
    assert cluster.node_free[0] == 6 and cluster.whole_free == 3


def test_four_gpus_per_node():
    result = replay([0.0, 0.0], [8, 32], [10.0, 10.0], Cluster(2, 4))
    assert result.nodes == [2, 8]
    assert result.racks == [1, 1]
    assert result.start == [0.0, 0.0]


@pytest.mark.parametrize(("nodes", "reduction", "kept"), [
    (2, 0.5, 1), (2, 0.25, 2), (3, 0.5, 2), (4, 0.25, 3), (4, 0.5, 2), (128, 0.5, 64), (2, 0.99, 1)])
def test_reduced_nodes(nodes, reduction, kept):
    assert reduced_nodes(nodes, reduction) == kept


def test_reduction_never_leaves_zero_nodes():
    for nodes in range(2, 300):
        for reduction in np.linspace(0, 0.99, 45):
            kept = reduced_nodes(nodes, float(reduction))
            assert 1 <= kept <= nodes


def test_transit_inter_to_intra_speedup():
    # 48 GPUs = 6 nodes: spans 2 racks as is; halved to 3 nodes it fits one rack
    trace = prepare([Job("1", 0, 100.0, 48)], 64)
    base = run_baseline(trace, 2, 8, "pack", False)
    assert base.racks == [2]
    factors = Factors(inter_to_intra_speedup=0.5, intra_to_inter_slowdown=0.2, unchanged=0.05)
    transit = run_transit(trace, 2, 8, "pack", False, 0.5, factors, base.racks)
    assert transit.racks == [1] and transit.nodes == [3]
    assert transit.end[0] == pytest.approx(100.0 * 6 / 3 / 1.5)


def test_transit_unchanged_factor_and_ineligible_jobs():
    trace = prepare([Job("1", 0, 100.0, 16), Job("2", 0, 100.0, 8)], 32)
    factors = Factors(unchanged=0.05)
    base = run_baseline(trace, 1, 8, "pack", False)
    transit = run_transit(trace, 1, 8, "pack", False, 0.5, factors, base.racks)
    assert transit.nodes == [1, 1]
    assert transit.end == [pytest.approx(200.0 / 1.05), 100.0]   # the 1-node job is not eligible


def test_transit_intra_to_inter_slowdown():
    # a 6-node job that the baseline had on one rack (given here) and that now spans two racks
    trace = prepare([Job("1", 0, 100.0, 48)], 64)
    factors = Factors(inter_to_intra_speedup=0.5, intra_to_inter_slowdown=0.2, unchanged=0.05)
    transit = run_transit(trace, 2, 8, "pack", False, 0.0, factors, baseline_racks=[1])
    assert transit.racks == [2] and transit.nodes == [6]
    assert transit.end[0] == pytest.approx(100.0 / 0.8)


def test_metrics_of_a_hand_checked_replay():
    trace = prepare([Job("1", 0, 3600.0, 48), Job("2", 0, 3600.0, 8)], 64)
    base = run_baseline(trace, 2, 8, "pack", False)
    eligible = np.array([True, False])
    summary = metrics.summarize(trace.submit, trace.duration, eligible, base)
    assert summary["all"]["inter_rack_traffic"] == pytest.approx(1.0)   # 1 extra rack x 1 h of work
    assert summary["makespan_h"] == pytest.approx(1.0)
    assert summary["gpu_idle_h"] == pytest.approx(64 - 56)
    assert summary["eligible"]["mean_racks"] == 2


def test_study_on_a_small_synthetic_trace():
    from transit.sim import synthetic

    trace = prepare(synthetic.generate("kalos", 2000, seed=4), 8 * 32)
    result = study(trace, Setup(8, 8, 0.5))
    assert result["jobs"] == 2000 - trace.too_big and trace.too_big > 0   # some Kalos jobs > 256 GPUs
    assert result["eligible_jobs"] == int((np.array(trace.gpus) > 8).sum())
    # reducing multi-node jobs can only make eligible jobs span fewer racks on average here
    assert result["transit"]["eligible"]["mean_racks"] < result["baseline"]["eligible"]["mean_racks"]
    assert result["change_pct"]["inter-rack traffic"] < 0
    assert result["transit"]["eligible"]["single_node_share_pct"] > 0
    assert sum(result["transitions"].values()) == result["eligible_jobs"]


def test_spread_fragments_racks_more_than_pack():
    from transit.sim import synthetic

    trace = prepare(synthetic.generate("seren", 10_000, seed=1), 16 * 32)
    eligible = np.array(trace.gpus) > 8
    share = {}
    for placement in ("pack", "spread"):
        racks = np.array(run_baseline(trace, 16, 8, placement, False).racks)[eligible]
        share[placement] = (racks > 1).mean()
    assert share["spread"] > share["pack"] + 0.05, share
