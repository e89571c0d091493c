"""The harness's measures without a GPU: the host-resident bytes of managed (UVM) mappings from
smaps and pagemap, the residency monitor's readings, and what it reads of libtransit's stats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.common import (
    ANONYMOUS_MAPPING,
    GIB,
    UVM_DEVICE_PATH,
    NvmlMonitor,
    host_resident_bytes,
    read_own_smaps,
    smaps_rss_by_path,
    uvm_host_resident_bytes,
)
from bench.transit_stats import faults_per_iteration, transit_summary

REPO = Path(__file__).resolve().parents[2]
SMAPS = (REPO / "tests/fixtures/bench/smaps-uvm.txt").read_text()
# libtransit's stats file of TRANSIT prefetch's run in bench/results/policies-long-h200x2.json at 2bd697f (H200)
PREFETCH_STATS = json.loads((REPO / "tests/fixtures/bench/prefetch-stats-h200x2.json").read_text())
KB = 1024


def test_rss_summed_per_path():
    sums = smaps_rss_by_path(SMAPS)
    # Three UVM mappings (2 GiB, 512 MiB and one never touched from the host), two anonymous ones.
    assert sums[UVM_DEVICE_PATH] == (2097152 + 524288 + 0) * KB
    assert sums[ANONYMOUS_MAPPING] == (0 + 98304) * KB
    assert sums["/dev/nvidiactl"] == 2048 * KB
    assert sums["/dev/nvidia0"] == 0
    assert sums["[heap]"] == 34812 * KB
    assert sums["/opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so"] == 20480 * KB


def test_uvm_host_resident_matches_the_full_parse():
    assert uvm_host_resident_bytes(SMAPS) == smaps_rss_by_path(SMAPS)[UVM_DEVICE_PATH] == int(2.5 * GIB)


def test_uvm_host_resident_none_without_a_uvm_mapping():
    assert uvm_host_resident_bytes("") is None
    other_path = SMAPS.replace(f" {UVM_DEVICE_PATH}\n", f" {UVM_DEVICE_PATH}-tools\n")
    assert other_path != SMAPS
    assert uvm_host_resident_bytes(other_path) is None


def test_uvm_mapping_with_nothing_on_the_host_is_zero_not_none():
    untouched = SMAPS.replace("Rss:             2097152 kB", "Rss:                   0 kB").replace(
        "Rss:              524288 kB", "Rss:                   0 kB")
    assert untouched != SMAPS
    assert uvm_host_resident_bytes(untouched) == 0


def test_parser_accounts_for_this_process_rss():
    """The per-path sums of the kernel's own smaps add up to its smaps_rollup Rss."""
    by_path = smaps_rss_by_path(read_own_smaps())
    rollup = Path("/proc/self/smaps_rollup").read_text()
    rollup_rss = next(int(line.split()[1]) * KB for line in rollup.splitlines() if line.startswith("Rss:"))
    assert by_path[ANONYMOUS_MAPPING] > 0
    assert sum(by_path.values()) == pytest.approx(rollup_rss, rel=0.05)


def test_pagemap_counts_the_pages_in_memory_per_range():
    import mmap
    import resource

    page = resource.getpagesize()
    region = mmap.mmap(-1, 64 * page)  # anonymous: no page is in memory until written
    address = ctypes_address(region)
    assert host_resident_bytes([(address, 64 * page)]) == 0
    for i in range(0, 64, 4):  # every fourth page
        region[i * page] = 1
    assert host_resident_bytes([(address, 64 * page)]) == 16 * page
    # Two ranges, one touched page each; a range inside one page counts that page.
    assert host_resident_bytes([(address, page), (address + 4 * page + 100, 8)]) == 2 * page
    assert host_resident_bytes([(address + page, 3 * page)]) == 0
    region.close()


def ctypes_address(region) -> int:
    import ctypes

    return ctypes.addressof(ctypes.c_char.from_buffer(region))


def test_monitor_reports_no_measure_rather_than_zero_without_a_uvm_mapping():
    """This CPU process has no managed mapping: the residency sample leaves the peaks unknown."""
    monitor = object.__new__(NvmlMonitor)  # the residency part only: NVML needs a GPU
    monitor.track_residency, monitor.device_index = True, 0
    monitor.managed_bound = monitor.managed_bound_peak = monitor.uvm_host_peak = None
    monitor.sample_residency()
    assert monitor.managed_bound_peak is None and monitor.uvm_host_peak is None
    assert monitor.residency_source() == f"not measured: no {UVM_DEVICE_PATH} mapping in /proc/self/smaps"
    monitor.track_residency = False
    assert "not under TRANSIT" in monitor.residency_source()


def test_monitor_skips_a_walk_during_which_the_allocator_grew(monkeypatch):
    """Reserved bytes read before and after the smaps walk: when they differ, the reading is no
    bound of any moment and is skipped (counted); when they agree, reserved minus host counts."""
    from bench import common

    monitor = object.__new__(NvmlMonitor)
    monitor.track_residency, monitor.device_index = True, 0
    monitor.managed_bound = monitor.managed_bound_peak = monitor.uvm_host_peak = None
    monitor.residency_samples_skipped = 0
    host = uvm_host_resident_bytes(SMAPS)
    reserved = iter([host + 5 * GIB, host + 9 * GIB, host + 2 * GIB, host + 2 * GIB])
    monkeypatch.setattr(common, "read_own_smaps", lambda: SMAPS)
    monkeypatch.setattr(common.torch.cuda, "memory_reserved", lambda device=None: next(reserved))
    monitor.sample_residency()  # 5 GiB before the walk, 9 GiB after
    assert monitor.residency_samples_skipped == 1 and monitor.managed_bound_peak is None
    assert monitor.uvm_host_peak == host  # the host reading stands on its own
    monitor.sample_residency()
    assert monitor.managed_bound == monitor.managed_bound_peak == 2 * GIB
    assert monitor.uvm_host_peak == host


def test_offloaded_is_the_managed_peak_less_the_last_bound():
    """The runner's sweep empties the device after the last step: TRANSIT's offloaded bytes come
    from the last iteration's bound, not from the spilled peak the sweep raised."""
    stats = PREFETCH_STATS
    last_bound = [e["device_bound_peak_bytes"] for e in stats["timeline"] if e["device_bound_peak_bytes"] is not None][-1]
    summary = transit_summary([stats])
    assert summary["offloaded_bytes_per_gpu"] == stats["allocations"]["managed_bytes_peak"] - last_bound
    assert summary["offloaded_bytes_per_gpu"] < stats["memory"]["spilled_peak_bytes"]
    assert summary["policy"] == "prefetch" and summary["ranks"] == 1
    assert transit_summary([{"file": "x.json", "unreadable": "truncated"}]) is None


def test_faults_per_iteration_are_the_differences_at_the_marks():
    faults = faults_per_iteration(PREFETCH_STATS)
    marks = [e["gpu_page_faults"] for e in PREFETCH_STATS["timeline"] if "gpu_page_faults" in e]
    assert len(faults) == len(marks) - 1 and sum(faults) == marks[-1] - marks[0]


def test_sizes_follow_transit_s_grammar_and_a_bad_one_is_one_line():
    import argparse

    from bench.common import parse_size

    assert parse_size("27G") == 27 * GIB and parse_size("5.5G") == 5.5 * GIB and parse_size("24GiB") == 24 * GIB
    with pytest.raises(argparse.ArgumentTypeError, match="size='27 G' is not a size"):
        parse_size("27 G")


def test_the_models_flops_are_the_planners():
    """bench/model.py counts FLOPs by transit.plan.models' formula: 1.237e10 per token for `bench`, 202.7
    TFLOP per step of 8 x 2048 tokens."""
    from bench.model import config_by_name, count_params, flops_per_step

    cfg = config_by_name("bench")
    assert count_params(cfg)["total"] == 1_892_796_416
    assert flops_per_step(cfg, 8) == 12_372_848_640 * 8 * 2048
