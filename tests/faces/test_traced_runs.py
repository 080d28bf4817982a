"""Every effect decision is a run of its own for LangChain's tracers (issue 26, finding 6).

A replayed call runs no tool, so without its own run a tracer (LangSmith, Langfuse,
``astream_events``) shows a tools node that did nothing. Each decision, dispatched,
replayed, reconciled, reviewed or refused, is reported as a child run of the tools node,
named ``<tool> (<via>)``, with the tool, operation id, status and ``via`` in its tags and
metadata. A handler that records runs, as a tracer does, under ``EffectToolNode`` and
``create_agent`` + ``EffectMiddleware``, sync and async; effects counted at a fake CRM.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from _graphs import Env, call, tool_messages
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command

from langgraph_effects import (
    EffectContext,
    EffectMiddleware,
    EffectState,
    EffectToolNode,
    Evidence,
    Operation,
    effect,
    route_tool_calls,
)
from langgraph_effects._faces import TRACE_TAG
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.providers import FakeCRM, Fault

BACKENDS = [("memory", "sync"), ("sqlite", "async")]


@pytest.fixture
def crm(tmp_path: Path) -> FakeCRM:
    return FakeCRM(path=tmp_path / "crm.db")


class Recorder(BaseCallbackHandler):
    """The chain and tool runs a tracer is told about, by run id."""

    def __init__(self) -> None:
        self.runs: dict[UUID, dict[str, Any]] = {}

    def _start(self, kind: str, run_id: UUID, parent: UUID | None, **kwargs: Any) -> None:
        self.runs[run_id] = {
            "kind": kind,
            "name": kwargs.get("name"),
            "parent": parent,
            "tags": list(kwargs.get("tags") or []),
            "metadata": dict(kwargs.get("metadata") or {}),
        }

    def on_chain_start(
        self,
        serialized: Any,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._start("chain", run_id, parent_run_id, **kwargs)
        self.runs[run_id]["inputs"] = inputs

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.runs[run_id]["outputs"] = outputs

    def on_tool_start(
        self,
        serialized: Any,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs["name"] = kwargs.get("name") or (serialized or {}).get("name")
        self._start("tool", run_id, parent_run_id, **kwargs)

    def decisions(self) -> list[dict[str, Any]]:
        return [r for r in self.runs.values() if TRACE_TAG in r["tags"]]

    def tool_runs(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.runs.values() if r["kind"] == "tool" and r["name"] == name]

    def decided(self, tool: str, via: str, op: Operation) -> dict[str, Any]:
        """The one decision run, checked: its name, tags, metadata, parent and output."""
        [run] = self.decisions()
        assert run["name"] == f"{tool} ({via})"
        assert {TRACE_TAG, f"effect:{via}", f"tool:{tool}", f"operation:{op.operation_id}"} <= set(
            run["tags"]
        )
        assert (
            run["metadata"]
            | {
                "effect_tool": tool,
                "effect_action": op.action,
                "effect_operation_id": op.operation_id,
                "effect_status": op.status.value,
                "effect_via": via,
            }
            == run["metadata"]
        )
        assert run["metadata"]["thread_id"] == "t1"  # the node's own metadata, inherited
        assert self.runs[run["parent"]]["name"] == "tools"  # a child of the tools node
        assert run["inputs"]["name"] == tool
        [answer] = _messages(run["outputs"]["output"])
        assert answer.response_metadata["langgraph_effects"]["via"] == via
        return run


def _messages(answer: Any) -> list[ToolMessage]:
    if isinstance(answer, Command):
        answer = answer.update["messages"]
    return answer if isinstance(answer, list) else [answer]  # type: ignore[no-any-return]


class State(MessagesState, EffectState):
    pass


def refund_tool(crm: FakeCRM, **kwargs: Any) -> Any:
    @effect("pay.refund", target=lambda a: a["order_id"], **kwargs)
    def refund(order_id: str, amount: int, ctx: EffectContext) -> str:
        """Refund an order."""
        crm.close_case(order_id, f"refund {amount}")  # no key: every send is an effect
        return f"refunded {amount} on {order_id}"

    return refund


def graph_of(env: Env, node: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("tools", node)
    builder.add_conditional_edges(START, route_tool_calls, ["tools", END])
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=env.checkpointer)


ASK = {
    "messages": [
        AIMessage(
            "",
            tool_calls=[{"name": "refund", "args": {"order_id": "o-1", "amount": 10}, "id": "c1"}],
            id="ai-1",
        )
    ]
}


def traced(recorder: Recorder) -> dict[str, Any]:
    return {"configurable": {"thread_id": "t1"}, "callbacks": [recorder]}


def fork_before_tools(env: Env, graph: Any) -> Any:
    """The checkpoint just before the tools node ran (time travel)."""
    cfg = {"configurable": {"thread_id": "t1"}}
    if env.is_async:

        async def collect() -> list[Any]:
            return [s async for s in graph.aget_state_history(cfg)]

        history = env.run(collect())
    else:
        history = list(graph.get_state_history(cfg))
    return next(s for s in history if s.next == ("tools",)).config


def test_a_dispatch_and_its_replay_are_two_decisions_one_effect(env: Env, crm: FakeCRM) -> None:
    """First run: ``refund (dispatched)`` beside the tool's own run. Replayed from a fork:
    ``refund (replayed)`` and no tool run at all; the CRM counts one refund."""
    graph = graph_of(env, EffectToolNode([refund_tool(crm)], ledger=env.ledger))
    first = Recorder()
    env.invoke(graph, ASK, traced(first))
    [op] = env.ops()
    first.decided("refund", "dispatched", op)
    assert len(first.tool_runs("refund")) == 1
    assert crm.effects == 1

    replay = Recorder()
    fork = fork_before_tools(env, graph)
    env.invoke(graph, None, {**fork, "callbacks": [replay]})
    replay.decided("refund", "replayed", op)
    assert replay.tool_runs("refund") == []  # nothing ran: the run above is all there is
    assert crm.effects == 1


def test_a_reconciled_outcome_is_traced_as_reconciled(env: Env, crm: FakeCRM) -> None:
    """The provider acted and the answer was lost; the reconciler settles it:
    ``refund (reconciled)``, one effect."""
    crm.faults.script([Fault.LOSE_RESPONSE])

    def found(op: Operation) -> Evidence:
        return Evidence.confirmed(result="refunded (seen by the reconciler)")

    graph = graph_of(env, EffectToolNode([refund_tool(crm, reconcile=found)], ledger=env.ledger))
    recorder = Recorder()
    env.invoke(graph, ASK, traced(recorder))
    [op] = env.ops()
    recorder.decided("refund", "reconciled", op)
    assert crm.effects == 1


def test_a_review_is_traced_when_answered_not_when_asked(env: Env, crm: FakeCRM) -> None:
    """An unknown outcome asks a person: no decision run while the question is open; the
    answer (reject: nothing resent) is ``refund (reviewed)``; the CRM counts the one lost send."""
    crm.faults.script([Fault.LOSE_RESPONSE])
    graph = graph_of(env, EffectToolNode([refund_tool(crm)], ledger=env.ledger))
    asked = Recorder()
    env.invoke(graph, ASK, traced(asked))
    assert asked.decisions() == []
    [op] = env.ops()
    answered = Recorder()
    answer = {"operation_id": op.operation_id, "decision": "reject", "by": "ana", "reason": "no"}
    env.invoke(graph, Command(resume=answer), traced(answered))
    [op] = env.ops()
    answered.decided("refund", "reviewed", op)
    assert crm.effects == 1


def test_a_refusal_is_traced_as_refused(env: Env, crm: FakeCRM) -> None:
    """The effect's authorize hook says no: ``refund (refused)``, nothing sent."""
    graph = graph_of(
        env, EffectToolNode([refund_tool(crm, authorize=lambda ctx: False)], ledger=env.ledger)
    )
    recorder = Recorder()
    env.invoke(graph, ASK, traced(recorder))
    [op] = env.ops()
    recorder.decided("refund", "refused", op)
    assert crm.effects == 0


def test_create_agent_with_the_middleware_traces_the_dispatch_and_the_replay(
    env: Env, crm: FakeCRM
) -> None:
    """create_agent + EffectMiddleware: the same runs, ``refund (dispatched)`` then, from a
    fork, ``refund (replayed)`` with no tool run; one effect."""
    refund = call("refund", "c1", order_id="o-1", amount=10)
    agent = create_agent(
        ScriptedChatModel(plan=[[refund]]),
        tools=[refund_tool(crm)],
        middleware=[EffectMiddleware(ledger=env.ledger)],
        checkpointer=env.checkpointer,
    )
    first = Recorder()
    out = env.invoke(agent, {"messages": [("user", "refund o-1")]}, traced(first))
    [op] = env.ops()
    first.decided("refund", "dispatched", op)
    assert [m.status for m in tool_messages(out)] == ["success"]

    replay = Recorder()
    env.invoke(agent, None, {**fork_before_tools(env, agent), "callbacks": [replay]})
    replay.decided("refund", "replayed", op)
    assert replay.tool_runs("refund") == []
    assert crm.effects == 1
