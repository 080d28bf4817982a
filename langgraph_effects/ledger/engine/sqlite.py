"""Run statement programs on a ``sqlite3`` connection; map its errors into ``errors.py``.

The one SQLite boundary of the package: the ledger, the outbox and the run
journal all run their programs through it. sqlite3 raises ``OperationalError``
for a missing table and a locked file alike, so a missing schema is decided by
looking at the schema, never at the message: the dialect's tables in
``sqlite_master`` and its recorded schema version.
"""

from __future__ import annotations

import asyncio
import contextlib
import operator
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar

from langgraph_effects.errors import InvalidInput, LedgerNotSetUp, LedgerUnavailable
from langgraph_effects.ledger.engine import (
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

__all__ = ["Driver", "boundary", "executor", "parameter_names", "plain_cursor"]

T = TypeVar("T")

_SQLITE_BUSY = 5
_FIRST_WAIT, _LONGEST_WAIT = 20e-6, 1e-3
"""The driver's own waits for a lock under WAL: 20 us, doubling up to 1 ms."""


def plain_cursor(conn: sqlite3.Connection) -> sqlite3.Cursor:
    """A cursor whose rows are tuples, whatever the connection's row factory
    (an application's connection may use ``sqlite3.Row``); ``executor`` makes dicts."""
    cur = conn.cursor()
    cur.row_factory = None
    return cur


# A string literal, a quoted name or a comment (copied as they are), or a ``:name`` parameter.
_TOKENS = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|/\*.*?\*/|:([A-Za-z_]\w*)""", re.S)

_Positional = tuple[str, Callable[[Mapping[str, Any]], tuple[Any, ...]]]
_POSITIONAL: dict[str, _Positional] = {}
"""Each statement's text with numbered parameters (``?1``), and the getter of its values."""
_NAMES: dict[str, tuple[str, ...]] = {}
"""The parameter names of each numbered text, in their places."""


def parameter_names(text: str) -> tuple[str, ...] | None:
    """The names of a numbered statement's values, in their places (None: not one of ours).

    For a cursor that watches what the driver runs (``testing.scenario.receipts``)."""
    return _NAMES.get(text)


def _positional(sql: str) -> _Positional:
    """``sql`` with each ``:name`` as ``?N`` (N: the name's place), and ``params -> values``.

    sqlite3 binds a tuple by place at about two thirds the cost of a dict by
    name (which looks each name up through a new string); the statement and
    its values are the same. Made once per statement text, for every driver.
    """
    found = _POSITIONAL.get(sql)
    if found is not None:
        return found
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return match.group(0)
        return f"?{names.setdefault(name, len(names) + 1)}"

    text = _TOKENS.sub(number, sql)
    if len(names) > 1:
        get: Callable[[Mapping[str, Any]], tuple[Any, ...]] = operator.itemgetter(*names)
    elif names:
        (only,) = names
        get = lambda params: (params[only],)  # noqa: E731
    else:
        get = lambda params: ()  # noqa: E731
    _NAMES[text] = tuple(names)
    found = _POSITIONAL[sql] = (text, get)
    return found


def executor(cur: sqlite3.Cursor, dialect: Dialect) -> Execute:
    """``execute(sql, params, adhoc) -> rows`` on a ``plain_cursor`` (SQLite plans nothing ahead).

    Values are bound by place (``_positional``); a value missing from ``params``
    runs the statement by name, so sqlite3 raises its own error. Rows become
    dicts here, the column names read once per statement: a row factory in
    Python would rebuild them for every row, at twice the cost. An insert the
    dialect names in ``inserted_id`` returns its row's id from ``lastrowid``
    (no row when it inserted none).
    """
    inserted_id = dialect.inserted_id

    def bound(sql: str, params: Mapping[str, Any]) -> sqlite3.Cursor:
        text, get = _positional(sql)
        try:
            values = get(params)
        except KeyError:
            return cur.execute(sql, params)
        return cur.execute(text, values)

    def execute(sql: str, params: Mapping[str, Any], adhoc: bool) -> Rows:
        column = inserted_id.get(sql)
        if column is not None:
            bound(sql, params)
            return [{column: cur.lastrowid}] if cur.rowcount == 1 else []
        rows = bound(sql, params).fetchall()
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


class Driver:
    """The one SQLite driver: runs statement programs on one ``sqlite3`` connection.

    The ledger keeps one on its own connection (``own``: every write is its own
    ``BEGIN IMMEDIATE ... COMMIT``, under ``lock``, a busy file waited for in short
    steps up to ``busy_timeout`` s, a receipt committed with ``receipt_synchronous``);
    the outbox and the journal make one per call on the application's connection,
    where ``atomic`` alone asks for a transaction and the caller's open one holds it.

    Args:
        conn: the connection; its cursor and ``execute`` are made once.
        dialect: the tables' SQL.
        own: the connection is the ledger's: a ``writes`` program takes the write
            lock first (SQLite's chains write several rows), unless ``reads_first``
            (it takes the lock itself, ``WRITE_LOCK``); every program is committed.
        busy_timeout: seconds the driver itself waits for a lock (0: SQLite's busy
            handler, or none, does).
        synchronous: the connection's ``synchronous``, restored after a receipt.
        receipt_synchronous: ``synchronous`` for a ``relaxed`` program's commit.
    """

    __slots__ = (
        "busy_timeout",
        "conn",
        "cur",
        "dialect",
        "execute",
        "lock",
        "own",
        "patient",
        "receipt_synchronous",
        "synchronous",
    )

    def __init__(
        self,
        conn: sqlite3.Connection,
        dialect: Dialect,
        *,
        own: bool = False,
        busy_timeout: float = 0.0,
        synchronous: str = "",
        receipt_synchronous: str = "",
    ) -> None:
        self.conn = conn
        self.dialect = dialect
        self.own = own
        self.lock: contextlib.AbstractContextManager[Any] = (
            threading.Lock() if own else contextlib.nullcontext()
        )
        self.busy_timeout = busy_timeout
        self.synchronous = synchronous
        self.receipt_synchronous = receipt_synchronous
        with boundary(conn, dialect):  # a closed connection has no cursor
            self.cur = plain_cursor(conn)  # one cursor for every program: they run under the lock
        self.execute = executor(self.cur, dialect)
        self.patient = self._outside_transactions(self.execute) if busy_timeout else self.execute

    def run(self, program: Program[T], *, commit: bool = False) -> Result[T]:
        """Run ``program``: in a transaction of its own when it asks for one (``own``:
        ``writes``; else ``atomic``) and none is open, committed or rolled back here;
        otherwise its statements as they come, then, with ``commit`` (a no-op without a
        transaction), the transaction they opened (legacy sqlite3 mode, ``WRITE_LOCK``)."""
        conn, own = self.conn, self.own
        with self.lock, boundary(conn, self.dialect), self._durability(program):
            if own:
                begin, commit = program.writes and not program.reads_first, True
            elif program.atomic:  # in the caller's open transaction, else in one of its own
                begin = commit = not conn.in_transaction
            else:
                begin = False
            if begin:
                self._patiently(self.cur.execute, "BEGIN IMMEDIATE")
            statements = compile_statements(self.dialect, program.statements)
            try:  # inside a transaction of ours no lock is waited for
                result = drive(self.execute if begin else self.patient, statements)
            except BaseException:
                if commit:
                    with contextlib.suppress(sqlite3.Error):
                        conn.rollback()
                raise
            if commit:
                conn.commit()  # nothing without a transaction (a read answered)
            return result

    async def arun(self, program: Program[T]) -> Result[T]:
        """``run`` in a worker thread: there is no second code path and no aiosqlite."""
        return await asyncio.to_thread(self.run, program)

    def _durability(self, program: Program[Any]) -> contextlib.AbstractContextManager[None]:
        """A receipt's commit with ``receipt_synchronous``: ``synchronous`` applies at
        commit time, per connection, so it is switched for this one transaction only."""
        if program.relaxed and self.receipt_synchronous != self.synchronous:
            return _Synchronous(self)
        return _AS_IS

    def _patiently(self, statement: Callable[[str], T], sql: str) -> T:
        """Run ``statement(sql)``; while the file is locked (SQLITE_BUSY), wait and run it
        again, in short steps, up to ``busy_timeout`` (then the error is raised as before).

        Only a statement outside a transaction is run again: ``BEGIN IMMEDIATE`` and
        a read in autocommit, which changed nothing when refused.
        """
        try:
            return statement(sql)  # the usual case: no lock to wait for, no clock read
        except sqlite3.OperationalError as exc:
            if not self.busy_timeout or exc.sqlite_errorcode & 0xFF != _SQLITE_BUSY:
                raise
        deadline, wait = time.monotonic() + self.busy_timeout, _FIRST_WAIT
        while True:
            time.sleep(wait)
            wait = min(wait * 2, _LONGEST_WAIT)
            try:
                return statement(sql)
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode & 0xFF != _SQLITE_BUSY or time.monotonic() >= deadline:
                    raise

    def _outside_transactions(self, execute: Execute) -> Execute:
        def patient(sql: str, params: Mapping[str, Any], adhoc: bool) -> Rows:
            if self.conn.in_transaction:
                return execute(sql, params, adhoc)
            return self._patiently(lambda sql: execute(sql, params, adhoc), sql)

        return patient


_AS_IS = contextlib.nullcontext()


class _Synchronous:
    """``PRAGMA synchronous`` set to the receipt's for one transaction, and back."""

    __slots__ = ("driver",)

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    def __enter__(self) -> None:
        self.driver.cur.execute(f"PRAGMA synchronous={self.driver.receipt_synchronous}")

    def __exit__(self, *exc: object) -> None:
        self.driver.cur.execute(f"PRAGMA synchronous={self.driver.synchronous}")
