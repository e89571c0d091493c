"""pyproject.toml declares every third-party package that transit/ imports, and nothing it does not."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
# import name -> distribution name, where they differ
DISTRIBUTION = {"PIL": "pillow", "pynvml": "nvidia-ml-py", "pyarrow": "pyarrow"}
# imported only when there: torch and torchtitan inside the user's training process, and the nvidia-*
# wheels' namespace package, where PyTorch's pip build put the CUDA libraries (transit doctor)
NOT_DECLARED = {"torch", "torchtitan", "nvidia"}


def imported_packages() -> set[str]:
    found = set()
    for path in (ROOT / "transit").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
    return {name for name in found if name not in sys.stdlib_module_names and name != "transit"} - NOT_DECLARED


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + project["optional-dependencies"]["parquet"]
    return {re.split(r"[<>=\[ ;]", requirement)[0].lower() for requirement in requirements}


def test_every_imported_package_is_declared_and_every_declared_one_imported():
    assert {DISTRIBUTION.get(name, name).lower() for name in imported_packages()} == declared()
