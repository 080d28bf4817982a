"""What a forked child runs in the example tests: one example script, as ``python script.py``.

Module-level and picklable for ``run_in_forked_child``: the child is forked from
a server that already imported LangGraph, so it starts in milliseconds and is
still a fresh process (its own pid, no connection or thread of the test's).
"""

from __future__ import annotations

import os
import runpy
import sys
import tempfile
from pathlib import Path


def run_script(script: str, argv: list[str], output: str, errors: str | None = None) -> None:
    """Run ``script`` as ``__main__`` with ``argv``; stdout goes to ``output``, stderr to
    ``errors`` (or to ``output`` too), and no crash point is armed from the environment
    (``LGE_CRASH_AT``): only ``argv`` says where the example dies.

    Ends the process with the script's exit code (an example that crashes on
    purpose ends it itself, with 137).
    """
    os.environ.pop("LGE_CRASH_AT", None)
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd if errors is None else os.open(errors, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (fd 1 outlives this)
    sys.stderr = sys.stdout if errors is None else open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.argv = [script, *argv]
    sys.path.insert(0, str(Path(script).parent))  # as for a script: its directory first
    code: int = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as done:
        if isinstance(done.code, int):
            code = done.code
        elif done.code is not None:
            print(done.code, file=sys.stderr)
            code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def unexplained_flags(script: str) -> list[list[str]] | None:
    """The option strings of ``script``'s arguments that have no help text, read from its
    parser when it parses its command line (``None``: it never did); the script stops there.

    Run as ``python script.py`` with no arguments: its directory first on ``sys.path``.
    """
    import argparse

    found: list[list[str]] | None = None

    def report(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        nonlocal found
        found = [a.option_strings for a in self._actions if not a.help]
        raise SystemExit(0)

    argparse.ArgumentParser.parse_args = report  # type: ignore[assignment,method-assign]
    sys.argv = [script]
    sys.path.insert(0, str(Path(script).parent))  # as `python examples/x.py` has it
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as done:
        if done.code not in (0, None):
            raise
    return found


def run_example(script: Path, *args: str | Path, expect: int = 0) -> str:
    """Run ``script`` with ``args`` in a new process forked from the preloaded forkserver (its
    own pid, nothing of the caller's), as ``python script args`` would run it, without the
    interpreter's start; assert its exit code (a signal's death is minus its number, as
    ``subprocess`` says it) and return its stdout (stderr read apart, shown on failure)."""
    from langgraph_effects.testing.scenario import run_in_forked_child

    with tempfile.TemporaryDirectory(prefix="lge-example-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        argv = [str(a) for a in args]
        child = run_in_forked_child(run_script, str(script), argv, str(out), str(err), timeout=180)
        stdout, stderr = out.read_text(encoding="utf-8"), err.read_text(encoding="utf-8")
    assert child.exitcode == expect, (
        f"exit {child.exitcode}\n{stdout}\n{stderr}\n{child.error or ''}"
    )
    return stdout
