"""Assertions for your own test suite: no duplicates, honest unknowns, no unevidenced rejections.

Each ``assert_*`` reads what is durable (the fake providers' counts, the
ledger's records and event log) and raises ``AssertionError`` naming every
offending operation. The pure functions beside them return the same findings
as lines of text, for reports (the scenario runner and the campaign use them).

The rules (ARCHITECTURE.md, "Where each rule lives"):

* **No duplicate effects**: each intent applied at most once at the provider.
* **Every unknown is accounted for**: an operation left ``unknown`` carries
  evidence (a reconciliation's record) or is pending a person's review.
* **No unevidenced rejection**: once an operation has been ``unknown``, only
  a resolution on conclusive evidence or an operator's decision may make it
  ``rejected``. A refusal of a *resend* (revoked authorization, validation)
  proves the resend did nothing; it says nothing about the earlier attempt.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from langgraph_effects.core.model import (
    EventKind,
    EvidenceKind,
    Operation,
    OperationEvent,
    OperationStatus,
)

__all__ = [
    "assert_no_duplicate_effects",
    "assert_no_unevidenced_rejections",
    "assert_unknowns_accounted",
    "mislabelled_operations",
    "unaccounted_unknowns",
    "unevidenced_rejections",
]

S = OperationStatus


def _by_operator(event: OperationEvent) -> bool:
    return event.evidence is not None and event.evidence.source == "operator"


def unevidenced_rejections(op_id: str, events: Sequence[OperationEvent]) -> list[str]:
    """Rejections of a once-unknown operation not backed by conclusive evidence or an operator."""
    problems: list[str] = []
    was_unknown = False
    for event in events:
        moved = event.from_status is not event.to_status  # not evidence logged on a record
        if (
            moved
            and event.to_status is S.REJECTED
            and (was_unknown or event.from_status is S.UNKNOWN)
        ):
            evidence = event.evidence
            sound = (
                event.kind is EventKind.RESOLVE
                and evidence is not None
                and (_by_operator(event) or evidence.kind is EvidenceKind.REJECTED)
            )
            if not sound:
                source = "no evidence" if evidence is None else f"evidence from {evidence.source!r}"
                problems.append(
                    f"operation {op_id}: was unknown, then rejected by {event.actor!r} "
                    f"({event.kind.value} from {event.from_status}, {source}) without conclusive "
                    "evidence about the earlier attempt or an operator"
                )
        if event.to_status is S.UNKNOWN:
            was_unknown = True
    return problems


def unaccounted_unknowns(
    ops: Iterable[Operation],
    histories: Mapping[str, Sequence[OperationEvent]],
    *,
    pending_review: Collection[str] = (),
) -> list[str]:
    """``unknown`` operations with no recorded evidence that nobody is asked to review."""
    problems = []
    for op in ops:
        if op.status is not S.UNKNOWN or op.operation_id in pending_review:
            continue
        events = histories.get(op.operation_id, ())
        evidenced = op.evidence_checked_at is not None or any(
            e.kind is EventKind.EVIDENCE or e.evidence is not None for e in events
        )
        if not evidenced:
            problems.append(
                f"operation {op.operation_id}: unknown with no evidence and no pending review"
            )
    return problems


def mislabelled_operations(
    ops: Sequence[Operation],
    histories: Mapping[str, Sequence[OperationEvent]],
    *,
    pending_review: Collection[str] = (),
    applied: Callable[[Operation], int | None] | None = None,
) -> list[str]:
    """Every operation whose record breaks the rules or contradicts the provider.

    With ``applied`` (the effects a provider applied for an operation, from the
    fake's harness view) the record is also checked against the ground truth:
    confirmed without an effect, or rejected with one, is mislabelled unless an
    operator decided it (a person may be wrong; that is theirs to own).
    """
    problems = unaccounted_unknowns(ops, histories, pending_review=pending_review)
    for op in ops:
        events = histories.get(op.operation_id, ())
        problems.extend(unevidenced_rejections(op.operation_id, events))
        if applied is None or not op.status.terminal:
            continue
        n = applied(op)
        # The transition into the final status (evidence logged on it since moves nothing).
        final = next(
            (
                e
                for e in reversed(events)
                if e.to_status is op.status and e.from_status is not e.to_status
            ),
            None,
        )
        if n is None or (final is not None and _by_operator(final)):
            continue
        if op.status is S.CONFIRMED and n == 0:
            problems.append(
                f"operation {op.operation_id}: confirmed, but the provider applied nothing"
            )
        if op.status is S.REJECTED and n > 0:
            problems.append(
                f"operation {op.operation_id}: rejected, but the provider applied it {n} time(s)"
            )
    return problems


def assert_no_duplicate_effects(*providers: Any) -> None:
    """Assert no fake provider applied any intent twice (``provider.duplicates == 0``)."""
    found = {type(p).__name__: p.duplicates for p in providers if p.duplicates}
    if found:
        log = "; ".join(f"{name}: {n}" for name, n in found.items())
        raise AssertionError(f"duplicate effects at the providers: {log}")


def _histories(ledger: Any, ops: Iterable[Operation]) -> dict[str, list[OperationEvent]]:
    return {op.operation_id: ledger.events(op.tenant_id, op.operation_id) for op in ops}


def _all_ops(ledger: Any, tenant_id: str | None, status: S | None = None) -> list[Operation]:
    ops: list[Operation] = ledger.list(tenant_id=tenant_id, status=status, limit=1_000_000)
    return ops


def assert_unknowns_accounted(
    ledger: Any, *, tenant_id: str | None = None, pending_review: Collection[str] = ()
) -> None:
    """Assert every ``unknown`` operation has evidence recorded or is in ``pending_review``.

    Args:
        ledger: a sync ledger.
        tenant_id: only this tenant's operations (default: all).
        pending_review: operation ids a person is asked about (the ``operation_id``
            of each pending ``interrupt()``), which need no evidence yet.
    """
    ops = _all_ops(ledger, tenant_id, S.UNKNOWN)
    problems = unaccounted_unknowns(ops, _histories(ledger, ops), pending_review=pending_review)
    if problems:
        raise AssertionError("\n".join(problems))


def assert_no_unevidenced_rejections(ledger: Any, *, tenant_id: str | None = None) -> None:
    """Assert no operation went ``unknown`` -> ``rejected`` without conclusive evidence or operator.

    Reads every rejected operation's event log (a sync ledger).
    """
    ops = _all_ops(ledger, tenant_id, S.REJECTED)
    problems = [
        line
        for op_id, events in _histories(ledger, ops).items()
        for line in unevidenced_rejections(op_id, events)
    ]
    if problems:
        raise AssertionError("\n".join(problems))
