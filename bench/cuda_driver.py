"""The few CUDA driver calls the bench makes itself on managed memory (ctypes on libcuda), with
CUDA 13's location-based prefetch and advise: used by the UVM probe and the residency sweep."""

from __future__ import annotations

import ctypes

import torch

CU_MEM_ATTACH_GLOBAL = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_LOCATION_TYPE_HOST = 2
CU_MEM_ADVISE_SET_PREFERRED_LOCATION = 3
CU_MEM_ADVISE_SET_ACCESSED_BY = 5


class CUmemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class Driver:
    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        torch.zeros(1, device="cuda")  # the primary context, current on this thread

    def call(self, name: str, *args) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name} failed: CUresult {rc}")

    def alloc_managed(self, size: int) -> int:
        ptr = ctypes.c_uint64()
        self.call("cuMemAllocManaged", ctypes.byref(ptr), ctypes.c_size_t(size), CU_MEM_ATTACH_GLOBAL)
        return ptr.value

    def memset_on_gpu(self, ptr: int, size: int) -> None:
        self.call("cuMemsetD8_v2", ctypes.c_uint64(ptr), ctypes.c_ubyte(1), ctypes.c_size_t(size))
        self.sync()

    def prefetch(self, ptr: int, size: int, to_host: bool) -> None:
        loc = CUmemLocation(CU_MEM_LOCATION_TYPE_HOST if to_host else CU_MEM_LOCATION_TYPE_DEVICE, 0)
        self.call("cuMemPrefetchAsync_v2", ctypes.c_uint64(ptr), ctypes.c_size_t(size), loc, 0, None)
        self.sync()

    def advise(self, ptr: int, size: int, advice: int, to_host: bool) -> None:
        loc = CUmemLocation(CU_MEM_LOCATION_TYPE_HOST if to_host else CU_MEM_LOCATION_TYPE_DEVICE, 0)
        self.call("cuMemAdvise_v2", ctypes.c_uint64(ptr), ctypes.c_size_t(size), advice, loc)

    def free(self, ptr: int) -> None:
        self.call("cuMemFree_v2", ctypes.c_uint64(ptr))
        self.sync()

    def sync(self) -> None:
        self.call("cuCtxSynchronize")
