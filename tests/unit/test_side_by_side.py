"""tests/gpu/conftest.py's side_by_side: the GPU tier's multi-rank runs share one GPU without ever
asking for more device memory together than it has free."""

from __future__ import annotations

from tests.gpu.conftest import side_by_side

GIB = 1 << 30


def test_runs_start_while_they_fit_and_the_oldest_finishes_first() -> None:
    events: list[str] = []
    going: set[str] = set()
    peak = 0
    sizes = {"a": 30 * GIB, "b": 30 * GIB, "c": 30 * GIB, "d": 10 * GIB, "e": 60 * GIB}

    def start(name: str) -> str:
        nonlocal peak
        going.add(name)
        peak = max(peak, sum(sizes[n] for n in going))
        events.append(f"start {name}")
        return name

    def finish(name: str, handle: str) -> str:
        going.discard(name)
        events.append(f"finish {name}")
        return handle.upper()

    results = side_by_side(sizes, start, finish, free_bytes=75 * GIB)
    assert results == {n: n.upper() for n in sizes}
    assert peak <= 75 * GIB
    assert events == ["start a", "start b", "finish a", "start c", "start d", "finish b", "finish c", "start e",
                      "finish d", "finish e"]


def test_a_run_larger_than_the_free_memory_starts_alone() -> None:
    order: list[str] = []
    side_by_side({"small": 1, "huge": 100}, lambda n: order.append(f"start {n}"),
                 lambda n, _: order.append(f"finish {n}"), free_bytes=10)
    assert order == ["start small", "finish small", "start huge", "finish huge"]
