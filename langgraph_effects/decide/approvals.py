"""All approvals of one AIMessage, asked in one interrupt (``approvals="batched"``).

LangGraph refuses a resume without an interrupt id while several interrupts are
pending, and UIs built for LangChain's ``HumanInTheLoopMiddleware`` (Agent Chat
UI) resume that way. So the effect calls of an AIMessage that need an approval
are asked together, before any of them dispatches, at one point before the
fan-out (a face says where: ``EffectMiddleware.after_model``, ``EffectToolNode``
under ``tools_condition``, ``EffectToolNode.approval_node`` before
``route_tool_calls``)::

    prepare each (unclaimed) ─▶ one interrupt: {"action_requests": [...],
                                 "review_configs": [...], "operation_ids": [...]}
      ─▶ {"decisions": [...]} in order ─▶ each decision recorded on its operation
         (approve, reject; an edit is a new call, approved, the old one replaced)
      ─▶ fan-out: each call's decision loop finds its record decided, asks nothing

Applied once: every decision is logged on its operation with the task, the
value's digest and its position (``<task>#approvals:<digest>:<i>/<n>``). LangGraph
hands a re-run task its earlier resume values again, by position; a value
whose digest is logged is recognised and consumed, and only the positions a
crash left unapplied are applied. The batch always asks first in its task, so
its values are the task's first ones. An answer may echo the round's
``request_id``; one naming an earlier round is asked again, saying why.

The positions of an answer are those of the request the person saw: this
round's, or, when an operator decided some of its operations out of band since,
the first round's (every gated call). The last word before dispatch wins: a
decision applies to an operation still prepared and never dispatched, even one
approved meanwhile; one that would change an operation already dispatched or
rejected is not applied: it is logged on that operation as not applied
(``answers.late_refusal``), said in its call's ToolMessage, and the request asked
next (if any) says who decided it, and when. When an operator decided every operation
meanwhile, nothing is asked, and the answer LangGraph holds for the request asked
before is read all the same (``_late_answer``), never dropped.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Generator, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator

from langgraph_effects._faults import CrashPoint, crash_point
from langgraph_effects.core.model import Decision, Evidence, Operation, OperationStatus
from langgraph_effects.decide.actions import (
    Action,
    Ask,
    Events,
    Prepare,
    RecordEvidence,
    SetAside,
    Waiting,
    ledger,
)
from langgraph_effects.decide.answers import (
    ANONYMOUS,
    agrees,
    answer_digest,
    check_applicable,
    check_decision,
    decided_note,
    identify,
    late_refusal,
    round_id,
    set_aside_note,
)
from langgraph_effects.decide.call import EffectCall
from langgraph_effects.decide.identity import find_operation
from langgraph_effects.decide.loop import Loop
from langgraph_effects.decide.recognise import keyed_unknown_check, recognised
from langgraph_effects.errors import EffectsError
from langgraph_effects.review import (
    Answer,
    InvalidAnswer,
    approvals_request,
    hitl_decisions,
    parse_answer,
    with_notice,
)

__all__ = [
    "APPROVAL_MODES",
    "ApprovalMode",
    "ask_approvals",
    "decisions_of",
    "read_decisions",
    "record_refusals",
]

ApprovalMode = Literal["per_call", "batched"]
"""How a face asks approvals: one interrupt per call, or one per AIMessage."""
APPROVAL_MODES: tuple[ApprovalMode, ...] = ("per_call", "batched")

_MARK = re.compile(r"#approvals:(?P<digest>[0-9a-f]{32}):(?P<index>\d+)/(?P<count>\d+)$")


def _awaiting(op: Operation) -> bool:
    """Prepared, never dispatched, not approved: its approval is due (``core.plan``)."""
    return (
        op.status is OperationStatus.PREPARED and op.authorization_ref is None and not op.attempts
    )


def _undispatched(op: Operation) -> bool:
    """Prepared and never dispatched: a person's last word still decides it."""
    return op.status is OperationStatus.PREPARED and not op.attempts


def _round(asked: Sequence[Operation]) -> str:
    """The request id of one round: each operation's question (``answers.round_id``),
    which an approval given meanwhile does not change."""
    names = "|".join(round_id(op) for op in asked)
    return f"{_ROUND}{hashlib.sha256(names.encode()).hexdigest()[:24]}"


_ROUND = "approvals:"
_ROUND_ID = re.compile(rf"{_ROUND}[0-9a-f]{{24}}")


def decisions_of(value: Any) -> tuple[list[Mapping[str, Any]], Any]:
    """The decisions of an answer to a batched request, and the author beside them.

    Raises:
        InvalidAnswer: not a batch answer.
    """
    decisions = hitl_decisions(value)  # HITL decisions, or native ones with their "decision"
    if decisions is None:
        raise InvalidAnswer(
            "this request asks several approvals: answer {'decisions': [one per action "
            "request, in order]}"
        )
    return decisions, value.get("by") if isinstance(value, Mapping) else None


def read_decisions(
    decisions: Sequence[Mapping[str, Any]],
    by: Any,
    calls: Sequence[EffectCall],
    ops: Sequence[Operation],
    offered: Sequence[Sequence[str]],
    *,
    anonymous: bool = False,
) -> list[Answer]:
    """One ``Answer`` per call, in order, each with who decided settled
    (``answers.identify``: the run's authenticated user, else ``by``; nobody is
    refused unless ``anonymous``).

    Each decision is HITL-shaped (``{"type": ...}``) or native
    (``{"decision": ..., "by": ...}``); ``by`` (beside ``decisions``) is the
    author of each decision that names none; a decision naming an
    ``operation_id`` must name the one at its position.

    A decision about an operation that is no longer prepared (decided and
    dispatched meanwhile) is read, not checked against it: ``ask_approvals``
    tells the person who decided it, and when.

    Raises:
        InvalidAnswer: the wrong number of decisions, a decision not offered or
            not fitting its operation.
    """
    if len(decisions) != len(calls):
        raise InvalidAnswer(
            f"{len(decisions)} decision(s) for {len(calls)} action request(s): answer each "
            "action request, in order"
        )
    answers = []
    for decision, call, op, allowed in zip(decisions, calls, ops, offered, strict=True):
        named = decision.get("operation_id")
        if named is not None and named != op.operation_id:
            raise InvalidAnswer(
                f"a decision names operation {named!r} at the position of {op.operation_id!r}",
                operation_id=op.operation_id,
            )
        if by is not None and "by" not in decision:
            decision = {**decision, "by": by}
        answer = identify(
            parse_answer(decision, tool_name=call.tool_name, kind="approval", offered=allowed),
            user=call.user,
            anonymous=anonymous,
        )
        if _undispatched(op):
            check_decision(op, answer, retry_forbidden=False)
        check_applicable(answer)
        answers.append(answer)
    return answers


def ask_approvals(loop: Loop, calls: Sequence[EffectCall]) -> Generator[Action, Any, None]:
    """Ask the approvals due among ``calls`` (one AIMessage's effect calls) in one interrupt,
    and record the decisions; yields actions for a driver (``EffectRunner.ask_approvals``).

    Calls that need no approval, or that an upstream reviewer approved
    (``preapproved_by``), are left to their own decision loop; so is a call
    whose write-ahead fails (``PayloadMismatch``): it meets the error on its own.
    """
    gated: list[EffectCall] = []
    ops: dict[str, Operation] = {}

    def _prepare(c: EffectCall) -> Prepare:
        return Prepare(c.draft(), lease_for=loop.lease_for)

    for call in calls:
        if not call.spec.require_approval or call.preapproved_by is not None:
            continue
        if call.spec.older_payload_keys or keyed_unknown_check(call):
            call = yield from recognised(call)  # asked before a key rotation: the same
        if call.fixed_id and call.operation_id in ops:
            continue  # the same operation twice (an intent key): asked once
        try:
            prepared = yield from ledger(_prepare(call))
            call, prepared = yield from find_operation(call, prepared, _prepare)
        except EffectsError:
            continue
        if call.operation_id in ops:
            continue
        gated.append(call)
        ops[call.operation_id] = prepared.operation
    if not gated:
        return
    task = gated[0].task_id
    logged: dict[str, tuple[set[int], int]] = {}
    if task is not None and not all(_awaiting(ops[c.operation_id]) for c in gated):
        # Decided already: perhaps by an answer LangGraph will hand this task again.
        for call in gated:
            if _awaiting(ops[call.operation_id]):
                continue
            for event in (yield from ledger(Events(call.key))):
                mark = event.detail.get("answer") if isinstance(event.detail, dict) else None
                if not isinstance(mark, str) or not mark.startswith(f"{task}#"):
                    continue
                found = _MARK.search(mark)
                if found is not None:
                    done, _ = logged.setdefault(found["digest"], (set(), int(found["count"])))
                    done.add(int(found["index"]))
    decided: set[str] = set()
    notices: list[str] = []
    late = False
    while True:
        waiting = [
            c for c in gated if c.operation_id not in decided and _awaiting(ops[c.operation_id])
        ]
        if not waiting and not logged:
            if late or decided or not (yield from _late_answer(gated, ops)):
                return
            # Everything was decided meanwhile (out of band), and LangGraph holds the
            # answer to the request asked before: read, never dropped (``_late_answer``).
            late = True
        # What the answer's positions may mean: this request, or the one asked before an
        # operator decided some of its operations out of band (every gated call).
        frames = [waiting] if len(waiting) == len(gated) else [waiting, gated]
        if late:
            frames = [gated]
        shown = gated if late else waiting
        asked = [ops[c.operation_id] for c in shown]
        others = []
        for op in asked:
            others.append((yield from loop.open_on_target(op)))
        request: dict[str, Any] = approvals_request(
            [(op, c.tool_name, c.args) for op, c in zip(asked, shown, strict=True)],
            request_id=_round(asked),
            open_on_target=others,
        )
        if notices:
            request = with_notice(request, " ".join(notices))

        def frame_of(
            value: Any,
            frames: list[list[EffectCall]] = frames,
            request: Any = request,
            late: bool = late,
        ) -> list[EffectCall] | None:
            """The calls the answer's positions decide; None: an earlier round's answer."""
            if late:
                return frames[0]  # the request the person saw, whatever was decided since
            echoed = value.get("request_id") if isinstance(value, Mapping) else None
            if echoed is not None:
                if not isinstance(echoed, str) or not _ROUND_ID.fullmatch(echoed):
                    raise InvalidAnswer(
                        f"'request_id' {echoed!r:.120} names no request of these approvals: "
                        f"echo the request's id ({request['request_id']!r}), or leave it out"
                    )
                for frame in frames:
                    if echoed == _round([ops[c.operation_id] for c in frame]):
                        return frame
                return None
            decisions, _ = decisions_of(value)
            for frame in frames:
                if len(decisions) == len(frame):
                    return frame
            sizes = " or ".join(str(len(f)) for f in frames)
            raise InvalidAnswer(
                f"{len(decisions)} decision(s) for {sizes} action request(s): answer each "
                "action request of the request shown, in order"
            )

        def check(value: Any, frame_of: Any = frame_of, request: Any = request) -> Any:
            if answer_digest(value) in logged:
                return value  # handed back by LangGraph: applied already (see below)
            frame = frame_of(value)
            if frame is None:
                return value  # an earlier round: told why and asked again (below)
            decisions, by = decisions_of(value)
            read_decisions(
                decisions,
                by,
                frame,
                [ops[c.operation_id] for c in frame],
                [_offered(request, c) for c in frame],
                anonymous=loop.anonymous_answers,
            )
            return value

        value = yield Ask(request, Annotated[Any, AfterValidator(check)], held=late)
        if value is None:
            return  # the held answer was taken by another task meanwhile
        digest = answer_digest(value)
        applied: set[int] = set()
        frame: list[EffectCall]
        fresh = digest not in logged
        if digest in logged:
            applied, count = logged.pop(digest)
            same = [f for f in frames if len(f) == count]
            if not same:
                continue  # the rest was decided elsewhere meanwhile: nothing more to apply
            frame = same[0]
        else:
            # A new answer where a logged one was expected: LangGraph lost that one with a
            # crash and showed the batch again, so this answers it (the batch's values are
            # its task's first ones); the lost value will not be handed back.
            logged.clear()
            chosen = frame_of(value)
            if chosen is None:
                notices = [
                    f"Your answer to request {value.get('request_id')} was not applied: it "
                    "answers an earlier round of these approvals. Answer this request."
                ]
                continue
            frame = chosen
        decisions, by = decisions_of(value)
        positions = [i for i in range(len(frame)) if i not in applied]
        answers = read_decisions(
            [decisions[i] for i in positions],
            by,
            [frame[i] for i in positions],
            [ops[frame[i].operation_id] for i in positions],
            [_offered(request, frame[i]) for i in positions],
            anonymous=loop.anonymous_answers,
        )
        if fresh and task is not None and answers:
            first = frame[positions[0]].operation_id
            ops[first] = yield from _set_aside(task, value, ops[first], answers[0])
        notices = []
        for index, answer in zip(positions, answers, strict=True):
            call = frame[index]
            op = ops[call.operation_id]
            decided.add(call.operation_id)
            if agrees(op, answer):
                continue  # decided so already (out of band): nothing to change
            mark = None if task is None else f"{task}#approvals:{digest}:{index}/{len(frame)}"
            if not _undispatched(op):
                # Dispatched or rejected meanwhile: too late to change; the person is told,
                # in the request asked next and in the call's ToolMessage (what the log
                # keeps: ``answers.late_refusal``, with its mark, recognised on a re-run).
                events = yield from ledger(Events(op.key))
                notices.append(decided_note(op, events, answer))
                if op.status.terminal:  # an unknown one's review, asked next, decides it
                    assert answer.by is not None
                    refusal = Evidence.inconclusive(
                        late_refusal(op, events, answer), source=answer.by
                    )
                    ops[call.operation_id] = yield from ledger(
                        RecordEvidence(op.key, refusal, answer=mark)
                    )
                continue
            crash_point(CrashPoint.DURING_REVIEW_RESUME)
            ops[call.operation_id] = yield from loop.answer(call, op, answer, mark)


def _set_aside(
    task: str, value: Any, op: Operation, answer: Answer
) -> Generator[Action, Any, Operation]:
    """Before a batch answer given by interrupt id applies: log the older answer given
    by position that this run sets aside (``SetAside``) on the first operation the answer
    decides, as a batch value none of whose positions applies (``...:0/0``).

    A crash after the ledger applied part of this answer and before LangGraph saved it
    loses the drop, and the next run hands the older value to the request asked again,
    of the calls left, where it may fit (one decision for the one call left, though it
    was refused for two: it was applied to that call). Logged, it is consumed there
    (``ask_approvals``: no frame of no calls), never applied::

        {resume: 1 for 2} ─▶ refused ─▶ {id0: 2 approvals} ─▶ logged, A approved ─▶ ✗
          ─▶ invoke(None): B asked; the old value consumed, not applied to B
    """
    aside = yield SetAside()
    if aside is None or answer_digest(aside) == answer_digest(value):
        return op
    mark = f"{task}#approvals:{answer_digest(aside)}:0/0"
    evidence = Evidence.inconclusive(set_aside_note(op, answer), source=answer.by or ANONYMOUS)
    return (yield from ledger(RecordEvidence(op.key, evidence, answer=mark)))


_DECIDED = frozenset(
    {OperationStatus.PREPARED, OperationStatus.CONFIRMED, OperationStatus.REJECTED}
)


def _late_answer(
    gated: Sequence[EffectCall], ops: Mapping[str, Operation]
) -> Generator[Action, Any, bool]:
    """Whether LangGraph holds an answer to this batch's request although nothing is left
    to ask: an operator decided every operation out of band meanwhile (or a crash after
    the fan-out lost the answers LangGraph had). The batch asks first in its task, so the
    value held for the task's first question is the batch's, when it has its shape: one
    decision per gated call, and no request id but a batch's. Not while an operation is
    unknown or in flight: the value may answer its review, asked by its own call."""
    if any(ops[c.operation_id].status not in _DECIDED for c in gated):
        return False
    value = yield Waiting()
    if value is None:
        return False
    try:
        decisions, _ = decisions_of(value)
    except InvalidAnswer:
        return False
    echoed = value.get("request_id") if isinstance(value, Mapping) else None
    if echoed is not None and not (isinstance(echoed, str) and _ROUND_ID.fullmatch(echoed)):
        return False
    return len(decisions) == len(gated)


def _offered(request: Mapping[str, Any], call: EffectCall) -> Sequence[str]:
    """The decisions offered for ``call``: those of an approval (the same for every call)."""
    configs = request["review_configs"]
    return configs[0]["allowed_decisions"] if configs else ["approve", "edit", "reject"]


def record_refusals(
    loop: Loop, refused: Sequence[tuple[EffectCall, str]]
) -> Generator[Action, Any, None]:
    """Record refusals a reviewer gave upstream, on each call's operation.

    ``HumanInTheLoopMiddleware`` answers a call it was told to reject (or to
    answer in the tool's place) without running it, so the call never reaches
    its decision loop; its operation is prepared here (never claimed) and
    rejected with the reviewer's message, under who refused: the run's
    authenticated user, else ``anonymous`` (HITL's answers name nobody). A call
    decided already (a re-run of this step, an operator) is left as it is.
    """

    def prepare(c: EffectCall) -> Prepare:
        return Prepare(c.draft(), lease_for=loop.lease_for)

    for call, reason in refused:
        try:
            prepared = yield from ledger(prepare(call))
            call, prepared = yield from find_operation(call, prepared, prepare)
        except EffectsError:
            continue  # a payload mismatch: the call meets it on its own
        op = prepared.operation
        if not _undispatched(op):
            continue
        answer = identify(
            Answer(operation_id=op.operation_id, decision=Decision.REJECT, by=None, reason=reason),
            user=call.user,
            anonymous=True,
        )
        yield from loop.answer(call, op, answer, None)
