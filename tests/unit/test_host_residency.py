"""Limit mode's check of its estimate: the host-resident managed bytes from smaps (host_residency.c),
against the bench's Python reader of the same text."""

from __future__ import annotations

import sys
from pathlib import Path

import native_logic
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
