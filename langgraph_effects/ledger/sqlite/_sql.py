"""SQLite statements of the ledger, by the names ``ledger._programs`` defines.

SQLite has no data-modifying CTEs, so a transition is a chain run inside one
``BEGIN IMMEDIATE ... COMMIT``: the conditional ``UPDATE ... RETURNING`` and,
only if it returned the row, the event ``INSERT``. No other writer can run
between them (the write lock is held), and the process does not leave SQLite
between them, so the chain costs one commit and no network round trip.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from langgraph_effects.ledger import _programs as ledger
from langgraph_effects.ledger import engine
from langgraph_effects.ledger.sqlite._migrations import MIGRATIONS

__all__ = ["DIALECT", "dump_ts", "iso_to_us", "load_ts"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def dump_ts(value: datetime | None) -> int | None:
    """Integer microseconds since the Unix epoch: exact, and ordered as time is."""
    return None if value is None else (value - _EPOCH) // _US


def load_ts(value: Any) -> datetime | None:
    """A UTC datetime."""
    return None if value is None else _EPOCH + int(value) * _US


def iso_to_us(column: str) -> str:
    """SQL turning an ISO-8601 text timestamp (``2026-01-02T03:04:05.123456+00:00``, as
    versions before integer timestamps wrote them) into integer microseconds, exactly.

    Whole seconds come from ``strftime('%s', ...)`` (which applies the offset),
    the microseconds from the text; integers and NULLs pass unchanged.
    """
    return (
        f"CASE WHEN {column} IS NULL OR typeof({column}) = 'integer' THEN {column}"
        f" ELSE CAST(strftime('%s', substr({column}, 1, 19) || substr({column}, 27)) AS INTEGER)"
        f" * 1000000 + CAST(substr({column}, 21, 6) AS INTEGER) END"
    )


SCHEMA_VERSION_TABLE_SQL = """
CREATE TABLE IF NOT EXISTS lge_schema_version (
    version INTEGER PRIMARY KEY,
    applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)
"""
SCHEMA_VERSION_SQL = "SELECT COALESCE(MAX(version), 0) AS version FROM lge_schema_version"
RECORD_SCHEMA_VERSION_SQL = "INSERT INTO lge_schema_version (version) VALUES (:version)"

_EVENT_COLUMNS = (
    "tenant_id, operation_id, seq, kind, from_status, to_status,"
    " actor, fencing_token, evidence, detail, at"
)

PREPARE_SQL = """
INSERT INTO lge_operations (
    tenant_id, operation_id, workflow_id, action, action_version, target,
    payload_digest, payload, payload_stored, authorization_ref, provider, tool_call_id, origin,
    idempotency_key, key_retention_seconds, status, attempts, lease_owner, lease_expires_at,
    fencing_token, record_version, created_at, updated_at, status_changed_at,
    first_dispatched_at, last_dispatched_at
) VALUES (
    :tenant_id, :operation_id, :workflow_id, :action, :action_version, :target,
    :payload_digest, :payload, :payload_stored, :authorization_ref, :provider, :tool_call_id,
    :origin,
    :idempotency_key, :key_retention_seconds, :status, :attempts, :lease_owner,
    :lease_expires_at, :fencing_token, :record_version, :now, :now, :now,
    :dispatched_at, :dispatched_at
)
ON CONFLICT (tenant_id, operation_id) DO NOTHING
RETURNING *, 1 AS created
"""
PREPARE_EVENT_SQL = f"""
INSERT INTO lge_events ({_EVENT_COLUMNS})
VALUES (:tenant_id, :operation_id, 1, 'prepare', NULL, 'prepared', 'ledger', 0, NULL, NULL, :now)
"""
PREPARE_CLAIM_EVENT_SQL = f"""
INSERT INTO lge_events ({_EVENT_COLUMNS})
SELECT :tenant_id, :operation_id, 2, 'claim', 'prepared', 'dispatching', :actor, 1, NULL, NULL, :now
WHERE :actor IS NOT NULL
"""

GET_SQL = """
SELECT * FROM lge_operations WHERE tenant_id = :tenant_id AND operation_id = :operation_id
"""

MOVE_EVENT_SQL = f"""
INSERT INTO lge_events ({_EVENT_COLUMNS})
VALUES (:tenant_id, :operation_id, :record_version, :event_kind, :from_status, :status,
        :actor, :fencing_token, :evidence, :detail, :updated_at)
"""

# The events' ids come back as the insert's rowid (``Dialect.inserted_id``), not by
# RETURNING, which makes SQLite buffer the row and costs about as much as the insert.
INSERTED_ID = {
    PREPARE_EVENT_SQL: "prepare_event_id",
    PREPARE_CLAIM_EVENT_SQL: "claim_event_id",
    MOVE_EVENT_SQL: "event_id",
}


def _move(
    sets: str, where: str, from_status: str = ":from_status", *, status_change: bool = True
) -> tuple[str, str]:
    """A conditional UPDATE returning the new row (and the status it left), then its event.

    ``status_change``: the move changes the status, so ``status_changed_at`` is stamped.
    """
    if status_change:
        sets = f"status_changed_at = :now, {sets}"
    return (
        f"""
        UPDATE lge_operations
        SET record_version = record_version + 1, updated_at = :now, {sets}
        WHERE tenant_id = :tenant_id AND operation_id = :operation_id AND {where}
        RETURNING *, {from_status} AS from_status
        """,
        MOVE_EVENT_SQL,
    )


_FENCED = "status = 'dispatching' AND fencing_token = :token"
_CLEAR_LEASE = "lease_owner = NULL, lease_expires_at = NULL"
_STAMP_EVIDENCE = "evidence_checked_at = COALESCE(:evidence_at, evidence_checked_at)"

APPROVE_SQL = _move(
    "authorization_ref = :authorization_ref",
    "status = 'prepared' AND payload_digest = COALESCE(:payload_digest, payload_digest)",
    status_change=False,
)
# RETURNING sees the row after the update; the status it left is the last
# event's (every status change writes one), read under the same write lock.
CLAIM_SQL = _move(
    """status = 'dispatching', lease_owner = :lease_owner, lease_expires_at = :lease_expires_at,
    fencing_token = fencing_token + 1, attempts = attempts + 1,
    first_dispatched_at = COALESCE(first_dispatched_at, :now), last_dispatched_at = :now""",
    "status IN ('prepared', 'unknown')",
    from_status="""(SELECT e.to_status FROM lge_events AS e
        WHERE e.tenant_id = lge_operations.tenant_id
          AND e.operation_id = lge_operations.operation_id
        ORDER BY e.seq DESC LIMIT 1)""",
)
RENEW_SQL = f"""
UPDATE lge_operations SET lease_expires_at = :lease_expires_at
WHERE tenant_id = :tenant_id AND operation_id = :operation_id AND {_FENCED}
RETURNING *
"""
CONFIRM_SQL = _move(
    f"""status = 'confirmed', {_CLEAR_LEASE}, result = :result,
    provider_result_id = :provider_result_id, provider_request_id = :provider_request_id,
    resolved_at = :now, {_STAMP_EVIDENCE}""",
    _FENCED,
)
REJECT_SQL = _move(
    f"status = 'rejected', {_CLEAR_LEASE}, error = :error, resolved_at = :now, {_STAMP_EVIDENCE}",
    "status = :from_status AND fencing_token = COALESCE(:token, fencing_token)",
)
RELEASE_SQL = _move(f"status = 'prepared', {_CLEAR_LEASE}", _FENCED)
MARK_UNKNOWN_SQL = _move(
    f"""status = 'unknown', {_CLEAR_LEASE}, fencing_token = fencing_token + 1,
    error = :error, {_STAMP_EVIDENCE}""",
    _FENCED,
)
RESOLVE_SQL = _move(
    f"""status = :to_status, {_CLEAR_LEASE}, {_STAMP_EVIDENCE},
    result = CASE WHEN :to_status = 'confirmed' THEN :result ELSE result END,
    provider_result_id = CASE WHEN :to_status = 'confirmed'
        THEN :provider_result_id ELSE provider_result_id END,
    error = CASE WHEN :to_status = 'rejected' THEN :error ELSE error END,
    resolved_at = CASE WHEN :to_status = 'prepared' THEN resolved_at ELSE :now END""",
    "status = 'unknown'",
)
# On a final record, evidence is a note in its log (a late answer, a late receipt): its
# version moves with the event, and nothing else of the record.
RECORD_EVIDENCE_SQL = _move(
    f"""evidence_checked_at = CASE WHEN status IN ({ledger.FINAL_STATUSES})
        THEN evidence_checked_at ELSE COALESCE(:evidence_at, evidence_checked_at) END""",
    "1 = 1",
    from_status="status",
    status_change=False,
)

LIST_SQL = """
SELECT * FROM lge_operations WHERE {where}
ORDER BY status_changed_at, operation_id LIMIT :limit
"""
# The unresolved operations on one target (shown where a person decides); the
# status index narrows to the few open rows, the rest is a filter over them.
_OPEN = """tenant_id = :tenant_id AND action = :action AND target = :target
AND status IN ('prepared', 'dispatching', 'unknown')"""
OPEN_OPERATIONS_SQL = f"""
SELECT * FROM lge_operations WHERE {_OPEN}
ORDER BY status_changed_at, operation_id LIMIT :limit
"""
OPEN_COUNT_SQL = f"SELECT COUNT(*) AS n FROM lge_operations WHERE {_OPEN}"
EVENTS_SQL = """
SELECT * FROM lge_events WHERE tenant_id = :tenant_id AND operation_id = :operation_id
ORDER BY seq
"""
FEED_SQL = """
SELECT * FROM lge_events WHERE event_id > :after_id AND {where}
ORDER BY event_id LIMIT :limit
"""
STATS_COUNTS_SQL = """
SELECT status, COUNT(*) AS n, MIN(status_changed_at) AS oldest FROM lge_operations
WHERE {where} GROUP BY status
"""
STATS_EVIDENCE_SQL = """
SELECT kind, json_extract(evidence, '$.kind') AS evidence_kind,
       json_extract(evidence, '$.source') AS source, COUNT(*) AS n
FROM lge_events WHERE evidence IS NOT NULL AND {where}
GROUP BY kind, evidence_kind, source
"""

# The no-op update makes RETURNING yield the row already there: one statement
# answers both "bound now" and "bound before, to whom".
BIND_THREAD_SQL = """
INSERT INTO lge_threads (workflow_id, tenant_id, bound_at) VALUES (:workflow_id, :tenant_id, :at)
ON CONFLICT (workflow_id) DO UPDATE SET workflow_id = excluded.workflow_id
RETURNING tenant_id
"""

# Not a transition: the record's version, status and events stay as they are.
ADOPT_SQL = """
UPDATE lge_operations SET origin = :origin
WHERE tenant_id = :tenant_id AND operation_id = :operation_id AND origin IS :expected
RETURNING *
"""

FILTERS = {
    "tenant_id": "tenant_id = :tenant_id",
    "status": "status = :status",
    "action": "action = :action",
    # Named for API stability: the status unchanged since before this instant.
    "updated_before": "status_changed_at < :updated_before",
    "id_prefix": "substr(operation_id, 1, length(:id_prefix)) = :id_prefix",
}

DIALECT = engine.Dialect(
    statements={
        engine.SCHEMA_VERSION_TABLE: SCHEMA_VERSION_TABLE_SQL,
        engine.SCHEMA_VERSION: SCHEMA_VERSION_SQL,
        engine.RECORD_SCHEMA_VERSION: RECORD_SCHEMA_VERSION_SQL,
        engine.WRITE_LOCK: "BEGIN IMMEDIATE",
        ledger.PREPARE: (PREPARE_SQL, PREPARE_EVENT_SQL, PREPARE_CLAIM_EVENT_SQL),
        ledger.GET: GET_SQL,
        ledger.GET_MANY: GET_SQL,
        ledger.APPROVE: APPROVE_SQL,
        ledger.CLAIM: CLAIM_SQL,
        ledger.RENEW: RENEW_SQL,
        ledger.CONFIRM: CONFIRM_SQL,
        ledger.CONFIRM_MANY: CONFIRM_SQL,  # row by row, in one BEGIN IMMEDIATE
        ledger.REJECT: REJECT_SQL,
        ledger.RELEASE: RELEASE_SQL,
        ledger.MARK_UNKNOWN: MARK_UNKNOWN_SQL,
        ledger.RESOLVE: RESOLVE_SQL,
        ledger.RECORD_EVIDENCE: RECORD_EVIDENCE_SQL,
        ledger.LIST: LIST_SQL,
        ledger.OPEN_OPERATIONS: OPEN_OPERATIONS_SQL,
        ledger.OPEN_COUNT: OPEN_COUNT_SQL,
        ledger.EVENTS: EVENTS_SQL,
        ledger.FEED: FEED_SQL,
        ledger.STATS_COUNTS: STATS_COUNTS_SQL,
        ledger.STATS_EVIDENCE: STATS_EVIDENCE_SQL,
        ledger.BIND_THREAD: BIND_THREAD_SQL,
        ledger.ADOPT: ADOPT_SQL,
    },
    tables=("lge_schema_version", "lge_operations", "lge_events", "lge_threads"),
    setup="ledger.setup()",
    required=ledger.STATEMENT_NAMES,
    filters=FILTERS,
    migrations=MIGRATIONS,
    dump_ts=dump_ts,
    load_ts=load_ts,
    batch=False,
    read_first=True,
    inserted_id=INSERTED_ID,
)
