"""The UI's answer after an operator decided out of band: applied before dispatch, told after.

An approval or a review is pending; an operator decides the operation with the Python
operator API (``ledger.resolve``, what the CLI calls); then the UI answers. Before the
provider is called, the last word wins: a reject after the operator's approval stops the
call, an approve agrees with it. Once the operation is decided for good (rejected, or
sent and confirmed), the re-run task asks nothing, and the UI's answer, which no
``interrupt()`` would read, is read all the same: one that agrees is consumed, one that
would change the outcome is logged on the operation as not applied (who, what, why) and
the ToolMessage says so (issue 23). Real graphs on SQLite and PostgreSQL, sync and async;
effects counted at a file-backed fake CRM that honours no idempotency key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _answer_child import CFG, gated_graph
from _graphs import Env, build_graph, call, tool_messages
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langgraph.types import Command

from langgraph_effects import EffectContext, EffectMiddleware, Evidence, effect
from langgraph_effects.core.model import Decision, EventKind, OperationStatus, Resolution
from langgraph_effects.decide.answers import NOT_APPLIED
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.providers import FakeCRM, Fault

S = OperationStatus
BACKENDS = [(k, m) for k in ("sqlite", "postgres") for m in ("sync", "async")]
ALL = pytest.mark.parametrize("env", BACKENDS, indirect=True, ids=[f"{k}-{m}" for k, m in BACKENDS])


@pytest.fixture
def crm(tmp_path: Path) -> Any:
    with FakeCRM(path=tmp_path / "crm.db") as fake:
        yield fake


def interrupts(env: Env, graph: Any) -> list[Any]:
    state = graph.get_state(CFG) if not env.is_async else env.run(graph.aget_state(CFG))
    return [i for task in state.tasks for i in task.interrupts]


def operator(env: Env, op_id: str, decision: str) -> None:
    """An operator decides ``op_id`` out of band (the CLI's ``approve`` / ``reject`` /
    ``resolve`` call this)."""
    resolution = Resolution(decision=Decision(decision), by="olga", reason="seen on the phone")
    env.ledger_call("resolve", "default", op_id, resolution)


def answer_in(shape: str, decision: str, pending: Any) -> Any:
    """The UI's answer to the ``pending`` interrupt, in one of the shapes a client sends."""
    request = pending.value
    if shape == "hitl":  # Agent Chat UI: no operation, no request id, no interrupt id
        return Command(resume={"decisions": [{"type": decision}], "by": "ana"})
    native = {"operation_id": request["operation_id"], "decision": decision, "by": "ana"}
    if shape == "echoed":
        return Command(resume={**native, "request_id": request["request_id"]})
    return Command(resume={pending.id: native})  # by interrupt id


def events(env: Env, op_id: str) -> list[Any]:
    return list(env.ledger_call("events", "default", op_id))


def not_applied(env: Env, op_id: str) -> list[Any]:
    """The events that log an answer as not applied."""
    return [
        e
        for e in events(env, op_id)
        if e.kind is EventKind.EVIDENCE
        and e.evidence is not None
        and e.evidence.summary.startswith(NOT_APPLIED)
    ]


SHAPES = pytest.mark.parametrize("shape", ["hitl", "echoed", "by-id"])


# -- before dispatch: the last word wins ----------------------------------------------


@ALL
@SHAPES
def test_a_reject_after_an_operator_approval_stops_the_call(
    env: Env, crm: FakeCRM, shape: str
) -> None:
    """The operator approves the pending approval out of band; the UI then rejects it:
    nothing is sent, the record ends rejected, and the log keeps both decisions."""
    graph = gated_graph(env, crm)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [pending] = interrupts(env, graph)
    op_id = pending.value["operation_id"]
    operator(env, op_id, "approve")
    out = env.invoke(graph, answer_in(shape, "reject", pending), CFG)
    assert crm.effects == 0
    assert env.ledger_call("get", "default", op_id).status is S.REJECTED
    decided = [(e.kind, e.actor) for e in events(env, op_id) if e.kind is not EventKind.PREPARE]
    assert decided == [(EventKind.APPROVE, "olga"), (EventKind.REJECT, "ana")]
    assert interrupts(env, graph) == []
    [message] = tool_messages(out)
    assert message.status == "error"
    assert "NOT carried out" in str(message.content)
    env.invoke(graph, None, CFG)
    assert crm.effects == 0


@ALL
@SHAPES
def test_an_approve_after_an_operator_approval_sends_once(
    env: Env, crm: FakeCRM, shape: str
) -> None:
    """The UI's approve agrees with the operator's: sent once, nothing told (logged beside it)."""
    graph = gated_graph(env, crm)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [pending] = interrupts(env, graph)
    op_id = pending.value["operation_id"]
    operator(env, op_id, "approve")
    out = env.invoke(graph, answer_in(shape, "approve", pending), CFG)
    assert crm.effects == 1
    assert env.ledger_call("get", "default", op_id).status is S.CONFIRMED
    assert not_applied(env, op_id) == []
    [message] = tool_messages(out)
    assert (message.status, "not applied" in str(message.content)) == ("success", False)
    env.invoke(graph, None, CFG)
    assert crm.effects == 1


# -- decided for good: told, in the log and in the ToolMessage -------------------------


@ALL
@SHAPES
def test_an_approve_after_an_operator_rejection_is_told(env: Env, crm: FakeCRM, shape: str) -> None:
    """The UI approves after the operator rejected (before the resume ran): nothing is
    sent, the approve is logged as not applied, by ana, naming olga's rejection, and the
    ToolMessage says so; the re-run that follows logs nothing more."""
    graph = gated_graph(env, crm)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [pending] = interrupts(env, graph)
    op_id = pending.value["operation_id"]
    operator(env, op_id, "reject")
    out = env.invoke(graph, answer_in(shape, "approve", pending), CFG)
    assert crm.effects == 0
    assert env.ledger_call("get", "default", op_id).status is S.REJECTED
    [told] = not_applied(env, op_id)
    assert told.actor == "ana"
    assert told.evidence.summary.startswith(
        f"Not applied: ana's approve of operation {op_id} came too late: olga decided reject at "
    )
    assert told.evidence.summary.endswith(
        "(now rejected); never sent. Nothing ana answered changed it."
    )
    [message] = tool_messages(out)
    assert message.status == "error"
    assert str(message.content).endswith(f"\n\n{told.evidence.summary}")
    assert interrupts(env, graph) == []
    env.invoke(graph, None, CFG)
    assert (crm.effects, len(not_applied(env, op_id))) == (0, 1)


@ALL
def test_a_reject_after_an_operator_rejection_is_consumed(env: Env, crm: FakeCRM) -> None:
    """A reject that agrees with the operator's changes nothing and is not told."""
    graph = gated_graph(env, crm)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [pending] = interrupts(env, graph)
    op_id = pending.value["operation_id"]
    operator(env, op_id, "reject")
    out = env.invoke(graph, answer_in("hitl", "reject", pending), CFG)
    assert (crm.effects, not_applied(env, op_id)) == (0, [])
    [message] = tool_messages(out)
    assert "not applied" not in str(message.content)


def lost_response_tool(crm: FakeCRM) -> Any:
    """A close whose first response is lost (the CRM acted); its reconciler sees nothing."""

    @effect(
        "crm.close_case",
        target=lambda a: a["case_id"],
        reconcile=lambda op: Evidence.inconclusive("the CRM's search shows nothing yet"),
    )
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution)

    crm.faults.script([Fault.LOSE_RESPONSE])
    return close_case


REVIEW_FACES = pytest.mark.parametrize("face", ["per-call", "tools_condition", "middleware"])


def review_graph(env: Env, crm: FakeCRM, face: str) -> Any:
    tool = lost_response_tool(crm)
    close = call("close_case", "call-a", case_id="A", resolution="fixed")
    if face == "middleware":
        # HITL on another tool: the review is EffectMiddleware's own.
        hitl = HumanInTheLoopMiddleware(interrupt_on={"other": True})
        return create_agent(
            ScriptedChatModel(plan=[[close]]),
            tools=[tool],
            middleware=[hitl, EffectMiddleware(ledger=env.ledger)],
            checkpointer=env.checkpointer,
        )
    return build_graph(
        [tool],
        [close],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
        per_call=face == "per-call",
    )


@ALL
@REVIEW_FACES
def test_a_review_answer_after_an_operator_confirmed_it_is_told(
    env: Env, crm: FakeCRM, face: str
) -> None:
    """A review is pending (the response was lost); the operator confirms it; the UI then
    rejects: the record stays confirmed, nothing is sent again, the reject is logged as
    not applied (naming olga's confirm and when it was sent) and the ToolMessage says so,
    after the recorded result."""
    graph = review_graph(env, crm, face)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [pending] = interrupts(env, graph)
    op_id = pending.value["operation_id"]
    assert pending.value["kind"] == "effect_review"
    operator(env, op_id, "confirm")
    out = env.invoke(graph, answer_in("hitl", "reject", pending), CFG)
    assert crm.effects == 1  # the first attempt's, and only it
    assert env.ledger_call("get", "default", op_id).status is S.CONFIRMED
    [told] = not_applied(env, op_id)
    assert told.actor == "ana"
    summary = told.evidence.summary
    assert summary.startswith(
        f"Not applied: ana's reject of operation {op_id} came too late: olga decided confirm at "
    )
    assert "(now confirmed); sent at " in summary
    [message] = tool_messages(out)
    assert message.status == "success"
    assert str(message.content).endswith(f"\n\n{summary}")
    assert interrupts(env, graph) == []


@pytest.mark.parametrize("env", [("sqlite", "sync"), ("postgres", "async")], indirect=True)
@REVIEW_FACES
def test_a_review_answer_that_agrees_with_the_operator_is_consumed(
    env: Env, crm: FakeCRM, face: str
) -> None:
    """The UI confirms what the operator confirmed: nothing logged, nothing told."""
    graph = review_graph(env, crm, face)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [pending] = interrupts(env, graph)
    op_id = pending.value["operation_id"]
    operator(env, op_id, "confirm")
    agree = {"operation_id": op_id, "decision": "confirm", "by": "ana"}
    out = env.invoke(graph, Command(resume=agree), CFG)
    assert (crm.effects, not_applied(env, op_id)) == (1, [])
    [message] = tool_messages(out)
    assert (message.status, "not applied" in str(message.content)) == ("success", False)


# -- a batch of approvals (approvals="batched"), every operation decided out of band -----


def batch_graph(env: Env, crm: FakeCRM, where: str) -> Any:
    """Two gated closes of one AIMessage, their approvals asked in one interrupt: by
    ``EffectToolNode`` under ``tools_condition``, or by ``EffectMiddleware`` in
    ``create_agent`` (``after_model``)."""

    @effect("crm.close_case", target=lambda a: a["case_id"], require_approval=True)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case (a person approves first)."""
        return crm.close_case(case_id, resolution)

    calls = [
        call("close_case", "c-a", case_id="A", resolution="fixed"),
        call("close_case", "c-b", case_id="B", resolution="fixed"),
    ]
    model = ScriptedChatModel(plan=[calls])
    if where == "agent":
        mw = EffectMiddleware(ledger=env.ledger, approvals="batched", tools=[close_case])
        return create_agent(
            model, tools=[close_case], middleware=[mw], checkpointer=env.checkpointer
        )
    return build_graph(
        [close_case],
        calls,
        ledger=env.ledger,
        checkpointer=env.checkpointer,
        per_call=False,
        node_kwargs={"approvals": "batched"},
    )


BATCH = pytest.mark.parametrize("where", ["tools_condition", "agent"])
BATCH_ENVS = pytest.mark.parametrize(
    "env", [("sqlite", "sync"), ("postgres", "async")], indirect=True, ids=["sqlite", "pg-async"]
)


def batch_ops(env: Env, graph: Any) -> list[str]:
    [pending] = interrupts(env, graph)
    assert pending.value["kind"] == "effect_approvals"
    return list(pending.value["operation_ids"])


def batch_answer(*types: str) -> Command[Any]:
    return Command(resume={"decisions": [{"type": t} for t in types], "by": "ana"})


def by_call(out: dict[str, Any]) -> dict[str, Any]:
    return {m.tool_call_id: m for m in tool_messages(out)}


@BATCH_ENVS
@BATCH
def test_a_batch_answer_after_the_operator_decided_every_call_applies_or_is_told(
    env: Env, crm: FakeCRM, where: str
) -> None:
    """The operator approves A and rejects B while the batch is pending, so nothing is
    left to ask; the UI's answer (reject A, approve B) is read all the same: the reject
    stops A before dispatch (the last word), the approve of B is logged as not applied
    and B's ToolMessage says so; nothing is sent."""
    graph = batch_graph(env, crm, where)
    env.invoke(graph, {"messages": [("user", "close A and B")]}, CFG)
    a, b = batch_ops(env, graph)
    operator(env, a, "approve")
    operator(env, b, "reject")
    out = env.invoke(graph, batch_answer("reject", "approve"), CFG)
    assert crm.effects == 0
    assert env.ledger_call("get", "default", a).status is S.REJECTED
    decided = [(e.kind, e.actor) for e in events(env, a) if e.kind is not EventKind.PREPARE]
    assert decided == [(EventKind.APPROVE, "olga"), (EventKind.REJECT, "ana")]
    [told] = not_applied(env, b)
    assert told.actor == "ana"
    assert told.evidence.summary.startswith(
        f"Not applied: ana's approve of operation {b} came too late: olga decided reject at "
    )
    messages = by_call(out)
    assert str(messages["c-b"].content).endswith(f"\n\n{told.evidence.summary}")
    assert "Not applied" not in str(messages["c-a"].content)
    assert interrupts(env, graph) == []
    env.invoke(graph, None, CFG)
    assert (crm.effects, len(not_applied(env, b))) == (0, 1)


@BATCH_ENVS
@BATCH
def test_a_batch_answer_that_agrees_with_the_operator_sends_what_was_approved(
    env: Env, crm: FakeCRM, where: str
) -> None:
    """The operator approves both; the UI approves both: each is sent once, nothing told."""
    graph = batch_graph(env, crm, where)
    env.invoke(graph, {"messages": [("user", "close A and B")]}, CFG)
    a, b = batch_ops(env, graph)
    operator(env, a, "approve")
    operator(env, b, "approve")
    out = env.invoke(graph, batch_answer("approve", "approve"), CFG)
    assert crm.effects == 2
    assert [env.ledger_call("get", "default", o).status for o in (a, b)] == [S.CONFIRMED] * 2
    assert not_applied(env, a) == not_applied(env, b) == []
    assert all("Not applied" not in str(m.content) for m in tool_messages(out))


@BATCH_ENVS
@BATCH
def test_a_batch_decision_about_a_call_rejected_meanwhile_is_told_in_its_tool_message(
    env: Env, crm: FakeCRM, where: str
) -> None:
    """The operator rejects A only; the UI approves both, by the positions it saw: B is
    sent once, A's approve is logged as not applied and A's ToolMessage says so."""
    graph = batch_graph(env, crm, where)
    env.invoke(graph, {"messages": [("user", "close A and B")]}, CFG)
    a, b = batch_ops(env, graph)
    operator(env, a, "reject")
    out = env.invoke(graph, batch_answer("approve", "approve"), CFG)
    assert crm.effects == 1
    assert env.ledger_call("get", "default", b).status is S.CONFIRMED
    [told] = not_applied(env, a)
    assert "olga decided reject" in told.evidence.summary
    assert str(by_call(out)["c-a"].content).endswith(f"\n\n{told.evidence.summary}")
    assert interrupts(env, graph) == []


@pytest.mark.parametrize(
    "env", [("sqlite", "sync"), ("postgres", "sync")], indirect=True, ids=["sqlite", "pg"]
)
def test_a_reject_given_after_a_crash_past_the_dispatch_is_told(env: Env, crm: FakeCRM) -> None:
    """Approved, sent and confirmed, then the process dies before LangGraph saved the
    answer: LangGraph shows the approval again. The reject given now comes too late (the
    call replays its receipt, asking nothing): nothing is sent again, and the reject is
    logged as not applied and said in the ToolMessage; the re-run after logs nothing more."""
    from langgraph_effects.testing.faults import CrashPlan, CrashPoint, InjectedCrash

    graph = gated_graph(env, crm)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [pending] = interrupts(env, graph)
    op_id = pending.value["operation_id"]
    with CrashPlan.arm(CrashPoint.AFTER_RECEIPT), pytest.raises(InjectedCrash):
        env.invoke(graph, answer_in("hitl", "approve", pending), CFG)
    assert crm.effects == 1
    [again] = interrupts(env, graph)
    assert again.value["operation_id"] == op_id  # shown again: the answer was lost
    out = env.invoke(graph, answer_in("hitl", "reject", again), CFG)
    assert crm.effects == 1
    assert env.ledger_call("get", "default", op_id).status is S.CONFIRMED
    [told] = not_applied(env, op_id)
    assert told.evidence.summary.startswith(
        f"Not applied: ana's reject of operation {op_id} came too late: it was dispatched at "
    )
    assert told.evidence.summary.endswith("UTC (now confirmed). Nothing ana answered changed it.")
    [message] = tool_messages(out)
    assert message.status == "success"
    assert str(message.content).endswith(f"\n\n{told.evidence.summary}")
    env.invoke(graph, None, CFG)
    assert (crm.effects, len(not_applied(env, op_id))) == (1, 1)


@pytest.mark.parametrize(
    "env", [("sqlite", "sync"), ("postgres", "sync")], indirect=True, ids=["sqlite", "pg"]
)
def test_an_edit_given_again_after_a_crash_sends_the_edited_call_once(
    env: Env, crm: FakeCRM
) -> None:
    """A reviewer edits the call; the process dies after the ledger applied the edit and
    before LangGraph saved it, so the approval is shown again, and the reviewer edits it
    the same way again (echoing the request id, so another value): that asks for the call
    the first edit made, which is sent once, never "replaced by itself" and refused."""
    from langgraph_effects.testing.faults import CrashPlan, CrashPoint, InjectedCrash

    graph = gated_graph(env, crm)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    assert len(interrupts(env, graph)) == 1
    edit = {
        "type": "edit",
        "edited_action": {"name": "close_case", "args": {"case_id": "A", "resolution": "x"}},
    }
    with CrashPlan.arm(CrashPoint.AFTER_ANSWER), pytest.raises(InjectedCrash):
        env.invoke(graph, Command(resume={"decisions": [edit], "by": "ana"}), CFG)
    [again] = interrupts(env, graph)
    answer = {"decisions": [edit], "by": "ana", "request_id": again.value["request_id"]}
    out = env.invoke(graph, Command(resume=answer), CFG)
    assert crm.effects == 1
    statuses = sorted((op.status.value, op.payload["resolution"]) for op in env.ops())
    assert statuses == [("confirmed", "x"), ("rejected", "fixed")]
    assert [m.status for m in tool_messages(out)] == ["success"]


def keyed_gated_graph(env: Env, crm: FakeCRM) -> Any:
    """One call that needs approval, sent under the CRM's idempotency key (a safe resend
    within 24 h); its first response is lost (the CRM acted) and its reconciler sees
    nothing."""
    from datetime import timedelta

    from langgraph_effects import ProviderContract

    @effect(
        "crm.close_case",
        target=lambda a: a["case_id"],
        require_approval=True,
        reconcile=lambda op: Evidence.inconclusive("the CRM's search shows nothing yet"),
        contract=ProviderContract(idempotency_window=timedelta(hours=24)),
    )
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case (a person approves first)."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    crm.faults.script([Fault.LOSE_RESPONSE])
    return build_graph(
        [close_case],
        [call("close_case", "call-a", case_id="A", resolution="fixed")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )


def approved_sent_and_lost(env: Env, crm: FakeCRM) -> tuple[Any, Any]:
    """Approve the call; it is sent, its response lost (unknown), and the process dies
    while reconciling, before LangGraph saved the approve: the graph, and the approval
    LangGraph shows again."""
    from langgraph_effects.testing.faults import CrashPlan, CrashPoint, InjectedCrash

    graph = keyed_gated_graph(env, crm)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [pending] = interrupts(env, graph)
    with CrashPlan.arm(CrashPoint.DURING_RECONCILE), pytest.raises(InjectedCrash):
        env.invoke(graph, answer_in("hitl", "approve", pending), CFG)
    assert crm.effects == 1
    [again] = interrupts(env, graph)
    assert again.value["operation_id"] == pending.value["operation_id"]  # the answer was lost
    op = env.ledger_call("get", "default", pending.value["operation_id"])
    assert (op.status, op.attempts) == (S.UNKNOWN, 1)
    return graph, again


@pytest.mark.parametrize(
    "env", [("sqlite", "sync"), ("postgres", "async")], indirect=True, ids=["sqlite", "pg-async"]
)
def test_an_approval_answered_again_after_a_crash_past_the_dispatch_asks_nothing_more(
    env: Env, crm: FakeCRM
) -> None:
    """The approve was logged and the call sent when the process died; LangGraph shows the
    approval again and the person approves it again (echoing its request id, so another
    value than the logged one). The call was sent: it is never asked about as an approval
    again (a question only "approve" could answer, shown for an operation that is unknown);
    the safe resend under the key settles it, the CRM acting once (campaign seed 1624,
    where the question was then answered with an edit that rejected the sent call)."""
    graph, again = approved_sent_and_lost(env, crm)
    op_id = again.value["operation_id"]
    out = env.invoke(graph, answer_in("echoed", "approve", again), CFG)
    assert interrupts(env, graph) == []
    assert crm.effects == 1
    op = env.ledger_call("get", "default", op_id)
    assert (op.status, op.attempts) == (S.CONFIRMED, 2)
    [message] = tool_messages(out)
    assert message.status == "success"
    env.invoke(graph, None, CFG)
    assert crm.effects == 1


@pytest.mark.parametrize(
    "env", [("sqlite", "sync"), ("postgres", "async")], indirect=True, ids=["sqlite", "pg-async"]
)
def test_an_edit_of_an_approval_shown_again_after_the_call_was_sent_is_refused(
    env: Env, crm: FakeCRM
) -> None:
    """The approval LangGraph shows again after the crash is answered with an edit: the
    call was sent already (its attempt may have acted), so the edit cannot replace it (it
    would record the sent call as rejected): refused in words, asked again; approve then
    lets the safe resend settle it, the CRM acting once, nothing rejected."""
    graph, again = approved_sent_and_lost(env, crm)
    op_id = again.value["operation_id"]
    edit = {
        "type": "edit",
        "edited_action": {"name": "close_case", "args": {"case_id": "A", "resolution": "x"}},
    }
    env.invoke(graph, Command(resume={"decisions": [edit], "by": "ana"}), CFG)
    [told] = interrupts(env, graph)
    assert told.value["operation_id"] == op_id
    assert "was approved and sent already; an edit cannot apply" in told.value["notice"]
    assert [op.operation_id for op in env.ops()] == [op_id]
    env.invoke(graph, answer_in("hitl", "approve", told), CFG)
    assert interrupts(env, graph) == []
    assert crm.effects == 1
    assert [(op.operation_id, op.status) for op in env.ops()] == [(op_id, S.CONFIRMED)]


@pytest.mark.parametrize(
    "env", [("sqlite", "sync"), ("postgres", "async")], indirect=True, ids=["sqlite", "pg-async"]
)
@SHAPES
def test_an_approve_agreeing_with_the_operator_is_kept_for_the_review_that_follows(
    env: Env, crm: FakeCRM, shape: str
) -> None:
    """The operator approves the pending call out of band and the UI approves it too; it is
    sent, its response lost (the CRM acted), and a review is asked. The UI's answer to the
    review applies: the approve given before was logged with the call's answers, so the
    review's re-run meets it as an answer given, never reads it as the review's own and
    refuses it ("'approve' is not offered here"), which lost the person's confirm (campaign
    seed 163 of operator_decisions). The CRM acted once; the log keeps both approvals."""
    graph = build_graph(
        [lost_response_gated_tool(crm)],
        [call("close_case", "call-a", case_id="A", resolution="fixed")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [pending] = interrupts(env, graph)
    op_id = pending.value["operation_id"]
    operator(env, op_id, "approve")
    env.invoke(graph, answer_in(shape, "approve", pending), CFG)
    assert crm.effects == 1
    [review] = interrupts(env, graph)
    assert (review.value["kind"], review.value["operation_id"]) == ("effect_review", op_id)
    confirm = {"operation_id": op_id, "decision": "confirm", "by": "ana", "reason": "seen"}
    out = env.invoke(
        graph, Command(resume={**confirm, "request_id": review.value["request_id"]}), CFG
    )
    assert interrupts(env, graph) == []
    assert env.ledger_call("get", "default", op_id).status is S.CONFIRMED
    decided = [(e.kind, e.actor) for e in events(env, op_id) if e.actor in ("olga", "ana")]
    assert decided == [
        (EventKind.APPROVE, "olga"),
        (EventKind.APPROVE, "ana"),
        (EventKind.RESOLVE, "ana"),
    ]
    [message] = tool_messages(out)
    assert message.status == "success"
    env.invoke(graph, None, CFG)
    assert crm.effects == 1


def lost_response_gated_tool(crm: FakeCRM) -> Any:
    """A close that needs approval, whose first response is lost (the CRM acted), with no
    key window (a review follows) and a reconciler that sees nothing."""

    @effect(
        "crm.close_case",
        target=lambda a: a["case_id"],
        require_approval=True,
        reconcile=lambda op: Evidence.inconclusive("the CRM's search shows nothing yet"),
    )
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case (a person approves first)."""
        return crm.close_case(case_id, resolution)

    crm.faults.script([Fault.LOSE_RESPONSE])
    return close_case


# -- a retry ordered out of band while the review is pending ---------------------------


def lost_request_graph(env: Env, crm: FakeCRM, face: str, lost: int) -> Any:
    """One close whose first ``lost`` requests never reach the CRM (it did not act), with
    no key window (a review follows each) and a reconciler that sees nothing."""

    @effect(
        "crm.close_case",
        target=lambda a: a["case_id"],
        reconcile=lambda op: Evidence.inconclusive("the CRM's search shows nothing yet"),
    )
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution)

    crm.faults.script([Fault.LOSE_REQUEST] * lost)
    close = call("close_case", "call-a", case_id="A", resolution="fixed")
    if face == "middleware":
        return create_agent(
            ScriptedChatModel(plan=[[close]]),
            tools=[close_case],
            middleware=[EffectMiddleware(ledger=env.ledger)],
            checkpointer=env.checkpointer,
        )
    return build_graph(
        [close_case], [close], ledger=env.ledger, checkpointer=env.checkpointer, per_call=True
    )


RETRY_ENVS = pytest.mark.parametrize(
    "env", [("sqlite", "sync"), ("postgres", "async")], indirect=True, ids=["sqlite", "pg-async"]
)


@RETRY_ENVS
@pytest.mark.parametrize("face", ["per-call", "middleware"])
@pytest.mark.parametrize(
    "answer",
    [
        {"decisions": [{"type": "reject", "message": "it never went out"}], "by": "ana"},
        {"decision": "confirm", "by": "ana"},
    ],
    ids=["hitl-reject", "native-confirm"],
)
def test_a_review_answer_after_an_operator_retry_is_told_and_the_retry_sent(
    env: Env, crm: FakeCRM, face: str, answer: dict[str, Any]
) -> None:
    """A review is pending (the request was lost); the operator orders a retry out of band
    (the CLI's ``retry``); the UI then answers the review without a request id. The
    operator's retry is sent, once; the UI's answer, which no question reads any more, is
    never dropped unread: it is logged as not applied, naming olga's retry and when, and
    the ToolMessage says so (it was consumed silently, the resend sent all the same)."""
    graph = lost_request_graph(env, crm, face, lost=1)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [pending] = interrupts(env, graph)
    op_id = pending.value["operation_id"]
    assert pending.value["kind"] == "effect_review"
    operator(env, op_id, "retry")
    if "decision" in answer:
        answer = {**answer, "operation_id": op_id}
    out = env.invoke(graph, Command(resume=answer), CFG)
    assert crm.effects == 1
    op = env.ledger_call("get", "default", op_id)
    assert (op.status, op.attempts) == (S.CONFIRMED, 2)
    [told] = not_applied(env, op_id)
    assert told.actor == "ana"
    decision = "reject" if "decisions" in answer else "confirm"
    assert told.evidence.summary.startswith(
        f"Not applied: ana's {decision} of operation {op_id} came too late: olga decided retry at "
    )
    [message] = tool_messages(out)
    assert message.status == "success"
    assert str(message.content).endswith(f"\n\n{told.evidence.summary}")
    assert interrupts(env, graph) == []
    env.invoke(graph, None, CFG)
    assert (crm.effects, len(not_applied(env, op_id))) == (1, 1)


@RETRY_ENVS
@pytest.mark.parametrize("face", ["per-call", "middleware"])
def test_a_retry_agreeing_with_the_operator_is_kept_for_the_next_review(
    env: Env, crm: FakeCRM, face: str
) -> None:
    """The operator orders a retry; the UI's retry (Agent Chat UI's approve) agrees and is
    told nothing; the resend is lost again, and a new review asks. That review's answer
    (reject: it never went out) applies: the retry given before is kept in the log with
    its mark, so the re-run never reads it as the new review's answer (which would send a
    third time nobody ordered). Nothing reached the CRM; two sends, both lost."""
    graph = lost_request_graph(env, crm, face, lost=2)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [pending] = interrupts(env, graph)
    op_id = pending.value["operation_id"]
    operator(env, op_id, "retry")
    env.invoke(graph, Command(resume={"decisions": [{"type": "approve"}], "by": "ana"}), CFG)
    assert not_applied(env, op_id) == []
    [review] = interrupts(env, graph)
    assert (review.value["kind"], review.value["operation_id"]) == ("effect_review", op_id)
    reject = {"operation_id": op_id, "decision": "reject", "by": "ana", "reason": "never sent"}
    env.invoke(graph, Command(resume=reject), CFG)
    assert interrupts(env, graph) == []
    op = env.ledger_call("get", "default", op_id)
    assert (crm.effects, op.status, op.attempts) == (0, S.REJECTED, 2)
    resolved = [
        (e.actor, e.detail.get("decision"))
        for e in events(env, op_id)
        if e.kind is EventKind.RESOLVE
    ]
    assert resolved == [("olga", "retry"), ("ana", "reject")]


@pytest.mark.parametrize(
    "env", [("sqlite", "sync"), ("postgres", "sync")], indirect=True, ids=["sqlite", "pg"]
)
def test_an_edit_back_to_the_replaced_arguments_sends_them_once(env: Env, crm: FakeCRM) -> None:
    """A reviewer edits the call (fixed -> x); the process dies after the ledger applied the
    edit and before LangGraph saved it, so the approval is shown again, and the reviewer
    now edits it back to what the call first asked (x -> fixed). That asks for a call whose
    first record was rejected as replaced, never sent: a new operation is made for it and
    sent once, never the replaced record met again and everything left rejected (campaign
    seed 1711, colliding_edits: "1 intended, the provider applied 0")."""
    from langgraph_effects.testing.faults import CrashPlan, CrashPoint, InjectedCrash

    graph = gated_graph(env, crm)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)

    def edit(resolution: str, **more: Any) -> Command[Any]:
        args = {"case_id": "A", "resolution": resolution}
        decision = {"type": "edit", "edited_action": {"name": "close_case", "args": args}}
        return Command(resume={"decisions": [decision], "by": "ana", **more})

    with CrashPlan.arm(CrashPoint.AFTER_ANSWER), pytest.raises(InjectedCrash):
        env.invoke(graph, edit("x"), CFG)
    [again] = interrupts(env, graph)
    out = env.invoke(graph, edit("fixed", request_id=again.value["request_id"]), CFG)
    assert interrupts(env, graph) == []
    assert crm.effects == 1
    sent = [op for op in env.ops() if op.status is S.CONFIRMED]
    assert [op.payload["resolution"] for op in sent] == ["fixed"]
    assert [m.status for m in tool_messages(out)] == ["success"]
    env.invoke(graph, None, CFG)
    assert crm.effects == 1
