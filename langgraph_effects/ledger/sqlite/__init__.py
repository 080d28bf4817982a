"""The SQLite ledger: the embedded default, sync and async, on the stdlib ``sqlite3``.

Durability: WAL with ``synchronous=FULL`` by default, so a committed
transition survives a power loss. ``synchronous="NORMAL"`` is an explicit
option: about ten times faster commits that survive a process crash but may
lose the last transactions on a power loss or OS crash.

Receipts (``confirm``, ``confirm_many``) commit with ``synchronous=NORMAL`` by
default when the file is in WAL mode (``receipt_synchronous``): they skip their
own fsync, survive any process crash, and on a power loss are durable once the
next FULL commit to the same WAL has synced: the saver's checkpoint of the
tool results when it shares the file, else the ledger's next ``prepare``. The
write-ahead record (``prepare``, ``claim``) always keeps ``synchronous``. The
rule, and what a lost receipt costs (never a duplicate), is in ``ledger.base``
("Durability of receipts"). Outside WAL mode receipts keep ``synchronous``.

One connection per ledger object, guarded by a lock: every statement of one
ledger operation runs while holding it, and writes run in
``BEGIN IMMEDIATE ... COMMIT``, so parallel tool threads queue on the lock
instead of spinning in SQLite's busy wait. Another connection writing the same
file (the saver's, another process) is waited for up to 5 s: under WAL by the
driver itself, in steps of 20 us to 1 ms (SQLite's busy handler sleeps 1, 2, 5,
10 ... ms, for a lock the saver holds ~0.1 ms), outside WAL by SQLite's
``busy_timeout``.

Never give LangGraph's ``SqliteSaver`` the ledger's connection: it commits the
whole connection after each of its writes, so it would commit half a ledger
transaction. A separate connection to the same file is fine under WAL (or use
another file)::

    saver = SqliteSaver(sqlite3.connect("app.db", check_same_thread=False))
    with SQLiteLedger.from_conn_string("app.db") as ledger:
        ledger.setup()

``AsyncSQLiteLedger`` runs the very same driver in a worker thread
(``asyncio.to_thread``); there is no second code path and no aiosqlite.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from typing import Self, TypeVar

from langgraph_effects.core.model import utcnow
from langgraph_effects.errors import LedgerUnavailable
from langgraph_effects.ledger._faces import AsyncFace, SyncFace
from langgraph_effects.ledger.base import Synchronous, check_synchronous
from langgraph_effects.ledger.engine import Program, Result
from langgraph_effects.ledger.engine.sqlite import Driver, boundary
from langgraph_effects.ledger.sqlite._sql import DIALECT

__all__ = ["AsyncSQLiteLedger", "SQLiteLedger", "Synchronous"]

T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000
"""How long a statement waits for another connection holding the file's write lock."""


def _ledger_driver(
    conn: sqlite3.Connection, synchronous: Synchronous, receipt_synchronous: Synchronous | None
) -> Driver:
    """The ledger's driver on ``conn``, once its durability and lock waits are set."""
    check_synchronous("synchronous", synchronous)
    if receipt_synchronous is not None:
        check_synchronous("receipt_synchronous", receipt_synchronous)
    with boundary(conn, DIALECT):
        # WAL persists in the file; ":memory:" keeps its own journal mode,
        # and a file system without shared memory may refuse WAL.
        (mode,) = conn.execute("PRAGMA journal_mode=WAL").fetchone()
        conn.execute(f"PRAGMA synchronous={synchronous}")
        wal = str(mode).lower() == "wal"
        # Under WAL only a writer waits, for another writer (the saver's commit on
        # its own connection, ~0.1 ms), and SQLite's busy handler would sleep 1, 2,
        # 5 ... ms: the driver waits in its own short steps instead (``busy_timeout``).
        # Outside WAL, SQLite's handler waits as usual.
        conn.execute(f"PRAGMA busy_timeout={0 if wal else BUSY_TIMEOUT_MS}")
    return Driver(
        conn,
        DIALECT,
        own=True,
        busy_timeout=BUSY_TIMEOUT_MS / 1000 if wal else 0.0,
        synchronous=synchronous,
        # A NORMAL commit under WAL loses at most the last transactions on a power
        # loss, never the file; outside WAL NORMAL is not that, so it is not a default.
        receipt_synchronous=receipt_synchronous or ("NORMAL" if wal else synchronous),
    )


def _connect(path: str) -> sqlite3.Connection:
    try:
        return sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    except sqlite3.Error as exc:
        raise LedgerUnavailable(f"cannot open SQLite ledger {path!r}: {exc}") from exc


class SQLiteLedger(SyncFace):
    """A ledger in a SQLite file (or ``":memory:"``).

    Three ways to hold one: ``with SQLiteLedger.from_conn_string(path) as ledger:``
    for a block; ``ledger = SQLiteLedger.open(path)`` for a notebook or a module,
    ``ledger.close()`` when done; or ``SQLiteLedger(conn)`` on a connection you own
    (and close). Call ``setup()`` once in each case::

        ledger = SQLiteLedger.open("app.db")
        ledger.setup()
        ...
        ledger.close()

    Args:
        conn: a connection the caller owns and gives to the ledger alone; open
            it with ``check_same_thread=False`` so tool threads may use it. The
            ledger sets WAL, ``synchronous`` and ``busy_timeout`` on it and runs
            its own ``BEGIN IMMEDIATE`` transactions.
        synchronous: ``"FULL"`` (default, survives power loss) or ``"NORMAL"``
            (survives a process crash, not a power loss).
        receipt_synchronous: the durability of receipts alone. Default:
            ``"NORMAL"`` in WAL mode (one fsync fewer per effect; the receipt is
            durable with the next FULL commit to the file), else ``synchronous``.
            ``"FULL"`` makes every receipt wait for its own fsync. See
            ``ledger.base``, "Durability of receipts".
        clock: the source of every timestamp (tests inject a fake clock).
    """

    _dialect = DIALECT

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        synchronous: Synchronous = "FULL",
        receipt_synchronous: Synchronous | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        super().__init__(clock=clock)
        self._driver = _ledger_driver(conn, synchronous, receipt_synchronous)

    @classmethod
    def open(
        cls,
        path: str,
        *,
        synchronous: Synchronous = "FULL",
        receipt_synchronous: Synchronous | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> Self:
        """A ledger on a file path (or ``":memory:"``) that owns its connection, for a
        notebook or a module: ``close()`` it when done. Call ``setup()``."""
        conn = _connect(path)
        try:
            ledger = cls(
                conn, synchronous=synchronous, receipt_synchronous=receipt_synchronous, clock=clock
            )
        except BaseException:
            conn.close()
            raise
        ledger._owned = conn.close
        return ledger

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(
        cls,
        path: str,
        *,
        synchronous: Synchronous = "FULL",
        receipt_synchronous: Synchronous | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> Iterator[Self]:
        """Open a ledger on a file path (or ``":memory:"``), closed on exit. Call ``setup()``."""
        ledger = cls.open(
            path, synchronous=synchronous, receipt_synchronous=receipt_synchronous, clock=clock
        )
        try:
            yield ledger
        finally:
            ledger.close()

    def _run(self, program: Program[T]) -> Result[T]:
        return self._driver.run(program)


class AsyncSQLiteLedger(AsyncFace):
    """The async twin of ``SQLiteLedger``: the same driver, run in a worker thread.

    ``async with AsyncSQLiteLedger.from_conn_string(path) as ledger:``, or
    ``ledger = await AsyncSQLiteLedger.open(path)`` and ``await ledger.close()``, or
    ``AsyncSQLiteLedger(conn)`` on a connection you own. Arguments as ``SQLiteLedger``'s.
    """

    _dialect = DIALECT

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        synchronous: Synchronous = "FULL",
        receipt_synchronous: Synchronous | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        super().__init__(clock=clock)
        self._driver = _ledger_driver(conn, synchronous, receipt_synchronous)

    @classmethod
    async def open(
        cls,
        path: str,
        *,
        synchronous: Synchronous = "FULL",
        receipt_synchronous: Synchronous | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> Self:
        """A ledger on a file path (or ``":memory:"``) that owns its connection:
        ``await ledger.close()`` when done. Await ``setup()``."""
        conn = await asyncio.to_thread(_connect, path)
        try:
            ledger = cls(
                conn, synchronous=synchronous, receipt_synchronous=receipt_synchronous, clock=clock
            )
        except BaseException:
            await asyncio.to_thread(conn.close)
            raise
        ledger._owned = functools.partial(asyncio.to_thread, conn.close)
        return ledger

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(
        cls,
        path: str,
        *,
        synchronous: Synchronous = "FULL",
        receipt_synchronous: Synchronous | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> AsyncIterator[Self]:
        """Open a ledger on a file path (or ``":memory:"``), closed on exit. Await ``setup()``."""
        ledger = await cls.open(
            path, synchronous=synchronous, receipt_synchronous=receipt_synchronous, clock=clock
        )
        try:
            yield ledger
        finally:
            await ledger.close()

    async def _arun(self, program: Program[T]) -> Result[T]:
        return await self._driver.arun(program)
