"""Hybrid's look-ahead stream plan (libtransit/src/model/stream.c) on hand-made iterations whose
phases last 1 ms each, with link rates that make a 2 MiB chunk's transfer take a known time."""

from __future__ import annotations

import native_logic
import pytest

CHUNK = 2 * 1024 * 1024
MS = 1_000_000  # ns
NONE = 0xFFFF_FFFF
BASE = 0x7F00_0000_0000  # 2 MiB aligned


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return native_logic.load(tmp_path_factory.mktemp("stream"))


def plan(native, phases: list[list[int]], *, resident: set[int] = frozenset(), slots: int = 8,
         in_ms: float = 0.25, out_ms: float = 0.25, schedule: list | None = None
         ) -> tuple[list[tuple[int, int] | None], int]:
    """phases: the chunk numbers each 1 ms phase touches. Per chunk (by number, 0..max): (issue
    phase, back phase), or None when read in place; and the peak staged chunks. With `schedule`
    (a list), the mover's schedule of that plan is appended to it (see schedule_of)."""
    ffi, lib = native
    chunks = sorted({c for p in phases for c in p})
    offsets, touch = [0], []
    for p in phases:
        touch += [{"addr": BASE + c * CHUNK, "bytes": CHUNK} for c in sorted(p)]
        offsets.append(len(touch))
    keep = [ffi.new("uint64_t[]", offsets), ffi.new("transit_range[]", touch or 1),
            ffi.new("uint64_t[]", [MS] * len(phases)), ffi.new("uint64_t[]", [BASE + c * CHUNK for c in chunks]),
            ffi.new("uint8_t[]", [int(c in resident) for c in chunks]),
            ffi.new("uint32_t[]", [10 * q for q in range(len(phases))])]  # ten launches a phase
    inp = ffi.new("transit_stream_input *", {
        "nphases": len(phases), "touch_offsets": keep[0], "touch": keep[1], "compute_ns": keep[2],
        "nchunks": len(chunks), "chunk_addr": keep[3], "resident": keep[4], "staging_bytes": slots * CHUNK,
        "htod_bps": CHUNK / (in_ms * 1e-3), "dtoh_bps": CHUNK / (out_ms * 1e-3), "first_ordinal": keep[5]})
    issue, back = ffi.new("uint32_t[]", len(chunks)), ffi.new("uint32_t[]", len(chunks))
    peak = ffi.new("uint64_t *")
    assert lib.transit_stream_plan(inp, issue, back, peak) == 0
    if schedule is not None:
        schedule.append(schedule_of(native, inp, issue, back))
    by_chunk = {c: None if issue[i] == NONE else (issue[i], back[i]) for i, c in enumerate(chunks)}
    assert all((issue[i] == NONE) == (back[i] == NONE) for i in range(len(chunks)))
    return [by_chunk.get(c) for c in range(max(chunks) + 1)], peak[0] // CHUNK


def schedule_of(native, inp, issue, back) -> dict:
    """The mover's schedule as chunk-number ranges: per phase what comes in and goes back, the
    phase each waits for, and the bytes streamed."""
    ffi, lib = native
    out = ffi.new("transit_stream_schedule *")
    assert lib.transit_stream_schedule_make(inp, issue, back, out) == 0
    try:
        def ranges(offsets, v):
            return [[((v[k].addr - BASE) // CHUNK, (v[k].addr + v[k].bytes - BASE) // CHUNK - 1)
                     for k in range(offsets[q], offsets[q + 1])] for q in range(out.nphases)]
        return {"in": ranges(out.in_offsets, getattr(out, "in")), "back": ranges(out.back_offsets, out.back),
                "wait": [None if out.wait[q] == NONE else out.wait[q] for q in range(out.nphases)],
                "streamed": out.streamed_bytes // CHUNK}
    finally:
        lib.transit_stream_schedule_free(out)


def test_a_chunk_two_phases_use_comes_in_at_the_start_and_goes_back_after_its_last_use(native) -> None:
    assert plan(native, [[], [], [0], [0]]) == ([(0, 3)], 1)


def test_what_one_phase_uses_resident_chunks_and_phase_zero_are_read_in_place(native) -> None:
    # chunk 0: touched once; 1: resident; 2: first used by the first phase, nothing is before it
    assert plan(native, [[2], [0, 1, 2], [1]], resident={1}) == ([None, None, None], 0)


def test_a_transfer_longer_than_the_compute_before_the_use_is_not_streamed(native) -> None:
    assert plan(native, [[], [0], [0]], in_ms=1.5)[0] == [None]
    assert plan(native, [[], [0], [0]], in_ms=0.9)[0] == [(0, 2)]


def test_transfers_queue_on_one_side_stream(native) -> None:
    """Four chunks first used by phase 1, 0.4 ms each: the first two arrive within phase 0's 1 ms."""
    assert plan(native, [[], [0, 1, 2, 3], [0, 1, 2, 3]], in_ms=0.4)[0] == [(0, 2), (0, 2), None, None]


def test_a_staging_slot_is_held_until_the_chunk_is_back(native) -> None:
    """Chunk 0 is back at 3.25 ms, after phase 3 began: with one slot, chunk 1 (first used by
    phase 3) could be issued only at phase 4, too late. With two, both are staged at once."""
    phases = [[], [0], [0], [1], [1], [1]]
    assert plan(native, phases, slots=1) == ([(0, 2), None], 1)
    assert plan(native, phases, slots=2) == ([(0, 2), (0, 5)], 2)
    assert plan(native, phases, slots=0) == ([None, None], 0)


def test_the_plan_goes_by_first_use_then_address(native) -> None:
    """Chunks 0 and 1 both want the one slot from phase 0; 1 is first used earlier, so it gets it."""
    assert plan(native, [[], [1], [0, 1], [0]], in_ms=0.6, slots=1)[0] == [None, (0, 2)]


def test_the_schedule_brings_in_sends_back_and_waits_by_phase(native) -> None:
    """Two slots. Chunks 0 and 1 (adjacent: one range) come in at phase 0; 0 goes back when phase
    3 starts, after its last use, 1 when phase 5 does. Chunk 2 gets 0's slot (free at 3.25 ms) at
    phase 4 and, last used by the iteration's last phase, goes back at the next iteration's phase
    0. Each phase's kernels wait for the issue of the chunks it is the first to use."""
    out: list = []
    by_chunk, _ = plan(native, [[], [0], [0], [1], [1], [2], [2]], slots=2, schedule=out)
    assert by_chunk == [(0, 2), (0, 4), (4, 6)]
    assert out[0] == {"in": [[(0, 1)], [], [], [], [(2, 2)], [], []],
                      "back": [[(2, 2)], [], [], [(0, 0)], [], [(1, 1)], []],
                      "wait": [None, 0, None, 0, None, 4, None], "streamed": 3}


def test_a_chunk_phase_zero_brings_in_again_stays_across_iterations(native) -> None:
    """Last used by the last phase and issued at phase 0: sending it back at the next phase 0
    would race its own issue, so it stays (the issue is then a prefetch of resident data)."""
    out: list = []
    by_chunk, _ = plan(native, [[], [0], [0]], schedule=out)
    assert by_chunk == [(0, 2)]
    assert out[0]["back"] == [[], [], []] and out[0]["in"] == [[(0, 0)], [], []]


def test_a_plan_that_streams_nothing_schedules_nothing(native) -> None:
    out: list = []
    plan(native, [[0], [0, 1], [1]], resident={1}, schedule=out)
    assert out[0] == {"in": [[], [], []], "back": [[], [], []], "wait": [None, None, None], "streamed": 0}
