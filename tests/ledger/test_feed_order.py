"""The PostgreSQL event feed never skips an event that commits late with a smaller id.

A writer draws its event id from a sequence and commits later, so id 2 can
become visible after id 3. These tests hold a real transaction open across
another writer's commit (no mocks): the feed must wait for the gap, deliver
both events in id order once the late one commits, and move past a gap whose
writer rolled back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects.testing.contract import make_draft
from langgraph_effects.testing.faults import scaled

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ledger(pg_url: str) -> Iterator[Any]:
    from langgraph_effects.ledger.postgres import PostgresLedger

    with PostgresLedger.from_conn_string(pg_url) as opened:
        opened.setup()
        opened.prepare(make_draft("op-first"))  # event 1
        yield opened


@pytest.fixture
def late_writer(pg_url: str) -> Iterator[tuple[Any, Any]]:
    """A second ledger on its own autocommit connection, to hold a transaction open."""
    import psycopg

    from langgraph_effects.ledger.postgres import PostgresLedger

    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn, PostgresLedger(conn)


def ids(events: list[Any]) -> list[tuple[int, str]]:
    return [(e.event_id, e.operation_id) for e in events]


def test_a_late_commit_with_a_smaller_id_is_delivered_in_order(
    ledger: Any, late_writer: tuple[Any, Any]
) -> None:
    """Event 2 commits after event 3: the feed holds 3 back until 2 is visible, then gives both."""
    conn, late = late_writer
    with conn.transaction():
        late.prepare(make_draft("op-late"))  # event 2, not committed yet
        ledger.prepare(make_draft("op-quick"))  # event 3, committed
        assert ledger.feed(after_id=1) == []
        assert ids(ledger.feed(after_id=0)) == [(1, "op-first")]
    assert ids(ledger.feed(after_id=1)) == [(2, "op-late"), (3, "op-quick")]


def test_a_rolled_back_gap_does_not_stall_the_feed(
    ledger: Any, late_writer: tuple[Any, Any]
) -> None:
    """A writer that rolls back leaves a permanent gap: once it has ended the feed moves past it."""
    import psycopg

    conn, late = late_writer
    with conn.transaction():
        late.prepare(make_draft("op-undone"))  # event 2, rolled back below
        ledger.prepare(make_draft("op-kept"))  # event 3, committed
        assert ledger.feed(after_id=1) == []
        raise psycopg.Rollback  # leaves the block, rolling the transaction back
    assert ids(ledger.feed(after_id=1)) == [(3, "op-kept")]
    assert ledger.get("tenant-a", "op-undone") is None


def test_events_follow_prints_a_late_commit_before_the_later_id(
    ledger: Any, late_writer: tuple[Any, Any], pg_url: str
) -> None:
    """`events --follow` in a real process prints event 2 (committed last) and then event 3."""
    import psycopg

    conn, late = late_writer
    held = threading.Event()
    done = threading.Event()
    app_name = "lge-follow-order-test"

    def follower_has_read() -> bool:
        with psycopg.connect(pg_url, autocommit=True) as probe:
            row = probe.execute(
                "SELECT COUNT(*) FROM pg_stat_activity"
                " WHERE application_name = %s AND query LIKE %s",
                (app_name, "%lge_events%"),
            ).fetchone()
        return bool(row and row[0])

    def write_out_of_order() -> None:
        with conn.transaction():
            late.prepare(make_draft("op-late"))
            ledger.prepare(make_draft("op-quick"))
            held.set()
            # Commit event 2 only after the follower has read while it was missing.
            deadline = time.monotonic() + scaled(30)
            while not follower_has_read() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)  # several more polls that see event 3 and not event 2
        done.set()

    writer = threading.Thread(target=write_out_of_order)
    writer.start()
    assert held.wait(scaled(30))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LGE_")}
    env.update(PYTHONPATH=str(ROOT), LGE_LEDGER_URL=pg_url, PGAPPNAME=app_name)
    follower = subprocess.run(
        [
            *(sys.executable, "-c", "from langgraph_effects.cli import main; main()", "events"),
            *("--follow", "--after", "1", "--count", "2", "--interval", "0.05", "--json"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )
    writer.join()
    assert done.is_set()
    assert follower.returncode == 0, follower.stderr
    printed = [json.loads(line) for line in follower.stdout.splitlines()]
    assert [(e["event_id"], e["operation_id"]) for e in printed] == [
        (2, "op-late"),
        (3, "op-quick"),
    ]
