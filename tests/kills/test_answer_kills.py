"""Finding 2 of "Every answer applied" across a real process kill: killed after the ledger
applied ``approve`` and before LangGraph saved the value (``_answer_child``), the last word
before dispatch wins. The rest of the finding's rules: ``tests/decide/test_every_answer.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _answer_child import (
    APPROVE,
    APPROVE_BOTH,
    BATCH_CFG,
    CFG,
    answer_batch_by_id,
    answer_by_id,
    batched_agent,
    gated_graph,
)
from _answer_child import answer as answer_in_child
from _graphs import Env, tool_messages
from langgraph.types import Command

from langgraph_effects.core.model import EventKind, OperationStatus
from langgraph_effects.decide.answers import REFUSED_NOTE
from langgraph_effects.testing.faults import CrashPoint
from langgraph_effects.testing.providers import FakeCRM
from langgraph_effects.testing.scenario import run_in_forked_child as run_in_child

S = OperationStatus


@pytest.fixture
def crm(tmp_path: Path) -> Any:
    with FakeCRM(path=tmp_path / "crm.db") as fake:
        yield fake


def pending(env: Env, graph: Any) -> list[Any]:
    state = graph.get_state(CFG) if not env.is_async else env.run(graph.aget_state(CFG))
    return [i.value for task in state.tasks for i in task.interrupts]


@pytest.mark.filterwarnings("ignore::langgraph_effects.DurabilityWarning")
def test_a_reject_after_a_crash_between_the_ledger_and_the_checkpoint_stops_the_call(
    env: Env, crm: FakeCRM, tmp_path: Path
) -> None:
    """Killed after the ledger applied ``approve`` and before LangGraph saved the value
    (durability "sync" on two backends, LangGraph's default on the others): the approval
    is shown again, a reject given now stops the call, and the log says who decided what."""
    durability = "sync" if (env.kind == "sqlite") == (env.mode == "sync") else None
    graph = gated_graph(env, crm)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG, durability=durability)
    died = run_in_child(
        answer_in_child,
        env.kind,
        env.mode,
        env.where,
        str(crm.path),
        durability,
        crash_at=CrashPoint.AFTER_ANSWER,
    )
    assert died.crashed_at is CrashPoint.AFTER_ANSWER, died.error
    [op] = env.ops()
    assert (op.status, op.authorization_ref is not None) == (S.PREPARED, True)  # approved
    [shown] = pending(env, graph)  # LangGraph lost the answer: it shows the approval again
    assert shown["kind"] == "effect_approval"

    reject = {"decisions": [{"type": "reject", "message": "wrong case"}], "by": "bob"}
    out = env.invoke(graph, Command(resume=reject), CFG, durability=durability)
    assert crm.effects == 0  # the last word before dispatch won
    [op] = env.ops()
    assert op.status is S.REJECTED
    assert pending(env, graph) == []
    assert [m.status for m in tool_messages(out)] == ["error"]
    events = env.ledger_call("events", "default", op.operation_id)
    assert [(e.kind, e.actor) for e in events if e.kind is not EventKind.PREPARE] == [
        (EventKind.APPROVE, "ana"),
        (EventKind.REJECT, "bob"),
    ]


@pytest.mark.parametrize("env", [("sqlite", "async")], indirect=True)
def test_the_same_approval_given_again_after_that_crash_sends_once(env: Env, crm: FakeCRM) -> None:
    """The other way round: the approval given again after the crash is the same word, and
    the call is sent exactly once."""
    graph = gated_graph(env, crm)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    died = run_in_child(
        answer_in_child,
        env.kind,
        env.mode,
        env.where,
        str(crm.path),
        "sync",
        crash_at=CrashPoint.AFTER_ANSWER,
    )
    assert died.crashed_at is CrashPoint.AFTER_ANSWER, died.error
    env.invoke(graph, Command(resume={**APPROVE, "by": "bob"}), CFG)
    [op] = env.ops()
    assert (op.status, crm.effects, pending(env, graph)) == (S.CONFIRMED, 1, [])


TWO_FOR_ONE = {"decisions": [{"type": "approve"}] * 2, "by": "ana"}  # refused: one call asked


def approved_by_id_then_killed(env: Env, graph: Any, crm: FakeCRM, shown: Any) -> None:
    """Answer ``shown`` with ``approve`` by its interrupt id, echoing its request_id, in a
    child killed after the ledger applied it and before LangGraph saved it."""
    died = run_in_child(
        answer_by_id,
        env.kind,
        env.mode,
        env.where,
        str(crm.path),
        shown.id,
        shown.value["request_id"],
        crash_at=CrashPoint.AFTER_ANSWER,
    )
    assert died.crashed_at is CrashPoint.AFTER_ANSWER, died.error
    [op] = env.ops()
    assert (op.status, op.authorization_ref, crm.effects) == (S.PREPARED, "approved-by:ana", 0)


def test_a_refused_answer_set_aside_by_an_answer_by_id_is_not_shown_after_that_crash(
    env: Env, crm: FakeCRM
) -> None:
    """A bad answer given by position is refused; the approve given next by interrupt id
    (its request_id echoed) is applied by the ledger, and the process is killed before
    LangGraph saved it. LangGraph still holds the bad answer, and ``invoke(None)`` handed
    it to the approval shown again, refused with its reason: stale, the person answered
    since. Now the approval is shown as the record asks it (no refusal, the same round),
    the next answer sends the call exactly once, and a repeat sends nothing more."""
    graph = gated_graph(env, crm)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [refused] = env.refused(graph, Command(resume=TWO_FOR_ONE), CFG, "decides one call")
    approved_by_id_then_killed(env, graph, crm, refused)

    out = env.invoke(graph, None, CFG)
    [shown] = out["__interrupt__"]
    assert shown.value["kind"] == "effect_approval"
    assert "notice" not in shown.value  # no refusal: the bad answer is not the last word
    assert not any(
        a["description"].startswith(REFUSED_NOTE) for a in shown.value["action_requests"]
    )
    assert shown.value["request_id"] == refused.value["request_id"]
    assert crm.effects == 0

    out = env.invoke(graph, Command(resume={**APPROVE, "by": "bob"}), CFG)
    assert (crm.effects, pending(env, graph)) == (1, [])
    [op] = env.ops()
    assert op.status is S.CONFIRMED
    assert [m.status for m in tool_messages(out)] == ["success"]
    env.invoke(graph, None, CFG)
    assert crm.effects == 1


@pytest.mark.parametrize("env", [("sqlite", "sync"), ("postgres", "async")], indirect=True)
def test_a_bad_answer_given_after_that_crash_is_refused_with_its_own_reason(
    env: Env, crm: FakeCRM
) -> None:
    """The other order: approved by interrupt id, killed before LangGraph saved it, then a
    bad answer by position: it is the person's latest word, refused with its reason (not
    set aside), and the next approve sends the call exactly once."""
    graph = gated_graph(env, crm)
    [asked] = env.invoke(graph, {"messages": [("user", "close A")]}, CFG)["__interrupt__"]
    approved_by_id_then_killed(env, graph, crm, asked)
    env.refused(graph, Command(resume=TWO_FOR_ONE), CFG, "decides one call")
    assert crm.effects == 0
    env.invoke(graph, Command(resume=APPROVE), CFG)
    assert (crm.effects, pending(env, graph)) == (1, [])


def test_a_refused_batch_answer_set_aside_by_one_by_id_is_not_applied_after_that_crash(
    env: Env, crm: FakeCRM
) -> None:
    """The batched request of two approvals (``EffectMiddleware(approvals="batched")``): a
    bad answer by position (one decision for two) is refused; both approved next by
    interrupt id, killed after the ledger applied the first and before LangGraph saved the
    answer. ``invoke(None)`` handed the bad answer to the request shown again, which now
    asked only B: one decision fitted, and the answer refused before was applied to B.
    Now it is consumed, never applied: B's approval is asked, with no refusal shown; the
    next answer approves it and each close is sent exactly once."""
    agent = batched_agent(env, crm)
    env.invoke(agent, {"messages": [("user", "close A and B")]}, BATCH_CFG)
    one = {"decisions": [{"type": "approve"}], "by": "ana"}
    [refused] = env.refused(agent, Command(resume=one), BATCH_CFG, r"1 decision\(s\) for 2")
    died = run_in_child(
        answer_batch_by_id,
        env.kind,
        env.mode,
        env.where,
        str(crm.path),
        refused.id,
        refused.value["request_id"],
        crash_at=CrashPoint.AFTER_ANSWER,
    )
    assert died.crashed_at is CrashPoint.AFTER_ANSWER, died.error
    assert sorted(op.authorization_ref is not None for op in env.ops()) == [False, True]

    out = env.invoke(agent, None, BATCH_CFG)
    assert crm.effects == 0  # the refused answer approved nothing
    [shown] = out["__interrupt__"]
    assert [a["args"]["case_id"] for a in shown.value["action_requests"]] == ["B"]
    assert "notice" not in shown.value

    env.invoke(agent, Command(resume=one), BATCH_CFG)
    assert (crm.effects_for("A"), crm.effects_for("B")) == (1, 1)
    assert [op.status for op in env.ops()] == [S.CONFIRMED] * 2
    env.invoke(agent, Command(resume=APPROVE_BOTH), BATCH_CFG)
    assert crm.effects == 2


@pytest.mark.filterwarnings("ignore::langgraph_effects.DurabilityWarning")
def test_a_reject_given_to_the_approval_shown_after_a_kill_past_the_provider_is_told(
    env: Env, crm: FakeCRM
) -> None:
    """Killed after the CRM acted and before the receipt (a real process death): LangGraph
    shows the approval again, and the reviewer rejects it in the HITL shape (no
    request_id). The call was sent: the reject is told (who approved, when it was sent),
    never applied as the review's answer; the review asked instead is answered and
    applies. The record never says rejected, the model never reads "NOT carried out",
    the CRM acted once (issue 23; ``tests/decide/test_shown_answers.py``)."""
    graph = gated_graph(env, crm)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG, durability="sync")
    died = run_in_child(
        answer_in_child,
        env.kind,
        env.mode,
        env.where,
        str(crm.path),
        "sync",
        crash_at=CrashPoint.AFTER_PROVIDER,
    )
    assert died.crashed_at is CrashPoint.AFTER_PROVIDER, died.error
    assert crm.effects == 1
    [shown] = pending(env, graph)
    assert shown["kind"] == "effect_approval"  # LangGraph shows the approval again
    reject = {"decisions": [{"type": "reject", "message": "wrong case"}], "by": "bob"}
    env.invoke(graph, Command(resume=reject), CFG, durability="sync")
    [op] = env.ops()
    assert op.status is S.UNKNOWN  # the dead run's claim taken over; never rejected
    [review] = pending(env, graph)
    assert review["kind"] == "effect_review"
    assert review["notice"].startswith(
        f"Not applied, it answered an earlier request: your reject answered request "
        f"{shown['request_id']}"
    )
    assert "ana decided approve at " in review["notice"]
    seen = {"operation_id": op.operation_id, "decision": "confirm", "by": "bob"}
    out = env.invoke(graph, Command(resume=seen), CFG, durability="sync")
    assert pending(env, graph) == []
    [op] = env.ops()
    assert (op.status, crm.effects) == (S.CONFIRMED, 1)
    assert all("NOT carried out" not in str(m.content) for m in tool_messages(out))
