"""``EffectToolNode``: a ``ToolNode`` whose effect tools go through the decision core.

Built on ToolNode's public ``wrap_tool_call`` / ``awrap_tool_call``: a tool
without effect metadata runs exactly as in ``ToolNode``; an effect tool's call
is decided by ``EffectRunner`` (replay, reconcile, safe retry, review) and
answered with a ToolMessage built from the ledger's record.

Also here: ``route_tool_calls``, a router replacing ``tools_condition`` that
sends one task per tool call (so an interrupt or a crash in one call never
re-runs its finished siblings), and ``EffectState``, the state mixin whose
``effect_operations`` channel lists the operation ids a thread owns.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import (
    AsyncToolCallWrapper,
    ToolCallRequest,
    ToolCallWrapper,
    msg_content_output,
)
from langgraph.runtime import Runtime
from langgraph.types import Command, Send
from typing_extensions import TypedDict

from langgraph_effects._owners import current_owner
from langgraph_effects.core.digest import canonical_json
from langgraph_effects.core.model import (
    Operation,
    OperationDraft,
    OperationStatus,
    Prepared,
    utcnow,
)
from langgraph_effects.decide import (
    OPERATIONS_KEY,
    ConfirmMany,
    EffectCall,
    EffectRunner,
    ParkedReceipt,
    PrepareMany,
    recorded_command,
    tool_message,
    warn_durability,
)
from langgraph_effects.effects import current_call, effect_spec
from langgraph_effects.errors import EffectsError
from langgraph_effects.ledger.base import DEFAULT_LEASE

__all__ = [
    "OPERATIONS_KEY",
    "EffectState",
    "EffectToolNode",
    "add_operations",
    "build_call",
    "effect_result",
    "route_tool_calls",
]

S = OperationStatus
_TOOLNODE_DEFAULT: Any = object()
"""``handle_tool_errors`` not given: ToolNode's own default applies."""
NO_CALL_ID = "no-call-id"


def add_operations(left: list[str] | None, right: list[str] | None) -> list[str]:
    """Reducer of ``effect_operations``: append new ids, keep order, no duplicates."""
    out = list(left or [])
    seen = set(out)
    for op_id in right or []:
        if op_id not in seen:
            seen.add(op_id)
            out.append(op_id)
    return out


class EffectState(TypedDict, total=False):
    """State mixin: ``class State(MessagesState, EffectState)``.

    ``effect_operations`` lists the operation ids this thread owns (written by
    ``EffectToolNode`` / ``EffectMiddleware`` only when the state has the key).
    The ledger, not this list, decides what happened.
    """

    effect_operations: Annotated[list[str], add_operations]


def route_tool_calls(
    state: list[AnyMessage] | dict[str, Any] | Any,
    *,
    node: str = "tools",
    messages_key: str = "messages",
) -> list[Send] | Literal["__end__"]:
    """Route each unanswered tool call of the last AIMessage to its own task.

    Use instead of ``tools_condition``:
    ``builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])``.
    One task per call means LangGraph keeps a finished call's result as a
    pending write while a sibling interrupts or crashes, and an interrupt
    answer can only meet its own call.
    """
    if isinstance(state, list):
        messages = state
    elif isinstance(state, dict):
        messages = state.get(messages_key, [])
    else:
        messages = getattr(state, messages_key, [])
    if not messages or not isinstance(messages[-1], AIMessage):
        return "__end__"
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    sends = [Send(node, [tc]) for tc in messages[-1].tool_calls if tc["id"] not in answered]
    return sends or "__end__"


@dataclass(slots=True)
class _Parked:
    """A call waiting for the batched receipt, and the answer ToolNode already holds."""

    parked: ParkedReceipt
    request: ToolCallRequest
    message: ToolMessage
    owned: list[str] | None


@dataclass(slots=True)
class _Receipts:
    """The receipts of a task's pre-prepared parallel calls, recorded after the fan-in.

    Each tool thread stops at its receipt and leaves here a placeholder answer;
    after ToolNode's fan-in, one ``confirm_many`` records them all and each
    call's decision loop resumes with its own outcome (a stale one goes on to
    reconcile, as after a single ``confirm``). Once closed, a late call (a
    sibling still running when the task failed) confirms on its own.
    """

    entries: list[_Parked] = field(default_factory=list)
    open: bool = True
    lock: threading.Lock = field(default_factory=threading.Lock)

    def park(self, entry: _Parked) -> bool:
        with self.lock:
            if self.open:
                self.entries.append(entry)
            return self.open

    def close(self) -> list[_Parked]:
        with self.lock:
            self.open = False
            return self.entries


@dataclass(frozen=True, slots=True)
class _Task:
    """What the node learned about its task before ToolNode fanned the calls out."""

    effect_calls: int
    handoff: dict[str, Prepared]
    drafts: dict[str, OperationDraft]
    receipts: _Receipts | None = None
    calls: dict[str, EffectCall] = field(default_factory=dict)
    """The calls already derived (digest, ids), by tool-call id: derived once per task."""


_TASK: contextvars.ContextVar[_Task | None] = contextvars.ContextVar(
    "langgraph_effects_task", default=None
)


def call_occurrence(
    state: Any, tool_call: ToolCall, *, messages_key: str = "messages"
) -> int | None:
    """The call's place among identical calls of its thread (see ``occurrence_operation_id``).

    Identical means same tool and same canonical arguments. Counts the identical
    calls of earlier AIMessages that were answered (a ToolMessage with their id),
    plus the call's index among identical calls of its own AIMessage. None when
    the call is not found in the state's messages.
    """
    if isinstance(state, list):
        messages = state
    elif isinstance(state, dict):
        messages = state.get(messages_key) or []
    else:
        messages = getattr(state, messages_key, None) or []
    call_id, name = tool_call.get("id"), tool_call["name"]
    if not call_id or not messages:
        return None
    try:
        args = canonical_json(tool_call["args"])
    except EffectsError:
        return None
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    earlier, found = 0, None
    for message in messages:
        if not isinstance(message, AIMessage) or not message.tool_calls:
            continue
        twins = [tc for tc in message.tool_calls if tc["name"] == name and _same(tc, args)]
        for index, twin in enumerate(twins):
            if twin["id"] == call_id:
                # The last AIMessage holding the id is the call's own (some models
                # reuse ids such as "call_0" from turn to turn).
                found = earlier + index
        earlier += sum(1 for twin in twins if twin["id"] in answered)
    return found


def _same(tool_call: ToolCall, args: bytes) -> bool:
    try:
        return canonical_json(tool_call["args"]) == args
    except EffectsError:
        return False


def build_call(
    tool: BaseTool,
    tool_call: ToolCall,
    *,
    tenant_id: str,
    workflow_id: str,
    state: Any = None,
    messages_key: str = "messages",
    task_id: str | None = None,
    single: bool = True,
    siblings: dict[str, OperationDraft] | None = None,
    preapproved_by: str | None = None,
) -> EffectCall:
    """The ``EffectCall`` of a tool call, for a tenant and thread resolved by the face."""
    spec = effect_spec(tool)
    if spec is None:
        raise EffectsError(f"tool {tool.name!r} is not an effect")
    return EffectCall.build(
        spec,
        tool_name=tool_call["name"],
        # A call without an id ("" or None) is identified by thread, action and payload.
        tool_call_id=tool_call["id"] or NO_CALL_ID,
        args=tool_call["args"],
        tenant_id=tenant_id,
        workflow_id=workflow_id,
        single=single,
        siblings=siblings,
        preapproved_by=preapproved_by,
        occurrence=call_occurrence(state, tool_call, messages_key=messages_key),
        task_id=task_id,
    )


def task_id_of(runtime: Any) -> str | None:
    """LangGraph's task id from a ``ToolRuntime`` / ``Runtime`` (None outside a task)."""
    info = getattr(runtime, "execution_info", None)
    return getattr(info, "task_id", None)


def effect_result(
    request: ToolCallRequest,
    call: EffectCall,
    op: Operation,
    *,
    messages_key: str = "messages",
    produced: Any = None,
) -> ToolMessage | Command[Any]:
    """The call's answer, plus the operation id when the state tracks them.

    ``produced`` is this run's own answer when it must be returned as made
    (``_Execution.first_answer``): a ``Command``, or a message an inner layer changed.
    Otherwise the answer is built from the record (on a replay, the recorded
    ``Command`` with its update, goto and graph), so a first run and every replay
    answer identically.
    """
    tool_call_id = request.tool_call["id"] or ""
    answer: Any
    if produced is not None:
        answer = produced
    else:
        answer = recorded_command(op, tool_call_id=tool_call_id) or tool_message(
            op, tool_name=call.tool_name, tool_call_id=tool_call_id
        )
    state = request.state
    if not (isinstance(state, dict) and OPERATIONS_KEY in state):
        return answer  # type: ignore[no-any-return]
    # An edited call ends in another operation: the thread owns both.
    owned = list(dict.fromkeys([call.operation_id, op.operation_id]))
    return _with_owned(answer, owned, messages_key)


def _with_owned(answer: Any, owned: list[str], messages_key: str) -> ToolMessage | Command[Any]:
    """``answer`` that also appends ``owned`` to the state's ``effect_operations``."""
    if isinstance(answer, ToolMessage):
        return Command(update={messages_key: [answer], OPERATIONS_KEY: owned})
    if isinstance(answer, Command) and answer.graph is None and isinstance(answer.update, dict):
        update = dict(answer.update)
        update[OPERATIONS_KEY] = add_operations(update.get(OPERATIONS_KEY), owned)
        return dataclasses.replace(answer, update=update)
    return answer  # type: ignore[no-any-return]  # a parent handoff or a list: not our state


class _Unhandled(GraphBubbleUp):
    """Carries an exception ToolNode re-raised past its wrapper's own error handling.

    Without a wrapper, ToolNode raises what ``handle_tool_errors`` does not cover; an
    exception leaving a wrapper is handled whatever its type. Our wrapper, when the
    user gave none, carries such an exception out as a ``GraphBubbleUp`` (which
    ToolNode always lets through) and the node raises it unchanged: a plain tool's
    errors behave exactly as in ``ToolNode``.
    """

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error


class _Execution:
    """ToolNode's ``execute`` for one call, as the runner calls it (``run(args)``).

    Keeps what the tool returned through ToolNode in this run (``produced``: its
    ToolMessage or Command as is) and which exceptions ToolNode itself raised.
    """

    def __init__(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any], *, carry: bool
    ) -> None:
        self.request = request
        self.execute = execute
        self.carry = carry
        self.produced: Any = None
        self.answered: Any = None
        self.value: Any = None
        self.raised: list[BaseException] = []

    def _request(self, args: dict[str, Any]) -> ToolCallRequest:
        if args == self.request.tool_call["args"]:
            return self.request
        return self.request.override(tool_call={**self.request.tool_call, "args": args})

    def _keep(self, out: Any) -> Any:
        slot = current_call()
        self.produced = self.answered = None
        if slot is not None and slot.started and slot.error is None:
            self.produced, self.value = out, slot.value  # what the chain made of a return
        elif slot is not None and not slot.started:
            self.answered = out  # an inner layer answered without running the tool
        return out

    def first_answer(self, op: Operation) -> Any:
        """This run's answer as made, where the record would lose something; else None.

        A ``Command`` (or a list) the tool returned; a ToolMessage an inner layer
        changed (ToolNode refusing the output, a reviewer-edit notice) or made
        instead of running the tool (invalid arguments, a reviewer's reject/respond).
        """
        if op.status is S.CONFIRMED and self.produced is not None:
            out = self.produced
            if isinstance(out, Command | list):
                return out
            if isinstance(out, ToolMessage) and (
                out.status == "error" or out.content != msg_content_output(self.value)
            ):
                return out
        if op.status is S.REJECTED and isinstance(self.answered, ToolMessage):
            return self.answered
        return None

    def __call__(self, args: dict[str, Any]) -> Any:
        try:
            return self._keep(self.execute(self._request(args)))
        except Exception as exc:
            self.raised.append(exc)
            raise

    async def acall(self, args: dict[str, Any]) -> Any:
        try:
            return self._keep(await self.execute(self._request(args)))
        except Exception as exc:
            self.raised.append(exc)
            raise

    def plain(self) -> Any:
        with self.carrying():
            return self(self.request.tool_call["args"])

    async def aplain(self) -> Any:
        with self.carrying():
            return await self.acall(self.request.tool_call["args"])

    @contextlib.contextmanager
    def carrying(self) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            if self.carry and any(exc is e for e in self.raised):
                raise _Unhandled(exc) from exc
            raise


def _execute_with(
    request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]
) -> _Execution:
    """``execute`` for the runner: the request, with other arguments after an edit."""
    return _Execution(request, execute, carry=False)


def _outside(
    user: ToolCallWrapper, inner: Callable[..., ToolMessage | Command[Any]]
) -> ToolCallWrapper:
    """The user's wrapper around ours: ``execute`` in the user's wrapper runs our decision."""

    def wrapped(
        request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]
    ) -> ToolMessage | Command[Any]:
        return user(request, lambda r: inner(r, execute))

    return wrapped


def _aoutside(
    user: AsyncToolCallWrapper, inner: Callable[..., Awaitable[ToolMessage | Command[Any]]]
) -> AsyncToolCallWrapper:
    """Async twin of ``_outside``."""

    async def wrapped(
        request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]
    ) -> ToolMessage | Command[Any]:
        async def run(r: ToolCallRequest) -> ToolMessage | Command[Any]:
            return await inner(r, execute)

        return await user(request, run)

    return wrapped


class EffectToolNode(ToolNode):
    """A drop-in ``ToolNode`` that runs effect tools through the ledger.

    Args:
        tools: effect tools (``@effect``) and plain tools, as for ``ToolNode``.
        ledger: a sync ``Ledger`` (``invoke``/``stream``) or ``AsyncLedger``
            (``ainvoke``/``astream``; a sync ledger works there too).
        tenant_id: the tenant; default ``config["configurable"]["tenant_id"]``,
            else ``"default"``.
        lease_for: lease length while a dispatch is in flight (renewed).
        clock: time source, shared with the ledger in tests.
        interrupt_on_unknown: ``interrupt()`` for review when nothing resolves an
            unknown operation (default); False answers with an error ToolMessage
            ("could not confirm") and leaves the operation for an operator.
        name, tags, handle_tool_errors, messages_key: as for ``ToolNode``; plain tools
            behave exactly as there.
        wrap_tool_call, awrap_tool_call: as for ``ToolNode``; for an effect tool they run
            outside the ledger's decision, so the arguments they pass to ``execute`` are
            what the operation binds to.
    """

    def __init__(
        self,
        tools: Sequence[BaseTool | Callable[..., Any]],
        *,
        ledger: Any,
        tenant_id: str | None = None,
        lease_for: timedelta = DEFAULT_LEASE,
        clock: Callable[[], datetime] = utcnow,
        interrupt_on_unknown: bool = True,
        name: str = "tools",
        tags: list[str] | None = None,
        handle_tool_errors: Any = _TOOLNODE_DEFAULT,
        messages_key: str = "messages",
        wrap_tool_call: ToolCallWrapper | None = None,
        awrap_tool_call: AsyncToolCallWrapper | None = None,
    ) -> None:
        self.runner = EffectRunner(
            ledger, lease_for=lease_for, clock=clock, interrupt_on_unknown=interrupt_on_unknown
        )
        self.tenant_id = tenant_id
        extra: dict[str, Any] = {}
        if handle_tool_errors is not _TOOLNODE_DEFAULT:
            extra["handle_tool_errors"] = handle_tool_errors
        if any(effect_spec(t) for t in tools):
            # The user's wrappers run outside the decision (as the first middleware of
            # an agent is the outermost): what they pass to ``execute`` is what runs.
            sync_inner = functools.partial(self._decide, outermost=False)
            if wrap_tool_call is not None and awrap_tool_call is None:
                # ToolNode runs a lone sync wrapper on the async path too (sync execute).
                if self.runner.is_async:
                    raise EffectsError(
                        "EffectToolNode: with an async ledger, give awrap_tool_call too "
                        "(wrap_tool_call alone runs the async path synchronously)"
                    )
                wrap_tool_call = _outside(wrap_tool_call, sync_inner)
            else:
                async_inner = functools.partial(self._adecide, outermost=False)
                wrap_tool_call = (
                    self._wrap if wrap_tool_call is None else _outside(wrap_tool_call, sync_inner)
                )
                awrap_tool_call = (
                    self._awrap
                    if awrap_tool_call is None
                    else _aoutside(awrap_tool_call, async_inner)
                )
        super().__init__(
            tools,
            name=name,
            tags=tags,
            messages_key=messages_key,
            wrap_tool_call=wrap_tool_call,
            awrap_tool_call=awrap_tool_call,
            **extra,
        )

    def __repr__(self) -> str:
        # ToolNode's repr walks its bound wrappers back to this object.
        return f"EffectToolNode(tools={list(self.tools_by_name)!r}, name={self.name!r})"

    @property
    def ledger(self) -> Any:
        return self.runner.ledger

    # -- batching: one prepare_many for the parallel effect calls of a task ----

    def _effect_calls(
        self, input: Any, config: RunnableConfig, runtime: Runtime[Any], thread: tuple[str, str]
    ) -> list[EffectCall]:
        try:
            tool_calls, _ = self._parse_input(input)
        except ValueError:
            return []
        effect_tool_calls = [
            (self.tools_by_name[tc["name"]], tc)
            for tc in tool_calls
            if tc["name"] in self.tools_by_name and effect_spec(self.tools_by_name[tc["name"]])
        ]
        if not effect_tool_calls:
            return []
        single = len(effect_tool_calls) <= 1
        state = self._extract_state(input, config)
        workflow_id, tenant_id = thread
        calls = []
        for tool, tc in effect_tool_calls:
            try:
                calls.append(
                    build_call(
                        tool,
                        tc,
                        tenant_id=tenant_id,
                        workflow_id=workflow_id,
                        state=state,
                        messages_key=self._messages_key,
                        task_id=task_id_of(runtime),
                        single=single,
                    )
                )
            except Exception:
                continue  # the call's own run reports it
        return calls

    def _batchable(self, calls: list[EffectCall]) -> list[EffectCall]:
        return [
            c
            for c in calls
            if not c.spec.require_approval and c.spec.authorize is None and not c.single
        ]

    def _has_effects(self) -> bool:
        return any(effect_spec(tool) is not None for tool in self.tools_by_name.values())

    def _func(self, input: Any, config: RunnableConfig, runtime: Runtime[Any]) -> Any:
        try:
            return self._run_task(input, config, runtime)
        except _Unhandled as carried:
            error = carried.error
        raise error

    async def _afunc(self, input: Any, config: RunnableConfig, runtime: Runtime[Any]) -> Any:
        try:
            return await self._arun_task(input, config, runtime)
        except _Unhandled as carried:
            error = carried.error
        raise error

    def _run_task(self, input: Any, config: RunnableConfig, runtime: Runtime[Any]) -> Any:
        calls = (
            self._effect_calls(
                input, config, runtime, self.runner.tenant_for(config, self.tenant_id)
            )
            if self._has_effects() and not self.runner.is_async
            else []
        )
        handoff: dict[str, Prepared] = {}
        batch = self._batchable(calls)
        if len(batch) > 1 and not self.runner.is_async:
            try:
                prepared = self.runner.perform(
                    PrepareMany(
                        [c.draft() for c in batch],
                        owner=current_owner(),
                        lease_for=self.runner.lease_for,
                    )
                )
                handoff = {p.operation.operation_id: p for p in prepared}
            except Exception:
                handoff = {}  # e.g. PayloadMismatch: each call meets it on its own
        task = _Task(
            effect_calls=len(calls),
            handoff=handoff,
            drafts={c.operation_id: c.draft() for c in calls},
            receipts=_Receipts() if handoff else None,
            calls={c.tool_call_id: c for c in calls},
        )
        token = _TASK.set(task)
        try:
            out = super()._func(input, config, runtime)
        except BaseException:
            self._record_receipts(task, resume=False)
            raise
        finally:
            _TASK.reset(token)
        self._record_receipts(task, resume=True)
        return out

    async def _arun_task(self, input: Any, config: RunnableConfig, runtime: Runtime[Any]) -> Any:
        calls = (
            self._effect_calls(
                input, config, runtime, await self.runner.atenant_for(config, self.tenant_id)
            )
            if self._has_effects()
            else []
        )
        handoff: dict[str, Prepared] = {}
        batch = self._batchable(calls)
        if len(batch) > 1:
            try:
                prepared = await self.runner.aperform(
                    PrepareMany(
                        [c.draft() for c in batch],
                        owner=current_owner(),
                        lease_for=self.runner.lease_for,
                    )
                )
                handoff = {p.operation.operation_id: p for p in prepared}
            except Exception:
                handoff = {}
        task = _Task(
            effect_calls=len(calls),
            handoff=handoff,
            drafts={c.operation_id: c.draft() for c in calls},
            receipts=_Receipts() if handoff else None,
            calls={c.tool_call_id: c for c in calls},
        )
        token = _TASK.set(task)
        try:
            out = await super()._afunc(input, config, runtime)
        except BaseException:
            await self._arecord_receipts(task, resume=False)
            raise
        finally:
            _TASK.reset(token)
        await self._arecord_receipts(task, resume=True)
        return out

    # -- batched receipts: one confirm_many after the fan-in -----------------------
    #
    # The parallel calls of one AIMessage were prepared (and claimed) together;
    # their receipts are recorded together too. A crash between a provider's
    # answer and this confirm_many is the window before a single confirm: the
    # record stays dispatching, is taken over, marked unknown and reconciled.
    # While parked, the lease is no longer renewed: if the fan-in outlasts it, a
    # takeover makes the receipt stale and the call's loop reconciles with it.

    def _record_receipts(self, task: _Task, *, resume: bool) -> None:
        entries = task.receipts.close() if task.receipts is not None else []
        if not entries:
            return
        try:
            outcomes = self.runner.perform(ConfirmMany([e.parked.confirmation for e in entries]))
        except Exception:
            if resume:
                raise
            return  # the task fails anyway; the records stay dispatching (see above)
        if resume:
            for entry, outcome in zip(entries, outcomes, strict=True):
                _fill(entry, self.runner.finish(entry.parked, outcome))

    async def _arecord_receipts(self, task: _Task, *, resume: bool) -> None:
        entries = task.receipts.close() if task.receipts is not None else []
        if not entries:
            return
        try:
            outcomes = await self.runner.aperform(
                ConfirmMany([e.parked.confirmation for e in entries])
            )
        except Exception:
            if resume:
                raise
            return
        if resume:
            for entry, outcome in zip(entries, outcomes, strict=True):
                _fill(entry, await self.runner.afinish(entry.parked, outcome))

    # -- the wrappers ------------------------------------------------------------

    def _call(self, request: ToolCallRequest, thread: tuple[str, str]) -> EffectCall:
        task = _TASK.get()
        if task is not None:
            known = task.calls.get(request.tool_call["id"] or "")
            if (
                known is not None
                and known.tool_name == request.tool_call["name"]
                and known.args == request.tool_call["args"]
            ):
                return dataclasses.replace(known, siblings=task.drafts)
        assert request.tool is not None
        single = task is None or task.effect_calls <= 1
        workflow_id, tenant_id = thread
        return build_call(
            request.tool,
            request.tool_call,
            tenant_id=tenant_id,
            workflow_id=workflow_id,
            state=request.state,
            messages_key=self._messages_key,
            task_id=task_id_of(request.runtime),
            single=single,
            siblings=None if task is None else task.drafts,
        )

    @staticmethod
    def _config(request: ToolCallRequest) -> RunnableConfig | None:
        """The run's config, for an effect call (None for a plain tool)."""
        if request.tool is None or effect_spec(request.tool) is None:
            return None
        config = request.runtime.config if request.runtime is not None else None
        warn_durability(config)
        return config or {}

    def _handoff(self, call: EffectCall) -> Prepared | None:
        task = _TASK.get()
        return None if task is None else task.handoff.pop(call.operation_id, None)

    def _receipts(self, handoff: Prepared | None) -> _Receipts | None:
        """Where a call records its receipt: the task's batch if this node claimed it."""
        task = _TASK.get()
        if task is None or handoff is None or not handoff.created:
            return None
        return task.receipts

    def _wrap(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]
    ) -> ToolMessage | Command[Any]:
        return self._decide(request, execute, outermost=True)

    async def _awrap(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]
    ) -> ToolMessage | Command[Any]:
        return await self._adecide(request, execute, outermost=True)

    def _decide(
        self,
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Any],
        *,
        outermost: bool,
    ) -> ToolMessage | Command[Any]:
        run = _Execution(request, execute, carry=outermost)
        config = self._config(request)
        if config is None:
            plain: ToolMessage | Command[Any] = run.plain()
            return plain
        call = self._call(request, self.runner.tenant_for(config, self.tenant_id))
        handoff = self._handoff(call)
        receipts = self._receipts(handoff)
        with run.carrying():
            if receipts is None:
                op = self.runner.run(call, run, handoff=handoff)
            else:
                out = self.runner.run_until_receipt(call, run, handoff=handoff)
                if isinstance(out, ParkedReceipt):
                    answer, entry = self._placeholder(request, call, out, run.produced)
                    if receipts.park(entry):
                        return answer
                    out = self.runner.finish(out, None)
                op = out
        return effect_result(
            request, call, op, messages_key=self._messages_key, produced=run.first_answer(op)
        )

    async def _adecide(
        self,
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Any],
        *,
        outermost: bool,
    ) -> ToolMessage | Command[Any]:
        run = _Execution(request, execute, carry=outermost)
        config = self._config(request)
        if config is None:
            plain: ToolMessage | Command[Any] = await run.aplain()
            return plain
        call = self._call(request, await self.runner.atenant_for(config, self.tenant_id))
        handoff = self._handoff(call)
        receipts = self._receipts(handoff)
        with run.carrying():
            if receipts is None:
                op = await self.runner.arun(call, run.acall, handoff=handoff)
            else:
                out = await self.runner.arun_until_receipt(call, run.acall, handoff=handoff)
                if isinstance(out, ParkedReceipt):
                    answer, entry = self._placeholder(request, call, out, run.produced)
                    if receipts.park(entry):
                        return answer
                    out = await self.runner.afinish(out, None)
                op = out
        return effect_result(
            request, call, op, messages_key=self._messages_key, produced=run.first_answer(op)
        )

    def _placeholder(
        self, request: ToolCallRequest, call: EffectCall, parked: ParkedReceipt, produced: Any
    ) -> tuple[ToolMessage | Command[Any], _Parked]:
        """The answer ToolNode collects now; ``_fill`` writes the recorded outcome into it.

        A Command the tool returned is the answer as is (its receipt is recorded
        after the fan-in like any other).
        """
        message = ToolMessage(
            content="",
            name=call.tool_name,
            tool_call_id=request.tool_call["id"] or "",
            artifact=produced.artifact if isinstance(produced, ToolMessage) else None,
        )
        answer: Any = produced if isinstance(produced, Command | list) else message
        state = request.state
        if isinstance(state, dict) and OPERATIONS_KEY in state:
            owned = [call.operation_id]
            return _with_owned(answer, owned, self._messages_key), _Parked(
                parked, request, message, owned
            )
        return answer, _Parked(parked, request, message, None)


def _fill(entry: _Parked, op: Operation) -> None:
    """Write the recorded outcome into the answer ToolNode already returned (same object)."""
    final = tool_message(
        op, tool_name=entry.parked.call.tool_name, tool_call_id=entry.message.tool_call_id
    )
    entry.message.content = final.content
    entry.message.status = final.status
    entry.message.artifact = final.artifact
    if entry.owned is not None and op.operation_id not in entry.owned:
        entry.owned.append(op.operation_id)
