"""libtransit's layers (docs/design.md): each folder of libtransit/src includes headers of its own
folder or of the folders before it in LAYERS, never after; no two files include each other in a
circle; no .c file is over 600 lines; the layer list is the one CMakeLists.txt builds from."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "libtransit" / "src"
LAYERS = ["base", "model", "state", "table", "actions", "recorder", "profile", "policy", "stats", "lifecycle", "hooks"]
MAX_C_LINES = 600
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*") if p.suffix in (".c", ".h"))


def headers() -> dict[str, Path]:
    """Header name -> its file (names are unique across the layers)."""
    found: dict[str, Path] = {}
    for p in sources():
        if p.suffix == ".h":
            assert p.name not in found, f"two headers named {p.name}: {found[p.name]} and {p}"
            found[p.name] = p
    return found


def module(p: Path) -> str:
    """A .c and its .h are one module; so is a folder's private X_int.h with its public X.h."""
    return str(p.relative_to(SRC).with_suffix("")).removesuffix("_int")


def includes() -> dict[Path, list[Path]]:
    by_name = headers()
    return {p: [by_name[name] for name in INCLUDE.findall(p.read_text()) if name in by_name] for p in sources()}


def test_every_source_sits_in_a_layer() -> None:
    assert {p.relative_to(SRC).parts[0] for p in sources()} <= set(LAYERS)
    cmake = (REPO / "libtransit" / "CMakeLists.txt").read_text()
    assert f"set(TRANSIT_LAYERS {' '.join(LAYERS)})" in cmake


def test_includes_go_down_the_layers_only() -> None:
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    upward = [f"{p.relative_to(SRC)} includes {h.relative_to(SRC)}"
              for p, hs in includes().items() for h in hs
              if rank[h.relative_to(SRC).parts[0]] > rank[p.relative_to(SRC).parts[0]]]
    assert upward == []


def test_no_include_cycle_between_modules() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for p, hs in includes().items():
        for h in hs:
            if module(h) != module(p):
                graph[module(p)].add(module(h))
    state: dict[str, int] = {}  # 1 on the path, 2 done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_no_c_file_over_the_limit() -> None:
    long = {str(p.relative_to(SRC)): n for p in sources() if p.suffix == ".c"
            if (n := len(p.read_text().splitlines())) > MAX_C_LINES}
    assert long == {}
