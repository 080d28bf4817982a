"""SQL of the transactional outbox, for SQLite and PostgreSQL.

Statements are written once with ``:name`` placeholders (sqlite3's named
style); the statement driver (``_sqlrun``) rewrites them for psycopg. Only
the DDL and the claim (``FOR UPDATE SKIP LOCKED``) differ between the two.
Timestamps are bound by the caller: ISO-8601 UTC text on SQLite (one fixed
format, so text order is time order), ``timestamptz`` on PostgreSQL.
"""

from __future__ import annotations

# Parameters that may be NULL are wrapped in CAST(... AS TEXT): PostgreSQL
# cannot infer the type of a bare ``$1 IS NULL``.

__all__ = [
    "CLAIM_CHECK_SQL_PG",
    "CLAIM_CHECK_SQL_SQLITE",
    "CLAIM_SQL_PG",
    "CLAIM_SQL_SQLITE",
    "ENTRY_EVENTS_SQL",
    "GET_ENTRY_BY_MESSAGE_SQL",
    "GET_ENTRY_SQL",
    "GET_EVENT_SQL",
    "INSERT_ENTRY_SQL",
    "INSERT_EVENT_SQL",
    "INSERT_VERSION_SQL",
    "LEASED_SQL",
    "LIST_ENTRIES_SQL",
    "MARK_DELIVERED_FENCED_SQL",
    "MARK_DELIVERED_SQL",
    "MIGRATIONS_PG",
    "MIGRATIONS_SQLITE",
    "PG_SETUP_LOCK_SQL",
    "RELEASE_CHECK_SQL",
    "SELECT_VERSION_SQL",
    "SETTLE_SQL",
    "TAKE_OVER_SQL",
    "VERSION_TABLE_PG",
    "VERSION_TABLE_SQLITE",
]

# Append-only: a new schema change is a new tuple entry, never an edit.
MIGRATIONS_SQLITE: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE IF NOT EXISTS lge_outbox (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            entry_id TEXT NOT NULL UNIQUE,
            tenant_id TEXT NOT NULL,
            topic TEXT NOT NULL,
            key TEXT,
            ordered INTEGER NOT NULL DEFAULT 0,
            payload TEXT NOT NULL,
            payload_digest TEXT NOT NULL,
            operation_id TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending',
            failures INTEGER NOT NULL DEFAULT 0,
            available_at TEXT NOT NULL,
            lease_owner TEXT,
            lease_expires_at TEXT,
            fencing_token INTEGER NOT NULL DEFAULT 0,
            receipt_state TEXT,
            provider_message_id TEXT,
            last_error TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            resolved_at TEXT)""",
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
            at TEXT NOT NULL,
            PRIMARY KEY (entry_id, evidence_id))""",
        """CREATE INDEX IF NOT EXISTS lge_outbox_accepted ON lge_outbox (available_at, seq)
            WHERE status = 'sent' AND receipt_state = 'accepted'""",
        """CREATE INDEX IF NOT EXISTS lge_outbox_message ON lge_outbox (provider_message_id)
            WHERE provider_message_id IS NOT NULL""",
    ),
)

MIGRATIONS_PG: tuple[tuple[str, ...], ...] = (
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

# The outbox keeps its own version table: it lives in the *application's*
# database, possibly beside the ledger's tables, and migrates independently.
VERSION_TABLE_SQLITE = (
    "CREATE TABLE IF NOT EXISTS lge_outbox_schema_version "
    "(version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
)
VERSION_TABLE_PG = (
    "CREATE TABLE IF NOT EXISTS lge_outbox_schema_version "
    "(version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
)
SELECT_VERSION_SQL = "SELECT COALESCE(MAX(version), 0) FROM lge_outbox_schema_version"
INSERT_VERSION_SQL = (
    "INSERT INTO lge_outbox_schema_version (version, applied_at) VALUES (:version, :now)"
)
PG_SETUP_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext('lge_outbox_setup'))"

_COLUMNS = (
    "seq, entry_id, tenant_id, topic, key, ordered, payload, payload_digest, operation_id, "
    "status, failures, available_at, lease_owner, lease_expires_at, fencing_token, "
    "receipt_state, provider_message_id, last_error, created_at, updated_at, resolved_at"
)

# ON CONFLICT DO NOTHING: a repeated enqueue under the same dedupe key inserts
# nothing and returns no row; the caller then reads the existing digest.
INSERT_ENTRY_SQL = """
INSERT INTO lge_outbox (entry_id, tenant_id, topic, key, ordered, payload, payload_digest,
                        operation_id, status, available_at, created_at, updated_at)
VALUES (:entry_id, :tenant_id, :topic, :key, :ordered, :payload, :payload_digest,
        :operation_id, 'pending', :now, :now, :now)
ON CONFLICT (entry_id) DO NOTHING
RETURNING seq
"""

GET_ENTRY_SQL = f"SELECT {_COLUMNS} FROM lge_outbox WHERE entry_id = :entry_id"

LIST_ENTRIES_SQL = f"""
SELECT {_COLUMNS} FROM lge_outbox
WHERE (CAST(:status AS TEXT) IS NULL OR status = :status)
  AND (CAST(:tenant_id AS TEXT) IS NULL OR tenant_id = :tenant_id)
ORDER BY seq LIMIT :limit
"""

# One conditional write claims a batch: open entries whose time has come, not
# leased (or whose lease expired), and, for ordered entries, only the head of
# their key: no earlier entry of the same (tenant, topic, key) still open.
# Every claim bumps the entry's fencing token; only that token can settle it.
_CANDIDATES = """
SELECT o.seq FROM lge_outbox o
WHERE o.status IN ('pending', 'review') AND o.available_at <= :now
  AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= :now)
  AND (CAST(:tenant_id AS TEXT) IS NULL OR o.tenant_id = :tenant_id)
  AND (NOT o.ordered OR NOT EXISTS (
        SELECT 1 FROM lge_outbox e
        WHERE e.tenant_id = o.tenant_id AND e.topic = o.topic AND e.key = o.key
          AND e.seq < o.seq AND e.status IN ('pending', 'review')))
ORDER BY o.seq
LIMIT :limit
"""

_CLAIM = """
UPDATE lge_outbox
SET lease_owner = :owner, lease_expires_at = :lease_expires_at,
    fencing_token = fencing_token + 1, updated_at = :now
WHERE seq IN ({candidates})
  AND status IN ('pending', 'review')
  AND (lease_expires_at IS NULL OR lease_expires_at <= :now)
RETURNING {columns}
"""

CLAIM_SQL_SQLITE = _CLAIM.format(candidates=_CANDIDATES, columns=_COLUMNS)
# SKIP LOCKED: concurrent relays split the open entries instead of queueing
# on each other's row locks; the outer WHERE re-checks what a lock waited on.
CLAIM_SQL_PG = _CLAIM.format(
    candidates=_CANDIDATES + " FOR UPDATE OF o SKIP LOCKED", columns=_COLUMNS
)

# Fenced: only the holder of the entry's current token settles it. A stale
# relay's write matches no row and changes nothing. A delivery already
# recorded (a webhook that beat the receipt) is never turned back into "accepted".
SETTLE_SQL = """
UPDATE lge_outbox
SET status = :status, failures = :failures, available_at = :available_at,
    receipt_state = CASE WHEN receipt_state = 'delivered' THEN receipt_state
                         ELSE COALESCE(:receipt_state, receipt_state) END,
    provider_message_id = COALESCE(:provider_message_id, provider_message_id),
    last_error = :last_error, lease_owner = NULL, lease_expires_at = NULL,
    updated_at = :now, resolved_at = :resolved_at
WHERE seq = :seq AND fencing_token = :token
RETURNING seq
"""

# Leases still running: the relay checks their owners in Python and takes over
# those provably dead (same host, process gone) without waiting for expiry.
LEASED_SQL = """
SELECT seq, lease_owner, fencing_token FROM lge_outbox
WHERE status IN ('pending', 'review') AND lease_expires_at > :now
ORDER BY seq LIMIT :limit
"""

TAKE_OVER_SQL = f"""
UPDATE lge_outbox
SET lease_owner = :owner, lease_expires_at = :lease_expires_at,
    fencing_token = fencing_token + 1, updated_at = :now
WHERE seq = :seq AND fencing_token = :token AND status IN ('pending', 'review')
RETURNING {_COLUMNS}
"""

# --------------------------------------------------------------------------- delivery evidence

GET_ENTRY_BY_MESSAGE_SQL = (
    f"SELECT {_COLUMNS} FROM lge_outbox WHERE provider_message_id = :message_id ORDER BY seq"
)

# Unfenced: a provider's webhook holds no lease. It only ever raises the
# receipt to "delivered" and leaves any relay's lease and token alone.
MARK_DELIVERED_SQL = f"""
UPDATE lge_outbox SET receipt_state = 'delivered', updated_at = :now
WHERE seq = :seq
RETURNING {_COLUMNS}
"""

# Fenced: a status check claimed the entry; only its token records the answer
# and releases the claim.
MARK_DELIVERED_FENCED_SQL = f"""
UPDATE lge_outbox
SET receipt_state = 'delivered', lease_owner = NULL, lease_expires_at = NULL, updated_at = :now
WHERE seq = :seq AND fencing_token = :token
RETURNING {_COLUMNS}
"""

INSERT_EVENT_SQL = """
INSERT INTO lge_outbox_events (entry_id, evidence_id, kind, source, message_id, detail, at)
VALUES (:entry_id, :evidence_id, :kind, :source, :message_id, :detail, :now)
ON CONFLICT (entry_id, evidence_id) DO NOTHING
RETURNING entry_id
"""

_EVENT_COLUMNS = "entry_id, evidence_id, kind, source, message_id, detail, at"
GET_EVENT_SQL = (
    f"SELECT {_EVENT_COLUMNS} FROM lge_outbox_events "
    "WHERE entry_id = :entry_id AND evidence_id = :evidence_id"
)
ENTRY_EVENTS_SQL = (
    f"SELECT {_EVENT_COLUMNS} FROM lge_outbox_events WHERE entry_id = :entry_id "
    "ORDER BY at, evidence_id"
)

# Status checks claim sent entries whose receipt still says "accepted", due
# and not older than the checking horizon, the same way a delivery pass
# claims (a lease and a new fencing token).
_CHECK_CANDIDATES = """
SELECT o.seq FROM lge_outbox o
WHERE o.status = 'sent' AND o.receipt_state = 'accepted' AND o.available_at <= :now
  AND o.resolved_at > :since
  AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= :now)
  AND (CAST(:tenant_id AS TEXT) IS NULL OR o.tenant_id = :tenant_id)
ORDER BY o.seq
LIMIT :limit
"""

_CLAIM_CHECK = """
UPDATE lge_outbox
SET lease_owner = :owner, lease_expires_at = :lease_expires_at,
    fencing_token = fencing_token + 1, updated_at = :now
WHERE seq IN ({candidates})
  AND status = 'sent' AND receipt_state = 'accepted'
  AND (lease_expires_at IS NULL OR lease_expires_at <= :now)
RETURNING {columns}
"""

CLAIM_CHECK_SQL_SQLITE = _CLAIM_CHECK.format(candidates=_CHECK_CANDIDATES, columns=_COLUMNS)
CLAIM_CHECK_SQL_PG = _CLAIM_CHECK.format(
    candidates=_CHECK_CANDIDATES + " FOR UPDATE OF o SKIP LOCKED", columns=_COLUMNS
)

# Still only accepted: check again later. Fenced like every settle.
RELEASE_CHECK_SQL = """
UPDATE lge_outbox
SET available_at = :available_at, lease_owner = NULL, lease_expires_at = NULL, updated_at = :now
WHERE seq = :seq AND fencing_token = :token
RETURNING seq
"""
