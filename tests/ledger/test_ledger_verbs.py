"""Each ledger verb has one parameter list, wherever it is declared.

The SQL ledgers' methods are made from the verbs' programs (``ledger._faces``), and
mypy checks each program against the protocol; the declarations that stay for typing
and reading (``Ledger``, ``AsyncLedger``, ``InMemoryLedger``, ``LazyLedger``) and the
engine's actions (``decide.actions``) are proved equal to the protocol here, defaults
included (which mypy does not compare).
"""

from __future__ import annotations

import dataclasses
import inspect
from types import SimpleNamespace
from typing import Any

import pytest

from langgraph_effects.decide import actions
from langgraph_effects.ledger.base import AsyncLedger, Ledger
from langgraph_effects.ledger.connect import LazyLedger
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.ledger.postgres import AsyncPostgresLedger, PostgresLedger
from langgraph_effects.ledger.sqlite import AsyncSQLiteLedger, SQLiteLedger

VERBS = sorted(
    name for name, member in vars(Ledger).items() if callable(member) and not name.startswith("_")
)
LEDGERS: list[type] = [
    AsyncLedger,
    InMemoryLedger,
    LazyLedger,
    SQLiteLedger,
    AsyncSQLiteLedger,
    PostgresLedger,
    AsyncPostgresLedger,
]


def parameters(function: Any) -> list[tuple[str, Any, Any, str]]:
    """A signature's parameters after ``self``: name, kind, default and annotation."""
    params = list(inspect.signature(function).parameters.values())[1:]
    return [(p.name, p.kind, p.default, str(p.annotation).replace("builtins.", "")) for p in params]


def test_the_protocol_names_every_verb() -> None:
    """The verbs read off ``Ledger`` are the transitions and queries of the house style."""
    assert {"prepare", "claim", "confirm", "reject", "mark_unknown", "resolve", "get"} <= set(VERBS)
    assert {"list", "events", "stats", "setup", "confirm_many", "open_operations"} <= set(VERBS)


@pytest.mark.parametrize("ledger", LEDGERS, ids=lambda cls: cls.__name__)
def test_every_ledger_declares_each_verb_with_the_protocols_parameters(ledger: type) -> None:
    """Each ledger's verbs have the protocol's parameters: names, kinds, defaults, types."""
    drifted = [
        verb
        for verb in VERBS
        if parameters(getattr(ledger, verb)) != parameters(getattr(Ledger, verb))
    ]
    assert drifted == [], f"{ledger.__name__} drifted from Ledger on {drifted}"


@pytest.mark.parametrize("ledger", LEDGERS, ids=lambda cls: cls.__name__)
def test_an_async_ledgers_verbs_are_coroutines(ledger: type) -> None:
    """The async ledgers' verbs are coroutine functions, the sync ones' are not."""
    want_async = ledger is not InMemoryLedger and ledger.__name__.startswith(("Async", "Lazy"))
    for verb in VERBS:
        assert inspect.iscoroutinefunction(getattr(ledger, verb)) is want_async, verb


class _Probe:
    """Records the one ledger call an action makes (a signature probe, not a ledger)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> None:
            self.calls.append((name, args, kwargs))

        return call


LEDGER_ACTIONS = sorted(
    (cls for cls in vars(actions).values() if isinstance(cls, type)),
    key=lambda cls: cls.__name__,
)
LEDGER_ACTIONS = [
    cls
    for cls in LEDGER_ACTIONS
    if issubclass(cls, actions.LedgerAction) and cls is not actions.LedgerAction
]


@pytest.mark.parametrize("action", LEDGER_ACTIONS, ids=lambda cls: cls.__name__)
def test_each_action_hands_every_field_to_the_verbs_parameter_of_its_name(
    action: type[actions.LedgerAction[Any]],
) -> None:
    """An engine action passes each of its fields to its verb's parameter of the same
    name (its ``key`` as ``tenant_id`` and ``operation_id``), with the verb's defaults."""
    fields = dataclasses.fields(action)  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    for f in fields:
        if f.name == "key":
            values[f.name] = SimpleNamespace(tenant_id="<tenant>", operation_id="<operation>")
        else:
            values[f.name] = f"<{f.name}>"
    probe = _Probe()
    action(**values)._on(probe)  # type: ignore[arg-type]
    ((verb, args, kwargs),) = probe.calls
    bound = inspect.signature(getattr(Ledger, verb)).bind(None, *args, **kwargs).arguments
    expected = {name: value for name, value in values.items() if name != "key"}
    if "key" in values:
        expected |= {"tenant_id": "<tenant>", "operation_id": "<operation>"}
    handed = {name: bound.get(name) for name in expected}
    assert handed == expected, f"{action.__name__} drifted from Ledger.{verb}: {handed}"
    protocol = inspect.signature(getattr(Ledger, verb)).parameters
    for f in fields:
        if f.default is not dataclasses.MISSING and f.name in protocol:
            assert f.default == protocol[f.name].default, (
                f"{action.__name__}.{f.name} drifted from Ledger.{verb}'s default"
            )
