"""What the decision loop asks its driver to do: typed actions.

The loop (``decide.loop``) is a generator: it yields one of these and receives
the result (or has the error thrown back in). A ledger call is a
``LedgerAction[T]``: one small frozen dataclass per ledger verb, holding the
arguments and calling the verb, written once, on a sync ``Ledger`` or an
``AsyncLedger`` (``on``), so mypy and a reader follow every call to the
protocol. ``ledger(action)`` is the ``yield from`` form that keeps ``T``::

    op = yield from ledger(Confirm(key, token=token, result=value))

The other actions are the loop's only other contacts with the world: a hook
of the effect (``Hook``), the dispatch (``Dispatch``), a pause (``Sleep``) and
a question for a person (``Ask``). A face's driver decides how each is done.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, TypeAlias, TypeVar, overload

from langchain_core.messages import ToolMessage
from langgraph.types import Command

from langgraph_effects.core.model import (
    Evidence,
    LeaseOwner,
    Operation,
    OperationDraft,
    OperationEvent,
    OperationKey,
    Prepared,
    Resolution,
)
from langgraph_effects.effects import EffectContext
from langgraph_effects.errors import EffectsError
from langgraph_effects.ledger.base import (
    DEFAULT_LEASE,
    AsyncLedger,
    Confirmation,
    Ledger,
    OpenOperations,
)
from langgraph_effects.slot import CallSlot

__all__ = [
    "Action",
    "Adopt",
    "Approve",
    "Ask",
    "BindThread",
    "Claim",
    "Confirm",
    "ConfirmMany",
    "Dispatch",
    "Dispatched",
    "Events",
    "Get",
    "Hook",
    "LedgerAction",
    "ListOpen",
    "MarkUnknown",
    "Prepare",
    "PrepareMany",
    "RecordEvidence",
    "Reject",
    "Release",
    "Renew",
    "Resolve",
    "SetAside",
    "Shown",
    "Sleep",
    "Waiting",
    "claims",
    "ledger",
]

T = TypeVar("T")


class LedgerAction(Generic[T]):
    """One ledger call, typed by what it returns.

    Each verb writes its call once (``_on``), against ``Ledger | AsyncLedger``:
    mypy checks it against both protocols, and ``on`` types the result for the
    ledger at hand (``T``, or ``Awaitable[T]`` to await).
    """

    __slots__ = ()

    @overload
    def on(self, ledger: Ledger) -> T: ...

    @overload
    def on(self, ledger: AsyncLedger) -> Awaitable[T]: ...

    def on(self, ledger: Ledger | AsyncLedger) -> T | Awaitable[T]:
        """Make the call on ``ledger``: the result, or for an async ledger its awaitable."""
        return self._on(ledger)

    def _on(self, ledger: Ledger | AsyncLedger) -> T | Awaitable[T]:
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # At run time a verb's ``on`` is its own ``_on``: the typed entry point costs
        # no extra call on the way to the ledger.
        cls.on = cls._on  # type: ignore[assignment,method-assign]


@dataclass(frozen=True, slots=True)
class Prepare(LedgerAction[Prepared]):
    draft: OperationDraft
    owner: LeaseOwner | None = None
    lease_for: timedelta = DEFAULT_LEASE

    def _on(self, ledger: Ledger | AsyncLedger) -> Prepared | Awaitable[Prepared]:
        return ledger.prepare(self.draft, owner=self.owner, lease_for=self.lease_for)


@dataclass(frozen=True, slots=True)
class PrepareMany(LedgerAction[list[Prepared]]):
    drafts: Sequence[OperationDraft]
    owner: LeaseOwner | None = None
    lease_for: timedelta = DEFAULT_LEASE

    def _on(self, ledger: Ledger | AsyncLedger) -> list[Prepared] | Awaitable[list[Prepared]]:
        return ledger.prepare_many(self.drafts, owner=self.owner, lease_for=self.lease_for)


@dataclass(frozen=True, slots=True)
class Approve(LedgerAction[Operation]):
    key: OperationKey
    payload_digest: str
    by: str
    reason: str = ""
    answer: str | None = None
    claimed_by: str | None = None
    verified_by: str | None = None

    def _on(self, ledger: Ledger | AsyncLedger) -> Operation | Awaitable[Operation]:
        k = self.key
        return ledger.approve(
            k.tenant_id,
            k.operation_id,
            payload_digest=self.payload_digest,
            by=self.by,
            reason=self.reason,
            answer=self.answer,
            claimed_by=self.claimed_by,
            verified_by=self.verified_by,
        )


@dataclass(frozen=True, slots=True)
class Claim(LedgerAction[Operation]):
    key: OperationKey
    owner: LeaseOwner
    lease_for: timedelta
    actor: str | None = None

    def _on(self, ledger: Ledger | AsyncLedger) -> Operation | Awaitable[Operation]:
        k = self.key
        return ledger.claim(
            k.tenant_id,
            k.operation_id,
            owner=self.owner,
            lease_for=self.lease_for,
            actor=self.actor,
        )


def claims(action: LedgerAction[Any]) -> bool:
    """``action`` takes a lease to dispatch: a ``Claim``, or a write-ahead record fused
    with its claim (``Prepare`` / ``PrepareMany`` with an owner). A cancelled task takes
    none (``decide.drive``): it would send a call nobody waits for."""
    if isinstance(action, Claim):
        return True
    return isinstance(action, Prepare | PrepareMany) and action.owner is not None


@dataclass(frozen=True, slots=True)
class Renew(LedgerAction[Operation]):
    key: OperationKey
    token: int
    lease_for: timedelta

    def _on(self, ledger: Ledger | AsyncLedger) -> Operation | Awaitable[Operation]:
        k = self.key
        return ledger.renew(k.tenant_id, k.operation_id, token=self.token, lease_for=self.lease_for)


@dataclass(frozen=True, slots=True)
class Confirm(LedgerAction[Operation]):
    """A receipt. A driver with group commit records it with its neighbours' (``decide.commit``)."""

    key: OperationKey
    token: int
    result: Any = None
    provider_result_id: str | None = None

    @property
    def confirmation(self) -> Confirmation:
        """This receipt as one item of ``confirm_many``."""
        k = self.key
        return Confirmation(
            tenant_id=k.tenant_id,
            operation_id=k.operation_id,
            token=self.token,
            result=self.result,
            provider_result_id=self.provider_result_id,
        )

    def _on(self, ledger: Ledger | AsyncLedger) -> Operation | Awaitable[Operation]:
        k = self.key
        return ledger.confirm(
            k.tenant_id,
            k.operation_id,
            token=self.token,
            result=self.result,
            provider_result_id=self.provider_result_id,
        )


@dataclass(frozen=True, slots=True)
class ConfirmMany(LedgerAction[list[Operation | EffectsError]]):
    confirmations: Sequence[Confirmation]

    def _on(
        self, ledger: Ledger | AsyncLedger
    ) -> list[Operation | EffectsError] | Awaitable[list[Operation | EffectsError]]:
        return ledger.confirm_many(self.confirmations)


@dataclass(frozen=True, slots=True)
class Reject(LedgerAction[Operation]):
    """Reject a claimed operation (``token``) or a prepared one (``token=None``)."""

    key: OperationKey
    token: int | None
    reason: str
    evidence: Evidence | None = None
    actor: str | None = None
    answer: str | None = None
    claimed_by: str | None = None
    verified_by: str | None = None

    def _on(self, ledger: Ledger | AsyncLedger) -> Operation | Awaitable[Operation]:
        k = self.key
        return ledger.reject(
            k.tenant_id,
            k.operation_id,
            token=self.token,
            reason=self.reason,
            evidence=self.evidence,
            actor=self.actor,
            answer=self.answer,
            claimed_by=self.claimed_by,
            verified_by=self.verified_by,
        )


@dataclass(frozen=True, slots=True)
class Release(LedgerAction[Operation]):
    key: OperationKey
    token: int
    reason: str

    def _on(self, ledger: Ledger | AsyncLedger) -> Operation | Awaitable[Operation]:
        k = self.key
        return ledger.release(k.tenant_id, k.operation_id, token=self.token, reason=self.reason)


@dataclass(frozen=True, slots=True)
class MarkUnknown(LedgerAction[Operation]):
    key: OperationKey
    token: int
    reason: str
    evidence: Evidence | None = None
    actor: str | None = None

    def _on(self, ledger: Ledger | AsyncLedger) -> Operation | Awaitable[Operation]:
        k = self.key
        return ledger.mark_unknown(
            k.tenant_id,
            k.operation_id,
            token=self.token,
            reason=self.reason,
            evidence=self.evidence,
            actor=self.actor,
        )


@dataclass(frozen=True, slots=True)
class Resolve(LedgerAction[Operation]):
    key: OperationKey
    resolution: Resolution

    def _on(self, ledger: Ledger | AsyncLedger) -> Operation | Awaitable[Operation]:
        return ledger.resolve(self.key.tenant_id, self.key.operation_id, self.resolution)


@dataclass(frozen=True, slots=True)
class RecordEvidence(LedgerAction[Operation]):
    key: OperationKey
    evidence: Evidence
    answer: str | None = None

    def _on(self, ledger: Ledger | AsyncLedger) -> Operation | Awaitable[Operation]:
        k = self.key
        return ledger.record_evidence(k.tenant_id, k.operation_id, self.evidence, self.answer)


@dataclass(frozen=True, slots=True)
class Adopt(LedgerAction[Operation | None]):
    key: OperationKey
    origin: str
    expected: str | None

    def _on(self, ledger: Ledger | AsyncLedger) -> Operation | Awaitable[Operation | None] | None:
        return ledger.adopt(
            self.key.tenant_id, self.key.operation_id, origin=self.origin, expected=self.expected
        )


@dataclass(frozen=True, slots=True)
class Get(LedgerAction[Operation | None]):
    key: OperationKey

    def _on(self, ledger: Ledger | AsyncLedger) -> Operation | Awaitable[Operation | None] | None:
        return ledger.get(self.key.tenant_id, self.key.operation_id)


@dataclass(frozen=True, slots=True)
class Events(LedgerAction[list[OperationEvent]]):
    key: OperationKey

    def _on(
        self, ledger: Ledger | AsyncLedger
    ) -> list[OperationEvent] | Awaitable[list[OperationEvent]]:
        return ledger.events(self.key.tenant_id, self.key.operation_id)


@dataclass(frozen=True, slots=True)
class ListOpen(LedgerAction[OpenOperations]):
    """The unresolved operations of one tenant on one action and target."""

    tenant_id: str
    action: str
    target: str
    limit: int

    def _on(self, ledger: Ledger | AsyncLedger) -> OpenOperations | Awaitable[OpenOperations]:
        return ledger.open_operations(
            self.tenant_id, action=self.action, target=self.target, limit=self.limit
        )


@dataclass(frozen=True, slots=True)
class BindThread(LedgerAction[str]):
    workflow_id: str
    tenant_id: str

    def _on(self, ledger: Ledger | AsyncLedger) -> str | Awaitable[str]:
        return ledger.bind_thread(self.workflow_id, self.tenant_id)


# --------------------------------------------------------------------------- the others


@dataclass(frozen=True, slots=True)
class Hook:
    """Call one of the effect's hooks (``authorize``, ``reconcile``), or a face's own
    function (the outbox relay's table work): sync or async."""

    fn: Callable[[Any], Any]
    arg: Any


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Run the tool (the provider call) under the lease ``op`` holds; answered by ``Dispatched``."""

    op: Operation
    context: EffectContext
    args: dict[str, Any]


@dataclass(slots=True)
class Dispatched:
    """What one dispatch did: the tool's raw outcome, and ToolNode's message."""

    call: CallSlot
    message: ToolMessage | Command[Any] | None = None
    error: BaseException | None = None
    bubble: BaseException | None = None
    """An interrupt raised by the tool, or the task's cancellation: clean up, re-raise."""


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait ``seconds``. ``outlast``: a cancellation meanwhile is noted, not obeyed (the
    wait before a receipt's next try: the receipt is written, then the task is cancelled)."""

    seconds: float
    outlast: bool = False


@dataclass(frozen=True, slots=True)
class Ask:
    """A question for a person; answered with the person's value.

    ``schema`` is LangGraph's ``response_schema``: it checks an answer before
    LangGraph saves it.
    """

    request: dict[str, Any]
    schema: Any = field(default=None)
    held: bool = False
    """Take the value ``Waiting`` found (LangGraph answers at once); None when another
    task took it meanwhile (a value given by position goes to the first taker)."""


@dataclass(frozen=True, slots=True)
class Waiting:
    """What LangGraph holds for the task's next ``interrupt()``, without taking it: the
    value a person gave to a question this run has not asked (yet); None: nothing.

    A call that asks nothing more in this run (its record was decided meanwhile) reads
    it so that a late answer is applied or refused in words, never dropped
    (``decide.loop``); it takes it with ``Ask(..., held=True)``.
    """


@dataclass(frozen=True, slots=True)
class SetAside:
    """The value given by position (``Command(resume=value)``) that this run, resumed by
    interrupt id, sets aside; None: none (or a run not resumed by id).

    LangGraph keeps such a value among the checkpoint's pending writes; a run resumed by
    id drops it (``decide.drive``), but a crash before LangGraph saves that run's answer
    loses the drop, and the next run would hand the older value to the question it
    answered (``decide.asking``: logged, so it is consumed there).
    """


@dataclass(frozen=True, slots=True)
class Shown:
    """The request LangGraph showed the person for the value the last ``Ask`` returned,
    when it was given in this run: the saved checkpoint's pending interrupt of this task
    (None: a value handed back, none saved, or not asked through LangGraph).

    An answer that names no request (a HITL UI's, or a native one without
    ``request_id``) answers the request the person saw, which is not the current one
    when the process died before LangGraph saved a newer question (``decide.asking``).
    Yielded on the answer path only, and read only for a value the person gave in this
    run (never one handed back): the driver reads one checkpoint.
    """


Action: TypeAlias = LedgerAction[Any] | Hook | Dispatch | Sleep | Ask | Waiting | SetAside | Shown


def ledger(action: LedgerAction[T]) -> Generator[Action, Any, T]:
    """Yield one ledger call and return its typed result (``yield from ledger(...)``)."""
    result: T = yield action
    return result
