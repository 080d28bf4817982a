"""``EffectToolNode``: a ``ToolNode`` whose effect tools go through the decision core.

Built on LangGraph's public API only: ToolNode's constructor and its
``wrap_tool_call`` / ``awrap_tool_call`` hooks, and Runnable's ``invoke`` /
``ainvoke`` (which note the task's tool calls for the hooks, see ``_Task``). A
tool without effect metadata runs exactly as in ``ToolNode``; an effect tool's
call is decided by ``EffectRunner`` (replay, reconcile, safe retry, review) and
answered, inside the hook, with a ToolMessage built from the ledger's record
(``_faces.py``). The node never touches what ToolNode returns.

Also here: ``route_tool_calls``, a router replacing ``tools_condition`` that
sends one task per tool call (so an interrupt or a crash in one call never
re-runs its finished siblings), and ``EffectState``, the state mixin whose
``effect_operations`` channel lists the operation ids a thread owns.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, ToolCall, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import AsyncToolCallWrapper, ToolCallRequest, ToolCallWrapper
from langgraph.runtime import get_runtime
from langgraph.types import Command, Send
from typing_extensions import TypedDict

from langgraph_effects._faces import (
    Execution,
    add_operations,
    atrace_decision,
    build_call,
    call_id_of,
    effect_calls,
    effect_result,
    messages_of,
    places,
    task_id_of,
    timeline_of_request,
    trace_decision,
    twins_in,
    unanswered_calls,
)
from langgraph_effects.core.model import OperationDraft, OperationStatus, Prepared, utcnow
from langgraph_effects.decide import (
    APPROVAL_MODES,
    OPERATIONS_KEY,
    ApprovalMode,
    EffectCall,
    EffectRunner,
    Release,
    Trace,
    authenticated_user,
    warn_durability,
)
from langgraph_effects.decide.identity import keeps_answers, timeline_of
from langgraph_effects.decide.thread import caller_site
from langgraph_effects.decide.turns import Turns
from langgraph_effects.effects import effect_spec
from langgraph_effects.errors import EffectsError
from langgraph_effects.ledger.base import DEFAULT_LEASE
from langgraph_effects.observe import logger

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
    """Route each unanswered tool call of the latest AIMessage to its own task
    (``unanswered_calls``: only a ToolMessage after the AIMessage answers a call, so
    a model reusing ``call_0`` every turn still has its new call routed).

    Use instead of ``tools_condition``:
    ``builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])``.
    One task per call means LangGraph keeps a finished call's result as a
    pending write while a sibling interrupts or crashes, and an interrupt
    answer can only meet its own call.
    """
    sends = [Send(node, [tc]) for tc in unanswered_calls(state, messages_key)]
    return sends or "__end__"


def _tool_calls_of(input: Any, messages_key: str) -> tuple[list[ToolCall], bool]:
    """The tool calls ToolNode runs for ``input``, by its documented input forms, and
    whether ``input`` is the state the calls see.

    A list of tool calls (what ``Send("tools", [tool_call])`` delivers), one
    ``tool_call_with_context``, or a state (list, dict or object of messages):
    every call of its latest AIMessage.
    """
    last = input[-1] if isinstance(input, list) and input else None
    if isinstance(last, dict) and last.get("type") == "tool_call":
        return list(input), False
    if isinstance(input, dict) and input.get("__type") == "tool_call_with_context":
        return [input["tool_call"]], False
    messages = messages_of(input, messages_key)
    latest = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    return (list(latest.tool_calls) if latest is not None else []), True


def _same_call(a: ToolCall, b: ToolCall) -> bool:
    return a["name"] == b["name"] and a["args"] == b["args"] and a["id"] == b["id"]


# --------------------------------------------------------------------------- one task's calls
#
# The parallel effect calls of one AIMessage run in one task (``tools_condition``).
# When the node's input is their state, the node prepares them all with one
# ``prepare_many`` before ToolNode fans them out (each call takes its record from
# the task), and derives each call once (digest, ids, its siblings' drafts for an
# answer naming one of them).
#
# Each call's receipt is committed as soon as its provider answers, through the
# runner's group commit (``decide.commit``: receipts arriving together share a
# commit), never held for a sibling still at work; a call answers only once its
# receipt is committed, so the task's answers reach LangGraph only after the
# ledger holds them. The same goes for a claimed write-ahead of a call the task
# did not prepare, e.g. one task per call under ``route_tool_calls``.


Thread = tuple[str, str]
"""``(workflow_id, tenant_id)`` (``EffectRunner.tenant_for``)."""


@dataclass(eq=False)
class _Task:
    """One run of the node: the tool calls ToolNode fans out, derived and prepared once."""

    node: EffectToolNode
    tool_calls: list[ToolCall]
    state_input: bool
    """The node's input is the state its calls see: the batch is prepared before the fan-out."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Guards ``handoff``; never held across I/O."""
    preparing: threading.Lock = field(default_factory=threading.Lock)
    apreparing: asyncio.Lock = field(default_factory=asyncio.Lock)
    thread: Thread | None = None
    """``(workflow_id, tenant_id)``, resolved by the first effect call; then prepared."""
    effect_calls: int = 0
    calls: dict[str, EffectCall] = field(default_factory=dict)
    """The calls derived once per task (digest, ids), by tool-call id."""
    drafts: dict[str, OperationDraft] = field(default_factory=dict)
    handoff: dict[str, Prepared] = field(default_factory=dict)
    running: set[asyncio.Task[Any]] = field(default_factory=set)
    """The effect calls under way in ``ainvoke`` (ToolNode's ``gather``), for ``settle``."""
    placed: dict[int, tuple[ToolCall, int]] = field(default_factory=dict)
    """By ``id()`` of a request's tool-call dict (kept alive): its place (``place_of``)."""
    turns: Turns = field(default_factory=Turns)
    """The order in which the effect calls ask (``decide.turns``): the AIMessage's."""

    def place_of(self, tool_call: ToolCall) -> int | None:
        """Where a call the model sent without an id stands among the task's calls of its
        tool (``_faces.places``).

        ToolNode hands each request the very dict of its AIMessage: that one's place.
        A wrapper's copy (``request.override``) takes the first equal place not given
        yet (identical copies are interchangeable), and keeps it whenever that copy
        comes back. None: the call has an id, or is not among the task's calls.
        """
        if tool_call["id"]:
            return None
        with self.lock:
            if id(tool_call) in self.placed:
                return self.placed[id(tool_call)][1]
            mine = list(zip(places(self.tool_calls), self.tool_calls, strict=True))
            same = [p for p, tc in mine if tc is tool_call]
            if not same:
                given = {p for tc, p in self.placed.values() if tc["name"] == tool_call["name"]}
                equal = [p for p, tc in mine if _same_call(tc, tool_call)]
                same = [p for p in equal if p not in given] or equal
            if not same:
                return None
            self.placed[id(tool_call)] = (tool_call, same[0])
            return same[0]

    def ready(
        self,
        thread: Thread,
        calls: list[EffectCall],
        drafts: dict[str, OperationDraft],
        prepared: list[Prepared],
    ) -> None:
        """``calls`` built knowing their ``drafts`` as siblings (``EffectToolNode._task_calls``)."""
        with self.lock:
            self.effect_calls = len(calls)
            self.drafts = drafts
            self.calls = {c.tool_call_id: c for c in calls}
            self.handoff = {p.operation.operation_id: p for p in prepared}
            self.turns.order(list(self.calls))
            self.thread = thread  # last: a call seeing it finds the rest in place

    def known(self, request: ToolCallRequest) -> EffectCall | None:
        """The call derived for ``request`` with the task's batch, if it still is it."""
        tool_call = request.tool_call
        known = self.calls.get(call_id_of(tool_call, self.place_of(tool_call)))
        if known is None or known.tool_name != tool_call["name"] or known.args != tool_call["args"]:
            return None
        return known

    def left(self, request: ToolCallRequest) -> None:
        """``request``'s call left the node: the calls after it may ask (``decide.turns``)."""
        self.turns.left(call_id_of(request.tool_call, self.place_of(request.tool_call)))

    def take(self, call: EffectCall) -> Prepared | None:
        """The record prepared for ``call`` in the batch, once."""
        with self.lock:
            return self.handoff.pop(call.operation_id, None)

    def never_ran(self) -> list[Release]:
        """The releases of the claims the batch made for calls no hook took, once the
        node's run failed with an error: ToolNode's executor cancels the calls not started
        when one raises, so nothing was sent for them (left ``dispatching``, a takeover
        would call them unknown and ask a person about a call never sent). Taken once,
        under the lock: a hook about to take its record finds none and prepares its own."""
        with self.lock:
            left, self.handoff = self.handoff, {}
        return [
            Release(p.operation.key, token=p.operation.fencing_token, reason=_NEVER_RAN)
            for p in left.values()
            if p.created and p.operation.status is S.DISPATCHING
        ]

    @contextmanager
    def under_way(self) -> Iterator[None]:
        """Count the running asyncio task among the task's effect calls (``settle``)."""
        me = asyncio.current_task()
        if me is None:  # pragma: no cover - ToolNode runs each call in a task of gather's
            yield
            return
        self.running.add(me)
        try:
            yield
        finally:
            self.running.discard(me)

    async def settle(self) -> None:
        """Wait for the effect calls still under way when the task failed.

        A sibling that raised (a plain tool, an interrupt) ends ToolNode's ``gather``,
        not the other calls: they would go on after the task, and an event loop that
        ends with it (``asyncio.run``) would cancel a provider's answer before its
        receipt. The sync node's executor waits for its threads; this is its twin. A
        cancellation arriving meanwhile waits for them too: the task is already ending.
        """
        pending = {t for t in self.running if t is not asyncio.current_task()}
        while pending:
            try:
                _, pending = await asyncio.wait(pending)
            except asyncio.CancelledError:
                pending = {t for t in pending if not t.done()}


_TASK: contextvars.ContextVar[_Task | None] = contextvars.ContextVar(
    "langgraph_effects_task", default=None
)


def _runtime() -> Any:
    """The task's LangGraph ``Runtime`` (None outside a graph)."""
    try:
        return get_runtime()
    except (RuntimeError, KeyError):
        return None


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


class _before_the_calls:  # a context manager named as it reads: ``with _before_the_calls()``
    """Fail the task, not the call: what goes wrong here concerns every call of the task.

    (The thread's tenant: a refusal is not an answer for the model, whatever
    ``handle_tool_errors`` says.) A class, not a generator: two calls per task.
    """

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, Exception) and not isinstance(exc, GraphBubbleUp):
            raise _Unhandled(exc) from exc


_UNSENT = "answered by the node's wrap_tool_call without calling execute: nothing was sent"
_NEVER_RAN = "never started: a sibling call's error failed its node first: nothing was sent"


def _unsent(task: _Task | None, request: ToolCallRequest) -> Release | None:
    """The release of the record the task's batch claimed for ``request``'s call, when the
    user's wrapper answered (or failed) without deciding it: nothing was sent, so the
    record goes back to ``prepared`` (a later call sends it), never left ``dispatching``."""
    known = None if task is None else task.known(request)
    handoff = None if task is None or known is None else task.take(known)
    if handoff is None or not handoff.created or handoff.operation.status is not S.DISPATCHING:
        return None
    op = handoff.operation
    return Release(op.key, token=op.fencing_token, reason=_UNSENT)


@contextmanager
def _logged(release: Release) -> Iterator[None]:
    """A release that fails is logged, not raised over the call's own answer or error:
    the record then stays ``dispatching`` under this process's lease (``stuck`` lists it
    once the lease lapses, and a takeover settles it)."""
    try:
        yield
    except Exception as exc:
        logger.warning(
            "operation %s: the claim of a call never sent could not be given back (%r)",
            release.key.operation_id,
            exc,
        )


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
        approvals: ``"per_call"`` (default): each call needing an approval asks in its
            own interrupt, answered by interrupt id when several are pending.
            ``"batched"``: the approvals of one AIMessage are asked in **one**
            interrupt in the shape of LangChain's ``HumanInTheLoopMiddleware``
            (answered ``{"decisions": [...]}`` in order, no interrupt id needed:
            Agent Chat UI), before any call dispatches. It applies where this node
            gets the state (``tools_condition``); with ``route_tool_calls`` put
            ``approval_node()`` between the model and the router.
        anonymous_answers: accept an approval or review answer that names nobody
            (no ``by`` and no authenticated user on the run: LangGraph Server's
            ``langgraph_auth_user``), recorded as actor ``anonymous``. False
            (default): refused, nothing saved, the interrupt can be answered again.
        trace_metadata: every effect ToolMessage carries
            ``response_metadata["langgraph_effects"]``: its operation id, status and
            how the answer was obtained (``dispatched``, ``replayed``, ``reconciled``,
            ``reviewed``, ``refused``), for traces (LangSmith); the content the model
            reads is unchanged. False: messages exactly as ``ToolNode`` makes them
            (code that compares ToolMessages with ``==``).
        name, tags, handle_tool_errors, messages_key: as for ``ToolNode``; plain tools
            behave exactly as there.
        wrap_tool_call, awrap_tool_call: as for ``ToolNode``; for an effect tool they run
            outside the ledger's decision, so the arguments they pass to ``execute`` are
            what the operation binds to. A call they answer without calling ``execute``
            is not sent: a claim the node's batch took for it is given back (``prepared``).
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
        approvals: ApprovalMode = "per_call",
        anonymous_answers: bool = False,
        trace_metadata: bool = True,
        name: str = "tools",
        tags: list[str] | None = None,
        handle_tool_errors: Any = _TOOLNODE_DEFAULT,
        messages_key: str = "messages",
        wrap_tool_call: ToolCallWrapper | None = None,
        awrap_tool_call: AsyncToolCallWrapper | None = None,
    ) -> None:
        if approvals not in APPROVAL_MODES:
            raise ValueError(f"approvals must be one of {APPROVAL_MODES}, got {approvals!r}")
        self.runner = EffectRunner(
            ledger,
            lease_for=lease_for,
            clock=clock,
            interrupt_on_unknown=interrupt_on_unknown,
            group_commit=True,
            anonymous_answers=anonymous_answers,
        )
        self.approvals = approvals
        self.trace_metadata = trace_metadata
        self.ledger = ledger
        self.tenant_id = tenant_id
        self.lease_for = lease_for
        self.messages_key = messages_key
        # The user's wrappers run outside the decision (as the first middleware of
        # an agent is the outermost): what they pass to ``execute`` is what runs.
        self._user_wrap = wrap_tool_call
        self._user_awrap = awrap_tool_call
        self._effects = any(effect_spec(t) for t in tools)
        extra: dict[str, Any] = {}
        if handle_tool_errors is not _TOOLNODE_DEFAULT:
            extra["handle_tool_errors"] = handle_tool_errors
        if self._effects:
            if wrap_tool_call is not None and awrap_tool_call is None:
                # ToolNode runs a lone sync wrapper on the async path too (sync execute).
                if self.runner.is_async:
                    raise EffectsError(
                        "EffectToolNode: with an async ledger, give awrap_tool_call too "
                        "(wrap_tool_call alone runs the async path synchronously)"
                    )
                wrap_tool_call = self._wrap
            else:
                wrap_tool_call, awrap_tool_call = self._wrap, self._awrap
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

    # -- the task: Runnable's public entry points ----------------------------------

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """``ToolNode.invoke``, with this task's calls known to their hooks (see ``_Task``)."""
        task = self._task_of(input)
        token = _TASK.set(task)
        try:
            with caller_site(config if task is not None else None):
                if task is not None and task.state_input:
                    self._prepare(task, task_id_of(_runtime()), config or {}, input)
                    if self.approvals == "batched":
                        self.runner.ask_approvals(list(task.calls.values()))
                return super().invoke(input, config, **kwargs)
        except _Unhandled as exc:
            error = exc.error
        except GraphBubbleUp:
            raise
        except Exception as exc:
            error = exc
        finally:
            _TASK.reset(token)
        if task is not None:
            for release in task.never_ran():
                with _logged(release):
                    self.runner.perform(release)
        raise error

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """The async twin of ``invoke``."""
        task = self._task_of(input)
        token = _TASK.set(task)
        try:
            if task is not None and task.state_input:
                await self._aprepare(task, task_id_of(_runtime()), config or {}, input)
                if self.approvals == "batched":
                    await self.runner.aask_approvals(list(task.calls.values()))
            return await super().ainvoke(input, config, **kwargs)
        except BaseException as exc:
            if task is not None:
                await task.settle()
                if isinstance(exc, _Unhandled) or (
                    isinstance(exc, Exception) and not isinstance(exc, GraphBubbleUp)
                ):
                    for release in task.never_ran():
                        with _logged(release):
                            await self.runner.aperform(release)
            if not isinstance(exc, _Unhandled):
                raise
            error = exc.error
        finally:
            _TASK.reset(token)
        raise error

    def approval_node(self) -> Runnable[Any, None]:
        """A node asking all approvals of the last AIMessage in one interrupt, for a graph
        that sends one task per call (``route_tool_calls``): put it between the model
        and the router, which then routes from it::

            builder.add_node("approve", tools.approval_node())
            builder.add_edge("agent", "approve")
            builder.add_conditional_edges("approve", route_tool_calls, ["tools", END])

        It writes nothing to the state: the decisions go to the ledger, and each
        call's task finds its record approved, rejected or replaced by an edit.
        """

        def gated(state: Any, thread: Thread, config: RunnableConfig) -> list[EffectCall]:
            task_id = task_id_of(_runtime())
            timeline = timeline_of(config, task_id, state)
            open_calls = unanswered_calls(state, self.messages_key)
            return effect_calls(
                self.tools_by_name,
                open_calls,
                thread=thread,
                # Asked here, answered by the tool node's tasks of the next step.
                timeline=None if timeline is None else timeline.asking(),
                task_id=task_id,
                user=authenticated_user(config),
                # Numbered in the AIMessage as those tasks number them (_faces.twins_in).
                twins=twins_in(config, open_calls, self.messages_key),
            )

        def approve(state: Any, config: RunnableConfig) -> None:
            if unanswered_calls(state, self.messages_key):
                thread = self.runner.tenant_for(config, self.tenant_id)
                self.runner.ask_approvals(gated(state, thread, config))

        async def aapprove(state: Any, config: RunnableConfig) -> None:
            if unanswered_calls(state, self.messages_key):
                thread = await self.runner.atenant_for(config, self.tenant_id)
                await self.runner.aask_approvals(gated(state, thread, config))

        return RunnableLambda(approve, afunc=aapprove, name=f"{self.name}_approvals")

    def _task_of(self, input: Any) -> _Task | None:
        """The task's calls (None when the node has no effect tool)."""
        if not self._effects:
            return None
        tool_calls, state_input = _tool_calls_of(input, self.messages_key)
        if not any(tc["name"] in self.tools_by_name for tc in tool_calls):
            state_input = False  # nothing to prepare: ToolNode answers or refuses as is
        return _Task(self, tool_calls, state_input)

    def _task(self) -> _Task | None:
        task = _TASK.get()
        return task if task is not None and task.node is self else None

    # -- one prepare_many for the parallel effect calls of a task -------------------

    def _task_calls(
        self,
        task: _Task,
        config: RunnableConfig,
        task_id: str | None,
        thread: Thread,
        state: Any,
    ) -> tuple[list[EffectCall], dict[str, OperationDraft]]:
        """The task's effect calls, built in one pass, each knowing the others' drafts
        (returned beside them, by operation id) as its siblings; ``state``: the graph
        state the calls see."""
        tools = self.tools_by_name
        drafts: dict[str, OperationDraft] = {}
        mine = [tc for tc in task.tool_calls if effect_spec(tools.get(tc["name"]))]
        calls = effect_calls(
            tools,
            mine,
            thread=thread,
            timeline=timeline_of(config, task_id, state),
            task_id=task_id,
            user=authenticated_user(config),
            siblings=drafts,
            # Calls sent without their AIMessage (route_tool_calls): numbered in it.
            twins=None if task.state_input else twins_in(config, mine, self.messages_key),
        )
        return calls, drafts

    def _prepare(
        self, task: _Task, task_id: str | None, config: RunnableConfig, state: Any
    ) -> Thread:
        """The task's thread, resolved once; its effect calls, prepared together.

        Done before the fan-out when the node's input is the calls' state (see
        ``invoke``), else by the first effect call to reach the hook. When the
        parallel calls' write-aheads commit together is ``decide.commit``'s
        (``EffectRunner.prepare_siblings``).
        """
        if task.thread is None:
            with task.preparing:
                if task.thread is None:
                    with _before_the_calls():
                        thread = self.runner.tenant_for(config, self.tenant_id)
                    calls, drafts = self._task_calls(task, config, task_id, thread, state)
                    task.ready(thread, calls, drafts, self.runner.prepare_siblings(calls))
        assert task.thread is not None
        return task.thread

    async def _aprepare(
        self, task: _Task, task_id: str | None, config: RunnableConfig, state: Any
    ) -> Thread:
        """The async twin of ``_prepare``."""
        if task.thread is None:
            async with task.apreparing:
                if task.thread is None:
                    with _before_the_calls():
                        thread = await self.runner.atenant_for(config, self.tenant_id)
                    calls, drafts = self._task_calls(task, config, task_id, thread, state)
                    task.ready(thread, calls, drafts, await self.runner.aprepare_siblings(calls))
        assert task.thread is not None
        return task.thread

    # -- the hooks ------------------------------------------------------------------

    def _wrap(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]
    ) -> ToolMessage | Command[Any]:
        task = self._task()
        try:
            if self._user_wrap is None:
                return self._decide(request, execute, carry=True)
            try:
                return self._user_wrap(
                    request, lambda r: self._decide(r, execute, carry=False, task=task)
                )
            finally:
                release = _unsent(task, request)
                if release is not None:
                    with _logged(release):
                        self.runner.perform(release)
        finally:
            if task is not None:
                task.left(request)

    async def _awrap(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]
    ) -> ToolMessage | Command[Any]:
        task = self._task()

        async def inner(r: ToolCallRequest) -> ToolMessage | Command[Any]:
            return await self._adecide(r, execute, carry=False, task=task)

        try:
            if self._user_awrap is None:
                return await self._adecide(request, execute, carry=True)
            try:
                return await self._user_awrap(request, inner)
            finally:
                release = _unsent(task, request)
                if release is not None:
                    with _logged(release):
                        await self.runner.aperform(release)
        finally:
            if task is not None:
                task.left(request)

    @staticmethod
    def _config(request: ToolCallRequest) -> RunnableConfig | None:
        """The run's config, for an effect call (None for a plain tool)."""
        if request.tool is None or effect_spec(request.tool) is None:
            return None
        config = request.runtime.config if request.runtime is not None else None
        warn_durability(config, answers_kept=keeps_answers(request.state))
        return config or {}

    def _call(self, request: ToolCallRequest, thread: Thread, task: _Task | None) -> EffectCall:
        known = None if task is None else task.known(request)
        if known is not None:
            return known
        assert request.tool is not None
        workflow_id, tenant_id = thread
        return build_call(
            request.tool,
            request.tool_call,
            tenant_id=tenant_id,
            workflow_id=workflow_id,
            timeline=timeline_of_request(request),
            task_id=task_id_of(request.runtime),
            single=task is None or task.effect_calls <= 1,
            siblings=None if task is None else task.drafts,
            user=authenticated_user(request.runtime.config if request.runtime else None),
            place=None if task is None else task.place_of(request.tool_call),
        )

    @staticmethod
    def _carry(run: Execution, carry: bool, exc: Exception) -> None:
        """Carry out what ``execute`` raised past ToolNode's wrapper handling (``_Unhandled``);
        called in the decision's ``except`` (a ``try``, not a context manager: no generator
        and no three calls per tool call), which re-raises anything else."""
        if carry and run.raised_here(exc):
            raise _Unhandled(exc) from exc

    def _decide(
        self,
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Any],
        *,
        carry: bool,
        task: _Task | None = None,
    ) -> ToolMessage | Command[Any]:
        run = Execution(request, execute)
        task = task or self._task()
        try:
            config = self._config(request)
            if config is None:
                plain: ToolMessage | Command[Any] = run(request.tool_call["args"])
                return plain
            if task is None:
                thread = self.runner.tenant_for(config, self.tenant_id)
            else:
                thread = self._prepare(task, task_id_of(request.runtime), config, request.state)
            call = self._call(request, thread, task)
            handoff = None if task is None else task.take(call)
            trace = Trace()
            with nullcontext() if task is None else task.turns.mine(call.tool_call_id):
                op = self.runner.run(call, run, handoff=handoff, trace=trace)
        except Exception as exc:
            self._carry(run, carry, exc)
            raise
        answer = effect_result(
            request,
            call,
            op,
            messages_key=self.messages_key,
            produced=run.first_answer(op),
            via=trace.via if self.trace_metadata else None,
            notices=trace.notices,
        )
        trace_decision(request, call, op, trace.via, answer)
        return answer

    async def _adecide(
        self,
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Any],
        *,
        carry: bool,
        task: _Task | None = None,
    ) -> ToolMessage | Command[Any]:
        run = Execution(request, execute)
        task = task or self._task()
        try:
            config = self._config(request)
            if config is None:
                plain: ToolMessage | Command[Any] = await run.acall(request.tool_call["args"])
                return plain
            with nullcontext() if task is None else task.under_way():
                if task is None:
                    thread = await self.runner.atenant_for(config, self.tenant_id)
                else:
                    thread = await self._aprepare(
                        task, task_id_of(request.runtime), config, request.state
                    )
                call = self._call(request, thread, task)
                handoff = None if task is None else task.take(call)
                trace = Trace()
                with task.turns.mine(call.tool_call_id) if task is not None else nullcontext():
                    op = await self.runner.arun(call, run.acall, handoff=handoff, trace=trace)
        except Exception as exc:
            self._carry(run, carry, exc)
            raise
        answer = effect_result(
            request,
            call,
            op,
            messages_key=self.messages_key,
            produced=run.first_answer(op),
            via=trace.via if self.trace_metadata else None,
            notices=trace.notices,
        )
        await atrace_decision(request, call, op, trace.via, answer)
        return answer
