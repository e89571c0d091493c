"""Issue 55 E3: whether kernels on device-resident managed memory run slower for how the pages came
to the device, for remapping under them, or for their mapping's granularity; without TRANSIT.

One managed region of --gib GiB (default 24), SetAccessedBy(device) on all of it as advise and
hybrid set it, holds X (a memory-bound sum's operand) and a GEMM's A, B and C. Timed, each the
median of --repeats after one untimed run, with CUDA events:

- populated: the region memset on the GPU (every page first touched there), against
  cpu_touched_faulted_64k: written by the CPU, then brought to the GPU by kernel faults one
  element every 64 KiB first (the pieces limit mode's warm-up brings data back in), then the rest;
  in each, the sum over X, the GEMM, and a page-random gather (one element of each of
  GATHER_PAGES random 4 KiB pages of X: bound by address translation, where a mapping of small
  pages costs most);
- the GEMM alone against the same GEMM while a side stream sends 2 MiB chunks of X to the host and
  back, at the mover's rate (--mover-rate round trips a second) and back to back.

    python3 bench/uvm_speed_probe.py --out DIR/uvm-speed-probe.json [--gib 24] [--repeats 5]

The result (transit.uvm-speed-probe/1) is rewritten after every state: a probe stopped early keeps
what it measured (`complete: false`).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Self

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import GIB, host_resident_bytes, provenance, write_json
from transit.bench_link import CU_MEM_ADVISE_SET_ACCESSED_BY, CU_MEM_ATTACH_GLOBAL, _Driver
from transit.cli import OneLineParser

SCHEMA = "transit.uvm-speed-probe/1"
CHUNK = 2 << 20
SPARSE_STRIDE = 64 << 10  # bytes between the elements the first faulting kernel touches
PAGE = 4 << 10
GEMM_N = 8192
GEMMS_PER_REPEAT = 200  # about 0.35 s of GEMMs on an H100: some 25 round trips at the mover's rate
GATHER_PAGES = 1 << 20
MOVER_RATE = 70.0  # hybrid's mover at 64 x 8: about 0.7 GB each way in 2 MiB chunks per 5 s step
MARGIN_BYTES = 4 * GIB  # device memory left free beside the region (context, cuBLAS, the gather's index)


def bounded(kind, low, high, name: str):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            what = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{name} {text!r}: expected {what} from {low:g} to {high:g}")
        return value
    return parse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = OneLineParser(prog="uvm_speed_probe.py", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="the result file (JSON)")
    p.add_argument("--gib", type=bounded(int, 1, 1024, "--gib"), default=24, help="the region's size (default 24)")
    p.add_argument("--repeats", type=bounded(int, 1, 100, "--repeats"), default=5,
                   help="timed repeats per kernel and state, the median kept (default 5)")
    p.add_argument("--mover-rate", type=bounded(float, 1.0, 100000.0, "--mover-rate"), default=MOVER_RATE,
                   help=f"2 MiB chunk round trips a second of the mover-rate state (default {MOVER_RATE:g})")
    return p.parse_args(argv)


class ProbeDriver(_Driver):
    """transit bench link's driver calls, and those this probe needs besides; made on the thread
    whose current context (torch's) the other threads' calls take."""

    def __init__(self, device: int) -> None:
        super().__init__(device)
        self.context = self.ctypes.c_void_p()
        self._call("cuCtxGetCurrent", self.ctypes.byref(self.context))

    def make_current(self) -> None:
        self._call("cuCtxSetCurrent", self.context)

    def alloc_managed(self, size: int) -> int:
        ptr = self.ctypes.c_uint64()
        self._call("cuMemAllocManaged", self.ctypes.byref(ptr), self.ctypes.c_size_t(size), CU_MEM_ATTACH_GLOBAL)
        return ptr.value

    def memset_on_gpu(self, ptr: int, size: int) -> None:
        self._call("cuMemsetD8_v2", self.ctypes.c_uint64(ptr), self.ctypes.c_ubyte(1), self.ctypes.c_size_t(size))
        self._call("cuCtxSynchronize")

    def accessed_by_device(self, ptr: int, size: int) -> None:
        self._call("cuMemAdvise_v2", self.ctypes.c_uint64(ptr), self.ctypes.c_size_t(size),
                   CU_MEM_ADVISE_SET_ACCESSED_BY, self._where(host=False))


class ManagedView:
    """A bf16 tensor's view of managed memory at `ptr` (through __cuda_array_interface__)."""

    def __init__(self, ptr: int, shape: tuple[int, ...]) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<i2", "data": (ptr, False), "version": 2}


def timed(fn: Callable[[], object], repeats: int) -> dict:
    """Seconds of fn on the GPU: median, min and max of `repeats` after one untimed run."""
    fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times)}


def gemm_loop(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> Callable[[], None]:
    def gemms() -> None:
        for _ in range(GEMMS_PER_REPEAT):
            torch.mm(a, b, out=c)
    return gemms


class SideMover:
    """A thread that sends 2 MiB chunks of [base, base + size) to the host and back on a side
    stream, `rate` round trips a second (0: back to back), until stopped; counts them."""

    def __init__(self, drv: ProbeDriver, base: int, size: int, rate: float) -> None:
        self.drv, self.base, self.chunks, self.rate = drv, base, size // CHUNK, rate
        self.stream = torch.cuda.Stream()
        self.round_trips = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="side-mover", daemon=True)

    def _run(self) -> None:
        try:
            self.drv.make_current()  # a new thread has no current context for the driver's calls
            while not self._stop.is_set():
                at = self.base + (self.round_trips % self.chunks) * CHUNK
                self.drv.prefetch(at, CHUNK, host=True, stream=self.stream.cuda_stream)
                self.drv.prefetch(at, CHUNK, host=False, stream=self.stream.cuda_stream)
                self.stream.synchronize()
                self.round_trips += 1
                if self.rate:
                    self._stop.wait(1 / self.rate)
        except RuntimeError as exc:
            self.error = str(exc)

    def __enter__(self) -> Self:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()
        self.seconds = time.monotonic() - self._t0


def run(args: argparse.Namespace) -> int:
    if not torch.cuda.is_available():
        print("uvm_speed_probe.py: needs a CUDA GPU (torch sees none)", file=sys.stderr)
        return 1
    torch.zeros(1, device="cuda")  # the primary context, current on this thread, for the driver calls
    drv = ProbeDriver(torch.cuda.current_device())
    size = args.gib * GIB
    free = drv.free_bytes()
    if size + MARGIN_BYTES > free:
        print(f"uvm_speed_probe.py: --gib {args.gib} needs {(size + MARGIN_BYTES) / GIB:.1f} GiB of the "
              f"{free / GIB:.1f} GiB free on the GPU", file=sys.stderr)
        return 1
    gemm_bytes = GEMM_N * GEMM_N * 2
    x_bytes = size - 3 * gemm_bytes
    doc = {"schema": SCHEMA, **provenance(), "complete": False, "region_bytes": size, "x_bytes": x_bytes,
           "gemm_n": GEMM_N, "gemms_per_repeat": GEMMS_PER_REPEAT, "gather_pages": GATHER_PAGES,
           "repeats": args.repeats, "mover_rate_round_trips_per_s": args.mover_rate, "states": {}, "side_mover": {}}

    def save() -> None:
        write_json(args.out, doc)

    def views(base: int):
        x = torch.as_tensor(ManagedView(base, (x_bytes // 2,)), device="cuda").view(torch.bfloat16)
        a, b, c = (torch.as_tensor(ManagedView(base + x_bytes + k * gemm_bytes, (GEMM_N, GEMM_N)), device="cuda")
                   .view(torch.bfloat16) for k in range(3))
        return x, a, b, c

    pages = torch.randint(0, x_bytes // PAGE, (GATHER_PAGES,), device="cuda") * (PAGE // 2)

    def measure(name: str, base: int, how: str) -> None:
        x, a, b, c = views(base)
        a.normal_(), b.normal_()
        sum_t = timed(lambda: x.sum(), args.repeats)
        gemm_t = timed(gemm_loop(a, b, c), args.repeats)
        gather_t = timed(lambda: x[pages].sum(), args.repeats)
        doc["states"][name] = {
            "how": how, "host_resident_bytes": host_resident_bytes([(base, size)]),
            "sum": sum_t | {"gbps": x_bytes / sum_t["median_s"] / 1e9},
            "gemm": gemm_t | {"tflops": 2 * GEMM_N**3 * GEMMS_PER_REPEAT / gemm_t["median_s"] / 1e12},
            "gather": gather_t | {"pages_per_s": GATHER_PAGES / gather_t["median_s"]}}
        save()
        print(f"{name:26s} sum {doc['states'][name]['sum']['gbps']:7.1f} GB/s  gemm "
              f"{doc['states'][name]['gemm']['tflops']:6.1f} TFLOPS  gather {gather_t['median_s'] * 1e3:8.3f} ms  "
              f"host {doc['states'][name]['host_resident_bytes'] / GIB:.2f} GiB", flush=True)

    t0 = time.monotonic()
    base = drv.alloc_managed(size)
    drv.memset_on_gpu(base, size)
    drv.accessed_by_device(base, size)
    measure("populated", base, "memset on the GPU, then SetAccessedBy(device)")
    x, a, b, c = views(base)
    a.normal_(), b.normal_()
    side = base + CHUNK * 16  # chunks of X, away from the GEMM's operands
    side_size = min(x_bytes - CHUNK * 32, 4 * GIB)
    for name, rate in (("alone", None), ("mover_rate", args.mover_rate), ("back_to_back", 0.0)):
        if rate is None:
            doc["side_mover"][name] = timed(gemm_loop(a, b, c), args.repeats)
        else:
            with SideMover(drv, side, side_size, rate) as mover:
                result = timed(gemm_loop(a, b, c), args.repeats)
            doc["side_mover"][name] = result | {"round_trips": mover.round_trips, "seconds": round(mover.seconds, 3),
                                                "error": mover.error}
        doc["side_mover"][name]["tflops"] = 2 * GEMM_N**3 * GEMMS_PER_REPEAT / doc["side_mover"][name]["median_s"] / 1e12
        save()
        print(f"gemm, side stream {name:14s} {doc['side_mover'][name]['tflops']:6.1f} TFLOPS"
              + (f"  ({doc['side_mover'][name]['round_trips']} round trips)" if rate is not None else ""), flush=True)
    del x, a, b, c
    drv.free(base)

    base = drv.alloc_managed(size)
    ctypes.memset(base, 1, size)  # every page first touched by the CPU: resident on the host
    x, a, b, c = views(base)
    x.view(-1, SPARSE_STRIDE // 2)[:, 0].sum()
    for t in (a, b, c):
        t.view(-1, SPARSE_STRIDE // 2)[:, 0].sum()
    x.sum(), a.sum(), b.sum(), c.sum()
    torch.cuda.synchronize()
    del x, a, b, c
    drv.accessed_by_device(base, size)
    measure("cpu_touched_faulted_64k", base, "written by the CPU, faulted to the GPU one element every 64 KiB, "
            "then whole, then SetAccessedBy(device)")
    drv.free(base)
    doc["complete"] = True
    doc["elapsed_s"] = round(time.monotonic() - t0, 1)
    save()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except RuntimeError as exc:  # a driver call failed: its name and CUresult, one line
        print(f"uvm_speed_probe.py: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
