"""Hybrid's placement: the chunks costliest to read in place stay on the device up to its capacity;
a reading over L sends the cheapest placed chunks to the host (libtransit/src/model/hybrid.c). A
chunk's cost ranks the launches of GEMM and attention kernels that touch it, then all its launches,
then its reuse (phases); the tests that give reuse alone rank by reuse, as profiles without launch
counts do."""

from __future__ import annotations

import random

import native_logic
import pytest

CHUNK = 2 * 1024 * 1024


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return native_logic.load(tmp_path_factory.mktemp("hybrid"))


def costs(native, reuse: list[int], launches: list[int] | None = None,
          rereading: list[int] | None = None):
    ffi, lib = native
    launches = launches or [0] * len(reuse)
    rereading = rereading or [0] * len(reuse)
    return ffi.new("uint64_t[]", [lib.transit_hybrid_cost(r, n, g) for r, n, g in zip(reuse, launches, rereading)]
                   or [0])


def place(native, reuse: list[int], capacity: int, launches: list[int] | None = None,
          rereading: list[int] | None = None) -> list[int]:
    ffi, lib = native
    resident = ffi.new("uint8_t[]", max(len(reuse), 1))
    assert lib.transit_hybrid_place(costs(native, reuse, launches, rereading), len(reuse), capacity, resident) == 0
    return list(resident)[:len(reuse)]


def test_most_reused_stay_and_ties_go_by_address(native) -> None:
    # Parameters (reuse 9), gradients (8), moments (1): room for four chunks keeps the parameters,
    # then the lower-addressed gradient.
    reuse = [1, 9, 8, 1, 9, 8, 9]
    assert place(native, reuse, 4 * CHUNK) == [0, 1, 1, 0, 1, 0, 1]


def test_gemm_operands_stay_before_elementwise_data_however_reused(native) -> None:
    # Global batch 64 at micro-batch 8: the moments (one launch a step) cannot hold all the
    # overflow. An activation chunk, 3 phases but 2 GEMM launches, stays; of the gradients (9
    # elementwise launches in 9 phases) and the fp32 weights (17 launches in 9 phases: the casts
    # and the optimizer), the gradient goes: fewer launches.
    reuse = [1, 1, 3, 9, 9]
    launches = [1, 1, 6, 9, 17]
    rereading = [0, 0, 2, 0, 0]
    assert place(native, reuse, 2 * CHUNK, launches, rereading) == [0, 0, 1, 0, 1]
    # By reuse alone the activation would have gone instead.
    assert place(native, reuse, 2 * CHUNK) == [0, 0, 0, 1, 1]


def test_cost_order(native) -> None:
    _, lib = native
    cost = lib.transit_hybrid_cost
    assert cost(2, 2, 1) > cost(40, 400, 0)  # any GEMM launch outranks every elementwise-only chunk
    assert cost(2, 3, 1) > cost(2, 2, 1) > cost(1, 2, 1)  # then launches, then phases
    assert cost(5, 0, 0) == cost(5, 5, 0)  # a chunk only records name: its phases stand in for launches
    assert cost(3, 1 << 30, 0) > cost(3, (1 << 21) - 2, 0)  # counts saturate, they do not wrap


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
    m = lib.transit_hybrid_demote(costs(native, reuse), len(reuse), excess, kept, out, len(reuse))
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
