"""What the bench reads of libtransit's per-process stats files after a run: one summary over its
ranks (the policy, L, the device bound's peak, migrations, faults), and the faults per iteration."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

TIMELINE_KEEP = 200  # a run's last iterations: its steady state


def load_transit_stats(directory: Path) -> list[dict]:
    """Per-process stats files of processes that used CUDA (the torchrun agent writes none)."""
    docs = []
    for path in sorted(directory.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            docs.append({"file": path.name, "unreadable": str(exc)})
            continue
        if doc.get("cuda_active"):
            if isinstance(doc.get("timeline"), list):
                doc["timeline"] = doc["timeline"][-TIMELINE_KEEP:]
            doc["file"] = path.name
            docs.append(doc)
    return docs


def _get(doc, *keys: str):
    for key in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def _host_at_last_mark(doc: dict) -> int | None:
    """Bytes on the host at the rank's last iteration mark: its managed peak less that mark's device
    bound (the runner's residency sweep moves everything to the host after the last step, so the
    spilled peak says little)."""
    managed = _get(doc, "allocations", "managed_bytes_peak")
    bounds = [e.get("device_bound_peak_bytes") for e in _get(doc, "timeline") or []]
    bound = next((b for b in reversed(bounds) if isinstance(b, int)), None)
    return max(0, managed - bound) if isinstance(managed, int) and bound is not None else None


def transit_summary(stats: list[dict]) -> dict | None:
    """One run's figures over its ranks' stats files; None without a readable one."""
    ranks = [s for s in stats if "unreadable" not in s]
    if not ranks:
        return None

    def total(*keys: str) -> int | None:
        values = [_get(r, *keys) for r in ranks]
        return sum(values) if all(isinstance(v, (int, float)) for v in values) else None

    offloaded = [_host_at_last_mark(r) for r in ranks]
    warmup = _get(ranks[0], "config", "warmup_iters") or 0
    return {
        "ranks": len(ranks),
        "policy": _get(ranks[0], "config", "policy"),
        "mode": _get(ranks[0], "config", "mode"),
        "limit_bytes": _get(ranks[0], "config", "limit_bytes"),
        "offloaded_bytes_per_gpu": max(offloaded) if all(isinstance(v, int) for v in offloaded) else None,
        "device_bound_peak_bytes": max((_get(r, "memory", "device_bound_peak_bytes") for r in ranks
                                        if _get(r, "memory", "device_bound_peak_bytes") is not None), default=None),
        # after the profile exists: warm-up, one iteration for late records, one to apply it
        "device_bound_peak_after_profile_bytes": max(
            (e["device_bound_peak_bytes"] for r in ranks for e in _get(r, "timeline") or []
             if e.get("device_bound_peak_bytes") is not None and e["iteration"] > warmup + 2), default=None),
        "htod_bytes": total("migrations", "htod", "bytes"), "dtoh_bytes": total("migrations", "dtoh", "bytes"),
        "gpu_page_faults": total("faults", "gpu_page_faults"),
        "iterations": max(_get(r, "iterations", "count") or 0 for r in ranks),
        "cuda_errors": [_get(r, "cuda_error") for r in ranks if _get(r, "cuda_error")],
    }


def faults_per_iteration(stats: dict) -> list[int]:
    """GPU page faults in each iteration of one stats file: the differences of the cumulative
    counts at its iteration marks."""
    counts = [e["gpu_page_faults"] for e in stats.get("timeline") or [] if "gpu_page_faults" in e]
    return [b - a for a, b in itertools.pairwise(counts)]
