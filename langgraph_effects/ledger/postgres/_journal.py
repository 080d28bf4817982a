"""PostgreSQL statements and migrations of the run journal (``langgraph_effects.journal``).

Snapshots and events are stored as JSON text, with the few columns queries
filter on beside them; timestamps are ``timestamptz``.
"""

from __future__ import annotations

from langgraph_effects.ledger.engine import (
    RECORD_SCHEMA_VERSION,
    SCHEMA_VERSION,
    SCHEMA_VERSION_TABLE,
    SETUP_LOCK,
)
from langgraph_effects.ledger.engine.tables import JOURNAL
from langgraph_effects.ledger.postgres._sql import dump_ts, load_ts

__all__ = ["DIALECT"]

# Append-only tuples of explicit versions.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE IF NOT EXISTS lge_runs (
            run_id TEXT PRIMARY KEY,
            machine TEXT NOT NULL,
            state TEXT NOT NULL,
            version INTEGER NOT NULL,
            snapshot TEXT NOT NULL,
            updated_at TIMESTAMPTZ NOT NULL)""",
        # Append-only: one row per accepted event, with the snapshot it produced,
        # so a repeated append returns exactly what the first one returned.
        """CREATE TABLE IF NOT EXISTS lge_run_events (
            run_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            event_id TEXT NOT NULL,
            type TEXT NOT NULL,
            state TEXT NOT NULL,
            event TEXT NOT NULL,
            snapshot TEXT NOT NULL,
            at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (run_id, version),
            UNIQUE (run_id, event_id))""",
        # Refusals change no run row; they are counted here (metrics only).
        """CREATE TABLE IF NOT EXISTS lge_run_counters (
            run_id TEXT NOT NULL,
            name TEXT NOT NULL,
            n INTEGER NOT NULL,
            PRIMARY KEY (run_id, name))""",
        "CREATE INDEX IF NOT EXISTS lge_runs_state ON lge_runs (state)",
    ),
)

SETUP_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext('lge_journal_setup'))"
VERSION_TABLE_SQL = (
    "CREATE TABLE IF NOT EXISTS lge_journal_schema_version "
    "(version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL)"
)
SCHEMA_VERSION_SQL = "SELECT COALESCE(MAX(version), 0) AS version FROM lge_journal_schema_version"
RECORD_SCHEMA_VERSION_SQL = (
    "INSERT INTO lge_journal_schema_version (version, applied_at) VALUES (%(version)s, now())"
)

GET_RUN_SQL = "SELECT run_id, version, snapshot FROM lge_runs WHERE run_id = %(run_id)s"
GET_EVENT_SQL = (
    "SELECT version, event, snapshot FROM lge_run_events "
    "WHERE run_id = %(run_id)s AND event_id = %(event_id)s"
)
INSERT_RUN_SQL = """
INSERT INTO lge_runs (run_id, machine, state, version, snapshot, updated_at)
VALUES (%(run_id)s, %(machine)s, %(state)s, %(version)s, %(snapshot)s, %(now)s)
ON CONFLICT (run_id) DO NOTHING
RETURNING run_id
"""
# The optimistic check: only the holder of the expected version moves the run.
UPDATE_RUN_SQL = """
UPDATE lge_runs
SET state = %(state)s, version = %(version)s, snapshot = %(snapshot)s, updated_at = %(now)s
WHERE run_id = %(run_id)s AND version = %(expected)s
RETURNING run_id
"""
INSERT_EVENT_SQL = """
INSERT INTO lge_run_events (run_id, version, event_id, type, state, event, snapshot, at)
VALUES (%(run_id)s, %(version)s, %(event_id)s, %(type)s, %(state)s, %(event)s, %(snapshot)s,
        %(now)s)
"""
BUMP_COUNTER_SQL = """
INSERT INTO lge_run_counters (run_id, name, n) VALUES (%(run_id)s, %(name)s, 1)
ON CONFLICT (run_id, name) DO UPDATE SET n = lge_run_counters.n + 1
"""
EVENTS_SQL = (
    "SELECT version, type, state, event, at FROM lge_run_events "
    "WHERE run_id = %(run_id)s ORDER BY version"
)
RUNS_SQL = "SELECT run_id, state, snapshot FROM lge_runs ORDER BY run_id"
COUNTERS_SQL = "SELECT run_id, name, n FROM lge_run_counters"
ALL_EVENT_TYPES_SQL = "SELECT run_id, type FROM lge_run_events"

DIALECT = JOURNAL.dialect(
    {
        SETUP_LOCK: SETUP_LOCK_SQL,
        SCHEMA_VERSION_TABLE: VERSION_TABLE_SQL,
        SCHEMA_VERSION: SCHEMA_VERSION_SQL,
        RECORD_SCHEMA_VERSION: RECORD_SCHEMA_VERSION_SQL,
        "get_run": GET_RUN_SQL,
        "get_event": GET_EVENT_SQL,
        "insert_run": INSERT_RUN_SQL,
        "update_run": UPDATE_RUN_SQL,
        "insert_event": INSERT_EVENT_SQL,
        "bump_counter": BUMP_COUNTER_SQL,
        "events": EVENTS_SQL,
        "runs": RUNS_SQL,
        "counters": COUNTERS_SQL,
        "all_event_types": ALL_EVENT_TYPES_SQL,
    },
    migrations=MIGRATIONS,
    dump_ts=dump_ts,
    load_ts=load_ts,
)
