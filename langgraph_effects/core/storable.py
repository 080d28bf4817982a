"""What every ledger can store: one rule for text the backends refuse, and one for length.

A provider's answer or a reconciler's evidence may hold characters no backend
stores: PostgreSQL's ``text`` and ``jsonb`` refuse NUL (U+0000), and UTF-8 (so
SQLite, PostgreSQL and RFC 8785 alike) cannot encode a lone surrogate
(U+D800..U+DFFF). Refusing to store them would turn an applied effect into
``unknown`` and lose its receipt, so they are *escaped*:

* each NUL or lone surrogate becomes the six characters of its JSON escape
  (``"a\\x00b"`` is stored as the text ``a\\u0000b``); everything else is kept;
* a text over its column's bound is cut, ending with a marker that says so and
  gives the original length (``clip``);
* evidence whose result is not plain JSON (NaN, sets, objects) keeps its text.

The ledgers apply ``storable`` to every JSON value and reason they write, and
``Evidence`` applies it when it is made, so evidence always fits a
``Resolution`` (``MAX_SOURCE``, ``MAX_SUMMARY``).
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "MAX_SOURCE",
    "MAX_SUMMARY",
    "clip",
    "needs_escaping",
    "plain_json",
    "storable",
    "storable_text",
]

MAX_SUMMARY = 4000
"""Longest evidence summary kept (``Resolution.reason``'s bound)."""
MAX_SOURCE = 200
"""Longest evidence source kept (``Resolution.by``'s bound)."""

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str) -> str:
    """``text`` with every NUL and lone surrogate written as its ``\\uXXXX`` escape."""
    if _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def storable(value: Any) -> Any:
    """A JSON value with ``storable_text`` applied to every string in it, keys included."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {
            (storable_text(k) if isinstance(k, str) else k): storable(v) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    return value


def needs_escaping(json_text: str) -> bool:
    """True when serialized JSON holds a NUL escape or a lone surrogate (then use ``storable``)."""
    return "\\u0000" in json_text or _UNSTORABLE.search(json_text) is not None


def plain_json(value: Any) -> bool:
    """True when ``value`` serializes as plain JSON (no NaN, sets or objects)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, with a marker when anything was cut."""
    if len(text) <= limit:
        return text
    marker = f" [cut: {len(text)} characters in all]"
    return text[: max(limit - len(marker), 0)] + marker[:limit]
