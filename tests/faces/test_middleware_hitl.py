"""EffectMiddleware with LangChain's HumanInTheLoopMiddleware, in either order (issue 11).

Every decision HITL offers (approve, edit, reject, respond, and an edit that
redirects to another effect tool), batched and per-call, with EffectMiddleware
listed before and after HITL; effects counted at fake providers.
"""

from __future__ import annotations

from typing import Any

import pytest
from _graphs import Env, call, tool_messages
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langgraph.types import Command

from langgraph_effects import EffectContext, EffectMiddleware, MiddlewareOrderError, effect
from langgraph_effects.core.model import OperationStatus
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.providers import FakeCRM

S = OperationStatus
CFG = {"configurable": {"thread_id": "hitl"}}
BACKENDS = [
    ("memory", "sync"),
    ("sqlite", "sync"),
    ("sqlite", "async"),
    ("postgres", "sync"),
    ("postgres", "async"),
]
CLOSE = call("close_case", "c1", case_id="A", resolution="fixed")


def tools(crm: FakeCRM, other: FakeCRM) -> list[Any]:
    @effect("crm.close_case", target=lambda a: a["case_id"])
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> str:
        """Close a CRM case."""
        crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)
        return f"closed {case_id}: {resolution}"

    @effect("crm.escalate", target=lambda a: a["case_id"])
    def escalate(case_id: str, ctx: EffectContext) -> str:
        """Escalate a CRM case instead."""
        other.close_case(case_id, "escalated", idempotency_key=ctx.idempotency_key)
        return f"escalated {case_id}"

    return [close_case, escalate]


DECISIONS: dict[str, dict[str, Any]] = {
    "approve": {"type": "approve"},
    "edit": {
        "type": "edit",
        "edited_action": {"name": "close_case", "args": {"case_id": "A", "resolution": "edited"}},
    },
    "redirect": {
        "type": "edit",
        "edited_action": {"name": "escalate", "args": {"case_id": "A"}},
    },
    "reject": {"type": "reject", "message": "not this one"},
    "respond": {"type": "respond", "message": "the case was already closed by hand"},
}


def run_review(
    env: Env, *, effect_first: bool, mode: str, decision: str
) -> tuple[FakeCRM, FakeCRM, Any]:
    crm, other = FakeCRM(), FakeCRM()
    hitl = HumanInTheLoopMiddleware(interrupt_on={"close_case": True}, interrupt_mode=mode)  # type: ignore[arg-type]
    effects = EffectMiddleware(ledger=env.ledger, hitl=hitl)
    agent = create_agent(
        ScriptedChatModel(plan=[[CLOSE]]),
        tools=tools(crm, other),
        middleware=[effects, hitl] if effect_first else [hitl, effects],
        checkpointer=env.checkpointer,
    )
    first = env.invoke(agent, {"messages": [("user", "close A")]}, CFG)
    [asked] = first["__interrupt__"]
    answer = DECISIONS[decision]
    resume = {"decisions": [answer]} if mode == "batched" else answer
    out = env.invoke(agent, Command(resume={asked.id: resume}), CFG)
    assert "__interrupt__" not in out  # asked once
    assert crm.effects + other.effects == 0 or out["messages"][-1].content == "done"
    return crm, other, out


ORDERS = pytest.mark.parametrize("effect_first", [True, False], ids=["effect-first", "hitl-first"])
# Per-call HITL listed inside EffectMiddleware is refused (test_per_call_hitl_inside_...).
ORDER_MODES = pytest.mark.parametrize(
    ("effect_first", "mode"),
    [(True, "batched"), (False, "batched"), (False, "per_call")],
    ids=["effect-first-batched", "hitl-first-batched", "hitl-first-per_call"],
)


@ORDER_MODES
def test_approve_runs_once(env: Env, effect_first: bool, mode: str) -> None:
    """Approved: the effect happens once and is confirmed."""
    crm, other, out = run_review(env, effect_first=effect_first, mode=mode, decision="approve")
    assert (crm.effects, other.effects) == (1, 0)
    [op] = env.ops()
    assert op.status is S.CONFIRMED
    assert tool_messages(out)[0].content == "closed A: fixed"


@ORDER_MODES
def test_edit_binds_the_operation_and_keeps_the_notice(
    env: Env, effect_first: bool, mode: str
) -> None:
    """Edited: the edited call is the operation, runs once, and the model reads HITL's notice."""
    crm, other, out = run_review(env, effect_first=effect_first, mode=mode, decision="edit")
    assert (crm.effects, other.effects) == (1, 0)
    [op] = [o for o in env.ops() if o.status is S.CONFIRMED]
    assert op.payload == {"case_id": "A", "resolution": "edited"}
    [msg] = tool_messages(out)
    assert str(msg.content).endswith("closed A: edited")
    assert "Executed instead: close_case" in str(msg.content)


@ORDERS
def test_edit_redirected_to_another_effect_tool(env: Env, effect_first: bool) -> None:
    """Batched: an edit naming another effect tool runs that effect once, through the ledger.

    (Per-call HITL pins the tool name of an edit.)
    """
    crm, other, out = run_review(
        env, effect_first=effect_first, mode="batched", decision="redirect"
    )
    assert (crm.effects, other.effects) == (0, 1)
    confirmed = [o for o in env.ops() if o.status is S.CONFIRMED]
    assert [o.action for o in confirmed] == ["crm.escalate"]
    [msg] = tool_messages(out)
    assert "Executed instead: escalate" in str(msg.content)
    assert str(msg.content).endswith("escalated A")


@ORDER_MODES
@pytest.mark.parametrize("decision", ["reject", "respond"])
def test_reject_and_respond_send_nothing(
    env: Env, effect_first: bool, mode: str, decision: str
) -> None:
    """Rejected or answered by the reviewer: nothing is sent, the model reads HITL's message."""
    crm, other, out = run_review(env, effect_first=effect_first, mode=mode, decision=decision)
    assert (crm.effects, other.effects) == (0, 0)
    assert not [o for o in env.ops() if o.status is S.CONFIRMED]
    [msg] = tool_messages(out)
    assert DECISIONS[decision]["message"] in str(msg.content)
    assert msg.status == ("error" if decision == "reject" else "success")


def test_per_call_hitl_inside_effect_middleware_is_refused(env: Env) -> None:
    """Per-call HITL listed after EffectMiddleware would let an edit change a call already
    bound to its operation: the first gated call fails with MiddlewareOrderError naming the
    order to use; nothing is sent and no operation is left claimed."""
    crm, other = FakeCRM(), FakeCRM()
    hitl = HumanInTheLoopMiddleware(interrupt_on={"close_case": True}, interrupt_mode="per_call")  # type: ignore[arg-type]
    agent = create_agent(
        ScriptedChatModel(plan=[[CLOSE]]),
        tools=tools(crm, other),
        middleware=[EffectMiddleware(ledger=env.ledger, hitl=hitl), hitl],
        checkpointer=env.checkpointer,
    )
    with pytest.raises(MiddlewareOrderError, match="before EffectMiddleware"):
        env.invoke(agent, {"messages": [("user", "close A")]}, CFG)
    assert (crm.effects, other.effects) == (0, 0)
    assert [op.status for op in env.ops()] in ([], [S.PREPARED])


@pytest.mark.parametrize("env", [("sqlite", "sync"), ("postgres", "async")], indirect=True)
@pytest.mark.parametrize("mode", ["batched", "per_call"])
def test_a_hitl_reject_is_recorded_with_who_refused(env: Env, mode: str) -> None:
    """HITL answers a rejected call without running it; with ``hitl=`` and ``tools=`` its
    operation is recorded rejected, by the run's authenticated user, with the reviewer's
    message; nothing is sent."""
    crm, other = FakeCRM(), FakeCRM()
    effect_tools = tools(crm, other)
    hitl = HumanInTheLoopMiddleware(interrupt_on={"close_case": True}, interrupt_mode=mode)  # type: ignore[arg-type]
    agent = create_agent(
        ScriptedChatModel(plan=[[CLOSE]]),
        tools=effect_tools,
        middleware=[hitl, EffectMiddleware(ledger=env.ledger, hitl=hitl, tools=effect_tools)],
        checkpointer=env.checkpointer,
    )
    config = {"configurable": {"thread_id": "hitl", "langgraph_auth_user": {"identity": "ana"}}}
    first = env.invoke(agent, {"messages": [("user", "close A")]}, config)
    assert len(first["__interrupt__"]) == 1
    reject = DECISIONS["reject"]
    env.invoke(
        agent, Command(resume={"decisions": [reject]} if mode == "batched" else reject), config
    )
    assert (crm.effects, other.effects) == (0, 0)
    [op] = env.ops()
    assert op.status is S.REJECTED
    [event] = [
        e for e in env.ledger_call("events", "default", op.operation_id) if e.kind.value == "reject"
    ]
    assert event.actor == "ana"
    assert "not this one" in (op.error or "")


# -- a batched answer HITL raises on (issue 23: every answer applied) ---------------------

THREE = [call("close_case", f"c-{case}", case_id=case, resolution="fixed") for case in "ABC"]
APPROVE_3 = {"decisions": [{"type": "approve"}] * 3}
MISFITS = {
    "too-few": ({"decisions": [{"type": "approve"}] * 2}, r"2 decision\(s\) for 3 action"),
    "not-offered": (
        {"decisions": [{"type": "approve"}, {"type": "maybe"}, {"type": "approve"}]},
        r"decision 2 \('maybe'\) is not offered for 'close_case'",
    ),
    "no-decisions": ({"type": "approve"}, r"answer \{'decisions'"),
}


def three_closes(env: Env, crm: FakeCRM, *, effects: bool) -> Any:
    """create_agent asking HITL's batched approval of three closes, with or without
    ``EffectMiddleware(hitl=...)``."""
    hitl = HumanInTheLoopMiddleware(interrupt_on={"close_case": True})
    middleware: list[Any] = [hitl]
    if effects:
        middleware.append(EffectMiddleware(ledger=env.ledger, hitl=hitl, anonymous_answers=True))
    return create_agent(
        ScriptedChatModel(plan=[THREE]),
        tools=tools(crm, FakeCRM())[:1],
        middleware=middleware,
        checkpointer=env.checkpointer,
    )


@pytest.mark.parametrize("misfit", sorted(MISFITS))
def test_a_malformed_batched_answer_is_refused_and_the_next_applies(env: Env, misfit: str) -> None:
    """A batched answer HITL raises on (too few decisions, a type not offered, no
    'decisions') is refused: the same request is asked again at once, its interrupt id
    unchanged, saying why in front of each action request's description; the next valid
    answer, given by position as Agent Chat UI does, applies: 3 closes intended, 3 sent
    at the fake CRM, never more (a later answer sends nothing)."""
    crm = FakeCRM()
    agent = three_closes(env, crm, effects=True)
    [asked] = env.invoke(agent, {"messages": [("user", "close A, B, C")]}, CFG)["__interrupt__"]
    bad, why = MISFITS[misfit]
    [again] = env.refused(agent, Command(resume=bad), CFG, why)
    assert again.id == asked.id
    assert [a["args"]["case_id"] for a in again.value["action_requests"]] == ["A", "B", "C"]
    assert all(
        a["description"].startswith(again.value["notice"]) for a in again.value["action_requests"]
    )
    assert crm.effects == 0

    out = env.invoke(agent, Command(resume=APPROVE_3), CFG)
    assert "__interrupt__" not in out
    assert [crm.effects_for(case) for case in "ABC"] == [1, 1, 1]
    assert [op.status for op in env.ops()] == [S.CONFIRMED] * 3
    env.invoke(agent, Command(resume=APPROVE_3), CFG)  # answered again: nothing more
    assert crm.effects == 3


@pytest.mark.parametrize("env", BACKENDS[1:], indirect=True)
def test_a_refused_batched_answer_then_one_by_id_and_a_resume_without_value(env: Env) -> None:
    """After a refused answer given by position, a resume without a value (``invoke(None)``)
    is refused again with the same reason (LangGraph still holds that answer), and a valid
    answer by interrupt id applies: 3 closes sent once each."""
    crm = FakeCRM()
    agent = three_closes(env, crm, effects=True)
    env.invoke(agent, {"messages": [("user", "close A, B, C")]}, CFG)
    bad, why = MISFITS["too-few"]
    [again] = env.refused(agent, Command(resume=bad), CFG, why)
    env.refused(agent, None, CFG, why)
    out = env.invoke(agent, Command(resume={again.id: APPROVE_3}), CFG)
    assert "__interrupt__" not in out
    assert [crm.effects_for(case) for case in "ABC"] == [1, 1, 1]


@pytest.mark.parametrize("env", BACKENDS[1:], indirect=True)
def test_plain_hitl_keeps_a_malformed_batched_answer(env: Env) -> None:
    """The upstream behaviour ``EffectMiddleware(hitl=...)`` guards (control, no effects
    ledger): LangGraph keeps the answer HITL raised on and hands it to HITL on every later
    run, so every later answer, valid or not, fails on it: 3 closes intended, 0 sent. If
    this starts passing without the guard, HITL or LangGraph fixed it upstream."""
    crm = FakeCRM()
    agent = three_closes(env, crm, effects=False)
    env.invoke(agent, {"messages": [("user", "close A, B, C")]}, CFG)
    for answer in (MISFITS["too-few"][0], APPROVE_3, APPROVE_3):
        with pytest.raises(ValueError, match=r"Number of human decisions \(2\)"):
            env.invoke(agent, Command(resume=answer), CFG)
    assert crm.effects == 0


@pytest.mark.parametrize("env", BACKENDS[1:], indirect=True)
def test_a_thread_wedged_by_plain_hitl_is_freed_by_the_guard(env: Env) -> None:
    """A thread wedged without the guard (LangGraph kept the answer HITL raised on) and
    run on by an agent with ``EffectMiddleware(hitl=...)``: the kept answer is dropped and
    the next valid answer applies at once: 3 closes sent once each, none again on a
    resume without a value."""
    crm = FakeCRM()
    plain = three_closes(env, crm, effects=False)
    env.invoke(plain, {"messages": [("user", "close A, B, C")]}, CFG)
    with pytest.raises(ValueError, match="Number of human decisions"):
        env.invoke(plain, Command(resume=MISFITS["too-few"][0]), CFG)
    guarded = three_closes(env, crm, effects=True)
    out = env.invoke(guarded, Command(resume=APPROVE_3), CFG)
    assert "__interrupt__" not in out
    assert [crm.effects_for(case) for case in "ABC"] == [1, 1, 1]
    env.invoke(guarded, None, CFG)
    assert crm.effects == 3
