"""Every link in README.md and docs/*.md resolves inside the repository.

A link is a Markdown link or image (`[text](target)`, `![alt](target)`), a reference definition
(`[label]: target`), an autolink (`<https://...>`), or a code span holding a relative path that
starts with ./ or ../ (prose that sends the reader to a file). Relative targets must exist inside
the repository; a #fragment must name a heading of the Markdown file it points into (GitHub's
anchors). External http(s) links are not fetched, only checked to be well-formed. Code blocks are
not read.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "bench").glob("*.md")),
             REPO / "schemas" / "README.md"]

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'(][^)]*)?\)")
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]+)>")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
PATH_IN_CODE = re.compile(r"\.\.?/\S*")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+[^>]*(?:name|id)=[\"']([^\"']+)[\"']", re.IGNORECASE)


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every link in a Markdown text."""
    found = []
    for number, line in prose_lines(text):
        if definition := REFERENCE_DEFINITION.match(line):
            found.append((number, definition.group(1)))
            continue
        for span in CODE_SPAN.finditer(line):
            if PATH_IN_CODE.fullmatch(span.group(2).strip()):
                found.append((number, span.group(2).strip()))
        outside_code = CODE_SPAN.sub("", line)
        found += [(number, match.group(1)) for match in INLINE_LINK.finditer(outside_code)]
        found += [(number, match.group(1)) for match in AUTOLINK.finditer(outside_code)]
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"[`*_~]|<[^>]+>", "", text)  # code, emphasis, HTML tags
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(document: Path) -> set[str]:
    """The #fragments that lead into a Markdown file: its headings' (the n-th repeat gets -n)."""
    seen: Counter[str] = Counter()
    found = set()
    for _, line in prose_lines(document.read_text()):
        found.update(HTML_ANCHOR.findall(line))
        if heading := HEADING.match(line):
            base = slug(heading.group(2))
            found.add(f"{base}-{seen[base]}" if seen[base] else base)
            seen[base] += 1
    return found


def problem(document: Path, target: str, repo: Path) -> str | None:
    """Why TARGET, a link in DOCUMENT, does not resolve inside REPO; None when it does."""
    parts = urlsplit(target)
    if parts.scheme in ("http", "https"):
        return None if parts.hostname and not re.search(r"\s", target) else "not a well-formed URL"
    if parts.scheme == "mailto":
        return None if re.fullmatch(r"[^@\s]+@[^@\s]+", parts.path) else "not a well-formed address"
    if parts.scheme or parts.netloc:
        return f"scheme {parts.scheme or '//'!r}: only relative links and http(s) are allowed"
    if not parts.path and not parts.fragment:
        return "empty link"
    path = (document.parent / unquote(parts.path)).resolve() if parts.path else document
    if not path.is_relative_to(repo):
        return "points outside the repository"
    if not path.exists():
        return "no such file in the repository"
    if parts.fragment:
        if path.suffix != ".md":
            return "a #fragment into a file that is not Markdown"
        if unquote(parts.fragment) not in anchors(path):
            return f"no heading with anchor #{parts.fragment} in {path.relative_to(repo)}"
    return None


def broken_links(document: Path, repo: Path = REPO) -> list[str]:
    return [f"{document.relative_to(repo)}:{number}: {target}: {why}"
            for number, target in links(document.read_text()) if (why := problem(document, target, repo))]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(REPO)))
def test_every_link_resolves_inside_the_repository(document: Path) -> None:
    assert broken_links(document) == []


SAMPLE = """# Title

## What is done, in detail
## Usage
## Usage
See [the design](docs/design.md), [usage](#usage-1), [missing](#nowhere) and ![plot](img/a.png).
Code `../shared/DESIGN.md` and `./scripts/setup --help` and `transit report` and `../x y`.
Out of the tree: [up](../outside.md); web: <https://example.org/a>, [bad](https:/example.org),
[local](http://localhost:8080/), [ftp](ftp://example.org/f), [mail](mailto:a@example.org).
[ref]: docs/design.md#what-is-done-in-detail
```
[in code](nowhere.md)
```
"""


def test_the_checker_finds_each_kind_of_link_and_judges_it(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "scripts").mkdir()
    (repo / "scripts" / "setup").write_text("")
    (repo / "README.md").write_text(SAMPLE)
    (repo / "docs" / "design.md").write_text("# Design\n## What is done, in detail\n")
    assert broken_links(repo / "README.md", repo) == [
        "README.md:6: #nowhere: no heading with anchor #nowhere in README.md",
        "README.md:6: img/a.png: no such file in the repository",
        "README.md:7: ../shared/DESIGN.md: points outside the repository",
        "README.md:8: ../outside.md: points outside the repository",
        "README.md:8: https:/example.org: not a well-formed URL",
        "README.md:9: ftp://example.org/f: scheme 'ftp': only relative links and http(s) are allowed",
    ]


# --- pointers by section name, in code and docs: `design-notes.md, "Limit mode"`, `bench/README.md "Sizing"`
POINTER = re.compile(r"([\w./-]*?[\w-]+\.md),? \"([^\"]+)\"")
POINTER_IN_CODE = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.md#[\w-]+)")
# a comment's line break: the newline, the indent and the comment's mark (` * `, `# `, `// `)
COMMENT_BREAK = re.compile(r"\n[ \t]*(?:\*(?!/)|#|//)?[ \t]*")
BOLD_LEAD = re.compile(r"\*\*([^*]+)\*\*")
POINTING_FILES = ("transit/**/*.py", "libtransit/**/*.[ch]", "spank/**/*.[ch]", "bench/**/*.py", "bench/**/*.sh",
                  "scripts/*", "tests/**/*.py", "README.md", "docs/**/*.md", "bench/*.md", "schemas/*.md")


def pointed_file(source: Path, name: str, repo: Path) -> Path | None:
    """`docs/design.md` from the root, `design-notes.md` beside the source or in docs/."""
    for candidate in (repo / name, source.parent / name, repo / "docs" / Path(name).name):
        if candidate.is_file():
            return candidate
    return None


def section_names(document: Path) -> list[str]:
    """What a pointer may name, lower case: a heading, an older name kept as an HTML anchor, or the
    bold lead-in of a titled paragraph (`- **Touches from records.** ...`)."""
    text = document.read_text()
    names = [slug(m.group(2)) for _, line in prose_lines(text) if (m := HEADING.match(line))]
    names += HTML_ANCHOR.findall(text)
    names += [slug(m.group(1)) for _, line in prose_lines(text) for m in BOLD_LEAD.finditer(line)]
    return names


def broken_pointers(source: Path, repo: Path = REPO) -> list[str]:
    text = COMMENT_BREAK.sub(" ", source.read_text(errors="replace"))
    found = []
    for match in POINTER.finditer(text):
        name, section = match.group(1), " ".join(match.group(2).split())
        document = pointed_file(source, name, repo)
        if document is None:
            found.append(f"{source.relative_to(repo)}: {name} \"{section}\": no such file")
        elif not any(known.startswith(slug(section)) for known in section_names(document)):
            found.append(f"{source.relative_to(repo)}: {name} \"{section}\": no such section")
    if source.suffix != ".md":  # Markdown links are the test above's
        for target in POINTER_IN_CODE.findall(text):
            name, _, fragment = target.partition("#")
            document = pointed_file(source, name, repo)
            if document is None or fragment not in anchors(document):
                found.append(f"{source.relative_to(repo)}: {target}: no such file or anchor")
    return found


SOURCES = sorted({path for pattern in POINTING_FILES for path in REPO.glob(pattern)
                  if path.is_file() and path.name != "test_doc_links.py"})


def test_every_pointer_by_section_name_leads_to_that_section() -> None:
    assert [problem for source in SOURCES for problem in broken_pointers(source)] == []


def test_the_pointer_checker_follows_comments_and_finds_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.md").write_text(
        "# Notes\n## Limit mode: why\n<a id=\"old-name\"></a>\n- **Touches from records.** text\n")
    source = tmp_path / "code.c"
    source.write_text('/* see docs/notes.md, "Limit\n * mode"; notes.md "Old name" and "x" in\n'
                      ' * notes.md, "Touches from records"; notes.md "Nowhere"; other.md "A";\n'
                      " * docs/notes.md#limit-mode-why and docs/notes.md#gone */\n")
    assert broken_pointers(source, tmp_path) == [
        'code.c: notes.md "Nowhere": no such section',
        'code.c: other.md "A": no such file',
        "code.c: docs/notes.md#gone: no such file or anchor",
    ]
