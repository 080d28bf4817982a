"""Opaque operation ids and provider idempotency keys.

Ids are hashes: they carry no customer data, are stable for the same inputs,
and differ when any input differs. Inputs are joined unambiguously (canonical
JSON array) so ``("a|b", "c")`` and ``("a", "b|c")`` never collide.
"""

from __future__ import annotations

import base64
import hashlib

from langgraph_effects.core.digest import canonical_json
from langgraph_effects.errors import InvalidInput

__all__ = ["idempotency_key", "intent_operation_id", "occurrence_operation_id", "operation_id"]


def _hash_id(prefix: str, *parts: object) -> str:
    for part in parts:
        if part is None or (isinstance(part, str) and not part.strip()):
            raise InvalidInput(f"cannot derive an id from an empty part in {parts!r}")
    raw = hashlib.sha256(canonical_json(list(parts))).digest()
    return prefix + base64.b32encode(raw[:20]).decode().lower()


def operation_id(
    *, tenant_id: str, workflow_id: str, tool_call_id: str, action: str, payload_digest: str
) -> str:
    """The default id of a tool call's operation.

    ``tool_call_id`` is stable across crash, interrupt, retry, replay and fork
    once the AIMessage is checkpointed; an edited call has another digest and
    so is another operation with its own authorization.
    """
    return _hash_id("op-", "call", tenant_id, workflow_id, tool_call_id, action, payload_digest)


def occurrence_operation_id(
    *, tenant_id: str, workflow_id: str, action: str, payload_digest: str, occurrence: int
) -> str:
    """The default id of a tool call whose place in the thread's messages is known.

    ``occurrence`` counts the identical calls (same action and digest) the
    thread already answered, plus the call's index among identical calls of
    its own AIMessage. A call re-issued with a new tool-call id (the AIMessage
    was lost in a crash, or the user sent the request again) meets the same
    operation, because the call it repeats was never answered; a call repeated
    on purpose after the first one was answered is a new operation.
    """
    if occurrence < 0:
        raise InvalidInput("occurrence must not be negative")
    return _hash_id(
        "op-", "occurrence", tenant_id, workflow_id, action, payload_digest, str(occurrence)
    )


def intent_operation_id(*, tenant_id: str, action: str, intent_key: str) -> str:
    """The id of an application-keyed intent: one operation per (tenant, action, key).

    The payload is deliberately left out: the same key with another payload
    must meet the existing record and fail with ``PayloadMismatch``.
    """
    return _hash_id("op-", "intent", tenant_id, action, intent_key)


def idempotency_key(operation_id: str, *, namespace: str = "lge") -> str:
    """The key sent to the provider: stable for the operation, namespaced."""
    if not operation_id.strip():
        raise InvalidInput("operation_id must not be empty")
    return f"{namespace}-{operation_id}"
