"""What the device's NVML "used" memory does with managed (UVM) pages, measured.

Limit mode's fairness rests on one physical question: when TRANSIT evicts managed pages to the
host, does the GPU memory they held go back to the device (NVML used drops), or does the UVM
driver keep it in its own pool? And does a host-preferred allocation that the GPU writes stay
on the host? Each step below does one thing on GIB_PER_STEP GiB of managed memory, synchronizes,
and reads NVML's device-used memory (minus the value before the allocation) and this process's
RSS. Sized far below the card's free memory (no oversubscription). Each step also records the
smaps Rss of the /dev/nvidia-uvm mappings and of the anonymous ones, and what
bench/common.py's uvm_host_resident_bytes() returns, to check against the RSS which of them
holds the managed pages on the host (the benchmarks' residency monitor trusts /dev/nvidia-uvm).

    python3 bench/uvm_probe.py --out probe.json [--gib 8]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
import pynvml
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    ANONYMOUS_MAPPING,
    UVM_DEVICE_PATH,
    managed_probe_args,
    provenance,
    read_own_smaps,
    smaps_rss_by_path,
    uvm_host_resident_bytes,
    write_json,
)
from cuda_driver import CU_MEM_ADVISE_SET_ACCESSED_BY, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, Driver

GIB = 1 << 30
SETTLE_S = 0.5  # NVML's reading lags the driver by a few ms; wait before reading


def main() -> int:
    args = managed_probe_args(__doc__)
    size = args.gib * GIB
    part = size // 4
    drv = Driver()
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    proc = psutil.Process()
    base_used = pynvml.nvmlDeviceGetMemoryInfo(handle).used
    base_rss = proc.memory_info().rss
    base_anon = smaps_rss_by_path(read_own_smaps()).get(ANONYMOUS_MAPPING, 0)
    steps: list[dict] = []

    def read(step: str) -> None:
        time.sleep(SETTLE_S)
        used = pynvml.nvmlDeviceGetMemoryInfo(handle).used - base_used
        rss = proc.memory_info().rss - base_rss
        smaps = read_own_smaps()
        by_path = smaps_rss_by_path(smaps)
        uvm = uvm_host_resident_bytes(smaps)
        anon = by_path.get(ANONYMOUS_MAPPING, 0) - base_anon
        steps.append({"step": step, "device_used_gib": round(used / GIB, 3), "host_rss_gib": round(rss / GIB, 3),
                      "smaps_rss_gib": {UVM_DEVICE_PATH: round(by_path.get(UVM_DEVICE_PATH, 0) / GIB, 3),
                                        f"{ANONYMOUS_MAPPING} over start": round(anon / GIB, 3)},
                      "uvm_host_resident_gib": None if uvm is None else round(uvm / GIB, 3)})
        uvm_text = "none" if uvm is None else f"{uvm / GIB:7.3f}"
        print(f"{step:58s} device used {used / GIB:7.3f} GiB   host RSS {rss / GIB:7.3f} GiB   "
              f"smaps uvm {uvm_text} anon {anon / GIB:7.3f} GiB", flush=True)

    a = drv.alloc_managed(size)
    read(f"A1 allocate {args.gib} GiB managed")
    drv.memset_on_gpu(a, size)
    read("A2 GPU writes all of it (first touch)")
    drv.prefetch(a, size, to_host=True)
    read("A3 prefetch all to the host (what an eviction does)")
    drv.prefetch(a, part, to_host=False)
    read("A4 prefetch a quarter back to the device")
    drv.memset_on_gpu(a, size)
    read("A5 GPU writes all of it again (faults migrate it back)")
    drv.free(a)
    read("A6 free")

    b = drv.alloc_managed(size)
    drv.advise(b, size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, to_host=True)
    drv.advise(b, size, CU_MEM_ADVISE_SET_ACCESSED_BY, to_host=False)
    drv.memset_on_gpu(b, size)
    read("B1 host-preferred + accessed-by GPU, GPU writes all")
    drv.prefetch(b, part, to_host=False)
    read("B2 prefetch a quarter to the device")
    drv.memset_on_gpu(b, size)
    read("B3 GPU writes all again")
    drv.prefetch(b, part, to_host=True)
    read("B4 prefetch that quarter back to the host")
    drv.free(b)
    read("B5 free")

    c = drv.alloc_managed(size)
    drv.memset_on_gpu(c, size)
    read("C1 new allocation, GPU writes all (does the pool refill?)")
    drv.free(c)
    read("C2 free")

    write_json(args.out, {"schema": "transit.uvm-probe/1", **provenance(), "gib": args.gib,
                          "gpu": pynvml.nvmlDeviceGetName(handle), "driver": pynvml.nvmlSystemGetDriverVersion(),
                          "steps": steps})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
