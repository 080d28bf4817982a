"""A ledger's lifetime on every backend, sync and async: ``open()`` owns, ``close()`` releases.

``open()`` gives a long-lived ledger (a notebook, a module) that owns its connection or
pool; ``close()`` releases it, once, and a closed ledger refuses to work with
``LedgerUnavailable``; what it wrote is there when it is opened again.
``from_conn_string`` is ``open`` and ``close`` around a block. A connection or pool given to
the constructor stays the caller's: ``close()`` leaves it open.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects import InMemoryLedger, LedgerUnavailable
from langgraph_effects.ledger.sqlite import AsyncSQLiteLedger, SQLiteLedger
from langgraph_effects.testing.contract import SyncFacade

Open = Callable[[], Any]  # the ledger, seen as a sync ``Ledger`` with ``close()``


@pytest.fixture
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as runner:
        yield runner


@pytest.fixture(params=["sqlite", "sqlite-async", "postgres", "postgres-async"])
def open_ledger(request: pytest.FixtureRequest, tmp_path: Path, runner: asyncio.Runner) -> Open:
    """``cls.open(location)`` of one backend, an async one seen through ``SyncFacade``."""
    kind: str = request.param
    if kind.startswith("postgres"):
        from langgraph_effects import AsyncPostgresLedger, PostgresLedger

        location = request.getfixturevalue("pg_url")
        sync_cls, async_cls = PostgresLedger, AsyncPostgresLedger
    else:
        location = str(tmp_path / "effects.db")
        sync_cls, async_cls = SQLiteLedger, AsyncSQLiteLedger  # type: ignore[assignment]
    if kind.endswith("async"):
        return lambda: SyncFacade.wrap(runner.run(async_cls.open(location)), runner)
    return lambda: sync_cls.open(location)


def test_an_opened_ledger_works_until_closed_and_keeps_what_it_wrote(open_ledger: Open) -> None:
    """open, setup, write, close (twice: idempotent); then refused; reopened, the write is there."""
    ledger = open_ledger()
    ledger.setup()
    assert ledger.bind_thread("thread-1", "acme") == "acme"
    ledger.close()
    ledger.close()
    with pytest.raises(LedgerUnavailable):
        ledger.list(tenant_id="acme")
    again = open_ledger()
    try:
        assert again.bind_thread("thread-1", "other") == "acme"  # bound before the close
    finally:
        again.close()


def test_from_conn_string_closes_on_exit(sqlite_path: Path) -> None:
    """The context manager is open() and close() around the block."""
    with SQLiteLedger.from_conn_string(str(sqlite_path)) as ledger:
        ledger.setup()
        assert ledger.bind_thread("thread-1", "acme") == "acme"
    with pytest.raises(LedgerUnavailable):
        ledger.bind_thread("thread-1", "acme")


def test_async_from_conn_string_closes_on_exit(sqlite_path: Path, runner: asyncio.Runner) -> None:
    """The async context manager is open() and close() around the block."""

    async def main() -> AsyncSQLiteLedger:
        async with AsyncSQLiteLedger.from_conn_string(str(sqlite_path)) as ledger:
            await ledger.setup()
            assert await ledger.bind_thread("thread-1", "acme") == "acme"
        return ledger

    ledger = runner.run(main())
    with pytest.raises(LedgerUnavailable):
        runner.run(ledger.bind_thread("thread-1", "acme"))


def test_close_leaves_the_callers_connection_open(sqlite_path: Path) -> None:
    """A ledger built on the caller's connection does not close it."""
    conn = sqlite3.connect(sqlite_path, check_same_thread=False)
    try:
        ledger = SQLiteLedger(conn)
        ledger.setup()
        ledger.close()
        assert ledger.bind_thread("thread-1", "acme") == "acme"
        assert conn.execute("SELECT count(*) FROM lge_threads").fetchone() == (1,)
    finally:
        conn.close()


def test_close_leaves_the_callers_pool_open(pg_url: str) -> None:
    """A PostgreSQL ledger on the caller's pool (shared with the saver) does not close it."""
    from psycopg_pool import ConnectionPool

    from langgraph_effects import PostgresLedger

    with ConnectionPool(pg_url, kwargs={"autocommit": True}, open=True) as pool:
        ledger = PostgresLedger(pool)
        ledger.setup()
        ledger.close()
        assert not pool.closed
        assert ledger.bind_thread("thread-1", "acme") == "acme"


def test_memory_ledger_close_is_accepted() -> None:
    """InMemoryLedger has the same close(), so code may close whichever ledger it holds."""
    ledger = InMemoryLedger()
    ledger.setup()
    ledger.bind_thread("thread-1", "acme")
    ledger.close()  # nothing to release: the operations live as long as the object
    assert ledger.bind_thread("thread-1", "other") == "acme"
