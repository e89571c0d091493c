"""Samples NVML's cumulative PCIe byte counters of one GPU into a CSV until stopped (SIGTERM or
SIGINT): unix time, TX bytes (GPU to host), RX bytes (host to GPU). With the stats timeline's
iteration marks it gives each step's PCIe bytes, migrations and zero-copy accesses alike
(`python3 bench/pcie_sampler.py --gpu 0 --out pcie.csv --period 0.05`). NVML's counters are the
device's: a step's figure is the process's only when it runs alone on the GPU."""

from __future__ import annotations

import argparse
import signal
import sys
import time

import pynvml


def counters(handle) -> tuple[int, int] | None:
    """(TX, RX) bytes, or None when the device has no such counters."""
    fields = [pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES]
    values = pynvml.nvmlDeviceGetFieldValues(handle, fields)
    if any(v.nvmlReturn != pynvml.NVML_SUCCESS for v in values):
        return None
    return values[0].value.ullVal, values[1].value.ullVal


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--period", type=float, default=0.05, help="seconds between samples")
    args = ap.parse_args()
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(args.gpu)
    if counters(handle) is None:
        print("pcie_sampler: this GPU has no NVML PCIe byte counters", file=sys.stderr)
        return 1
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    with open(args.out, "w") as f:
        f.write("unix_s,tx_bytes,rx_bytes\n")
        while not stop:
            tx, rx = counters(handle)
            f.write(f"{time.time():.4f},{tx},{rx}\n")
            f.flush()
            time.sleep(args.period)
    return 0


if __name__ == "__main__":
    sys.exit(main())
