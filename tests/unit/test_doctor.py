"""transit doctor on this machine: the ELF reader on the built libraries, each check's verdict on
prepared inputs (UVM parameters, memory sizes, NVML states, report directories with real permissions,
checked as the non-root user `nobody`), and the command's JSON and exit code without a Slurm config."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from transit import _native, doctor
from transit.doctor import FAIL, OK, SKIP, WARN, Doctor, Elf, Gpu, Nvml, ReportDirProbe, SlurmSite

REPO = Path(__file__).resolve().parents[2]
PLUGIN = _native.LIB_PATH.parent / "spank_transit.so"
GIB = 1 << 30

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the report dir probe switches to nobody: run as root")


def probe_user() -> pwd.struct_passwd:
    return pwd.getpwnam("nobody")


def slurm_header_version() -> int:
    """SLURM_VERSION_NUMBER of the slurm headers the build used (CMake's TRANSIT_SLURM_INCLUDE)."""
    include = "/usr/include"
    cache = REPO / "build" / "CMakeCache.txt"
    if cache.is_file():
        found = re.search(r"^TRANSIT_SLURM_INCLUDE:PATH=(.*)$", cache.read_text(), re.MULTILINE)
        include = found.group(1) if found else include
    text = (Path(include) / "slurm" / "slurm_version.h").read_text()
    return int(re.search(r"#define SLURM_VERSION_NUMBER (0x[0-9a-fA-F]+)", text).group(1), 16)


# -- ELF ------------------------------------------------------------------------------------------


@pytest.mark.skipif(not PLUGIN.is_file(), reason="spank_transit.so is not built (no slurm/spank.h)")
def test_plugin_version_is_the_slurm_release_of_its_headers() -> None:
    elf = Elf(PLUGIN)
    assert elf.read_u32("plugin_version") == slurm_header_version()
    assert "slurm_spank_init" in elf.symbols  # exported by the version script
    assert "transit_conf_parse" not in elf.symbols  # local to the plugin
    assert "spank_getenv" not in elf.symbols  # imported from Slurm: undefined here


def test_libtransit_exports_what_the_doctor_requires() -> None:
    elf = Elf(_native.lib_path())
    assert [name for name in doctor.LIBTRANSIT_EXPORTS if name not in elf.symbols] == []
    assert elf.read_u32("transit_version") is None  # a function, not a 4-byte datum


def test_elf_reader_rejects_other_files(tmp_path: Path) -> None:
    text = tmp_path / "libtransit.so"
    text.write_text("not a library\n")
    with pytest.raises(ValueError, match="not a 64-bit little-endian ELF"):
        Elf(text)


@pytest.mark.parametrize(("number", "text"), [(0x160508, "22.05.8"), (0x180B05, "24.11.5"), (0x170200, "23.02.0")])
def test_slurm_version_numbers(number: int, text: str) -> None:
    assert doctor.slurm_version_text(number) == text


# -- GPU checks on prepared NVML states -----------------------------------------------------------


def doctor_with(nvml: Nvml) -> Doctor:
    return Doctor(probe_user=probe_user(), nvml=nvml)


def test_cpu_only_is_a_warning_and_the_gpu_checks_skip() -> None:
    d = doctor_with(Nvml(cpu_only=True, error="no NVIDIA driver (libnvidia-ml.so.1 not found)"))
    gpus = d.check_gpus()
    assert (gpus.status, gpus.summary.startswith("CPU-only node")) == (WARN, True)
    assert d.check_memory().status == SKIP
    if not doctor.UVM_PARAMETERS.is_dir():
        assert d.check_uvm().status == SKIP


@pytest.mark.parametrize(
    ("nvml", "status", "fix"),
    [
        (Nvml(error="nvmlInit failed: Driver Not Loaded"), FAIL, "nvidia-smi"),
        (Nvml(error="libnvidia-ml.so.1 is present but Python's pynvml is not installed"), FAIL, "nvidia-ml-py"),
        (Nvml(driver="580.159.04", cuda_driver=13000, gpus=[]), FAIL, "cgroup"),
    ],
)
def test_driver_problems_fail(nvml: Nvml, status: str, fix: str) -> None:
    check = doctor_with(nvml).check_gpus()
    assert check.status == status
    assert fix in (check.fix or "")


def test_gpus_are_listed() -> None:
    nvml = Nvml(driver="580.159.04", cuda_driver=13000, gpus=[Gpu(0, "NVIDIA H200", 150 * GIB)] * 2)
    check = doctor_with(nvml).check_gpus()
    assert (check.status, check.summary) == (OK, "2 x NVIDIA H200 (150.0 GiB); driver 580.159.04 (CUDA 13.0)")


@pytest.mark.parametrize(("gpu_gib", "status"), [(1, OK), (1 << 20, WARN)])
def test_host_memory_against_gpu_memory(gpu_gib: int, status: str) -> None:
    check = doctor_with(Nvml(gpus=[Gpu(0, "G", gpu_gib * GIB)])).check_memory()
    assert check.status == status
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert check.details["host_bytes"] == host and check.details["gpu_bytes"] == gpu_gib * GIB


@pytest.fixture
def uvm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for /sys/module/nvidia_uvm/parameters with the driver's defaults, and a device file."""
    params = tmp_path / "parameters"
    params.mkdir()
    for name, value in {**doctor.UVM_REQUIRED, **doctor.UVM_EXPECTED, "uvm_disable_hmm": "N"}.items():
        (params / name).write_text(value + "\n")
    device = tmp_path / "nvidia-uvm"
    device.write_text("")
    device.chmod(0o666)
    monkeypatch.setattr(doctor, "UVM_PARAMETERS", params)
    monkeypatch.setattr(doctor, "UVM_DEVICE", device)
    return params


GPU_NVML = Nvml(driver="580.159.04", cuda_driver=13000, gpus=[Gpu(0, "G", 80 * GIB)])


def test_uvm_defaults_are_ok(uvm: Path) -> None:
    check = doctor_with(GPU_NVML).check_uvm()
    assert check.status == OK, check.summary
    assert check.details["parameters"]["uvm_disable_hmm"] == "N"


@pytest.mark.parametrize(
    ("name", "value", "status"),
    [("uvm_global_oversubscription", "0", FAIL), ("uvm_perf_prefetch_enable", "0", WARN),
     ("uvm_perf_thrashing_enable", "0", WARN)],
)
def test_uvm_parameters_off_their_defaults(uvm: Path, name: str, value: str, status: str) -> None:
    (uvm / name).write_text(value + "\n")
    check = doctor_with(GPU_NVML).check_uvm()
    assert check.status == status
    assert f"{name}={value}" in check.summary


def test_uvm_device_closed_to_users_warns(uvm: Path) -> None:
    doctor.UVM_DEVICE.chmod(0o660)
    assert doctor_with(GPU_NVML).check_uvm().status == WARN


def test_uvm_module_missing_on_a_gpu_node_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "UVM_PARAMETERS", tmp_path / "absent")
    check = doctor_with(GPU_NVML).check_uvm()
    assert (check.status, check.fix) == (FAIL, "modprobe nvidia-uvm (and add it to /etc/modules-load.d)")


def test_cuda_runtime_newer_than_the_driver_fails() -> None:
    d = doctor_with(Nvml(driver="535.0", cuda_driver=12020, gpus=[Gpu(0, "G", GIB)]))
    check = d.check_cuda_runtime()
    if d.cudart is None:
        pytest.skip("no CUDA runtime loads here")
    major = int(check.details["version"].split(".")[0])
    assert check.status == (FAIL if major > 12 else OK)


def test_cupti_found_beside_the_runtime_as_libtransit_finds_it() -> None:
    d = doctor_with(Nvml(cpu_only=True))
    if d.check_cuda_runtime().status != OK:
        pytest.skip("no CUDA runtime loads here")
    check = d.check_cupti()
    assert check.status in (OK, WARN)
    if check.status == OK:
        assert Path(check.details["path"]).name == "libcupti.so.13"
    else:
        assert "libcupti.so.13 not found" in check.summary


# -- the report directory, with real permissions -------------------------------------------------


@pytest.fixture
def site_dir() -> Iterator[Path]:
    """A root-owned 0755 directory that nobody can reach (tmp_path's parents are 0700)."""
    path = Path(tempfile.mkdtemp(prefix="transit-doctor-test-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def probe(path: Path, mode: int = 0o700) -> doctor.Check:
    return ReportDirProbe(path, probe_user(), mode).check()


@needs_root
@pytest.mark.parametrize("mode", [0o700, 0o750])
def test_root_owned_report_dir_takes_job_dirs_created_as_root(site_dir: Path, mode: int) -> None:
    check = probe(site_dir, mode)
    assert check.status == OK, check.summary
    assert check.details["job_dir_mode"] == oct(mode)
    assert list(site_dir.iterdir()) == []  # the probe leaves nothing behind


@needs_root
def test_sticky_world_writable_report_dir_is_ok(site_dir: Path) -> None:
    site_dir.chmod(0o1777)
    assert probe(site_dir).status == OK


@needs_root
def test_world_writable_report_dir_without_sticky_bit_fails(site_dir: Path) -> None:
    site_dir.chmod(0o777)
    check = probe(site_dir)
    assert (check.status, check.fix) == (FAIL, f"chmod 0755 {site_dir}")


@needs_root
def test_report_dir_users_cannot_traverse_fails(site_dir: Path) -> None:
    inner = site_dir / "reports"
    inner.mkdir(mode=0o755)
    site_dir.chmod(0o700)
    check = probe(inner)
    assert check.status == FAIL
    assert "not writable by nobody" in check.summary and "Permission denied" in check.summary


@needs_root
def test_report_dir_symlink_or_missing_fails(site_dir: Path) -> None:
    (site_dir / "link").symlink_to(site_dir)
    assert "is not a directory" in probe(site_dir / "link").summary
    missing = probe(site_dir / "missing")
    assert (missing.status, missing.summary) == (FAIL, f"{site_dir / 'missing'}: No such file or directory")


# -- the command ---------------------------------------------------------------------------------


def transit_doctor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "transit", "doctor", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=120, check=False)


def test_without_slurm_the_slurm_checks_say_so(tmp_path: Path) -> None:
    """No Slurm command on PATH (as on the GPU machine): one fail for Slurm, its dependents skipped."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = dict(os.environ, PATH=str(bin_dir))
    env.pop("SLURM_CONF", None)
    out = transit_doctor("--json", env=env)
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    checks = {c["name"]: c for c in doc["checks"]}
    assert (doc["schema"], doc["exit_code"]) == ("transit.doctor/1", 1)
    assert checks["slurm"]["status"] == FAIL
    assert checks["slurm"]["summary"] == "Slurm is not installed here (no srun or slurmd on PATH)"
    for name in ("plugin_registered", "plugin_version", "munge", "slurmd"):
        assert checks[name]["status"] == SKIP
        assert checks[name]["summary"].startswith("needs Slurm: Slurm is not installed")
    assert checks["report_dir"]["status"] == SKIP
    assert checks["libtransit"]["status"] == OK
    assert [c for c in doc["checks"] if c["status"] == FAIL] == [checks["slurm"]]
    assert doc["counts"][FAIL] == 1 and sum(doc["counts"].values()) == len(doc["checks"])


def test_text_output_gives_each_fix(tmp_path: Path) -> None:
    env = dict(os.environ, SLURM_CONF=str(tmp_path / "slurm.conf"))
    out = transit_doctor(env=env)
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    slurm = next(i for i, line in enumerate(lines) if line.startswith("fail  slurm "))
    assert f"{tmp_path / 'slurm.conf'} is unreadable" in lines[slurm]
    assert lines[slurm + 1].split()[:2] == ["fix:", "install"]
    assert re.fullmatch(r"transit doctor: \d+ ok, \d+ warn, [1-9]\d* fail, \d+ skip", lines[-1])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--as-user", "root"], "transit doctor: --as-user: 'root' is root; give a non-root user"),
        (["--as-user", "no-such-user-x"], ("transit doctor: --as-user: no such user 'no-such-user-x'; "
                                          "give an existing non-root user")),
        (["--report-dir", "reports"], "transit doctor: --report-dir: 'reports' is not an absolute path"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    out = transit_doctor(*args, env=dict(os.environ))
    assert (out.returncode, out.stdout, out.stderr) == (2, "", message + "\n")


def test_site_read_without_slurm_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    site = SlurmSite.read()
    assert (site.versions, site.missing) == ({}, "Slurm is not installed here (no srun or slurmd on PATH)")
