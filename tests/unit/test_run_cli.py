"""`transit run` / `transit lib-path`: the environment is exactly the plugin's (transit_task_env)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from transit import _native

TRANSIT = [sys.executable, "-m", "transit"]


def test_version_and_lib_path(clean_env) -> None:
    r = subprocess.run(TRANSIT + ["--version"], env=clean_env, capture_output=True, text=True, check=False)
    assert r.returncode == 0 and r.stdout.strip() == "transit 0.1.0"
    r = subprocess.run(TRANSIT + ["lib-path"], env=clean_env, capture_output=True, text=True, check=False)
    path = r.stdout.strip()
    assert r.returncode == 0 and os.path.isabs(path) and path.endswith("libtransit.so")
    doc = json.loads(subprocess.run(TRANSIT + ["lib-path", "--json"], env=clean_env, capture_output=True,
                                    text=True, check=False).stdout)
    assert doc["version"] == "0.1.0" and doc["hook_dir"].endswith("pyhook")


def test_run_sets_the_task_environment(clean_env, tmp_path) -> None:
    env = dict(clean_env, LD_PRELOAD="/lib/x86_64-linux-gnu/libm.so.6")
    r = run(["--policy", "prefetch", "--mem-limit", "40G", "--out", str(tmp_path), "--", "env"], env)
    assert r.returncode == 0, r.stderr
    got = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    lib = str(_native.lib_path())
    assert got["LD_PRELOAD"] == f"{lib}:/lib/x86_64-linux-gnu/libm.so.6"
    assert got["PYTHONPATH"].split(":")[0] == str(_native.HOOK_DIR)
    assert (got["TRANSIT_POLICY"], got["TRANSIT_MEM_LIMIT"], got["TRANSIT_OUT"]) == ("prefetch", "40G",
                                                                                   str(tmp_path))
    expected = _native.task_env("prefetch", "40G", str(tmp_path), env["LD_PRELOAD"], env["PYTHONPATH"])
    assert {k: got[k] for k in expected} == expected


def test_run_exit_code_passes_through(clean_env) -> None:
    r = run(["--", "bash", "-c", "exit 7"], clean_env)
    assert r.returncode == 7


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(TRANSIT + ["run", *args], env=env, capture_output=True, text=True, check=False,
                          timeout=60)


@pytest.mark.parametrize(("args", "env", "needle"), [
    (["--policy", "fast"], {}, "--policy='fast' is not a policy; use base, prefetch, advise or hybrid"),
    (["--mem-limit", "12Q"], {}, "--mem-limit='12Q' is not a size"),
    (["--mem-limit", ""], {}, "--mem-limit='' is not a size"),
    (["--mem-limit", "0x10G"], {}, "--mem-limit='0x10G' is not a size"),
    (["--mem-limit", "1K"], {}, "--mem-limit='1K' is out of range; use a size from 256M to 16T"),
    (["--out", ""], {}, "--out='' is not usable"),
    (["--out", "/proc/transit"], {}, "--out='/proc/transit' is under /proc"),
    ([], {"TRANSIT_OUT": ""}, "TRANSIT_OUT='' is not usable"),
    ([], {"TRANSIT_POLICY": "fast"}, "TRANSIT_POLICY='fast' is not a policy"),
    ([], {"TRANSIT_MEM_LIMIT": "12Q"}, "TRANSIT_MEM_LIMIT='12Q' is not a size"),
    ([], {"TRANSIT_WARMUP_ITERS": "abc"}, "TRANSIT_WARMUP_ITERS='abc' is not allowed"),
    ([], {"TRANSIT_POLCY": "advise"},
     "TRANSIT_POLCY is not a TRANSIT variable (did you mean TRANSIT_POLICY?)"),
    (["--policy", "base"], {"TRANSIT_PROFILE": "sometimes"}, "TRANSIT_PROFILE='sometimes' is not a boolean"),
    (["--policy", "hybrid"], {"TRANSIT_HYBRID_GUARD": "auto"}, "TRANSIT_HYBRID_GUARD='auto' is not a boolean"),
])
def test_run_bad_values_fail_before_the_command(clean_env, tmp_path, args, env, needle) -> None:
    marker = tmp_path / "ran"
    r = run([*args, "--", "touch", str(marker)], dict(clean_env, **env))
    assert r.returncode == 2 and r.stderr.startswith(f"transit run: {needle}"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert not marker.exists()


@pytest.mark.parametrize(("command", "why"), [("./missing", "not found"), ("./docs", "is not an executable file"),
                                             ("./README.md", "is not an executable file")])
def test_a_command_that_cannot_run_is_named_with_why(clean_env, command: str, why: str) -> None:
    """Before, a file that is there but not executable was "not found" too."""
    r = run(["--", command], clean_env)
    assert (r.returncode, r.stderr) == (2, f"transit run: command '{command}' {why}\n")


def test_run_without_a_command(clean_env) -> None:
    r = run([], clean_env)
    assert r.returncode == 2 and "no command given" in r.stderr


def task_env(r: subprocess.CompletedProcess) -> dict[str, str]:
    assert r.returncode == 0, r.stderr
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if line.startswith("TRANSIT_"))


def test_the_environment_applies_when_no_option_is_given(clean_env, tmp_path) -> None:
    env = dict(clean_env, TRANSIT_POLICY="advise", TRANSIT_OUT=str(tmp_path), TRANSIT_GLOBAL_BATCH="64")
    r = run(["--", "env"], env)
    assert task_env(r) == {"TRANSIT_POLICY": "advise", "TRANSIT_OUT": str(tmp_path),
                           "TRANSIT_GLOBAL_BATCH": "64"}
    assert r.stderr == ""


def test_an_option_wins_over_the_environment_and_says_so(clean_env, tmp_path) -> None:
    env = dict(clean_env, TRANSIT_POLICY="advise", TRANSIT_MEM_LIMIT="24G", TRANSIT_OUT="/tmp/elsewhere")
    r = run(["--policy", "prefetch", "--mem-limit", "40G", "--out", str(tmp_path), "--", "env"], env)
    assert task_env(r) == {"TRANSIT_POLICY": "prefetch", "TRANSIT_MEM_LIMIT": "40G",
                           "TRANSIT_OUT": str(tmp_path)}
    assert r.stderr.splitlines() == [
        "transit run: note: --policy=prefetch overrides TRANSIT_POLICY='advise' from the environment",
        "transit run: note: --mem-limit=40G overrides TRANSIT_MEM_LIMIT='24G' from the environment",
        f"transit run: note: --out={tmp_path} overrides TRANSIT_OUT='/tmp/elsewhere' from the environment",
    ]
    same = run(["--policy", "advise", "--", "true"], dict(clean_env, TRANSIT_POLICY="advise"))
    assert same.returncode == 0 and same.stderr == ""


def test_a_memory_limit_from_the_environment_is_noted(clean_env, tmp_path) -> None:
    r = run(["--out", str(tmp_path), "--", "env"], dict(clean_env, TRANSIT_MEM_LIMIT="24G"))
    assert task_env(r)["TRANSIT_MEM_LIMIT"] == "24G"
    assert r.stderr.splitlines() == [
        ("transit run: note: TRANSIT_MEM_LIMIT='24G' from the environment turns limit mode on, "
        "as --mem-limit would")]


def _transit(*args: str, env: dict[str, str], cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([*TRANSIT, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60,
                          check=False)


def test_print_env_shows_what_cmd_would_get(clean_env, tmp_path) -> None:
    r = _transit("run", "--policy", "advise", "--mem-limit", "40G", "--out", str(tmp_path), "--print-env",
                 env=clean_env)
    assert r.returncode == 0, r.stderr
    lines = dict(line.split("=", 1) for line in r.stdout.splitlines())
    assert lines["LD_PRELOAD"] == str(_native.lib_path())
    assert (lines["TRANSIT_POLICY"], lines["TRANSIT_MEM_LIMIT"], lines["TRANSIT_OUT"]) == ("advise", "40G",
                                                                                           str(tmp_path))
    doc = json.loads(_transit("run", "--print-env", "--json", "--out", str(tmp_path), env=clean_env).stdout)
    assert doc["schema"] == "transit.run-env/1" and doc["set"]["TRANSIT_POLICY"] == "base" and doc["unset"] == []


@pytest.mark.parametrize("how", ["option", "env"])
def test_policy_off_runs_the_command_without_transit(clean_env, tmp_path, how: str) -> None:
    """As srun --transit=off: no libtransit, no TRANSIT variable, whether off comes from --policy or
    TRANSIT_POLICY."""
    env = dict(clean_env, TRANSIT_POLICY="off") if how == "env" else clean_env
    args = ["--policy", "off"] if how == "option" else []
    r = _transit("run", *args, "--", "sh", "-c", 'echo "[${LD_PRELOAD-}]"; env | grep -c ^TRANSIT_ || true',
                 env=env, cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.splitlines() == ["[]", "0"]
    assert not (tmp_path / "transit-out").exists()


def test_policy_off_with_a_limit_is_refused(clean_env) -> None:
    r = _transit("run", "--policy", "off", "--mem-limit", "40G", "--", "true", env=clean_env)
    assert r.returncode == 2
    assert r.stderr == "transit run: --policy off runs no TRANSIT, so --mem-limit has nothing to act on; drop one of them\n"


def test_help_names_the_policies(clean_env) -> None:
    r = _transit("run", "--help", env=clean_env)
    assert f"one of {', '.join(_native.policies())}, or off" in " ".join(r.stdout.split())
