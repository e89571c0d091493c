"""The recorder and the policies as far as a machine without a GPU can see them: the library
loads, the stats document carries every recorder/policy section with the right types, the
recorder reports itself off with the reason, libcupti is found where the pip wheels and the
toolkit put it, and a tool's calls that take CUPTI pass through libtransit to it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from transit import _native

HIST_BINS = ["<4K", "4K-64K", "64K-1M", "1M-2M", ">2M"]
CALL_CUDA = (
    "import ctypes; c=ctypes.c_void_p(); rc=ctypes.CDLL('{cudart}').cudaMalloc(ctypes.byref(c), 4096); "
    "t=ctypes.CDLL(None); [t.transit_mark_iteration() for _ in range(3)]; print(rc)"
)
TOOLKIT_CUPTI = [Path("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13"), Path("/usr/local/cuda/lib64/libcupti.so.13")]


def is_uint(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def check_sections(doc: dict) -> None:
    """Every section the recorder and the policies add, with sane types."""
    mem = doc["memory"]
    for key in ("resident_bytes", "resident_peak_bytes", "overshoot_peak_bytes", "spilled_peak_bytes"):
        assert is_uint(mem[key]), key
    for direction in ("htod", "dtoh"):
        d = doc["migrations"][direction]
        assert is_uint(d["bytes"]) and is_uint(d["count"])
        assert list(d["histogram"]) == HIST_BINS and all(is_uint(v) for v in d["histogram"].values())
        assert list(d["histogram_bytes"]) == HIST_BINS
    assert is_uint(doc["migrations"]["unrequested_bytes"])
    assert all(is_uint(doc["faults"][k]) for k in ("gpu_page_faults", "thrashing", "remote_map_bytes"))
    for key in ("calls", "bytes", "ranges", "profiled_iterations", "reprofiles", "errors"):
        assert is_uint(doc["prefetch"][key]), key
    assert is_uint(doc["advise"]["calls"]) and is_uint(doc["advise"]["bytes"])
    fill = doc["advise"]["fill"]
    assert fill["state"] in ("waiting", "filling", "full", "ended")
    assert all(is_uint(fill[k]) for k in ("target_bytes", "ranges", "bytes", "from_bytes", "reached_bytes"))
    assert is_uint(doc["evictions"]["count"]) and is_uint(doc["evictions"]["bytes"])
    for key in ("target_bytes", "bound_target_bytes", "bound_bytes", "at_launch_bytes", "target_correction_bytes",
                "cold_bytes", "sweeps", "sweep_bytes", "clock_rewinds"):
        assert is_uint(doc["evictions"][key]), key
    assert doc["evictions"]["at_launch"] is False  # no profile without a GPU
    hybrid = doc["hybrid"]
    assert hybrid["demoted_ranges"] == hybrid["demoted_bytes"] == hybrid["remapped_ranges"] == hybrid["remapped_bytes"] == 0  # no placement without a GPU
    assert list(hybrid["by_reuse"]) == ["1", "2", "3-4", "5-8", "9+"]
    for where in hybrid["by_reuse"].values():
        assert set(where) == {"resident_bytes", "host_bytes", "streamed_bytes"}
        assert all(is_uint(v) for v in where.values()) and where["streamed_bytes"] <= where["host_bytes"]
    assert set(hybrid["mover"]) == {"planned_streamed_bytes", "planned_staged_peak_bytes", "phases", "in_ranges",
                                    "in_bytes", "out_ranges", "out_bytes", "waits", "late", "dropped"}
    assert all(v == 0 for v in hybrid["mover"].values())  # nothing planned without a GPU
    # the guard (model/guard.h): nothing measured without a placement
    assert hybrid["fallback"] == {"state": hybrid["fallback"]["state"], "kept": None, "hybrid_step_s": None,
                                  "advise_step_s": None, "hybrid_steps": 0, "advise_steps": 0}
    assert hybrid["fallback"]["state"] in ("off", "waiting")
    # limit mode's measured bound: null until smaps was read (never, without a GPU)
    for key in ("host_resident_measured_bytes", "device_bound_bytes", "device_bound_peak_bytes", "rss_drift_peak_bytes"):
        assert mem[key] is None or is_uint(mem[key]), key
    rec = doc["recorder"]
    assert rec["state"] in ("cupti", "degraded", "off")
    assert is_uint(rec["kernels"]) and is_uint(rec["dropped_records"])
    assert isinstance(rec["overhead_s"], float) and 0 <= rec["overhead_profiling_s"] <= rec["overhead_s"]
    assert 0 <= rec["records_s"] <= rec["overhead_s"] - rec["overhead_profiling_s"]
    assert is_uint(rec["kernels_profiling"]) and rec["kernels_profiling"] <= rec["kernels"]
    assert isinstance(rec["profiling"], bool) and isinstance(rec["refining"], bool)
    assert is_uint(rec["cupti_reattaches"]) and rec["unified_memory_silent_since_reattach"] is False
    assert isinstance(doc["timeline"], list)
    for entry in doc["timeline"]:
        assert set(entry) == {"t", "iteration", "resident_bytes", "htod_bytes", "dtoh_bytes", "gpu_page_faults",
                              "evicted_bytes", "device_bound_peak_bytes"}
        assert entry["device_bound_peak_bytes"] is None  # measured only in limit mode, with migration records


def test_library_loads_and_live_stats_have_every_section() -> None:
    code = "from transit import _native; print(_native.stats())"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    doc = json.loads(r.stdout)
    check_sections(doc)
    assert doc["recorder"]["state"] == "off"
    assert "no managed allocation" in doc["recorder"]["reason"]
    assert doc["timeline"] == [] and doc["migrations"]["htod"]["count"] == 0


def preloaded(program: str, out: Path, clean_env: dict, **env: str) -> subprocess.CompletedProcess:
    """`python -c program` with libtransit preloaded and its stats written to `out`."""
    env = dict(clean_env, LD_PRELOAD=str(_native.lib_path()), TRANSIT_OUT=str(out), **env)
    return subprocess.run([sys.executable, "-c", program], env=env, check=False, capture_output=True, text=True,
                          timeout=60)


def stats_in(out: Path) -> dict:
    (stats_file,) = out.glob("*.json")
    return json.loads(stats_file.read_text())


@pytest.mark.parametrize(("policy", "limit", "mode"), [("prefetch", "1G", "limit"), ("advise", None, "physical"),
                                                       ("hybrid", "1G", "limit")])
def test_activated_without_gpu_reports_recorder_off(cudart, clean_env, tmp_path, policy, limit, mode) -> None:
    r = preloaded(CALL_CUDA.format(cudart=cudart), tmp_path, clean_env, TRANSIT_POLICY=policy,
                  **({"TRANSIT_MEM_LIMIT": limit} if limit else {}))
    assert r.returncode == 0 and int(r.stdout) != 0, r.stderr  # the CUDA call failed: no GPU here
    doc = stats_in(tmp_path)
    check_sections(doc)
    assert doc["config"]["policy"] == policy and doc["config"]["mode"] == mode
    assert doc["cuda_active"] is False
    rec = doc["recorder"]
    assert rec["state"] == "off" and "no managed allocation" in rec["reason"]
    assert rec["kernels"] == 0 and rec["profiling"] is False
    assert doc["iterations"]["count"] == 3 and doc["iterations"]["method"] == "api"
    assert doc["prefetch"]["calls"] == 0 and doc["advise"]["calls"] == 0 and doc["evictions"]["count"] == 0
    # hybrid's guard waits for its first placement; other policies have none
    assert doc["hybrid"]["fallback"]["state"] == ("waiting" if policy == "hybrid" else "off")
    assert doc["memory"]["resident_bytes"] == 0 and doc["memory"]["overshoot_peak_bytes"] == 0
    limit_bytes = doc["config"]["limit_bytes"] or 0  # advise's fill aims at L - L/128 in limit mode
    assert doc["advise"]["fill"] == {"state": "waiting", "target_bytes": limit_bytes - limit_bytes // 128, "ranges": 0,
                                     "bytes": 0, "from_bytes": 0, "reached_bytes": 0}


def test_hybrids_guard_is_off_when_asked(cudart, clean_env, tmp_path) -> None:
    r = preloaded(CALL_CUDA.format(cudart=cudart), tmp_path, clean_env, TRANSIT_POLICY="hybrid",
                  TRANSIT_HYBRID_GUARD="0")
    assert r.returncode == 0, r.stderr
    assert stats_in(tmp_path)["hybrid"]["fallback"]["state"] == "off"


STARTED = (
    "import ctypes, time; c=ctypes.c_void_p(); ctypes.CDLL('{cudart}').cudaMalloc(ctypes.byref(c), 4096); "
    "t=ctypes.CDLL(None); t.transit_recorder_start(); "
    "[(t.transit_mark_iteration(), time.sleep(0.2)) for _ in range(3)]"
)


def test_started_without_gpu_reports_why_and_keeps_a_timeline(cudart, clean_env, tmp_path) -> None:
    """The recorder's start, thread and exit path without a driver: CUPTI refuses, the recorder
    says why, its thread still turns iteration marks into timeline entries, and exit does not hang."""
    r = preloaded(STARTED.format(cudart=cudart), tmp_path, clean_env, TRANSIT_POLICY="advise", TRANSIT_MEM_LIMIT="1G")
    assert r.returncode == 0, r.stderr
    doc = stats_in(tmp_path)
    check_sections(doc)
    rec = doc["recorder"]
    assert rec["state"] == "off"
    assert rec["reason"].startswith(("cuptiSubscribe failed", "libcupti.so.13 not found")), rec["reason"]
    assert any(rec["reason"] in w for w in doc["warnings"])
    assert any("limit mode without migration records: L is kept by the measured bound alone" in w
               for w in doc["warnings"])
    assert [e["iteration"] for e in doc["timeline"]] == [1, 2, 3]
    assert all(e["resident_bytes"] == 0 and e["htod_bytes"] == 0 and e["evicted_bytes"] == 0 for e in doc["timeline"])
    assert doc["advise"]["applied"] is False  # past warm-up, but no device to advise for


PROBE = """
import ctypes, sys
from cffi import FFI
{preload}
ffi = FFI()
ffi.cdef("int transit_cupti_probe(char *out, size_t cap);")
lib = ffi.dlopen(sys.argv[1])
buf = ffi.new("char[]", 1024)
rc = lib.transit_cupti_probe(buf, 1024)
print(rc, ffi.string(buf).decode())
"""


def probe_cupti(preload: str = "") -> tuple[int, str]:
    code = PROBE.format(preload=preload)
    r = subprocess.run([sys.executable, "-c", code, str(_native.lib_path())], capture_output=True, text=True,
                       timeout=60, check=True)
    rc, _, text = r.stdout.strip().partition(" ")
    return int(rc), text


def test_cupti_found_in_the_toolkit_or_reason_given() -> None:
    rc, text = probe_cupti()
    if any(p.is_file() for p in TOOLKIT_CUPTI):
        assert rc == 0, text  # found, and every function it needs resolved
        assert Path(text).name == "libcupti.so.13" and Path(text).is_file()
    else:
        assert rc == -1 and "libcupti.so.13 not found" in text


def test_cupti_found_beside_the_wheels_libcudart(cudart) -> None:
    beside = cudart.parent / "libcupti.so.13"
    if not beside.is_file():
        pytest.skip(f"no {beside}: the nvidia-cuda-cupti wheel is not installed")
    rc, text = probe_cupti(f"ctypes.CDLL('{cudart}', mode=ctypes.RTLD_GLOBAL)")
    assert rc == 0, text
    assert Path(text).resolve() == beside.resolve()




CUPTI_CALLER = r"""
#define _GNU_SOURCE
#include <cupti.h>
#include <dlfcn.h>
#include <stdio.h>
/* What a profiler's library does: call CUPTI through its own link-time references. */
int report(char *out, int cap)
{
    Dl_info info = {0};
    CUpti_SubscriberHandle handle;
    dladdr((void *)&cuptiSubscribe, &info); /* the definition this library's references bound to */
    int subscribe = cuptiSubscribe(&handle, NULL, NULL);
    int subscribe_v2 = cuptiSubscribe_v2(&handle, NULL, NULL, NULL);
    int registered = cuptiActivityRegisterCallbacks(NULL, NULL);
    return snprintf(out, cap, "{\"defined_in\": \"%s\", \"subscribe\": %d, \"subscribe_v2\": %d, \"register\": %d}",
                    info.dli_fname ? info.dli_fname : "", subscribe, subscribe_v2, registered);
}
"""
# A second libcupti (as CUDA 12's would be beside the toolkit's): its own answers tell which one a call reached.
OTHER_CUPTI = r"""
#include <cupti.h>
CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *s, CUpti_CallbackFunc f, void *u) { (void)s; (void)f; (void)u; return 777; }
CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle *s, CUpti_CallbackFunc f, void *u, CUpti_SubscriberParams *p)
{ (void)s; (void)f; (void)u; (void)p; return 779; }
CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc a, CUpti_BuffersCallbackCompleteFunc b)
{ (void)a; (void)b; return 778; }
"""
LOAD_CALLER = """
import ctypes, sys
caller = ctypes.CDLL(sys.argv[1], mode=getattr(ctypes, sys.argv[2]))
out = ctypes.create_string_buffer(4096)
caller.report(out, 4096)
print(out.value.decode())
"""


def build(tmp_path: Path, name: str, source: str, include: Path, *link: str) -> Path:
    """lib{name}.so, or `name` itself when it is a file name already."""
    src, lib = tmp_path / f"{name}.c", tmp_path / (name if ".so" in name else f"lib{name}.so")
    src.write_text(source)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", f"-I{include}", "-o", str(lib), str(src), *link, "-ldl"],
                   check=True)
    return lib


@pytest.mark.parametrize("mode", ["RTLD_LOCAL", "RTLD_GLOBAL"])
def test_cupti_entry_points_pass_through_libtransit_to_the_callers_libcupti(cudart, clean_env, tmp_path,
                                                                            mode) -> None:
    """A profiler library's cuptiSubscribe(_v2) and cuptiActivityRegisterCallbacks bind to libtransit
    (which gives CUPTI up first when its recorder holds it) and go on to the libcupti that library
    links, loaded locally as Python loads torch's or globally, even beside another copy: the
    results are the ones that library gives without TRANSIT (here, without a driver, its errors)."""
    cupti = next((p for p in (cudart.parent / "libcupti.so.13", *TOOLKIT_CUPTI) if p.is_file()), None)
    include = cudart.parent.parent / "include"
    if cupti is None or not (include / "cupti.h").is_file():
        pytest.skip("no libcupti.so.13 with cupti.h: neither the nvidia-cuda-cupti wheel nor a toolkit is installed")
    other = build(tmp_path, "libcupti.so.12", OTHER_CUPTI, include, "-Wl,-soname,libcupti.so.12")
    callers = {
        "toolkit": build(tmp_path, "caller13", CUPTI_CALLER, include, f"-L{cupti.parent}", f"-l:{cupti.name}",
                         f"-Wl,-rpath,{cupti.parent}"),
        "other": build(tmp_path, "caller12", CUPTI_CALLER, include, str(other), f"-Wl,-rpath,{tmp_path}"),
    }

    def call(caller: Path, preload: bool) -> dict:
        env = dict(clean_env, **({"LD_PRELOAD": str(_native.lib_path())} if preload else {}))
        r = subprocess.run([sys.executable, "-c", LOAD_CALLER, str(caller), mode], env=env, capture_output=True,
                           text=True, timeout=60, check=True)
        return json.loads(r.stdout)

    for which, caller in callers.items():
        without, under = call(caller, False), call(caller, True)
        assert Path(under["defined_in"]).resolve() == _native.lib_path().resolve(), which
        calls = ("subscribe", "subscribe_v2", "register")
        assert [under[c] for c in calls] == [without[c] for c in calls], which
    other = call(callers["other"], True)
    assert (other["subscribe"], other["subscribe_v2"], other["register"]) == (777, 779, 778)
