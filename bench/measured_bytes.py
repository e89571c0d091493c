"""Per-iteration measured bytes of the runs bench/record_profiles.sh made, as one JSON document:
for each run, the migrations CUPTI recorded (from the stats file's timeline), the step times
(train.py's result), and, for the runs that had the GPU alone (advise), the zero-copy bytes from
NVML's PCIe counters. `transit replay` is checked against these (tests/unit/test_replay.py).

    python3 bench/measured_bytes.py DIR [DIR ...] > tests/fixtures/profile/measured.json

DIR holds gbB-POLICY.transit/ (stats, profile), gbB-POLICY.json (train.py) and gbB-PART.pcie.csv.

NVML's PCIe counters (NVML_FI_DEV_PCIE_COUNT_{TX,RX}_BYTES) are 32-bit: they wrap every 4 GiB, so
a sample every 50 ms (under 2.6 GB at PCIe 5.0 speed) is unwrapped by adding 2^32 to a negative
step. They count PCIe payload plus protocol: a 1 GiB pinned host-to-device copy on the H200 moved
RX 1.0781 GiB and TX 0.0938 GiB (read completions' acknowledgements), a device-to-host copy TX
1.0938 GiB (bench/results/profiles-h200.json, `pcie_calibration`). Reads R and writes W in place
(zero-copy) follow from RX = 1.0781 (R + HtoD) and TX = 1.0938 (W + DtoH) + 0.0938 (R + HtoD).
"""

from __future__ import annotations

import bisect
import csv
import itertools
import json
import sys
from pathlib import Path

GIB = 1 << 30
# One 1 GiB pinned copy each way on the H200 (device run at 09d76da, nvidia-h200).
PCIE_CALIBRATION = {"h2d_rx_per_byte": 1157649668 / GIB, "h2d_tx_per_byte": 100756656 / GIB,
                    "d2h_tx_per_byte": (2**32 - 3120486228) / GIB}


def unwrapped(values: list[int]) -> list[int]:
    out = [values[0]]
    for a, b in itertools.pairwise(values):
        step = b - a
        out.append(out[-1] + (step + 2**32 if step < 0 else step))
    return out


class PcieSamples:
    """One run's NVML PCIe counter samples."""

    def __init__(self, path: Path) -> None:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
        self.t = [float(r["unix_s"]) for r in rows]
        self.tx = unwrapped([int(r["tx_bytes"]) for r in rows])
        self.rx = unwrapped([int(r["rx_bytes"]) for r in rows])

    def between(self, a: float, b: float) -> tuple[int, int]:
        """(TX, RX) bytes from unix time a to b (nearest samples)."""
        i, j = (min(bisect.bisect_left(self.t, x), len(self.t) - 1) for x in (a, b))
        return self.tx[j] - self.tx[i], self.rx[j] - self.rx[i]


def zero_copy(tx: int, rx: int, htod: int, dtoh: int) -> tuple[int, int]:
    """(reads, writes) in place over PCIe, given the migrations of the same span."""
    c = PCIE_CALIBRATION
    reads = rx / c["h2d_rx_per_byte"] - htod
    writes = (tx - c["h2d_tx_per_byte"] * (reads + htod)) / c["d2h_tx_per_byte"] - dtoh
    return max(0, round(reads)), max(0, round(writes))


def run_summary(root: Path, name: str, pcie: PcieSamples | None) -> dict:
    (stats_file,) = [p for p in (root / f"{name}.transit").glob("*.json")]
    stats = json.loads(stats_file.read_text())
    result = json.loads((root / f"{name}.json").read_text())
    timeline, start = stats["timeline"], stats["time"]["start_unix"]
    iterations = []
    for prev, e in itertools.pairwise(timeline):
        row = {"iteration": e["iteration"], "seconds": round(e["t"] - prev["t"], 3),
               "htod_bytes": e["htod_bytes"] - prev["htod_bytes"], "dtoh_bytes": e["dtoh_bytes"] - prev["dtoh_bytes"],
               "gpu_page_faults": e["gpu_page_faults"] - prev["gpu_page_faults"],
               "evicted_bytes": e["evicted_bytes"] - prev["evicted_bytes"]}
        if pcie:
            tx, rx = pcie.between(start + prev["t"], start + e["t"])
            reads, writes = zero_copy(tx, rx, row["htod_bytes"], row["dtoh_bytes"])
            row |= {"pcie_tx_bytes": tx, "pcie_rx_bytes": rx, "zero_copy_read_bytes": reads,
                    "zero_copy_write_bytes": writes}
        iterations.append(row)
    return {"policy": stats["config"]["policy"], "limit_bytes": stats["config"]["limit_bytes"],
            "global_batch": result["config"]["global_batch"], "local_batch": result["config"]["local_batch"],
            "host_resident_by_state": result["managed_host_resident_by_state"],
            "step_times_s": result["step_time"]["all_s"], "tflops_per_gpu": result["tflops_per_gpu"],
            "pcie_alone": pcie is not None, "profile": next(p.name for p in (root / f"{name}.transit").glob("*.gz")),
            "iterations": iterations}


def main(dirs: list[str]) -> int:
    runs = {}
    for d in map(Path, dirs):
        for transit_dir in sorted(d.glob("gb*-*.transit")):
            name = transit_dir.name.removesuffix(".transit")
            alone = d / f"{name}.pcie.csv"  # a part of its own: the run had the GPU alone
            runs[name] = run_summary(d, name, PcieSamples(alone) if alone.exists() else None)
    json.dump({"schema": "transit.measured-bytes/1", "pcie_calibration": PCIE_CALIBRATION, "runs": runs},
              sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
