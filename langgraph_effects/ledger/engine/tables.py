"""Statement programs on a connection the caller owns: the outbox's and the run journal's.

The ledger opens and owns its connections; the outbox and the journal run on
the application's ``sqlite3`` or psycopg connection. ``Tables.on(conn, "outbox")``
picks the backend's dialect for those tables and runs programs through the same
drivers and error boundaries as the ledger (``engine.sqlite``, ``engine.postgres``),
which leave the transaction to the caller's connection where the ledger's own
would take it (``own``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar

from langgraph_effects.errors import InvalidInput
from langgraph_effects.ledger.engine import Dialect, Program

__all__ = ["JOURNAL", "OUTBOX", "Backend", "TableSet", "TableSpec", "Tables", "backend_of"]

T = TypeVar("T")
Backend = Literal["sqlite", "postgres"]
TableSet = Literal["outbox", "journal"]


@dataclass(frozen=True, slots=True)
class TableSpec:
    """What every backend's dialect of one table set declares alike, written once: its
    tables (``Dialect.tables``), the call that sets them up (``Dialect.setup``) and the
    statement names its programs yield (``Dialect.required``: a backend's dialect that
    lacks one fails when it is built, not when a program first asks for it)."""

    tables: tuple[str, ...]
    setup: str
    statements: tuple[str, ...]

    def dialect(
        self,
        statements: Mapping[str, str | tuple[str, ...]],
        *,
        migrations: tuple[tuple[str, ...], ...],
        dump_ts: Callable[[datetime | None], Any],
        load_ts: Callable[[Any], datetime | None],
    ) -> Dialect:
        """One backend's dialect of these tables: its SQL for each statement (every name
        of ``statements`` at least), its migrations and how it stores a timestamp."""
        return Dialect(
            statements=statements,
            migrations=migrations,
            tables=self.tables,
            setup=self.setup,
            required=self.statements,
            dump_ts=dump_ts,
            load_ts=load_ts,
        )


OUTBOX = TableSpec(
    tables=("lge_outbox_schema_version", "lge_outbox", "lge_outbox_events"),
    setup="Outbox().setup(conn)",
    statements=(
        "insert_entry",
        "get_entry",
        "get_entry_by_message",
        "list_entries",
        "claim",
        "settle",
        "leased",
        "take_over",
        "mark_delivered",
        "mark_delivered_fenced",
        "insert_event",
        "get_event",
        "entry_events",
        "claim_check",
        "release_check",
    ),
)
"""The outbox's tables (``outbox.statements``, ``outbox.relay``, ``outbox.writer``)."""

JOURNAL = TableSpec(
    tables=("lge_journal_schema_version", "lge_runs", "lge_run_events", "lge_run_counters"),
    setup="journal.setup()",
    statements=(
        "get_run",
        "get_event",
        "insert_run",
        "update_run",
        "insert_event",
        "bump_counter",
        "events",
        "runs",
        "counters",
        "all_event_types",
    ),
)
"""The run journal's tables (``journal.statements``, ``journal.journals``)."""


def backend_of(conn: Any) -> Backend:
    """Which backend a connection speaks: ``sqlite3`` or psycopg (sync or async)."""
    if isinstance(conn, sqlite3.Connection):
        return "sqlite"
    if type(conn).__module__.startswith("psycopg"):
        return "postgres"
    raise InvalidInput(
        f"unsupported connection {type(conn).__name__}: "
        "pass a sqlite3.Connection or a psycopg (Async)Connection"
    )


def _dialect(backend: Backend, tables: TableSet) -> Dialect:
    # Imported here: the PostgreSQL modules need psycopg, an optional extra.
    if backend == "sqlite":
        from langgraph_effects.ledger.sqlite import _journal as sqlite_journal
        from langgraph_effects.ledger.sqlite import _outbox as sqlite_outbox

        return sqlite_outbox.DIALECT if tables == "outbox" else sqlite_journal.DIALECT
    from langgraph_effects.ledger.postgres import _journal as pg_journal
    from langgraph_effects.ledger.postgres import _outbox as pg_outbox

    return pg_outbox.DIALECT if tables == "outbox" else pg_journal.DIALECT


@dataclass(frozen=True, slots=True)
class Tables:
    """One set of tables (the outbox's, the journal's) on a caller's connection."""

    conn: Any
    backend: Backend
    dialect: Dialect

    @classmethod
    def on(cls, conn: Any, tables: TableSet) -> Tables:
        """The table set on ``conn``, with the dialect of the connection's backend."""
        backend = backend_of(conn)
        return cls(conn, backend, _dialect(backend, tables))

    def run(self, program: Program[T], *, commit: bool = False) -> T:
        """Run ``program`` on a sync connection and return its value.

        An ``atomic`` program runs in the caller's open transaction (a savepoint
        on PostgreSQL), else in one of its own, committed here (``BEGIN
        IMMEDIATE`` on SQLite). Any other runs its statements as they come:
        inside the caller's transaction, or each committed by an autocommit
        connection; ``commit`` commits after them (a no-op in autocommit mode).
        """
        if self.backend == "sqlite":
            from langgraph_effects.ledger.engine.sqlite import Driver

            return Driver(self.conn, self.dialect).run(program, commit=commit).value
        from langgraph_effects.ledger.engine import postgres

        return postgres.run(nullcontext(self.conn), self.dialect, program, commit=commit).value

    async def arun(self, program: Program[T], *, commit: bool = False) -> T:
        """``run`` on a psycopg ``AsyncConnection``."""
        if self.backend != "postgres":
            raise InvalidInput("the async methods take a psycopg AsyncConnection")
        from langgraph_effects.ledger.engine import postgres

        return (
            await postgres.arun(nullcontext(self.conn), self.dialect, program, commit=commit)
        ).value
