"""Public names that load on first use: the one ``__getattr__`` of the package's faces.

``langgraph_effects``, ``langgraph_effects.testing`` and ``langgraph_effects.cli``
each map their public names to the modules that define them; importing the face
costs nothing, and a program loads only what it uses (the operator CLI never
loads langgraph). Type checkers read each face's ``TYPE_CHECKING`` imports.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(
    package: str, where: Mapping[str, str], namespace: MutableMapping[str, Any]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``where[name]`` names the module that
    defines ``name``, imported on first use; the value is kept in ``namespace`` (the
    package's globals), so the next access is a plain lookup."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
