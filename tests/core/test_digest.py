"""Canonical JSON: RFC 8785's bytes, and ``InvalidInput`` for whatever is not plain JSON."""

from __future__ import annotations

from typing import Any

import pytest

from langgraph_effects.core.digest import canonical_json
from langgraph_effects.errors import InvalidInput


@pytest.mark.parametrize("value", [{"\ud800": 1}, {"a": {"x\udfff": "y"}}, ["\ud83d"]])
def test_a_lone_surrogate_is_refused_as_invalid_input(value: Any) -> None:
    """A lone surrogate, in a key as in a string value, is not JSON text: ``InvalidInput``."""
    with pytest.raises(InvalidInput):
        canonical_json(value)
