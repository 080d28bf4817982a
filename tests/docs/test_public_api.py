"""The public face: typed names, a sorted ``__all__``, every returned type exported."""

from __future__ import annotations

import enum
import inspect
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
from mypy import api as mypy_api

import langgraph_effects
from langgraph_effects import testing

ROOT = Path(__file__).resolve().parents[2]
USES = ROOT / "tests" / "typing" / "public_api.py"

MISUSES = """\
from langgraph_effects import InMemoryLedger, PostgresLedger, no_such_name
InMemoryLedger().no_such_method()
InMemoryLedger().get("acme", 42)
PostgresLedger.no_such_classmethod()
"""


def test_mypy_strict_accepts_the_public_api_and_reports_its_misuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mypy --strict passes an application's use of the API and reports each misuse of it."""
    misuse = tmp_path / "misuse.py"
    misuse.write_text(MISUSES)
    monkeypatch.chdir(ROOT)  # mypy finds this checkout's package from the working directory
    out, err, status = mypy_api.run(
        ["--strict", "--no-error-summary", "--hide-error-context", str(USES), str(misuse)]
    )
    assert err == ""
    lines = out.splitlines()
    assert not [line for line in lines if "public_api.py" in line], out
    reported = {int(line.split(":")[1]) for line in lines if "misuse.py" in line}
    # Line 1: a name the package does not export; 2: no such method; 3: a wrong argument
    # type; 4: a lazily loaded extra is typed too. All four are lost when a name is Any.
    assert reported == {1, 2, 3, 4}, out
    assert status == 1


def test_all_is_sorted_and_every_name_resolves() -> None:
    """``__all__`` is sorted, each name is importable, and ``dir()`` lists them."""
    names = langgraph_effects.__all__
    assert names == sorted(names)
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(langgraph_effects, name) is not None
    assert set(names) <= set(dir(langgraph_effects))
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = langgraph_effects.no_such_name  # type: ignore[attr-defined]


def _mentioned(tp: Any) -> typing.Iterator[type]:
    """The classes a type annotation mentions (through unions and generics)."""
    if typing.get_origin(tp) is not None:
        for arg in typing.get_args(tp):
            yield from _mentioned(arg)
    elif isinstance(tp, type):
        yield tp


def _signatures(obj: Any) -> typing.Iterator[tuple[str, Any]]:
    """``(where, annotation)`` for the public callables and fields of an exported object."""
    members: list[tuple[str, Any]] = []
    if inspect.isclass(obj):
        if issubclass(obj, (BaseException, enum.Enum)):
            return
        for attr, member in vars(obj).items():
            if attr.startswith("_") and attr != "__init__":
                continue
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if isinstance(member, property):
                member = member.fget
            if callable(member):
                members.append((f"{obj.__name__}.{attr}", member))
        for field, info in getattr(obj, "model_fields", {}).items():
            yield f"{obj.__name__}.{field}", info.annotation
    elif callable(obj):
        members.append((getattr(obj, "__name__", repr(obj)), obj))
    for where, member in members:
        try:
            hints = typing.get_type_hints(member)
        except NameError:
            continue  # an annotation behind TYPE_CHECKING (a third-party type)
        for arg, tp in hints.items():
            if not arg.startswith("_"):
                yield f"{where}:{arg}", tp


def test_every_type_a_public_signature_names_is_exported() -> None:
    """A type our public functions take or return is importable from the package itself.

    The public harness (``langgraph_effects.testing``) may also name the package's types.
    """
    faces = (langgraph_effects, testing)
    exported = {id(getattr(face, n)) for face in faces for n in face.__all__}
    missing = {
        f"{cls.__module__}.{cls.__qualname__} (in {where})"
        for face in faces
        for name in face.__all__
        for where, tp in _signatures(getattr(face, name))
        for cls in _mentioned(tp)
        if cls.__module__.startswith("langgraph_effects.")
        and not cls.__name__.startswith("_")  # private helpers of a private parameter
        and id(cls) not in exported
    }
    assert not missing, sorted(missing)


def test_importing_the_package_loads_no_optional_extra() -> None:
    """``import langgraph_effects`` loads neither psycopg nor langchain; their faces load on use."""
    probe = (
        "import sys, langgraph_effects\n"
        "extras = sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg', 'langchain'))\n"
        "assert not extras, extras\n"
        "langgraph_effects.EffectMiddleware, langgraph_effects.PostgresLedger\n"
        "assert 'langchain' in sys.modules and 'psycopg' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, cwd=ROOT)
