"""The benchmark protocol: an experiment's runs on one GPU, one after another, and
one summary JSON (transit.bench-summary/1) per experiment. `python -m bench` is its command line.

The protocol (bench/README.md), the same for every experiment, on one GPU:
- systems alternate, A B C A B C ..., for REPEATS (>= 3) repeats, one run after another;
- every run follows common.SettleRule: it stops once its step times have settled and TIMED_STEPS
  steps are timed (or, not settled by the rule's last start, timed from there, and marked so);
- fair memory: a TRANSIT system with a cap first runs once at L = cap - NON_ALLOCATOR_MARGIN_BYTES
  (its calibration run, in the summary, out of the statistics); its worst overshoot there, its own
  bound's peak over L, is taken off L for its timed repeats. Every row gives its peak by its own
  measure (PyTorch's reserved bytes; TRANSIT's bound) and by NVML, beside the cap;
- one commit for every part of an experiment; the summary says whether the hosts were one.
A device command may be limited (10 minutes on the project's device machines), so a plan is cut
into parts (--part K/N), each writing its own summary and raw archive; `merge` joins them; or one
command runs every slot within --time-limit. The summary records the estimated and the actual
device time.

The stages, each importing only those before it: experiments.py (the catalogue), planning.py (the
runs' order, parts and time budget), summary.py (what a summary keeps of the runs), estimates.py
(device time from the recorded summaries), this file (the commands and the runs).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from bench.common import REPO_ROOT, SettleRule, git_commit, write_json
from bench.experiments import DEEPSPEED_KINDS, Experiment, System, system_config, transit_limit
from bench.planning import SETUP_S, Budget, Run, budget, makespan
from bench.summary import compact_result, compact_transit, print_summary, summary_doc
from bench.transit_stats import load_transit_stats, transit_summary
from transit.emulate import free_gpu_memory, visible_gpus
from transit.errors import UsageError

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
LOG_TAIL_LINES = 30


def run_command(system: System, rule: SettleRule, run_dir: Path, limit: int | None,
                profile: bool) -> tuple[list[str], dict]:
    """The argv and the environment additions of one run of `system` under `rule`, on the first
    `system.gpus` GPUs that CUDA_VISIBLE_DEVICES leaves (emulated nodes round-robin over them)."""
    if system.nodes:
        launcher = [sys.executable, "-m", "transit.emulate", str(system.nodes), "--nproc-per-node",
                    str(system.ranks_per_node)]
        if system.transit:
            launcher += ["--transit", system.policy, "--out", str(run_dir / "transit"),
                         *(["--mem-limit", str(limit)] if limit is not None else [])]
        launcher.append("--")
    else:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                    str(system.gpus)]
    args = ["--model", system.model, "--global-batch", str(system.global_batch), "--local-batch", str(system.local_batch),
            "--settle-from", str(rule.first), "--settle-by", str(rule.max_start), "--timed-steps", str(rule.timed),
            "--out", str(run_dir / "result.json")]
    if system.cores_per_rank:
        args += ["--cpu-cores-per-rank", str(system.cores_per_rank)]
    if system.kind in DEEPSPEED_KINDS:
        script = ["bench/deepspeed_train.py", "--system", system.kind, "--cpu-adam", "deepspeed"]
    else:
        script = ["bench/train.py", "--label", system.name, "--tp", str(system.tp)]
        if system.kind == "fsdp2-cpu-offload":
            script += ["--offload", "fsdp-cpu"]
        if system.deterministic:
            script += ["--deterministic"]
        if system.transit:
            script += ["--residency-sweep"]
        script += list(system.train_args)
    if system.cap and not system.transit:
        args += ["--mem-cap", system.cap]
    env = dict(MULTICAST_OFF) | dict(system.env) | {"CUDA_VISIBLE_DEVICES": ",".join(first_gpus(system.gpus))}
    if system.cores_per_rank:
        env["OMP_NUM_THREADS"] = str(system.cores_per_rank)
    argv = [*launcher, *script, *args]
    if system.transit and system.nodes:
        if profile:
            env["TRANSIT_PROFILE"] = "1"
    elif system.transit:
        mem = ["--mem-limit", str(limit)] if limit is not None else []
        argv = [sys.executable, "-m", "transit", "run", "--policy", system.policy, *mem,
                "--out", str(run_dir / "transit"), "--", *argv]
        if profile:
            env["TRANSIT_PROFILE"] = "1"
    return argv, env


def first_gpus(n: int) -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return visible.split(",")[:n] if visible else [str(i) for i in range(n)]


def check_gpus(experiment: Experiment) -> None:
    """Refuses, in one line, an experiment whose systems need more GPUs than this machine lets them
    use; without a GPU (the tiny model on the CPU) every system runs as processes."""
    free = free_gpu_memory()
    need = max(s.gpus for s in experiment.systems)
    have = len(visible_gpus(free, dict(os.environ)))
    if free and have < need:
        raise UsageError(f"{experiment.name} needs {need} GPUs ({experiment.machine}); this machine lets it use "
                         f"{have} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the run's process group (libtransit writes its stats on it), SIGKILL after 15 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def start_run(run: Run, work: Path, limits: dict[str, int], profile: bool) -> dict:
    """Start one run in the background; the returned dict holds its process and what run_record needs."""
    run_dir = work / run.id
    run_dir.mkdir(parents=True, exist_ok=True)
    limit = run.system.mem_limit_bytes
    if run.calibrated:  # a calibration run, or one whose calibration failed, runs at L itself
        limit = limits.get(run.system.name) if run.repeat else None
        limit = transit_limit(run.system, 0) if limit is None else limit
    argv, env_extra = run_command(run.system, run.system.rule(run.repeat), run_dir, limit, profile)
    command = " ".join(f"{k}={shlex.quote(v)}" for k, v in env_extra.items()) + " " + shlex.join(argv)
    (run_dir / "command.txt").write_text(command + "\n")
    print(f"=== {run.id}: {command}", flush=True)
    log = open(run_dir / "log.txt", "w")  # noqa: SIM115 (closed when the run ends)
    env = os.environ | env_extra | {"BENCH_COMMAND": command}
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return {"run": run, "proc": proc, "log": log, "t0": time.time(), "limit": limit, "command": command,
            "dir": run_dir}


def finish_run(live: dict, rc, estimated_s: float) -> dict:
    live["log"].close()
    record = run_record(live["run"], live["dir"], rc, live["command"], live["limit"])
    record["start_unix"], record["end_unix"] = round(live["t0"], 1), round(time.time(), 1)
    record["elapsed_s"] = round(record["end_unix"] - record["start_unix"], 1)
    record["estimated_s"] = round(estimated_s, 1)
    print(f"    {record['id']}: {record['status']} in {record['elapsed_s']:.0f} s (estimated {estimated_s:.0f} s), "
          f"{record.get('tflops_per_gpu') or 0:.1f} TFLOPS/GPU", flush=True)
    return record


def run_part(runs: list[Run], work: Path, limits: dict[str, int], profile: bool, seconds, window: Budget,
             experiment: Experiment) -> list[dict]:
    """The runs one after another, a timed repeat of a calibrated system with the L its calibration
    gave; each started and stopped by `window`; `seconds(run)`: its estimate, recorded beside its
    actual time."""
    records: list[dict] = []
    live = None
    try:
        for run in runs:
            limits = calibrated_limits(experiment, records, limits)
            left = window.deadline - time.time()
            if window.need(run) > left:
                records.append(skipped(run, f"needs {window.need(run):.0f} s, {left:.0f} s left in this command"))
                continue
            live = start_run(run, work, limits, profile)
            stop_at = min(live["t0"] + window.stop_after(run), window.deadline)
            try:
                rc = live["proc"].wait(timeout=max(0.0, stop_at - time.time()))
            except subprocess.TimeoutExpired:
                _kill_group(live["proc"])
                rc = "timeout"
            records.append(finish_run(live, rc, seconds(run)))
            live = None
    finally:  # stopped (SIGTERM, ^C): the run started its own session, so stop it here
        if live:
            _kill_group(live["proc"])
    return records


def skipped(run: Run, reason: str) -> dict:
    print(f"=== {run.id}: skipped ({reason})", flush=True)
    return {"id": run.id, "system": run.system.name, "repeat": run.repeat,
            "role": "calibration" if run.repeat == 0 else "timed", "status": "skipped", "reason": reason,
            "config": system_config(run.system)}


def run_record(run: Run, run_dir: Path, rc, command: str, limit: int | None) -> dict:
    """One run as the summary keeps it: its settings, step times, losses, memory and PCIe bytes."""
    system = run.system
    result_file = run_dir / "result.json"
    result = json.loads(result_file.read_text()) if result_file.exists() else None
    stats_dir = run_dir / "transit"
    stats = load_transit_stats(stats_dir) if stats_dir.is_dir() else []
    record = {"id": run.id, "system": system.name, "repeat": run.repeat,
              "role": "calibration" if run.repeat == 0 else "timed",
              "status": "ok" if rc == 0 and result else "timeout" if rc == "timeout" else "failed", "rc": rc,
              "command": command, "limit_bytes": limit,
              "config": system_config(system), "raw": f"{run.id}/ (in the part's raw archive)"}
    if record["status"] != "ok":
        log = run_dir / "log.txt"
        record["log_tail"] = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:] if log.exists() else []
    if result:
        record |= compact_result(result, system.rule(run.repeat))
    if stats:
        record["transit"] = compact_transit(transit_summary(stats), stats, record)
        if system.ranks > 1:
            record["transit_report"] = transit_report(stats_dir, run_dir)
    return record


def transit_report(stats_dir: Path, run_dir: Path) -> dict:
    """`transit report` over the run's per-rank stats files (the multi-rank report, item 3)."""
    argv = [sys.executable, "-m", "transit", "report", str(stats_dir), "--no-slurm"]
    text = subprocess.run([*argv, "--plot", str(run_dir / "report-plots")], cwd=REPO_ROOT, capture_output=True,
                          text=True, check=False, timeout=120)
    as_json = subprocess.run([*argv, "--json"], cwd=REPO_ROOT, capture_output=True, text=True, check=False, timeout=120)
    (run_dir / "report.txt").write_text(text.stdout + text.stderr)
    ranks = None
    if as_json.returncode == 0:
        (run_dir / "report.json").write_text(as_json.stdout)
        ranks = len(json.loads(as_json.stdout).get("ranks") or [])
    return {"command": shlex.join(argv), "rc": text.returncode, "json_rc": as_json.returncode, "ranks": ranks,
            "files": "report.txt, report.json, report-plots/ in the run's raw directory"}


def calibrated_limits(experiment: Experiment, runs: list[dict], given: dict[str, int]) -> dict[str, int]:
    """Each capped TRANSIT system's L for its timed repeats: given on the command line (a later part),
    else from its calibration run: L - its overshoot there."""
    limits = dict(given)
    for run in runs:
        system = next(s for s in experiment.systems if s.name == run["system"])
        if run["role"] == "calibration" and system.name not in limits and run["status"] == "ok":
            overshoot = (run.get("transit") or {}).get("overshoot_bytes")
            if overshoot is not None:
                limits[system.name] = transit_limit(system, overshoot) // (1 << 20) * (1 << 20)
    return limits


def execute(experiment: Experiment, runs: list[Run], part: int, n_parts: int, args, limits, seconds) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # run_part's finally stops the runs
    t0 = time.time()
    work = args.work / experiment.name
    work.mkdir(parents=True, exist_ok=True)
    records = run_part(runs, work, limits, args.transit_profile, seconds,
                       budget(seconds, part, args.time_limit, t0, args.command_limit), experiment)
    limits = calibrated_limits(experiment, records, limits)
    name = f"{experiment.name}-part{part}" if part else experiment.name
    extra = {"command": shlex.join([sys.executable, *sys.argv]), "driver_commit": git_commit(),
             "limits": dict(limits), "elapsed_s": round(time.time() - t0, 1),
             "device_time_s": {"estimated": round(SETUP_S + makespan(runs, seconds)),
                               "actual": round(time.time() - t0 + SETUP_S)},
             "raw": f"{name}-raw.tar.gz (device output, not committed)"}
    doc = summary_doc(experiment, records, [part] if part else [], n_parts, extra)
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / f"{name}.json", doc)
    with tarfile.open(args.out / f"{name}-raw.tar.gz", "w:gz") as tar:
        tar.add(work, arcname=name)
    print_summary(doc)
    if limits and part and part < n_parts:
        print("next part: " + " ".join(f"--limit {k}={v}" for k, v in sorted(limits.items())))
    return 0
