"""Helpers shared by the GPU tier's multi-rank tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

Handle = TypeVar("Handle")
Result = TypeVar("Result")


def in_waves(names: Iterable[str], start: Callable[[str], Handle], finish: Callable[[str, Handle], Result],
             at_once: int) -> dict[str, Result]:
    """start(name) for every name, at most at_once running together (the runs whose device memory
    fits the GPU's free memory side by side: never oversubscribed), the oldest finished before the
    next starts. Side by side rather than one by one: most of a short run is start-up and page
    faults, which overlap on one GPU."""
    running: dict[str, Handle] = {}
    results: dict[str, Result] = {}
    for name in names:
        if len(running) >= max(1, at_once):
            oldest = next(iter(running))
            results[oldest] = finish(oldest, running.pop(oldest))
        running[name] = start(name)
    for name, handle in running.items():
        results[name] = finish(name, handle)
    return results
