"""Row 3 of issue 22: a reviewer's edit is its own operation.

An edit whose arguments equal a sibling of the same AIMessage, or an earlier call
already answered, is derived again through the same walk as any call: it is not
merged into that operation. A batched ``[reject, edit]`` refuses the rejected call
and sends the edited one, on every place a batch is asked.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from _graphs import Env, State, build_graph, call, tool_messages
from langchain.agents import create_agent
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import Command

from langgraph_effects import EffectContext, EffectMiddleware, EffectToolNode, effect
from langgraph_effects.core.model import ProviderContract
from langgraph_effects.node import route_tool_calls
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.faults import CrashPlan, CrashPoint, InjectedCrash
from langgraph_effects.testing.providers import FakeCRM, Fault

CFG = {"configurable": {"thread_id": "edits", "langgraph_auth_user": {"identity": "ana"}}}
WHERE = pytest.mark.parametrize("where", ["tools_condition", "route_tool_calls", "agent"])


def gated_close(crm: FakeCRM) -> Any:
    @effect("crm.close_case", target=lambda a: a["case_id"], require_approval=True)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> str:
        """Close a CRM case."""
        crm.close_case(case_id, resolution)  # no key: every send is an effect
        return f"closed {case_id}: {resolution}"

    return close_case


def batched_graph(env: Env, crm: FakeCRM, plan: list[list[dict[str, Any]]], where: str) -> Any:
    tools = [gated_close(crm)]
    model = ScriptedChatModel(plan=plan)
    if where == "agent":
        mw = EffectMiddleware(ledger=env.ledger, approvals="batched", tools=tools)
        return create_agent(model, tools=tools, middleware=[mw], checkpointer=env.checkpointer)

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    node = EffectToolNode(tools, ledger=env.ledger, approvals="batched")
    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    if where == "tools_condition":
        builder.add_conditional_edges("agent", tools_condition, ["tools", END])
    else:
        builder.add_node("approve", node.approval_node())
        builder.add_edge("agent", "approve")
        builder.add_conditional_edges("approve", route_tool_calls, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=env.checkpointer)


def edit_to(case_id: str) -> dict[str, Any]:
    args = {"case_id": case_id, "resolution": "fixed"}
    return {"type": "edit", "edited_action": {"name": "close_case", "args": args}}


@WHERE
def test_reject_one_and_edit_the_other_into_it_sends_the_edit(
    env: Env, crm: FakeCRM, where: str
) -> None:
    """close A, close B; the reviewer rejects A and edits B into "close A": A is closed
    once (the edit), the rejected call is refused, the edited one answered as done."""
    calls = [
        call("close_case", "c-a", case_id="A", resolution="fixed"),
        call("close_case", "c-b", case_id="B", resolution="fixed"),
    ]
    graph = batched_graph(env, crm, [calls], where)
    env.invoke(graph, {"messages": [("user", "close A and B")]}, CFG)
    decisions = {"decisions": [{"type": "reject", "message": "not this one"}, edit_to("A")]}
    out = env.invoke(graph, Command(resume=decisions), CFG)
    assert "__interrupt__" not in out
    assert (crm.effects_for("A"), crm.effects_for("B")) == (1, 0)
    answers = {m.tool_call_id: m for m in tool_messages(out)}
    assert answers["c-a"].status == "error"
    assert answers["c-b"].status == "success"
    assert "closed A" in str(answers["c-b"].content)


@WHERE
def test_an_edit_equal_to_an_answered_call_acts(env: Env, crm: FakeCRM, where: str) -> None:
    """Turn 1 closes A; turn 2 proposes B, which the reviewer edits into "close A" again:
    a new operation, sent (A closed twice, as the reviewer asked)."""
    plan = [
        [call("close_case", "c-1", case_id="A", resolution="fixed")],
        [call("close_case", "c-2", case_id="B", resolution="fixed")],
    ]
    graph = batched_graph(env, crm, plan, where)
    env.invoke(graph, {"messages": [("user", "close A, then B")]}, CFG)
    env.invoke(graph, Command(resume={"decisions": [{"type": "approve"}]}), CFG)
    assert crm.effects_for("A") == 1
    out = env.invoke(graph, Command(resume={"decisions": [edit_to("A")]}), CFG)
    assert "__interrupt__" not in out
    assert (crm.effects_for("A"), crm.effects_for("B")) == (2, 0)
    [_, second] = tool_messages(out)
    assert second.status == "success"


def unkeyed_gated_close(crm: FakeCRM) -> Any:
    """A gated close with no key and no lookup: a lost response leaves it unknown, for a person."""

    @effect(
        "crm.close_case",
        target=lambda a: a["case_id"],
        require_approval=True,
        contract=ProviderContract(backoff_initial=0.0, backoff_max=0.0),
    )
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> str:
        """Close a CRM case."""
        crm.close_case(case_id, resolution)
        return f"closed {case_id}: {resolution}"

    return close_case


@pytest.mark.parametrize("by_position", [False, True], ids=["by-id", "by-position"])
def test_an_edited_call_left_unknown_takes_the_review_answer_not_the_edit(
    env: Env, crm: FakeCRM, by_position: bool
) -> None:
    """The reviewer edits the call; the edited call's response is lost (unknown, asked for a
    review). The task re-runs when the review is answered, and LangGraph hands it the edit
    again first, by position: it was logged on the operation it replaced, so it is consumed,
    and the review's answer applies. (Campaign seed 82 of the identity kinds,
    colliding_edits: the edit was read as the review's answer and refused in every run after,
    so no answer could ever decide the operation.)"""

    graph = build_graph(
        [unkeyed_gated_close(crm)],
        [call("close_case", "c-1", case_id="A", resolution="fixed")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )
    out = env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [approval] = out["__interrupt__"]
    crm.faults.push(Fault.LOSE_RESPONSE)
    args = {"case_id": "A", "resolution": "fixed, edited"}
    edit = {"decisions": [{"type": "edit", "edited_action": {"name": "close_case", "args": args}}]}
    out = env.invoke(graph, Command(resume={approval.id: edit}), CFG)
    [review] = out["__interrupt__"]
    assert review.value["status"] == "unknown"
    assert crm.effects_for("A") == 1  # the edited call acted; its response was lost
    confirm = {"operation_id": review.value["operation_id"], "decision": "confirm", "by": "ana"}
    out = env.invoke(graph, Command(resume=confirm if by_position else {review.id: confirm}), CFG)
    assert "__interrupt__" not in out
    assert crm.effects_for("A") == 1
    [answer] = tool_messages(out)
    assert answer.status == "success"
    ops = {op.operation_id: op for op in env.ops()}
    assert ops[review.value["operation_id"]].status.value == "confirmed"


def test_an_approval_answered_again_after_a_crash_lost_the_edit_is_told_not_refused(
    env: Env, crm: FakeCRM
) -> None:
    """The reviewer's edit is applied and the edited call acts, then the process dies before
    LangGraph saved the answer (its default durability): the approval is shown again and
    answered again, echoing its request_id. That answer is about the call the edit
    replaced: the edited call's review says so and asks (a notice), nothing is sent again,
    and its answer applies. (Campaign seed 684, colliding_edits: the answer was refused
    as naming another operation in every run after, so the review could never be
    answered.)"""
    if env.is_async:
        pytest.skip("the in-process crash (a BaseException) is raised through the sync driver")
    graph = build_graph(
        [unkeyed_gated_close(crm)],
        [call("close_case", "c-1", case_id="A", resolution="fixed")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
        node_kwargs={"lease_for": timedelta(seconds=0.3)},
    )
    out = env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [approval] = out["__interrupt__"]
    args = {"case_id": "A", "resolution": "fixed, edited"}
    edit = {
        "decisions": [{"type": "edit", "edited_action": {"name": "close_case", "args": args}}],
        "request_id": approval.value["request_id"],
    }
    with CrashPlan.arm(CrashPoint.AFTER_PROVIDER, mode="raise"), pytest.raises(InjectedCrash):
        env.invoke(graph, Command(resume={approval.id: edit}), CFG, durability=None)
    assert crm.effects_for("A") == 1
    [shown] = graph.get_state(CFG).interrupts
    assert shown.value["operation_id"] == approval.value["operation_id"]  # LangGraph lost it
    time.sleep(0.4)  # the dead run's lease lapses
    again = {"decisions": [{"type": "approve"}], "request_id": shown.value["request_id"]}
    out = env.invoke(graph, Command(resume={shown.id: again}), CFG, durability=None)
    [review] = out["__interrupt__"]
    assert review.value["status"] == "unknown"
    assert approval.value["request_id"] in review.value["notice"]
    assert crm.effects_for("A") == 1
    confirm = {"operation_id": review.value["operation_id"], "decision": "confirm"}
    out = env.invoke(graph, Command(resume={review.id: confirm}), CFG, durability=None)
    assert "__interrupt__" not in out
    [answer] = tool_messages(out)
    assert answer.status == "success"
    assert crm.effects_for("A") == 1
