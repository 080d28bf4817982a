"""The statement engine under every table: the ledger's, the outbox's and the run journal's.

A multi-statement operation is written once, as a generator (checkpoint-postgres's
``_keep_latest`` pattern): it yields ``Statement``s, named statements with bound
values, and is sent back the rows each returned. It holds every decision (which
statement, which error). A backend contributes a ``Dialect`` (its SQL under the
same names, how it stores timestamps and JSON, its migrations); its driver, beside
this module, runs the compiled statements on a cursor, sync or async, inside the
transaction the ``Program`` asks for::

    program (generator of Statements)
        -> compile_statements(dialect, ...)   names -> (sql, params, adhoc)
        -> drive / adrive(execute, ...)       the backend's cursor, sync or async

The package, each module's names in its ``__all__``:

* ``ledger.engine``: programs, statements, dialects, ``compile_statements``,
  ``drive`` / ``adrive``, ``migrate`` and ``single``.
* ``ledger.engine.sqlite``: the one SQLite driver (``Driver``, sync; ``arun`` runs it
  in a worker thread) and its error ``boundary``.
* ``ledger.engine.postgres``: the PostgreSQL driver (``run`` / ``arun``) and its
  ``boundary``; it imports psycopg, the ``[postgres]`` extra.
* ``ledger.engine.tables``: ``Tables``, the outbox's and the journal's table sets
  on the application's connection, run by the same drivers.

Driver errors are mapped into ``errors.py`` by each backend's ``boundary``, the
same way for every table. A schema older than this release is found here: a row
lacking a column the program reads makes ``compile_statements`` read the schema
version and raise ``LedgerNotSetUp`` naming the migrations to run.
"""

from __future__ import annotations

import json
import json.scanner
from collections.abc import Awaitable, Callable, Collection, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from langgraph_effects.core.model import Operation, OperationEvent
from langgraph_effects.errors import LedgerNotSetUp, StaleFencingToken

__all__ = [
    "RECORD_SCHEMA_VERSION",
    "SCHEMA_VERSION",
    "SCHEMA_VERSION_TABLE",
    "SETUP_LOCK",
    "WRITE_LOCK",
    "Dialect",
    "Execute",
    "Program",
    "Raw",
    "Result",
    "Row",
    "Rows",
    "Statement",
    "Statements",
    "adrive",
    "compile_statements",
    "drive",
    "migrate",
    "not_set_up",
    "single",
]

T = TypeVar("T")
Row = dict[str, Any]
Rows = list[Row]

# -- the statements every dialect defines: its schema version and migrations -----
SETUP_LOCK = "setup_lock"
"""Optional: a lock so that concurrent setups queue (PostgreSQL's advisory lock)."""
SCHEMA_VERSION_TABLE = "schema_version_table"
SCHEMA_VERSION = "schema_version"
"""One row with one column, ``version``: the highest migration applied (0: none)."""
RECORD_SCHEMA_VERSION = "record_schema_version"
WRITE_LOCK = "write_lock"
"""Optional: the statement that opens a write transaction, yielded by a ``reads_first``
program once its reads have not answered (SQLite: ``BEGIN IMMEDIATE``)."""
_SCHEMA_STATEMENTS = (SCHEMA_VERSION_TABLE, SCHEMA_VERSION, RECORD_SCHEMA_VERSION)


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement to run: its name in the dialect and its bound values.

    Args:
        name: a statement name of the dialect; ``sql`` overrides it (migrations).
        params: the values, by name.
        batch: several rows of values for one statement. A dialect with
            ``batch=True`` gets them as one JSON array bound to ``batch`` (one
            round trip); otherwise the statement runs once per row.
        where: names of the dialect's filter fragments joined into ``{where}``.
        adhoc: plan with the actual values (optional filters), never a cached plan.
    """

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)
    batch: Sequence[Mapping[str, Any]] | None = None
    where: tuple[str, ...] = ()
    adhoc: bool = False
    sql: str | None = None


@dataclass(frozen=True, slots=True)
class Result(Generic[T]):
    """What a program returns: the value, and the ledger transitions to log after commit."""

    value: T
    logged: tuple[tuple[Operation, OperationEvent], ...] = ()
    refused: tuple[tuple[str, StaleFencingToken], ...] = ()
    """Stale-token refusals returned, not raised (``confirm_many``), each with its tenant:
    counted and reported after commit as a raised one is."""


Statements = Generator[Statement, Rows, T]


@dataclass(frozen=True, slots=True)
class Program(Generic[T]):
    """An operation ready to run.

    Args:
        statements: the generator of statements.
        writes: it may write (SQLite takes the write lock: ``BEGIN IMMEDIATE``).
        atomic: it may write and then write again or raise, so it needs an
            explicit transaction even on an autocommit connection. Programs
            with one conditional write are atomic by themselves. On a
            connection the caller owns (outbox, journal) ``atomic`` alone
            decides the transaction (``engine.tables.Tables.run``).
    """

    statements: Statements[Result[T]]
    writes: bool
    atomic: bool = False
    relaxed: bool = False
    """Its commit need not wait for the disk: a receipt (``confirm``, ``confirm_many``),
    or a thread's binding, which the write-ahead record that uses it flushes before any
    provider hears of it. A backend commits it with the ledger's ``receipt_synchronous``
    (``ledger.base``, "Durability of receipts")."""
    tenant_id: str | None = None
    """The tenant of the one operation it moves: named when a refusal is reported."""
    reads_first: bool = False
    """It may answer by reads alone, outside any write transaction, and yields
    ``WRITE_LOCK`` before its first write (a dialect with ``read_first``): the
    driver opens no transaction ahead and commits the one the program opened."""


def _no_batch(rows: list[dict[str, Any]]) -> Any:
    raise AssertionError("this dialect runs batches row by row")


# typeshed types make_scanner's argument as the scanner class itself, not a decoder.
_scan = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _load_json_text(value: Any) -> Any:
    """JSON text back as Python values (``json.loads``).

    The text the ledger wrote starts with its value and ends with it: one scan
    reads it, without ``json.loads``'s two passes for surrounding whitespace.
    Any other text (whitespace around, trailing data, not JSON) goes to
    ``json.loads``, which decides as always.
    """
    if value is None:
        return None
    try:
        loaded, end = _scan(value, 0)
    except (StopIteration, ValueError, TypeError):
        return json.loads(value)
    return loaded if end == len(value) else json.loads(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class Dialect:
    """A backend's SQL and storage formats for one set of tables.

    Args:
        statements: statement name -> SQL, or a chain of SQL: the first is the
            conditional write; the rest run only when it returned a row, with
            its columns added to the values, and their first rows are merged
            into it (SQLite inserts the ledger's event this way; PostgreSQL
            fuses the chain into one statement with data-modifying CTEs).
        migrations: append-only; migration ``i`` makes schema version ``i + 1``.
        tables: the version table, then every table the migrations create: one
            missing means the schema is not set up (see the backends' ``boundary``).
        setup: the call that creates or migrates these tables (``"ledger.setup()"``),
            named by ``LedgerNotSetUp``.
        dump_ts: a timezone-aware datetime (or None) as this backend stores it.
        load_ts: the stored value back as a UTC datetime (or None).
        load_json: a JSON column back as Python values.
        filters: filter name -> SQL fragment, for ``Statement.where``.
        batch: runs a ``Statement.batch`` as one statement (see ``Statement``).
        required: statement names the programs of these tables yield.
    """

    statements: Mapping[str, str | tuple[str, ...]]
    migrations: tuple[tuple[str, ...], ...]
    tables: tuple[str, ...]
    setup: str
    dump_ts: Callable[[datetime | None], Any]
    load_ts: Callable[[Any], datetime | None]
    load_json: Callable[[Any], Any] = _load_json_text
    filters: Mapping[str, str] = field(default_factory=dict)
    dump_batch: Callable[[list[dict[str, Any]]], Any] = _no_batch
    batch: bool = False
    single: Mapping[str, str] = field(default_factory=dict)
    """With ``batch``: statement name -> the same statement for a batch of one row,
    its values bound as plain parameters (cheaper than a one-element JSON array)."""
    read_first: bool = False
    """The ledger's ``prepare`` reads before it writes (``_prepare.prepare_many``), then
    takes the write lock (``WRITE_LOCK``) only when the read did not answer: worth it
    where a read is far cheaper than a write transaction (SQLite: no write lock, no
    commit) and a miss costs no round trip; PostgreSQL's one-statement prepare
    already replays in one round trip."""
    inserted_id: Mapping[str, str] = field(default_factory=dict)
    """SQL inserting at most one row into a table keyed by its rowid -> the column its
    driver returns that id as (SQLite's ``lastrowid``, where ``RETURNING`` costs about
    as much as the insert itself); no row when nothing was inserted."""
    required: Collection[str] = ()
    chains: Mapping[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)
    """Each statement as its chain of SQL, and whether it takes filters: looked up, not
    worked out again, on every statement run."""
    filtered: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        needed = {*_SCHEMA_STATEMENTS, *self.required, *((WRITE_LOCK,) if self.read_first else ())}
        missing = needed - set(self.statements)
        if missing:
            raise TypeError(f"dialect lacks statements: {sorted(missing)}")
        chains = {
            name: (sql,) if isinstance(sql, str) else tuple(sql)
            for name, sql in self.statements.items()
        }
        object.__setattr__(self, "chains", chains)
        filtered = frozenset(name for name, sqls in chains.items() if "{where}" in sqls[0])
        object.__setattr__(self, "filtered", filtered)


Raw = Generator[tuple[str, Mapping[str, Any], bool], Rows, T]
Execute = Callable[[str, Mapping[str, Any], bool], Rows]
"""A driver's ``execute(sql, params, adhoc) -> rows`` (``adhoc``: no cached plan)."""


def compile_statements(dialect: Dialect, statements: Statements[T]) -> Raw[T]:
    """Turn a program's statements into ``(sql, params, adhoc)`` for a driver to execute.

    A row that lacks a column the program reads (``KeyError``) may come from an
    older schema: the schema version is read and, if it is behind this
    release's, ``LedgerNotSetUp`` names the migrations to run.
    """
    try:
        statement = next(statements)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    while True:
        rows = yield from _run(dialect, statement)
        try:
            statement = statements.send(rows)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        except KeyError as exc:
            (row,) = yield from _run(dialect, Statement(SCHEMA_VERSION))
            if int(row["version"]) >= len(dialect.migrations):
                raise  # the schema is current: a bug, not an old schema
            raise not_set_up(
                dialect, int(row["version"]), f"column {exc.args[0]!r} is missing"
            ) from None


def not_set_up(dialect: Dialect, version: int | None, cause: str) -> LedgerNotSetUp:
    """The error for tables that are missing, or (``version``) older than this release."""
    latest = len(dialect.migrations)
    if not version or version >= latest:
        return LedgerNotSetUp(f"{cause}: call {dialect.setup} to create or migrate the tables")
    todo = f"migration {latest}" if latest == version + 1 else f"migrations {version + 1}-{latest}"
    return LedgerNotSetUp(
        f"its schema is version {version}, older than this release's {latest} ({cause}): "
        f"call {dialect.setup} once to apply {todo}; it is idempotent, locked and keeps every row"
    )


def _run(dialect: Dialect, statement: Statement) -> Raw[Rows]:
    name = statement.name
    if statement.sql:
        sqls: tuple[str, ...] = (statement.sql,)
    else:
        sqls = dialect.chains[name]
        if name in dialect.filtered:
            where = " AND ".join(dialect.filters[f] for f in statement.where) or "1 = 1"
            sqls = (sqls[0].format(where=where), *sqls[1:])
    if statement.batch is None:
        if len(sqls) == 1:
            return (yield sqls[0], statement.params, statement.adhoc)
        return (yield from _chain(sqls, statement.params, statement.adhoc))
    if dialect.batch:
        one = dialect.single.get(statement.name) if len(statement.batch) == 1 else None
        if one is not None:
            return (yield one, {**statement.params, **statement.batch[0]}, statement.adhoc)
        params = {
            **statement.params,
            "batch": dialect.dump_batch([dict(b) for b in statement.batch]),
        }
        return (yield sqls[0], params, statement.adhoc)
    out: Rows = []
    for values in statement.batch:
        out += yield from _chain(sqls, {**statement.params, **values}, statement.adhoc)
    return out


def _chain(sqls: tuple[str, ...], params: Mapping[str, Any], adhoc: bool) -> Raw[Rows]:
    rows = yield sqls[0], params, adhoc
    if not rows or len(sqls) == 1:
        return rows
    merged = dict(rows[0])
    values = {**params, **merged}  # each statement runs before the next is given values
    for sql in sqls[1:]:
        more = yield sql, values, adhoc
        if more:
            merged.update(more[0])
            values.update(more[0])
    return [merged]


async def adrive(
    execute: Callable[[str, Mapping[str, Any], bool], Awaitable[Rows]], raw: Raw[T]
) -> T:
    """Run compiled statements with an asynchronous ``execute(sql, params, adhoc) -> rows``."""
    try:
        sql, params, adhoc = next(raw)
        while True:
            sql, params, adhoc = raw.send(await execute(sql, params, adhoc))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def drive(execute: Execute, raw: Raw[T]) -> T:
    """Run compiled statements with a synchronous ``execute(sql, params, adhoc) -> rows``."""
    try:
        sql, params, adhoc = next(raw)
        while True:
            sql, params, adhoc = raw.send(execute(sql, params, adhoc))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def migrate(dialect: Dialect) -> Program[None]:
    """Create or migrate the dialect's tables, under its lock, in one transaction."""

    def statements() -> Statements[Result[None]]:
        if SETUP_LOCK in dialect.statements:
            yield Statement(SETUP_LOCK)
        yield Statement(SCHEMA_VERSION_TABLE)
        (row,) = yield Statement(SCHEMA_VERSION)
        for version in range(int(row["version"]) + 1, len(dialect.migrations) + 1):
            for sql in dialect.migrations[version - 1]:
                yield Statement(f"migration {version}", sql=sql)
            yield Statement(RECORD_SCHEMA_VERSION, {"version": version})
        return Result(None)

    return Program(statements(), writes=True, atomic=True)


def single(name: str, params: Mapping[str, Any] | None = None) -> Program[Rows]:
    """A program of one statement (read, or one write atomic by itself): its rows."""

    def statements() -> Statements[Result[Rows]]:
        rows = yield Statement(name, params or {})
        return Result(rows)

    return Program(statements(), writes=False)
