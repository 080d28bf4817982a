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

from langgraph_effects.errors import InvalidInput, TenantMismatch

__all__ = [
    "DEFAULT_TENANT",
    "NO_THREAD",
    "OPERATIONS_KEY",
    "DurabilityWarning",
    "checked_tenant",
    "durability_chosen",
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


def _internal(frame: FrameType) -> bool:
    return str(frame.f_globals.get("__name__", "")).split(".")[0] in _INTERNAL


def _user_site() -> tuple[str, int, dict[str, Any]] | None:
    """The user's line that ran the graph (file, line, module globals): the first frame
    outside this package, LangGraph, LangChain and the machinery between them. LangGraph
    runs tool calls in worker threads; then it is the frame that called into LangGraph in
    the one other thread waiting inside it. None when that is not one frame (several
    graphs at once).

    Another thread's frames are read only while this thread keeps the GIL (a switch
    interval far longer than the walk): on CPython 3.11 a frame that its thread pops
    meanwhile crashes the process when its ``f_back`` is read (seen in CI)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and _internal(frame):
        frame = frame.f_back
    if frame is not None:
        return frame.f_code.co_filename, frame.f_lineno, frame.f_globals
    me = threading.get_ident()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(60.0)
    try:
        found = []
        for ident, inner in sys._current_frames().items():
            seen_langgraph = False
            walk: FrameType | None = inner
            while walk is not None and _internal(walk):
                name = str(walk.f_globals.get("__name__", ""))
                seen_langgraph = seen_langgraph or name.startswith("langgraph.")
                walk = walk.f_back
            if ident != me and walk is not None and seen_langgraph:
                found.append((walk.f_code.co_filename, walk.f_lineno, walk.f_globals))
        return found[0] if len(found) == 1 else None
    finally:
        sys.setswitchinterval(interval)


def warn_durability(config: Mapping[str, Any] | None) -> None:
    """Warn once per process when the graph's durability lets tool-call ids change; the
    warning names the user's line that ran the graph (``_user_site``)."""
    global _durability_warned
    if _durability_warned or config is None or _durability_deliberate.get():
        return
    # LangGraph leaves the key out when ``durability`` is not passed, and then
    # runs with its default, "async" (so does LangGraph Server).
    conf = config.get("configurable", {})
    mode = conf.get("__pregel_durability") or "async"
    if mode == "sync" or conf.get("__pregel_checkpointer") is None:
        return  # saved before the tools run, or nothing saved (NoCheckpointerWarning)
    _durability_warned = True
    message = (
        f"langgraph-effects: this graph runs with durability={mode!r}. A crash before the "
        "AIMessage is checkpointed makes the model propose the call again: the same call "
        "(same tool, same arguments) maps to the same operation, but a call re-proposed "
        "with other arguments is a new one. Use durability='sync', or give effects an "
        "intent_key, which maps every re-proposal to the same operation."
    )
    if mode == "exit":
        message += (
            " Under durability='exit' a later request for the same call on this thread (a "
            "deliberate repeat) is answered from the earlier record and does not act again: "
            "the steps that delivered its answer are never saved (docs/limits.md). Give such "
            "effects an intent_key per request, or use durability='sync'."
        )
    user = _user_site()
    if user is None:
        warnings.warn(message, DurabilityWarning, stacklevel=3)
        return
    filename, lineno, user_globals = user
    warnings.warn_explicit(
        message,
        DurabilityWarning,
        filename,
        lineno,
        module=str(user_globals.get("__name__", "")),
        registry=user_globals.setdefault("__warningregistry__", {}),
        module_globals=user_globals,
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
