"""cuGetProcAddress lookups: which TRANSIT hook a driver symbol resolves to (hooks_driver.c).

A program built for the per-thread default stream asks with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
and gets the driver's _ptsz functions; TRANSIT must then hand out its _ptsz hooks, which read stream 0
as the thread's default stream, not the legacy one."""

from __future__ import annotations

import ctypes

import pytest

from transit import _native


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(_native.lib_path()))
    lib.transit_driver_hook.restype = ctypes.c_void_p
    lib.transit_driver_hook.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    return lib


def address(lib: ctypes.CDLL, name: str) -> int:
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


@pytest.mark.parametrize("symbol", ["cuMemAllocAsync", "cuMemFreeAsync"])
def test_per_thread_lookups_get_the_ptsz_hooks(lib, symbol):
    assert lib.transit_driver_hook(symbol.encode(), 12080, 0) == address(lib, symbol)
    assert lib.transit_driver_hook(symbol.encode(), 12080, 1) == address(lib, symbol + "_ptsz")


def test_symbols_without_a_ptsz_form_keep_their_hook(lib):
    assert lib.transit_driver_hook(b"cuMemAlloc", 12080, 1) == address(lib, "cuMemAlloc_v2")
    assert lib.transit_driver_hook(b"cuLaunchKernel", 12080, 1) is None
    assert lib.transit_driver_hook(b"cuMemAllocAsync", 11000, 1) is None  # before its ABI existed
