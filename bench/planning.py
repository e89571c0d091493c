"""The plan of an experiment: its runs in the order they start (calibrations, then the systems
alternating), their placement one after another on the GPU, the parts (device commands) they are
cut into, and a command's time budget.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from bench.experiments import Experiment, System

# Device time. A command may run 600 s; a part keeps PART_MARGIN_S of it for the setup and the end;
# one experiment, all its parts at one commit, fits EXPERIMENT_BUDGET_S.
COMMAND_LIMIT_S = 600
PART_MARGIN_S = 60
EXPERIMENT_BUDGET_S = 30 * 60
SETUP_S = 20  # bench/device_setup.sh and the wheels: 363 s command less its runs' 345 s (README)
# A run is stopped at this multiple of its estimate (at least RUN_LIMIT_MIN_S), within its part.
RUN_LIMIT_FACTOR, RUN_LIMIT_MIN_S = 2.0, 120
RUN_START_MIN_S = 60  # --time-limit: the least time left in which a run still starts


@dataclass
class Run:
    system: System
    repeat: int  # 0: TRANSIT's calibration run (fair memory), 1..: the timed repeats

    @property
    def id(self) -> str:
        return f"{self.system.name}.r{self.repeat}" if self.repeat else f"{self.system.name}.calibration"

    @property
    def calibrated(self) -> bool:
        """Whether this system's timed repeats wait for a calibration run."""
        return self.system.transit and self.system.cap is not None


def plan(experiment: Experiment) -> list[Run]:
    """The experiment's runs in the order they start: calibrations, then A B C A B C ..."""
    calibrations = [Run(s, 0) for s in experiment.systems if s.transit and s.cap and not experiment.search]
    return calibrations + [Run(s, r) for r in range(1, experiment.repeats + 1) for s in experiment.systems]


@dataclass
class Placement:
    run: Run
    start: float  # seconds after the part's start
    end: float


def schedule(runs: list[Run], seconds) -> list[Placement]:
    """The runs one after another on the GPU; `seconds(run)` is how long each takes."""
    out, t = [], 0.0
    for run in runs:
        out.append(Placement(run, t, t + seconds(run)))
        t += seconds(run)
    return out


def split_parts(runs: list[Run], seconds, command_limit_s: float = COMMAND_LIMIT_S) -> list[list[Run]]:
    """Consecutive runs into parts (commands) that end within command_limit_s - PART_MARGIN_S
    estimated seconds; no limit (0): one part."""
    budget = command_limit_s - PART_MARGIN_S if command_limit_s else math.inf
    parts: list[list[Run]] = [[]]
    for run in runs:
        if parts[-1] and makespan(parts[-1] + [run], seconds) > budget:
            parts.append([run])
        else:
            parts[-1].append(run)
    return parts


def makespan(runs: list[Run], seconds) -> float:
    return sum(seconds(run) for run in runs)


@dataclass(frozen=True)
class Budget:
    """A command's time: its deadline (unix seconds), the seconds a run needs left to start, and
    those after which it is stopped."""

    deadline: float
    need: Callable[[Run], float]
    stop_after: Callable[[Run], float]


def budget(seconds, part: int, time_limit: float | None, t0: float,
           command_limit_s: float = COMMAND_LIMIT_S) -> Budget:
    """--part K/N: the command's limit; a run starts if its estimate fits and is stopped at
    RUN_LIMIT_FACTOR x it (at least RUN_LIMIT_MIN_S). --time-limit S: a run starts while
    RUN_START_MIN_S are left, its estimate notwithstanding (the estimates of runs never recorded are
    guesses), and is stopped only at the deadline. Neither: every slot, no deadline."""
    if time_limit:
        return Budget(t0 + time_limit - SETUP_S - PART_MARGIN_S / 2, lambda run: min(seconds(run), RUN_START_MIN_S),
                      lambda run: math.inf)
    return Budget(t0 + (command_limit_s - SETUP_S - PART_MARGIN_S / 2 if part and command_limit_s else math.inf),
                  seconds,
                  lambda run: max(RUN_LIMIT_MIN_S, RUN_LIMIT_FACTOR * seconds(run)))
