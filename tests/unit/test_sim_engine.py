"""Event engine, placement, contention, the TRANSIT transform and metrics on traces small enough to
check by hand."""

import numpy as np
import pytest

from transit.sim import metrics, synthetic
from transit.sim.engine import Contention, replay
from transit.sim.jobs import Job
from transit.sim.network import Network
from transit.sim.placement import Cluster
from transit.sim.scenario import (
    Efficiency,
    Factors,
    Setup,
    prepare,
    reduced_nodes,
    run_baseline,
    run_transit,
    shape,
)
from transit.sim.study import study

# One rack of 32 GPUs = 4 nodes of 8. A: 3 nodes for 100 s; B (t=10): 2 nodes, must wait for A;
# C (t=20): 1 node, fits at once but is behind B in the queue.
SUBMIT = [0.0, 10.0, 20.0]
GPUS = [24, 16, 8]
DURATION = [100.0, 50.0, 30.0]
NO_NETWORK = Network(contention=False)


def whole(gpus, per_node=8):
    return [-(-g // per_node) if g >= per_node else 0 for g in gpus]


def test_fifo_three_jobs():
    result = replay(SUBMIT, GPUS, whole(GPUS), DURATION, Cluster(1, 8))
    assert result.start == [0.0, 100.0, 100.0]
    assert result.end == [100.0, 150.0, 130.0]
    assert result.racks == [1, 1, 1]
    assert result.nodes == [3, 2, 1]
    assert result.held_gpus == [24, 16, 8]


def test_backfill_starts_the_short_job_before_the_blocked_head():
    result = replay(SUBMIT, GPUS, whole(GPUS), DURATION, Cluster(1, 8), backfill=True)
    assert result.start == [0.0, 100.0, 20.0]    # C ends at 50, before B's shadow time of 100


def test_backfill_every_interval_waits_for_the_next_pass():
    # as Slurm's bf_interval: C fits at 20 but the pass runs at 30 (ends at 60, before B's shadow)
    result = replay(SUBMIT, GPUS, whole(GPUS), DURATION, Cluster(1, 8), backfill=True, backfill_interval=30.0)
    assert result.start == [0.0, 100.0, 30.0]


def test_backfill_plans_with_the_time_limits_when_given():
    # C runs 30 s but asked for 200: planned past B's shadow (100), it waits as Slurm's backfill would
    # have it wait; A's limit of 150 puts the shadow at 150, and a C asking 120 fits before it
    result = replay(SUBMIT, GPUS, whole(GPUS), DURATION, Cluster(1, 8), backfill=True, estimate=[100.0, 50.0, 200.0])
    assert result.start == [0.0, 100.0, 100.0]
    result = replay(SUBMIT, GPUS, whole(GPUS), DURATION, Cluster(1, 8), backfill=True, estimate=[150.0, 50.0, 120.0])
    assert result.start == [0.0, 100.0, 20.0]


def test_backfill_never_delays_the_head():
    # C would run 200 s, past B's shadow time (100): it must not start early
    result = replay(SUBMIT, GPUS, whole(GPUS), [100.0, 50.0, 200.0], Cluster(1, 8), backfill=True)
    assert result.start == [0.0, 100.0, 100.0]


def test_backfill_examines_again_once_resources_are_freed():
    # A holds 3 nodes until 100, X holds the 4th until 30. The head B needs 4 nodes; C (1 node,
    # 20 s) arrives at 5 while nothing is free, and may start only when X ends at 30.
    submit, gpus, duration = [0.0, 0.0, 1.0, 5.0], [24, 8, 32, 8], [100.0, 30.0, 10.0, 20.0]
    result = replay(submit, gpus, whole(gpus), duration, Cluster(1, 8), backfill=True)
    assert result.start == [0.0, 0.0, 100.0, 30.0]


def test_pack_and_spread_place_differently():
    # two racks of 4 nodes: A takes 2 nodes, B 1 node, then C wants a whole rack
    submit, gpus, duration = [0.0, 1.0, 2.0], [16, 8, 32], [100.0] * 3
    packed = replay(submit, gpus, whole(gpus), duration, Cluster(2, 8, "pack"))
    spread = replay(submit, gpus, whole(gpus), duration, Cluster(2, 8, "spread"))
    assert packed.racks == [1, 1, 1]        # A and B share rack 0, C gets rack 1 whole
    assert spread.racks == [1, 1, 2]        # B went to rack 1, so C must span both racks
    assert packed.start == spread.start == [0.0, 1.0, 2.0]


def test_small_jobs_share_nodes_pack_fills_the_fullest_node():
    cluster = Cluster(1, 8, "pack")
    first, _ = cluster.place(3)
    second, _ = cluster.place(2)
    assert first == [(0, 3)] and second == [(0, 2)]     # same node: best fit
    spread = Cluster(1, 8, "spread")
    assert spread.place(3)[0] == [(0, 3)] and spread.place(2)[0] == [(1, 2)]   # emptiest node
    cluster.release(first)
    assert cluster.node_free[0] == 6 and cluster.whole_free == 3 and cluster.max_free == 8
    assert cluster.free_gpus == 30


def test_four_gpus_per_node():
    result = replay([0.0, 0.0], [8, 32], whole([8, 32], 4), [10.0, 10.0], Cluster(2, 4))
    assert result.nodes == [2, 8]
    assert result.racks == [1, 1]
    assert result.start == [0.0, 0.0]


def _two_jobs_sharing_rack_1(durations, steps):
    # three racks of 4 nodes: A (6 nodes) takes rack 0 and 2 nodes of rack 1, B (6) rack 2 and the
    # rest of rack 1, so rack 1's uplink carries both. Each offers 1 byte per step x steps / run time.
    model = Contention(boundary_bytes_per_step=[1.0, 1.0], steps=steps, node_bytes_per_s=1.0,
                       uplink_bytes_per_s=0.5)
    return replay([0.0, 0.0], [48, 48], [6, 6], durations, Cluster(3, 8), contention=model)


def test_contention_stretches_the_collective_part_of_multi_rack_jobs():
    # each offers 100 / 200 = 0.5 B/s; rack 1 carries 1.0 against 0.5: stretch 2. The collectives
    # are phi = 100 B / (1 B/s x 200 s) = 0.5 of the step, so both run at 1 / (1 + 0.5 x 1) = 2/3.
    result = _two_jobs_sharing_rack_1([200.0, 200.0], [100.0, 100.0])
    assert result.racks == [2, 2]
    assert result.end == [pytest.approx(300.0), pytest.approx(300.0)]
    assert result.run_time == [200.0, 200.0]


def test_contention_rate_changes_when_a_sharing_job_ends():
    # B (50 s, 25 steps) offers as much per second as A; at 2/3 it ends at 75. A has done 50 s of its
    # 200 s of work by then and runs the remaining 150 s alone at full rate: it ends at 225.
    result = _two_jobs_sharing_rack_1([200.0, 50.0], [100.0, 25.0])
    assert result.end == [pytest.approx(225.0), pytest.approx(75.0)]


def test_no_contention_within_capacity():
    model = Contention(boundary_bytes_per_step=[1.0, 1.0], steps=[100.0, 100.0], node_bytes_per_s=1.0,
                       uplink_bytes_per_s=1.0)
    result = replay([0.0, 0.0], [48, 48], [6, 6], [200.0, 200.0], Cluster(3, 8), contention=model)
    assert result.end == [200.0, 200.0]


def test_reduced_nodes_rule_is_the_planner_s():
    for nodes, reduction, kept in [(2, 0.5, 1), (2, 0.25, 2), (3, 0.5, 2), (4, 0.25, 3), (4, 0.5, 2),
                                   (128, 0.5, 64), (2, 0.99, 1)]:
        assert reduced_nodes(nodes, reduction) == kept


def test_transit_inter_to_intra_speedup_with_measured_efficiency():
    # 48 GPUs = 6 nodes: spans 2 racks as is; halved to 3 nodes it fits one rack
    trace = prepare([Job("1", 0, 100.0, 48)])
    factors = Factors(inter_to_intra_speedup=0.5, intra_to_inter_slowdown=0.2, unchanged=0.05)
    setup = Setup(2, 8, 0.5, factors=factors, efficiency=Efficiency(0.9), network=NO_NETWORK)
    base = run_baseline(trace, setup)
    assert base.racks.tolist() == [2]
    transit = run_transit(trace, setup, base)
    assert transit.racks.tolist() == [1] and transit.nodes.tolist() == [3]
    assert transit.end[0] == pytest.approx(100.0 * 48 / 24 / 0.9 / 1.5)


def test_transit_leaves_unreduced_and_single_node_jobs_alone():
    # a 2-node job at r = 0.25 keeps both nodes: nothing changes for it, efficiency included
    trace = prepare([Job("1", 0, 100.0, 16), Job("2", 0, 100.0, 8)])
    setup = Setup(1, 8, 0.25, factors=Factors(unchanged=0.05), efficiency=Efficiency(0.5), network=NO_NETWORK)
    base = run_baseline(trace, setup)
    transit = run_transit(trace, setup, base)
    assert transit.nodes.tolist() == [2, 1] and transit.end.tolist() == [100.0, 100.0]
    sized = shape(trace, setup)
    assert sized.eligible.tolist() == [True, False] and sized.reduced.tolist() == [False, False]


def test_slowdown_readings_differ():
    # J (4 nodes) ran on one rack as is: the baseline cluster is one rack. With TRANSIT it keeps 3
    # nodes on 2 racks where four 1-node blockers, spread, leave 2 free nodes per rack: one -> several.
    trace = prepare([Job(f"b{i}", 0, 1000.0, 8) for i in range(4)] + [Job("J", 1, 100.0, 32)])
    times = {}
    for reading in ("throughput", "runtime"):
        factors = Factors(intra_to_inter_slowdown=0.55, slowdown_reading=reading)
        setup = Setup(2, 8, 0.25, placement="spread", factors=factors, baseline_racks=1,
                      efficiency=Efficiency(1.0), network=NO_NETWORK)
        base = run_baseline(trace, setup)
        transit = run_transit(trace, setup, base)
        assert base.racks[4] == 1 and transit.racks[4] == 2 and transit.nodes[4] == 3
        times[reading] = float(transit.end[4] - transit.start[4])
    as_is = 100.0 * 32 / 24
    assert times["throughput"] == pytest.approx(as_is / (1 - 0.55))     # x2.22
    assert times["runtime"] == pytest.approx(as_is * 1.55)


def test_node_counts_from_the_trace_make_a_job_eligible():
    # 4 nodes x 1 GPU (sacct NNodes=4, gres/gpu=4): multi-node, so eligible, on whole nodes
    trace = prepare([Job("1", 0, 100.0, 4, nodes=4)])
    setup = Setup(2, 8, 0.5, efficiency=Efficiency(1.0), network=NO_NETWORK)
    sized = shape(trace, setup)
    assert sized.eligible.tolist() == [True] and sized.transit_nodes.tolist() == [2]
    assert sized.transit_gpus.tolist() == [2]
    base = run_baseline(trace, setup)
    assert base.nodes.tolist() == [4] and base.held_gpus.tolist() == [32]


def test_both_scenarios_replay_the_same_jobs_and_the_unholdable_ones_get_their_own_row():
    # 128 GPUs = 16 nodes = 4 racks: too big for a 2-rack baseline, yet 2 racks at r = 0.5. It is
    # left out of both replays, so TRANSIT's figures count only jobs the baseline ran too.
    trace = prepare([Job("big", 0, 100.0, 128), Job("small", 0, 100.0, 8)])
    setup = Setup(2, 8, 0.5, network=NO_NETWORK)
    document, base, transit = study(trace, setup)
    assert base.ran.tolist() == [False, True] and transit.ran.tolist() == [False, True]
    assert base.drop_reason[0] == transit.drop_reason[0] == "larger than the baseline's 8 nodes of 2 racks"
    assert document["jobs"]["compared"] == 1
    assert document["jobs"]["left_out"] == {"count": 1, "gpu_h": pytest.approx(128 * 100 / 3600), "by_reason": {
        "larger than the baseline's 8 nodes of 2 racks": {"count": 1, "gpu_h": pytest.approx(128 * 100 / 3600)}}}
    assert document["baseline"]["jobs_replayed"] == document["transit"]["jobs_replayed"] == 1
    assert document["unholdable_study"] is None
    assert any("left out of both replays" in note and "--unholdable-study" in note for note in document["warnings"])


def test_the_separate_study_says_how_much_the_unholdable_jobs_delay_the_others():
    # On 2 racks (8 nodes): "big" (16 nodes, 4 racks as is) runs reduced on 8 nodes for 100 / 0.5 x
    # 1/0.898 s from t=0; "small" (1 node, 100 s) arrives at t=1 and must wait for it.
    trace = prepare([Job("big", 0, 100.0, 128), Job("small", 1, 100.0, 8)])
    setup = Setup(2, 8, 0.5, factors=Factors(0.0, 0.55), network=NO_NETWORK)
    document, _, transit = study(trace, setup, with_unholdable=True)
    assert transit.ran.tolist() == [False, True]        # the main study still leaves it out
    separate = document["unholdable_study"]
    assert (separate["admitted_jobs"], separate["jobs_replayed"]) == (1, 2)
    queue = separate["comparison"]["queue_mean_all"]
    assert (queue["baseline"], queue["transit"]) == (0.0, pytest.approx(200 / 0.898 - 1))
    assert any(note.startswith("separate study: admitting the 1 job only TRANSIT can hold (3.556 GPU-h) moves "
                               "the mean queue time (all) of the others 0 s -> 221.7 s") for note in document["warnings"])


def test_the_notes_take_a_queue_rise_apart_into_longer_jobs_and_the_efficiency_assumption():
    # 3 jobs of 8 nodes, all submitted at 0, on 8 nodes: as is they run one after another (queues
    # 0, 1000, 2000). Reduced to 4 nodes at efficiency 1 they run 2000 s, two at once (0, 0,
    # 2000); at efficiency 0.5, 4000 s (0, 0, 4000).
    trace = prepare([Job(name, 0.0, 1000.0, 64) for name in "ABC"])
    setup = Setup(2, 8, 0.5, factors=Factors(0.0, 0.55), efficiency=Efficiency(0.5), network=NO_NETWORK)
    document, _, _ = study(trace, setup)
    parts = document["attribution"]["queue_mean_all"]
    assert parts["at_efficiency_1"] == pytest.approx(2000 / 3)
    assert parts["longer_jobs"] == pytest.approx(2000 / 3 - 1000)
    assert parts["efficiency"] == pytest.approx(2000 / 3)
    note = next(n for n in document["warnings"] if n.startswith("mean queue time (all)"))
    assert note == ("mean queue time (all) rises with TRANSIT: 1,000.0 s -> 1,333.3 s (+333.3 s); longer jobs (the "
                    "reduction at efficiency 1) -333.3 s, the efficiency assumption (0.5) +666.7 s")


def test_metrics_of_a_hand_checked_replay():
    trace = prepare([Job("1", 0, 3600.0, 48), Job("2", 0, 3600.0, 8)])
    setup = Setup(2, 8, 0.5, network=Network(contention=False, comm_fraction=0.25))
    base = run_baseline(trace, setup)
    both = np.array([True, True])
    summary = metrics.summarize(base, trace.submit, both, np.array([True, False]))
    assert summary["makespan_h"] == pytest.approx(1.0)
    assert summary["gpu_idle_h"] == pytest.approx(64 - 56)
    assert summary["eligible"]["mean_racks"] == 2
    # 6 nodes over 2 racks: 0.25 x 3600 s at a node's 8 x 400 Gb/s (400 GB/s) over each of 2 boundaries
    assert summary["network"]["cross_rack_bytes"] == pytest.approx(2 * 0.25 * 3600 * 400e9)
    assert summary["network"]["inter_node_bytes"] == pytest.approx(6 * 0.25 * 3600 * 400e9)


def test_an_empty_group_keeps_every_key():
    trace = prepare([Job("1", 0, 3600.0, 8)])
    setup = Setup(1, 8, 0.5, network=NO_NETWORK)
    document, _, _ = study(trace, setup)
    empty = document["baseline"]["eligible"]
    full = document["baseline"]["all"]
    assert set(empty) == set(full) and set(empty["queue"]) == set(full["queue"])
    assert empty["jobs"] == 0 and empty["queue"]["mean_s"] is None and empty["mean_racks"] is None


def test_study_on_a_small_synthetic_trace():
    trace = prepare(synthetic.generate("kalos", 2000, seed=4))
    document, base, transit = study(trace, Setup(8, 8, 0.5))
    left = document["jobs"]["left_out"]
    assert left["count"] > 0      # some Kalos jobs exceed 256 GPUs
    assert document["jobs"]["compared"] + left["count"] == 2000
    assert (base.ran == transit.ran).all()
    compared = document["jobs"]["compared"]
    assert document["baseline"]["all"]["jobs"] == compared == document["transit"]["all"]["jobs"]
    assert document["comparison"]["mean_racks_eligible"]["change"] < 0
    assert document["transit"]["eligible"]["single_node_share_pct"] > 0
    moves = document["transitions"]
    assert moves["inter_to_intra"] + moves["intra_to_inter"] + moves["unchanged"] == document["jobs"]["reduced"]


def test_spread_fragments_racks_more_than_pack():
    trace = prepare(synthetic.generate("seren", 10_000, seed=1))
    share = {}
    for placement in ("pack", "spread"):
        setup = Setup(16, 8, 0.5, placement=placement, network=NO_NETWORK)
        run = run_baseline(trace, setup)
        eligible = shape(trace, setup).eligible & run.ran
        share[placement] = (run.racks[eligible] > 1).mean()
    assert share["spread"] > share["pack"] + 0.05, share


def test_with_contention_and_backfill_every_start_is_at_a_real_event():
    # Contention re-timing leaves superseded heap entries behind. On this trace 74 of 9,957 jobs used
    # to start at such a stale time (or at the next event after a re-timing made them fit), late.
    # Every start must be at a submit or at the real end of some job.
    trace = prepare(synthetic.generate("seren", 10_000, seed=1))
    setup = Setup(4, 8, 0.5, backfill=True, network=Network(oversubscription=16, comm_fraction=0.367))
    for run in (base := run_baseline(trace, setup), run_transit(trace, setup, base)):
        events = set(trace.submit.tolist()) | set(run.end[run.ran].tolist())
        assert (run.contention_s > 0).sum() > 50
        assert [s for s in run.start[run.ran].tolist() if s not in events] == []


@pytest.mark.parametrize(("every_s", "settles"), [(20.0, False), (30.0, True)])
def test_an_overloaded_trace_is_called_unsettled(every_s, settles):
    # 1-node 100-s jobs on 4 nodes: one every 20 s needs 5 nodes (the queue grows for ever), one every
    # 30 s needs 3.3 (it never forms)
    trace = prepare([Job(str(i), i * every_s, 100.0, 8) for i in range(400)])
    document, _, _ = study(trace, Setup(1, 8, 0.5, network=NO_NETWORK))
    grows = document["baseline"]["backlog"]
    assert grows["settles"] is settles
    quarter = grows["last_s"] - grows["first_s"]
    if settles:
        assert grows["queued_at_last"] == 0 and abs(grows["work_growth_s"]) < 1
        assert not any("backlog does not settle" in note for note in document["warnings"])
    else:
        # offered 5 nodes' work on 4: the cluster falls behind by a quarter of the time that passes
        assert grows["work_growth_s"] == pytest.approx(0.25 * quarter, rel=0.05)
        assert grows["queued_at_last"] > grows["queued_at_first"] > 0
        assert any(note.startswith("the baseline's backlog does not settle") for note in document["warnings"])


def test_a_cluster_of_a_few_nodes_fills_part_of_a_rack():
    # the 4-node dev cluster with 4 GPUs per node: 16 GPUs, half a 32-GPU rack
    cluster = Cluster(1, 4, nodes=4)
    assert (cluster.total_gpus, cluster.whole_free, cluster.free_gpus) == (16, 4, 16)
    assert cluster.place(0, 3) is not None and cluster.place(0, 2) is None
    assert cluster.place(1)[0] == [(3, 1)] and cluster.max_free == 3
    with pytest.raises(ValueError, match="9 nodes of 4 GPUs do not fill 1 racks"):
        Cluster(1, 4, nodes=9)
