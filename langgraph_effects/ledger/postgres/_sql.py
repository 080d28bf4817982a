"""PostgreSQL statements of the ledger, by the names ``ledger._programs`` defines.

Every transition is ONE statement: a data-modifying CTE runs the conditional
``UPDATE ... RETURNING`` and inserts the event from what it returned, so the
row and its event commit together in one round trip (and, on an autocommit
connection, one commit). ``prepare`` inserts the rows and both events the same
way, for one draft or a whole batch bound as one JSON array.

A receipt may commit without waiting for its WAL flush (the ledgers'
``receipt_synchronous="NORMAL"``, the default; the rule is in ``ledger.base``,
"Durability of receipts"): ``RECEIPT_DIALECT`` is this dialect with ``confirm``,
``confirm_many`` and ``bind_thread`` setting ``synchronous_commit = off`` for their
own transaction inside the statement itself, so it costs no round trip. The other
way, every decision (``ledger.DURABLE``) raises a weaker ``synchronous_commit`` to
``on`` for its transaction the same way (``_floored``); ``SERVER_DIALECT`` does not.

Statements run at READ COMMITTED. A conditional UPDATE that meets a row
locked by a concurrent writer waits, then re-checks its WHERE clause against
the committed row, so two claims never both succeed.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

from psycopg.types.json import Jsonb

from langgraph_effects.ledger import _programs as ledger
from langgraph_effects.ledger import engine
from langgraph_effects.ledger.postgres._migrations import MIGRATIONS

__all__ = ["DIALECT", "RECEIPT_DIALECT", "SERVER_DIALECT", "SETUP_LOCK_KEY", "dump_ts", "load_ts"]

SETUP_LOCK_KEY = 0x6C67655F6C6564  # "lge_led": one setup at a time per database


def dump_ts(value: datetime | None) -> datetime | None:
    """A timestamp as PostgreSQL binds it: the aware datetime itself (``timestamptz``)."""
    return value


def load_ts(value: Any) -> datetime | None:
    """A ``timestamptz`` read back in UTC: it arrives in the session's time zone."""
    return None if value is None else value.astimezone(UTC)


def _load_json(value: Any) -> Any:
    return value  # psycopg has already parsed jsonb


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _dumps(rows: Any) -> str:
    return json.dumps(rows, default=_iso)


def _dump_batch(rows: list[dict[str, Any]]) -> Jsonb:
    # Timestamps travel as ISO 8601 text (with offset) and come out as timestamptz.
    return Jsonb(rows, dumps=_dumps)


SETUP_LOCK_SQL = f"SELECT pg_advisory_xact_lock({SETUP_LOCK_KEY})"
SCHEMA_VERSION_TABLE_SQL = """
CREATE TABLE IF NOT EXISTS lge_schema_version (
    version integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""
SCHEMA_VERSION_SQL = "SELECT COALESCE(MAX(version), 0) AS version FROM lge_schema_version"
RECORD_SCHEMA_VERSION_SQL = "INSERT INTO lge_schema_version (version) VALUES (%(version)s)"

_EVENT_COLUMNS = (
    "tenant_id, operation_id, seq, kind, from_status, to_status,"
    " actor, fencing_token, evidence, detail, at"
)

# ON CONFLICT skips a row committed by a concurrent prepare after this
# statement's snapshot; the final SELECT cannot see such a row either, so the
# logic re-reads what is missing (GET_MANY) in a new statement.
#
# The existing rows are looked up only when some draft was not inserted (a
# one-time filter): the planner takes jsonb_to_recordset for 100 rows, and on a
# table it has no statistics for yet (a fresh one, before autovacuum's first
# ANALYZE) it joined them by a sequential scan of lge_operations on every
# first-time prepare, its cost growing with the table.
_PREPARE = f"""
WITH draft AS (
    SELECT * FROM jsonb_to_recordset(%(batch)s::jsonb) AS d(
        tenant_id text, operation_id text, workflow_id text, action text,
        action_version integer, target text, payload_digest text, payload text,
        payload_stored boolean, authorization_ref text, provider text,
        idempotency_key text, key_retention_seconds double precision, tool_call_id text,
        origin text)
), inserted AS (
    INSERT INTO lge_operations (
        tenant_id, operation_id, workflow_id, action, action_version, target,
        payload_digest, payload, payload_stored, authorization_ref, provider, tool_call_id,
        origin, idempotency_key, key_retention_seconds, status, attempts, lease_owner,
        lease_expires_at, fencing_token, record_version, created_at, updated_at,
        status_changed_at, first_dispatched_at, last_dispatched_at)
    SELECT tenant_id, operation_id, workflow_id, action, action_version, target,
        payload_digest, payload::jsonb, payload_stored, authorization_ref, provider, tool_call_id,
        origin, idempotency_key, key_retention_seconds, %(status)s, %(attempts)s, %(lease_owner)s,
        %(lease_expires_at)s, %(fencing_token)s, %(record_version)s, %(now)s, %(now)s, %(now)s,
        %(dispatched_at)s, %(dispatched_at)s
    FROM draft
    ON CONFLICT (tenant_id, operation_id) DO NOTHING
    RETURNING *
), event AS (
    INSERT INTO lge_events ({_EVENT_COLUMNS})
    SELECT i.tenant_id, i.operation_id, v.seq, v.kind, v.from_status, v.to_status,
        CASE WHEN v.seq = 1 THEN 'ledger' ELSE %(actor)s END, v.seq - 1, NULL, NULL, i.created_at
    FROM inserted AS i
    CROSS JOIN (VALUES (1, 'prepare', NULL, 'prepared'), (2, 'claim', 'prepared', 'dispatching'))
        AS v (seq, kind, from_status, to_status)
    WHERE v.seq = 1 OR i.status = 'dispatching'
    ORDER BY i.tenant_id, i.operation_id, v.seq
    RETURNING tenant_id, operation_id, seq, event_id
)
SELECT i.*, TRUE AS created,
    (SELECT e.event_id FROM event AS e WHERE (e.tenant_id, e.operation_id, e.seq)
        = (i.tenant_id, i.operation_id, 1)) AS prepare_event_id,
    (SELECT e.event_id FROM event AS e WHERE (e.tenant_id, e.operation_id, e.seq)
        = (i.tenant_id, i.operation_id, 2)) AS claim_event_id{{floor}}
FROM inserted AS i
UNION ALL
SELECT o.*, FALSE, NULL, NULL{{kept}}
FROM lge_operations AS o JOIN draft AS d
    ON (o.tenant_id, o.operation_id) = (d.tenant_id, d.operation_id)
WHERE (SELECT count(*) FROM inserted) < (SELECT count(*) FROM draft)
    AND NOT EXISTS (SELECT 1 FROM inserted AS i
    WHERE (i.tenant_id, i.operation_id) = (o.tenant_id, o.operation_id))
"""

# The same for one draft, its values bound as plain parameters: no JSON array
# to build, send and unpack, which is most of this statement's cost for one row.
_PREPARE_ONE = f"""
WITH inserted AS (
    INSERT INTO lge_operations (
        tenant_id, operation_id, workflow_id, action, action_version, target,
        payload_digest, payload, payload_stored, authorization_ref, provider, tool_call_id,
        origin, idempotency_key, key_retention_seconds, status, attempts, lease_owner,
        lease_expires_at, fencing_token, record_version, created_at, updated_at,
        status_changed_at, first_dispatched_at, last_dispatched_at)
    VALUES (%(tenant_id)s, %(operation_id)s, %(workflow_id)s, %(action)s, %(action_version)s,
        %(target)s, %(payload_digest)s, %(payload)s::jsonb, %(payload_stored)s,
        %(authorization_ref)s, %(provider)s, %(tool_call_id)s, %(origin)s, %(idempotency_key)s,
        %(key_retention_seconds)s, %(status)s, %(attempts)s, %(lease_owner)s,
        %(lease_expires_at)s, %(fencing_token)s, %(record_version)s, %(now)s, %(now)s, %(now)s,
        %(dispatched_at)s, %(dispatched_at)s)
    ON CONFLICT (tenant_id, operation_id) DO NOTHING
    RETURNING *
), event AS (
    INSERT INTO lge_events ({_EVENT_COLUMNS})
    SELECT i.tenant_id, i.operation_id, v.seq, v.kind, v.from_status, v.to_status,
        CASE WHEN v.seq = 1 THEN 'ledger' ELSE %(actor)s END, v.seq - 1, NULL, NULL, i.created_at
    FROM inserted AS i
    CROSS JOIN (VALUES (1, 'prepare', NULL, 'prepared'), (2, 'claim', 'prepared', 'dispatching'))
        AS v (seq, kind, from_status, to_status)
    WHERE v.seq = 1 OR i.status = 'dispatching'
    ORDER BY v.seq
    RETURNING seq, event_id
)
SELECT i.*, TRUE AS created,
    (SELECT e.event_id FROM event AS e WHERE e.seq = 1) AS prepare_event_id,
    (SELECT e.event_id FROM event AS e WHERE e.seq = 2) AS claim_event_id{{floor}}
FROM inserted AS i
UNION ALL
SELECT o.*, FALSE, NULL, NULL{{kept}}
FROM lge_operations AS o
WHERE o.tenant_id = %(tenant_id)s AND o.operation_id = %(operation_id)s
    AND NOT EXISTS (SELECT 1 FROM inserted)
"""

# A decision (``ledger.DURABLE``: the write-ahead record, an approval, a rejection, a
# release, an unknown, a resolution, evidence) commits with at least
# ``synchronous_commit = on``: a session, role or database setting of ``off`` (a server
# crash loses it) or ``local`` (a failover to a synchronous standby loses it) is raised
# for this transaction, and a stricter one (``remote_write``, ``remote_apply``) is left
# alone. Set inside the statement like ``_ASYNC_COMMIT``, so it costs no statement and
# no round trip; evaluated per written row, so only when the statement wrote. Each
# statement's returned row marks the place (``_FLOOR``); ``_floored`` fills it, for the
# statements of ``ledger.DURABLE`` only.
_SYNC_FLOOR = """, CASE WHEN current_setting('synchronous_commit') IN ('off', 'local')
    THEN set_config('synchronous_commit', 'on', true) END AS sync_floor"""
_FLOOR = "{floor}"
"""Where a statement's returned row takes ``_SYNC_FLOOR`` (``prepare``'s replayed rows,
which wrote nothing, take ``{kept}``: a NULL for the union's column)."""


def _floored(statements: dict[str, str], durable: frozenset[str]) -> dict[str, str]:
    """``statements`` with ``_SYNC_FLOOR`` in those named in ``durable``, and nothing in
    the others' marks.

    Raises:
        TypeError: a statement of ``durable`` has no mark: it would commit unfloored.
    """
    unmarked = sorted(n for n in durable if n in statements and _FLOOR not in statements[n])
    if unmarked:
        raise TypeError(f"statements without a durability floor mark: {unmarked}")
    out = {}
    for name, sql in statements.items():
        floor = _SYNC_FLOOR if name in durable else ""
        out[name] = sql.replace(_FLOOR, floor).replace("{kept}", ", NULL" if floor else "")
    return out


PREPARE_SQL = _PREPARE
PREPARE_ONE_SQL = _PREPARE_ONE

GET_SQL = """
SELECT * FROM lge_operations WHERE tenant_id = %(tenant_id)s AND operation_id = %(operation_id)s
"""
GET_MANY_SQL = """
SELECT o.* FROM lge_operations AS o
JOIN jsonb_to_recordset(%(batch)s::jsonb) AS k (tenant_id text, operation_id text)
    ON (o.tenant_id, o.operation_id) = (k.tenant_id, k.operation_id)
"""


def _move(
    sets: str,
    where: str,
    *,
    from_status: str = "%(from_status)s::text",
    prelude: str = "",
    using: str = "",
    status_change: bool = True,
    also: str = "",
) -> str:
    """A conditional UPDATE and its event in one statement, returning the new row.

    ``status_change``: the move changes the status, so ``status_changed_at`` is stamped.
    ``also``: more columns of the returned row (``_ASYNC_COMMIT``); the durability
    floor's mark follows them (``_floored``).
    """
    if status_change:
        sets = f"status_changed_at = %(now)s, {sets}"
    return f"""
    WITH {prelude}moved AS (
        UPDATE lge_operations
        SET record_version = record_version + 1, updated_at = %(now)s, {sets}
        {using}
        WHERE tenant_id = %(tenant_id)s AND operation_id = %(operation_id)s AND {where}
        RETURNING lge_operations.*, {from_status} AS from_status
    ), event AS (
        INSERT INTO lge_events ({_EVENT_COLUMNS})
        SELECT tenant_id, operation_id, record_version, %(event_kind)s, from_status, status,
            %(actor)s, fencing_token, %(evidence)s::jsonb, %(detail)s::jsonb, updated_at
        FROM moved
        RETURNING event_id
    )
    SELECT moved.*, event.event_id{also}{_FLOOR} FROM moved CROSS JOIN event
    """


# The receipt's transaction commits without waiting for the WAL flush. Set inside
# the statement: as a statement of its own (SET LOCAL in BEGIN ... COMMIT) it costs
# round trips and made the confirm slower (0.47 vs 0.38 ms on loopback). Local to
# the statement's transaction, an implicit one on an autocommit connection, whose
# commit reads it; evaluated per returned row, so exactly when the statement wrote.
_ASYNC_COMMIT = ", set_config('synchronous_commit', 'off', true) AS async_commit"

_FENCED = "status = 'dispatching' AND fencing_token = %(token)s"
_CLEAR_LEASE = "lease_owner = NULL, lease_expires_at = NULL"
_STAMP_EVIDENCE = "evidence_checked_at = COALESCE(%(evidence_at)s, evidence_checked_at)"

APPROVE_SQL = _move(
    "authorization_ref = %(authorization_ref)s",
    "status = 'prepared' AND payload_digest = COALESCE(%(payload_digest)s, payload_digest)",
    status_change=False,
)


# The status the claim leaves (prepared or unknown) is read from the row it
# locks (FOR UPDATE returns the latest committed version), so the event is
# right even when the claim waited for a concurrent writer.
CLAIM_SQL = _move(
    sets="""status = 'dispatching', lease_owner = %(lease_owner)s,
    lease_expires_at = %(lease_expires_at)s,
    fencing_token = fencing_token + 1, attempts = attempts + 1,
    first_dispatched_at = COALESCE(first_dispatched_at, %(now)s),
    last_dispatched_at = %(now)s""",
    where="status IN ('prepared', 'unknown')",
    prelude="""previous AS (
        SELECT status AS left_status FROM lge_operations
        WHERE tenant_id = %(tenant_id)s AND operation_id = %(operation_id)s
        FOR UPDATE
    ), """,
    using="FROM previous",
    from_status="previous.left_status",
)
RENEW_SQL = f"""
UPDATE lge_operations SET lease_expires_at = %(lease_expires_at)s
WHERE tenant_id = %(tenant_id)s AND operation_id = %(operation_id)s AND {_FENCED}
RETURNING *
"""
_CONFIRM_SETS = f"""status = 'confirmed', {_CLEAR_LEASE}, result = %(result)s::jsonb,
    provider_result_id = %(provider_result_id)s, provider_request_id = %(provider_request_id)s,
    resolved_at = %(now)s, {_STAMP_EVIDENCE}"""
CONFIRM_SQL = _move(_CONFIRM_SETS, _FENCED)
# The receipts of a batch as one JSON array: one UPDATE fenced row by row (a
# stale receipt matches nothing and blocks no other), one INSERT of their events.
_CONFIRM_MANY = f"""
WITH receipt AS (
    SELECT * FROM jsonb_to_recordset(%(batch)s::jsonb) AS r(
        tenant_id text, operation_id text, token bigint, result text,
        provider_result_id text, provider_request_id text, evidence text,
        evidence_at timestamptz, actor text)
), moved AS (
    UPDATE lge_operations AS o
    SET record_version = o.record_version + 1, updated_at = %(now)s, status = 'confirmed',
        status_changed_at = %(now)s,
        {_CLEAR_LEASE}, result = r.result::jsonb,
        provider_result_id = r.provider_result_id, provider_request_id = r.provider_request_id,
        resolved_at = %(now)s, evidence_checked_at = COALESCE(r.evidence_at, o.evidence_checked_at)
    FROM receipt AS r
    WHERE (o.tenant_id, o.operation_id) = (r.tenant_id, r.operation_id)
        AND o.status = 'dispatching' AND o.fencing_token = r.token
    RETURNING o.*, %(from_status)s::text AS from_status, r.evidence, r.actor
), event AS (
    INSERT INTO lge_events ({_EVENT_COLUMNS})
    SELECT tenant_id, operation_id, record_version, %(event_kind)s, from_status, status,
        actor, fencing_token, evidence::jsonb, %(detail)s::jsonb, updated_at
    FROM moved
    RETURNING tenant_id, operation_id, event_id
)
SELECT moved.*, event.event_id{{also}} FROM moved JOIN event USING (tenant_id, operation_id)
"""
CONFIRM_MANY_SQL = _CONFIRM_MANY.format(also="")
REJECT_SQL = _move(
    f"status = 'rejected', {_CLEAR_LEASE}, error = %(error)s, resolved_at = %(now)s,"
    f" {_STAMP_EVIDENCE}",
    "status = %(from_status)s AND fencing_token = COALESCE(%(token)s, fencing_token)",
)
RELEASE_SQL = _move(f"status = 'prepared', {_CLEAR_LEASE}", _FENCED)
MARK_UNKNOWN_SQL = _move(
    f"""status = 'unknown', {_CLEAR_LEASE}, fencing_token = fencing_token + 1,
    error = %(error)s, {_STAMP_EVIDENCE}""",
    _FENCED,
)
RESOLVE_SQL = _move(
    f"""status = %(to_status)s, {_CLEAR_LEASE}, {_STAMP_EVIDENCE},
    result = CASE WHEN %(to_status)s = 'confirmed' THEN %(result)s::jsonb ELSE result END,
    provider_result_id = CASE WHEN %(to_status)s = 'confirmed'
        THEN %(provider_result_id)s ELSE provider_result_id END,
    error = CASE WHEN %(to_status)s = 'rejected' THEN %(error)s ELSE error END,
    resolved_at = CASE WHEN %(to_status)s = 'prepared' THEN resolved_at ELSE %(now)s END""",
    "status = 'unknown'",
)
# On a final record, evidence is a note in its log (a late answer, a late receipt): its
# version moves with the event, and nothing else of the record.
RECORD_EVIDENCE_SQL = _move(
    f"""evidence_checked_at = CASE WHEN status IN ({ledger.FINAL_STATUSES})
        THEN evidence_checked_at ELSE COALESCE(%(evidence_at)s, evidence_checked_at) END""",
    "TRUE",
    from_status="status",
    status_change=False,
)

# Run unprepared (Statement.adhoc): planned with the actual status, PostgreSQL sees
# that it implies the partial index's predicate.
LIST_SQL = """
SELECT * FROM lge_operations WHERE {where}
ORDER BY status_changed_at, operation_id LIMIT %(limit)s
"""
# The unresolved operations on one target (shown where a person decides); the
# open-status index narrows to the few open rows, the rest is a filter over them.
_OPEN = """tenant_id = %(tenant_id)s AND action = %(action)s AND target = %(target)s
AND status IN ('prepared', 'dispatching', 'unknown')"""
OPEN_OPERATIONS_SQL = f"""
SELECT * FROM lge_operations WHERE {_OPEN}
ORDER BY status_changed_at, operation_id LIMIT %(limit)s
"""
OPEN_COUNT_SQL = f"SELECT COUNT(*) AS n FROM lge_operations WHERE {_OPEN}"
EVENTS_SQL = """
SELECT * FROM lge_events WHERE tenant_id = %(tenant_id)s AND operation_id = %(operation_id)s
ORDER BY seq
"""
# One statement, so the page, its first gap and the transactions in progress
# are all of one snapshot (see ``_ledger.feed``). A gap is an id no row of any
# tenant holds between the settled cursor and the page's last event.
FEED_SQL = """
WITH page AS (
    SELECT * FROM lge_events WHERE event_id > %(after_id)s AND {where}
    ORDER BY event_id LIMIT %(limit)s
), horizon AS (
    SELECT (SELECT g FROM generate_series(GREATEST(%(after_id)s, %(settled)s) + 1,
                (SELECT MAX(event_id) FROM page)) AS g
            WHERE NOT EXISTS (SELECT 1 FROM lge_events AS e WHERE e.event_id = g)
            ORDER BY g LIMIT 1) AS first_gap,
        ARRAY(SELECT x::text FROM pg_snapshot_xip(pg_current_snapshot()) AS x) AS in_progress
)
SELECT page.*, horizon.first_gap, horizon.in_progress
FROM horizon LEFT JOIN page ON TRUE ORDER BY page.event_id
"""
FEED_PENDING_SQL = """
SELECT COUNT(*) AS n FROM unnest(%(xids)s::text[]) AS x
WHERE pg_xact_status(x::xid8) = 'in progress'
"""
PAUSE_SQL = "SELECT pg_sleep(0.01)"
STATS_COUNTS_SQL = """
SELECT status, COUNT(*) AS n, MIN(status_changed_at) AS oldest FROM lge_operations
WHERE {where} GROUP BY status
"""
STATS_EVIDENCE_SQL = """
SELECT kind, evidence ->> 'kind' AS evidence_kind, evidence ->> 'source' AS source,
    COUNT(*) AS n
FROM lge_events WHERE evidence IS NOT NULL AND {where}
GROUP BY 1, 2, 3
"""

# The no-op update makes RETURNING yield the row already there: one statement
# answers both "bound now" and "bound before, to whom".
BIND_THREAD_SQL = """
INSERT INTO lge_threads (workflow_id, tenant_id, bound_at)
VALUES (%(workflow_id)s, %(tenant_id)s, %(at)s)
ON CONFLICT (workflow_id) DO UPDATE SET workflow_id = excluded.workflow_id
RETURNING tenant_id
"""

# Not a transition: the record's version, status and events stay as they are.
ADOPT_SQL = """
UPDATE lge_operations SET origin = %(origin)s
WHERE tenant_id = %(tenant_id)s AND operation_id = %(operation_id)s
    AND origin IS NOT DISTINCT FROM %(expected)s
RETURNING *
"""

FILTERS = {
    "tenant_id": "tenant_id = %(tenant_id)s",
    "status": "status = %(status)s",
    "action": "action = %(action)s",
    # Named for API stability: the status unchanged since before this instant.
    "updated_before": "status_changed_at < %(updated_before)s",
    "id_prefix": "starts_with(operation_id, %(id_prefix)s)",
}

_STATEMENTS = {
    engine.SETUP_LOCK: SETUP_LOCK_SQL,
    engine.SCHEMA_VERSION_TABLE: SCHEMA_VERSION_TABLE_SQL,
    engine.SCHEMA_VERSION: SCHEMA_VERSION_SQL,
    engine.RECORD_SCHEMA_VERSION: RECORD_SCHEMA_VERSION_SQL,
    ledger.PREPARE: PREPARE_SQL,
    ledger.GET: GET_SQL,
    ledger.GET_MANY: GET_MANY_SQL,
    ledger.APPROVE: APPROVE_SQL,
    ledger.CLAIM: CLAIM_SQL,
    ledger.RENEW: RENEW_SQL,
    ledger.CONFIRM: CONFIRM_SQL,
    ledger.CONFIRM_MANY: CONFIRM_MANY_SQL,
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
    ledger.FEED_PENDING: FEED_PENDING_SQL,
    ledger.PAUSE: PAUSE_SQL,
    ledger.STATS_COUNTS: STATS_COUNTS_SQL,
    ledger.STATS_EVIDENCE: STATS_EVIDENCE_SQL,
    ledger.BIND_THREAD: BIND_THREAD_SQL,
    ledger.ADOPT: ADOPT_SQL,
}
"""Every statement of the ledger, each decision's with the floor's mark (``_floored``)."""
_SINGLE = {ledger.PREPARE: PREPARE_ONE_SQL}

DIALECT = engine.Dialect(
    statements=_floored(_STATEMENTS, ledger.DURABLE),
    tables=("lge_schema_version", "lge_operations", "lge_events", "lge_threads"),
    setup="ledger.setup()",
    required=ledger.STATEMENT_NAMES,
    filters=FILTERS,
    migrations=MIGRATIONS,
    dump_ts=dump_ts,
    load_ts=load_ts,
    load_json=_load_json,
    dump_batch=_dump_batch,
    batch=True,
    single=_floored(_SINGLE, ledger.DURABLE),
)
"""The ledger's statements: every decision (``ledger.DURABLE``) floored at ``on``."""

RECEIPT_DIALECT = dataclasses.replace(
    DIALECT,
    statements=_floored(
        {
            **_STATEMENTS,
            ledger.CONFIRM: _move(_CONFIRM_SETS, _FENCED, also=_ASYNC_COMMIT),
            ledger.CONFIRM_MANY: _CONFIRM_MANY.format(also=_ASYNC_COMMIT),
            ledger.BIND_THREAD: BIND_THREAD_SQL.replace(
                "RETURNING tenant_id", "RETURNING tenant_id" + _ASYNC_COMMIT
            ),
        },
        ledger.DURABLE,
    ),
)
"""``DIALECT`` whose receipts commit without waiting for the WAL flush."""

SERVER_DIALECT = dataclasses.replace(
    DIALECT,
    statements=_floored(_STATEMENTS, frozenset()),
    single=_floored(_SINGLE, frozenset()),
)
"""``DIALECT`` whose decisions commit with the session's ``synchronous_commit`` as it is
(``prepare_synchronous="SERVER"``), however weak."""
