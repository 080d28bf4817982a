"""The database floor: an effect's lifecycle as raw statements, no ledger code.

The same rows as the ledger writes (one operation row with the record's
columns, one event per transition, in the same transaction as the row), the
same indexes (primary key, a partial index on non-terminal rows, the event
log's key), the same durability (PostgreSQL autocommit with the server's
``synchronous_commit``; SQLite WAL with ``synchronous=FULL``; on both, receipts
commit without waiting for the disk, as the ledgers' default
``receipt_synchronous="NORMAL"`` does), driven by plain
psycopg / sqlite3 calls. Each transition is ONE statement on PostgreSQL (a
data-modifying CTE writes the row and its event), which is the least any
ledger can do without giving up the event log.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from langgraph_effects.core.model import LeaseOwner, OperationDraft

__all__ = ["PostgresFloor", "SQLiteFloor"]

_LEASE = timedelta(seconds=30)

_COLUMNS = """
    tenant_id text NOT NULL,
    operation_id text NOT NULL,
    workflow_id text,
    action text NOT NULL,
    action_version integer NOT NULL DEFAULT 1,
    target text,
    payload_digest text NOT NULL,
    payload {json},
    payload_stored boolean NOT NULL DEFAULT true,
    authorization_ref text,
    provider text,
    tool_call_id text,
    status text NOT NULL,
    idempotency_key text,
    provider_request_id text,
    provider_result_id text,
    result {json},
    error text,
    attempts integer NOT NULL DEFAULT 0,
    lease_owner text,
    lease_expires_at {ts},
    fencing_token bigint NOT NULL DEFAULT 0,
    record_version integer NOT NULL DEFAULT 1,
    evidence_checked_at {ts},
    created_at {ts} NOT NULL,
    updated_at {ts} NOT NULL,
    first_dispatched_at {ts},
    last_dispatched_at {ts},
    resolved_at {ts},
    key_retention_seconds {float},
    status_changed_at {ts},
    PRIMARY KEY (tenant_id, operation_id)
"""

_OPEN = "status IN ('prepared', 'dispatching', 'unknown')"

# -- PostgreSQL ---------------------------------------------------------------

_PG_SETUP = [
    "CREATE TABLE floor_operations ("
    + _COLUMNS.format(json="jsonb", ts="timestamptz", float="double precision")
    + ")",
    "CREATE INDEX floor_operations_open "
    "ON floor_operations (status, status_changed_at, operation_id) "
    f"WHERE {_OPEN}",
    """CREATE TABLE floor_events (
        event_id bigserial PRIMARY KEY,
        tenant_id text NOT NULL,
        operation_id text NOT NULL,
        seq integer NOT NULL,
        kind text NOT NULL,
        from_status text,
        to_status text NOT NULL,
        actor text NOT NULL,
        fencing_token bigint,
        evidence jsonb,
        detail jsonb,
        at timestamptz NOT NULL,
        UNIQUE (tenant_id, operation_id, seq)
    )""",
]

_PG_EVENT = """
    INSERT INTO floor_events (tenant_id, operation_id, seq, kind, from_status, to_status,
                              actor, fencing_token, at)
"""

_PG_PREPARE = f"""
WITH op AS (
    INSERT INTO floor_operations (tenant_id, operation_id, workflow_id, action, target,
        payload_digest, payload, provider, tool_call_id, idempotency_key, status,
        created_at, updated_at, status_changed_at)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 'prepared', now(), now(), now())
    ON CONFLICT DO NOTHING
    RETURNING *
), ev AS (
    {_PG_EVENT}
    SELECT tenant_id, operation_id, 1, 'prepare', NULL, 'prepared', 'ledger', 0, now() FROM op
)
SELECT * FROM op
"""

_PG_PREPARE_CLAIMED = f"""
WITH op AS (
    INSERT INTO floor_operations (tenant_id, operation_id, workflow_id, action, target,
        payload_digest, payload, provider, tool_call_id, idempotency_key, status,
        lease_owner, lease_expires_at, fencing_token, attempts, record_version,
        first_dispatched_at, last_dispatched_at, created_at, updated_at, status_changed_at)
    SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
        %s::text[], %s::jsonb[], %s::text[], %s::text[], %s::text[]),
        LATERAL (VALUES ('dispatching', %s::text, now() + %s::interval, 1, 1, 2,
                         now(), now(), now(), now(), now())) AS claimed
    ON CONFLICT DO NOTHING
    RETURNING *
), ev AS (
    {_PG_EVENT}
    SELECT op.tenant_id, op.operation_id, e.seq, e.kind, e.from_status, e.to_status,
           %s, e.token, now()
    FROM op CROSS JOIN (VALUES (1, 'prepare', NULL, 'prepared', 0),
                               (2, 'claim', 'prepared', 'dispatching', 1))
        AS e(seq, kind, from_status, to_status, token)
)
SELECT * FROM op
"""

_PG_CLAIM = f"""
WITH op AS (
    UPDATE floor_operations
    SET status = 'dispatching', lease_owner = %s, lease_expires_at = now() + %s,
        fencing_token = fencing_token + 1, attempts = attempts + 1,
        first_dispatched_at = coalesce(first_dispatched_at, now()),
        last_dispatched_at = now(), record_version = record_version + 1, updated_at = now(),
        status_changed_at = now()
    WHERE tenant_id = %s AND operation_id = %s AND status IN ('prepared', 'unknown')
    RETURNING *
), ev AS (
    {_PG_EVENT}
    SELECT tenant_id, operation_id, record_version, 'claim', 'prepared', 'dispatching',
           lease_owner, fencing_token, now() FROM op
)
SELECT * FROM op
"""

_PG_CONFIRM = f"""
WITH op AS (
    UPDATE floor_operations
    SET status = 'confirmed', result = %s, lease_owner = NULL, lease_expires_at = NULL,
        resolved_at = now(), record_version = record_version + 1, updated_at = now(),
        status_changed_at = now()
    WHERE tenant_id = %s AND operation_id = %s AND status = 'dispatching'
      AND fencing_token = %s
    RETURNING *
), ev AS (
    {_PG_EVENT}
    SELECT tenant_id, operation_id, record_version, 'confirm', 'dispatching', 'confirmed',
           'ledger', fencing_token, now() FROM op
)
SELECT *, set_config('synchronous_commit', 'off', true) FROM op
"""

_PG_CONFIRM_MANY = f"""
WITH c AS (
    SELECT * FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::jsonb[])
        AS c(tenant_id, operation_id, token, result)
), op AS (
    UPDATE floor_operations AS o
    SET status = 'confirmed', result = c.result, lease_owner = NULL, lease_expires_at = NULL,
        resolved_at = now(), record_version = o.record_version + 1, updated_at = now(),
        status_changed_at = now()
    FROM c
    WHERE o.tenant_id = c.tenant_id AND o.operation_id = c.operation_id
      AND o.status = 'dispatching' AND o.fencing_token = c.token
    RETURNING o.*
), ev AS (
    {_PG_EVENT}
    SELECT tenant_id, operation_id, record_version, 'confirm', 'dispatching', 'confirmed',
           'ledger', fencing_token, now() FROM op
)
SELECT *, set_config('synchronous_commit', 'off', true) FROM op
"""

_PG_GET = "SELECT * FROM floor_operations WHERE tenant_id = %s AND operation_id = %s"


def _row_values(d: OperationDraft) -> tuple[Any, ...]:
    return (
        d.tenant_id,
        d.operation_id,
        d.workflow_id,
        d.action,
        d.target,
        d.payload_digest,
        json.dumps(d.payload),
        d.provider,
        d.tool_call_id,
        d.idempotency_key,
    )


def _result(d: OperationDraft) -> str:
    return json.dumps({"ticket_id": d.operation_id[-8:], "status": "open"})


class PostgresFloor:
    """Raw-SQL lifecycles on a psycopg pool (autocommit connections)."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def setup(self) -> None:
        with self.pool.connection() as conn:
            for statement in _PG_SETUP:
                conn.execute(statement)

    def three_step(self, d: OperationDraft, owner: LeaseOwner) -> None:
        with self.pool.connection() as conn:
            conn.execute(_PG_PREPARE, _row_values(d)).fetchone()
            row = conn.execute(
                _PG_CLAIM, (owner.encode(), _LEASE, d.tenant_id, d.operation_id)
            ).fetchone()
            token = row["fencing_token"]
            conn.execute(_PG_CONFIRM, (_result(d), d.tenant_id, d.operation_id, token)).fetchone()

    def fused(self, d: OperationDraft, owner: LeaseOwner) -> None:
        self.batch([d], owner)

    def batch(self, ds: Sequence[OperationDraft], owner: LeaseOwner) -> None:
        columns = list(zip(*(_row_values(d) for d in ds), strict=True))
        actor = owner.encode()
        with self.pool.connection() as conn:
            rows = conn.execute(
                _PG_PREPARE_CLAIMED, (*map(list, columns), actor, _LEASE, actor)
            ).fetchall()
            for row in rows:
                conn.execute(
                    _PG_CONFIRM,
                    ('{"ok": 1}', row["tenant_id"], row["operation_id"], row["fencing_token"]),
                ).fetchone()

    def batch_confirmed(self, ds: Sequence[OperationDraft], owner: LeaseOwner) -> None:
        """A batch whose receipts are confirmed together: one statement each way."""
        columns = list(zip(*(_row_values(d) for d in ds), strict=True))
        actor = owner.encode()
        with self.pool.connection() as conn:
            rows = conn.execute(
                _PG_PREPARE_CLAIMED, (*map(list, columns), actor, _LEASE, actor)
            ).fetchall()
            confirmed = conn.execute(
                _PG_CONFIRM_MANY,
                (
                    [r["tenant_id"] for r in rows],
                    [r["operation_id"] for r in rows],
                    [r["fencing_token"] for r in rows],
                    ['{"ok": 1}'] * len(rows),
                ),
            ).fetchall()
        if len(confirmed) != len(ds):
            raise AssertionError("floor: a batched confirm missed a row")

    def replay(self, d: OperationDraft, owner: LeaseOwner) -> None:
        with self.pool.connection() as conn:
            row = conn.execute(_PG_GET, (d.tenant_id, d.operation_id)).fetchone()
        if row is None or row["status"] != "confirmed":
            raise AssertionError(f"floor: expected a confirmed row, got {row!r}")


# -- SQLite -------------------------------------------------------------------

_SQLITE_SETUP = [
    "CREATE TABLE IF NOT EXISTS floor_operations ("
    + _COLUMNS.format(json="text", ts="text", float="real")
    + ") WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS floor_operations_open "
    f"ON floor_operations (status, status_changed_at, operation_id) WHERE {_OPEN}",
    """CREATE TABLE IF NOT EXISTS floor_events (
        event_id integer PRIMARY KEY AUTOINCREMENT,
        tenant_id text NOT NULL,
        operation_id text NOT NULL,
        seq integer NOT NULL,
        kind text NOT NULL,
        from_status text,
        to_status text NOT NULL,
        actor text NOT NULL,
        fencing_token integer,
        evidence text,
        detail text,
        at text NOT NULL,
        UNIQUE (tenant_id, operation_id, seq)
    )""",
]

_SQ_EVENT = """INSERT INTO floor_events (tenant_id, operation_id, seq, kind, from_status,
    to_status, actor, fencing_token, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"""

_SQ_PREPARE = """INSERT INTO floor_operations (tenant_id, operation_id, workflow_id, action,
    target, payload_digest, payload, provider, tool_call_id, idempotency_key, status,
    lease_owner, lease_expires_at, fencing_token, attempts, record_version,
    first_dispatched_at, last_dispatched_at, created_at, updated_at, status_changed_at)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT DO NOTHING RETURNING fencing_token"""

_SQ_CLAIM = """UPDATE floor_operations
    SET status = 'dispatching', lease_owner = ?, lease_expires_at = ?,
        fencing_token = fencing_token + 1, attempts = attempts + 1,
        first_dispatched_at = coalesce(first_dispatched_at, ?), last_dispatched_at = ?,
        record_version = record_version + 1, updated_at = ?, status_changed_at = updated_at
    WHERE tenant_id = ? AND operation_id = ? AND status IN ('prepared', 'unknown')
    RETURNING fencing_token, record_version"""

_SQ_CONFIRM = """UPDATE floor_operations
    SET status = 'confirmed', result = ?, lease_owner = NULL, lease_expires_at = NULL,
        resolved_at = ?, record_version = record_version + 1, updated_at = ?,
        status_changed_at = resolved_at
    WHERE tenant_id = ? AND operation_id = ? AND status = 'dispatching' AND fencing_token = ?
    RETURNING record_version"""

_SQ_GET = "SELECT * FROM floor_operations WHERE tenant_id = ? AND operation_id = ?"


def _now() -> str:
    return datetime.now(UTC).isoformat()


class SQLiteFloor:
    """Raw-SQL lifecycles on one sqlite3 connection: WAL, ``synchronous=FULL``, receipts NORMAL.

    Each transition is one ``BEGIN IMMEDIATE`` ... ``COMMIT`` holding the row
    write and its event (SQLite has no data-modifying CTEs).
    """

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")

    def close(self) -> None:
        self.conn.close()

    def setup(self) -> None:
        for statement in _SQLITE_SETUP:
            self.conn.execute(statement)

    def _insert(self, d: OperationDraft, owner: LeaseOwner | None) -> int:
        now = _now()
        claimed = owner is not None
        values = (
            *_row_values(d),
            "dispatching" if claimed else "prepared",
            owner.encode() if owner else None,
            (datetime.now(UTC) + _LEASE).isoformat() if claimed else None,
            int(claimed),
            int(claimed),
            2 if claimed else 1,
            now if claimed else None,
            now if claimed else None,
            now,
            now,
            now,
        )
        token: int = self.conn.execute(_SQ_PREPARE, values).fetchone()[0]
        self.conn.execute(
            _SQ_EVENT, (d.tenant_id, d.operation_id, 1, "prepare", None, "prepared", "l", 0, now)
        )
        if claimed:
            self.conn.execute(
                _SQ_EVENT,
                (d.tenant_id, d.operation_id, 2, "claim", "prepared", "dispatching", "l", 1, now),
            )
        return token

    def _confirm(self, d: OperationDraft, token: int) -> None:
        now = _now()
        (version,) = self.conn.execute(
            _SQ_CONFIRM, (_result(d), now, now, d.tenant_id, d.operation_id, token)
        ).fetchone()
        self.conn.execute(
            _SQ_EVENT,
            (
                d.tenant_id,
                d.operation_id,
                version,
                "confirm",
                "dispatching",
                "confirmed",
                "l",
                token,
                now,
            ),
        )

    def _receipts(self, confirms: Sequence[tuple[OperationDraft, int]]) -> None:
        """One receipt transaction, committed NORMAL (the ledger's default under WAL)."""
        c = self.conn
        c.execute("PRAGMA synchronous=NORMAL")
        c.execute("BEGIN IMMEDIATE")
        for d, token in confirms:
            self._confirm(d, token)
        c.execute("COMMIT")
        c.execute("PRAGMA synchronous=FULL")

    def three_step(self, d: OperationDraft, owner: LeaseOwner) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        self._insert(d, None)
        c.execute("COMMIT")
        c.execute("BEGIN IMMEDIATE")
        now = _now()
        lease = (datetime.now(UTC) + _LEASE).isoformat()
        token, version = c.execute(
            _SQ_CLAIM, (owner.encode(), lease, now, now, now, d.tenant_id, d.operation_id)
        ).fetchone()
        c.execute(
            _SQ_EVENT,
            (
                d.tenant_id,
                d.operation_id,
                version,
                "claim",
                "prepared",
                "dispatching",
                "l",
                token,
                now,
            ),
        )
        c.execute("COMMIT")
        self._receipts([(d, token)])

    def fused(self, d: OperationDraft, owner: LeaseOwner) -> None:
        self.batch([d], owner)

    def batch(self, ds: Sequence[OperationDraft], owner: LeaseOwner) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        tokens = [self._insert(d, owner) for d in ds]
        c.execute("COMMIT")
        for d, token in zip(ds, tokens, strict=True):
            self._receipts([(d, token)])

    def batch_confirmed(self, ds: Sequence[OperationDraft], owner: LeaseOwner) -> None:
        """A batch whose receipts are confirmed together: two transactions in all."""
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        tokens = [self._insert(d, owner) for d in ds]
        c.execute("COMMIT")
        self._receipts(list(zip(ds, tokens, strict=True)))

    def replay(self, d: OperationDraft, owner: LeaseOwner) -> None:
        row = self.conn.execute(_SQ_GET, (d.tenant_id, d.operation_id)).fetchone()
        if row is None:
            raise AssertionError("floor: expected a confirmed row")
