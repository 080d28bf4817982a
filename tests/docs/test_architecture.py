"""The package's import rule (ARCHITECTURE.md, "What each part may import"), by ``ast``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "langgraph_effects"

# Each part may import its own layer and the layers above it in this list, never one below:
# imports run one way. A ``TYPE_CHECKING`` import is a type annotation, not a dependency,
# and is not counted (``observe.observe_ledger`` names ``Ledger`` that way).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "_lazy"),
    ("core",),
    ("observe", "_owners", "_faults"),
    ("ledger",),
    ("effects", "slot", "review", "journal", "mcp", "presets"),
    ("decide",),
    ("node", "middleware", "outbox", "_faces", "functional"),
    ("cli", "testing"),
)

# What core/ may import besides itself and errors: computation, never I/O (no os, socket,
# psutil, sqlite3, psycopg, threading, time, logging).
CORE_MAY_IMPORT = frozenset(
    {
        "__future__",
        "base64",
        "collections",
        "dataclasses",
        "datetime",
        "enum",
        "functools",
        "hashlib",
        "hmac",
        "json",
        "math",
        "pydantic",
        "re",
        "rfc8785",
        "types",
        "typing",
    }
)


def _part(module: str) -> str:
    """The part a ``langgraph_effects.x.y`` module belongs to: ``x`` (the package: ``""``)."""
    rest = module.removeprefix("langgraph_effects").lstrip(".")
    return rest.split(".")[0]


def _layer(part: str) -> int:
    for index, parts in enumerate(LAYERS):
        if part in parts:
            return index
    raise AssertionError(f"langgraph_effects.{part} is in no layer of the import rule")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside ``if TYPE_CHECKING:`` blocks."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            if ast.unparse(node.test).startswith("not "):
                continue
            for child in node.body:
                inside.update(id(n) for n in ast.walk(child))
    return inside


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for each runtime import in a file (function-level ones included)."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "langgraph_effects":  # ``from langgraph_effects import _x``
                for alias in node.names:
                    yield node.lineno, f"langgraph_effects.{alias.name}"
            else:
                yield node.lineno, node.module


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "__init__.py")


def test_imports_run_one_way() -> None:
    """No module imports a part of a lower layer than its own (the package face excepted)."""
    wrong = []
    for path in _sources():
        here = _module_name(path)
        own = _layer(_part(here))
        for line, module in _imports(path):
            if module.startswith("langgraph_effects.") and _layer(_part(module)) > own:
                wrong.append(f"{here}:{line} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_core_does_no_io() -> None:
    """core/ imports only itself, errors, and modules that compute (no process, file or net I/O)."""
    wrong = []
    for path in sorted((PACKAGE / "core").rglob("*.py")):
        for line, module in _imports(path):
            top = module.split(".")[0]
            inside = _part(module) in ("core", "errors") and top == "langgraph_effects"
            if not inside and top not in CORE_MAY_IMPORT:
                wrong.append(f"{_module_name(path)}:{line} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_the_rule_checks_every_part() -> None:
    """Every module of the package belongs to a layer, so a new part must be placed."""
    for path in _sources():
        _layer(_part(_module_name(path)))
