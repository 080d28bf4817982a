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
