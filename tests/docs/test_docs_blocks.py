"""Every code block of the README, ARCHITECTURE.md and docs/ runs, or says why it cannot.

A block is one of:

- a ``python`` block with no mark: executed here, the blocks of one file in order in one
  namespace, in an empty temporary directory; a ``test_*`` function it defines is called;
- marked ``<!-- fragment: why -->`` on the line before it (a piece of a larger program, a
  command that starts a server): only checked, Python by ``compile``, shell by ``bash -n``;
- marked ``<!-- tested-by: tests/...py[::test_name] -->``: another test runs it, and that
  test exists;
- a ``text`` block: output or a diagram, not code.

A fence without a language, or a shell block with neither mark, fails: a reader cannot
tell whether it was ever run. The mkdocs build (``.ci/run``) checks the links.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
MARK = re.compile(r"<!-- (fragment|tested-by): (.+?) -->")
SHELL = {"bash", "console", "sh"}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    mark: str | None  # "fragment", "tested-by" or None
    note: str

    @property
    def where(self) -> str:
        shown = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{shown}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, each with the mark on the line before it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = re.fullmatch(r"```(\S*)", lines[i])
        if opening is None:
            i += 1
            continue
        end = lines.index("```", i + 1)
        before = next((line for line in reversed(lines[:i]) if line.strip()), "")
        mark = MARK.fullmatch(before.strip())
        found.append(
            Block(
                path,
                i + 1,
                opening.group(1),
                "\n".join(lines[i + 1 : end]) + "\n",
                mark.group(1) if mark else None,
                mark.group(2) if mark else "",
            )
        )
        i = end + 1
    return found


def shell_commands(block: Block) -> str:
    """A shell block as a script: a console block's ``$`` lines and their continuations."""
    if block.language != "console":
        return block.code
    script: list[str] = []
    continued = False
    for line in block.code.splitlines():
        if line.startswith("$ ") or continued:
            script.append(line.removeprefix("$ "))
            continued = line.endswith("\\")
    return "\n".join(script) + "\n"


def check_tested_by(block: Block) -> None:
    path, _, name = block.note.partition("::")
    test_file = ROOT / path
    assert test_file.is_file(), f"{block.where}: tested-by names a missing file {path}"
    if name:
        assert re.search(rf"^(async )?def {re.escape(name)}\(", test_file.read_text(), re.M), (
            f"{block.where}: {path} has no test {name}"
        )


def check_block(block: Block, namespace: dict[str, Any]) -> None:
    if block.language == "text":
        assert block.mark is None, f"{block.where}: a text block is not code: drop the mark"
        return
    assert block.language in SHELL | {"python"}, (
        f"{block.where}: fence language {block.language!r}: use python, bash, console or text"
    )
    if block.mark == "tested-by":
        check_tested_by(block)
    elif block.language in SHELL:
        assert block.mark == "fragment", (
            f"{block.where}: a shell block is marked <!-- fragment: why --> or "
            "<!-- tested-by: tests/... -->"
        )
        done = subprocess.run(
            ["bash", "-n"], input=shell_commands(block), capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"{block.where}: {done.stderr}"
    elif block.mark == "fragment":
        compile(block.code, block.where, "exec")
    else:
        before = set(namespace)
        exec(compile(block.code, block.where, "exec"), namespace)
        for name in sorted(set(namespace) - before):
            if name.startswith("test_") and callable(namespace[name]):
                namespace[name]()


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_every_block_runs_or_is_marked(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each block of the file runs (in order, one namespace), is a checked fragment, or is
    run by the test its mark names."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": f"docs_{path.stem}"}
    for block in blocks(path):
        check_block(block, namespace)


def test_a_fence_without_language_or_mark_is_refused(tmp_path: Path) -> None:
    """The checker itself: an unmarked shell block and a bare fence fail, a fragment passes."""
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\nrm -rf build\n```\n\n<!-- fragment: needs a graph -->\n"
        "```python\ngraph.invoke(None)\n```\n\n```\nplain\n```\n",
        encoding="utf-8",
    )
    found = blocks(page)
    assert [(b.language, b.mark) for b in found] == [
        ("bash", None),
        ("python", "fragment"),
        ("", None),
    ]
    with pytest.raises(AssertionError, match="shell block"):
        check_block(found[0], {})
    check_block(found[1], {})  # compiled, not run: `graph` is not defined
    with pytest.raises(AssertionError, match="fence language"):
        check_block(found[2], {})


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("name", ["README.md", "ARCHITECTURE.md"])
def test_links_of_the_top_level_documents_resolve(name: str) -> None:
    """Each relative link of README.md / ARCHITECTURE.md names a file that exists, each
    ``#anchor`` a heading of the file (mkdocs checks the links inside docs/)."""
    text = (ROOT / name).read_text(encoding="utf-8")
    anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # an absolute URL
        path, _, anchor = target.partition("#")
        if path:
            assert (ROOT / path).exists(), f"{name} links to a missing {path}"
        else:
            assert anchor in anchors, f"{name} links to #{anchor}, no such heading"


def test_every_page_of_docs_is_in_the_site_nav() -> None:
    """A page written into docs/ is in mkdocs.yml's nav, so the site shows it (the strict
    build in .ci/run refuses a page left out; this says so before it runs)."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = set(re.findall(r"^\s*- (?:.*: )?([\w./-]+\.md)$", text, re.M))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages - nav == set(), f"add to mkdocs.yml's nav: {sorted(pages - nav)}"
    assert nav - pages == set(), f"mkdocs.yml's nav names missing pages: {sorted(nav - pages)}"


def test_every_included_section_exists() -> None:
    """A page that includes a file (``--8<-- "FILE"``) or a section of one
    (``--8<-- "FILE:name"``) finds it: the section's start and end markers are in FILE."""
    for page in sorted((ROOT / "docs").glob("*.md")):
        for target in re.findall(r'^--8<-- "([^"]+)"$', page.read_text(encoding="utf-8"), re.M):
            path, _, section = target.partition(":")
            assert (ROOT / path).is_file(), f"{page.name} includes a missing {path}"
            if section:
                text = (ROOT / path).read_text(encoding="utf-8")
                for end in ("start", "end"):
                    assert f"--8<-- [{end}:{section}]" in text, f"{path} lost [{end}:{section}]"


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_no_fence_hides_in_an_indent(path: Path) -> None:
    """Every fence starts its line (one inside a list item would escape the checks above)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    indented = [n for n, line in enumerate(lines, 1) if re.match(r"\s+```", line)]
    assert indented == [], f"{path.name}: fences at lines {indented}: start them at the margin"
