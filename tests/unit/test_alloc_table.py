"""The allocation table: inserts, matched frees, growth and deletion keep every key findable."""

from __future__ import annotations

import random

from transit._native import ffi, lib

MANAGED = 1


def insert(key: int, size: int) -> None:
    a = ffi.new("transit_alloc *", {"key": key, "size": size, "device": 0, "kind": MANAGED})
    assert lib().transit_alloc_insert(a) == 0


def remove(key: int) -> int | None:
    out = ffi.new("transit_alloc *")
    return int(out.size) if lib().transit_alloc_remove(key, out) else None


def test_insert_remove_and_growth() -> None:
    lib().transit_alloc_reset()
    rng = random.Random(7)
    # device-pointer-like keys: 2 MiB aligned, shared high bits, as the hash must handle
    keys = rng.sample(range(1, 1 << 20), 20000)
    live = {}
    for k in keys:
        addr = 0x7F0000000000 + (k << 21)
        insert(addr, k)
        live[addr] = k
    assert lib().transit_alloc_count() == len(live)
    # remove half in random order: every other key must stay findable (deletion keeps chains)
    for addr in rng.sample(sorted(live), len(live) // 2):
        assert remove(addr) == live.pop(addr)
    for addr, size in live.items():
        assert remove(addr) == size
    assert lib().transit_alloc_count() == 0


def test_unknown_free_is_not_matched() -> None:
    lib().transit_alloc_reset()
    insert(0x1000, 10)
    assert remove(0x2000) is None
    assert remove(0x1000) == 10
    assert remove(0x1000) is None


def test_reinsert_replaces() -> None:
    lib().transit_alloc_reset()
    insert(0x5000, 1)
    insert(0x5000, 2)
    assert lib().transit_alloc_count() == 1
    assert remove(0x5000) == 2


def test_snapshot_copies_one_kind() -> None:
    lib().transit_alloc_reset()
    for key in (0x10000, 0x20000, 0x30000):
        insert(key, key // 0x10000)
    vmm = ffi.new("transit_alloc *", {"key": 0x40000, "size": 9, "device": 0, "kind": 2})
    assert lib().transit_alloc_insert(vmm) == 0
    n = ffi.new("size_t *")
    copy = lib().transit_alloc_snapshot(MANAGED, n)
    try:
        assert sorted((copy[i].key, copy[i].size) for i in range(n[0])) == [(0x10000, 1), (0x20000, 2), (0x30000, 3)]
    finally:
        lib().transit_free(copy)


def clip(addr: int, size: int, cap: int = 16) -> list[tuple[int, int]]:
    out = ffi.new("transit_range[]", cap)
    n = lib().transit_alloc_clip(addr, size, out, cap)
    return [(int(out[i].addr), int(out[i].bytes)) for i in range(n)]


def test_clip_cuts_ranges_at_allocation_boundaries() -> None:
    lib().transit_alloc_reset()
    mib = 1 << 20
    # three managed allocations with a hole between the second and the third, and a VMM handle
    insert(0x200000000, 3 * mib)
    insert(0x200300000, 1 * mib)
    insert(0x200600000, 2 * mib)
    a = ffi.new("transit_alloc *", {"key": 0x200400000, "size": 4 * mib, "device": 0, "kind": 2})
    assert lib().transit_alloc_insert(a) == 0  # VMM: never a prefetch target
    # a 2 MiB chunk straddling the first two allocations: two pieces
    assert clip(0x200200000, 2 * mib) == [(0x200200000, mib), (0x200300000, mib)]
    # a range across the hole: the hole is skipped
    assert clip(0x200380000, 5 * mib) == [(0x200380000, mib // 2), (0x200600000, 2 * mib)]
    # nothing live there
    assert clip(0x200400000, 2 * mib) == []
    # cap bounds the output; the caller continues from the last piece's end
    assert clip(0x200000000, 8 * mib, cap=2) == [(0x200000000, 3 * mib), (0x200300000, mib)]
    # a freed allocation is no longer a target; re-inserting a key replaces its span
    assert remove(0x200300000) == mib
    assert clip(0x200200000, 2 * mib) == [(0x200200000, mib)]
    insert(0x200000000, 1 * mib)
    assert clip(0x200000000, 3 * mib) == [(0x200000000, mib)]


def test_clip_after_a_free_that_was_not_seen() -> None:
    """A context reset frees every allocation without a cuMemFree, and the driver hands the
    addresses out again: the new allocation's span replaces every stale one it overlaps, so the
    spans stay sorted and a clip never reaches outside what is live now."""
    lib().transit_alloc_reset()
    mib = 1 << 20
    base = 0x300000000
    insert(base, mib)  # freed by a reset, never seen
    insert(base + mib // 2, 4 * mib)  # the driver's next allocation overlaps it
    assert clip(base + 2 * mib, mib) == [(base + 2 * mib, mib)]
    assert clip(base, 8 * mib) == [(base + mib // 2, 4 * mib)]
    insert(base, 16 * mib)  # another reset: one allocation over all of it
    assert clip(base, 32 * mib) == [(base, 16 * mib)]
    # the stale keys are still matched by a free, which leaves the live span alone
    assert remove(base + mib // 2) == 4 * mib
    assert clip(base, 32 * mib) == [(base, 16 * mib)]
