"""Reading the arguments: durations, JSON options, statuses."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

from langgraph_effects.core.model import (
    OperationStatus,
)
from langgraph_effects.errors import (
    InvalidInput,
)

S = OperationStatus

# Most urgent first: what needs a person, then what is in flight, then what waits.
_OPEN = (S.UNKNOWN, S.DISPATCHING, S.PREPARED)
_ORDER = (*_OPEN, S.REJECTED, S.CONFIRMED)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """Parse ``90s``, ``10m``, ``1h30m``, ``2d`` into a ``timedelta``.

    Raises:
        InvalidInput: anything else.
    """
    compact = text.strip().lower().replace(" ", "")
    parts: list[tuple[str, str]] = _DURATION.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact:
        raise InvalidInput(f"cannot read duration {text!r}: use e.g. 90s, 10m, 1h30m, 2d")
    try:
        return timedelta(seconds=sum(float(n) * _UNIT_SECONDS[u] for n, u in parts))
    except OverflowError:
        raise InvalidInput(f"duration {text!r} is too long (at most 999999999d)") from None


def _parse_json(option: str, text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{option} is not valid JSON: {exc}") from None


def _statuses(values: list[str] | None, include_terminal: bool) -> list[OperationStatus]:
    if not values:
        return list(_ORDER if include_terminal else _OPEN)
    out: list[OperationStatus] = []
    for value in values:
        try:
            out.append(OperationStatus(value.lower()))
        except ValueError:
            valid = ", ".join(s.value for s in OperationStatus)
            raise InvalidInput(f"unknown status {value!r}; expected one of: {valid}") from None
    return out
