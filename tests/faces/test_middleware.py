"""EffectMiddleware in ``create_agent``, EffectToolNode in ``create_react_agent``, with HITL."""

from __future__ import annotations

from typing import Any

import pytest
from _graphs import Env, call, tool_messages
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langgraph.types import Command

from langgraph_effects import EffectContext, EffectMiddleware, EffectToolNode, Evidence, effect
from langgraph_effects.core.model import OperationStatus
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.providers import FakeCRM, Fault

S = OperationStatus
CFG = {"configurable": {"thread_id": "t1"}}
BACKENDS = [("memory", "sync"), ("sqlite", "sync"), ("sqlite", "async")]


def close_tool(crm: FakeCRM, **kw: Any) -> Any:
    def find(op: Any) -> Evidence:
        if crm.get_case(op.target)["closed_by"] == op.idempotency_key:
            return Evidence.confirmed("closed under our key", result={"closed": op.target})
        return Evidence.inconclusive("not yet")

    @effect("crm.close_case", target=lambda a: a["case_id"], reconcile=find, **kw)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    return close_case


CLOSE = call("close_case", "c1", case_id="A", resolution="fixed")


def test_create_agent_lost_response_reconciled(env: Env) -> None:
    """create_agent + EffectMiddleware: a lost response is reconciled, the provider counts 1."""
    crm = FakeCRM()
    crm.faults.push(Fault.LOSE_RESPONSE)
    agent = create_agent(
        ScriptedChatModel(plan=[[CLOSE]]),
        tools=[close_tool(crm)],
        middleware=[EffectMiddleware(ledger=env.ledger)],
        checkpointer=env.checkpointer,
    )
    out = env.invoke(agent, {"messages": [("user", "close A")]}, CFG)
    [op] = env.ops()
    assert op.status is S.CONFIRMED
    assert crm.effects == 1
    assert out["effect_operations"] == [op.operation_id]
    assert tool_messages(out)[0].status == "success"


@pytest.mark.parametrize("hitl_first", [True, False])
def test_hitl_edit_binds_and_is_not_asked_twice(env: Env, hitl_first: bool) -> None:
    """With HumanInTheLoopMiddleware in either order: one question, the edit is the operation."""
    crm = FakeCRM()
    hitl = HumanInTheLoopMiddleware(interrupt_on={"close_case": True})
    # No server here to name the approver: HITL's approval is recorded as anonymous.
    effects = EffectMiddleware(ledger=env.ledger, hitl=hitl, anonymous_answers=True)
    agent = create_agent(
        ScriptedChatModel(plan=[[CLOSE]]),
        tools=[close_tool(crm, require_approval=True)],
        middleware=[hitl, effects] if hitl_first else [effects, hitl],
        checkpointer=env.checkpointer,
    )
    env.invoke(agent, {"messages": [("user", "close A")]}, CFG)
    edit = {
        "type": "edit",
        "edited_action": {"name": "close_case", "args": {"case_id": "A", "resolution": "edited"}},
    }
    out = env.invoke(agent, Command(resume={"decisions": [edit]}), CFG)
    state = agent.get_state(CFG) if not env.is_async else env.run(agent.aget_state(CFG))
    assert not [i for t in state.tasks for i in t.interrupts]  # never asked a second time
    [op] = env.ops()
    assert op.status is S.CONFIRMED
    assert op.payload == {"case_id": "A", "resolution": "edited"}
    assert crm.effects == 1
    assert out["messages"][-1].content == "done"


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
def test_create_react_agent_with_effect_tool_node(env: Env) -> None:
    """EffectToolNode works as create_react_agent's tool node; a replay does not resend."""
    if env.is_async:
        pytest.skip("create_react_agent is covered sync")
    from langgraph.prebuilt import create_react_agent

    crm = FakeCRM()
    agent = create_react_agent(
        ScriptedChatModel(plan=[[CLOSE]]),
        EffectToolNode([close_tool(crm)], ledger=env.ledger),
        checkpointer=env.checkpointer,
    )
    env.invoke(agent, {"messages": [("user", "close A")]}, CFG)
    before = next(s for s in agent.get_state_history(CFG) if s.next == ("tools",))
    env.invoke(agent, None, before.config)
    assert crm.effects == 1
    assert env.ops()[0].status is S.CONFIRMED
