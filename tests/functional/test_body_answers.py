"""Answers given to effects run in the ``@entrypoint``'s own body (one task, several calls,
each asking in turn): every answer reaches the call it names, after a crash too.

Effects are counted at the fake CRM. SQLite and PostgreSQL, sync and async.
"""

from __future__ import annotations

from typing import Any

import pytest
from _graphs import Env
from langgraph.func import entrypoint
from langgraph.types import Command

from langgraph_effects import (
    EffectContext,
    EffectRejected,
    Evidence,
    arun_effect,
    effect,
    run_effect,
)
from langgraph_effects.review import REVIEW_KIND
from langgraph_effects.testing.faults import CrashMode, CrashPlan, CrashPoint, InjectedCrash
from langgraph_effects.testing.providers import FakeCRM, Fault

CFG = {"configurable": {"thread_id": "body-1"}}


@pytest.fixture
def crm() -> Any:
    with FakeCRM(None) as provider:
        yield provider


def _interrupts(env: Env, flow: Any) -> list[Any]:
    state = env.run(flow.aget_state(CFG)) if env.is_async else flow.get_state(CFG)
    return [i for t in state.tasks for i in t.interrupts]


def test_an_approval_given_again_after_a_crash_keeps_its_place(env: Env, crm: FakeCRM) -> None:
    """Killed after the ledger applied the approval of the first call and before LangGraph
    saved it, the person approves again (the request is shown again); the second call then
    asks, and its approval applies: the first call's repeated answer is its own (it names
    it), never handed to the second call's question. Regression: campaign seed 5020
    (functional_api, body), where the second approval was refused ("which this step does
    not own") and asked again without a word."""

    @effect("crm.close_case", target=lambda a: a["case_id"], require_approval=True)
    def gated(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case, once a person approved."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    cases = [{"case_id": c, "resolution": "fixed"} for c in ("A", "B")]
    crm.faults.push(Fault.LOSE_REQUEST)  # A's first dispatch: its outcome unknown

    def told(done: Any, case: str) -> dict[str, Any]:
        return {"closed": case} if done is not None else {"refused": True}

    if env.is_async:

        async def aone(args: dict[str, Any]) -> dict[str, Any]:
            try:
                return told(await arun_effect(gated, args, ledger=env.ledger), args["case_id"])
            except EffectRejected:
                return told(None, args["case_id"])

        @entrypoint(checkpointer=env.checkpointer)
        async def aflow(_: Any) -> Any:
            return [await aone(a) for a in cases]

        flow = aflow
    else:

        def one(args: dict[str, Any]) -> dict[str, Any]:
            try:
                return told(run_effect(gated, args, ledger=env.ledger), args["case_id"])
            except EffectRejected:
                return told(None, args["case_id"])

        @entrypoint(checkpointer=env.checkpointer)
        def sflow(_: Any) -> Any:
            return [one(a) for a in cases]

        flow = sflow

    def answer(request: Any) -> dict[str, Any]:
        return {"operation_id": request.value["operation_id"], "decision": "approve", "by": "ana"}

    env.invoke(flow, "go", CFG)
    (first,) = _interrupts(env, flow)
    crash = CrashPlan.arm(CrashPoint.DURING_REVIEW_RESUME, CrashMode.RAISE)
    with crash, pytest.raises(InjectedCrash):
        env.invoke(flow, Command(resume={first.id: answer(first)}), CFG)
    assert crm.effects == 0
    (again,) = _interrupts(env, flow)
    assert again.value["operation_id"] == first.value["operation_id"]
    env.invoke(flow, Command(resume={again.id: answer(again)}), CFG)
    assert crm.effects == 0  # A's request was lost: unknown, asked about
    (review,) = _interrupts(env, flow)
    assert review.value["operation_id"] == first.value["operation_id"]
    assert review.value["kind"] == REVIEW_KIND
    rejected = {**answer(review), "decision": "reject", "reason": "not found at the CRM"}
    env.invoke(flow, Command(resume={review.id: rejected}), CFG)
    (second,) = _interrupts(env, flow)
    assert second.value["operation_id"] != first.value["operation_id"]
    out = env.invoke(flow, Command(resume={second.id: answer(second)}), CFG)
    assert _interrupts(env, flow) == []
    assert out == [{"refused": True}, {"closed": "B"}]  # B's approval applied
    # Intended: B (A was rejected by the person); acted: B, once.
    assert crm.effects == 1
    assert crm.get_case("A")["status"] == "open"
    assert crm.get_case("B")["version"] == 1
    assert sorted(op.status.value for op in env.ops()) == ["confirmed", "rejected"]


def _two_calls(env: Env, crm: FakeCRM, *, look: Any = None) -> Any:
    """An entrypoint whose body closes case A, then notes something on record B, each once
    a person approved (``look``: A's reconciler); it returns "done" or "refused" for each."""

    @effect("crm.close_case", target=lambda a: a["case_id"], require_approval=True, reconcile=look)
    def close(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case, once a person approved."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    @effect("crm.update", target=lambda a: a["target"], require_approval=True)
    def update(target: str, note: str, ctx: EffectContext) -> dict[str, Any]:
        """Note something on a CRM record, once a person approved."""
        return crm.update(target, {"note": note}, idempotency_key=ctx.idempotency_key)

    calls = [
        (close, {"case_id": "A", "resolution": "fixed"}),
        (update, {"target": "B", "note": "hi"}),
    ]
    if env.is_async:

        async def aone(tool: Any, args: dict[str, Any]) -> str:
            try:
                await arun_effect(tool, args, ledger=env.ledger)
            except EffectRejected:
                return "refused"
            return "done"

        @entrypoint(checkpointer=env.checkpointer)
        async def aflow(_: Any) -> Any:
            return [await aone(t, a) for t, a in calls]

        return aflow

    def one(tool: Any, args: dict[str, Any]) -> str:
        try:
            run_effect(tool, args, ledger=env.ledger)
        except EffectRejected:
            return "refused"
        return "done"

    @entrypoint(checkpointer=env.checkpointer)
    def sflow(_: Any) -> Any:
        return [one(t, a) for t, a in calls]

    return sflow


@pytest.mark.parametrize("shape", ["approve", "edit"])
def test_an_unnamed_answer_given_again_after_a_crash_keeps_its_place(
    env: Env, crm: FakeCRM, shape: str
) -> None:
    """Agent Chat UI's answer names no call (no operation_id, no request_id) and comes by
    position. The first call's approval is answered; the task fails after the ledger
    applied it (LangGraph keeps the value the task took but still shows the first call's
    request), and the person gives the same words again. The first call consumes that
    repeat as its own (it was shown nothing else); the second call then asks, and the
    person rejects it. On every later run the repeat keeps its place, so the reject
    reaches the second call: a repeated approve was applied to it and sent (shape
    "approve"), a repeated edit refused the reject ("an edit cannot switch tools", shape
    "edit"). Regression: campaign seed 5257 (functional_api, body)."""
    flow = _two_calls(env, crm)
    if shape == "approve":
        first: dict[str, Any] = {"decisions": [{"type": "approve"}], "by": "ana"}
    else:
        edited = {"name": "close", "args": {"case_id": "A", "resolution": "fixed (edited)"}}
        first = {"decisions": [{"type": "edit", "edited_action": edited}], "by": "ana"}
    reject = {"decisions": [{"type": "reject", "message": "not B"}], "by": "ana"}

    env.invoke(flow, "go", CFG)
    (asked,) = _interrupts(env, flow)
    crash = CrashPlan.arm(CrashPoint.AFTER_ANSWER, CrashMode.RAISE)
    with crash, pytest.raises(InjectedCrash):
        env.invoke(flow, Command(resume=first), CFG)
    assert crm.effects == 0
    (again,) = _interrupts(env, flow)  # the first call's request, shown again
    assert again.value["operation_id"] == asked.value["operation_id"]
    env.invoke(flow, Command(resume=first), CFG)  # the same words, by position
    assert crm.effects == 1  # A, once
    (second,) = _interrupts(env, flow)
    assert second.value["tool"] == "update"
    assert second.value.get("notice") is None
    out = env.invoke(flow, Command(resume=reject), CFG)
    assert _interrupts(env, flow) == []
    assert out == ["done", "refused"]
    # Intended: A (approved, or edited), B rejected; acted: A once, B never.
    assert crm.effects == 1
    assert crm.get_case("A")["status"] == "closed"
    statuses = sorted((op.action, op.status.value) for op in env.ops())
    expected = [("crm.close_case", "confirmed"), ("crm.update", "rejected")]
    if shape == "edit":
        expected.insert(1, ("crm.close_case", "rejected"))  # replaced by the edit
    assert statuses == expected


def test_a_call_reconciled_before_it_asks_keeps_the_answers_it_was_given(
    env: Env, crm: FakeCRM
) -> None:
    """The first call is approved (Agent Chat UI's words, by interrupt id), its response is
    lost and its review asked; the person answers the review. The next run reconciles
    first, and the CRM now shows the case closed: the call is confirmed without asking,
    and the values this task holds for it (the approval, the review's answer) are its
    own: read as late answers, never handed to the second call's question by position,
    which took the first call's approval and sent B that nobody approved. Regression:
    campaign seed 5025 (functional_api, body), where the handed-back edit escaped the
    run as a ValidationError."""
    shows = [False]

    def look(op: Any) -> Evidence:
        case = crm.get_case(op.target or "")
        if shows[0] and case["closed_by"] == op.idempotency_key:
            return Evidence.confirmed("closed under our key", result=case)
        return Evidence.inconclusive("the CRM's search shows nothing yet")

    flow = _two_calls(env, crm, look=look)
    crm.faults.push(Fault.LOSE_RESPONSE)  # A acts, its answer lost: unknown
    env.invoke(flow, "go", CFG)
    (approval,) = _interrupts(env, flow)
    approve = {"decisions": [{"type": "approve"}], "by": "ana"}
    env.invoke(flow, Command(resume={approval.id: approve}), CFG)
    assert crm.effects == 1  # A
    (review,) = _interrupts(env, flow)
    assert (review.value["kind"], review.value["operation_id"]) == (
        REVIEW_KIND,
        approval.value["operation_id"],
    )
    shows[0] = True  # the CRM's search catches up
    seen = {"operation_id": review.value["operation_id"], "decision": "confirm", "by": "ana"}
    env.invoke(flow, Command(resume={review.id: seen}), CFG)
    assert crm.effects == 1  # B not sent: nobody approved it
    (second,) = _interrupts(env, flow)  # B asks
    assert second.value["tool"] == "update"
    assert second.value.get("notice") is None
    reject = {"decisions": [{"type": "reject", "message": "not B"}], "by": "ana"}
    out = env.invoke(flow, Command(resume={second.id: reject}), CFG)
    assert _interrupts(env, flow) == []
    assert out == ["done", "refused"]
    # Intended: A; B rejected. Acted: A once, B never.
    assert crm.effects == 1
    statuses = sorted((op.action, op.status.value) for op in env.ops())
    assert statuses == [("crm.close_case", "confirmed"), ("crm.update", "rejected")]


def test_an_answer_to_an_earlier_question_keeps_its_place(env: Env, crm: FakeCRM) -> None:
    """The first call's review is answered by a stale UI that echoes the approval's
    request_id (an earlier question: told, asked again), then rejected; the second call
    asks, a bad answer is refused, and the person rejects it. The stale answer is logged
    at its place when it is consumed, so the first call's log lists its answers in the
    order LangGraph hands them back: logged later (as a late answer, after the reject),
    it put the log out of order, the first call counted an answer not handed back yet,
    and took the second call's reject as its own (agreeing, silently): the second call
    was asked again without a word. Regression: campaign seed 1106 (functional_api,
    body), where the second call's edit was lost that way."""
    flow = _two_calls(env, crm)
    crm.faults.push(Fault.LOSE_REQUEST)  # A's dispatch: nothing acted, its outcome unknown
    env.invoke(flow, "go", CFG)
    (approval,) = _interrupts(env, flow)
    a_id = approval.value["operation_id"]
    env.invoke(
        flow, Command(resume={"operation_id": a_id, "decision": "approve", "by": "ana"}), CFG
    )
    (review,) = _interrupts(env, flow)
    assert (review.value["kind"], crm.effects) == (REVIEW_KIND, 0)
    stale = {
        "decisions": [{"type": "approve"}],
        "by": "ana",
        "request_id": approval.value["request_id"],
    }
    env.invoke(flow, Command(resume=stale), CFG)
    (again,) = _interrupts(env, flow)
    assert again.value["request_id"] == review.value["request_id"]
    assert "earlier question" in again.value["notice"]
    no = {"operation_id": a_id, "decision": "reject", "by": "ana", "reason": "not at the CRM"}
    env.invoke(flow, Command(resume=no), CFG)
    (second,) = _interrupts(env, flow)
    assert second.value["tool"] == "update"
    env.refused(flow, Command(resume={"decisions": [{"type": "approve"}]}), CFG, "who decides")
    reject = {"decisions": [{"type": "reject", "message": "not B"}], "by": "ana"}
    out = env.invoke(flow, Command(resume=reject), CFG)
    assert _interrupts(env, flow) == []
    assert out == ["refused", "refused"]
    # Intended: nothing (A rejected after its request was lost, B rejected); acted: nothing.
    assert crm.effects == 0
    statuses = sorted((op.action, op.status.value) for op in env.ops())
    assert statuses == [("crm.close_case", "rejected"), ("crm.update", "rejected")]
