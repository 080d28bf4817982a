"""The PostgreSQL ledger: production, shared by many workers on many machines (psycopg 3).

Give it a ``psycopg_pool.ConnectionPool`` (``AsyncConnectionPool`` for the
async twin) that you own, and it borrows a connection per operation. It may
be the very pool LangGraph's ``PostgresSaver`` uses::

    pool = ConnectionPool(url, kwargs={"autocommit": True, "prepare_threshold": 0,
                                       "row_factory": dict_row})
    checkpointer = PostgresSaver(pool)
    ledger = PostgresLedger(pool)
    ledger.setup()

Share a pool, never a single connection with the saver. The ledger works with
that configuration and with a plain pool: it sets its own row factory per
cursor, and where statements must commit together it opens an explicit
transaction. On an autocommit connection a transition is one statement, one
round trip and one commit; on a plain one it is wrapped in ``BEGIN ... COMMIT``.
A single ``psycopg.Connection`` is accepted too, and used under a lock.

Receipts (``confirm``, ``confirm_many``) commit with ``synchronous_commit = off``
by default (``receipt_synchronous="NORMAL"``), set inside their own statement:
they do not wait for the WAL flush, and are durable with the next synchronous
commit on the server (the saver's checkpoint write when it shares the server)
or the WAL writer's next flush. The write-ahead record (``prepare``, ``claim``) and
every decision that stops or changes a call (``approve``, ``reject``, ``release``,
``mark_unknown``, ``resolve``, ``record_evidence``: ``ledger._programs.DURABLE``) commit
with at least ``synchronous_commit = on`` (``prepare_synchronous="ON"``, the default),
set inside their own statement the same way: a session, role or database setting of
``off`` or ``local`` is raised for that transaction, a stricter one kept.
The rule, and what a receipt lost to a server crash costs (never a duplicate), is in
``ledger.base`` ("Durability of receipts").

``setup()`` creates only ``lge_`` tables, under ``pg_advisory_xact_lock``,
and records its version in ``lge_schema_version``. Using the ledger before
``setup()`` raises ``LedgerNotSetUp``; a database error raises
``LedgerUnavailable`` (its cause attached).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from typing import Any, Self, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from langgraph_effects.core.model import utcnow
from langgraph_effects.errors import LedgerUnavailable
from langgraph_effects.ledger._faces import AsyncFace, SyncFace
from langgraph_effects.ledger.base import (
    PrepareSynchronous,
    Synchronous,
    check_prepare_synchronous,
    check_synchronous,
)
from langgraph_effects.ledger.engine import Dialect, Program, Result
from langgraph_effects.ledger.engine.postgres import arun, run
from langgraph_effects.ledger.postgres._sql import DIALECT, RECEIPT_DIALECT, SERVER_DIALECT

__all__ = ["AsyncPostgresLedger", "PostgresLedger", "PrepareSynchronous"]

T = TypeVar("T")

POOL_KWARGS: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0}
"""Connections of the pool ``from_conn_string`` opens (LangGraph's saver uses the same)."""


def _probe_args(url: str, pool_timeout: float) -> dict[str, Any]:
    """The one direct connection ``open`` makes before its pool: the URL's own
    ``connect_timeout``, else the pool's timeout."""
    if "connect_timeout" in conninfo_to_dict(url):
        return {}
    return {"connect_timeout": max(1, round(pool_timeout))}


def _unreachable(exc: psycopg.Error) -> LedgerUnavailable:
    """Why the server cannot be reached (refused, unknown host, wrong password), at once: a
    pool would only say, after its timeout, that it got no connection in time."""
    return LedgerUnavailable(f"cannot connect to PostgreSQL: {str(exc).strip()}")


def _write_dialect(prepare_synchronous: PrepareSynchronous | None) -> Dialect:
    """The dialect every program but a receipt runs with (``PrepareSynchronous``).

    Raises:
        InvalidInput: neither ``"ON"`` nor ``"SERVER"`` (a ``ValueError``).
    """
    check_prepare_synchronous(prepare_synchronous)
    return SERVER_DIALECT if prepare_synchronous == "SERVER" else DIALECT


def _receipt_dialect(receipt_synchronous: Synchronous | None) -> Dialect:
    """The dialect receipts run with: ``RECEIPT_DIALECT`` unless ``"FULL"``."""
    if receipt_synchronous is None:
        return RECEIPT_DIALECT
    check_synchronous("receipt_synchronous", receipt_synchronous)
    return RECEIPT_DIALECT if receipt_synchronous == "NORMAL" else DIALECT


class PostgresLedger(SyncFace):
    """A ledger in PostgreSQL, synchronous.

    Three ways to hold one: ``PostgresLedger(pool)`` on a pool you own (share it with
    LangGraph's ``PostgresSaver``, never one connection); ``with
    PostgresLedger.from_conn_string(url) as ledger:`` on a pool of its own for a block;
    or ``ledger = PostgresLedger.open(url)`` for a module or a notebook, ``ledger.close()``
    when done. Call ``setup()`` once.

    Args:
        conn: a ``ConnectionPool`` (preferred) or a ``Connection``, owned by the caller.
        receipt_synchronous: ``"NORMAL"`` (default): receipts commit without
            waiting for the WAL flush; ``"FULL"``: with the server's
            ``synchronous_commit``, like every other write. See ``ledger.base``,
            "Durability of receipts".
        prepare_synchronous: ``"ON"`` (default): the write-ahead record and every
            decision commit with at least ``synchronous_commit = on``; ``"SERVER"``: with
            the session's setting, however weak (``PrepareSynchronous``).
        clock: the source of every timestamp (bound as a parameter, never ``now()``).
    """

    _dialect = DIALECT

    def __init__(
        self,
        conn: ConnectionPool[Any] | psycopg.Connection[Any],
        *,
        receipt_synchronous: Synchronous | None = None,
        prepare_synchronous: PrepareSynchronous | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        super().__init__(clock=clock)
        self._conn = conn
        self._receipt_dialect = _receipt_dialect(receipt_synchronous)
        self._write_dialect = _write_dialect(prepare_synchronous)
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls,
        url: str,
        *,
        receipt_synchronous: Synchronous | None = None,
        prepare_synchronous: PrepareSynchronous | None = None,
        clock: Callable[[], datetime] = utcnow,
        max_size: int = 10,
        pool_timeout: float = 30.0,
    ) -> Self:
        """A ledger on a pool of its own, for a notebook or a module: ``close()`` it when
        done. Call ``setup()`` once.

        ``pool_timeout``: seconds to wait for a connection before ``LedgerUnavailable``.

        Raises:
            LedgerUnavailable: the server cannot be reached now (a refused port, an
                unknown host, a wrong password), with the driver's reason, at once: one
                direct connection is made before the pool opens.
        """
        try:
            psycopg.connect(url, **_probe_args(url, pool_timeout)).close()
        except psycopg.Error as exc:
            raise _unreachable(exc) from exc
        pool: ConnectionPool[Any] = ConnectionPool(
            url, min_size=1, max_size=max_size, kwargs=POOL_KWARGS, timeout=pool_timeout, open=False
        )
        pool.open()
        try:
            ledger = cls(
                pool,
                receipt_synchronous=receipt_synchronous,
                prepare_synchronous=prepare_synchronous,
                clock=clock,
            )
        except BaseException:
            pool.close()
            raise
        ledger._owned = pool.close
        return ledger

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(
        cls,
        url: str,
        *,
        receipt_synchronous: Synchronous | None = None,
        prepare_synchronous: PrepareSynchronous | None = None,
        clock: Callable[[], datetime] = utcnow,
        max_size: int = 10,
        pool_timeout: float = 30.0,
    ) -> Iterator[Self]:
        """Open a ledger on its own pool (closed on exit). Call ``setup()`` once.

        ``pool_timeout``: seconds to wait for a connection before ``LedgerUnavailable``.
        """
        ledger = cls.open(
            url,
            receipt_synchronous=receipt_synchronous,
            prepare_synchronous=prepare_synchronous,
            clock=clock,
            max_size=max_size,
            pool_timeout=pool_timeout,
        )
        try:
            yield ledger
        finally:
            ledger.close()

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        if isinstance(self._conn, ConnectionPool):
            with self._conn.connection() as conn:
                yield conn
        else:
            with self._lock:
                yield self._conn

    def _run(self, program: Program[T]) -> Result[T]:
        dialect = self._receipt_dialect if program.relaxed else self._write_dialect
        return run(self._connection(), dialect, program, own=True)


class AsyncPostgresLedger(AsyncFace):
    """A ledger in PostgreSQL, asynchronous: the same statements, awaited.

    ``AsyncPostgresLedger(pool)`` on an ``AsyncConnectionPool`` you own, ``async with
    AsyncPostgresLedger.from_conn_string(url) as ledger:``, or ``ledger = await
    AsyncPostgresLedger.open(url)`` and ``await ledger.close()``.

    Args:
        conn: an ``AsyncConnectionPool`` (preferred) or an ``AsyncConnection``.
        receipt_synchronous: as ``PostgresLedger``'s.
        prepare_synchronous: as ``PostgresLedger``'s.
        clock: the source of every timestamp.
    """

    _dialect = DIALECT

    def __init__(
        self,
        conn: AsyncConnectionPool[Any] | psycopg.AsyncConnection[Any],
        *,
        receipt_synchronous: Synchronous | None = None,
        prepare_synchronous: PrepareSynchronous | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        super().__init__(clock=clock)
        self._conn = conn
        self._receipt_dialect = _receipt_dialect(receipt_synchronous)
        self._write_dialect = _write_dialect(prepare_synchronous)
        self._lock = asyncio.Lock()

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        receipt_synchronous: Synchronous | None = None,
        prepare_synchronous: PrepareSynchronous | None = None,
        clock: Callable[[], datetime] = utcnow,
        max_size: int = 10,
        pool_timeout: float = 30.0,
    ) -> Self:
        """A ledger on a pool of its own: ``await ledger.close()`` when done. Await
        ``setup()`` once.

        Raises:
            LedgerUnavailable: as ``PostgresLedger.open``.
        """
        try:
            probe = await psycopg.AsyncConnection.connect(url, **_probe_args(url, pool_timeout))
        except psycopg.Error as exc:
            raise _unreachable(exc) from exc
        await probe.close()
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            url, min_size=1, max_size=max_size, kwargs=POOL_KWARGS, timeout=pool_timeout, open=False
        )
        await pool.open()
        try:
            ledger = cls(
                pool,
                receipt_synchronous=receipt_synchronous,
                prepare_synchronous=prepare_synchronous,
                clock=clock,
            )
        except BaseException:
            await pool.close()
            raise
        ledger._owned = pool.close
        return ledger

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(
        cls,
        url: str,
        *,
        receipt_synchronous: Synchronous | None = None,
        prepare_synchronous: PrepareSynchronous | None = None,
        clock: Callable[[], datetime] = utcnow,
        max_size: int = 10,
        pool_timeout: float = 30.0,
    ) -> AsyncIterator[Self]:
        """Open a ledger on its own pool (closed on exit). Await ``setup()`` once."""
        ledger = await cls.open(
            url,
            receipt_synchronous=receipt_synchronous,
            prepare_synchronous=prepare_synchronous,
            clock=clock,
            max_size=max_size,
            pool_timeout=pool_timeout,
        )
        try:
            yield ledger
        finally:
            await ledger.close()

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if isinstance(self._conn, AsyncConnectionPool):
            async with self._conn.connection() as conn:
                yield conn
        else:
            async with self._lock:
                yield self._conn

    async def _arun(self, program: Program[T]) -> Result[T]:
        dialect = self._receipt_dialect if program.relaxed else self._write_dialect
        return await arun(self._connection(), dialect, program, own=True)
