"""An answer that names no request answers the one LangGraph showed (issue 23).

LangGraph shows a task's last saved interrupt. When the process dies after the ledger
moved on and before LangGraph saved the newer question, the earlier one is shown again
and the person answers it, in a HITL UI's shape or natively without ``request_id``.
That answer was applied to the question the ledger asks now: a ``reject`` given to the
approval of a call already sent was applied as its review's answer (the record said
rejected and the model was told "NOT carried out" although the CRM acted), and a
``retry`` given to a superseded review round was applied to the next round, whose
attempt had acted (the ticket created twice). Now the run reads what LangGraph showed
(``actions.Shown``: the step checkpoint's pending interrupt of the task), tells the person
who decided what and when, and asks the current question, whose answer applies.

Real graphs on SQLite and PostgreSQL, sync and async, ``tools_condition`` and
``route_tool_calls``; effects counted at file-backed fakes that honour no key.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _graphs import Env, build_graph, call, tool_messages
from langgraph.types import Command

from langgraph_effects import EffectContext, effect
from langgraph_effects.core.model import EventKind, OperationStatus
from langgraph_effects.decide.answers import EARLIER_REQUEST
from langgraph_effects.testing.faults import CrashMode, CrashPlan, CrashPoint, InjectedCrash
from langgraph_effects.testing.providers import FakeCRM, FakeTicketing, Fault

S = OperationStatus
CFG = {"configurable": {"thread_id": "shown"}}
LEASE = timedelta(milliseconds=200)
ROUTERS = pytest.mark.parametrize("per_call", [False, True], ids=["tools_condition", "per_call"])
NOT_DONE = "NOT carried out"


@pytest.fixture
def crm(tmp_path: Path) -> Any:
    with FakeCRM(path=tmp_path / "crm.db") as fake:
        yield fake


def pending(env: Env, graph: Any) -> list[Any]:
    state = graph.get_state(CFG) if not env.is_async else env.run(graph.aget_state(CFG))
    return [i for task in state.tasks for i in task.interrupts]


def told(env: Env, op_id: str) -> list[str]:
    """What the log keeps of answers given to an earlier request (never applied)."""
    return [
        e.evidence.summary
        for e in env.ledger_call("events", "default", op_id)
        if e.kind is EventKind.EVIDENCE
        and e.evidence is not None
        and e.evidence.summary.startswith(EARLIER_REQUEST)
    ]


def gated(env: Env, crm: FakeCRM, *, per_call: bool) -> Any:
    """One call a person approves first; no key, no reconciler: an unknown is reviewed."""

    @effect("crm.close_case", target=lambda a: a["case_id"], require_approval=True)
    def close_case(case_id: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case (a person approves first)."""
        return crm.close_case(case_id, "fixed")

    return build_graph(
        [close_case],
        [call("close_case", "call-a", case_id="A")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
        per_call=per_call,
        node_kwargs={"lease_for": LEASE},
    )


def unnamed(shape: str, decision: str, request: dict[str, Any]) -> dict[str, Any]:
    """An answer naming no request: Agent Chat UI's, or native without request_id."""
    if shape == "hitl":
        return {"decisions": [{"type": decision, "message": "no"}], "by": "ana"}
    return {"operation_id": request["operation_id"], "decision": decision, "by": "ana"}


@ROUTERS
@pytest.mark.parametrize("shape", ["hitl", "native"])
def test_a_reject_given_to_the_approval_shown_after_the_call_acted_is_told(
    env: Env, crm: FakeCRM, per_call: bool, shape: str
) -> None:
    """Approved; the process dies after the CRM acted, before the receipt; the lease
    lapses. LangGraph shows the approval again and the person rejects it: too late, the
    call was sent. Told (who approved, when it was sent), the review is asked, and its
    answer applies: the record never says rejected, the model never reads "NOT carried
    out", the CRM acted once. Regression: the reject was applied as the review's answer."""
    graph = gated(env, crm, per_call=per_call)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [asked] = pending(env, graph)
    op_id = asked.value["operation_id"]
    with CrashPlan.arm(CrashPoint.AFTER_PROVIDER, CrashMode.RAISE), pytest.raises(InjectedCrash):
        env.invoke(graph, Command(resume={asked.id: unnamed(shape, "approve", asked.value)}), CFG)
    assert crm.effects == 1
    time.sleep(LEASE.total_seconds() * 2)  # the dead run's lease lapses
    [again] = pending(env, graph)
    assert again.value["request_id"] == asked.value["request_id"]  # the approval, again
    env.invoke(graph, Command(resume={again.id: unnamed(shape, "reject", again.value)}), CFG)
    assert crm.effects == 1
    assert env.ledger_call("get", "default", op_id).status is S.UNKNOWN
    [review] = pending(env, graph)
    assert review.value["kind"] == "effect_review"
    assert review.value["request_id"] != asked.value["request_id"]
    [note] = told(env, op_id)
    shown_id = asked.value["request_id"]
    assert note.startswith(f"{EARLIER_REQUEST}your reject answered request {shown_id}")
    assert "ana decided approve at " in note
    assert "; last sent at " in note
    assert note.endswith(
        "(1 attempt(s)); it is unknown now. Nothing you answered changed it. Answer this "
        "request instead."
    )
    assert review.value["notice"] == note
    seen = {"operation_id": op_id, "decision": "confirm", "by": "ana", "reason": "closed"}
    out = env.invoke(graph, Command(resume={review.id: seen}), CFG)
    assert pending(env, graph) == []
    assert env.ledger_call("get", "default", op_id).status is S.CONFIRMED
    assert crm.effects == 1
    assert all(NOT_DONE not in str(m.content) for m in tool_messages(out))
    env.invoke(graph, None, CFG)
    assert (crm.effects, len(told(env, op_id))) == (1, 1)


@ROUTERS
def test_a_plain_answer_to_the_current_question_applies_at_once(
    env: Env, crm: FakeCRM, per_call: bool
) -> None:
    """The guard reads what LangGraph showed: an answer to the question shown now, in
    the HITL shape, applies at once (no notice, nothing logged as not applied), and a
    reject given to the approval it answers stops the call."""
    graph = gated(env, crm, per_call=per_call)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [asked] = pending(env, graph)
    out = env.invoke(graph, Command(resume=unnamed("hitl", "reject", asked.value)), CFG)
    assert pending(env, graph) == []
    assert crm.effects == 0
    op_id = asked.value["operation_id"]
    assert env.ledger_call("get", "default", op_id).status is S.REJECTED
    assert told(env, op_id) == []
    assert len(tool_messages(out)) == 1


def tickets(env: Env, desk: FakeTicketing, *, per_call: bool) -> Any:
    """Two keyless tickets, no reconciler: each lost send is reviewed."""

    @effect("ticketing.create", target=lambda a: a["title"])
    def create_ticket(title: str, ctx: EffectContext) -> dict[str, Any]:
        """Open a ticket."""
        return desk.create_ticket(title, "please look")

    return build_graph(
        [create_ticket],
        [call("create_ticket", "c1", title="T0"), call("create_ticket", "c2", title="T1")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
        per_call=per_call,
    )


@ROUTERS
@pytest.mark.parametrize("hit", [1, 2])
def test_a_retry_given_to_a_round_shown_after_a_sibling_crashed_is_told(
    env: Env, tmp_path: Path, per_call: bool, hit: int
) -> None:
    """Both tickets' first sends are lost before the provider: review round 1 for each.
    Both are answered retry (one echoing its request_id); a sibling task dies reading
    its answer (DURING_REVIEW_RESUME), so LangGraph shows round 1 again while the other
    ticket's resend acted and its response was lost (round 2, whose attempt may have
    acted). The person answers retry again, without request_id, to the round shown: it
    is told and round 2 asked, never applied to round 2. Then the person answers the
    current question as one who looked at the desk (confirm what exists, else retry):
    each ticket is created once. Regression: campaign seed 10243 (created twice)."""
    with FakeTicketing(tmp_path / "tk.db") as desk:
        desk.faults.script(
            [Fault.LOSE_REQUEST, Fault.LOSE_REQUEST, Fault.LOSE_RESPONSE, Fault.LOSE_RESPONSE]
        )
        graph = tickets(env, desk, per_call=per_call)
        env.invoke(graph, {"messages": [("user", "open two tickets")]}, CFG)
        first = pending(env, graph)  # both (one task per call), else the first
        assert len(first) == (2 if per_call else 1)
        answers = {}
        for n, i in enumerate(first):
            retry = {"operation_id": i.value["operation_id"], "decision": "retry", "by": "ana"}
            answers[i.id] = {**retry, "request_id": i.value["request_id"]} if n == 0 else retry
        try:
            with CrashPlan.arm(CrashPoint.DURING_REVIEW_RESUME, hit=hit):
                env.invoke(graph, Command(resume=answers), CFG)
        except InjectedCrash:
            pass
        rounds = {i.value["request_id"] for i in first}
        for _ in range(4):  # the person answers retry again to each round 1 shown
            again = [i for i in pending(env, graph) if i.value["request_id"] in rounds]
            if not again:
                break
            retry = {
                i.id: {"operation_id": i.value["operation_id"], "decision": "retry", "by": "ana"}
                for i in again
            }
            env.invoke(graph, Command(resume=retry), CFG)
        assert max(desk.effects_for("T0"), desk.effects_for("T1")) <= 1
        for _ in range(8):  # the current questions, answered as one who looked
            shown = pending(env, graph)
            if not shown:
                break
            reply = {}
            for i in shown:
                v = i.value
                exists = desk.effects_for(v["target"]) > 0
                decision = "confirm" if exists else "retry"
                reply[i.id] = {"operation_id": v["operation_id"], "decision": decision, "by": "ana"}
            env.invoke(graph, Command(resume=reply), CFG)
        assert pending(env, graph) == []
        # Intended: T0 and T1 once each; acted: once each.
        assert (desk.effects_for("T0"), desk.effects_for("T1")) == (1, 1)
        assert sorted(op.status.value for op in env.ops()) == ["confirmed", "confirmed"]
