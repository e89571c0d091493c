"""What every benchmark runner shares: batch settings, the memory cap, NVML polling, timing
statistics and the result file with its provenance (command, commit, device)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import resource
import shlex
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from transit import _native
from transit.bench_link import PcieCounterReader, pcie_counter_delta
from transit.errors import UsageError

RESULT_SCHEMA = "transit.bench/1"
REPO_ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30
# Device memory a process uses outside PyTorch's caching allocator and that grows after start:
# NCCL buffers (cuMem, outside the allocator) and lazily loaded kernel modules. Kept out of the
# allocator's budget so that the NVML peak of a capped run stays at or under the cap.
NON_ALLOCATOR_MARGIN_BYTES = 3 * GIB // 2
NVML_POLL_INTERVAL_S = 0.02
# The device-memory timeline keeps a sample when the reading moved this much since the last kept
# one, or this long passed: enough to see when a run first crosses the cap, small enough to commit.
TIMELINE_STEP_BYTES = 256 << 20
TIMELINE_MAX_GAP_S = 1.0
# Reading /proc/self/smaps walks every mapping of the process: poll it ten times less often than NVML.
RESIDENCY_POLL_INTERVAL_S = 0.2
# Managed (UVM) allocations are mappings of this device file; their Rss is the managed data on the host.
UVM_DEVICE_PATH = "/dev/nvidia-uvm"
ANONYMOUS_MAPPING = "[anonymous]"  # the key smaps_rss_by_path gives mappings without a pathname
# A mapping's header (address range, perms, offset, dev, inode, optional pathname) or its Rss line.
SMAPS_HEADER_OR_RSS = re.compile(r"^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \d+[ \t]*(.*)$|^Rss:\s+(\d+) kB$", re.MULTILINE)
# The Rss line of a mapping whose pathname is UVM_DEVICE_PATH (the lines between hold no "Rss:").
SMAPS_UVM_RSS = re.compile(" " + re.escape(UVM_DEVICE_PATH) + r"\n(?:(?!Rss:).*\n)*?Rss:\s+(\d+) kB")
# The benchmark protocol's settle rule (bench/README.md): a run has settled at the first
# step s, from its first eligible step on, where SETTLE_WINDOW consecutive step times (s, s+1, ...)
# all lie within SETTLE_TOLERANCE of their median; its TIMED_STEPS timed steps start at s. A run
# whose window cannot start by step max_start is "not settled": its timed steps start at max_start.
SETTLE_WINDOW = 3
SETTLE_TOLERANCE = 0.05
TIMED_STEPS = 8


def add_protocol_args(parser: argparse.ArgumentParser, default_steps: int) -> None:
    """--steps, the settle rule (--settle-from, --settle-by) and --cpu-cores-per-rank, for the runners."""
    parser.add_argument("--steps", type=int, help=f"optimizer steps, warm-up included (default {default_steps}; "
                        "with --settle-by: the rule's maximum)")
    parser.add_argument("--settle-by", type=int, metavar="STEP",
                        help="the protocol's settle rule (SettleRule): stop once settled and timed, or once not "
                             "settled by STEP and timed from it")
    parser.add_argument("--settle-from", type=int, default=1, metavar="STEP",
                        help="the first step a settled window may start at (default 1)")
    parser.add_argument("--timed-steps", type=int, default=TIMED_STEPS, metavar="N",
                        help=f"steps timed after the settle rule (default {TIMED_STEPS})")
    parser.add_argument("--cpu-cores-per-rank", type=int, metavar="N",
                        help="pin each rank to N cores of its own (default: all cores, shared)")
    parser.set_defaults(default_steps=default_steps)


def protocol_settings(args: argparse.Namespace) -> SettleRule | None:
    """The settle rule of add_protocol_args' arguments, with args.steps resolved."""
    if args.settle_by is None:
        args.steps = args.steps or args.default_steps
        return None
    if args.steps is not None:
        raise SystemExit("give --steps or --settle-by, not both: the settle rule decides the steps")
    rule = SettleRule(first=args.settle_from, max_start=args.settle_by, timed=args.timed_steps)
    args.steps = rule.max_steps
    return rule


def parse_size(text: str) -> int:
    """Bytes of a size such as 24G, by TRANSIT's one size grammar (TRANSIT_MEM_LIMIT's); as an
    argparse type, a bad size is one line naming it."""
    try:
        return _native.parse_size(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@dataclass(frozen=True)
class SettleRule:
    """When a run's step times have settled, and which steps are timed (the protocol's rule)."""

    first: int = 1  # step 0 allocates and autotunes; TRANSIT's first step after its profile phase
    max_start: int = 12  # the last step a settled window may start at
    window: int = SETTLE_WINDOW
    tolerance: float = SETTLE_TOLERANCE
    timed: int = TIMED_STEPS

    @property
    def max_steps(self) -> int:
        return self.max_start + max(self.timed, self.window)

    def settled_at(self, times: list[float]) -> int | None:
        for start in range(self.first, min(self.max_start, len(times) - self.window) + 1):
            window = times[start:start + self.window]
            middle = statistics.median(window)
            if all(abs(t - middle) <= self.tolerance * middle for t in window):
                return start
        return None

    def timed_from(self, times: list[float]) -> tuple[int, bool] | None:
        """(first timed step, settled) once `times` holds all the timed steps, else None."""
        start = self.settled_at(times)
        if start is not None:
            return (start, True) if len(times) >= start + self.timed else None
        return (self.max_start, False) if len(times) >= self.max_steps else None

    def describe(self) -> str:
        return (f"settled at the first step s >= {self.first} (s <= {self.max_start}) where steps s..s+"
                f"{self.window - 1} are all within {self.tolerance:.0%} of their median; {self.timed} timed "
                f"steps from s (not settled: from step {self.max_start})")

    def as_dict(self) -> dict:
        return {"first": self.first, "max_start": self.max_start, "window": self.window,
                "tolerance": self.tolerance, "timed": self.timed, "rule": self.describe()}


@dataclass(frozen=True)
class BatchSettings:
    global_batch: int
    local_batch: int
    grad_accum: int
    source: str  # "environment" when any TRANSIT_* batch variable was used, else "arguments"


def resolve_batch(world: int, global_batch: int | None, local_batch: int | None,
                  grad_accum: int | None) -> BatchSettings:
    """Global batch = local batch x accumulation x world size; the launcher's environment wins.

    Any two of the three determine the third; all three must agree.
    """
    env = {name: os.environ.get(f"TRANSIT_{name}") for name in ("GLOBAL_BATCH", "LOCAL_BATCH", "GRAD_ACCUM")}
    source = "environment" if any(env.values()) else "arguments"
    g = int(env["GLOBAL_BATCH"]) if env["GLOBAL_BATCH"] else global_batch
    b = int(env["LOCAL_BATCH"]) if env["LOCAL_BATCH"] else local_batch
    a = int(env["GRAD_ACCUM"]) if env["GRAD_ACCUM"] else grad_accum
    if b is None and g is not None and a is not None:
        b = g // (a * world)
    if a is None and g is not None and b is not None:
        a = g // (b * world)
    if a is None:
        a = 1
    if g is None and b is not None:
        g = b * a * world
    if g is None or b is None or g != b * a * world or b < 1:
        raise SystemExit(f"batch settings disagree: global {g} != local {b} x accumulation {a} x world {world}")
    return BatchSettings(global_batch=g, local_batch=b, grad_accum=a, source=source)


def smaps_rss_by_path(smaps_text: str) -> dict[str, int]:
    """Rss in bytes summed per mapping pathname of a /proc/<pid>/smaps text.

    Each mapping starts with a header line `start-end perms offset dev inode [pathname]`, followed
    by `Key: value kB` lines; mappings without a pathname are summed under ANONYMOUS_MAPPING.
    """
    sums: dict[str, int] = {}
    path = None
    for header_path, rss_kb in SMAPS_HEADER_OR_RSS.findall(smaps_text):
        if rss_kb:
            if path is not None:
                sums[path] += int(rss_kb) * 1024
        else:
            path = header_path.strip() or ANONYMOUS_MAPPING
            sums.setdefault(path, 0)
    return sums


def uvm_host_resident_bytes(smaps_text: str) -> int | None:
    """Managed data resident in host memory: the Rss of the /dev/nvidia-uvm mappings; None without one.

    smaps_rss_by_path(text).get(UVM_DEVICE_PATH), found by the pathname alone: the monitor thread
    reads a training process's smaps five times a second while holding the GIL, and this search
    skips the other mappings about ten times faster than parsing them.
    """
    rss_kb = SMAPS_UVM_RSS.findall(smaps_text)
    return sum(int(kb) for kb in rss_kb) * 1024 if rss_kb else None


PAGEMAP_PRESENT_BIT = 1 << 63  # /proc/PID/pagemap: one little-endian u64 per page


def host_resident_bytes(ranges: list[tuple[int, int]]) -> int:
    """Bytes of the (address, size) ranges whose pages are in this process's CPU page tables.

    For managed memory that is where the data lives: the UVM driver maps a page on the CPU while it
    is resident in host memory and unmaps it when the page migrates to the device (the same fact
    the smaps Rss of /dev/nvidia-uvm sums, bench/results/uvm-probe-h200.json), but per address.
    """
    import numpy as np

    page = resource.getpagesize()
    total = 0
    with open("/proc/self/pagemap", "rb") as pagemap:
        for address, size in ranges:
            first, last = address // page, (address + size - 1) // page
            entries = np.frombuffer(os.pread(pagemap.fileno(), (last - first + 1) * 8, first * 8), dtype="<u8")
            total += int(np.count_nonzero(entries & np.uint64(PAGEMAP_PRESENT_BIT))) * page
    return total


def read_own_smaps() -> str:
    with open("/proc/self/smaps") as f:
        return f.read()


def under_transit() -> bool:
    return "libtransit" in os.environ.get("LD_PRELOAD", "")


def nvml_handle(pynvml, device_index: int):
    """The NVML handle of torch's device `device_index`, mapped to a physical GPU by
    CUDA_VISIBLE_DEVICES (NVML ignores it); usable before CUDA is initialised."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        entry = visible.split(",")[device_index].strip()
        if entry.startswith("GPU-"):
            return pynvml.nvmlDeviceGetHandleByUUID(entry)
        return pynvml.nvmlDeviceGetHandleByIndex(int(entry))
    return pynvml.nvmlDeviceGetHandleByIndex(device_index)


# NVML's PCIe byte counters wrap at 32 bits (transit/bench_link.py, PCIE_COUNTER_WRAP; read once a
# step their differences went negative on an H100): a thread reads them this often, so that less
# than 2^32 bytes pass between two readings (64 GB/s, PCIe 5 x16, moves 1.6 GB in 25 ms).
PCIE_SAMPLE_INTERVAL_S = 0.025
# NVML's clock event reasons (nvml.h, nvmlClocksEventReason*) by bit; GPU idle (0x1) and the
# application clock setting (0x2) slow nothing down.
CLOCK_EVENT_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
                       0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal",
                       0x80: "hw_power_brake", 0x100: "display_clock_setting"}
SLOWING_REASONS_MASK = 0x1FC  # every bit but gpu_idle and applications_clocks_setting


def clock_event_names(mask: int) -> list[str]:
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit] + (
        [f"0x{mask & ~sum(CLOCK_EVENT_REASONS):x}"] if mask & ~sum(CLOCK_EVENT_REASONS) else [])


class PcieCounters:
    """The GPU's PCIe bytes since start, TX (GPU to host) and RX (host to GPU): NVML's counters read
    every PCIE_SAMPLE_INTERVAL_S in a thread, their wraps undone. `error` says why there are none."""

    def __init__(self, pynvml, handle) -> None:
        self._reader = PcieCounterReader(pynvml, handle)
        self.error: str | None = None
        self.samples = 0
        self._lock = threading.Lock()
        self._total = [0, 0]
        self._last = self._read()
        self._stop = threading.Event()
        if self._last is not None:
            threading.Thread(target=self._poll, name="pcie-counters", daemon=True).start()

    def _read(self) -> list[int] | None:
        now = self._reader.read()
        self.error = now.get("error")
        return None if self.error else [now["tx"], now["rx"]]

    def sample(self) -> None:
        with self._lock:  # read and summed under one lock: a reading older than the last is no wrap
            now = self._read()
            if now is None:
                self._stop.set()
                return
            for i in (0, 1):
                self._total[i] += pcie_counter_delta(self._last[i], now[i])
            self._last = now
            self.samples += 1

    def _poll(self) -> None:
        while not self._stop.wait(PCIE_SAMPLE_INTERVAL_S):
            self.sample()

    def totals(self) -> tuple[int, int] | None:
        """(TX, RX) bytes since start, read now; None once the counters failed."""
        if self.error:
            return None
        self.sample()
        with self._lock:
            return self._total[0], self._total[1]

    def stop(self) -> None:
        self._stop.set()


class GpuClocks:
    """The SM and memory clocks, the power draw, NVML's clock event reasons (power cap, thermal,
    ...) and the GPU's PCIe bytes (PcieCounters), read once per step after its synchronisation:
    step times of one configuration move between plateaus for seconds, and these say whether the
    GPU's clock or power moved with them; the counters give each step's PCIe bytes (`transit bench
    link` checks them against the bytes of known transfers)."""

    def __init__(self, device_index: int) -> None:
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        self.handle = nvml_handle(pynvml, device_index)
        # "Throttle" reasons were renamed "clocks event" reasons in NVML 12.5; the device's may be either.
        self._reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        self.sm_mhz: list[int] = []
        self.mem_mhz: list[int] = []
        self.power_w: list[float | None] = []
        self.event_reasons: list[int] = []
        self.pcie = PcieCounters(pynvml, self.handle)
        self.pcie_tx: list[int] = []  # cumulative, before step 0 and at the end of every step
        self.pcie_rx: list[int] = []
        # (TX, RX) at marked points of each step (mark()): "start", "optimizer"
        self.pcie_marks: dict[str, list[tuple[int, int]]] = {}
        self._read_pcie()

    def mark(self, point: str) -> None:
        """The PCIe counters now, at `point` of the step (the caller synchronized first where the
        point is inside the step): at its start (after anything run between steps) and before its
        optimizer, they split its bytes into forward and backward and the optimizer step."""
        totals = self.pcie.totals()
        if totals is not None:
            self.pcie_marks.setdefault(point, []).append(totals)

    def _read_pcie(self) -> None:
        totals = self.pcie.totals()
        if totals is not None:
            self.pcie_tx.append(totals[0])
            self.pcie_rx.append(totals[1])

    def _power_w(self) -> float | None:
        try:
            return self._nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000
        except self._nvml.NVMLError:  # a GPU without a power reading
            return None

    def read(self) -> None:
        self.sm_mhz.append(self._nvml.nvmlDeviceGetClockInfo(self.handle, self._nvml.NVML_CLOCK_SM))
        self.mem_mhz.append(self._nvml.nvmlDeviceGetClockInfo(self.handle, self._nvml.NVML_CLOCK_MEM))
        self.power_w.append(self._power_w())
        self.event_reasons.append(self._reasons(self.handle))
        self._read_pcie()

    def latest(self) -> dict:
        """The last step's reading, for a log line."""
        return {"sm_clock_mhz": self.sm_mhz[-1], "mem_clock_mhz": self.mem_mhz[-1], "power_w": self.power_w[-1],
                "clocks_event_reasons": self.event_reasons[-1],
                "pcie_rx_bytes": self.pcie_rx[-1] - self.pcie_rx[-2] if len(self.pcie_rx) > 1 else None,
                "pcie_tx_bytes": self.pcie_tx[-1] - self.pcie_tx[-2] if len(self.pcie_tx) > 1 else None}

    def as_dict(self) -> dict:
        self.pcie.stop()
        return {"sm_clock_mhz": self.sm_mhz, "mem_clock_mhz": self.mem_mhz, "power_w": self.power_w,
                "clocks_event_reasons": self.event_reasons,
                "clocks_event_reasons_note": "NVML bitmask per step: 0x1 idle, 0x4 SW power cap, "
                                              "0x8 HW slowdown, 0x20 SW thermal, 0x40 HW thermal, 0x80 HW power brake",
                "pcie_counters": {"tx_bytes": self.pcie_tx, "rx_bytes": self.pcie_rx, "error": self.pcie.error,
                                  "samples": self.pcie.samples,
                                  "marks_tx_rx": {k: [list(v) for v in marks] for k, marks in self.pcie_marks.items()},
                                  "note": "NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES summed from readings every "
                                          f"{PCIE_SAMPLE_INTERVAL_S} s, 32-bit wraps undone; cumulative, before "
                                          "step 0 and after each step; the GPU's view: RX = host to GPU"}}


# The canary (--canary): work on fresh allocations, timed between steps, whose speed says whether
# the whole GPU is slow (clocks, power, remapping under way) or only the training's own data.
CANARY_GEMM_N = 4096
CANARY_GEMMS = 20
CANARY_COPY_BYTES = 1 << 30


class Canary:
    """A fresh 4096 x 4096 bf16 GEMM x20 and a 1 GiB device copy, each timed with CUDA events on
    tensors allocated for it (through PyTorch's allocator: managed memory under TRANSIT), after
    one untimed GEMM (cuBLAS's start, the pages' first touch). Under TRANSIT it also reads how many
    of its bytes are on the host (pagemap): a canary placed there is slow for that reason alone."""

    def __init__(self, device: torch.device) -> None:
        if device.type != "cuda":
            raise SystemExit("--canary needs a GPU: it times CUDA kernels")
        self.device = device

    def run(self) -> dict:
        n, dev = CANARY_GEMM_N, self.device
        torch.cuda.synchronize(dev)
        a, b = (torch.randn(n, n, device=dev, dtype=torch.bfloat16) for _ in range(2))
        c = torch.mm(a, b)
        src = torch.ones(CANARY_COPY_BYTES, device=dev, dtype=torch.uint8)
        dst = torch.zeros_like(src)
        events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        events[0].record()
        for _ in range(CANARY_GEMMS):
            torch.mm(a, b, out=c)
        events[1].record()
        dst.copy_(src)
        events[2].record()
        events[2].synchronize()
        gemm_s, copy_s = (events[i].elapsed_time(events[i + 1]) / 1e3 for i in (0, 1))
        on_host = ((lambda *ts: host_resident_bytes([(t.data_ptr(), t.numel() * t.element_size()) for t in ts]))
                   if under_transit() else (lambda *ts: None))
        gemm_host, copy_host = on_host(a, b, c), on_host(src, dst)
        del a, b, c, src, dst
        return {"gemm_ms": round(gemm_s * 1e3, 3), "gemm_tflops": round(2 * n**3 * CANARY_GEMMS / gemm_s / 1e12, 1),
                "copy_ms": round(copy_s * 1e3, 3), "copy_gbps": round(2 * CANARY_COPY_BYTES / copy_s / 1e9, 1),
                "gemm_host_bytes": gemm_host, "copy_host_bytes": copy_host}

    @staticmethod
    def describe() -> str:
        return (f"a {CANARY_GEMM_N}x{CANARY_GEMM_N} bf16 GEMM x{CANARY_GEMMS} and a {CANARY_COPY_BYTES >> 20} MiB "
                "device-to-device copy on new allocations, CUDA-event timed, outside the steps' timing; "
                "copy_gbps counts read and write; gemm_host_bytes, copy_host_bytes (under TRANSIT): the bytes of "
                "each one's tensors on the host (pagemap)")


def pin_cpu_cores(local_rank: int, cores_per_rank: int | None) -> list[int] | None:
    """Restrict this rank (and the threads it starts later) to its own block of `cores_per_rank`
    of the cores it may use (rank r takes the r-th). None: every core, unchanged (None)."""
    if not cores_per_rank:
        return None
    allowed = sorted(os.sched_getaffinity(0))
    mine = allowed[local_rank * cores_per_rank:(local_rank + 1) * cores_per_rank]
    if len(mine) < cores_per_rank:
        raise SystemExit(f"--cpu-cores-per-rank {cores_per_rank}: rank {local_rank} needs cores "
                         f"{local_rank * cores_per_rank}-{(local_rank + 1) * cores_per_rank - 1} "
                         f"of the {len(allowed)} it may use")
    os.sched_setaffinity(0, mine)
    torch.set_num_threads(len(mine))
    return mine


class NvmlMonitor:
    """Polls NVML in a thread for this process's device memory and the device's used memory.

    Two readings, both kept: the process's usedGpuMemory (what NVML charges to our pid) and the
    device's used memory minus its value before this process created its CUDA context. The peak
    compared with the cap is the larger of the two: the process reading may leave out managed
    (UVM) pages resident on the device, the device reading counts everything on a GPU that runs
    one benchmark at a time (the drivers run them one after the other).

    Under TRANSIT in limit mode neither reading says what is resident: the UVM driver keeps a
    managed allocation's GPU chunks after their pages are evicted (bench/README.md, "Measuring
    TRANSIT's device memory in limit mode"), so the device reading is the high-water mark of every
    chunk ever touched, and the process reading leaves managed memory out. Under TRANSIT every
    PyTorch segment is a managed allocation, so every RESIDENCY_POLL_INTERVAL_S this thread also
    reads PyTorch's reserved bytes and the managed bytes resident on the host (smaps Rss of the
    UVM mappings): reserved - host resident is an upper bound on the managed data on the device
    (pages never touched count as on the device).
    """

    def __init__(self, device_index: int) -> None:
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        self.handle = nvml_handle(pynvml, device_index)
        self.baseline_used = pynvml.nvmlDeviceGetMemoryInfo(self.handle).used
        self.process_peak: int | None = None
        self.device_peak = 0
        self.device_index = device_index
        self.track_residency = under_transit()
        self.managed_bound: int | None = None  # the latest reserved - host resident
        self.managed_bound_peak: int | None = None
        self.uvm_host_peak: int | None = None
        self.residency_samples_skipped = 0  # the allocator grew during the smaps walk: no reading
        self._last_residency = float("-inf")
        self._t0 = time.monotonic()
        # (seconds since start, device used over baseline, managed device-resident bound or None)
        self.timeline: list[tuple[float, int, int | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="nvml-monitor", daemon=True)
        self._thread.start()

    def process_used(self) -> int | None:
        try:
            procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        except self._nvml.NVMLError:
            return None
        for proc in procs:
            if proc.pid == os.getpid():
                return proc.usedGpuMemory  # None where the driver does not say
        return None

    def device_used_over_baseline(self) -> int:
        return self._nvml.nvmlDeviceGetMemoryInfo(self.handle).used - self.baseline_used

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(NVML_POLL_INTERVAL_S)

    def sample_residency(self) -> None:
        # memory_reserved reads the allocator's statistics; it does not create a CUDA context.
        reserved = torch.cuda.memory_reserved(self.device_index)
        host = uvm_host_resident_bytes(read_own_smaps())
        if host is None:
            return  # no managed mapping (yet): nothing measured, never a 0
        self.uvm_host_peak = max(self.uvm_host_peak or 0, host)
        if torch.cuda.memory_reserved(self.device_index) != reserved:
            # Reserved changed during the walk (it takes up to a second with gigabytes on the
            # host): reserved at either end against the host pages seen is no bound of any moment.
            self.residency_samples_skipped += 1
            return
        self.managed_bound = max(0, reserved - host)
        self.managed_bound_peak = max(self.managed_bound_peak or 0, self.managed_bound)

    def sample(self, force_residency: bool = False) -> None:
        used = self.process_used()
        if used is not None:
            self.process_peak = max(self.process_peak or 0, used)
        used = self.device_used_over_baseline()
        self.device_peak = max(self.device_peak, used)
        now = time.monotonic()
        if self.track_residency and (force_residency or now - self._last_residency >= RESIDENCY_POLL_INTERVAL_S):
            self._last_residency = now
            self.sample_residency()
        t = now - self._t0
        last = self.timeline[-1] if self.timeline else None
        bound_moved = last is not None and abs((self.managed_bound or 0) - (last[2] or 0)) >= TIMELINE_STEP_BYTES
        if (last is None or abs(used - last[1]) >= TIMELINE_STEP_BYTES or bound_moved
                or t - last[0] >= TIMELINE_MAX_GAP_S):
            self.timeline.append((round(t, 3), used, self.managed_bound))

    def residency_source(self) -> str:
        if not self.track_residency:
            return "not measured: not under TRANSIT (no libtransit in LD_PRELOAD)"
        if self.uvm_host_peak is None:
            return f"not measured: no {UVM_DEVICE_PATH} mapping in /proc/self/smaps"
        return "smaps:" + UVM_DEVICE_PATH

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        self.sample(force_residency=True)
        return {
            "nvml_process_peak_bytes": self.process_peak,
            "nvml_device_used_peak_minus_baseline_bytes": self.device_peak,
            "peak_bytes": max(self.process_peak or 0, self.device_peak),
            "peak_source": "max(nvml-process, nvml-device-minus-baseline)",
            "driver_version": self._nvml.nvmlSystemGetDriverVersion(),
            # Under TRANSIT: PyTorch reserved minus managed bytes on the host, an upper bound on the
            # managed data resident on the device; None when not measured (residency_source says why).
            "managed_device_resident_peak_bytes": self.managed_bound_peak,
            "uvm_host_resident_peak_bytes": self.uvm_host_peak,
            "residency_source": self.residency_source(),
            "residency_samples_skipped": self.residency_samples_skipped,
            "device_used_timeline_fields": ["t_s", "nvml_device_used_minus_baseline_bytes",
                                            "managed_device_resident_bound_bytes"],
            "device_used_timeline": self.timeline,
        }


def transit_dtoh_bytes() -> int | None:
    """TRANSIT's DtoH migration bytes so far (libtransit's transit_stats_json, in this process)."""
    import ctypes

    lib = ctypes.CDLL(None)
    if not hasattr(lib, "transit_stats_json"):
        return None
    lib.transit_stats_json.restype = ctypes.c_void_p
    raw = lib.transit_stats_json()
    try:
        return json.loads(ctypes.string_at(raw))["migrations"]["dtoh"]["bytes"]
    finally:
        lib.transit_free(ctypes.c_void_p(raw))


def residency_sweep(device: torch.device) -> dict:
    """After training, under TRANSIT: prefetch every PyTorch segment (managed memory) to the host.

    What the GPU held moves and is recorded by CUPTI as DtoH migrations, which TRANSIT counts; what
    was already on the host does not move. TRANSIT's DtoH total at exit (its stats file) minus
    `dtoh_bytes_before` is therefore the managed data that was resident on the device at the end,
    measured by the driver's own migration records: a check of TRANSIT's estimate and of the smaps
    bound that depends on neither."""
    from transit.bench_link import _Driver  # transit bench link's libcuda calls on managed memory

    torch.cuda.synchronize(device)
    segments = [(s["address"], s["total_size"]) for s in torch.cuda.memory_snapshot()
                if s.get("device", device.index) == device.index]
    before, host_before = transit_dtoh_bytes(), uvm_host_resident_bytes(read_own_smaps())
    t0 = time.perf_counter()
    driver = _Driver(device.index or 0)
    for address, size in segments:
        driver.prefetch(address, size, host=True, stream=0)
    torch.cuda.synchronize(device)
    return {"segments": len(segments), "segment_bytes": sum(size for _, size in segments),
            "dtoh_bytes_before": before, "uvm_host_resident_before_bytes": host_before,
            "uvm_host_resident_after_bytes": uvm_host_resident_bytes(read_own_smaps()),
            "seconds": round(time.perf_counter() - t0, 3)}


def apply_memory_cap(cap_bytes: int, device: torch.device, monitor: NvmlMonitor) -> dict:
    """Keep a non-TRANSIT run's device memory under `cap_bytes` (the emulated capacity L).

    PyTorch's allocator gets L minus what this process already holds outside it (the CUDA
    context, read from NVML now) minus a margin for what grows outside it later.
    """
    torch.zeros(1, device=device)  # creates the context so NVML sees it
    monitor.sample()
    context = monitor.process_used()
    if context is None:
        context = monitor.device_used_over_baseline()
    total = torch.cuda.get_device_properties(device).total_memory
    budget = cap_bytes - context - NON_ALLOCATOR_MARGIN_BYTES
    fraction = budget / total
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    return {"cap_bytes": cap_bytes, "context_bytes": context, "allocator_budget_bytes": budget,
            "allocator_fraction": fraction, "non_allocator_margin_bytes": NON_ALLOCATOR_MARGIN_BYTES}


def step_stats(step_times: list[float], warmup: int, settle: SettleRule | None = None) -> dict:
    """Mean and median of the measured steps: after `warmup`, or the settle rule's timed steps."""
    settled = None
    if settle is not None:
        found = settle.timed_from(step_times)
        start, settled = found if found else (settle.settled_at(step_times), None)
        warmup = start if start is not None else settle.max_start
    # A run cut short by its time budget during warm-up keeps at least one measured step.
    warmup = max(0, min(warmup, len(step_times) - 1))
    measured = step_times[warmup:warmup + settle.timed] if settle else step_times[warmup:]
    stats = {
        "all_s": step_times,
        "warmup_steps": warmup,
        "measured_steps": len(measured),
        "mean_s": statistics.fmean(measured) if measured else None,
        "p50_s": statistics.median(measured) if measured else None,
    }
    if settle is not None:
        stats["settle"] = settle.as_dict() | {"settled": settled}
    return stats


def window_median(values: list[float], first: int, n: int) -> float | None:
    """The median of values[first:first + n]; None when that is empty."""
    window = values[first:first + n]
    return statistics.median(window) if window else None


class StepPhases:
    """Device time of the named parts of each step (forward, backward, optimizer): CUDA events on
    the current stream, read once the step synchronized (wall time on a CPU device). Says where a
    step's time goes without a profiler, which would take CUPTI from TRANSIT."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.steps: list[list[tuple[str, object, object]]] = []

    def _mark(self) -> object:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def begin_step(self) -> None:
        self.steps.append([])

    @contextlib.contextmanager
    def span(self, name: str):
        start = self._mark()
        yield
        self.steps[-1].append((name, start, self._mark()))

    def _seconds(self, start: object, end: object) -> float:
        return start.elapsed_time(end) / 1e3 if self.cuda else end - start

    def as_dict(self, first: int, count: int) -> dict:
        """Per part: its seconds in every step, and their median over steps first..first+count."""
        names = list(dict.fromkeys(name for spans in self.steps for name, _, _ in spans))
        per_step = {name: [sum(self._seconds(a, b) for n, a, b in spans if n == name) for spans in self.steps]
                    for name in names}
        return {"all_s": per_step, "p50_s": {name: window_median(v, first, count) for name, v in per_step.items()}}


@dataclass
class LoopResult:
    step_times: list[float]
    losses: list[float]
    stopped_by_time_budget: bool
    host_state_bytes: dict | None  # this rank's training state in host memory, after the first step
    # the loopback interface's cumulative bytes sent, before step 0 and after each step (None: no
    # such counter): the traffic of NCCL over sockets between emulated nodes
    loopback_tx_bytes: list[int] | None = None


LOOPBACK_TX = Path("/sys/class/net/lo/statistics/tx_bytes")


def loopback_tx_bytes() -> int | None:
    """Bytes this host (network namespace) has sent over `lo`; every byte between two emulated
    nodes is counted once here (and once more in rx_bytes)."""
    try:
        return int(LOOPBACK_TX.read_text())
    except (OSError, ValueError):
        return None


def timed_steps(one_step, steps: int, warmup: int, time_budget: float, device: torch.device,
                world: int, rank: int, host_state=None, clocks: GpuClocks | None = None,
                settle: SettleRule | None = None, after_step=None) -> LoopResult:
    """Run `one_step(step) -> loss tensor` (this rank's mean over micro-batches) `steps` times.

    Each step is timed to a device synchronisation; losses are averaged over ranks; `after_step(step,
    seconds, loss)`, when given, runs after each step's readings, outside its timing. A run stops
    after the first step past warm-up that ends more than `time_budget` seconds into the loop
    (0: no budget), or once every rank's steps hold the settle rule's timed steps: the same
    decision on every rank. `host_state()` is read once, after step 0.
    """
    import torch.distributed as dist

    times: list[float] = []
    losses: list[float] = []
    state_bytes = None
    stopped = False
    dist.barrier()
    loopback = [loopback_tx_bytes()]
    start = time.perf_counter()
    for step in range(steps):
        t0 = time.perf_counter()
        loss = one_step(step)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
        loopback.append(loopback_tx_bytes())
        if clocks is not None:
            clocks.read()
        if state_bytes is None and host_state is not None:
            state_bytes = host_state()
        loss = loss.detach().clone()
        dist.all_reduce(loss)  # SUM: gloo has no AVG
        losses.append(loss.item() / world)
        if rank == 0:
            print(f"step {step}: loss {losses[-1]:.4f} time {times[-1]:.3f}s", flush=True)
        if after_step is not None:
            after_step(step, times[-1], losses[-1])
        over = time_budget > 0 and step >= warmup and time.perf_counter() - start > time_budget
        decision = torch.tensor(float(over), device=device)
        dist.all_reduce(decision, op=dist.ReduceOp.MAX)
        if decision.item() and step + 1 < steps:
            stopped = True
            break
        if settle is not None:
            done = torch.tensor(float(settle.timed_from(times) is not None), device=device)
            dist.all_reduce(done, op=dist.ReduceOp.MIN)
            if done.item():
                break
    return LoopResult(times, losses, stopped, state_bytes, None if None in loopback else loopback)


def gather_rank_facts(monitor: NvmlMonitor | None, device: torch.device, loop: LoopResult) -> list[dict]:
    """Every rank's memory readings and host-state bytes, gathered to all ranks."""
    import torch.distributed as dist

    memory: dict = {"host_rss_peak_bytes": host_rss_peak_bytes()}
    if monitor is not None:
        memory |= monitor.stop()
        memory["torch_max_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
        memory["torch_max_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
    facts: list = [None] * dist.get_world_size()
    dist.all_gather_object(facts, {"rank": dist.get_rank(), "memory": memory,
                                   "host_state_bytes": loop.host_state_bytes})
    return facts


def result_doc(*, system: str, runner: str, model_name: str, batch: BatchSettings, world: int,
               warmup: int, loop: LoopResult, rank_facts: list[dict], cap: dict | None,
               config: dict, settle: SettleRule | None = None) -> dict:
    """The result file every runner writes: provenance, configuration, throughput, memory, offload."""
    from bench.model import config_by_name, count_params, flops_per_step

    cfg = config_by_name(model_name)
    flops = flops_per_step(cfg, batch.global_batch)
    timing = step_stats(loop.step_times, warmup, settle)
    peaks = [r["memory"].get("peak_bytes") for r in rank_facts]
    peak = max(peaks) if peaks and all(p is not None for p in peaks) else None
    host_states = [r["host_state_bytes"] for r in rank_facts]
    return {
        "schema": RESULT_SCHEMA,
        "system": system,
        "runner": runner,
        **provenance(),
        "config": {
            "model": model_name, "model_config": cfg.to_dict(), "params": count_params(cfg)["total"],
            "world_size": world, "global_batch": batch.global_batch, "local_batch": batch.local_batch,
            "grad_accum": batch.grad_accum, "batch_source": batch.source,
            "tokens_per_step": batch.global_batch * cfg.seq_len, **config,
        },
        "flops_per_step": flops,
        "tflops_per_gpu": tflops_per_gpu(flops, timing["mean_s"], world),
        "tflops_per_gpu_p50": tflops_per_gpu(flops, timing["p50_s"], world),
        "step_time": timing,
        "stopped_by_time_budget": loop.stopped_by_time_budget,
        "losses": loop.losses,
        "memory_cap": cap,
        "memory": {
            "per_rank": [r["memory"] for r in rank_facts],
            "peak_bytes_max": peak,
            "within_cap": (peak <= cap["cap_bytes"]) if cap and peak is not None else None,
        },
        # What the system keeps in host memory per GPU (its offloaded training state).
        "offloaded_bytes_per_gpu": max((h or {}).get("total", 0) for h in host_states),
        "offload_breakdown_per_rank": host_states,
    }


def tflops_per_gpu(flops_per_step: int, seconds: float | None, gpus: int) -> float | None:
    return flops_per_step / seconds / gpus / 1e12 if seconds else None


def git_commit() -> str | None:
    """BENCH_GIT_COMMIT when the driver is given it (the device's copy of the tree may carry a stale
    .git: measured, its HEAD was a commit from an earlier session), else git's HEAD."""
    if os.environ.get("BENCH_GIT_COMMIT"):
        return os.environ["BENCH_GIT_COMMIT"]
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], check=False,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def check_tree_commit(repo: Path = REPO_ROOT) -> None:
    """A summary names one commit, so `bench run` refuses a tree whose tracked files differ from
    git's HEAD (local edits, or a device's copy of the tree under a stale .git, which once recorded
    an earlier session's commit) unless BENCH_GIT_COMMIT names the commit the tree is at."""
    if os.environ.get("BENCH_GIT_COMMIT"):
        return
    try:
        out = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                             check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return  # no git here: the summary records no commit
    changed = out.stdout.splitlines()
    if out.returncode == 0 and changed:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], check=False,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        raise UsageError(f"{len(changed)} tracked files differ from git's HEAD {head} ({changed[0][3:]}, ...): "
                         "commit them, or set BENCH_GIT_COMMIT=<the commit this tree is at>")


def provenance() -> dict:
    """Command, commit and device: what every result file carries."""
    device = None
    if torch.cuda.is_available():
        device = {"name": torch.cuda.get_device_name(0), "count": torch.cuda.device_count(),
                  "cuda": torch.version.cuda}
    return {
        # The driver scripts export BENCH_COMMAND with the full launch line (transit run / torchrun).
        "command": os.environ.get("BENCH_COMMAND") or shlex.join([sys.executable, *sys.argv]),
        "git_commit": git_commit(),
        "device": device,
        "hostname": platform.node(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "transit_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("TRANSIT_")},
        "ld_preload": os.environ.get("LD_PRELOAD"),
        "unix_time": time.time(),
    }


def host_rss_peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def write_json(path: str | Path, doc: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
