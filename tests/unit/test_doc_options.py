"""docs/usage.md and docs/admin.md list every option a user can give, and nothing that is gone.

The commands' options are read from their parsers (argparse for `transit`, scripts/emulate-nodes
and `python3 -m bench`; the case arms of the shell scripts), the plugin's from its option table
(spank/options.c) and plugstack.conf keys (spank/args.c), the variables from libtransit's table
(libtransit/src/base/config.c). In usage.md's "Options, command by command" each `###` section
names its commands in code spans and lists options in its table's first column: the options of a
command must be exactly those of the sections that name it, and a section shared by several
commands may list only options all of them take.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from pathlib import Path

import pytest

from bench.__main__ import parser as bench_parser
from bench.tables import main as bench_table_main
from transit.cli import build_parser
from transit.emulate import build_parser as emulate_parser

REPO = Path(__file__).resolve().parents[2]
USAGE = REPO / "docs" / "usage.md"
ADMIN = REPO / "docs" / "admin.md"
OPTIONS_SECTION = "## Options, command by command"
OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
CODE_SPAN = re.compile(r"`([^`]+)`")
COMMAND = re.compile(r"(?:transit|python3 -m bench|scripts/[\w-]+)(?: [a-z][\w-]*)*")


def parser_options(parser: argparse.ArgumentParser, name: str) -> dict[str, set[str]]:
    """Each command's and subcommand's option strings, by its name as a user types it."""
    found: dict[str, set[str]] = {name: set()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                found |= parser_options(subparser, f"{name} {sub}")
        else:
            found[name] |= {option for option in action.option_strings if option not in ("-h", "--help")}
    return found


def bench_table_options() -> set[str]:
    """`python3 -m bench table` builds its parser in its main(): its --help says the options."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        bench_table_main(["--help"])
    options = out.getvalue().split("options:", 1)[1]
    return set(OPTION.findall(options)) - {"-h", "--help"}


def script_options(script: str) -> set[str]:
    """The options a shell script compares its arguments with: `--x)` case arms, `== --x` tests."""
    text = (REPO / "scripts" / script).read_text()
    return set(re.findall(r"^\s*(--[\w-]+)\)", text, re.MULTILINE) + re.findall(r"== (--[\w-]+)", text))


def command_options() -> dict[str, set[str]]:
    found = parser_options(build_parser(), "transit")
    found |= parser_options(bench_parser(), "python3 -m bench")
    found["python3 -m bench table"] = bench_table_options()
    found["scripts/emulate-nodes"] = parser_options(emulate_parser(), "scripts/emulate-nodes")["scripts/emulate-nodes"]
    for script in ("dev-cluster", "quickstart", "slurm-chroot"):
        found[f"scripts/{script}"] = script_options(script)
    return found


def documented_sections(text: str) -> list[tuple[list[str], set[str]]]:
    """(commands, options) of each `###` section under "Options, command by command"."""
    body = text.split(OPTIONS_SECTION, 1)[1].split("\n## ", 1)[0]
    sections = []
    for chunk in body.split("\n### ")[1:]:
        heading, _, rest = chunk.partition("\n")
        commands = [span for span in CODE_SPAN.findall(heading.split(":")[0]) if COMMAND.fullmatch(span)]
        options = set()
        for line in rest.splitlines():
            if line.startswith("| `"):
                first_cell = line.split("|")[1]
                options |= {option for span in CODE_SPAN.findall(first_cell) for option in OPTION.findall(span)}
        sections.append((commands, options))
    return sections


def option_drift(commands: dict[str, set[str]], sections: list[tuple[list[str], set[str]]]) -> list[str]:
    problems = []
    for names, options in sections:
        for name in names:
            if name not in commands:
                problems.append(f"{name}: documented, but there is no such command")
            elif extra := options - commands[name]:
                problems.append(f"{name}: documented options it does not take: {sorted(extra)}")
    for name, options in commands.items():
        documented = set().union(*[opts for names, opts in sections if name in names])
        if missing := options - documented:
            problems.append(f"{name}: options not in docs/usage.md: {sorted(missing)}")
    return problems


def test_usage_lists_exactly_the_options_of_every_command() -> None:
    assert option_drift(command_options(), documented_sections(USAGE.read_text())) == []


def test_the_drift_check_finds_missing_stale_and_unknown() -> None:
    commands = {"transit run": {"--policy", "--out"}, "transit plan": {"--policy", "--wide"}}
    sections = [(["transit run", "transit plan"], {"--policy", "--out"}), (["transit gone"], set())]
    assert option_drift(commands, sections) == [
        "transit plan: documented options it does not take: ['--out']",
        "transit gone: documented, but there is no such command",
        "transit plan: options not in docs/usage.md: ['--wide']",
    ]


def test_the_sections_are_read_from_their_headings_and_first_cells() -> None:
    text = (f"{OPTIONS_SECTION}\n\n### `transit plan`, `transit submit`: the model\n\n| option | what |\n"
            "| --- | --- |\n| `--tp`, `--pp` | degrees, e.g. `--tp 2` |\n| `-u`, `--user` | who |\n"
            "\n### `scripts/quickstart`\n\n| `--no-setup` | |\n\n## Next\n\n### `transit x`\n")
    assert documented_sections(text) == [(["transit plan", "transit submit"], {"--tp", "--pp", "-u", "--user"}),
                                         (["scripts/quickstart"], {"--no-setup"})]


def table_names(path: Path, pattern: str) -> set[str]:
    return set(re.findall(pattern, path.read_text()))


def test_every_plugin_option_is_in_usage() -> None:
    table = (REPO / "spank" / "options.c").read_text().split("transit_option_table[]", 1)[1].split("};", 1)[0]
    options = {f"--{name}" for name in re.findall(r'\{"([\w-]+)"', table)}
    assert options == {"--transit", "--transit-mem-limit", "--transit-report-dir"}
    slurm_table = USAGE.read_text().split("## Slurm options", 1)[1].split("\n## ", 1)[0]
    assert {option for option in options if f"`{option}" not in slurm_table} == set()


def test_every_plugstack_argument_is_in_admin() -> None:
    keys = table_names(REPO / "spank" / "args.c", r'\{"(\w+)", CONF_')
    assert keys >= {"lib", "report_dir", "policy"}
    documented = set(re.findall(r"^\| `(\w+)=` \|", ADMIN.read_text(), re.MULTILINE))
    assert documented == keys


def test_every_transit_variable_is_in_usage_and_every_documented_one_exists() -> None:
    names = table_names(REPO / "libtransit" / "src" / "base" / "config.c", r'\{"(TRANSIT_\w+)", VAR_')
    assert "TRANSIT_MEM_LIMIT" in names
    text = USAGE.read_text()
    assert {name for name in names if not re.search(rf"`{name}[`=]", text)} == set()
    environment = text.split("\n## Environment\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(TRANSIT_\w+)` \|", environment, re.MULTILINE))
    assert documented - names == set()
