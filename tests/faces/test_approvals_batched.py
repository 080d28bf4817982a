"""All approvals of one AIMessage in one interrupt (``approvals="batched"``), issue 14.

The three places a batch is asked before the fan-out: ``EffectToolNode`` under
``tools_condition`` (one task), ``EffectToolNode.approval_node()`` before
``route_tool_calls`` (one task per call), and ``EffectMiddleware`` in
``create_agent`` (``after_model``). Each is answered without an interrupt id,
in the HITL shape Agent Chat UI sends; effects are counted at fake CRMs, and a
batch answer LangGraph hands a re-run task again is applied once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _graphs import Env, State, call, tool_messages
from langchain.agents import create_agent
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import Command

from langgraph_effects import EffectContext, EffectMiddleware, EffectToolNode, effect
from langgraph_effects.core.model import OperationStatus
from langgraph_effects.node import route_tool_calls
from langgraph_effects.testing import Fault, ScriptedChatModel
from langgraph_effects.testing.faults import CrashPlan, CrashPoint, InjectedCrash
from langgraph_effects.testing.providers import FakeCRM

S = OperationStatus
# Answered as Agent Chat UI does behind a server that signs its users in: no interrupt id and
# no "by" (the run's authenticated user is who decides; see tests/decide/test_identity_and_traces).
CFG = {"configurable": {"thread_id": "batched", "langgraph_auth_user": {"identity": "ana"}}}
BACKENDS = [("memory", "sync"), ("sqlite", "async"), ("postgres", "sync"), ("postgres", "async")]
CALLS = [
    call("close_case", "c-a", case_id="A", resolution="fixed"),
    call("close_case", "c-b", case_id="B", resolution="fixed"),
    call("close_case", "c-c", case_id="C", resolution="fixed"),
]
# What Agent Chat UI sends: approve, reject with a message, an edit (edited fields as text).
DECISIONS = {
    "decisions": [
        {"type": "approve"},
        {"type": "reject", "message": "not B"},
        {
            "type": "edit",
            "edited_action": {"name": "close_case", "args": {"case_id": "C", "resolution": "x"}},
        },
    ]
}


def close_tool(crm: FakeCRM, name: str = "close_case") -> Any:
    @effect(f"crm.{name}", target=lambda a: a["case_id"], require_approval=True)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> str:
        """Close a CRM case."""
        crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)
        return f"closed {case_id}: {resolution}"

    close_case.name = name
    return close_case


def graph(env: Env, tools: list[Any], calls: list[dict[str, Any]], *, where: str) -> Any:
    """agent -> tools, the batch asked where ``where`` says."""
    model = ScriptedChatModel(plan=[calls])
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


WHERE = pytest.mark.parametrize("where", ["tools_condition", "route_tool_calls", "agent"])


@WHERE
def test_one_interrupt_answered_without_an_id(env: Env, where: str) -> None:
    """Three approvals of one AIMessage come as one HITL-shaped interrupt; answered without
    an interrupt id (approve, reject, edit), A is closed once, B never, C once with the
    reviewer's arguments; nothing is asked again."""
    crm = FakeCRM()
    g = graph(env, [close_tool(crm)], CALLS, where=where)
    first = env.invoke(g, {"messages": [("user", "close A, B, C")]}, CFG)
    [asked] = first["__interrupt__"]
    value = asked.value
    assert value["kind"] == "effect_approvals"
    assert [a["name"] for a in value["action_requests"]] == ["close_case"] * 3
    assert [a["args"]["case_id"] for a in value["action_requests"]] == ["A", "B", "C"]
    assert all(set(a) == {"name", "args", "description"} for a in value["action_requests"])
    assert [c["allowed_decisions"] for c in value["review_configs"]] == [
        ["approve", "edit", "reject"]
    ] * 3
    assert len(value["operation_ids"]) == 3
    assert value["request_id"].startswith("approvals:")
    assert crm.effects == 0

    out = env.invoke(g, Command(resume=DECISIONS), CFG)
    assert "__interrupt__" not in out
    assert (crm.effects_for("A"), crm.effects_for("B"), crm.effects_for("C")) == (1, 0, 1)
    assert crm.get_case("C")["resolution"] == "x"
    by_target: dict[str | None, list[Any]] = {}
    for op in env.ops():
        by_target.setdefault(op.target, []).append(op.status)
    assert by_target["A"] == [S.CONFIRMED]
    assert by_target["B"] == [S.REJECTED]
    assert sorted(by_target["C"]) == sorted([S.CONFIRMED, S.REJECTED])  # replaced by the edit
    statuses = {m.tool_call_id: m.status for m in tool_messages(out)}
    assert statuses == {"c-a": "success", "c-b": "error", "c-c": "success"}


@pytest.mark.parametrize("where", ["tools_condition", "route_tool_calls"])
def test_per_call_stays_the_default(env: Env, where: str) -> None:
    """Without ``approvals="batched"`` (and without the approval node) each call asks on
    its own: two pending interrupts, as before."""
    crm = FakeCRM()
    model = ScriptedChatModel(plan=[CALLS[:2]])

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", EffectToolNode([close_tool(crm)], ledger=env.ledger))
    builder.add_edge(START, "agent")
    router = tools_condition if where == "tools_condition" else route_tool_calls
    builder.add_conditional_edges("agent", router, ["tools", END])
    builder.add_edge("tools", "agent")
    g = builder.compile(checkpointer=env.checkpointer)
    first = env.invoke(g, {"messages": [("user", "close A, B")]}, CFG)
    if where == "route_tool_calls":
        assert len(first["__interrupt__"]) == 2
    assert all(i.value["kind"] == "effect_approval" for i in first["__interrupt__"])


@pytest.mark.parametrize("env", [("memory", "sync")], indirect=True)
@WHERE
def test_an_answer_that_does_not_fit_is_refused_and_can_be_given_again(
    env: Env, where: str
) -> None:
    """Two decisions for three calls, an earlier round's request id, a decision not offered:
    each is refused before LangGraph saves it (the request asked again, saying why), nothing
    is recorded, and a right answer still applies."""
    crm = FakeCRM()
    g = graph(env, [close_tool(crm)], CALLS, where=where)
    env.invoke(g, {"messages": [("user", "close A, B, C")]}, CFG)
    wrong = [
        {"decisions": [{"type": "approve"}] * 2},
        {**DECISIONS, "request_id": "approvals:000"},
        {"decisions": [{"type": "respond", "message": "x"}] * 3},
        {"decisions": [{"type": "approve"}, {"type": "approve"}, {"type": "maybe"}]},
    ]
    for value, why in zip(wrong, ["2 decision", "request_id", "respond", "maybe"], strict=True):
        env.refused(g, Command(resume=value), CFG, why)
    assert all(op.status is S.PREPARED and op.authorization_ref is None for op in env.ops())
    out = env.invoke(g, Command(resume={"decisions": [{"type": "approve"}] * 3}), CFG)
    assert "__interrupt__" not in out
    assert crm.effects == 3


@pytest.mark.parametrize("env", [("memory", "sync"), ("sqlite", "async")], indirect=True)
def test_the_older_hitl_list_is_understood(env: Env) -> None:
    """The older UI's answer ``[{"type": "accept" | "ignore" | "response" | "edit"}]``
    maps onto approve, reject, reject and edit."""
    crm = FakeCRM()
    calls = [*CALLS, call("close_case", "c-d", case_id="D", resolution="fixed")]
    g = graph(env, [close_tool(crm)], calls, where="tools_condition")
    env.invoke(g, {"messages": [("user", "close them")]}, CFG)
    old = [
        {"type": "accept", "args": None},
        {"type": "ignore", "args": None},
        {"type": "response", "args": "done by hand"},
        {
            "type": "edit",
            "args": {"action": "close_case", "args": {"case_id": "D", "resolution": "y"}},
        },
    ]
    out = env.invoke(g, Command(resume=old), CFG)
    assert "__interrupt__" not in out
    assert [crm.effects_for(t) for t in "ABCD"] == [1, 0, 0, 1]
    assert crm.get_case("D")["resolution"] == "y"


def test_a_batch_answer_handed_back_to_the_task_is_applied_once(env: Env) -> None:
    """Under ``tools_condition`` the batch and a later review share a task: on the review's
    resume LangGraph hands the batch answer back first; it is recognised (not applied
    again, not taken for the review's answer) and the review, answered in the HITL shape
    (edit outcome to "confirmed"), confirms A. Each case is closed once."""
    crm, other = FakeCRM(), FakeCRM()
    tools = [close_tool(crm), close_tool(other, "escalate")]
    calls = [
        call("close_case", "c-a", case_id="A", resolution="fixed"),
        call("escalate", "c-b", case_id="B", resolution="fixed"),
    ]
    g = graph(env, tools, calls, where="tools_condition")
    env.invoke(g, {"messages": [("user", "close A, escalate B")]}, CFG)
    crm.faults.push(Fault.LOSE_RESPONSE)  # A is applied, its answer lost: unknown, no reconciler
    second = env.invoke(g, Command(resume={"decisions": [{"type": "approve"}] * 2}), CFG)
    [review] = second["__interrupt__"]
    assert review.value["kind"] == "effect_review"
    assert review.value["review_configs"] == [
        {"action_name": "close_case", "allowed_decisions": ["edit", "reject"]}
    ]  # a retry could close A twice: not offered in the HITL shape
    assert "Retry risk" in review.value["action_requests"][0]["description"]
    assert crm.effects_for("A") == 1  # (B may or may not have run yet: one task, two threads)

    edit = {"name": "close_case", "args": {"outcome": "confirmed", "result": '{"seen": "crm"}'}}
    # One task runs both calls: the answer names the operation it decides beside the HITL
    # decision (when several calls of a task may ask, position is not identity).
    answer = {
        "operation_id": review.value["operation_id"],
        "decisions": [{"type": "edit", "edited_action": edit}],
    }
    out = env.invoke(g, Command(resume=answer), CFG)
    assert "__interrupt__" not in out
    assert (crm.effects_for("A"), other.effects_for("B"), crm.duplicates) == (1, 1, 0)
    ops = {op.target: op for op in env.ops()}
    assert ops["A"].status is S.CONFIRMED
    assert ops["B"].status is S.CONFIRMED
    for op in ops.values():
        events = env.ledger_call("events", "default", op.operation_id)
        assert [e.kind.value for e in events].count("approve") == 1
    assert ops["A"].result == {"seen": "crm"}


def test_the_middleware_adds_its_after_model_node_only_when_batched() -> None:
    """An agent asking per call keeps its graph; ``approvals="batched"`` needs the effect
    tools and adds one ``after_model`` node, named after ``EffectMiddleware``."""
    crm = FakeCRM()
    tools = [close_tool(crm)]
    model = ScriptedChatModel(plan=[CALLS])
    with pytest.raises(ValueError, match="effect tools"):
        EffectMiddleware(ledger=None, approvals="batched")
    per_call = create_agent(model, tools=tools, middleware=[EffectMiddleware(ledger=None)])
    batched = create_agent(
        model,
        tools=tools,
        middleware=[EffectMiddleware(ledger=None, approvals="batched", tools=tools)],
    )
    assert "EffectMiddleware.after_model" not in per_call.get_graph().nodes
    assert "EffectMiddleware.after_model" in batched.get_graph().nodes


@pytest.mark.parametrize("env", [("memory", "sync"), ("sqlite", "async")], indirect=True)
@WHERE
def test_replaying_the_thread_asks_nothing_and_sends_nothing_again(env: Env, where: str) -> None:
    """Replayed from the checkpoint before the approvals (new LangGraph tasks), the batch
    finds every record decided: no interrupt, no second closure."""
    crm = FakeCRM()
    g = graph(env, [close_tool(crm)], CALLS, where=where)
    env.invoke(g, {"messages": [("user", "close A, B, C")]}, CFG)
    env.invoke(g, Command(resume=DECISIONS), CFG)
    assert crm.effects == 2

    def history() -> list[Any]:
        if env.is_async:

            async def collect() -> list[Any]:
                return [s async for s in g.aget_state_history(CFG)]

            return list(env.run(collect()))
        return list(g.get_state_history(CFG))

    # The snapshot whose next step is the one asking the approvals, on the first run.
    asking = [s for s in history() if s.interrupts][-1]
    out = env.invoke(g, None, asking.config)
    assert "__interrupt__" not in out
    assert (crm.effects, crm.duplicates) == (2, 0)


@pytest.mark.parametrize("env", [("memory", "sync"), ("sqlite", "async")], indirect=True)
@WHERE
def test_a_crash_between_two_decisions_applies_the_rest_once(env: Env, where: str) -> None:
    """The process dies after the first decision is recorded, before the second: the run
    continued later is handed the same answer, recognises the recorded decision and
    applies only the rest. Each decision is recorded once; A and C are closed once."""
    crm = FakeCRM()
    g = graph(env, [close_tool(crm)], CALLS, where=where)
    env.invoke(g, {"messages": [("user", "close A, B, C")]}, CFG)
    with CrashPlan.arm(CrashPoint.DURING_REVIEW_RESUME, hit=2), pytest.raises(InjectedCrash):
        env.invoke(g, Command(resume=DECISIONS), CFG)
    assert crm.effects == 0
    decided = [op for op in env.ops() if op.authorization_ref or op.status is S.REJECTED]
    assert len(decided) == 1

    out = env.invoke(g, None, CFG)
    assert "__interrupt__" not in out
    assert (crm.effects_for("A"), crm.effects_for("B"), crm.effects_for("C")) == (1, 0, 1)
    for op in env.ops():
        kinds = [e.kind.value for e in env.ledger_call("events", "default", op.operation_id)]
        assert kinds.count("approve") + kinds.count("reject") == 1, (op.target, kinds)


@WHERE
def test_the_batch_names_the_operations_left_open_on_each_target(env: Env, where: str) -> None:
    """A worker died mid-close of case A (its operation stuck ``dispatching``): the batched
    request names it where a person decides, in A's request and in A's action description
    (what a HITL UI shows), and names nothing for B and C."""
    from langgraph_effects import LeaseOwner
    from langgraph_effects.testing.contract import make_draft

    crm = FakeCRM()
    dead = LeaseOwner(host="elsewhere", pid=1, started_at=1.0, nonce="gone")
    stuck = make_draft("op-stuck", tenant_id="default", action="crm.close_case", target="A")
    env.ledger_call("prepare", stuck, owner=dead)
    g = graph(env, [close_tool(crm)], CALLS, where=where)
    first = env.invoke(g, {"messages": [("user", "close A, B, C")]}, CFG)
    [asked] = first["__interrupt__"]
    requests = {r["target"]: r for r in asked.value["requests"]}
    assert [o["operation_id"] for o in requests["A"]["open_operations"]] == ["op-stuck"]
    assert requests["A"]["open_operations_total"] == 1
    assert (requests["B"]["open_operations"], requests["C"]["open_operations"]) == ([], [])
    first_action = asked.value["action_requests"][0]
    assert first_action["args"]["case_id"] == "A"
    assert "1 other unresolved operation(s) on this target" in first_action["description"]
    assert crm.effects == 0


@pytest.mark.parametrize("env", [("sqlite", "sync"), ("postgres", "async")], indirect=True)
@pytest.mark.parametrize("where", ["tools_condition", "agent"])
def test_an_operator_decision_meanwhile_never_wedges_the_batch(
    env: Env, where: str, tmp_path: Path
) -> None:
    """While the 3-action batch is pending, an operator approves B and rejects C with the
    CLI. The HITL UI's 3 decisions for the request it shows (approve, reject, approve)
    still apply, with no interrupt id: A is sent, B is rejected (the last word before
    dispatch wins over the operator's approval), C stays rejected by the operator."""
    from typer.testing import CliRunner

    from langgraph_effects.cli import app

    crm = FakeCRM()
    g = graph(env, [close_tool(crm)], CALLS, where=where)
    first = env.invoke(g, {"messages": [("user", "close A, B, C")]}, CFG)
    a, b, c = first["__interrupt__"][0].value["operation_ids"]
    pg = env.kind == "postgres"
    url = env.where if pg else f"sqlite:///{tmp_path / 'app.db'}"  # the env's own ledger
    cli = {
        "LGE_LEDGER_URL": url,
        "LGE_TENANT": "default",
        "LGE_IDENTITY": "_answer_child:signed_in",
    }
    for verb, op_id in (("approve", b), ("reject", c)):
        result = CliRunner().invoke(app, [verb, op_id, "--reason", "by hand"], env=cli)
        assert result.exit_code == 0, result.output

    ui = {"decisions": [{"type": "approve"}, {"type": "reject"}, {"type": "approve"}]}
    out = env.invoke(g, Command(resume=ui), CFG)
    assert "__interrupt__" not in out
    status = {op.operation_id: op.status for op in env.ops()}
    assert [status[a], status[b], status[c]] == [S.CONFIRMED, S.REJECTED, S.REJECTED]
    assert crm.effects == 1
    rejecters = {
        op_id: [
            e.actor for e in env.ledger_call("events", "default", op_id) if e.kind.value == "reject"
        ]
        for op_id in (b, c)
    }
    assert rejecters == {b: ["ana"], c: ["olga"]}
    assert [m.status for m in tool_messages(out)] == ["success", "error", "error"]


@pytest.mark.parametrize("env", [("memory", "sync"), ("postgres", "async")], indirect=True)
@WHERE
def test_a_reject_after_a_crash_before_the_batch_was_saved_stops_that_call(
    env: Env, where: str
) -> None:
    """Crashed after the ledger applied all three approvals and before LangGraph saved the
    answer: the batch is shown again, and the UI's new decisions are the last word before
    dispatch: B, rejected now, is never sent; A and C are sent once each."""
    crm = FakeCRM()
    g = graph(env, [close_tool(crm)], CALLS, where=where)
    env.invoke(g, {"messages": [("user", "close A, B, C")]}, CFG)
    approve = {"decisions": [{"type": "approve"}] * 3}
    with CrashPlan.arm(CrashPoint.AFTER_ANSWER, hit=3), pytest.raises(InjectedCrash):
        env.invoke(g, Command(resume=approve), CFG)
    assert crm.effects == 0
    assert all(op.authorization_ref is not None for op in env.ops())  # all approved

    ui = {"decisions": [{"type": "approve"}, {"type": "reject"}, {"type": "approve"}]}
    out = env.invoke(g, Command(resume=ui), CFG)
    assert "__interrupt__" not in out
    assert (crm.effects_for("A"), crm.effects_for("B"), crm.effects_for("C")) == (1, 0, 1)
    assert [m.status for m in tool_messages(out)] == ["success", "error", "success"]
    # a batched rejection is labelled as a per-call one is: a person's answer settled it
    vias = [m.response_metadata["langgraph_effects"]["via"] for m in tool_messages(out)]
    assert vias == ["dispatched", "reviewed", "dispatched"]
