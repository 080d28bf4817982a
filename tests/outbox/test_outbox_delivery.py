"""The outbox after "accepted": webhooks and status checks record delivery, idempotent and fenced.

Same backends and helpers as ``test_outbox`` (``tests/_outbox.py``): a real ledger per backend, the
fake mail provider counting sends, entries read from the outbox table.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _outbox import App, app, business, clock, entries, ledger, mail, sender

from langgraph_effects.core.model import OperationStatus
from langgraph_effects.errors import InvalidInput, LedgerNotSetUp, StaleFencingToken
from langgraph_effects.ledger.base import Ledger
from langgraph_effects.outbox import (
    Delivery,
    Outbox,
    OutboxEntry,
    OutboxEvent,
    OutboxStatus,
    Receipt,
)
from langgraph_effects.testing.providers import FakeClock, FakeMail

__all__ = ["app", "clock", "ledger", "mail"]  # fixtures from _outbox


def sent_entry(app: App, ledger: Ledger, mail: FakeMail, clock: FakeClock) -> OutboxEntry:
    """Enqueue one notification and relay it: sent, and the receipt says only *accepted*."""
    business(app, "case-1")
    with app.relay(ledger=ledger, deliver=sender(mail), clock=clock.now) as relay:
        assert relay.run_until_idle().sent == 1
    (entry,) = entries(app)
    assert (entry.status, entry.receipt_state) == (OutboxStatus.SENT, "accepted")
    return entry


def webhook(app: App, **kwargs: Any) -> OutboxEntry | None:
    """The application's webhook handler: its own connection, ``Outbox.mark_delivered``."""
    conn = app.connect()
    try:
        return Outbox().mark_delivered(conn, **kwargs)
    finally:
        conn.close()


def events(app: App, entry_id: str) -> list[OutboxEvent]:
    conn = app.connect()
    try:
        return Outbox.events(conn, entry_id)
    finally:
        conn.close()


def test_a_webhook_delivered_twice_records_one_delivery(
    app: App, ledger: Ledger, mail: FakeMail, clock: FakeClock
) -> None:
    """The same webhook twice is one event; a reused id or a foreign message changes nothing."""
    entry = sent_entry(app, ledger, mail, clock)
    msg = entry.provider_message_id
    assert msg is not None
    first = webhook(app, message_id=msg, evidence_id="evt-1", detail={"status": "delivered"})
    again = webhook(app, message_id=msg, evidence_id="evt-1", detail={"status": "delivered"})
    assert first is not None
    assert again is not None
    assert first.receipt_state == again.receipt_state == "delivered"
    assert first.status is OutboxStatus.SENT
    with pytest.raises(InvalidInput, match="already recorded with other content"):
        webhook(app, message_id=msg, evidence_id="evt-1", detail={"status": "bounced"})
    assert webhook(app, message_id="msg-999999", evidence_id="evt-2") is None
    with pytest.raises(InvalidInput, match="another message"):
        webhook(app, entry_id=entry.entry_id, message_id="msg-999999", evidence_id="evt-3")
    recorded = events(app, entry.entry_id)
    assert [(e.evidence_id, e.kind, e.source, e.message_id, e.detail) for e in recorded] == [
        ("evt-1", "delivered", "webhook", msg, {"status": "delivered"})
    ]
    op = ledger.get(entry.tenant_id, entry.operation_id)
    assert op is not None
    assert (op.status, op.attempts) == (OperationStatus.CONFIRMED, 1)
    assert mail.effects == 1


def test_a_webhook_that_beats_the_receipt_is_kept(
    app: App, ledger: Ledger, mail: FakeMail, clock: FakeClock
) -> None:
    """A delivery webhook processed before the relay saves the receipt is never downgraded."""
    business(app, "case-1")
    send = sender(mail)

    def deliver(d: Delivery) -> Any:
        receipt = send(d)
        # The provider's webhook arrives while the relay still holds the entry.
        assert webhook(app, message_id=receipt.message_id, evidence_id="evt-0") is None
        early = webhook(app, entry_id=d.entry.entry_id, evidence_id="evt-1")
        assert early is not None
        assert (early.status, early.receipt_state) == (OutboxStatus.PENDING, "delivered")
        return receipt

    with app.relay(ledger=ledger, deliver=deliver, clock=clock.now) as relay:
        assert relay.run_until_idle().sent == 1
        assert relay.check_deliveries(lambda e: pytest.fail("nothing to check")).claimed == 0
    (entry,) = entries(app)
    assert (entry.status, entry.receipt_state) == (OutboxStatus.SENT, "delivered")
    assert entry.provider_message_id is not None
    assert [e.evidence_id for e in events(app, entry.entry_id)] == ["evt-1"]
    assert mail.effects == 1


def test_status_checks_record_the_delivery_once_it_happens(
    app: App, ledger: Ledger, tmp_path: Path, clock: FakeClock
) -> None:
    """A check while only accepted defers; after the provider delivers, one event is recorded."""
    slow = FakeMail(tmp_path / "slow.db", clock=clock, delivery_delay=timedelta(minutes=10))
    try:
        entry = sent_entry(app, ledger, slow, clock)

        def check(e: OutboxEntry) -> bool:
            assert e.provider_message_id is not None
            return slow.delivery_status(e.provider_message_id) == "delivered"

        with app.relay(ledger=ledger, deliver=sender(slow), clock=clock.now) as relay:
            report = relay.check_deliveries(check, recheck=timedelta(minutes=5))
            assert (report.claimed, report.delivered, report.deferred) == (1, 0, 1)
            assert relay.check_deliveries(check).claimed == 0  # not due before the recheck
            clock.advance(timedelta(minutes=11))
            report = relay.check_deliveries(check)
            assert (report.claimed, report.delivered, report.deferred) == (1, 1, 0)
            assert relay.check_deliveries(check).claimed == 0
        (after,) = entries(app)
        assert (after.receipt_state, after.lease_owner) == ("delivered", None)
        assert [(e.evidence_id, e.source) for e in events(app, entry.entry_id)] == [
            (f"status_check:{entry.provider_message_id}", "status_check")
        ]
        assert slow.effects == 1
    finally:
        slow.close()


def test_a_stale_fence_records_nothing(
    app: App, ledger: Ledger, mail: FakeMail, clock: FakeClock
) -> None:
    """A check whose claim was taken over cannot write; a stale token in mark_delivered neither."""
    entry = sent_entry(app, ledger, mail, clock)
    lease = timedelta(seconds=30)
    with (
        app.relay(ledger=ledger, deliver=sender(mail), clock=clock.now, lease_for=lease) as a,
        app.relay(ledger=ledger, deliver=sender(mail), clock=clock.now, lease_for=lease) as b,
    ):

        def slow_stale_check(e: OutboxEntry) -> bool:
            # A's lookup outlives its claim; B claims the entry and records the delivery.
            clock.advance(timedelta(minutes=1))
            assert b.check_deliveries(lambda e: True).delivered == 1
            return False  # A's answer is stale: it must not reschedule or touch the entry

        report = a.check_deliveries(slow_stale_check)
        assert (report.claimed, report.deferred, report.lost_lease) == (1, 0, 1)
    (after,) = entries(app)
    assert (after.receipt_state, after.lease_owner) == ("delivered", None)
    assert after.fencing_token == entry.fencing_token + 2
    with pytest.raises(StaleFencingToken):
        webhook(app, entry_id=entry.entry_id, evidence_id="evt-late", token=entry.fencing_token)
    assert [e.source for e in events(app, entry.entry_id)] == ["status_check"]


def test_setup_upgrades_a_version_1_outbox_and_keeps_its_entries(
    app: App, ledger: Ledger, mail: FakeMail, clock: FakeClock
) -> None:
    """An outbox at schema 1 with a sent entry: setup adds version 2, then delivery is recorded."""
    entry = sent_entry(app, ledger, mail, clock)
    conn = app.connect()
    try:
        conn.execute("DROP TABLE lge_outbox_events")  # back to what version 1 created
        conn.execute("DELETE FROM lge_outbox_schema_version WHERE version >= 2")
        conn.commit()
        Outbox().setup(conn)
        versions = conn.execute("SELECT version FROM lge_outbox_schema_version ORDER BY version")
        # SQLite has a version 3 (integer timestamps); it converts only what is still text.
        latest = 3 if app.backend == "sqlite" else 2
        assert [tuple(v) for v in versions.fetchall()] == [(v,) for v in range(1, latest + 1)]
    finally:
        conn.close()
    marked = webhook(app, message_id=entry.provider_message_id, evidence_id="evt-1")
    assert marked is not None
    assert (marked.entry_id, marked.receipt_state) == (entry.entry_id, "delivered")


def test_mark_delivered_on_an_outbox_not_migrated_says_to_run_setup(
    app: App, ledger: Ledger, mail: FakeMail, clock: FakeClock
) -> None:
    """Without the v2 events table, mark_delivered names the setup call and writes nothing."""
    entry = sent_entry(app, ledger, mail, clock)
    conn = app.connect()
    try:
        conn.execute("DROP TABLE lge_outbox_events")
        conn.commit()
    finally:
        conn.close()
    with pytest.raises(LedgerNotSetUp, match=r"Outbox\(\)\.setup"):
        webhook(app, entry_id=entry.entry_id, evidence_id="evt-1")
    assert entries(app)[0].receipt_state == "accepted"


def test_async_status_checks_and_webhooks_follow_the_same_rules(
    app: App, tmp_path: Path, clock: FakeClock
) -> None:
    """Async ledger, async check, and (PostgreSQL) the async webhook: same events, same fences."""
    slow = FakeMail(tmp_path / "slow.db", clock=clock, delivery_delay=timedelta(minutes=10))
    business(app, "case-1")
    business(app, "case-2")

    async def adeliver(d: Delivery) -> Any:
        return await asyncio.to_thread(sender(slow), d)

    async def acheck(e: OutboxEntry) -> bool:
        assert e.provider_message_id is not None
        status = await asyncio.to_thread(slow.delivery_status, e.provider_message_id)
        return status == "delivered"

    async def awebhook(**kwargs: Any) -> OutboxEntry | None:
        """The webhook handler of an asyncio application (psycopg async; sqlite3 stays sync)."""
        if app.backend == "sqlite":
            return webhook(app, **kwargs)
        import psycopg

        async with await psycopg.AsyncConnection.connect(app.target) as conn:
            return await Outbox().amark_delivered(conn, **kwargs)

    async def scenario() -> list[OutboxEntry]:
        async with app.aledger(clock.now) as led:
            with app.relay(ledger=led, deliver=adeliver, clock=clock.now) as relay:
                assert (await relay.arun_until_idle()).sent == 2
                first, second = entries(app)
                # case-2's webhook arrives twice, before any check
                for _ in range(2):
                    hook = await awebhook(message_id=second.provider_message_id, evidence_id="e2")
                    assert hook is not None
                    assert hook.receipt_state == "delivered"
                report = await relay.acheck_deliveries(acheck)
                assert (report.claimed, report.delivered, report.deferred) == (1, 0, 1)
                clock.advance(timedelta(minutes=11))
                report = await relay.acheck_deliveries(acheck)
                assert (report.claimed, report.delivered) == (1, 1)
                with pytest.raises(StaleFencingToken):
                    await awebhook(entry_id=first.entry_id, evidence_id="x", token=0)
        return entries(app)

    try:
        final = asyncio.run(scenario())
        assert [e.receipt_state for e in final] == ["delivered", "delivered"]
        assert [[ev.source for ev in events(app, e.entry_id)] for e in final] == [
            ["status_check"],
            ["webhook"],
        ]
        assert slow.effects == 2
    finally:
        slow.close()


def test_a_message_id_two_entries_share_is_refused_naming_both(
    app: App, ledger: Ledger, mail: FakeMail, clock: FakeClock
) -> None:
    """A provider that answered two entries with one message id: a webhook naming only that id
    is refused with both entry ids and marks neither; with the entry id it marks that one."""
    business(app, "case-1")
    business(app, "case-2")

    def deliver(delivery: Delivery) -> Receipt:
        sender(mail)(delivery)
        return Receipt(message_id="msg-shared")  # one id for both (a batch send)

    with app.relay(ledger=ledger, deliver=deliver, clock=clock.now) as relay:
        assert relay.run_until_idle().sent == 2
    first, second = entries(app)
    with pytest.raises(InvalidInput, match="2 entries") as refused:
        webhook(app, message_id="msg-shared", evidence_id="evt-1")
    assert first.entry_id in str(refused.value)
    assert second.entry_id in str(refused.value)
    assert [e.receipt_state for e in entries(app)] == ["accepted", "accepted"]
    marked = webhook(app, entry_id=second.entry_id, message_id="msg-shared", evidence_id="evt-1")
    assert marked is not None
    assert marked.entry_id == second.entry_id
    assert [e.receipt_state for e in entries(app)] == ["accepted", "delivered"]
