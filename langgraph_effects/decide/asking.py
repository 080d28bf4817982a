"""The decision loop's questions and answers: ask a person, apply the answer once, the last
word before dispatch, late answers, edits followed to their replacement (``decide.loop``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Mapping
from typing import Annotated, Any

from pydantic import AfterValidator

from langgraph_effects._faults import CrashPoint, crash_point
from langgraph_effects.core.model import (
    Decision,
    Evidence,
    Operation,
    OperationKey,
    OperationStatus,
    Resolution,
    replaced_reason,
)
from langgraph_effects.decide.actions import (
    Action,
    Approve,
    Ask,
    Events,
    Get,
    LedgerAction,
    ListOpen,
    Prepare,
    RecordEvidence,
    Reject,
    Resolve,
    SetAside,
    Shown,
    Waiting,
    ledger,
)
from langgraph_effects.decide.answers import (
    ANONYMOUS,
    EARLIER_REQUEST,
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
    kept_unapplied,
    late_refusal,
    named_round,
    refusals,
    repeated_answer,
    replaced_note,
    round_id,
    set_aside_note,
    shown_earlier,
)
from langgraph_effects.decide.call import EffectCall
from langgraph_effects.decide.identity import find_operation
from langgraph_effects.decide.messages import Via
from langgraph_effects.decide.state import MAX_STEPS, LoopBase, Pass
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

S = OperationStatus


def _named(value: Any) -> bool:
    """Whether ``value`` names the operation it answers (its ``operation_id``) or echoes
    one of its requests (``request_id``): it answers no other call's question."""
    return isinstance(value, Mapping) and bool(value.get("operation_id") or value.get("request_id"))


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


def _asked_after(mine: Answers, value: Any) -> bool:
    """Whether ``value`` may answer a question of ``op``'s: it names ``op`` (``_held``
    checked it), or it holds the place of an answer this task gave ``op`` (LangGraph lost
    it with a crash), or this task gave ``op`` none. An unnamed value after every answer
    this task gave ``op`` (all handed back) is, by position, the next question's: another
    call's (the Functional API runs several in one task), never taken."""
    if mine.consumed < len(mine.logged) or not mine.logged:
        return True
    return _named(value)


def _echoes(value: Any) -> bool:
    """Whether ``value`` carries a ``request_id`` (``named_round`` reads it)."""
    return isinstance(value, Mapping) and value.get("request_id") is not None


def _skipped(event: Any) -> bool:
    """An event that logs an answer to an earlier request, not applied (``shown_earlier``)."""
    evidence = getattr(event, "evidence", None)
    return evidence is not None and evidence.summary.startswith(EARLIER_REQUEST)


class Asking(LoopBase):
    """The steps of ``Loop`` that ask a person and apply the answers."""

    __slots__ = ()

    def answer(
        self, call: EffectCall, op: Operation, answer: Answer, mark: str | None
    ) -> Generator[Action, Any, Operation]:
        """Apply a person's answer to ``op``, asked outside the call's own loop (the
        batched approvals of ``decide.approvals``); ``mark`` is what the ledger logs."""
        return (yield from self._answered(Pass(call=call), op, answer, mark))

    def _answered(
        self, p: Pass, op: Operation, answer: Answer, mark: str | None
    ) -> Generator[Action, Any, Operation]:
        """``_apply``, then the crash window until LangGraph saves the answer."""
        new = yield from self._apply(p, op, answer, mark)
        crash_point(CrashPoint.AFTER_ANSWER)
        return new

    def _ask(self, p: Pass, op: Operation, *, kind: str) -> Generator[Action, Any, Operation]:
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
            now: str | bool = False
            if named == op.operation_id and mark is not None and not _echoes(value):
                # It names no request: it answers the one LangGraph showed, which is an
                # earlier question when the process died before LangGraph saved a newer.
                now = yield from self._shown_earlier(p, op, value, mark, mine, request)
                if isinstance(now, str):
                    request = with_notice(base, now)
                    continue
            if now is not True and answers.next_is(mark):
                answers.consumed += 1  # an earlier round's answer, applied already
                continue
            if now is not True and answers.handed_skipped(mark):
                continue  # given to an earlier request shown after a crash: told then
            if named != op.operation_id and named in mine.earlier:
                # It answers the approval of the call this one replaced (shown again after
                # a crash): too late, this call was dispatched; told and asked again.
                request = with_notice(base, replaced_note(named, op))
                continue
            echoed = named_round(value, named, answers.earlier if named == op.operation_id else ())
            if named == op.operation_id and echoed not in (None, request["request_id"]):
                # It answers an earlier question (shown by LangGraph after a crash, or sent
                # late): not applied; the current request is asked, saying why.
                yield from self._keep_unapplied(p, op, value, answers, echoed)
                request = with_notice(base, earlier_round(echoed, op))
                continue
            if answers.repeats(mark) and now is not True:
                # An answer applied before, handed to this later question (LangGraph
                # keeps a positional resume): not applied again; the person is asked.
                if named == op.operation_id:
                    yield from self._keep_unapplied(p, op, value, answers)
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
            op = yield from self._set_aside(p, op, answers, answer, mark)
            return (yield from self._answered(p, op, answer, mark))

    def _set_aside(
        self, p: Pass, op: Operation, mine: Answers, answer: Answer, mark: str | None
    ) -> Generator[Action, Any, Operation]:
        """Before an answer given by interrupt id applies: log the older answer given by
        position that this run sets aside (``SetAside``), with its mark, ahead of the
        answer's.

        LangGraph keeps that value; a crash after the ledger applied this answer and
        before LangGraph saved it loses the drop, and the next run hands the older value
        to this question again, where the logged answer was lost. Logged, it is consumed
        there as an answer handed back, never read as the person's last word (a refused
        one was shown with its refusal's reason, stale: the person answered since)::

            {resume: bad} ─▶ refused ─▶ {id0: approve} ─▶ bad logged, approved ─▶ ✗
              ─▶ invoke(None): bad handed back, consumed ─▶ the approval asked again
        """
        if mark is None:
            return op
        aside = yield SetAside()
        aside_mark = None if aside is None else answer_mark(p.call, aside)
        if aside_mark is None or aside_mark == mark or aside_mark in mine.logged:
            return op
        evidence = Evidence.inconclusive(set_aside_note(op, answer), source=answer.by or ANONYMOUS)
        op = yield from self._guarded(p, op, RecordEvidence(op.key, evidence, answer=aside_mark))
        mine.logged.insert(mine.consumed - 1, aside_mark)  # before this answer, as logged
        mine.consumed += 1
        return op

    def _shown_earlier(
        self, p: Pass, op: Operation, value: Any, mark: str, mine: Answers, request: Any
    ) -> Generator[Action, Any, str | bool]:
        """When ``value``, an answer about ``op`` that names no request, was given to an
        earlier question LangGraph still showed: logged as not applied (its mark holds its
        place among the task's values, never counted as applied) and what the person is
        told. Else whether the person gave it in this run to the current question (True:
        an answer of now, even in the words of one applied before, never a value handed
        back; False: nothing shows which question it answered).

        LangGraph shows a task's last saved interrupt. A process that died after the
        ledger moved on (the approval followed and the call sent; a retry ordered and
        resent) and before LangGraph saved the newer question leaves the earlier one
        shown, and the person answers it::

            approve ─▶ sent ─▶ ✗ ─▶ approval shown again ─▶ reject ─▶ told; review asked
            retry (round 1) ─▶ resent, unknown ─▶ ✗ ─▶ round 1 shown ─▶ retry ─▶ told;
              round 2 asked (applied to round 2, the ticket was created twice)

        Read only here, on the answer path (one checkpoint read, ``Shown``).
        """
        shown = yield Shown()
        named = shown.get("request_id") if isinstance(shown, Mapping) else None
        if not isinstance(named, str):
            return False
        if named == request["request_id"]:
            return True
        about = named.partition("@")[0]
        if about != op.operation_id and about not in mine.earlier:
            return False
        if mark.rpartition(":")[2] in mine.applied:
            return False  # the words of an answer applied: a repeat (``Answers.repeats``)
        try:
            answer = parse_answer(value, tool_name=p.call.tool_name)
            by = identify(answer, user=p.call.user, anonymous=self.anonymous_answers).by
        except InvalidAnswer:
            answer, by = parse_answer(value, tool_name=p.call.tool_name), None
        events = yield from ledger(Events(op.key))
        note = shown_earlier(named, op, events, answer)
        evidence = Evidence.inconclusive(note, source=by or ANONYMOUS)
        yield from self._guarded(p, op, RecordEvidence(op.key, evidence, answer=mark))
        mine.skip(mark)
        return note

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

    def _last_word(self, p: Pass, op: Operation) -> Generator[Action, Any, Operation | None]:
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
                    # Consumed without applying (answer_of): a repeat of an answer applied
                    # to it, given again to the request shown after a crash. Kept at its
                    # place, or a later run would hand it to the next call's question.
                    yield from self._keep_unapplied(p, op, value, mine)
                    continue
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

    def _keep_unapplied(
        self, p: Pass, op: Operation, value: Any, mine: Answers, earlier: str | None = None
    ) -> Generator[Action, Any, None]:
        """Log ``value``, which this call's question took at this place and consumed without
        applying (a repeat of an answer applied to ``op``, or an answer to ``earlier``, an
        earlier question about it), with its mark: every later run of the task hands it
        back here in its logged order (``Answers.next_is``), and no later question takes
        it, whichever call asks.

        Unlogged, a repeat that names nothing (Agent Chat UI's answer: no operation_id,
        no request_id) is read by position: once ``op`` is decided, ``_late_answers``
        leaves it for whoever asks next, the Functional API's next call in the same task,
        which met the first call's words (campaign seed 5257: an edit given again after a
        crash refused the second call's reject; a repeated approve would send it)::

            ask A ─▶ edit (applied) ─▶ ✗ ─▶ A shown again ─▶ edit again (kept here)
                  ─▶ ask B ─▶ reject ─▶ re-run: A takes both edits, B the reject

        And logged only later (``_late_answers`` logs a late answer it takes), the log
        lists it after answers LangGraph hands back after it: out of order, the call
        counts an answer of its own still to come and takes the next call's (campaign
        seed 1106). Only past every answer logged for ``op`` (its place follows theirs).
        """
        mark = answer_mark(p.call, value)
        if mark is None or mine.consumed < len(mine.logged):
            return
        try:
            answer = parse_answer(value, tool_name=p.call.tool_name)
            by = identify(answer, user=p.call.user, anonymous=self.anonymous_answers).by
        except InvalidAnswer:
            by = None
        evidence = Evidence.inconclusive(
            kept_unapplied(op.operation_id, earlier), source=by or ANONYMOUS
        )
        yield from self._guarded(p, op, RecordEvidence(op.key, evidence, answer=mark))
        mine.note(mark)

    def _held(
        self, p: Pass, op: Operation, mine: Answers, *, any_shape: bool
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

    def _retry_ordered(self, p: Pass, op: Operation) -> Generator[Action, Any, None]:
        """Before the resend of a retry ordered out of band (an operator's ``retry`` while
        the review was pending; the record is ``prepared`` again, sent before): the UI's
        answer to that review, which no ``interrupt()`` reads now, is read as a late
        answer (``_late_answers``): a retry agrees, anything else is logged as not applied
        and said (who decided what, when), and the operator's retry is sent::

            review asked ─▶ operator retries (CLI) ─▶ UI answers reject ─▶ told, resent
        """
        if op.status is S.PREPARED:
            yield from self._late_answers(p, op)

    def _late_answers(self, p: Pass, op: Operation) -> Generator[Action, Any, None]:
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
        for _ in range(MAX_STEPS):
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

    def _answers(self, p: Pass, operation_id: str) -> Generator[Action, Any, Answers]:
        """The answers applied to ``operation_id`` in this task, read once per pass."""
        known = p.answers.get(operation_id)
        if known is not None:
            return known
        task = p.call.task_id
        logged: list[str] = []
        applied: set[str] = set()
        skipped: set[str] = set()
        if task is not None:
            events = yield from ledger(
                Events(OperationKey(tenant_id=p.call.tenant_id, operation_id=operation_id))
            )
            for event in events:
                mark = event.detail.get("answer") if isinstance(event.detail, dict) else None
                if isinstance(mark, str):
                    if _skipped(event):
                        skipped.add(mark)
                    else:
                        applied.add(mark.rpartition(":")[2])
                    if mark.startswith(f"{task}:"):
                        logged.append(mark)
        p.answers[operation_id] = known = Answers(logged, applied=applied, skipped=skipped)
        return known

    def _apply(
        self, p: Pass, op: Operation, answer: Answer, mark: str | None
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
        self, p: Pass, op: Operation, answer: Answer, mark: str | None
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

    def _follow_edit(self, p: Pass, op: Operation) -> Generator[Action, Any, Operation | None]:
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
            skipped=replaced.skipped | mine.skipped,
        )
        p.followed.add(new_id)
        p.call = p.call.with_args(new_op.payload).at_id(new_op.operation_id)
        return new_op

    def _apply_elsewhere(
        self, p: Pass, named: str, answer: Answer, mark: str | None, echoed: str | None
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
        yield from self._apply(Pass(call=p.call), other, answer, mark)
        return None
