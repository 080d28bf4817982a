"""The one decision core: plan -> act -> record, for one effect tool call, sync and async.

Every face (``EffectToolNode``, ``EffectMiddleware``) hands a tool call to
``EffectRunner.run`` / ``arun`` with an ``execute`` callable (ToolNode's or the
middleware chain's). The runner reads the ledger, asks ``core.plan`` what to
do, does it, records the outcome, and returns the ToolMessage built from what
the ledger recorded, so a first run and every replay answer identically.

The decision loop is written once, as a generator (``_decide``) that yields
actions (a ledger call, a hook, the dispatch, a sleep, an interrupt) and
receives their results; ``run`` and ``arun`` are small drivers (the
checkpoint-postgres pattern). The loop never copies between sync and async.

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
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import inspect
import itertools
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any

from langchain_core.messages import BaseMessage, ToolMessage, message_to_dict, messages_from_dict
from langgraph.errors import GraphBubbleUp, GraphInterrupt, is_invalid_resume
from langgraph.prebuilt.tool_node import msg_content_output
from langgraph.types import Command, Send, interrupt
from pydantic import AfterValidator

from langgraph_effects._faults import CrashPoint, crash_point
from langgraph_effects._owners import current_owner, holder_provably_dead
from langgraph_effects.core.digest import canonical_json
from langgraph_effects.core.ids import (
    idempotency_key,
    intent_operation_id,
    occurrence_operation_id,
    operation_id,
)
from langgraph_effects.core.model import (
    Decision,
    Evidence,
    EvidenceKind,
    LeaseOwner,
    Operation,
    OperationDraft,
    OperationEvent,
    OperationStatus,
    Prepared,
    Resolution,
    key_retention_seconds,
    reconciled_evidence,
    utcnow,
)
from langgraph_effects.core.plan import (
    Outcome,
    Step,
    backoff,
    classify,
    earlier_attempt_ambiguous,
    plan,
    receipt_conflict,
    recorded_receipt,
    renewal_delay,
)
from langgraph_effects.core.storable import storable
from langgraph_effects.effects import _CURRENT, EffectContext, EffectSpec, _Call
from langgraph_effects.errors import (
    ConcurrentUpdate,
    EffectRejected,
    EffectsError,
    IllegalTransition,
    InvalidInput,
    LeaseHeld,
    OperationNotFound,
    StaleFencingToken,
    TenantMismatch,
    TransientProviderError,
)
from langgraph_effects.ledger.base import DEFAULT_LEASE, Confirmation
from langgraph_effects.observe import count_replay
from langgraph_effects.review import (
    Answer,
    InvalidAnswer,
    RequestKind,
    approval_request,
    parse_answer,
    review_request,
)

__all__ = [
    "OPERATIONS_KEY",
    "DurabilityWarning",
    "EffectCall",
    "EffectRunner",
    "ParkedReceipt",
    "recorded_command",
    "tool_message",
]

S = OperationStatus
DEFAULT_TENANT = "default"
"""The tenant of a thread that never named one."""
NO_THREAD = "no-thread"
"""The workflow id of a run without a checkpointer (no thread, so no thread binding)."""
OPERATIONS_KEY = "effect_operations"
"""The state key (a reducer channel) listing the operation ids a thread owns."""

_MAX_STEPS = 64
_BINDINGS_CACHED = 10_000  # thread -> tenant bindings kept per runner (they never change)
_RESEND_REFUSED = "provider:resend_refused"  # evidence source of a definitively refused resend
_REPLACED = "replaced by "  # rejection reason of a call a reviewer edited
_LATE_RECEIPT = "late receipt: the provider applied it after this worker's lease was taken over"
_CONFLICT = "CONFLICT: "  # a rejected record whose late receipt says the provider applied it
_SETTLING = frozenset({Step.DISPATCH_CLAIMED, Step.RECONCILE, Step.REVIEW})
"""Steps whose own write may confirm the record: a confirmation right after one is
this pass's outcome, not a replay (``observe.count_replay``)."""


class DurabilityWarning(UserWarning):
    """A graph runs effects with ``durability`` other than ``"sync"``."""


_durability_warned = False


def warn_durability(config: Mapping[str, Any] | None) -> None:
    """Warn once per process when the graph's durability lets tool-call ids change."""
    global _durability_warned
    if _durability_warned or config is None:
        return
    # LangGraph leaves the key out when ``durability`` is not passed, and then
    # runs with its default, "async" (so does LangGraph Server).
    mode = config.get("configurable", {}).get("__pregel_durability") or "async"
    if mode == "sync":
        return
    _durability_warned = True
    warnings.warn(
        f"langgraph-effects: this graph runs with durability={mode!r}. A crash before the "
        "AIMessage is checkpointed makes the model propose the call again: the same call "
        "(same tool, same arguments) maps to the same operation, but a call re-proposed "
        "with other arguments is a new one. Use durability='sync', or give effects an "
        "intent_key, which maps every re-proposal to the same operation.",
        DurabilityWarning,
        stacklevel=3,
    )


# --------------------------------------------------------------------------- the call


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectCall:
    """One tool call of an effect tool, with its identity derived (see ``build``)."""

    spec: EffectSpec
    tool_name: str
    tool_call_id: str
    args: dict[str, Any]
    tenant_id: str
    workflow_id: str
    target: str | None
    payload_digest: str
    operation_id: str
    idempotency_key: str
    single: bool = True
    """The only effect call of its task: an answer without operation_id applies to it."""
    siblings: Mapping[str, OperationDraft] = field(default_factory=dict)
    """The effect calls of its task by operation id (an answer may name one of them)."""
    preapproved_by: str | None = None
    """A person already approved this exact call upstream (LangChain's HITL middleware):
    the approval is recorded under that name instead of asking twice."""
    occurrence: int | None = None
    """The call's place among identical calls of its thread (``occurrence_operation_id``);
    None when the thread's messages are not at hand (the id then uses the tool-call id)."""
    task_id: str | None = None
    """LangGraph's task running the call: answers it applied are recorded under it, so
    the values LangGraph hands that task again are recognised and never re-applied."""

    @classmethod
    def build(
        cls,
        spec: EffectSpec,
        *,
        tool_name: str,
        tool_call_id: str,
        args: Mapping[str, Any],
        tenant_id: str,
        workflow_id: str,
        single: bool = True,
        siblings: Mapping[str, OperationDraft] | None = None,
        preapproved_by: str | None = None,
        occurrence: int | None = None,
        task_id: str | None = None,
    ) -> EffectCall:
        """Derive target, digest and ids.

        The operation id, in order of preference: the application's intent key;
        else tenant, thread, action, digest and the call's ``occurrence`` in the
        thread; else tenant, thread, tool-call id, action and digest.
        """
        args = dict(args)
        target = spec.target_of(args)
        digest = spec.digest_of(target, args)
        intent = spec.intent_of(args)
        if intent is not None:
            op_id = intent_operation_id(tenant_id=tenant_id, action=spec.action, intent_key=intent)
        elif occurrence is not None:
            op_id = occurrence_operation_id(
                tenant_id=tenant_id,
                workflow_id=workflow_id,
                action=spec.action,
                payload_digest=digest,
                occurrence=occurrence,
            )
        else:
            op_id = operation_id(
                tenant_id=tenant_id,
                workflow_id=workflow_id,
                tool_call_id=tool_call_id,
                action=spec.action,
                payload_digest=digest,
            )
        return cls(
            spec=spec,
            tool_name=tool_name,
            tool_call_id=tool_call_id,
            args=args,
            tenant_id=tenant_id,
            workflow_id=workflow_id,
            target=target,
            payload_digest=digest,
            operation_id=op_id,
            idempotency_key=idempotency_key(op_id),
            single=single,
            siblings=siblings or {},
            preapproved_by=preapproved_by,
            occurrence=occurrence,
            task_id=task_id,
        )

    def with_args(self, args: Mapping[str, Any]) -> EffectCall:
        """The same tool call with other arguments: another digest, another operation."""
        return EffectCall.build(
            self.spec,
            tool_name=self.tool_name,
            tool_call_id=self.tool_call_id,
            args=args,
            tenant_id=self.tenant_id,
            workflow_id=self.workflow_id,
            single=self.single,
            siblings=self.siblings,
            preapproved_by=self.preapproved_by,
            occurrence=self.occurrence,
            task_id=self.task_id,
        )

    def draft(self) -> OperationDraft:
        return OperationDraft(
            tenant_id=self.tenant_id,
            operation_id=self.operation_id,
            workflow_id=self.workflow_id,
            action=self.spec.action,
            action_version=self.spec.version,
            target=self.target,
            payload_digest=self.payload_digest,
            payload=self.args if self.spec.store_payload else None,
            payload_stored=self.spec.store_payload,
            idempotency_key=self.idempotency_key,
            # What the provider promises for that key (None: no deduplication):
            # the CLI and reviews judge a resend from the record alone.
            key_retention_seconds=key_retention_seconds(self.spec.contract),
            tool_call_id=self.tool_call_id,
        )

    def context(self, op: Operation | None) -> EffectContext:
        return EffectContext(
            operation_id=self.operation_id,
            idempotency_key=(op.idempotency_key if op else None) or self.idempotency_key,
            attempt=op.attempts if op else 0,
            tenant_id=self.tenant_id,
            action=self.spec.action,
            target=self.target,
            workflow_id=self.workflow_id,
            tool_call_id=self.tool_call_id,
            payload_digest=self.payload_digest,
            payload=self.args,
        )


# --------------------------------------------------------------------------- messages


def _describe(op: Operation) -> str:
    return f"{op.action}" + (f" on {op.target!r}" if op.target else "")


def tool_message(op: Operation, *, tool_name: str, tool_call_id: str) -> ToolMessage:
    """The ToolMessage for an operation, built only from what the ledger recorded.

    confirmed: the recorded result (replayed identically); rejected: an error
    saying it was refused and not carried out; unknown: an error saying it
    could not be confirmed (which is not "was not done"); prepared after
    transient refusals: an error saying nothing was applied yet.
    """
    status = "error"
    artifact: Any = None
    if op.status is S.CONFIRMED:
        status = "success"
        content: str | list[Any] = (
            f"{_describe(op)} was carried out (operation {op.operation_id})."
            if op.result is None
            else msg_content_output(op.result)
        )
        result = op.result
        if isinstance(result, dict) and set(result) == {_MESSAGE}:
            content, artifact = result[_MESSAGE]["content"], result[_MESSAGE]["artifact"]
        elif isinstance(result, dict) and set(result) == {_COMMAND}:
            command = recorded_command(op, tool_call_id=tool_call_id)
            content = msg_content_output(_command_text(command)) if command else content
    elif op.status is S.REJECTED and (op.error or "").startswith(_CONFLICT):
        content = (
            f"Error: {_describe(op)} was recorded as refused, but the provider reported "
            f"afterwards that it WAS carried out (operation {op.operation_id}). A person must "
            "review this conflict: do not assume it was not done, and do not repeat it."
        )
    elif op.status is S.REJECTED:
        content = (
            f"Error: {_describe(op)} was refused and NOT carried out "
            f"(operation {op.operation_id}): {op.error or 'rejected'}"
        )
    elif op.status is S.UNKNOWN:
        content = (
            f"Error: could not confirm whether {_describe(op)} happened (operation "
            f"{op.operation_id} is unresolved and awaits review). It may have been carried "
            "out: do not assume it was not, and do not repeat it."
        )
    elif op.status is S.PREPARED:
        content = (
            f"Error: {_describe(op)} was not carried out yet: the provider refused temporarily "
            f"before acting ({op.error or 'try later'}); nothing was applied. It will be sent "
            f"again when this step runs again (operation {op.operation_id})."
        )
    else:
        content = (
            f"Error: {_describe(op)} is being carried out by another worker (operation "
            f"{op.operation_id}); its outcome is not known yet."
        )
    return ToolMessage(
        content=content,
        name=tool_name,
        tool_call_id=tool_call_id,
        status=status,
        artifact=artifact,
    )


def _conflicted(op: Operation, receipt: Evidence) -> Operation:
    """The rejected record as answered: its error says a late receipt contradicts it."""
    return op.model_copy(
        update={
            "error": f"{_CONFLICT}recorded as rejected ({op.error or 'rejected'}), but the "
            f"provider's late receipt ({receipt.observed_at.isoformat()}) says it was carried "
            "out; a person must review this operation"
        }
    )


_COMMAND = "lge.command"
"""Envelope of a recorded ``Command`` result (its update, goto, graph and resume)."""
_MESSAGE = "lge.message"
"""Envelope of a recorded ToolMessage with an artifact (``content_and_artifact`` tools)."""


def _recordable(value: Any, message: Any = None) -> Any:
    """The JSON value to record for a tool's output (content text when nothing better fits).

    ``value`` is what the tool body returned, ``message`` what ToolNode made of it. A
    ``Command`` is recorded whole (``recorded_command`` rebuilds it on replay); a ToolMessage
    with an artifact keeps both parts; any other value is recorded as returned.
    """
    value = storable(value)  # NUL and lone surrogates escaped: the receipt is always stored
    if isinstance(message, Command):
        encoded = _encode(message.update), _encode(message.goto), _encode(message.resume)
        record = {
            _COMMAND: {
                "update": encoded[0],
                "goto": encoded[1],
                "resume": encoded[2],
                "graph": message.graph,
            }
        }
        if _is_json(record):
            return record
        return msg_content_output(_command_text(message))
    if isinstance(message, ToolMessage) and (
        message.artifact is not None or isinstance(value, tuple)  # content_and_artifact
    ):
        envelope = {_MESSAGE: {"content": message.content, "artifact": message.artifact}}
        if _is_json(envelope):
            return envelope
    if isinstance(value, ToolMessage):
        value = value.content
    return value if _is_json(value) else msg_content_output(value)


def _is_json(value: Any) -> bool:
    try:
        canonical_json(value)
    except EffectsError:
        return False
    return True


def _encode(value: Any) -> Any:
    """Messages and ``Send`` of a Command as JSON (``_decode`` reverses it)."""
    if isinstance(value, BaseMessage):
        return {"lc.message": message_to_dict(value)}
    if isinstance(value, Send):
        return {"lc.send": {"node": value.node, "arg": _encode(value.arg)}}
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any, ids: Mapping[str, str]) -> Any:
    if isinstance(value, dict):
        if set(value) == {"lc.message"}:
            [message] = messages_from_dict([value["lc.message"]])
            if isinstance(message, ToolMessage) and message.tool_call_id in ids:
                message.tool_call_id = ids[message.tool_call_id]
            return message
        if set(value) == {"lc.send"}:
            return Send(value["lc.send"]["node"], _decode(value["lc.send"]["arg"], ids))
        return {k: _decode(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, ids) for v in value]
    return value


def _command_text(command: Command[Any]) -> Any:
    """The text of a Command's own ToolMessage (what the model saw), for a lossy record."""
    update = command.update
    found = update.values() if isinstance(update, dict) else update or []
    for item in found:
        for m in item if isinstance(item, list) else [item]:
            if isinstance(m, ToolMessage):
                return m.content
    return str(command)


def recorded_command(op: Operation, *, tool_call_id: str) -> Command[Any] | None:
    """The Command a confirmed operation's tool returned, rebuilt from the record.

    Its ToolMessage answers ``tool_call_id`` (an intent key may map a re-proposed call,
    with a new id, to the recorded operation).
    """
    result = op.result
    if op.status is not S.CONFIRMED or not isinstance(result, dict) or set(result) != {_COMMAND}:
        return None
    body = result[_COMMAND]
    ids = {op.tool_call_id: tool_call_id} if op.tool_call_id else {}
    return Command(
        graph=body.get("graph"),
        update=_decode(body.get("update"), ids),
        goto=_decode(body.get("goto"), ids) or (),
        resume=_decode(body.get("resume"), ids),
    )


# --------------------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True)
class _Ledger:
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Hook:
    fn: Callable[[Any], Any]
    arg: Any


@dataclass(frozen=True, slots=True)
class _Dispatch:
    op: Operation
    context: EffectContext
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class _Interrupt:
    value: dict[str, Any]
    schema: Any


@dataclass(slots=True)
class _Outcome:
    """What one dispatch did: the tool's raw outcome, and ToolNode's message."""

    call: _Call
    message: ToolMessage | Command[Any] | None = None
    error: BaseException | None = None
    bubble: BaseException | None = None
    """An interrupt raised by the tool, or the task's cancellation: clean up, re-raise."""


_Action = _Ledger | _Hook | _Dispatch | _Sleep | _Interrupt


def _L(method: str, *args: Any, **kwargs: Any) -> _Ledger:
    return _Ledger(method, args, kwargs)


# --------------------------------------------------------------------------- lease renewal


_LEASE_LOST = (StaleFencingToken, IllegalTransition, OperationNotFound)
"""Renewal errors that prove the lease gone; any other failure is retried (``renewal_delay``)."""


class _Renewer:
    """One daemon thread renewing the leases of in-flight sync dispatches.

    Cheaper than a thread per dispatch: most dispatches end long before their
    first renewal is due, and then cost one heap push and one removal.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._jobs: dict[int, tuple[float, Callable[[], None], int]] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def hold(self, fn: Callable[[], None], interval: float) -> int:
        with self._cond:
            job = next(self._ids)
            self._jobs[job] = (interval, fn, 0)
            heapq.heappush(self._heap, (time.monotonic() + interval, job))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="langgraph-effects-lease-renewer", daemon=True
                )
                self._thread.start()
            elif self._heap[0][1] == job:
                # Only a new earliest deadline changes the sleeping thread's wait;
                # waking it for every dispatch would cost a context switch each.
                self._cond.notify()
            return job

    def drop(self, job: int) -> None:
        with self._cond:
            self._jobs.pop(job, None)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(timeout)
                _, job = heapq.heappop(self._heap)
                entry = self._jobs.get(job)
            if entry is None:
                continue
            interval, fn, failures = entry
            try:
                fn()
            except _LEASE_LOST:
                # Taken over: the dispatch's own fenced write will find out. Stop.
                self.drop(job)
                continue
            except Exception:
                failures += 1  # a dropped connection: try again soon (core.plan)
            else:
                failures = 0
            with self._cond:
                if job in self._jobs:
                    self._jobs[job] = (interval, fn, failures)
                    due = time.monotonic() + renewal_delay(failures, interval)
                    heapq.heappush(self._heap, (due, job))


_renewer = _Renewer()


def _run_coroutine_sync(awaitable: Awaitable[Any]) -> Any:
    """Run a hook's coroutine from sync code, even when a loop runs in this thread."""

    async def wrap() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wrap())
    result: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(wrap()))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


# --------------------------------------------------------------------------- parked receipts

_Decision = Generator[_Action, Any, Operation]


@dataclass(frozen=True, slots=True)
class ParkedReceipt:
    """A call stopped at its receipt: the decision loop, suspended, and the confirm it yielded.

    Parking changes no crash window: until its ``confirm_many`` commits, the
    record is ``dispatching`` under our lease, exactly as between a provider's
    answer and a single ``confirm``; a crash there is taken over, marked
    ``unknown`` and reconciled either way.
    """

    gen: _Decision
    action: _Ledger
    call: EffectCall
    execute: Any
    cancelled: list[bool] = field(default_factory=list)

    @property
    def confirmation(self) -> Confirmation:
        tenant_id, operation_id = self.action.args
        return Confirmation(tenant_id=tenant_id, operation_id=operation_id, **self.action.kwargs)


def _split(sent: Any) -> tuple[Any, BaseException | None]:
    """What to resume a decision loop with: a value to send or an error to throw."""
    return (None, sent) if isinstance(sent, BaseException) else (sent, None)


# --------------------------------------------------------------------------- the runner


Execute = Callable[[dict[str, Any]], Any]
"""Run the tool with these arguments (through ToolNode / the middleware chain)."""


@dataclass(slots=True)
class _Answers:
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


@dataclass(slots=True)
class _Pass:
    """What one run of the decision loop has learned so far."""

    call: EffectCall
    claimed: bool = False
    reconciled: bool = False
    retried: bool = False
    retry_forbidden: bool = False
    transient_retries: int = 0
    evidence: list[Evidence] = field(default_factory=list)
    late_receipt: Evidence | None = None
    receipts_read: bool = False
    """The log was searched for a receipt kept but not applied (``recorded_receipt``)."""
    answers: dict[str, _Answers] = field(default_factory=dict)
    """By operation id: the answers applied to it in this task, and how many of them
    LangGraph has handed back to this run so far (see ``_Answers``)."""


class EffectRunner:
    """Decides and records one effect tool call against a ledger.

    Args:
        ledger: a sync ``Ledger`` or an ``AsyncLedger``. ``run`` needs a sync one;
            ``arun`` takes either.
        lease_for: lease length; renewed every third of it while a dispatch runs.
        clock: the time source (the ledger should use the same one).
        interrupt_on_unknown: ``interrupt()`` for review when nothing resolves an
            unknown operation (default). False: return an error ToolMessage that
            says the outcome could not be confirmed, and leave the operation
            ``unknown`` for an operator.
    """

    def __init__(
        self,
        ledger: Any,
        *,
        lease_for: timedelta = DEFAULT_LEASE,
        clock: Callable[[], datetime] = utcnow,
        interrupt_on_unknown: bool = True,
    ) -> None:
        self.ledger = ledger
        self.lease_for = lease_for
        self.clock = clock
        self.interrupt_on_unknown = interrupt_on_unknown
        self.is_async = inspect.iscoroutinefunction(getattr(ledger, "prepare", None))
        self._bound: dict[str, str] = {}

    # -- the thread's tenant -------------------------------------------------
    #
    # A thread belongs to the tenant of its first effect. A run that names no
    # tenant (a time-travel config from get_state_history carries none) uses
    # the bound one; a run under another tenant is refused before anything is
    # prepared. Bindings never change, so each is read once per process.

    def tenant_for(
        self, config: Mapping[str, Any] | None, explicit: str | None = None
    ) -> tuple[str, str]:
        """The thread's ``(workflow_id, tenant_id)``, binding the thread on first use.

        Raises:
            InvalidInput: the config's ``tenant_id`` is not a non-empty string.
            TenantMismatch: the thread is bound to another tenant.
        """
        workflow, requested = _tenant_request(config, explicit)
        bound = self._bound.get(workflow)
        if bound is None and workflow != NO_THREAD:
            bound = self.ledger.bind_thread(workflow, requested or DEFAULT_TENANT)
            self._remember(workflow, bound)
        return workflow, _checked_tenant(workflow, bound, requested)

    async def atenant_for(
        self, config: Mapping[str, Any] | None, explicit: str | None = None
    ) -> tuple[str, str]:
        """The async twin of ``tenant_for`` (the ledger may be sync or async)."""
        workflow, requested = _tenant_request(config, explicit)
        bound = self._bound.get(workflow)
        if bound is None and workflow != NO_THREAD:
            bound = await self._ledger_call("bind_thread", workflow, requested or DEFAULT_TENANT)
            self._remember(workflow, bound)
        return workflow, _checked_tenant(workflow, bound, requested)

    def _remember(self, workflow: str, tenant: str) -> None:
        if len(self._bound) >= _BINDINGS_CACHED:
            self._bound.clear()
        self._bound[workflow] = tenant

    # -- the decision loop ---------------------------------------------------

    def _decide(
        self, call: EffectCall, handoff: Prepared | None, owner: LeaseOwner
    ) -> Generator[_Action, Any, Operation]:
        spec = call.spec
        p = _Pass(call=call)
        if handoff is not None and handoff.operation.operation_id == call.operation_id:
            op = handoff.operation
            p.claimed = handoff.created and op.status is S.DISPATCHING
        else:
            # Write-ahead. Fused with the claim unless a person or a hook must
            # speak before the first dispatch.
            fused = not (spec.require_approval or spec.authorize is not None)
            crash_point(CrashPoint.BEFORE_PREPARE)
            prepared: Prepared = yield _L(
                "prepare", call.draft(), owner=owner if fused else None, lease_for=self.lease_for
            )
            op = prepared.operation
            p.claimed = fused and prepared.created
            if not p.claimed and prepared.created:
                crash_point(CrashPoint.AFTER_PREPARE)

        last: Step | None = None
        for _ in range(_MAX_STEPS):
            if op.status is S.UNKNOWN and p.late_receipt is None and not p.receipts_read:
                # A receipt kept by a worker that died before it settled anything.
                p.receipts_read = True
                events: list[OperationEvent] = yield _L("events", op.tenant_id, op.operation_id)
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
                    return op
                case Step.REPLAY_REJECTED:
                    if op.error and op.error.startswith(_REPLACED):
                        # A reviewer edited this call: follow it to its replacement.
                        nxt = yield from self._follow_edit(p, op)
                        if nxt is not None:
                            op = nxt
                            continue
                    return (yield from self._receipt_conflict(op))
                case Step.ASK_APPROVAL if p.call.preapproved_by is not None:
                    op = yield from self._guarded(
                        p,
                        op,
                        _L(
                            "approve",
                            op.tenant_id,
                            op.operation_id,
                            payload_digest=op.payload_digest,
                            by=p.call.preapproved_by,
                            reason="approved upstream (human-in-the-loop middleware)",
                        ),
                    )
                case Step.ASK_APPROVAL:
                    op = yield from self._ask(p, op, kind="approval")
                case Step.RETRY_SAFE if (yield from self._resend_refused(op)):
                    # An earlier pass saw the provider refuse a resend: only a person
                    # may order another one (the review offers no retry).
                    p.retry_forbidden = True
                case Step.AUTHORIZE_AND_CLAIM | Step.RETRY_SAFE:
                    yield from self._drain(p, op)
                    op = yield from self._authorize_and_claim(p, op, owner, step)
                case Step.DISPATCH_CLAIMED:
                    op = yield from self._dispatch(p, op, owner)
                    if op.status is S.PREPARED:
                        return op  # transient refusals outlasted the retries
                case Step.WAIT_PENDING:
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
                        _L(
                            "mark_unknown",
                            op.tenant_id,
                            op.operation_id,
                            token=op.fencing_token,
                            reason=reason,
                            actor=f"takeover:{owner.encode()}",
                        ),
                    )
                case Step.RECONCILE:
                    op = yield from self._reconcile(p, op)
                case Step.REVIEW:
                    if not self.interrupt_on_unknown:
                        return op
                    op = yield from self._ask(p, op, kind="review")
            last = step
            call = p.call
        raise EffectsError(
            f"operation {op.operation_id!r} made no progress in {_MAX_STEPS} steps (status "
            f"{op.status.value}); leaving it for an operator"
        )

    def _guarded(
        self, p: _Pass, op: Operation, action: _Ledger
    ) -> Generator[_Action, Any, Operation]:
        """Run a conditional write; if the record moved under us, re-read it instead."""
        try:
            result: Operation = yield action
            return result
        except (StaleFencingToken, IllegalTransition, ConcurrentUpdate, LeaseHeld):
            p.claimed = False
            fresh: Operation | None = yield _L("get", op.tenant_id, op.operation_id)
            assert fresh is not None
            return fresh

    def _refusal(self, p: _Pass, op: Operation) -> Generator[_Action, Any, str | None]:
        """Ask the effect's ``authorize`` hook; the refusal's text, or None if allowed."""
        assert p.call.spec.authorize is not None
        try:
            allowed = yield _Hook(p.call.spec.authorize, p.call.context(op))
        except EffectRejected as exc:
            return f"authorization refused: {exc.reason}"
        return None if allowed else "authorization refused"

    def _authorize_and_claim(
        self, p: _Pass, op: Operation, owner: LeaseOwner, step: Step
    ) -> Generator[_Action, Any, Operation]:
        spec = p.call.spec
        if spec.authorize is not None:
            refusal = yield from self._refusal(p, op)
            if refusal is not None:
                if op.status is S.PREPARED:
                    return (
                        yield from self._guarded(
                            p,
                            op,
                            _L(
                                "reject",
                                op.tenant_id,
                                op.operation_id,
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
    ) -> Generator[_Action, Any, Operation]:
        """Take the lease (``prepared``/``unknown`` -> ``dispatching``), or re-read the record."""
        return (
            yield from self._guarded(
                p,
                op,
                _L(
                    "claim",
                    op.tenant_id,
                    op.operation_id,
                    owner=owner,
                    lease_for=self.lease_for,
                    actor=owner.encode(),
                ),
            )
        )

    def _dispatch(
        self, p: _Pass, op: Operation, owner: LeaseOwner
    ) -> Generator[_Action, Any, Operation]:
        call = p.call
        token = op.fencing_token
        crash_point(CrashPoint.AFTER_CLAIM)
        out: _Outcome = yield _Dispatch(op, call.context(op), call.args)
        crash_point(CrashPoint.AFTER_PROVIDER)
        p.claimed = False
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
                    _L(
                        "mark_unknown",
                        op.tenant_id,
                        op.operation_id,
                        token=token,
                        reason="interrupted or cancelled mid-dispatch",
                    ),
                )
            else:
                reason = "the tool asked a person (interrupt)" if asked else "interrupted"
                yield from self._guarded(
                    p, op, _L("release", op.tenant_id, op.operation_id, token=token, reason=reason)
                )
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
                _L(
                    "release",
                    op.tenant_id,
                    op.operation_id,
                    token=token,
                    reason=f"the tool did not run: {type(error).__name__}: {error}"[:2000],
                ),
            )
            raise error
        if error is None and not out.call.started:
            # Answered without running the tool: ToolNode (invalid arguments, which
            # always fail the same way) or an inner middleware (a reviewer's reject or
            # respond). The provider heard nothing.
            text = _message_text(out.message) or "the tool did not run"
            new = yield from self._guarded(
                p,
                op,
                _L(
                    "reject",
                    op.tenant_id,
                    op.operation_id,
                    token=token,
                    reason=f"invalid call, not sent: {text}",
                    evidence=Evidence.rejected(text, source="validation"),
                    actor="validation",
                ),
            )
            crash_point(CrashPoint.AFTER_RECEIPT)
            return new
        if error is None:
            value = _recordable(out.call.value, out.message)
            try:
                confirmed: Operation = yield _L(
                    "confirm", op.tenant_id, op.operation_id, token=token, result=value
                )
            except (StaleFencingToken, IllegalTransition, ConcurrentUpdate):
                return (yield from self._late_receipt(p, op, owner, value))
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
                            source=_RESEND_REFUSED,
                        )
                    )
                new = yield from self._guarded(
                    p,
                    op,
                    _L(
                        "reject",
                        op.tenant_id,
                        op.operation_id,
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
                delay = backoff(call.spec.contract, p.transient_retries, error.retry_after)
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
                            _L(
                                "release",
                                op.tenant_id,
                                op.operation_id,
                                token=token,
                                reason=f"transient refusal: {error.reason}",
                            ),
                        )
                    )
                p.transient_retries += 1
                yield _Sleep(delay)
                # Provably not applied: resend under the lease we still hold.
                p.claimed = True
                return op
            case _:
                reason = f"ambiguous failure: {type(error).__name__}: {error}"
                return (
                    yield from self._guarded(
                        p,
                        op,
                        _L(
                            "mark_unknown",
                            op.tenant_id,
                            op.operation_id,
                            token=token,
                            reason=reason[:2000],
                            actor=owner.encode(),
                        ),
                    )
                )

    def _late_receipt(
        self, p: _Pass, op: Operation, owner: LeaseOwner, value: Any
    ) -> Generator[_Action, Any, Operation]:
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
                          and the answer says the provider applied it (_conflicted)
        """
        receipt = Evidence.confirmed(_LATE_RECEIPT, result=value, source="receipt")
        fresh: Operation = yield _L("record_evidence", op.tenant_id, op.operation_id, receipt)
        if fresh.status is S.REJECTED:
            return _conflicted(fresh, receipt)
        if fresh.status is S.PREPARED:
            fresh = yield from self._claim(p, fresh, owner)
            if fresh.status is S.DISPATCHING and fresh.lease_owner == owner.encode():
                return (
                    yield from self._guarded(
                        p,
                        fresh,
                        _L(
                            "confirm",
                            fresh.tenant_id,
                            fresh.operation_id,
                            token=fresh.fencing_token,
                            result=value,
                        ),
                    )
                )
        p.late_receipt = receipt
        p.reconciled = False
        return fresh

    def _receipt_conflict(self, op: Operation) -> Generator[_Action, Any, Operation]:
        """A rejected record, marked when a late receipt says the provider applied it."""
        if op.attempts == 0:
            return op  # never dispatched: no receipt can exist
        events: list[OperationEvent] = yield _L("events", op.tenant_id, op.operation_id)
        receipt = receipt_conflict(op, events)
        return op if receipt is None else _conflicted(op, receipt)

    def _earlier_attempt_ambiguous(self, op: Operation) -> Generator[_Action, Any, bool]:
        """``core.plan.earlier_attempt_ambiguous``, reading the events only when it can matter."""
        if op.attempts <= 1:
            return False
        events: list[OperationEvent] = yield _L("events", op.tenant_id, op.operation_id)
        return earlier_attempt_ambiguous(op, events)

    def _resend_refused(self, op: Operation) -> Generator[_Action, Any, bool]:
        """True when ``op`` became unknown because the provider definitively refused a resend.

        Read from the event log, so it holds across passes (a review's resume re-runs
        the node from its first line); one read, only on the rare safe-retry path.
        """
        events: list[OperationEvent] = yield _L("events", op.tenant_id, op.operation_id)
        last = next((e for e in reversed(events) if e.to_status is S.UNKNOWN), None)
        return (
            last is not None
            and last.evidence is not None
            and last.evidence.source == _RESEND_REFUSED
        )

    def _back_to_unknown(
        self, p: _Pass, op: Operation, token: int, summary: str, *, source: str = "provider"
    ) -> Generator[_Action, Any, Operation]:
        """Record a resend's refusal as inconclusive evidence; the operation is unknown again."""
        evidence = Evidence.inconclusive(summary, source=source)
        p.evidence.append(evidence)
        return (
            yield from self._guarded(
                p,
                op,
                _L(
                    "mark_unknown",
                    op.tenant_id,
                    op.operation_id,
                    token=token,
                    reason=f"{summary}; an earlier attempt may have applied"[:2000],
                    evidence=evidence,
                    actor="provider",
                ),
            )
        )

    def _wait(self, p: _Pass, op: Operation) -> Generator[_Action, Any, Operation]:
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
            yield _Sleep(delay)
            delay = min(delay * 2, 0.25)
            cur: Operation | None = yield _L("get", op.tenant_id, op.operation_id)
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

    def _reconcile(self, p: _Pass, op: Operation) -> Generator[_Action, Any, Operation]:
        p.reconciled = True
        evidence = p.late_receipt
        p.late_receipt = None
        if evidence is None:
            reconcile = p.call.spec.reconcile
            assert reconcile is not None
            try:
                evidence = reconciled_evidence((yield _Hook(reconcile, op)))
            except Exception as exc:
                evidence = Evidence.inconclusive(f"reconciler failed: {type(exc).__name__}: {exc}")
        crash_point(CrashPoint.DURING_RECONCILE)
        p.evidence.append(evidence)
        if evidence.kind is EvidenceKind.INCONCLUSIVE:
            return (
                yield from self._guarded(
                    p, op, _L("record_evidence", op.tenant_id, op.operation_id, evidence)
                )
            )
        decision = Decision.CONFIRM if evidence.kind is EvidenceKind.CONFIRMED else Decision.REJECT
        resolution = Resolution(
            decision=decision,
            by=evidence.source or "reconciler",
            reason=evidence.summary,
            result=evidence.result,
            provider_result_id=evidence.provider_result_id,
            evidence=evidence,
        )
        return (
            yield from self._guarded(
                p, op, _L("resolve", op.tenant_id, op.operation_id, resolution)
            )
        )

    def _ask(self, p: _Pass, op: Operation, *, kind: str) -> Generator[_Action, Any, Operation]:
        """Interrupt for a person and apply the answer to the operation it names.

        Each request is one round (``request_id``: the operation and its record
        version). Values LangGraph hands back from earlier rounds of this task
        are recognised through the ledger's log and consumed, never re-applied.
        """
        call = p.call
        if kind == "approval":
            request = approval_request(op, tool_name=call.tool_name, args=call.args)
        else:
            request = review_request(
                op,
                tool_name=call.tool_name,
                evidence=p.evidence,
                contract=call.spec.contract,
                now=self.clock(),
                allow_retry=not p.retry_forbidden,
            )
        request["request_id"] = f"{op.operation_id}@{op.record_version}"
        mine = yield from self._answers(p, op.operation_id)
        schema = _answer_schema(
            call,
            op,
            kind="approval" if kind == "approval" else "review",
            retry_forbidden=p.retry_forbidden,
            stale=lambda value: mine.next_is(_answer_mark(call, value)),
            request_id=request["request_id"],
        )
        while True:
            value = yield _Interrupt(request, schema)
            crash_point(CrashPoint.DURING_REVIEW_RESUME)
            answer = parse_answer(value, tool_name=call.tool_name)
            named = answer.operation_id or op.operation_id
            mark = _answer_mark(call, value)
            answers = yield from self._answers(p, named)
            if answers.next_is(mark):
                answers.consumed += 1  # an earlier round's answer, applied already
                continue
            if _outdated(value, request):
                # It answers an earlier request (shown by LangGraph after a crash, or sent
                # late): it decides nothing now; the current request is asked.
                continue
            if mark is not None:
                answers.logged.insert(answers.consumed, mark)
                answers.consumed += 1
            if named != op.operation_id:
                # Answers are matched by position within a task, and position is not
                # identity: apply it to the operation it names, then ask again for ours.
                yield from self._apply_elsewhere(p, named, answer, mark)
                fresh: Operation | None = yield _L("get", op.tenant_id, op.operation_id)
                assert fresh is not None
                return fresh
            return (yield from self._apply(p, op, answer, mark))

    def _drain(self, p: _Pass, op: Operation) -> Generator[_Action, Any, None]:
        """Before a dispatch that follows a person's answer in an earlier run of this task,
        take back the values LangGraph hands out for that answer: a tool that calls
        ``interrupt()`` itself must meet its own answers, not ours.

        Read only on that rare path (approved or retried, nothing asked in this pass).
        """
        human = op.authorization_ref is not None or op.attempts > 0
        if p.call.task_id is None or op.operation_id in p.answers or not human:
            return
        mine = yield from self._answers(p, op.operation_id)
        request = approval_request(op, tool_name=p.call.tool_name, args=p.call.args)
        request["request_id"] = f"{op.operation_id}@{op.record_version}"
        passthrough = Annotated[Any, AfterValidator(lambda value: value)]
        while mine.consumed < len(mine.logged):
            value = yield _Interrupt(request, passthrough)
            matched = mine.next_is(_answer_mark(p.call, value))
            mine.consumed += 1
            if not matched:
                # Not the value we logged (one lost with a crash): nothing to apply, and
                # the rest of the task's values belong to whoever asked for them.
                break

    def _answers(self, p: _Pass, operation_id: str) -> Generator[_Action, Any, _Answers]:
        """The answers applied to ``operation_id`` in this task, read once per pass."""
        known = p.answers.get(operation_id)
        if known is not None:
            return known
        task = p.call.task_id
        logged: list[str] = []
        if task is not None:
            events: list[OperationEvent] = yield _L("events", p.call.tenant_id, operation_id)
            for event in events:
                mark = event.detail.get("answer") if isinstance(event.detail, dict) else None
                if isinstance(mark, str) and mark.startswith(f"{task}:"):
                    logged.append(mark)
        p.answers[operation_id] = known = _Answers(logged)
        return known

    def _apply(
        self, p: _Pass, op: Operation, answer: Answer, mark: str | None
    ) -> Generator[_Action, Any, Operation]:
        tenant, op_id = op.tenant_id, op.operation_id
        _check_decision(op, answer, retry_forbidden=p.retry_forbidden)
        if op.status is S.PREPARED:
            if answer.edited_args is not None:
                return (yield from self._edit(p, op, answer, mark))
            if answer.decision is Decision.APPROVE:
                action = _L(
                    "approve",
                    tenant,
                    op_id,
                    payload_digest=op.payload_digest,
                    by=answer.by,
                    reason=answer.reason,
                    answer=mark,
                )
            else:
                reason = f"approval refused by {answer.by}" + (
                    f": {answer.reason}" if answer.reason else ""
                )
                action = _L(
                    "reject",
                    tenant,
                    op_id,
                    token=None,
                    reason=reason,
                    evidence=Evidence.rejected(reason, source="operator"),
                    actor=answer.by,
                    answer=mark,
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
                p.evidence.append(evidence)
                return (
                    yield from self._guarded(
                        p, op, _L("record_evidence", tenant, op_id, evidence, answer=mark)
                    )
                )
        resolution = Resolution(
            decision=answer.decision,
            by=answer.by,
            reason=answer.reason,
            result=answer.result,
            answer=mark,
        )
        new = yield from self._guarded(p, op, _L("resolve", tenant, op_id, resolution))
        if answer.decision is Decision.RETRY:
            p.retried = False
        return new

    def _edit(
        self, p: _Pass, op: Operation, answer: Answer, mark: str | None
    ) -> Generator[_Action, Any, Operation]:
        """A reviewer's edit is a new call: a new operation, approved by that reviewer."""
        assert answer.edited_args is not None
        new_call = p.call.with_args(answer.edited_args)
        prepared: Prepared = yield _L("prepare", new_call.draft(), lease_for=self.lease_for)
        new_op = prepared.operation
        if new_op.status is S.PREPARED and new_op.authorization_ref is None:
            new_op = yield from self._guarded(
                p,
                new_op,
                _L(
                    "approve",
                    new_op.tenant_id,
                    new_op.operation_id,
                    payload_digest=new_op.payload_digest,
                    by=answer.by,
                    reason="edited by the reviewer",
                ),
            )
        yield from self._guarded(
            p,
            op,
            _L(
                "reject",
                op.tenant_id,
                op.operation_id,
                token=None,
                reason=f"{_REPLACED}{new_op.operation_id} (edited by {answer.by})",
                evidence=Evidence.rejected("edited by the reviewer", source="operator"),
                actor=answer.by,
                answer=mark,
            ),
        )
        p.call = new_call
        return new_op

    def _follow_edit(self, p: _Pass, op: Operation) -> Generator[_Action, Any, Operation | None]:
        assert op.error is not None
        new_id = op.error[len(_REPLACED) :].split(" ", 1)[0]
        new_op: Operation | None = yield _L("get", op.tenant_id, new_id)
        if new_op is None or not new_op.payload_stored or not isinstance(new_op.payload, dict):
            return None
        p.call = p.call.with_args(new_op.payload)
        return new_op

    def _apply_elsewhere(
        self, p: _Pass, named: str, answer: Answer, mark: str | None
    ) -> Generator[_Action, Any, None]:
        other: Operation | None = yield _L("get", p.call.tenant_id, named)
        if other is None and named in p.call.siblings:
            # A sibling call of this task that has not written its record yet.
            prepared: Prepared = yield _L(
                "prepare", p.call.siblings[named], lease_for=self.lease_for
            )
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
            return None  # already decided (by its own call or out of band)
        if answer.edited_args is not None:
            raise InvalidAnswer(
                f"an edit for operation {named!r} reached another call; answer each "
                "interrupt by its id",
                operation_id=named,
            )
        _check_decision(other, answer, retry_forbidden=False)
        yield from self._apply(_Pass(call=p.call), other, answer, mark)
        return None

    # -- drivers ---------------------------------------------------------------

    def run(
        self,
        call: EffectCall,
        execute: Execute,
        *,
        handoff: Prepared | None = None,
    ) -> Operation:
        """Decide and record ``call`` synchronously; return the final record.

        ``execute(args)`` runs the tool (it may raise). ``handoff`` is a record
        this node already prepared for the call (batched ``prepare_many``).
        """
        done = self._drive(self._start(call, handoff), execute, call, park=False)
        assert isinstance(done, Operation)
        return done

    def run_until_receipt(
        self, call: EffectCall, execute: Execute, *, handoff: Prepared | None = None
    ) -> Operation | ParkedReceipt:
        """``run``, but stop at the first receipt and hand it back instead of confirming it.

        The caller records the receipts of several calls with one
        ``confirm_many`` and passes each outcome to ``finish``.
        """
        return self._drive(self._start(call, handoff), execute, call, park=True)

    def finish(self, parked: ParkedReceipt, outcome: Operation | EffectsError | None) -> Operation:
        """Resume a parked call with its ``confirm_many`` outcome (None: confirm it now)."""
        if outcome is None:
            try:
                outcome = self._do_sync(parked.action, parked.execute, parked.call)
            except GraphBubbleUp:
                raise
            except Exception as exc:
                outcome = exc  # type: ignore[assignment]
        done = self._drive(parked.gen, parked.execute, parked.call, park=False, sent=outcome)
        assert isinstance(done, Operation)
        return done

    def _start(self, call: EffectCall, handoff: Prepared | None) -> _Decision:
        if self.is_async:
            raise EffectsError(
                "this ledger is async: run the graph with ainvoke/astream, or give "
                "EffectToolNode a sync ledger"
            )
        return self._decide(call, handoff, current_owner())

    def _drive(
        self, gen: _Decision, execute: Execute, call: EffectCall, *, park: bool, sent: Any = None
    ) -> Operation | ParkedReceipt:
        value, error = _split(sent)
        while True:
            try:
                action = gen.throw(error) if error is not None else gen.send(value)
            except StopIteration as stop:
                result: Operation = stop.value
                return result
            value, error = None, None
            if isinstance(action, _Interrupt):
                value = interrupt(action.value, response_schema=action.schema)
                continue
            if park and isinstance(action, _Ledger) and action.method == "confirm":
                return ParkedReceipt(gen, action, call, execute)
            try:
                value = self._do_sync(action, execute, call)
            except GraphBubbleUp:
                raise
            except Exception as exc:
                error = exc

    def _do_sync(self, action: _Action, execute: Execute, call: EffectCall) -> Any:
        match action:
            case _Ledger(method, args, kwargs):
                return getattr(self.ledger, method)(*args, **kwargs)
            case _Hook(fn, arg):
                result = fn(arg)
                return _run_coroutine_sync(result) if inspect.isawaitable(result) else result
            case _Sleep(seconds):
                time.sleep(seconds)
                return None
            case _Dispatch(op, context, args):
                slot = _Call(context)
                ledger, lease_for = self.ledger, self.lease_for
                job = _renewer.hold(
                    lambda: ledger.renew(
                        op.tenant_id, op.operation_id, token=op.fencing_token, lease_for=lease_for
                    ),
                    lease_for.total_seconds() / 3,
                )
                reset = _CURRENT.set(slot)
                out = _Outcome(call=slot)
                try:
                    out.message = execute(args)
                except GraphBubbleUp as exc:
                    out.bubble = exc
                except Exception as exc:
                    out.error = exc
                finally:
                    _CURRENT.reset(reset)
                    _renewer.drop(job)
                return out
        raise AssertionError(f"unknown action {action!r}")  # pragma: no cover

    async def arun(
        self,
        call: EffectCall,
        execute: Callable[[dict[str, Any]], Awaitable[Any]],
        *,
        handoff: Prepared | None = None,
    ) -> Operation:
        """The async twin of ``run``; the ledger may be sync or async.

        If the task is cancelled mid-dispatch, the dispatch is finished and
        recorded, then ``CancelledError`` is raised.
        """
        gen = self._decide(call, handoff, current_owner())
        done = await self._adrive(gen, execute, call, [], park=False)
        assert isinstance(done, Operation)
        return done

    async def arun_until_receipt(
        self,
        call: EffectCall,
        execute: Callable[[dict[str, Any]], Awaitable[Any]],
        *,
        handoff: Prepared | None = None,
    ) -> Operation | ParkedReceipt:
        """The async twin of ``run_until_receipt``."""
        gen = self._decide(call, handoff, current_owner())
        return await self._adrive(gen, execute, call, [], park=True)

    async def afinish(
        self, parked: ParkedReceipt, outcome: Operation | EffectsError | None
    ) -> Operation:
        """The async twin of ``finish``."""
        cancelled = parked.cancelled
        if outcome is None:
            try:
                outcome = await self._do_async(parked.action, parked.execute, cancelled)
            except GraphBubbleUp:
                raise
            except Exception as exc:
                outcome = exc  # type: ignore[assignment]
        done = await self._adrive(
            parked.gen, parked.execute, parked.call, cancelled, park=False, sent=outcome
        )
        assert isinstance(done, Operation)
        return done

    async def _adrive(
        self,
        gen: _Decision,
        execute: Callable[[dict[str, Any]], Awaitable[Any]],
        call: EffectCall,
        cancelled: list[bool],
        *,
        park: bool,
        sent: Any = None,
    ) -> Operation | ParkedReceipt:
        value, error = _split(sent)
        while True:
            try:
                action = gen.throw(error) if error is not None else gen.send(value)
            except StopIteration as stop:
                result: Operation = stop.value
                if cancelled:
                    raise asyncio.CancelledError from None
                return result
            value, error = None, None
            if isinstance(action, _Interrupt):
                if cancelled:
                    raise asyncio.CancelledError
                value = interrupt(action.value, response_schema=action.schema)
                continue
            if park and isinstance(action, _Ledger) and action.method == "confirm":
                return ParkedReceipt(gen, action, call, execute, cancelled)
            try:
                value = await self._do_async(action, execute, cancelled)
            except GraphBubbleUp:
                raise
            except Exception as exc:
                error = exc

    async def _ledger_call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.ledger, method)(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def _do_async(
        self,
        action: _Action,
        execute: Callable[[dict[str, Any]], Awaitable[Any]],
        cancelled: list[bool],
    ) -> Any:
        match action:
            case _Ledger(method, args, kwargs):
                return await self._ledger_call(method, *args, **kwargs)
            case _Hook(fn, arg):
                result = fn(arg)
                return await result if inspect.isawaitable(result) else result
            case _Sleep(seconds):
                await asyncio.sleep(seconds)
                return None
            case _Dispatch(op, context, args):
                slot = _Call(context)
                renewing = asyncio.create_task(self._renew_loop(op))
                reset = _CURRENT.set(slot)
                out = _Outcome(call=slot)
                # A task of its own, shielded: when a sibling's interrupt cancels
                # this one (asyncio.gather), the provider call already in flight
                # (perhaps in a worker thread) finishes and is recorded first.
                flight = asyncio.ensure_future(execute(args))
                try:
                    try:
                        out.message = await asyncio.shield(flight)
                    except asyncio.CancelledError:
                        cancelled.append(True)
                        out.message = await flight
                except GraphBubbleUp as exc:
                    out.bubble = exc
                except Exception as exc:
                    out.error = exc
                finally:
                    _CURRENT.reset(reset)
                    renewing.cancel()
                    await asyncio.wait([renewing])
                return out
        raise AssertionError(f"unknown action {action!r}")  # pragma: no cover

    async def _renew_loop(self, op: Operation) -> None:
        interval = self.lease_for.total_seconds() / 3
        failures = 0
        while True:
            await asyncio.sleep(renewal_delay(failures, interval))
            try:
                await self._ledger_call(
                    "renew",
                    op.tenant_id,
                    op.operation_id,
                    token=op.fencing_token,
                    lease_for=self.lease_for,
                )
            except _LEASE_LOST:
                return  # taken over: the dispatch's own fenced write will say so
            except Exception:
                failures += 1  # a dropped connection: try again soon (core.plan)
            else:
                failures = 0


# --------------------------------------------------------------------------- helpers


def _tenant_request(
    config: Mapping[str, Any] | None, explicit: str | None
) -> tuple[str, str | None]:
    """The run's thread, and the tenant it asks for (the face's, else the config's)."""
    conf = (config or {}).get("configurable") or {}
    workflow = str(conf.get("thread_id") or NO_THREAD)
    requested = explicit if explicit is not None else conf.get("tenant_id")
    if requested is not None and (not isinstance(requested, str) or not requested.strip()):
        raise InvalidInput(
            f"tenant_id must be a non-empty string, got {requested!r}: leave it out to use "
            "the tenant the thread is bound to"
        )
    return workflow, requested


def _checked_tenant(workflow: str, bound: str | None, requested: str | None) -> str:
    if bound is None:
        return requested or DEFAULT_TENANT
    if requested is not None and requested != bound:
        raise TenantMismatch(workflow, bound=bound, requested=requested)
    return bound


def _message_text(message: Any) -> str:
    if isinstance(message, ToolMessage):
        return message.text if hasattr(message, "text") else str(message.content)
    return ""


def _outdated(value: Any, request: Mapping[str, Any]) -> bool:
    """The answer names the request it answers (``request_id``), and it is not this one."""
    named = value.get("request_id") if isinstance(value, Mapping) else None
    return named is not None and named != request.get("request_id")


def _answer_mark(call: EffectCall, value: Any) -> str | None:
    """How the ledger logs an answer: the task that received it and the value's digest."""
    if call.task_id is None:
        return None
    try:
        raw = canonical_json(value)
    except EffectsError:
        raw = repr(value).encode()
    return f"{call.task_id}:{hashlib.sha256(raw).hexdigest()[:32]}"


_MAX_ANSWER_BYTES = 64 * 1024
"""Largest result or edited arguments an answer may carry (canonical JSON)."""


def _answer_schema(
    call: EffectCall,
    op: Operation,
    *,
    kind: RequestKind,
    retry_forbidden: bool,
    stale: Callable[[Any], bool],
    request_id: str,
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
        if stale(value) or _outdated(value, {"request_id": request_id}):
            return value
        if answer.operation_id in (None, op.operation_id):
            parse_answer(value, tool_name=call.tool_name, kind=kind)
            _check_decision(op, answer, retry_forbidden=retry_forbidden)
        _check_applicable(answer)
        return value

    return Annotated[Any, AfterValidator(check)]


def _check_applicable(answer: Answer) -> None:
    """Refuse what the ledger would refuse when the answer is applied."""
    if len(answer.by) > 200:
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


def _check_decision(op: Operation, answer: Answer, *, retry_forbidden: bool) -> None:
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
