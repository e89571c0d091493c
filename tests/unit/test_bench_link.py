"""`transit bench link` without a GPU: its arguments, the sizes and batching it measures, and the
table and PNG it draws from a recorded result.

tests/fixtures/bench/link-handwritten.json is a HAND-WRITTEN fixture (round made-up times in the result's
exact shape), not a measurement."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from transit import bench_link
from transit.cli import main

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests/fixtures/bench/link-handwritten.json"
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["bench", "link", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_default_sizes_are_powers_of_four_from_4k_to_1g():
    sizes = bench_link.transfer_sizes(bench_link.DEFAULT_MIN_SIZE, bench_link.DEFAULT_MAX_SIZE)
    assert sizes == [4 * KIB * 4**k for k in range(10)]
    assert sizes[-1] == GIB


def test_the_largest_size_is_always_measured():
    assert bench_link.transfer_sizes(4 * KIB, 100 * KIB) == [4 * KIB, 16 * KIB, 64 * KIB, 100 * KIB]
    assert bench_link.transfer_sizes(64 * KIB, 64 * KIB) == [64 * KIB]


def test_small_transfers_are_timed_in_batches_of_at_most_32():
    assert bench_link.ops_per_repeat(4 * KIB, GIB) == 32
    assert bench_link.ops_per_repeat(4 * MIB, GIB) == 16
    assert bench_link.ops_per_repeat(64 * MIB, GIB) == 1
    assert bench_link.ops_per_repeat(GIB, GIB) == 1
    # the batch's slices fit the buffer of the largest size
    assert bench_link.ops_per_repeat(4 * KIB, 16 * KIB) == 4


def test_point_takes_the_median_and_its_bandwidth():
    pt = bench_link.point(GIB, 1, [0.030, 0.020, 0.025])
    assert pt["median_s"] == 0.025 and pt["min_s"] == 0.020 and pt["max_s"] == 0.030
    assert pt["bandwidth_gbps"] == pytest.approx(GIB / 0.025 / 1e9)
    assert pt["repeats"] == 3


@pytest.mark.parametrize(("argv", "message"), [
    (["--repeats", "0"], "--repeats '0': must be a whole number from 1 to 100"),
    (["--repeats", "x"], "--repeats 'x': must be a whole number from 1 to 100"),
    (["--warmup", "101"], "--warmup '101': must be a whole number from 0 to 100"),
    (["--max-size", "5G"], "--max-size '5G': must be a multiple of 4K from 4K to 4G"),
    (["--min-size", "5000"], "--min-size '5000': must be a multiple of 4K from 4K to 4G"),
    (["--max-size", "1Q"], "--max-size '1Q': size='1Q' is not a size"),
    (["--min-size", "1M", "--max-size", "4K"], "--min-size '1M' is larger than --max-size (4096 bytes)"),
    (["--from", "/nonexistent/link.json"], "--from '/nonexistent/link.json': cannot read a JSON document"),
    (["--from", str(FIXTURE), "--repeats", "3"], "--from renders a recorded result: --repeats applies only"),
    (["--from", str(FIXTURE), "--no-peer"], "--from renders a recorded result: --no-peer applies only"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    if "size" in argv[0]:
        pytest.importorskip("cffi")
        from transit import _native

        if not _native.LIB_PATH.exists():
            pytest.skip("libtransit not built (the size grammar is its parser)")
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and message in err, err


def test_a_result_of_another_schema_is_refused(capsys, tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "transit.bench/1"}))
    rc, _, err = run(capsys, "--from", str(other))
    assert rc == 2 and f"--from '{other}': not a transit.bench-link/1 result (schema 'transit.bench/1')" in err


def test_out_must_be_a_directory(capsys, tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("")
    rc, _, err = run(capsys, "--from", str(FIXTURE), "--out", str(a_file))
    assert rc == 2 and "exists and is not a directory" in err


def test_measuring_without_a_gpu_says_so(capsys):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: tests/gpu/test_bench_smoke.py measures")
    rc, _, err = run(capsys, "--no-peer")
    assert rc == 2 and "no CUDA GPU visible" in err and err.count("\n") == 1


def test_table_from_the_fixture_names_every_path_with_its_figures(capsys):
    rc, out, _ = run(capsys, "--from", str(FIXTURE))
    assert rc == 0
    doc = json.loads(FIXTURE.read_text())
    names = [p["name"] for p in doc["host_paths"] + doc["peer"]["paths"]]
    assert len(names) == 11
    lines = {line.split()[1]: line for line in out.splitlines() if line.startswith("│")}
    for name in names:
        assert name in lines, name
    # htod-pinned-copy: 2 us at 4 KiB, 4096 B / 2 us = 2.05 GB/s, 1 GiB / 20 ms = 53.69 GB/s
    assert [c.strip() for c in lines["htod-pinned-copy"].split("│")[2:7]] == ["2.0", "2.05", "32.77", "52.43", "53.69"]
    assert "peer-nccl-no-p2p: NCCL connected via SHM/direct/direct" in out
    assert "NVML PCIe byte counters: work" in out
    assert "zero-copy read of managed memory (torch.sum): rx 0.466 GiB for 1.000 GiB moved (x0.466)" in \
        " ".join(out.split())


def test_a_single_gpu_result_says_why_the_peer_paths_are_missing(capsys, tmp_path):
    doc = json.loads(FIXTURE.read_text())
    doc["peer"] = {"status": "skipped: 1 GPU visible, the peer paths need 2", "paths": []}
    one = tmp_path / "one-gpu.json"
    one.write_text(json.dumps(doc))
    rc, out, _ = run(capsys, "--from", str(one), "--out", str(tmp_path / "png"))
    assert rc == 0
    assert "peer GPU paths: skipped: 1 GPU visible, the peer paths need 2" in out
    assert "peer-nccl" not in out
    assert (tmp_path / "png/link.png").stat().st_size > 10_000


def test_json_from_the_fixture_is_the_fixture(capsys):
    rc, out, _ = run(capsys, "--from", str(FIXTURE), "--json")
    assert rc == 0 and json.loads(out) == json.loads(FIXTURE.read_text())


def test_png_from_the_fixture_and_no_json_written_over(capsys, tmp_path):
    rc, _, _ = run(capsys, "--from", str(FIXTURE), "--out", str(tmp_path))
    assert rc == 0
    png = (tmp_path / "link.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert not (tmp_path / "link.json").exists()


def test_pcie_verdict_rests_on_the_pinned_copies():
    doc = json.loads(FIXTURE.read_text())["nvml_pcie"]
    counted = copy.deepcopy(doc["transfers"]) | {"throughput_rx": doc["throughput_rx"]}
    verdict = bench_link.pcie_verdict(counted, doc["idle_bytes_per_s"])
    assert verdict["counters_work"] is True  # the managed zero-copy read's x0.47 does not decide
    assert set(verdict["transfers"]) == set(doc["transfers"]) and verdict["throughput_rx"] == doc["throughput_rx"]
    counted["pinned copy gpu->host"]["agrees"] = False
    assert bench_link.pcie_verdict(counted, doc["idle_bytes_per_s"])["counters_work"] is False
