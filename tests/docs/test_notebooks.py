"""The Jupyter walkthroughs: committed with their outputs, which are what they show today.

Each notebook is run top to bottom with nbclient (its cells assert what they
claim), and its fresh outputs are compared with the committed ones after
normalization: temp paths, timestamps, ids, process ids, the OS user, memory
addresses and durations are masked, blanks at line ends dropped, and split
writes to one stream joined; a picture is compared by its size in pixels; a
cell tagged ``output-varies`` (its figures depend on a race it shows) is
compared by the kinds of its outputs only. When a change to the library
changes what a notebook shows, refresh them with::

    python tests/docs/test_notebooks.py            # re-executes and rewrites notebooks/*.ipynb

The kernel is this interpreter: a kernelspec pointing at ``sys.executable`` is
installed into a temporary Jupyter path, so the test works in a fresh venv
whatever kernels the machine has.
"""

from __future__ import annotations

import base64
import difflib
import os
import re
import struct
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nbformat
import pytest

from langgraph_effects.testing.faults import scaled

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
KERNEL = "langgraph-effects-test"
POSTGRES = {"03_postgres_in_production"}
MAX_PICTURE_BYTES = 60_000  # a modest PNG; the whole notebook stays readable in a diff viewer
REFRESH = "python tests/docs/test_notebooks.py"

# What differs from one run to the next, masked before comparing (most specific first).
_VOLATILE = [
    (re.compile(r"[\w.-]+\|\d+\|[\d.]+\|\w+"), "<lease-owner>"),  # host|pid|started|nonce
    (re.compile(r"\bprocess \d+ on [\w.-]+"), "<lease-owner>"),  # the same, as the CLI says it
    (re.compile(re.escape(tempfile.gettempdir()) + r"/[^\s'\"),]*"), "<tmp>"),
    (re.compile(r"/tmp/[^\s'\"),]*"), "<tmp>"),
    (re.compile(r"lge_nb\w*"), "<schema>"),
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)?"), "<time>"),
    (re.compile(r"datetime\.datetime\([^)]*\)"), "<time>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"\b(lge-)?op-[a-z2-7]{32}\b"), "<operation-id>"),  # digests of the call
    (re.compile(r"\bob-[0-9a-f]{32}\b"), "<entry-id>"),
    (re.compile(r"0x[0-9a-fA-F]{6,}"), "<address>"),
    (re.compile(r"\b(process|pid|worker) \d+"), r"\1 <pid>"),
    (re.compile(r"\b\d+(\.\d+)?\s?(ms|s|seconds)\b"), "<duration>"),
]


def _os_user() -> str:
    import getpass

    return getpass.getuser()


def normalize(text: str) -> str:
    for pattern, mask in _VOLATILE:
        text = pattern.sub(mask, text)
    # A table pads its cells to the widest value, and a duration's width varies ("3 s", "12 s"):
    # trailing blanks are layout, not content.
    text = re.sub(r"[ \t]+$", "", text, flags=re.M)
    # The CLI records the OS account as the verified operator: whoever runs the notebook.
    user = re.escape(_os_user())
    return re.sub(rf"(?<=')({user})(?=')|(?<=os:)({user})\b", "<os-user>", text)


def _merged_streams(outputs: list[Any]) -> list[Any]:
    """Consecutive writes to one stream as one output (the kernel splits them by timing)."""
    merged: list[Any] = []
    for out in outputs:
        last = merged[-1] if merged else None
        if (
            out.output_type == "stream"
            and last is not None
            and last.output_type == "stream"
            and last.name == out.name
        ):
            merged[-1] = nbformat.from_dict({**last, "text": last.text + out.text})
        else:
            merged.append(out)
    return merged


def png_size(data: str) -> tuple[int, int]:
    """Width and height from a base64 PNG's IHDR chunk."""
    raw = base64.b64decode(data)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", raw[16:24])
    return width, height


def shown(nb: Any) -> list[list[str]]:
    """Per code cell, what a reader sees, normalized: text, pictures by size, errors by name."""
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        seen = []
        varies = "output-varies" in cell.metadata.get("tags", [])
        for out in _merged_streams(cell.outputs):
            if varies:
                seen.append(f"{out.output_type} (varies)")
                continue
            if out.output_type == "stream":
                seen.append(f"{out.name}: {normalize(out.text)}")
            elif out.output_type == "error":
                seen.append(f"error: {out.ename}: {normalize(out.evalue)}")
            elif "image/png" in out.data:
                width, height = png_size(out.data["image/png"])
                seen.append(f"picture {width}x{height}")
            else:
                seen.append(f"{out.output_type}: {normalize(out.data.get('text/plain', ''))}")
        cells.append(seen)
    return cells


@contextmanager
def kernel_for_tests() -> Iterator[str]:
    """A kernelspec for this very interpreter, found through JUPYTER_PATH only meanwhile."""
    from ipykernel.kernelspec import install

    with tempfile.TemporaryDirectory() as prefix, pytest.MonkeyPatch.context() as mp:
        install(prefix=prefix, kernel_name=KERNEL, display_name="langgraph-effects tests")
        mp.setenv("JUPYTER_PATH", str(Path(prefix) / "share" / "jupyter"))
        mp.setenv("JUPYTER_PLATFORM_DIRS", "1")  # no deprecation warning about old paths
        yield KERNEL


def execute(path: Path, kernel_name: str) -> Any:
    """``path`` run top to bottom in a fresh kernel (nothing written back)."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=round(scaled(180)),  # nbclient takes whole seconds
        kernel_name=kernel_name,
        record_timing=False,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()
    nb.metadata["kernelspec"] = {
        "display_name": "Python 3",
        "language": "python",
        "name": "python3",
    }
    return nb


@pytest.fixture(scope="module")
def kernel_name() -> Iterator[str]:
    with kernel_for_tests() as name:
        yield name


def notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def test_the_three_walkthroughs_exist() -> None:
    """The notebooks the README links to are all there."""
    assert [p.stem for p in notebooks()] == [
        "01_the_problem_and_the_fix",
        "02_approval_and_review",
        "03_postgres_in_production",
    ]


@pytest.mark.parametrize("path", notebooks(), ids=lambda p: p.stem)
def test_committed_with_outputs(path: Path) -> None:
    """Every code cell is committed executed, in order, with no error and only modest pictures."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), REFRESH
    for cell in code:
        for out in cell.outputs:
            assert out.output_type != "error", f"{path.name}: committed with an error"
            png = out.get("data", {}).get("image/png")
            if png is not None:
                assert len(base64.b64decode(png)) <= MAX_PICTURE_BYTES, cell.source[:60]


PICTURES = {
    "01_the_problem_and_the_fix": {"graph_picture", "state_picture", "timeline_picture"},
    "02_approval_and_review": {"timeline_picture"},
    "03_postgres_in_production": {"timeline_picture"},
}


@pytest.mark.parametrize("path", notebooks(), ids=lambda p: p.stem)
def test_each_notebook_shows_its_pictures(path: Path) -> None:
    """Notebook 1 shows the graph, the operation state diagram and a crash-and-resume timeline;
    notebook 2 the review of a lost response, notebook 3 two workers resuming one crash."""
    nb = nbformat.read(path, as_version=4)
    pictures = {
        name
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if "image/png" in out.get("data", {})
        for name in re.findall(r"\b(\w+_picture)\(", cell.source)
    }
    assert pictures == PICTURES[path.stem]


@pytest.mark.parametrize("path", notebooks(), ids=lambda p: p.stem)
def test_notebook_runs_and_its_committed_outputs_are_current(
    path: Path, kernel_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every cell runs (so every assert holds) and shows what the committed notebook shows."""
    if path.stem in POSTGRES:
        from _pg import POSTGRES_URL, require_postgres  # here: `python tests/docs/...` too

        require_postgres()
        monkeypatch.setenv("LGE_LEDGER_URL", POSTGRES_URL)  # the variable the notebook reads
    fresh = execute(path, kernel_name)
    code = [c for c in fresh.cells if c.cell_type == "code"]
    assert code
    assert all(c.execution_count for c in code)
    committed, now = shown(nbformat.read(path, as_version=4)), shown(fresh)
    if committed != now:
        diff = difflib.unified_diff(
            [repr(c) for c in committed], [repr(c) for c in now], "committed", "now", lineterm=""
        )
        pytest.fail(f"{path.name}: committed outputs are stale; run {REFRESH}\n" + "\n".join(diff))


def refresh(paths: list[Path]) -> None:
    """Re-execute ``paths`` and write them back with their outputs."""
    with kernel_for_tests() as name:
        for path in paths:
            print(f"executing {path.name} ...", flush=True)
            nbformat.write(execute(path, name), path)


if __name__ == "__main__":
    os.chdir(NOTEBOOKS.parent)
    refresh([Path(a).resolve() for a in sys.argv[1:]] or notebooks())
