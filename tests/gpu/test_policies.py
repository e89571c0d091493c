"""The policies on a real GPU (run on the device machine), in limit mode: a small PyTorch training
loop whose footprint (about 1.5 GiB: weights, gradients, Adam states, bf16 copies) is 1.5x the
emulated capacity L = 1G, so every policy has to spill to host memory, while the absolute sizes
stay tiny next to the device.

  base     - fault-driven migrations, many of them small; TRANSIT evicts to keep L;
  prefetch - profiled ranges are prefetched: once refined, half the GPU page faults of base or fewer;
  advise   - SetAccessedBy on every allocation: zero-copy (remote maps) or fewer migrations;
             once nothing moves, the device is filled to near L;
  hybrid   - placed by the warm-up profile: the least reused chunks (Adam's moments) on the host,
             read in place; in the run's second half at most a quarter of base's HtoD bytes
             (predicted: near none, as nothing is placed again once the profile is built);
  all      - losses bitwise identical to the run without TRANSIT; TRANSIT_TICK_LOG's CSV agrees
             with the stats file;
  profiled - base while torch.profiler holds CUPTI: no migration records, L kept by the measured
             bound alone.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench.transit_stats import faults_per_iteration

LIMIT = "1G"
STEPS = 24
WARMUP = 2
LAST_ITERATIONS = 3  # of STEPS: after the profile (WARMUP + 1 to drain) and its refinements (3 iterations each: collect, drain, finish)
SMALL_BINS = ("<4K", "4K-64K", "64K-1M")
FILL_STEP_MIN = 32 << 20  # libtransit/src/model/decide.h: advise's fill stops this near its target
# 5 x Linear(4096, 4096): 84M fp32 parameters = 336 MB, as much again in gradients, twice that in
# Adam states, plus autocast's bf16 weight copies: about 1.5 GiB.
MODEL = r"""
import json, sys, torch
STEPS = int(sys.argv[1])
torch.manual_seed(0); torch.use_deterministic_algorithms(True)
layers = []
for _ in range(5):
    layers += [torch.nn.Linear(4096, 4096), torch.nn.GELU()]
model = torch.nn.Sequential(*layers).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
g = torch.Generator(device="cuda").manual_seed(1)
"""
TRAIN = MODEL + r"""
losses = []
for step in range(STEPS):
    x = torch.randn(256, 4096, device="cuda", generator=g)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = (model(x) - x).pow(2).mean()
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    losses.append(loss.item())
print(json.dumps(losses))
"""
# torch.profiler takes CUPTI before the first allocation and keeps it: TRANSIT's recorder is
# degraded from the start (tests/gpu/test_cupti_shared.py), and no migration record reaches it.
PROFILED_TRAIN = r"""
import torch
_profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
_profiler.start()
""" + TRAIN + "_profiler.stop()\n"
BOUND_SLACK = 256 << 20  # what can fault in during one 20 ms tick
POLICIES = ("base", "prefetch", "advise", "hybrid")
HYBRID_LATE_HTOD_SHARE = 0.25  # of base's HtoD bytes in the run's second half


def run(out: Path | None, policy: str | None, program: str = TRAIN, **env_extra: str) -> list[float]:
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=pythonpath, CUBLAS_WORKSPACE_CONFIG=":4096:8", TRANSIT_TICK_LOG="1",
               **env_extra)
    cmd = [sys.executable, "-c", program, str(STEPS)]
    if policy:
        cmd = [sys.executable, "-m", "transit", "run", "--policy", policy, "--mem-limit", LIMIT, "--out", str(out),
               "--", *cmd]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, f"{policy}: {r.stderr[-4000:]}"
    return json.loads(r.stdout.splitlines()[-1])


def stats(out: Path) -> dict:
    (stats_file,) = out.glob("*.json")
    return json.loads(stats_file.read_text())


def ticks(out: Path) -> list[dict[str, str]]:
    (log,) = out.glob("*.ticks.csv")
    with log.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def native_losses() -> list[float]:
    """The losses of the run without TRANSIT."""
    pytest.importorskip("torch")
    return run(None, None)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory,
         native_losses: list[float]) -> dict[str, tuple[list[float], dict, list[dict[str, str]]]]:
    """One run without TRANSIT and one per policy, shared by the tests below."""
    results: dict[str, tuple[list[float], dict, list[dict[str, str]]]] = {"native": (native_losses, {}, [])}
    for policy in POLICIES:
        out = tmp_path_factory.mktemp(policy)
        # hybrid's own placement: its guard, which may keep advise's, is tested in test_hybrid_guard_gpu.py
        guard = {"TRANSIT_HYBRID_GUARD": "0"} if policy == "hybrid" else {}
        results[policy] = (run(out, policy, **guard), stats(out), ticks(out))
    return results


def last_bound_peaks(doc: dict) -> list[int]:
    """The measured bound's peak in each of the last LAST_ITERATIONS; an iteration shorter than a
    tick may have no reading (None): left out."""
    per_iteration = [e["device_bound_peak_bytes"] for e in doc["timeline"]][-LAST_ITERATIONS:]
    return [peak for peak in per_iteration if peak is not None]


def late_faults(doc: dict) -> int:
    """GPU page faults in the run's second half (STEPS // 2 iterations). A count per iteration
    swings several-fold from one iteration to the next (base: 179 to 1,623 in run 60), so the
    median of the last three passed 0.5 of base's in runs 60-61 (0.501, 0.506) where the half's
    sum gives 0.40 and 0.30 (0.010-0.401 over the kept stats of runs 40-61)."""
    return sum(faults_per_iteration(doc)[-(STEPS // 2):])


def small_migrations(doc: dict) -> int:
    return sum(doc["migrations"]["htod"]["histogram"][b] for b in SMALL_BINS)


@pytest.mark.parametrize("policy", POLICIES)
def test_losses_identical_and_sections_present(runs, policy) -> None:
    losses, doc, _ = runs[policy]
    assert losses == runs["native"][0]
    assert doc["config"]["policy"] == policy and doc["config"]["mode"] == "limit"
    for section in ("memory", "migrations", "faults", "prefetch", "advise", "hybrid", "evictions", "iterations",
                    "recorder", "timeline"):
        assert section in doc, section
    rec = doc["recorder"]
    assert rec["state"] == "cupti", rec
    assert rec["kernels"] > 0 and rec["kernel_records"] > 0
    # profiling ends with warm-up, except while a refinement window (limit mode) is still open
    assert rec["profiling"] is False or rec["refining"] is True, rec
    assert rec["unified_memory_counters"] is True  # near L limit mode keeps them on for the estimate
    assert doc["iterations"]["method"] == "python-hook" and doc["iterations"]["count"] == STEPS
    # one entry per boundary (the period detector may mark a few before the optimizer hook takes over)
    assert [e["iteration"] for e in doc["timeline"]][-STEPS:] == list(range(1, STEPS + 1))
    assert doc["memory"]["resident_estimated"] is True and doc["memory"]["resident_peak_bytes"] > 0
    # limit mode checked its estimate against smaps at the iteration marks
    assert doc["memory"]["host_resident_measured_bytes"] is not None
    assert doc["memory"]["device_bound_peak_bytes"] is not None


def test_base_faults_with_small_migrations_and_evicts(runs) -> None:
    doc = runs["base"][1]
    assert doc["faults"]["gpu_page_faults"] > 0
    assert small_migrations(doc) > 0, doc["migrations"]["htod"]
    assert doc["prefetch"]["calls"] == 0 and doc["advise"]["calls"] == 0
    assert doc["evictions"]["count"] > 0, doc["evictions"]  # the footprint is above L
    # after warm-up the evictions go at the launches, in the stream's order
    assert doc["evictions"]["at_launch"] is True and doc["evictions"]["at_launch_bytes"] > 0, doc["evictions"]
    assert doc["prefetch"]["refinements"] >= 1, doc["prefetch"]  # what the planned launches faulted in was learnt


def test_prefetch_replays_ranges_and_cuts_faults(runs) -> None:
    base, doc = runs["base"][1], runs["prefetch"][1]
    # WARMUP iterations per profiling window; a re-profile (kernel sequence changed) adds a window
    assert doc["prefetch"]["profiled_iterations"] >= WARMUP and doc["prefetch"]["ranges"] > 0, doc["prefetch"]
    assert doc["prefetch"]["calls"] > 0 and doc["prefetch"]["bytes"] > 0
    # In the run's second half: the whole run's count also holds warm-up's and the first
    # refinements' faults (on the single-GPU machine prefetch's total was only 5 % under base's, run 28)
    late_prefetch, late_base = late_faults(doc), late_faults(base)
    assert late_prefetch * 2 <= late_base, (late_prefetch, late_base, doc["faults"], base["faults"])
    assert doc["evictions"]["at_launch"] is True and doc["evictions"]["at_launch_bytes"] > 0, doc["evictions"]


def test_advise_maps_instead_of_migrating(runs) -> None:
    base, doc = runs["base"][1], runs["advise"][1]
    assert doc["advise"]["applied"] is True and doc["advise"]["calls"] > 0 and doc["advise"]["bytes"] > 0
    assert (doc["faults"]["remote_map_bytes"] > 0
            or doc["migrations"]["htod"]["count"] < base["migrations"]["htod"]["count"]), (doc["faults"],
                                                                                         doc["migrations"]["htod"])


def test_advise_fills_the_device_once_it_holds_still(runs) -> None:
    """Advise's device set, held by the evictions under L - L/32 until an iteration passed without
    an eviction, is then filled from the smaps readings to within FILL_STEP_MIN of L - L/128, and
    the last iterations' bound is there, not at the evictions' margin (whether it got there by a fill
    or already held still that near)."""
    doc = runs["advise"][1]
    fill, limit = doc["advise"]["fill"], doc["config"]["limit_bytes"]
    target = limit - limit // 128
    assert fill["target_bytes"] == target
    assert fill["state"] == "full", (fill, doc["evictions"])
    assert target - FILL_STEP_MIN <= fill["reached_bytes"] <= limit, fill
    last = [e["device_bound_peak_bytes"] for e in doc["timeline"][-LAST_ITERATIONS:]]
    assert any(peak is not None and peak >= target - FILL_STEP_MIN for peak in last), (last, fill)


@pytest.mark.parametrize("policy", ["base", "prefetch", "advise"])
def test_measured_bound_holds_L_once_planned(runs, policy) -> None:
    """Limit mode's promise, as TRANSIT itself measures it every tick (managed bytes minus the
    host-resident ones), per iteration: until the profile exists the evictions follow the records,
    behind the GPU, and the bound may go over L (the whole run's peak is in the message, not
    asserted). Base and prefetch then evict at the launches, with a correction from the measured
    peaks; advise applies SetAccessedBy before its profile is built, after which nothing migrates
    back. Either way the last iterations stay within L plus what can fault in during one 20 ms
    tick."""
    doc = runs[policy][1]
    last = last_bound_peaks(doc)
    assert last and all(peak <= doc["config"]["limit_bytes"] + BOUND_SLACK for peak in last), (
        doc["memory"]["device_bound_peak_bytes"], last, doc["evictions"])


@pytest.mark.parametrize(("program", "env", "state", "reason"), [
    (PROFILED_TRAIN, {}, "degraded", "another CUPTI subscriber is active"),
    (TRAIN, {"TRANSIT_RECORDER": "0"}, "off", "TRANSIT_RECORDER is off"),
], ids=["profiler-holds-cupti", "recorder-off"])
def test_bound_alone_holds_L_without_records(native_losses, tmp_path: Path, program: str, env: dict[str, str],
                                             state: str, reason: str) -> None:
    """Without migration records there is no recency and no profile: the tick and the allocating
    threads evict by the measured bound alone, round the managed memory in address order
    (policy.c, rewind_clock). The last iterations stay within the planned policies' margin; the
    profiler changes no loss."""
    losses = run(tmp_path, "base", program, **env)
    doc = stats(tmp_path)
    assert losses == native_losses
    rec = doc["recorder"]
    assert rec["state"] == state and rec["reason"].startswith(reason), rec
    assert doc["migrations"]["htod"]["count"] == 0 and doc["memory"]["resident_estimated"] is False
    ev = doc["evictions"]
    assert ev["count"] > 0 and ev["bound_bytes"] > 0 and ev["clock_rewinds"] >= 1, ev
    assert ev["at_launch"] is False and ev["sweeps"] == 0, ev
    last = last_bound_peaks(doc)
    assert last and all(peak <= doc["config"]["limit_bytes"] + BOUND_SLACK for peak in last), (
        doc["memory"]["device_bound_peak_bytes"], last, ev, [e["device_bound_peak_bytes"] for e in doc["timeline"]])


@pytest.mark.parametrize("policy", ["base", "prefetch", "advise"])
def test_tick_log_agrees_with_the_stats(runs, policy) -> None:
    """TRANSIT_TICK_LOG=1: a line per policy tick (20 ms) beside the stats file. Every bound the
    policy measured is in it, so its highest is the stats' peak; its cumulative columns never fall
    and end at or under the stats' totals (launch evictions after the last tick add to those); the
    managed bytes it gives stay within the stats' managed peak."""
    _, doc, rows = runs[policy]
    assert len(rows) >= 50, len(rows)  # the run lasts seconds: hundreds of ticks
    bounds = [int(r[k]) for r in rows for k in ("bound_bytes", "smaps_bound_bytes") if r[k]]
    assert max(bounds) == doc["memory"]["device_bound_peak_bytes"]
    for column, total in (("evicted_bytes", doc["evictions"]["bytes"]), ("swept_bytes", doc["evictions"]["sweep_bytes"]),
                          ("htod_bytes", doc["migrations"]["htod"]["bytes"]),
                          ("dtoh_bytes", doc["migrations"]["dtoh"]["bytes"])):
        values = [int(r[column]) for r in rows]
        assert values == sorted(values) and values[-1] <= total, column
    assert {r["planning"] for r in rows} <= {"0", "1"} and all(float(r["work_ms"]) >= 0 for r in rows)
    managed = [int(r["managed_bytes"]) for r in rows]
    assert 0 < max(managed) <= doc["allocations"]["managed_bytes_peak"]


def late_htod(doc: dict) -> int:
    """HtoD bytes migrated in the run's second half (the timeline's counts are cumulative)."""
    timeline = doc["timeline"]
    return timeline[-1]["htod_bytes"] - timeline[-(STEPS // 2) - 1]["htod_bytes"]


def test_hybrid_leaves_the_least_reused_on_the_host(runs) -> None:
    base, doc = runs["base"][1], runs["hybrid"][1]
    hybrid = doc["hybrid"]
    assert hybrid["plans"] >= 1 and hybrid["applied"] >= 1 and doc["advise"]["applied"] is True, hybrid
    assert hybrid["placed_host_bytes"] > 0, hybrid  # the footprint is over L
    # every reuse class left on the host is used at most as often as every class kept on the device
    classes = list(hybrid["by_reuse"])
    on_host = [i for i, c in enumerate(classes) if hybrid["by_reuse"][c]["host_bytes"]]
    on_device = [i for i, c in enumerate(classes) if hybrid["by_reuse"][c]["resident_bytes"]]
    assert on_host and on_device and max(on_host) <= min(on_device), hybrid["by_reuse"]
    assert late_htod(doc) <= HYBRID_LATE_HTOD_SHARE * late_htod(base), (late_htod(doc), late_htod(base))
