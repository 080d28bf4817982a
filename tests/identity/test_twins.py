"""Hundreds of identical calls in one AIMessage (issue 22): each one intended, each acts once.

A model asking to send the same message 300 times in one AIMessage (same tool, same
arguments, distinct tool-call ids) means 300 sends: 300 operations, twins of each
other. The twins are numbered once, in the message's order, and each starts its walk
at its own candidate (``_faces.effect_calls``, ``_faces.twins_in``,
``core.identity.nth_open``), so the write-aheads cost one prepare each, counted here
at the ledger: ``n``, where the ``k``-th twin used to prepare its ``k - 1`` earlier
siblings' candidates again (about ``n * n / 2``: 45,150 for 300). An answer naming any
twin, #280 too, applies (``EffectCall.sibling`` looked 255 candidates far).
"""

from __future__ import annotations

from typing import Any

import pytest
from _graphs import Env, State, counting_prepares
from _identity_tools import CFG, ask, close_tool, tool_node
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import Command

from langgraph_effects import route_tool_calls
from langgraph_effects.core.ids import candidate_operation_id
from langgraph_effects.testing.providers import FakeCRM

N = 300
"""Identical calls in one AIMessage."""


def many_twins_graph(env: Env, crm: FakeCRM, face: str, n: int = N, **effect: Any) -> Any:
    """agent -> tools -> agent; after each human message the model proposes ``n`` identical
    calls (close case A) with distinct ids, new ones each turn."""

    def agent(state: State) -> dict[str, Any]:
        if isinstance(state["messages"][-1], ToolMessage):
            return {"messages": [AIMessage(content="done")]}
        turn = sum(isinstance(m, HumanMessage) for m in state["messages"])
        calls = [
            {"name": "close_case", "args": {"case_id": "A"}, "id": f"t{turn}-{i}"} for i in range(n)
        ]
        return {"messages": [AIMessage(content="", tool_calls=calls, id=f"ai-{turn}")]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", tool_node(env, [close_tool(crm, **effect)], False))
    builder.add_edge(START, "agent")
    route = tools_condition if face == "tools_condition" else route_tool_calls
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=env.checkpointer)


def all_ops(env: Env) -> list[Any]:
    return list(env.ledger_call("list", tenant_id="default", limit=10 * N))


@pytest.mark.parametrize("face", ["tools_condition", "route_tool_calls"])
def test_300_identical_calls_act_300_times_for_300_prepares(
    env: Env, crm: FakeCRM, face: str
) -> None:
    """300 twins in one AIMessage: 300 operations, 300 acts at the CRM, one prepare each;
    the turn run again sends nothing and prepares each once more (its own record met);
    a second turn of 300 twins (the state lists the first 300 as answered) acts 300
    more, again one prepare each. Before: 45,150 prepares for the first turn."""
    prepares = counting_prepares(env.ledger)
    out = ask(env, many_twins_graph(env, crm, face))
    assert crm.effects == N
    assert [m.type for m in out["messages"]].count("tool") == N
    assert len(all_ops(env)) == N
    assert prepares["prepare"] == N

    graph = many_twins_graph(env, crm, face)
    again = prepares["prepare"]
    env.invoke(graph, None, CFG)  # the finished thread run again: nothing more
    assert crm.effects == N
    assert prepares["prepare"] - again <= N

    second = prepares["prepare"]
    ask(env, graph, "close case A 300 times again")
    assert crm.effects == 2 * N
    assert len(all_ops(env)) == 2 * N
    assert prepares["prepare"] - second == N


def test_an_answer_naming_twin_280_by_request_id_applies(env: Env, crm: FakeCRM) -> None:
    """300 twins that each need an approval, in one task (``tools_condition``): the first
    one asks; an approval naming twin #280 (its operation id and request id, given to that
    question) is applied to #280, which is approved by its author and acts once its turn
    comes, and the first call is asked again. Before: refused, "this step does not own"
    (a twin past the 256th candidate was never looked for)."""
    graph = many_twins_graph(env, crm, "tools_condition", require_approval=True)
    out = ask(env, graph)
    [shown] = out["__interrupt__"]
    first = shown.value
    assert first["tool_call_id"] == "t1-0"
    twin = candidate_operation_id(
        tenant_id=first["tenant_id"],
        workflow_id=first["workflow_id"],
        action=first["action"],
        payload_digest=first["payload_digest"],
        index=280,
    )
    answer = {
        "operation_id": twin,
        "request_id": first["request_id"].replace(first["operation_id"], twin),
        "decision": "approve",
        "by": "ana",
        "reason": "yes, that one",
    }
    out = env.invoke(graph, Command(resume={shown.id: answer}), CFG)
    [asked] = out["__interrupt__"]
    assert asked.value["operation_id"] == first["operation_id"]
    assert "notice" not in asked.value
    [approved] = [op for op in all_ops(env) if op.operation_id == twin]
    assert approved.tool_call_id == "t1-280"
    assert approved.authorization_ref == "approved-by:ana"
    assert crm.effects == 0


@pytest.mark.parametrize("face", ["tools_condition", "route_tool_calls"])
def test_300_twins_approved_in_one_batch_act_300_times(env: Env, crm: FakeCRM, face: str) -> None:
    """300 twins that each need an approval, asked in one batch (``approvals="batched"``: in
    the task under ``tools_condition``, by ``approval_node()`` before ``route_tool_calls``),
    all approved: 300 acts, each twin's record written once where it was asked and met
    there by its call (the approval node numbers the AIMessage's twins as the tasks do)."""
    from langgraph_effects import EffectToolNode

    calls = [{"name": "close_case", "args": {"case_id": "A"}, "id": f"b-{i}"} for i in range(N)]

    def agent(state: State) -> dict[str, Any]:
        if isinstance(state["messages"][-1], ToolMessage):
            return {"messages": [AIMessage(content="done")]}
        return {"messages": [AIMessage(content="", tool_calls=calls, id="ai-batch")]}

    node = EffectToolNode(
        [close_tool(crm, require_approval=True)], ledger=env.ledger, approvals="batched"
    )
    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    if face == "tools_condition":
        builder.add_conditional_edges("agent", tools_condition, ["tools", END])
    else:
        builder.add_node("approve", node.approval_node())
        builder.add_edge("agent", "approve")
        builder.add_conditional_edges("approve", route_tool_calls, ["tools", END])
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=env.checkpointer)
    prepares = counting_prepares(env.ledger)
    [asked] = ask(env, graph)["__interrupt__"]
    assert len(asked.value["operation_ids"]) == N
    decisions = {"decisions": [{"type": "approve"}] * N, "by": "ana"}
    out = env.invoke(graph, Command(resume=decisions), CFG)
    assert "__interrupt__" not in out
    assert crm.effects == N
    assert [o.status.value for o in all_ops(env)] == ["confirmed"] * N
    assert prepares["prepare"] <= 3 * N  # asked, met again on the resume, met by its call


def test_a_sibling_moved_past_its_256th_candidate_is_found(crm: FakeCRM) -> None:
    """An answer naming a call of the task that the walk moved far on (past earlier
    turns' records) is matched up to the walk's own bound, each group of identical calls
    once; an id naming no call of the task is not."""
    from langgraph_effects.core.ids import MAX_CANDIDATES
    from langgraph_effects.decide import EffectCall
    from langgraph_effects.effects import effect_spec

    spec = effect_spec(close_tool(crm))
    assert spec is not None
    siblings: dict[str, Any] = {}
    calls = []
    for i in range(3):
        call = EffectCall.build(
            spec,
            tool_name="close_case",
            tool_call_id=f"c{i}",
            args={"case_id": "A"},
            tenant_id="default",
            workflow_id="t1",
            twin=i,
            siblings=siblings,
        )
        siblings[call.operation_id] = call.draft()
        calls.append(call)
    assert [c.index for c in calls] == [0, 1, 2]

    def at(index: int) -> str:
        return calls[0].at(index).operation_id

    for index in (2, 300, MAX_CANDIDATES):
        found = calls[0].sibling(at(index))
        assert found is not None
        assert found.operation_id == at(index)
    assert calls[0].sibling("op-" + "a" * 32) is None
