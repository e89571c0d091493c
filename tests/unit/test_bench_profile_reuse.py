"""bench/profile_reuse.py on hybrid's recorded H200 profile (global batch 64, micro-batch 8, 49f6d8b):
the figures design-notes.md gives for it ("Hybrid at micro-batch 8: slower than advise, and the
guard": reuse moves between iterations)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "tests" / "fixtures" / "profile" / "h200-gb64-mb8-hybrid.profile.json.gz"


def test_reuse_moves_and_the_host_sets_touches() -> None:
    r = subprocess.run([sys.executable, "bench/profile_reuse.py", str(PROFILE), "--json"], cwd=REPO,
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    moves = out["class_changes"]
    assert (moves["9+ -> 1"], moves["2 -> 1"] + moves["3-4 -> 1"]) == (89, 106)
    last, busiest = (out["placements"][rule]["touches_outside_optimizer"] for rule in ("last", "busiest"))
    assert [(t["gemm"] + t["other"], t["gemm"]) for t in last] == [(4307, 2748), (1288, 290)]
    assert [(t["gemm"] + t["other"], t["gemm"]) for t in busiest] == [(1911, 584), (1765, 617)]
    # placed up to the same capacity by either rule: the host sets are equally large
    sizes = {rule: sum(p["host_bytes_by_reuse"].values()) for rule, p in out["placements"].items()}
    assert sizes["last"] == sizes["busiest"] > 14 * 2**30


def test_a_profile_of_one_iteration_is_refused(tmp_path: Path) -> None:
    import gzip

    doc = json.loads(gzip.decompress(PROFILE.read_bytes()))
    doc["iterations"] = doc["iterations"][:1]
    one = tmp_path / "one.profile.json.gz"
    one.write_bytes(gzip.compress(json.dumps(doc).encode()))
    r = subprocess.run([sys.executable, "bench/profile_reuse.py", str(one)], cwd=REPO, capture_output=True,
                       text=True, check=False)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "needs two profiled iterations" in r.stderr
