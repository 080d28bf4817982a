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
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from langgraph_effects.errors import InvalidInput
from langgraph_effects.ledger.engine import Dialect, Program

__all__ = ["Backend", "TableSet", "Tables", "backend_of"]

T = TypeVar("T")
Backend = Literal["sqlite", "postgres"]
TableSet = Literal["outbox", "journal"]


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
