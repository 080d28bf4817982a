"""Run statement programs on a ``sqlite3`` connection; map its errors into ``errors.py``.

The one SQLite boundary of the package: the ledger, the outbox and the run
journal all run their programs through it. sqlite3 raises ``OperationalError``
for a missing table and a locked file alike, so a missing schema is decided by
looking at the schema, never at the message: the dialect's tables in
``sqlite_master`` and its recorded schema version.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from langgraph_effects.errors import InvalidInput, LedgerNotSetUp, LedgerUnavailable
from langgraph_effects.ledger._statements import (
    SCHEMA_VERSION,
    Dialect,
    Execute,
    Program,
    Result,
    Rows,
    compile_statements,
    drive,
    not_set_up,
)

__all__ = ["boundary", "dict_cursor", "executor", "run"]

T = TypeVar("T")


def _dict_row(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    return {column[0]: value for column, value in zip(cursor.description, row, strict=True)}


def dict_cursor(conn: sqlite3.Connection) -> sqlite3.Cursor:
    """A cursor whose rows are dicts, whatever the connection's row factory
    (an application's connection may use ``sqlite3.Row``)."""
    cur = conn.cursor()
    cur.row_factory = _dict_row
    return cur


def executor(cur: sqlite3.Cursor) -> Execute:
    """``execute(sql, params, adhoc) -> rows`` on ``cur`` (SQLite plans nothing ahead)."""

    def execute(sql: str, params: Mapping[str, Any], adhoc: bool) -> Rows:
        return cur.execute(sql, params).fetchall()

    return execute


@contextlib.contextmanager
def boundary(conn: sqlite3.Connection, dialect: Dialect) -> Iterator[None]:
    """Translate driver errors: a missing or older schema -> ``LedgerNotSetUp``, the rest
    -> ``LedgerUnavailable``; a value SQLite cannot encode -> ``InvalidInput``."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        missing = _missing_schema(conn, dialect)
        if missing is not None:
            raise missing from exc
        raise LedgerUnavailable(f"SQLite failed: {exc}") from exc
    except sqlite3.Error as exc:
        raise LedgerUnavailable(f"SQLite failed: {exc}") from exc
    except UnicodeEncodeError as exc:
        # A lone surrogate UTF-8 cannot encode: bad input, not an outage. Results
        # and evidence never get here: they are escaped first (core.storable).
        raise InvalidInput(f"SQLite cannot store a value: {exc}") from exc


def _missing_schema(conn: sqlite3.Connection, dialect: Dialect) -> LedgerNotSetUp | None:
    """The error to raise when the dialect's schema is missing or older than this release."""
    try:
        cur = conn.cursor()
        cur.row_factory = None
        present = {name for (name,) in cur.execute("SELECT name FROM sqlite_master")}
        absent = [t for t in dialect.tables if t not in present]
        version = None
        if dialect.tables[0] in present:  # the version table
            sql = dialect.statements[SCHEMA_VERSION]
            assert isinstance(sql, str)
            (version,) = cur.execute(sql).fetchone()
    except sqlite3.Error:
        return None  # the schema cannot be read either: the database failed
    if absent:
        return not_set_up(dialect, version, f"table {absent[0]!r} is missing")
    if version is not None and int(version) < len(dialect.migrations):
        return not_set_up(dialect, int(version), "a column or table is missing")
    return None


def run(conn: sqlite3.Connection, dialect: Dialect, program: Program[T], *, commit: bool) -> T:
    """Run ``program`` on a connection the caller owns.

    An ``atomic`` program runs in the caller's open transaction, or else in
    one of its own (``BEGIN IMMEDIATE``: one writer at a time), committed here.
    Any other runs its statements as they come; with ``commit``, a transaction
    the driver opened implicitly (legacy sqlite3 mode) is committed after them,
    rolled back on an error.
    """
    with boundary(conn, dialect):
        cur = dict_cursor(conn)
        execute = executor(cur)
        raw = compile_statements(dialect, program.statements)
        if not program.atomic:
            try:
                result: Result[T] = drive(execute, raw)
            except BaseException:
                if commit:
                    with contextlib.suppress(sqlite3.Error):
                        conn.rollback()
                raise
            if commit:
                conn.commit()
            return result.value
        if conn.in_transaction:
            return drive(execute, raw).value
        cur.execute("BEGIN IMMEDIATE")
        try:
            result = drive(execute, raw)
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                cur.execute("ROLLBACK")
            raise
        cur.execute("COMMIT")
        return result.value
