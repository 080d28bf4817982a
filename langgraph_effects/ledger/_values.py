"""Values the ledgers store: JSON checked before anything is written."""

from __future__ import annotations

import json
from typing import Any

from langgraph_effects.core.digest import compact_encoder
from langgraph_effects.core.storable import needs_escaping, storable, storable_text
from langgraph_effects.errors import InvalidInput

__all__ = ["json_text", "text", "who", "with_answer"]

_ENCODE = compact_encoder(sort_keys=False)
"""``json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)``, one C call
(a cycle fails as deep nesting does: ``RecursionError``)."""


def json_text(value: Any, *, what: str = "value") -> str | None:
    """Serialize a JSON value for storage; ``None`` stays SQL NULL.

    Raises ``InvalidInput`` for anything that is not plain JSON (NaN, sets,
    objects), so a bad value fails before anything is written. Characters no
    backend stores (NUL, lone surrogates) are escaped (``core.storable``).
    """
    if value is None:
        return None
    try:
        out = _ENCODE(value)
        if needs_escaping(out):
            out = json.dumps(storable(value), separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInput(f"the {what} is not plain JSON: {exc}") from exc
    return out


def with_answer(detail: dict[str, Any] | None, answer: str | None) -> dict[str, Any] | None:
    """An event's detail, plus the interrupt answer the transition applies (if any)."""
    return detail if answer is None else {**(detail or {}), "answer": answer}


def who(claimed_by: str | None, verified_by: str | None) -> dict[str, str]:
    """An event's detail on who decided: the name given and the identity verified."""
    out = {}
    if claimed_by is not None:
        out["claimed_by"] = claimed_by
    if verified_by is not None:
        out["verified_by"] = verified_by
    return out


def text(value: str | None) -> str | None:
    """A reason or error text for storage: NUL and lone surrogates escaped."""
    return None if value is None else storable_text(value)
