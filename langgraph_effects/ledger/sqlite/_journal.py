"""SQLite statements and migrations of the run journal (``langgraph_effects.journal``).

Snapshots and events are stored as JSON text, with the few columns queries
filter on beside them. Timestamps are INTEGER microseconds since the Unix
epoch, as in the ledger; version 1 stored ISO-8601 text, which migration 2
converts.
"""

from __future__ import annotations

from langgraph_effects.ledger.engine import (
    RECORD_SCHEMA_VERSION,
    SCHEMA_VERSION,
    SCHEMA_VERSION_TABLE,
)
from langgraph_effects.ledger.engine.tables import JOURNAL
from langgraph_effects.ledger.sqlite._sql import dump_ts, iso_to_us, load_ts

__all__ = ["DIALECT"]

_RUNS_TABLE = """CREATE TABLE {name} (
    run_id TEXT PRIMARY KEY,
    machine TEXT NOT NULL,
    state TEXT NOT NULL,
    version INTEGER NOT NULL,
    snapshot TEXT NOT NULL,
    updated_at {ts} NOT NULL)"""
# Append-only: one row per accepted event, with the snapshot it produced,
# so a repeated append returns exactly what the first one returned.
_EVENTS_TABLE = """CREATE TABLE {name} (
    run_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    event_id TEXT NOT NULL,
    type TEXT NOT NULL,
    state TEXT NOT NULL,
    event TEXT NOT NULL,
    snapshot TEXT NOT NULL,
    at {ts} NOT NULL,
    PRIMARY KEY (run_id, version),
    UNIQUE (run_id, event_id))"""
_STATE_INDEX = "CREATE INDEX IF NOT EXISTS lge_runs_state ON lge_runs (state)"

# Append-only tuples of explicit versions.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        _RUNS_TABLE.format(name="IF NOT EXISTS lge_runs", ts="TEXT"),
        _EVENTS_TABLE.format(name="IF NOT EXISTS lge_run_events", ts="TEXT"),
        # Refusals change no run row; they are counted here (metrics only).
        """CREATE TABLE IF NOT EXISTS lge_run_counters (
            run_id TEXT NOT NULL,
            name TEXT NOT NULL,
            n INTEGER NOT NULL,
            PRIMARY KEY (run_id, name))""",
        _STATE_INDEX,
    ),
    # v2: timestamps as INTEGER microseconds, as in the ledger: both tables are
    # rebuilt (SQLite cannot change a column's type) and their rows converted.
    (
        _RUNS_TABLE.format(name="lge_runs_v2", ts="INTEGER"),
        f"""INSERT INTO lge_runs_v2 (run_id, machine, state, version, snapshot, updated_at)
        SELECT run_id, machine, state, version, snapshot, {iso_to_us("updated_at")}
        FROM lge_runs""",
        "DROP TABLE lge_runs",
        "ALTER TABLE lge_runs_v2 RENAME TO lge_runs",
        _STATE_INDEX,
        _EVENTS_TABLE.format(name="lge_run_events_v2", ts="INTEGER"),
        f"""INSERT INTO lge_run_events_v2
            (run_id, version, event_id, type, state, event, snapshot, at)
        SELECT run_id, version, event_id, type, state, event, snapshot, {iso_to_us("at")}
        FROM lge_run_events""",
        "DROP TABLE lge_run_events",
        "ALTER TABLE lge_run_events_v2 RENAME TO lge_run_events",
    ),
)

VERSION_TABLE_SQL = (
    "CREATE TABLE IF NOT EXISTS lge_journal_schema_version "
    "(version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
)
SCHEMA_VERSION_SQL = "SELECT COALESCE(MAX(version), 0) AS version FROM lge_journal_schema_version"
RECORD_SCHEMA_VERSION_SQL = (
    "INSERT INTO lge_journal_schema_version (version, applied_at)"
    " VALUES (:version, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"
)

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

DIALECT = JOURNAL.dialect(
    {
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
