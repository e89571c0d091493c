"""`transit run` / `transit lib-path`: the environment is exactly the plugin's (transit_task_env)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from transit import _native

TRANSIT = [sys.executable, "-m", "transit"]


def test_version_and_lib_path(clean_env) -> None:
    r = subprocess.run(TRANSIT + ["--version"], env=clean_env, capture_output=True, text=True, check=False)
    assert r.returncode == 0 and r.stdout.strip() == "transit 0.1.0"
    r = subprocess.run(TRANSIT + ["lib-path"], env=clean_env, capture_output=True, text=True, check=False)
    assert r.returncode == 0 and os.path.isabs(r.stdout.strip()) and r.stdout.strip().endswith("libtransit.so")
    doc = json.loads(subprocess.run(TRANSIT + ["lib-path", "--json"], env=clean_env, capture_output=True,
                                    text=True, check=False).stdout)
    assert doc["version"] == "0.1.0" and doc["hook_dir"].endswith("pyhook")


def test_run_sets_the_task_environment(clean_env, tmp_path) -> None:
    env = dict(clean_env, LD_PRELOAD="/lib/x86_64-linux-gnu/libm.so.6")
    r = subprocess.run(TRANSIT + ["run", "--policy", "prefetch", "--mem-limit", "40G", "--out", str(tmp_path), "--",
                                  "env"], env=env, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    got = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    lib = str(_native.lib_path())
    assert got["LD_PRELOAD"] == f"{lib}:/lib/x86_64-linux-gnu/libm.so.6"
    assert got["PYTHONPATH"].split(":")[0] == str(_native.HOOK_DIR)
    assert (got["TRANSIT_POLICY"], got["TRANSIT_MEM_LIMIT"], got["TRANSIT_OUT"]) == ("prefetch", "40G", str(tmp_path))
    expected = _native.task_env("prefetch", "40G", str(tmp_path), env["LD_PRELOAD"], env["PYTHONPATH"])
    assert {k: got[k] for k in expected} == expected


def test_run_exit_code_passes_through(clean_env) -> None:
    r = subprocess.run(TRANSIT + ["run", "--", "bash", "-c", "exit 7"], env=clean_env, capture_output=True, check=False)
    assert r.returncode == 7


def test_run_bad_values_fail_before_the_command(clean_env, tmp_path) -> None:
    marker = tmp_path / "ran"
    for args, needle in ((["--policy", "fast"], "policy='fast' is not a policy; use base, prefetch or advise"),
                         (["--mem-limit", "12Q"], "mem-limit='12Q' is not a size"),
                         (["--mem-limit", ""], "mem-limit='' is not a size")):
        r = subprocess.run(TRANSIT + ["run", *args, "--", "touch", str(marker)], env=clean_env,
                           capture_output=True, text=True, check=False)
        assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1
        assert not marker.exists()
    r = subprocess.run(TRANSIT + ["run"], env=clean_env, capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "no command given" in r.stderr
