"""`transit doctor`: checks that this node can run TRANSIT jobs, each check with ok/warn/fail and the fix.

The checks read the node the way the components that depend on it do: NVML for the driver and the
GPUs, /sys/module/nvidia_uvm for the UVM driver, the CUDA runtime and CUPTI in libtransit's own search
order (libtransit's transit_cupti_probe does the CUPTI search), the SPANK plugin as srun loads it
(`srun --help`) and as its ELF says it was built, and the report directory by creating a job directory
there the way the plugin does (as root, then given to the user), then writing in it as that user. Checks that need something this
node lacks (Slurm, a GPU) are skipped and say why. Any fail makes the exit code 1.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import pwd
import shutil
import socket
import stat
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from transit import __version__, slurm
from transit.errors import UsageError
from transit.units import format_bytes

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
STATUSES = (OK, WARN, FAIL, SKIP)
GIB = 1 << 30
COMMAND_TIMEOUT_S = 15  # one Slurm or munge command; a controller that does not answer takes this long
DEFAULT_PROBE_USER = "nobody"

# The CUDA runtime, in the order libtransit meets it: the application's copy, which a plain CUDA program
# gets from the loader's search path and PyTorch from the nvidia-* wheels (nvidia/cu13/lib).
CUDART_SONAMES = ("libcudart.so.13", "libcudart.so.12")
CUDART_WHEEL_DIRS = ("cu13/lib", "cuda_runtime/lib")
NVML_SONAME = "libnvidia-ml.so.1"
SLURM_CONF_PATHS = slurm.SLURM_CONF_PATHS
UVM_PARAMETERS = Path("/sys/module/nvidia_uvm/parameters")
UVM_DEVICE = Path("/dev/nvidia-uvm")
# UVM module parameters TRANSIT depends on, with the driver's defaults.
# Without global oversubscription managed memory cannot exceed the GPU's: the overflow TRANSIT exists for.
UVM_REQUIRED = {"uvm_global_oversubscription": "1"}
UVM_EXPECTED = {"uvm_perf_prefetch_enable": "1", "uvm_perf_thrashing_enable": "1"}
# libtransit exports: its public API (transit.h) and the entry points without which it never sees an
# allocation (the runtime's, the driver's, and dlsym/cuGetProcAddress through which frameworks look them up).
LIBTRANSIT_EXPORTS = (
    "transit_version", "transit_mark_iteration", "transit_stats_json", "transit_free", "transit_task_env",
    "transit_task_env_free", "cudaMalloc", "cudaFree", "cuMemAlloc_v2", "cuMemFree_v2", "cuGetProcAddress_v2",
    "cudaGetDriverEntryPoint", "dlsym",
)
# The mode of a job's directory when plugstack.conf gives no report_dir_mode= (the plugin's default).
DEFAULT_REPORT_DIR_MODE = 0o700
# Host DRAM per byte of GPU memory below which there is little room for overflow: at 1.0 the host can
# hold each GPU's memory once more, what a 2x scale-in of a job that filled its GPUs moves out.
MIN_HOST_PER_GPU_BYTE = 1.0


@dataclass
class Check:
    name: str
    status: str
    summary: str
    fix: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Data sources: NVML, ELF files, shared libraries, the Slurm site
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_bytes: int


@dataclass
class Nvml:
    """The NVIDIA driver as NVML sees it. `error` is set when NVML could not be asked; `cpu_only` when
    there is no NVIDIA driver on the node at all."""

    driver: str | None = None
    cuda_driver: int | None = None  # e.g. 13000 for CUDA 13.0
    gpus: list[Gpu] = field(default_factory=list)
    cpu_only: bool = False
    error: str | None = None

    @classmethod
    def read(cls) -> Nvml:
        try:
            import pynvml  # nvidia-ml-py
        except ImportError:
            try:
                ctypes.CDLL(NVML_SONAME)
            except OSError:
                return cls(cpu_only=True, error=f"no NVIDIA driver ({NVML_SONAME} not found)")
            return cls(error=f"{NVML_SONAME} is present but Python's pynvml is not installed")
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound:
            return cls(cpu_only=True, error=f"no NVIDIA driver ({NVML_SONAME} not found)")
        except pynvml.NVMLError as exc:
            return cls(error=f"nvmlInit failed: {exc}")
        try:
            gpus = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                gpus.append(Gpu(i, _text(pynvml.nvmlDeviceGetName(handle)),
                                int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)))
            return cls(driver=_text(pynvml.nvmlSystemGetDriverVersion()),
                       cuda_driver=int(pynvml.nvmlSystemGetCudaDriverVersion()), gpus=gpus)
        except pynvml.NVMLError as exc:
            return cls(error=f"NVML query failed: {exc}")
        finally:
            pynvml.nvmlShutdown()


def _versions(command: list[str]) -> dict[str, str]:
    """{command: "22.05.8"} from `srun --version` or `slurmd -V` ("slurm-wlm 22.05.8"), {} if it fails."""
    result = run_command(command)
    if isinstance(result, str) or result.returncode != 0 or not result.stdout.split():
        return {}
    return {command[0]: result.stdout.split()[-1]}


def _settings(lines: Iterable[str]) -> dict[str, str]:
    """KEY=VALUE (slurm.conf) or KEY = VALUE (scontrol show config) lines, keys lower-cased as Slurm
    reads them."""
    settings = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            settings[key.strip().lower()] = value.strip()
    return settings


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Elf:
    """The dynamic symbols of a 64-bit little-endian ELF shared object (what the loader can find)."""

    def __init__(self, path: Path) -> None:
        self.data = path.read_bytes()
        if self.data[:4] != b"\x7fELF" or self.data[4] != 2 or self.data[5] != 1:
            raise ValueError(f"{path} is not a 64-bit little-endian ELF file")
        shoff, = struct.unpack_from("<Q", self.data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", self.data, 0x3A)
        # (type, addr, offset, size, link) of every section
        self.sections = [struct.unpack_from("<4xI8xQQQI", self.data, shoff + i * shentsize) for i in range(shnum)]
        self.symbols: dict[str, tuple[int, int, int]] = {}  # defined name -> (section, value, size)
        for kind, _, offset, size, link in self.sections:
            if kind != 11:  # SHT_DYNSYM
                continue
            strtab = self.sections[link][2]
            for pos in range(offset, offset + size, 24):
                name_at, _, _, shndx, value, sym_size = struct.unpack_from("<IBBHQQ", self.data, pos)
                if shndx:
                    end = self.data.index(b"\0", strtab + name_at)
                    self.symbols[self.data[strtab + name_at:end].decode()] = (shndx, value, sym_size)

    def read_u32(self, name: str) -> int | None:
        """The value of a defined 4-byte data symbol, read from the file."""
        if name not in self.symbols:
            return None
        shndx, value, size = self.symbols[name]
        _, addr, offset, _, _ = self.sections[shndx]
        return struct.unpack_from("<I", self.data, offset + value - addr)[0] if size == 4 else None


def slurm_version_text(number: int) -> str:
    """SLURM_VERSION_NUMBER (what SPANK_PLUGIN stores in plugin_version) as "22.05.8"."""
    return f"{number >> 16}.{(number >> 8) & 0xFF:02d}.{number & 0xFF}"


def major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def load_cudart(candidate: str) -> tuple[ctypes.CDLL | None, str]:
    """(the library, its runtime version as "13.0"), or (None, why) when it does not load."""
    try:
        lib = ctypes.CDLL(candidate, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        return None, str(exc)
    version = ctypes.c_int(0)
    if lib.cudaRuntimeGetVersion(ctypes.byref(version)) != 0:
        return None, f"{candidate}: cudaRuntimeGetVersion failed"
    return lib, f"{version.value // 1000}.{version.value % 1000 // 10}"


def cudart_candidates() -> list[tuple[str, str]]:
    """(where, name or path) of every CUDA runtime an application could bring."""
    found = [("loader search path", soname) for soname in CUDART_SONAMES]
    try:
        import nvidia  # the nvidia-* wheels' namespace package, as PyTorch's pip build uses them
    except ImportError:
        return found
    for root in nvidia.__path__:
        for sub in CUDART_WHEEL_DIRS:
            for soname in CUDART_SONAMES:
                if (Path(root) / sub / soname).is_file():
                    found.append(("nvidia-* wheel", str(Path(root) / sub / soname)))
    return found


def run_command(args: list[str], env: dict[str, str] | None = None, user: pwd.struct_passwd | None = None,
                stdin: str | None = None) -> subprocess.CompletedProcess[str] | str:
    """The finished command, or why it could not run (missing, timed out)."""
    as_user: dict[str, Any] = {}
    if user is not None:
        as_user = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": [], "cwd": "/"}
    try:
        return subprocess.run(args, capture_output=True, text=True, check=False, env=env, input=stdin,
                              timeout=COMMAND_TIMEOUT_S, **as_user)
    except FileNotFoundError:
        return f"{args[0]} not found"
    except subprocess.TimeoutExpired:
        return f"`{' '.join(args)}` did not finish in {COMMAND_TIMEOUT_S}s"


def _last_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = (result.stderr.strip() or result.stdout.strip()).splitlines()
    return lines[-1][:200] if lines else f"exit code {result.returncode}"


@dataclass
class SlurmSite:
    """The Slurm installation and configuration this node runs: versions, slurm.conf, plugstack.conf's
    spank_transit.so line. `missing` says what is absent when Slurm cannot be checked at all."""

    versions: dict[str, str] = field(default_factory=dict)  # command -> "22.05.8"
    slurm_conf: str | None = None
    config: dict[str, str] = field(default_factory=dict)
    plugstack: str | None = None
    plugin: Path | None = None  # the spank_transit.so that plugstack.conf loads
    plugin_args: dict[str, str] = field(default_factory=dict)
    missing: str | None = None

    @classmethod
    def read(cls) -> SlurmSite:
        site = cls()
        if not shutil.which("srun") and not shutil.which("slurmd"):
            site.missing = "Slurm is not installed here (no srun or slurmd on PATH)"
            return site
        site.versions = _versions(["slurmd", "-V"])  # needs no configuration
        site.slurm_conf, site.config = cls._config()
        if not site.config:
            site.missing = f"no Slurm configuration: {site.slurm_conf} is unreadable"
            if "SLURM_CONF" not in os.environ:
                site.missing += " and slurmctld does not answer `scontrol show config`"
            return site
        site.versions.update(_versions(["srun", "--version"]))
        site.plugstack = site.config.get("plugstackconfig") or str(Path(site.slurm_conf).parent / "plugstack.conf")
        for path in slurm._plugstack_files(site.plugstack):  # plugstack.conf and its includes
            for line in Path(path).read_text(encoding="utf-8").splitlines():
                words = line.split("#", 1)[0].split()
                if len(words) >= 2 and words[0] in ("required", "optional") and "spank_transit" in words[1]:
                    site.plugin = Path(words[1])
                    site.plugin_args = dict(w.split("=", 1) for w in words[2:] if "=" in w)
        return site

    @staticmethod
    def _config() -> tuple[str, dict[str, str]]:
        """(where, slurm.conf's settings with lower-case keys). The node's own file comes first: srun and
        slurmstepd read plugstack.conf through it. A configless node has only slurmd's cached copy, or
        the controller's `scontrol show config`. A SLURM_CONF naming a missing file is not passed on to
        Slurm's commands, which retry it for 60 s."""
        paths = [os.environ["SLURM_CONF"]] if "SLURM_CONF" in os.environ else list(SLURM_CONF_PATHS)
        for path in paths:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError:
                continue
            return path, _settings(line.split("#", 1)[0] for line in text.splitlines())
        if "SLURM_CONF" in os.environ:
            return paths[0], {}
        result = run_command(["scontrol", "show", "config"])
        if isinstance(result, subprocess.CompletedProcess) and result.returncode == 0:
            return "scontrol show config", _settings(result.stdout.splitlines())
        return paths[0], {}

    def munge_socket(self) -> str | None:
        """The munge socket Slurm uses (AuthInfo socket=...), or None for munge's default."""
        for part in self.config.get("authinfo", "").split(","):
            if part.strip().startswith("socket="):
                return part.strip().removeprefix("socket=")
        return None


# ---------------------------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------------------------


@dataclass
class Doctor:
    """Runs the checks in order; later checks use what earlier ones found."""

    probe_user: pwd.struct_passwd
    report_dir: str | None = None  # --report-dir; None: plugstack.conf's report_dir=
    nvml: Nvml = field(default_factory=Nvml)
    site: SlurmSite = field(default_factory=SlurmSite)
    cudart: ctypes.CDLL | None = None

    def checks(self) -> tuple[Callable[[], Check], ...]:
        return (self.check_gpus, self.check_uvm, self.check_cuda_runtime, self.check_cupti, self.check_memory,
                self.check_slurm, self.check_plugin_registered, self.check_plugin_version, self.check_libtransit,
                self.check_report_dir, self.check_munge, self.check_slurmd)

    def run(self, progress: Callable[[str], None] = lambda name: None) -> list[Check]:
        self.nvml = Nvml.read()
        self.site = SlurmSite.read()
        results = []
        for check in self.checks():
            name = check.__name__.removeprefix("check_")
            progress(name)
            try:
                results.append(check())
            except Exception as exc:  # noqa: BLE001 - a node the checks did not foresee: report, go on
                results.append(Check(name, FAIL, f"the check itself failed: {type(exc).__name__}: {exc}",
                                     "report this to the TRANSIT developers with this output"))
        return results

    # -- GPU node ------------------------------------------------------------------------------

    def check_gpus(self) -> Check:
        nvml = self.nvml
        if nvml.cpu_only:
            return Check("gpus", WARN, f"CPU-only node: {nvml.error}; TRANSIT stays inert here",
                         "on a GPU node, install the NVIDIA driver (it provides libnvidia-ml.so.1)")
        if nvml.error:
            return Check("gpus", FAIL, nvml.error,
                         "pip install nvidia-ml-py" if "pynvml" in nvml.error else
                         "check the driver with nvidia-smi (a driver/library version mismatch needs a reboot)")
        if not nvml.gpus:
            return Check("gpus", FAIL, f"driver {nvml.driver} sees no GPU",
                         "check nvidia-smi and the GPUs' cgroup device access", {"driver": nvml.driver})
        names = sorted({g.name for g in nvml.gpus})
        sizes = sorted({g.memory_bytes for g in nvml.gpus})
        cuda = f"{nvml.cuda_driver // 1000}.{nvml.cuda_driver % 1000 // 10}" if nvml.cuda_driver else "?"
        return Check("gpus", OK, f"{len(nvml.gpus)} x {', '.join(names)} ({', '.join(format_bytes(s) for s in sizes)}); "
                     f"driver {nvml.driver} (CUDA {cuda})",
                     details={"driver": nvml.driver, "cuda_driver": cuda, "gpus": [asdict(g) for g in nvml.gpus]})

    def check_uvm(self) -> Check:
        if not UVM_PARAMETERS.is_dir():
            if not self.nvml.gpus:
                return Check("uvm", SKIP, "no GPU: the UVM driver is not needed here")
            return Check("uvm", FAIL, "the nvidia_uvm kernel module is not loaded: managed memory is unavailable",
                         "modprobe nvidia-uvm (and add it to /etc/modules-load.d)")
        params = {}
        for p in sorted(UVM_PARAMETERS.iterdir()):
            try:
                params[p.name] = p.read_text().strip()
            except OSError:  # some parameters are root-only
                continue
        details: dict[str, Any] = {"parameters": params, "device": str(UVM_DEVICE)}
        wrong = {k: v for k, v in UVM_REQUIRED.items() if k in params and params[k] != v}
        if wrong:
            return Check("uvm", FAIL, ", ".join(f"{k}={params[k]}" for k in wrong) +
                         ": managed memory cannot exceed GPU memory, which TRANSIT exists for",
                         "options nvidia_uvm " + " ".join(f"{k}={v}" for k, v in wrong.items()) +
                         " in /etc/modprobe.d/, then reload nvidia_uvm", details)
        if not UVM_DEVICE.exists():
            return Check("uvm", FAIL, f"{UVM_DEVICE} does not exist", "nvidia-modprobe -u -c=0", details)
        mode = UVM_DEVICE.stat().st_mode
        details["device_mode"] = oct(stat.S_IMODE(mode))
        if mode & 0o006 != 0o006:
            return Check("uvm", WARN, f"{UVM_DEVICE} is mode {oct(stat.S_IMODE(mode))}: users may not open it",
                         f"chmod 0666 {UVM_DEVICE} (and allow it in cgroup.conf's ConstrainDevices setup)", details)
        changed = {k: v for k, v in UVM_EXPECTED.items() if k in params and params[k] != v}
        if changed:
            return Check("uvm", WARN, ", ".join(f"{k}={params[k]}" for k in changed) +
                         " (driver default " + ", ".join(f"{k}={v}" for k, v in changed.items()) +
                         ")",
                         "remove these options from /etc/modprobe.d/ unless the site needs them", details)
        loaded = ", ".join(f"{k}={params[k]}" for k in (*UVM_REQUIRED, *UVM_EXPECTED) if k in params)
        return Check("uvm", OK, f"nvidia_uvm loaded, {loaded}", details=details)

    def check_cuda_runtime(self) -> Check:
        tried = {}
        chosen = None
        for where, candidate in cudart_candidates():
            lib, version = load_cudart(candidate)
            tried[candidate] = version if lib else f"not loadable: {version}"
            if lib and chosen is None:
                self.cudart, chosen = lib, (where, candidate, version)
        details: dict[str, Any] = {"candidates": tried}
        if chosen is None:
            return Check("cuda_runtime", FAIL, "no CUDA runtime (libcudart.so.13 or .12) loads here",
                         "pip install nvidia-cuda-runtime (PyTorch's wheels bring it) or install the CUDA toolkit",
                         details)
        where, candidate, version = chosen
        path = _loaded_path(self.cudart, "cudaRuntimeGetVersion") or candidate
        details.update(path=path, version=version)
        if self.nvml.cuda_driver and int(version.split(".")[0]) > self.nvml.cuda_driver // 1000:
            return Check("cuda_runtime", FAIL, f"CUDA runtime {version} ({path}) is newer than the driver's "
                         f"CUDA {self.nvml.cuda_driver // 1000}", "upgrade the NVIDIA driver", details)
        return Check("cuda_runtime", OK, f"CUDA runtime {version} from the {where}: {path}", details=details)

    def check_cupti(self) -> Check:
        if self.cudart is None:
            return Check("cupti", SKIP, "no CUDA runtime: libtransit looks for CUPTI beside it")
        try:
            lib = ctypes.CDLL(str(self.libtransit_path()))
        except (UsageError, ImportError, OSError) as exc:
            return Check("cupti", SKIP, f"libtransit does not load, and it does the search: {exc}")
        out = ctypes.create_string_buffer(1024)
        lib.transit_cupti_probe.argtypes = (ctypes.c_char_p, ctypes.c_size_t)
        found = lib.transit_cupti_probe(out, len(out)) == 0
        text = out.value.decode(errors="replace")
        if found:
            return Check("cupti", OK, f"libcupti loads: {text}", details={"path": text})
        return Check("cupti", WARN, f"{text}: without CUPTI the recorder is off (no migration statistics; "
                     "prefetch acts as base)", "pip install nvidia-cuda-cupti (it installs beside the runtime)",
                     {"reason": text})

    def check_memory(self) -> Check:
        if not self.nvml.gpus:
            return Check("memory", SKIP, "no GPU to compare host memory with")
        host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        gpu = sum(g.memory_bytes for g in self.nvml.gpus)
        ratio = host / gpu
        details = {"host_bytes": host, "gpu_bytes": gpu, "host_per_gpu_byte": round(ratio, 3)}
        summary = f"host DRAM {format_bytes(host)} is {ratio:.2f}x the GPUs' {format_bytes(gpu)}"
        if ratio < MIN_HOST_PER_GPU_BYTE:
            return Check("memory", WARN, f"{summary}: less than {MIN_HOST_PER_GPU_BYTE:g}x leaves little room "
                         "for overflow (a 2x scale-in of a job that fills its GPUs moves that much to the host)",
                         "plan smaller scale-ins on these nodes (transit plan) or add host memory", details)
        return Check("memory", OK, summary, details=details)

    # -- Slurm ---------------------------------------------------------------------------------

    def check_slurm(self) -> Check:
        details = {"versions": self.site.versions, "slurm_conf": self.site.slurm_conf,
                   "plugstack": self.site.plugstack}
        if self.site.missing:
            return Check("slurm", FAIL, self.site.missing,
                         "install Slurm (srun, slurmd) and its configuration, or point SLURM_CONF at slurm.conf",
                         details)
        versions = ", ".join(f"{k} {v}" for k, v in self.site.versions.items())
        if len({major_minor(v) for v in self.site.versions.values()}) > 1:
            return Check("slurm", FAIL, f"Slurm commands of different releases: {versions}",
                         "install one Slurm release on the node", details)
        return Check("slurm", OK, f"{versions}; {self.site.slurm_conf}", details=details)

    def _needs_plugin(self, name: str) -> Check | None:
        if self.site.missing:
            return Check(name, SKIP, f"needs Slurm: {self.site.missing}")
        if self.site.plugin is None:
            return Check(name, FAIL, f"no spank_transit.so line in {self.site.plugstack} (or a file it includes)",
                         "add `required /path/spank_transit.so lib=/path/libtransit.so report_dir=DIR` to "
                         "plugstack.conf (docs/admin.md)", {"plugstack": self.site.plugstack})
        return None

    def check_plugin_registered(self) -> Check:
        if blocked := self._needs_plugin("plugin_registered"):
            return blocked
        result = run_command(["srun", "--help"])
        if isinstance(result, str):
            return Check("plugin_registered", FAIL, result, "check srun and slurm.conf")
        registered = "--transit" in result.stdout
        details = {"plugin": str(self.site.plugin), "arguments": self.site.plugin_args}
        if not registered:
            # the plugin's own line says what it refused (a plugstack.conf argument, lib=): quoted as srun
            # printed it, with the fix it names; else Slurm's line about the plugin file
            own = [line for line in result.stderr.splitlines() if "error: transit: " in line]
            said = own or [line for line in result.stderr.splitlines() if str(self.site.plugin) in line]
            fix = ("fix the spank_transit.so line in plugstack.conf as srun's line says" if own else
                   "the plugin must be readable and built for this Slurm (the plugin_version check)")
            return Check("plugin_registered", FAIL, f"srun --help shows no --transit: srun did not load "
                         f"{self.site.plugin}: {(said[0] if said else _last_line(result))[:400]}", fix,
                         details | {"srun_error": said[0] if said else _last_line(result)})
        return Check("plugin_registered", OK, f"srun --help shows --transit ({self.site.plugin})", details=details)

    def check_plugin_version(self) -> Check:
        if blocked := self._needs_plugin("plugin_version"):
            return blocked
        assert self.site.plugin is not None
        try:
            built_number = Elf(self.site.plugin).read_u32("plugin_version")
        except (OSError, ValueError) as exc:
            return Check("plugin_version", FAIL, f"cannot read {self.site.plugin}: {exc}",
                         "install the plugin where plugstack.conf says")
        if built_number is None:
            return Check("plugin_version", FAIL, f"{self.site.plugin} has no plugin_version symbol: not a SPANK "
                         "plugin", "rebuild spank_transit.so (docs/admin.md)")
        built = slurm_version_text(built_number)
        details = {"built_for": built, "running": self.site.versions}
        other = {k: v for k, v in self.site.versions.items() if major_minor(v) != major_minor(built)}
        if other:
            return Check("plugin_version", FAIL, f"{self.site.plugin} was built for Slurm {built}, this node runs "
                         + ", ".join(f"{k} {v}" for k, v in other.items()) + "; Slurm loads only its own release's "
                         "plugins", "rebuild spank_transit.so against this Slurm's slurm/spank.h (docs/admin.md)",
                         details)
        return Check("plugin_version", OK, f"built for Slurm {built}, running "
                     + ", ".join(f"{k} {v}" for k, v in self.site.versions.items()), details=details)

    def libtransit_path(self) -> Path:
        """plugstack.conf's lib= where the plugin is registered, else the Python package's own."""
        configured = self.site.plugin_args.get("lib")
        return Path(configured) if configured else package_lib()

    def check_libtransit(self) -> Check:
        configured = self.site.plugin_args.get("lib")
        try:
            path = self.libtransit_path()
        except ImportError as exc:  # cffi: `transit run` needs it too
            return Check("libtransit", FAIL, f"the transit package cannot load its libtransit binding: {exc}",
                         "pip install cffi")
        except UsageError as exc:
            return Check("libtransit", FAIL, str(exc), "build libtransit (docs/admin.md)")
        source = "plugstack.conf lib=" if configured else "the transit package"
        try:
            elf = Elf(path)
        except (OSError, ValueError) as exc:
            return Check("libtransit", FAIL, f"{source} {path}: {exc}", "install libtransit.so there")
        missing = [name for name in LIBTRANSIT_EXPORTS if name not in elf.symbols]
        details: dict[str, Any] = {"path": str(path), "source": source, "missing_exports": missing}
        if missing:
            return Check("libtransit", FAIL, f"{path} does not export {', '.join(missing)}: not libtransit, or "
                         "a broken build", "rebuild and reinstall libtransit", details)
        version = ctypes.CDLL(str(path)).transit_version
        version.restype = ctypes.c_char_p
        details["version"] = version().decode()
        # What a user's task does: the loader preloads the library as that user.
        user = self.probe_user if os.geteuid() == 0 else None
        result = run_command(["/bin/true"], env={"LD_PRELOAD": str(path), "PATH": "/usr/bin:/bin"}, user=user)
        who = self.probe_user.pw_name if user else pwd.getpwuid(os.geteuid()).pw_name
        if isinstance(result, str) or result.returncode != 0 or "cannot be preloaded" in result.stderr:
            why = result if isinstance(result, str) else _last_line(result)
            return Check("libtransit", FAIL, f"{path} does not preload as {who}: {why}",
                         "make the library and its directories readable by every user", details)
        return Check("libtransit", OK, f"libtransit {details['version']} at {path} ({source}); exports "
                     f"complete; preloads as {who}", details=details)

    def check_report_dir(self) -> Check:
        report_dir = self.report_dir or self.site.plugin_args.get("report_dir")
        if report_dir is None:
            if self.site.missing or self.site.plugin is None:
                return Check("report_dir", SKIP, "no report directory to check: Slurm's plugstack.conf gives none "
                             "here (pass --report-dir DIR)")
            return Check("report_dir", WARN, "plugstack.conf gives no report_dir=: jobs write no stats unless "
                         "users pass --transit-report-dir", "add report_dir=DIR to the spank_transit.so line")
        mode = self.site.plugin_args.get("report_dir_mode")
        return ReportDirProbe(Path(report_dir), self.probe_user,
                              int(mode, 8) if mode else DEFAULT_REPORT_DIR_MODE).check()

    def check_munge(self) -> Check:
        if self.site.missing:
            return Check("munge", SKIP, f"needs Slurm: {self.site.missing}")
        socket_path = self.site.munge_socket()
        args = ["--socket", socket_path] if socket_path else []
        encoded = run_command(["munge", "-n", *args])
        if isinstance(encoded, str) or encoded.returncode != 0:
            why = encoded if isinstance(encoded, str) else _last_line(encoded)
            return Check("munge", FAIL, f"munge cannot encode a credential: {why}",
                         "start munged (systemctl start munge) with the site's key", {"socket": socket_path})
        decoded = run_command(["unmunge", *args], stdin=encoded.stdout)
        if isinstance(decoded, str) or decoded.returncode != 0:
            why = decoded if isinstance(decoded, str) else _last_line(decoded)
            return Check("munge", FAIL, f"unmunge rejects this node's own credential: {why}",
                         "check munged's key and clock", {"socket": socket_path})
        return Check("munge", OK, f"munge encodes and decodes ({socket_path or 'default socket'})",
                     details={"socket": socket_path})

    def check_slurmd(self) -> Check:
        if self.site.missing:
            return Check("slurmd", SKIP, f"needs Slurm: {self.site.missing}")
        ping = run_command(["scontrol", "ping"])
        if isinstance(ping, str) or ping.returncode != 0 or "UP" not in ping.stdout:
            why = ping if isinstance(ping, str) else _last_line(ping)
            return Check("slurmd", FAIL, f"slurmctld does not answer: {why}",
                         "start slurmctld, or check SlurmctldHost and the network")
        nodes = run_command(["scontrol", "show", "node", "-o"])
        if isinstance(nodes, str) or nodes.returncode != 0:
            return Check("slurmd", FAIL, f"scontrol show node failed: {nodes if isinstance(nodes, str) else _last_line(nodes)}",
                         "check slurmctld's log")
        here = {platform.node().split(".")[0], socket.gethostname().split(".")[0]}
        states = {}
        for line in nodes.stdout.splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            if fields.get("NodeHostName", "").split(".")[0] in here or fields.get("NodeName") in here:
                states[fields.get("NodeName", "?")] = fields.get("State", "?")
        if not states:
            return Check("slurmd", WARN, "slurmctld answers, but no Slurm node runs on this host (a login node?)",
                         "run transit doctor on a compute node")
        bad = {n: s for n, s in states.items() if any(w in s for w in ("DOWN", "NOT_RESPONDING", "FAIL"))}
        summary = ", ".join(f"{n} {s}" for n, s in sorted(states.items()))
        if bad:
            return Check("slurmd", FAIL, f"slurmctld reaches this host's slurmd badly: {summary}",
                         "start slurmd, then scontrol update nodename=NODE state=resume", {"nodes": states})
        return Check("slurmd", OK, f"slurmctld answers; this host's nodes: {summary}", details={"nodes": states})


@dataclass
class ReportDirProbe:
    """Creates a job directory in the site's report dir as the plugin does (as root, given to the job's
    user with report_dir_mode=), then writes in it as a non-root user."""

    report_dir: Path
    user: pwd.struct_passwd
    mode: int = DEFAULT_REPORT_DIR_MODE

    def check(self) -> Check:
        details: dict[str, Any] = {"path": str(self.report_dir), "probe_user": self.user.pw_name,
                                   "job_dir_mode": oct(self.mode)}
        try:
            st = os.stat(self.report_dir, follow_symlinks=False)
        except OSError as exc:
            return Check("report_dir", FAIL, f"{self.report_dir}: {exc.strerror}",
                         f"mkdir -m 0755 {self.report_dir} (root-owned; on a file system every node shares)", details)
        if not stat.S_ISDIR(st.st_mode):
            return Check("report_dir", FAIL, f"{self.report_dir} is not a directory (a symlink is not followed)",
                         "point report_dir= at the real directory", details)
        mode = stat.S_IMODE(st.st_mode)
        details.update(mode=oct(mode), owner=_user_name(st.st_uid))
        if mode & 0o002 and not mode & stat.S_ISVTX:
            return Check("report_dir", FAIL, f"{self.report_dir} is world-writable without the sticky bit: any "
                         "user can remove another's job directory", f"chmod 0755 {self.report_dir}", details)
        if os.geteuid() != 0:
            if not os.access(self.report_dir, os.X_OK):
                return Check("report_dir", FAIL, f"{self.user.pw_name} cannot enter {self.report_dir}, so cannot "
                             "reach a job directory in it", f"chmod o+x {self.report_dir} and its parents", details)
            return Check("report_dir", WARN, f"{self.report_dir} ({oct(mode)}) is reachable; whether root can "
                         "create job directories in it is checked only when the doctor runs as root",
                         "run transit doctor as root", details)
        why = self._root_creates_for_user(self.report_dir / f".transit-doctor-{os.getpid()}")
        if why is not None:
            return Check("report_dir", FAIL, f"a job directory created as root in {self.report_dir} is not "
                         f"writable by {self.user.pw_name}: {why}",
                         "the directory must be writable by root on every node (no root squash on NFS) and "
                         "traversable by users (o+x on it and its parents)", details)
        return Check("report_dir", OK, f"{self.report_dir} ({oct(mode)}, {details['owner']}): a job directory "
                     f"created as root and given to {self.user.pw_name} ({oct(self.mode)}) is writable by them",
                     details=details)

    def _root_creates_for_user(self, path: Path) -> str | None:
        """None when root can create a directory at `path`, give it to the user, and the user can write in it."""
        try:
            os.mkdir(path, 0o700)
        except OSError as exc:
            return f"root cannot create {path}: {exc.strerror}"
        try:
            os.chown(path, self.user.pw_uid, self.user.pw_gid, follow_symlinks=False)
            os.chmod(path, self.mode)
            result = run_command(["/bin/sh", "-c", 'echo probe > "$1/probe"', "sh", str(path)], user=self.user)
            if isinstance(result, str):
                return result
            return None if result.returncode == 0 else _last_line(result)
        except OSError as exc:
            return f"root cannot give {path} to {self.user.pw_name}: {exc.strerror}"
        finally:
            shutil.rmtree(path, ignore_errors=True)


def package_lib() -> Path:
    """The transit package's own libtransit.so. Imported here, not at the top: the doctor runs without cffi,
    which a broken install may lack."""
    from transit import _native

    return _native.lib_path()


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _loaded_path(lib: ctypes.CDLL, symbol: str) -> str | None:
    """The file a loaded library came from (dladdr on one of its functions)."""

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

    info = DlInfo()
    libdl = ctypes.CDLL(None)
    if not libdl.dladdr(ctypes.cast(getattr(lib, symbol), ctypes.c_void_p), ctypes.byref(info)):
        return None
    return os.path.realpath(info.dli_fname.decode()) if info.dli_fname else None


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "doctor", help="check that this node can run TRANSIT jobs",
        description="Check this node for TRANSIT: NVIDIA driver and GPUs, the UVM module, CUDA runtime and "
                    "CUPTI, libtransit, the SPANK plugin (registered, built for this Slurm), the report "
                    "directory, host memory against GPU memory, munge and slurmd. Each check is ok, warn, fail "
                    "or skip (with why) and says the fix; the exit code is 1 when any check fails.")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    parser.add_argument("--report-dir", metavar="DIR",
                        help="check this report directory instead of plugstack.conf's report_dir=")
    parser.add_argument("--as-user", metavar="USER", default=DEFAULT_PROBE_USER,
                        help=f"non-root user for the permission checks when run as root (default: {DEFAULT_PROBE_USER})")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    try:
        probe_user = pwd.getpwnam(args.as_user)
    except KeyError:
        raise UsageError(f"--as-user: no such user {args.as_user[:80]!r}; give an existing non-root user") from None
    if probe_user.pw_uid == 0:
        raise UsageError(f"--as-user: {args.as_user[:80]!r} is root; give a non-root user")
    if args.report_dir is not None and not os.path.isabs(args.report_dir):
        raise UsageError(f"--report-dir: {args.report_dir[:80]!r} is not an absolute path")
    doctor = Doctor(probe_user=probe_user, report_dir=args.report_dir)
    if sys.stderr.isatty() and not args.json:
        from rich.console import Console

        with Console(stderr=True).status("transit doctor") as status:
            checks = doctor.run(lambda name: status.update(f"transit doctor: {name}"))
    else:
        checks = doctor.run()
    failed = any(c.status == FAIL for c in checks)
    if args.json:
        print(json.dumps(document(checks, failed), indent=1))
    else:
        print_text(checks)
    return 1 if failed else 0


def document(checks: list[Check], failed: bool) -> dict[str, Any]:
    return {
        "schema": "transit.doctor/1",
        "host": socket.gethostname(),
        "user": pwd.getpwuid(os.geteuid()).pw_name,
        "time_unix": int(time.time()),
        "transit_version": __version__,
        "python": sys.executable,
        "counts": {s: sum(c.status == s for c in checks) for s in STATUSES},
        "exit_code": 1 if failed else 0,
        "checks": [asdict(c) for c in checks],
    }


STATUS_STYLE = {OK: "green", WARN: "yellow", FAIL: "bold red", SKIP: "dim"}


def print_text(checks: list[Check]) -> None:
    """One row a check (status, name, summary) and one more with its fix where it warns or fails. On a
    terminal the summaries wrap in their column; into a pipe each stays one line, for grep."""
    from rich.console import Console
    from rich.table import Table

    from transit.tables import as_text

    grid = Table.grid(padding=(0, 2))
    for _ in range(3):
        grid.add_column()
    for c in checks:
        grid.add_row(f"[{STATUS_STYLE[c.status]}]{c.status}[/]", c.name, c.summary)
        if c.fix and c.status in (WARN, FAIL):
            grid.add_row("", "", f"fix: {c.fix}")
    if sys.stdout.isatty():
        Console(highlight=False).print(grid)
    else:
        print(as_text(grid))
    counts = ", ".join(f"{sum(c.status == s for c in checks)} {s}" for s in STATUSES)
    print(f"transit doctor: {counts}")
