"""Synthetic Seren-like and Kalos-like traces, calibrated on the published ACME CDFs.

The real ACME job CSVs are not shipped (users supply them); the CDFs read out of the ACME
paper's figures are (``data/acme_published_cdfs.csv``, from InternLM/AcmeTrace, CC BY 4.0,
Hu et al., NSDI '24). From them:

* GPU count: sampled from the published job-count CDF over ``gpu_num`` (its step corners; x
  values above 300 that the figure rounding shifted by 1 to 3 are snapped back to a multiple of 8).
* Duration: sampled from the published duration CDF at 2^i s, log-linear between points.
* GPU time by GPU count: large jobs run longer (jobs above 8 GPUs are 3 % of Seren's jobs and
  hold 88 % of its GPU time). The sampled durations are dealt out to jobs by a rank coupling whose
  per-size offsets are fitted to the published GPU-time CDF; the duration marginal is unchanged.
* Arrivals: a Poisson process at the trace's GPU-job rate (public-CSV job count over its span).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from transit.sim.jobs import Job

PUBLISHED_CDFS = Path(__file__).with_name("data") / "acme_published_cdfs.csv"
DAY_S = 86400.0
# rank coupling of size and duration (see _couple): log-scale spread within a size class,
# fitting step and iterations (the fitted GPU-time shares settle well within 20 iterations)
COUPLING_NOISE = 1.0
COUPLING_STEP = 0.5
COUPLING_ITERATIONS = 20
MIN_TIME_SHARE = 1e-9  # a class the GPU-time CDF shows no time for still needs a finite target


@dataclass(frozen=True)
class Workload:
    cluster: str          # row name in the published CDFs
    jobs: int             # GPU jobs in the public CSV
    span_days: float      # trace span
    racks: int            # the paper's full-size cluster for it (32-GPU racks)


# Job counts: README of the ACME snapshot (Seren 450,590 GPU jobs, Kalos 19,907); spans: March-August
# 2023 for Seren (184 days), May-August for Kalos (123 days).
WORKLOADS = {
    "seren": Workload("Seren", 450_590, 184.0, 72),
    "kalos": Workload("Kalos", 19_907, 123.0, 76),
}


def _published(cluster: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, cdf as a fraction) of one published CDF, x sorted, repeated end rows dropped."""
    xs: list[float] = []
    ps: list[float] = []
    with open(PUBLISHED_CDFS, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row["cluster"] != cluster or row["metric"] != metric:
                continue
            if row["job_type"] not in ("all_gpu_jobs",):
                continue
            x = float(row["x"])
            if row["x_exact"] == "no" and x > 300 and int(x) % 8 in (1, 2, 3):
                x -= int(x) % 8  # 513 is the step at 512, 770 the one at 768
            if xs and x == xs[-1]:
                ps[-1] = max(ps[-1], float(row["cdf_pct"]) / 100)
                continue
            xs.append(x)
            ps.append(float(row["cdf_pct"]) / 100)
    if not xs:
        raise ValueError(f"no published CDF {metric} for {cluster}")
    return np.array(xs), np.maximum.accumulate(np.array(ps))


def gpu_count_cdf(cluster: str) -> tuple[np.ndarray, np.ndarray]:
    return _published(cluster, "cdf_job_count_vs_gpu_num")


def gpu_time_cdf(cluster: str) -> tuple[np.ndarray, np.ndarray]:
    return _published(cluster, "cdf_gpu_time_vs_gpu_num")


def duration_cdf(cluster: str) -> tuple[np.ndarray, np.ndarray]:
    return _published(cluster, "cdf_jobs_vs_duration_s")


def _sample_durations(u: np.ndarray, xs: np.ndarray, ps: np.ndarray) -> np.ndarray:
    """Inverse of the duration CDF, linear in log2(seconds) between published points (>= 1 s)."""
    # CDF is flat where the trace has no jobs; keep strictly increasing points for interpolation
    keep = np.concatenate(([True], np.diff(ps) > 0))
    log_x = np.log2(xs[keep])
    seconds = np.exp2(np.interp(u, ps[keep], log_x))
    return np.ceil(seconds)  # whole seconds, as in the trace; ceil keeps CDF(2^i) exact


def size_classes(cluster: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPU-count classes with their share of jobs and of GPU time (fractions).

    The job-count CDF keeps only the corners of its steps; the GPU-time CDF shows more sizes
    (e.g. 192, 320, 448 GPUs in Seren) whose job share is too small to see in the count figure.
    Each count step is split across the GPU-time steps inside it, in proportion to GPU time per
    GPU, so that both published CDFs hold at their published points.
    """
    count_x, count_p = gpu_count_cdf(cluster)
    time_x, time_p = gpu_time_cdf(cluster)

    def time_cdf_at(x: float) -> float:
        index = np.searchsorted(time_x, x, side="right") - 1
        return float(time_p[index]) if index >= 0 else 0.0

    sizes: list[float] = []
    job_share: list[float] = []
    time_share: list[float] = []
    previous_x, previous_p = 0.0, 0.0
    for x, p in zip(count_x, count_p):
        jobs_here = p - previous_p
        inner = [s for s in time_x if previous_x < s <= x and time_cdf_at(s) > time_cdf_at(s - 1)]
        steps = [time_cdf_at(s) - time_cdf_at(s - 1) for s in inner]
        if jobs_here > 0 and len(inner) > 1:
            weights = np.array(steps) / np.array(inner)
            for s, step, weight in zip(inner, steps, weights):
                sizes.append(s)
                job_share.append(jobs_here * weight / weights.sum())
                time_share.append(step)
        elif jobs_here > 0:
            sizes.append(x)
            job_share.append(jobs_here)
            time_share.append(time_cdf_at(x) - time_cdf_at(previous_x))
        previous_x, previous_p = x, p
    shares = np.array(time_share)
    return np.array(sizes), np.array(job_share), shares / shares.sum()


def _couple(size_class: np.ndarray, durations: np.ndarray, sizes: np.ndarray,
            target_time_share: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Permute ``durations`` over jobs so each size class gets its target share of GPU time.

    Jobs are ranked by a per-class offset plus noise, and the sorted durations are dealt out by
    rank, so the duration marginal is exactly the sampled one; the offsets are fitted.
    """
    noise = rng.standard_normal(len(durations)) * COUPLING_NOISE
    offsets = np.zeros(len(sizes))
    ordered = np.sort(durations)
    classes = len(sizes)
    assigned = durations
    for _ in range(COUPLING_ITERATIONS):
        ranks = np.argsort(np.argsort(offsets[size_class] + noise))
        assigned = ordered[ranks]
        gpu_time = np.bincount(size_class, weights=assigned * sizes[size_class], minlength=classes)
        share = gpu_time / gpu_time.sum()
        present = share > 0
        target = np.maximum(target_time_share[present], MIN_TIME_SHARE)
        offsets[present] += COUPLING_STEP * np.log(target / share[present])
    return assigned


def generate(workload: str = "seren", jobs: int | None = None, seed: int = 1) -> list[Job]:
    """A synthetic trace of ``jobs`` GPU jobs (default: the public CSV's count) for ``workload``."""
    spec = WORKLOADS[workload]
    count = spec.jobs if jobs is None else jobs
    rng = np.random.default_rng(seed)
    sizes, job_share, time_share = size_classes(spec.cluster)
    size_class = rng.choice(len(sizes), size=count, p=job_share / job_share.sum())
    durations = _sample_durations(rng.random(count), *duration_cdf(spec.cluster))
    durations = _couple(size_class, durations, sizes, time_share, rng)
    gpus = sizes[size_class].astype(np.int64)
    rate = spec.jobs / (spec.span_days * DAY_S)  # the trace's arrival rate, whatever the job count
    submits = np.cumsum(rng.exponential(1.0 / rate, count))
    return [Job(str(i + 1), float(s), float(d), int(g), "COMPLETED")
            for i, (s, d, g) in enumerate(zip(submits.tolist(), durations.tolist(), gpus.tolist()))]


def empirical_cdf_pct(values: np.ndarray, at: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Percentage of ``values`` (weighted by ``weights``) at or below each point of ``at``."""
    order = np.argsort(values)
    sorted_values = values[order]
    cumulative = np.cumsum(np.ones(len(values)) if weights is None else weights[order])
    index = np.searchsorted(sorted_values, at, side="right")
    below = np.where(index > 0, cumulative[np.maximum(index - 1, 0)], 0.0)
    return 100.0 * below / cumulative[-1]


def calibration_report(jobs: list[Job], workload: str) -> dict:
    """Largest gap, in percentage points, between each generated CDF and the published one."""
    cluster = WORKLOADS[workload].cluster
    gpus = np.array([j.gpus for j in jobs], dtype=float)
    durations = np.array([j.duration for j in jobs])
    report = {}
    for name, (xs, ps), values, weights in (
        ("gpu_count", gpu_count_cdf(cluster), gpus, None),
        ("duration", duration_cdf(cluster), durations, None),
        ("gpu_time_by_gpu_count", gpu_time_cdf(cluster), gpus, gpus * durations),
    ):
        generated = empirical_cdf_pct(values, xs, weights)
        report[name] = round(float(np.max(np.abs(generated - 100 * ps))), 3)
    over8 = gpus > 8
    report["gpu_time_share_over_8_gpus_pct"] = round(
        float(100 * (gpus * durations)[over8].sum() / (gpus * durations).sum()), 2)
    return report
