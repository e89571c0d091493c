"""Limit mode's measurement of what the host holds (host_residency.c): the host-resident managed
bytes from smaps, against the bench's Python reader of the same text, and the process's RSS from
statm, against psutil's reading of this process."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from pathlib import Path

import native_logic
import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from common import uvm_host_resident_bytes

SMAPS = (REPO / "tests/fixtures/bench/smaps-uvm.txt").read_text()


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return native_logic.load(tmp_path_factory.mktemp("host_residency"))


def parse(native, text: str) -> int:
    _, lib = native
    return lib.transit_uvm_host_rss_parse(text.encode())


def test_sums_the_uvm_mappings_like_the_bench_does(native):
    assert parse(native, SMAPS) == uvm_host_resident_bytes(SMAPS) > 0


def test_no_uvm_mapping_is_minus_one_and_an_empty_one_is_zero(native):
    without = SMAPS.replace("/dev/nvidia-uvm", "/dev/nvidia0")
    assert parse(native, without) == -1
    assert parse(native, "") == -1
    empty = "7f0000000000-7f0000200000 rw-s 00000000 00:05 9  /dev/nvidia-uvm\nRss:                   0 kB\n"
    assert parse(native, empty) == 0


def test_a_mapping_named_like_uvm_elsewhere_is_not_counted(native):
    text = ("7f0000000000-7f0000200000 rw-p 00000000 00:05 9  /tmp/dev/nvidia-uvm-copy\nRss:  2048 kB\n"
            "7f0000200000-7f0000400000 rw-s 00000000 00:05 9  /dev/nvidia-uvm\nRss:  1024 kB\n")
    assert parse(native, text) == 1024 * 1024


def statm_rss(native, text: str) -> int:
    _, lib = native
    return lib.transit_statm_rss_parse(text.encode(), os.sysconf("SC_PAGE_SIZE"))


def test_statm_rss_is_the_second_field_in_pages(native):
    assert statm_rss(native, "1000 250 30 4 0 90 0\n") == 250 * os.sysconf("SC_PAGE_SIZE")
    assert statm_rss(native, "") == -1
    assert statm_rss(native, "1000\n") == -1
    assert statm_rss(native, "x 250") == -1


def test_statm_rss_of_this_process_is_what_psutil_reads(native):
    """Both read the same counter; a 64 MiB buffer touched in between keeps them apart if the
    parser read the wrong field (the first is the virtual size)."""
    ballast = bytearray(64 << 20)
    with open("/proc/self/statm") as f:
        parsed = statm_rss(native, f.read())
    rss = psutil.Process().memory_info().rss
    assert parsed > len(ballast)
    assert abs(parsed - rss) < (16 << 20)


def test_host_bytes_of_a_range_are_its_pages_in_ram(native):
    """Hybrid's reading of where its placed chunks are: the present pages of a range, by pagemap."""
    _, lib = native
    page = os.sysconf("SC_PAGE_SIZE")
    area = mmap.mmap(-1, 64 * page)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(area))
    for k in range(0, 20, 2):  # every other page of the first 20
        area[k * page] = 1
    fd = os.open("/proc/self/pagemap", os.O_RDONLY)
    try:
        assert lib.transit_host_bytes_in(fd, addr, 64 * page) == 10 * page
        assert lib.transit_host_bytes_in(fd, addr + 20 * page, 44 * page) == 0
        assert lib.transit_host_bytes_in(fd, addr + 1, 1) == page  # a byte's page
    finally:
        os.close(fd)
    assert lib.transit_host_bytes_in(-1, addr, page) == -1
