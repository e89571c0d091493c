"""`transit replay` on hand-made profiles with known reuse, against an independent reference.

The model: 4 chunks of parameters P, 4 of gradients G and 8 of Adam moments M (2 MiB each); one
iteration is two micro-batches, forward {P} and backward {P, G} each, then a fused optimizer in
two launches, each over half of P, G and M. At L = 25 MiB the launches' target (L - L/32) holds
12 chunks of the 16, and every launch fits.

The reference (`lru`) is the rule of libtransit's planned launches written out in Python: a
launch's resident chunks become the most recent (in address order), the least recent others go
until the launch's missing chunks fit under the target, then those come in, most recent.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import pytest

MiB = 1 << 20
CHUNK0 = 0x7F00_0000_0000 >> 21
P = list(range(CHUNK0, CHUNK0 + 4))
G = list(range(CHUNK0 + 4, CHUNK0 + 8))
M = list(range(CHUNK0 + 8, CHUNK0 + 16))
LIMIT, LIMIT_BYTES = "25M", 25 * MiB
TARGET_CHUNKS = (LIMIT_BYTES - LIMIT_BYTES // 32) // (2 * MiB)  # 12
STEP = [P, P + G, P, P + G, P[:2] + G[:2] + M[:4], P[2:] + G[2:] + M[4:]]
KERNEL_NS = 1_000_000


def ranges(chunks: list[int]) -> list[int]:
    """Sorted chunks as the profile's flat inclusive ranges [lo, hi, lo, hi, ...]."""
    out: list[int] = []
    for c in sorted(chunks):
        if out and out[-1] == c - 1:
            out[-1] = c
        else:
            out += [c, c]
    return out


def lru(step: list[list[int]], iterations: int, warmup: int = 2, advise_at: int | None = None) -> list[dict]:
    """Per counted iteration: chunks in, chunks out, chunks read in place (advise_at: the launch of
    iteration warmup + 1 from which everything is advised)."""
    device: OrderedDict[int, None] = OrderedDict()
    applied, out = False, []
    for i in range(1, warmup + iterations + 1):
        moved_in = moved_out = in_place = 0
        for launch, need in enumerate(step):
            if advise_at is not None and i == warmup + 1 and launch == advise_at:
                applied = True
            if applied:
                in_place += sum(c not in device for c in need)
                continue
            for c in sorted(need):
                if c in device:
                    device.move_to_end(c)
            missing = [c for c in sorted(need) if c not in device]
            for victim in [c for c in device if c not in need]:
                if len(device) + len(missing) <= TARGET_CHUNKS:
                    break
                del device[victim]
                moved_out += 1
            for c in missing:
                device[c] = None
            moved_in += len(missing)
        if i > warmup:
            out.append({"in": moved_in, "out": moved_out, "in_place": in_place})
    return out


def profile(tmp_path: Path, step: list[list[int]] = STEP) -> Path:
    n = len(step)
    iteration = {"iteration": 1, "kernels": n, "timed": True, "span_ns": n * KERNEL_NS, "kernel_ns": n * KERNEL_NS,
                 "htod_bytes": 0, "dtoh_bytes": 0, "gpu_page_faults": 0, "remote_map_bytes": 0,
                 "kernel_name": [0] * n, "kernel_duration_ns": [KERNEL_NS] * n,
                 "phases": {"first_ordinal": list(range(n)), "start_ns": [i * KERNEL_NS for i in range(n)],
                            "end_ns": [(i + 1) * KERNEL_NS for i in range(n)], "kernel_ns": [KERNEL_NS] * n,
                            "htod_bytes": [0] * n, "dtoh_bytes": [0] * n, "gpu_page_faults": [0] * n,
                            "touch": [ranges(need) for need in step]}}
    doc = {"schema": "transit.profile/1", "window": {"first_iteration": 1, "iterations": 2}, "kernel_names": ["k"],
           "iterations": [iteration, dict(iteration, iteration=2)]}
    path = tmp_path / "rank0.test.1.profile.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "transit", "replay", *args], capture_output=True, text=True,
                          check=False, cwd=Path(__file__).resolve().parents[2])


def rows(path: Path, policy: str, *extra: str) -> list[dict]:
    r = replay(str(path), "--policy", policy, "--limit", LIMIT, "--json", *extra)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == "transit.replay/1" and doc["policy"] == policy
    return doc["iterations"]


def test_base_moves_what_lru_gives(tmp_path: Path) -> None:
    its = rows(profile(tmp_path), "base")
    assert [r["iteration"] for r in its] == [3, 4, 5, 6]
    for r, ref in zip(its, lru(STEP, 4)):
        assert (r["htod_bytes"], r["dtoh_bytes"]) == (2 * MiB * ref["in"], 2 * MiB * ref["out"])
        assert r["faults"] == ref["in"] and r["evicted_chunks"] == ref["out"] and r["zero_copy_bytes"] == 0
        assert r["resident_peak_bytes"] <= 2 * MiB * TARGET_CHUNKS
    # steady state: as much out as in, and the footprint (16) over the target (12) keeps it moving
    assert its[-1]["htod_bytes"] == its[-1]["dtoh_bytes"] > 0


def test_prefetch_moves_the_same_without_faults_and_sooner(tmp_path: Path) -> None:
    path = profile(tmp_path)
    base, prefetch = rows(path, "base"), rows(path, "prefetch")
    for b, p in zip(base, prefetch):
        assert (p["htod_bytes"], p["dtoh_bytes"], p["faults"]) == (b["htod_bytes"], b["dtoh_bytes"], 0)
        # after 6 ms of kernels, at the default rates: prefetch 47.7 GB/s, DtoH 12.9 GB/s
        assert p["step_s"] == pytest.approx(6e-3 + p["htod_bytes"] / 47.7e9 + p["dtoh_bytes"] / 12.9e9)
        assert p["step_s"] < b["step_s"]


def test_advise_reads_in_place_what_it_left_on_the_host(tmp_path: Path) -> None:
    """Advise applies at launch 3 (halfway through 6) of iteration 3, the first after the window."""
    its = rows(profile(tmp_path), "advise")
    ref = lru(STEP, 4, advise_at=3)
    for r, e in zip(its, ref):
        assert (r["htod_bytes"], r["dtoh_bytes"], r["zero_copy_bytes"]) == (
            2 * MiB * e["in"], 2 * MiB * e["out"], 2 * MiB * e["in_place"])
    assert all(r["htod_bytes"] == r["dtoh_bytes"] == r["faults"] == r["fill_bytes"] == 0 for r in its[1:])
    assert its[-1]["zero_copy_bytes"] > 0  # what the device could not hold is read in place


def test_everything_fits_nothing_moves(tmp_path: Path) -> None:
    for policy in ("base", "prefetch", "advise"):
        for r in rows(profile(tmp_path), policy, "--iterations", "2", "--limit", "64M"):  # 16 chunks fit
            assert (r["htod_bytes"], r["dtoh_bytes"], r["zero_copy_bytes"]) == (0, 0, 0), policy


def test_compute_time_is_spread_over_the_phases(tmp_path: Path) -> None:
    r = rows(profile(tmp_path), "base", "--compute-s", "0.5")[0]
    assert r["compute_s"] == pytest.approx(0.5)
    assert r["step_s"] == pytest.approx(0.5 + r["htod_bytes"] / 5.9e9 + r["dtoh_bytes"] / 12.9e9)


def test_recorded_h200_profile_replays() -> None:
    """The committed 1.9B profile at its own L: base moves 30 GB or more each way per step (the
    footprint, 34.7 GiB, is 1.36 L; each micro-batch's parameters and gradients go round) and keeps
    the device full."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "profile" / "h200-gb8-base.profile.json.gz"
    r = replay(str(fixture), "--policy", "base", "--limit", "25.5G", "--iterations", "2", "--json")
    assert r.returncode == 0, r.stderr
    for it in json.loads(r.stdout)["iterations"]:
        assert it["htod_bytes"] == it["dtoh_bytes"] >= 30e9 and it["resident_peak_bytes"] >= 0.95 * 25.5 * (1 << 30)


@pytest.mark.parametrize(("args", "message"), [
    (["--policy", "sometimes"], "'sometimes' is not a policy"),
    (["--limit", "12Q"], "'12Q' is not a size"),
    (["--limit", "9M"], "is below the working set of the profile's largest kernel"),
    (["--iterations", "0"], "--iterations 0 is not allowed"),
    (["--compute-s", "nan"], "--compute-s nan is not a time"),
    (["--fault-gbps", "-1"], "--fault-gbps -1.0 is not a rate"),
])
def test_bad_arguments_get_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    base = ["--policy", "base", "--limit", LIMIT]
    for i in range(0, len(args), 2):  # the case's value replaces the default
        if args[i] in base:
            base[base.index(args[i]) + 1] = args[i + 1]
        else:
            base += args[i:i + 2]
    r = replay(str(profile(tmp_path)), *base)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize("content", [b"", b"\x1f\x8b\x08\x00truncated", gzip.compress(b'{"schema": "other/9"}')],
                         ids=["empty", "truncated", "wrong-schema"])
def test_bad_profile_gets_one_line(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "p.profile.json.gz"
    path.write_bytes(content)
    r = replay(str(path), "--policy", "base", "--limit", LIMIT)
    assert r.returncode == 2 and r.stderr.startswith(f"transit replay: profile {path}:"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("garble", "why"), [
    (lambda doc: doc.update(iterations=[1, 2]), "TypeError: 'int' object is not subscriptable"),
    (lambda doc: doc["iterations"][0]["phases"].pop("touch"), "KeyError: 'touch'"),
    (lambda doc: doc["window"].update(iterations=-3), "a count or size that is not a whole number from 0"),
    (lambda doc: doc["iterations"][0]["phases"].update(touch=[[0, 1 << 50]]),
     f"{(1 << 50) + 1} chunk touches in one iteration; at most 16777216 are read"),
], ids=["iteration-not-an-object", "no-touch", "negative-window", "a-range-of-2-EiB"])
def test_a_profile_of_the_schema_that_libtransit_did_not_write_gets_one_line(tmp_path: Path, garble, why: str) -> None:
    """Before: a traceback (KeyError, TypeError, cffi's OverflowError), or a range of 2^50 chunks
    expanded one by one until the kernel killed the process."""
    path = profile(tmp_path)
    doc = json.loads(gzip.decompress(path.read_bytes()))
    garble(doc)
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    r = replay(str(path), "--policy", "base", "--limit", LIMIT)
    assert (r.returncode, r.stderr) == (2, (f"transit replay: profile {path}: not a profile as TRANSIT_PROFILE=1 "
                                           f"writes it ({why})\n"))


OVERFLOW = 2 * MiB * (len(P) + len(G) + len(M) - TARGET_CHUNKS)  # what cannot stay on the device
OPTIMIZER = STEP[4:]
MICRO_BATCH = STEP[:2]


def steady_pcie_bytes(path: Path, policy: str) -> int:
    last = rows(path, policy)[-1]
    return last["htod_bytes"] + last["dtoh_bytes"] + last["zero_copy_bytes"]


@pytest.mark.parametrize("order", ["optimizer last", "optimizer first", "optimizer between micro-batches"])
def test_hybrid_moves_least_and_at_most_twice_the_overflow(tmp_path: Path, order: str) -> None:
    """Hybrid keeps the most reused chunks (parameters, gradients) and reads the moments, touched
    once, in place, wherever in the step advise's midpoint falls."""
    step = {"optimizer last": STEP, "optimizer first": OPTIMIZER + MICRO_BATCH * 2,
            "optimizer between micro-batches": MICRO_BATCH + OPTIMIZER + MICRO_BATCH}[order]
    path = profile(tmp_path, step)
    hybrid = steady_pcie_bytes(path, "hybrid")
    assert hybrid <= steady_pcie_bytes(path, "advise") and hybrid < steady_pcie_bytes(path, "prefetch")
    assert hybrid <= 2 * OVERFLOW
    assert rows(path, "hybrid")[-1]["zero_copy_bytes"] == 2 * MiB * (len(P) + len(G) + len(M) - TARGET_CHUNKS)


def test_hybrid_beats_advise_when_its_midpoint_leaves_gradients_out(tmp_path: Path) -> None:
    """With the optimizer first, advise's midpoint (the first backward) finds half the gradients
    evicted and reads them in place every micro-batch: 16 MiB a step against hybrid's 8."""
    path = profile(tmp_path, OPTIMIZER + MICRO_BATCH * 2)
    assert steady_pcie_bytes(path, "advise") == 16 * MiB and steady_pcie_bytes(path, "hybrid") == 8 * MiB


def test_hybrid_places_once_the_profile_is_built(tmp_path: Path) -> None:
    """Iteration 3 (the window's drain) runs as base; iteration 4 begins placed: the moments that
    do not fit go out, nothing comes back later."""
    its = rows(profile(tmp_path), "hybrid")
    base = rows(profile(tmp_path), "base")
    assert (its[0]["htod_bytes"], its[0]["dtoh_bytes"]) == (base[0]["htod_bytes"], base[0]["dtoh_bytes"])
    assert all(r["htod_bytes"] == r["dtoh_bytes"] == 0 for r in its[2:])


def test_hybrids_look_ahead_streams_what_it_reads_in_place_on_the_recorded_profile() -> None:
    """The committed 1.9B profile (global batch 8) at L = 25.5 GiB: with the mover's stream plan the
    host chunks touched by several phases cross PCIe in and back behind the compute instead of
    being read per touch, so a step moves fewer bytes than hybrid in place and advise, reads almost
    nothing in place, stays within L, and is predicted faster."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "profile" / "h200-gb8-base.profile.json.gz"

    def last(policy: str, *extra: str) -> dict:
        r = replay(str(fixture), "--policy", policy, "--limit", "25.5G", "--iterations", "3", "--json", *extra)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["iterations"][-1]

    def pcie(it: dict) -> int:
        return it["htod_bytes"] + it["dtoh_bytes"] + it["zero_copy_bytes"]

    streamed, in_place, advise = last("hybrid", "--look-ahead"), last("hybrid"), last("advise")
    assert streamed["streamed_bytes"] == streamed["htod_bytes"] == streamed["dtoh_bytes"] > 0
    assert pcie(streamed) < pcie(in_place) < pcie(advise)
    assert streamed["zero_copy_bytes"] < 0.05 * in_place["zero_copy_bytes"]
    assert streamed["resident_peak_bytes"] <= 25.5 * (1 << 30)
    assert streamed["step_s"] < in_place["step_s"]


def test_look_ahead_is_hybrids_alone(tmp_path: Path) -> None:
    r = replay(str(profile(tmp_path)), "--policy", "advise", "--limit", LIMIT, "--look-ahead")
    message = "transit replay: --look-ahead is hybrid's mover; --policy advise has none (use --policy hybrid)\n"
    assert (r.returncode, r.stderr) == (2, message)
