"""The thread a call runs in: its tenant, and whether its tool-call ids are durable.

A thread belongs to the tenant of its first effect. A run that names no
tenant (a time-travel config from get_state_history carries none) uses the
bound one; a run under another tenant is refused before anything is
prepared. ``EffectRunner.tenant_for`` reads and caches the binding; the rules
are here.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from langgraph_effects.errors import InvalidInput, TenantMismatch

__all__ = [
    "DEFAULT_TENANT",
    "NO_THREAD",
    "OPERATIONS_KEY",
    "DurabilityWarning",
    "checked_tenant",
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
        raise TenantMismatch(workflow, bound=bound, requested=requested)
    return bound
