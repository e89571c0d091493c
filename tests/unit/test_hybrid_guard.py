"""Hybrid's guard: from the step times of a block with advise's placement and a block with hybrid's,
it keeps advise only when advise's median step is more than 2% faster (libtransit/src/model/guard.c).

Recorded step times: bench/results/hybrid-gb64-h200.json, global batch 64 at micro-batch 4 on an
H200, hybrid and advise each in its own run (steady steps: after the first five of warm-up)."""

from __future__ import annotations

import itertools
import json
import math
import statistics
from pathlib import Path

import native_logic
import pytest

REPO = Path(__file__).resolve().parents[2]
RECORDED = json.loads((REPO / "bench" / "results" / "hybrid-gb64-h200.json").read_text())["runs"]
WARM_UP = 5
HYBRID_MB4 = RECORDED["hybrid-gb64-mb4"]["step_times_s"][WARM_UP:]
ADVISE_MB4 = RECORDED["advise-gb64-mb4"]["step_times_s"][WARM_UP - 1:]  # advise settled a step earlier
UNDECIDED, HYBRID, ADVISE = 0, 1, 2


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return native_logic.load(tmp_path_factory.mktemp("guard"))


def decide(native, hybrid: list[float], advise: list[float]):
    ffi, lib = native
    return lib.transit_guard_decide(ffi.new("double[]", hybrid or [0.0]), len(hybrid),
                                    ffi.new("double[]", advise or [0.0]), len(advise))


def test_recorded_steady_steps_at_micro_batch_4_are_a_tie_and_hybrid_stays(native) -> None:
    # The first three steady steps: advise 5.75 s against hybrid 5.82 s, 1.2% apart.
    v = decide(native, HYBRID_MB4[:3], ADVISE_MB4[:3])
    assert (v.kept, v.hybrid_steps, v.advise_steps) == (HYBRID, 3, 3)
    assert (v.hybrid_step_s, v.advise_step_s) == (5.82, 5.75)


def test_advise_is_kept_when_clearly_faster(native) -> None:
    # The two emulated nodes on one H100: hybrid 6.37 s a step, advise 4.52 s.
    v = decide(native, [6.41, 6.37, 6.30], [4.52, 4.55, 4.50])
    assert (v.kept, v.hybrid_step_s, v.advise_step_s) == (ADVISE, 6.37, 4.52)


def test_hybrid_is_kept_when_faster(native) -> None:
    # Global batch 8 on an H200 (bench/results/hybrid-vs-advise-gb8-h200.json): 2.203 s against 2.885 s.
    v = decide(native, [2.21, 2.20, 2.19], [2.88, 2.89, 2.90])
    assert (v.kept, v.hybrid_step_s, v.advise_step_s) == (HYBRID, 2.20, 2.89)


def test_ties_keep_hybrid_up_to_two_percent(native) -> None:
    assert decide(native, [10.0] * 3, [10.0] * 3).kept == HYBRID
    assert decide(native, [10.0] * 3, [9.81] * 3).kept == HYBRID  # 1.9% faster: a tie
    assert decide(native, [10.0] * 3, [9.79] * 3).kept == ADVISE  # 2.1% faster
    assert decide(native, [9.0] * 3, [10.0] * 3).kept == HYBRID


def test_too_few_samples_decide_nothing(native) -> None:
    for hybrid, advise in [([], []), ([5.0, 5.0], [1.0, 1.0, 1.0]), ([5.0] * 3, [1.0, 1.0]), ([5.0] * 3, [])]:
        v = decide(native, hybrid, advise)
        assert (v.kept, v.hybrid_steps, v.advise_steps) == (UNDECIDED, len(hybrid), len(advise))
    v = decide(native, [5.0, 7.0], [])
    assert (v.hybrid_step_s, v.advise_step_s) == (6.0, 0.0)  # the medians so far, for the stats


def test_lost_step_times_are_not_samples(native) -> None:
    lost = [math.nan, math.inf, -1.0, 0.0]
    v = decide(native, [5.0, *lost, 5.1], [4.0, 4.0, 4.0])
    assert (v.kept, v.hybrid_steps) == (UNDECIDED, 2)
    v = decide(native, [5.0, *lost, 5.1, 5.2], [4.0, 4.0, 4.0])
    assert (v.kept, v.hybrid_steps, v.hybrid_step_s) == (ADVISE, 3, 5.1)


def test_one_disturbed_step_does_not_decide(native) -> None:
    # A step slowed 7x (a profiling window, a checkpoint) in either block is outvoted.
    assert decide(native, [5.82, 40.0, 5.84], ADVISE_MB4[:3]).kept == HYBRID
    assert decide(native, HYBRID_MB4[:3], [5.75, 40.0, 5.77]).kept == HYBRID
    assert decide(native, [6.37, 6.41, 6.30], [4.52, 31.0, 4.50]).kept == ADVISE


def test_any_recorded_blocks_keep_a_placement_within_3_percent_of_the_faster(native) -> None:
    """Over every pair of three consecutive recorded steady steps (the guard's blocks) the kept
    placement's median over its whole recorded run is at most 3% above the other's."""
    whole = {HYBRID: statistics.median(HYBRID_MB4), ADVISE: statistics.median(ADVISE_MB4)}
    def blocks(s: list[float]) -> list[list[float]]:
        return [s[i:i + 3] for i in range(len(s) - 2)]

    kept = [decide(native, h, a).kept for h, a in itertools.product(blocks(HYBRID_MB4), blocks(ADVISE_MB4))]
    assert set(kept) == {HYBRID, ADVISE}  # the recorded noise goes both ways at 1.5% apart
    assert all(whole[k] <= 1.03 * min(whole.values()) for k in kept)


def test_samples_past_the_cap_are_ignored(native) -> None:
    v = decide(native, [5.0] * 16 + [1.0] * 10, [4.0] * 3)
    assert (v.hybrid_steps, v.hybrid_step_s) == (16, 5.0)
