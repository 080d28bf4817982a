"""The CLI starts instantly: it never imports langgraph or langchain, and ``--help`` no ledger.

What each command costs is measured by ``benchmarks/cli.py``; these tests check the
cause, the modules a fresh process loads, in a new interpreter each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import draft

from langgraph_effects._owners import current_owner
from langgraph_effects.ledger.sqlite import SQLiteLedger
from langgraph_effects.testing.faults import scaled

HEAVY = ("langgraph", "langchain_core", "langchain", "psycopg")

_PROBE = """
import json, sys
sys.argv = ["langgraph-effects", *json.loads(sys.argv[1])]
from langgraph_effects.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
loaded = sorted(sys.modules)
print(json.dumps({"code": code, "loaded": loaded}), file=sys.stderr)
"""


def loaded_by(*args: str) -> tuple[int, set[str]]:
    """Run the console script's entry point with ``args`` in a fresh interpreter; return its
    exit code and the modules it had imported when it finished (top-level packages too)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LGE_")}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(args)],
        capture_output=True, text=True, timeout=scaled(120), check=False, env=env,
    )  # fmt: skip
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], {*report["loaded"], *(m.split(".")[0] for m in report["loaded"])}


def test_importing_the_entry_module_loads_no_langgraph_and_no_langchain() -> None:
    """``import langgraph_effects.cli`` (what the console script does first) imports neither
    langgraph, langchain_core, pydantic nor rich."""
    done = subprocess.run(
        [sys.executable, "-c", "import json, sys, langgraph_effects.cli; "
         "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"],
        capture_output=True, text=True, timeout=scaled(120), check=True,
    )  # fmt: skip
    loaded = set(json.loads(done.stdout))
    assert "langgraph_effects" in loaded
    assert loaded.isdisjoint({*HEAVY, "pydantic", "rich"}), loaded & {*HEAVY, "pydantic", "rich"}


@pytest.mark.parametrize("args", [("--help",), ("--version",), ("show", "--help")])
def test_help_and_version_load_no_ledger(args: tuple[str, ...]) -> None:
    """``--help`` and ``--version`` print without loading the ledger's model (its pydantic
    classes are most of a command's start-up) or any ledger."""
    code, loaded = loaded_by(*args)
    assert code == 0
    ledger = {"langgraph_effects.core.model", "langgraph_effects.ledger.base", *HEAVY}
    assert loaded.isdisjoint(ledger), loaded & ledger


def test_list_and_show_on_sqlite_load_no_langgraph(tmp_path: Path) -> None:
    """Reading a SQLite ledger (``list``, ``show``) loads the ledger, never langgraph or
    langchain: the package's root imports nothing until a name is used."""
    path = tmp_path / "effects.db"
    with SQLiteLedger.from_conn_string(str(path)) as ledger:
        ledger.setup()
        ledger.prepare(draft("acme", "op-startup"), owner=current_owner())
    db = f"sqlite:///{path}"
    for args in (("list", "--db", db), ("show", "op-startup", "-t", "acme", "--db", db)):
        code, loaded = loaded_by(*args)
        assert code == 0, args
        assert "langgraph_effects.ledger.sqlite" in loaded  # the command really ran
        assert loaded.isdisjoint(HEAVY), (args, loaded & set(HEAVY))
