"""What an eviction of partly resident managed memory costs, whole chunks against resident pieces.

Limit mode evicts 2 MiB chunks that its estimate counts resident, while the GPU's faults bring in
only parts of them (64 KiB blocks, plus what the driver takes along). This measures, on GIB GiB
of managed memory, for each density (the share of every 2 MiB chunk that the GPU writes, as
64 KiB blocks spread over the chunk):
  - how much the device then holds, by /proc/self/pagemap (a page is on the host while mapped
    on the CPU, bench/results/uvm-probe-h200.json);
  - the time to move it back to the host three ways: one prefetch call for the whole range, one
    per 2 MiB chunk, and one per run of pages the host lacks (what pagemap names), each as the
    time the calls took on the CPU and the time until the stream ran them.
Sized far below the card's free memory (no oversubscription).

    python3 bench/evict_cost.py --out evict-cost.json [--gib 8]
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PAGEMAP_PRESENT_BIT, managed_probe_args, provenance, write_json
from cuda_driver import CU_MEM_LOCATION_TYPE_HOST, CUmemLocation, Driver

GIB = 1 << 30
CHUNK = 2 << 20
BLOCK = 64 << 10  # the GPU's fault granularity
DENSITIES = (1 / 32, 1 / 8, 1 / 2, 1)


def absent_runs(addr: int, size: int) -> list[tuple[int, int]]:
    """(address, bytes) runs of [addr, addr+size) whose pages are not mapped on the CPU."""
    page = resource.getpagesize()
    with open("/proc/self/pagemap", "rb") as pagemap:
        entries = np.frombuffer(os.pread(pagemap.fileno(), size // page * 8, addr // page * 8), dtype="<u8")
    absent = (entries & np.uint64(PAGEMAP_PRESENT_BIT)) == 0
    edges = np.flatnonzero(np.diff(np.concatenate(([False], absent, [False])).astype(np.int8)))
    return [(addr + int(a) * page, int(b - a) * page) for a, b in zip(edges[::2], edges[1::2])]


def touch_blocks(drv: Driver, addr: int, size: int, density: float) -> None:
    """The GPU writes one 64 KiB block in every 1/density of them (a 2D memset: one call)."""
    pitch = int(BLOCK / density)
    drv.call("cuMemsetD2D8_v2", ctypes.c_uint64(addr), ctypes.c_size_t(pitch), ctypes.c_ubyte(2),
             ctypes.c_size_t(BLOCK), ctypes.c_size_t(size // pitch))
    drv.sync()


def timed_eviction(drv: Driver, ranges: list[tuple[int, int]]) -> dict:
    loc = CUmemLocation(CU_MEM_LOCATION_TYPE_HOST, 0)
    t0 = time.perf_counter()
    for addr, size in ranges:
        drv.call("cuMemPrefetchAsync_v2", ctypes.c_uint64(addr), ctypes.c_size_t(size), loc, 0, None)
    t1 = time.perf_counter()
    drv.sync()
    t2 = time.perf_counter()
    return {"calls": len(ranges), "issue_s": round(t1 - t0, 4), "total_s": round(t2 - t0, 4)}


def parallel_eviction(drv: Driver, addr: int, size: int, threads: int) -> dict:
    """Evicts [addr, addr+size) in `threads` equal slices, one thread and stream each."""
    ctx = ctypes.c_void_p()
    drv.call("cuCtxGetCurrent", ctypes.byref(ctx))
    loc = CUmemLocation(CU_MEM_LOCATION_TYPE_HOST, 0)
    part = size // threads // CHUNK * CHUNK
    spent: list[float] = [0.0] * threads

    def evict_slice(i: int) -> None:
        drv.call("cuCtxSetCurrent", ctx)
        stream = ctypes.c_void_p()
        drv.call("cuStreamCreate", ctypes.byref(stream), 1)  # CU_STREAM_NON_BLOCKING
        t0 = time.perf_counter()
        drv.call("cuMemPrefetchAsync_v2", ctypes.c_uint64(addr + i * part), ctypes.c_size_t(part), loc, 0,
                 stream)
        drv.call("cuStreamSynchronize", stream)
        spent[i] = time.perf_counter() - t0
        drv.call("cuStreamDestroy_v2", stream)

    workers = [threading.Thread(target=evict_slice, args=(i,)) for i in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    total = time.perf_counter() - t0
    return {"threads": threads, "bytes": part * threads, "total_s": round(total, 4),
            "slowest_thread_s": round(max(spent), 4), "gib_per_s": round(part * threads / GIB / total, 2)}


def parallel_rows(drv: Driver, addr: int, size: int, counts: list[int]) -> list[dict]:
    """Whole-range evictions by 1..N threads, alone and while the GPU faults in another range."""
    other = drv.alloc_managed(size)
    gpu_stream = ctypes.c_void_p()
    drv.call("cuStreamCreate", ctypes.byref(gpu_stream), 1)
    rows = []
    for contended in (False, True):
        for threads in counts:
            drv.memset_on_gpu(addr, size)
            drv.prefetch(other, size, to_host=True)
            if contended:  # queued, not waited for: the GPU faults `other` in while the threads evict
                drv.call("cuMemsetD8Async", ctypes.c_uint64(other), ctypes.c_ubyte(3), ctypes.c_size_t(size),
                         gpu_stream)
            row = {"contended": contended, **parallel_eviction(drv, addr, size, threads)}
            drv.sync()
            row["left_on_device_bytes"] = sum(b for _, b in absent_runs(addr, size))
            rows.append(row)
            label = "contended" if contended else "alone"
            print(f"{label:9s} {threads} threads: {row['gib_per_s']:6.2f} GiB/s "
                  f"({row['total_s']:.3f} s, slowest thread {row['slowest_thread_s']:.3f} s), "
                  f"left {row['left_on_device_bytes'] / GIB:.3f} GiB", flush=True)
    drv.call("cuStreamDestroy_v2", gpu_stream)
    drv.free(other)
    return rows


def main() -> int:
    args = managed_probe_args(__doc__)
    size = args.gib * GIB
    drv = Driver()
    addr = drv.alloc_managed(size)
    drv.memset_on_gpu(addr, size)  # populated, then all on the host before each form
    forms = {"whole range": lambda runs: [(addr, size)],
             "per 2 MiB chunk": lambda runs: [(a, CHUNK) for a in range(addr, addr + size, CHUNK)],
             "per absent run": lambda runs: runs}
    rows = []
    for density in DENSITIES:
        for form, ranges_for in forms.items():
            drv.prefetch(addr, size, to_host=True)
            touch_blocks(drv, addr, size, density)
            runs = absent_runs(addr, size)
            on_device = sum(b for _, b in runs)
            row = {"density": density, "form": form, "touched_bytes": int(size * density),
                   "on_device_bytes": on_device, "absent_runs": len(runs), **timed_eviction(drv, ranges_for(runs))}
            row["left_on_device_bytes"] = sum(b for _, b in absent_runs(addr, size))
            row["device_gib_per_s"] = round(on_device / GIB / row["total_s"], 2) if row["total_s"] else None
            rows.append(row)
            print(f"density {density:6.4f}  {form:16s} device {on_device / GIB:6.3f} GiB in {len(runs):6d} runs  "
                  f"{row['calls']:6d} calls  issue {row['issue_s']:7.4f} s  total {row['total_s']:7.4f} s  "
                  f"left {row['left_on_device_bytes'] / GIB:6.3f} GiB", flush=True)
    parallel = parallel_rows(drv, addr, size, args.threads) if args.threads else []
    drv.free(addr)
    write_json(args.out, {"schema": "transit.evict-cost/1", **provenance(), "gib": args.gib, "rows": rows,
                          "parallel_rows": parallel})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
