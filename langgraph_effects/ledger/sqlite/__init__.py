"""The SQLite ledger: the embedded default, sync and async, on the stdlib ``sqlite3``.

Durability: WAL with ``synchronous=FULL`` by default, so a committed
transition survives a power loss. ``synchronous="NORMAL"`` is an explicit
option: about ten times faster commits that survive a process crash but may
lose the last transactions on a power loss or OS crash.

``receipt_synchronous="NORMAL"`` (opt-in) weakens only receipts (``confirm``,
``confirm_many``): they skip their own fsync and survive any process crash;
on a power loss they are durable once the next FULL commit to the same WAL
(the saver's checkpoint of the tool results, when it shares the file, or the
ledger's next write) has synced. A lost receipt is never a duplicate: the
record stays ``dispatching``, is taken over, marked ``unknown`` and reconciled,
exactly as after a crash between the provider's answer and ``confirm``. The
write-ahead record (``prepare``, ``claim``) always keeps ``synchronous``: it
must be on disk before the provider is called. The default stays FULL for
receipts too, because without a reconciler or an open idempotency window a
lost receipt costs a person's review, and a user who asked for FULL should
not get that silently; choose NORMAL receipts where reconciliation is
automatic (a status lookup or a provider idempotency key) and every fsync counts.

One connection per ledger object, guarded by a lock: every statement of one
ledger operation runs while holding it, and writes run in
``BEGIN IMMEDIATE ... COMMIT``, so parallel tool threads queue on the lock
instead of spinning in SQLite's busy wait. ``busy_timeout`` still covers other
processes writing the same file.

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
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from typing import Literal, Self, TypeVar

from langgraph_effects.core.model import utcnow
from langgraph_effects.errors import LedgerUnavailable
from langgraph_effects.ledger._faces import AsyncFace, SyncFace
from langgraph_effects.ledger._statements import Program, Result, compile_statements, drive
from langgraph_effects.ledger.sqlite._driver import boundary, dict_cursor, executor
from langgraph_effects.ledger.sqlite._sql import DIALECT

__all__ = ["AsyncSQLiteLedger", "SQLiteLedger", "Synchronous"]

T = TypeVar("T")

Synchronous = Literal["FULL", "NORMAL"]
"""``FULL`` survives power loss; ``NORMAL`` (under WAL) survives a process crash only."""

BUSY_TIMEOUT_MS = 5000
"""How long a write waits for another *process* holding the file's write lock."""


class _Driver:
    """Runs programs on one connection: the lock, the transaction, the error boundary."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        synchronous: Synchronous,
        receipt_synchronous: Synchronous | None = None,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', not {synchronous!r}")
        if receipt_synchronous not in ("FULL", "NORMAL", None):
            raise ValueError(
                f"receipt_synchronous must be 'FULL' or 'NORMAL', not {receipt_synchronous!r}"
            )
        self.conn = conn
        self.synchronous = synchronous
        self.receipt_synchronous = receipt_synchronous or synchronous
        self.lock = threading.Lock()
        with self.lock, boundary(conn, DIALECT):
            # WAL persists in the file; ":memory:" keeps its own journal mode.
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={synchronous}")
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        # One cursor for every program: they all run under the lock.
        self.cur = dict_cursor(conn)
        self.execute = executor(self.cur)

    def run(self, program: Program[T]) -> Result[T]:
        with self.lock, boundary(self.conn, DIALECT):
            cur, execute = self.cur, self.execute
            if not program.writes:
                return drive(execute, compile_statements(DIALECT, program.statements))
            # synchronous applies at commit time, per connection: switch it for
            # this one receipt transaction only, and back before anything else.
            relaxed = program.receipt and self.receipt_synchronous != self.synchronous
            if relaxed:
                cur.execute(f"PRAGMA synchronous={self.receipt_synchronous}")
            try:
                cur.execute("BEGIN IMMEDIATE")
                try:
                    result = drive(execute, compile_statements(DIALECT, program.statements))
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        self.conn.rollback()
                    raise
                self.conn.commit()
            finally:
                if relaxed:
                    cur.execute(f"PRAGMA synchronous={self.synchronous}")
            return result


def _connect(path: str) -> sqlite3.Connection:
    try:
        return sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    except sqlite3.Error as exc:
        raise LedgerUnavailable(f"cannot open SQLite ledger {path!r}: {exc}") from exc


class SQLiteLedger(SyncFace):
    """A ledger in a SQLite file (or ``":memory:"``).

    Args:
        conn: a connection the caller owns and gives to the ledger alone; open
            it with ``check_same_thread=False`` so tool threads may use it. The
            ledger sets WAL, ``synchronous`` and ``busy_timeout`` on it and runs
            its own ``BEGIN IMMEDIATE`` transactions.
        synchronous: ``"FULL"`` (default, survives power loss) or ``"NORMAL"``
            (survives a process crash, not a power loss).
        receipt_synchronous: the durability of receipts alone; default the same
            as ``synchronous``. ``"NORMAL"`` saves one fsync per effect (see the
            module docstring for when a lost receipt costs a review).
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
        self._driver = _Driver(conn, synchronous, receipt_synchronous)

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
        conn = _connect(path)
        try:
            yield cls(
                conn,
                synchronous=synchronous,
                receipt_synchronous=receipt_synchronous,
                clock=clock,
            )
        finally:
            conn.close()

    def _run(self, program: Program[T]) -> Result[T]:
        return self._driver.run(program)


class AsyncSQLiteLedger(AsyncFace):
    """The async twin of ``SQLiteLedger``: the same driver, run in a worker thread."""

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
        self._driver = _Driver(conn, synchronous, receipt_synchronous)

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
        conn = await asyncio.to_thread(_connect, path)
        try:
            yield cls(
                conn,
                synchronous=synchronous,
                receipt_synchronous=receipt_synchronous,
                clock=clock,
            )
        finally:
            await asyncio.to_thread(conn.close)

    async def _arun(self, program: Program[T]) -> Result[T]:
        return await asyncio.to_thread(self._driver.run, program)
