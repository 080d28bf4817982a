"""Races on real databases: claims, prepares and stale tokens from many threads and processes."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects.core.model import LeaseOwner, OperationStatus
from langgraph_effects.errors import LeaseHeld, PayloadMismatch, StaleFencingToken
from langgraph_effects.ledger.base import Ledger
from langgraph_effects.ledger.sqlite import SQLiteLedger
from langgraph_effects.testing.contract import make_draft
from langgraph_effects.testing.faults import scaled

S = OperationStatus
T = "tenant-a"
THREADS = 16

Opener = Callable[[], Ledger]


@pytest.fixture(params=["sqlite", "postgres"])
def open_ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens ledgers on one database: a connection each on SQLite, one shared pool on PostgreSQL."""
    with ExitStack() as stack:
        if request.param == "sqlite":
            path = tmp_path / "races.db"

            def open_() -> Ledger:
                conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
                stack.callback(conn.close)
                return SQLiteLedger(conn)

        else:
            from psycopg_pool import ConnectionPool

            from langgraph_effects.ledger.postgres import PostgresLedger

            url = request.getfixturevalue("pg_url")
            pool = stack.enter_context(
                ConnectionPool(
                    url, min_size=2, max_size=THREADS, open=False, kwargs={"autocommit": True}
                )
            )

            def open_() -> Ledger:
                return PostgresLedger(pool)

        open_().setup()
        yield open_


def race(ledgers: list[Ledger], attempt: Callable[[Ledger], Any]) -> list[Any]:
    """Run ``attempt`` once per ledger, all released at the same instant; results or errors."""
    barrier = threading.Barrier(len(ledgers))

    def one(ledger: Ledger) -> Any:
        barrier.wait()
        try:
            return attempt(ledger)
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(len(ledgers)) as pool:
        return list(pool.map(one, ledgers))


def test_sixteen_claims_give_exactly_one_lease(open_ledger: Opener) -> None:
    """16 threads claiming one prepared operation: one lease, 15 LeaseHeld, one claim event."""
    ledgers = [open_ledger() for _ in range(THREADS)]
    ledgers[0].prepare(make_draft())
    owners = [LeaseOwner(host="h", pid=i, started_at=1.0, nonce=f"n{i}") for i in range(THREADS)]
    by_ledger = dict(zip(map(id, ledgers), owners, strict=True))
    results = race(ledgers, lambda lg: lg.claim(T, "op-1", owner=by_ledger[id(lg)]))
    won = [r for r in results if not isinstance(r, Exception)]
    assert len(won) == 1, results
    assert all(isinstance(r, LeaseHeld) for r in results if r not in won)
    op = ledgers[0].get(T, "op-1")
    assert op is not None
    assert (op.status, op.fencing_token, op.attempts) == (S.DISPATCHING, 1, 1)
    assert op.lease_owner == won[0].lease_owner
    assert [e.kind.value for e in ledgers[0].events(T, "op-1")] == ["prepare", "claim"]


def test_sixteen_prepares_of_one_key_make_one_row(open_ledger: Opener) -> None:
    """16 threads preparing the same key and payload: one row created, everyone gets it."""
    ledgers = [open_ledger() for _ in range(THREADS)]
    owner = LeaseOwner(host="h", pid=1, started_at=1.0, nonce="n")
    results = race(ledgers, lambda lg: lg.prepare(make_draft(), owner=owner))
    assert not [r for r in results if isinstance(r, Exception)], results
    assert sum(r.created for r in results) == 1
    stored = ledgers[0].get(T, "op-1")
    assert all(r.operation == stored for r in results)
    assert len(ledgers[0].events(T, "op-1")) == 2


def test_racing_payloads_for_one_key_never_overwrite(open_ledger: Opener) -> None:
    """Same key, two payloads at once: one wins, the other payload's callers get PayloadMismatch."""
    ledgers = [open_ledger() for _ in range(THREADS)]
    drafts = {id(lg): make_draft(payload={"n": i % 2}) for i, lg in enumerate(ledgers)}
    results = race(ledgers, lambda lg: lg.prepare(drafts[id(lg)]))
    stored = ledgers[0].get(T, "op-1")
    assert stored is not None
    for ledger, result in zip(ledgers, results, strict=True):
        if drafts[id(ledger)].payload_digest == stored.payload_digest:
            assert result.operation == stored
        else:
            assert isinstance(result, PayloadMismatch)
    assert sum(1 for r in results if not isinstance(r, Exception) and r.created) == 1
    assert stored.record_version == 1
    assert len(ledgers[0].events(T, "op-1")) == 1


def test_a_stale_confirm_after_a_reclaim_changes_nothing(open_ledger: Opener) -> None:
    """A worker whose lease was marked unknown and re-claimed cannot confirm; the row is intact."""
    first, second = open_ledger(), open_ledger()
    owner_a = LeaseOwner(host="a", pid=1, started_at=1.0, nonce="a")
    owner_b = LeaseOwner(host="b", pid=2, started_at=1.0, nonce="b")
    old = first.prepare(make_draft(), owner=owner_a).operation
    second.mark_unknown(T, "op-1", token=old.fencing_token, reason="lease expired")
    current = second.claim(T, "op-1", owner=owner_b)
    with pytest.raises(StaleFencingToken):
        first.confirm(T, "op-1", token=old.fencing_token, result={"late": True})
    assert second.get(T, "op-1") == current
    assert first.stats().stale_token_refusals == 1
    assert len(second.events(T, "op-1")) == current.record_version


def _claim_in_child(url: str, barrier: Any, results: Any, index: int) -> None:
    from langgraph_effects.ledger.postgres import PostgresLedger

    owner = LeaseOwner(host="proc", pid=index, started_at=1.0, nonce=str(index))
    with PostgresLedger.from_conn_string(url) as ledger:
        ledger.get(T, "op-1")  # connect before the start line
        barrier.wait()
        try:
            ledger.claim(T, "op-1", owner=owner)
            results.put("won")
        except LeaseHeld:
            results.put("held")


def test_four_processes_claiming_give_exactly_one_lease(pg_url: str) -> None:
    """4 processes (spawned) claiming one operation on PostgreSQL: exactly one wins."""
    from langgraph_effects.ledger.postgres import PostgresLedger

    with PostgresLedger.from_conn_string(pg_url) as ledger:
        ledger.setup()
        ledger.prepare(make_draft())
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(4)
        results = ctx.Queue()
        procs = [
            ctx.Process(target=_claim_in_child, args=(pg_url, barrier, results, i))
            for i in range(4)
        ]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout=scaled(120))
        assert [proc.exitcode for proc in procs] == [0, 0, 0, 0]
        outcomes = sorted(results.get(timeout=scaled(5)) for _ in procs)
        assert outcomes == ["held", "held", "held", "won"]
        op = ledger.get(T, "op-1")
        assert op is not None
        assert (op.status, op.fencing_token) == (S.DISPATCHING, 1)
