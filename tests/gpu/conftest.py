"""Helpers shared by the GPU tier's multi-rank tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

Handle = TypeVar("Handle")
Result = TypeVar("Result")


def side_by_side(runs: dict[str, int], start: Callable[[str], Handle], finish: Callable[[str, Handle], Result],
                 free_bytes: int) -> dict[str, Result]:
    """start(name) for every run in order, once the device memory of the runs still going plus its
    own (runs[name], bytes) fits free_bytes (never oversubscribed; a run too big for the GPU starts
    alone, and the harness refuses it); the oldest is finished first to make room. Side by side
    rather than one by one: much of a short run is start-up and host work, which overlap."""
    running: dict[str, Handle] = {}
    results: dict[str, Result] = {}
    for name, need in runs.items():
        while running and sum(runs[n] for n in running) + need > free_bytes:
            oldest = next(iter(running))
            results[oldest] = finish(oldest, running.pop(oldest))
        running[name] = start(name)
    for name, handle in running.items():
        results[name] = finish(name, handle)
    return results
