"""The network model: bytes from ring all-reduce across rack boundaries, so the traffic TRANSIT saves
follows the racks a job stops crossing, not the fraction of nodes it gives up; contention follows
uplink load; the efficiency default is the project's measured figure."""

import json
from pathlib import Path

import numpy as np
import pytest

from transit.sim.jobs import Job
from transit.sim.network import PARAMS_PER_GPU, Network, ring_factor, traffic
from transit.sim.scenario import MEASURED_EFFICIENCY, MEASURED_EFFICIENCY_FILE, Setup, prepare
from transit.sim.study import study

ROOT = Path(__file__).resolve().parents[2]


def six_node_jobs(count=5):
    """6-node (48-GPU) jobs far apart, each alone on an empty cluster: 4 + 2 nodes over 2 racks."""
    return prepare([Job(str(i), i * 1e6, 3600.0, 48) for i in range(count)])


def cross_rack_change(trace, reduction):
    document, _, _ = study(trace, Setup(8, 8, reduction, network=Network(contention=False)))
    return document["comparison"]["cross_rack_bytes"]["change_pct"], document


def test_cross_rack_traffic_does_not_track_r():
    trace = six_node_jobs()
    # r = 0.25: 5 nodes, still 4 + 1 over 2 racks; only the ring's 2(d-1)/d moves (48 -> 40 ranks)
    quarter, document = cross_rack_change(trace, 0.25)
    assert quarter == pytest.approx(100 * (ring_factor(40) / ring_factor(48) - 1))
    assert -1 < quarter < 0
    # inter-node traffic does fall with the node count: 5 ring edges between nodes instead of 6
    inter = document["comparison"]["inter_node_bytes"]["change_pct"]
    assert inter == pytest.approx(100 * (5 * ring_factor(40) / (6 * ring_factor(48)) - 1))
    # r = 0.5: 3 nodes fit one rack: no byte crosses a rack boundary any more
    half, _ = cross_rack_change(trace, 0.5)
    assert half == -100.0


def test_bytes_follow_the_trace_s_model_size_and_degrees():
    # with dp and params given, steps = run time x comm_fraction / (2(d-1)/d x 2 B x params / node bandwidth)
    network = Network(contention=False, comm_fraction=0.2)
    gpus, nodes = np.array([48, 48]), np.array([6, 6])
    given = traffic(network, gpus, nodes, np.array([3600.0, 3600.0]), np.array([7e10, np.nan]),
                    np.array([12, 0]), np.array([4, 1]), 8)
    assert given.dp.tolist() == [12, 48]
    node_bytes_per_s = 8 * 400e9 / 8
    expected_steps = 3600 * 0.2 / (ring_factor(12) * 2 * 7e10 / node_bytes_per_s)
    assert given.steps[0] == pytest.approx(expected_steps)
    assert given.gradient_bytes.tolist() == [2 * 7e10, 2 * PARAMS_PER_GPU * 48]
    # whatever the model size, a job's total bytes per boundary are run time x phi x node bandwidth
    per_boundary = given.boundary_bytes_per_step(given.dp) * given.steps
    assert per_boundary == pytest.approx([3600 * 0.2 * node_bytes_per_s] * 2)


def test_single_node_jobs_send_nothing():
    network = Network()
    flows = traffic(network, np.array([8, 4]), np.array([1, 1]), np.array([100.0, 100.0]),
                    np.array([np.nan, np.nan]), np.array([0, 0]), np.array([1, 1]), 8)
    assert flows.steps.tolist() == [0.0, 0.0]


def test_contention_falls_by_more_than_r_once_jobs_leave_the_uplinks():
    # a busy 8-rack cluster of 6-node jobs overlapping in time, uplinks 16:1 oversubscribed and
    # collectives half the step: the baseline's multi-rack jobs contend; at r = 0.5 every job fits
    # one rack, so the contention delay goes away entirely rather than by half
    trace = prepare([Job(str(i), i * 60.0, 7200.0, 48) for i in range(40)])
    network = Network(oversubscription=16, comm_fraction=0.5)
    document, base, _ = study(trace, Setup(8, 8, 0.5, network=network))
    contention = document["comparison"]["contention"]
    assert contention["baseline"] > 1.0 and contention["transit"] == 0.0
    assert contention["change_pct"] == pytest.approx(-100.0)
    assert document["baseline"]["network"]["jobs_slowed"] > 0
    assert (base.contention_s[base.racks == 1] == 0).all()


def test_non_blocking_uplinks_never_contend():
    trace = prepare([Job(str(i), i * 60.0, 7200.0, 48) for i in range(40)])
    document, _, _ = study(trace, Setup(8, 8, 0.5, network=Network(oversubscription=1, comm_fraction=0.5)))
    assert document["baseline"]["network"]["contention_h"] == 0.0


def test_default_efficiency_is_the_measured_figure():
    summary = json.loads((ROOT / MEASURED_EFFICIENCY_FILE).read_text())["collect_summary"]
    assert round(summary["advise_vs_no_offload"]["value"], 3) == MEASURED_EFFICIENCY
