"""The public test harness: fake providers that count effects, and crash points.

* :mod:`langgraph_effects.testing.providers`: ``FakeCRM``, ``FakeMail``,
  ``FakeTicketing``, ``FakeAPI`` (the API of any ``presets.Preset``) (state in a
  SQLite file, so counts survive process kills), scripted ``Fault``s, a ``FakeClock``.
* :mod:`langgraph_effects.testing.models`: ``ScriptedChatModel``, a chat model
  with no API key that proposes planned tool calls, the same in every process.
* :mod:`langgraph_effects.testing.faults`: ``CrashPoint``s at every boundary
  of the runner, armed in-process (``InjectedCrash``) or as a real process
  kill, and ``run_in_child`` to run to a crash and resume in a fresh process.

A crash test, end to end::

    from langgraph_effects.testing import FakeCRM, Fault, run_in_child

    def close(crm):  # module level: it runs in a spawned child
        return crm.close_case("case-1", "refunded", idempotency_key="k1")

    crm = FakeCRM(tmp_path / "crm.db")      # state in a file: counts cross processes
    crm.faults.push(Fault.CRASH)            # apply, commit, then os._exit(137)
    assert run_in_child(close, crm).crashed
    assert run_in_child(close, crm).ok      # resume in a fresh process
    assert (crm.effects, crm.duplicates) == (1, 0)

Names load on first use, so library code importing ``testing.faults`` for its
``crash_point`` hook stays cheap, and ``pytest`` is needed only by the
contract suite. Type checkers see the real types through the
``TYPE_CHECKING`` imports below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from langgraph_effects._lazy import lazy_getattr

if TYPE_CHECKING:
    from langgraph_effects.testing.assertions import (
        assert_no_duplicate_effects,
        assert_no_unevidenced_rejections,
        assert_unknowns_accounted,
    )
    from langgraph_effects.testing.contract import (
        LedgerContract,
        SyncFacade,
        make_draft,
    )
    from langgraph_effects.testing.faults import (
        ChildExit,
        CrashMode,
        CrashPlan,
        CrashPoint,
        InjectedCrash,
        crash_env,
        crash_point,
        run_in_child,
    )
    from langgraph_effects.testing.models import Script, ScriptedChatModel
    from langgraph_effects.testing.providers import (
        AppliedEffect,
        Clock,
        FakeAPI,
        FakeClock,
        FakeCRM,
        FakeMail,
        FakeProvider,
        FakeTicketing,
        Fault,
        FaultQueue,
        ProviderStats,
        ProviderTimeout,
        SystemClock,
    )
    from langgraph_effects.testing.scenario import (
        Kind,
        ProviderKind,
        Providers,
        ReviewPolicy,
        Scenario,
        ScenarioReport,
        Schedule,
        arun_scenario,
        builtin_call,
        confirm_if_seen,
        control_tools,
        defer,
        effect_tools,
        retry_when_safe,
        run_in_forked_child,
        run_scenario,
    )
    from langgraph_effects.testing.scenario.receipts import SlowSibling

_EXPORTS: dict[str, str] = {
    # fake providers
    "AppliedEffect": "langgraph_effects.testing.providers",
    "Clock": "langgraph_effects.testing.providers",
    "FakeAPI": "langgraph_effects.testing.providers",
    "FakeCRM": "langgraph_effects.testing.providers",
    "FakeClock": "langgraph_effects.testing.providers",
    "FakeMail": "langgraph_effects.testing.providers",
    "FakeProvider": "langgraph_effects.testing.providers",
    "FakeTicketing": "langgraph_effects.testing.providers",
    "Fault": "langgraph_effects.testing.providers",
    "FaultQueue": "langgraph_effects.testing.providers",
    "ProviderStats": "langgraph_effects.testing.providers",
    "ProviderTimeout": "langgraph_effects.testing.providers",
    "SystemClock": "langgraph_effects.testing.providers",
    # a scripted chat model
    "Script": "langgraph_effects.testing.models",
    "ScriptedChatModel": "langgraph_effects.testing.models",
    # the ledger contract suite (for third-party ledgers)
    "LedgerContract": "langgraph_effects.testing.contract",
    "SyncFacade": "langgraph_effects.testing.contract",
    "make_draft": "langgraph_effects.testing.contract",
    # crash points
    "ChildExit": "langgraph_effects.testing.faults",
    "CrashMode": "langgraph_effects.testing.faults",
    "CrashPlan": "langgraph_effects.testing.faults",
    "CrashPoint": "langgraph_effects.testing.faults",
    "InjectedCrash": "langgraph_effects.testing.faults",
    "crash_env": "langgraph_effects.testing.faults",
    "crash_point": "langgraph_effects.testing.faults",
    "run_in_child": "langgraph_effects.testing.faults",
    # scenario runner and assertions
    "Kind": "langgraph_effects.testing.scenario",
    "ProviderKind": "langgraph_effects.testing.scenario",
    "Providers": "langgraph_effects.testing.scenario",
    "ReviewPolicy": "langgraph_effects.testing.scenario",
    "Scenario": "langgraph_effects.testing.scenario",
    "ScenarioReport": "langgraph_effects.testing.scenario",
    "Schedule": "langgraph_effects.testing.scenario",
    "SlowSibling": "langgraph_effects.testing.scenario.receipts",
    "arun_scenario": "langgraph_effects.testing.scenario",
    "builtin_call": "langgraph_effects.testing.scenario",
    "confirm_if_seen": "langgraph_effects.testing.scenario",
    "control_tools": "langgraph_effects.testing.scenario",
    "defer": "langgraph_effects.testing.scenario",
    "effect_tools": "langgraph_effects.testing.scenario",
    "retry_when_safe": "langgraph_effects.testing.scenario",
    "run_in_forked_child": "langgraph_effects.testing.scenario",
    "run_scenario": "langgraph_effects.testing.scenario",
    "assert_no_duplicate_effects": "langgraph_effects.testing.assertions",
    "assert_no_unevidenced_rejections": "langgraph_effects.testing.assertions",
    "assert_unknowns_accounted": "langgraph_effects.testing.assertions",
}

__all__ = [
    "AppliedEffect",
    "ChildExit",
    "Clock",
    "CrashMode",
    "CrashPlan",
    "CrashPoint",
    "FakeAPI",
    "FakeCRM",
    "FakeClock",
    "FakeMail",
    "FakeProvider",
    "FakeTicketing",
    "Fault",
    "FaultQueue",
    "InjectedCrash",
    "Kind",
    "LedgerContract",
    "ProviderKind",
    "ProviderStats",
    "ProviderTimeout",
    "Providers",
    "ReviewPolicy",
    "Scenario",
    "ScenarioReport",
    "Schedule",
    "Script",
    "ScriptedChatModel",
    "SlowSibling",
    "SyncFacade",
    "SystemClock",
    "arun_scenario",
    "assert_no_duplicate_effects",
    "assert_no_unevidenced_rejections",
    "assert_unknowns_accounted",
    "builtin_call",
    "confirm_if_seen",
    "control_tools",
    "crash_env",
    "crash_point",
    "defer",
    "effect_tools",
    "make_draft",
    "retry_when_safe",
    "run_in_child",
    "run_in_forked_child",
    "run_scenario",
]


if not TYPE_CHECKING:  # type checkers see the imports above, not a catch-all ``Any``
    __getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


def __dir__() -> list[str]:
    return __all__
