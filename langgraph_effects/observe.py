"""Observability: structured logs always, OpenTelemetry metrics and spans when installed.

Logging (logger ``langgraph_effects``). Ledgers call ``log_transition`` once
per event they commit, after the commit, never for a refused write. Fields go
in ``extra`` so any structured formatter can emit them: ``lge_operation_id``,
``lge_tenant_id``, ``lge_action``, ``lge_from``, ``lge_to``, ``lge_event``,
``lge_attempt``, ``lge_fencing_token``, ``lge_actor``, and ``lge_evidence``
(the evidence kind) where there is evidence. Payloads, results, evidence
summaries and reasons are never logged: they may hold customer data. A move to
``unknown`` logs at WARNING (a person may be needed), everything else at INFO.

Two more reports, called by the runner and the ledgers:

- ``count_replay(operation)``: a confirmed operation's result was returned
  without calling the provider, i.e. a duplicate effect was prevented.
- ``log_stale_token(...)``: a write with a stale fencing token was refused
  (WARNING: a worker lost its lease while it worked).

OpenTelemetry, only when ``opentelemetry-api`` is importable (no hard
dependency; without it everything above still works). Meter and tracer
``langgraph_effects``; metric attributes are low-cardinality (never ids):

=============================  =========  ===========================================
``lge.transitions``            counter    ``lge.action``, ``lge.from``, ``lge.to``, ``lge.event``
``lge.reconciliations``        counter    ``lge.action``, ``lge.outcome`` (evidence kind)
``lge.duplicates_prevented``   counter    ``lge.action``
``lge.stale_token_refusals``   counter    ``lge.action`` (when known)
``lge.operations``             gauge      ``lge.status`` (``observe_ledger``)
``lge.oldest_unknown_age``     gauge, s   (``observe_ledger``)
=============================  =========  ===========================================

Each transition is also added as an ``lge.transition`` event to the current
span when one is recording, and ``span(...)`` opens a span of our own (a
no-op without OpenTelemetry). The global providers are used unless
``configure(meter_provider=..., tracer_provider=...)`` binds others.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from langgraph_effects.core.model import (
    Operation,
    OperationEvent,
    OperationStatus,
    utcnow,
)

if TYPE_CHECKING:
    from langgraph_effects.ledger.base import Ledger

__all__ = [
    "configure",
    "count_replay",
    "log_abandoned",
    "log_stale_token",
    "log_transition",
    "logger",
    "observe_ledger",
    "span",
]

logger = logging.getLogger("langgraph_effects")
# A library stays silent unless the application configures logging.
logger.addHandler(logging.NullHandler())

# Evidence from these sources is not a reconciliation: a receipt came with the
# provider's answer, an operator is a person (same rule as ``Ledger.stats``).
_NOT_RECONCILIATION = ("receipt", "operator")


# -- OpenTelemetry, optional --------------------------------------------------------


@dataclass(frozen=True)
class _Otel:
    """Bound OpenTelemetry objects; typed ``Any`` because the API may be absent."""

    trace: Any
    metrics: Any
    tracer: Any
    meter: Any
    transitions: Any
    reconciliations: Any
    replays: Any
    stale: Any


_otel: _Otel | None = None
_configured = False


def configure(*, meter_provider: Any = None, tracer_provider: Any = None) -> bool:
    """Bind the OpenTelemetry instruments to these providers (default: the global ones).

    Called implicitly on first use; call it yourself to use non-global
    providers, or again to rebind. Returns False, and keeps only logging,
    when ``opentelemetry-api`` is not installed.
    """
    global _otel, _configured
    _configured = True
    try:
        trace = importlib.import_module("opentelemetry.trace")
        metrics = importlib.import_module("opentelemetry.metrics")
    except ImportError:
        _otel = None
        return False
    meter = metrics.get_meter("langgraph_effects", meter_provider=meter_provider)
    _otel = _Otel(
        trace=trace,
        metrics=metrics,
        tracer=trace.get_tracer("langgraph_effects", tracer_provider=tracer_provider),
        meter=meter,
        transitions=meter.create_counter(
            "lge.transitions", description="Committed operation transitions"
        ),
        reconciliations=meter.create_counter(
            "lge.reconciliations", description="Reconciliation outcomes by evidence kind"
        ),
        replays=meter.create_counter(
            "lge.duplicates_prevented",
            description="Confirmed results replayed without calling the provider",
        ),
        stale=meter.create_counter(
            "lge.stale_token_refusals", description="Writes refused for a stale fencing token"
        ),
    )
    return True


def _instruments() -> _Otel | None:
    if not _configured:
        configure()
    return _otel


@contextlib.contextmanager
def span(name: str, **attributes: str | int | None) -> Iterator[None]:
    """Run the block in an OpenTelemetry span (a no-op without OpenTelemetry).

    Attributes that are ``None`` are left out; pass ids, never payloads.
    """
    otel = _instruments()
    if otel is None:
        yield
        return
    clean = {f"lge.{k}": v for k, v in attributes.items() if v is not None}
    with otel.tracer.start_as_current_span(name, attributes=clean):
        yield


def observe_ledger(
    ledger: Ledger, *, tenant_id: str | None = None, meter_provider: Any = None
) -> bool:
    """Export ``ledger.stats()`` as gauges: operations per status, age of the oldest unknown.

    The ledger is queried on each metric collection (by the SDK's reader, in
    its thread), so the figures are the ledger's, not this process's. Returns
    False when ``opentelemetry-api`` is not installed.
    """
    otel = _instruments()
    if otel is None:
        return False
    meter = (
        otel.meter
        if meter_provider is None
        else otel.metrics.get_meter("langgraph_effects", meter_provider=meter_provider)
    )
    observation = otel.metrics.Observation
    scope = {} if tenant_id is None else {"lge.tenant_id": tenant_id}

    def per_status(_options: Any) -> list[Any]:
        counts = ledger.stats(tenant_id=tenant_id).counts
        return [
            observation(counts.get(s, 0), {**scope, "lge.status": s.value}) for s in OperationStatus
        ]

    def oldest_unknown(_options: Any) -> list[Any]:
        oldest = ledger.stats(tenant_id=tenant_id).oldest_unknown_at
        age = 0.0 if oldest is None else max(0.0, (utcnow() - oldest).total_seconds())
        return [observation(age, scope)]

    meter.create_observable_gauge(
        "lge.operations", callbacks=[per_status], description="Operations per status"
    )
    meter.create_observable_gauge(
        "lge.oldest_unknown_age",
        callbacks=[oldest_unknown],
        unit="s",
        description="Age of the oldest unknown operation (0 when none)",
    )
    return True


# -- reports ------------------------------------------------------------------------


def _fields(operation: Operation) -> dict[str, Any]:
    return {
        "lge_operation_id": operation.operation_id,
        "lge_tenant_id": operation.tenant_id,
        "lge_action": operation.action,
        "lge_attempt": operation.attempts,
        "lge_fencing_token": operation.fencing_token,
    }


def log_transition(operation: Operation, event: OperationEvent) -> None:
    """Report one committed transition (after commit, never for a refused write)."""
    # Each enum's value read once, as ``_value_`` (the member's own attribute, which the
    # ``.value`` property returns through two Python calls).
    source = event.from_status._value_ if event.from_status else None
    target, kind = event.to_status._value_, event.kind._value_
    evidence = event.evidence
    level = logging.WARNING if event.to_status is OperationStatus.UNKNOWN else logging.INFO
    if logger.isEnabledFor(level):
        logger.log(
            level,
            "%s %s: %s -> %s (%s)",
            operation.action,
            operation.operation_id,
            source or "-",
            target,
            kind,
            extra={
                **_fields(operation),
                "lge_from": source,
                "lge_to": target,
                "lge_event": kind,
                "lge_fencing_token": event.fencing_token,
                "lge_actor": event.actor,
                "lge_evidence": None if evidence is None else evidence.kind.value,
            },
        )
    otel = _instruments()
    if otel is None:
        return
    labels = {
        "lge.action": operation.action,
        "lge.from": source or "none",
        "lge.to": target,
        "lge.event": kind,
    }
    otel.transitions.add(1, labels)
    if evidence is not None and evidence.source not in _NOT_RECONCILIATION:
        otel.reconciliations.add(
            1, {"lge.action": operation.action, "lge.outcome": evidence.kind.value}
        )
    current = otel.trace.get_current_span()
    if current.is_recording():
        current.add_event(
            "lge.transition",
            {
                **labels,
                "lge.operation_id": operation.operation_id,
                "lge.tenant_id": operation.tenant_id,
                "lge.attempt": operation.attempts,
            },
        )


def count_replay(operation: Operation) -> None:
    """Report that a confirmed result was replayed without calling the provider.

    Call it each time the runner answers a tool call from the ledger's
    ``confirmed`` record: each call is one duplicate effect prevented.
    """
    if logger.isEnabledFor(logging.INFO):
        logger.info(
            "%s %s: confirmed result replayed, provider not called",
            operation.action,
            operation.operation_id,
            extra={**_fields(operation), "lge_event": "replay"},
        )
    otel = _instruments()
    if otel is not None:
        otel.replays.add(1, {"lge.action": operation.action})


def log_abandoned(operation: Operation, lease_ends_by: datetime) -> None:
    """Report a dispatch its task gave up on while the provider call was in flight.

    A task's timeout (or the end of its run) cancelled the caller; the call goes on
    and its answer is recorded if it comes, but the lease is renewed no longer: after
    ``lease_ends_by`` the next run takes the operation over (unknown, then reconciled
    or reviewed). Never resent blindly.
    """
    logger.warning(
        "%s %s: its task was cancelled (a timeout?) while the provider call was in flight; "
        "not resent: its answer is recorded if it comes, and the lease, renewed no longer, "
        "ends by %s, then the next run takes the operation over (unknown: reconciled or "
        "reviewed)",
        operation.action,
        operation.operation_id,
        lease_ends_by.isoformat(),
        extra={**_fields(operation), "lge_event": "abandoned"},
    )


def log_stale_token(
    tenant_id: str,
    operation_id: str,
    *,
    token: int,
    current: int | None,
    action: str | None = None,
) -> None:
    """Report a write refused because its fencing token was stale (nothing changed)."""
    logger.warning(
        "operation %s: fencing token %s is stale (current %s); write refused",
        operation_id,
        token,
        current,
        extra={
            "lge_operation_id": operation_id,
            "lge_tenant_id": tenant_id,
            "lge_action": action,
            "lge_event": "stale_token",
            "lge_fencing_token": token,
        },
    )
    otel = _instruments()
    if otel is not None:
        otel.stale.add(1, {} if action is None else {"lge.action": action})
