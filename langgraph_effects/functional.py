"""Effects in LangGraph's Functional API: ``run_effect`` inside ``@task`` and ``@entrypoint``.

A ``@task`` that crashes between its side effect and the saved write runs again
on resume, and a timed-out task is retried (``NodeTimeoutError`` is retryable by
default): LangGraph memoises a task's *finished* result, nothing more. Inside a
task (or the entrypoint's body) ``run_effect(tool, args, ledger=...)`` decides
the call through the same decision loop as ``EffectToolNode`` (``decide``):
write-ahead before dispatch, the answer replayed after a crash, an ``unknown``
reconciled or asked about with ``interrupt()``, a deliberate repeat acting.
A retry meets its call still in flight and waits for it; a call that outlasts every
retry is given up (its lease renewed no longer), then taken over by the next run:
``unknown``, never resent, its late answer kept.

The call's identity comes from what LangGraph checkpoints for the task, never
from anything made again on resume: LangGraph's task id (derived from the
task's call position, ``scratchpad.call_counter()``: the same on resume, new on
a replay or a fork) and the call's place among the calls *equal to it* in that
task's execution (``_position``: the first call of this action with these arguments
is 0, an identical second one 1, ...; counted again from 0 when LangGraph runs the
task again, as its ``interrupt()`` ids are). Counted per call, not over all calls:
a task run again after an interrupt or a crash may make its calls in another order
(recipients read from an API, ``asyncio.gather`` over lookups of unequal speed),
and a place counted over all of them would give each call another's place, which
the identity rule reads as a sibling: sent again. That origin is judged by the
identity rule of every face (``decide.identity``, ``docs/identity.md``): the same
task run again meets its operation; a replay or fork from before the answer
replays it; a deliberate repeat (two identical calls, two tasks, a later turn) is a
new operation and acts.

The answer is the record's result (``Operation.result``), so a first run and
every replay return the same value. A rejected operation raises
``EffectRejected``; an outcome not confirmed (``interrupt_on_unknown=False``, or
released after transient failures) raises ``EffectUnconfirmed`` and is never
resent blindly.

Two values are read from LangGraph's private config: the task's reader
(``__pregel_read``, made for each task LangGraph prepares, so once per run of it,
and gone with it) holds the places, weakly; the scratchpad's interrupt counter
(``__pregel_scratchpad``, new for each ``RetryPolicy`` attempt) says when they
count from 0 again.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from langchain_core.tools import BaseTool
from langgraph.config import get_config
from langgraph.runtime import get_runtime

from langgraph_effects._faces import task_id_of
from langgraph_effects.core.digest import canonical_json
from langgraph_effects.core.model import Operation, OperationStatus, utcnow
from langgraph_effects.decide import EffectCall, EffectRunner, authenticated_user, warn_durability
from langgraph_effects.decide.identity import timeline_of
from langgraph_effects.effects import EffectSpec, effect_spec
from langgraph_effects.errors import EffectRejected, EffectsError, EffectUnconfirmed, InvalidInput
from langgraph_effects.ledger.base import DEFAULT_LEASE, AsyncLedger, Ledger

__all__ = ["arun_effect", "run_effect"]

_SCRATCHPAD = "__pregel_scratchpad"
"""Where LangGraph keeps a task's counters in its ``configurable`` (a private key)."""
_TASK_READ = "__pregel_read"
"""The task's own reader in its ``configurable``: one object per task LangGraph prepares."""
_RUNNERS_KEPT = 64
"""Runners kept, one per ledger and options (each caches its thread bindings)."""

_lock = threading.Lock()
_places: weakref.WeakKeyDictionary[Any, tuple[object, Counter[tuple[str, bytes]]]] = (
    weakref.WeakKeyDictionary()
)
_runners: OrderedDict[tuple[int, timedelta, bool, bool, Callable[[], datetime]], EffectRunner] = (
    OrderedDict()
)


def _outside(what: str) -> EffectsError:
    return EffectsError(
        f"run_effect runs inside a LangGraph @task or @entrypoint: {what}. Nothing was sent."
    )


def _position(config: Mapping[str, Any], action: str, canonical: bytes) -> int:
    """The call's place among the calls of ``action`` with these arguments (``canonical``,
    their canonical JSON) in this execution of its task: 0 for the first, 1 for an
    identical second one.

    Held weakly by the task's reader (one per task LangGraph prepares: a resume makes a
    new one, and the places go with it), and counted again from 0 when the scratchpad's
    interrupt counter is a new one (a ``RetryPolicy`` attempt): exactly when the task's
    ``interrupt()`` ids count again. Kept in memory only (the arguments are never
    stored here), and independent of the payload key, so a rotated key keeps each
    call's place.
    """
    conf = config.get("configurable") or {}
    task = conf.get(_TASK_READ)
    attempt = getattr(conf.get(_SCRATCHPAD), "interrupt_counter", None)
    if task is None or attempt is None:
        raise _outside("no LangGraph task is running here")
    with _lock:
        known = _places.get(task)
        if known is None or known[0] is not attempt:
            known = _places[task] = (attempt, Counter())
        seen = known[1]
        place = seen[action, canonical]
        seen[action, canonical] = place + 1
        return place


def _runner(
    ledger: Ledger | AsyncLedger,
    lease_for: timedelta,
    unknown_asks: bool,
    anonymous: bool,
    clock: Callable[[], datetime],
) -> EffectRunner:
    """The runner for this ledger and these options (made once, kept)."""
    key = (id(ledger), lease_for, unknown_asks, anonymous, clock)
    with _lock:
        runner = _runners.get(key)
        if runner is None or runner.ledger is not ledger:
            runner = _runners[key] = EffectRunner(
                ledger,
                lease_for=lease_for,
                clock=clock,
                interrupt_on_unknown=unknown_asks,
                anonymous_answers=anonymous,
            )
            if len(_runners) > _RUNNERS_KEPT:
                _runners.popitem(last=False)
        return runner


def _checked(tool: BaseTool, args: Mapping[str, Any] | None) -> EffectSpec:
    """The effect spec of ``tool``; refuses a plain tool and arguments that are no mapping."""
    spec = effect_spec(tool)
    if spec is None:
        raise InvalidInput(
            f"run_effect: {getattr(tool, 'name', tool)!r} is not an effect (declare it with "
            "@effect or effect(...)); call a plain tool directly"
        )
    if args is not None and not isinstance(args, Mapping):
        raise InvalidInput(f"run_effect: args must be a mapping of the tool's arguments: {args!r}")
    return spec


def _call(
    tool: BaseTool,
    args: Mapping[str, Any] | None,
    config: Mapping[str, Any],
    thread: tuple[str, str],
) -> EffectCall:
    """The ``EffectCall`` of ``tool(args)`` at its place in the running task."""
    spec = _checked(tool, args)
    task_id = task_id_of(get_runtime())
    if not task_id:
        raise _outside("no LangGraph task is running here")
    args = dict(args or {})
    canonical = canonical_json(args)
    place = _position(config, spec.action, canonical)
    workflow_id, tenant_id = thread
    return EffectCall.build(
        spec,
        tool_name=tool.name,
        # The call's origin: its task (LangGraph's id, kept by the checkpoint) and its
        # place among the calls equal to it (call_origin).
        tool_call_id=call_origin(task_id, place),
        args=args,
        canonical=canonical,
        tenant_id=tenant_id,
        workflow_id=workflow_id,
        # Where the task runs: a replay or fork from before the answer meets it (docs/identity.md).
        timeline=timeline_of(config, task_id),
        task_id=task_id,
        user=authenticated_user(config),
    )


def call_origin(task_id: str, place: int) -> str:
    """The tool-call id ``run_effect`` records for the ``place``-th call equal to it
    (same action, same arguments) in the execution of task ``task_id``."""
    return f"{task_id}#{place}"


def _config() -> Any:
    try:
        return get_config()
    except RuntimeError:
        raise _outside("no LangGraph run is active") from None


def _answer(op: Operation) -> Any:
    """The call's value from its record: the same on a first run and on every replay."""
    if op.status is OperationStatus.CONFIRMED:
        return op.result
    if op.status is OperationStatus.REJECTED:
        raise EffectRejected(op.error or f"operation {op.operation_id} was rejected")
    raise EffectUnconfirmed(op.operation_id, status=op.status.value, detail=op.error)


def run_effect(
    tool: BaseTool,
    args: Mapping[str, Any] | None = None,
    /,
    *,
    ledger: Ledger,
    tenant_id: str | None = None,
    lease_for: timedelta = DEFAULT_LEASE,
    interrupt_on_unknown: bool = True,
    anonymous_answers: bool = False,
    clock: Callable[[], datetime] = utcnow,
) -> Any:
    """Run the effect ``tool`` with ``args`` inside a ``@task`` or ``@entrypoint``, once.

    Args:
        tool: an effect (``@effect`` or ``effect(...)``).
        args: its arguments, as the model would give them.
        ledger: a sync ``Ledger`` (an ``AsyncLedger`` needs ``arun_effect``).
        tenant_id: default ``config["configurable"]["tenant_id"]``, else ``"default"``.
        lease_for, interrupt_on_unknown, anonymous_answers, clock: as for ``EffectToolNode``
            (``clock``: the time source, shared with the ledger in tests).

    Returns:
        The recorded result (what the tool returned, as JSON), replayed from the
        ledger when the call was already decided.

    Raises:
        EffectRejected: the operation is rejected (the provider or a person refused).
        EffectUnconfirmed: its outcome is not confirmed and nothing was resent.
        EffectsError: called outside a LangGraph task, or ``tool`` is not an effect.
    """
    _checked(tool, args)
    config = _config()
    warn_durability(config)
    runner = _runner(ledger, lease_for, interrupt_on_unknown, anonymous_answers, clock)
    call = _call(tool, args, config, runner.tenant_for(config, tenant_id))
    return _answer(runner.run(call, lambda a: tool.invoke(a, config)))


async def arun_effect(
    tool: BaseTool,
    args: Mapping[str, Any] | None = None,
    /,
    *,
    ledger: Ledger | AsyncLedger,
    tenant_id: str | None = None,
    lease_for: timedelta = DEFAULT_LEASE,
    interrupt_on_unknown: bool = True,
    anonymous_answers: bool = False,
    clock: Callable[[], datetime] = utcnow,
) -> Any:
    """The async twin of ``run_effect``; the ledger may be sync or async."""
    _checked(tool, args)
    config = _config()
    warn_durability(config)
    runner = _runner(ledger, lease_for, interrupt_on_unknown, anonymous_answers, clock)
    call = _call(tool, args, config, await runner.atenant_for(config, tenant_id))

    async def execute(a: dict[str, Any]) -> Any:
        return await tool.ainvoke(a, config)

    return _answer(await runner.arun(call, execute))
