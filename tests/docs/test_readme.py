"""The README's code runs as written: the quickstart as pasted, the create_agent block with a model.

Also the facts the README states about the package itself: its version and its license.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from _graphs import call
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

import langgraph_effects
from langgraph_effects import EffectContext, InMemoryLedger, OperationStatus, effect
from langgraph_effects.testing import FakeCRM, ScriptedChatModel
from langgraph_effects.testing.faults import scaled

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def python_block(heading: str) -> str:
    """The first ```python block after ``heading`` in the README."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index(heading) :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, f"no python block after {heading!r}"
    return match.group(1)


def test_readme_quickstart_runs_as_pasted(tmp_path: Path) -> None:
    """The quickstart, pasted into a file and run twice in an empty directory, closes the case once.

    A fresh interpreter and nothing but the block itself: every name it uses it
    defines or imports. The second run finds the thread and only resumes it, as a process
    does after a crash: the operation stays confirmed and nothing is sent again.
    """
    script = tmp_path / "quickstart.py"
    script.write_text(python_block("## Quickstart\n"), encoding="utf-8")
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=scaled(120),
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "confirmed | closures at the CRM: 1"
    with FakeCRM(tmp_path / "crm.db") as crm:
        assert (crm.effects, crm.duplicates) == (1, 0)


@pytest.mark.parametrize("with_hitl", [True, False], ids=["hitl=", "without hitl="])
def test_readme_create_agent_with_hitl_asks_once(tmp_path: Path, with_hitl: bool) -> None:
    """The create_agent block: with ``hitl=`` one question; without it (as the README warns) two."""
    crm = FakeCRM(tmp_path / "crm.db")

    @effect("crm.close_case", target=lambda a: a["case_id"], require_approval=True)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    ledger = InMemoryLedger()
    ledger.setup()
    model = ScriptedChatModel(plan=[[call("close_case", "c1", case_id="A", resolution="done")]])
    namespace: dict[str, Any] = {
        "model": model,
        "close_case": close_case,
        "saver": InMemorySaver(),
        "ledger": ledger,
    }
    block = python_block("### With `create_agent`")
    if not with_hitl:
        assert ", hitl=hitl, " in block
        block = block.replace(", hitl=hitl, ", ", ")
    exec(compile(block, str(README), "exec"), namespace)
    agent = namespace["agent"]
    config = {"configurable": {"thread_id": "t1"}}

    first = agent.invoke({"messages": [("user", "close A")]}, config, durability="sync")
    assert len(first["__interrupt__"]) == 1  # HITL asks ...
    out = agent.invoke(
        Command(resume={"decisions": [{"type": "approve"}]}), config, durability="sync"
    )
    if not with_hitl:  # the ledger's own approval request comes on top
        assert out["__interrupt__"][0].value["kind"] == "effect_approval"
        assert crm.effects == 0
        return
    assert "__interrupt__" not in out  # ... and nobody asks again
    [op] = ledger.list(tenant_id="default")
    assert op.status is OperationStatus.CONFIRMED
    assert crm.effects == 1
    actors = {e.actor for e in ledger.events("default", op.operation_id)}
    assert "anonymous" in actors  # no server authenticated the approver


def test_readme_functional_api_acts_once_per_run(tmp_path: Path) -> None:
    """The Functional API block: a run closes the case once; resuming the finished thread
    (as a new process does after a crash) sends nothing again; a new run of the workflow
    on the thread is a new request and acts again. Counted at the fake CRM."""
    crm = FakeCRM(tmp_path / "crm.db")

    @effect("crm.close_case", target=lambda a: a["case_id"])
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    ledger = InMemoryLedger()
    ledger.setup()
    namespace: dict[str, Any] = {
        "close_case": close_case,
        "ledger": ledger,
        "saver": InMemorySaver(),
    }
    exec(compile(python_block("### Functional API"), str(README), "exec"), namespace)
    workflow = namespace["close_workflow"]
    config = {"configurable": {"thread_id": "close-318"}}
    first = workflow.invoke("case-318", config, durability="sync")
    assert (first["case_id"], crm.effects) == ("case-318", 1)
    assert workflow.invoke(None, config, durability="sync") == first
    assert crm.effects == 1
    workflow.invoke("case-318", config, durability="sync")  # asked again: a new run acts
    assert crm.effects == 2
    ops = ledger.list(tenant_id="default")
    assert sorted(op.status for op in ops) == [OperationStatus.CONFIRMED] * 2


def test_readme_mcp_tools_act_once(tmp_path: Path) -> None:
    """The MCP block, run inside a session with the real test server (FastMCP over stdio,
    through langchain-mcp-adapters): the read-only lookup stays plain (no record), the
    unannotated create_ticket is an effect that acts once, and a resume acts no more."""
    import asyncio
    import textwrap

    from _mcp_child import CFG, CREATE, acted, connection
    from langchain.agents import create_agent
    from langchain_mcp_adapters.client import MultiServerMCPClient

    from langgraph_effects import EffectMiddleware

    effects = tmp_path / "effects.jsonl"
    ledger = InMemoryLedger()
    ledger.setup()
    find = {"name": "find_tickets", "args": {"title": "printer"}, "id": "f1"}
    body = "async def readme(session):\n" + textwrap.indent(python_block("### MCP tools"), "    ")
    namespace: dict[str, Any] = {
        "create_agent": create_agent,
        "EffectMiddleware": EffectMiddleware,
        "model": ScriptedChatModel(plan=[[CREATE, find]]),
        "saver": InMemorySaver(),
        "ledger": ledger,
    }
    exec(compile(body + "    return tools, agent\n", str(README), "exec"), namespace)

    async def main() -> dict[str, str]:
        async with MultiServerMCPClient({"tickets": connection(effects)}).session("tickets") as s:
            tools, agent = await namespace["readme"](s)
            await agent.ainvoke({"messages": [("user", "go")]}, CFG, durability="sync")
            await agent.ainvoke(None, CFG, durability="sync")
            return {t.name: type(t).__name__ for t in tools}

    kinds = asyncio.run(main())
    assert kinds == {
        "find_tickets": "StructuredTool",  # readOnlyHint: plain
        "create_ticket": "EffectTool",
        "set_priority": "EffectTool",
    }
    assert [e["tool"] for e in acted(effects)] == ["create_ticket"]
    [op] = ledger.list(tenant_id="default")
    assert (op.action, op.status) == ("tickets.create_ticket", OperationStatus.CONFIRMED)


def test_readme_reads_in_ten_minutes() -> None:
    """At most 300 lines and 2,500 words (the rest is in docs/), its contents before the
    commands, every section it starts with there."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300, "move the detail into a page of docs/"
    assert len(text.split()) <= 2500, "move the detail into a page of docs/"
    assert text.index("**Contents:**") < text.index("## Two commands")
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[:3] == ["Install", "Two commands", "Quickstart"]
    assert headings[-1] == "Documentation"


def test_version_matches_pyproject() -> None:
    """``langgraph_effects.__version__`` is the version pyproject.toml builds."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert langgraph_effects.__version__ == project["version"]
    assert f"## {project['version']}" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def test_license_file_is_the_declared_one() -> None:
    """pyproject.toml says MIT; the LICENSE file is the MIT license."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License\n")


def test_ci_runs_exactly_the_readme_test_command() -> None:
    """.ci/run ends with the README's 'Run the whole test suite' command, verbatim."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("Run the whole test suite") :]
    match = re.search(r"```bash\n(.*?)\n```", section, re.DOTALL)
    assert match is not None
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci_lines[-1] == match.group(1).strip()


def test_ci_installs_the_venv_once() -> None:
    """.ci/run installs the venv once, in the README's command; the house gates run in that
    venv before the suite (LGE_CI_GATES=1: tests/_gates.py, started by tests/conftest.py)."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert ci.count("pip install") == 1
    assert re.search(r"^export LGE_CI_GATES=1$", ci, re.M)


def test_a_failing_gate_says_which_and_what_it_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gates stop at the first stage that fails, naming its command and its output."""
    import _gates

    stages = [
        [[sys.executable, "-c", "print('fine')"]],
        [[sys.executable, "-c", "print('bad'); raise SystemExit(1)"]],
        [["false-never-run"]],
    ]
    monkeypatch.setattr(_gates, "gates", lambda: stages)
    failed = _gates.run_gates()
    assert failed is not None
    assert failed.startswith(f"$ {sys.executable} -c print('bad')")
    assert "bad\n" in failed
    assert "fine" not in failed
    monkeypatch.setattr(_gates, "gates", lambda: stages[:1])
    assert _gates.run_gates() is None


@pytest.mark.parametrize(
    ("options", "workers"),
    [([], "2 workers"), (["-p", "no:xdist"], None)],
)
def test_pytest_runs_with_and_without_xdist(options: list[str], workers: str | None) -> None:
    """Plain ``pytest`` uses two xdist workers; ``-p no:xdist`` runs in-process and still works."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *options, "-p", "no:cacheprovider",
         "tests/docs/test_readme.py::test_license_file_is_the_declared_one"],
        cwd=ROOT, capture_output=True, text=True, timeout=scaled(120), check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    if workers is None:
        assert "worker" not in done.stdout
    else:
        assert re.search(rf"\b{workers}\b", done.stdout), done.stdout
