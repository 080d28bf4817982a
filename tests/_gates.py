"""The house gates CI runs before the suite: lint, format, types and the documentation site.

``.ci/run`` sets ``LGE_CI_GATES=1`` and runs the README's test command, which makes the
venv; ``conftest.pytest_sessionstart`` then runs ``run_gates`` in that venv, once (the
controller, never an xdist worker), before any test: the venv is installed once, and a
gate that fails ends the session before the suite starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV_VAR = "LGE_CI_GATES"


def _tool(name: str) -> str:
    """``name`` in the venv the suite runs in (``.venv/bin/ruff`` beside its python)."""
    return str(Path(sys.executable).with_name(name))


def gates() -> list[list[list[str]]]:
    """The gates in order; the commands of one stage run at once (types and the site are
    one process each, so two cores check both in the time of the longer). The site is
    strict (a broken link, a page left out of the nav, a docstring the API reference
    cannot render fail), built into a temporary directory: nothing is committed."""
    return [
        [[_tool("ruff"), "check", "."]],
        [[_tool("ruff"), "format", "--check", "."]],
        [
            [_tool("mypy")],
            [_tool("mkdocs"), "build", "--strict", "--site-dir", tempfile.mkdtemp()],
        ],
    ]


def run_gates() -> str | None:
    """Run every gate from the repository's root; None when all pass, else what the
    first stage that failed printed."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    for stage in gates():
        running = [
            (command, subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True))
            for command in stage
        ]  # fmt: skip
        failed = [
            f"$ {' '.join(command)}\n{out}"
            for command, process in running
            for out, _ in [process.communicate()]
            if process.returncode != 0
        ]
        if failed:
            return "\n".join(failed)
    return None
