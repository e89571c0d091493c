"""Limit mode's residency estimate: LRU of 2 MiB chunks (libtransit/src/model/chunks.c)."""

from __future__ import annotations

import random

import native_logic
import pytest

KIB, MIB = 1024, 1024 * 1024
CHUNK = 2 * MIB
BASE = 0x7F00_0000_0000  # 2 MiB aligned
NO_LIMIT = 2**64 - 1  # a make_room target nothing exceeds: the launch only touches its chunks


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return native_logic.load(tmp_path_factory.mktemp("chunks"))


@pytest.fixture
def chunks(native):
    ffi, lib = native
    made = []

    def make(max_chunks: int = 1024):
        c = lib.transit_chunks_create(max_chunks)
        assert c != ffi.NULL
        made.append(c)
        return c

    yield make
    for c in made:
        lib.transit_chunks_destroy(c)


def victims(native, c, target: int, out_cap: int = 64) -> list[tuple[int, int]]:
    ffi, lib = native
    out = ffi.new("transit_range[]", out_cap)
    n = lib.transit_chunks_pick_victims(c, target, out, out_cap)
    return [(out[i].addr, out[i].bytes) for i in range(n)]


def test_create_refuses_zero(native):
    ffi, lib = native
    assert lib.transit_chunks_create(0) == ffi.NULL


def test_a_chunk_with_any_migrated_page_counts_whole(native, chunks):
    """The driver moves more than the records name: a chunk counts 2 MiB once data entered it."""
    _, lib = native
    c = chunks()
    lib.transit_chunks_migrated(c, BASE, 64 * KIB)
    assert lib.transit_chunks_resident_bytes(c) == CHUNK
    lib.transit_chunks_migrated(c, BASE + 32 * KIB, 64 * KIB)  # the same chunk: counted once
    lib.transit_chunks_migrated(c, BASE + 100, 10)
    assert lib.transit_chunks_resident_bytes(c) == CHUNK and lib.transit_chunks_count(c) == 1
    lib.transit_chunks_migrated(c, BASE + CHUNK - 4 * KIB, 8 * KIB)  # one page into the next chunk
    assert lib.transit_chunks_resident_bytes(c) == 2 * CHUNK


def test_chunk_forgotten_only_when_every_named_page_left(native, chunks):
    _, lib = native
    c = chunks()
    lib.transit_chunks_migrated(c, BASE, 64 * KIB)
    lib.transit_chunks_migrated(c, BASE + MIB, 4 * KIB)
    lib.transit_chunks_dropped(c, BASE, 64 * KIB)
    assert lib.transit_chunks_resident_bytes(c) == CHUNK  # the page at 1 MiB is still there
    lib.transit_chunks_dropped(c, BASE + MIB, 4 * KIB)
    assert lib.transit_chunks_resident_bytes(c) == 0 and lib.transit_chunks_count(c) == 0


def test_migration_spanning_chunks(native, chunks):
    _, lib = native
    c = chunks()
    # From the last 1 MiB of chunk 0 through chunk 1 into the first 4 KiB of chunk 2.
    assert lib.transit_chunks_migrated(c, BASE + MIB, MIB + CHUNK + 4 * KIB) == 0
    assert lib.transit_chunks_count(c) == 3
    assert lib.transit_chunks_resident_bytes(c) == 3 * CHUNK
    assert victims(native, c, 0) == [(BASE, 3 * CHUNK)]
    assert lib.transit_chunks_resident_bytes(c) == 0 and lib.transit_chunks_count(c) == 0


def test_evicts_least_recently_migrated_first(native, chunks):
    _, lib = native
    c = chunks()
    for i in (5, 1, 9, 3):
        lib.transit_chunks_migrated(c, BASE + i * CHUNK, CHUNK)
    lib.transit_chunks_migrated(c, BASE + 5 * CHUNK, 4 * KIB)  # 5 is now the most recent
    assert victims(native, c, 3 * CHUNK) == [(BASE + 1 * CHUNK, CHUNK)]
    assert victims(native, c, 2 * CHUNK) == [(BASE + 9 * CHUNK, CHUNK)]
    assert victims(native, c, 0) == [(BASE + 3 * CHUNK, CHUNK), (BASE + 5 * CHUNK, CHUNK)]


def test_touch_protects_resident_chunks_and_adds_none(native, chunks):
    """A launch touches what its kernel is about to use: resident chunks move to the recent end
    (before the victims for its own chunks are picked); a chunk not resident is not added."""
    _, lib = native
    c = chunks()
    for i in (1, 2, 3):
        lib.transit_chunks_migrated(c, BASE + i * CHUNK, CHUNK)
    make_room(native, c, [(BASE, 2 * CHUNK)], NO_LIMIT)  # touches chunk 0 (not resident) and chunk 1
    assert lib.transit_chunks_count(c) == 3
    assert victims(native, c, 2 * CHUNK) == [(BASE + 2 * CHUNK, CHUNK)]
    assert victims(native, c, CHUNK) == [(BASE + 3 * CHUNK, CHUNK)]  # then 3, and 1 stays
    assert victims(native, c, 0) == [(BASE + 1 * CHUNK, CHUNK)]


def make_room(native, c, need: list[tuple[int, int]], target: int, out_cap: int = 64) -> list[tuple[int, int]]:
    ffi, lib = native
    ranges = ffi.new("transit_range[]", [{"addr": a, "bytes": b} for a, b in need])
    out = ffi.new("transit_range[]", out_cap)
    n = lib.transit_chunks_make_room(c, ranges, len(need), target, out, out_cap)
    return [(out[i].addr, out[i].bytes) for i in range(n)]


def test_a_launch_makes_room_for_what_it_adds_and_keeps_its_own(native, chunks):
    """Limit mode at a launch: room for the launch's chunks not resident (whole chunks), taken
    from the least recently migrated others, never from the launch's own."""
    _, lib = native
    c = chunks()
    for i in range(6):  # LRU order: 0 (least recent) .. 5
        lib.transit_chunks_migrated(c, BASE + i * CHUNK, CHUNK)
    need = [(BASE, CHUNK), (BASE + 7 * CHUNK + 4 * KIB, 8 * KIB)]  # 0 is resident, 7 is not
    assert make_room(native, c, need, 7 * CHUNK) == []  # 6 resident + 1 incoming fit
    assert lib.transit_chunks_count(c) == 6  # nothing added yet: the caller marks need after evicting
    assert make_room(native, c, need, 5 * CHUNK) == [(BASE + CHUNK, 2 * CHUNK)]  # 0 was touched: 1, 2 go
    assert lib.transit_chunks_count(c) == 4
    # a launch that needs more than the target takes every other chunk, but not its own
    wide = [(BASE, CHUNK), (BASE + 5 * CHUNK, 3 * CHUNK)]
    assert make_room(native, c, wide, CHUNK) == [(BASE + 3 * CHUNK, 2 * CHUNK)]
    assert lib.transit_chunks_count(c) == 2  # 0 and 5 stay
    assert make_room(native, c, [(BASE, CHUNK)], 0) == [(BASE + 5 * CHUNK, CHUNK)]  # 5 is not this launch's
    assert make_room(native, c, [(BASE, CHUNK)], 0) == [] and lib.transit_chunks_count(c) == 1


def test_make_room_in_batches_when_the_output_fills(native, chunks):
    _, lib = native
    c = chunks()
    for i in range(0, 20, 2):  # ten chunks, none adjacent: one range each
        lib.transit_chunks_migrated(c, BASE + i * CHUNK, CHUNK)
    need = [(BASE + 40 * CHUNK, CHUNK)]
    first = make_room(native, c, need, 4 * CHUNK, out_cap=4)
    second = make_room(native, c, need, 4 * CHUNK, out_cap=4)
    assert len(first) == 4 and len(second) == 3 and make_room(native, c, need, 4 * CHUNK) == []
    assert lib.transit_chunks_count(c) == 3  # 3 resident + the launch's 1 = the target


def test_cold_arrivals_are_the_next_victims(native, chunks):
    """While limit mode plans at launches, an HtoD record of a chunk the estimate lacks may be
    older than the eviction that already took it: the chunk counts, but goes first."""
    ffi, lib = native
    c = chunks()
    for i in (1, 2):
        lib.transit_chunks_migrated(c, BASE + i * CHUNK, CHUNK)
    untracked = ffi.new("uint64_t *")
    assert lib.transit_chunks_arrived_cold(c, BASE + 2 * CHUNK, 2 * CHUNK, untracked) == CHUNK  # 2 resident, 3 added
    assert lib.transit_chunks_arrived_cold(c, BASE, 64 * KIB, untracked) == CHUNK
    assert lib.transit_chunks_count(c) == 4
    # the cold ones first (0, added last, is the head), then the least recently migrated, 2 unmoved
    assert victims(native, c, 3 * CHUNK) == [(BASE, CHUNK)]
    assert victims(native, c, 2 * CHUNK) == [(BASE + 3 * CHUNK, CHUNK)]
    assert victims(native, c, CHUNK) == [(BASE + CHUNK, CHUNK)]
    assert lib.transit_chunks_arrived_cold(c, BASE, 0, untracked) == 0 and untracked[0] == 0
    full = chunks(max_chunks=1)  # out of nodes: counted, not kept
    assert lib.transit_chunks_arrived_cold(full, BASE, 2 * CHUNK, untracked) == CHUNK and untracked[0] == CHUNK


def test_victims_coalesce_adjacent_chunks(native, chunks):
    _, lib = native
    c = chunks()
    for i in (2, 0, 1, 7, 3):
        lib.transit_chunks_migrated(c, BASE + i * CHUNK, CHUNK)
    lib.transit_chunks_migrated(c, BASE + 10 * CHUNK + 8 * KIB, 4 * KIB)  # a lone page
    assert victims(native, c, 0) == [(BASE, 4 * CHUNK), (BASE + 7 * CHUNK, CHUNK), (BASE + 10 * CHUNK, CHUNK)]


def test_victim_is_the_whole_chunk(native, chunks):
    """Evicting only the named pages left the rest of the chunk on the device, unseen."""
    _, lib = native
    c = chunks()
    lib.transit_chunks_migrated(c, BASE + 64 * KIB, 4 * KIB)
    lib.transit_chunks_migrated(c, BASE + MIB, 8 * KIB)
    assert victims(native, c, 0) == [(BASE, CHUNK)]


def test_stops_at_target_and_out_capacity(native, chunks):
    _, lib = native
    c = chunks()
    for i in range(10):
        lib.transit_chunks_migrated(c, BASE + 2 * i * CHUNK, CHUNK)  # not adjacent
    assert len(victims(native, c, 7 * CHUNK)) == 3
    assert lib.transit_chunks_resident_bytes(c) == 7 * CHUNK
    assert len(victims(native, c, 0, out_cap=2)) == 2  # out full: call again
    assert lib.transit_chunks_resident_bytes(c) == 5 * CHUNK
    assert victims(native, c, 5 * CHUNK) == []


def test_dropped_to_host_and_freed(native, chunks):
    _, lib = native
    c = chunks()
    lib.transit_chunks_migrated(c, BASE, 3 * CHUNK)
    lib.transit_chunks_dropped(c, BASE + CHUNK + MIB, MIB)  # half of chunk 1 evicted by the driver
    assert lib.transit_chunks_resident_bytes(c) == 3 * CHUNK  # the other half keeps it counted
    lib.transit_chunks_dropped(c, BASE, CHUNK)  # an allocation freed: chunk 0 forgotten
    assert lib.transit_chunks_count(c) == 2
    lib.transit_chunks_dropped(c, BASE + 40 * CHUNK, CHUNK)  # never resident: no effect
    assert victims(native, c, 0) == [(BASE + CHUNK, 2 * CHUNK)]


def test_full_pool_reports_untracked_bytes(native, chunks):
    _, lib = native
    c = chunks(max_chunks=2)
    assert lib.transit_chunks_migrated(c, BASE, 2 * CHUNK) == 0
    assert lib.transit_chunks_migrated(c, BASE + 2 * CHUNK, CHUNK + 4 * KIB) == CHUNK + 4 * KIB
    assert lib.transit_chunks_migrated(c, BASE + CHUNK, 4 * KIB) == 0  # an existing chunk still works
    lib.transit_chunks_dropped(c, BASE, CHUNK)
    assert lib.transit_chunks_migrated(c, BASE + 5 * CHUNK, 4 * KIB) == 0  # a node was freed


def test_matches_reference_model_under_churn(native, chunks):
    """Random migrations, touches, drops and evictions against a Python model of named pages and LRU order."""
    _, lib = native
    rng = random.Random(0)
    c = chunks(max_chunks=4096)
    pages: dict[int, set[int]] = {}  # chunk -> resident page indexes
    order: list[int] = []  # chunks, least recently migrated first
    page = 4 * KIB
    for _ in range(3000):
        chunk = rng.randrange(300)
        first = rng.randrange(512)
        count = rng.randrange(1, 1200)
        addr, size = BASE + chunk * CHUNK + first * page, count * page
        action = rng.random()
        touched = range((addr - BASE) // page, (addr + size - BASE) // page)
        if action < 0.6:
            lib.transit_chunks_migrated(c, addr, size)
            for p in touched:
                pages.setdefault(p // 512, set()).add(p % 512)
            for ch in sorted({p // 512 for p in touched}):
                if ch in order:
                    order.remove(ch)
                order.append(ch)
        elif action < 0.75:
            make_room(native, c, [(addr, size)], NO_LIMIT)  # a touch: no target to make room for
            for ch in sorted({p // 512 for p in touched}):
                if ch in order:
                    order.remove(ch)
                    order.append(ch)
        elif action < 0.9:
            lib.transit_chunks_dropped(c, addr, size)
            for p in touched:
                pages.get(p // 512, set()).discard(p % 512)
            for ch in [ch for ch in order if not pages[ch]]:
                order.remove(ch)
                del pages[ch]
        else:
            target = len(pages) * CHUNK // 2
            got = victims(native, c, target, out_cap=4096)
            evicted = []
            while len(pages) * CHUNK > target:
                ch = order.pop(0)
                evicted.append([BASE + ch * CHUNK, CHUNK])
                del pages[ch]
            evicted.sort()
            merged: list[list[int]] = []
            for a, b in evicted:
                if merged and merged[-1][0] + merged[-1][1] == a:
                    merged[-1][1] += b
                else:
                    merged.append([a, b])
            assert got == [tuple(m) for m in merged]
        assert lib.transit_chunks_resident_bytes(c) == len(pages) * CHUNK
        assert lib.transit_chunks_count(c) == len(pages)


def spilled(native, c, addr: int, size: int, out_cap: int = 16) -> tuple[list[tuple[int, int]], int]:
    ffi, lib = native
    out = ffi.new("transit_range[]", out_cap)
    resume = ffi.new("uint64_t *")
    n = lib.transit_chunks_spilled(c, addr, size, out, out_cap, resume)
    return [(out[i].addr - BASE, out[i].bytes) for i in range(n)], resume[0] - BASE


def test_spilled_lists_what_the_estimate_places_on_the_host(native, chunks):
    """The sweep's input: the parts of an allocation in chunks with no resident page."""
    _, lib = native
    c = chunks()
    # an allocation of 10 chunks starting mid-chunk; chunks 2 and 3 hold resident pages, chunk 6 one page
    alloc, size = BASE + MIB, 10 * CHUNK
    lib.transit_chunks_migrated(c, BASE + 2 * CHUNK, 2 * CHUNK)
    lib.transit_chunks_migrated(c, BASE + 6 * CHUNK + 4 * KIB, 4 * KIB)
    runs, resume = spilled(native, c, alloc, size)
    assert runs == [(MIB, 3 * MIB), (4 * CHUNK, 2 * CHUNK), (7 * CHUNK, 3 * CHUNK + MIB)]
    assert resume == MIB + size
    # a full output stops early and says where to go on
    runs, resume = spilled(native, c, alloc, size, out_cap=1)
    assert runs == [(MIB, 3 * MIB)] and resume == 4 * CHUNK
    # nothing resident: one range, the whole allocation
    lib.transit_chunks_dropped(c, BASE, 16 * CHUNK)
    assert spilled(native, c, alloc, size)[0] == [(MIB, size)]
