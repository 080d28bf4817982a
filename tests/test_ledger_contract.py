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
