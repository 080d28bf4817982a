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
from collections.abc import Mapping
from types import TracebackType
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

__all__ = ["boundary", "executor", "plain_cursor", "run"]

T = TypeVar("T")


def plain_cursor(conn: sqlite3.Connection) -> sqlite3.Cursor:
    """A cursor whose rows are tuples, whatever the connection's row factory
    (an application's connection may use ``sqlite3.Row``); ``executor`` makes dicts."""
    cur = conn.cursor()
    cur.row_factory = None
    return cur


def executor(cur: sqlite3.Cursor, dialect: Dialect) -> Execute:
    """``execute(sql, params, adhoc) -> rows`` on a ``plain_cursor`` (SQLite plans nothing ahead).

    Rows become dicts here, the column names read once per statement: a row
    factory in Python would rebuild them for every row, at twice the cost. An
    insert the dialect names in ``inserted_id`` returns its row's id from
    ``lastrowid`` (no row when it inserted none).
    """
    inserted_id = dialect.inserted_id

    def execute(sql: str, params: Mapping[str, Any], adhoc: bool) -> Rows:
        column = inserted_id.get(sql)
        if column is not None:
            cur.execute(sql, params)
            return [{column: cur.lastrowid}] if cur.rowcount == 1 else []
        rows = cur.execute(sql, params).fetchall()
        if not rows:
            return []
        names = [column[0] for column in cur.description]
        return [dict(zip(names, row, strict=True)) for row in rows]

    return execute


class boundary:  # lower case: used as a function, ``with boundary(conn, dialect):``
    """Translate driver errors: a missing or older schema -> ``LedgerNotSetUp``, the rest
    -> ``LedgerUnavailable``; a value SQLite cannot encode -> ``InvalidInput``.

    A class, not a ``contextlib.contextmanager``: it wraps every program the
    ledger runs, and a generator-based manager costs a generator per use.
    """

    __slots__ = ("conn", "dialect")

    def __init__(self, conn: sqlite3.Connection, dialect: Dialect) -> None:
        self.conn = conn
        self.dialect = dialect

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            return
        if isinstance(exc, sqlite3.OperationalError):
            # Only SQLite's generic error can be a missing table or column ("no such
            # table"); a full disk, an I/O error or a read-only file is the database
            # failing, whatever the schema (setup() on a full disk is not "not set up").
            generic = getattr(exc, "sqlite_errorcode", sqlite3.SQLITE_ERROR) == sqlite3.SQLITE_ERROR
            missing = _missing_schema(self.conn, self.dialect) if generic else None
            if missing is not None:
                raise missing from exc
            raise LedgerUnavailable(f"SQLite failed: {exc}") from exc
        if isinstance(exc, sqlite3.Error):
            raise LedgerUnavailable(f"SQLite failed: {exc}") from exc
        if isinstance(exc, UnicodeEncodeError):
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
        cur = plain_cursor(conn)
        execute = executor(cur, dialect)
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
