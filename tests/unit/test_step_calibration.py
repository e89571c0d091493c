"""The planner's step-time factors and their stated error, recomputed from the committed GPU summaries."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import step_calibration

from transit.plan import planner


def test_the_factors_and_errors_plan_states_are_those_of_the_committed_summaries():
    calibration = step_calibration.calibrate(step_calibration.points())
    assert {p: c["factor"] for p, c in calibration.items()} == planner.POLICY_TRANSFER_FACTOR
    assert {p: {k: c[k] for k in ("runs", "median_error", "max_error")} for p, c in calibration.items()} == \
        planner.STEP_TIME_ERROR


def test_every_spilling_transit_run_with_a_reference_is_a_point():
    rows = step_calibration.points()
    # 7 summaries with TRANSIT runs that spill: 6 advise, 6 base (compare-gb8 skipped base), 7 prefetch
    assert len(rows) == 19
    assert {r["source"].split(":")[0] for r in rows} == {
        "compare-gb64-27g-final.summary.json", "compare-gb64-27g-h200x2.summary.json",
        "compare-gb64-h200x2.summary.json", "compare-gb8-h200x2.summary.json", "policies-h200.summary.json",
        "policies-h200x2.summary.json", "policies-long-h200x2.summary.json"}
    # compare-gb64-27g-final, advise: 6.165 s at 263.0 TFLOPS against FSDP2 at 292.6 on 2 GPUs
    advise = next(r for r in rows if r["source"] == "compare-gb64-27g-final.summary.json:transit-advise")
    assert advise["compute_s"] == 6.165268986499996 * 263.043513672018 / 292.64654261466694
