"""Opaque operation ids and provider idempotency keys.

Ids are hashes: they carry no customer data, are stable for the same inputs,
and differ when any input differs. Inputs are joined unambiguously (canonical
JSON array) so ``("a|b", "c")`` and ``("a", "b|c")`` never collide.
"""

from __future__ import annotations

import hashlib

from langgraph_effects.core.digest import canonical_json
from langgraph_effects.errors import InvalidInput

__all__ = [
    "MAX_CANDIDATES",
    "candidate_operation_id",
    "idempotency_key",
    "intent_operation_id",
    "operation_id",
]


MAX_CANDIDATES = 10_000
"""The last candidate index a call takes (``candidate_operation_id``): that many identical
operations of one call on one thread. The walk stops there (``decide.identity``), and an
answer naming a sibling call is looked for up to there (``decide.call.EffectCall.sibling``),
so no answer naming a call the walk can reach is refused."""

_BASE32 = "abcdefghijklmnopqrstuvwxyz234567"
"""RFC 4648's base32 alphabet in lower case, as ``base64.b32encode(...).lower()`` writes it."""

_PAIRS = tuple(a + b for a in _BASE32 for b in _BASE32)
"""The two letters of each 10-bit value."""


def _base32_160(raw: bytes) -> str:
    """``base64.b32encode(raw).decode().lower()`` of 20 bytes (160 bits: 32 letters, no
    padding), two letters per 10 bits from the top, without ``base64``'s pure-Python
    loop over 5-byte groups (``tests/core/test_core.py`` checks the equality)."""
    n = int.from_bytes(raw, "big")
    return "".join([_PAIRS[(n >> shift) & 0x3FF] for shift in range(150, -10, -10)])


def _hash_id(prefix: str, *parts: object) -> str:
    for part in parts:
        if part is None or (isinstance(part, str) and not part.strip()):
            raise InvalidInput(f"cannot derive an id from an empty part in {parts!r}")
    raw = hashlib.sha256(canonical_json(list(parts))).digest()
    return prefix + _base32_160(raw[:20])


def operation_id(
    *, tenant_id: str, workflow_id: str, tool_call_id: str, action: str, payload_digest: str
) -> str:
    """The default id of a tool call's operation.

    ``tool_call_id`` is stable across crash, interrupt, retry, replay and fork
    once the AIMessage is checkpointed; an edited call has another digest and
    so is another operation with its own authorization.
    """
    return _hash_id("op-", "call", tenant_id, workflow_id, tool_call_id, action, payload_digest)


def candidate_operation_id(
    *,
    tenant_id: str,
    workflow_id: str,
    action: str,
    payload_digest: str,
    index: int,
    scope: str | None = None,
) -> str:
    """The ``index``-th candidate id of a call of ``action`` with this payload on a thread.

    ``op_0, op_1, ...``: a call takes the first candidate whose record is not
    another operation (``core.identity.judge``, ``docs/identity.md``). ``scope``
    narrows the thread where no checkpointer keeps one (the run's own step), so a
    stateless service never meets last week's request. The hash is the one
    earlier releases gave a call's occurrence, so their records are met again.
    """
    if index < 0:
        raise InvalidInput("a candidate index must not be negative")
    thread = workflow_id if scope is None else f"{workflow_id}@{scope}"
    return _hash_id("op-", "occurrence", tenant_id, thread, action, payload_digest, str(index))


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
