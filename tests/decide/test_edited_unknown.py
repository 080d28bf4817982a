"""An approved edit whose outcome was lost is put before a person (issue 23).

A reviewer's edit is a new operation (``Loop._edit``), and the task's answers go on
with it: LangGraph hands a re-run task its values by position, and the edit that
was applied to the replaced operation comes back first. Read as an answer to the
edit's own review, it was refused, on every resume: the review could never be
answered and the edit stayed ``unknown`` with no evidence and no person asked
(campaign seeds 30, 226, 1508, 1550, 1817, 1846; fixed in ecf944a). After a crash
LangGraph shows the replaced call's approval again; an answer to it (by position, by
its operation_id or its request_id) is the last word while the edit is not dispatched,
and is told why it did not apply once it was.

Real graphs on SQLite and PostgreSQL, sync and async; effects counted at a file-backed
fake CRM that honours no idempotency key, so every dispatch that reaches it is an effect.
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
from langgraph_effects.core.model import OperationStatus
from langgraph_effects.testing.faults import CrashMode, CrashPlan, CrashPoint, InjectedCrash
from langgraph_effects.testing.providers import FakeCRM, Fault

S = OperationStatus
CFG = {"configurable": {"thread_id": "edited"}}
LEASE = timedelta(milliseconds=200)
EDIT = {
    "decisions": [
        {"type": "edit", "edited_action": {"name": "close_case", "args": {"case_id": "B"}}}
    ],
    "by": "ana",
}
REJECT = {"decisions": [{"type": "reject", "message": "not B either"}], "by": "ana"}


@pytest.fixture
def crm(tmp_path: Path) -> Any:
    with FakeCRM(path=tmp_path / "crm.db") as fake:
        yield fake


def gated_graph(env: Env, crm: FakeCRM) -> Any:
    """One call a person approves first; no reconciler: an unknown goes to a person."""

    @effect("crm.close_case", target=lambda a: a["case_id"], require_approval=True)
    def close_case(case_id: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case (a person approves first)."""
        return crm.close_case(case_id, "fixed")  # no key: every send is an effect

    return build_graph(
        [close_case],
        [call("close_case", "call-a", case_id="A")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
        node_kwargs={"lease_for": LEASE},
    )


def pending(env: Env, graph: Any) -> list[dict[str, Any]]:
    state = graph.get_state(CFG) if not env.is_async else env.run(graph.aget_state(CFG))
    return [i.value for task in state.tasks for i in task.interrupts]


def by_target(env: Env) -> dict[str, Any]:
    return {op.target: op for op in env.ops()}


def edited_and_lost(env: Env, crm: FakeCRM) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """Close A; the reviewer edits it into "close B", whose response is lost: the graph,
    the approval that was answered and the review now asked."""
    graph = gated_graph(env, crm)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [approval] = pending(env, graph)
    crm.faults.script([Fault.LOSE_RESPONSE])
    env.invoke(graph, Command(resume=EDIT), CFG)
    [review] = pending(env, graph)
    return graph, approval, review


def test_an_edit_whose_response_was_lost_is_reviewed_and_the_answer_applies(
    env: Env, crm: FakeCRM
) -> None:
    """The edit acted once, its response lost: the person is asked about the edit, and
    their confirmation applies (the edit handed back first is recognised, not refused)."""
    graph, _, review = edited_and_lost(env, crm)
    ops = by_target(env)
    assert (ops["A"].status, ops["B"].status, crm.effects) == (S.REJECTED, S.UNKNOWN, 1)
    assert (review["operation_id"], review["status"]) == (ops["B"].operation_id, "unknown")
    answer = {"operation_id": review["operation_id"], "decision": "confirm", "by": "ana"}
    out = env.invoke(graph, Command(resume=answer), CFG)
    assert pending(env, graph) == []
    assert (by_target(env)["B"].status, crm.effects) == (S.CONFIRMED, 1)
    assert [m.status for m in tool_messages(out)] == ["success"]


@pytest.mark.parametrize("named", ["operation_id", "request_id"])
def test_an_answer_to_the_replaced_calls_approval_is_told_and_asked_again(
    env: Env, crm: FakeCRM, named: str
) -> None:
    """An answer naming the call the edit replaced (its id, or its request's id) comes
    too late: nothing changes, the edit's review is asked again saying why, and the next
    answer to it applies."""
    graph, approval, review = edited_and_lost(env, crm)
    late: dict[str, Any] = {**REJECT}
    if named == "operation_id":
        late = {"operation_id": approval["operation_id"], "decision": "reject", "by": "ana"}
    else:
        late["request_id"] = approval["request_id"]
    env.invoke(graph, Command(resume=late), CFG)
    [again] = pending(env, graph)
    assert again["operation_id"] == review["operation_id"]
    assert approval["operation_id"] in again["notice"]
    assert review["operation_id"] in again["notice"]
    assert (by_target(env)["B"].status, crm.effects) == (S.UNKNOWN, 1)
    answer = {"operation_id": review["operation_id"], "decision": "confirm", "by": "ana"}
    env.invoke(graph, Command(resume=answer), CFG)
    assert pending(env, graph) == []
    assert (by_target(env)["B"].status, crm.effects) == (S.CONFIRMED, 1)


def crashed(env: Env, crm: FakeCRM, at: CrashPoint) -> tuple[Any, dict[str, Any]]:
    """Close A; the reviewer's edit into "close B" applies, and the run dies at ``at``:
    LangGraph saved nothing, so the approval of A is shown again."""
    graph = gated_graph(env, crm)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    with CrashPlan.arm(at, CrashMode.RAISE), pytest.raises(InjectedCrash):
        env.invoke(graph, Command(resume=EDIT), CFG)
    [shown] = pending(env, graph)
    assert shown["operation_id"] == by_target(env)["A"].operation_id
    time.sleep(LEASE.total_seconds() * 2)  # the dead run's lease, if it held one, lapses
    return graph, shown


@pytest.mark.parametrize(
    ("again", "effects", "status"),
    [(EDIT, 1, S.CONFIRMED), (REJECT, 0, S.REJECTED)],
    ids=["same-edit", "reject"],
)
def test_the_last_word_before_an_edit_is_dispatched_wins(
    env: Env, crm: FakeCRM, again: dict[str, Any], effects: int, status: OperationStatus
) -> None:
    """Killed after the ledger applied the edit, before it was dispatched: the same edit
    again sends it once; a reject stops it (never sent)."""
    graph, _ = crashed(env, crm, CrashPoint.AFTER_ANSWER)
    out = env.invoke(graph, Command(resume=again), CFG)
    assert pending(env, graph) == []
    assert (by_target(env)["B"].status, crm.effects) == (status, effects)
    assert len(tool_messages(out)) == 1


@pytest.mark.parametrize("late", [False, True], ids=["same-edit", "reject"])
def test_an_edit_claimed_and_lost_in_a_crash_is_reviewed(
    env: Env, crm: FakeCRM, late: bool
) -> None:
    """Killed after the edit's dispatch was claimed: the same edit given again to the
    approval shown again, or a reject naming that request, never sends the edit blindly
    nor leaves it unknown unasked: its review is put (saying why the reject did not
    apply), and the answer to it applies."""
    graph, shown = crashed(env, crm, CrashPoint.AFTER_CLAIM)
    again = {**REJECT, "request_id": shown["request_id"]} if late else EDIT
    env.invoke(graph, Command(resume=again), CFG)
    [review] = pending(env, graph)
    edited = by_target(env)["B"]
    assert (review["operation_id"], review["status"]) == (edited.operation_id, "unknown")
    assert ("notice" in review) is late
    assert crm.effects == 0
    answer = {"operation_id": edited.operation_id, "decision": "reject", "by": "ana"}
    out = env.invoke(graph, Command(resume=answer), CFG)
    assert pending(env, graph) == []
    assert (by_target(env)["B"].status, crm.effects) == (S.REJECTED, 0)
    assert [m.status for m in tool_messages(out)] == ["error"]


def pending_ids(env: Env, graph: Any) -> list[str]:
    state = graph.get_state(CFG) if not env.is_async else env.run(graph.aget_state(CFG))
    return [i.id for task in state.tasks for i in task.interrupts]


@pytest.mark.parametrize("by_id", [True, False], ids=["by-id", "by-position"])
def test_an_anonymous_answer_to_the_replaced_calls_approval_never_blocks_the_review(
    env: Env, crm: FakeCRM, by_id: bool
) -> None:
    """Killed after the edit ("close B") reached the CRM: the approval of A is shown
    again, and answered by its id with an approve naming A and nobody (no ``by``). The
    edit's approval is asked at that place and consumes it, not applied; the edit's
    review asked next takes the place after it. That value stays first among the task's
    values, and the review, asked first from then on, was handed it on every resume and
    refused it ("who decides?"), so the person's valid answer was refused too, for ever
    (campaign seed 70, colliding_edits). Now it is told and asked again, and the
    confirmation applies: B acted once."""
    graph, shown = crashed(env, crm, CrashPoint.AFTER_PROVIDER)
    assert crm.effects == 1
    late = {"operation_id": shown["operation_id"], "decision": "approve"}
    [shown_id] = pending_ids(env, graph)
    late["request_id"] = shown["request_id"]
    env.invoke(graph, Command(resume={shown_id: late}), CFG)
    [review] = pending(env, graph)
    edited = by_target(env)["B"]
    assert (review["operation_id"], review["status"]) == (edited.operation_id, "unknown")
    assert shown["operation_id"] in review["notice"]  # told why it did not apply
    assert "refused" not in review["notice"]
    answer = {"operation_id": edited.operation_id, "decision": "confirm", "by": "ana"}
    [review_id] = pending_ids(env, graph)
    env.invoke(graph, Command(resume={review_id: answer} if by_id else answer), CFG)
    assert pending(env, graph) == []
    assert (by_target(env)["B"].status, crm.effects) == (S.CONFIRMED, 1)
