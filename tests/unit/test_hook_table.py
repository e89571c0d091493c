"""One hook table (libtransit/src/hooks/hook_table.h): the linker script, the HOOK definitions and
the built library's exports name the same CUDA and CUPTI entry points, and every cuGetProcAddress
hook is one of them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from transit import _native

REPO = Path(__file__).resolve().parents[2]
LIBTRANSIT = REPO / "libtransit"
TABLE = (LIBTRANSIT / "src" / "hooks" / "hook_table.h").read_text()
OWN = re.compile(r"^(transit_\w+|dlsym)$")  # libtransit's own API and its dlsym door


def table_exports() -> set[str]:
    block = TABLE[TABLE.index("#define TRANSIT_EXPORTED_HOOKS"):TABLE.index("#define TRANSIT_DRIVER_HOOKS")]
    return set(re.findall(r"X\((\w+), [01]\)", block))


def map_exports() -> set[str]:
    text = re.sub(r"/\*.*?\*/", "", (LIBTRANSIT / "libtransit.map").read_text(), flags=re.DOTALL)
    global_part = text[text.index("global:") + len("global:"):text.index("local:")]
    names = {n.strip() for n in global_part.split(";") if n.strip()}
    return {n for n in names if not n.endswith("*") and not OWN.match(n)}


def hook_definitions() -> set[str]:
    found = set()
    for c in (LIBTRANSIT / "src" / "hooks").glob("*.c"):
        text = re.sub(r"__attribute__\(\(.*?\)\)\s*", "", c.read_text())
        found |= set(re.findall(r"^HOOK\b[^(]*?\b(\w+)\(", text, flags=re.MULTILINE))
    return {n for n in found if not OWN.match(n)}


def library_exports() -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(_native.lib_path())], capture_output=True, text=True,
                         check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.split()[-2:-1] == ["T"]}
    return {n.split("@")[0] for n in names if not OWN.match(n.split("@")[0])}


def test_the_map_exports_the_table() -> None:
    assert map_exports() == table_exports()


def test_every_hook_defined_is_in_the_table() -> None:
    assert hook_definitions() == table_exports()


def test_the_library_exports_the_table_and_nothing_else() -> None:
    assert library_exports() == table_exports()


def test_driver_hooks_are_exported_hooks() -> None:
    block = TABLE[TABLE.index("#define TRANSIT_DRIVER_HOOKS"):]
    used = set(re.findall(r'X\("\w+", \d+, (\w+), (?:NULL|(\w+))\)', block))
    hooks = {h for pair in used for h in pair if h}
    assert hooks and hooks <= table_exports()
