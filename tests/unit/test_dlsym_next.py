"""libtransit interposes dlsym; dlsym(RTLD_NEXT, ...) must still mean "after the caller".
Another preloaded interposer after libtransit (profilers, sanitizers) would otherwise find its
own symbol again and recurse forever."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from transit import _native

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <unistd.h>
static int calls;
pid_t getppid(void)
{
    pid_t (*real)(void) = (pid_t (*)(void))dlsym(RTLD_NEXT, "getppid");
    if (++calls > 1 || !real) /* found itself again: RTLD_NEXT was taken from the wrong object */
        _exit(42);
    calls = 0;
    return real();
}
"""


def test_rtld_next_after_the_caller(tmp_path: Path, clean_env) -> None:
    src = tmp_path / "shim.c"
    src.write_text(SHIM)
    shim = tmp_path / "libshim.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O0", "-o", str(shim), str(src), "-ldl"], check=True)
    for order in (f"{_native.lib_path()}:{shim}", f"{shim}:{_native.lib_path()}"):
        env = dict(clean_env, LD_PRELOAD=order)
        r = subprocess.run([sys.executable, "-c", "import os; print(os.getppid() > 0)"], env=env,
                           capture_output=True, text=True, timeout=60, check=False)
        assert (r.returncode, r.stdout) == (0, "True\n"), (order, r.returncode, r.stderr)


def test_address_sanitizer_runtime_preloads_with_libtransit(clean_env) -> None:
    asan = subprocess.run(["cc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=False).stdout.strip()
    assert Path(asan).is_file(), "gcc ships libasan"
    env = dict(clean_env, LD_PRELOAD=f"{asan}:{_native.lib_path()}", ASAN_OPTIONS="detect_leaks=0")
    r = subprocess.run([sys.executable, "-c", "print('hi')"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert (r.returncode, r.stdout) == (0, "hi\n"), r.stderr[-2000:]
