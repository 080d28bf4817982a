"""What the story asks of its driver (invoke, read the state, the history, the ledger), and
the tally it keeps of what it intended."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langgraph_effects.ledger.base import AsyncLedger, Ledger
from langgraph_effects.testing.scenario.case import Scenario

INTRUDER = "another-tenant"
"""The tenant an ``other`` resume claims (see ``Scenario.resume_tenant``)."""


@dataclass(frozen=True, slots=True)
class _Invoke:
    inputs: tuple[Any, ...]
    config: dict[str, Any] | None = None
    """None: the thread's config."""


@dataclass(frozen=True, slots=True)
class _GetState:
    pass


@dataclass(frozen=True, slots=True)
class _History:
    pass


@dataclass(frozen=True, slots=True)
class _Fork:
    """``update_state(config, values)``: a fork of a snapshot (no values), or an edit."""

    config: dict[str, Any]
    values: Any = None
    as_node: str | None = None


@dataclass(frozen=True, slots=True)
class _LedgerCall:
    """A read of the ledger, written against the protocol (sync or async: the driver awaits)."""

    read: Callable[[Ledger | AsyncLedger], Any]


@dataclass(frozen=True, slots=True)
class _Rebuild:
    """The deployment restarts with ``Scenario.tools_after`` (same ledger and saver)."""


_Request = _Invoke | _GetState | _History | _Fork | _LedgerCall | _Rebuild


@dataclass(slots=True)
class _Tally:
    crashes: int = 0
    errors: int = 0
    pending: set[str] = field(default_factory=set)
    intended: Counter[str] = field(default_factory=Counter)
    repeated: Counter[str] = field(default_factory=Counter)
    """Targets of calls repeated on purpose: each needs an operation of its own."""
    violations: list[str] = field(default_factory=list)
    out_of_band: int = 0
    """Decisions an operator took at the console while their question was pending."""
    lost_answers: list[str] = field(default_factory=list)
    """Answers neither applied, nor refused, nor asked again with a notice saying why."""
    refused_answers: list[str] = field(default_factory=list)
    """Valid answers to the current question, refused in words."""


def _thread_config(sc: Scenario, tenant: str | None) -> dict[str, Any]:
    configurable = {"thread_id": sc.thread_id}
    if tenant is not None:
        configurable["tenant_id"] = tenant
    return {"configurable": configurable}


def _with_tenant(config: Mapping[str, Any], tenant: str) -> dict[str, Any]:
    return {**config, "configurable": {**config["configurable"], "tenant_id": tenant}}
