"""Experiment: do CUPTI's unified-memory counters give records after a re-attach, per library variant?
Runs the re-attach scenario of tests/gpu/test_iterations.py (base, L = 1 GiB, 1 GiB more at step 15,
written every step) with each transit/lib/exp/libtransit-<variant>.so swapped in. The variants are
262f881's library built with variants.patch applied and -DTRANSIT_EXP_UNSUB (unsub),
-DTRANSIT_EXP_CONFIG_AFTER_ENABLE (cfg), both (both), or neither (base). From the repository root:

    python3 bench/results/reattach-um-experiment/exp_reattach.py OUTDIR base unsub cfg both
"""
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, ".")  # the repository root
from tests.gpu.test_iterations import run_loop

out = Path(sys.argv[1])
lib = Path("transit/lib/libtransit.so")
for variant in sys.argv[2:]:
    shutil.copy(f"transit/lib/exp/libtransit-{variant}.so", lib)
    d = out / variant
    d.mkdir(parents=True)
    t0 = time.time()
    try:
        s = run_loop(d, "base", "1G", TRANSIT_WARMUP_ITERS="4", GROW_AT="15", TOUCH_BALLAST="1",
                     TRANSIT_TICK_LOG="1")
    except AssertionError as e:
        print(variant, "FAILED", str(e)[-2000:])
        continue
    r, m = s["recorder"], s["migrations"]
    last3 = [e["device_bound_peak_bytes"] >> 20 for e in s["timeline"][-3:] if e["device_bound_peak_bytes"]]
    print(variant, f"{time.time() - t0:.0f}s", "detaches", r["cupti_detaches"],
          "reattaches", r["cupti_reattaches"], "silent", r["unified_memory_silent_since_reattach"],
          "htod", m["htod"]["count"], m["htod"]["bytes"], "dtoh", m["dtoh"]["count"],
          "rewinds", s["evictions"]["clock_rewinds"], "last3", last3, flush=True)
