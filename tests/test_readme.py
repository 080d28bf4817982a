"""The README quickstart snippet runs as written, given the names it leaves to the reader."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool

from langgraph_effects import OperationStatus, SQLiteLedger
from langgraph_effects.testing import FakeCRM

README = Path(__file__).resolve().parents[1] / "README.md"


def _quickstart_snippet() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Quickstart") :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, "the Quickstart section has no python block"
    return match.group(1)


def test_readme_quickstart_closes_the_case_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snippet closes the case once, records it confirmed, and a resume replays it."""
    monkeypatch.chdir(tmp_path)
    crm = FakeCRM(tmp_path / "crm.db")

    def call_model(state: dict[str, Any]) -> dict[str, Any]:
        if isinstance(state["messages"][-1], ToolMessage):
            return {"messages": [AIMessage(content="closed")]}
        call = {
            "name": "close_case",
            "id": "call-1",
            "type": "tool_call",
            "args": {"case_id": "case-318", "resolution": "onboarding complete"},
        }
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    @tool
    def search_docs(query: str) -> str:
        """Search the docs."""
        return "nothing"

    namespace: dict[str, Any] = {"crm": crm, "call_model": call_model, "search_docs": search_docs}
    exec(compile(_quickstart_snippet(), str(README), "exec"), namespace)

    assert crm.effects == 1
    with SQLiteLedger.from_conn_string(str(tmp_path / "app.db")) as ledger:
        [op] = ledger.list(tenant_id="acme")
        assert op.status is OperationStatus.CONFIRMED
        assert op.target == "case-318"
