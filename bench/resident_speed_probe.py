"""Whether kernels run slower on device-resident managed memory depending on how it got there.

Hybrid at global batch 64 ran every kernel 3-4x slower than the all-resident control, those that
touch only chunks its placement keeps on the device included, with no migrations or faults in
the steady iteration (docs/design-notes.md, "Hybrid at micro-batch 8"). This probe times a
memory-bound kernel (a sum over X) and a GEMM (A @ B) on managed memory, each with every page on
the device, after each of these histories:

- first_touch: populated by the GPU (a memset), as in a run that never evicts;
- faulted_back: sent to the host, then brought back by the kernels' own page faults;
- faulted_back_sparse: the same, but first touched at one element every 64 KiB, so that the faults
  bring it back in pieces, as limit mode's warm-up does (most of its HtoD migrations under 64 KiB);
- faulted_then_prefetched: faulted_back_sparse, then prefetched to the device (already there), as
  hybrid's placement does;
- round_trip: sent to the host and prefetched back in bulk;
- accessed_by_half_host: SetAccessedBy(device), all prefetched in, then every other 2 MiB chunk
  of X sent to the host; the sum reads only the chunks left on the device (as "even_s" in every
  state), as hybrid's placement leaves an allocation.

    python3 bench/resident_speed_probe.py --out probe.json [--gib 4]

Sized far below the card's free memory (no oversubscription); runs without TRANSIT.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import provenance, write_json
from cuda_driver import CU_MEM_ADVISE_SET_ACCESSED_BY, Driver

CHUNK = 2 << 20
SPARSE_STRIDE = 64 << 10  # bytes between the elements a sparse touch reads
GEMM_N = 8192
REPEATS = 5


class ManagedView:
    """A torch tensor over managed memory at `ptr` (through __cuda_array_interface__)."""

    def __init__(self, ptr: int, shape: tuple[int, ...]) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f2", "data": (ptr, False), "version": 2}


def as_tensor(ptr: int, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.as_tensor(ManagedView(ptr, shape), device="cuda").view(torch.bfloat16)


def timed(fn) -> float:
    """Median seconds of REPEATS runs of fn on the GPU, after one untimed run."""
    fn()
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gib", type=int, default=4, help="size of X, the sum's operand (default 4)")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    drv = Driver()
    x_bytes = args.gib << 30
    gemm_bytes = 3 * GEMM_N * GEMM_N * 2
    size = x_bytes + gemm_bytes
    base = drv.alloc_managed(size)
    x = as_tensor(base, (x_bytes // 2,))
    even = x.view(-1, CHUNK // 2)[0::2]
    a, b, c = (as_tensor(base + x_bytes + k * GEMM_N * GEMM_N * 2, (GEMM_N, GEMM_N)) for k in range(3))

    def sparse_touch() -> None:
        """One element every SPARSE_STRIDE bytes of X, A and B."""
        for t in (x, a, b):
            t.view(-1, SPARSE_STRIDE // 2)[:, 0].sum()

    def measure() -> dict[str, float]:
        return {"sum_s": timed(lambda: x.sum()), "even_s": timed(lambda: even.sum()),
                "gemm_s": timed(lambda: torch.matmul(a, b, out=c))}

    def bring_back_by_faults() -> None:
        x.sum(), torch.matmul(a, b, out=c)
        torch.cuda.synchronize()

    states: dict[str, dict[str, float]] = {}
    drv.memset_on_gpu(base, size)
    a.normal_(), b.normal_()
    states["first_touch"] = measure()
    drv.prefetch(base, size, to_host=True)
    bring_back_by_faults()
    states["faulted_back"] = measure()
    drv.prefetch(base, size, to_host=True)
    sparse_touch()
    bring_back_by_faults()
    states["faulted_back_sparse"] = measure()
    drv.prefetch(base, size, to_host=False)
    states["faulted_then_prefetched"] = measure()
    drv.prefetch(base, size, to_host=True)
    drv.prefetch(base, size, to_host=False)
    states["round_trip"] = measure()
    drv.advise(base, size, CU_MEM_ADVISE_SET_ACCESSED_BY, to_host=False)
    for at in range(base + CHUNK, base + x_bytes, 2 * CHUNK):
        drv.prefetch(at, CHUNK, to_host=True)
    states["accessed_by_half_host"] = {"even_s": timed(lambda: even.sum())}
    drv.free(base)
    doc = {"schema": "transit.resident-speed-probe/1", **provenance(), "x_bytes": x_bytes, "gemm_n": GEMM_N,
           "repeats": REPEATS, "states": states}
    write_json(Path(args.out), doc)
    for name, t in states.items():
        print(f"{name:26s} " + "  ".join(f"{k} {v * 1e3:8.2f} ms" for k, v in t.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
