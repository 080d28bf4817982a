"""A receipt whose commit lost its connection is tried again on a fresh one (issue 23, finding 5).

PostgreSQL, real ``pg_terminate_backend``: three parallel calls in one task; once
every provider has acted, every connection of the ledger's pool is terminated,
just before the receipts commit (``confirm`` / ``confirm_many``). Each receipt is
tried again on a fresh connection (``decide.loop`` ``_receipt``, with the backoff
of a lease renewal): all three confirmed, each provider call made once.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import psycopg
from _graphs import build_graph, call, tool_messages
from langgraph.checkpoint.memory import InMemorySaver
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from langgraph_effects import AsyncPostgresLedger, EffectContext, PostgresLedger, effect
from langgraph_effects.core.model import EventKind, OperationStatus
from langgraph_effects.core.plan import receipt_retry_delay
from langgraph_effects.errors import LedgerUnavailable
from langgraph_effects.ledger.postgres import POOL_KWARGS
from langgraph_effects.ledger.sqlite import SQLiteLedger
from langgraph_effects.testing.faults import scaled

CALLS = [call("create_ticket", f"call-{i}", title=f"t{i}") for i in range(3)]


def test_a_receipt_is_tried_again_for_a_third_of_the_lease_then_given_up() -> None:
    """The backoff of a lease renewal (0.05 s, doubling), for at most a third of the lease."""
    delays = []
    while (delay := receipt_retry_delay(len(delays) + 1, 10.0)) is not None:
        delays.append(delay)
    assert delays == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2]
    assert sum(delays) <= 10.0


def _terminate(url: str, app: str) -> int:
    """Terminate every backend of the ledger's pool (its ``application_name``)."""
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (app,),
        ).fetchall()
    return len(rows)


def _graph(ledger: Any, url: str, app: str, created: list[str]) -> Any:
    killed: list[int] = []
    barrier = threading.Barrier(3, action=lambda: killed.append(_terminate(url, app)))

    @effect("tickets.create", target=lambda a: a["title"])
    def create_ticket(title: str, ctx: EffectContext) -> dict[str, Any]:
        """Create a ticket."""
        created.append(title)
        barrier.wait(scaled(10))  # all three acted: now the ledger's connections go
        assert killed[0] >= 1, "no ledger connection was terminated"
        return {"ticket": title}

    return build_graph(
        [create_ticket], CALLS, ledger=ledger, checkpointer=InMemorySaver(), per_call=False
    )


def _check(ops: list[Any], events: list[list[Any]], result: Any, created: list[str]) -> None:
    assert sorted(created) == ["t0", "t1", "t2"]  # each provider call made once
    assert [op.status for op in ops] == [OperationStatus.CONFIRMED] * 3
    for kinds in events:
        assert [e.kind for e in kinds].count(EventKind.CONFIRM) == 1
    assert [m.status for m in tool_messages(result)] == ["success"] * 3


def test_a_dropped_connection_at_the_receipt_commit_is_retried_sync(pg_url: str) -> None:
    """Sync: every ledger connection terminated before the receipts commit; all confirmed."""
    app = f"lge-{uuid.uuid4().hex[:8]}"
    created: list[str] = []
    kwargs = {**POOL_KWARGS, "application_name": app}
    with ConnectionPool(pg_url, min_size=2, max_size=4, kwargs=kwargs) as pool:
        ledger = PostgresLedger(pool)
        ledger.setup()
        graph = _graph(ledger, pg_url, app, created)
        config = {"configurable": {"thread_id": "t1"}}
        result = graph.invoke({"messages": [("user", "go")]}, config, durability="sync")
        ops = ledger.list(tenant_id="default")
        events = [ledger.events("default", op.operation_id) for op in ops]
    _check(ops, events, result, created)


def test_a_dropped_connection_at_the_receipt_commit_is_retried_async(pg_url: str) -> None:
    """Async: the same, under ``ainvoke`` on an ``AsyncPostgresLedger``."""
    app = f"lge-{uuid.uuid4().hex[:8]}"
    created: list[str] = []
    kwargs = {**POOL_KWARGS, "application_name": app}

    async def main() -> tuple[list[Any], list[list[Any]], Any]:
        async with AsyncConnectionPool(
            pg_url, min_size=2, max_size=4, kwargs=kwargs, open=False
        ) as pool:
            ledger = AsyncPostgresLedger(pool)
            await ledger.setup()
            graph = _graph(ledger, pg_url, app, created)
            config = {"configurable": {"thread_id": "t1"}}
            result = await graph.ainvoke({"messages": [("user", "go")]}, config, durability="sync")
            ops = await ledger.list(tenant_id="default")
            events = [await ledger.events("default", op.operation_id) for op in ops]
        return ops, events, result

    _check(*asyncio.run(main()), created)


def test_a_receipt_whose_commit_answer_was_lost_is_not_recorded_twice(tmp_path: Any) -> None:
    """SQLite: the first confirm commits and its answer is lost (the connection drops after
    the commit); the next try is refused by the fence, and the record, confirmed under this
    call's token, is the answer: one confirm event, no late-receipt evidence, one ticket."""
    created: list[str] = []
    with SQLiteLedger.from_conn_string(str(tmp_path / "app.db")) as ledger:
        ledger.setup()
        confirm = ledger.confirm
        lost: list[str] = []

        def confirm_then_drop(*args: Any, **kwargs: Any) -> Any:
            if lost:
                return confirm(*args, **kwargs)
            confirm(*args, **kwargs)
            lost.append("answer")
            raise LedgerUnavailable("the connection dropped after the commit (the test)")

        ledger.confirm = confirm_then_drop  # type: ignore[method-assign]

        @effect("tickets.create", target=lambda a: a["title"])
        def create_ticket(title: str, ctx: EffectContext) -> dict[str, Any]:
            """Create a ticket."""
            created.append(title)
            return {"ticket": title}

        graph = build_graph([create_ticket], CALLS[:1], ledger=ledger, checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "t1"}}
        result = graph.invoke({"messages": [("user", "go")]}, config, durability="sync")
        [op] = ledger.list(tenant_id="default")
        kinds = [e.kind for e in ledger.events("default", op.operation_id)]
    assert lost == ["answer"]
    assert created == ["t0"]
    assert op.status is OperationStatus.CONFIRMED
    assert kinds.count(EventKind.CONFIRM) == 1
    assert EventKind.EVIDENCE not in kinds
    assert [m.status for m in tool_messages(result)] == ["success"]
