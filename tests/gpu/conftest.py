"""Helpers shared by the GPU tier's multi-rank tests."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

Key = TypeVar("Key", bound=Hashable)
Handle = TypeVar("Handle")
Result = TypeVar("Result")


def side_by_side(runs: dict[Key, int], start: Callable[[Key], Handle], finish: Callable[[Key, Handle], Result],
                 free_bytes: int) -> dict[Key, Result]:
    """start(name) for every run in order, once the device memory of the runs still going plus its
    own (runs[name], bytes) fits free_bytes (never oversubscribed; a run too big for the GPU starts
    alone, and the harness refuses it); the oldest is finished first to make room. Side by side
    rather than one by one: much of a short run is start-up and host work, which overlap."""
    running: dict[Key, Handle] = {}
    results: dict[Key, Result] = {}
    for name, need in runs.items():
        while running and sum(runs[n] for n in running) + need > free_bytes:
            oldest = next(iter(running))
            results[oldest] = finish(oldest, running.pop(oldest))
        running[name] = start(name)
    for name, handle in running.items():
        results[name] = finish(name, handle)
    return results
