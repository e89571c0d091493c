"""The Python iteration hook (transit/pyhook/sitecustomize.py), in real interpreter processes."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

HOOK_DIR = Path(__file__).resolve().parents[2] / "transit" / "pyhook"
# In one interpreter start, the hook's import time (sitecustomize's cumulative -X importtime
# figure) may be at most this share of the time of every other import, which are those of a bare
# start (test_plain_process_imports_nothing_but_the_hook): the median over STARTS starts.
STARTUP_SHARE = 0.20
STARTS = 15

# Stands in for libtransit: defines the symbol the hook looks up, and counts the calls.
COUNTER_SO = r"""
static int marks, armed;
void transit_pyhook_mark_iteration(void) { marks++; }
void transit_pyhook_armed(void) { armed++; }
int pyhook_test_marks(void) { return marks; }
int pyhook_test_armed(void) { return armed; }
"""

TRAIN = textwrap.dedent("""
    import ctypes, json, sys
    import torch
    import torch.optim.optimizer as optimizer_module
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.{optimizer}(model.parameters(), lr=0.01)
    for _ in range(5):
        opt.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        opt.step()
    counter = getattr(ctypes.CDLL(None), "pyhook_test_marks", None)
    armed = getattr(ctypes.CDLL(None), "pyhook_test_armed", None)
    print(json.dumps({{"marks": counter() if counter else None, "armed": armed() if armed else None,
                      "hooks": len(optimizer_module._global_optimizer_post_hooks)}}))
""")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "PYTHONPATH")}
    env.update(extra)
    return env


def python(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300, check=True)


@pytest.fixture(scope="module")
def counter_so(tmp_path_factory) -> Path:
    build = tmp_path_factory.mktemp("pyhook")
    (build / "counter.c").write_text(COUNTER_SO)
    out = build / "libtransit_pyhook_counter.so"
    subprocess.run(["cc", "-std=c11", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", "-o", str(out),
                    str(build / "counter.c")], check=True)
    return out


@pytest.fixture(scope="module")
def clean_venv(tmp_path_factory) -> Path:
    """A venv of this interpreter without its site-packages: no site .pth has imported anything."""
    root = tmp_path_factory.mktemp("venv")
    venv.create(root, with_pip=False, symlinks=True)
    return root / "bin" / "python3"


@pytest.fixture(params=["tests-environment", "clean-venv"])
def interpreter(request) -> str:
    """The interpreter running the tests, with its site-packages (and whatever their .pth files
    import at start), and the same interpreter in a clean venv."""
    return sys.executable if request.param == "tests-environment" else str(request.getfixturevalue("clean_venv"))


def loaded_modules(interpreter: str, env: dict[str, str]) -> set[str]:
    code = "import json, sys; print(json.dumps(sorted(sys.modules)))"
    return set(json.loads(subprocess.run([interpreter, "-c", code], env=env, capture_output=True, text=True,
                                         timeout=60, check=True).stdout))


def test_plain_process_imports_nothing_but_the_hook(interpreter):
    bare = loaded_modules(interpreter, clean_env())
    hooked = loaded_modules(interpreter, clean_env(PYTHONPATH=str(HOOK_DIR)))
    assert hooked - bare == {"sitecustomize"}
    probe = ("import json, sys; print(json.dumps({'hook': sys.modules['sitecustomize'].__file__, "
             "'watcher': type(sys.meta_path[0]).__name__}))")
    out = json.loads(python(probe, clean_env(PYTHONPATH=str(HOOK_DIR))).stdout)
    assert out == {"hook": str(HOOK_DIR / "sitecustomize.py"), "watcher": "OptimImportWatcher"}


def hook_share(interpreter: str, env: dict[str, str]) -> tuple[float, int, int]:
    """(share, hook us, other imports us) of one start: "import time: self | cumulative | name" lines."""
    lines = subprocess.run([interpreter, "-X", "importtime", "-c", "pass"], env=env, capture_output=True, text=True,
                           timeout=60, check=True).stderr.splitlines()
    rows = [[field.strip() for field in ln.removeprefix("import time:").split("|")] for ln in lines
            if ln.startswith("import time:") and ln.split("|")[1].strip().isdigit()]
    [hook_us] = [int(cumulative) for _, cumulative, name in rows if name == "sitecustomize"]
    other_us = sum(int(own) for own, _, _ in rows) - hook_us
    return hook_us / other_us, hook_us, other_us


def test_startup_cost_is_tiny(interpreter, tmp_path, record_property):
    """The hook's own import time against a bare start's imports, in the same start: the clean venv
    is the case where no site .pth has already imported what the hook would import."""
    # A copy, so the interpreter can cache its bytecode (this environment sets PYTHONDONTWRITEBYTECODE);
    # scripts/setup precompiles the hook directory that the plugin uses.
    hook = tmp_path / "pyhook"
    shutil.copytree(HOOK_DIR, hook, ignore=shutil.ignore_patterns("__pycache__"))
    env = clean_env(PYTHONPATH=str(hook))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    hook_share(interpreter, env)
    starts = sorted(hook_share(interpreter, env) for _ in range(STARTS))
    share, hook_us, other_us = starts[STARTS // 2]
    record_property("hook_share_median", share)
    print(f"{interpreter}: median start: sitecustomize {hook_us} us, other imports {other_us} us, share "
          f"{share:.3f} ({starts[0][0]:.3f}-{starts[-1][0]:.3f} over {STARTS} starts)")
    assert share < STARTUP_SHARE


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_each_optimizer_step_marks_an_iteration(counter_so, optimizer):
    env = clean_env(PYTHONPATH=str(HOOK_DIR), LD_PRELOAD=str(counter_so))
    out = json.loads(python(TRAIN.format(optimizer=optimizer), env).stdout)
    assert out == {"marks": 5, "armed": 1, "hooks": 1}


def test_without_libtransit_nothing_is_registered():
    out = json.loads(python(TRAIN.format(optimizer="SGD"), clean_env(PYTHONPATH=str(HOOK_DIR))).stdout)
    assert out == {"marks": None, "armed": None, "hooks": 0}


def test_shadowed_sitecustomize_still_runs(tmp_path):
    other = tmp_path / "site"
    other.mkdir()
    (other / "sitecustomize.py").write_text(
        "import os\nopen(os.environ['SITECUSTOMIZE_MARK'], 'w').write(__file__)\n")
    mark = tmp_path / "ran"
    env = clean_env(PYTHONPATH=os.pathsep.join([str(HOOK_DIR), str(other)]), SITECUSTOMIZE_MARK=str(mark))
    out = python("import sys; print(type(sys.meta_path[0]).__name__)", env).stdout.strip()
    assert out == "OptimImportWatcher"
    assert mark.read_text() == str(other / "sitecustomize.py")


def test_armed_hook_outranks_the_period_detector_before_its_first_mark():
    """Once the hook is registered, libtransit counts iterations by it alone: the kernel-period
    detector's sub-step periods (micro-batches) must not open profiles or trigger advise early."""
    code = ("import ctypes, json; t = ctypes.CDLL(None); t.transit_stats_json.restype = ctypes.c_void_p; "
            "t.transit_pyhook_armed(); p = t.transit_stats_json(); "
            "print(json.dumps(json.loads(ctypes.string_at(p))['iterations'])); t.transit_free(ctypes.c_void_p(p))")
    from transit import _native

    env = clean_env(LD_PRELOAD=str(_native.lib_path()))
    iterations = json.loads(python(code, env).stdout)
    assert iterations["method"] == "python-hook" and iterations["count"] == 0
