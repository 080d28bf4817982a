"""The PostgreSQL server the tests use: its URL, whether it answers, and a schema's URL.

Beside ``conftest.py`` rather than in it: a test module imports these by name
(``from _pg import POSTGRES_URL``), and another room's ``conftest.py`` would
shadow a ``conftest`` module.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import Any, NoReturn
from urllib.parse import quote

import pytest

POSTGRES_URL = os.environ.get("LGE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRE_POSTGRES = os.environ.get("LGE_REQUIRE_POSTGRES") == "1"


_pg_error: str | None = None
_pg_checked = False


def _postgres_problem() -> str | None:
    """Return why PostgreSQL cannot be used, or None when it can (checked once)."""
    global _pg_checked, _pg_error
    if not _pg_checked:
        _pg_checked = True
        try:
            import psycopg

            with psycopg.connect(POSTGRES_URL, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
        except Exception as exc:  # any failure means: not usable here
            _pg_error = f"PostgreSQL at {POSTGRES_URL} is unreachable: {exc!s}".strip()
    return _pg_error


def require_postgres() -> None:
    """Skip (or, with LGE_REQUIRE_POSTGRES=1, fail) when PostgreSQL is unreachable."""
    problem = _postgres_problem()
    if problem is None:
        return
    unavailable(problem, "set LGE_TEST_POSTGRES_URL, or start the server")


def unavailable(problem: str, hint: str) -> NoReturn:
    """Skip for ``problem`` (with the ``hint``), or fail under LGE_REQUIRE_POSTGRES=1 (CI): a
    PostgreSQL test that CI cannot run is a failure there, never a silent skip."""
    if REQUIRE_POSTGRES:
        pytest.fail(f"LGE_REQUIRE_POSTGRES=1 but {problem}")
    pytest.skip(f"{problem} ({hint})")


def _with_search_path(url: str, schema: str) -> str:
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-csearch_path={schema}')}"


_CATALOG_SQL = """
SELECT 'rel ' || c.relkind::text || ' ' || c.relname FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %(s)s
UNION ALL
SELECT 'col ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
  || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE n.nspname = %(s)s AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'con ' || c.conname || ' ' || pg_get_constraintdef(c.oid) FROM pg_constraint c
  JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = %(s)s
UNION ALL
SELECT 'fun ' || p.proname || ' ' || md5(p.prosrc) FROM pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %(s)s
UNION ALL
SELECT 'trg ' || c.relname || ' ' || t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %(s)s AND NOT t.tgisinternal
ORDER BY 1
"""
_VERSION_TABLES = ("lge_schema_version", "checkpoint_migrations")
"""Kept as set up: each records which migrations ran (part of the snapshot, never emptied)."""


class SetUpSchema:
    """One PostgreSQL schema per test process, set up once (the ledger's and PostgresSaver's
    tables) and handed to each test as new: every table emptied, every sequence restarted.

    Equal to a fresh schema set up by the test's own ``setup()`` calls (which then find
    nothing to do), for ~0.02 s instead of ~0.5-1 s of DDL a test. ``fresh`` checks the
    schema against the snapshot taken after its setup (its relations, columns, defaults,
    constraints, functions, triggers and the rows of the migration tables): a test that
    changed any of it (a table created, a version row written) leaves a schema that is
    dropped and set up again, never handed on.
    """

    def __init__(self) -> None:
        self.schema = ""
        self.url = ""
        self._snapshot: tuple[list[str], list[str]] | None = None

    def fresh(self) -> str:
        """The schema's URL, as new (see the class)."""
        import psycopg

        if self.schema:
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    conn.execute("SET lock_timeout = '5s'")
                    if self._state(conn) == self._snapshot:
                        self._empty(conn)
                        return self.url
            except psycopg.Error:
                pass  # a lock still held by a test's process: set up another
            self.drop()
        self._create()
        return self.url

    def drop(self) -> None:
        import psycopg

        schema, self.schema = self.schema, ""
        if schema:
            with (
                contextlib.suppress(psycopg.Error),
                psycopg.connect(POSTGRES_URL, autocommit=True) as conn,
            ):
                conn.execute("SET lock_timeout = '5s'")
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    def _create(self) -> None:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        from langgraph_effects import PostgresLedger

        self.schema = f"lge_t_{uuid.uuid4().hex[:12]}"
        self.url = _with_search_path(POSTGRES_URL, self.schema)
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{self.schema}"')
        with psycopg.connect(
            self.url, autocommit=True, prepare_threshold=0, row_factory=dict_row
        ) as conn:
            PostgresSaver(conn).setup()
            PostgresLedger(conn).setup()
        with psycopg.connect(self.url, autocommit=True) as conn:
            self._snapshot = self._state(conn)

    def _state(self, conn: Any) -> tuple[list[str], list[str]]:
        catalog = [row[0] for row in conn.execute(_CATALOG_SQL, {"s": self.schema})]
        versions = [
            repr(row)
            for table in _VERSION_TABLES
            for row in conn.execute(f'SELECT * FROM "{table}" ORDER BY 1')
        ]
        return catalog, versions

    def _empty(self, conn: Any) -> None:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (self.schema,)
            )
            if row[0] not in _VERSION_TABLES
        ]
        with conn.transaction():
            for table in tables:
                conn.execute(f'DELETE FROM "{table}"')
            conn.execute(
                "SELECT setval(format('%%I.%%I', schemaname, sequencename), start_value, false)"
                " FROM pg_sequences WHERE schemaname = %s",
                (self.schema,),
            )
