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
given is kept beside it (``claimed_by``).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator

from langgraph_effects.core.digest import canonical_json
from langgraph_effects.core.model import Decision, Operation, OperationStatus
from langgraph_effects.decide.call import EffectCall
from langgraph_effects.errors import EffectsError
from langgraph_effects.review import Answer, InvalidAnswer, RequestKind, parse_answer

__all__ = [
    "ANONYMOUS",
    "AUTH_USER_KEY",
    "Answers",
    "answer_digest",
    "answer_mark",
    "answer_schema",
    "authenticated_user",
    "check_applicable",
    "check_decision",
    "identify",
    "outdated",
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
        claimed = answer.by if answer.by is not None and answer.by != user else None
        return dataclasses.replace(
            answer, by=user, claimed_by=claimed, verified_by=verified_as(user)
        )
    if answer.by is not None:
        return answer
    if anonymous:
        return dataclasses.replace(answer, by=ANONYMOUS)
    raise InvalidAnswer(
        "who decides? answer with 'by' (beside 'decision', or beside 'decisions' in the "
        "HITL shape), or run under a server that authenticates its users; this node "
        "refuses anonymous answers (anonymous_answers=False)",
        operation_id=answer.operation_id,
    )


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

    def next_is(self, mark: str | None) -> bool:
        return (
            mark is not None
            and self.consumed < len(self.logged)
            and (self.logged[self.consumed] == mark)
        )


def outdated(value: Any, request: Mapping[str, Any]) -> bool:
    """The answer names the request it answers (``request_id``), and it is not this one."""
    named = value.get("request_id") if isinstance(value, Mapping) else None
    return named is not None and named != request.get("request_id")


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
) -> Any:
    """The interrupt's ``response_schema``: LangGraph checks an answer with it *before*
    saving it, so an answer that would fail when applied fails the run instead, and
    the interrupt can be answered again. Values LangGraph hands back from earlier
    rounds (``stale``) pass unchecked: the runner consumes them without applying."""
    owned = {op.operation_id, *call.siblings}

    def check(value: Any) -> Any:
        answer = parse_answer(value, tool_name=call.tool_name)
        if answer.operation_id is None and not call.single:
            raise ValueError(
                "several effect calls of this step await a person: the answer must name "
                f"its operation_id (this request is about {op.operation_id!r})"
            )
        if answer.operation_id is not None and answer.operation_id not in owned:
            raise ValueError(
                f"the answer names operation {answer.operation_id!r}, which this step does "
                f"not own (this request is about {op.operation_id!r})"
            )
        if stale(value) or outdated(value, {"request_id": request_id}):
            return value
        answer = identify(answer, user=call.user, anonymous=anonymous)
        if answer.operation_id in (None, op.operation_id):
            answer = parse_answer(value, tool_name=call.tool_name, kind=kind, offered=offered)
            check_decision(op, answer, retry_forbidden=retry_forbidden)
        check_applicable(answer)
        return value

    return Annotated[Any, AfterValidator(check)]


def check_applicable(answer: Answer) -> None:
    """Refuse what the ledger would refuse when the answer is applied."""
    if answer.by is not None and len(answer.by) > 200:
        raise InvalidAnswer("'by' is longer than 200 characters")
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
