"""Canonical payload digests (RFC 8785 JSON Canonicalization Scheme + SHA-256)."""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785

from langgraph_effects.errors import InvalidInput

__all__ = ["MAX_PAYLOAD_BYTES", "canonical_json", "payload_digest"]

MAX_PAYLOAD_BYTES = 1 << 20
"""Largest canonical payload accepted (1 MiB): ledgers are not blob stores."""


def canonical_json(value: Any) -> bytes:
    """Serialize a JSON value canonically: sorted keys, no spaces, JCS numbers.

    Raises ``InvalidInput`` for anything that is not plain JSON (NaN, infinities,
    sets, bytes, non-string keys, arbitrary objects) or larger than 1 MiB.
    """
    try:
        data = rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, RecursionError) as exc:
        raise InvalidInput(f"payload is not canonical JSON: {exc}") from exc
    if len(data) > MAX_PAYLOAD_BYTES:
        raise InvalidInput(
            f"payload is {len(data)} bytes of canonical JSON; the limit is {MAX_PAYLOAD_BYTES}"
        )
    return data


def payload_digest(action: str, version: int, target: str | None, payload: Any) -> str:
    """SHA-256 (hex) over canonical JSON of the payload plus action, version and target.

    Equal for equal JSON values whatever the dict order; different when any of
    the four changes.
    """
    envelope = {"action": action, "version": version, "target": target, "payload": payload}
    return hashlib.sha256(canonical_json(envelope)).hexdigest()
