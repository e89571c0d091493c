"""On a real training loop (run on the device machine): the three iteration sources agree
(transit_mark_iteration() called by the script, the Python optimizer-step hook that `transit run`
puts on PYTHONPATH, and the kernel-sequence period detector), and so do the recorder's two ways of
giving a kernel record its launch ordinal (callback correlation ids, external ids)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
STEPS = 30
# GROW_AT (env): the step at which the loop takes 1 GiB more and keeps it, filled by BALLAST
# ("ones", or "empty": allocated only, no kernel); TOUCH_BALLAST=1: every later step writes it
# all again. MARKS=0: neither transit_mark_iteration() nor an optimizer step (a plain SGD update).
LOOP = r"""
import ctypes, os, time, torch
mark = ctypes.CDLL(None).transit_mark_iteration
grow_at = int(os.environ.get("GROW_AT", "-1"))
marks = os.environ.get("MARKS", "1") == "1"
touch = os.environ.get("TOUCH_BALLAST") == "1"
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)]).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
x = torch.randn(32, 1024, device="cuda")
for step in range(STEPS):
    if step == grow_at:
        ballast = getattr(torch, os.environ.get("BALLAST", "ones"))(2**28, device="cuda")
    elif touch and step > grow_at >= 0:
        ballast.add_(0.0)
    model(x).square().mean().backward()
    if marks:
        opt.step(); opt.zero_grad()
        mark()
    else:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-1e-4); p.grad = None
    time.sleep(0.02)  # a step as long as a tick of the recorder's thread, which acts between steps
torch.cuda.synchronize()
""".replace("STEPS", str(STEPS))


def run_loop(out: Path, policy: str = "base", limit: str = "8G", marks: bool = True, **env: str) -> dict:
    """The loop under `transit run --policy POLICY --mem-limit LIMIT`; its stats file (its stderr
    in OUT/stderr.log). Without marks the loop marks no iteration and runs without the Python hook
    (its PYTHONPATH as this process has it), which would otherwise claim the marks from the
    kernel-period detector."""
    env = dict(os.environ, **env, MARKS="1" if marks else "0",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    python = [sys.executable] if marks else ["env", f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}", sys.executable]
    r = subprocess.run([sys.executable, "-m", "transit", "run", "--policy", policy, "--mem-limit", limit, "--out",
                        str(out), "--", *python, "-c", LOOP], env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    (out / "stderr.log").write_text(r.stderr)
    (stats_file,) = out.glob("*.json")
    return json.loads(stats_file.read_text())


def test_three_sources_agree(tmp_path: Path) -> None:
    """Prefetch past L (1 GiB taken at step 0 and written every step, L = 1 GiB) replays its
    profile at launches: its launch callbacks, which the detector needs, stay on."""
    stats = run_loop(tmp_path, "prefetch", "1G", GROW_AT="0", TOUCH_BALLAST="1")
    it, rec = stats["iterations"], stats["recorder"]
    assert it["method"] == "api" and it["count"] == STEPS
    assert it["by_method"]["python-hook"] == STEPS
    assert stats["prefetch"]["replaying"] is True and rec["launch_callbacks_off_at_iteration"] == 0
    # the detector needs a few periods to lock on; after that it must see every boundary
    assert STEPS - 4 <= it["by_method"]["kernel-period"] <= STEPS


@pytest.mark.parametrize("policy", ["base", "advise", "prefetch"])
def test_launch_callbacks_go_off_once_nothing_needs_them(tmp_path: Path, policy: str) -> None:
    """Iterations marked by the API, the managed total far under L: after warm-up (and advise's
    applying) nothing acts at launches (far under L no data migrates: prefetch's window traces no
    kernel and builds no profile), and the period detector stops counting where the callbacks
    went off. Nothing needs migration records either: the unified memory counters go off with the
    window, and an iteration after the callbacks CUPTI is detached."""
    stats = run_loop(tmp_path, policy, TRANSIT_WARMUP_ITERS="4")
    it, rec = stats["iterations"], stats["recorder"]
    off = rec["launch_callbacks_off_at_iteration"]
    assert it["method"] == "api" and it["count"] == STEPS
    # No refinement window while nothing acts at launches: the window (4 iterations) and its
    # drain end at iteration 6, and the recorder's thread acts within 2 steps.
    assert stats["prefetch"]["profiled_iterations"] == 4
    assert 6 <= off <= 8, off
    assert it["by_method"]["kernel-period"] <= off and rec["launch_callbacks_back"] == 0
    assert rec["unified_memory_counters"] is False and 6 <= rec["unified_memory_counters_off_at_iteration"] <= off
    assert stats["memory"]["host_resident_measured_bytes"] is None  # no smaps reading far under L
    assert rec["cupti_detached"] is True and rec["cupti_detaches"] == 1 and rec["cupti_reattaches"] == 0
    assert off < rec["cupti_detached_at_iteration"] <= off + 3, rec
    assert rec["state"] == "cupti" and rec["dropped_records"] == 0
    # no profile far under L uses kernel times: CUPTI never traced a kernel
    assert rec["kernel_records"] == 0 and rec["windows_without_kernel_times"] >= 1, rec
    assert stats["prefetch"]["replaying"] is False


def test_kernel_times_taken_once_limit_mode_passes_half_L(tmp_path: Path) -> None:
    """The kernel-period detector marks the iterations (the launch callbacks stay on); the managed
    total passes L/2 = 768 MiB at step 15 (1 GiB allocated, untouched) and stays under L - L/16:
    the warm-up window, which took no kernel times, is taken again with them."""
    out = tmp_path / "stats"
    stats = run_loop(out, "base", "1536M", marks=False, TRANSIT_WARMUP_ITERS="4", GROW_AT="15", BALLAST="empty",
                     TRANSIT_VERBOSE="1")
    rec = stats["recorder"]
    assert stats["iterations"]["method"] == "kernel-period" and rec["launch_callbacks_off_at_iteration"] == 0
    assert rec["windows_without_kernel_times"] >= 1 and rec["kernel_records"] > 0, rec
    assert "the managed total passed L/2" in (out / "stderr.log").read_text()
    assert stats["evictions"]["count"] == 0  # under L - L/16: nothing to evict


def test_cupti_stays_attached_with_detach_off(tmp_path: Path) -> None:
    rec = run_loop(tmp_path, TRANSIT_WARMUP_ITERS="4", TRANSIT_CUPTI_DETACH="0")["recorder"]
    assert rec["launch_callbacks_off_at_iteration"] > 0
    assert rec["cupti_detached"] is False and rec["cupti_detaches"] == 0


def test_launch_callbacks_come_back_when_the_managed_total_nears_L(tmp_path: Path) -> None:
    """At step 15 the loop takes 1 GiB more, past L = 1 GiB: limit mode evicts at launches again,
    from a new profile, and its estimate follows the migration records again (CUPTI kept attached:
    see the next test)."""
    stats = run_loop(tmp_path, "base", "1G", TRANSIT_WARMUP_ITERS="4", GROW_AT="15", TRANSIT_CUPTI_DETACH="0")
    rec, prof = stats["recorder"], stats["prefetch"]
    assert rec["launch_callbacks_back"] == 1 and rec["launch_callbacks_off_at_iteration"] == 0
    assert rec["unified_memory_counters"] is True and rec["unified_memory_counters_off_at_iteration"] == 0
    assert stats["migrations"]["dtoh"]["bytes"] > 0  # evictions after step 15, recorded
    assert prof["reprofiles"] >= 1
    assert rec["cupti_detaches"] == 0


def test_cupti_attached_again_when_the_managed_total_nears_L(tmp_path: Path) -> None:
    """The same growth with CUPTI detached after warm-up (the managed total was under L/2), and the
    1 GiB written again every step, so that what is evicted faults back: CUPTI is attached again for
    the launch callbacks and the new profile, with a warning that its unified memory counters may
    give no records from there; they give none. The estimate then follows nothing and the measured bound
    alone brings the device back within L, going round the managed memory (an estimate that never
    sees the ballast fault back in would drain, and the device stay over L)."""
    out = tmp_path / "stats"
    stats = run_loop(out, "base", "1G", TRANSIT_WARMUP_ITERS="4", GROW_AT="15", TOUCH_BALLAST="1")
    rec, ev, limit = stats["recorder"], stats["evictions"], stats["config"]["limit_bytes"]
    assert rec["cupti_detaches"] == 1 and rec["cupti_detached_at_iteration"] < 15 and rec["cupti_reattaches"] == 1
    assert rec["cupti_detached"] is False and rec["launch_callbacks_back"] == 1
    assert any("CUPTI attached again at iteration" in w for w in stats["warnings"]), stats["warnings"]
    # the driver's unified memory counters stay silent after a re-attach (docs/design-notes.md): the
    # estimate rewinds its clock and the bound does the work
    assert rec["unified_memory_silent_since_reattach"] is True, rec
    assert stats["migrations"]["htod"]["count"] == 0 and ev["clock_rewinds"] >= 1, (rec, ev)
    last = [e["device_bound_peak_bytes"] for e in stats["timeline"][-3:] if e["device_bound_peak_bytes"] is not None]
    assert last and all(peak <= limit + (256 << 20) for peak in last), stats["timeline"][-3:]


def test_external_ids_place_kernels_as_callback_ids_do(tmp_path: Path) -> None:
    # prefetch takes kernel times past L/2 = 768 MiB: 1 GiB allocated at step 0 (untouched), under
    # L - L/16, so nothing is evicted
    past_half_L = {"TRANSIT_WARMUP_ITERS": "4", "GROW_AT": "0", "BALLAST": "empty"}
    stats = run_loop(tmp_path / "default", "prefetch", "1536M", **past_half_L)
    default = stats["recorder"]
    assert default["correlation"]["external_ids"] == "off" and default["api_records"] == 0
    assert default["kernel_records"] > 0  # and callback ids missed too few for the fallback
    # nothing migrated in the window: an empty profile, nothing to replay at launches, which go
    # unwatched after it (CUPTI stays attached past L/2)
    assert stats["prefetch"]["ranges"] == 0 and default["launch_callbacks_off_at_iteration"] > 0, default
    assert default["cupti_detaches"] == 0

    forced = run_loop(tmp_path / "external", "prefetch", "1536M", **past_half_L,
                      TRANSIT_EXTERNAL_CORRELATION="1")["recorder"]
    corr = forced["correlation"]
    assert corr["external_ids"] == "on: TRANSIT_EXTERNAL_CORRELATION" and forced["api_records"] > 0
    # most kernel records carry an id both ways found, and the two ordinals never differ
    records = forced["kernel_records"]
    assert corr["cross_checked"] > records // 2 and corr["disagree"] == 0, (corr, records)
