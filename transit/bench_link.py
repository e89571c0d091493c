"""`transit bench link`: the paper's Figure 1 on this machine, host DRAM over PCIe against peer HBM.

Latency and bandwidth per transfer size (4 KiB to 1 GiB, powers of 4) of
(a) host DRAM <-> this GPU over PCIe: a copy from/to pinned memory (cudaMemcpyAsync), a managed
    prefetch (cuMemPrefetchAsync of managed memory resident on the other side), and zero-copy: a
    kernel reading (a sum) or writing (a fill) host memory in place, mapped pinned memory or managed
    memory preferred on the host and accessed by the GPU (TRANSIT's advise policy);
(b) peer GPU HBM -> this GPU through NCCL send/recv between 2 ranks: NCCL's default transport
    (NVLink), NCCL_P2P_DISABLE=1, and TCP sockets on loopback; needs 2 GPUs.
Every time is GPU time between two CUDA events; a repeat times 64 MiB of back-to-back transfers
(at most 32 of them, each on its own slice of the buffer) and divides by their number; a point is
the median of --repeats repeats after --warmup ones.
Also measures whether NVML's cumulative PCIe byte counters see the bytes of a transfer.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from transit import paths
from transit.errors import UsageError
from transit.figures import save_png
from transit.units import format_bytes

SCHEMA = "transit.bench-link/1"
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
DEFAULT_MIN_SIZE, DEFAULT_MAX_SIZE = 4 * KIB, GIB
SIZE_FACTOR = 4
# Managed memory is never sized near the GPU's free memory (oversubscribing a device can hang it):
# the largest transfer is capped, and the run refuses when the GPU has under this many times it free.
MAX_SIZE_LIMIT = 4 * GIB
MIN_SIZE_LIMIT = 4 * KIB  # a page: managed prefetches move whole pages
FREE_MEMORY_FACTOR = 4
DEFAULT_REPEATS, DEFAULT_WARMUP = 7, 2
MAX_REPEATS = 100
# Small transfers are timed in batches, so that one repeat lasts well past the events' resolution.
OPS_PER_REPEAT_TARGET_BYTES = 64 * MIB
MAX_OPS_PER_REPEAT = 32
FLOAT32_BYTES = 4
# NVLink multicast stays off on the shared GPU hosts (a program that uses it can take their GPUs out
# of service); this command sets it for itself and for the NCCL ranks it starts.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
PEER_TRANSPORTS = {
    "peer-nccl-default": ("NCCL default transport (NVLink P2P)", {}),
    "peer-nccl-no-p2p": ("NCCL, NCCL_P2P_DISABLE=1", {"NCCL_P2P_DISABLE": "1"}),
    "peer-nccl-sockets": ("NCCL over TCP sockets on lo", {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1",
                                                         "NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "lo"}),
}
PEER_TIMEOUT_S = 90
NCCL_VIA = re.compile(r" via (\S+)")  # NCCL_DEBUG=INFO: "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM"
# NVML field ids (nvml.h) for drivers whose pynvml predates the names.
NVML_FI_DEV_PCIE_COUNT_TX_BYTES, NVML_FI_DEV_PCIE_COUNT_RX_BYTES = 197, 198
NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1
# The PCIe byte counters wrap at 32 bits whatever value type NVML reports them in (on an H100 they
# went 4,125,269,248 -> 73,111,968 between two readings): a difference is taken modulo 2^32, so a
# reader must read them before 4 GiB pass (bench/common.py's PcieCounters reads every 25 ms).
PCIE_COUNTER_WRAP = 1 << 32
NVML_VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
PCIE_COUNTER_SETTLE_S = 0.2  # after a transfer, before the first reading
PCIE_COUNTER_LAG_S = 1.0  # a second reading this much later shows whether the counter lags
PCIE_IDLE_WINDOW_S = 1.0  # traffic of an idle GPU over this long, the counters' noise floor
# The counters "agree" when a transfer's bytes, less the idle traffic of the same window, are within
# this fraction of the bytes moved (PCIe adds headers to every packet, so a counter of wire bytes
# reads a few percent more than the payload).
PCIE_COUNTER_TOLERANCE = 0.10
PCIE_THROUGHPUT_COPIES = 16  # nvmlDeviceGetPcieThroughput samples 20 ms windows: copy for longer
PCIE_THROUGHPUT_POLL_S = 0.02
CU_MEM_ATTACH_GLOBAL = 1
CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_HOST = 1, 2
CU_MEM_ADVISE_SET_PREFERRED_LOCATION, CU_MEM_ADVISE_SET_ACCESSED_BY = 3, 5
DIRECTIONS = ("host->gpu", "gpu->host", "peer->gpu")
TABLE_SIZES = (4 * KIB, 64 * KIB, MIB, 16 * MIB, 256 * MIB, GIB)


def register(subparsers: argparse._SubParsersAction) -> None:
    # a developer's tool: added without help=, so `transit --help` does not list it
    bench = subparsers.add_parser("bench", description="Benchmarks of this machine (bench link: PCIe and peer links).")

    def usage(_args: argparse.Namespace) -> int:
        bench.print_help()
        return 2

    bench.set_defaults(func=usage)
    sub = bench.add_subparsers(dest="bench_command", metavar="BENCH")
    link = sub.add_parser("link", help="latency and bandwidth: host DRAM over PCIe, peer GPU over NCCL",
                          description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    link.add_argument("--json", action="store_true", help="print the result as JSON instead of the table")
    link.add_argument("--out", metavar="DIR", help="write link.json and link.png into DIR")
    link.add_argument("--from", dest="from_file", metavar="FILE",
                      help="render a recorded result (its table, and with --out its PNG) instead of measuring")
    link.add_argument("--min-size", metavar="SIZE", help="smallest transfer (default 4K, a multiple of 4K)")
    link.add_argument("--max-size", metavar="SIZE", help=f"largest transfer (default 1G, at most "
                      f"{MAX_SIZE_LIMIT // GIB}G)")
    link.add_argument("--repeats", metavar="N", help=f"timed repeats per point (default {DEFAULT_REPEATS})")
    link.add_argument("--warmup", metavar="N", help=f"untimed repeats first (default {DEFAULT_WARMUP})")
    link.add_argument("--no-peer", action="store_true", help="only the host paths (part a)")
    link.set_defaults(func=main_link)


def _count(option: str, text: str | None, default: int, lowest: int) -> int:
    if text is None:
        return default
    if not text.isdigit() or not lowest <= int(text) <= MAX_REPEATS:
        raise UsageError(f"{option} {text[:80]!r}: must be a whole number from {lowest} to {MAX_REPEATS}")
    return int(text)


def _size(option: str, text: str | None, default: int) -> int:
    if text is None:
        return default
    from transit import _native  # the project's one size grammar (libtransit's parser)

    try:
        value = _native.parse_size(text)
    except UsageError as exc:
        raise UsageError(f"{option} {text[:80]!r}: {exc}") from None
    if not (MIN_SIZE_LIMIT <= value <= MAX_SIZE_LIMIT and value % MIN_SIZE_LIMIT == 0):
        raise UsageError(f"{option} {text[:80]!r}: must be a multiple of 4K from 4K to {MAX_SIZE_LIMIT // GIB}G")
    return value


def transfer_sizes(smallest: int, largest: int) -> list[int]:
    """smallest, smallest x SIZE_FACTOR, ... up to largest (which is always the last size)."""
    sizes = [smallest]
    while sizes[-1] * SIZE_FACTOR < largest:
        sizes.append(sizes[-1] * SIZE_FACTOR)
    if sizes[-1] != largest:
        sizes.append(largest)
    return sizes


def ops_per_repeat(size: int, largest: int) -> int:
    return max(1, min(MAX_OPS_PER_REPEAT, min(OPS_PER_REPEAT_TARGET_BYTES, largest) // size))


def _check_out_dir(text: str) -> Path:
    out = Path(text)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {text[:80]!r}: exists and is not a directory")
    try:
        paths.output_dir(text)
    except paths.PathError as exc:
        raise UsageError(f"--out {exc}") from None
    return out


def load_result(text: str) -> dict:
    path = Path(text)
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"--from {text[:80]!r}: cannot read a JSON document ({type(exc).__name__})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise UsageError(f"--from {text[:80]!r}: not a {SCHEMA} result (schema "
                         f"{str(doc.get('schema') if isinstance(doc, dict) else None)[:40]!r})")
    return doc


def main_link(args: argparse.Namespace) -> int:
    out = _check_out_dir(args.out) if args.out else None
    if args.from_file:
        measuring = [o for o, v in (("--min-size", args.min_size), ("--max-size", args.max_size),
                                    ("--repeats", args.repeats), ("--warmup", args.warmup),
                                    ("--no-peer", args.no_peer or None)) if v is not None]
        if measuring:
            raise UsageError(f"--from renders a recorded result: {measuring[0]} applies only when measuring")
        doc = load_result(args.from_file)
    else:
        smallest = _size("--min-size", args.min_size, DEFAULT_MIN_SIZE)
        largest = _size("--max-size", args.max_size, DEFAULT_MAX_SIZE)
        if smallest > largest:
            raise UsageError(f"--min-size {args.min_size!r} is larger than --max-size "
                             f"({largest} bytes)")
        repeats = _count("--repeats", args.repeats, DEFAULT_REPEATS, 1)
        warmup = _count("--warmup", args.warmup, DEFAULT_WARMUP, 0)
        doc = measure(transfer_sizes(smallest, largest), repeats, warmup, peer=not args.no_peer)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        if not args.from_file:
            (out / "link.json").write_text(json.dumps(doc, indent=1) + "\n")
        plot(doc, out / "link.png")
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print_result(doc)
    return 0


# ---------------------------------------------------------------- measuring (needs a CUDA GPU)

def _progress(message: str) -> None:
    if sys.stderr.isatty():
        from rich.console import Console

        Console(stderr=True).print(f"[dim]{message}[/dim]")


def _git_commit() -> str | None:
    """BENCH_GIT_COMMIT when set (a copied tree's .git can be stale), else git's HEAD of this tree."""
    if os.environ.get("BENCH_GIT_COMMIT"):
        return os.environ["BENCH_GIT_COMMIT"]
    out = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "HEAD"],
                         capture_output=True, text=True, check=False)
    return out.stdout.strip() or None


class _CudaArray:
    """A float32 view of `nbytes` at a device-accessible address, for torch.as_tensor: a CUDA tensor
    whose storage is host memory (mapped pinned or managed), so that kernels on it read over PCIe."""

    def __init__(self, address: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes // FLOAT32_BYTES,), "typestr": "<f4",
                                         "data": (address, False), "version": 2}


class _Driver:
    """The CUDA driver calls torch does not expose: managed memory, its advice and prefetch."""

    def __init__(self, device: int) -> None:
        import ctypes

        class Location(ctypes.Structure):
            _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]

        self.ctypes, self.Location, self.device = ctypes, Location, device
        self.lib = ctypes.CDLL("libcuda.so.1")

    def _call(self, name: str, *args) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name} failed: CUresult {rc}")

    def _where(self, host: bool):
        return self.Location(CU_MEM_LOCATION_TYPE_HOST if host else CU_MEM_LOCATION_TYPE_DEVICE,
                             0 if host else self.device)

    def free_bytes(self) -> int:
        free, total = self.ctypes.c_size_t(), self.ctypes.c_size_t()
        self._call("cuMemGetInfo_v2", self.ctypes.byref(free), self.ctypes.byref(total))
        return free.value

    def alloc_managed_on_host(self, size: int) -> int:
        """Managed memory written by the CPU: every page resident on the host."""
        ptr = self.ctypes.c_uint64()
        self._call("cuMemAllocManaged", self.ctypes.byref(ptr), self.ctypes.c_size_t(size), CU_MEM_ATTACH_GLOBAL)
        self.ctypes.memset(ptr.value, 1, size)
        return ptr.value

    def advise_host_accessed_by_gpu(self, ptr: int, size: int) -> None:
        self._call("cuMemAdvise_v2", self.ctypes.c_uint64(ptr), self.ctypes.c_size_t(size),
                   CU_MEM_ADVISE_SET_PREFERRED_LOCATION, self._where(host=True))
        self._call("cuMemAdvise_v2", self.ctypes.c_uint64(ptr), self.ctypes.c_size_t(size),
                   CU_MEM_ADVISE_SET_ACCESSED_BY, self._where(host=False))

    def prefetch(self, ptr: int, size: int, host: bool, stream: int) -> None:
        self._call("cuMemPrefetchAsync_v2", self.ctypes.c_uint64(ptr), self.ctypes.c_size_t(size),
                   self._where(host), 0, self.ctypes.c_void_p(stream))

    def free(self, ptr: int) -> None:
        self._call("cuMemFree_v2", self.ctypes.c_uint64(ptr))


def time_per_op(op: Callable[[int], None], ops: int, repeats: int, warmup: int,
                reset: Callable[[], None] | None = None) -> list[float]:
    """Seconds per op, one value per timed repeat: `ops` calls op(j) between two CUDA events on
    the current stream; reset() (enqueued on the same stream, before the start event) undoes
    what the ops moved, for transfers that a second time would not move again."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for repeat in range(warmup + repeats):
        if reset is not None:
            reset()
        start.record()
        for j in range(ops):
            op(j)
        end.record()
        end.synchronize()
        if repeat >= warmup:
            times.append(start.elapsed_time(end) / 1e3 / ops)
    return times


def point(size: int, ops: int, times: list[float]) -> dict:
    median = statistics.median(times)
    return {"bytes": size, "ops_per_repeat": ops, "repeats": len(times), "median_s": median,
            "min_s": min(times), "max_s": max(times), "bandwidth_gbps": size / median / 1e9}


def _path(name: str, direction: str, how: str, points: list[dict]) -> dict:
    return {"name": name, "direction": direction, "how": how, "points": points}


def pcie_counter_delta(before: int, after: int) -> int:
    """Bytes between two readings of a PCIe byte counter, a wrap at PCIE_COUNTER_WRAP undone."""
    return (after - before) % PCIE_COUNTER_WRAP


class PcieCounterReader:
    """NVML's cumulative PCIe byte counters of one GPU (the GPU's view: RX = host to GPU)."""

    def __init__(self, nvml, handle) -> None:
        self.nvml, self.handle = nvml, handle
        self.fields = [getattr(nvml, "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", NVML_FI_DEV_PCIE_COUNT_TX_BYTES),
                       getattr(nvml, "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", NVML_FI_DEV_PCIE_COUNT_RX_BYTES)]

    def read(self) -> dict:
        """{"tx": bytes, "rx": bytes} or {"error": why}."""
        try:
            values = self.nvml.nvmlDeviceGetFieldValues(self.handle, self.fields)
        except self.nvml.NVMLError as exc:
            return {"error": f"nvmlDeviceGetFieldValues: {exc}"}
        out = {}
        for key, value in zip(("tx", "rx"), values):
            if value.nvmlReturn != 0:
                return {"error": f"field {value.fieldId}: {self.nvml.nvmlErrorString(value.nvmlReturn)}"}
            out[key] = int(getattr(value.value, NVML_VALUE_FIELDS.get(value.valueType, "ullVal")))
        return out


class NvmlPcie(PcieCounterReader):
    """The PCIe byte counters read around a transfer, and the sampled throughput. `error` says why
    not, where they do not work."""

    def __init__(self, nvml, handle) -> None:
        super().__init__(nvml, handle)
        before = self.read()
        self.error = before.get("error")
        if self.error is None:
            time.sleep(PCIE_IDLE_WINDOW_S)
            self.idle_rate = {k: v / PCIE_IDLE_WINDOW_S for k, v in self.delta(before, self.read()).items()}

    @staticmethod
    def delta(before: dict, after: dict) -> dict:
        return {k: pcie_counter_delta(before[k], after[k]) for k in ("tx", "rx")}

    def around(self, run: Callable[[], None], nbytes: int, direction: str) -> dict:
        """Counter deltas around one transfer of `nbytes` (run() enqueues it), read
        PCIE_COUNTER_SETTLE_S after it ended and again PCIE_COUNTER_LAG_S later, less the idle
        traffic of the same window."""
        import torch

        torch.cuda.synchronize()
        before, t0 = self.read(), time.monotonic()
        run()
        torch.cuda.synchronize()
        time.sleep(PCIE_COUNTER_SETTLE_S)
        first, t1 = self.read(), time.monotonic()
        time.sleep(PCIE_COUNTER_LAG_S)
        late, t2 = self.read(), time.monotonic()
        error = before.get("error") or first.get("error") or late.get("error")
        if error:
            return {"bytes_moved": nbytes, "error": error}
        key = "rx" if direction == "host->gpu" else "tx"
        first_d, late_d = self.delta(before, first), self.delta(before, late)
        net = late_d[key] - self.idle_rate[key] * (t2 - t0)
        return {"bytes_moved": nbytes, "direction": direction, "counter": key,
                "delta_after_settle": first_d, "settle_s": round(t1 - t0, 3),
                "delta_after_lag": late_d, "lag_s": round(t2 - t0, 3), "net_of_idle_bytes": net,
                "ratio": net / nbytes, "agrees": abs(net / nbytes - 1) <= PCIE_COUNTER_TOLERANCE,
                # the first reading missed more than the tolerance of what the later one has
                "lags": late_d[key] - first_d[key] - self.idle_rate[key] * (t2 - t1) > PCIE_COUNTER_TOLERANCE * nbytes}

    def throughput(self, run: Callable[[], None], nbytes: int, copies: int) -> dict:
        """nvmlDeviceGetPcieThroughput (KB/s over the last 20 ms) sampled every PCIE_THROUGHPUT_POLL_S
        while `copies` host->GPU transfers of `nbytes` run, integrated over the run."""
        import torch

        samples: list[tuple[float, int]] = []
        errors: list[str] = []
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                try:
                    kbps = self.nvml.nvmlDeviceGetPcieThroughput(self.handle, NVML_PCIE_UTIL_RX_BYTES)
                except self.nvml.NVMLError as exc:
                    errors.append(str(exc))
                    return
                samples.append((time.monotonic(), kbps))
                time.sleep(PCIE_THROUGHPUT_POLL_S)

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        time.sleep(5 * PCIE_THROUGHPUT_POLL_S)
        for _ in range(copies):
            run()
        torch.cuda.synchronize()
        time.sleep(5 * PCIE_THROUGHPUT_POLL_S)
        stop.set()
        thread.join()
        if errors:
            return {"error": f"nvmlDeviceGetPcieThroughput: {errors[0]}"}
        integrated = sum(kbps * 1000 * (t1 - t0) for (t0, kbps), (t1, _) in itertools.pairwise(samples))
        moved = nbytes * copies
        return {"bytes_moved": moved, "samples": len(samples), "integrated_rx_bytes": integrated,
                "ratio": integrated / moved, "agrees": abs(integrated / moved - 1) <= PCIE_COUNTER_TOLERANCE}


def measure_host(sizes: list[int], repeats: int, warmup: int, driver: _Driver,
                 pcie: NvmlPcie | None) -> tuple[list[dict], dict]:
    """Part (a): every host path at every size, on torch's current device and stream; with
    `pcie`, NVML's counters around whole-buffer transfers (name -> NvmlPcie.around's reading)."""
    import torch

    largest = max(sizes)
    stream = torch.cuda.current_stream().cuda_stream
    here = torch.device("cuda", torch.cuda.current_device())  # as_tensor then aliases, never copies
    paths: list[dict] = []
    counted: dict[str, dict] = {}

    def sweep(name: str, direction: str, how: str, op_for_size, reset_for_size=None) -> None:
        _progress(f"bench link: {name}")
        points = []
        for size in sizes:
            ops = ops_per_repeat(size, largest)
            reset = reset_for_size(size, ops) if reset_for_size else None
            points.append(point(size, ops, time_per_op(op_for_size(size), ops, repeats, warmup, reset)))
        paths.append(_path(name, direction, how, points))

    def kernel_paths(kind: str, where: str, view) -> None:
        """A kernel reading (torch.sum) and one writing (fill_) host memory in place."""
        def part(n: int, j: int):
            return view[j * n // FLOAT32_BYTES:(j + 1) * n // FLOAT32_BYTES]

        sweep(f"htod-zero-copy-{kind}", "host->gpu", f"a kernel (torch.sum) reading {where}",
              lambda n: lambda j: part(n, j).sum())
        sweep(f"dtoh-zero-copy-{kind}", "gpu->host", f"a kernel (fill_) writing {where}",
              lambda n: lambda j: part(n, j).fill_(1.5))
        if pcie:
            counted[f"zero-copy read of {kind} memory (torch.sum)"] = pcie.around(view.sum, largest, "host->gpu")

    device_buf = torch.empty(largest, dtype=torch.uint8, device="cuda")
    pinned = torch.empty(largest, dtype=torch.uint8, pin_memory=True).fill_(1)
    sweep("htod-pinned-copy", "host->gpu", "cudaMemcpyAsync from pinned host memory",
          lambda n: lambda j: device_buf[j * n:(j + 1) * n].copy_(pinned[j * n:(j + 1) * n], non_blocking=True))
    sweep("dtoh-pinned-copy", "gpu->host", "cudaMemcpyAsync to pinned host memory",
          lambda n: lambda j: pinned[j * n:(j + 1) * n].copy_(device_buf[j * n:(j + 1) * n], non_blocking=True))
    if pcie:
        def htod() -> None:
            device_buf.copy_(pinned, non_blocking=True)

        counted["pinned copy host->gpu"] = pcie.around(htod, largest, "host->gpu")
        counted["pinned copy gpu->host"] = pcie.around(lambda: pinned.copy_(device_buf, non_blocking=True),
                                                       largest, "gpu->host")
        counted["throughput_rx"] = pcie.throughput(htod, largest, PCIE_THROUGHPUT_COPIES)
    kernel_paths("pinned", "mapped pinned host memory",
                 torch.as_tensor(_CudaArray(pinned.data_ptr(), largest), device=here))

    managed = driver.alloc_managed_on_host(largest)
    try:
        sweep("htod-managed-prefetch", "host->gpu", "cuMemPrefetchAsync of host-resident managed memory to the GPU",
              lambda n: lambda j: driver.prefetch(managed + j * n, n, host=False, stream=stream),
              lambda n, ops: lambda: driver.prefetch(managed, n * ops, host=True, stream=stream))
        sweep("dtoh-managed-prefetch", "gpu->host", "cuMemPrefetchAsync of GPU-resident managed memory to the host",
              lambda n: lambda j: driver.prefetch(managed + j * n, n, host=True, stream=stream),
              lambda n, ops: lambda: driver.prefetch(managed, n * ops, host=False, stream=stream))
        # advise's placement: preferred on the host, mapped for the GPU; the pages start on the host
        driver.prefetch(managed, largest, host=True, stream=stream)
        driver.advise_host_accessed_by_gpu(managed, largest)
        kernel_paths("managed", "managed memory preferred on the host, accessed by the GPU",
                     torch.as_tensor(_CudaArray(managed, largest), device=here))
    finally:
        torch.cuda.synchronize()
        driver.free(managed)
    return paths, counted


# ---------------------------------------------------------------- part (b): peer GPU over NCCL

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure_peer(sizes: list[int], repeats: int, warmup: int) -> dict:
    """Part (b): each transport in a fresh pair of ranks on GPUs 0 and 1 (NCCL reads its
    environment once), rank 0 sending, rank 1 receiving and timing."""
    paths, failures = [], {}
    for name, (how, env_extra) in PEER_TRANSPORTS.items():
        _progress(f"bench link: {name}")
        with tempfile.TemporaryDirectory(prefix="transit-link-") as tmp:
            result = Path(tmp) / "rank1.json"
            env = os.environ | MULTICAST_OFF | env_extra | {
                "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,P2P,NET,SHM",
                "NCCL_DEBUG_FILE": f"{tmp}/nccl.%h.%p.log"}
            args = ["--port", str(_free_port()), "--sizes", ",".join(map(str, sizes)),
                    "--repeats", str(repeats), "--warmup", str(warmup), "--out", str(result)]
            with open(Path(tmp) / "rank0.log", "w") as log0, open(Path(tmp) / "rank1.log", "w") as log1:
                procs = [subprocess.Popen([sys.executable, "-m", "transit.bench_link", "peer-rank", "--rank", str(r),
                                           *args], env=env, stdout=log, stderr=subprocess.STDOUT)
                         for r, log in enumerate((log0, log1))]
                deadline = time.monotonic() + PEER_TIMEOUT_S
                try:
                    rcs = [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
                except subprocess.TimeoutExpired:
                    rcs = None
                    for p in procs:
                        p.kill()
                        p.wait()
            via = sorted({m for f in Path(tmp).glob("nccl.*.log") for m in NCCL_VIA.findall(f.read_text(errors="replace"))})
            if rcs == [0, 0] and result.exists():
                paths.append(_path(name, "peer->gpu", how, json.loads(result.read_text())) | {"nccl_via": via})
            else:
                tail = (Path(tmp) / "rank1.log").read_text(errors="replace").splitlines()[-8:]
                failures[name] = {"reason": f"timed out after {PEER_TIMEOUT_S} s" if rcs is None else f"exit codes {rcs}",
                                  "log_tail": tail, "nccl_via": via}
    return {"status": "measured" if not failures else "failed" if not paths else "partial",
            "paths": paths, "failures": failures}


def peer_rank_main(argv: list[str]) -> int:
    """One NCCL rank of measure_peer (run as `python3 -m transit.bench_link peer-rank ...`)."""
    import torch
    import torch.distributed as dist

    p = argparse.ArgumentParser(prog="transit.bench_link peer-rank")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--sizes", required=True)
    p.add_argument("--repeats", type=int, required=True)
    p.add_argument("--warmup", type=int, required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    device = torch.device("cuda", args.rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank, world_size=2,
                            device_id=device)
    largest = max(sizes)
    buf = torch.ones(largest, dtype=torch.uint8, device=device)

    def transfer(n: int) -> Callable[[int], None]:
        if args.rank == 0:
            return lambda j: dist.send(buf[j * n:(j + 1) * n], dst=1)
        return lambda j: dist.recv(buf[j * n:(j + 1) * n], src=0)

    def align() -> None:
        dist.barrier()
        torch.cuda.synchronize()

    points = []
    for n in sizes:
        ops = ops_per_repeat(n, largest)
        points.append(point(n, ops, time_per_op(transfer(n), ops, args.repeats, args.warmup, reset=align)))
    torch.cuda.synchronize()
    dist.destroy_process_group()
    if args.rank == 1:
        Path(args.out).write_text(json.dumps(points))
    return 0


# ---------------------------------------------------------------- the whole measurement

def _nvml_device(torch_device: int):
    """(pynvml, handle) of torch's device, found by its UUID (NVML ignores CUDA_VISIBLE_DEVICES),
    or (None, why not)."""
    try:
        import pynvml
    except ImportError:
        return None, "pynvml is not importable (the nvidia-ml-py package)"
    import torch

    try:
        pynvml.nvmlInit()
        uuid = f"GPU-{torch.cuda.get_device_properties(torch_device).uuid}"
        return pynvml, pynvml.nvmlDeviceGetHandleByUUID(uuid)
    except (pynvml.NVMLError, AttributeError) as exc:
        return None, f"NVML: {exc}"


def _device_facts(nvml, handle) -> dict:
    import torch

    facts = {"name": torch.cuda.get_device_name(0), "count": torch.cuda.device_count(), "cuda": torch.version.cuda,
             "torch": torch.__version__}
    if nvml is None:
        return facts
    for key, call in (("driver", lambda: nvml.nvmlSystemGetDriverVersion()),
                      ("pcie_generation", lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
                      ("pcie_width", lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
                      ("pcie_max_generation", lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
                      ("pcie_max_width", lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(handle))):
        try:
            facts[key] = call()
        except nvml.NVMLError as exc:
            facts[key] = f"NVML: {exc}"
    return facts


def measure(sizes: list[int], repeats: int, warmup: int, peer: bool) -> dict:
    os.environ.update(MULTICAST_OFF)
    import torch

    if not torch.cuda.is_available():
        raise UsageError("no CUDA GPU visible (torch.cuda.is_available() is False): measure on a GPU "
                         "machine, or render a recorded result with --from FILE")
    t0 = time.monotonic()
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")  # the primary context, which the driver calls use
    driver = _Driver(0)
    largest = max(sizes)
    free = driver.free_bytes()
    if free < FREE_MEMORY_FACTOR * largest:
        raise UsageError(f"--max-size {largest} bytes: the GPU has {free} bytes free, under {FREE_MEMORY_FACTOR}x "
                         "that (managed memory is never sized near the free memory)")
    nvml, handle = _nvml_device(0)
    pcie = NvmlPcie(nvml, handle) if nvml is not None else None
    doc = {"schema": SCHEMA, "command": shlex.join(["transit", *sys.argv[1:]]), "git_commit": _git_commit(),
           "hostname": socket.gethostname(), "unix_time": time.time(), "device": _device_facts(nvml, handle),
           "settings": {"sizes": sizes, "repeats": repeats, "warmup": warmup, "timing": "CUDA events, GPU time",
                        "ops_per_repeat": f"min({MAX_OPS_PER_REPEAT}, max(1, min({OPS_PER_REPEAT_TARGET_BYTES}, "
                                          "largest size) // size)), each op on its own slice",
                        "statistic": "median over the repeats of (repeat time / ops)",
                        "environment": MULTICAST_OFF}}
    doc["host_paths"], counted = measure_host(sizes, repeats, warmup, driver, pcie if pcie and not pcie.error else None)
    if pcie is None:
        doc["nvml_pcie"] = {"status": f"not measured: {handle}", "counters_work": None}
    elif pcie.error:
        doc["nvml_pcie"] = {"status": f"not supported: {pcie.error}", "counters_work": False}
    else:
        doc["nvml_pcie"] = pcie_verdict(counted, pcie.idle_rate)
    gpus = torch.cuda.device_count()
    if not peer:
        doc["peer"] = {"status": "not run: --no-peer", "paths": []}
    elif gpus < 2:
        doc["peer"] = {"status": f"skipped: {gpus} GPU visible, the peer paths need 2", "paths": []}
        print(f"transit bench link: peer paths {doc['peer']['status']}; host paths measured", file=sys.stderr)
    else:
        doc["peer"] = measure_peer(sizes, repeats, warmup)
    doc["elapsed_s"] = round(time.monotonic() - t0, 1)
    return doc


def pcie_verdict(counted: dict, idle_rate: dict) -> dict:
    """Whether NVML's PCIe counters work here: they count the bytes of a pinned copy each way
    (DMA: payload only). The zero-copy reads' ratios say what the counters report for a kernel's
    reads in place (each read a request and a completion), the factor that turns a counter's
    reading during training into zero-copy bytes."""
    transfers = {name: reading for name, reading in counted.items() if name != "throughput_rx"}
    copies = [reading for name, reading in transfers.items() if name.startswith("pinned copy")]
    return {"status": "measured", "counters_work": bool(copies) and all(t.get("agrees") for t in copies),
            "verdict_from": "the pinned copies, each way", "tolerance": PCIE_COUNTER_TOLERANCE,
            "idle_bytes_per_s": idle_rate,
            "fields": "NVML_FI_DEV_PCIE_COUNT_TX_BYTES / _RX_BYTES (nvmlDeviceGetFieldValues), the GPU's view: "
                      "RX = host to GPU", "transfers": transfers, "throughput_rx": counted.get("throughput_rx")}


# ---------------------------------------------------------------- output

def all_paths(doc: dict) -> list[dict]:
    return [*doc.get("host_paths", []), *(doc.get("peer") or {}).get("paths", [])]


def print_result(doc: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    paths = all_paths(doc)
    sizes = sorted({p["bytes"] for path in paths for p in path["points"]})
    shown = sizes if len(sizes) <= len(TABLE_SIZES) else [s for s in sizes if s in TABLE_SIZES]
    device = doc.get("device") or {}
    table = Table(title=f"transit bench link: {device.get('name', '?')}, GB/s per transfer size "
                        f"(median of {(doc.get('settings') or {}).get('repeats', '?')})")
    table.add_column("path", no_wrap=True)
    table.add_column(f"us at {format_bytes(sizes[0], decimals=0)}" if sizes else "us", justify="right")
    for size in shown:
        table.add_column(format_bytes(size, decimals=0), justify="right")
    for path in paths:
        by_size = {p["bytes"]: p for p in path["points"]}
        first = by_size.get(sizes[0]) if sizes else None
        table.add_row(path["name"], f"{first['median_s'] * 1e6:.1f}" if first else "-",
                      *(f"{by_size[s]['bandwidth_gbps']:.2f}" if s in by_size else "-" for s in shown))
    console = Console()
    console.print(table)
    peer = doc.get("peer") or {}
    if not peer.get("paths") or peer.get("failures"):
        console.print(f"peer GPU paths: {peer.get('status', 'not recorded')}")
    for name, failure in (peer.get("failures") or {}).items():
        console.print(f"  {name}: {failure['reason']}")
    for path in peer.get("paths", []):
        console.print(f"  {path['name']}: NCCL connected via {', '.join(path.get('nccl_via') or ['(not logged)'])}")
    console.print(_pcie_summary(doc.get("nvml_pcie") or {}))


def _pcie_summary(pcie: dict) -> str:
    if pcie.get("status") != "measured":
        return f"NVML PCIe byte counters: {pcie.get('status', 'not recorded')}"
    verdict = "work" if pcie.get("counters_work") else "do NOT work"
    head = (f"NVML PCIe byte counters: {verdict} (a pinned copy each way within {pcie['tolerance']:.0%} "
            "of the bytes moved, idle traffic subtracted)")
    lines = [head]
    for name, t in pcie["transfers"].items():
        if t is None or "error" in t:
            lines.append(f"  {name}: {(t or {}).get('error', 'not measured')}")
        else:
            lines.append(f"  {name}: {t['counter']} {t['net_of_idle_bytes'] / GIB:.3f} GiB for "
                         f"{t['bytes_moved'] / GIB:.3f} GiB moved (x{t['ratio']:.3f})"
                         f"{', the counter lags' if t.get('lags') else ''}")
    tp = pcie.get("throughput_rx") or {}
    if "error" in tp:
        lines.append(f"  nvmlDeviceGetPcieThroughput: {tp['error']}")
    elif tp:
        lines.append(f"  nvmlDeviceGetPcieThroughput RX integrated: x{tp['ratio']:.3f} of "
                     f"{tp['bytes_moved'] / GIB:.1f} GiB ({tp['samples']} samples)")
    return "\n".join(lines)


def plot(doc: dict, path: Path) -> None:
    """Bandwidth and time per transfer against size, log-log, one line per path: a colour per way
    of moving data, solid host->gpu, dashed gpu->host, dotted peer->gpu."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = {"host->gpu": "-", "gpu->host": "--", "peer->gpu": ":"}
    paths = all_paths(doc)
    methods = list(dict.fromkeys(p["name"].split("-", 1)[1] for p in paths))
    colours = dict(zip(methods, plt.get_cmap("tab10").colors))
    sizes = sorted({pt["bytes"] for p in paths for pt in p["points"]})
    fig, (bw_ax, t_ax) = plt.subplots(1, 2, figsize=(14, 5.2))
    for p in paths:
        xs = [pt["bytes"] for pt in p["points"]]
        kw = {"linestyle": styles.get(p["direction"], "-"), "color": colours[p["name"].split("-", 1)[1]],
              "marker": "o", "markersize": 3.5, "label": p["name"]}
        bw_ax.plot(xs, [pt["bandwidth_gbps"] for pt in p["points"]], **kw)
        t_ax.plot(xs, [pt["median_s"] * 1e6 for pt in p["points"]], **kw)
    for ax, ylabel in ((bw_ax, "bandwidth, GB/s (10^9 bytes/s)"), (t_ax, "time per transfer, us")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes, [format_bytes(n, decimals=0) for n in sizes], rotation=45, ha="right")
        ax.minorticks_off()
        ax.set_xlabel("transfer size")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
    handles, labels = bw_ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8)
    device = doc.get("device") or {}
    peer = doc.get("peer") or {}
    note = "" if peer.get("paths") else f"; peer paths {peer.get('status', 'not recorded')}"
    fig.suptitle(f"transit bench link on {device.get('count', '?')}x {device.get('name', '?')} "
                 f"(median of {(doc.get('settings') or {}).get('repeats', '?')}, commit "
                 f"{str(doc.get('git_commit'))[:9]}){note}", fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.86, 1))
    save_png(fig, path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    if sys.argv[1:2] == ["peer-rank"]:
        sys.exit(peer_rank_main(sys.argv[2:]))
    sys.exit("transit.bench_link: run `transit bench link` (this entry point starts the NCCL ranks)")
