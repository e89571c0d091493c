"""Shared test helpers: the built library, a CUDA runtime to call, and GPU detection."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def cudart_path() -> Path | None:
    """libcudart from the nvidia-cuda-runtime wheel (or a toolkit): lets CPU tests reach the
    interposed entry points; without a GPU every call fails, which is what those tests want."""
    try:
        import nvidia

        for base in nvidia.__path__:
            for sub in ("cu13/lib/libcudart.so.13", "cuda_runtime/lib/libcudart.so.12"):
                if (Path(base) / sub).is_file():
                    return Path(base) / sub
    except ImportError:
        pass
    for p in (Path("/usr/local/cuda/lib64/libcudart.so.13"), Path("/usr/local/cuda/lib64/libcudart.so")):
        if p.is_file():
            return p
    return None


def has_gpu() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True, check=False).returncode == 0


def transit_cmd() -> list[str]:
    return [sys.executable, "-m", "transit"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="gpu test: no NVIDIA GPU on this machine (run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cudart() -> Path:
    path = cudart_path()
    if path is None:
        pytest.fail("libcudart not found: install the nvidia-cuda-runtime wheel (scripts/setup does)")
    return path


@pytest.fixture
def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSIT_")}
    env.pop("LD_PRELOAD", None)
    env["PYTHONPATH"] = str(REPO)
    return env
