"""The ledger contract suite on every backend, in one run.

memory, sqlite, sqlite-async, postgres (LangGraph's pool settings), postgres-async (a plain pool).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path

import pytest

from langgraph_effects.ledger.base import Ledger
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.ledger.sqlite import AsyncSQLiteLedger, SQLiteLedger
from langgraph_effects.testing.contract import LedgerContract, SyncFacade

Opener = Callable[[Callable[[], datetime]], Ledger]


@pytest.fixture
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as runner:
        yield runner


class TestMemory(LedgerContract):
    durable = False

    @pytest.fixture
    def open_ledger(self) -> Opener:
        return lambda clock: InMemoryLedger(clock=clock)


class TestSQLite(LedgerContract):
    @pytest.fixture
    def open_ledger(self, sqlite_path: Path) -> Iterator[Opener]:
        with ExitStack() as stack:

            def open_(clock: Callable[[], datetime]) -> Ledger:
                conn = sqlite3.connect(sqlite_path, check_same_thread=False)
                stack.callback(conn.close)
                return SQLiteLedger(conn, clock=clock)

            yield open_


class TestSQLiteAsync(LedgerContract):
    @pytest.fixture
    def open_ledger(self, sqlite_path: Path, runner: asyncio.Runner) -> Iterator[Opener]:
        with ExitStack() as stack:

            def open_(clock: Callable[[], datetime]) -> Ledger:
                cm = AsyncSQLiteLedger.from_conn_string(
                    str(sqlite_path), synchronous="NORMAL", clock=clock
                )
                ledger = runner.run(cm.__aenter__())
                stack.callback(lambda: runner.run(cm.__aexit__(None, None, None)))
                return SyncFacade.wrap(ledger, runner)

            yield open_


class TestPostgres(LedgerContract):
    """On a pool configured as LangGraph's PostgresSaver configures it."""

    @pytest.fixture
    def open_ledger(self, pg_url: str) -> Iterator[Opener]:
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        from langgraph_effects.ledger.postgres import PostgresLedger

        with ExitStack() as stack:

            def open_(clock: Callable[[], datetime]) -> Ledger:
                pool = ConnectionPool(
                    pg_url,
                    min_size=1,
                    max_size=4,
                    open=False,
                    kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
                )
                stack.enter_context(pool)
                return PostgresLedger(pool, clock=clock)

            yield open_


class TestPostgresAsync(LedgerContract):
    """On a plain async pool (no autocommit, tuple rows)."""

    @pytest.fixture
    def open_ledger(self, pg_url: str, runner: asyncio.Runner) -> Iterator[Opener]:
        from psycopg_pool import AsyncConnectionPool

        from langgraph_effects.ledger.postgres import AsyncPostgresLedger

        with ExitStack() as stack:

            def open_(clock: Callable[[], datetime]) -> Ledger:
                async def make() -> AsyncConnectionPool:
                    pool = AsyncConnectionPool(pg_url, min_size=1, max_size=4, open=False)
                    await pool.open()
                    return pool

                pool = runner.run(make())
                stack.callback(lambda: runner.run(pool.close()))
                return SyncFacade.wrap(AsyncPostgresLedger(pool, clock=clock), runner)

            yield open_
