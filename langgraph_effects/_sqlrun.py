"""Run statement generators on sqlite3 and psycopg connections (sync and async).

A multi-statement operation is written once, as a generator that yields
``(sql, params)`` and receives the rows as dicts (STYLE.md section 3); these
drivers execute it. They never commit: transactions belong to the caller.
SQL uses ``:name`` placeholders, rewritten for psycopg; datetimes are bound as
fixed-format ISO text on SQLite (text order is time order).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Generator
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from langgraph_effects.errors import InvalidInput

__all__ = [
    "Dialect",
    "Rows",
    "Stmt",
    "dialect_of",
    "for_postgres",
    "migrate",
    "one",
    "run_async",
    "run_sync",
]

T = TypeVar("T")
Dialect = Literal["sqlite", "postgres"]
_NAMED = re.compile(r"(?<!:):([a-z_]+)")


def for_postgres(sql: str) -> str:
    """Rewrite ``:name`` placeholders as psycopg's ``%(name)s``."""
    return _NAMED.sub(r"%(\1)s", sql)


Stmt = tuple[str, dict[str, Any]]
Rows = list[dict[str, Any]]


def dialect_of(conn: Any) -> Dialect:
    if isinstance(conn, sqlite3.Connection):
        return "sqlite"
    if type(conn).__module__.startswith("psycopg"):
        return "postgres"
    raise InvalidInput(
        f"unsupported connection {type(conn).__name__}: "
        "pass a sqlite3.Connection or a psycopg (Async)Connection"
    )


def _ts(value: datetime | None, dialect: Dialect) -> Any:
    # SQLite keeps one fixed ISO format so text order is time order.
    if value is None or dialect == "postgres":
        return value
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _bind(stmt: Stmt, dialect: Dialect) -> Stmt:
    text, params = stmt
    params = {k: _ts(v, dialect) if isinstance(v, datetime) else v for k, v in params.items()}
    return (for_postgres(text) if dialect == "postgres" else text), params


def _dicts(cursor: Any, rows: list[Any]) -> Rows:
    if not rows:
        return []
    if isinstance(rows[0], dict):
        return [dict(r) for r in rows]
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, tuple(r), strict=True)) for r in rows]


def run_sync(conn: Any, dialect: Dialect, steps: Generator[Stmt, Rows, T]) -> T:
    """Drive a statement generator on a sync connection (no commit: the caller's business)."""
    rows: Rows | None = None  # a generator's first send must be None
    try:
        while True:
            text, params = _bind(steps.send(rows), dialect)  # type: ignore[arg-type]
            cur = conn.execute(text, params)
            rows = _dicts(cur, cur.fetchall()) if cur.description else []
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def run_async(conn: Any, steps: Generator[Stmt, Rows, T]) -> T:
    """Drive a statement generator on a psycopg AsyncConnection."""
    rows: Rows | None = None  # a generator's first send must be None
    try:
        while True:
            text, params = _bind(steps.send(rows), "postgres")  # type: ignore[arg-type]
            cur = await conn.execute(text, params)
            rows = _dicts(cur, await cur.fetchall()) if cur.description else []
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def one(text: str, params: dict[str, Any]) -> Generator[Stmt, Rows, Rows]:
    rows = yield text, params
    return rows


def migrate(dialect: Dialect, sql: Any, now: datetime) -> Generator[Stmt, Rows, None]:
    """Apply the append-only migrations of a module's ``sql`` namespace, idempotently.

    ``sql`` provides ``PG_SETUP_LOCK_SQL`` (an advisory lock: concurrent setups
    queue), ``VERSION_TABLE_PG`` / ``VERSION_TABLE_SQLITE``, ``SELECT_VERSION_SQL``
    (one row, one column: the current version), ``INSERT_VERSION_SQL`` and
    ``MIGRATIONS_PG`` / ``MIGRATIONS_SQLITE`` (tuples of statement tuples).
    The caller runs it in one transaction (``BEGIN IMMEDIATE`` on SQLite).
    """
    if dialect == "postgres":
        yield sql.PG_SETUP_LOCK_SQL, {}
        yield sql.VERSION_TABLE_PG, {}
        migrations = sql.MIGRATIONS_PG
    else:
        yield sql.VERSION_TABLE_SQLITE, {}
        migrations = sql.MIGRATIONS_SQLITE
    rows = yield sql.SELECT_VERSION_SQL, {}
    current = int(next(iter(rows[0].values())))
    for version, statements in enumerate(migrations, start=1):
        if version <= current:
            continue
        for statement in statements:
            yield statement, {}
        yield sql.INSERT_VERSION_SQL, {"version": version, "now": now}
