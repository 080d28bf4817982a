"""A person's answers: the log of answers applied, and the checks an answer must pass.

LangGraph hands a re-run task its earlier resume values again, by position;
the ledger logs every answer it applied (``answer_mark``: the task and the
value's digest), so the loop recognises a value handed back and never applies
it twice (``Answers``). ``answer_schema`` is the interrupt's
``response_schema``: an answer that would fail when applied fails before
LangGraph saves it, and the interrupt can be answered again.

Who decided (``identify``): the server's authenticated user when there is one
(``authenticated_user``: LangGraph Server's ``langgraph_auth_user``), else the
answer's ``by``; with neither the answer is refused, unless the face accepts
anonymous answers (recorded as ``anonymous``). When the answer's ``by`` names
someone else than the authenticated user, the user is recorded and the name
given is kept beside it (``claimed_by``). Either name must pass the one rule
for people in the event log (``core.actors.person_refusal``: no system actor,
no reserved form, no control characters).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, ValidationError

from langgraph_effects.core.actors import person_refusal
from langgraph_effects.core.digest import canonical_json
from langgraph_effects.core.model import (
    Decision,
    EventKind,
    Operation,
    OperationEvent,
    OperationStatus,
)
from langgraph_effects.decide.call import EffectCall
from langgraph_effects.errors import EffectsError
from langgraph_effects.review import Answer, InvalidAnswer, RequestKind, parse_answer

__all__ = [
    "ANONYMOUS",
    "AUTH_USER_KEY",
    "EARLIER_REQUEST",
    "KEPT",
    "NOT_APPLIED",
    "REFUSED_NOTE",
    "UNAPPLIED",
    "Answers",
    "agreed_note",
    "agrees",
    "answer_digest",
    "answer_mark",
    "answer_schema",
    "authenticated_user",
    "check_applicable",
    "check_decision",
    "decided_note",
    "earlier_round",
    "echoed_about",
    "identify",
    "kept_unapplied",
    "late_refusal",
    "named_round",
    "refusals",
    "refused_note",
    "repeated_answer",
    "replaced_note",
    "round_id",
    "set_aside_note",
    "shown_earlier",
    "verified_as",
]

S = OperationStatus
ANONYMOUS = "anonymous"
"""The actor of an answer that named nobody, where the face accepts anonymous answers."""
AUTH_USER_KEY = "langgraph_auth_user"
"""Where LangGraph Server puts the authenticated user in ``config["configurable"]``."""
_VERIFIED_BY = "langgraph-auth:"


def authenticated_user(config: Mapping[str, Any] | None) -> str | None:
    """The identity of the run's authenticated user (LangGraph Server), or None.

    The server puts its user object in ``config["configurable"]["langgraph_auth_user"]``
    (a ``BaseUser`` with ``identity`` and ``is_authenticated``; a dict of them once
    serialized). An unauthenticated user, or one without an identity, is nobody.
    """
    configurable = (config or {}).get("configurable") or {}
    user = configurable.get(AUTH_USER_KEY) if isinstance(configurable, Mapping) else None
    if user is None:
        return None
    try:
        if isinstance(user, Mapping):
            identity, authenticated = user.get("identity"), user.get("is_authenticated", True)
        else:
            identity = getattr(user, "identity", None)
            authenticated = getattr(user, "is_authenticated", True)
    except Exception:  # a user object whose properties are not implemented
        return None
    if authenticated is False or not isinstance(identity, str) or not identity.strip():
        return None
    return identity


def verified_as(user: str) -> str:
    """How the event log names an identity the server verified (``verified_by``)."""
    return f"{_VERIFIED_BY}{user}"


def identify(answer: Answer, *, user: str | None, anonymous: bool) -> Answer:
    """The answer with who decided settled: the actor the ledger records.

    The authenticated ``user`` wins (its ``by``, if another name, is kept as
    ``claimed_by``); else the answer's ``by``; else ``anonymous`` where the face
    accepts anonymous answers.

    Raises:
        InvalidAnswer: nobody is named and anonymous answers are refused;
            nothing is recorded and the request can be answered again.
    """
    if user is not None:
        user = _person(user, "the authenticated user", answer.operation_id)
    given = None if answer.by is None else _person(answer.by, "'by'", answer.operation_id)
    if user is not None:
        claimed = given if given is not None and given != user else None
        return dataclasses.replace(
            answer, by=user, claimed_by=claimed, verified_by=verified_as(user)
        )
    if given is not None:
        return dataclasses.replace(answer, by=given)
    if anonymous:
        return dataclasses.replace(answer, by=ANONYMOUS)
    raise InvalidAnswer(
        "who decides? answer with 'by' (beside 'decision', or beside 'decisions' in the "
        "HITL shape), or run under a server that authenticates its users; this node "
        "refuses anonymous answers (anonymous_answers=False)",
        operation_id=answer.operation_id,
    )


def _person(name: str, what: str, operation_id: str | None) -> str:
    """``name`` as the actor of a decision, by the one rule (``core.actors``)."""
    why = person_refusal(name)
    if why is not None:
        raise InvalidAnswer(f"{what} {name!r:.80} cannot decide: {why}", operation_id=operation_id)
    return name.strip()


@dataclass(slots=True)
class Answers:
    """The answers applied to one operation in one LangGraph task, in order, as logged.

    LangGraph hands a re-run task its earlier resume values again, by position:
    the k-th ``interrupt()`` of the run gets the k-th value the task was given.
    The ledger logs every answer it applied with its task and digest, so the
    values handed back are consumed in order and never applied twice::

        run 1: ask r1 -> "retry"  (applied, logged: task:d(retry))
        run 2: ask r2 -> "retry"  == logged[0] -> consumed; ask again -> "reject" (applied)
    """

    logged: list[str]
    consumed: int = 0
    applied: set[str] = dataclasses.field(default_factory=set)
    """The digests of every answer applied to the operation, in any task."""
    earlier: frozenset[str] = frozenset()
    """The operations of the calls this one replaced (a reviewer's edit): their answers
    in this task come first in ``logged``, and their questions are earlier questions
    about this one."""
    skipped: set[str] = dataclasses.field(default_factory=set)
    """The marks in ``logged`` of answers given to an earlier request LangGraph still
    showed, never applied (``shown_earlier``)."""

    def next_is(self, mark: str | None) -> bool:
        return (
            mark is not None
            and self.consumed < len(self.logged)
            and (self.logged[self.consumed] == mark)
        )

    def repeats(self, mark: str | None) -> bool:
        """A value equal to an answer applied already, out of its logged order.

        LangGraph keeps a resume given by position (``Command(resume=value)``)
        after it was handed out, and hands it to the next ``interrupt()`` that
        finds no value of its own in a later run (one resumed by interrupt id
        drops it first: ``drive._given_by_position``; one resumed without a value,
        after a crash, does not): an answer to an earlier question, shown to
        nobody as this one. Its digest is one the ledger logged; it is not
        applied again.
        """
        return (
            mark is not None and not self.next_is(mark) and mark.rpartition(":")[2] in self.applied
        )

    def note(self, mark: str) -> None:
        """``mark`` was applied now: the next value handed back in its place."""
        self.logged.insert(self.consumed, mark)
        self.consumed += 1
        self.applied.add(mark.rpartition(":")[2])

    def skip(self, mark: str) -> None:
        """``mark`` was logged now without applying (``shown_earlier``): the next value
        handed back in its place, and no answer applied (the same words may answer the
        current question)."""
        self.logged.insert(self.consumed, mark)
        self.consumed += 1
        self.skipped.add(mark)

    def handed_skipped(self, mark: str | None) -> bool:
        """A value handed back that was logged as given to an earlier request, past
        answers LangGraph lost with a crash (logged before it, never handed back: the
        value sits at their place): it and they are consumed."""
        if mark is None or mark not in self.skipped or mark not in self.logged[self.consumed :]:
            return False
        self.consumed = self.logged.index(mark, self.consumed) + 1
        return True


def round_id(op: Operation) -> str:
    """The request id of one question about ``op``: bound to what a person decides.

    The operation, its status, its attempts and its fencing token: a new
    dispatch, a takeover or a decision makes a new question. Evidence that
    changes nothing a person decides (an inconclusive reconciliation, which moves
    the record's version) asks the same question again, under the same id, so an
    answer that echoes it still applies.
    """
    return f"{op.operation_id}@{op.status.value}.{op.attempts}.{op.fencing_token}"


_ROUND_ID = re.compile(r"[^@]+@[a-z]+\.\d+\.\d+")


def named_round(value: Any, operation_id: str, earlier: Collection[str] = ()) -> str | None:
    """The request id an answer about ``operation_id`` echoes; None: it echoes none. A
    request about an operation of ``earlier`` (a call it replaced) is an earlier one.

    Raises:
        InvalidAnswer: the ``request_id`` is not a string, or not the id of a
            request about ``operation_id`` (a request of another operation, another
            thread, or no request of ours): the client is told, nothing is saved.
    """
    named = value.get("request_id") if isinstance(value, Mapping) else None
    if named is None:
        return None
    if not isinstance(named, str):
        raise InvalidAnswer(
            f"'request_id' must be the string a request carries, not {type(named).__name__}",
            operation_id=operation_id,
        )
    about = named.partition("@")[0]
    if not _ROUND_ID.fullmatch(named) or (about != operation_id and about not in earlier):
        raise InvalidAnswer(
            f"'request_id' {named!r:.120} names no request about operation {operation_id!r}: "
            "echo the request_id of the request you answer, or leave it out",
            operation_id=operation_id,
        )
    return named


def echoed_about(value: Any) -> str | None:
    """The operation a request id the answer echoes is about; None: it echoes none (or
    something no request of ours carries, which ``named_round`` refuses in words).

    An echoed request id names its operation as ``operation_id`` does: in a task of
    several effect calls, an answer that echoes the request it answers needs no more.
    """
    named = value.get("request_id") if isinstance(value, Mapping) else None
    if not isinstance(named, str) or not _ROUND_ID.fullmatch(named):
        return None
    return named.partition("@")[0]


def repeated_answer(operation_id: str) -> str:
    """What a person is told when an answer applied before comes back (``Answers.repeats``)."""
    return (
        f"An answer equal to one already applied to operation {operation_id} came back "
        "(LangGraph hands an answer given by position to a later question): it was not "
        "applied again. Answer this request, naming its request_id."
    )


KEPT = "Kept, not applied: "
"""How the log's record of a value consumed without applying begins (``kept_unapplied``):
its mark holds the value's place among the task's values; nothing it says was applied."""


def kept_unapplied(operation_id: str, earlier: str | None = None) -> str:
    """What the log keeps of a value a call's question consumed without applying: a repeat
    of an answer applied to ``operation_id`` (``Answers.repeats``), or an answer to
    ``earlier``, the request id of an earlier question. Its mark beside it holds its place
    among the task's values."""
    what = (
        f"an answer equal to one already applied to operation {operation_id}"
        if earlier is None
        else f"an answer to request {earlier}, an earlier question about operation {operation_id}"
    )
    kept = f"{KEPT}{what} came back at this call's question; each later run hands it back there"
    return kept[:2000]


REFUSED_NOTE = "Your answer was refused, nothing was recorded: "
"""How the request asked again after a refused answer begins (``refused_note``)."""


def refused_note(error: ValidationError | str) -> str:
    """What a person is told when their answer was refused: what was wrong (the request's
    schema's error, or the words given)."""
    if isinstance(error, str):
        why = error
    else:
        errors = error.errors()
        cause = (errors[0].get("ctx") or {}).get("error") if errors else None
        why = str(cause) if cause is not None else str(errors[0]["msg"] if errors else error)
    return f"{REFUSED_NOTE}{why.rstrip('.')}. Answer this request again."


def earlier_round(named: str, op: Operation) -> str:
    """What a person is told when their answer names an earlier question about ``op``."""
    return (
        f"Your answer to request {named} was not applied: it answers an earlier question "
        f"about operation {op.operation_id}, which is now {op.status.value} after "
        f"{op.attempts} attempt(s). Answer this request instead."
    )


EARLIER_REQUEST = "Not applied, it answered an earlier request: "
"""How the log's record of an answer to a request LangGraph still showed begins
(``shown_earlier``): logged with its mark to hold its place, never counted as applied."""


def shown_earlier(
    shown: str, op: Operation, events: Sequence[OperationEvent], answer: Answer
) -> str:
    """What a person is told, and the log keeps, when an answer that names no request
    answered ``shown``, the request LangGraph still showed (the process died before it
    saved a newer one), an earlier question about ``op``: who decided what and when, when
    it was sent, what ``op`` is now."""
    person = next(
        (e for e in reversed(events) if e.kind in (EventKind.APPROVE, EventKind.RESOLVE)), None
    )
    said = ""
    if person is not None:
        decided = person.detail.get("decision") if isinstance(person.detail, dict) else None
        what = decided if isinstance(decided, str) else person.kind.value
        said = f"{person.actor} decided {what} at {person.at:%Y-%m-%d %H:%M:%S} UTC; "
    claims = [e for e in events if e.kind is EventKind.CLAIM]
    sent = (
        "never sent"
        if not claims
        else f"last sent at {claims[-1].at:%Y-%m-%d %H:%M:%S} UTC ({op.attempts} attempt(s))"
    )
    return (
        f"{EARLIER_REQUEST}your {answer.decision.value} answered request {shown}, an "
        f"earlier question about operation {op.operation_id}: {said}{sent}; it is "
        f"{op.status.value} now. Nothing you answered changed it. Answer this request "
        "instead."
    )[:2000]


def replaced_note(named: str, op: Operation) -> str:
    """What a person is told when their answer is about ``named``, a call a reviewer's
    edit replaced with ``op``, once ``op`` was dispatched."""
    return (
        f"Your answer about operation {named} was not applied: a reviewer's edit replaced "
        f"it with operation {op.operation_id}, which was dispatched and is now "
        f"{op.status.value} after {op.attempts} attempt(s). Answer this request instead."
    )


_DECIDING = frozenset({EventKind.APPROVE, EventKind.REJECT, EventKind.RESOLVE, EventKind.CLAIM})


def agrees(op: Operation, answer: Answer) -> bool:
    """``op`` already stands as ``answer`` decides: nothing to change, nothing to tell.

    Rejected for a rejection, confirmed for a confirmation, approved (or
    dispatched) for an approval without an edit, a retry ordered (prepared again after
    a dispatch) for a retry.
    """
    if op.status is S.REJECTED:
        return answer.decision is Decision.REJECT
    if op.status is S.CONFIRMED and answer.decision is Decision.CONFIRM:
        return True
    if op.status is S.PREPARED and op.attempts > 0 and answer.decision is Decision.RETRY:
        return True  # a retry ordered, not sent yet
    approved = op.authorization_ref is not None or op.attempts > 0
    return answer.decision is Decision.APPROVE and answer.edited_args is None and approved


def _since(op: Operation, events: Sequence[OperationEvent]) -> str:
    """Who decided ``op`` what, and when: the last decision the log holds (an approval,
    a rejection, a resolution, or the claim of a dispatch)."""
    last = next((e for e in reversed(events) if e.kind in _DECIDING), None)
    if last is None:
        return f"it is {op.status.value}"
    if last.kind is EventKind.CLAIM:
        return f"it was dispatched at {last.at:%Y-%m-%d %H:%M:%S} UTC (now {op.status.value})"
    decided = last.detail.get("decision") if isinstance(last.detail, dict) else None
    what = decided if isinstance(decided, str) else last.kind.value
    return f"{last.actor} decided {what} at {last.at:%Y-%m-%d %H:%M:%S} UTC (now {op.status.value})"


def decided_note(op: Operation, events: Sequence[OperationEvent], answer: Answer) -> str:
    """Why ``answer`` came too late for ``op``: who decided what, and when.

    The last decision the log holds (an approval, a rejection, a resolution,
    or the claim of a dispatch) names its actor and instant.
    """
    return (
        f"Your {answer.decision.value} of operation {op.operation_id} was not applied: "
        f"{_since(op, events)}. Nothing you answered changed it."
    )


NOT_APPLIED = "Not applied: "
"""How the log's record of a late answer begins (``late_refusal``), and its ToolMessage's
words (``refusals``)."""


def late_refusal(op: Operation, events: Sequence[OperationEvent], answer: Answer) -> str:
    """What the log keeps, and the ToolMessage says, of an answer read after ``op`` was
    decided for good (it reached a call that asked nothing more): who answered what, who
    decided the operation what and when, and when it was sent."""
    since = _since(op, events)
    sent = "" if since.startswith("it was dispatched") else _sent(op)
    return (
        f"{NOT_APPLIED}{answer.by}'s {answer.decision.value} of operation {op.operation_id} "
        f"came too late: {since}{sent}. Nothing {answer.by} answered changed it."
    )[:2000]


def agreed_note(op: Operation, events: Sequence[OperationEvent], answer: Answer) -> str:
    """What the log keeps of a late answer that agrees with a decision not final yet (a
    retry ordered out of band): it is not told, only kept with its mark."""
    return (
        f"{answer.by}'s {answer.decision.value} of operation {op.operation_id} agrees: "
        f"{_since(op, events)}."
    )[:2000]


def set_aside_note(op: Operation, answer: Answer) -> str:
    """What the log keeps of an older answer given by position that an answer given by
    interrupt id set aside (``asking._set_aside``, ``approvals._set_aside``): it is not
    told, only kept with its mark (a value consumed without applying, as ``KEPT`` says),
    so that LangGraph handing it back after a crash is consumed, never read as the
    person's last word."""
    return (
        f"{KEPT}an earlier answer given by position, set aside: {answer.by}'s "
        f"{answer.decision.value} of operation {op.operation_id}, given by interrupt id, "
        "decides."
    )[:2000]


UNAPPLIED = (NOT_APPLIED, KEPT, EARLIER_REQUEST)
"""How every log record of an answer logged with its mark and not applied begins: a late
answer (``late_refusal``), a value kept at its place (``kept_unapplied``,
``set_aside_note``), an answer to a request LangGraph still showed (``shown_earlier``)."""


def refusals(events: Sequence[OperationEvent]) -> list[str]:
    """The late answers the log keeps as not applied (``late_refusal``), in order."""
    return [
        e.evidence.summary
        for e in events
        if e.kind is EventKind.EVIDENCE
        and e.evidence is not None
        and e.evidence.summary.startswith(NOT_APPLIED)
        and isinstance(e.detail, dict)
        and isinstance(e.detail.get("answer"), str)
    ]


def _sent(op: Operation) -> str:
    if op.first_dispatched_at is None:
        return "; never sent"
    return f"; sent at {op.first_dispatched_at:%Y-%m-%d %H:%M:%S} UTC"


def answer_mark(call: EffectCall, value: Any) -> str | None:
    """How the ledger logs an answer: the task that received it and the value's digest."""
    if call.task_id is None:
        return None
    return f"{call.task_id}:{answer_digest(value)}"


def answer_digest(value: Any) -> str:
    """The digest of a resume value, as the ledger logs it (``answer_mark``)."""
    try:
        raw = canonical_json(value)
    except EffectsError:
        raw = repr(value).encode()
    return hashlib.sha256(raw).hexdigest()[:32]


_MAX_ANSWER_BYTES = 64 * 1024
"""Largest result or edited arguments an answer may carry (canonical JSON)."""


def answer_schema(
    call: EffectCall,
    op: Operation,
    *,
    kind: RequestKind,
    retry_forbidden: bool,
    stale: Callable[[Any], bool],
    request_id: str,
    offered: Sequence[str] | None = None,
    anonymous: bool = False,
    earlier: Collection[str] = (),
) -> Any:
    """The interrupt's ``response_schema``: LangGraph checks an answer with it *before*
    saving it, so an answer that would fail when applied is refused instead (asked
    again, saying why: ``decide.drive``), and the interrupt can be answered again.
    Values LangGraph hands back from earlier rounds (``stale``) pass unchecked: the
    runner consumes them without applying."""

    def check(value: Any) -> Any:
        answer = parse_answer(value, tool_name=call.tool_name)
        if answer.operation_id is None and echoed_about(value) is None and not call.single:
            raise ValueError(
                "several effect calls of this step await a person: the answer must name "
                f"its operation_id or echo its request_id (this request is about "
                f"{op.operation_id!r})"
            )
        elsewhere = answer.operation_id not in (None, op.operation_id)
        if elsewhere and answer.operation_id in earlier:
            # About the call an edit replaced with this one (its approval, consumed where
            # it was first handed): not applied, told and asked again (``asking.Asking._ask``).
            return value
        if elsewhere and call.sibling(str(answer.operation_id)) is None:
            raise ValueError(
                f"the answer names operation {answer.operation_id!r}, which this step does "
                f"not own (this request is about {op.operation_id!r})"
            )
        if stale(value):
            return value
        named = answer.operation_id or op.operation_id
        echoed = named_round(value, named, earlier if named == op.operation_id else ())
        if echoed not in (None, request_id) and named == op.operation_id:
            return value  # an earlier question about this operation: told and asked again
        answer = identify(answer, user=call.user, anonymous=anonymous)
        if answer.operation_id in (None, op.operation_id):
            answer = parse_answer(value, tool_name=call.tool_name, kind=kind, offered=offered)
            check_decision(op, answer, retry_forbidden=retry_forbidden)
        check_applicable(answer)
        return value

    return Annotated[Any, AfterValidator(check)]


def check_applicable(answer: Answer) -> None:
    """Refuse what the ledger would refuse when the answer is applied."""
    if len(answer.reason) > 4000:
        raise InvalidAnswer("'reason' is longer than 4000 characters")
    for what, value in (("result", answer.result), ("edited arguments", answer.edited_args)):
        if value is None:
            continue
        try:
            size = len(canonical_json(value))
        except EffectsError as exc:
            raise InvalidAnswer(f"the answer's {what} must be plain JSON: {exc}") from None
        if size > _MAX_ANSWER_BYTES:
            raise InvalidAnswer(
                f"the answer's {what} is {size} bytes of JSON; the limit is {_MAX_ANSWER_BYTES}"
            )


def check_decision(op: Operation, answer: Answer, *, retry_forbidden: bool) -> None:
    """Refuse a decision that does not fit the operation's state; nothing is recorded."""
    if op.status is S.PREPARED:
        allowed = {Decision.APPROVE, Decision.REJECT}
    elif op.status is S.UNKNOWN:
        allowed = {Decision.CONFIRM, Decision.REJECT}
        if not retry_forbidden:
            allowed.add(Decision.RETRY)
    else:
        allowed = set()
    if answer.decision not in allowed:
        names = ", ".join(sorted(d.value for d in allowed)) or "none (already decided)"
        raise InvalidAnswer(
            f"decision {answer.decision.value!r} does not apply to operation "
            f"{op.operation_id!r} ({op.status.value}); allowed: {names}",
            operation_id=op.operation_id,
        )
