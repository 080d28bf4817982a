"""The Jupyter walkthroughs, run top to bottom with nbclient; their cells assert what they claim.

The kernel is this interpreter: a kernelspec pointing at ``sys.executable`` is
installed into a temporary Jupyter path, so the test works in a fresh venv
whatever kernels the machine has. Notebooks are committed without outputs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from conftest import require_postgres

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
KERNEL = "langgraph-effects-test"
POSTGRES = {"03_postgres_in_production"}


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A kernelspec for this very interpreter, found through JUPYTER_PATH only while testing."""
    from ipykernel.kernelspec import install

    prefix = tmp_path_factory.mktemp("jupyter")
    install(prefix=str(prefix), kernel_name=KERNEL, display_name="langgraph-effects tests")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
        mp.setenv("JUPYTER_PLATFORM_DIRS", "1")  # no deprecation warning about old paths
        yield KERNEL


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
def test_committed_without_outputs(path: Path) -> None:
    """No notebook is committed with outputs or execution counts (CI produces them)."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], cell.source[:60]
            assert cell.execution_count is None, cell.source[:60]


@pytest.mark.parametrize("path", notebooks(), ids=lambda p: p.stem)
def test_notebook_runs(path: Path, kernel_name: str) -> None:
    """Every cell runs without error, so every assert in the notebook holds."""
    from nbclient import NotebookClient

    if path.stem in POSTGRES:
        require_postgres()
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=120,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()
    ran = [c for c in nb.cells if c.cell_type == "code"]
    assert ran
    assert all(c.execution_count for c in ran)
