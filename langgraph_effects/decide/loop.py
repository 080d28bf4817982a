"""The decision loop: plan -> act -> record, for one effect tool call, written once.

``Loop.decide`` is a generator. It reads the ledger, asks ``core.plan`` what
to do, does it, records the outcome and returns the final record; every
contact with the world is an action it yields (``decide.actions``: a typed
ledger call, a hook, the dispatch, a sleep, a question for a person) and the
driver's answer is sent back in (an error is thrown back in). The drivers
(``decide.drive``) are small, one sync and one async; the loop never copies
between the two.

A first-time effect costs two ledger commits: ``prepare`` inserts the record
already claimed (write-ahead and lease in one), ``confirm`` records the
receipt. Effects with an approval or an ``authorize`` hook prepare unclaimed
first, so a refusal is recorded on a record that never claimed a dispatch.

Crash windows (``crash_point`` names them; the ledger makes each safe)::

    prepare+claim ─▶ provider acts ─▶ confirm
         │                │              │
      dead owner:      dead owner:    confirmed:
      take over,       take over,     replay, never
      reconcile        reconcile      call again

What a face chooses: its ``Policy`` (``decide.policy``: ask a person about an
unknown outcome or return it; wait for another worker's live lease or return;
sleep before a transient resend or release and return); its driver decides how
an ``Ask`` is put (LangGraph's ``interrupt()``) and how a ``Sleep`` waits, and
its commit path (``decide.commit``) whether a claimed ``Prepare`` and a
``Confirm`` are committed alone or with those of concurrent calls.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

from langgraph_effects._faults import CrashPoint, crash_point
from langgraph_effects._owners import holder_provably_dead
from langgraph_effects.core.model import (
    TAKEOVER_PREFIX,
    Decision,
    Evidence,
    EvidenceKind,
    LeaseOwner,
    Operation,
    OperationStatus,
    Prepared,
    Resolution,
    reconciled_evidence,
)
from langgraph_effects.core.plan import (
    Step,
    plan,
    recorded_receipt,
)
from langgraph_effects.decide.actions import (
    Action,
    Approve,
    Events,
    Get,
    Hook,
    MarkUnknown,
    Prepare,
    RecordEvidence,
    Resolve,
    Sleep,
    ledger,
)
from langgraph_effects.decide.answers import (
    verified_as,
)
from langgraph_effects.decide.asking import Asking
from langgraph_effects.decide.call import EffectCall
from langgraph_effects.decide.dispatching import Dispatching
from langgraph_effects.decide.identity import find_operation
from langgraph_effects.decide.messages import Trace, Via
from langgraph_effects.decide.recognise import keyed_unknown_check, recognised
from langgraph_effects.decide.state import MAX_STEPS, Pass
from langgraph_effects.errors import (
    EffectsError,
    LeaseHeld,
)
from langgraph_effects.observe import count_replay

__all__ = ["Decide", "Loop", "recognised"]

S = OperationStatus


_SETTLING = frozenset({Step.DISPATCH_CLAIMED, Step.RECONCILE, Step.REVIEW})
"""Steps whose own write may confirm the record: a confirmation right after one is
this pass's outcome, not a replay (``observe.count_replay``)."""

_READING = frozenset({Step.ASK_APPROVAL, Step.REVIEW, Step.AUTHORIZE_AND_CLAIM, Step.RETRY_SAFE})
"""Steps that read the values LangGraph holds for the call (a question, ``_last_word``)."""

Decide = Generator[Action, Any, Operation]
"""A decision in progress: yields actions, returns the final record."""


class Loop(Asking, Dispatching):
    """The decision loop's rules, with a face's settings.

    Args:
        lease_for: lease length of a dispatch.
        clock: the time source (the ledger should use the same one).
        policy: where the loop may hold its caller (ask, wait, sleep) or returns
            the record instead (``decide.policy``).
        anonymous_answers: accept an answer that names nobody (no ``by``, no
            authenticated user), recorded as ``anonymous``; False: refuse it
            (``decide.answers.identify``).
    """

    __slots__ = ()

    def decide(
        self,
        call: EffectCall,
        handoff: Prepared | None,
        owner: LeaseOwner,
        trace: Trace | None = None,
    ) -> Decide:
        """Decide ``call`` to its final record, yielding each action for a driver to do.

        Args:
            call: the tool call.
            handoff: a record the face already prepared for it (a batch's
                ``prepare_many``); None: the loop prepares it.
            owner: who claims the lease of a dispatch (this process, fresh nonce).
            trace: filled with how the answer was obtained (``Via``): the last of
                this run's dispatch, reconciliation, a person's answer or the
                ``authorize`` hook's refusal that acted on the operation; else
                ``replayed``.
        """
        spec = call.spec
        if (spec.older_payload_keys or keyed_unknown_check(call)) and handoff is None:
            call = yield from recognised(call)
        # Write-ahead. Fused with the claim unless a person or a hook must
        # speak before the first dispatch.
        fused = not (spec.require_approval or spec.authorize is not None)

        def prepare(c: EffectCall) -> Prepare:
            return Prepare(c.draft(), owner=owner if fused else None, lease_for=self.lease_for)

        if handoff is not None and handoff.operation.operation_id == call.operation_id:
            prepared = handoff
        else:
            crash_point(CrashPoint.BEFORE_PREPARE)
            prepared = yield from ledger(prepare(call))
        # Which operation the call is: op_0's record, or a later candidate's.
        call, prepared = yield from find_operation(call, prepared, prepare)
        p = Pass(call=call, trace=trace if trace is not None else Trace())
        op = prepared.operation
        p.claimed = prepared.created and op.status is S.DISPATCHING
        if prepared.created and not p.claimed:
            crash_point(CrashPoint.AFTER_PREPARE)

        last: Step | None = None
        read = False  # a step of this pass read the values held for the call (_READING)
        for _ in range(MAX_STEPS):
            if op.status is S.UNKNOWN and p.late_receipt is None and not p.receipts_read:
                # A receipt kept by a worker that died before it settled anything.
                p.receipts_read = True
                events = yield from ledger(Events(op.key))
                p.late_receipt = recorded_receipt(events)
            now = self.clock()
            owner_dead = False
            if op.status is S.DISPATCHING and not p.claimed and op.lease_alive(now):
                owner_dead = holder_provably_dead(op)
            step = plan(
                op,
                now=now,
                contract=spec.contract,
                has_reconciler=spec.reconcile is not None or p.late_receipt is not None,
                require_approval=spec.require_approval,
                claimed_by_us=p.claimed,
                owner_dead=owner_dead,
                reconciled=p.reconciled,
                retried=p.retried or p.retry_forbidden,
            )
            match step:
                case Step.REPLAY_CONFIRMED:
                    if last not in _SETTLING:
                        # Confirmed before this pass could act on it: one duplicate prevented.
                        count_replay(op)
                    if last is None or (last is Step.RECONCILE and not read):
                        # Decided before this pass read what LangGraph holds for it
                        # (replayed, or reconciled first, as every resume of an unknown
                        # is): those values answered questions of earlier runs, and no
                        # interrupt() of this run reads them; left unread, the next call of
                        # the task took them by position (campaign seed 5025).
                        yield from self._late_answers(p, op)
                    return op
                case Step.REPLAY_REJECTED:
                    if op.replaced_by is not None:
                        # A reviewer edited this call: follow it to its replacement.
                        nxt = yield from self._follow_edit(p, op)
                        if nxt is not None:
                            op = nxt
                            continue
                    if last is None and op.attempts == 0 and (yield from self._batch_rejected(op)):
                        p.trace.via = Via.REVIEWED  # as when its own interrupt was answered
                    if last is None or (last is Step.RECONCILE and not read):
                        yield from self._late_answers(p, op)
                    return (yield from self._receipt_conflict(op))
                case Step.ASK_APPROVAL if p.call.preapproved_by is not None:
                    op = yield from self._guarded(
                        p,
                        op,
                        Approve(
                            op.key,
                            payload_digest=op.payload_digest,
                            by=p.call.preapproved_by,
                            reason="approved upstream (human-in-the-loop middleware)",
                            verified_by=(
                                verified_as(p.call.user)
                                if p.call.user is not None and p.call.user == p.call.preapproved_by
                                else None
                            ),
                        ),
                    )
                case Step.ASK_APPROVAL:
                    op = yield from self._ask(p, op, kind="approval")
                case Step.RETRY_SAFE if (yield from self._resend_held(p, op)):
                    pass  # a person decides first (``_resend_held``): planned again
                case Step.AUTHORIZE_AND_CLAIM | Step.RETRY_SAFE:
                    changed = yield from self._last_word(p, op)
                    if changed is not None:
                        op = changed  # a person's later answer decided it again
                        continue
                    op = yield from self._authorize_and_claim(p, op, owner, step)
                case Step.DISPATCH_CLAIMED:
                    op = yield from self._dispatch(p, op, owner)
                    if op.status is S.PREPARED:
                        return op  # transient refusals outlasted the retries
                case Step.WAIT_PENDING:
                    if not self.policy.wait_for_lease:
                        return op  # another worker's live lease: never dispatch, look later
                    op = yield from self._wait(p, op)
                case Step.TAKE_OVER:
                    reason = (
                        "the lease owner's process is gone"
                        if owner_dead
                        else "the lease expired without a receipt"
                    )
                    op = yield from self._guarded(
                        p,
                        op,
                        MarkUnknown(
                            op.key,
                            token=op.fencing_token,
                            reason=reason,
                            actor=f"{TAKEOVER_PREFIX}{owner.encode()}",
                        ),
                    )
                case Step.RECONCILE:
                    op = yield from self._reconcile(p, op)
                case Step.REVIEW:
                    if not self.policy.ask_on_unknown:
                        return op
                    op = yield from self._ask(p, op, kind="review")
            last = step
            read = read or step in _READING
        raise EffectsError(
            f"operation {op.operation_id!r} made no progress in {MAX_STEPS} steps (status "
            f"{op.status.value}); leaving it for an operator"
        )

    def _wait(self, p: Pass, op: Operation) -> Generator[Action, Any, Operation]:
        """Wait for a live owner's outcome, up to the lease expiry seen now.

        A live owner is not an unknown: no dispatch, no review. If its lease is
        still being renewed when the wait ends, the work is in flight:
        ``LeaseHeld`` tells the caller to come back later.
        """
        deadline = op.lease_expires_at
        assert deadline is not None
        give_up = time.monotonic() + self.lease_for.total_seconds()
        delay = 0.005
        while True:
            yield Sleep(delay)
            delay = min(delay * 2, 0.25)
            cur = yield from ledger(Get(op.key))
            assert cur is not None
            if cur.status is not S.DISPATCHING or cur.fencing_token != op.fencing_token:
                return cur
            now = self.clock()
            if not cur.lease_alive(now) or holder_provably_dead(cur):
                return cur
            if now >= deadline or time.monotonic() >= give_up:
                raise LeaseHeld(
                    cur.operation_id, owner=cur.lease_owner, expires_at=cur.lease_expires_at
                )

    def _reconcile(self, p: Pass, op: Operation) -> Generator[Action, Any, Operation]:
        p.reconciled = True
        p.trace.via = Via.RECONCILED
        evidence = p.late_receipt
        p.late_receipt = None
        if evidence is None:
            reconcile = p.call.spec.reconcile
            assert reconcile is not None
            try:
                evidence = reconciled_evidence((yield Hook(reconcile, op)))
            except Exception as exc:
                evidence = Evidence.inconclusive(f"reconciler failed: {type(exc).__name__}: {exc}")
        crash_point(CrashPoint.DURING_RECONCILE)
        p.evidence.append(evidence)
        if evidence.kind is EvidenceKind.INCONCLUSIVE:
            return (yield from self._guarded(p, op, RecordEvidence(op.key, evidence)))
        decision = Decision.CONFIRM if evidence.kind is EvidenceKind.CONFIRMED else Decision.REJECT
        resolution = Resolution(
            decision=decision,
            by=evidence.source or "reconciler",
            reason=evidence.summary,
            result=evidence.result,
            provider_result_id=evidence.provider_result_id,
            evidence=evidence,
        )
        return (yield from self._guarded(p, op, Resolve(op.key, resolution)))
