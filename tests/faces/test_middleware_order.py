"""ToolRetryMiddleware and EffectMiddleware in ``create_agent``: a body runs once per dispatch.

Listed after ``EffectMiddleware``, ToolRetryMiddleware would re-enter the tool
body inside one dispatch (the provider acting twice, the ledger recording one
operation): the second entry raises ``MiddlewareOrderError`` before the provider
is called again. Listed before it, it retries the whole decision, which the
ledger answers from the record. The real ToolRetryMiddleware is used (every
default but ``initial_delay``, zero to keep the tests fast); the provider keeps
no idempotency key, so a second entry would be a second effect.
"""

from __future__ import annotations

from typing import Any

import pytest
from _graphs import Env, call, tool_messages
from langchain.agents import create_agent
from langchain.agents.middleware import ToolRetryMiddleware
from langchain_core.tools import tool

from langgraph_effects import EffectMiddleware, Evidence, MiddlewareOrderError, effect
from langgraph_effects.core.model import OperationStatus
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.providers import FakeCRM, Fault

S = OperationStatus
CFG = {"configurable": {"thread_id": "order"}}
CLOSE = call("close_case", "c1", case_id="A", resolution="fixed")


def close_tool(crm: FakeCRM, *, reconcile: bool = True) -> Any:
    """An effect over a provider without idempotency keys: every entry of its body acts."""

    def find(op: Any) -> Evidence:
        if crm.get_case(op.target)["status"] == "closed":
            return Evidence.confirmed("the case is closed", result={"closed": op.target})
        return Evidence.inconclusive("still open")

    @effect("crm.close_case", target=lambda a: a["case_id"], reconcile=find if reconcile else None)
    def close_case(case_id: str, resolution: str) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution)

    return close_case


def agent(env: Env, crm: FakeCRM, middleware: list[Any], **tool_kw: Any) -> Any:
    return create_agent(
        ScriptedChatModel(plan=[[CLOSE]]),
        tools=[close_tool(crm, **tool_kw)],
        middleware=middleware,
        checkpointer=env.checkpointer,
    )


def retry() -> ToolRetryMiddleware:
    return ToolRetryMiddleware(initial_delay=0.0, jitter=False)


@pytest.mark.parametrize("fault", [Fault.LOSE_RESPONSE, Fault.TRANSIENT])
def test_tool_retry_listed_after_is_refused_before_a_second_act(env: Env, fault: Fault) -> None:
    """Listed after EffectMiddleware, ToolRetryMiddleware's retry raises MiddlewareOrderError
    naming the order before the provider is called again (1 act for a lost response, 0 for a
    transient refusal); the agent rebuilt in the right order then settles it: 1 act in all."""
    crm = FakeCRM()
    crm.faults.push(fault, retry_after=0.0)
    effects = EffectMiddleware(ledger=env.ledger)
    wrong = agent(env, crm, [effects, retry()])
    with pytest.raises(MiddlewareOrderError, match=r"ToolRetryMiddleware before EffectMiddleware"):
        env.invoke(wrong, {"messages": [("user", "close A")]}, CFG)
    assert crm.effects == (1 if fault is Fault.LOSE_RESPONSE else 0)
    [op] = env.ops()
    # The first entry's outcome is recorded: an ambiguous failure, or nothing sent.
    assert op.status is (S.UNKNOWN if fault is Fault.LOSE_RESPONSE else S.PREPARED)

    right = agent(env, crm, [retry(), EffectMiddleware(ledger=env.ledger)])
    out = env.invoke(right, None, CFG)
    assert crm.effects == 1
    assert [o.status for o in env.ops()] == [S.CONFIRMED]
    assert tool_messages(out)[-1].status == "success"


def test_tool_retry_listed_before_is_safe(env: Env) -> None:
    """Listed before EffectMiddleware, ToolRetryMiddleware never meets the lost response:
    the ledger reconciles it inside the decision; the provider acts once and the call is
    confirmed."""
    crm = FakeCRM()
    crm.faults.push(Fault.LOSE_RESPONSE)
    out = env.invoke(
        agent(env, crm, [retry(), EffectMiddleware(ledger=env.ledger)]),
        {"messages": [("user", "close A")]},
        CFG,
    )
    assert crm.effects == 1
    [op] = env.ops()
    assert op.status is S.CONFIRMED
    assert tool_messages(out)[-1].status == "success"


def test_the_model_reads_could_not_confirm_never_please_try_again(env: Env) -> None:
    """With nothing to reconcile and no review asked, the model reads that the outcome
    could not be confirmed (ToolRetryMiddleware's "Please try again" never reaches it):
    one act, the operation left unknown for a person."""
    crm = FakeCRM()
    crm.faults.push(Fault.LOSE_RESPONSE)
    effects = EffectMiddleware(ledger=env.ledger, interrupt_on_unknown=False)
    out = env.invoke(
        agent(env, crm, [retry(), effects], reconcile=False),
        {"messages": [("user", "close A")]},
        CFG,
    )
    assert crm.effects == 1
    [op] = env.ops()
    assert op.status is S.UNKNOWN
    [message] = tool_messages(out)
    assert "could not confirm" in str(message.content)
    assert "try again" not in str(message.content).lower()


def test_control_tool_retry_over_a_plain_tool_acts_three_times() -> None:
    """The control: ToolRetryMiddleware's defaults over a plain tool resend a lost
    response blindly (3 acts for 1 intent), and the model is told to try again."""
    from langgraph.checkpoint.memory import InMemorySaver

    crm = FakeCRM()
    crm.faults.push(Fault.LOSE_RESPONSE, times=3)

    @tool
    def close_case(case_id: str, resolution: str) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution)

    plain = create_agent(
        ScriptedChatModel(plan=[[CLOSE]]),
        tools=[close_case],
        middleware=[retry()],
        checkpointer=InMemorySaver(),
    )
    out = plain.invoke({"messages": [("user", "close A")]}, CFG)
    assert crm.effects == 3
    assert "try again" in str(tool_messages(out)[-1].content).lower()
