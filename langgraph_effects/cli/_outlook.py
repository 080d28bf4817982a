"""What an operator may decide about an operation now, and what a retry would risk."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langgraph_effects.cli._text import _age, _iso, _seconds
from langgraph_effects.core.model import (
    Decision,
    Operation,
    OperationStatus,
    describe_actor,
)
from langgraph_effects.core.plan import (
    ResendRisk,
    key_expires_at,
    operator_decisions,
    recorded_contract,
    resend_risk,
)

S = OperationStatus


@dataclass(frozen=True)
class _Outlook:
    """What the next run does with an operation, and what a resend would risk, worded for
    an operator (what they may decide is ``core.plan.operator_decisions``)."""

    next_run: str
    risk: str

    def as_json(self, op: Operation, now: datetime) -> dict[str, Any]:
        return {
            "decisions": [d.value for d in operator_decisions(op)],
            "status_since": _iso(op.status_changed_at),
            "next_run": self.next_run,
            "risk": self.risk,
            "attempts": op.attempts,
            "idempotency_key": op.idempotency_key,
            "first_dispatched_at": _iso(op.first_dispatched_at),
            "key_age_seconds": (
                _seconds(now - op.first_dispatched_at) if op.first_dispatched_at else None
            ),
            # Recorded at prepare time from the effect's contract (None: the
            # provider promised no deduplication, or a row from before schema v2).
            "key_window_known": _recorded_expiry(op) is not None,
            "key_retention_seconds": op.key_retention_seconds,
            "key_expires_at": _iso(_recorded_expiry(op)),
            "key_window_open": _recorded_risk(op, now) is ResendRisk.DEDUPLICATED,
        }


_COMMAND = {
    Decision.CONFIRM: "resolve --confirm",
    Decision.REJECT: "reject",
    Decision.RETRY: "retry",
    Decision.APPROVE: "approve",
}
"""The command that takes each decision (``show`` lists those open to the operator)."""


def _recorded_expiry(op: Operation) -> datetime | None:
    """When a resend under the recorded key stops being deduplicated, from the record alone."""
    return key_expires_at(op, recorded_contract(op))


def _recorded_risk(op: Operation, now: datetime) -> ResendRisk:
    """``core.plan.resend_risk`` judged from the record alone: the CLI has no live contract."""
    return resend_risk(op, recorded_contract(op), now)


def _resend_risk(op: Operation, now: datetime) -> str | None:
    """Why a resend may not be deduplicated, judged from the record alone; None: it is.

    Only a recorded key with a recorded retention, first sent less than that
    retention ago, proves a resend safe (``core.plan.recorded_contract``).
    """
    match _recorded_risk(op, now):
        case ResendRisk.DEDUPLICATED | ResendRisk.NOT_SENT:
            return None
        case ResendRisk.NO_KEY:
            return "the provider got no idempotency key, so a resend is not deduplicated"
        case ResendRisk.NO_PROMISE:
            return (
                f"the provider promised no deduplication of idempotency key {op.idempotency_key!r}"
                " (no key contract recorded), so a resend may not be deduplicated"
            )
        case ResendRisk.WINDOW_CLOSED:
            return (
                f"the provider's key window closed at {_iso(_recorded_expiry(op))}: it may have "
                f"forgotten idempotency key {op.idempotency_key!r}, so a resend may not be "
                "deduplicated"
            )


def _key_expiry(op: Operation) -> str:
    expires = _recorded_expiry(op)
    if expires is not None:
        return f"{_iso(expires)} (recorded retention {op.key_retention_seconds:g} s)"
    if op.idempotency_key and op.first_dispatched_at is not None:
        return "- (no key window recorded: the provider promised no deduplication)"
    return "-"


def _outlook(op: Operation, now: datetime) -> _Outlook:
    """Say, from the record alone, what can be decided and what a retry would risk."""
    if op.status is S.CONFIRMED:
        return _Outlook(
            "replays the recorded result; the provider is not called",
            "none: confirmed is final. A retry would be a second effect, so none is offered.",
        )
    if op.status is S.REJECTED:
        return _Outlook(
            "returns the recorded rejection to the model",
            "none: rejected is final. Doing it anyway is a new operation with its own "
            "authorization.",
        )
    if op.status is S.DISPATCHING:
        if op.lease_alive(now):
            return _Outlook(
                f"waits: {describe_actor(op.lease_owner or '-')} holds the lease until "
                f"{_iso(op.lease_expires_at)}",
                "a call is in flight; wait for its receipt or for the lease to lapse.",
            )
        return _Outlook(
            "marks it unknown (the lease lapsed), then reconciles",
            "the last attempt may have reached the provider; wait for reconciliation.",
        )
    if op.status is S.PREPARED:
        if op.attempts > 0:
            return _Outlook(
                "dispatches it again under the same key and pinned payload (a retry was "
                "ordered, or the provider refused it transiently); no approval is asked",
                "it was sent before; the resend reuses the same key, so the provider can "
                "deduplicate it only while it remembers the key.",
            )
        if op.approved_by is not None:
            # Who approved is the record's authorization (show prints it beside).
            return _Outlook(
                "dispatches it for the first time without asking again, after the effect's "
                "authorize check if it has one",
                "none yet: never sent.",
            )
        return _Outlook(
            "asks a person for approval (an interrupt) before the first dispatch if its effect "
            "requires approval, as a record left unclaimed suggests; otherwise runs its "
            "authorize check and dispatches it. After approve it dispatches without asking; "
            "after reject it never does",
            "none yet: never sent.",
        )
    # unknown
    sent = f"sent {op.attempts} time(s), first at {_iso(op.first_dispatched_at)}"
    if op.first_dispatched_at is not None:
        sent += f" ({_age(now - op.first_dispatched_at)} ago)"
    problem = _resend_risk(op, now)
    if problem is None:
        risk = (
            f"{sent} under idempotency key {op.idempotency_key!r}. A retry resends the same "
            "key and pinned payload, and the provider deduplicates it until "
            f"{_iso(_recorded_expiry(op))} (its recorded retention): a retry cannot apply "
            "the effect twice."
        )
    elif not op.idempotency_key:
        risk = (
            f"{sent} with no idempotency key: the provider cannot deduplicate. If the earlier "
            "attempt was applied, a retry applies the effect twice. Check the provider first; "
            "confirm or reject if you can tell."
        )
    else:
        risk = (
            f"{sent}; {problem}. If the earlier attempt was applied, a retry may apply the "
            "effect twice. Check the provider first; confirm or reject if you can tell."
        )
    return _Outlook(
        "asks the provider through the effect's reconciler, if it has one; if that is "
        "inconclusive, "
        + (
            f"resends under the same key while the recorded key window is open (until "
            f"{_iso(_recorded_expiry(op))}), else asks a person (review)"
            if problem is None
            else "asks a person (review)"
        ),
        risk,
    )
