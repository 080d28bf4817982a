"""The reviews of one ``tools_condition`` task with several effect calls (issue 23, issue 22).

ToolNode runs the calls of one AIMessage in one task (threads, or ``asyncio.gather``),
and they share one LangGraph scratchpad: one interrupt counter, one list of resume
values handed out by position. The calls' questions are asked in the AIMessage's order,
one at a time, so the k-th question of the task is always the same call's, whatever the
thread timing: an answer given by position reaches the call it was given to, and a
refused answer dropped from the resume values never races a sibling's ``interrupt()``
(LangGraph's ``assert len(scratchpad.resume) == idx``; campaign seeds 756, 6797).

Real graphs on SQLite and PostgreSQL, sync and async; sends counted at a file-backed
fake CRM that honours no idempotency key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _graphs import Env, build_graph, call, tool_messages
from langgraph.types import Command

from langgraph_effects import effect
from langgraph_effects.core.model import OperationStatus
from langgraph_effects.testing.providers import FakeCRM

S = OperationStatus
BACKENDS = [(k, m) for k in ("sqlite", "postgres") for m in ("sync", "async")]
CASES = ("A", "B", "C")


@pytest.fixture
def crm(tmp_path: Path) -> Any:
    with FakeCRM(path=tmp_path / "crm.db") as fake:
        yield fake


def _interrupts(env: Env, graph: Any, config: dict[str, Any]) -> list[Any]:
    state = graph.get_state(config) if not env.is_async else env.run(graph.aget_state(config))
    return [i for task in state.tasks for i in task.interrupts]


@pytest.mark.parametrize("rerun", range(3))
def test_one_tasks_reviews_are_asked_in_order_and_every_answer_applies_once(
    env: Env, crm: FakeCRM, rerun: int
) -> None:
    """Three approvals in one task, answered by position and by id over several rounds,
    with one bad answer between them: each question is the next call's in the AIMessage's
    order; the bad answer is refused with a notice and asked again; every answer applies
    (two approvals act once each at the CRM, the rejected call never acts)."""

    @effect("crm.close_case", target=lambda a: a["case_id"], require_approval=True)
    def close_case(case_id: str, resolution: str) -> dict[str, Any]:
        """Close a CRM case (a person approves first)."""
        return crm.close_case(case_id, resolution)

    calls = [call("close_case", f"c-{c}", case_id=c, resolution="fixed") for c in CASES]
    graph = build_graph(
        [close_case], calls, ledger=env.ledger, checkpointer=env.checkpointer, per_call=False
    )
    config = {"configurable": {"thread_id": f"one-task-{rerun}"}}
    env.invoke(graph, {"messages": [("user", "close A, B and C")]}, config)

    def asked() -> Any:
        pending = _interrupts(env, graph, config)
        assert pending, "nothing is asked"
        return pending[0]

    def answer(case: str, decision: str, *, by_id: bool) -> None:
        question = asked()
        assert question.value["action_requests"][0]["args"]["case_id"] == case, repr(question.value)
        value = {"operation_id": question.value["operation_id"], "decision": decision, "by": "ana"}
        resume = {question.id: value} if by_id else value
        if decision == "confirm":
            env.refused(graph, Command(resume=resume), config, "'confirm'")
        else:
            env.invoke(graph, Command(resume=resume), config)

    answer("A", "approve", by_id=False)
    answer("B", "confirm", by_id=False)  # refused, with a notice; B asked again
    answer("B", "reject", by_id=True)
    answer("C", "approve", by_id=False)

    assert _interrupts(env, graph, config) == []
    assert {c: crm.effects_for(c) for c in CASES} == {"A": 1, "B": 0, "C": 1}
    status = {op.target: op.status for op in env.ops()}
    assert status == {"A": S.CONFIRMED, "B": S.REJECTED, "C": S.CONFIRMED}
    state = graph.get_state(config) if not env.is_async else env.run(graph.aget_state(config))
    answered = {m.tool_call_id: m.status for m in tool_messages(state.values)}
    assert answered == {"c-A": "success", "c-B": "error", "c-C": "success"}


def test_a_hitl_answer_echoing_its_request_id_names_its_call(env: Env, crm: FakeCRM) -> None:
    """In a task of several effect calls, a HITL-shaped answer (``{"decisions": [...]}``)
    that echoes the request's ``request_id`` names its operation as ``operation_id`` would:
    it applies to that call (campaign seeds 756, 6797: refused "must name its operation_id"
    and asked again). One naming nothing is still refused there, saying why."""

    @effect("crm.close_case", target=lambda a: a["case_id"], require_approval=True)
    def close_case(case_id: str, resolution: str) -> dict[str, Any]:
        """Close a CRM case (a person approves first)."""
        return crm.close_case(case_id, resolution)

    calls = [call("close_case", f"c-{c}", case_id=c, resolution="fixed") for c in CASES]
    graph = build_graph(
        [close_case], calls, ledger=env.ledger, checkpointer=env.checkpointer, per_call=False
    )
    config = {"configurable": {"thread_id": "one-task-echoed"}}
    env.invoke(graph, {"messages": [("user", "close A, B and C")]}, config)

    def answer(case: str, decision: dict[str, Any], *, by_id: bool = True) -> None:
        [question] = _interrupts(env, graph, config)
        assert question.value["action_requests"][0]["args"]["case_id"] == case, repr(question.value)
        value = {"decisions": [decision], "by": "ana", "request_id": question.value["request_id"]}
        env.invoke(graph, Command(resume={question.id: value} if by_id else value), config)

    [first] = _interrupts(env, graph, config)
    unnamed = {"decisions": [{"type": "approve"}], "by": "ana"}
    env.refused(graph, Command(resume={first.id: unnamed}), config, "must name its operation_id")
    answer("A", {"type": "approve"})
    answer("B", {"type": "reject", "message": "not B"}, by_id=False)
    answer("C", {"type": "approve"})

    assert _interrupts(env, graph, config) == []
    assert {c: crm.effects_for(c) for c in CASES} == {"A": 1, "B": 0, "C": 1}
    status = {op.target: op.status for op in env.ops()}
    assert status == {"A": S.CONFIRMED, "B": S.REJECTED, "C": S.CONFIRMED}


def test_a_refused_answer_by_position_never_reaches_a_later_question(
    env: Env, crm: FakeCRM
) -> None:
    """A bad answer given by position is refused; the person then answers by interrupt id.
    LangGraph keeps the refused value among the checkpoint's pending writes (a resume by
    id writes nothing in its place) and would hand it to the task's next question: that
    question was refused with the bad answer's reason before it was ever shown (campaign
    seeds 1605, 1606, 1619, 1990, 6960: a valid retry refused 'an answer must be a dict').
    Each question is asked without a refusal, each answer applies, each call acts once."""

    @effect("crm.close_case", target=lambda a: a["case_id"], require_approval=True)
    def close_case(case_id: str, resolution: str) -> dict[str, Any]:
        """Close a CRM case (a person approves first)."""
        return crm.close_case(case_id, resolution)

    calls = [call("close_case", f"c-{c}", case_id=c, resolution="fixed") for c in CASES]
    graph = build_graph(
        [close_case], calls, ledger=env.ledger, checkpointer=env.checkpointer, per_call=False
    )
    config = {"configurable": {"thread_id": "one-task-stale-bad"}}
    env.invoke(graph, {"messages": [("user", "close A, B and C")]}, config)
    env.refused(graph, Command(resume="approve"), config, "must be a dict")

    for case in CASES:
        [question] = _interrupts(env, graph, config)
        assert question.value["action_requests"][0]["args"]["case_id"] == case, repr(question.value)
        assert "notice" not in question.value or case == "A", question.value["notice"]
        decision = "reject" if case == "B" else "approve"
        value = {"operation_id": question.value["operation_id"], "decision": decision, "by": "ana"}
        env.invoke(graph, Command(resume={question.id: value}), config)

    assert _interrupts(env, graph, config) == []
    assert {c: crm.effects_for(c) for c in CASES} == {"A": 1, "B": 0, "C": 1}
    status = {op.target: op.status for op in env.ops()}
    assert status == {"A": S.CONFIRMED, "B": S.REJECTED, "C": S.CONFIRMED}
