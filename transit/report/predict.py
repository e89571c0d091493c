"""What a rank's own profile predicts for its steady iteration, beside what the rank measured.

A rank run with TRANSIT_PROFILE=1 leaves `rank<R>.<host>.<pid>.profile.json.gz` beside its stats
file. `transit replay` runs the rank's policy over it at the rank's L (hybrid with its mover's plan
when the mover planned to stream); the last predicted iteration is the steady one. Its step time
needs the kernel time of an iteration without offload (`--compute-s`): the profile's own kernel
times are the warm-up's, slowed by its faults, so without it only the bytes are predicted.
"""

from __future__ import annotations

from pathlib import Path

from transit import replay
from transit.errors import UsageError
from transit.report.aggregate import Prediction, RankRow
from transit.report.load import ReportWarning, beside

PROFILE_SUFFIX = ".profile.json.gz"
UNREADABLE_PROFILE = "unreadable-profile"
# Replay takes about a second a profile: a job whose every rank kept one is predicted for the first few.
PREDICTED_RANKS = 8


def predict(row: RankRow, compute_s: float | None) -> tuple[Prediction | None, ReportWarning | None]:
    """The rank's prediction, nothing when it left no profile, or why its profile cannot be replayed."""
    path = beside(Path(row.file), PROFILE_SUFFIX)
    if not row.file or not path.exists() or row.policy is None or row.limit_bytes is None:
        return None, None
    look_ahead = row.policy == "hybrid" and row.hybrid_planned_streamed_bytes > 0
    try:
        t = replay.template(replay.load_profile(path), compute_s)
        replay.check_limit(t, row.limit_bytes, f"the rank's L ({row.limit_bytes} bytes)")
        steady = replay.replay(t, row.policy, row.limit_bytes, replay.DEFAULT_ITERATIONS, replay.DEFAULT_RATES_GBPS,
                               look_ahead)[-1]
    except (UsageError, OSError, KeyError, TypeError, ValueError) as exc:
        return None, ReportWarning(UNREADABLE_PROFILE, f"cannot replay {path.name}: {exc}; the rank is reported "
                                   "without its prediction", str(path))
    try:
        deltas = replay.iteration_deltas(row.timeline)
    except (KeyError, TypeError):  # a timeline without the counters: nothing measured to set beside
        deltas = {}
    last = deltas[max(deltas)] if deltas else {}
    return Prediction(
        rank=row.label, profile=str(path), policy=row.policy, look_ahead=look_ahead,
        htod_bytes=steady["htod_bytes"], dtoh_bytes=steady["dtoh_bytes"], zero_copy_bytes=steady["zero_copy_bytes"],
        streamed_bytes=steady["streamed_bytes"], step_s=steady["step_s"] if compute_s is not None else None,
        compute_s=compute_s, measured_step_s=row.step_time_p50_s,
        measured_htod_bytes=last.get("htod_bytes"), measured_dtoh_bytes=last.get("dtoh_bytes")), None


def predictions(rows: list[RankRow], compute_s: float | None) -> tuple[list[Prediction], list[ReportWarning]]:
    """The first PREDICTED_RANKS ranks' predictions, in rank order."""
    found, warnings = [], []
    for row in rows:
        if len(found) == PREDICTED_RANKS:
            break
        prediction, warning = predict(row, compute_s)
        found += [prediction] if prediction else []
        warnings += [warning] if warning else []
    return found, warnings

