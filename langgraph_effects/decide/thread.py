"""The thread a call runs in: its tenant, and whether its tool-call ids are durable.

A thread belongs to the tenant of its first effect. A run that names no
tenant (a time-travel config from get_state_history carries none) uses the
bound one; a run under another tenant is refused before anything is
prepared. ``EffectRunner.tenant_for`` reads and caches the binding; the rules
are here.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from types import FrameType
from typing import Any

from langgraph.pregel import Pregel

from langgraph_effects.errors import InvalidInput, TenantMismatch

__all__ = [
    "DEFAULT_TENANT",
    "NO_THREAD",
    "OPERATIONS_KEY",
    "DurabilityWarning",
    "caller_site",
    "checked_tenant",
    "durability_chosen",
    "flush",
    "tenant_request",
    "warn_durability",
]

DEFAULT_TENANT = "default"
"""The tenant of a thread that never named one."""
NO_THREAD = "no-thread"
"""The workflow id of a run without a checkpointer (no thread, so no thread binding)."""
OPERATIONS_KEY = "effect_operations"
"""The state key (a reducer channel) listing the operation ids a thread owns."""


class DurabilityWarning(UserWarning):
    """A graph runs effects with ``durability`` other than ``"sync"``."""


_durability_warned = False
_durability_deliberate: ContextVar[bool] = ContextVar("lge_durability_deliberate", default=False)


@contextlib.contextmanager
def durability_chosen() -> Iterator[None]:
    """Graphs run inside the block use a durability other than ``"sync"`` on purpose
    (``testing.run_scenario`` draws it): they warn nothing, and the one warning a
    process gets is kept for the user's own graphs. A context variable, so it holds
    in the threads and tasks LangGraph runs the block's nodes in."""
    token = _durability_deliberate.set(True)
    try:
        yield
    finally:
        _durability_deliberate.reset(token)


_INTERNAL = frozenset(
    {"langgraph_effects", "langgraph", "langchain", "langchain_core", "langsmith", "pydantic"}
    | {"concurrent", "threading", "asyncio", "contextvars", "contextlib", "functools"}
)
"""Top-level packages whose frames sit between the user's ``invoke`` and the warning."""
_LOOPS = frozenset({Pregel.stream.__code__, Pregel.astream.__code__})
"""Where a graph's loop runs (``invoke`` and ``ainvoke`` run it there): the thread, or the
asyncio task, whose stack holds one of them is the one that ran the graph."""


def _package(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", "")).split(".")[0]


Site = tuple[str, int, dict[str, Any]]
"""A line of the user's code: its file, its line number, its module's globals."""

_site: ContextVar[Site | None] = ContextVar("lge_user_site", default=None)
"""The user's line that ran the graph, taken on the thread that ran it (``caller_site``)."""
_pending: str | None = None
"""The warning's message, kept until a thread that ran the graph emits it (``flush``)."""
_pending_lock = threading.Lock()


def _user_site(frame: FrameType | None) -> Site | None:
    """The user's line that ran the graph or called this package, when this thread's
    stack from ``frame`` outward has it: the first frame outside this package, LangGraph,
    LangChain and the machinery between them, if the frames inside it run a graph's loop
    (``_LOOPS``: the caller of ``invoke``, of ``stream``, or of ``run_until_complete`` on
    ``ainvoke``) or it called this package (``run_effect`` in a task). None in LangGraph's
    worker threads and node tasks: there it is a thread's or an event loop's starter.

    Only this thread's own stack is walked, never another thread's: on CPython 3.11
    reading ``f_back`` of a frame that its thread pops meanwhile crashes the process
    (seen in CI when this walked ``sys._current_frames()``)."""
    loop = False
    inner = ""
    while frame is not None and (package := _package(frame)) in _INTERNAL:
        loop = loop or frame.f_code in _LOOPS
        inner, frame = package, frame.f_back
    if frame is None or not (loop or inner == "langgraph_effects"):
        return None
    return frame.f_code.co_filename, frame.f_lineno, frame.f_globals


def _would_warn(config: Mapping[str, Any] | None) -> str | None:
    """The durability ``warn_durability`` warns of for a run of ``config`` (None: it warns
    of nothing, or has warned already)."""
    if _durability_warned or config is None or _durability_deliberate.get():
        return None
    # LangGraph leaves the key out when ``durability`` is not passed, and then
    # runs with its default, "async" (so does LangGraph Server).
    conf = config.get("configurable", {})
    mode = conf.get("__pregel_durability") or "async"
    if mode == "sync" or conf.get("__pregel_checkpointer") is None:
        return None  # saved before the tools run, or nothing saved (NoCheckpointerWarning)
    return str(mode)


@contextlib.contextmanager
def caller_site(config: Mapping[str, Any] | None) -> Iterator[None]:
    """Run by a face where it first sees a run, before ToolNode hands the run's calls to
    its worker threads: the user's line is taken here, on this thread, into a context
    variable they inherit (ToolNode's executor copies the context). Only a sync node can
    find it (LangGraph runs a step's only task on the caller's thread, but every async
    node in a task of its own). Nothing is walked once the process has warned, or when
    the run would not warn."""
    if _site.get() is not None or _would_warn(config) is None:
        yield
        return
    token = _site.set(_user_site(sys._getframe(1)))
    try:
        yield
    finally:
        _site.reset(token)


def warn_durability(config: Mapping[str, Any] | None, *, answers_kept: bool = False) -> None:
    """Warn once per process when the graph's durability lets tool-call ids change.

    ``answers_kept``: the calls' state lists the operations answered in it
    (``effect_operations``), which every checkpoint saves, ``"exit"``'s too. Under
    ``"exit"`` without it, a later request for the same call cannot be told from a
    re-proposal of the earlier one, and the warning says so.

    The warning names the user's line that ran the graph: the one a face took on the
    thread that ran it (``caller_site``), else the one on this thread's stack. In a
    thread or a task of LangGraph's that has neither (a step of several tasks: the
    calls ``route_tool_calls`` or ``create_agent`` send; every async node), the
    message is kept and emitted by the next thread that finds the user's line on its
    own stack (``flush``): LangGraph applies a step's writes to the state, and so
    calls the ``effect_operations`` reducer, on the thread that runs the graph (at the
    end of this step; of a later one when this step's call interrupts).
    """
    global _durability_warned, _pending
    mode = _would_warn(config)
    if mode is None:
        return
    _durability_warned = True
    message = (
        f"langgraph-effects: this graph runs with durability={mode!r}. A crash before the "
        "AIMessage is checkpointed makes the model propose the call again: the same call "
        "(same tool, same arguments) maps to the same operation, but a call re-proposed "
        "with other arguments is a new one. Use durability='sync', or give effects an "
        "intent_key, which maps every re-proposal to the same operation."
    )
    # A nested graph (a sub-agent, a worker fed the latest request) starts from a state of
    # its own each parent turn: its channel holds none of the parent's earlier answers.
    # There the record's run places the answer (decide.identity._runs, read from
    # LangGraph's loop); only where that loop cannot be read is a repeat lost.
    nested = len((config or {}).get("configurable", {}).get("checkpoint_map") or {}) > 1
    if mode == "exit" and (not answers_kept or nested) and not _runs_readable(config):
        message += (
            " Under durability='exit' this graph's state does not list the answered "
            "operations (no effect_operations channel: add EffectState to the state; "
            "run_effect has none; a sub-agent's state starts afresh each turn), 'exit' "
            "saves none of the steps that delivered an answer, and this LangGraph's loop "
            "does not say which run a step was of: a later request for the "
            "same call on this thread (a deliberate repeat) is answered from the earlier "
            "record and does not act again (docs/identity.md). Add EffectState, give such "
            "effects an intent_key per request, or use durability='sync'."
        )
    user = _site.get() or _user_site(sys._getframe(1))
    if user is not None:
        _warn_at(user, message)
    elif answers_kept:
        _pending = message  # the effect_operations reducer flushes it on the graph's thread
    else:
        # No effect_operations channel, so no reducer of ours runs on the graph's thread
        # to flush a kept message: said now, at this line, rather than never.
        warnings.warn(message, DurabilityWarning, stacklevel=2)


def _runs_readable(config: Mapping[str, Any] | None) -> bool:
    """The task's runs can be read from LangGraph's loop (``decide.identity._runs``)."""
    from langgraph_effects.decide.identity import _TASK_CALL, _runs

    conf = (config or {}).get("configurable") or {}
    return bool(_runs(conf.get(_TASK_CALL)))


def flush() -> None:
    """Emit the kept warning (``warn_durability``) if this thread's stack has the user's
    line that ran the graph; else keep it. Cheap when nothing is kept."""
    global _pending
    if _pending is None or _durability_deliberate.get():
        return
    user = _user_site(sys._getframe(1))
    if user is None:
        return
    with _pending_lock:
        message, _pending = _pending, None
    if message is not None:
        _warn_at(user, message)


def _warn_at(user: Site, message: str) -> None:
    filename, lineno, user_globals = user
    name = str(user_globals.get("__name__", ""))
    registry = user_globals.setdefault("__warningregistry__", {})
    try:
        warnings.warn_explicit(
            message,
            DurabilityWarning,
            filename,
            lineno,
            module=name,
            registry=registry,
            module_globals=user_globals,
        )
    except ImportError:
        # The source line is read through the module's loader, by its name: a module a
        # multiprocessing child runs as ``__mp_main__`` (its parent ran ``python -m
        # pkg.mod``) keeps the loader of ``pkg.mod``, which refuses that name. A warning
        # never fails the user's run: said without its source line.
        warnings.warn_explicit(
            message, DurabilityWarning, filename, lineno, module=name, registry=registry
        )


def tenant_request(
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


def checked_tenant(workflow: str, bound: str | None, requested: str | None) -> str:
    if bound is None:
        return requested or DEFAULT_TENANT
    if requested is not None and requested != bound:
        raise TenantMismatch(workflow, requested=requested)
    return bound
