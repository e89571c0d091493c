"""The SPANK plugin on the real local cluster: options, validation before submission, the task
environment in every task of srun and sbatch steps, untouched jobs, and stats files."""

from __future__ import annotations

import glob
import json
import os
import random
import re
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.slurm.conftest import DEV_CLUSTER, REPO, Cluster, unique_job_name

pytestmark = pytest.mark.slurm

# A harmless library a user might already preload; the plugin must keep it after libtransit.
USER_PRELOAD_CANDIDATES = ("/usr/lib/x86_64-linux-gnu/libm.so.6", "/lib/x86_64-linux-gnu/libm.so.6",
                           "/usr/lib64/libm.so.6", "/usr/lib/aarch64-linux-gnu/libm.so.6")
USER_PYTHONPATH = "/opt/user/site"
# Prints what a task sees, one line per task.
SHOW_TASK_ENV = ('echo "TASK|$SLURM_PROCID|$SLURM_JOB_ID|$SLURM_STEP_ID|$SLURMD_NODENAME|'
                 '${LD_PRELOAD-}|${PYTHONPATH-}|$(env | grep ^TRANSIT_ | sort | tr "\\n" ,)"')


def user_preload() -> str:
    for path in USER_PRELOAD_CANDIDATES:
        if os.path.exists(path):
            return path
    pytest.skip("no libm.so.6 to preload as the user's own library")


def parse_tasks(stdout: str) -> list[dict[str, object]]:
    tasks = []
    for line in stdout.splitlines():
        if not line.startswith("TASK|"):
            continue
        _, rank, job, step, node, preload, pythonpath, transit = line.split("|")
        tasks.append({
            "rank": int(rank), "job": job, "step": step, "node": node,
            "preload": preload.split(":") if preload else [],
            "pythonpath": pythonpath.split(":") if pythonpath else [],
            "transit": dict(kv.split("=", 1) for kv in transit.split(",") if kv),
        })
    return sorted(tasks, key=lambda t: (t["step"], t["rank"]))


def test_help_lists_the_options(cluster: Cluster) -> None:
    for command in ("srun", "sbatch", "salloc"):
        out = cluster.run([command, "--help"])
        assert out.returncode == 0, out.stderr
        assert "--transit=base|prefetch|advise|off" in out.stdout, command
        assert "--transit-mem-limit=SIZE" in out.stdout, command
        assert "--transit-report-dir=DIR" in out.stdout, command


# What Slurm's plugin loader looks up; spank/spank_transit.map must export nothing else.
SPANK_EXPORTS = {"plugin_name", "plugin_type", "plugin_version", "spank_plugin_version",
                 "slurm_spank_init", "slurm_spank_init_post_opt", "slurm_spank_task_init"}


def test_plugin_exports_only_spank_symbols_and_is_hardened(cluster: Cluster) -> None:
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(cluster.plugin)],
                             capture_output=True, text=True, check=True).stdout
    assert {line.split()[-1] for line in symbols.splitlines() if line.strip()} == SPANK_EXPORTS
    dynamic = subprocess.run(["readelf", "-dlW", str(cluster.plugin)],
                             capture_output=True, text=True, check=True).stdout
    assert "GNU_RELRO" in dynamic and re.search(r"FLAGS.*\bNOW\b", dynamic)  # -z relro -z now
    imports = subprocess.run(["nm", "-D", "--undefined-only", str(cluster.plugin)],
                             capture_output=True, text=True, check=True).stdout
    assert "__stack_chk_fail" in imports  # -fstack-protector-strong
    assert re.search(r"__\w+_chk\b", imports.replace("__stack_chk_fail", ""))  # _FORTIFY_SOURCE=2


def test_advise_sets_every_task_and_keeps_the_users_preload(cluster: Cluster) -> None:
    preload = user_preload()
    env = cluster.env(LD_PRELOAD=preload, PYTHONPATH=USER_PYTHONPATH)
    out = cluster.run(["srun", "-N2", "-n4", "--transit=advise", "--transit-mem-limit=40G",
                       "bash", "-c", SHOW_TASK_ENV], env=env)
    assert out.returncode == 0, out.stderr
    tasks = parse_tasks(out.stdout)
    assert [t["rank"] for t in tasks] == [0, 1, 2, 3]
    assert len({t["node"] for t in tasks}) == 2
    job = tasks[0]["job"]
    for task in tasks:
        assert task["preload"] == [cluster.lib, preload]
        assert task["pythonpath"] == [cluster.hook_dir, USER_PYTHONPATH]
        assert task["transit"] == {"TRANSIT_POLICY": "advise", "TRANSIT_MEM_LIMIT": "40G",
                                   "TRANSIT_OUT": f"{cluster.report_dir}/{job}/"}
    assert (cluster.report_dir / str(job)).is_dir()


def test_a_long_preload_list_is_kept_whole(cluster: Cluster) -> None:
    # Far beyond any fixed buffer the plugin might have used for the task's LD_PRELOAD.
    preload = ":".join([user_preload()] * 2000)
    out = cluster.run(["srun", "-N1", "--transit=base", "bash", "-c", SHOW_TASK_ENV],
                      env=cluster.env(LD_PRELOAD=preload))
    assert out.returncode == 0, out.stderr
    (task,) = parse_tasks(out.stdout)
    assert task["preload"] == [cluster.lib, *preload.split(":")]


def test_report_dir_option_overrides_the_site_default(cluster: Cluster, tmp_path: Path) -> None:
    out = cluster.run(["srun", "-N1", f"--transit-report-dir={tmp_path}", "--transit", "bash", "-c",
                       SHOW_TASK_ENV])
    assert out.returncode == 0, out.stderr
    (task,) = parse_tasks(out.stdout)
    assert task["transit"] == {"TRANSIT_POLICY": "base", "TRANSIT_OUT": f"{tmp_path}/{task['job']}/"}
    assert (tmp_path / str(task["job"])).is_dir()


def test_unusable_report_dir_fails_the_task_with_one_line(cluster: Cluster) -> None:
    out = cluster.run(["srun", "-N1", "--transit", "--transit-report-dir=/proc/transit-test", "true"])
    assert out.returncode != 0
    assert "transit: cannot create report directory /proc/transit-test: " in out.stderr


@pytest.mark.parametrize("command", ["srun", "sbatch"])
@pytest.mark.parametrize("options, message", [
    (["--transit=fast"], "transit: --transit: policy='fast' is not a policy"),
    (["--transit", "--transit-mem-limit=12Q"], "transit: --transit-mem-limit: mem-limit='12Q' is not a size"),
    (["--transit="], "transit: --transit= needs a value"),
    (["--transit-mem-limit="], "transit: --transit-mem-limit= needs a value"),
    (["--transit-report-dir=reports"], "transit: --transit-report-dir=reports: must be an absolute path"),
    (["--transit-mem-limit=40G"], "transit: --transit-mem-limit and --transit-report-dir need --transit"),
])
def test_bad_values_fail_before_the_job_exists(cluster: Cluster, command: str, options: list[str],
                                               message: str) -> None:
    name = unique_job_name()
    tail = ["true"] if command == "srun" else ["--wrap", "true"]
    out = cluster.run([command, "-J", name, *options, *tail])
    assert out.returncode != 0
    assert out.stderr.splitlines()[0].startswith(f"{command}: error: {message}"), out.stderr  # ours first
    assert cluster.jobs_named(name) == []


@pytest.mark.parametrize("plugstack_args, options, message", [
    ("lib={lib} policy=fast", [], "transit: plugstack.conf: policy='fast' is not a policy"),
    ("lib=libtransit.so", [], "transit: plugstack.conf: lib=libtransit.so must be an absolute path"),
    ("lib={lib} colour=blue", [], "transit: plugstack.conf: unknown argument 'colour=blue'"),
    ("policy=advise", ["--transit"], "transit: --transit: plugstack.conf gives no lib="),
])
def test_bad_site_configuration_fails_srun_with_one_line(cluster: Cluster, tmp_path: Path, plugstack_args: str,
                                                         options: list[str], message: str) -> None:
    # srun reads plugstack.conf itself, so a private copy of the client configuration is enough.
    plugstack = tmp_path / "plugstack.conf"
    plugstack.write_text(f"required {cluster.plugin} {plugstack_args.format(lib=cluster.lib)}\n")
    conf = re.sub(r"(?m)^PlugStackConfig=.*$", f"PlugStackConfig={plugstack}", cluster.slurm_conf.read_text())
    (tmp_path / "slurm.conf").write_text(conf)
    name = unique_job_name()
    out = cluster.run(["srun", "-J", name, *options, "true"], env=cluster.env(SLURM_CONF=str(tmp_path / "slurm.conf")))
    assert out.returncode != 0
    assert out.stderr.splitlines()[0].startswith(f"srun: error: {message}"), out.stderr  # ours comes first
    assert cluster.jobs_named(name) == []


def test_job_lookup_sees_jobs_that_ran(cluster: Cluster) -> None:
    # The control for the test above: a job that was created is found by its name.
    name = unique_job_name()
    out = cluster.run(["srun", "-J", name, "--transit=base", "true"])
    assert out.returncode == 0, out.stderr
    assert len(cluster.jobs_named(name)) == 1


BATCH_SCRIPT = """\
#!/bin/bash
{directive}
echo "BATCH|${{LD_PRELOAD-}}|$(env | grep ^TRANSIT_ | tr '\\n' ,)"
srun -N2 -n2 bash -c '{show}'
srun -N1 -n1 bash -c '{show}'
"""


@pytest.mark.parametrize("directive, cli, policy", [
    ("", ["--transit=prefetch"], "prefetch"),
    ("#SBATCH --transit=prefetch", [], "prefetch"),
    ("#SBATCH --transit", [], "base"),  # bare: the site default (the dev cluster sets no policy=)
])
def test_sbatch_option_reaches_srun_steps(cluster: Cluster, tmp_path: Path, directive: str,
                                          cli: list[str], policy: str) -> None:
    script = tmp_path / "job.sh"
    script.write_text(BATCH_SCRIPT.format(directive=directive, show=SHOW_TASK_ENV.replace("'", "'\\''")))
    out = cluster.run(["sbatch", "--parsable", "-N2", "-o", str(tmp_path / "out.txt"), *cli, str(script)],
                      cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    assert cluster.wait_job(job) == "COMPLETED", (tmp_path / "out.txt").read_text()
    output = (tmp_path / "out.txt").read_text()
    batch = [line for line in output.splitlines() if line.startswith("BATCH|")]
    assert batch == ["BATCH||"], output  # the batch step itself is left alone
    tasks = parse_tasks(output)
    assert [(t["step"], t["rank"]) for t in tasks] == [("0", 0), ("0", 1), ("1", 0)], output
    for task in tasks:
        assert task["job"] == job
        assert task["preload"] == [cluster.lib]
        assert task["transit"] == {"TRANSIT_POLICY": policy, "TRANSIT_OUT": f"{cluster.report_dir}/{job}/"}


@pytest.mark.parametrize("options, step_options, policy", [
    (["--transit=prefetch"], [], "prefetch"),
    (["--transit"], [], "base"),
    (["--transit=prefetch"], ["--transit=advise"], "advise"),  # the step's own option wins
])
def test_salloc_option_reaches_srun_steps(cluster: Cluster, options: list[str], step_options: list[str],
                                          policy: str) -> None:
    out = cluster.run(["salloc", "-N2", *options, "srun", "-N2", *step_options, "bash", "-c", SHOW_TASK_ENV])
    assert out.returncode == 0, out.stderr
    tasks = parse_tasks(out.stdout)
    assert len(tasks) == 2
    for task in tasks:
        assert task["preload"] == [cluster.lib]
        assert task["transit"]["TRANSIT_POLICY"] == policy


@pytest.mark.parametrize("options", [[], ["--transit=off"], ["--transit=advise", "--transit=off"]])
def test_jobs_without_transit_are_untouched(cluster: Cluster, options: list[str]) -> None:
    preload = user_preload()
    env = cluster.env(LD_PRELOAD=preload, PYTHONPATH=USER_PYTHONPATH)
    out = cluster.run(["srun", "-N2", "-n2", *options, "bash", "-c", SHOW_TASK_ENV], env=env)
    assert out.returncode == 0, out.stderr
    tasks = parse_tasks(out.stdout)
    assert len(tasks) == 2
    for task in tasks:
        assert task["preload"] == [preload]
        assert task["pythonpath"] == [USER_PYTHONPATH]
        assert task["transit"] == {}
    assert not (cluster.report_dir / str(tasks[0]["job"])).exists()


def test_user_supplied_library_path_is_ignored(cluster: Cluster, tmp_path: Path) -> None:
    rogue = str(tmp_path / "libtransit.so")
    # No option names a library: srun refuses it before any job exists.
    name = unique_job_name()
    out = cluster.run(["srun", "-J", name, "--transit", f"--transit-lib={rogue}", "true"])
    assert out.returncode != 0 and "unrecognized option" in out.stderr
    assert cluster.jobs_named(name) == []
    # Environment variables cannot choose it either: the plugin uses plugstack.conf's lib= only.
    env = cluster.env(TRANSIT_LIB=rogue, TRANSIT_LIB_PATH=rogue, SLURM_SPANK__SLURM_SPANK_OPTION_transit_lib=rogue)
    out = cluster.run(["srun", "-N1", "--transit=base", "bash", "-c", SHOW_TASK_ENV], env=env)
    assert out.returncode == 0, out.stderr
    (task,) = parse_tasks(out.stdout)
    assert task["preload"] == [cluster.lib]


def libcudart() -> str:
    """A CUDA runtime library to call: the nvidia-cuda-runtime wheel's or a toolkit's."""
    patterns = [os.path.join(p, "cu13", "lib", "libcudart.so*") for p in _nvidia_paths()]
    patterns += ["/usr/local/cuda/lib64/libcudart.so*", "/usr/local/cuda*/lib*/libcudart.so*",
                 "/usr/local/cuda*/targets/*/lib/libcudart.so*"]
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    pytest.skip("no libcudart.so (pip install nvidia-cuda-runtime)")


def _nvidia_paths() -> list[str]:
    try:
        import nvidia  # type: ignore[import-not-found]
    except ImportError:
        return []
    return list(nvidia.__path__)


# Loads the CUDA runtime into the global namespace, as a linked application would, then calls
# cudaMalloc through it: the preloaded libtransit's entry point comes first.
CUDA_TASK = textwrap.dedent("""\
    import ctypes, os, sys
    ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    ptr = ctypes.c_void_p()
    err = ctypes.CDLL(None).cudaMalloc(ctypes.byref(ptr), 1 << 20)
    print("CUDA|%s|%d" % (os.environ["SLURM_JOB_ID"], err))
""")


def test_two_node_job_writes_stats_files(cluster: Cluster) -> None:
    cudart = libcudart()
    python = os.path.realpath(sys.executable)
    out = cluster.run(["srun", "-N2", "-n2", "--transit=advise", python, "-c", CUDA_TASK, cudart])
    assert out.returncode == 0, out.stderr
    results = [line.split("|") for line in out.stdout.splitlines() if line.startswith("CUDA|")]
    assert len(results) == 2, out.stdout
    job = results[0][1]
    files = sorted((cluster.report_dir / str(job)).glob("rank*.json"))
    assert [f.name.split(".")[0] for f in files] == ["rank0", "rank1"], files
    gpu = any(int(r[2]) == 0 for r in results)  # cudaMalloc succeeded: a real device
    all_stats = [json.loads(path.read_text()) for path in files]
    assert len({s["identity"]["node"] for s in all_stats}) == 2  # one file from each node
    for stats in all_stats:
        assert stats["schema"] == "transit.rank/1"
        assert stats["identity"]["job_id"] == job
        assert stats["identity"]["world_size"] == 2
        assert stats["config"]["policy"] == "advise"
        assert stats["cuda_active"] is gpu
        if not gpu:
            assert stats["cuda_error"]


# --- the cluster itself: a second, private instance so the shared one is never stopped ----------

UP_BUDGET_S = 30
CLUSTER_PORTS = 5  # slurmctld and four slurmd


def _free_port_base() -> int:
    for _ in range(50):
        base = random.randrange(20000, 60000 - CLUSTER_PORTS)
        try:
            for port in range(base, base + CLUSTER_PORTS):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise AssertionError("no free port range for a second dev cluster")


def test_dev_cluster_up_status_down(cluster: Cluster, tmp_path: Path) -> None:
    env = dict(os.environ, TRANSIT_DEV_CLUSTER_DIR=str(tmp_path / "dc"),
               TRANSIT_DEV_CLUSTER_PORT=str(_free_port_base()))

    def script(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(DEV_CLUSTER), *args], capture_output=True, text=True, check=False,
                              env=env, timeout=120)

    assert script("status").returncode != 0
    try:
        start = time.monotonic()
        up = script("up")
        elapsed = time.monotonic() - start
        assert up.returncode == 0, up.stderr
        assert elapsed < UP_BUDGET_S
        again = script("up")
        assert again.returncode == 0 and "already up" in again.stderr
        status = json.loads(script("status", "--json").stdout)
        assert status["state"] == "up" and status["nodes_ready"] == 4
        conf = status["slurm_conf"]
        hosts = subprocess.run(["srun", "-N4", "--transit=off", "printenv", "SLURMD_NODENAME"], capture_output=True,
                               text=True, check=False, env=dict(env, SLURM_CONF=conf), timeout=120)
        assert sorted(hosts.stdout.split()) == ["node1", "node2", "node3", "node4"], hosts.stderr
        logs = sorted(p.name for p in (tmp_path / "dc" / "log").iterdir())
        assert logs == ["munged.log", "slurmctld.log"] + [f"slurmd-node{i}.log" for i in range(1, 5)]
    finally:
        assert script("down").returncode == 0
    assert script("status").returncode != 0


def test_transit_cluster_status_json(cluster: Cluster) -> None:
    out = subprocess.run([sys.executable, "-m", "transit", "cluster", "status", "--json"], capture_output=True,
                         text=True, check=False, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert status["state"] == "up" and Path(status["slurm_conf"]) == cluster.slurm_conf
