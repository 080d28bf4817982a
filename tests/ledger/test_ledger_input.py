"""Tenant isolation and bad input: a clear error, and the ledger unchanged."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from langgraph_effects.core.digest import payload_digest
from langgraph_effects.core.model import (
    Decision,
    Evidence,
    LeaseOwner,
    OperationDraft,
    Resolution,
)
from langgraph_effects.errors import (
    InvalidInput,
    LedgerNotSetUp,
    LedgerUnavailable,
    OperationNotFound,
)
from langgraph_effects.ledger.base import Ledger
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.ledger.sqlite import AsyncSQLiteLedger, SQLiteLedger
from langgraph_effects.testing.contract import make_draft

OWNER = LeaseOwner(host="h", pid=1, started_at=1.0, nonce="n")


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ledger]:
    with ExitStack() as stack:
        if request.param == "memory":
            ledger: Ledger = InMemoryLedger()
        elif request.param == "sqlite":
            ledger = stack.enter_context(SQLiteLedger.from_conn_string(str(tmp_path / "in.db")))
        else:
            from langgraph_effects.ledger.postgres import PostgresLedger

            url = request.getfixturevalue("pg_url")
            ledger = stack.enter_context(PostgresLedger.from_conn_string(url))
        ledger.setup()
        yield ledger


def snapshot(ledger: Ledger) -> tuple[object, ...]:
    return (ledger.list(limit=1000), ledger.feed(limit=1000))


def test_no_tenant_reads_or_moves_another_tenants_operation(ledger: Ledger) -> None:
    """Tenant B cannot read, list, claim, confirm, resolve or approve tenant A's operation."""
    op = ledger.prepare(make_draft("op-1", tenant_id="A"), owner=OWNER).operation
    ledger.mark_unknown("A", "op-1", token=op.fencing_token, reason="timeout")
    before = snapshot(ledger)
    assert ledger.get("B", "op-1") is None
    assert ledger.list(tenant_id="B") == []
    assert ledger.events("B", "op-1") == []
    assert ledger.feed(tenant_id="B") == []
    assert ledger.stats(tenant_id="B").total == 0
    moves = [
        lambda: ledger.claim("B", "op-1", owner=OWNER),
        lambda: ledger.confirm("B", "op-1", token=2),
        lambda: ledger.mark_unknown("B", "op-1", token=2, reason="x"),
        lambda: ledger.resolve("B", "op-1", Resolution(decision=Decision.CONFIRM, by="eve")),
        lambda: ledger.approve("B", "op-1", payload_digest=op.payload_digest, by="eve"),
        lambda: ledger.record_evidence("B", "op-1", Evidence.inconclusive("?")),
    ]
    for move in moves:
        with pytest.raises(OperationNotFound):
            move()
    assert snapshot(ledger) == before


def test_the_same_operation_id_in_two_tenants_is_two_operations(ledger: Ledger) -> None:
    """One operation id prepared by two tenants with other payloads makes two records."""
    a = ledger.prepare(make_draft("op-1", tenant_id="A", payload={"n": 1}))
    b = ledger.prepare(make_draft("op-1", tenant_id="B", payload={"n": 2}))
    assert a.created
    assert b.created
    assert ledger.get("A", "op-1") == a.operation
    assert ledger.get("B", "op-1") == b.operation


def test_blank_ids_are_refused_by_the_draft() -> None:
    """A draft with an empty or blank tenant, id or action cannot be built."""
    for field in ("tenant_id", "operation_id", "action"):
        values = make_draft().model_dump()
        values[field] = "  " if field != "action" else ""
        with pytest.raises(ValueError, match=field):
            OperationDraft(**values)


def test_non_json_and_oversized_payloads_are_refused(ledger: Ledger) -> None:
    """Payloads that are not plain JSON or exceed 1 MiB raise InvalidInput; nothing is written."""
    for bad in ({1, 2}, float("nan"), object(), {"k": b"bytes"}):
        with pytest.raises(InvalidInput):
            payload_digest("a", 1, None, bad)
    huge = {"blob": "x" * (1 << 20)}
    with pytest.raises(InvalidInput, match="limit"):
        payload_digest("a", 1, None, huge)
    draft = make_draft().model_copy(update={"payload": huge})
    with pytest.raises(InvalidInput):
        ledger.prepare(draft)
    assert snapshot(ledger) == ([], [])


def test_unknown_status_strings_are_refused(ledger: Ledger) -> None:
    """list(status="done") raises InvalidInput listing the valid statuses."""
    with pytest.raises(InvalidInput, match="prepared, dispatching, confirmed, rejected, unknown"):
        ledger.list(status="done")


def test_a_closed_sqlite_connection_is_unavailable(tmp_path: Path) -> None:
    """After its connection is closed the SQLite ledger raises LedgerUnavailable, with the cause."""
    conn = sqlite3.connect(tmp_path / "closed.db", check_same_thread=False)
    ledger = SQLiteLedger(conn)
    ledger.setup()
    ledger.prepare(make_draft())
    conn.close()
    with pytest.raises(LedgerUnavailable) as info:
        ledger.get("tenant-a", "op-1")
    assert isinstance(info.value.__cause__, sqlite3.Error)
    with SQLiteLedger.from_conn_string(str(tmp_path / "closed.db")) as reopened:
        assert reopened.get("tenant-a", "op-1") is not None


def test_a_closed_postgres_connection_is_unavailable(pg_url: str) -> None:
    """After its connection is closed the PostgreSQL ledger raises LedgerUnavailable."""
    import psycopg

    from langgraph_effects.ledger.postgres import PostgresLedger

    conn = psycopg.connect(pg_url)
    ledger = PostgresLedger(conn)
    ledger.setup()
    ledger.prepare(make_draft())
    conn.close()
    with pytest.raises(LedgerUnavailable) as info:
        ledger.prepare(make_draft("op-2"))
    assert isinstance(info.value.__cause__, psycopg.Error)
    with PostgresLedger.from_conn_string(pg_url) as reopened:
        assert reopened.get("tenant-a", "op-1") is not None
        assert reopened.get("tenant-a", "op-2") is None


def test_an_unreachable_postgres_is_unavailable() -> None:
    """A server that refuses connections raises LedgerUnavailable as the ledger opens, with
    the driver's reason (not once a pool gives up)."""
    from langgraph_effects.ledger.postgres import PostgresLedger

    url = "postgresql://postgres@127.0.0.1:1/none?connect_timeout=1"
    with (
        pytest.raises(LedgerUnavailable, match="Connection refused"),
        PostgresLedger.from_conn_string(url, pool_timeout=0.5),
    ):
        pass


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_use_before_setup_names_setup(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Before setup() every call raises LedgerNotSetUp telling the caller to call setup()."""
    with ExitStack() as stack:
        if backend == "sqlite":
            ledger: Ledger = stack.enter_context(
                SQLiteLedger.from_conn_string(str(tmp_path / "fresh.db"))
            )
        else:
            from langgraph_effects.ledger.postgres import PostgresLedger

            url = request.getfixturevalue("pg_url")
            ledger = stack.enter_context(PostgresLedger.from_conn_string(url))
        for call in (
            lambda: ledger.get("t", "op"),
            lambda: ledger.prepare(make_draft()),
            lambda: ledger.list(),
            lambda: ledger.stats(),
        ):
            with pytest.raises(LedgerNotSetUp, match=r"call ledger\.setup\(\)"):
                call()
        ledger.setup()
        assert ledger.list() == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_setup_on_a_full_disk_says_the_disk_is_full(tmp_path: Path, mode: str) -> None:
    """SQLite refusing to grow the file (``max_page_count``: a full disk) during ``setup()``
    is reported as the database failing, with SQLite's reason, never as "not set up"."""
    conn = sqlite3.connect(tmp_path / "full.db", check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA max_page_count = 3")

    def setup() -> None:
        if mode == "sync":
            SQLiteLedger(conn).setup()
        else:
            asyncio.run(AsyncSQLiteLedger(conn).setup())

    try:
        with pytest.raises(LedgerUnavailable, match="disk is full") as refused:
            setup()
        assert not isinstance(refused.value, LedgerNotSetUp)
    finally:
        conn.close()
