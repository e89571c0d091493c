"""Fuzzes the SPANK plugin's option callbacks, plugstack.conf parsing, its ELF check of lib=
(corrupted copies of the built libtransit.so) and the TRANSIT_* environment check under
AddressSanitizer and UndefinedBehaviorSanitizer: random, very long and repeated values must never
crash or overrun.

The harness (spank/fuzz/fuzz_options.c) calls the functions directly, so no Slurm daemon is
needed; it also checks fixed cases, so a broken rule fails the test, not only a crash.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from transit import _native

REPO = Path(__file__).resolve().parents[2]
ITERATIONS = 20000
SEEDS = (1, 2, 3)
SANITIZER_MARKERS = ("AddressSanitizer", "LeakSanitizer", "runtime error:")


def _spank_header_present() -> bool:
    return any(Path(d, "slurm", "spank.h").exists() for d in ("/usr/include", "/usr/local/include"))


@pytest.fixture(scope="module")
def fuzz_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not shutil.which("cmake") or not shutil.which("cc"):
        pytest.skip("cmake or a C compiler is missing")
    if not _spank_header_present():
        pytest.skip("slurm/spank.h is not installed (apt-get install libslurm-dev)")
    build = tmp_path_factory.mktemp("spank-asan")
    subprocess.run(["cmake", "-S", str(REPO), "-B", str(build), "-DTRANSIT_ASAN=ON"],
                   check=True, capture_output=True, text=True)
    subprocess.run(["cmake", "--build", str(build), "--target", "spank_fuzz"],
                   check=True, capture_output=True, text=True)
    return build / "spank" / "spank_fuzz"


@pytest.mark.parametrize("seed", SEEDS)
def test_option_callbacks_survive_fuzzing(fuzz_binary: Path, seed: int) -> None:
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    run = subprocess.run([str(fuzz_binary), str(ITERATIONS), str(seed), str(_native.lib_path())],
                         check=False, capture_output=True, text=True, env=env, timeout=300)
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-4000:]
    assert not any(marker in report for marker in SANITIZER_MARKERS), report[-4000:]
    assert f"{ITERATIONS} iterations" in run.stdout and "0 failures" in run.stdout
