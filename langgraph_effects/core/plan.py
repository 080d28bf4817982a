"""What a (re)run of an effect tool call does next: the decision table as pure functions.

``plan`` reads the ledger's record (and facts the runner gathered: is the
lease ours, is its owner provably dead, did reconciliation already run in this
pass) and names the next step. ``classify`` sorts what a tool raised into the
three outcomes of the error policy; ``backoff`` says how long to wait before a
transient retry, or that the retries are spent. No I/O here: the runner
(``langgraph_effects.decide``) acts and records.

==========================  =================================================
ledger says                 step
==========================  =================================================
nothing yet                 ``DISPATCH_NEW`` (or ``PREPARE_FOR_APPROVAL``)
prepared, approval due      ``ASK_APPROVAL``
prepared                    ``AUTHORIZE_AND_CLAIM``
dispatching, our lease      ``DISPATCH_CLAIMED``
dispatching, owner alive    ``WAIT_PENDING`` (never dispatch, never review)
dispatching, lease dead     ``TAKE_OVER`` (mark unknown, then as unknown)
unknown                     ``RECONCILE`` -> ``RETRY_SAFE`` -> ``REVIEW``
confirmed                   ``REPLAY_CONFIRMED``
rejected                    ``REPLAY_REJECTED``
==========================  =================================================

A lease that merely expired is ``TAKE_OVER``, which leads to ``unknown`` and
reconciliation: an expired lease never by itself permits a second dispatch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from enum import StrEnum

from langgraph_effects.core.model import (
    Decision,
    EventKind,
    Evidence,
    EvidenceKind,
    Operation,
    OperationEvent,
    OperationStatus,
    ProviderContract,
)
from langgraph_effects.errors import EffectRejected, TransientProviderError

__all__ = [
    "RESEND_REFUSED",
    "Outcome",
    "ResendRisk",
    "Step",
    "backoff",
    "backoff_delay",
    "classify",
    "earlier_attempt_ambiguous",
    "key_expires_at",
    "operator_decisions",
    "plan",
    "receipt_conflict",
    "recorded_contract",
    "recorded_receipt",
    "refused_resend",
    "renewal_delay",
    "resend_refused",
    "resend_risk",
    "resent_unanswered",
    "retry_allowed",
]

S = OperationStatus


class Step(StrEnum):
    """The next thing the runner does for one tool call."""

    DISPATCH_NEW = "dispatch_new"
    """No record: authorize, write it already claimed (one commit), dispatch."""
    PREPARE_FOR_APPROVAL = "prepare_for_approval"
    """No record and approval required: write it unclaimed, then ask."""
    ASK_APPROVAL = "ask_approval"
    """Prepared, never dispatched, not yet approved: ``interrupt()`` for a person."""
    AUTHORIZE_AND_CLAIM = "authorize_and_claim"
    """Prepared (approved if needed): authorize, claim, dispatch."""
    DISPATCH_CLAIMED = "dispatch_claimed"
    """Dispatching under a lease this very call holds: dispatch."""
    WAIT_PENDING = "wait_pending"
    """Another live owner is dispatching: wait for its outcome, never dispatch."""
    TAKE_OVER = "take_over"
    """Dispatching under a dead lease: mark unknown (bumps the fence), then as unknown."""
    RECONCILE = "reconcile"
    """Unknown: ask the reconciler for evidence."""
    RETRY_SAFE = "retry_safe"
    """Unknown, no conclusive evidence, the provider's key window is open: resend."""
    REVIEW = "review"
    """Unknown and nothing else resolves it: ``interrupt()`` for a person."""
    REPLAY_CONFIRMED = "replay_confirmed"
    REPLAY_REJECTED = "replay_rejected"


def recorded_contract(op: Operation) -> ProviderContract | None:
    """The key contract the record itself keeps, for a reader with no live contract (the CLI).

    ``Operation.key_retention_seconds`` is what the effect's contract promised
    at prepare time, already less its safety margin
    (``core.model.key_retention_seconds``), so it comes back as a window with no
    margin. None: the record keeps no promise (no key contract, or a row from
    before schema v2 recorded retentions); nothing then proves a resend safe.
    """
    if op.key_retention_seconds is None:
        return None
    return ProviderContract(
        idempotency_window=timedelta(seconds=op.key_retention_seconds),
        safety_margin=timedelta(0),
    )


def key_expires_at(op: Operation, contract: ProviderContract | None) -> datetime | None:
    """When a resend of ``op`` stops being deduplicated: the stricter of record and contract.

    Two sources speak: the record (the key the tool was given and the
    retention the contract promised at prepare time) and ``contract``, the
    effect's live contract, which must honour keys. When both state an expiry
    the earlier wins: a contract tightened since the record was written applies
    at once, and one loosened since does not stretch what the provider was
    promised. A record with no key was given none to send, whatever the
    contract says now. A record with a key but no retention (prepared without a
    key contract, or before schema v2 recorded retentions) leaves the live
    contract to decide alone: a contract describes the provider, and the tool
    had the key all along. The CLI has no live contract and passes
    ``recorded_contract(op)``, so it trusts only a recorded retention. None: no
    resend is deduplicated (or never dispatched).
    """
    retention = None if contract is None else contract.key_retention
    first = op.first_dispatched_at
    if retention is None or first is None or op.idempotency_key is None:
        return None
    live = first + retention
    if op.key_retention_seconds is None:
        return live
    return min(live, first + timedelta(seconds=op.key_retention_seconds))


class ResendRisk(StrEnum):
    """What sending an operation again under its key would risk (``resend_risk``).

    The one rule behind the runner's safe retry (``retry_allowed``), the
    reviewer's ``retry_risk`` (``review.py``) and the operator's outlook
    (``cli/_outlook.py``), each worded for its reader.
    """

    NOT_SENT = "not_sent"
    """Never dispatched: a first send duplicates nothing."""
    DEDUPLICATED = "deduplicated"
    """The provider still deduplicates the key it was given: no second effect."""
    WINDOW_CLOSED = "window_closed"
    """The key's window has closed: the provider may have forgotten it."""
    NO_PROMISE = "no_promise"
    """A key was sent, but no contract promises the provider deduplicates it."""
    NO_KEY = "no_key"
    """The provider got no idempotency key: nothing deduplicates a resend."""


def resend_risk(op: Operation, contract: ProviderContract | None, now: datetime) -> ResendRisk:
    """What a resend of ``op`` at ``now`` would risk under ``contract`` (see ``key_expires_at``)."""
    if op.first_dispatched_at is None:
        return ResendRisk.NOT_SENT
    if op.idempotency_key is None:
        return ResendRisk.NO_KEY
    if contract is None or not contract.honours_key:
        return ResendRisk.NO_PROMISE
    expires = key_expires_at(op, contract)
    if expires is not None and now < expires:
        return ResendRisk.DEDUPLICATED
    return ResendRisk.WINDOW_CLOSED


def retry_allowed(op: Operation, contract: ProviderContract | None, now: datetime) -> bool:
    """True when the runner may resend on its own: the live contract honours keys and a
    resend is deduplicated (or the operation was never sent). See ``resend_risk``."""
    if contract is None or not contract.honours_key:
        return False
    return resend_risk(op, contract, now) in (ResendRisk.NOT_SENT, ResendRisk.DEDUPLICATED)


AWAITS_APPROVAL = "only a prepared operation never sent nor approved awaits approval"
"""Why an approval is refused where ``operator_decisions`` does not offer one."""


def operator_decisions(op: Operation) -> tuple[Decision, ...]:
    """What an operator may decide about ``op`` out of band, from the record alone.

    ``unknown``: confirm (it happened), reject (it did not) or order a retry.
    ``prepared`` and never sent nor approved (it waits for approval): approve or
    reject; ``prepared`` after an approval or an ordered retry: reject only (the
    next run dispatches it; approving it again decides nothing). In flight or
    final: nothing (a final record never moves; an in-flight one is its owner's).
    The ledger's ``resolve`` enforces the same; the CLI offers these.
    """
    if op.status is S.UNKNOWN:
        return (Decision.CONFIRM, Decision.REJECT, Decision.RETRY)
    if op.status is S.PREPARED:
        if op.attempts == 0 and op.approved_by is None:
            return (Decision.APPROVE, Decision.REJECT)
        return (Decision.REJECT,)
    return ()


def plan(
    op: Operation | None,
    *,
    now: datetime,
    contract: ProviderContract | None = None,
    has_reconciler: bool = False,
    require_approval: bool = False,
    claimed_by_us: bool = False,
    owner_dead: bool = False,
    reconciled: bool = False,
    retried: bool = False,
) -> Step:
    """Name the next step for a tool call whose ledger record is ``op``.

    Args:
        op: the record, or None when the ledger has none yet.
        now: the current time (lease expiry and key windows are computed from it).
        contract: the provider's idempotency contract, if any.
        has_reconciler: the effect declares a reconciler.
        require_approval: the effect needs a person's approval before its first dispatch.
        claimed_by_us: this call holds the record's current lease (it just claimed it).
        owner_dead: the lease owner is provably dead (same host, process gone).
        reconciled: reconciliation already ran in this pass and was inconclusive.
        retried: a safe retry already ran in this pass and ended unknown again;
            a second one would only loop, so a person decides.
    """
    if op is None:
        return Step.PREPARE_FOR_APPROVAL if require_approval else Step.DISPATCH_NEW
    match op.status:
        case S.CONFIRMED:
            return Step.REPLAY_CONFIRMED
        case S.REJECTED:
            return Step.REPLAY_REJECTED
        case S.PREPARED:
            # Approval binds to the first dispatch only; an operator-ordered retry
            # (attempts > 0) is itself a person's decision.
            if require_approval and op.authorization_ref is None and op.attempts == 0:
                return Step.ASK_APPROVAL
            return Step.AUTHORIZE_AND_CLAIM
        case S.DISPATCHING:
            if claimed_by_us:
                return Step.DISPATCH_CLAIMED
            if owner_dead or not op.lease_alive(now):
                return Step.TAKE_OVER
            return Step.WAIT_PENDING
        case S.UNKNOWN:
            if has_reconciler and not reconciled:
                return Step.RECONCILE
            if not retried and retry_allowed(op, contract, now):
                return Step.RETRY_SAFE
            return Step.REVIEW
    raise AssertionError(f"unhandled status {op.status!r}")  # pragma: no cover


class Outcome(StrEnum):
    """How a tool's exception is read (ARCHITECTURE.md, "Where each rule lives": errors)."""

    REJECTED = "rejected"
    """Definitive: the provider said no before acting. Never retried."""
    TRANSIENT = "transient"
    """Provably not applied (429, 503 before processing): retry with backoff."""
    AMBIGUOUS = "ambiguous"
    """Anything else: the provider may have acted. The operation becomes unknown."""


def classify(exc: BaseException) -> Outcome:
    """Sort an exception raised by an effect tool into one of the three outcomes."""
    if isinstance(exc, EffectRejected):
        return Outcome.REJECTED
    if isinstance(exc, TransientProviderError):
        return Outcome.TRANSIENT
    return Outcome.AMBIGUOUS


def earlier_attempt_ambiguous(op: Operation, events: Iterable[OperationEvent]) -> bool:
    """True when an earlier dispatch of ``op`` ended without a known outcome.

    A provider's refusal (definitive or transient) speaks for the dispatch it
    answers. It is conclusive about the *operation* only when no earlier
    dispatch may have acted, i.e. none ever ended in ``unknown``; otherwise the
    operation goes back to ``unknown`` and a person decides. Callers read the
    events only on this rare path (``op.attempts > 1``).
    """
    return op.attempts > 1 and any(e.to_status is S.UNKNOWN for e in events)


RESEND_REFUSED = "provider:resend_refused"
"""The evidence source of a resend the provider refused definitively while an earlier
attempt may have applied (``refused_resend``): the operation is ``unknown`` again."""


def refused_resend(summary: str) -> Evidence:
    """The evidence of a resend the provider refused while an earlier attempt may have
    applied (``resend_refused`` reads it back)."""
    return Evidence.inconclusive(summary, source=RESEND_REFUSED)


def resend_refused(events: Sequence[OperationEvent]) -> bool:
    """True when the operation last became ``unknown`` because the provider refused a
    resend (``refused_resend``): only a person may order another resend, and the review
    offers no retry."""
    last = next((e for e in reversed(events) if e.to_status is S.UNKNOWN), None)
    return last is not None and last.evidence is not None and last.evidence.source == RESEND_REFUSED


def resent_unanswered(events: Sequence[OperationEvent]) -> bool:
    """True when a safe resend (a claim from ``unknown``) ended ``unknown`` again and no
    decision followed it: a person decides now, and their answer is read before any
    other dispatch (the last word before dispatch wins).

    The ``retried`` of ``plan`` across runs of a task: a review's resume runs the task
    from its first line, and resending first would make every answer late (its round
    gone, a reject read after a resend that may have acted). A person's ordered retry
    (``resolve``: ``unknown`` -> ``prepared``) or an approval is a decision: a safe
    resend is allowed again after the dispatch it orders.
    """
    for event in reversed(events):
        if event.kind is EventKind.CLAIM and event.from_status is S.UNKNOWN:
            return True
        if event.kind in (EventKind.RESOLVE, EventKind.APPROVE):
            return False
    return False


def backoff_delay(contract: ProviderContract | None, retries_done: int) -> float:
    """The exponential wait after ``retries_done`` retries: ``backoff_initial`` doubled each
    time, capped at ``backoff_max`` (the one formula of ``backoff`` and the outbox relay's)."""
    policy = contract or ProviderContract()
    return float(min(policy.backoff_initial * 2.0**retries_done, policy.backoff_max))


def backoff(
    contract: ProviderContract | None, retries_done: int, retry_after: float | None
) -> float | None:
    """Seconds to wait before transient retry number ``retries_done + 1``, or None when spent.

    Exponential from ``backoff_initial``, capped at ``backoff_max``. A provider's
    ``retry_after`` is honoured: never retried sooner; a ``retry_after`` above
    ``backoff_max`` is too long to hold a worker, so the retries stop (the
    runner releases the operation to ``prepared`` and a later run sends it).
    Without a contract the defaults of ``ProviderContract()`` apply.
    """
    policy = contract or ProviderContract()
    if retries_done >= policy.max_transient_retries:
        return None
    delay = backoff_delay(policy, retries_done)
    if retry_after is not None:
        if retry_after > policy.backoff_max:
            return None
        delay = max(delay, retry_after)
    return delay


RENEWAL_RETRY_INITIAL = 0.05
"""First retry of a failed lease renewal, in seconds; doubled after each failure."""


def renewal_delay(failures: int, interval: float) -> float:
    """Seconds until the next renewal of an in-flight dispatch's lease.

    ``failures`` is how many renewals failed in a row without proving the lease
    lost (a dropped connection, a locked database). None failed: the regular
    ``interval`` (a third of the lease). After a failure, retry soon and back
    off (0.05 s, 0.1 s, ...), never later than ``interval``: many tries fit
    before the lease would lapse, so one dropped connection never lets a live
    worker's lease expire. Renewal is fenced, so a try after a lapse is still
    safe: it succeeds only while nobody took the operation over. A renewal
    refused by the fence (stale token, no longer dispatching) stops instead.
    """
    if failures <= 0:
        return interval
    return float(min(RENEWAL_RETRY_INITIAL * 2 ** (failures - 1), interval))


def receipt_retry_delay(failures: int, interval: float) -> float | None:
    """Seconds before the next try of a receipt whose commit failed ``failures`` times in a
    row without an answer from the ledger (a dropped connection, a failover), or None: give up.

    The backoff of a lease renewal after a failure (``renewal_delay``: 0.05 s, 0.1 s, ...),
    for as long as the delays add up to at most ``interval`` (a third of the lease: 10 s by
    default, seven tries). The lease was renewed until the provider answered, so it is still
    this worker's while the receipt is retried (no takeover races it; the write is fenced
    anyway), and each try borrows a fresh connection (the pool drops a broken one).
    """
    spent = sum(renewal_delay(n, interval) for n in range(1, failures))
    delay = renewal_delay(failures, interval)
    return delay if spent + delay <= interval else None


def recorded_receipt(events: Sequence[OperationEvent]) -> Evidence | None:
    """The latest receipt the log keeps without having applied it, if any.

    A receipt refused by the fence (its worker's lease was taken over) is kept
    as an ``evidence`` event with conclusive ``confirmed`` evidence, before
    anything else is tried. If that worker dies before the receipt settles the
    operation, the next run finds it here: on an ``unknown`` record it is
    conclusive and confirms it, before any reconciler, resend or person.
    """
    for event in reversed(events):
        evidence = event.evidence
        if (
            event.kind is EventKind.EVIDENCE
            and evidence is not None
            and evidence.kind is EvidenceKind.CONFIRMED
        ):
            return evidence
    return None


def receipt_conflict(op: Operation, events: Sequence[OperationEvent]) -> Evidence | None:
    """The recorded proof that a rejected operation was applied after all, if the log holds one.

    On a ``rejected`` record (a person, or a refused resend, decided first) a
    ``recorded_receipt`` is a conflict: terminal states never move, so the
    record stays ``rejected`` and the answers name the conflict for a person
    to review.
    """
    return recorded_receipt(events) if op.status is S.REJECTED else None
