"""Observability: every committed transition is logged with structured fields.

Ledgers call ``log_transition`` once per event they commit. Fields go in
``extra`` (``lge_operation_id``, ``lge_tenant_id``, ``lge_action``,
``lge_from``, ``lge_to``, ``lge_attempt``, ``lge_fencing_token``, ``lge_actor``);
payloads and results are never logged.
"""

from __future__ import annotations

import logging

from langgraph_effects.core.model import Operation, OperationEvent

__all__ = ["log_transition", "logger"]

logger = logging.getLogger("langgraph_effects")


def log_transition(operation: Operation, event: OperationEvent) -> None:
    """Log one committed transition (after commit, never for a refused write)."""
    if not logger.isEnabledFor(logging.INFO):
        return
    logger.info(
        "%s %s: %s -> %s (%s)",
        operation.action,
        operation.operation_id,
        event.from_status.value if event.from_status else "-",
        event.to_status.value,
        event.kind.value,
        extra={
            "lge_operation_id": operation.operation_id,
            "lge_tenant_id": operation.tenant_id,
            "lge_action": operation.action,
            "lge_from": event.from_status.value if event.from_status else None,
            "lge_to": event.to_status.value,
            "lge_event": event.kind.value,
            "lge_attempt": operation.attempts,
            "lge_fencing_token": event.fencing_token,
            "lge_actor": event.actor,
        },
    )
