"""Run statement programs on psycopg connections; map its errors into ``errors.py``.

The one PostgreSQL boundary of the package: the ledger, the outbox and the run
journal all run their programs through it. A missing schema is told by the
exception class (``UndefinedTable``, ``UndefinedColumn``), never by its message.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, TypeVar

import psycopg
from psycopg import pq
from psycopg.rows import DictRow, dict_row

from langgraph_effects.errors import InvalidInput, LedgerUnavailable
from langgraph_effects.ledger.engine import (
    Dialect,
    Program,
    Result,
    adrive,
    compile_statements,
    drive,
    not_set_up,
)

__all__ = ["arun", "boundary", "has_rows", "run"]

T = TypeVar("T")


@contextlib.contextmanager
def boundary(dialect: Dialect) -> Iterator[None]:
    """Translate driver errors: a missing table or column -> ``LedgerNotSetUp``, a value
    PostgreSQL cannot hold -> ``InvalidInput``, the rest -> ``LedgerUnavailable``."""
    try:
        yield
    except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn) as exc:
        raise not_set_up(dialect, None, f"PostgreSQL: {exc.diag.message_primary or exc}") from exc
    except (UnicodeEncodeError, psycopg.DataError) as exc:
        # A value PostgreSQL cannot hold (a NUL, a lone surrogate): bad input, not an outage.
        # Results and evidence never get here: they are escaped first (core.storable).
        raise InvalidInput(f"PostgreSQL cannot store a value: {exc}") from exc
    except psycopg.Error as exc:  # includes the pool's PoolTimeout and PoolClosed
        raise LedgerUnavailable(f"PostgreSQL failed: {exc}") from exc


def has_rows(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> bool:
    """The statement returned a result set (possibly empty).

    Read from the result status, not ``cur.description``: that builds a
    ``Column`` object per column (30 us per statement on a 30-column row).
    """
    result = cur.pgresult
    return result is not None and result.status == pq.ExecStatus.TUPLES_OK


PIPELINE, BLOCK = "pipeline", "block"


def _transaction(
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], program: Program[Any], own: bool
) -> str | None:
    """How ``program`` runs: ``BLOCK`` in ``conn.transaction()`` (a savepoint inside an
    open transaction), ``PIPELINE`` as ``BEGIN ... COMMIT`` in pipeline mode, or
    (None) its statements as they come.

    An ``atomic`` program needs a transaction; on the ledger's own connection (``own``)
    so does every program of a plain (not autocommit) connection, which commits
    nothing else. Pipelined where it can be, on the ledger's autocommit connection: BEGIN
    travels with the first statement and COMMIT (or ROLLBACK) with the pipeline's
    closing sync, instead of each waiting for its own answer: two round trips fewer.
    """
    if not own:
        return BLOCK if program.atomic else None
    if program.atomic and conn.autocommit and psycopg.Pipeline.is_supported():
        return PIPELINE
    return BLOCK if program.atomic or not conn.autocommit else None


@contextlib.contextmanager
def _framed(
    conn: psycopg.Connection[Any], cur: psycopg.Cursor[Any], how: str | None, commit: bool
) -> Iterator[psycopg.Pipeline | None]:
    """The transaction ``how`` names (``_transaction``) around the block; the pipeline to
    sync after each statement, if any. Unframed, ``commit`` commits after the block (a
    no-op in autocommit mode) and rolls back on an error."""
    if how == BLOCK:
        with conn.transaction():
            yield None
    elif how == PIPELINE:
        with conn.pipeline() as pipe:
            cur.execute("BEGIN")
            try:
                yield pipe
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")
    else:
        try:
            yield None
        except BaseException:
            if commit:
                with contextlib.suppress(psycopg.Error):
                    conn.rollback()
            raise
        if commit:
            conn.commit()


@contextlib.asynccontextmanager
async def _aframed(
    conn: psycopg.AsyncConnection[Any], cur: psycopg.AsyncCursor[Any], how: str | None, commit: bool
) -> AsyncIterator[psycopg.AsyncPipeline | None]:
    """``_framed``, awaited."""
    if how == BLOCK:
        async with conn.transaction():
            yield None
    elif how == PIPELINE:
        async with conn.pipeline() as pipe:
            await cur.execute("BEGIN")
            try:
                yield pipe
            except BaseException:
                await cur.execute("ROLLBACK")
                raise
            await cur.execute("COMMIT")
    else:
        try:
            yield None
        except BaseException:
            if commit:
                with contextlib.suppress(psycopg.Error):
                    await conn.rollback()
            raise
        if commit:
            await conn.commit()


def run(
    connection: contextlib.AbstractContextManager[psycopg.Connection[Any]],
    dialect: Dialect,
    program: Program[T],
    *,
    own: bool = False,
    commit: bool = False,
) -> Result[T]:
    """The one synchronous PostgreSQL driver: run ``program`` on the connection entered,
    in the transaction it needs (``_transaction``: ``own`` says the connection is the
    ledger's; ``_framed``, where ``commit`` commits after a program that needs none)."""
    with (
        boundary(dialect),
        connection as conn,
        conn.cursor(row_factory=dict_row) as cur,
        _framed(conn, cur, _transaction(conn, program, own), commit) as pipe,
    ):

        def execute(sql: str, params: Mapping[str, Any], adhoc: bool) -> list[DictRow]:
            cur.execute(sql, params, prepare=False if adhoc else None)
            if pipe is not None:
                pipe.sync()  # the queued BEGIN and this statement: one round trip
            return cur.fetchall() if has_rows(cur) else []

        return drive(execute, compile_statements(dialect, program.statements))


async def arun(
    connection: contextlib.AbstractAsyncContextManager[psycopg.AsyncConnection[Any]],
    dialect: Dialect,
    program: Program[T],
    *,
    own: bool = False,
    commit: bool = False,
) -> Result[T]:
    """The one asynchronous PostgreSQL driver: ``run``'s statements, awaited."""
    with boundary(dialect):
        async with (
            connection as conn,
            conn.cursor(row_factory=dict_row) as cur,
            _aframed(conn, cur, _transaction(conn, program, own), commit) as pipe,
        ):

            async def execute(sql: str, params: Mapping[str, Any], adhoc: bool) -> list[DictRow]:
                await cur.execute(sql, params, prepare=False if adhoc else None)
                if pipe is not None:
                    await pipe.sync()
                return await cur.fetchall() if has_rows(cur) else []

            return await adrive(execute, compile_statements(dialect, program.statements))
