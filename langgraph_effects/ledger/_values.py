"""Values the ledgers store: JSON checked before anything is written."""

from __future__ import annotations

import json
from typing import Any

from langgraph_effects.errors import InvalidInput

__all__ = ["json_text"]


def json_text(value: Any, *, what: str = "value") -> str | None:
    """Serialize a JSON value for storage; ``None`` stays SQL NULL.

    Raises ``InvalidInput`` for anything that is not plain JSON (NaN, sets,
    objects), so a bad value fails before anything is written.
    """
    if value is None:
        return None
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInput(f"the {what} is not plain JSON: {exc}") from exc
