"""A receipt is kept while the process lives, whatever its siblings do (issue 23, finding 5).

One task per call (``route_tool_calls``, ``create_agent``), under ``ainvoke``: a
sibling task raises while an effect's provider call is in flight. LangGraph
cancels the effect's task (and cancels it again on its way out); the provider
call finishes, its receipt is written, then the cancellation is obeyed. Counted
at a fake provider over many rounds, on SQLite and PostgreSQL: every call acted
once, every record ``confirmed``, and the resumed thread replays it (never a
second call).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from _graphs import Env, build_graph, call
from langchain.agents import create_agent
from langchain_core.tools import tool

from langgraph_effects import EffectMiddleware, effect
from langgraph_effects.core.model import OperationStatus
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.faults import scaled

ROUNDS = 12


class Payments:
    """The third-party provider: counts each refund it made, by target."""

    def __init__(self) -> None:
        self.refunds: list[str] = []


def _tools(provider: Payments, failing: set[str]) -> list[Any]:
    """An effect whose provider is still at work when its sibling, a plain tool, raises."""
    events: dict[tuple[str, str], asyncio.Event] = {}

    def event(what: str, order: str) -> asyncio.Event:
        return events.setdefault((what, order), asyncio.Event())

    @effect("payments.refund", target=lambda a: a["order"])
    async def refund(order: str) -> dict[str, Any]:
        """Refund an order."""
        if order in failing:
            event("dispatched", order).set()
            await asyncio.wait_for(event("raised", order).wait(), scaled(10))
            await asyncio.sleep(0.02)  # LangGraph cancels this task meanwhile
        provider.refunds.append(order)
        return {"refunded": order}

    @tool
    async def audit(order: str) -> str:
        """Audit an order (fails while ``order`` is in ``failing``)."""
        if order in failing:
            # the refund's provider is at work:
            await asyncio.wait_for(event("dispatched", order).wait(), scaled(10))
            event("raised", order).set()
            raise RuntimeError(f"audit of {order} failed")
        return "audited"

    return [refund, audit]


def _calls(order: str) -> list[dict[str, Any]]:
    return [call("refund", f"r-{order}", order=order), call("audit", f"a-{order}", order=order)]


def _graph(face: str, order: str, tools: list[Any], env: Env) -> Any:
    if face == "route_tool_calls":
        return build_graph(tools, _calls(order), ledger=env.ledger, checkpointer=env.checkpointer)
    return create_agent(
        ScriptedChatModel(plan=[_calls(order)]),
        tools=tools,
        middleware=[EffectMiddleware(ledger=env.ledger)],
        checkpointer=env.checkpointer,
    )


def _rounds(env: Env, face: str) -> None:
    provider = Payments()
    orders = [f"o{i}" for i in range(ROUNDS)]
    failing = set(orders)
    tools = _tools(provider, failing)
    for order in orders:
        graph = _graph(face, order, tools, env)
        config = {"configurable": {"thread_id": order}}
        with pytest.raises(RuntimeError, match=f"audit of {order} failed"):
            env.invoke(graph, {"messages": [("user", f"refund {order}")]}, config)
        [op] = [o for o in env.ops() if o.target == order]
        assert op.status is OperationStatus.CONFIRMED, (order, op.status)
    assert sorted(provider.refunds) == sorted(orders)  # every refund acted, once

    failing.clear()  # the audits pass now: each thread resumes its failed superstep
    for order in orders:
        graph = _graph(face, order, tools, env)
        env.invoke(graph, None, {"configurable": {"thread_id": order}})
    assert sorted(provider.refunds) == sorted(orders)  # replayed, never sent again
    assert {o.status for o in env.ops()} == {OperationStatus.CONFIRMED}


@pytest.mark.parametrize("face", ["route_tool_calls", "create_agent"])
def test_a_sibling_raising_mid_dispatch_leaves_the_receipt_written_sqlite(
    tmp_path: Path, face: str
) -> None:
    """SQLite, async: a sibling raising while the provider works never loses the receipt."""
    env = Env("sqlite", "async", path=tmp_path / "app.db")
    try:
        _rounds(env, face)
    finally:
        env.close()


@pytest.mark.parametrize("face", ["route_tool_calls", "create_agent"])
def test_a_sibling_raising_mid_dispatch_leaves_the_receipt_written_postgres(
    pg_url: str, face: str
) -> None:
    """PostgreSQL, async: a sibling raising while the provider works never loses the receipt."""
    env = Env("postgres", "async", url=pg_url)
    try:
        _rounds(env, face)
    finally:
        env.close()
