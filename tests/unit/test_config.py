"""TRANSIT_* parsing (config.c): the size grammar with per-variable bounds, policies, booleans,
directories, the table of names; bad values stop the process with one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from transit import _native
from transit.errors import UsageError

KIB, MIB, GIB, TIB = 1024, 1024**2, 1024**3, 1024**4


@pytest.mark.parametrize(
    ("text", "expected"),
    [("40G", 40 * GIB), ("512M", 512 * MIB), ("1.5T", int(1.5 * TIB)), ("4096", 4096), ("4096B", 4096),
     ("128K", 128 * KIB), ("24GiB", 24 * GIB), ("24gib", 24 * GIB), ("2gb", 2 * GIB), ("2GB", 2 * GIB),
     (".5G", GIB // 2), ("0.1K", 102), ("1.000000001G", GIB + 1), ("1.999999999K", 2047),
     ("1024T", 1024 * TIB), ("007G", 7 * GIB)],
)
def test_sizes(text: str, expected: int) -> None:
    assert _native.parse_size(text) == expected


@pytest.mark.parametrize("text", [
    "", "12Q", "G", "-1G", "+1G", "0", "1.2.3G", "40 G", " 40G", "40G ", "nan", "inf", "1e400", "x" * 5000,
    "0x10G", "0x10", "1e3G", "1E3", "1.", "1.G", ".G", "1,5G", "40GiBB", "40iB", "40Gi", "40BB", "1P",
    "1025T",
    "99999999999999999999", "1.0000000001G", "\u0664\u0660G",
])
def test_bad_sizes_name_the_value_and_what_is_allowed(text: str) -> None:
    with pytest.raises(UsageError) as exc:
        _native.parse_size(text)
    msg = str(exc.value)
    assert "is not a size" in msg or "is out of range" in msg, msg
    assert "from 1B to 1024T" in msg  # any size that is not one of the table's variables
    assert len(msg) < 320 and "\n" not in msg  # a hostile value cannot flood or split the line


@pytest.mark.parametrize(("var", "lo", "hi"), [("TRANSIT_MEM_LIMIT", "256M", "16T"),
                                                ("TRANSIT_PREFETCH_GAP", "4K", "1G")])
def test_each_size_variable_has_its_bounds(var: str, lo: str, hi: str) -> None:
    low, high = _native.parse_size(lo, var), _native.parse_size(hi, var)
    for outside in (low - 1, high + 1):
        expected = rf"^{var}='{outside}' is out of range; use a size from {lo} to {hi}$"
        with pytest.raises(UsageError, match=expected):
            _native.parse_size(str(outside), var)


def test_values_are_shown_cut_and_escaped() -> None:
    assert _native.show("x" * 81) == "x" * 80 + "..."
    assert _native.show("x" * 80) == "x" * 80
    assert _native.show("a\nb\tc'\\\x1b\u00e9") == "a\\nb\\tc\\'\\\\\\x1b\\xc3\\xa9"


@pytest.mark.parametrize(("var", "value", "needle"), [
    ("TRANSIT_POLICY", "fast", "is not a policy; use base, prefetch, advise or hybrid"),
    ("TRANSIT_POLICY", "BASE", "is not a policy"),
    ("TRANSIT_WARMUP_ITERS", "0", "use a whole number from 1 to 1000"),
    ("TRANSIT_WARMUP_ITERS", "+2", "use a whole number from 1 to 1000"),
    ("TRANSIT_STATS_INTERVAL", "4", "use 0 (at exit only) or a whole number from 5 to 86400"),
    ("TRANSIT_RECORDER", "maybe", "use 1/0, true/false, yes/no or on/off"),
    ("TRANSIT_OUT", "", "use a directory path of 1 to 4095 bytes without control characters"),
])
def test_check_value_names_the_option(var: str, value: str, needle: str) -> None:
    with pytest.raises(UsageError) as exc:
        _native.check_value(var, "--opt", value)
    assert str(exc.value).startswith(f"--opt='{value}' ") and needle in str(exc.value)


def test_policies_come_from_the_library() -> None:
    assert _native.policies() == ("base", "prefetch", "advise", "hybrid")


@pytest.mark.parametrize(("path", "parent_must_exist", "needle"), [
    ("relative", False, "is not an absolute path"),
    ("", False, "is not usable"),
    ("/tmp/a\nb", False, "is not usable"),
    ("/proc/transit", False, "is under /proc"),
    ("/sys", False, "is under /sys"),
    ("/dev/shm/transit", False, "is under /dev"),
    ("/tmp/../proc/x", False, "is under /proc"),
    ("/etc/passwd/x", False, "its parent is not an existing directory"),
    ("/etc/passwd", False, "it is not a directory"),
    ("/nonexistent-transit/a/b", True, "its parent is not an existing directory"),
])
def test_bad_directories(path: str, parent_must_exist: bool, needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        _native.check_dir("--dir", path, parent_must_exist)


def test_directories_that_resolve_under_proc_are_refused(tmp_path) -> None:
    (tmp_path / "link").symlink_to("/proc")
    with pytest.raises(UsageError, match="is under /proc"):
        _native.check_dir("--dir", str(tmp_path / "link" / "x"))
    _native.check_dir("--dir", str(tmp_path / "new"), parent_must_exist=True)
    _native.check_dir("--dir", str(tmp_path / "a" / "b" / "c"))  # libtransit creates the missing ones


@pytest.mark.parametrize(("name", "nearest"), [
    ("TRANSIT_POLCY", "TRANSIT_POLICY"), ("TRANSIT_MEMLIMIT", "TRANSIT_MEM_LIMIT"),
    ("TRANSIT_OUTDIR", "TRANSIT_OUT"), ("TRANSIT_policy", "TRANSIT_POLICY"),
    ("TRANSIT_REPORTDIR", "TRANSIT_REPORT_DIR"),
])
def test_unknown_names_get_the_nearest_one(name: str, nearest: str) -> None:
    with pytest.raises(UsageError) as exc:
        _native.env_check({name: "1"})
    assert str(exc.value) == f"{name} is not a TRANSIT variable (did you mean {nearest}?); fix or unset it"


def test_environment_check_reads_like_libtransit() -> None:
    _native.env_check({"TRANSIT_POLICY": "advise", "TRANSIT_GLOBAL_BATCH": "64", "PATH": "/bin"})
    with pytest.raises(UsageError, match="TRANSIT_TICK_LOG is on but TRANSIT_OUT is not set"):
        _native.env_check({"TRANSIT_TICK_LOG": "1"})
    _native.env_check({"TRANSIT_TICK_LOG": "1", "TRANSIT_OUT": "/tmp/x"})
    with pytest.raises(UsageError) as exc:
        _native.env_check({"TRANSIT_PROFILE_STEADY": "8", "TRANSIT_OUT": "/tmp/x"})
    assert str(exc.value) == ("TRANSIT_PROFILE_STEADY=8 needs TRANSIT_PROFILE=1 (the steady profile is written beside "
                              "the warm-up one); set TRANSIT_PROFILE=1, or TRANSIT_PROFILE_STEADY=0")
    _native.env_check({"TRANSIT_PROFILE_STEADY": "8", "TRANSIT_PROFILE": "1", "TRANSIT_OUT": "/tmp/x"})
    _native.env_check({"TRANSIT_PROFILE_STEADY": "0"})


def run_with_env(cudart, env: dict[str, str]) -> subprocess.CompletedProcess:
    code = (f"import ctypes; c=ctypes.c_void_p(); ctypes.CDLL('{cudart}').cudaMalloc(ctypes.byref(c), 64); "
            "print('after')")
    env = dict(env, LD_PRELOAD=str(_native.lib_path()))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.parametrize(
    ("var", "value", "allowed"),
    [("TRANSIT_POLICY", "fast", "base, prefetch, advise or hybrid"),
     ("TRANSIT_MEM_LIMIT", "12Q", "from 256M to 16T"),
     ("TRANSIT_MEM_LIMIT", "", "from 256M to 16T"),
     ("TRANSIT_MEM_LIMIT", "0x10G", "from 256M to 16T"),
     ("TRANSIT_MEM_LIMIT", "1K", "from 256M to 16T"),
     ("TRANSIT_WARMUP_ITERS", "0", "from 1 to 1000"),
     ("TRANSIT_RECORDER", "maybe", "true/false"),
     ("TRANSIT_EXTERNAL_CORRELATION", "2", "true/false"),
     ("TRANSIT_CUPTI_DETACH", "later", "true/false"),
     ("TRANSIT_TICK_LOG", "often", "true/false"),
     ("TRANSIT_HYBRID_MOVER", "sometimes", "true/false"),
     ("TRANSIT_HYBRID_REMAP", "twice", "true/false"),
     ("TRANSIT_HYBRID_GUARD", "auto", "true/false"),
     ("TRANSIT_PROFILE_STEADY", "later", "from 1 to 1000000"),
     ("TRANSIT_PREFETCH_GAP", "lots", "from 4K to 1G")],
)
def test_bad_environment_stops_before_cuda_work(cudart, clean_env, var: str, value: str,
                                                 allowed: str) -> None:
    r = run_with_env(cudart, dict(clean_env, **{var: value}))
    assert r.returncode == 1
    assert "after" not in r.stdout  # stopped at the first CUDA call
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"transit: {var}='{value}'") and allowed in lines[0]


def test_tick_log_without_out_dir_stops_before_cuda_work(cudart, clean_env) -> None:
    r = run_with_env(cudart, dict(clean_env, TRANSIT_TICK_LOG="1"))
    assert r.returncode == 1 and "after" not in r.stdout
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("transit: TRANSIT_TICK_LOG is on") and "TRANSIT_OUT" in line


def test_good_environment_runs(cudart, clean_env, tmp_path) -> None:
    env = dict(clean_env, TRANSIT_POLICY="prefetch", TRANSIT_MEM_LIMIT="1.5T", TRANSIT_WARMUP_ITERS="3",
               TRANSIT_RECORDER="off", TRANSIT_OUT=str(tmp_path), TRANSIT_STATS_INTERVAL="0",
               TRANSIT_PREFETCH_GAP="64KiB")
    r = run_with_env(cudart, env)
    assert r.returncode == 0 and r.stdout.strip() == "after", r.stderr


def test_libtransit_leaves_names_it_does_not_read_alone(cudart, clean_env) -> None:
    """Only the checks before a command (srun, sbatch, transit run) refuse unknown names; a rank
    that was started some other way keeps running."""
    r = run_with_env(cudart, dict(clean_env, TRANSIT_POLCY="advise"))
    assert r.returncode == 0 and r.stdout.strip() == "after", r.stderr


def test_every_transit_name_the_tree_reads_is_in_libtransits_table() -> None:
    """The plugin and `transit run` refuse a TRANSIT_* name that libtransit's table lacks (a typo):
    every name a script or tool reads from the environment must be there, and no dead one."""
    import re
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    table = set(re.findall(r'\{"(TRANSIT_\w+)", VAR_', (repo / "libtransit/src/base/config.c").read_text()))
    shell = [*(repo / "scripts").iterdir(), *(repo / "bench").glob("*.sh"), repo / ".ci/run"]
    python = [*(repo / "transit").rglob("*.py"), *(repo / "bench").glob("*.py")]
    read = {name for path in shell if path.is_file() for name in re.findall(r"\$\{?(TRANSIT_[A-Z_]+)", path.read_text())}
    read |= {name for path in python for name in re.findall(
        r"""(?:environ(?:\.get)?[(\[]|getenv\()\s*["'](TRANSIT_[A-Z_]+)""", path.read_text())}
    read -= {"TRANSIT_BUILD_OK"}  # bench/device_setup.sh's own result, set before it is read
    assert read - table == set()
    tools = set(re.findall(r'\{"(TRANSIT_\w+)", VAR_TOOL', (repo / "libtransit/src/base/config.c").read_text()))
    everything = "".join(p.read_text() for p in [*shell, *python, *(repo / "transit").rglob("*.sh")] if p.is_file())
    assert {name for name in tools if name not in everything} == set()
