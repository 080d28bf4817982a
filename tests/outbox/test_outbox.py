"""Transactional outbox and relay, on SQLite files and PostgreSQL.

Each backend runs with its real ledger: a SQLite app database with a
``SQLiteLedger`` on a file beside it, a PostgreSQL app schema with a
``PostgresLedger`` in the same schema. ``InMemoryLedger`` is kept only where a
test is about the relay's own logic. Notifications are counted at the fake
mail provider (``FakeMail``, a SQLite file shared across processes); entry
and operation states are read from the outbox table and the ledger. The
application and fixtures are in ``tests/_outbox.py``; the tests that kill a
process (SIGKILL) are in the kill room, ``tests/kills/test_outbox_kills.py``.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _outbox import (
    KEY_WINDOW,
    App,
    app,
    business,
    clock,
    entries,
    ledger,
    mail,
    memory_ledger,
    operations,
    race_child,
    sender,
    sent_search,
)

from langgraph_effects.core.model import EventKind, Evidence, Operation, OperationStatus
from langgraph_effects.errors import InvalidInput, LedgerNotSetUp, PayloadMismatch
from langgraph_effects.ledger.base import Ledger
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.outbox import (
    Delivery,
    Outbox,
    OutboxRelay,
    OutboxStatus,
    Receipt,
)
from langgraph_effects.testing.faults import scaled
from langgraph_effects.testing.providers import FakeClock, FakeMail, Fault

__all__ = ["app", "clock", "ledger", "mail", "memory_ledger"]  # fixtures from _outbox


# --------------------------------------------------------------------------- enqueue


def test_rolled_back_business_change_sends_nothing(
    app: App, mail: FakeMail, ledger: Ledger, clock: FakeClock
) -> None:
    """A business transaction that rolls back leaves no entry, no operation and no notification."""
    business(app, "case-1", commit=False)
    with app.relay(ledger=ledger, deliver=sender(mail), clock=clock.now) as relay:
        report = relay.run_until_idle()
    assert report.claimed == 0
    assert entries(app) == []
    assert ledger.list() == []
    assert mail.effects == 0


def test_the_relay_opens_the_database_any_ledger_url_form_names(
    app: App, mail: FakeMail, ledger: Ledger, clock: FakeClock
) -> None:
    """``from_conn_string`` reads a URL as a ledger URL does: ``sqlite:///`` and
    ``postgresql+psycopg://`` name the database the plain forms name; another scheme is
    refused."""
    business(app, "case-9")
    if app.backend == "sqlite":
        url = f"sqlite:///{app.target}"
    else:
        url = app.target.replace("postgresql://", "postgresql+psycopg://", 1)
    with OutboxRelay.from_conn_string(
        url, ledger=ledger, deliver=sender(mail), clock=clock.now
    ) as r:
        assert r.run_until_idle().claimed == 1
    assert mail.effects == 1
    assert [e.status for e in entries(app)] == [OutboxStatus.SENT]
    with (
        pytest.raises(InvalidInput, match="unsupported ledger URL"),
        OutboxRelay.from_conn_string("mysql://h/db", ledger=ledger, deliver=sender(mail)),
    ):
        pass


def test_dedupe_key_makes_one_entry_and_refuses_another_payload(app: App) -> None:
    """The same dedupe key is one entry; reused with another payload it is refused."""
    outbox = Outbox()
    conn = app.connect()
    first = outbox.enqueue(conn, topic="t", payload={"n": 1}, dedupe_key="d-1")
    again = outbox.enqueue(conn, topic="t", payload={"n": 1}, dedupe_key="d-1")
    with pytest.raises(PayloadMismatch):
        outbox.enqueue(conn, topic="t", payload={"n": 2}, dedupe_key="d-1")
    conn.rollback() if app.backend == "postgres" else conn.commit()
    conn.close()
    assert first == again
    if app.backend == "sqlite":
        assert [e.entry_id for e in entries(app)] == [first]


def test_enqueue_refuses_a_connection_that_would_commit_on_its_own(app: App) -> None:
    """An autocommit connection outside a transaction is refused: the entry would commit alone."""
    if app.backend == "sqlite":
        conn: Any = sqlite3.connect(app.target, isolation_level=None)
    else:
        import psycopg

        conn = psycopg.connect(app.target, autocommit=True)
    try:
        with pytest.raises(InvalidInput, match="transaction"):
            Outbox().enqueue(conn, topic="t", payload={})
    finally:
        conn.close()
    assert entries(app) == []


@pytest.mark.postgres
def test_async_enqueue_commits_with_the_business_change(pg_url: str) -> None:
    """``aenqueue`` on an AsyncConnection commits and rolls back with the caller's transaction."""
    import psycopg

    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(pg_url) as conn:
            await Outbox().asetup(conn)
            await Outbox().asetup(conn)
            async with conn.transaction():
                await Outbox().aenqueue(conn, topic="t", payload={"kept": True})
            try:
                async with conn.transaction():
                    await Outbox().aenqueue(conn, topic="t", payload={"kept": False})
                    raise RuntimeError("business failed")
            except RuntimeError:
                pass  # the business change failed: its transaction rolled back

    asyncio.run(scenario())
    with psycopg.connect(pg_url) as sync:
        assert [e.payload for e in Outbox.list(sync)] == [{"kept": True}]


def test_setup_is_idempotent_on_a_fresh_file(tmp_path: Path) -> None:
    """Running setup twice leaves one schema version row and a usable table."""
    conn = sqlite3.connect(tmp_path / "x.db")
    Outbox().setup(conn)
    Outbox().setup(conn)
    versions = conn.execute("SELECT version FROM lge_outbox_schema_version ORDER BY version")
    assert versions.fetchall() == [(1,), (2,), (3,)]  # 3: integer timestamps (SQLite)
    conn.close()
    assert os.path.exists(tmp_path / "x.db")


# --------------------------------------------------------------------------- races


def test_three_relay_threads_deliver_each_entry_once(
    app: App, mail: FakeMail, clock: FakeClock
) -> None:
    """Three relay threads, each with its own connection and ledger on one store, send once each."""
    for i in range(24):
        business(app, f"case-{i}")
    start = threading.Barrier(3)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with (
                app.ledger(clock.now) as led,
                app.relay(ledger=led, deliver=sender(mail), clock=clock.now, batch_size=3) as r,
            ):
                start.wait()
                r.run_until_idle()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=scaled(120))
    assert errors == []
    assert mail.effects == 24
    assert mail.duplicates == 0
    assert {e.status for e in entries(app)} == {OutboxStatus.SENT}
    with app.ledger() as led:
        ops = operations(app, led)
    assert {op.status for op in ops} == {OperationStatus.CONFIRMED}
    assert {op.attempts for op in ops} == {1}


def test_three_relay_processes_deliver_each_entry_once(app: App, mail: FakeMail) -> None:
    """Three relay processes, each opening the shared ledger, race and send every entry once."""
    for i in range(30):
        business(app, f"case-{i}")
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(3)
    children = [ctx.Process(target=race_child, args=(app, mail, start)) for _ in range(3)]
    for child in children:
        child.start()
    for child in children:
        child.join(scaled(120))
    assert [c.exitcode for c in children] == [0, 0, 0]
    assert mail.effects == 30
    assert mail.duplicates == 0
    assert mail.stats().replays == 0
    assert {e.status for e in entries(app)} == {OutboxStatus.SENT}
    with app.ledger() as led:
        ops = operations(app, led)
        claims = [
            [e.kind for e in led.events(op.tenant_id, op.operation_id)].count(EventKind.CLAIM)
            for op in ops
        ]
    assert {op.status for op in ops} == {OperationStatus.CONFIRMED}
    assert {op.attempts for op in ops} == {1}
    assert {op.idempotency_key for op in ops} == {m.idempotency_key for m in mail.effect_log()}
    assert claims == [1] * 30  # one claim (and so one dispatch) per entry, never a second


# --------------------------------------------------------------------------- lost receipts


def test_lost_receipt_is_unknown_then_reconciled(
    app: App, tmp_path: Path, ledger: Ledger, clock: FakeClock
) -> None:
    """A lost receipt stays unknown (under review) until the lagging search confirms it."""
    with FakeMail(tmp_path / "lag.db", clock=clock, search_delay=timedelta(minutes=5)) as mail:
        mail.faults.push(Fault.LOSE_RESPONSE)
        entry_id = business(app, "case-1")
        with app.relay(
            ledger=ledger,
            deliver=sender(mail),
            reconcile=sent_search(mail),
            clock=clock.now,
            review_recheck=timedelta(minutes=1),
        ) as relay:
            first = relay.run_until_idle()
            (entry,) = entries(app)
            (op,) = operations(app, ledger)
            assert first.review == 1
            assert entry.status is OutboxStatus.REVIEW
            assert op.status is OperationStatus.UNKNOWN
            clock.advance(timedelta(minutes=6))
            relay.run_until_idle()
        assert mail.effects == 1
        (entry,) = entries(app)
        assert entry.entry_id == entry_id
        assert entry.status is OutboxStatus.SENT
        (op,) = operations(app, ledger)
        assert op.status is OperationStatus.CONFIRMED
        kinds = [
            e.evidence.kind.value for e in ledger.events("default", op.operation_id) if e.evidence
        ]
        assert kinds == ["inconclusive", "confirmed"]


def test_lost_receipt_without_evidence_or_key_is_left_for_review(
    app: App, mail: FakeMail, ledger: Ledger, clock: FakeClock
) -> None:
    """With no reconciler and no key contract a lost receipt stays unknown: never resent."""
    mail.faults.push(Fault.LOSE_RESPONSE)
    business(app, "case-1")
    with app.relay(ledger=ledger, deliver=sender(mail), clock=clock.now) as relay:
        relay.run_until_idle()
        clock.advance(timedelta(hours=1))
        relay.run_until_idle()
    (entry,) = entries(app)
    (op,) = operations(app, ledger)
    assert entry.status is OutboxStatus.REVIEW
    assert op.status is OperationStatus.UNKNOWN
    assert op.attempts == 1
    assert mail.effects == 1


def test_lost_receipt_is_resent_under_the_same_key_inside_the_window(
    app: App, mail: FakeMail, ledger: Ledger, clock: FakeClock
) -> None:
    """A provider that honours keys gets one resend under the same key and applies nothing twice."""
    mail.faults.push(Fault.LOSE_RESPONSE)
    business(app, "case-1")
    with app.relay(ledger=ledger, deliver=sender(mail), contract=KEY_WINDOW, clock=clock.now) as r:
        r.run_until_idle()
    (entry,) = entries(app)
    (op,) = operations(app, ledger)
    assert entry.status is OutboxStatus.SENT
    assert op.status is OperationStatus.CONFIRMED
    assert op.attempts == 2
    assert mail.effects == 1
    assert mail.stats().replays == 1


@pytest.mark.parametrize("refusal", [Fault.REJECT, Fault.TRANSIENT])
def test_refused_resend_after_a_lost_receipt_stays_unknown(
    app: App, mail: FakeMail, ledger: Ledger, clock: FakeClock, refusal: Fault
) -> None:
    """Delivered, receipt lost, the resend refused: unknown for review, never dead or released."""
    mail.faults.script([Fault.LOSE_RESPONSE, refusal])
    business(app, "case-1")
    with app.relay(ledger=ledger, deliver=sender(mail), contract=KEY_WINDOW, clock=clock.now) as r:
        r.run_until_idle()
    (entry,) = entries(app)
    (op,) = operations(app, ledger)
    assert mail.effects == 1
    assert op.status is OperationStatus.UNKNOWN
    assert entry.status is OutboxStatus.REVIEW
    events = ledger.events("default", op.operation_id)
    assert [e.kind.value for e in events].count("reject") == 0
    assert events[-1].evidence is not None
    assert events[-1].evidence.kind.value == "inconclusive"


# --------------------------------------------------------------------------- refusals, order


def test_transient_failures_back_off_then_dead_letter(
    app: App, mail: FakeMail, ledger: Ledger, clock: FakeClock
) -> None:
    """Failures that provably sent nothing are retried later, then dead-lettered."""
    mail.faults.push(Fault.TRANSIENT, times=3, retry_after=10)
    business(app, "case-1")
    with app.relay(ledger=ledger, deliver=sender(mail), clock=clock.now, max_failures=3) as relay:
        for _ in range(3):
            relay.run_until_idle()
            assert relay.run_once().claimed == 0  # backing off: not due yet
            clock.advance(timedelta(seconds=11))
    (entry,) = entries(app)
    (op,) = operations(app, ledger)
    assert entry.status is OutboxStatus.DEAD
    assert entry.failures == 3
    assert op.status is OperationStatus.REJECTED
    assert mail.effects == 0


def test_definitive_rejection_is_dead_at_once(
    app: App, mail: FakeMail, ledger: Ledger, clock: FakeClock
) -> None:
    """A definitive refusal dead-letters the entry on the first try and is never retried."""
    mail.faults.push(Fault.REJECT, reason="mailbox does not exist")
    business(app, "case-1")
    with app.relay(ledger=ledger, deliver=sender(mail), clock=clock.now) as relay:
        relay.run_until_idle()
        clock.advance(timedelta(hours=1))
        assert relay.run_until_idle().claimed == 0
    (entry,) = entries(app)
    (op,) = operations(app, ledger)
    assert entry.status is OutboxStatus.DEAD
    assert op.status is OperationStatus.REJECTED
    assert "mailbox does not exist" in (entry.last_error or "")
    assert mail.stats().requests == 1


def test_ordered_entries_wait_for_the_earlier_one_of_their_key(
    app: App, mail: FakeMail, memory_ledger: InMemoryLedger, clock: FakeClock
) -> None:
    """An ordered entry is not sent while an earlier entry of the same key is still pending."""
    mail.faults.push(Fault.TRANSIENT, retry_after=30)
    outbox = Outbox(clock=clock.now)
    conn = app.connect()
    for step in ("opened", "closed"):
        outbox.enqueue(
            conn,
            topic="case",
            key="case-9",
            ordered=True,
            payload={"to": "o@example.com", "subject": step, "body": step},
        )
    conn.commit()
    conn.close()
    business(app, "case-other")  # another key is not held up
    with app.relay(ledger=memory_ledger, deliver=sender(mail), clock=clock.now) as relay:
        relay.run_until_idle()
        assert [m.target for m in mail.effect_log()] == ["owner-case-other@example.com"]
        clock.advance(timedelta(seconds=31))
        relay.run_until_idle()
    subjects = [m["subject"] for m in mail.search(to="o@example.com")]
    assert subjects == ["opened", "closed"]


def test_relay_before_setup_says_so(tmp_path: Path, memory_ledger: InMemoryLedger) -> None:
    """A relay on a database without the outbox table raises an error naming setup()."""
    with (
        OutboxRelay.from_conn_string(
            tmp_path / "empty.db", ledger=memory_ledger, deliver=lambda d: "x"
        ) as relay,
        pytest.raises(LedgerNotSetUp, match="setup"),
    ):
        relay.run_once()


# --------------------------------------------------------------------------- async relay


@asynccontextmanager
async def async_mail(mail: FakeMail) -> AsyncIterator[tuple[Any, Any]]:
    """Async ``deliver`` and ``reconcile`` over the fake (its calls run in a worker thread)."""
    deliver, reconcile = sender(mail), sent_search(mail)

    async def adeliver(d: Delivery) -> Receipt:
        return await asyncio.to_thread(deliver, d)

    async def areconcile(op: Operation) -> Evidence:
        return await asyncio.to_thread(reconcile, op)

    yield adeliver, areconcile


def test_async_relay_reconciles_a_lost_receipt(app: App, tmp_path: Path, clock: FakeClock) -> None:
    """``arun_until_idle`` on the async ledger takes a lost receipt to review, then to confirmed."""
    lagging = FakeMail(tmp_path / "lag.db", clock=clock, search_delay=timedelta(minutes=5))
    lagging.faults.push(Fault.LOSE_RESPONSE)
    business(app, "case-1")

    async def scenario() -> list[OperationStatus]:
        seen = []
        async with app.aledger(clock.now) as led, async_mail(lagging) as (deliver, reconcile):
            with app.relay(ledger=led, deliver=deliver, reconcile=reconcile, clock=clock.now) as r:
                for _ in range(2):
                    await r.arun_until_idle()
                    (entry,) = entries(app)
                    op = await led.get(entry.tenant_id, entry.operation_id)
                    assert op is not None
                    seen.append(op.status)
                    clock.advance(timedelta(minutes=6))
        return seen

    assert asyncio.run(scenario()) == [OperationStatus.UNKNOWN, OperationStatus.CONFIRMED]
    assert [e.status for e in entries(app)] == [OutboxStatus.SENT]
    assert lagging.effects == 1
    assert lagging.stats().replays == 0
    lagging.close()


def test_three_async_relays_deliver_each_entry_once(
    app: App, mail: FakeMail, clock: FakeClock
) -> None:
    """Three async relays (own connections, one async ledger) racing in one loop send once each."""
    for i in range(12):
        business(app, f"case-{i}")

    async def scenario() -> None:
        async with app.aledger(clock.now) as led, async_mail(mail) as (deliver, _):
            with (
                app.relay(ledger=led, deliver=deliver, clock=clock.now, batch_size=2) as a,
                app.relay(ledger=led, deliver=deliver, clock=clock.now, batch_size=2) as b,
                app.relay(ledger=led, deliver=deliver, clock=clock.now, batch_size=2) as c,
            ):
                await asyncio.gather(a.arun_until_idle(), b.arun_until_idle(), c.arun_until_idle())

    asyncio.run(scenario())
    assert mail.effects == 12
    assert mail.duplicates == 0
    assert {e.status for e in entries(app)} == {OutboxStatus.SENT}
    with app.ledger() as led:
        ops = operations(app, led)
    assert {op.status for op in ops} == {OperationStatus.CONFIRMED}
    assert {op.attempts for op in ops} == {1}


def test_sync_relay_refuses_an_async_ledger(app: App, mail: FakeMail) -> None:
    """``run_once`` with an async ledger says to use ``arun_once`` and claims nothing."""
    business(app, "case-1")

    async def scenario() -> None:
        async with app.aledger() as led:
            with (
                app.relay(ledger=led, deliver=sender(mail)) as relay,
                pytest.raises(InvalidInput, match="arun_once"),
            ):
                relay.run_once()

    asyncio.run(scenario())
    assert [(e.status, e.lease_owner) for e in entries(app)] == [(OutboxStatus.PENDING, None)]
    assert mail.effects == 0


def test_sync_relay_never_reads_an_awaitable_as_a_receipt(
    app: App, mail: FakeMail, memory_ledger: InMemoryLedger
) -> None:
    """A sync pass whose ``deliver`` returns a coroutine stops: nothing is sent or confirmed."""
    business(app, "case-1")

    async def send_later(d: Delivery) -> Receipt:
        return sender(mail)(d)  # pragma: no cover - never awaited by the sync driver

    with (
        app.relay(ledger=memory_ledger, deliver=lambda d: send_later(d)) as relay,
        pytest.raises(InvalidInput, match="arun_once"),
    ):
        relay.run_once()
    (op,) = operations(app, memory_ledger)
    assert op.status is OperationStatus.DISPATCHING  # claimed, never confirmed
    assert mail.effects == 0
