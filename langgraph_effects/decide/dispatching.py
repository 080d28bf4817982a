"""The decision loop's dispatch and its receipt: authorize and claim, send, record what
the provider answered, keep a receipt the fence refused (``decide.loop``).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from langgraph.errors import GraphInterrupt, is_invalid_resume

from langgraph_effects._faults import CrashPoint, crash_point
from langgraph_effects.core.model import (
    Evidence,
    LeaseOwner,
    Operation,
    OperationStatus,
)
from langgraph_effects.core.plan import (
    Outcome,
    Step,
    backoff,
    classify,
    earlier_attempt_ambiguous,
    receipt_conflict,
    receipt_retry_delay,
    refused_resend,
    resend_refused,
    resent_unanswered,
)
from langgraph_effects.decide.actions import (
    Action,
    Claim,
    Confirm,
    Dispatch,
    Dispatched,
    Events,
    Get,
    MarkUnknown,
    RecordEvidence,
    Reject,
    Release,
    Sleep,
    ledger,
)
from langgraph_effects.decide.call import ProviderResult
from langgraph_effects.decide.messages import Via, conflicted, message_text, recordable
from langgraph_effects.decide.state import LoopBase, Pass
from langgraph_effects.errors import (
    ConcurrentUpdate,
    EffectRejected,
    IllegalTransition,
    LedgerUnavailable,
    StaleFencingToken,
    TransientProviderError,
)

S = OperationStatus


_LATE_RECEIPT = "late receipt: the provider applied it after this worker's lease was taken over"


RECEIPT_REFUSED = (StaleFencingToken, IllegalTransition, ConcurrentUpdate)
"""What the fence answers a receipt whose operation was taken over mid-flight."""


def late_receipt(value: Any, result_id: str | None) -> Evidence:
    """A receipt the fence refused, as the evidence that keeps it (``recorded_receipt``)."""
    return Evidence.confirmed(
        _LATE_RECEIPT, result=value, provider_result_id=result_id, source="receipt"
    )


class Dispatching(LoopBase):
    """The steps of ``Loop`` from a claim to the provider's receipt."""

    __slots__ = ()

    def _authorize_and_claim(
        self, p: Pass, op: Operation, owner: LeaseOwner, step: Step
    ) -> Generator[Action, Any, Operation]:
        spec = p.call.spec
        if spec.authorize is not None:
            refusal = yield from self._refusal(p, op)
            if refusal is not None:
                if op.status is S.PREPARED:
                    p.trace.via = Via.REFUSED
                    return (
                        yield from self._guarded(
                            p,
                            op,
                            Reject(
                                op.key,
                                token=None,
                                reason=refusal,
                                evidence=Evidence.rejected(refusal, source="authorize"),
                                actor="authorize",
                            ),
                        )
                    )
                # unknown: a refusal forbids resending but proves nothing about the
                # earlier attempt, so a person decides (without a retry option).
                p.retry_forbidden = True
                p.evidence.append(Evidence.inconclusive(refusal, source="authorize"))
                return op
        op = yield from self._claim(p, op, owner)
        if op.status is S.DISPATCHING and op.lease_owner == owner.encode():
            p.claimed = True
            if step is Step.RETRY_SAFE:
                p.retried = True
        return op

    def _claim(
        self, p: Pass, op: Operation, owner: LeaseOwner
    ) -> Generator[Action, Any, Operation]:
        """Take the lease (``prepared``/``unknown`` -> ``dispatching``), or re-read the record."""
        return (
            yield from self._guarded(
                p,
                op,
                Claim(
                    op.key,
                    owner=owner,
                    lease_for=self.lease_for,
                    actor=owner.encode(),
                ),
            )
        )

    def _dispatch(
        self, p: Pass, op: Operation, owner: LeaseOwner
    ) -> Generator[Action, Any, Operation]:
        crash_point(CrashPoint.AFTER_CLAIM)
        p.trace.via = Via.DISPATCHED
        out: Dispatched = yield Dispatch(op, p.call.context(op), p.call.args)
        crash_point(CrashPoint.AFTER_PROVIDER)
        p.claimed = False
        new = yield from self._record(p, op, owner, out)
        if out.call.reentry is not None:
            # A wrapper entered the tool body again (ToolRetryMiddleware listed after
            # EffectMiddleware) and was refused: the first entry's outcome is recorded,
            # nothing is resent in this dispatch, and the order is named.
            raise out.call.reentry
        return new

    def _record(
        self, p: Pass, op: Operation, owner: LeaseOwner, out: Dispatched
    ) -> Generator[Action, Any, Operation]:
        """Record what one dispatch of ``op`` came to; the record it ends in."""
        call = p.call
        token = op.fencing_token
        asked = isinstance(out.call.error, GraphInterrupt) or (
            out.error is not None and is_invalid_resume(out.error)
        )
        if out.bubble is not None or asked:
            # The tool called interrupt() itself (a tool asks before it acts), or its
            # answer failed the interrupt's response_schema: release the claim, so the
            # resumed run dispatches again and the answer reaches the tool. Anything
            # else that bubbled after the tool started (a sibling's interrupt
            # cancelling this task) may have left the effect half done: unknown.
            if out.call.started and not asked:
                yield from self._guarded(
                    p,
                    op,
                    MarkUnknown(
                        op.key,
                        token=token,
                        reason="interrupted or cancelled mid-dispatch",
                    ),
                )
            else:
                reason = "the tool asked a person (interrupt)" if asked else "interrupted"
                yield from self._guarded(p, op, Release(op.key, token=token, reason=reason))
            raise out.bubble or out.error  # type: ignore[misc]
        # Once the tool started, its own outcome decides; ToolNode may still refuse the
        # shape of what it returned (raised below, after the receipt is recorded).
        error = out.call.error if out.call.started else out.error
        if error is not None and not out.call.started:
            # The tool never ran (invalid arguments with handle_tool_errors=False, a
            # missing injected value): the provider heard nothing. Release the claim
            # and let ToolNode's own error handling raise it, as for a plain tool.
            yield from self._guarded(
                p,
                op,
                Release(
                    op.key,
                    token=token,
                    reason=f"the tool did not run: {type(error).__name__}: {error}"[:2000],
                ),
            )
            raise error
        if error is None and not out.call.started:
            # Answered without running the tool: ToolNode (invalid arguments, which
            # always fail the same way) or an inner middleware (a reviewer's reject or
            # respond). The provider heard nothing.
            text = message_text(out.message) or "the tool did not run"
            new = yield from self._guarded(
                p,
                op,
                Reject(
                    op.key,
                    token=token,
                    reason=f"invalid call, not sent: {text}",
                    evidence=Evidence.rejected(text, source="validation"),
                    actor="validation",
                ),
            )
            crash_point(CrashPoint.AFTER_RECEIPT)
            return new
        if error is None:
            raw, result_id = out.call.value, None
            if isinstance(raw, ProviderResult):
                raw, result_id = raw.result, raw.provider_result_id
            value = recordable(raw, out.message)
            try:
                confirmed = yield from self._receipt(
                    Confirm(op.key, token=token, result=value, provider_result_id=result_id)
                )
            except RECEIPT_REFUSED:
                return (yield from self._late_receipt(p, op, owner, value, result_id))
            crash_point(CrashPoint.AFTER_RECEIPT)
            if out.error is not None:
                # The tool acted and returned, and ToolNode refused what it returned (a
                # malformed Command): the effect is recorded, the error raised as usual.
                raise out.error
            return confirmed
        match classify(error):
            case Outcome.REJECTED:
                assert isinstance(error, EffectRejected)
                if (yield from self._earlier_attempt_ambiguous(op)):
                    # The refusal speaks for this resend only: an earlier attempt
                    # may have acted. Back to unknown; a person decides, no retry.
                    p.retry_forbidden = True
                    return (
                        yield from self._back_to_unknown(
                            p,
                            op,
                            token,
                            f"the provider refused a resend: {error.reason}",
                            refused=True,
                        )
                    )
                new = yield from self._guarded(
                    p,
                    op,
                    Reject(
                        op.key,
                        token=token,
                        reason=error.reason,
                        evidence=Evidence.rejected(error.reason, source="provider"),
                        actor="provider",
                    ),
                )
                crash_point(CrashPoint.AFTER_RECEIPT)
                return new
            case Outcome.TRANSIENT:
                assert isinstance(error, TransientProviderError)
                delay = (
                    backoff(call.spec.contract, p.transient_retries, error.retry_after)
                    if self.policy.retry_transient and out.call.reentry is None
                    else None
                )
                if delay is None:
                    if (yield from self._earlier_attempt_ambiguous(op)):
                        # Releasing to prepared would claim "nothing applied" and let a
                        # later run send without a key-window check: stay unknown.
                        return (
                            yield from self._back_to_unknown(
                                p, op, token, f"transient refusals of a resend: {error.reason}"
                            )
                        )
                    return (
                        yield from self._guarded(
                            p,
                            op,
                            Release(
                                op.key,
                                token=token,
                                reason=f"transient refusal: {error.reason}",
                            ),
                        )
                    )
                p.transient_retries += 1
                yield Sleep(delay)
                # Provably not applied: resend under the lease we still hold.
                p.claimed = True
                return op
            case _:
                reason = f"ambiguous failure: {type(error).__name__}: {error}"
                return (
                    yield from self._guarded(
                        p,
                        op,
                        MarkUnknown(
                            op.key,
                            token=token,
                            reason=reason[:2000],
                            actor=owner.encode(),
                        ),
                    )
                )

    def _receipt(self, confirm: Confirm) -> Generator[Action, Any, Operation]:
        """Write a receipt; a commit the ledger never answered is tried again.

        A dropped connection (or a failover) at the commit loses the answer, not the
        receipt: it is tried again on a fresh connection, with the backoff of a lease
        renewal (``core.plan.receipt_retry_delay``), before the error is raised. A try
        the fence refuses after such a failure may be the first one's own commit, which
        reached the ledger before its answer was lost: the record, confirmed under this
        token, is the answer.
        """
        failures = 0
        while True:
            try:
                confirmed: Operation = yield confirm  # ``ledger(confirm)``, one frame fewer
                return confirmed
            except LedgerUnavailable:
                failures += 1
                delay = receipt_retry_delay(failures, self.lease_for.total_seconds() / 3)
                if delay is None:
                    raise
            except RECEIPT_REFUSED:
                if failures:
                    op = yield from ledger(Get(confirm.key))
                    if (
                        op is not None
                        and op.status is S.CONFIRMED
                        and op.fencing_token == confirm.token
                    ):
                        return op
                raise
            yield Sleep(delay, outlast=True)

    def _late_receipt(
        self, p: Pass, op: Operation, owner: LeaseOwner, value: Any, result_id: str | None
    ) -> Generator[Action, Any, Operation]:
        """Keep a receipt the fence refused: record it, then let it settle what it may.

        The provider acted, but the operation was taken over while this call was
        in flight (a frozen process, a lapsed lease), so the confirm is not ours
        to write. The receipt is recorded at once, as an ``evidence`` event with
        the provider's answer; then DESIGN's rules settle the operation::

            unknown       conclusive evidence: reconciled to confirmed (this loop)
            prepared      a person ordered a retry not sent yet: the receipt makes it
                          moot; claim and confirm with the receipt, never send again
            dispatching   another owner resends under the key: wait for it; an
                          unknown outcome is then settled by this receipt
            confirmed     nothing more to do
            rejected      terminal, never moved: a conflict for a person to review,
                          and the answer says the provider applied it (conflicted)
        """
        receipt = late_receipt(value, result_id)
        fresh = yield from ledger(RecordEvidence(op.key, receipt))
        if fresh.status is S.REJECTED:
            return conflicted(fresh, receipt)
        if fresh.status is S.PREPARED:
            fresh = yield from self._claim(p, fresh, owner)
            if fresh.status is S.DISPATCHING and fresh.lease_owner == owner.encode():
                return (
                    yield from self._guarded(
                        p,
                        fresh,
                        Confirm(
                            fresh.key,
                            token=fresh.fencing_token,
                            result=value,
                            provider_result_id=result_id,
                        ),
                    )
                )
        p.late_receipt = receipt
        p.reconciled = False
        return fresh

    def _batch_rejected(self, op: Operation) -> Generator[Action, Any, bool]:
        """A person rejected ``op`` answering the batched approvals of its AIMessage
        (``decide.approvals``), before this call's own loop ran."""
        events = yield from ledger(Events(op.key))
        last = events[-1] if events else None
        mark = (
            last.detail.get("answer")
            if last is not None and isinstance(last.detail, dict)
            else None
        )
        return isinstance(mark, str) and "#approvals:" in mark

    def _receipt_conflict(self, op: Operation) -> Generator[Action, Any, Operation]:
        """A rejected record, marked when a late receipt says the provider applied it."""
        if op.attempts == 0:
            return op  # never dispatched: no receipt can exist
        events = yield from ledger(Events(op.key))
        receipt = receipt_conflict(op, events)
        return op if receipt is None else conflicted(op, receipt)

    def _earlier_attempt_ambiguous(self, op: Operation) -> Generator[Action, Any, bool]:
        """``core.plan.earlier_attempt_ambiguous``, reading the events only when it can matter."""
        if op.attempts <= 1:
            return False
        events = yield from ledger(Events(op.key))
        return earlier_attempt_ambiguous(op, events)

    def _resend_held(self, p: Pass, op: Operation) -> Generator[Action, Any, bool]:
        """True when a safe resend of ``op`` must wait for a person: the provider
        definitively refused an earlier one (only a person may order another: the review
        offers no retry), or an earlier run's resend ended unknown and nobody decided
        since (``core.plan.resent_unanswered``: the person's answer is read first).

        Read from the event log, so it holds across passes (a review's resume re-runs
        the node from its first line); one read, only on the rare safe-retry path.
        """
        events = yield from ledger(Events(op.key))
        p.retry_forbidden = resend_refused(events)
        p.retried = not p.retry_forbidden and resent_unanswered(events)
        return p.retry_forbidden or p.retried

    def _back_to_unknown(
        self, p: Pass, op: Operation, token: int, summary: str, *, refused: bool = False
    ) -> Generator[Action, Any, Operation]:
        """Record a resend's refusal as inconclusive evidence; the operation is unknown again
        (``refused``: the provider's definitive refusal, ``core.plan.refused_resend``)."""
        evidence = refused_resend(summary) if refused else Evidence.inconclusive(summary)
        p.evidence.append(evidence)
        return (
            yield from self._guarded(
                p,
                op,
                MarkUnknown(
                    op.key,
                    token=token,
                    reason=f"{summary}; an earlier attempt may have applied"[:2000],
                    evidence=evidence,
                    actor="provider",
                ),
            )
        )
