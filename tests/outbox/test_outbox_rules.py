"""Every rule the runner follows, the relay follows: the relay drives the decision engine.

The relay once had its own copy of the decision loop, and the copies drifted:
a reconciler's return was validated in one and not the other, the runner
recovered from four ledger errors and the relay from one, a receipt that
arrived after a takeover was settled differently. These tests state each rule
for the relay, counted at the fake mail provider: ``requests`` (every send that
reached it), ``effects`` (messages it applied) and ``duplicates``.

A race is made deterministic by ``Race``: the real ``InMemoryLedger``, with
another worker's (or an operator's) real write landing just before one of the
relay's calls, which the ledger itself then refuses.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects.core.model import (
    Decision,
    LeaseOwner,
    Operation,
    OperationStatus,
    ProviderContract,
    Resolution,
)
from langgraph_effects.errors import ConcurrentUpdate
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.outbox import (
    Delivery,
    Outbox,
    OutboxEntry,
    OutboxRelay,
    OutboxStatus,
    Receipt,
)
from langgraph_effects.testing.providers import FakeClock, FakeMail, Fault

S = OperationStatus
LEASE = timedelta(seconds=30)
KEY_WINDOW = ProviderContract(idempotency_window=timedelta(hours=24))
RIVAL = LeaseOwner(host="another-host", pid=4242, started_at=1.0, nonce="rival")
"""Another relay, on another host: never provably dead from here."""

Rival = Callable[[InMemoryLedger, Operation], Exception | None]
"""Another worker's real writes on the ledger; an error to raise in place of the
relay's call (a SQL ledger's), or None to let the ledger answer it."""


class Race:
    """A real ledger where a rival's write lands just before the relay's first ``verb`` call."""

    def __init__(self, ledger: InMemoryLedger, verb: str, rival: Rival) -> None:
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


class Env:
    """An application database with the outbox, a ledger, the fake mail provider, one clock."""

    def __init__(self, tmp_path: Path) -> None:
        self.clock = FakeClock()
        self.db = str(tmp_path / "app.db")
        conn = sqlite3.connect(self.db)
        Outbox().setup(conn)
        conn.close()
        self.ledger = InMemoryLedger(clock=self.clock.now)
        self.ledger.setup()
        self.mail = FakeMail(tmp_path / "mail.db", clock=self.clock)

    def enqueue(self, case_id: str = "case-1") -> None:
        conn = sqlite3.connect(self.db)
        Outbox(clock=self.clock.now).enqueue(
            conn,
            topic="case.closed",
            key=case_id,
            payload={"to": f"{case_id}@example.com", "subject": case_id, "body": "closed"},
        )
        conn.commit()
        conn.close()

    def deliver(self, delivery: Delivery) -> Receipt:
        p = delivery.entry.payload
        sent = self.mail.send(
            p["to"], p["subject"], p["body"], idempotency_key=delivery.idempotency_key
        )
        return Receipt(message_id=sent["message_id"])

    def relay(self, ledger: Any = None, **kwargs: Any) -> Any:
        return OutboxRelay.from_conn_string(
            self.db,
            ledger=ledger or self.ledger,
            deliver=kwargs.pop("deliver", self.deliver),
            clock=self.clock.now,
            lease_for=LEASE,
            **kwargs,
        )

    def entry(self) -> OutboxEntry:
        conn = sqlite3.connect(self.db)
        try:
            (entry,) = Outbox.list(conn)
        finally:
            conn.close()
        return entry

    def op(self) -> Operation:
        entry = self.entry()
        op = self.ledger.get(entry.tenant_id, entry.operation_id)
        assert op is not None
        return op

    def sent_once(self) -> None:
        """One send reached the provider, one message applied, none twice."""
        stats = self.mail.stats()
        assert (stats.requests, self.mail.effects, self.mail.duplicates) == (1, 1, 0)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    environment = Env(tmp_path)
    yield environment
    environment.mail.close()


# --------------------------------------------------------------------------- the reconciler


@pytest.mark.parametrize(
    "answer",
    [{"kind": "confirmed", "summary": "it was sent"}, True, "confirmed"],
    ids=["evidence-shaped-dict", "true", "text"],
)
def test_a_reconciler_returning_no_evidence_proves_nothing(env: Env, answer: Any) -> None:
    """A lost receipt, then a reconciler that returns something other than ``Evidence``
    (however conclusive it looks): inconclusive evidence naming it, the entry under review,
    never confirmed and never resent."""
    env.mail.faults.push(Fault.LOSE_RESPONSE)
    env.enqueue()
    with env.relay(reconcile=lambda op: answer) as relay:
        assert relay.run_until_idle().review == 1
    op = env.op()
    assert op.status is S.UNKNOWN
    assert env.entry().status is OutboxStatus.REVIEW
    evidence = [e.evidence for e in env.ledger.events(op.tenant_id, op.operation_id) if e.evidence]
    assert [e.kind.value for e in evidence] == ["inconclusive"]
    assert "not Evidence" in evidence[0].summary
    env.sent_once()


# --------------------------------------------------------------------------- ledger errors


def _take_over(ledger: InMemoryLedger, op: Operation) -> None:
    """Another relay finds the lease expired and marks the operation unknown (a new token)."""
    ledger.mark_unknown(
        op.tenant_id, op.operation_id, token=op.fencing_token, reason="lease expired"
    )


def taken_over(ledger: InMemoryLedger, op: Operation) -> Exception | None:
    _take_over(ledger, op)
    return None  # the relay's confirm meets the new token: StaleFencingToken


def taken_over_mid_write(ledger: InMemoryLedger, op: Operation) -> Exception | None:
    # A SQL ledger raises ConcurrentUpdate when the row keeps moving under its
    # conditional write; no backend does it on demand, so it is raised here, where
    # the takeover really landed.
    _take_over(ledger, op)
    return ConcurrentUpdate(op.operation_id, expected="dispatching", status="moving")


def confirmed_by_operator(ledger: InMemoryLedger, op: Operation) -> Exception | None:
    ledger.resolve(
        op.tenant_id,
        op.operation_id,
        Resolution(decision=Decision.CONFIRM, by="al", reason="seen in the provider's console"),
    )
    return None  # the relay's claim of a confirmed operation: IllegalTransition


def claimed_by_rival(ledger: InMemoryLedger, op: Operation) -> Exception | None:
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
    env: Env, error: str, verb: str, rival: Rival, status: S, entry_status: OutboxStatus
) -> None:
    """The record moved under one of the relay's writes: the relay re-reads it and goes on
    from there, as the runner does (never a poison entry, never a second send).

    ``confirm``: the receipt is kept and settles the operation. ``claim`` (the resend of
    a lost receipt under the key): a confirmation by an operator is replayed; a rival's
    live lease leaves the entry pending until that lease ends.
    """
    if verb == "claim":
        env.mail.faults.push(Fault.LOSE_RESPONSE)  # unknown, then a safe resend is claimed
    env.enqueue()
    raced = Race(env.ledger, verb, rival)
    with env.relay(raced, contract=KEY_WINDOW) as relay:
        report = relay.run_once()
    assert raced.raced, error
    op, entry = env.op(), env.entry()
    assert (op.status, entry.status) == (status, entry_status)
    assert entry.last_error is None or "relay failed" not in entry.last_error
    if entry_status is OutboxStatus.PENDING:
        assert entry.available_at == op.lease_expires_at  # look again once the rival's ends
        assert report.deferred == 1
    else:
        assert report.sent == 1
    env.sent_once()


# --------------------------------------------------------------------------- late receipts


def test_a_late_receipt_after_a_takeover_and_an_ordered_retry_is_never_sent_again(
    env: Env,
) -> None:
    """The relay's send outlives its lease: another relay takes over, a person orders a
    retry (``prepared``), and only then the provider's receipt arrives. The receipt makes
    the retry moot: the relay claims the operation and confirms it with that receipt,
    and the provider hears the message once."""

    def retry_ordered(ledger: InMemoryLedger, op: Operation) -> Exception | None:
        _take_over(ledger, op)
        ledger.resolve(
            op.tenant_id,
            op.operation_id,
            Resolution(decision=Decision.RETRY, by="al", reason="resend it"),
        )
        return None

    env.enqueue()
    raced = Race(env.ledger, "confirm", retry_ordered)
    with env.relay(raced) as relay:
        assert relay.run_once().sent == 1
    op, entry = env.op(), env.entry()
    assert op.status is S.CONFIRMED
    assert entry.status is OutboxStatus.SENT
    assert op.provider_result_id == entry.provider_message_id is not None
    receipts = [
        e.evidence
        for e in env.ledger.events(op.tenant_id, op.operation_id)
        if e.evidence is not None and e.evidence.source == "receipt"
    ]
    assert len(receipts) == 1
    assert receipts[0].provider_result_id == op.provider_result_id
    env.sent_once()


def test_a_late_receipt_settles_the_unknown_it_finds(env: Env) -> None:
    """Taken over while sending, no reconciler and no key window: the relay's own
    receipt is the evidence, so the operation is confirmed, not left for review."""
    env.enqueue()
    raced = Race(env.ledger, "confirm", taken_over)
    with env.relay(raced) as relay:
        assert relay.run_once().sent == 1
    assert env.op().status is S.CONFIRMED
    assert env.entry().receipt_state == "accepted"
    env.sent_once()
