"""One statement engine under the ledger, the outbox and the run journal.

The migrations that turn the outbox's and the journal's ISO-text timestamps on
SQLite into integer microseconds (the ledger's format), and the one error
boundary per backend: a missing schema is ``LedgerNotSetUp`` naming the setup
call, any other driver error ``LedgerUnavailable`` with the driver's error as
its cause, for every table set, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects.errors import LedgerNotSetUp, LedgerUnavailable, PayloadMismatch
from langgraph_effects.journal import (
    AsyncRunJournal,
    RunEvent,
    RunJournal,
    RunMachine,
    RunState,
    Transition,
)
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.ledger.sqlite import SQLiteLedger
from langgraph_effects.ledger.sqlite import _journal as sqlite_journal
from langgraph_effects.ledger.sqlite import _outbox as sqlite_outbox
from langgraph_effects.outbox import Delivery, Outbox, OutboxRelay, OutboxStatus, Receipt
from langgraph_effects.testing.contract import OWNER, make_draft
from langgraph_effects.testing.providers import FakeClock

MACHINE = RunMachine(
    "ping",
    states=[RunState(name="waiting", next_action="poll"), RunState(name="done", terminal=True)],
    transitions=[
        Transition(event="polled", sources=("waiting",), target=None, condition="a poll"),
        Transition(event="answered", sources=("waiting",), target="done", condition="an answer"),
    ],
    initial="waiting",
)

# What the releases before integer timestamps wrote: ISO-8601 text, UTC, microseconds.
T0 = datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC)
DIGEST = "0" * 64


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _old_schema(conn: sqlite3.Connection, module: Any, versions: int) -> None:
    """Create a table set as its first ``versions`` migrations left it (they are append-only)."""
    conn.execute(module.VERSION_TABLE_SQL)
    for version, statements in enumerate(module.MIGRATIONS[:versions], start=1):
        for sql in statements:
            conn.execute(sql)
        conn.execute(
            "INSERT INTO lge_outbox_schema_version (version, applied_at) VALUES (?, ?)"
            if module is sqlite_outbox
            else "INSERT INTO lge_journal_schema_version (version, applied_at) VALUES (?, ?)",
            (version, _iso(T0)),
        )


def _old_entry(
    conn: sqlite3.Connection,
    seq: int,
    entry_id: str,
    status: str,
    available_at: datetime,
    *,
    resolved_at: datetime | None = None,
    receipt: str | None = None,
) -> None:
    """An outbox row as a version-2 release wrote it."""
    conn.execute(
        "INSERT INTO lge_outbox (seq, entry_id, tenant_id, topic, key, ordered, payload,"
        " payload_digest, operation_id, status, failures, available_at, fencing_token,"
        " receipt_state, provider_message_id, created_at, updated_at, resolved_at)"
        " VALUES (:seq, :entry_id, 't', 'mail', NULL, 0, '{}', :digest, :entry_id, :status, 0,"
        " :available_at, 1, :receipt, :message_id, :created_at, :updated_at, :resolved_at)",
        {
            "seq": seq,
            "entry_id": entry_id,
            "digest": DIGEST,
            "status": status,
            "available_at": _iso(available_at),
            "receipt": receipt,
            "message_id": None if receipt is None else "m-1",
            "created_at": _iso(T0),
            "updated_at": _iso(resolved_at or T0),
            "resolved_at": None if resolved_at is None else _iso(resolved_at),
        },
    )


# --------------------------------------------------------------------------- migrations


def test_outbox_migration_converts_iso_text_timestamps_to_microseconds(tmp_path: Path) -> None:
    """A version-2 SQLite outbox with ISO-text rows: setup converts every timestamp exactly,
    keeps the seq high-water mark, and the relay claims by time as before."""
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path, isolation_level=None)
    _old_schema(conn, sqlite_outbox, 2)
    sent_at = T0 + timedelta(seconds=3, microseconds=1)
    due_at = T0 + timedelta(minutes=1)
    _old_entry(conn, 1, "ob-sent", "sent", T0, resolved_at=sent_at, receipt="accepted")
    _old_entry(conn, 7, "ob-gone", "pending", due_at)
    conn.execute("DELETE FROM lge_outbox WHERE seq = 7")  # the high-water mark stays 7
    _old_entry(conn, 5, "ob-due", "pending", due_at)
    conn.execute(
        "INSERT INTO lge_outbox_events VALUES ('ob-sent', 'e-1', 'delivered', 'webhook', 'm-1',"
        " NULL, ?)",
        (_iso(sent_at),),
    )

    Outbox().setup(conn)
    Outbox().setup(conn)  # idempotent: nothing left to convert

    versions = [v for (v,) in conn.execute("SELECT version FROM lge_outbox_schema_version")]
    assert versions == [1, 2, 3]
    types = conn.execute(
        "SELECT DISTINCT typeof(available_at), typeof(created_at), typeof(updated_at)"
        " FROM lge_outbox"
    ).fetchall()
    assert types == [("integer", "integer", "integer")]
    assert conn.execute("SELECT typeof(at) FROM lge_outbox_events").fetchall() == [("integer",)]
    sent, due = Outbox.list(conn)
    assert (sent.entry_id, sent.created_at, sent.resolved_at) == ("ob-sent", T0, sent_at)
    assert (due.entry_id, due.available_at, due.resolved_at) == ("ob-due", due_at, None)
    assert [e.at for e in Outbox.events(conn, "ob-sent")] == [sent_at]

    conn.execute("BEGIN")
    new_id = Outbox(tenant_id="t").enqueue(conn, topic="mail", payload={"n": 2})
    conn.execute("COMMIT")
    new = Outbox.get(conn, new_id)
    assert new is not None
    assert new.seq == 8  # AUTOINCREMENT never reuses 7, deleted before the migration

    clock = FakeClock(start=T0 + timedelta(seconds=30))
    sent_ids: list[str] = []

    def deliver(d: Delivery) -> Receipt:
        sent_ids.append(d.entry.entry_id)
        return Receipt(message_id=f"m-{d.entry.seq}")

    ledger = InMemoryLedger()
    ledger.setup()
    relay = OutboxRelay(conn, ledger=ledger, deliver=deliver, clock=clock.now)
    relay.run_until_idle()
    assert sent_ids == []  # "ob-due" is due a minute after T0, the new entry later still
    clock.advance(timedelta(minutes=1))
    relay.run_until_idle()
    assert sent_ids == ["ob-due"]
    assert Outbox.get(conn, "ob-due").status is OutboxStatus.SENT  # type: ignore[union-attr]
    conn.close()


def test_journal_migration_converts_iso_text_timestamps_to_microseconds(tmp_path: Path) -> None:
    """A version-1 SQLite journal with ISO-text rows: setup converts them; runs go on."""
    path = tmp_path / "runs.db"
    clock = FakeClock(start=T0)
    conn = sqlite3.connect(path, isolation_level=None)
    _old_schema(conn, sqlite_journal, 1)
    snapshot = MACHINE.start("r1", resource=None, attempts=3, lease_expires_at=None, now=T0)
    start = RunEvent(event_id="start", type="started", data={"resource": None, "attempts": 3})
    conn.execute(
        "INSERT INTO lge_runs VALUES ('r1', 'ping', 'waiting', 1, ?, ?)",
        (snapshot.model_dump_json(), _iso(T0)),
    )
    conn.execute(
        "INSERT INTO lge_run_events VALUES ('r1', 1, 'start', 'started', 'waiting', ?, ?, ?)",
        (start.model_dump_json(), snapshot.model_dump_json(), _iso(T0)),
    )
    journal = RunJournal(conn, [MACHINE], clock=clock.now)
    journal.setup()
    journal.setup()

    assert [v for (v,) in conn.execute("SELECT version FROM lge_journal_schema_version")] == [
        1,
        2,
    ]
    assert conn.execute("SELECT typeof(updated_at) FROM lge_runs").fetchall() == [("integer",)]
    assert conn.execute("SELECT typeof(at) FROM lge_run_events").fetchall() == [("integer",)]
    assert journal.get("r1") == snapshot
    clock.advance(timedelta(seconds=90))
    journal.append("r1", 1, RunEvent(event_id="a", type="answered"))
    metrics = journal.metrics("r1")
    assert metrics is not None
    assert metrics.entered_at == {"waiting": T0, "done": T0 + timedelta(seconds=90)}
    assert metrics.seconds_between("waiting", "done") == 90
    conn.close()


def test_both_backends_name_the_same_statements() -> None:
    """The outbox's and the journal's programs find every statement they name on both backends."""
    pytest.importorskip("psycopg")
    from langgraph_effects.ledger.postgres import _journal as pg_journal
    from langgraph_effects.ledger.postgres import _outbox as pg_outbox
    from langgraph_effects.ledger.postgres import _sql as pg_ledger
    from langgraph_effects.ledger.sqlite import _sql as sqlite_ledger

    for lite, pg in (
        (sqlite_outbox, pg_outbox),
        (sqlite_journal, pg_journal),
        (sqlite_ledger, pg_ledger),
    ):
        optional = {"setup_lock", "write_lock", "feed_pending", "pause"}
        assert set(lite.DIALECT.statements) - optional == set(pg.DIALECT.statements) - optional


# --------------------------------------------------------------------------- error boundary


@contextmanager
def _connection(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    if backend == "sqlite":
        conn = sqlite3.connect(tmp_path / "db.sqlite", isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(request.getfixturevalue("pg_url"), autocommit=True) as pg:
        yield pg


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

# Each table set before its setup: a call, and the setup call its error must name.
NOT_SET_UP: dict[str, tuple[Callable[[Any], Any], str]] = {
    "outbox get": (lambda conn: Outbox.get(conn, "ob-1"), "Outbox().setup(conn)"),
    "outbox mark_delivered": (
        lambda conn: Outbox().mark_delivered(conn, entry_id="ob-1", evidence_id="e"),
        "Outbox().setup(conn)",
    ),
    "journal get": (lambda conn: RunJournal(conn, [MACHINE]).get("r1"), "journal.setup()"),
    "journal start": (
        lambda conn: RunJournal(conn, [MACHINE]).start("r1", "ping"),
        "journal.setup()",
    ),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("call", sorted(NOT_SET_UP))
def test_tables_not_set_up_raise_ledger_not_set_up_naming_the_setup_call(
    backend: str, call: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Before setup, outbox and journal calls raise LedgerNotSetUp naming their own setup."""
    fn, setup = NOT_SET_UP[call]
    with _connection(backend, tmp_path, request) as conn:
        with pytest.raises(LedgerNotSetUp, match=rf"call {re.escape(setup)}"):
            fn(conn)
        if backend == "postgres":
            conn.rollback()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_missing_table_among_present_ones_is_not_set_up(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A table dropped after setup (the version says current) is still LedgerNotSetUp."""
    with _connection(backend, tmp_path, request) as conn:
        journal = RunJournal(conn, [MACHINE])
        journal.setup()
        journal.start("r1", "ping")
        conn.execute("DROP TABLE lge_run_events")
        with pytest.raises(LedgerNotSetUp, match=r"lge_run_events.*journal\.setup\(\)"):
            journal.events("r1")


@pytest.mark.parametrize("backend", BACKENDS)
def test_driver_errors_are_ledger_unavailable_with_their_cause(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """On a closed connection every table set raises LedgerUnavailable, the driver's error
    attached as its cause."""
    with ExitStack() as stack:
        conn = stack.enter_context(_connection(backend, tmp_path, request))
        Outbox().setup(conn)
        journal = RunJournal(conn, [MACHINE])
        journal.setup()
        conn.close()
        for call in (
            lambda: Outbox.get(conn, "ob-1"),
            lambda: Outbox.list(conn),
            lambda: journal.get("r1"),
            lambda: journal.start("r2", "ping"),
        ):
            with pytest.raises(LedgerUnavailable) as info:
                call()
            if backend == "sqlite":
                assert isinstance(info.value.__cause__, sqlite3.Error)
            else:
                import psycopg

                assert isinstance(info.value.__cause__, psycopg.Error)


def test_a_locked_sqlite_file_is_unavailable_not_unset(tmp_path: Path) -> None:
    """sqlite3 raises OperationalError for a lock as for a missing table: the schema is
    read to tell them apart, so a busy file is LedgerUnavailable for every table set."""
    path = tmp_path / "busy.db"
    with SQLiteLedger.from_conn_string(str(path)) as ledger:
        ledger.setup()
    setup = sqlite3.connect(path, isolation_level=None)
    Outbox().setup(setup)
    RunJournal(setup, [MACHINE]).setup()
    setup.close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # holds the write lock
    try:
        conn = sqlite3.connect(path, isolation_level=None, timeout=0.05)
        with pytest.raises(LedgerUnavailable, match="locked") as info:
            RunJournal(conn, [MACHINE]).start("r1", "ping")
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
        with pytest.raises(LedgerUnavailable, match="locked"):
            Outbox().mark_delivered(conn, entry_id="ob-1", evidence_id="e")
        conn.close()
        with SQLiteLedger.from_conn_string(str(path)) as ledger:
            ledger._driver.busy_timeout = 0.05  # the driver's own wait, under WAL
            with pytest.raises(LedgerUnavailable, match="locked"):
                ledger.bind_thread("thread-1", "acme")
    finally:
        holder.rollback()
        holder.close()


def test_a_sqlite_write_waits_for_another_connections_commit(tmp_path: Path) -> None:
    """Under WAL the driver, not SQLite's busy handler (1, 2, 5 ... ms sleeps), waits for
    a writer on another connection (the saver's): SQLite's own wait is off, and a write
    and a read made while the lock is held succeed once it is released."""
    path = tmp_path / "shared.db"
    with SQLiteLedger.from_conn_string(str(path)) as ledger:
        ledger.setup()
        assert ledger._driver.conn.execute("PRAGMA busy_timeout").fetchone() == (0,)
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")  # the saver's transaction, say
        holder.execute("INSERT INTO lge_threads VALUES ('thread-0', 'acme', 0)")
        release = threading.Timer(0.05, holder.commit)
        release.start()
        try:
            assert ledger.bind_thread("thread-1", "acme") == "acme"
            assert ledger.bind_thread("thread-0", "other") == "acme"  # after its commit
        finally:
            release.join()
            holder.close()


def test_a_sqlite_prepare_reads_before_it_takes_the_write_lock(tmp_path: Path) -> None:
    """A first-time prepare reads, then writes in one BEGIN IMMEDIATE ... COMMIT; a replay
    (or a payload mismatch) is answered by the read alone and never takes the write lock."""
    conn = sqlite3.connect(tmp_path / "l.db", check_same_thread=False, isolation_level=None)
    ledger = SQLiteLedger(conn)
    ledger.setup()
    seen: list[str] = []
    conn.set_trace_callback(lambda sql: seen.append(sql.split()[0]))
    draft = make_draft("op-1")
    assert ledger.prepare(draft, owner=OWNER).created
    assert seen == ["SELECT", "BEGIN", "INSERT", "INSERT", "INSERT", "COMMIT"]
    seen.clear()
    assert not ledger.prepare(draft, owner=OWNER).created
    assert not ledger.prepare_many([draft, draft])[0].created
    with pytest.raises(PayloadMismatch):
        ledger.prepare(draft.model_copy(update={"payload_digest": "f" * 64}))
    assert seen == ["SELECT"] * 3
    assert not conn.in_transaction
    conn.set_trace_callback(None)
    conn.close()


def test_a_sqlite_prepare_waits_for_another_connections_commit(tmp_path: Path) -> None:
    """The write lock a first-time prepare takes after its read is waited for, as any write's."""
    path = tmp_path / "shared.db"
    with SQLiteLedger.from_conn_string(str(path)) as ledger:
        ledger.setup()
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")  # the saver's transaction, say
        release = threading.Timer(0.05, holder.commit)
        release.start()
        try:
            assert ledger.prepare(make_draft("op-1"), owner=OWNER).created
        finally:
            release.join()
            holder.close()
        assert ledger.get("tenant-a", "op-1").fencing_token == 1


@pytest.mark.postgres
def test_async_journal_before_setup_says_so(pg_url: str) -> None:
    """The async PostgreSQL path maps a missing table the same way."""
    import psycopg

    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            with pytest.raises(LedgerNotSetUp, match=r"journal\.setup\(\)"):
                await AsyncRunJournal(conn, [MACHINE]).get("r1")
            with pytest.raises(LedgerNotSetUp, match=r"Outbox\(\)\.setup\(conn\)"):
                await Outbox().amark_delivered(conn, entry_id="ob-1", evidence_id="e")

    asyncio.run(scenario())
