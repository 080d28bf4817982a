"""A tool call is answered only by a ToolMessage after its AIMessage (issue 22, row 5).

Some models reuse tool-call ids (``call_0`` every turn). An older ToolMessage then
carries the id of the new call; it answered an earlier call, never this one. The rule
lives in ``_faces.unanswered_calls``; ``route_tool_calls``, ``approval_node`` and the
batched approvals of ``EffectMiddleware`` all read it. Counted at a fake CRM: every
call the model made acts once, and no run ends with an unanswered call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from _graphs import Env, State, call
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from langgraph_effects import EffectContext, EffectMiddleware, EffectToolNode, effect
from langgraph_effects._faces import unanswered_calls
from langgraph_effects.node import route_tool_calls
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.providers import FakeCRM

# Answers come from a signed-in user (no "by"), as behind a server with auth.
CFG = {"configurable": {"thread_id": "reused-ids", "langgraph_auth_user": {"identity": "ana"}}}
# Three turns, each call "call_0": A, then B, then A again (asked for twice, on purpose).
PLAN = [[call("close_case", "call_0", case_id=case, resolution="fixed")] for case in "ABA"]


def close_tool(crm: FakeCRM, *, approval: bool = False) -> Any:
    @effect("crm.close_case", target=lambda a: a["case_id"], require_approval=approval)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> str:
        """Close a CRM case."""
        crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)
        return f"closed {case_id}"

    return close_case


def plain_close_tool(crm: FakeCRM) -> Any:
    @tool("close_case")
    def close_case(case_id: str, resolution: str) -> str:
        """Close a CRM case."""
        crm.close_case(case_id, resolution)
        return f"closed {case_id}"

    return close_case


def graph(env: Env, crm: FakeCRM, path: str) -> Any:
    """An agent whose model reuses ``call_0`` every turn, with the tools on ``path``."""
    model = ScriptedChatModel(plan=PLAN)
    if path == "batched middleware":
        tools = [close_tool(crm, approval=True)]
        mw = EffectMiddleware(ledger=env.ledger, approvals="batched", tools=tools)
        return create_agent(model, tools=tools, middleware=[mw], checkpointer=env.checkpointer)

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("tools", "agent")
    if path == "ToolNode control":
        builder.add_node("tools", ToolNode([plain_close_tool(crm)]))
        builder.add_conditional_edges("agent", tools_condition, ["tools", END])
    elif path == "route_tool_calls":
        builder.add_node("tools", EffectToolNode([close_tool(crm)], ledger=env.ledger))
        builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])
    else:  # "approval_node"
        node = EffectToolNode([close_tool(crm, approval=True)], ledger=env.ledger)
        builder.add_node("tools", node)
        builder.add_node("approve", node.approval_node())
        builder.add_edge("agent", "approve")
        builder.add_conditional_edges("approve", route_tool_calls, ["tools", END])
    return builder.compile(checkpointer=env.checkpointer)


def open_calls(messages: Sequence[AnyMessage]) -> list[str]:
    """The ids of calls no ToolMessage answers before the next AIMessage."""
    out: list[str] = []
    for at, message in enumerate(messages):
        if not isinstance(message, AIMessage):
            continue
        answered: set[str] = set()
        for later in messages[at + 1 :]:
            if isinstance(later, AIMessage):
                break
            if isinstance(later, ToolMessage):
                answered.add(later.tool_call_id)
        out += [tc["id"] for tc in message.tool_calls if tc["id"] not in answered]
    return out


@pytest.mark.parametrize(
    "path", ["ToolNode control", "route_tool_calls", "approval_node", "batched middleware"]
)
def test_a_new_call_with_a_reused_id_is_routed_and_acts(env: Env, path: str) -> None:
    """Three turns, each call ``call_0`` (A, B, A): each is routed (asked for in one batch
    where approvals are batched) and acts, A twice and B once, as under a plain
    ``ToolNode``; the run ends with the model's answer and no unanswered call."""
    crm = FakeCRM()
    g = graph(env, crm, path)
    out = env.invoke(g, {"messages": [HumanMessage("close A, then B, then A again")]}, CFG)
    asked = []
    while "__interrupt__" in out:
        [pending] = out["__interrupt__"]
        asked.append(pending.value["kind"])
        out = env.invoke(g, Command(resume={"decisions": [{"type": "approve"}]}), CFG)
    approvals = path in ("approval_node", "batched middleware")
    assert asked == (["effect_approvals"] * 3 if approvals else [])
    assert (crm.effects_for("A"), crm.effects_for("B")) == (2, 1)
    messages = out["messages"]
    assert open_calls(messages) == []
    assert isinstance(messages[-1], AIMessage)
    assert messages[-1].content == "done"


def ai(*ids: str) -> AIMessage:
    return AIMessage("", tool_calls=[call("t", i) for i in ids])


def test_only_a_later_tool_message_answers_a_call() -> None:
    """An older ToolMessage with the same id answers nothing of the latest AIMessage; the
    ToolMessages after it (a reviewer's refusals) answer theirs; after any other message
    nothing is open."""
    done = ToolMessage("ok", tool_call_id="call_0")
    assert [tc["id"] for tc in unanswered_calls([ai("call_0"), done, ai("call_0")])] == ["call_0"]
    assert [
        tc["id"] for tc in unanswered_calls([ai("a", "b"), ToolMessage("no", tool_call_id="a")])
    ] == ["b"]
    assert unanswered_calls([ai("a"), ToolMessage("no", tool_call_id="a")]) == []
    assert unanswered_calls([ai("a"), HumanMessage("hi")]) == []
    assert unanswered_calls({"messages": []}) == []
    assert route_tool_calls([ai("call_0"), done, ai("call_0")])[0].arg[0]["id"] == "call_0"  # type: ignore[index]
