"""Run statement programs on psycopg connections; map its errors into ``errors.py``.

The one PostgreSQL boundary of the package: the ledger, the outbox and the run
journal all run their programs through it. A missing schema is told by the
exception class (``UndefinedTable``, ``UndefinedColumn``), never by its message.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

import psycopg
from psycopg import pq
from psycopg.rows import DictRow, dict_row

from langgraph_effects.errors import InvalidInput, LedgerUnavailable
from langgraph_effects.ledger._statements import (
    Dialect,
    Program,
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


def run(conn: psycopg.Connection[Any], dialect: Dialect, program: Program[T], *, commit: bool) -> T:
    """Run ``program`` on a connection the caller owns.

    An ``atomic`` program runs in ``conn.transaction()``: a savepoint inside the
    caller's open transaction, else a transaction of its own, committed here.
    Any other runs its statements as they come; with ``commit`` the connection
    is committed after them (a no-op in autocommit mode), rolled back on an error.
    """
    with boundary(dialect), conn.cursor(row_factory=dict_row) as cur:

        def execute(sql: str, params: Mapping[str, Any], adhoc: bool) -> list[DictRow]:
            cur.execute(sql, params, prepare=False if adhoc else None)
            return cur.fetchall() if has_rows(cur) else []

        raw = compile_statements(dialect, program.statements)
        if program.atomic:
            with conn.transaction():
                return drive(execute, raw).value
        try:
            value = drive(execute, raw).value
        except BaseException:
            if commit:
                with contextlib.suppress(psycopg.Error):
                    conn.rollback()
            raise
        if commit:
            conn.commit()
        return value


async def arun(
    conn: psycopg.AsyncConnection[Any], dialect: Dialect, program: Program[T], *, commit: bool
) -> T:
    """``run`` on an ``AsyncConnection``: the same statements, awaited."""
    with boundary(dialect):
        async with conn.cursor(row_factory=dict_row) as cur:

            async def execute(sql: str, params: Mapping[str, Any], adhoc: bool) -> list[DictRow]:
                await cur.execute(sql, params, prepare=False if adhoc else None)
                return await cur.fetchall() if has_rows(cur) else []

            raw = compile_statements(dialect, program.statements)
            if program.atomic:
                async with conn.transaction():
                    return (await adrive(execute, raw)).value
            try:
                value = (await adrive(execute, raw)).value
            except BaseException:
                if commit:
                    with contextlib.suppress(psycopg.Error):
                        await conn.rollback()
                raise
            if commit:
                await conn.commit()
            return value
