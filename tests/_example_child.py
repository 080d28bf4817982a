"""What a forked child runs in the example tests: one example script, as ``python script.py``.

Module-level and picklable for ``run_in_forked_child``: the child is forked from
a server that already imported LangGraph, so it starts in milliseconds and is
still a fresh process (its own pid, no connection or thread of the test's).
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path


def run_script(script: str, argv: list[str], output: str) -> None:
    """Run ``script`` as ``__main__`` with ``argv``; stdout and stderr go to ``output``.

    Ends the process with the script's exit code (an example that crashes on
    purpose ends it itself, with 137).
    """
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (fd 1 outlives this)
    sys.stderr = sys.stdout
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
    os._exit(code)
