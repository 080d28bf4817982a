"""A ledger as schema v1 left it: the first migration only, one row with events, one bare row.

Shared by the migration tests (``tests/ledger/test_ledger_migrations.py``: ``setup()``
upgrades it) and the CLI's (``tests/cli/test_cli_operator.py``: an older schema names the
migration to run).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from langgraph_effects.testing.contract import make_draft

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)

# A v1 row: unknown since T0 + 2 s, inconclusive evidence at T0 + 3 s moved updated_at.
V1_ROW: dict[str, Any] = {
    "tenant_id": "acme",
    "operation_id": "op-v1",
    "workflow_id": "thread-1",
    "action": "crm.close_case",
    "action_version": 1,
    "target": "case-1",
    "payload_digest": make_draft("op-v1").payload_digest,
    "payload": '{"email": "ada@example.com"}',
    "payload_stored": True,
    "status": "unknown",
    "idempotency_key": "lge-op-v1",
    "attempts": 1,
    "fencing_token": 2,
    "record_version": 4,
    "evidence_checked_at": T0 + 3 * SECOND,
    "created_at": T0,
    "updated_at": T0 + 3 * SECOND,
    "first_dispatched_at": T0 + SECOND,
    "last_dispatched_at": T0 + SECOND,
}
V1_EVENTS = [  # seq, kind, from, to, at
    (1, "prepare", None, "prepared", T0),
    (2, "claim", "prepared", "dispatching", T0 + SECOND),
    (3, "mark_unknown", "dispatching", "unknown", T0 + 2 * SECOND),
    (4, "evidence", "unknown", "unknown", T0 + 3 * SECOND),
]
# A v1 row with no events (bulk-written by another tool): it falls back to updated_at.
V1_BARE = {
    **V1_ROW,
    "operation_id": "op-bare",
    "status": "prepared",
    "attempts": 0,
    "fencing_token": 0,
    "record_version": 1,
    "evidence_checked_at": None,
    "updated_at": T0 + 5 * SECOND,
    "first_dispatched_at": None,
    "last_dispatched_at": None,
}


def write_v1(
    execute: Callable[[str, dict[str, Any]], Any],
    migrations: tuple[tuple[str, ...], ...],
    version_table: str,
    placeholder: Callable[[str], str],
    dump_ts: Callable[[Any], Any],
) -> None:
    """Create the v1 schema (first migration only) and write V1_ROW, its events and V1_BARE."""
    execute(version_table, {})
    for sql in migrations[0]:
        execute(sql, {})
    execute("INSERT INTO lge_schema_version (version) VALUES (1)", {})
    for row in (V1_ROW, V1_BARE):
        values = {k: dump_ts(v) if isinstance(v, datetime) else v for k, v in row.items()}
        names = ", ".join(values)
        marks = ", ".join(placeholder(k) for k in values)
        execute(f"INSERT INTO lge_operations ({names}) VALUES ({marks})", values)
    for seq, kind, source, to, at in V1_EVENTS:
        execute(
            "INSERT INTO lge_events (tenant_id, operation_id, seq, kind, from_status, to_status,"
            " actor, at) VALUES ("
            + ", ".join(placeholder(k) for k in ("t", "o", "s", "k", "f", "to", "a", "at"))
            + ")",
            {
                "t": "acme",
                "o": "op-v1",
                "s": seq,
                "k": kind,
                "f": source,
                "to": to,
                "a": "v1",
                "at": dump_ts(at),
            },
        )
