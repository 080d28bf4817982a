"""Ledger schema upgrades: a v1 ledger, as an older release left it, upgraded by ``setup()``.

v1 ledgers are built with the first migration only (``tests/_schema_v1.py``), then
``setup()`` upgrades them: rows keep their data and gain the later columns, on SQLite
and PostgreSQL.
"""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _schema_v1 import SECOND, T0, V1_ROW, write_v1

from langgraph_effects.core.model import Decision, OperationStatus, Resolution
from langgraph_effects.core.plan import recorded_contract
from langgraph_effects.ledger.sqlite import SQLiteLedger
from langgraph_effects.testing.contract import make_draft
from langgraph_effects.testing.providers import FakeClock

S = OperationStatus


def _check_upgraded(ledger: Any, clock: FakeClock) -> None:
    op = ledger.get("acme", "op-v1")
    assert op is not None
    assert op.status_changed_at == T0 + 2 * SECOND  # the last status change, not the evidence
    assert op.updated_at == T0 + 3 * SECOND
    assert (op.idempotency_key, op.key_retention_seconds, recorded_contract(op)) == (
        "lge-op-v1",
        None,
        None,
    )
    bare = ledger.get("acme", "op-bare")
    assert bare is not None
    assert bare.status_changed_at == bare.updated_at == T0 + 5 * SECOND
    assert ledger.stats().oldest_unknown_at == T0 + 2 * SECOND
    assert [o.operation_id for o in ledger.list(updated_before=T0 + 3 * SECOND)] == ["op-v1"]
    ledger.setup()  # idempotent at the latest version
    # v3 bound the threads that already had operations to their tenant.
    assert ledger.bind_thread(V1_ROW["workflow_id"], "intruder") == "acme"
    retried = ledger.resolve("acme", "op-v1", Resolution(decision=Decision.RETRY, by="ana"))
    assert (retried.status, retried.status_changed_at) == (S.PREPARED, clock.now())
    new = ledger.prepare(make_draft("op-v2", key_retention_seconds=60.0)).operation
    assert (new.key_retention_seconds, new.status_changed_at) == (60.0, clock.now())


def test_a_v1_sqlite_ledger_upgrades_with_setup(sqlite_path: Path) -> None:
    """setup() migrates a v1 SQLite ledger: rows keep their data, gain the new columns
    (status_changed_at from the event log, else updated_at) and keep working."""
    from langgraph_effects.ledger.sqlite._migrations import MIGRATIONS
    from langgraph_effects.ledger.sqlite._sql import DIALECT, SCHEMA_VERSION_TABLE_SQL

    conn = sqlite3.connect(sqlite_path, check_same_thread=False)
    try:
        with conn:
            write_v1(
                lambda sql, values: conn.execute(sql, values),
                MIGRATIONS,
                SCHEMA_VERSION_TABLE_SQL,
                lambda name: f":{name}",
                DIALECT.dump_ts,
            )
        clock = FakeClock(T0 + timedelta(hours=1))
        ledger = SQLiteLedger(conn, clock=clock.now)
        ledger.setup()
        (version,) = conn.execute("SELECT MAX(version) FROM lge_schema_version").fetchone()
        assert version == len(MIGRATIONS) == 5
        _check_upgraded(ledger, clock)
    finally:
        conn.close()


@pytest.mark.postgres
def test_a_v1_postgres_ledger_upgrades_with_setup(pg_url: str) -> None:
    """setup() migrates a v1 PostgreSQL ledger the same way, under its advisory lock."""
    import psycopg
    from psycopg.rows import dict_row

    from langgraph_effects.ledger.postgres import PostgresLedger
    from langgraph_effects.ledger.postgres._migrations import MIGRATIONS
    from langgraph_effects.ledger.postgres._sql import SCHEMA_VERSION_TABLE_SQL

    with psycopg.connect(pg_url, autocommit=True) as conn:
        write_v1(
            lambda sql, values: conn.execute(sql, values),
            MIGRATIONS,
            SCHEMA_VERSION_TABLE_SQL,
            lambda name: f"%({name})s",
            lambda ts: ts,
        )
    clock = FakeClock(T0 + timedelta(hours=1))
    with PostgresLedger.from_conn_string(pg_url, clock=clock.now) as ledger:
        ledger.setup()
        with psycopg.connect(pg_url, row_factory=dict_row) as conn:
            row = conn.execute("SELECT MAX(version) AS v FROM lge_schema_version").fetchone()
        assert row is not None
        assert row["v"] == len(MIGRATIONS) == 4
        _check_upgraded(ledger, clock)
