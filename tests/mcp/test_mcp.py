"""MCP tools as effects (``langgraph_effects.mcp``), against a real FastMCP server over stdio.

The server (``tests/_mcp_server.py``) counts every call that acted in a file, so the
counts survive the kill of the agent process that called it; the tests that kill it
(SIGKILL after acting, before the client hears back; a fresh process resumes the
thread, a plain ``create_agent`` beside it the control) are in the kill room,
``tests/kills/test_mcp_kills.py``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from _graphs import Env
from _mcp_child import CFG, CREATE, PRIORITY, acted, backend, connection, kind_of
from langchain.agents import create_agent
from langchain_core.tools import StructuredTool
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools

from langgraph_effects import EffectMiddleware
from langgraph_effects.core.model import ProviderContract
from langgraph_effects.effects import effect_spec
from langgraph_effects.errors import InvalidInput
from langgraph_effects.mcp import MCPHints, mcp_effects, mcp_hints
from langgraph_effects.testing import ScriptedChatModel

__all__ = ["backend"]  # the fixture, from _mcp_child

FIND = {"name": "find_tickets", "args": {"title": "printer"}, "id": "f1"}


def tool(name: str, metadata: dict[str, Any] | None) -> StructuredTool:
    async def body(**kwargs: Any) -> str:
        return "ok"

    return StructuredTool(
        name=name,
        description=name,
        args_schema={"type": "object"},
        coroutine=body,
        metadata=metadata,
    )


# --------------------------------------------------------------------------- annotations


def test_both_layouts_and_the_spec_defaults() -> None:
    """Flat camelCase (langchain-mcp-adapters) and nested snake_case (langchain.mcp) read alike."""
    flat = tool("a", {"readOnlyHint": None, "destructiveHint": False, "idempotentHint": True})
    nested = tool(
        "a",
        {"mcp": {"tool": {"annotations": {"destructive_hint": False, "idempotent_hint": True}}}},
    )
    said = MCPHints(destructive=False, idempotent=True, annotated=True)
    assert mcp_hints(flat) == mcp_hints(nested) == said
    # No annotations at all (metadata None, or langchain.mcp with only a server): the spec's
    # defaults, destructive and not idempotent.
    for bare in (tool("b", None), tool("b", {"mcp": {"server": {"name": "s"}}})):
        assert mcp_hints(bare) == MCPHints(destructive=True, idempotent=False, annotated=False)
    with pytest.raises(InvalidInput, match="read_only_hint must be true, false or unset"):
        mcp_hints(tool("c", {"readOnlyHint": "yes"}))


def test_what_each_tool_becomes() -> None:
    """Read-only stays plain; idempotent may resend; the rest never; untrusted: all effects."""
    read = tool("find", {"readOnlyHint": True})
    idem = tool("tag", {"idempotentHint": True, "destructiveHint": False})
    bare = tool("open", None)
    nested = tool("close", {"mcp": {"server": {"name": "crm"}, "tool": {"annotations": {}}}})
    found, tag, opened = mcp_effects([read, idem, bare], trusted=True, server="tickets")
    assert found is read
    assert effect_spec(found) is None
    tag_spec, open_spec = effect_spec(tag), effect_spec(opened)
    assert tag_spec is not None
    assert open_spec is not None
    assert (tag_spec.action, tag_spec.contract) == ("tickets.tag", ProviderContract.convergent())
    assert (open_spec.action, open_spec.contract) == ("tickets.open", None)
    # The server's name from langchain.mcp's metadata.
    [closed] = mcp_effects([nested], trusted=True)
    assert effect_spec(closed).action == "crm.close"  # type: ignore[union-attr]
    # Untrusted (the default): the hints are ignored, every tool is an effect never resent.
    untrusted = mcp_effects([read, idem], server="tickets")
    assert [effect_spec(t).contract for t in untrusted] == [None, None]  # type: ignore[union-attr]


def test_target_and_intent_from_arguments_and_bad_input() -> None:
    opened = tool("open", None)

    def find(op: Any) -> Any:
        raise AssertionError("not called here")

    [declared] = mcp_effects(
        [opened],
        server="t",
        target={"open": "title"},
        intent={"open": lambda a: a["ref"]},
        reconcile={"open": find},
        require_approval=["open"],
    )
    spec = effect_spec(declared)
    assert spec is not None
    assert (spec.reconcile, spec.require_approval) == (find, True)
    assert spec.target_of({"title": "printer", "ref": "r-1"}) == "printer"
    assert spec.intent_of({"title": "printer", "ref": "r-1"}) == "r-1"
    with pytest.raises(InvalidInput, match="argument 'title', absent from the call"):
        spec.target_of({"ref": "r-1"})
    with pytest.raises(InvalidInput, match=r"target names \['nope'\], not among"):
        mcp_effects([opened], server="t", target={"nope": "x"})
    with pytest.raises(InvalidInput, match="name the server"):
        mcp_effects([opened])
    with pytest.raises(InvalidInput, match=r"is read-only .* its target would never apply"):
        mcp_effects(
            [tool("find", {"readOnlyHint": True})],
            trusted=True,
            server="t",
            target={"find": "title"},
        )


# --------------------------------------------------------------------------- a real server


def test_create_agent_over_a_real_server(backend: str, tmp_path: Path) -> None:
    """Through langchain-mcp-adapters and create_agent: each intended call acts once."""
    effects = tmp_path / "effects.jsonl"
    env = Env(kind_of(backend), "async", path=Path(backend), url=backend)
    # The same ticket asked twice in one AIMessage: two calls, two intended effects.
    again = {**CREATE, "id": "c2"}

    async def main() -> Any:
        client = MultiServerMCPClient({"tickets": connection(effects)})
        async with client.session("tickets") as session:
            tools = mcp_effects(await load_mcp_tools(session), trusted=True, server="tickets")
            agent = create_agent(
                ScriptedChatModel(plan=[[CREATE, again, PRIORITY, FIND]]),
                tools=tools,
                middleware=[EffectMiddleware(ledger=env.ledger)],
                checkpointer=env.checkpointer,
            )
            out = await agent.ainvoke({"messages": [("user", "go")]}, CFG, durability="sync")
            ops = await env.ledger.list(tenant_id="default")
            return out, ops

    try:
        out, ops = env.run(main())
    finally:
        env.close()
    assert [e["tool"] for e in acted(effects)].count("create_ticket") == 2
    assert [e["tool"] for e in acted(effects)].count("set_priority") == 1
    # The read-only lookup ran as a plain tool: no record.
    assert sorted(op.action for op in ops) == [
        "tickets.create_ticket",
        "tickets.create_ticket",
        "tickets.set_priority",
    ]
    assert {op.status.value for op in ops} == {"confirmed"}
    answers = [m.text for m in out["messages"] if m.type == "tool"]
    assert "T-0 is high" in answers
    # Each create answered with its own ticket (numbered by the server in the order the
    # calls reach it, which the parallel tasks do not fix).
    created = [m.text for m in out["messages"] if m.type == "tool" and m.name == "create_ticket"]
    assert len(set(created)) == 2, created
    assert all(re.fullmatch(r"T-\d+", c) for c in created), created
