"""PostgreSQL schema migrations: append-only; migration ``i`` makes schema version ``i + 1``.

Only ``lge_`` tables, never LangGraph's. Timestamps are ``timestamptz``
(microseconds, like Python), JSON is ``jsonb``.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS"]

_STATUSES = "'prepared', 'dispatching', 'confirmed', 'rejected', 'unknown'"
_OPEN = "'prepared', 'dispatching', 'unknown'"

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        f"""
        CREATE TABLE lge_operations (
            tenant_id text NOT NULL,
            operation_id text NOT NULL,
            workflow_id text,
            action text NOT NULL,
            action_version integer NOT NULL,
            target text,
            payload_digest text NOT NULL,
            payload jsonb,
            payload_stored boolean NOT NULL,
            authorization_ref text,
            provider text,
            tool_call_id text,
            status text NOT NULL CHECK (status IN ({_STATUSES})),
            idempotency_key text,
            provider_request_id text,
            provider_result_id text,
            result jsonb,
            error text,
            attempts integer NOT NULL,
            lease_owner text,
            lease_expires_at timestamptz,
            fencing_token bigint NOT NULL,
            record_version bigint NOT NULL,
            evidence_checked_at timestamptz,
            created_at timestamptz NOT NULL,
            updated_at timestamptz NOT NULL,
            first_dispatched_at timestamptz,
            last_dispatched_at timestamptz,
            resolved_at timestamptz,
            PRIMARY KEY (tenant_id, operation_id)
        )
        """,
        # Open operations only: listing them stays cheap beside millions of
        # terminal rows, and terminal rows cost this index nothing.
        """
        CREATE INDEX lge_operations_open ON lge_operations (status, updated_at, operation_id)
        WHERE status IN ('prepared', 'dispatching', 'unknown')
        """,
        f"""
        CREATE TABLE lge_events (
            event_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            tenant_id text NOT NULL,
            operation_id text NOT NULL,
            seq bigint NOT NULL,
            kind text NOT NULL,
            from_status text CHECK (from_status IN ({_STATUSES})),
            to_status text NOT NULL CHECK (to_status IN ({_STATUSES})),
            actor text NOT NULL,
            fencing_token bigint,
            evidence jsonb,
            detail jsonb,
            at timestamptz NOT NULL,
            UNIQUE (tenant_id, operation_id, seq)
        )
        """,
    ),
    # 2: the key's retention as promised at prepare time, and when the status
    # last changed (updated_at also moves on evidence). Existing rows take the
    # time of their last status-changing event, else updated_at. Nullable so
    # rows bulk-written by other tools stay valid (read back as updated_at).
    # The open-operations index follows the new ordering.
    (
        """
        ALTER TABLE lge_operations
            ADD COLUMN key_retention_seconds double precision,
            ADD COLUMN status_changed_at timestamptz
        """,
        """
        UPDATE lge_operations AS o SET status_changed_at = COALESCE(
            (SELECT max(e.at) FROM lge_events AS e
             WHERE (e.tenant_id, e.operation_id) = (o.tenant_id, o.operation_id)
               AND e.from_status IS DISTINCT FROM e.to_status),
            o.updated_at)
        """,
        "DROP INDEX lge_operations_open",
        f"""
        CREATE INDEX lge_operations_open ON lge_operations (status, status_changed_at, operation_id)
        WHERE status IN ({_OPEN})
        """,
    ),
    # 3: a thread belongs to the tenant of its first effect (``bind_thread``).
    # Threads with operations already are bound to their oldest operation's tenant.
    (
        """
        CREATE TABLE lge_threads (
            workflow_id text PRIMARY KEY,
            tenant_id text NOT NULL,
            bound_at timestamptz NOT NULL
        )
        """,
        """
        INSERT INTO lge_threads (workflow_id, tenant_id, bound_at)
        SELECT DISTINCT ON (workflow_id) workflow_id, tenant_id, created_at FROM lge_operations
        WHERE workflow_id IS NOT NULL AND workflow_id <> 'no-thread'
        ORDER BY workflow_id, created_at
        ON CONFLICT DO NOTHING
        """,
    ),
    # 4: where each operation's calls were met (``core.identity``): the identity
    # of a later identical call follows delivery, not the messages it sees.
    ("ALTER TABLE lge_operations ADD COLUMN origin text",),
)
