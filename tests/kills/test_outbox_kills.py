"""The outbox killed for real (SIGKILL): the business process after its commit, the relay
between the provider's acceptance and the receipt, and the outbox example at each crash
point; a new process relays, and the provider sends once.

The application, fixtures and relay children are the outbox room's (``tests/_outbox.py``).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _example_child import run_example
from _outbox import (
    App,
    app,
    business,
    clock,
    crash_child,
    entries,
    ledger,
    mail,
    operations,
    sender,
)

from langgraph_effects.core.model import EventKind, OperationStatus
from langgraph_effects.ledger.base import Ledger
from langgraph_effects.outbox import OutboxStatus
from langgraph_effects.testing.faults import CrashPoint, scaled
from langgraph_effects.testing.providers import FakeClock, FakeMail
from langgraph_effects.testing.scenario import run_in_forked_child

__all__ = ["app", "clock", "ledger", "mail"]  # fixtures from _outbox

OUTBOX_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "outbox_notify.py"


def test_committed_then_killed_before_relay_sends_exactly_once(
    app: App, mail: FakeMail, ledger: Ledger, clock: FakeClock
) -> None:
    """A child commits business + entry and is killed before any relay; a later relay sends once."""
    script = textwrap.dedent(
        """
        import os, signal, sqlite3, sys
        from langgraph_effects.outbox import Outbox
        backend, target = sys.argv[1], sys.argv[2]
        if backend == "sqlite":
            conn = sqlite3.connect(target, timeout=30); mark = "?"
        else:
            import psycopg
            conn = psycopg.connect(target); mark = "%s"
        conn.execute(f"INSERT INTO cases (id, status) VALUES ({mark}, 'closed')", ("case-7",))
        Outbox().enqueue(conn, topic="case.closed", key="case-7",
                         payload={"to": "o@example.com", "subject": "case-7", "body": "closed"})
        conn.commit()
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", script, app.backend, app.target], check=False, timeout=scaled(60)
    )
    assert child.returncode == -9
    assert [e.status for e in entries(app)] == [OutboxStatus.PENDING]
    assert mail.effects == 0
    with app.relay(ledger=ledger, deliver=sender(mail), clock=clock.now) as relay:
        relay.run_until_idle()
    with app.relay(ledger=ledger, deliver=sender(mail), clock=clock.now) as second:
        assert second.run_until_idle().claimed == 0
    assert mail.effects == 1
    (entry,) = entries(app)
    assert entry.status is OutboxStatus.SENT
    assert entry.receipt_state == "accepted"
    (op,) = operations(app, ledger)
    assert op.status is OperationStatus.CONFIRMED
    assert op.provider_result_id == entry.provider_message_id


# Every outcome on SQLite; on PostgreSQL the longest path (take over, mark unknown,
# claim again, resend, confirm): the decisions are shared, only the SQL differs.
@pytest.mark.parametrize(
    ("app", "scenario", "status", "entry_status", "replays"),
    [
        ("sqlite", "reconcile", OperationStatus.CONFIRMED, OutboxStatus.SENT, 0),
        ("sqlite", "review", OperationStatus.UNKNOWN, OutboxStatus.REVIEW, 0),
        ("sqlite", "key", OperationStatus.CONFIRMED, OutboxStatus.SENT, 1),
        pytest.param(
            "postgres",
            "key",
            OperationStatus.CONFIRMED,
            OutboxStatus.SENT,
            1,
            marks=pytest.mark.postgres,
        ),
    ],
    indirect=["app"],
)
def test_relay_killed_after_the_provider_accepted_never_sends_twice(
    app: App,
    tmp_path: Path,
    scenario: str,
    status: OperationStatus,
    entry_status: OutboxStatus,
    replays: int,
) -> None:
    """SIGKILLed between the provider's acceptance and the receipt, a new relay process
    reconciles (confirmed), leaves it for review, or resends under the same key: one message."""
    clock = FakeClock(path=tmp_path / "clock.db")
    mail = FakeMail(tmp_path / "mail.db", clock=clock)
    business(app, "case-1")
    died = run_in_forked_child(
        crash_child, app, mail, clock, scenario, crash_at=CrashPoint.AFTER_PROVIDER, mode="kill"
    )
    assert died.crashed_at is CrashPoint.AFTER_PROVIDER, died.error
    assert died.exitcode == -9
    with app.ledger(clock.now) as led:
        (op,) = operations(app, led)
    assert op.status is OperationStatus.DISPATCHING  # accepted, receipt never saved
    assert mail.effects == 1

    resumed = run_in_forked_child(crash_child, app, mail, clock, scenario)
    assert resumed.ok, resumed.error
    assert mail.effects == 1
    assert mail.duplicates == 0
    assert mail.stats().replays == replays  # a resend, if any, was under the same key
    (entry,) = entries(app)
    assert entry.status is entry_status
    with app.ledger(clock.now) as led:
        (op,) = operations(app, led)
        kinds = [e.kind for e in led.events(op.tenant_id, op.operation_id)]
    assert op.status is status
    assert EventKind.MARK_UNKNOWN in kinds  # the dead relay's lease went to unknown first
    assert op.attempts == 1 + replays
    if status is OperationStatus.CONFIRMED:
        (message,) = mail.search(idempotency_key=op.idempotency_key)
        assert op.provider_result_id == entry.provider_message_id == message["message_id"]
    mail.close()
    clock.close()


@pytest.mark.parametrize("crash_at", ["before_relay", "after_send"])
def test_example_relay_killed_then_resumed_sends_once(tmp_path: Path, crash_at: str) -> None:
    """Killed before the relay or after the provider sent, a new relay process sends once."""
    run_example(OUTBOX_EXAMPLE, "--dir", tmp_path, "--crash-at", crash_at, expect=137)
    resumed = run_example(OUTBOX_EXAMPLE, "--dir", tmp_path, "--resume")
    assert "sent, receipt" in resumed
    assert ": confirmed, events" in resumed
    with FakeMail(tmp_path / "mail.db") as mail:
        assert mail.effects == 1
        assert mail.effects_for("owner@example.com") == 1
