"""PostgreSQL statements and migrations of the transactional outbox (``langgraph_effects.outbox``).

The tables live in the *application's* database, possibly beside the
ledger's, and migrate on their own (``lge_outbox_schema_version``).
Timestamps are ``timestamptz``; only the claims differ from SQLite's
statements (``FOR UPDATE ... SKIP LOCKED``).
"""

from __future__ import annotations

from langgraph_effects.ledger.engine import (
    RECORD_SCHEMA_VERSION,
    SCHEMA_VERSION,
    SCHEMA_VERSION_TABLE,
    SETUP_LOCK,
)
from langgraph_effects.ledger.engine.tables import OUTBOX
from langgraph_effects.ledger.postgres._sql import dump_ts, load_ts

__all__ = ["DIALECT"]

_COLUMNS = (
    "seq, entry_id, tenant_id, topic, key, ordered, payload, payload_digest, operation_id, "
    "status, failures, available_at, lease_owner, lease_expires_at, fencing_token, "
    "receipt_state, provider_message_id, last_error, created_at, updated_at, resolved_at"
)
_EVENT_COLUMNS = "entry_id, evidence_id, kind, source, message_id, detail, at"

# Append-only: a new schema change is a new tuple entry, never an edit.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE IF NOT EXISTS lge_outbox (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            entry_id TEXT NOT NULL UNIQUE,
            tenant_id TEXT NOT NULL,
            topic TEXT NOT NULL,
            key TEXT,
            ordered BOOLEAN NOT NULL DEFAULT FALSE,
            payload TEXT NOT NULL,
            payload_digest TEXT NOT NULL,
            operation_id TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending',
            failures INTEGER NOT NULL DEFAULT 0,
            available_at TIMESTAMPTZ NOT NULL,
            lease_owner TEXT,
            lease_expires_at TIMESTAMPTZ,
            fencing_token BIGINT NOT NULL DEFAULT 0,
            receipt_state TEXT,
            provider_message_id TEXT,
            last_error TEXT,
            created_at TIMESTAMPTZ NOT NULL,
            updated_at TIMESTAMPTZ NOT NULL,
            resolved_at TIMESTAMPTZ)""",
        """CREATE INDEX IF NOT EXISTS lge_outbox_open ON lge_outbox (available_at, seq)
            WHERE status IN ('pending', 'review')""",
        """CREATE INDEX IF NOT EXISTS lge_outbox_key ON lge_outbox (tenant_id, topic, key, seq)
            WHERE status IN ('pending', 'review')""",
    ),
    # v2: delivery evidence after "accepted" (webhooks, status checks), one row
    # per (entry, evidence id) so a repeated webhook records nothing new.
    (
        """CREATE TABLE IF NOT EXISTS lge_outbox_events (
            entry_id TEXT NOT NULL,
            evidence_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            source TEXT NOT NULL,
            message_id TEXT,
            detail TEXT,
            at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (entry_id, evidence_id))""",
        """CREATE INDEX IF NOT EXISTS lge_outbox_accepted ON lge_outbox (available_at, seq)
            WHERE status = 'sent' AND receipt_state = 'accepted'""",
        """CREATE INDEX IF NOT EXISTS lge_outbox_message ON lge_outbox (provider_message_id)
            WHERE provider_message_id IS NOT NULL""",
    ),
)

SETUP_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext('lge_outbox_setup'))"
VERSION_TABLE_SQL = (
    "CREATE TABLE IF NOT EXISTS lge_outbox_schema_version "
    "(version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
)
SCHEMA_VERSION_SQL = "SELECT COALESCE(MAX(version), 0) AS version FROM lge_outbox_schema_version"
RECORD_SCHEMA_VERSION_SQL = (
    "INSERT INTO lge_outbox_schema_version (version, applied_at) VALUES (%(version)s, now())"
)

# ON CONFLICT DO NOTHING: a repeated enqueue under the same dedupe key inserts
# nothing and returns no row; the program then reads the existing digest.
INSERT_ENTRY_SQL = """
INSERT INTO lge_outbox (entry_id, tenant_id, topic, key, ordered, payload, payload_digest,
                        operation_id, status, available_at, created_at, updated_at)
VALUES (%(entry_id)s, %(tenant_id)s, %(topic)s, %(key)s, %(ordered)s, %(payload)s,
        %(payload_digest)s, %(operation_id)s, 'pending', %(now)s, %(now)s, %(now)s)
ON CONFLICT (entry_id) DO NOTHING
RETURNING seq
"""
GET_ENTRY_SQL = f"SELECT {_COLUMNS} FROM lge_outbox WHERE entry_id = %(entry_id)s"
GET_ENTRY_BY_MESSAGE_SQL = (
    f"SELECT {_COLUMNS} FROM lge_outbox WHERE provider_message_id = %(message_id)s ORDER BY seq"
)
LIST_ENTRIES_SQL = f"""
SELECT {_COLUMNS} FROM lge_outbox
WHERE (CAST(%(status)s AS TEXT) IS NULL OR status = %(status)s)
  AND (CAST(%(tenant_id)s AS TEXT) IS NULL OR tenant_id = %(tenant_id)s)
ORDER BY seq LIMIT %(limit)s
"""

# One conditional write claims a batch: open entries whose time has come, not
# leased (or whose lease expired), and, for ordered entries, only the head of
# their key: no earlier entry of the same (tenant, topic, key) still open.
# Every claim bumps the entry's fencing token; only that token can settle it.
# SKIP LOCKED: concurrent relays split the open entries instead of queueing
# on each other's row locks; the outer WHERE re-checks what a lock waited on.
CLAIM_SQL = f"""
UPDATE lge_outbox
SET lease_owner = %(owner)s, lease_expires_at = %(lease_expires_at)s,
    fencing_token = fencing_token + 1, updated_at = %(now)s
WHERE seq IN (
    SELECT o.seq FROM lge_outbox o
    WHERE o.status IN ('pending', 'review') AND o.available_at <= %(now)s
      AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= %(now)s)
      AND (CAST(%(tenant_id)s AS TEXT) IS NULL OR o.tenant_id = %(tenant_id)s)
      AND (NOT o.ordered OR NOT EXISTS (
            SELECT 1 FROM lge_outbox e
            WHERE e.tenant_id = o.tenant_id AND e.topic = o.topic AND e.key = o.key
              AND e.seq < o.seq AND e.status IN ('pending', 'review')))
    ORDER BY o.seq
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED)
  AND status IN ('pending', 'review')
  AND (lease_expires_at IS NULL OR lease_expires_at <= %(now)s)
RETURNING {_COLUMNS}
"""

# Fenced: only the holder of the entry's current token settles it. A stale
# relay's write matches no row and changes nothing. A delivery already
# recorded (a webhook that beat the receipt) is never turned back into "accepted".
SETTLE_SQL = """
UPDATE lge_outbox
SET status = %(status)s, failures = %(failures)s, available_at = %(available_at)s,
    receipt_state = CASE WHEN receipt_state = 'delivered' THEN receipt_state
                         ELSE COALESCE(%(receipt_state)s, receipt_state) END,
    provider_message_id = COALESCE(%(provider_message_id)s, provider_message_id),
    last_error = %(last_error)s, lease_owner = NULL, lease_expires_at = NULL,
    updated_at = %(now)s, resolved_at = %(resolved_at)s
WHERE seq = %(seq)s AND fencing_token = %(token)s
RETURNING seq
"""

# Leases still running: the relay checks their owners in Python and takes over
# those provably dead (same host, process gone) without waiting for expiry.
LEASED_SQL = """
SELECT seq, lease_owner, fencing_token FROM lge_outbox
WHERE status IN ('pending', 'review') AND lease_expires_at > %(now)s
ORDER BY seq LIMIT %(limit)s
"""
TAKE_OVER_SQL = f"""
UPDATE lge_outbox
SET lease_owner = %(owner)s, lease_expires_at = %(lease_expires_at)s,
    fencing_token = fencing_token + 1, updated_at = %(now)s
WHERE seq = %(seq)s AND fencing_token = %(token)s AND status IN ('pending', 'review')
RETURNING {_COLUMNS}
"""

# Unfenced: a provider's webhook holds no lease. It only ever raises the
# receipt to "delivered" and leaves any relay's lease and token alone.
MARK_DELIVERED_SQL = f"""
UPDATE lge_outbox SET receipt_state = 'delivered', updated_at = %(now)s
WHERE seq = %(seq)s
RETURNING {_COLUMNS}
"""
# Fenced: a status check claimed the entry; only its token records the answer
# and releases the claim.
MARK_DELIVERED_FENCED_SQL = f"""
UPDATE lge_outbox
SET receipt_state = 'delivered', lease_owner = NULL, lease_expires_at = NULL, updated_at = %(now)s
WHERE seq = %(seq)s AND fencing_token = %(token)s
RETURNING {_COLUMNS}
"""
INSERT_EVENT_SQL = """
INSERT INTO lge_outbox_events (entry_id, evidence_id, kind, source, message_id, detail, at)
VALUES (%(entry_id)s, %(evidence_id)s, %(kind)s, %(source)s, %(message_id)s, %(detail)s, %(now)s)
ON CONFLICT (entry_id, evidence_id) DO NOTHING
RETURNING entry_id
"""
GET_EVENT_SQL = (
    f"SELECT {_EVENT_COLUMNS} FROM lge_outbox_events "
    "WHERE entry_id = %(entry_id)s AND evidence_id = %(evidence_id)s"
)
ENTRY_EVENTS_SQL = (
    f"SELECT {_EVENT_COLUMNS} FROM lge_outbox_events WHERE entry_id = %(entry_id)s "
    "ORDER BY at, evidence_id"
)

# Status checks claim sent entries whose receipt still says "accepted", due
# and not older than the checking horizon, the same way a delivery pass
# claims (a lease and a new fencing token).
CLAIM_CHECK_SQL = f"""
UPDATE lge_outbox
SET lease_owner = %(owner)s, lease_expires_at = %(lease_expires_at)s,
    fencing_token = fencing_token + 1, updated_at = %(now)s
WHERE seq IN (
    SELECT o.seq FROM lge_outbox o
    WHERE o.status = 'sent' AND o.receipt_state = 'accepted' AND o.available_at <= %(now)s
      AND o.resolved_at > %(since)s
      AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= %(now)s)
      AND (CAST(%(tenant_id)s AS TEXT) IS NULL OR o.tenant_id = %(tenant_id)s)
    ORDER BY o.seq
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED)
  AND status = 'sent' AND receipt_state = 'accepted'
  AND (lease_expires_at IS NULL OR lease_expires_at <= %(now)s)
RETURNING {_COLUMNS}
"""
# Still only accepted: check again later. Fenced like every settle.
RELEASE_CHECK_SQL = """
UPDATE lge_outbox
SET available_at = %(available_at)s, lease_owner = NULL, lease_expires_at = NULL,
    updated_at = %(now)s
WHERE seq = %(seq)s AND fencing_token = %(token)s
RETURNING seq
"""

DIALECT = OUTBOX.dialect(
    {
        SETUP_LOCK: SETUP_LOCK_SQL,
        SCHEMA_VERSION_TABLE: VERSION_TABLE_SQL,
        SCHEMA_VERSION: SCHEMA_VERSION_SQL,
        RECORD_SCHEMA_VERSION: RECORD_SCHEMA_VERSION_SQL,
        "insert_entry": INSERT_ENTRY_SQL,
        "get_entry": GET_ENTRY_SQL,
        "get_entry_by_message": GET_ENTRY_BY_MESSAGE_SQL,
        "list_entries": LIST_ENTRIES_SQL,
        "claim": CLAIM_SQL,
        "settle": SETTLE_SQL,
        "leased": LEASED_SQL,
        "take_over": TAKE_OVER_SQL,
        "mark_delivered": MARK_DELIVERED_SQL,
        "mark_delivered_fenced": MARK_DELIVERED_FENCED_SQL,
        "insert_event": INSERT_EVENT_SQL,
        "get_event": GET_EVENT_SQL,
        "entry_events": ENTRY_EVENTS_SQL,
        "claim_check": CLAIM_CHECK_SQL,
        "release_check": RELEASE_CHECK_SQL,
    },
    migrations=MIGRATIONS,
    dump_ts=dump_ts,
    load_ts=load_ts,
)
