"""The guarantee on LangGraph's own re-run paths: answers, tenants, re-issued calls.

Each test drives a real graph on SQLite and PostgreSQL, sync and async, and
counts effects at a fake CRM whose state lives in its own file. The CRM here
honours no idempotency key, so every dispatch that reaches it is an effect:
a second dispatch shows as a second close.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from _graphs import Env, State, build_graph, call, tool_messages
from langchain_core.messages import AIMessage
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from langgraph_effects import (
    DurabilityWarning,
    EffectContext,
    EffectToolNode,
    OperationStatus,
    TenantMismatch,
    effect,
    route_tool_calls,
)
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.faults import scaled
from langgraph_effects.testing.providers import FakeCRM, Fault

S = OperationStatus
CLOSE_A = call("close_case", "call-a", case_id="A", resolution="fixed")


@pytest.fixture
def crm(tmp_path: Path) -> FakeCRM:
    return FakeCRM(path=tmp_path / "crm.db")


def close_tool(crm: FakeCRM, **kwargs: Any) -> Any:
    @effect("crm.close_case", target=lambda a: a["case_id"], **kwargs)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution)  # no key: every send is an effect

    return close_case


def pending(env: Env, graph: Any, config: dict[str, Any]) -> list[Any]:
    state = graph.get_state(config) if not env.is_async else env.run(graph.aget_state(config))
    return [i for task in state.tasks for i in task.interrupts]


def history(env: Env, graph: Any, config: dict[str, Any]) -> list[Any]:
    if not env.is_async:
        return list(graph.get_state_history(config))

    async def collect() -> list[Any]:
        return [s async for s in graph.aget_state_history(config)]

    return list(env.run(collect()))


def answer(env: Env, graph: Any, config: dict[str, Any], value: Any, *, by_id: bool) -> Any:
    """Resume with ``value``, by position or by the pending interrupt's id."""
    if by_id:
        [interrupt] = pending(env, graph, config)
        return env.invoke(graph, Command(resume={interrupt.id: value}), config)
    return env.invoke(graph, Command(resume=value), config)


# -- every answer applies once ------------------------------------------------------


@pytest.mark.parametrize("by_id", [False, True], ids=["by-position", "by-interrupt-id"])
def test_a_retry_answered_once_is_never_applied_again(env: Env, crm: FakeCRM, by_id: bool) -> None:
    """Review -> retry -> unknown again -> review -> reject: the provider acted twice, not 3x."""
    crm.faults.script([Fault.LOSE_RESPONSE, Fault.LOSE_RESPONSE])
    config = {"configurable": {"thread_id": "t1", "tenant_id": "acme"}}
    graph = build_graph(
        [close_tool(crm)], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, config)
    [first] = pending(env, graph, config)
    op_id = first.value["operation_id"]
    assert (crm.effects, first.value["kind"]) == (1, "effect_review")

    retry = {"operation_id": op_id, "decision": "retry", "by": "ana", "reason": "resend"}
    answer(env, graph, config, retry, by_id=by_id)
    [second] = pending(env, graph, config)
    assert crm.effects == 2  # the ordered resend, lost again
    assert second.value["request_id"] != first.value["request_id"]

    reject = {"operation_id": op_id, "decision": "reject", "by": "ana", "reason": "undo by hand"}
    result = answer(env, graph, config, reject, by_id=by_id)
    assert crm.effects == 2  # the retry handed back by LangGraph was consumed, not re-applied
    assert pending(env, graph, config) == []
    op = env.ledger_call("get", "acme", op_id)
    assert op.status is S.REJECTED
    assert [m.status for m in tool_messages(result)] == ["error"]
    retries = [
        e for e in env.ledger_call("events", "acme", op_id) if e.detail and e.detail.get("decision")
    ]
    assert [e.detail["decision"] for e in retries] == ["retry", "reject"]


def test_an_approval_then_an_unknown_outcome_can_be_reviewed(env: Env, crm: FakeCRM) -> None:
    """Approve -> dispatch ends unknown -> review: the stored approval is not read as the
    review's answer, and the review is answered through the graph."""
    crm.faults.script([Fault.LOSE_RESPONSE])
    config = {"configurable": {"thread_id": "t1"}}
    graph = build_graph(
        [close_tool(crm, require_approval=True)],
        [CLOSE_A],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, config)
    [ask] = pending(env, graph, config)
    assert ask.value["kind"] == "effect_approval"
    op_id = ask.value["operation_id"]
    env.invoke(graph, Command(resume={"decisions": [{"type": "approve"}], "by": "ana"}), config)
    [review] = pending(env, graph, config)
    assert (review.value["kind"], crm.effects) == ("effect_review", 1)

    confirm = {"operation_id": op_id, "decision": "confirm", "by": "ana", "reason": "in the CRM"}
    result = env.invoke(graph, Command(resume=confirm), config)
    assert pending(env, graph, config) == []
    assert crm.effects == 1
    assert env.ledger_call("get", "default", op_id).status is S.CONFIRMED
    assert [m.status for m in tool_messages(result)] == ["success"]


def test_an_answer_naming_an_earlier_request_decides_nothing(env: Env, crm: FakeCRM) -> None:
    """An answer that echoes an outdated ``request_id`` (a UI showing an old request, as
    LangGraph does after a crash) is not applied: the current request is asked again and
    says why (``notice``); an answer naming the current request applies."""
    crm.faults.script([Fault.LOSE_RESPONSE, Fault.LOSE_RESPONSE])
    config = {"configurable": {"thread_id": "t1"}}
    graph = build_graph(
        [close_tool(crm)], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, config)
    [first] = pending(env, graph, config)
    op_id, r1 = first.value["operation_id"], first.value["request_id"]
    retry = {"operation_id": op_id, "decision": "retry", "by": "ana", "request_id": r1}
    env.invoke(graph, Command(resume=retry), config)
    [second] = pending(env, graph, config)
    r2 = second.value["request_id"]
    assert (r2 != r1, crm.effects) == (True, 2)

    late = {"operation_id": op_id, "decision": "confirm", "by": "bob", "request_id": r1}
    env.invoke(graph, Command(resume=late), config)
    [again] = pending(env, graph, config)
    assert again.value["request_id"] == r2
    assert f"Your answer to request {r1} was not applied" in again.value["notice"]
    assert again.value["notice"] in again.value["action_requests"][0]["description"]
    assert env.ledger_call("get", "default", op_id).status is S.UNKNOWN

    reject = {"operation_id": op_id, "decision": "reject", "by": "ana", "request_id": r2}
    env.invoke(graph, Command(resume=reject), config)
    assert pending(env, graph, config) == []
    assert env.ledger_call("get", "default", op_id).status is S.REJECTED
    assert crm.effects == 2


def test_a_positional_answer_is_not_handed_to_a_later_question(env: Env, crm: FakeCRM) -> None:
    """LangGraph keeps a resume given by position and hands it to the next interrupt that
    finds no value of its own, in a later run resumed by interrupt id. Retry (by position)
    -> lost again -> retry (by id) -> the provider acts, the response is lost: that first
    retry must not be sent a third time unasked. The run resumed by id drops it
    (``drive._given_by_position``): the person is asked the new question as it is, with no
    notice about a value they did not give to it."""
    crm.faults.script([Fault.LOSE_REQUEST, Fault.LOSE_REQUEST, Fault.LOSE_RESPONSE])
    config = {"configurable": {"thread_id": "t1"}}
    graph = build_graph(
        [close_tool(crm)], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, config)
    [first] = pending(env, graph, config)
    op_id = first.value["operation_id"]
    retry = {"operation_id": op_id, "decision": "retry", "by": "ana", "reason": "resend"}
    env.invoke(graph, Command(resume=retry), config)  # by position
    [second] = pending(env, graph, config)
    assert (second.value["attempts"], crm.effects) == (2, 0)

    again = {**retry, "reason": "resend once more"}
    answer(env, graph, config, again, by_id=True)
    assert crm.effects == 1  # the third attempt acted (its response lost), and no fourth
    [third] = pending(env, graph, config)
    assert (third.value["attempts"], third.value["status"]) == (3, "unknown")
    assert "notice" not in third.value, third.value["notice"]
    assert env.ledger_call("get", "default", op_id).status is S.UNKNOWN

    confirm = {"operation_id": op_id, "decision": "confirm", "by": "ana", "reason": "in the CRM"}
    answer(env, graph, config, confirm, by_id=True)
    assert pending(env, graph, config) == []
    assert env.ledger_call("get", "default", op_id).status is S.CONFIRMED
    assert crm.effects == 1


@pytest.mark.parametrize(
    "bad",
    [
        {"decision": "approve", "by": "ana"},  # an approval decision on a review
        {"decision": "confirm", "by": "x" * 201},  # longer than the ledger keeps
        {"decision": "confirm", "by": "ana", "reason": "r" * 4001},
        {"decision": "confirm", "by": "ana", "result": float("nan")},  # not JSON
        {"decision": "retry", "by": ""},  # no author
    ],
    ids=["approve-on-review", "long-by", "long-reason", "nan-result", "no-by"],
)
def test_an_answer_that_would_fail_is_refused_before_it_is_saved(
    env: Env, crm: FakeCRM, bad: dict[str, Any]
) -> None:
    """A bad answer is not saved: the same request is asked again saying why, and the next
    correct answer applies."""
    crm.faults.script([Fault.LOSE_RESPONSE])
    config = {"configurable": {"thread_id": "t1"}}
    graph = build_graph(
        [close_tool(crm)], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, config)
    [review] = pending(env, graph, config)
    op_id = review.value["operation_id"]
    env.refused(graph, Command(resume={"operation_id": op_id, **bad}), config, ".")
    assert env.ledger_call("get", "default", op_id).status is S.UNKNOWN

    good = {"operation_id": op_id, "decision": "confirm", "by": "ana", "reason": "seen"}
    env.invoke(graph, Command(resume=good), config)
    assert pending(env, graph, config) == []
    assert env.ledger_call("get", "default", op_id).status is S.CONFIRMED
    assert crm.effects == 1


# -- a thread is bound to its tenant -------------------------------------------------


def test_a_thread_resumed_without_its_tenant_uses_the_bound_one(env: Env, crm: FakeCRM) -> None:
    """First run under "acme"; time travel from every history snapshot (no tenant in its
    config) and a resume without a tenant replay from the ledger: one close in all."""
    config = {"configurable": {"thread_id": "t1", "tenant_id": "acme"}}
    graph = build_graph(
        [close_tool(crm)], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, config)
    assert crm.effects == 1
    snapshots = history(env, graph, config)
    assert all("tenant_id" not in s.config["configurable"] for s in snapshots)
    for snapshot in snapshots:
        if snapshot.next:
            env.invoke(graph, None, snapshot.config)
    env.invoke(graph, None, {"configurable": {"thread_id": "t1"}})
    assert crm.effects == 1
    assert [op.status for op in env.ops("acme")] == [S.CONFIRMED]
    assert env.ops("default") == []


def test_an_update_state_fork_replays_from_the_ledger(env: Env, crm: FakeCRM) -> None:
    """A fork (update_state on an old snapshot) re-runs the tools node: no second close."""
    config = {"configurable": {"thread_id": "t1", "tenant_id": "acme"}}
    graph = build_graph(
        [close_tool(crm)], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, config)
    before_tools = next(s for s in history(env, graph, config) if s.next == ("tools",))
    if env.is_async:
        fork = env.run(graph.aupdate_state(before_tools.config, {"messages": []}))
    else:
        fork = graph.update_state(before_tools.config, {"messages": []})
    env.invoke(graph, None, fork)
    assert crm.effects == 1
    assert [op.status for op in env.ops("acme")] == [S.CONFIRMED]


@pytest.mark.parametrize("other", ["globex", "default"])
def test_a_thread_under_another_tenant_is_refused(env: Env, crm: FakeCRM, other: str) -> None:
    """A thread bound to "acme" run under another tenant raises TenantMismatch, which never
    names "acme" to the other tenant; no dispatch."""
    crm.faults.script([Fault.LOSE_RESPONSE])
    config = {"configurable": {"thread_id": "t1", "tenant_id": "acme"}}
    graph = build_graph(
        [close_tool(crm)], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, config)
    assert crm.effects == 1  # response lost: the operation is unknown, pending review
    with pytest.raises(TenantMismatch) as refused:
        env.invoke(graph, None, {"configurable": {"thread_id": "t1", "tenant_id": other}})
    assert (refused.value.workflow_id, refused.value.requested) == ("t1", other)
    assert "acme" not in str(refused.value)
    assert "acme" not in repr(vars(refused.value))
    assert repr(other) in str(refused.value)
    assert crm.effects == 1
    assert env.ops(other) == []


@pytest.mark.parametrize("bad", ["", "  ", 0])
def test_a_malformed_tenant_is_refused(env: Env, crm: FakeCRM, bad: Any) -> None:
    """An empty or non-string tenant_id is an error, never silently "default"."""
    graph = build_graph(
        [close_tool(crm)], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer
    )
    with pytest.raises(ValueError, match="tenant_id"):
        env.invoke(
            graph,
            {"messages": [("user", "x")]},
            {"configurable": {"thread_id": "t9", "tenant_id": bad}},
        )
    assert crm.effects == 0


def test_sibling_tasks_binding_a_new_thread_make_one_bind(env: Env, crm: FakeCRM) -> None:
    """A thread's first run, one task per call: the four tasks reach the thread's binding
    together (the first bind is held until the others are waiting for it, or at the ledger).
    One ``bind_thread``; the others take its tenant; four closes under it."""
    calls = [call("close_case", f"call-{c}", case_id=c, resolution="fixed") for c in "ABCD"]
    graph = build_graph([close_tool(crm)], calls, ledger=env.ledger, checkpointer=env.checkpointer)
    runner = graph.nodes["tools"].bound.runner
    binds: list[str] = []
    inner = env.ledger.bind_thread

    def hold_the_first() -> None:  # until the others wait for it, or are at the ledger too
        deadline = time.monotonic() + scaled(10)
        while runner.bindings.waiting + len(binds) < len(calls) and time.monotonic() < deadline:
            time.sleep(0.001)

    def bind_thread(workflow_id: str, tenant_id: str) -> Any:
        binds.append(workflow_id)
        if len(binds) == 1:
            hold_the_first()
        return inner(workflow_id, tenant_id)

    async def abind_thread(workflow_id: str, tenant_id: str) -> Any:
        binds.append(workflow_id)
        if len(binds) == 1:
            await asyncio.to_thread(hold_the_first)
        return await inner(workflow_id, tenant_id)

    env.ledger.bind_thread = abind_thread if env.is_async else bind_thread
    config = {"configurable": {"thread_id": "t1", "tenant_id": "acme"}}
    result = env.invoke(graph, {"messages": [("user", "close all")]}, config)
    assert binds == ["t1"]
    assert [m.status for m in tool_messages(result)] == ["success"] * 4
    assert crm.effects == 4
    assert [op.status for op in env.ops("acme")] == [S.CONFIRMED] * 4


# -- a re-issued call keeps its operation ---------------------------------------------


def reissuer(calls: list[dict[str, Any]]) -> ScriptedChatModel:
    """Proposes the same calls with new ids on each turn (a lost AIMessage, re-proposed)."""
    turns = 0

    def propose(messages: Any) -> AIMessage:
        nonlocal turns
        turns += 1
        fresh = [{**tc, "id": f"{tc['id']}-t{turns}"} for tc in calls]
        return AIMessage(content="", tool_calls=fresh, id=f"ai-{turns}")

    return ScriptedChatModel(script=propose)


def reissue_graph(env: Env, crm: FakeCRM, calls: list[dict[str, Any]]) -> Any:
    """agent -> tools (one task per call) -> END: each user message re-proposes ``calls``."""
    model = reissuer(calls)

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", EffectToolNode([close_tool(crm)], ledger=env.ledger))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=env.checkpointer)


def review_all(env: Env, graph: Any, config: dict[str, Any], decision: str) -> None:
    """Answer every pending review with ``decision``, each by its interrupt id."""
    while waiting := pending(env, graph, config):
        answers = {
            i.id: {"operation_id": i.value["operation_id"], "decision": decision, "by": "ana"}
            for i in waiting
        }
        env.invoke(graph, Command(resume=answers), config)


@pytest.mark.parametrize("twins", [1, 2])
def test_a_call_reissued_with_a_new_id_maps_to_the_unanswered_operation(
    env: Env, crm: FakeCRM, twins: int
) -> None:
    """The model's calls were never answered; the user sends the request again and the
    model re-issues them with new tool-call ids (default durability): the earlier
    operations are met, nothing is sent twice. Identical calls of one AIMessage stay
    distinct operations, matched k-th to k-th. A repeat after the answer is a new one."""
    crm.faults.script([Fault.LOSE_RESPONSE] * twins)
    calls = [{**CLOSE_A, "id": f"call-{k}"} for k in range(twins)]
    graph = reissue_graph(env, crm, calls)
    config = {"configurable": {"thread_id": "t1"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DurabilityWarning)
        env.invoke(graph, {"messages": [("user", "close A")]}, config, durability=None)
        assert crm.effects == twins  # responses lost: unknown, unanswered
        first = {op.operation_id for op in env.ops()}
        assert len(first) == twins
        env.invoke(graph, {"messages": [("user", "close A")]}, config, durability=None)
        assert crm.effects == twins  # re-issued calls met their operations
        assert {op.operation_id for op in env.ops()} == first
        review_all(env, graph, config, "confirm")
        assert [op.status for op in env.ops()] == [S.CONFIRMED] * twins
        # Answered now: asking again on purpose is a new operation, sent once.
        env.invoke(graph, {"messages": [("user", "close A again")]}, config, durability=None)
    assert crm.effects == 2 * twins
    assert len(env.ops()) == 2 * twins


def test_durability_warning_fires_when_durability_is_not_passed(env: Env, crm: FakeCRM) -> None:
    """LangGraph's default durability ("async", the key left out) warns like an explicit one."""
    import langgraph_effects.decide.thread as runner

    runner._durability_warned = False
    graph = build_graph(
        [close_tool(crm)], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer
    )
    with pytest.warns(DurabilityWarning, match="async"):
        env.invoke(
            graph,
            {"messages": [("user", "x")]},
            {"configurable": {"thread_id": "t5"}},
            durability=None,
        )
    assert crm.effects == 1
