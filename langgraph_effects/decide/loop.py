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

import dataclasses
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any

from langgraph.errors import GraphInterrupt, is_invalid_resume
from pydantic import AfterValidator

from langgraph_effects._faults import CrashPoint, crash_point
from langgraph_effects._owners import holder_provably_dead
from langgraph_effects.core.digest import KEYED_PREFIX
from langgraph_effects.core.identity import decode_origins
from langgraph_effects.core.model import (
    TAKEOVER_PREFIX,
    Decision,
    Evidence,
    EvidenceKind,
    LeaseOwner,
    Operation,
    OperationKey,
    OperationStatus,
    Prepared,
    Resolution,
    reconciled_evidence,
    replaced_reason,
)
from langgraph_effects.core.plan import (
    Outcome,
    Step,
    backoff,
    classify,
    earlier_attempt_ambiguous,
    plan,
    receipt_conflict,
    receipt_retry_delay,
    recorded_receipt,
    refused_resend,
    resend_refused,
    resent_unanswered,
)
from langgraph_effects.decide.actions import (
    Action,
    Approve,
    Ask,
    Claim,
    Confirm,
    Dispatch,
    Dispatched,
    Events,
    Get,
    Hook,
    LedgerAction,
    ListOpen,
    MarkUnknown,
    Prepare,
    RecordEvidence,
    Reject,
    Release,
    Resolve,
    Sleep,
    Waiting,
    ledger,
)
from langgraph_effects.decide.answers import (
    ANONYMOUS,
    Answers,
    agreed_note,
    agrees,
    answer_mark,
    answer_schema,
    check_applicable,
    check_decision,
    decided_note,
    earlier_round,
    identify,
    late_refusal,
    named_round,
    refusals,
    repeated_answer,
    replaced_note,
    round_id,
    verified_as,
)
from langgraph_effects.decide.call import EffectCall, ProviderResult
from langgraph_effects.decide.identity import find_operation
from langgraph_effects.decide.messages import Trace, Via, conflicted, message_text, recordable
from langgraph_effects.decide.policy import Policy
from langgraph_effects.errors import (
    RECORD_MOVED,
    ConcurrentUpdate,
    EffectRejected,
    EffectsError,
    IllegalTransition,
    LeaseHeld,
    LedgerUnavailable,
    PayloadKeyMissing,
    StaleFencingToken,
    TransientProviderError,
)
from langgraph_effects.observe import count_replay
from langgraph_effects.review import (
    OPEN_SHOWN,
    Answer,
    InvalidAnswer,
    OpenOnTarget,
    RequestKind,
    approval_request,
    parse_answer,
    review_request,
    with_notice,
)

__all__ = ["Decide", "Loop", "recognised"]

S = OperationStatus
_MAX_STEPS = 64
_LATE_RECEIPT = "late receipt: the provider applied it after this worker's lease was taken over"
RECEIPT_REFUSED = (StaleFencingToken, IllegalTransition, ConcurrentUpdate)
"""What the fence answers a receipt whose operation was taken over mid-flight."""


def late_receipt(value: Any, result_id: str | None) -> Evidence:
    """A receipt the fence refused, as the evidence that keeps it (``recorded_receipt``)."""
    return Evidence.confirmed(
        _LATE_RECEIPT, result=value, provider_result_id=result_id, source="receipt"
    )


def recognised(call: EffectCall) -> Generator[Action, Any, EffectCall]:
    """``call`` as a key rotated out wrote it, if its record is there; else ``call``.

    A ``payload_key`` rotation changes the keyed digest, and with it the operation
    id a call derives (and, under an intent key, what its record's digest must
    equal). Each key rotated out (``EffectSpec.older_payload_keys``) gives the
    call's identity under that key: the first whose record holds that digest is
    the call's operation, met again as before the rotation (an approval still
    answered, a lost receipt still settled, never a second dispatch). One read
    per key rotated out, and only for an effect that lists some.
    """
    for digest in call.spec.older_digests(call.target, call.args):
        old = call.with_digest(digest)
        op = yield from ledger(Get(old.key))
        if op is not None and op.payload_digest == digest:
            return old
    yield from _no_unknown_key(call)
    return call


_OPEN_LOOKED_AT = 50
"""How many open records of a target ``_no_unknown_key`` reads."""


def keyed_unknown_check(call: EffectCall) -> bool:
    """Whether ``call`` is checked for a record under a dropped payload key: a keyed
    digest, no intent key (its record is met by the key and refused on its own), a
    target and a task to recognise the call by."""
    return (
        call.payload_digest.startswith(KEYED_PREFIX)
        and not call.fixed_id
        and call.target is not None
        and call.timeline is not None
    )


def _no_unknown_key(call: EffectCall) -> Generator[Action, Any, None]:
    """Refuse a call whose own open record was digested under a key no longer listed.

    A re-run of a task (a crash, an interrupt) after ``payload_key`` lost the key its
    record was digested under derives another id: it would send again and leave the
    record open forever. Its own first candidate missing, the open records of its
    target are read: one of this thread and action whose origins hold this very task
    and tool call, with another keyed digest, is that record (the task's call has the
    same payload: only the key differs). ``PayloadKeyMissing`` says which key to list.
    An edit (the same call with other arguments) meets its own record first.
    """
    if not keyed_unknown_check(call):
        return
    if (yield from ledger(Get(call.key))) is not None:
        return  # met under the current key: the walk decides
    assert call.target is not None
    assert call.timeline is not None
    opens = yield from ledger(
        ListOpen(call.tenant_id, call.spec.action, call.target, _OPEN_LOOKED_AT)
    )
    mine = call.timeline.origin(call.tool_call_id)
    for op in opens.operations:
        if (
            op.workflow_id == call.workflow_id
            and op.payload_digest != call.payload_digest
            and op.payload_digest.startswith(KEYED_PREFIX)
            and any(o.task == mine.task and o.call == mine.call for o in decode_origins(op.origin))
        ):
            raise PayloadKeyMissing(
                op.operation_id,
                expected=op.payload_digest,
                actual=call.payload_digest,
                action=call.spec.action,
            )


_SETTLING = frozenset({Step.DISPATCH_CLAIMED, Step.RECONCILE, Step.REVIEW})
"""Steps whose own write may confirm the record: a confirmation right after one is
this pass's outcome, not a replay (``observe.count_replay``)."""

Decide = Generator[Action, Any, Operation]
"""A decision in progress: yields actions, returns the final record."""


@dataclass(slots=True)
class _Pass:
    """What one run of the decision loop has learned so far."""

    call: EffectCall
    trace: Trace = field(default_factory=Trace)
    """How this run obtained its answer (``Via``), for the ToolMessage's trace metadata."""
    claimed: bool = False
    reconciled: bool = False
    retried: bool = False
    retry_forbidden: bool = False
    transient_retries: int = 0
    evidence: list[Evidence] = field(default_factory=list)
    late_receipt: Evidence | None = None
    receipts_read: bool = False
    """The log was searched for a receipt kept but not applied (``recorded_receipt``)."""
    answers: dict[str, Answers] = field(default_factory=dict)
    """By operation id: the answers applied to it in this task, and how many of them
    LangGraph has handed back to this run so far (see ``Answers``)."""
    notice: str | None = None
    """Why the person's last answer did not decide the operation, for the next request."""
    followed: set[str] = field(default_factory=set)
    """Edited calls whose answers ``_follow_edit`` carried over from the calls they
    replaced, and ``_last_word`` has not read yet."""
    edits_followed: set[str] = field(default_factory=set)
    """Every call ``_follow_edit`` left for its replacement in this pass: never twice
    (a chain of edits ends; it never cycles)."""


def _about_replaced(value: Any, call: EffectCall, mine: Answers) -> str | None:
    """The call a reviewer's edit replaced (``Answers.earlier``) that ``value`` answers,
    by its operation_id or an echoed request_id; None: none of them."""
    named = parse_answer(value, tool_name=call.tool_name).operation_id
    echoed = value.get("request_id") if isinstance(value, Mapping) else None
    about = echoed.partition("@")[0] if isinstance(echoed, str) else None
    return next((o for o in (named, about) if o is not None and o in mine.earlier), None)


def _consumed_unapplied(value: Any, call: EffectCall, op: Operation, mine: Answers) -> bool:
    """A value about ``op`` that ``_ask`` consumed without applying when LangGraph first
    handed it (it echoed an earlier question's ``request_id``, repeated an applied
    answer, or answered the approval of a call the dispatched ``op`` replaced): it holds
    a position in the task, and is never an answer now."""
    if _about_replaced(value, call, mine) is not None:
        return op.attempts > 0  # before the edited call is sent, it is the last word
    named = parse_answer(value, tool_name=call.tool_name).operation_id
    if named not in (None, op.operation_id):
        return False
    echoed = named_round(value, op.operation_id, mine.earlier)
    return mine.repeats(answer_mark(call, value)) or echoed not in (
        None,
        round_id(op),
    )


def _named(value: Any) -> bool:
    """Whether ``value`` names the operation it answers (its ``operation_id``) or echoes
    one of its requests (``request_id``): it answers no other call's question."""
    return isinstance(value, Mapping) and bool(value.get("operation_id") or value.get("request_id"))


def _asked_after(mine: Answers, value: Any) -> bool:
    """Whether ``value`` may answer a question of ``op``'s: it names ``op`` (``_held``
    checked it), or it holds the place of an answer this task gave ``op`` (LangGraph lost
    it with a crash), or this task gave ``op`` none. An unnamed value after every answer
    this task gave ``op`` (all handed back) is, by position, the next question's: another
    call's (the Functional API runs several in one task), never taken."""
    if mine.consumed < len(mine.logged) or not mine.logged:
        return True
    return _named(value)


class Loop:
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

    __slots__ = ("anonymous_answers", "clock", "lease_for", "policy")

    def __init__(
        self,
        *,
        lease_for: timedelta,
        clock: Callable[[], datetime],
        policy: Policy,
        anonymous_answers: bool = False,
    ) -> None:
        self.lease_for = lease_for
        self.clock = clock
        self.policy = policy
        self.anonymous_answers = anonymous_answers

    @property
    def interrupt_on_unknown(self) -> bool:
        """Ask a person when nothing resolves an unknown (``Policy.ask_on_unknown``)."""
        return self.policy.ask_on_unknown

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
        p = _Pass(call=call, trace=trace if trace is not None else Trace())
        op = prepared.operation
        p.claimed = prepared.created and op.status is S.DISPATCHING
        if prepared.created and not p.claimed:
            crash_point(CrashPoint.AFTER_PREPARE)

        last: Step | None = None
        for _ in range(_MAX_STEPS):
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
                    if last is None:
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
                    if last is None:
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
        raise EffectsError(
            f"operation {op.operation_id!r} made no progress in {_MAX_STEPS} steps (status "
            f"{op.status.value}); leaving it for an operator"
        )

    def answer(
        self, call: EffectCall, op: Operation, answer: Answer, mark: str | None
    ) -> Generator[Action, Any, Operation]:
        """Apply a person's answer to ``op``, asked outside the call's own loop (the
        batched approvals of ``decide.approvals``); ``mark`` is what the ledger logs."""
        return (yield from self._answered(_Pass(call=call), op, answer, mark))

    def _answered(
        self, p: _Pass, op: Operation, answer: Answer, mark: str | None
    ) -> Generator[Action, Any, Operation]:
        """``_apply``, then the crash window until LangGraph saves the answer."""
        new = yield from self._apply(p, op, answer, mark)
        crash_point(CrashPoint.AFTER_ANSWER)
        return new

    def _guarded(
        self, p: _Pass, op: Operation, action: LedgerAction[Operation]
    ) -> Generator[Action, Any, Operation]:
        """Run a conditional write; if the record moved under us, re-read it instead."""
        try:
            return (yield from ledger(action))
        except RECORD_MOVED:
            p.claimed = False
            fresh = yield from ledger(Get(op.key))
            assert fresh is not None
            return fresh

    def _refusal(self, p: _Pass, op: Operation) -> Generator[Action, Any, str | None]:
        """Ask the effect's ``authorize`` hook; the refusal's text, or None if allowed."""
        assert p.call.spec.authorize is not None
        try:
            allowed = yield Hook(p.call.spec.authorize, p.call.context(op))
        except EffectRejected as exc:
            return f"authorization refused: {exc.reason}"
        return None if allowed else "authorization refused"

    def _authorize_and_claim(
        self, p: _Pass, op: Operation, owner: LeaseOwner, step: Step
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
        self, p: _Pass, op: Operation, owner: LeaseOwner
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
        self, p: _Pass, op: Operation, owner: LeaseOwner
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
        self, p: _Pass, op: Operation, owner: LeaseOwner, out: Dispatched
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
        self, p: _Pass, op: Operation, owner: LeaseOwner, value: Any, result_id: str | None
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

    def _resend_held(self, p: _Pass, op: Operation) -> Generator[Action, Any, bool]:
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
        self, p: _Pass, op: Operation, token: int, summary: str, *, refused: bool = False
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

    def _wait(self, p: _Pass, op: Operation) -> Generator[Action, Any, Operation]:
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

    def _reconcile(self, p: _Pass, op: Operation) -> Generator[Action, Any, Operation]:
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

    def _ask(self, p: _Pass, op: Operation, *, kind: str) -> Generator[Action, Any, Operation]:
        """Interrupt for a person and apply the answer to the operation it names.

        Each request is one round (``request_id``: ``answers.round_id``, bound to
        what the person decides). Values LangGraph hands back from earlier rounds
        of this task are recognised through the ledger's log and consumed, never
        re-applied. An answer to an earlier question about this operation is not
        applied: the current request is asked again, saying why (``notice``).
        """
        call = p.call
        others = yield from self.open_on_target(op)
        if kind == "approval":
            request = approval_request(
                op, tool_name=call.tool_name, args=call.args, open_on_target=others
            )
        else:
            request = review_request(
                op,
                tool_name=call.tool_name,
                evidence=p.evidence,
                contract=call.spec.contract,
                now=self.clock(),
                allow_retry=not p.retry_forbidden,
                open_on_target=others,
            )
        request["request_id"] = round_id(op)
        asked: RequestKind = "approval" if kind == "approval" else "review"
        offered = request["review_configs"][0]["allowed_decisions"]
        mine = yield from self._answers(p, op.operation_id)
        schema = answer_schema(
            call,
            op,
            kind=asked,
            retry_forbidden=p.retry_forbidden,
            stale=lambda value: (
                mine.next_is(mark := answer_mark(call, value)) or mine.repeats(mark)
            ),
            request_id=request["request_id"],
            offered=offered,
            anonymous=self.anonymous_answers,
            earlier=mine.earlier,
        )
        base = request
        if p.notice is not None:
            request, p.notice = with_notice(base, p.notice), None
        while True:
            value = yield Ask(request, schema)
            crash_point(CrashPoint.DURING_REVIEW_RESUME)
            answer = parse_answer(value, tool_name=call.tool_name)
            named = answer.operation_id or op.operation_id
            mark = answer_mark(call, value)
            answers = yield from self._answers(p, named)
            if answers.next_is(mark):
                answers.consumed += 1  # an earlier round's answer, applied already
                continue
            if named != op.operation_id and named in mine.earlier:
                # It answers the approval of the call this one replaced (shown again after
                # a crash): too late, this call was dispatched; told and asked again.
                request = with_notice(base, replaced_note(named, op))
                continue
            echoed = named_round(value, named, answers.earlier if named == op.operation_id else ())
            if named == op.operation_id and echoed not in (None, request["request_id"]):
                # It answers an earlier question (shown by LangGraph after a crash, or sent
                # late): not applied; the current request is asked, saying why.
                request = with_notice(base, earlier_round(echoed, op))
                continue
            if answers.repeats(mark):
                # An answer applied before, handed to this later question (LangGraph
                # keeps a positional resume): not applied again; the person is asked.
                request = with_notice(base, repeated_answer(named))
                continue
            # Who decided: the run's authenticated user, else the answer's by (or refused).
            answer = identify(answer, user=call.user, anonymous=self.anonymous_answers)
            if mark is not None:
                answers.note(mark)
            if named != op.operation_id:
                # Answers are matched by position within a task, and position is not
                # identity: apply it to the operation it names, then ask again for ours.
                notice = yield from self._apply_elsewhere(p, named, answer, mark, echoed)
                if notice is not None:
                    request = with_notice(base, notice)
                    continue
                fresh = yield from ledger(Get(op.key))
                assert fresh is not None
                return fresh
            # A HITL-shaped decision means what this request offered (approve = retry
            # in a review): read it as an answer to this request.
            answer = identify(
                parse_answer(value, tool_name=call.tool_name, kind=asked, offered=offered),
                user=call.user,
                anonymous=self.anonymous_answers,
            )
            return (yield from self._answered(p, op, answer, mark))

    def open_on_target(self, op: Operation) -> Generator[Action, Any, OpenOnTarget]:
        """The other unresolved operations on ``op``'s action and target, for the person
        deciding ``op``: a thread lost with its refund stuck ``unknown`` is named when a new
        thread asks to refund the same order. An operation without a target has none."""
        if op.target is None:
            return OpenOnTarget()
        found = yield from ledger(
            ListOpen(op.tenant_id, op.action, op.target, limit=OPEN_SHOWN + 1)
        )
        others = [o for o in found.operations if o.operation_id != op.operation_id]
        counted_self = len(others) < len(found.operations) or op.status in (
            S.PREPARED,
            S.DISPATCHING,
            S.UNKNOWN,
        )
        return OpenOnTarget(
            operations=others[:OPEN_SHOWN], total=max(found.total - counted_self, len(others))
        )

    def _reviews_answered(self, op: Operation) -> Generator[Action, Any, set[str]]:
        """The logged answers to ``op`` given to a review (its record was not prepared).

        After a crash LangGraph shows again the question whose logged answer it lost:
        a review if that answer is one of these, else the approval."""
        events = yield from ledger(Events(op.key))
        return {
            e.detail["answer"]
            for e in events
            if isinstance(e.detail, dict)
            and "answer" in e.detail
            and e.from_status not in (None, S.PREPARED)
        }

    def _last_word(self, p: _Pass, op: Operation) -> Generator[Action, Any, Operation | None]:
        """Before a dispatch that follows a person's answer in an earlier run of this task:
        the last word before dispatch wins. Returns the record when an answer changed it.

        LangGraph hands the values of this task back by position. The one logged
        is consumed (a tool that calls ``interrupt()`` itself must meet its own
        answers, not ours). Another value there is the person's answer to the
        request LangGraph showed again because it lost the logged one with a
        crash (killed after the ledger applied ``approve`` and before LangGraph
        saved the value)::

            approve (applied) ─▶ ✗ ─▶ request shown again ─▶ reject ─▶ rejected, not sent

        It applies: a reject stops the call, an edit replaces it; an approval
        agrees with what is recorded (given to an approval an operator decided out of
        band, it is applied all the same: the log keeps its mark). A retry a person
        ordered after an ambiguous attempt is not undone by a later answer (a reject
        would claim the earlier attempt did nothing): anything but retry is refused
        before LangGraph saves it, saying why, and the request can be answered again.

        Read only on that rare path (approved or retried, nothing asked in this pass).
        """
        human = op.authorization_ref is not None or op.attempts > 0
        asked = op.operation_id in p.answers and op.operation_id not in p.followed
        p.followed.discard(op.operation_id)
        if p.call.task_id is None or asked or not human:
            return None
        mine = yield from self._answers(p, op.operation_id)
        # Never sent: an answer given after an operator approved it out of band (the CLI)
        # still decides it, read although this run asks nothing (``_held``).
        unsent = op.attempts == 0
        if mine.consumed >= len(mine.logged) and not unsent:
            yield from self._retry_ordered(p, op)
            return None
        call = p.call
        reviewed: set[str] = set()
        if mine.consumed < len(mine.logged):
            reviewed = yield from self._reviews_answered(op)
        kind: RequestKind = "approval"
        request = approval_request(op, tool_name=call.tool_name, args=call.args)
        request["request_id"] = round_id(op)

        def answer_of(value: Any) -> Answer | None:
            """The value as a new answer about ``op``; None: logged, about another call, or
            consumed without applying when it was first handed (``_ask``: it answered an
            earlier question, or repeats one applied): never read again as a last word."""
            mark = answer_mark(call, value)
            if mine.next_is(mark):
                return None
            if _consumed_unapplied(value, call, op, mine):
                return None
            named = parse_answer(value, tool_name=call.tool_name).operation_id
            if named not in (None, op.operation_id) and _about_replaced(value, call, mine) is None:
                return None
            answer = identify(
                parse_answer(value, tool_name=call.tool_name, kind=kind),
                user=call.user,
                anonymous=self.anonymous_answers,
            )
            if (
                kind == "approval"
                and op.attempts > 0
                and (answer.decision is not Decision.APPROVE or answer.edited_args is not None)
            ):
                # The approval was followed and the call sent: too late to change it (an
                # edit would reject it as replaced, though its attempt may have acted).
                word = "an edit" if answer.edited_args is not None else repr(answer.decision.value)
                raise InvalidAnswer(
                    f"operation {op.operation_id!r} was approved and sent already; "
                    f"{word} cannot apply to its approval now (an operator "
                    "may decide it once it is unknown): answer approve",
                    operation_id=op.operation_id,
                )
            if kind == "review" and answer.decision is not Decision.RETRY:
                # A retry was ordered and not sent yet: a reject now would say nothing
                # about the earlier attempt (it may have acted), so it cannot stand as
                # "rejected"; the person is told, and may answer again.
                raise InvalidAnswer(
                    f"a retry of operation {op.operation_id!r} was ordered and is about to be "
                    f"sent; {answer.decision.value!r} cannot apply before it is (an operator "
                    "may decide it once it is unknown again): answer retry",
                    operation_id=op.operation_id,
                )
            check_applicable(answer)
            return answer

        def check(value: Any) -> Any:
            answer_of(value)
            return value

        schema = Annotated[Any, AfterValidator(check)]
        while True:
            held = mine.consumed >= len(mine.logged)
            if not held:
                kind = "review" if mine.logged[mine.consumed] in reviewed else "approval"
            elif not unsent:
                yield from self._retry_ordered(p, op)
                return None
            elif (yield from self._held(p, op, mine, any_shape=True)) is None:
                return None
            else:
                # A person's answer to the approval an operator decided meanwhile (out of
                # band): the last word before dispatch, applied as any other answer.
                kind = "approval"
            # Once sent, the call is asked nothing here: a logged answer LangGraph lost with
            # a crash (nothing held at its place) leaves the record as it is, never a new
            # question only "approve" (or "retry") could answer.
            value = yield Ask(request, schema, held=held or not unsent)
            if value is None:
                return None  # nothing held (or taken by another task meanwhile)
            answer = answer_of(value)
            if held:
                if answer is None:
                    continue  # consumed without applying when first handed (answer_of)
                # Applied even when it agrees with the operator's approval (an approve):
                # logged with its mark, so a later run meets it as this task's answer
                # (the review asked if the call ends unknown never reads it as its own).
                return (yield from self._answered(p, op, answer, answer_mark(call, value)))
            mine.consumed += 1
            if answer is None:
                if mine.logged[mine.consumed - 1] == answer_mark(call, value):
                    continue  # the answer applied before, handed back
                if _consumed_unapplied(value, call, op, mine):
                    mine.consumed -= 1  # not a logged answer: the logged one is still due
                    continue
                break  # another call's value: the rest of the task's values are theirs
            if answer.decision in (Decision.APPROVE, Decision.RETRY) and not answer.edited_args:
                return None  # the same word again: what is recorded stands
            return (yield from self._answered(p, op, answer, answer_mark(call, value)))
        return None

    def _retry_ordered(self, p: _Pass, op: Operation) -> Generator[Action, Any, None]:
        """Before the resend of a retry ordered out of band (an operator's ``retry`` while
        the review was pending; the record is ``prepared`` again, sent before): the UI's
        answer to that review, which no ``interrupt()`` reads now, is read as a late
        answer (``_late_answers``): a retry agrees, anything else is logged as not applied
        and said (who decided what, when), and the operator's retry is sent::

            review asked ─▶ operator retries (CLI) ─▶ UI answers reject ─▶ told, resent
        """
        if op.status is S.PREPARED:
            yield from self._late_answers(p, op)

    def _held(
        self, p: _Pass, op: Operation, mine: Answers, *, any_shape: bool
    ) -> Generator[Action, Any, Any]:
        """The value LangGraph holds for this task's next question, when it is about ``op``:
        it names ``op`` (or a call ``op`` replaced), echoes one of its requests, or names
        nothing in a task of one effect call. None: nothing held, or a value for another
        call. A value that is no answer at all is ``op``'s only with ``any_shape`` (the
        call was never sent: no tool of its asked a question of its own)."""
        value = yield Waiting()
        if value is None:
            return None
        try:
            named = parse_answer(value, tool_name=p.call.tool_name).operation_id
        except InvalidAnswer:
            return value if any_shape and p.call.single else None
        echoed = value.get("request_id") if isinstance(value, Mapping) else None
        about = echoed.partition("@")[0] if isinstance(echoed, str) else None
        names = {n for n in (named, about) if n is not None}
        if names:
            return value if names <= {op.operation_id, *mine.earlier} else None
        return value if p.call.single else None

    def _late_answers(self, p: _Pass, op: Operation) -> Generator[Action, Any, None]:
        """Read the answers LangGraph holds for a call whose record was decided before
        this run asked anything: none is dropped unread.

        LangGraph re-runs the task and hands it the values given to its questions; a
        call whose operation was sent, confirmed or rejected meanwhile (an operator out of
        band, a reconciler, a crash after the dispatch that made LangGraph show the
        approval again) asks nothing, and no ``interrupt()`` would read them::

            review asked ─▶ operator confirms (CLI) ─▶ UI answers reject ─▶ re-run: replayed

        Each is taken (in order) and consumed: one logged before, handed back, or one
        that agrees with the record, silently; one that would change it is logged on the
        operation as not applied (``answers.late_refusal``: who answered what, who decided
        the operation and when, when it was sent), its mark with it (a later re-run
        consumes it). The ToolMessage says what the log keeps (``Trace.notices``), on
        every replay that reads the log: one that took a value, or of an effect that
        needs an approval (a batch's late answer is logged before its calls run).
        """
        call = p.call
        if call.task_id is None or not (call.spec.require_approval or op.attempts > 0):
            return  # no question was ever asked about it
        if not call.spec.require_approval and (yield Waiting()) is None:
            return  # nothing held, no notice to show: a replay reads no event log
        mine = yield from self._answers(p, op.operation_id)
        request = approval_request(op, tool_name=call.tool_name, args=call.args)
        events: list[Any] | None = None
        took = False
        for _ in range(_MAX_STEPS):
            value = yield from self._held(p, op, mine, any_shape=False)
            if value is None:
                break  # nothing (more) held for it
            mark = answer_mark(call, value)
            handed_back = mine.next_is(mark)
            if not handed_back and mine.repeats(mark):
                if not _named(value):
                    # Equal to an answer applied to it before, out of its logged order: by
                    # position, the answer of a later question (the same words can answer
                    # another call's): left for whoever asks next.
                    break
                # It names this operation (``_held`` checked it): a repeat ``_ask``
                # consumed without applying when it was first handed (an answer given
                # again after a crash kept LangGraph from saving the first). It holds
                # this call's place among the task's values, never another call's.
                if (yield Ask(request, Any, held=True)) is None:
                    break  # another task took it meanwhile
                took = True
                continue
            if not handed_back and events is None:
                events = yield from ledger(Events(op.key))
            # The question it answered: the review, if the operation was ever unknown.
            reviewed = events is not None and any(e.to_status is S.UNKNOWN for e in events)
            if not (handed_back or reviewed or call.spec.require_approval):
                break  # it never asked anybody: the value is another call's (by position)
            if not handed_back and not _asked_after(mine, value):
                break  # after its answers, by position: a later question's (another call's)
            if (yield Ask(request, Any, held=True)) is None:
                break  # another task took it meanwhile
            took = True
            if handed_back:
                mine.consumed += 1  # applied (or logged as not applied) before, handed back
                continue
            assert events is not None
            kind: RequestKind = "review" if reviewed else "approval"
            try:
                answer = parse_answer(value, tool_name=call.tool_name, kind=kind)
            except InvalidAnswer:
                answer = parse_answer(value, tool_name=call.tool_name)
            try:
                answer = identify(answer, user=call.user, anonymous=self.anonymous_answers)
            except InvalidAnswer:
                answer = dataclasses.replace(answer, by=ANONYMOUS)  # told all the same
            agreed = agrees(op, answer)
            if agreed and op.status.terminal:
                continue  # as recorded: nothing to change, nothing to tell
            assert answer.by is not None
            # On a record still open (a retry ordered, not sent yet) an answer that agrees
            # is logged too: if the resend ends unknown, the next review's re-run meets it
            # as an answer given, never reads it as that review's own.
            summary = (agreed_note if agreed else late_refusal)(op, events, answer)
            evidence = Evidence.inconclusive(summary, source=answer.by)
            yield from self._guarded(p, op, RecordEvidence(op.key, evidence, answer=mark))
            events = None  # read again for the ToolMessage
            if mark is not None:
                mine.note(mark)
        if took or call.spec.require_approval:
            if events is None:
                events = yield from ledger(Events(op.key))
            p.trace.notices.extend(refusals(events))

    def _answers(self, p: _Pass, operation_id: str) -> Generator[Action, Any, Answers]:
        """The answers applied to ``operation_id`` in this task, read once per pass."""
        known = p.answers.get(operation_id)
        if known is not None:
            return known
        task = p.call.task_id
        logged: list[str] = []
        applied: set[str] = set()
        if task is not None:
            events = yield from ledger(
                Events(OperationKey(tenant_id=p.call.tenant_id, operation_id=operation_id))
            )
            for event in events:
                mark = event.detail.get("answer") if isinstance(event.detail, dict) else None
                if isinstance(mark, str):
                    applied.add(mark.rpartition(":")[2])
                    if mark.startswith(f"{task}:"):
                        logged.append(mark)
        p.answers[operation_id] = known = Answers(logged, applied=applied)
        return known

    def _apply(
        self, p: _Pass, op: Operation, answer: Answer, mark: str | None
    ) -> Generator[Action, Any, Operation]:
        key = op.key
        by = answer.by
        assert by is not None  # identify() named who decided
        check_decision(op, answer, retry_forbidden=p.retry_forbidden)
        p.trace.via = Via.REVIEWED
        if op.status is S.PREPARED:
            if answer.edited_args is not None:
                return (yield from self._edit(p, op, answer, mark))
            action: LedgerAction[Operation]
            if answer.decision is Decision.APPROVE:
                action = Approve(
                    key,
                    payload_digest=op.payload_digest,
                    by=by,
                    reason=answer.reason,
                    answer=mark,
                    claimed_by=answer.claimed_by,
                    verified_by=answer.verified_by,
                )
            else:
                reason = f"approval refused by {by}" + (
                    f": {answer.reason}" if answer.reason else ""
                )
                action = Reject(
                    key,
                    token=None,
                    reason=reason,
                    evidence=Evidence.rejected(reason, source="operator"),
                    actor=by,
                    answer=mark,
                    claimed_by=answer.claimed_by,
                    verified_by=answer.verified_by,
                )
            return (yield from self._guarded(p, op, action))
        if answer.decision is Decision.RETRY and p.call.spec.authorize is not None:
            # Asked before the operation leaves unknown: a refused resend proves nothing
            # about the earlier attempt, so the operation stays unknown for a person
            # (no retry offered), never "rejected".
            refusal = yield from self._refusal(p, op)
            if refusal is not None:
                p.retry_forbidden = True
                evidence = Evidence.inconclusive(
                    f"the retry ordered by {answer.by} was refused: {refusal}", source="authorize"
                )
                p.notice = (
                    f"Your retry of operation {op.operation_id} was not sent: {refusal}. "
                    "Confirm or reject it."
                )
                p.evidence.append(evidence)
                return (yield from self._guarded(p, op, RecordEvidence(key, evidence, answer=mark)))
        resolution = Resolution(
            decision=answer.decision,
            by=by,
            reason=answer.reason,
            result=answer.result,
            answer=mark,
            claimed_by=answer.claimed_by,
            verified_by=answer.verified_by,
        )
        new = yield from self._guarded(p, op, Resolve(key, resolution))
        if answer.decision is Decision.RETRY:
            p.retried = False
        return new

    def _edit(
        self, p: _Pass, op: Operation, answer: Answer, mark: str | None
    ) -> Generator[Action, Any, Operation]:
        """A reviewer's edit is a new call: a new operation, approved by that reviewer."""
        assert answer.edited_args is not None
        assert answer.by is not None
        edited = p.call.with_args(answer.edited_args)

        def prepare(c: EffectCall) -> Prepare:
            return Prepare(c.draft(), lease_for=self.lease_for)

        # Its own operation: an edit equal to an answered call or to a sibling is not it.
        prepared = yield from ledger(prepare(edited))
        new_call, prepared = yield from find_operation(edited, prepared, prepare)
        new_op = prepared.operation
        while new_op.replaced_by is not None and new_op.attempts == 0:
            # An edit back to arguments an earlier edit replaced (x -> y -> x): that
            # record never moves again and was never sent; the call the reviewer asks for
            # is a new operation, the next candidate (never every version left rejected).
            new_call = new_call.at(new_call.index + 1)
            prepared = yield from ledger(prepare(new_call))
            new_call, prepared = yield from find_operation(new_call, prepared, prepare)
            new_op = prepared.operation
        if new_op.operation_id == op.operation_id:
            # The edit asks for what the call already is (an edit given again, to the
            # request shown again after a crash): an approval of it, never "replaced by
            # itself", which would refuse the call the reviewer wants sent.
            if op.authorization_ref is not None:
                return op
            return (
                yield from self._guarded(
                    p,
                    op,
                    Approve(
                        op.key,
                        payload_digest=op.payload_digest,
                        by=answer.by,
                        reason="edited by the reviewer (unchanged)",
                        answer=mark,
                        claimed_by=answer.claimed_by,
                        verified_by=answer.verified_by,
                    ),
                )
            )
        if new_op.status is S.PREPARED and new_op.authorization_ref is None:
            new_op = yield from self._guarded(
                p,
                new_op,
                Approve(
                    new_op.key,
                    payload_digest=new_op.payload_digest,
                    by=answer.by,
                    reason="edited by the reviewer",
                    claimed_by=answer.claimed_by,
                    verified_by=answer.verified_by,
                ),
            )
        yield from self._guarded(
            p,
            op,
            Reject(
                op.key,
                token=None,
                reason=replaced_reason(new_op.operation_id, answer.by),
                evidence=Evidence.rejected("edited by the reviewer", source="operator"),
                actor=answer.by,
                answer=mark,
                claimed_by=answer.claimed_by,
                verified_by=answer.verified_by,
            ),
        )
        p.call = new_call
        return new_op

    def _follow_edit(self, p: _Pass, op: Operation) -> Generator[Action, Any, Operation | None]:
        new_id = op.replaced_by
        assert new_id is not None
        if new_id == op.operation_id or new_id in p.edits_followed:
            return None  # a replacement met before in this pass: its rejection stands
        p.edits_followed.add(op.operation_id)
        new_op = yield from ledger(Get(OperationKey(tenant_id=op.tenant_id, operation_id=new_id)))
        if new_op is None or not new_op.payload_stored or not isinstance(new_op.payload, dict):
            return None
        # The answers this task gave the call it replaced (the edit last) were logged there
        # and come first among the values LangGraph hands back: consumed before any about
        # the edited call, never read as its review's answer; a later answer to one of the
        # replaced call's questions answers an earlier question about the edited call.
        replaced = yield from self._answers(p, op.operation_id)
        mine = yield from self._answers(p, new_id)
        p.answers[new_id] = Answers(
            replaced.logged[replaced.consumed :] + mine.logged[mine.consumed :],
            applied=replaced.applied | mine.applied,
            earlier=replaced.earlier | mine.earlier | {op.operation_id},
        )
        p.followed.add(new_id)
        p.call = p.call.with_args(new_op.payload).at_id(new_op.operation_id)
        return new_op

    def _apply_elsewhere(
        self, p: _Pass, named: str, answer: Answer, mark: str | None, echoed: str | None
    ) -> Generator[Action, Any, str | None]:
        """Apply an answer to the sibling operation it names; what the person must be
        told instead when it cannot apply (None: applied)."""
        other = yield from ledger(Get(OperationKey(tenant_id=p.call.tenant_id, operation_id=named)))
        sibling = p.call.sibling(named) if other is None else None
        if sibling is not None:
            # A sibling call of this task that has not written its record yet.
            prepared = yield from ledger(Prepare(sibling, lease_for=self.lease_for))
            other = prepared.operation
        if other is None or other.workflow_id != p.call.workflow_id:
            raise InvalidAnswer(
                f"the answer names operation {named!r}, which this thread does not own",
                operation_id=named,
            )
        awaiting = (other.status is S.PREPARED and other.authorization_ref is None) or (
            other.status is S.UNKNOWN
        )
        if not awaiting:
            # Decided already (by its own call or out of band): as it says, or it is told
            # by whom, and when.
            if agrees(other, answer):
                return None
            return decided_note(other, (yield from ledger(Events(other.key))), answer)
        if echoed not in (None, round_id(other)):
            return earlier_round(echoed, other)
        if answer.edited_args is not None:
            raise InvalidAnswer(
                f"an edit for operation {named!r} reached another call; answer each "
                "interrupt by its id",
                operation_id=named,
            )
        check_decision(other, answer, retry_forbidden=False)
        yield from self._apply(_Pass(call=p.call), other, answer, mark)
        return None

    # -- drivers ---------------------------------------------------------------
