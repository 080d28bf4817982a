"""The resume decision table and the error policy, as pure functions (no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from langgraph_effects.core.model import (
    Decision,
    EventKind,
    Evidence,
    Operation,
    OperationEvent,
    OperationStatus,
    ProviderContract,
    key_retention_seconds,
    replaced_reason,
)
from langgraph_effects.core.plan import (
    Outcome,
    ResendRisk,
    Step,
    backoff,
    classify,
    key_expires_at,
    operator_decisions,
    plan,
    recorded_contract,
    refused_resend,
    resend_refused,
    resend_risk,
    resent_unanswered,
    retry_allowed,
)
from langgraph_effects.errors import EffectRejected, TransientProviderError

S = OperationStatus
NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
WINDOW = ProviderContract(idempotency_window=timedelta(hours=24))


def op(status: OperationStatus, **changes: object) -> Operation:
    base: dict[str, object] = {
        "tenant_id": "t",
        "operation_id": "op-1",
        "action": "crm.close",
        "payload_digest": "0" * 64,
        "idempotency_key": "lge-op-1",
        "status": status,
        "created_at": NOW - timedelta(hours=1),
        "updated_at": NOW - timedelta(hours=1),
    }
    if status is not S.PREPARED:
        base |= {"attempts": 1, "first_dispatched_at": NOW - timedelta(hours=1)}
    if status is S.DISPATCHING:
        base |= {"lease_owner": "h|1|1.00|n", "lease_expires_at": NOW + timedelta(seconds=20)}
    return Operation(**(base | changes))  # type: ignore[arg-type]


def test_no_record_dispatches_new() -> None:
    """A call the ledger has never seen is written ahead and dispatched."""
    assert plan(None, now=NOW) is Step.DISPATCH_NEW


def test_no_record_with_approval_prepares_first() -> None:
    """An effect needing approval is written unclaimed before anyone is asked."""
    assert plan(None, now=NOW, require_approval=True) is Step.PREPARE_FOR_APPROVAL


def test_terminal_states_replay() -> None:
    """Confirmed and rejected records are replayed, never dispatched."""
    assert plan(op(S.CONFIRMED), now=NOW) is Step.REPLAY_CONFIRMED
    assert plan(op(S.REJECTED), now=NOW) is Step.REPLAY_REJECTED


def test_prepared_asks_approval_once() -> None:
    """A prepared, unapproved, never-dispatched effect that needs approval asks a person."""
    assert plan(op(S.PREPARED), now=NOW, require_approval=True) is Step.ASK_APPROVAL
    approved = op(S.PREPARED, authorization_ref="approved-by:alice")
    assert plan(approved, now=NOW, require_approval=True) is Step.AUTHORIZE_AND_CLAIM
    operator_retry = op(S.PREPARED, attempts=1)
    assert plan(operator_retry, now=NOW, require_approval=True) is Step.AUTHORIZE_AND_CLAIM


def test_live_lease_of_another_owner_waits() -> None:
    """A live lease held by someone else is pending work: wait, never dispatch or review."""
    assert plan(op(S.DISPATCHING), now=NOW) is Step.WAIT_PENDING


def test_own_claim_dispatches() -> None:
    """The call that holds the current lease dispatches."""
    assert plan(op(S.DISPATCHING), now=NOW, claimed_by_us=True) is Step.DISPATCH_CLAIMED


def test_dead_or_expired_lease_is_taken_over() -> None:
    """A provably dead owner or an expired lease leads to take-over (unknown), not dispatch."""
    assert plan(op(S.DISPATCHING), now=NOW, owner_dead=True) is Step.TAKE_OVER
    expired = op(S.DISPATCHING, lease_expires_at=NOW - timedelta(seconds=1))
    assert plan(expired, now=NOW, contract=WINDOW) is Step.TAKE_OVER


def test_unknown_reconciles_then_retries_then_reviews() -> None:
    """Unknown: reconcile first; inconclusive -> safe retry inside the window; else review."""
    unknown = op(S.UNKNOWN)
    assert plan(unknown, now=NOW, has_reconciler=True, contract=WINDOW) is Step.RECONCILE
    after = plan(unknown, now=NOW, has_reconciler=True, reconciled=True, contract=WINDOW)
    assert after is Step.RETRY_SAFE
    assert plan(unknown, now=NOW, contract=WINDOW, retried=True) is Step.REVIEW
    assert plan(unknown, now=NOW) is Step.REVIEW


def test_closed_key_window_reviews() -> None:
    """Past first dispatch + window - margin a resend could duplicate: a person decides."""
    old = op(S.UNKNOWN, first_dispatched_at=NOW - timedelta(hours=23, minutes=56))
    assert plan(old, now=NOW, contract=WINDOW) is Step.REVIEW
    assert not retry_allowed(old, WINDOW, NOW)
    assert retry_allowed(op(S.UNKNOWN), WINDOW, NOW)


def test_resend_risk_names_why_a_resend_is_or_is_not_deduplicated() -> None:
    """One rule, five answers: never sent, deduplicated, window closed, no promise, no key."""
    assert resend_risk(op(S.PREPARED), None, NOW) is ResendRisk.NOT_SENT
    assert resend_risk(op(S.UNKNOWN), WINDOW, NOW) is ResendRisk.DEDUPLICATED
    late = NOW + timedelta(hours=23)
    assert resend_risk(op(S.UNKNOWN), WINDOW, late) is ResendRisk.WINDOW_CLOSED
    assert resend_risk(op(S.UNKNOWN), ProviderContract(), NOW) is ResendRisk.NO_PROMISE
    assert resend_risk(op(S.UNKNOWN), None, NOW) is ResendRisk.NO_PROMISE
    assert resend_risk(op(S.UNKNOWN, idempotency_key=None), WINDOW, NOW) is ResendRisk.NO_KEY


def test_the_recorded_contract_judges_from_the_record_alone() -> None:
    """A recorded retention reads back as a window without margin; none records no promise."""
    record = op(S.UNKNOWN, key_retention_seconds=7200.0)
    recorded = recorded_contract(record)
    assert recorded is not None
    assert key_expires_at(record, recorded) == NOW + timedelta(hours=1)
    assert resend_risk(record, recorded, NOW) is ResendRisk.DEDUPLICATED
    assert resend_risk(record, recorded, NOW + timedelta(hours=1)) is ResendRisk.WINDOW_CLOSED
    assert recorded_contract(op(S.UNKNOWN)) is None


# -- the key retention: one computation, record and contract combined


def _keyed_unknown(**changes: Any) -> Operation:
    """An unknown first dispatched at NOW, recording the retention WINDOW promises."""
    base: dict[str, Any] = {
        "tenant_id": "t",
        "operation_id": "op-1",
        "action": "crm.close",
        "payload_digest": "0" * 64,
        "status": S.UNKNOWN,
        "attempts": 1,
        "idempotency_key": "lge-op-1",
        "key_retention_seconds": key_retention_seconds(WINDOW),
        "first_dispatched_at": NOW,
        "created_at": NOW,
        "updated_at": NOW,
    }
    return Operation(**(base | changes))


def test_the_recorded_retention_is_the_window_minus_the_margin() -> None:
    """A key contract records window - margin; no key contract records none."""
    assert key_retention_seconds(WINDOW) == (24 * 60 - 5) * 60
    assert key_retention_seconds(ProviderContract()) is None
    assert key_retention_seconds(None) is None
    record = _keyed_unknown()
    expected = NOW + timedelta(hours=24) - timedelta(minutes=5)
    assert key_expires_at(record, recorded_contract(record)) == expected


def test_plan_takes_the_stricter_of_record_and_live_contract() -> None:
    """A retry is safe only while both the record's and the contract's windows are open."""
    short_record = _keyed_unknown(key_retention_seconds=3600.0)
    assert key_expires_at(short_record, WINDOW) == NOW + timedelta(hours=1)
    assert retry_allowed(short_record, WINDOW, NOW + timedelta(minutes=59))
    assert not retry_allowed(short_record, WINDOW, NOW + timedelta(hours=2))
    tightened = ProviderContract(idempotency_window=timedelta(minutes=30))
    assert key_expires_at(_keyed_unknown(), tightened) == NOW + timedelta(minutes=25)
    assert not retry_allowed(_keyed_unknown(), tightened, NOW + timedelta(hours=1))
    assert not retry_allowed(_keyed_unknown(), None, NOW)  # no live contract: never
    assert not retry_allowed(_keyed_unknown(idempotency_key=None), WINDOW, NOW)  # no key was given
    legacy = _keyed_unknown(key_retention_seconds=None)  # a row from before schema v2
    assert key_expires_at(legacy, WINDOW) == NOW + timedelta(hours=24) - timedelta(minutes=5)
    assert retry_allowed(legacy, WINDOW, NOW + timedelta(hours=1))


@given(
    status=st.sampled_from(list(OperationStatus)),
    contract=st.sampled_from([None, WINDOW, ProviderContract()]),
    has_reconciler=st.booleans(),
    require_approval=st.booleans(),
    claimed=st.booleans(),
    owner_dead=st.booleans(),
    reconciled=st.booleans(),
    retried=st.booleans(),
    lease_offset=st.integers(min_value=-120, max_value=120),
    dispatched_hours_ago=st.integers(min_value=0, max_value=48),
)
def test_no_blind_second_dispatch(
    status: OperationStatus,
    contract: ProviderContract | None,
    has_reconciler: bool,
    require_approval: bool,
    claimed: bool,
    owner_dead: bool,
    reconciled: bool,
    retried: bool,
    lease_offset: int,
    dispatched_hours_ago: int,
) -> None:
    """Over every input: an operation that may have reached the provider is only resent
    under an open key window (or by the lease holder), and terminal ones only replay."""
    record = op(
        status,
        lease_expires_at=NOW + timedelta(seconds=lease_offset) if status is S.DISPATCHING else None,
        first_dispatched_at=None
        if status is S.PREPARED
        else NOW - timedelta(hours=dispatched_hours_ago),
    )
    step = plan(
        record,
        now=NOW,
        contract=contract,
        has_reconciler=has_reconciler,
        require_approval=require_approval,
        claimed_by_us=claimed,
        owner_dead=owner_dead,
        reconciled=reconciled,
        retried=retried,
    )
    if status.terminal:
        assert step in (Step.REPLAY_CONFIRMED, Step.REPLAY_REJECTED)
    if step is Step.RETRY_SAFE:
        assert status is S.UNKNOWN
        assert retry_allowed(record, contract, NOW)
    if step is Step.DISPATCH_CLAIMED:
        assert status is S.DISPATCHING
        assert claimed
    if status is S.DISPATCHING and not claimed:
        assert step in (Step.WAIT_PENDING, Step.TAKE_OVER)
        if step is Step.WAIT_PENDING:
            assert record.lease_alive(NOW)
            assert not owner_dead


def test_classify_errors() -> None:
    """EffectRejected is definitive, TransientProviderError retryable, anything else ambiguous."""
    assert classify(EffectRejected("no")) is Outcome.REJECTED
    assert classify(TransientProviderError("busy", retry_after=1)) is Outcome.TRANSIENT
    assert classify(TimeoutError()) is Outcome.AMBIGUOUS
    assert classify(RuntimeError("boom")) is Outcome.AMBIGUOUS


@pytest.mark.parametrize("retry_after", [None, 0.5, 1.5])
def test_backoff_honours_retry_after_and_is_bounded(retry_after: float | None) -> None:
    """Backoff grows, never retries sooner than retry_after, and stops after the budget."""
    contract = ProviderContract(max_transient_retries=3, backoff_initial=0.1, backoff_max=2.0)
    delays = [backoff(contract, n, retry_after) for n in range(4)]
    assert delays[3] is None
    for d in delays[:3]:
        assert d is not None
        assert d >= (retry_after or 0)
    assert delays[0] is not None
    assert delays[1] is not None
    assert delays[0] <= delays[1]


def test_backoff_gives_up_on_long_retry_after() -> None:
    """A retry_after longer than the backoff cap releases the worker instead of sleeping."""
    assert backoff(ProviderContract(backoff_max=2.0), 0, 60.0) is None


def test_what_an_operator_may_decide_follows_the_record() -> None:
    """Unknown: confirm, reject, retry. Prepared and waiting for approval: approve or reject;
    prepared after an approval or an ordered retry: reject only. In flight or final: nothing."""
    D = Decision
    assert operator_decisions(op(S.UNKNOWN)) == (D.CONFIRM, D.REJECT, D.RETRY)
    assert operator_decisions(op(S.PREPARED)) == (D.APPROVE, D.REJECT)
    approved = op(S.PREPARED, authorization_ref="approved-by:ana")
    assert operator_decisions(approved) == (D.REJECT,)
    assert operator_decisions(op(S.PREPARED, attempts=1)) == (D.REJECT,)
    for status in (S.DISPATCHING, S.CONFIRMED, S.REJECTED):
        assert operator_decisions(op(status)) == ()


def test_an_edited_call_names_its_replacement_on_its_rejected_record() -> None:
    """A call a reviewer edited is rejected with a reason naming its replacement, read
    back as ``replaced_by``; the text ledgers already hold reads the same; a rejection
    for another reason, or a record not rejected, names none."""
    edited = op(S.REJECTED, error=replaced_reason("lge-op-2", "ana"))
    assert edited.replaced_by == "lge-op-2"
    stored = op(S.REJECTED, error="replaced by lge-op-2 (edited by ana)")  # as written before
    assert stored.replaced_by == "lge-op-2"
    assert op(S.REJECTED, error="the provider refused it").replaced_by is None
    assert op(S.REJECTED).replaced_by is None
    assert op(S.UNKNOWN, error=replaced_reason("lge-op-2", "ana")).replaced_by is None


def _event(
    kind: EventKind,
    frm: OperationStatus | None,
    to: OperationStatus,
    evidence: Evidence | None = None,
) -> OperationEvent:
    return OperationEvent(
        tenant_id="t",
        operation_id="op",
        seq=0,
        kind=kind,
        from_status=frm,
        to_status=to,
        actor="a",
        evidence=evidence,
        at=NOW,
    )


def test_a_resend_the_provider_refused_is_read_from_the_last_unknown() -> None:
    """The operation last became unknown because the provider refused a resend: that
    evidence says so, and older ledgers' evidence (the same source) reads the same; an
    unknown for another reason after it does not."""
    refused = [
        _event(EventKind.PREPARE, None, S.DISPATCHING),
        _event(EventKind.MARK_UNKNOWN, S.DISPATCHING, S.UNKNOWN),
        _event(EventKind.CLAIM, S.UNKNOWN, S.DISPATCHING),
        _event(EventKind.MARK_UNKNOWN, S.DISPATCHING, S.UNKNOWN, refused_resend("no")),
    ]
    assert resend_refused(refused)
    stored = Evidence.inconclusive("no", source="provider:resend_refused")  # as written before
    assert resend_refused(
        [*refused[:3], _event(EventKind.MARK_UNKNOWN, S.DISPATCHING, S.UNKNOWN, stored)]
    )
    assert not resend_refused(refused[:2])
    later = Evidence.inconclusive("timed out", source="provider")
    assert not resend_refused(
        [
            *refused,
            _event(EventKind.RESOLVE, S.UNKNOWN, S.PREPARED),
            _event(EventKind.CLAIM, S.PREPARED, S.DISPATCHING),
            _event(EventKind.MARK_UNKNOWN, S.DISPATCHING, S.UNKNOWN, later),
        ]
    )


def test_a_safe_resend_nobody_decided_since_holds_the_next_one() -> None:
    """A claim from unknown (a safe resend) with no decision after it: a person decides
    first; after a person's ordered retry (resolve) or approval, a safe resend is allowed."""
    first = [
        _event(EventKind.PREPARE, None, S.DISPATCHING),
        _event(EventKind.MARK_UNKNOWN, S.DISPATCHING, S.UNKNOWN),
        _event(EventKind.EVIDENCE, S.UNKNOWN, S.UNKNOWN),
    ]
    assert not resent_unanswered(first)
    resent = [
        *first,
        _event(EventKind.CLAIM, S.UNKNOWN, S.DISPATCHING),
        _event(EventKind.MARK_UNKNOWN, S.DISPATCHING, S.UNKNOWN),
    ]
    assert resent_unanswered(resent)
    ordered = [
        *resent,
        _event(EventKind.RESOLVE, S.UNKNOWN, S.PREPARED),
        _event(EventKind.CLAIM, S.PREPARED, S.DISPATCHING),
        _event(EventKind.MARK_UNKNOWN, S.DISPATCHING, S.UNKNOWN),
    ]
    assert not resent_unanswered(ordered)
