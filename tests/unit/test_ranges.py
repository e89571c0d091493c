"""Prefetch profiling logic: per-ordinal ranges (ranges.c), migration attribution (attrib.c) and the
migration size histogram (hist.c)."""

from __future__ import annotations

import json
import random

import native_logic
import pytest

KIB, MIB = 1024, 1024 * 1024
GAP = 128 * KIB  # TRANSIT_PREFETCH_GAP default
NO_ORDINAL = 0xFFFFFFFF


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return native_logic.load(tmp_path_factory.mktemp("ranges"))


@pytest.fixture
def make_ranges(native):
    ffi, lib = native
    made = []

    def make(gap: int = GAP, raw_cap: int = 0):
        r = lib.transit_ranges_create(gap, raw_cap)
        assert r != ffi.NULL
        made.append(r)
        return r

    yield make
    for r in made:
        lib.transit_ranges_destroy(r)


def get(native, r, ordinal: int) -> list[tuple[int, int]]:
    ffi, lib = native
    count = ffi.new("size_t *")
    ranges = lib.transit_ranges_get(r, ordinal, count)
    if count[0] == 0:
        assert ranges == ffi.NULL
        return []
    return [(ranges[i].addr, ranges[i].bytes) for i in range(count[0])]


def reference_merge(ranges: list[tuple[int, int]], gap: int) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for addr, size in sorted(ranges):
        if merged and addr <= merged[-1][1] + gap:
            merged[-1][1] = max(merged[-1][1], addr + size)
        else:
            merged.append([addr, addr + size])
    return [(a, e - a) for a, e in merged]


# ---------------------------------------------------------------- ranges


def test_merge_overlapping_contiguous_and_gap_boundary(native, make_ranges):
    _, lib = native
    r = make_ranges()
    base = 0x7F00_0000_0000
    for addr, size in [
        (base, 64 * KIB), (base + 32 * KIB, 64 * KIB),  # overlap -> [base, base+96K)
        (base + 96 * KIB, 4 * KIB),  # contiguous -> [base, base+100K)
        (base + 100 * KIB + GAP, 4 * KIB),  # gap == 128K: merged
        (base + 104 * KIB + 2 * GAP + 1, 4 * KIB),  # gap 128K + 1: separate
    ]:
        assert lib.transit_ranges_add(r, 3, addr, size) == 0
    assert get(native, r, 3) == []  # nothing before finalize
    assert lib.transit_ranges_finalize(r) == 0
    assert get(native, r, 3) == [(base, 104 * KIB + GAP), (base + 104 * KIB + 2 * GAP + 1, 4 * KIB)]
    assert lib.transit_ranges_total_count(r) == 2
    assert lib.transit_ranges_total_bytes(r) == 108 * KIB + GAP


def test_ordinals_are_independent(native, make_ranges):
    _, lib = native
    r = make_ranges()
    lib.transit_ranges_add(r, 0, 0x1000_0000, MIB)
    lib.transit_ranges_add(r, 2, 0x1000_0000 + MIB, MIB)  # adjacent address, other ordinal
    lib.transit_ranges_add(r, 2, 0x2000_0000, MIB)
    lib.transit_ranges_add(r, 2, 0x0800_0000, 4 * KIB)
    lib.transit_ranges_add(r, 5, 0x3000_0000, 0)  # empty: ignored
    lib.transit_ranges_finalize(r)
    assert get(native, r, 0) == [(0x1000_0000, MIB)]
    assert get(native, r, 1) == []
    assert get(native, r, 2) == [(0x0800_0000, 4 * KIB), (0x1000_0000 + MIB, MIB), (0x2000_0000, MIB)]
    assert get(native, r, 5) == [] and get(native, r, 10**6) == []


def test_add_all_carries_an_earlier_profile_into_the_next(native, make_ranges):
    """A refinement window's ranges are added to what the profile already knew, ordinal by ordinal."""
    _, lib = native
    old, new = make_ranges(), make_ranges()
    lib.transit_ranges_add(old, 0, 0x1000_0000, MIB)
    lib.transit_ranges_add(old, 3, 0x2000_0000, MIB)
    assert lib.transit_ranges_add_all(new, old) == -1  # the source must be finalized
    lib.transit_ranges_finalize(old)
    lib.transit_ranges_add(new, 3, 0x2000_0000 + MIB, MIB)  # what the refinement saw
    lib.transit_ranges_add(new, 4, 0x3000_0000, MIB)
    assert lib.transit_ranges_add_all(new, old) == 0
    lib.transit_ranges_finalize(new)
    assert get(native, new, 0) == [(0x1000_0000, MIB)]
    assert get(native, new, 3) == [(0x2000_0000, 2 * MIB)]
    assert get(native, new, 4) == [(0x3000_0000, MIB)]
    assert lib.transit_ranges_add_all(new, old) == -1  # nor may the destination be


@pytest.mark.parametrize("gap,raw_cap", [(16 * KIB, 512), (16 * KIB, 1 << 20), (GAP, 256)])
def test_matches_reference_merge(native, make_ranges, gap, raw_cap):
    """A small raw buffer forces in-place merges while adding; the result must not change."""
    _, lib = native
    rng = random.Random(raw_cap)
    r = make_ranges(gap=gap, raw_cap=raw_cap)
    by_ordinal: dict[int, list[tuple[int, int]]] = {}
    for _ in range(3000):
        ordinal = rng.randrange(8)
        addr = 0x7000_0000_0000 + rng.randrange(64) * 64 * KIB + rng.randrange(16) * 4 * KIB
        size = rng.choice([4, 8, 16, 64]) * KIB
        by_ordinal.setdefault(ordinal, []).append((addr, size))
        assert lib.transit_ranges_add(r, ordinal, addr, size) == 0
    assert lib.transit_ranges_finalize(r) == 0
    total = 0
    for ordinal in range(8):
        want = reference_merge(by_ordinal.get(ordinal, []), gap)
        assert get(native, r, ordinal) == want
        total += sum(size for _, size in want)
    assert lib.transit_ranges_total_bytes(r) == total
    assert lib.transit_ranges_dropped(r) == 0


def test_full_buffer_of_distinct_ranges_drops_and_counts(native, make_ranges):
    _, lib = native
    r = make_ranges(raw_cap=4)
    results = [lib.transit_ranges_add(r, 0, i * 10 * MIB, 4 * KIB) for i in range(6)]
    assert results == [0, 0, 0, 0, -1, -1]
    assert lib.transit_ranges_dropped(r) == 2
    lib.transit_ranges_finalize(r)
    assert len(get(native, r, 0)) == 4


def test_add_after_finalize_is_refused_and_reset_reprofiles(native, make_ranges):
    _, lib = native
    r = make_ranges()
    lib.transit_ranges_add(r, 1, 0x100000, 4 * KIB)
    lib.transit_ranges_finalize(r)
    assert lib.transit_ranges_finalized(r) == 1
    assert lib.transit_ranges_add(r, 1, 0x9000_0000, 4 * KIB) == -1
    lib.transit_ranges_reset(r)
    assert lib.transit_ranges_finalized(r) == 0 and lib.transit_ranges_total_bytes(r) == 0
    lib.transit_ranges_add(r, 7, 0x9000_0000, 4 * KIB)
    lib.transit_ranges_finalize(r)
    assert get(native, r, 1) == [] and get(native, r, 7) == [(0x9000_0000, 4 * KIB)]


def test_finalize_with_nothing_recorded(native, make_ranges):
    _, lib = native
    r = make_ranges()
    assert lib.transit_ranges_finalize(r) == 0
    assert lib.transit_ranges_finalized(r) == 1
    assert get(native, r, 0) == [] and lib.transit_ranges_total_count(r) == 0


# ---------------------------------------------------------------- attribution


@pytest.fixture
def attrib(native, make_ranges):
    ffi, lib = native
    made = []

    def make(kernel_cap: int = 0, pending_cap: int = 0):
        r = make_ranges(gap=0)
        a = lib.transit_attrib_create(r, kernel_cap, pending_cap)
        assert a != ffi.NULL
        made.append(a)
        return a, r

    yield make
    for a in made:
        lib.transit_attrib_destroy(a)


def counts(native, a) -> dict[str, int]:
    c = native[1].transit_attrib_get_counts(a)
    return {k: getattr(c, k) for k in ("attributed", "attributed_bytes", "unattributed", "unattributed_bytes",
                                       "pending")}


def test_contained_next_and_waiting(native, attrib):
    _, lib = native
    a, r = attrib()
    lib.transit_attrib_kernel(a, 100, 200, 0)
    lib.transit_attrib_kernel(a, 300, 400, 1)
    lib.transit_attrib_migration(a, 150, 0x100000, 4 * KIB)  # inside kernel 0
    lib.transit_attrib_migration(a, 200, 0x200000, 4 * KIB)  # at kernel 0's end: inside
    lib.transit_attrib_migration(a, 250, 0x300000, 4 * KIB)  # between: the next kernel (1)
    lib.transit_attrib_migration(a, 50, 0x400000, 4 * KIB)  # before every kernel: the first
    lib.transit_attrib_migration(a, 450, 0x500000, 4 * KIB)  # after the last: waits
    assert counts(native, a)["pending"] == 1
    lib.transit_attrib_kernel(a, 500, 600, 2)  # resolves it to kernel 2
    lib.transit_attrib_migration(a, 700, 0x600000, 4 * KIB)
    lib.transit_attrib_flush(a)  # nothing after it: unattributed
    assert counts(native, a) == {"attributed": 5, "attributed_bytes": 20 * KIB, "unattributed": 1,
                                 "unattributed_bytes": 4 * KIB, "pending": 0}
    lib.transit_ranges_finalize(r)
    assert get(native, r, 0) == [(0x100000, 4 * KIB), (0x200000, 4 * KIB), (0x400000, 4 * KIB)]
    assert get(native, r, 1) == [(0x300000, 4 * KIB)]
    assert get(native, r, 2) == [(0x500000, 4 * KIB)]


def test_concurrent_kernels_latest_containing_wins(native, attrib):
    """A long kernel (a collective on another stream) and short compute kernels overlap."""
    _, lib = native
    a, r = attrib()
    lib.transit_attrib_kernel(a, 0, 10_000, 7)
    lib.transit_attrib_kernel(a, 100, 200, 8)
    lib.transit_attrib_kernel(a, 300, 400, 9)
    lib.transit_attrib_migration(a, 150, 0x100000, 4 * KIB)  # in 7 and 8: the later-starting 8
    lib.transit_attrib_migration(a, 250, 0x200000, 4 * KIB)  # only in 7
    lib.transit_attrib_migration(a, 20_000, 0x300000, 4 * KIB)  # after all: waits
    lib.transit_ranges_finalize(r)
    assert get(native, r, 8) == [(0x100000, 4 * KIB)]
    assert get(native, r, 7) == [(0x200000, 4 * KIB)]
    assert counts(native, a)["pending"] == 1


def test_kernel_without_ordinal_absorbs_its_migrations(native, attrib):
    _, lib = native
    a, _ = attrib()
    lib.transit_attrib_kernel(a, 100, 200, NO_ORDINAL)
    lib.transit_attrib_kernel(a, 300, 400, 0)
    lib.transit_attrib_migration(a, 150, 0x100000, 4 * KIB)
    lib.transit_attrib_migration(a, 250, 0x200000, 4 * KIB)
    assert counts(native, a)["unattributed"] == 1 and counts(native, a)["attributed"] == 1


def synthetic_timeline(rng: random.Random, n_kernels: int):
    kernels, migrations = [], []
    t = 1000
    for ordinal in range(n_kernels):
        t += rng.randrange(0, 3000)  # idle gap before the kernel: faults land there too
        start, end = t, t + rng.randrange(500, 5000)
        kernels.append((start, end, ordinal))
        for _ in range(rng.randrange(0, 6)):
            m_start = rng.randrange(start - 2000, end)
            migrations.append((m_start, 0x7000_0000_0000 + rng.randrange(1 << 20) * 4 * KIB, 4 * KIB))
        t = end
    return kernels, migrations


def reference_attribution(kernels, migrations) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for m_start, addr, size in migrations:
        containing = [k for k in kernels if k[0] <= m_start <= k[1]]
        later = [k for k in kernels if k[0] > m_start]
        owner = max(containing) if containing else (min(later) if later else None)
        if owner is not None:
            out.setdefault(owner[2], []).append((addr, size))
    return out


@pytest.mark.parametrize("order", ["kernels-first", "migrations-first", "interleaved-buffers"])
def test_delivery_order_between_kinds_does_not_matter(native, attrib, order):
    _, lib = native
    rng = random.Random(42)
    kernels, migrations = synthetic_timeline(rng, 400)
    # Records within a kind arrive in time order, in buffers; kinds interleave arbitrarily.
    migrations.sort()
    a, r = attrib()
    batches = [("k", kernels[i:i + 32]) for i in range(0, len(kernels), 32)]
    batches += [("m", migrations[i:i + 50]) for i in range(0, len(migrations), 50)]
    if order == "kernels-first":
        batches.sort(key=lambda b: b[0] != "k")
    elif order == "migrations-first":
        batches.sort(key=lambda b: b[0] != "m")
    else:
        k_batches = [b for b in batches if b[0] == "k"]
        m_batches = [b for b in batches if b[0] == "m"]
        batches = []
        while k_batches or m_batches:
            source = k_batches if k_batches and (not m_batches or rng.random() < 0.5) else m_batches
            batches.append(source.pop(0))
    for kind, records in batches:
        for rec in records:
            if kind == "k":
                lib.transit_attrib_kernel(a, *rec)
            else:
                lib.transit_attrib_migration(a, *rec)
    lib.transit_attrib_flush(a)
    lib.transit_ranges_finalize(r)
    want = reference_attribution(kernels, migrations)
    for ordinal in range(len(kernels)):
        assert get(native, r, ordinal) == reference_merge(want.get(ordinal, []), 0)
    c = counts(native, a)
    assert c["attributed"] == sum(len(v) for v in want.values())
    assert c["attributed"] + c["unattributed"] == len(migrations)


def test_bounded_buffers_count_what_they_cannot_keep(native, attrib):
    _, lib = native
    a, _ = attrib(kernel_cap=4, pending_cap=2)
    for i in range(10):
        lib.transit_attrib_kernel(a, 1000 * i, 1000 * i + 500, i)
    lib.transit_attrib_migration(a, 100, 0x100000, 4 * KIB)  # kernel 0 was evicted: unattributable
    lib.transit_attrib_migration(a, 9200, 0x200000, 4 * KIB)  # kernel 9, still kept
    for i in range(3):  # after every kernel: two wait, the third does not fit
        lib.transit_attrib_migration(a, 20_000 + i, 0x300000 + i * MIB, 4 * KIB)
    c = counts(native, a)
    assert (c["attributed"], c["unattributed"], c["pending"]) == (1, 2, 2)


# ---------------------------------------------------------------- histogram


@pytest.mark.parametrize("size,label", [
    (0, "<4K"), (4095, "<4K"),
    (4096, "4K-64K"), (65535, "4K-64K"),
    (65536, "64K-1M"), (MIB - 1, "64K-1M"),
    (MIB, "1M-2M"), (2 * MIB, "1M-2M"),
    (2 * MIB + 1, ">2M"), (1 << 40, ">2M"),
])
def test_histogram_bin_boundaries(native, size, label):
    ffi, lib = native
    assert ffi.string(lib.transit_hist_label(lib.transit_hist_bin(size))).decode() == label


def test_histogram_json(native):
    ffi, lib = native
    h = ffi.new("transit_hist *")
    for size in [100, 4096, 4096, 2 * MIB, 2 * MIB, 2 * MIB, 3 * MIB]:
        lib.transit_hist_add(h, size)
    buf = ffi.new("char[]", 256)
    n = lib.transit_hist_json(h, lib.TRANSIT_HIST_COUNT, buf, 256)
    text = ffi.string(buf).decode()
    assert n == len(text)
    assert text == '{"<4K": 1, "4K-64K": 2, "64K-1M": 0, "1M-2M": 3, ">2M": 1}'
    lib.transit_hist_json(h, lib.TRANSIT_HIST_BYTES, buf, 256)
    assert json.loads(ffi.string(buf)) == {"<4K": 100, "4K-64K": 8192, "64K-1M": 0, "1M-2M": 6 * MIB,
                                           ">2M": 3 * MIB}
    # Exactly fitting (with its NUL) works; one byte less fails and leaves "".
    assert lib.transit_hist_json(h, lib.TRANSIT_HIST_COUNT, buf, n + 1) == n
    assert lib.transit_hist_json(h, lib.TRANSIT_HIST_COUNT, buf, n) == -1
    assert ffi.string(buf) == b""
