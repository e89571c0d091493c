"""Hybrid's placement: the most reused chunks stay on the device up to its capacity; a reading
over L sends the least reused placed chunks to the host (libtransit/src/model/placement.c)."""

from __future__ import annotations

import random

import native_logic
import pytest

CHUNK = 2 * 1024 * 1024


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return native_logic.load(tmp_path_factory.mktemp("hybrid"))


def place(native, reuse: list[int], capacity: int) -> list[int]:
    ffi, lib = native
    resident = ffi.new("uint8_t[]", max(len(reuse), 1))
    assert lib.transit_hybrid_place(ffi.new("uint32_t[]", reuse), len(reuse), capacity, resident) == 0
    return list(resident)[:len(reuse)]


def test_most_reused_stay_and_ties_go_by_address(native) -> None:
    # Parameters (reuse 9), gradients (8), moments (1): room for four chunks keeps the parameters,
    # then the lower-addressed gradient.
    reuse = [1, 9, 8, 1, 9, 8, 9]
    assert place(native, reuse, 4 * CHUNK) == [0, 1, 1, 0, 1, 0, 1]


def test_capacity_counts_whole_chunks(native) -> None:
    assert place(native, [3, 2, 1], 2 * CHUNK - 1) == [1, 0, 0]
    assert place(native, [3, 2, 1], 0) == [0, 0, 0]
    assert place(native, [3, 2, 1], 10 * CHUNK) == [1, 1, 1]
    assert place(native, [], CHUNK) == []


def test_matches_a_sort_on_random_profiles(native) -> None:
    rng = random.Random(7)
    for _ in range(50):
        reuse = [rng.randrange(1, 12) for _ in range(rng.randrange(1, 300))]
        fits = rng.randrange(0, len(reuse) + 2)
        kept = sorted(range(len(reuse)), key=lambda i: (-reuse[i], i))[:fits]
        assert place(native, reuse, fits * CHUNK) == [int(i in kept) for i in range(len(reuse))]


def demote(native, reuse: list[int], resident: list[int], excess: int) -> tuple[list[int], list[int]]:
    """(resident after, demoted indices in the order picked)."""
    ffi, lib = native
    kept = ffi.new("uint8_t[]", resident or [0])
    out = ffi.new("size_t[]", max(len(reuse), 1))
    m = lib.transit_hybrid_demote(ffi.new("uint32_t[]", reuse or [0]), len(reuse), excess, kept, out, len(reuse))
    return list(kept)[:len(reuse)], list(out)[:m]


def test_demotion_takes_the_least_reused_placed_chunks_first(native) -> None:
    # Placed: parameters (9) at 1, 4; gradients (8) at 2, 5; a moment (2) at 6. Host: 0, 3.
    reuse = [1, 9, 8, 1, 8, 8, 2]
    resident = [0, 1, 1, 0, 1, 1, 1]
    # 1.5 chunks over: the moment, then the highest-addressed gradient; never a host chunk.
    assert demote(native, reuse, resident, 3 * CHUNK // 2) == ([0, 1, 1, 0, 1, 0, 0], [6, 5])
    assert demote(native, reuse, resident, 0) == (resident, [])
    # More than is placed: every placed chunk, least reused first.
    assert demote(native, reuse, resident, 100 * CHUNK) == ([0] * 7, [6, 5, 4, 2, 1])


def test_demotion_undoes_the_placement_in_reverse(native) -> None:
    """Placing k chunks and demoting d of them leaves the placement of k - d chunks."""
    rng = random.Random(11)
    for _ in range(50):
        reuse = [rng.randrange(1, 12) for _ in range(rng.randrange(1, 200))]
        k = rng.randrange(0, len(reuse) + 1)
        d = rng.randrange(0, k + 1)
        after, picked = demote(native, reuse, place(native, reuse, k * CHUNK), d * CHUNK)
        assert after == place(native, reuse, (k - d) * CHUNK) and len(picked) == d
