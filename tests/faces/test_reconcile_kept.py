"""A cancelled task takes no lease to send again, and what its reconciler learned is kept
or left untouched, never half written (issue 23, finding 5).

One task per call (``route_tool_calls``, ``create_agent``), under ``ainvoke``: an
``unknown`` refund, whose provider honours its key, is being reconciled when a sibling
task raises, and LangGraph cancels the refund's task (then again on its way out). An
async reconciler is awaited in the task: cut short, it records nothing and the record
stays ``unknown``, as it was. A sync one runs in a worker thread and finishes: its
evidence is recorded. Either way the cancelled task takes no lease to send again (on
main an inconclusive sync reconcile went on to resend the refund under its key, from a
task nobody waited for). The resumed thread reconciles and confirms it: one refund.

A cancellation that lands while the claim itself is written (held on a row lock) is
noted, not obeyed: the claimed call is sent and its receipt recorded, as a dispatch in
flight is; the resume replays it (one refund).
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _graphs import Env, build_graph, call
from langchain.agents import create_agent
from langchain_core.tools import tool

from langgraph_effects import EffectMiddleware, Evidence, ProviderContract, effect
from langgraph_effects.core.model import EventKind, OperationStatus
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.faults import scaled

KEYED = ProviderContract(idempotency_window=timedelta(hours=24))
"""A key the provider honours: an inconclusive reconcile may resend under it (RETRY_SAFE)."""
CONFIG = {"configurable": {"thread_id": "t1"}}


class Died(BaseException):
    """The worker dies right after the provider acted: no receipt."""


class Payments:
    """The third-party provider: each refund it made, each lookup it answered."""

    def __init__(self) -> None:
        self.refunds: list[str] = []
        self.lookups: list[str] = []
        self.searchable = True
        """Its search shows what it did (else: nothing yet)."""

    def search(self, order: str) -> Evidence:
        self.lookups.append(order)
        if self.searchable and order in self.refunds:
            return Evidence.confirmed("refunded", result={"refunded": order})
        return Evidence.inconclusive("the provider's search shows nothing yet")


class Run:
    """What this run's tools do: die after the provider, or fail the audit while the
    refund is reconciled (the reconciler then waits until the audit has raised)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.die = False
        self.fail_audit = False
        self.reconciling = asyncio.Event()
        self.raised = threading.Event()


def _tools(provider: Payments, run: Run, reconciler: str) -> list[Any]:
    async def look(op: Any) -> Evidence:
        if run.fail_audit:
            run.reconciling.set()
            await asyncio.to_thread(run.raised.wait, scaled(10))
            await asyncio.sleep(0.05)  # LangGraph cancels this task meanwhile
        return provider.search(op.target)

    def look_sync(op: Any) -> Evidence:
        if run.fail_audit:
            run.loop.call_soon_threadsafe(run.reconciling.set)
            run.raised.wait(scaled(10))
            time.sleep(0.05)  # LangGraph cancels the task meanwhile; this thread goes on
        return provider.search(op.target)

    @effect(
        "payments.refund",
        target=lambda a: a["order"],
        reconcile=look if reconciler == "async" else look_sync,
        contract=KEYED,
    )
    async def refund(order: str) -> dict[str, Any]:
        """Refund an order."""
        provider.refunds.append(order)
        if run.die:
            raise Died
        return {"refunded": order}

    @tool
    async def audit(order: str) -> str:
        """Audit an order."""
        if run.die:
            await asyncio.sleep(scaled(10))  # cancelled when the refund's task dies
        if run.fail_audit:
            await asyncio.wait_for(run.reconciling.wait(), scaled(10))
            run.raised.set()
            raise RuntimeError(f"audit of {order} failed")
        return "audited"

    return [refund, audit]


def _graph(face: str, tools: list[Any], env: Env) -> Any:
    calls = [call("refund", "r-1", order="o1"), call("audit", "a-1", order="o1")]
    if face == "route_tool_calls":
        return build_graph(tools, calls, ledger=env.ledger, checkpointer=env.checkpointer)
    return create_agent(
        ScriptedChatModel(plan=[calls]),
        tools=tools,
        middleware=[EffectMiddleware(ledger=env.ledger)],
        checkpointer=env.checkpointer,
    )


def _kinds(env: Env, op: Any, since: int) -> list[EventKind]:
    return [e.kind for e in env.ledger_call("events", "default", op.operation_id)[since:]]


def _reconciled_while_a_sibling_raises(env: Env, face: str, reconciler: str, found: bool) -> None:
    assert env.loop is not None
    provider, run = Payments(), Run(env.loop)
    tools = _tools(provider, run, reconciler)
    # The refund acted and its worker died: dispatching, then taken over (unknown).
    run.die = True
    with pytest.raises(Died):
        env.invoke(_graph(face, tools, env), {"messages": [("user", "refund o1")]}, CONFIG)
    [op] = env.ops()
    assert op.status is OperationStatus.DISPATCHING
    env.ledger_call("mark_unknown", "default", op.operation_id, token=1, reason="taken over")
    seen = len(env.ledger_call("events", "default", op.operation_id))

    # Resumed: the refund's reconcile is in flight when the audit raises.
    run.die, run.fail_audit, provider.searchable = False, True, found
    with pytest.raises(RuntimeError, match="audit of o1 failed"):
        env.invoke(_graph(face, tools, env), None, CONFIG)
    [op] = env.ops()
    assert provider.refunds == ["o1"]  # intended once, acted once: nothing resent
    kinds = _kinds(env, op, seen)
    if reconciler == "async":
        # Cut short before its lookup: nothing recorded, the record as it was.
        assert provider.lookups == []
        assert (op.status, kinds) == (OperationStatus.UNKNOWN, [])
    elif found:
        # Finished in its thread: the evidence it obtained settles the record.
        assert provider.lookups == ["o1"]
        assert (op.status, kinds) == (OperationStatus.CONFIRMED, [EventKind.RESOLVE])
    else:
        # Inconclusive, recorded; no claim: the cancelled task does not resend under the key.
        assert provider.lookups == ["o1"]
        assert (op.status, kinds) == (OperationStatus.UNKNOWN, [EventKind.EVIDENCE])
        assert op.attempts == 1

    # The audit passes now and the provider's search has caught up: the thread resumes.
    run.fail_audit, provider.searchable = False, True
    env.invoke(_graph(face, tools, env), None, CONFIG)
    [op] = env.ops()
    assert op.status is OperationStatus.CONFIRMED
    assert (provider.refunds, op.attempts) == (["o1"], 1)  # reconciled, never resent
    assert provider.lookups == ["o1"] * (1 if reconciler == "async" or found else 2)


@pytest.mark.parametrize("found", [True, False], ids=["found", "inconclusive"])
@pytest.mark.parametrize("reconciler", ["async", "sync"])
@pytest.mark.parametrize("face", ["route_tool_calls", "create_agent"])
def test_a_sibling_raising_mid_reconcile_resends_nothing_sqlite(
    tmp_path: Path, face: str, reconciler: str, found: bool
) -> None:
    """SQLite, async: a sibling raising mid-reconcile neither resends the refund nor loses
    (or half writes) what the reconciler found; the resume settles it, one refund."""
    env = Env("sqlite", "async", path=tmp_path / "app.db")
    try:
        _reconciled_while_a_sibling_raises(env, face, reconciler, found)
    finally:
        env.close()


@pytest.mark.parametrize("reconciler", ["async", "sync"])
@pytest.mark.parametrize("face", ["route_tool_calls", "create_agent"])
def test_a_sibling_raising_mid_reconcile_resends_nothing_postgres(
    pg_url: str, face: str, reconciler: str
) -> None:
    """PostgreSQL, async, the reconciler inconclusive (the case that resent on main)."""
    env = Env("postgres", "async", url=pg_url)
    try:
        _reconciled_while_a_sibling_raises(env, face, reconciler, False)
    finally:
        env.close()


@pytest.mark.parametrize("face", ["route_tool_calls", "create_agent"])
def test_a_sibling_raising_while_the_claim_commits_keeps_the_call(pg_url: str, face: str) -> None:
    """The refund's ``authorize`` hook allows it and locks its row (another session's
    ``FOR UPDATE``), so the claim waits; the audit raises and LangGraph cancels the refund's
    task, whose claim is noted cancelled, not abandoned. The lock is let go, the claim
    commits, the claimed call is sent and its receipt written (never a claim left without
    its outcome); the resume replays it: one refund."""
    import psycopg

    env = Env("postgres", "async", url=pg_url)
    assert env.loop is not None
    provider, locked = Payments(), asyncio.Event()
    fail = [True]
    locks: list[psycopg.AsyncConnection[Any]] = []

    async def allow(ctx: Any) -> bool:
        if fail[0]:
            blocker = await psycopg.AsyncConnection.connect(pg_url)
            locks.append(blocker)
            await blocker.execute(
                "SELECT 1 FROM lge_operations WHERE operation_id = %s FOR UPDATE",
                (ctx.operation_id,),
            )
            locked.set()
        return True

    @effect("payments.refund", target=lambda a: a["order"], authorize=allow)
    async def refund(order: str) -> dict[str, Any]:
        """Refund an order."""
        provider.refunds.append(order)
        return {"refunded": order}

    @tool
    async def audit(order: str) -> str:
        """Audit an order."""
        if fail[0]:
            await asyncio.wait_for(locked.wait(), scaled(10))
            await asyncio.sleep(0.1)  # the refund's claim waits on its row

            async def let_go() -> None:
                await asyncio.sleep(0.2)  # after LangGraph cancelled the refund's task
                await locks[0].rollback()

            asyncio.get_running_loop().create_task(let_go())
            raise RuntimeError(f"audit of {order} failed")
        return "audited"

    try:
        tools = [refund, audit]
        with pytest.raises(RuntimeError, match="audit of o1 failed"):
            env.invoke(_graph(face, tools, env), {"messages": [("user", "refund o1")]}, CONFIG)
        [op] = env.ops()
        assert (op.status, provider.refunds) == (OperationStatus.CONFIRMED, ["o1"])
        assert _kinds(env, op, 0)[-2:] == [EventKind.CLAIM, EventKind.CONFIRM]

        fail[0] = False
        env.invoke(_graph(face, tools, env), None, CONFIG)
        [op] = env.ops()
        assert (op.status, provider.refunds) == (OperationStatus.CONFIRMED, ["o1"])
    finally:
        for blocker in locks:
            env.run(blocker.close())
        env.close()
