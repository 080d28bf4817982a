"""Every rule the runner follows, the relay follows: the relay drives the decision engine.

The relay once had its own copy of the decision loop, and the copies drifted:
a reconciler's return was validated in one and not the other, the runner
recovered from four ledger errors and the relay from one, a receipt that
arrived after a takeover was settled differently. These tests state each rule
for the relay, counted at the fake mail provider: ``requests`` (every send that
reached it), ``effects`` (messages it applied) and ``duplicates``.

Each runs on every backend of the outbox room (``tests/_outbox.py``: the application's
database with the outbox, its real ledger, the fake mail provider, one clock). A race is
made deterministic by ``Race``: the backend's real ledger, with
another worker's (or an operator's) real write landing just before one of the
relay's calls, which the ledger itself then refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
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
    operations,
    sender,
)

from langgraph_effects.core.model import (
    Decision,
    LeaseOwner,
    Operation,
    OperationStatus,
    Resolution,
)
from langgraph_effects.errors import ConcurrentUpdate
from langgraph_effects.ledger.base import Ledger
from langgraph_effects.outbox import OutboxEntry, OutboxStatus
from langgraph_effects.testing.providers import FakeClock, FakeMail, Fault

__all__ = ["app", "clock", "ledger", "mail"]  # fixtures from _outbox

S = OperationStatus
LEASE = timedelta(seconds=30)
RIVAL = LeaseOwner(host="another-host", pid=4242, started_at=1.0, nonce="rival")
"""Another relay, on another host: never provably dead from here."""

Rival = Callable[[Ledger, Operation], Exception | None]
"""Another worker's real writes on the ledger; an error to raise in place of the
relay's call (a SQL ledger's), or None to let the ledger answer it."""


class Race:
    """A real ledger where a rival's write lands just before the relay's first ``verb`` call."""

    def __init__(self, ledger: Ledger, verb: str, rival: Rival) -> None:
        self.ledger = ledger
        self.verb = verb
        self.rival = rival
        self.raced = False

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.ledger, name)
        if name != self.verb or self.raced:
            return real

        def raced(tenant_id: str, operation_id: str, *args: Any, **kwargs: Any) -> Any:
            self.raced = True
            op = self.ledger.get(tenant_id, operation_id)
            assert op is not None
            error = self.rival(self.ledger, op)
            if error is not None:
                raise error
            return real(tenant_id, operation_id, *args, **kwargs)

        return raced


def relay(app: App, ledger: Any, mail: FakeMail, clock: FakeClock, **kwargs: Any) -> Any:
    """The relay of ``app`` over ``ledger`` (a real one, or a ``Race`` around it), sending
    through the fake mail on the test's clock."""
    return app.relay(
        ledger=ledger, deliver=sender(mail), clock=clock.now, lease_for=LEASE, **kwargs
    )


def only(app: App, ledger: Ledger) -> tuple[Operation, OutboxEntry]:
    """The one entry's delivery operation, and the entry."""
    ((op,), (entry,)) = operations(app, ledger), entries(app)
    return op, entry


def sent_once(mail: FakeMail) -> None:
    """One send reached the provider, one message applied, none twice."""
    stats = mail.stats()
    assert (stats.requests, mail.effects, mail.duplicates) == (1, 1, 0)


# --------------------------------------------------------------------------- the reconciler


@pytest.mark.parametrize(
    "answer",
    [{"kind": "confirmed", "summary": "it was sent"}, True, "confirmed"],
    ids=["evidence-shaped-dict", "true", "text"],
)
def test_a_reconciler_returning_no_evidence_proves_nothing(
    app: App, ledger: Ledger, mail: FakeMail, clock: FakeClock, answer: Any
) -> None:
    """A lost receipt, then a reconciler that returns something other than ``Evidence``
    (however conclusive it looks): inconclusive evidence naming it, the entry under review,
    never confirmed and never resent."""
    mail.faults.push(Fault.LOSE_RESPONSE)
    business(app, "case-1")
    with relay(app, ledger, mail, clock, reconcile=lambda op: answer) as r:
        assert r.run_until_idle().review == 1
    op, entry = only(app, ledger)
    assert op.status is S.UNKNOWN
    assert entry.status is OutboxStatus.REVIEW
    evidence = [e.evidence for e in ledger.events(op.tenant_id, op.operation_id) if e.evidence]
    assert [e.kind.value for e in evidence] == ["inconclusive"]
    assert "not Evidence" in evidence[0].summary
    sent_once(mail)


# --------------------------------------------------------------------------- ledger errors


def _take_over(ledger: Ledger, op: Operation) -> None:
    """Another relay finds the lease expired and marks the operation unknown (a new token)."""
    ledger.mark_unknown(
        op.tenant_id, op.operation_id, token=op.fencing_token, reason="lease expired"
    )


def taken_over(ledger: Ledger, op: Operation) -> Exception | None:
    _take_over(ledger, op)
    return None  # the relay's confirm meets the new token: StaleFencingToken


def taken_over_mid_write(ledger: Ledger, op: Operation) -> Exception | None:
    # A SQL ledger raises ConcurrentUpdate when the row keeps moving under its
    # conditional write; no backend does it on demand, so it is raised here, where
    # the takeover really landed.
    _take_over(ledger, op)
    return ConcurrentUpdate(op.operation_id, expected="dispatching", status="moving")


def confirmed_by_operator(ledger: Ledger, op: Operation) -> Exception | None:
    ledger.resolve(
        op.tenant_id,
        op.operation_id,
        Resolution(decision=Decision.CONFIRM, by="al", reason="seen in the provider's console"),
    )
    return None  # the relay's claim of a confirmed operation: IllegalTransition


def claimed_by_rival(ledger: Ledger, op: Operation) -> Exception | None:
    ledger.claim(op.tenant_id, op.operation_id, owner=RIVAL, lease_for=LEASE)
    return None  # the relay's claim: LeaseHeld


@pytest.mark.parametrize(
    ("error", "verb", "rival", "status", "entry_status"),
    [
        ("StaleFencingToken", "confirm", taken_over, S.CONFIRMED, OutboxStatus.SENT),
        ("ConcurrentUpdate", "confirm", taken_over_mid_write, S.CONFIRMED, OutboxStatus.SENT),
        ("IllegalTransition", "claim", confirmed_by_operator, S.CONFIRMED, OutboxStatus.SENT),
        ("LeaseHeld", "claim", claimed_by_rival, S.DISPATCHING, OutboxStatus.PENDING),
    ],
)
def test_the_relay_recovers_from_each_ledger_error_the_runner_survives(
    app: App,
    ledger: Ledger,
    mail: FakeMail,
    clock: FakeClock,
    error: str,
    verb: str,
    rival: Rival,
    status: S,
    entry_status: OutboxStatus,
) -> None:
    """The record moved under one of the relay's writes: the relay re-reads it and goes on
    from there, as the runner does (never a poison entry, never a second send).

    ``confirm``: the receipt is kept and settles the operation. ``claim`` (the resend of
    a lost receipt under the key): a confirmation by an operator is replayed; a rival's
    live lease leaves the entry pending until that lease ends.
    """
    if verb == "claim":
        mail.faults.push(Fault.LOSE_RESPONSE)  # unknown, then a safe resend is claimed
    business(app, "case-1")
    raced = Race(ledger, verb, rival)
    with relay(app, raced, mail, clock, contract=KEY_WINDOW) as r:
        report = r.run_once()
    assert raced.raced, error
    op, entry = only(app, ledger)
    assert (op.status, entry.status) == (status, entry_status)
    assert entry.last_error is None or "relay failed" not in entry.last_error
    if entry_status is OutboxStatus.PENDING:
        assert entry.available_at == op.lease_expires_at  # look again once the rival's ends
        assert report.deferred == 1
    else:
        assert report.sent == 1
    sent_once(mail)


# --------------------------------------------------------------------------- late receipts


def test_a_late_receipt_after_a_takeover_and_an_ordered_retry_is_never_sent_again(
    app: App, ledger: Ledger, mail: FakeMail, clock: FakeClock
) -> None:
    """The relay's send outlives its lease: another relay takes over, a person orders a
    retry (``prepared``), and only then the provider's receipt arrives. The receipt makes
    the retry moot: the relay claims the operation and confirms it with that receipt,
    and the provider hears the message once."""

    def retry_ordered(rival: Ledger, op: Operation) -> Exception | None:
        _take_over(rival, op)
        rival.resolve(
            op.tenant_id,
            op.operation_id,
            Resolution(decision=Decision.RETRY, by="al", reason="resend it"),
        )
        return None

    business(app, "case-1")
    raced = Race(ledger, "confirm", retry_ordered)
    with relay(app, raced, mail, clock) as r:
        assert r.run_once().sent == 1
    op, entry = only(app, ledger)
    assert op.status is S.CONFIRMED
    assert entry.status is OutboxStatus.SENT
    assert op.provider_result_id == entry.provider_message_id is not None
    receipts = [
        e.evidence
        for e in ledger.events(op.tenant_id, op.operation_id)
        if e.evidence is not None and e.evidence.source == "receipt"
    ]
    assert len(receipts) == 1
    assert receipts[0].provider_result_id == op.provider_result_id
    sent_once(mail)


def test_a_late_receipt_settles_the_unknown_it_finds(
    app: App, ledger: Ledger, mail: FakeMail, clock: FakeClock
) -> None:
    """Taken over while sending, no reconciler and no key window: the relay's own
    receipt is the evidence, so the operation is confirmed, not left for review."""
    business(app, "case-1")
    raced = Race(ledger, "confirm", taken_over)
    with relay(app, raced, mail, clock) as r:
        assert r.run_once().sent == 1
    op, entry = only(app, ledger)
    assert op.status is S.CONFIRMED
    assert entry.receipt_state == "accepted"
    sent_once(mail)
