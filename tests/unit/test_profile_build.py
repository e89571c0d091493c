"""The profile's aggregation (libtransit/src/profile/profile_build.c) on hand-made launches: a 3-phase
training step with known reuse. Two micro-batches of forward and backward kernels touch the
parameters and the activations, the backward ones the gradients, and one optimizer kernel the
parameters, the gradients and the moments."""

from __future__ import annotations

import json
from pathlib import Path

import native_logic
import pytest

MiB = 1 << 20
CHUNK = 2 * MiB
BASE = 0x7F00_0000_0000  # 2 MiB aligned, as the driver hands out managed memory
PARAMS = (BASE, 16 * MiB)
GRADS = (BASE + 16 * MiB, 16 * MiB)
MOMENTS = (BASE + 32 * MiB, 32 * MiB)
ACTIVATIONS = (BASE + 64 * MiB, 8 * MiB)
KERNEL_NS = 1_000
HTOD, DTOH, FAULT, REMOTE = range(4)


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory):
    return native_logic.load(tmp_path_factory.mktemp("logic"))


def chunks(region: tuple[int, int]) -> list[int]:
    addr, size = region
    return list(range(addr // CHUNK, (addr + size) // CHUNK))


def step(micro_batches: int) -> list[tuple[str, list[int]]]:
    """(kernel name, the pointers its parameters hold), in launch order."""
    kernels: list[tuple[str, list[int]]] = []
    for _ in range(micro_batches):
        kernels += [("fwd", [PARAMS[0], ACTIVATIONS[0]])] * 4
        kernels += [("bwd", [PARAMS[0], GRADS[0], ACTIVATIONS[0]])] * 4
    kernels.append(("adam", [PARAMS[0], GRADS[0], MOMENTS[0]]))
    return kernels


def build(native, iterations: int = 2, timed: bool = True, micro_batches: int = 2,
          events: list[tuple[int, int, int, int]] = (), stray: int = 0, summary=None,
          kernels: list[tuple[str, list[int]]] | None = None,
          later: list[tuple[str, list[int]]] | None = None) -> dict:
    """later: the kernels of the iterations after the first, when they differ from `kernels`."""
    ffi, lib = native
    kernels = kernels or step(micro_batches)
    names = list(dict.fromkeys(name for name, _ in kernels + (later or [])))
    launches, refs = [], []
    t = 1_000_000
    for it in range(1, iterations + 1):
        for ordinal, (name, ptrs) in enumerate(kernels if it == 1 or later is None else later):
            start, end = (t, t + KERNEL_NS) if timed else (0, 0)
            t += KERNEL_NS + 100
            refs += [(p, len(launches)) for p in ptrs + ([stray] if stray else [])]
            launches.append((start, end, it, ordinal, names.index(name)))
    c_launches = ffi.new("profile_launch[]", [{"start_ns": s, "end_ns": e, "iteration": i, "ordinal": o, "name": n}
                                              for s, e, i, o, n in launches])
    c_refs = ffi.new("profile_ref[]", [{"addr": a, "launch": li} for a, li in refs])
    c_events = ffi.new("profile_event[]", [{"start_ns": s, "addr": a, "bytes": b, "kind": k,
                                            "chunks": 1 if k == FAULT else (a + b - 1) // CHUNK - a // CHUNK + 1}
                                           for s, a, b, k in events] or 1)
    regions = [PARAMS, GRADS, MOMENTS, ACTIVATIONS]
    c_allocs = ffi.new("profile_alloc[]", [{"addr": a, "bytes": b} for a, b in regions])
    c_names = [ffi.new("char[]", n.encode()) for n in names]
    c_name_array = ffi.new("char *[]", c_names)
    inp = ffi.new("profile_input *", {
        "launches": c_launches, "refs": c_refs, "events": c_events, "allocs": c_allocs, "names": c_name_array,
        "nlaunches": len(launches), "nrefs": len(refs), "nevents": len(events), "nallocs": len(regions),
        "nnames": len(names), "first_iteration": 1, "iterations": iterations})
    text = lib.transit_profile_build(inp, summary if summary is not None else ffi.NULL)
    assert text != ffi.NULL
    try:
        return json.loads("{" + ffi.string(text).decode() + "}")
    finally:
        lib.free(text)


def reuse_of(doc: dict, region: tuple[int, int]) -> set[int]:
    table = doc["chunks"]
    by_chunk = dict(zip(table["chunk"], table["reuse"]))
    return {by_chunk[c] for c in chunks(region)}


def test_every_launch_is_a_phase_when_there_are_few(native) -> None:
    doc = build(native)
    assert [it["iteration"] for it in doc["iterations"]] == [1, 2]
    last = doc["iterations"][-1]
    assert last["kernels"] == 17 and last["timed"] is True
    assert last["phases"]["first_ordinal"] == list(range(17))
    assert last["kernel_ns"] == 17 * KERNEL_NS
    assert last["kernel_name"] == [0] * 4 + [1] * 4 + [0] * 4 + [1] * 4 + [2]
    assert last["kernel_duration_ns"] == [KERNEL_NS] * 17


def test_reuse_counts_the_phases_that_touch_a_chunk(native) -> None:
    """Parameters: every kernel (17 phases); activations: the forward and backward kernels (16);
    gradients: the backward ones and the optimizer (9); moments: the optimizer alone (1)."""
    doc = build(native)
    assert reuse_of(doc, PARAMS) == {17}
    assert reuse_of(doc, ACTIVATIONS) == {16}
    assert reuse_of(doc, GRADS) == {9}
    assert reuse_of(doc, MOMENTS) == {1}


FUSED_ADAM = "void at::native::multi_tensor_apply_kernel<FusedOptimizerTensorListMetadata<4>>"


def test_a_tensor_cut_between_multi_tensor_launches_is_touched_once(native) -> None:
    """A fused optimizer's tensor list split over two launches: the moments' base pointer is in
    both, and the second is the tensor's tail, not a second use (reuse stays 1)."""
    split = step(2)[:-1] + [(FUSED_ADAM, [PARAMS[0], GRADS[0], MOMENTS[0]])] * 2
    doc = build(native, kernels=split)
    assert reuse_of(doc, MOMENTS) == {1}
    assert reuse_of(doc, GRADS) == {9}
    assert doc["scan"]["pointers_carried"] == 2 * 3  # two iterations, three pointers each


def test_other_kernels_back_to_back_read_their_data_again(native) -> None:
    """The same rule does not apply to other kernels: two launches of one optimizer kernel that
    is not multi-tensor are two uses."""
    twice = step(2)[:-1] + [("adam", [PARAMS[0], GRADS[0], MOMENTS[0]])] * 2
    doc = build(native, kernels=twice)
    assert reuse_of(doc, MOMENTS) == {2}
    assert doc["scan"]["pointers_carried"] == 0


def test_a_pointer_extends_to_its_allocation_end(native) -> None:
    """One pointer per allocation: each touch is the whole allocation, as chunk ranges."""
    doc = build(native)
    adam = doc["iterations"][-1]["phases"]["touch"][16]
    lo, hi = PARAMS[0] // CHUNK, (MOMENTS[0] + MOMENTS[1]) // CHUNK - 1
    assert adam == [lo, hi]  # params, grads and moments are adjacent: one merged range


def test_the_summary_holds_the_last_iterations_phases(native) -> None:
    """What hybrid's mover plans over (profile_data.h): the file's last iteration, as numbers."""
    ffi, lib = native
    summary = ffi.new("profile_summary *")
    doc = build(native, summary=summary)
    try:
        phases = doc["iterations"][-1]["phases"]
        n = summary.nphases
        assert n == len(phases["first_ordinal"]) == 17
        assert [summary.phase_ordinal[q] for q in range(n)] == phases["first_ordinal"]
        assert [summary.phase_kernel_ns[q] for q in range(n)] == phases["kernel_ns"]
        touch = [[r for k in range(summary.touch_offsets[q], summary.touch_offsets[q + 1])
                  for r in (summary.touch[k].addr // CHUNK, (summary.touch[k].addr + summary.touch[k].bytes) // CHUNK - 1)]
                 for q in range(n)]
        assert touch == phases["touch"]
        assert summary.n == len(doc["chunks"]["chunk"])
    finally:
        lib.transit_profile_summary_free(summary)


def test_pointers_outside_allocations_are_counted(native) -> None:
    doc = build(native, stray=BASE + 512 * MiB)
    assert doc["dropped"]["pointers_outside_allocations"] == 2 * 17


def test_untimed_iterations_split_by_launch_count(native) -> None:
    doc = build(native, timed=False, micro_batches=300)  # 2,401 launches, under the phase cap
    last = doc["iterations"][-1]
    assert last["timed"] is False and last["kernel_ns"] == 0
    assert len(last["phases"]["first_ordinal"]) == 2401


def test_phases_are_capped_and_share_kernel_time(native) -> None:
    doc = build(native, micro_batches=1200)  # 9,601 launches of equal time
    phases = doc["iterations"][-1]["phases"]
    assert len(phases["first_ordinal"]) == doc["phases_max"] == 4096
    per_phase = {k // KERNEL_NS for k in phases["kernel_ns"]}
    assert per_phase <= {2, 3}  # 9,601 / 4,096 = 2.3 launches each


def test_migrations_go_to_the_phase_they_began_in(native) -> None:
    """Kernel k of iteration 2 starts at 1e6 + (17 + k) x 1,100 ns."""
    t_bwd = 1_000_000 + (17 + 5) * 1_100 + 10  # iteration 2, ordinal 5
    moment = MOMENTS[0] + 4 * CHUNK
    events = [(t_bwd, GRADS[0], 64 << 10, HTOD), (t_bwd, moment, 1 * MiB, DTOH), (t_bwd, GRADS[0], 3, FAULT),
              (10, PARAMS[0], 4096, HTOD)]  # before the window: outside every iteration
    doc = build(native, events=events)
    it2 = doc["iterations"][1]
    assert it2["htod_bytes"] == 64 << 10 and it2["dtoh_bytes"] == 1 * MiB and it2["gpu_page_faults"] == 3
    assert it2["phases"]["htod_bytes"][5] == 64 << 10 and sum(it2["phases"]["htod_bytes"]) == 64 << 10
    assert doc["dropped"]["records_outside_iterations"] == 1
    table = doc["chunks"]
    row = table["chunk"].index(moment // CHUNK)
    assert table["dtoh_bytes"][row] == 1 * MiB and table["allocation"][row] == 2


def test_records_touch_only_what_no_pointer_names(native) -> None:
    """A record's GPU time can fall in a later launch's phase: a chunk the pointers name keeps
    their phases (the moments' HtoD during the backward adds no use); a chunk no pointer names
    (the activations here) is touched where its record began."""
    t_bwd = 1_000_000 + (17 + 5) * 1_100 + 10  # iteration 2, ordinal 5
    blind = [(name, [p for p in ptrs if p != ACTIVATIONS[0]]) for name, ptrs in step(2)]
    events = [(t_bwd, MOMENTS[0], 4 * CHUNK, HTOD), (t_bwd, ACTIVATIONS[0], CHUNK, FAULT)]
    doc = build(native, kernels=blind, events=events)
    assert reuse_of(doc, MOMENTS) == {1}
    table = doc["chunks"]
    assert table["reuse"][table["chunk"].index(ACTIVATIONS[0] // CHUNK)] == 1
    assert 5 in [q for q, t in enumerate(doc["iterations"][1]["phases"]["touch"])
                 if t and t[0] <= ACTIVATIONS[0] // CHUNK <= t[-1]]


def test_reuse_is_the_busiest_iterations(native) -> None:
    """The caching allocator can put another tensor at a chunk in the next iteration: activations
    every micro-batch used in iteration 1 sit, in iteration 2, in a chunk only the optimizer reads.
    The chunk keeps iteration 1's reuse, so that no placement sends it to the host."""
    moved = [(name, [p for p in ptrs if p != ACTIVATIONS[0]]) for name, ptrs in step(2)]
    moved[-1] = ("adam", moved[-1][1] + [ACTIVATIONS[0]])
    doc = build(native, later=moved)
    assert reuse_of(doc, ACTIVATIONS) == {16}
    assert reuse_of(doc, MOMENTS) == {1}
    table = doc["chunks"]
    row = table["chunk"].index(ACTIVATIONS[0] // CHUNK)
    assert table["first_phase"][row] == table["last_phase"][row] == 16  # the last iteration's phases


def column_of(doc: dict, column: str, region: tuple[int, int]) -> set[int]:
    table = doc["chunks"]
    by_chunk = dict(zip(table["chunk"], table[column]))
    return {by_chunk[c] for c in chunks(region)}


GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"  # cuBLAS's, as the H200 profiles name it


def test_launches_count_each_launch_once_and_gemms_apart(native) -> None:
    """Per chunk, the launches that touch it and those of them that re-read their operands: a
    GEMM's weights and activations; an elementwise kernel given one pointer twice reads once."""
    kernels = [(GEMM, [PARAMS[0], ACTIVATIONS[0]])] * 3 + [("copy", [PARAMS[0], PARAMS[0]])] * 2
    kernels += [("adam", [PARAMS[0], GRADS[0], MOMENTS[0]])]
    doc = build(native, kernels=kernels)
    assert column_of(doc, "launches", PARAMS) == {6} and column_of(doc, "rereading_launches", PARAMS) == {3}
    assert column_of(doc, "launches", ACTIVATIONS) == {3} and column_of(doc, "rereading_launches", ACTIVATIONS) == {3}
    assert column_of(doc, "launches", MOMENTS) == {1} and column_of(doc, "rereading_launches", MOMENTS) == {0}


def test_launches_are_counted_where_phases_hold_several(native) -> None:
    """9,601 launches in 4,096 phases: the parameters' reuse counts phases, their launches every
    one of the 9,601; the moments, one optimizer launch, are 1 either way."""
    doc = build(native, micro_batches=1200)
    assert reuse_of(doc, PARAMS) == {4096} and column_of(doc, "launches", PARAMS) == {9601}
    assert column_of(doc, "launches", MOMENTS) == {1}


def test_launches_are_the_busiest_iterations(native) -> None:
    moved = [(name, [p for p in ptrs if p != ACTIVATIONS[0]]) for name, ptrs in step(2)]
    doc = build(native, later=moved)
    assert column_of(doc, "launches", ACTIVATIONS) == {16}


def test_kernel_kinds(native) -> None:
    _, lib = native
    rereading = [GEMM, "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7",
                 "_ZN7cutlass6KernelINS_4gemm6kernel", "void flash_fwd_kernel<Flash_fwd_kernel_traits>"]
    once = ["_ZN2at6native29vectorized_elementwise_kernelILi8ENS0_15CUDAFunctor_addIN3c108BFloat16EEE", FUSED_ADAM,
            "_ZN2at6native13reduce_kernelILi512ELi1E"]
    assert [bool(lib.transit_kernel_rereads(n.encode())) for n in rereading] == [True] * 4
    assert [bool(lib.transit_kernel_rereads(n.encode())) for n in once] == [False] * 3


def test_file_documents_its_bounds(native) -> None:
    doc = build(native, iterations=1)
    assert doc["chunk_bytes"] == CHUNK
    assert set(doc["bounds"]) == {"launches", "pointers", "records", "names"}
    assert doc["window"] == {"first_iteration": 1, "iterations": 1}
    assert doc["allocations"][0] == [PARAMS[0], PARAMS[1]]


def test_docs_name_every_top_level_field(native) -> None:
    doc = build(native, iterations=1)
    text = (Path(__file__).resolve().parents[2] / "docs" / "profile.md").read_text()
    for key in doc:
        assert f"`{key}`" in text, key
