"""SQLite statements and migrations of the transactional outbox (``langgraph_effects.outbox``).

The tables live in the *application's* database, possibly beside the
ledger's, and migrate on their own (``lge_outbox_schema_version``).
Timestamps are INTEGER microseconds since the Unix epoch, as in the ledger;
versions 1 and 2 stored ISO-8601 text, which migration 3 converts.
"""

from __future__ import annotations

from langgraph_effects.ledger.engine import (
    RECORD_SCHEMA_VERSION,
    SCHEMA_VERSION,
    SCHEMA_VERSION_TABLE,
)
from langgraph_effects.ledger.engine.tables import OUTBOX
from langgraph_effects.ledger.sqlite._sql import dump_ts, iso_to_us, load_ts

__all__ = ["DIALECT"]


_OUTBOX_TABLE = """CREATE TABLE {name} (
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
    available_at {ts} NOT NULL,
    lease_owner TEXT,
    lease_expires_at {ts},
    fencing_token INTEGER NOT NULL DEFAULT 0,
    receipt_state TEXT,
    provider_message_id TEXT,
    last_error TEXT,
    created_at {ts} NOT NULL,
    updated_at {ts} NOT NULL,
    resolved_at {ts})"""
_EVENTS_TABLE = """CREATE TABLE {name} (
    entry_id TEXT NOT NULL,
    evidence_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    source TEXT NOT NULL,
    message_id TEXT,
    detail TEXT,
    at {ts} NOT NULL,
    PRIMARY KEY (entry_id, evidence_id))"""
_OPEN_INDEX = """CREATE INDEX IF NOT EXISTS lge_outbox_open ON lge_outbox (available_at, seq)
    WHERE status IN ('pending', 'review')"""
_KEY_INDEX = """CREATE INDEX IF NOT EXISTS lge_outbox_key ON lge_outbox (tenant_id, topic, key, seq)
    WHERE status IN ('pending', 'review')"""
_ACCEPTED_INDEX = """CREATE INDEX IF NOT EXISTS lge_outbox_accepted
    ON lge_outbox (available_at, seq) WHERE status = 'sent' AND receipt_state = 'accepted'"""
_MESSAGE_INDEX = """CREATE INDEX IF NOT EXISTS lge_outbox_message
    ON lge_outbox (provider_message_id) WHERE provider_message_id IS NOT NULL"""

_COLUMNS = (
    "seq, entry_id, tenant_id, topic, key, ordered, payload, payload_digest, operation_id, "
    "status, failures, available_at, lease_owner, lease_expires_at, fencing_token, "
    "receipt_state, provider_message_id, last_error, created_at, updated_at, resolved_at"
)
_EVENT_COLUMNS = "entry_id, evidence_id, kind, source, message_id, detail, at"
_TS_COLUMNS = ("available_at", "lease_expires_at", "created_at", "updated_at", "resolved_at")

# Append-only: a new schema change is a new tuple entry, never an edit.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        _OUTBOX_TABLE.format(name="IF NOT EXISTS lge_outbox", ts="TEXT"),
        _OPEN_INDEX,
        _KEY_INDEX,
    ),
    # v2: delivery evidence after "accepted" (webhooks, status checks), one row
    # per (entry, evidence id) so a repeated webhook records nothing new.
    (
        _EVENTS_TABLE.format(name="IF NOT EXISTS lge_outbox_events", ts="TEXT"),
        _ACCEPTED_INDEX,
        _MESSAGE_INDEX,
    ),
    # v3: timestamps as INTEGER microseconds, as in the ledger: both tables are
    # rebuilt (SQLite cannot change a column's type) and their rows converted.
    # The AUTOINCREMENT high-water mark moves with the table, so no seq is reused.
    (
        _OUTBOX_TABLE.format(name="lge_outbox_v3", ts="INTEGER"),
        f"""INSERT INTO lge_outbox_v3 ({_COLUMNS})
        SELECT {
            ", ".join(iso_to_us(c) if c in _TS_COLUMNS else c for c in _COLUMNS.split(", "))
        } FROM lge_outbox""",
        "DELETE FROM sqlite_sequence WHERE name = 'lge_outbox_v3'",
        """INSERT INTO sqlite_sequence (name, seq)
        SELECT 'lge_outbox_v3', seq FROM sqlite_sequence WHERE name = 'lge_outbox'""",
        "DROP TABLE lge_outbox",
        "ALTER TABLE lge_outbox_v3 RENAME TO lge_outbox",
        _OPEN_INDEX,
        _KEY_INDEX,
        _ACCEPTED_INDEX,
        _MESSAGE_INDEX,
        _EVENTS_TABLE.format(name="lge_outbox_events_v3", ts="INTEGER"),
        f"""INSERT INTO lge_outbox_events_v3 ({_EVENT_COLUMNS})
        SELECT entry_id, evidence_id, kind, source, message_id, detail, {iso_to_us("at")}
        FROM lge_outbox_events""",
        "DROP TABLE lge_outbox_events",
        "ALTER TABLE lge_outbox_events_v3 RENAME TO lge_outbox_events",
    ),
)

VERSION_TABLE_SQL = (
    "CREATE TABLE IF NOT EXISTS lge_outbox_schema_version "
    "(version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
)
SCHEMA_VERSION_SQL = "SELECT COALESCE(MAX(version), 0) AS version FROM lge_outbox_schema_version"
RECORD_SCHEMA_VERSION_SQL = (
    "INSERT INTO lge_outbox_schema_version (version, applied_at)"
    " VALUES (:version, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"
)

# ON CONFLICT DO NOTHING: a repeated enqueue under the same dedupe key inserts
# nothing and returns no row; the program then reads the existing digest.
INSERT_ENTRY_SQL = """
INSERT INTO lge_outbox (entry_id, tenant_id, topic, key, ordered, payload, payload_digest,
                        operation_id, status, available_at, created_at, updated_at)
VALUES (:entry_id, :tenant_id, :topic, :key, :ordered, :payload, :payload_digest,
        :operation_id, 'pending', :now, :now, :now)
ON CONFLICT (entry_id) DO NOTHING
RETURNING seq
"""
GET_ENTRY_SQL = f"SELECT {_COLUMNS} FROM lge_outbox WHERE entry_id = :entry_id"
GET_ENTRY_BY_MESSAGE_SQL = (
    f"SELECT {_COLUMNS} FROM lge_outbox WHERE provider_message_id = :message_id ORDER BY seq"
)
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
CLAIM_SQL = f"""
UPDATE lge_outbox
SET lease_owner = :owner, lease_expires_at = :lease_expires_at,
    fencing_token = fencing_token + 1, updated_at = :now
WHERE seq IN (
    SELECT o.seq FROM lge_outbox o
    WHERE o.status IN ('pending', 'review') AND o.available_at <= :now
      AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= :now)
      AND (CAST(:tenant_id AS TEXT) IS NULL OR o.tenant_id = :tenant_id)
      AND (NOT o.ordered OR NOT EXISTS (
            SELECT 1 FROM lge_outbox e
            WHERE e.tenant_id = o.tenant_id AND e.topic = o.topic AND e.key = o.key
              AND e.seq < o.seq AND e.status IN ('pending', 'review')))
    ORDER BY o.seq
    LIMIT :limit)
  AND status IN ('pending', 'review')
  AND (lease_expires_at IS NULL OR lease_expires_at <= :now)
RETURNING {_COLUMNS}
"""

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
CLAIM_CHECK_SQL = f"""
UPDATE lge_outbox
SET lease_owner = :owner, lease_expires_at = :lease_expires_at,
    fencing_token = fencing_token + 1, updated_at = :now
WHERE seq IN (
    SELECT o.seq FROM lge_outbox o
    WHERE o.status = 'sent' AND o.receipt_state = 'accepted' AND o.available_at <= :now
      AND o.resolved_at > :since
      AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= :now)
      AND (CAST(:tenant_id AS TEXT) IS NULL OR o.tenant_id = :tenant_id)
    ORDER BY o.seq
    LIMIT :limit)
  AND status = 'sent' AND receipt_state = 'accepted'
  AND (lease_expires_at IS NULL OR lease_expires_at <= :now)
RETURNING {_COLUMNS}
"""
# Still only accepted: check again later. Fenced like every settle.
RELEASE_CHECK_SQL = """
UPDATE lge_outbox
SET available_at = :available_at, lease_owner = NULL, lease_expires_at = NULL, updated_at = :now
WHERE seq = :seq AND fencing_token = :token
RETURNING seq
"""

DIALECT = OUTBOX.dialect(
    {
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
