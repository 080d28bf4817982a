"""What a child process runs in the answer tests: answer thread t1's pending approval, and die.

Module-level and picklable, so ``run_in_child`` can spawn it: the child answers
``approve`` and is killed at ``AFTER_ANSWER`` (the ledger applied it, LangGraph
has not saved it); the test process, a fresh process for the ledger, goes on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _graphs import Env, build_graph, call
from langgraph.types import Command

from langgraph_effects import EffectContext, EffectMiddleware, effect
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.providers import FakeCRM

CFG = {"configurable": {"thread_id": "t1"}}
APPROVE = {"decisions": [{"type": "approve"}], "by": "ana"}


def gated_graph(env: Env, crm: FakeCRM) -> Any:
    """agent -> tools with one call that needs a person's approval first."""

    @effect("crm.close_case", target=lambda a: a["case_id"], require_approval=True)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case (a person approves first)."""
        return crm.close_case(case_id, resolution)  # no key: every send is an effect

    return build_graph(
        [close_case],
        [call("close_case", "call-a", case_id="A", resolution="fixed")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )


def answer(kind: str, mode: str, where: str, crm_path: str, durability: str | None) -> None:
    """Answer t1's pending approval with ``approve`` (the test arms the crash)."""
    env = Env(kind, mode, path=Path(where), url=where)
    crm = FakeCRM(crm_path)
    try:
        env.invoke(gated_graph(env, crm), Command(resume=APPROVE), CFG, durability=durability)
    finally:
        crm.close()
        env.close()


def nobody(claimed: str | None) -> Any:
    """An identity hook that verified nobody (returns None instead of raising)."""
    return None


def signed_in(claimed: str | None) -> str:
    """An identity hook: the signed-in operator, whatever name is given."""
    return "olga"


def answer_by_id(
    kind: str, mode: str, where: str, crm_path: str, interrupt_id: str, request_id: str
) -> None:
    """Answer t1's pending approval with ``approve`` by interrupt id, echoing the request's
    ``request_id`` (the test arms the crash)."""
    env = Env(kind, mode, path=Path(where), url=where)
    crm = FakeCRM(crm_path)
    try:
        value = {**APPROVE, "request_id": request_id}
        env.invoke(gated_graph(env, crm), Command(resume={interrupt_id: value}), CFG)
    finally:
        crm.close()
        env.close()


BATCH_CFG = {"configurable": {"thread_id": "t2"}}
APPROVE_BOTH = {"decisions": [{"type": "approve"}] * 2, "by": "ana"}


def batched_agent(env: Env, crm: FakeCRM) -> Any:
    """create_agent closing A and B, both approved in one batched request first."""
    from langchain.agents import create_agent

    @effect("crm.close_case", target=lambda a: a["case_id"], require_approval=True)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> str:
        """Close a CRM case (a person approves first)."""
        crm.close_case(case_id, resolution)  # no key: every send is an effect
        return f"closed {case_id}"

    calls = [call("close_case", f"call-{c}", case_id=c, resolution="fixed") for c in "AB"]
    effects = EffectMiddleware(ledger=env.ledger, approvals="batched", tools=[close_case])
    return create_agent(
        ScriptedChatModel(plan=[calls]),
        tools=[close_case],
        middleware=[effects],
        checkpointer=env.checkpointer,
    )


def answer_batch_by_id(
    kind: str, mode: str, where: str, crm_path: str, interrupt_id: str, request_id: str
) -> None:
    """Approve t2's pending batch by interrupt id, echoing its ``request_id`` (the test
    arms the crash after the first decision is applied)."""
    env = Env(kind, mode, path=Path(where), url=where)
    crm = FakeCRM(crm_path)
    try:
        value = {**APPROVE_BOTH, "request_id": request_id}
        env.invoke(batched_agent(env, crm), Command(resume={interrupt_id: value}), BATCH_CFG)
    finally:
        crm.close()
        env.close()
