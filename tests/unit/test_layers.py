"""libtransit's layers (docs/design.md): each folder of libtransit/src includes headers of its own
folder or of the folders before it in LAYERS, never after; no two files include each other in a
circle; no .c file is over 600 lines; the layer list is the one CMakeLists.txt builds from.

The includes cannot see what files that share a private header do with each other, so the
calls are checked too, from the sources: which .c files name a function another .c defines.
Inside a folder no files call each other in a circle; a policy (policy/<name>.c, which defines
transit_policy_<name>_ops, and its policy/<name>_*.c) calls no other policy's functions and no
engine file; the services in policy/ call neither; and only the engine and the configuration ask
which policy is active."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "libtransit" / "src"
LAYERS = ["base", "model", "state", "table", "actions", "recorder", "profile", "policy", "stats", "lifecycle", "hooks"]
MAX_C_LINES = 600
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')
# A function definition starts at the beginning of a line: its type, its name, its parameters, `{`.
DEFINITION = re.compile(r"^([A-Za-z_][\w \t*]*?)\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{", re.MULTILINE)
IDENTIFIER = re.compile(r"\b[A-Za-z_]\w*\b")
POLICY_TABLE = re.compile(r"\btransit_policy_ops\s+transit_policy_(\w+)_ops\s*=")
ENGINE = {"policy/engine.c", "policy/launches.c", "policy/tick.c"}  # the policy engine: events -> tables
# Where a TRANSIT_POLICY_* value may be named: the configuration (and the task environment's rules
# built on it), the engine's choice of table, and the replay's model of each policy's decisions.
ASKS_WHICH_POLICY = {"base/config.h", "base/config.c", "base/task_env.c", "policy/engine.c", "model/replay.c"}


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


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle a depth-first walk of `graph` (node -> the nodes it uses) finds."""
    state: dict[str, int] = {}  # 1 on the path, 2 done
    found: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


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
    assert circles(graph) == []


def test_no_c_file_over_the_limit() -> None:
    long = {str(p.relative_to(SRC)): n for p in sources() if p.suffix == ".c"
            if (n := len(p.read_text().splitlines())) > MAX_C_LINES}
    assert long == {}


def code(p: Path) -> str:
    """The source without comments and string contents."""
    return STRING.sub('""', COMMENT.sub(" ", p.read_text()))


def name(p: Path) -> str:
    return str(p.relative_to(SRC))


def calls() -> dict[str, set[str]]:
    """Each .c -> the other .c files whose non-static functions it names (a call or a pointer)."""
    files = sorted(SRC.rglob("*.c"))
    defined: dict[str, str] = {}
    own: dict[str, set[str]] = defaultdict(set)
    for p in files:
        for m in DEFINITION.finditer(code(p)):
            function = m.group(2)
            if function.startswith("__"):  # __attribute__((...)) before the name
                continue
            if re.search(r"\bstatic\b", m.group(1)):
                own[name(p)].add(function)
            else:
                assert function not in defined, f"{function} defined in {defined[function]} and {name(p)}"
                defined[function] = name(p)
    graph: dict[str, set[str]] = {}
    for p in files:
        named = set(IDENTIFIER.findall(code(p))) - own[name(p)]
        graph[name(p)] = {defined[f] for f in named if f in defined} - {name(p)}
    return graph


def policies() -> dict[str, set[str]]:
    """Policy name -> its files."""
    found: dict[str, set[str]] = {}
    for p in sorted((SRC / "policy").glob("*.c")):
        for policy in POLICY_TABLE.findall(code(p)):
            assert p.stem == policy, f"{name(p)} defines transit_policy_{policy}_ops"
            found[policy] = {name(q) for q in (SRC / "policy").glob("*.c") if q.stem == policy
                             or q.stem.startswith(policy + "_")}
    return found


def test_the_call_graph_sees_the_policies() -> None:
    graph = calls()
    assert set(policies()) == {"base", "prefetch", "advise", "hybrid"}
    assert "policy/hybrid_place.c" in graph["policy/hybrid.c"]
    assert "policy/shared.c" in graph["policy/engine.c"]


def test_no_call_circle_inside_a_folder() -> None:
    graph = calls()
    inside = {f: {g for g in called if Path(g).parent == Path(f).parent} for f, called in graph.items()}
    assert circles(inside) == []


def test_a_policy_calls_only_itself_and_the_services() -> None:
    graph = calls()
    owner = {f: policy for policy, files in policies().items() for f in files}
    wrong = [f"{f} calls {g}" for f, called in graph.items() if f in owner
             for g in called if (g in owner and owner[g] != owner[f]) or g in ENGINE]
    assert wrong == []


def test_the_services_call_no_policy_and_no_engine() -> None:
    graph = calls()
    policy_files = {f for files in policies().values() for f in files}
    services = {f for f in graph if f.startswith("policy/")} - policy_files - ENGINE
    assert {"policy/shared.c", "policy/limit.c", "policy/moves.c"} <= services
    wrong = [f"{f} calls {g}" for f in services for g in graph[f] if g in policy_files or g in ENGINE]
    assert wrong == []


def test_only_the_engine_and_the_configuration_ask_which_policy() -> None:
    values = re.findall(r"\bTRANSIT_POLICY_\w+", re.search(r"typedef enum \{([^}]*)\} transit_policy;",
                                                           (SRC / "base" / "config.h").read_text()).group(1))
    assert values
    named = re.compile(r"\b(" + "|".join(values) + r")\b")
    asking = {name(p) for p in sources() if named.search(code(p))}
    assert asking <= ASKS_WHICH_POLICY
