"""The drivers of the decision loop: ``EffectRunner.run`` (sync) and ``arun`` (async).

Each face (``EffectToolNode``, ``EffectMiddleware``) hands a tool call to
``run`` / ``arun`` with an ``execute`` callable (ToolNode's or the middleware
chain's). The driver steps the loop (``decide.loop``) and does what each
action asks: a ledger call, a hook, the dispatch under a renewed lease, a
sleep, or LangGraph's ``interrupt()`` for a person. The face then builds the
ToolMessage from the record (``decide.messages``), so a first run and every
replay answer identically.

The async driver never blocks the event loop: a sync ledger's calls and sync
hooks run in a worker thread (``asyncio.to_thread``, which carries the
context variables); an async ledger and async hooks are awaited.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import itertools
import re
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from datetime import datetime, timedelta
from operator import methodcaller
from typing import Annotated, Any, TypeVar, cast

from langgraph.config import get_config
from langgraph.errors import GraphBubbleUp, GraphInterrupt, is_invalid_resume
from langgraph.types import Interrupt, _interrupt_id, interrupt
from pydantic import TypeAdapter, ValidationError, ValidatorFunctionWrapHandler, WrapValidator

from langgraph_effects._owners import current_owner
from langgraph_effects.core.model import Operation, OperationKey, Prepared, utcnow
from langgraph_effects.decide.actions import (
    Action,
    Ask,
    BindThread,
    Dispatch,
    Dispatched,
    Hook,
    LedgerAction,
    Renew,
    SetAside,
    Shown,
    Sleep,
    Waiting,
    claims,
)
from langgraph_effects.decide.answers import refused_note
from langgraph_effects.decide.approvals import ask_approvals
from langgraph_effects.decide.call import EffectCall, Execute
from langgraph_effects.decide.commit import Commits, InFlight, finish, together
from langgraph_effects.decide.loop import Decide, Loop
from langgraph_effects.decide.messages import Trace
from langgraph_effects.decide.policy import Policy
from langgraph_effects.decide.renew import renew_until_cancelled, renewer
from langgraph_effects.decide.thread import (
    DEFAULT_TENANT,
    NO_THREAD,
    checked_tenant,
    tenant_request,
)
from langgraph_effects.decide.turns import await_turn, wait_turn
from langgraph_effects.errors import EffectsError
from langgraph_effects.ledger.base import DEFAULT_LEASE, AsyncLedger, Ledger
from langgraph_effects.observe import log_abandoned
from langgraph_effects.review import with_notice
from langgraph_effects.slot import dispatching

__all__ = ["AsyncExecute", "EffectRunner", "aask_upstream", "ask_upstream"]

T = TypeVar("T")

AsyncExecute = Callable[[dict[str, Any]], Awaitable[Any]]
"""Run the tool with these arguments, awaited (the async face's ``execute``)."""

_BINDINGS_CACHED = 10_000  # thread -> tenant bindings kept per runner (they never change)
_ASYNC_LEDGER = (
    "this ledger is async: run the graph with ainvoke/astream, or give EffectToolNode a sync ledger"
)


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
        ask: how a question for a person (``Ask``: an approval or a review
            request, and the schema an answer must pass) is put, returning the
            answer: LangGraph's ``interrupt()`` by default. A face outside a
            graph gives its own (it may raise to stop the call and return later).
        policy: where the loop may hold its caller (``decide.policy``); given,
            it replaces ``interrupt_on_unknown`` (its ``ask_on_unknown``).
        group_commit: coalesce the claimed write-aheads and the receipts of
            concurrent calls (sibling tool calls, sibling tasks) into one
            ``prepare_many`` / ``confirm_many`` each (``decide.commit``, which
            decides when every write of a decision commits). Off: one commit
            per write.
        anonymous_answers: accept an answer that names nobody (no ``by``, no
            authenticated user on the run), recorded as actor ``anonymous``.
            False (default): such an answer is refused (``InvalidAnswer``, nothing
            saved) and the request can be answered again.

    ``run`` / ``arun`` fill a ``Trace`` given to them with how the answer was
    obtained (``decide.messages.Via``), for the ToolMessage's trace metadata.
    """

    def __init__(
        self,
        ledger: Ledger | AsyncLedger,
        *,
        lease_for: timedelta = DEFAULT_LEASE,
        clock: Callable[[], datetime] = utcnow,
        interrupt_on_unknown: bool = True,
        ask: Callable[[dict[str, Any], Any], Any] | None = None,
        policy: Policy | None = None,
        group_commit: bool = False,
        anonymous_answers: bool = False,
    ) -> None:
        self.ledger = ledger
        self.ask = ask if ask is not None else _interrupt
        self._held = ask is None  # LangGraph asks: its held values can be read (``Waiting``)
        self.loop = Loop(
            lease_for=lease_for,
            clock=clock,
            policy=policy or Policy(ask_on_unknown=interrupt_on_unknown),
            anonymous_answers=anonymous_answers,
        )
        self.is_async = inspect.iscoroutinefunction(getattr(ledger, "prepare", None))
        # The two protocols share their method names: whether this ledger's methods
        # are coroutines (checked just above) says which one it is.
        self._sync = None if self.is_async else cast(Ledger, ledger)
        self._async = cast(AsyncLedger, ledger) if self.is_async else None
        self._bound: dict[str, str] = {}
        self.bindings = InFlight()
        """Callers racing to bind one uncached thread make one ``bind_thread``."""
        self.commits = Commits(grouped=group_commit)
        """When each write of a decision commits (``decide.commit``)."""
        self._perform: Callable[[LedgerAction[Any]], Any] = methodcaller("on", ledger)
        """``action.on(ledger)``, the sync driver's ledger call (a sync ledger only: the
        sync entry points refuse an async one first), without a Python frame of its own."""

    @property
    def lease_for(self) -> timedelta:
        return self.loop.lease_for

    @property
    def clock(self) -> Callable[[], datetime]:
        return self.loop.clock

    @property
    def interrupt_on_unknown(self) -> bool:
        return self.loop.interrupt_on_unknown

    # -- one ledger call, outside a decision (a face's batch, the thread binding) --

    def perform(self, action: LedgerAction[T]) -> T:
        """Make one ledger call with the sync ledger.

        Raises:
            EffectsError: the ledger is async.
        """
        if self._sync is None:
            raise EffectsError(_ASYNC_LEDGER)
        return action.on(self._sync)

    async def aperform(self, action: LedgerAction[T]) -> T:
        """Make one ledger call from async code: an async ledger is awaited, a sync
        one runs in a worker thread (never on the event loop).

        A cancellation that arrives while a sync ledger's call runs waits for the
        call to finish (on the loop it could not have been interrupted either),
        then is raised.
        """
        cancelled: list[bool] = []
        result = await self._aledger(action, cancelled)
        if cancelled:
            raise asyncio.CancelledError
        return result

    async def _aledger(self, action: LedgerAction[T], cancelled: list[bool]) -> T:
        if self._async is not None:
            # Shielded: a receipt being written is written, whoever cancels the caller.
            return cast(T, await finish(asyncio.ensure_future(action.on(self._async)), cancelled))
        assert self._sync is not None
        return await _off_loop(action.on, self._sync, cancelled=cancelled)

    # -- the write-aheads of one task's parallel calls (decide.commit.together) ----

    def prepare_siblings(self, calls: Sequence[EffectCall]) -> list[Prepared]:
        """Claim the write-aheads of one task's parallel ``calls`` in one commit before
        the fan-out, where ``decide.commit.together`` batches them; each call's ``run``
        then takes its record (``handoff``). [] when nothing is batched, or the batch
        failed (e.g. ``PayloadMismatch``: each call meets it on its own)."""
        batch = together(calls, lease_for=self.lease_for)
        if batch is None or self._sync is None:
            return []  # an async ledger: ``run`` refuses each call on its own
        try:
            return self.perform(batch)
        except Exception:
            return []

    async def aprepare_siblings(self, calls: Sequence[EffectCall]) -> list[Prepared]:
        """The async twin of ``prepare_siblings``; the ledger may be sync or async."""
        batch = together(calls, lease_for=self.lease_for)
        if batch is None:
            return []
        try:
            return await self.aperform(batch)
        except Exception:
            return []

    # -- the thread's tenant (rules in decide.thread) -----------------------------

    def tenant_for(
        self, config: Mapping[str, Any] | None, explicit: str | None = None
    ) -> tuple[str, str]:
        """The thread's ``(workflow_id, tenant_id)``, binding the thread on first use.

        Bindings never change, so each is read once per process; callers racing to
        bind one thread (the tasks of a superstep) share one ``bind_thread``
        (``decide.commit.InFlight``).

        Raises:
            InvalidInput: the config's ``tenant_id`` is not a non-empty string.
            TenantMismatch: the thread is bound to another tenant.
        """
        workflow, requested = tenant_request(config, explicit)
        bound = self._bound.get(workflow)
        if bound is None and workflow != NO_THREAD:
            bind = BindThread(workflow, requested or DEFAULT_TENANT)
            bound = self.bindings.call(bind, self._bind)
        return workflow, checked_tenant(workflow, bound, requested)

    async def atenant_for(
        self, config: Mapping[str, Any] | None, explicit: str | None = None
    ) -> tuple[str, str]:
        """The async twin of ``tenant_for`` (the ledger may be sync or async)."""
        workflow, requested = tenant_request(config, explicit)
        bound = self._bound.get(workflow)
        if bound is None and workflow != NO_THREAD:
            cancelled: list[bool] = []
            bind = BindThread(workflow, requested or DEFAULT_TENANT)
            bound = await self.bindings.acall(bind, self._abind, cancelled)
            if cancelled:
                raise asyncio.CancelledError
        return workflow, checked_tenant(workflow, bound, requested)

    # A caller that missed the cache shares the bind in flight (``InFlight``), or makes
    # it: unless one that ended since filled the cache (it fills it before waking).

    def _bind(self, bind: BindThread) -> str:
        known = self._bound.get(bind.workflow_id)
        return known if known is not None else self._remember(bind.workflow_id, self.perform(bind))

    async def _abind(self, bind: BindThread, cancelled: list[bool]) -> str:
        known = self._bound.get(bind.workflow_id)
        if known is not None:
            return known
        return self._remember(bind.workflow_id, await self._aledger(bind, cancelled))

    def _remember(self, workflow: str, tenant: str) -> str:
        if len(self._bound) >= _BINDINGS_CACHED:
            self._bound.clear()
        self._bound[workflow] = tenant
        return tenant

    # -- the approvals of one AIMessage, in one interrupt (decide.approvals) -------

    def ask_approvals(self, calls: Sequence[EffectCall]) -> None:
        """Ask the approvals due among ``calls`` in one interrupt and record the decisions.

        Each call's own ``run`` then finds its record decided and asks nothing.
        """
        if self._sync is None:
            raise EffectsError(_ASYNC_LEDGER)
        self._drive(ask_approvals(self.loop, calls), _no_dispatch)

    async def aask_approvals(self, calls: Sequence[EffectCall]) -> None:
        """The async twin of ``ask_approvals``; the ledger may be sync or async."""
        await self._adrive(ask_approvals(self.loop, calls), _ano_dispatch, [])

    # -- the sync driver ----------------------------------------------------------

    def run(
        self,
        call: EffectCall,
        execute: Execute,
        *,
        handoff: Prepared | None = None,
        trace: Trace | None = None,
    ) -> Operation:
        """Decide and record ``call`` synchronously; return the final record.

        ``execute(args)`` runs the tool (it may raise). ``handoff`` is a record
        this node already prepared for the call (batched ``prepare_many``).
        ``trace`` is filled with how the answer was obtained.
        """
        return self._drive(self._start(call, handoff, trace), execute)

    def drive(self, steps: Generator[Action, Any, T], execute: Execute) -> T:
        """Drive a face's own generator of actions synchronously; return its result.

        For a face whose work spans more than one call (the outbox relay's pass:
        its table work as ``Hook`` actions, each delivery ``yield from
        runner.loop.decide(...)``). ``execute`` answers every ``Dispatch``.
        """
        if self._sync is None:
            raise EffectsError(_ASYNC_LEDGER)
        return self._drive(steps, execute)

    async def adrive(self, steps: Generator[Action, Any, T], execute: AsyncExecute) -> T:
        """The async twin of ``drive``; the ledger may be sync or async."""
        return await self._adrive(steps, execute, [])

    def _start(self, call: EffectCall, handoff: Prepared | None, trace: Trace | None) -> Decide:
        if self._sync is None:
            raise EffectsError(_ASYNC_LEDGER)
        return self.loop.decide(call, handoff, current_owner(), trace)

    def _drive(self, gen: Generator[Action, Any, T], execute: Execute) -> T:
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                action = gen.throw(error) if error is not None else gen.send(value)
            except StopIteration as stop:
                result: T = stop.value
                return result
            value, error = None, None
            if isinstance(action, Ask):
                wait_turn()  # the calls of one task ask in their order (decide.turns)
                if not action.held or _claim_held():
                    value = self.ask(action.request, action.schema)
                continue
            if isinstance(action, Waiting):
                if self._held and _holds_values():
                    wait_turn()  # read at this call's place among the task's questions
                    value = _next_value()
                continue
            if isinstance(action, SetAside):
                value = _set_aside() if self._held else None
                continue
            if isinstance(action, Shown):
                place = _shown_place() if self._held else None
                value = None if place is None else _read_shown(place)
                continue
            try:
                if isinstance(action, LedgerAction):
                    # Committed as decide.commit says (alone, or in its group).
                    value = self.commits.write(action, self._perform)
                else:
                    value = self._act(action, execute)
            except GraphBubbleUp:
                raise
            except Exception as exc:
                error = exc

    def _hold_lease(self, key: OperationKey, token: int) -> Callable[[], None]:
        """Renew ``key``'s lease every third of it (``decide.renew``) until the returned
        stop is called (while a dispatch runs)."""
        sync = self._sync
        assert sync is not None
        renew = Renew(key, token=token, lease_for=self.lease_for)
        job = renewer.hold(lambda: renew.on(sync), self.lease_for.total_seconds() / 3)
        return lambda: renewer.drop(job)

    def _act(self, action: Action, execute: Execute) -> Any:
        """Do one action other than a ledger call or a question, synchronously."""
        match action:
            case Hook(fn, arg):
                result = fn(arg)
                return _run_coroutine_sync(result) if inspect.isawaitable(result) else result
            case Sleep(seconds, _):
                time.sleep(seconds)
                return None
            case Dispatch(op, context, args):
                stop_renewing = self._hold_lease(op.key, op.fencing_token)
                with dispatching(context) as slot:
                    out = Dispatched(call=slot)
                    try:
                        out.message = execute(args)
                    except GraphBubbleUp as exc:
                        out.bubble = exc
                    except Exception as exc:
                        out.error = exc
                    finally:
                        stop_renewing()
                return out
        raise AssertionError(f"unknown action {action!r}")  # pragma: no cover

    # -- the async driver ---------------------------------------------------------

    async def arun(
        self,
        call: EffectCall,
        execute: AsyncExecute,
        *,
        handoff: Prepared | None = None,
        trace: Trace | None = None,
    ) -> Operation:
        """The async twin of ``run``; the ledger may be sync or async.

        If the task is cancelled mid-dispatch (or while its receipt is being
        recorded), the dispatch is finished and recorded, then ``CancelledError``
        is raised. From the cancellation on, nobody waits for the call: its lease
        is renewed no longer (``observe.log_abandoned``), so a call that outlasts
        it is taken over by the next run (unknown, then reconciled or reviewed),
        and its receipt, if it comes, is kept as a late receipt.

        A cancellation noted while a ledger write or a sync hook ran (each is finished,
        its outcome recorded) is raised before the next claim: a cancelled task takes no
        lease to send again, not even a retry under the call's key after an inconclusive
        reconcile. A claim that committed while the cancellation came is dispatched and
        its receipt recorded, as a dispatch in flight is. An async hook (a reconciler) is
        awaited in the task and cut short by a cancellation: what it would have recorded
        is not written, the record stays as it was, and the next run reconciles it again
        (``_aact``).
        """
        gen = self.loop.decide(call, handoff, current_owner(), trace)
        return await self._adrive(gen, execute, [])

    async def _adrive(
        self,
        gen: Generator[Action, Any, T],
        execute: AsyncExecute,
        cancelled: list[bool],
    ) -> T:
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                action = gen.throw(error) if error is not None else gen.send(value)
            except StopIteration as stop:
                result: T = stop.value
                if cancelled:
                    raise asyncio.CancelledError from None
                return result
            value, error = None, None
            if isinstance(action, Ask):
                await await_turn()
                if cancelled:
                    raise asyncio.CancelledError
                if not action.held or _claim_held():
                    value = self.ask(action.request, action.schema)
                continue
            if isinstance(action, Waiting):
                if self._held and _holds_values():
                    await await_turn()
                    if cancelled:
                        raise asyncio.CancelledError
                    value = _next_value()
                continue
            if isinstance(action, SetAside):
                value = _set_aside() if self._held else None
                continue
            if isinstance(action, Shown):
                place = _shown_place() if self._held else None
                if place is not None:
                    value = await _off_loop(_read_shown, place, cancelled=cancelled)
                continue
            try:
                if isinstance(action, LedgerAction):
                    if cancelled and claims(action):
                        # Noted while a write or a hook ran: take no lease to send anything
                        # now. Nothing changes: the record is left as it is, for the next run.
                        raise asyncio.CancelledError
                    value = await self.commits.awrite(action, self._aledger, cancelled)
                else:
                    value = await self._aact(action, execute, cancelled)
            except GraphBubbleUp:
                raise
            except Exception as exc:
                error = exc

    def _arenewing(self, key: OperationKey, token: int) -> asyncio.Task[None]:
        """The async twin of ``_hold_lease``: a task renewing ``key``'s lease until cancelled."""
        renew = Renew(key, token=token, lease_for=self.lease_for)
        return asyncio.create_task(
            renew_until_cancelled(lambda: self.aperform(renew), self.lease_for.total_seconds() / 3)
        )

    async def _aact(self, action: Action, execute: AsyncExecute, cancelled: list[bool]) -> Any:
        """Do one action other than a ledger call or a question, without blocking the loop."""
        match action:
            case Hook(fn, arg):
                if inspect.iscoroutinefunction(fn):
                    # Awaited in the task, not shielded: a cancellation cuts it short (a
                    # reconciler's lookup need not outlive a failed superstep). Its outcome
                    # is recorded only once it returned, by the shielded write that follows
                    # (``_aledger``): a reconcile cut short writes nothing, so the record
                    # stays as it was (``unknown``), to be reconciled again, never resent.
                    return await fn(arg)
                # A sync hook may do I/O (a provider lookup): a worker thread, as LangGraph
                # runs a sync tool. One that returns an awaitable is awaited here.
                result = await _off_loop(fn, arg, cancelled=cancelled)
                return await result if inspect.isawaitable(result) else result
            case Sleep(seconds, outlast):
                if cancelled and not outlast:
                    # Cancelled during the ledger call before it (noted, not obeyed there):
                    # a wait the task no longer needs, say for another attempt's lease,
                    # ends here, as it would had the cancellation come while it slept.
                    raise asyncio.CancelledError
                nap = asyncio.ensure_future(asyncio.sleep(seconds))
                await (finish(nap, cancelled) if outlast else nap)
                return None
            case Dispatch(op, context, args):
                renewing = self._arenewing(op.key, op.fencing_token)
                with dispatching(context) as slot:
                    out = Dispatched(call=slot)
                    # A task of its own, shielded (``finish``): when a sibling's interrupt
                    # or failure cancels this one (asyncio.gather; LangGraph cancels a
                    # failed superstep's tasks, then again on its way out), the provider
                    # call already in flight (perhaps in a worker thread) finishes and its
                    # receipt is recorded (``_aledger`` shields that write too) first.
                    flight = asyncio.ensure_future(execute(args))

                    def abandoned() -> None:
                        # The task gave up on the call (a timeout, or the run is ending):
                        # nobody waits for it, so its lease is renewed no longer. The call
                        # may still answer (its receipt is recorded, fenced if another run
                        # took over meanwhile); once the lease ends, the next run takes the
                        # operation over: unknown, reconciled or reviewed, never resent.
                        if not renewing.done():
                            renewing.cancel()
                            log_abandoned(op, self.clock() + self.lease_for)

                    try:
                        out.message = await finish(flight, cancelled, abandoned)
                    except GraphBubbleUp as exc:
                        out.bubble = exc
                    except Exception as exc:
                        out.error = exc
                    finally:
                        renewing.cancel()
                        await finish(asyncio.ensure_future(asyncio.wait([renewing])), cancelled)
                return out
        raise AssertionError(f"unknown action {action!r}")  # pragma: no cover


async def _off_loop(fn: Callable[..., T], *args: Any, cancelled: list[bool]) -> T:
    """Run a blocking call in a worker thread (``asyncio.to_thread``: it carries the
    context variables), so the event loop never blocks on it.

    The call is not interrupted by a cancellation of the task: it finishes and its
    result counts, and the cancellation is noted in ``cancelled`` for the driver to
    raise once the decision is recorded, as for a dispatch in flight.
    """
    return cast(T, await finish(asyncio.ensure_future(asyncio.to_thread(fn, *args)), cancelled))


def _no_dispatch(args: dict[str, Any]) -> Any:
    raise AssertionError("asking approvals dispatches nothing")  # pragma: no cover


async def _ano_dispatch(args: dict[str, Any]) -> Any:
    raise AssertionError("asking approvals dispatches nothing")  # pragma: no cover


_SCRATCHPAD = "__pregel_scratchpad"
"""Where LangGraph keeps a task's resume values in its ``configurable`` (a private key)."""
_CHECKPOINT_NS = "checkpoint_ns"
"""The task's namespace in its ``configurable``, which its interrupt ids hash."""
_RESUME_MAP = "__pregel_resume_map"
"""Where LangGraph keeps a ``Command(resume={interrupt_id: value})``'s map in the run's
``configurable`` (a private key)."""


def _interrupt(request: dict[str, Any], schema: Any) -> Any:
    """Ask through LangGraph: it checks the answer with ``schema`` before saving it.

    An answer the schema refuses is not saved, and the same request is asked again
    at once with why (``answers.refused_note``), as an interrupt: a ``GraphBubbleUp``,
    which a wrapper retrying the tool's exceptions (``ToolRetryMiddleware`` listed
    before ``EffectMiddleware``) lets through, and which every UI shows. LangGraph
    keeps a refused answer given by interrupt id among the task's values; it is
    dropped first, so the request asked again has the id LangGraph answers next
    (the one the person answered)::

        answer {id0: bad} ─▶ refused ─▶ asked again under id0, with a notice ─▶ {id0: good}
    """
    refused: list[Any] = []

    def keep(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValueError:
            refused.append(value)
            raise

    checked = Annotated[schema, WrapValidator(keep)]
    pad = _scratchpad()
    _FRESH.set(None)
    place = before = None
    if pad is not None:
        _given_by_position(pad)  # an earlier run's, in a run resumed by id: dropped
        resume = getattr(pad, "resume", None)
        place = _interrupts_reached(pad)
        before = len(resume) if isinstance(resume, list) else None
    try:
        value = interrupt(request, response_schema=checked)
        if place is not None and before is not None:
            _FRESH.set(_given_now(pad, place, before))
        return value
    except ValidationError as exc:
        if not is_invalid_resume(exc) or not refused:
            raise
        answered = _forget(refused[-1])
        if answered is None:
            raise
        # Raised as interrupt() raises a new question, without calling it again: a second
        # call would take a value meant for a sibling call of the task (given by position).
        conf = get_config()["configurable"]
        raise GraphInterrupt(
            (
                Interrupt(
                    value=with_notice(request, refused_note(exc)),
                    id=_interrupt_id(conf[_CHECKPOINT_NS], answered),
                    response_schema=TypeAdapter(checked).json_schema(),
                ),
            )
        ) from None


Misfit = Callable[[Any, Any], "str | None"]
"""What keeps an answer (first) from answering a request (second), or None."""
_REFUSALS = 4  # values one run may refuse (a kept one, one by id, one by position, ...)
_SEND = "__pregel_send"
"""Where a task's ``configurable`` keeps its write channel (a private key)."""
_RESUME = "__resume__"
"""The channel of a task's resume values (LangGraph's ``RESUME``)."""


def ask_upstream(ask: Callable[[], T], misfit: Misfit) -> T:
    """Run ``ask``, code that asks in its own ``interrupt()`` and then reads the answer
    (``HumanInTheLoopMiddleware.after_model``), so that an answer it fails on is refused,
    never kept.

    LangGraph saves the value ``interrupt()`` returned among the task's values before the
    code reads it: an answer the code raises on is handed to it again on every later run,
    ahead of any new answer, and the thread is wedged (HITL: "Number of human decisions
    (2) does not match number of hanging tool calls (3)", on every answer after). Here it
    is dropped, the question asked again at once (its interrupt id unchanged) with why
    (``misfit``'s words, else the error's), and the next answer applies::

        {resume: 2 decisions} ─▶ HITL raises ─▶ dropped; asked again, told why
          ─▶ {resume: 3 decisions} ─▶ applied
    """
    refusals = _Refusals(misfit)
    while True:
        try:
            return ask()
        except Exception as exc:
            if not refusals.failed(exc):
                raise


async def aask_upstream(ask: Callable[[], Awaitable[T]], misfit: Misfit) -> T:
    """The async twin of ``ask_upstream``."""
    refusals = _Refusals(misfit)
    while True:
        try:
            return await ask()
        except Exception as exc:
            if not refusals.failed(exc):
                raise


class _Refusals:
    """The answers one run of an upstream asker refused (``ask_upstream``)."""

    __slots__ = ("misfit", "pad", "refused")

    def __init__(self, misfit: Misfit) -> None:
        self.misfit = misfit
        self.pad = _scratchpad()
        self.refused: list[tuple[Any, Exception]] = []
        if self.pad is not None:
            _given_by_position(self.pad)  # an earlier run's, in a run resumed by id: dropped

    def failed(self, exc: Exception) -> bool:
        """True: the answer ``exc`` was raised on is dropped, ask again. False: raise
        ``exc``. Raises the question asked again, with why, once one was refused."""
        if isinstance(exc, GraphInterrupt) and self.refused and exc.args and exc.args[0]:
            value, error = self.refused[-1]  # the newest: a kept value is handed out first
            why = self.misfit(value, exc.args[0][0].value) or str(error)
            raise GraphInterrupt(
                tuple(
                    Interrupt(
                        value=with_notice(i.value, refused_note(why))
                        if isinstance(i.value, Mapping)
                        else i.value,
                        id=i.id,
                        response_schema=i.response_schema,
                    )
                    for i in exc.args[0]
                )
            ) from None
        if isinstance(exc, GraphBubbleUp) or len(self.refused) >= _REFUSALS:
            return False
        taken = self._drop_last()
        if taken is None:
            return False
        self.refused.append((taken[0], exc))
        return True

    def _drop_last(self) -> tuple[Any] | None:
        """The value the asker's last ``interrupt()`` returned, dropped from the task's
        values (and from what LangGraph saves of them), the asker's interrupt counter
        started again; None: the asker raised before an answer reached it."""
        pad = self.pad
        resume = getattr(pad, "resume", None)
        if not isinstance(resume, list) or not resume:
            return None
        counter = getattr(pad, "interrupt_counter", None)
        if _interrupts_reached(pad) != len(resume) or not hasattr(counter, "_counter"):
            return None
        value = resume.pop()
        # What the task saves of its values: without it (a value kept from an earlier run
        # was sent as a copy; a later write of the channel replaces an earlier one).
        get_config()["configurable"][_SEND]([(_RESUME, list(resume))])
        counter._counter = None  # type: ignore[union-attr]  # asked again from the first
        return (value,)


_CHECKPOINTER = "__pregel_checkpointer"
"""The saver in a task's ``configurable`` (a private key, read by ``decide.identity`` too)."""
_TASK_ID = "__pregel_task_id"
"""The task's id in its ``configurable`` (a private key)."""
_INTERRUPT = "__interrupt__"
"""The channel of a task's pending interrupt among a checkpoint's writes (``INTERRUPT``)."""


_FRESH: contextvars.ContextVar[tuple[Any, int, tuple[str, ...] | None] | None] = (
    contextvars.ContextVar("langgraph_effects_fresh", default=None)
)
"""The value ``_interrupt`` returned last, when the person gave it in this run: the task's
scratchpad, its place, and the id of the interrupt it was given to (None: given by
position, to whichever the task shows)."""


def _given_now(pad: Any, place: int, before: int) -> tuple[Any, int, tuple[str, ...] | None] | None:
    """Whether the value ``interrupt()`` returned at ``place`` (the task held ``before``
    values) was given in this run, and to which interrupt: by position (it took the value
    waiting for the first place without one), or by id (LangGraph put it after the saved
    ones, under this place's id, or the first place's, which it also accepts). None: a
    value saved by an earlier run, handed back."""
    if place == before:
        return pad, place, None
    if place != before - 1:
        return None
    try:
        conf = get_config()["configurable"]
    except RuntimeError:  # not inside a runnable
        return None
    given, ns = conf.get(_RESUME_MAP), conf.get(_CHECKPOINT_NS)
    if not isinstance(given, Mapping) or not isinstance(ns, str):
        return None
    for at in (place, 0):
        if (shown := _interrupt_id(ns, at)) in given:
            return pad, place, (shown,)
    return None


def _shown_place() -> tuple[Any, dict[str, Any], str, tuple[str, ...] | None] | None:
    """Where the request LangGraph showed for the value ``interrupt()`` just returned is
    saved, when the person gave that value in this run (``_FRESH``): the saver, the config
    of the task's step checkpoint, the task, and the interrupt's id (None: whichever the
    task shows). None: a value handed back, not in a task, or no saver."""
    fresh = _FRESH.get()
    pad = _scratchpad()
    if fresh is None or pad is None or fresh[0] is not pad:
        return None
    if _interrupts_reached(pad) != fresh[1] + 1:
        return None  # another interrupt() since
    conf = get_config()["configurable"]
    saver, task, steps = conf.get(_CHECKPOINTER), conf.get(_TASK_ID), conf.get("checkpoint_map")
    if not saver or not isinstance(task, str) or not isinstance(steps, Mapping) or not steps:
        return None
    ns, checkpoint_id = list(steps.items())[-1]  # the task's own step, its parent's last
    step = {"thread_id": conf.get("thread_id"), "checkpoint_ns": ns}
    step["checkpoint_id"] = checkpoint_id
    return saver, {"configurable": step}, task, fresh[2]


def _read_shown(place: tuple[Any, dict[str, Any], str, tuple[str, ...] | None]) -> Any:
    """The request of the task's interrupt that its step checkpoint holds as pending (the
    one LangGraph showed the person), with the id at ``place``; None: none saved.
    Blocking (a worker thread under the async driver, as ``decide.identity`` reads the
    lineage)."""
    saver, config, task, ids = place
    got = saver.get_tuple(config)
    for writer, channel, value in getattr(got, "pending_writes", None) or ():
        if writer != task or channel != _INTERRUPT:
            continue
        for pending in value if isinstance(value, (list, tuple)) else (value,):
            if ids is None or getattr(pending, "id", None) in ids:
                return getattr(pending, "value", None)
    return None


def _scratchpad() -> Any:
    """The task's scratchpad (LangGraph's, private), or None outside a task."""
    try:
        return get_config()["configurable"].get(_SCRATCHPAD)
    except RuntimeError:  # not inside a runnable
        return None


def _holds_values() -> bool:
    """The task holds resume values, or a value given by position waits: read at once,
    before any turn is waited for (a first run holds none)."""
    pad = _scratchpad()
    resume = getattr(pad, "resume", None)
    if not isinstance(resume, list):
        return False
    return bool(resume) or _given_by_position(pad) is not None


def _given_by_position(pad: Any) -> Any:
    """The value given by position (``Command(resume=value)``) waiting for the task's
    next ``interrupt()`` that finds no value of its own; None: none.

    In a run resumed by interrupt id, none: LangGraph keeps a value given by position
    among the checkpoint's pending writes after a task took it (and after the schema
    refused it), until a later value given by position replaces it; a run resumed by id
    writes none, and LangGraph would hand the old one to the next ``interrupt()`` that
    finds no value of its own. It answered a question asked before the person answered
    by id (a bad answer refused, then a valid one by id: the question asked next was
    refused with the bad one's reason; campaign seeds 1605, 1606, 1619, 1990, 6960). It
    is dropped, so ``interrupt()`` does not take it either::

        {resume: bad} ─▶ refused ─▶ {id0: retry} ─▶ applied, asked again ─▶ (bad: dropped)
    """
    given = pad.get_null_resume(False)
    if given is None:
        return None
    try:
        by_id = bool(get_config()["configurable"].get(_RESUME_MAP))
    except RuntimeError:  # not inside a runnable
        by_id = False
    if by_id:
        pad.get_null_resume(True)  # taken from the pending writes: interrupt() finds none
        return None
    return given


def _set_aside() -> Any:
    """The value given by position that this run, resumed by interrupt id, sets aside
    (``_given_by_position`` drops it; LangGraph still shows it); None: none. A value the
    task holds among its own (taken by one of its questions before) is not set aside."""
    pad = _scratchpad()
    if pad is None or not get_config()["configurable"].get(_RESUME_MAP):
        return None
    given = pad.get_null_resume(False)
    resume = getattr(pad, "resume", None)
    if given is None or not isinstance(resume, list) or any(v == given for v in resume):
        return None
    return given


_COUNT = re.compile(r"count\((\d+)\)")


def _interrupts_reached(pad: Any) -> int | None:
    """How many ``interrupt()`` calls this run of the task made so far: LangGraph's
    interrupt counter (a ``LazyAtomicCounter`` over ``itertools.count``, private), read
    without moving it; None: not the counter we know (the value is then not read)."""
    counter = getattr(pad.interrupt_counter, "_counter", ())
    if counter is None:
        return 0  # not started: no interrupt() yet
    owner = getattr(counter, "__self__", None)
    if not isinstance(owner, itertools.count):
        return None
    found = _COUNT.fullmatch(repr(owner))
    return int(found[1]) if found is not None else None


def _next_value() -> Any:
    """The value LangGraph would hand the task's next ``interrupt()``, not taken: the
    k-th resume value (k = the interrupts reached), else a value given by position
    (``Command(resume=value)``) when it would take that place; None: nothing.

    Read where a call asks nothing more in this run (``Waiting``): the value a person
    gave to its question from an earlier run would otherwise never be read."""
    pad = _scratchpad()
    resume = getattr(pad, "resume", None)
    if not isinstance(resume, list):
        return None
    reached = _interrupts_reached(pad)
    if reached is None:
        return None
    if reached < len(resume):
        return resume[reached]
    if reached > len(resume):
        return None
    given = _given_by_position(pad)
    # Once taken, LangGraph still shows it here: taken by this task, it is in ``resume``.
    return None if any(v is given for v in resume) else given


def _claim_held() -> bool:
    """Make sure the value ``_next_value`` found is the task's next ``interrupt()``'s:
    a value given by position is taken from LangGraph's pending writes and put where
    ``interrupt()`` itself puts it (``resume``); False: it is gone (another task took
    it), and nothing is asked."""
    pad = _scratchpad()
    resume = getattr(pad, "resume", None)
    reached = None if not isinstance(resume, list) else _interrupts_reached(pad)
    if reached is None or reached > len(resume):  # type: ignore[arg-type]
        return False
    assert isinstance(resume, list)
    if reached < len(resume):
        return True
    if _given_by_position(pad) is None:
        return False
    given = pad.get_null_resume(True)
    if given is None:
        return False
    resume.append(given)
    return True


def _forget(value: Any) -> int | None:
    """Drop a refused answer LangGraph holds among the task's values; how many values
    the task holds then (the place the request asked again fills), or None: it was saved
    before (a value in the middle), so it cannot be answered again."""
    resume = getattr(get_config()["configurable"].get(_SCRATCHPAD), "resume", None)
    if not isinstance(resume, list):
        return None
    if resume and resume[-1] is value:
        resume.pop()  # given by interrupt id: it would take this request's place
    elif any(v is value for v in resume):
        return None
    return len(resume)  # given by position: consumed, never kept


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
