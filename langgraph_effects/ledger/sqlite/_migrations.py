"""SQLite schema migrations: append-only; migration ``i`` makes schema version ``i + 1``.

Timestamps are INTEGER microseconds since the Unix epoch (UTC): exact round
trips, cheap comparisons and ordering. JSON columns are TEXT.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS"]

_STATUSES = "'prepared', 'dispatching', 'confirmed', 'rejected', 'unknown'"


def _is_status(column: str) -> str:
    """``column`` is a status, as comparisons (``IN`` would build a temporary table)."""
    return " OR ".join(f"{column} = {value}" for value in _STATUSES.split(", "))


MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        f"""
        CREATE TABLE lge_operations (
            tenant_id TEXT NOT NULL,
            operation_id TEXT NOT NULL,
            workflow_id TEXT,
            action TEXT NOT NULL,
            action_version INTEGER NOT NULL,
            target TEXT,
            payload_digest TEXT NOT NULL,
            payload TEXT,
            payload_stored INTEGER NOT NULL,
            authorization_ref TEXT,
            provider TEXT,
            tool_call_id TEXT,
            status TEXT NOT NULL CHECK (status IN ({_STATUSES})),
            idempotency_key TEXT,
            provider_request_id TEXT,
            provider_result_id TEXT,
            result TEXT,
            error TEXT,
            attempts INTEGER NOT NULL,
            lease_owner TEXT,
            lease_expires_at INTEGER,
            fencing_token INTEGER NOT NULL,
            record_version INTEGER NOT NULL,
            evidence_checked_at INTEGER,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            first_dispatched_at INTEGER,
            last_dispatched_at INTEGER,
            resolved_at INTEGER,
            PRIMARY KEY (tenant_id, operation_id)
        ) WITHOUT ROWID
        """,
        # SQLite uses a partial index only when the query names the status as a
        # literal; the ledger binds it, so a full (status, updated_at) index
        # keeps listing one status cheap beside millions of terminal rows.
        "CREATE INDEX lge_operations_status ON lge_operations (status, updated_at, operation_id)",
        f"""
        CREATE TABLE lge_events (
            event_id INTEGER PRIMARY KEY AUTOINCREMENT,
            tenant_id TEXT NOT NULL,
            operation_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            kind TEXT NOT NULL,
            from_status TEXT CHECK (from_status IN ({_STATUSES})),
            to_status TEXT NOT NULL CHECK (to_status IN ({_STATUSES})),
            actor TEXT NOT NULL,
            fencing_token INTEGER,
            evidence TEXT,
            detail TEXT,
            at INTEGER NOT NULL,
            UNIQUE (tenant_id, operation_id, seq)
        )
        """,
    ),
    # 2: the key's retention as promised at prepare time, and when the status
    # last changed (updated_at also moves on evidence). Existing rows take the
    # time of their last status-changing event, else updated_at. The listing
    # index follows the new ordering.
    (
        "ALTER TABLE lge_operations ADD COLUMN key_retention_seconds REAL",
        "ALTER TABLE lge_operations ADD COLUMN status_changed_at INTEGER",
        """
        UPDATE lge_operations SET status_changed_at = COALESCE(
            (SELECT MAX(e.at) FROM lge_events AS e
             WHERE e.tenant_id = lge_operations.tenant_id
               AND e.operation_id = lge_operations.operation_id
               AND (e.from_status IS NULL OR e.from_status <> e.to_status)),
            updated_at)
        """,
        "DROP INDEX lge_operations_status",
        "CREATE INDEX lge_operations_status_age"
        " ON lge_operations (status, status_changed_at, operation_id)",
    ),
    # 3: a thread belongs to the tenant of its first effect (``bind_thread``).
    # Threads with operations already are bound to their oldest operation's tenant.
    (
        """
        CREATE TABLE lge_threads (
            workflow_id TEXT PRIMARY KEY,
            tenant_id TEXT NOT NULL,
            bound_at INTEGER NOT NULL
        ) WITHOUT ROWID
        """,
        """
        INSERT OR IGNORE INTO lge_threads (workflow_id, tenant_id, bound_at)
        SELECT workflow_id, tenant_id, MIN(created_at) FROM lge_operations
        WHERE workflow_id IS NOT NULL AND workflow_id <> 'no-thread'
        GROUP BY workflow_id, tenant_id ORDER BY MIN(created_at)
        """,
    ),
    # 4: where each operation's calls were met (``core.identity``): the identity
    # of a later identical call follows delivery, not the messages it sees.
    ("ALTER TABLE lge_operations ADD COLUMN origin TEXT",),
    # 5: the status CHECKs as comparisons, the same values allowed (NULL too): SQLite
    # tests ``x IN (a list)`` through a temporary table built per statement, so
    # each event INSERT built two (callgrind: 274k of 1,673k instructions per first-time
    # effect). SQLite changes a CHECK by copying the table: same columns in the same
    # order, the same rows, the same index, and the events' AUTOINCREMENT high mark.
    (
        f"""
        CREATE TABLE lge_operations_new (
            tenant_id TEXT NOT NULL,
            operation_id TEXT NOT NULL,
            workflow_id TEXT,
            action TEXT NOT NULL,
            action_version INTEGER NOT NULL,
            target TEXT,
            payload_digest TEXT NOT NULL,
            payload TEXT,
            payload_stored INTEGER NOT NULL,
            authorization_ref TEXT,
            provider TEXT,
            tool_call_id TEXT,
            status TEXT NOT NULL CHECK ({_is_status("status")}),
            idempotency_key TEXT,
            provider_request_id TEXT,
            provider_result_id TEXT,
            result TEXT,
            error TEXT,
            attempts INTEGER NOT NULL,
            lease_owner TEXT,
            lease_expires_at INTEGER,
            fencing_token INTEGER NOT NULL,
            record_version INTEGER NOT NULL,
            evidence_checked_at INTEGER,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            first_dispatched_at INTEGER,
            last_dispatched_at INTEGER,
            resolved_at INTEGER,
            key_retention_seconds REAL,
            status_changed_at INTEGER,
            origin TEXT,
            PRIMARY KEY (tenant_id, operation_id)
        ) WITHOUT ROWID
        """,
        "INSERT INTO lge_operations_new SELECT * FROM lge_operations",
        "DROP TABLE lge_operations",
        "ALTER TABLE lge_operations_new RENAME TO lge_operations",
        "CREATE INDEX lge_operations_status_age"
        " ON lge_operations (status, status_changed_at, operation_id)",
        f"""
        CREATE TABLE lge_events_new (
            event_id INTEGER PRIMARY KEY AUTOINCREMENT,
            tenant_id TEXT NOT NULL,
            operation_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            kind TEXT NOT NULL,
            from_status TEXT CHECK ({_is_status("from_status")}),
            to_status TEXT NOT NULL CHECK ({_is_status("to_status")}),
            actor TEXT NOT NULL,
            fencing_token INTEGER,
            evidence TEXT,
            detail TEXT,
            at INTEGER NOT NULL,
            UNIQUE (tenant_id, operation_id, seq)
        )
        """,
        "INSERT INTO lge_events_new SELECT * FROM lge_events",
        # Never an event id again: the old table's high mark, not the copy's largest id.
        "DELETE FROM sqlite_sequence WHERE name = 'lge_events_new'",
        "INSERT INTO sqlite_sequence (name, seq)"
        " SELECT 'lge_events_new', seq FROM sqlite_sequence WHERE name = 'lge_events'",
        "DROP TABLE lge_events",
        "ALTER TABLE lge_events_new RENAME TO lge_events",
    ),
)
