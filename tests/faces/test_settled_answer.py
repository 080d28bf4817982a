"""``effect(..., answer=...)``: the answer rebuilt from a confirmed record, and bad input.

The crash paths (a ``Command`` effect reconciled or reviewed after a real kill) are in
``tests/kills/test_settled_command.py``; here, what needs no crash.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired

import pytest
from _graphs import Env, build_graph, call, tool_messages
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import ToolMessage
from langchain_core.tools import InjectedToolCallId
from langgraph.types import Command

from langgraph_effects import (
    EffectContext,
    EffectMiddleware,
    EffectsError,
    Evidence,
    InvalidInput,
    effect,
)
from langgraph_effects.core.model import OperationStatus
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.providers import FakeCRM, Fault

S = OperationStatus
BACKENDS = [("sqlite", "sync"), ("sqlite", "async")]
CFG = {"configurable": {"thread_id": "answer"}}
CLOSE = call("close_case", "c1", case_id="A", resolution="fixed")


def close_tool(crm: FakeCRM, answer: Any) -> Any:
    @effect("crm.close_case", target=lambda a: a["case_id"], answer=answer)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    return close_case


def test_answer_must_be_callable() -> None:
    """A non-callable ``answer=`` is refused when the effect is declared, naming the effect."""
    with pytest.raises(InvalidInput, match=r"'crm.close_case': answer must be a callable"):
        effect("crm.close_case", answer="closed")  # type: ignore[arg-type]


def test_a_plain_return_answers_through_answer_on_the_first_run_and_every_replay(
    env: Env,
) -> None:
    """With ``answer=``, a plain return's record answers through it on the first run and on
    a replay alike (given the operation and its result); the provider acts once."""
    crm = FakeCRM()
    seen: list[Any] = []

    def answer(op: Any, result: Any) -> str:
        seen.append((op.status, result["version"]))
        return f"case {op.target} closed at version {result['version']}"

    graph = build_graph(
        [close_tool(crm, answer)], [CLOSE], ledger=env.ledger, checkpointer=env.checkpointer
    )
    first = env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    before = next(
        s
        for s in (
            list(graph.get_state_history(CFG))
            if not env.is_async
            else env.run(_alist(graph.aget_state_history(CFG)))
        )
        if s.next == ("tools",)
    )
    again = env.invoke(graph, None, before.config)
    assert crm.effects == 1
    for out in (first, again):
        [message] = tool_messages(out)
        assert message.content == "case A closed at version 1"
    assert seen == [(S.CONFIRMED, 1), (S.CONFIRMED, 1)]


def test_an_answer_that_raises_fails_the_step_and_sends_nothing_again(env: Env) -> None:
    """``answer=`` raising fails the step with an error naming the effect and the confirmed
    operation; running the step again replays (still failing), never resends."""
    crm = FakeCRM()

    def answer(op: Any, result: Any) -> Any:
        raise KeyError("refund_id")

    graph = build_graph(
        [close_tool(crm, answer)], [CLOSE], ledger=env.ledger, checkpointer=env.checkpointer
    )
    with pytest.raises(EffectsError, match=r"'crm.close_case': its answer= raised KeyError"):
        env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    with pytest.raises(EffectsError, match="is confirmed and will not be sent again"):
        env.invoke(graph, None, CFG)
    assert crm.effects == 1
    assert [op.status for op in env.ops()] == [S.CONFIRMED]


async def _alist(items: Any) -> list[Any]:
    return [item async for item in items]


class NoteState(AgentState[Any]):
    note: NotRequired[str]


class Notes(AgentMiddleware[NoteState, Any, Any]):
    """Adds the ``note`` key a Command effect writes to the agent's state."""

    state_schema = NoteState


def command_tool(crm: FakeCRM, *, answer: bool) -> Any:
    def noted(case_id: str, version: Any, tool_call_id: str) -> Command[Any]:
        return Command(
            update={
                "note": f"closed {case_id} v{version}",
                "messages": [ToolMessage(f"closed {case_id}", tool_call_id=tool_call_id)],
            }
        )

    def find(op: Any) -> Evidence:
        case = crm.get_case(op.target)
        return Evidence.confirmed("closed under our key", result={"version": case["version"]})

    def settled(op: Any, result: Any) -> Command[Any]:
        return noted(op.target, result["version"], op.tool_call_id)

    @effect(
        "crm.close_case",
        target=lambda a: a["case_id"],
        reconcile=find,
        answer=settled if answer else None,
    )
    def close_case(
        case_id: str, ctx: EffectContext, tool_call_id: Annotated[str, InjectedToolCallId]
    ) -> Command[Any]:
        """Close a CRM case and note it."""
        case = crm.close_case(case_id, "fixed", idempotency_key=ctx.idempotency_key)
        return noted(case_id, case["version"], tool_call_id)

    return close_case


@pytest.mark.parametrize("answer", [True, False])
def test_create_agent_a_reconciled_command_effect_keeps_its_update(env: Env, answer: bool) -> None:
    """EffectMiddleware: a Command effect whose response was lost is reconciled in the same
    run; with ``answer=`` its update lands as on an uncrashed run, without it the documented
    plain ToolMessage (the recorded result) answers and the update is lost. One act."""
    crm = FakeCRM()
    crm.faults.push(Fault.LOSE_RESPONSE)
    agent = create_agent(
        ScriptedChatModel(plan=[[call("close_case", "c1", case_id="A")]]),
        tools=[command_tool(crm, answer=answer)],
        middleware=[Notes(), EffectMiddleware(ledger=env.ledger)],
        checkpointer=env.checkpointer,
    )
    out = env.invoke(agent, {"messages": [("user", "close A")]}, CFG)
    assert crm.effects == 1
    [message] = tool_messages(out)
    if answer:
        assert out["note"] == "closed A v1"
        assert message.content == "closed A"
    else:
        assert "note" not in out
        assert message.content == '{"version": 1}'
