"""SQL of the run journal, for SQLite and PostgreSQL.

Written once with ``:name`` placeholders; ``for_postgres`` (shared with the
outbox) rewrites them for psycopg. Snapshots and events are stored as JSON
text, with the few columns queries filter on beside them.
"""

from __future__ import annotations

from langgraph_effects._sqlrun import for_postgres

__all__ = [
    "BUMP_COUNTER_SQL",
    "COUNTERS_SQL",
    "EVENTS_SQL",
    "GET_EVENT_SQL",
    "GET_RUN_SQL",
    "INSERT_EVENT_SQL",
    "INSERT_RUN_SQL",
    "MIGRATIONS_PG",
    "MIGRATIONS_SQLITE",
    "RUNS_SQL",
    "UPDATE_RUN_SQL",
    "for_postgres",
]

_TABLES = (
    """CREATE TABLE IF NOT EXISTS lge_runs (
        run_id TEXT PRIMARY KEY,
        machine TEXT NOT NULL,
        state TEXT NOT NULL,
        version INTEGER NOT NULL,
        snapshot TEXT NOT NULL,
        updated_at TEXT NOT NULL)""",
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
        at TEXT NOT NULL,
        PRIMARY KEY (run_id, version),
        UNIQUE (run_id, event_id))""",
    # Refusals change no run row; they are counted here (metrics only).
    """CREATE TABLE IF NOT EXISTS lge_run_counters (
        run_id TEXT NOT NULL,
        name TEXT NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (run_id, name))""",
    "CREATE INDEX IF NOT EXISTS lge_runs_state ON lge_runs (state)",
)

# Append-only tuples of explicit versions; the timestamps are TEXT on SQLite.
MIGRATIONS_SQLITE: tuple[tuple[str, ...], ...] = (_TABLES,)
MIGRATIONS_PG: tuple[tuple[str, ...], ...] = (
    tuple(t.replace("at TEXT NOT NULL", "at TIMESTAMPTZ NOT NULL") for t in _TABLES),
)

VERSION_TABLE_SQLITE = (
    "CREATE TABLE IF NOT EXISTS lge_journal_schema_version "
    "(version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
)
VERSION_TABLE_PG = (
    "CREATE TABLE IF NOT EXISTS lge_journal_schema_version "
    "(version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL)"
)
SELECT_VERSION_SQL = "SELECT COALESCE(MAX(version), 0) AS v FROM lge_journal_schema_version"
INSERT_VERSION_SQL = (
    "INSERT INTO lge_journal_schema_version (version, applied_at) VALUES (:version, :now)"
)
PG_SETUP_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext('lge_journal_setup'))"

GET_RUN_SQL = "SELECT run_id, version, snapshot FROM lge_runs WHERE run_id = :run_id"
GET_EVENT_SQL = (
    "SELECT version, event, snapshot FROM lge_run_events "
    "WHERE run_id = :run_id AND event_id = :event_id"
)
INSERT_RUN_SQL = """
INSERT INTO lge_runs (run_id, machine, state, version, snapshot, updated_at)
VALUES (:run_id, :machine, :state, :version, :snapshot, :now)
ON CONFLICT (run_id) DO NOTHING
RETURNING run_id
"""
# The optimistic check: only the holder of the expected version moves the run.
UPDATE_RUN_SQL = """
UPDATE lge_runs SET state = :state, version = :version, snapshot = :snapshot, updated_at = :now
WHERE run_id = :run_id AND version = :expected
RETURNING run_id
"""
INSERT_EVENT_SQL = """
INSERT INTO lge_run_events (run_id, version, event_id, type, state, event, snapshot, at)
VALUES (:run_id, :version, :event_id, :type, :state, :event, :snapshot, :now)
"""
BUMP_COUNTER_SQL = """
INSERT INTO lge_run_counters (run_id, name, n) VALUES (:run_id, :name, 1)
ON CONFLICT (run_id, name) DO UPDATE SET n = lge_run_counters.n + 1
"""
EVENTS_SQL = (
    "SELECT version, type, state, event, at FROM lge_run_events "
    "WHERE run_id = :run_id ORDER BY version"
)
RUNS_SQL = "SELECT run_id, state, snapshot FROM lge_runs ORDER BY run_id"
COUNTERS_SQL = "SELECT run_id, name, n FROM lge_run_counters"
ALL_EVENT_TYPES_SQL = "SELECT run_id, type FROM lge_run_events"
