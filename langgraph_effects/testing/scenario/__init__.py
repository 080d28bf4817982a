"""The scenario runner: run a real graph to a crash, resume it, answer reviews, count.

The package, a module a concern: ``tools`` (the providers and tools a scenario acts on),
``policies`` (review policies: the person who answers), ``graph`` (the graphs it runs),
``case`` (``Scenario``), ``requests`` (what the story asks of its driver, and its tally),
``story`` (the scenario's turns), ``count`` (intended against acted, at the providers),
``report`` (``ScenarioReport``), ``run`` (``run_scenario``, ``arun_scenario``),
``schedules`` (``Schedule``, ``Kind``: the seeded draws) and ``kills`` (forked children
that a real kill may end).

A *scenario* is one LangGraph thread: a scripted model proposes some tool calls
(one AIMessage), an ``EffectToolNode`` (or, as a control, a plain ``ToolNode``)
runs them against fake providers, an armed crash point kills the run, one or
several resumers pick the thread up again, and a review policy plays the
person who answers ``interrupt()``s. :func:`run_scenario` then reads the
ledger and the providers and returns a :class:`ScenarioReport`: intents,
effects the providers applied, duplicates, operations left unknown, operations
a person resolved, completion, stale-token refusals, and every *mislabelled*
operation it found (see :mod:`langgraph_effects.testing.assertions`).

Point it at your own effect tools::

    from langgraph_effects import SQLiteLedger
    from langgraph_effects.testing import (
        CrashPoint, FakeClock, FakeCRM, Scenario, confirm_if_seen, run_scenario,
    )

    clock = FakeClock()
    crm = FakeCRM(clock=clock)              # your tools call it
    tools = make_my_tools(crm)              # @effect(...) tools
    with SQLiteLedger.from_conn_string(":memory:", clock=clock.now) as ledger:
        ledger.setup()
        report = run_scenario(
            Scenario(
                tools=tools,
                tool_calls=[{"name": "close_case", "args": {"case_id": "c-1",
                             "resolution": "refunded"}, "id": "call-1"}],
                providers=[crm],
                clock=clock,
                crash_at=CrashPoint.AFTER_PROVIDER,
                policy=confirm_if_seen(lambda request: crm.effects_for(request["target"]) > 0),
            ),
            ledger=ledger,
        )
    assert report.duplicates == 0 and report.mislabelled == 0

Crashes here are in-process (``CrashMode.RAISE``): the crashed worker's lease
is still alive by the clock, so the runner advances the shared ``FakeClock``
past the lease after each crash, as if the worker had been gone that long (a
worker on another host cannot be proven dead; its lease must expire). For real
process kills use :func:`run_in_forked_child` (or ``faults.run_in_child``):
there the dead owner is proven dead and no clock moves.

Built in: :class:`Providers` (a CRM, a mail service and a ticketing system on
one :class:`FakeClock`), :func:`effect_tools` over them (with reconcilers and
provider contracts), :func:`control_tools` (the same calls as plain tools, no
ledger), :func:`builtin_call`, :func:`operator` (a truthful person answering
at random) and :func:`bad_answer`, and :class:`Schedule`: a seeded random
scenario (crash point, provider faults, lagging search, key expiry, revoked
authorization, concurrent resumers, and one :class:`Kind`: review rounds,
approvals, time travel, forks, tenants, re-issued calls, middleware,
subgraphs, ``RetryPolicy``) used by the campaign.

Beyond duplicates and mislabelled operations a report counts **lost
receipts** (an effect the provider applied that the ledger does not record as
confirmed or as an evidenced/pending unknown, or that the model was told was
not carried out), **lost effects** (an intended effect that never acted: the
model told it was done more often than the provider applied it, or the thread
ended with a call never answered) and **violations** (a bad answer accepted or a valid one
refused: with an error, or in words, asked again with a refusal although the ledger still
asked that question; a resume under another tenant not refused, an operation recorded
under a tenant the thread is not bound to, a call repeated on purpose that got
no operation of its own). A person's own decision is theirs: an operator who
rejects what later turns out applied is not counted against the library.
"""

from langgraph_effects.testing.scenario.case import Scenario
from langgraph_effects.testing.scenario.count import _answer_applied as _answer_applied
from langgraph_effects.testing.scenario.count import _count_at_providers as _count_at_providers
from langgraph_effects.testing.scenario.count import _delivered as _delivered
from langgraph_effects.testing.scenario.count import _lost_effects as _lost_effects
from langgraph_effects.testing.scenario.count import _lost_receipts as _lost_receipts
from langgraph_effects.testing.scenario.count import _thread_ops as _thread_ops
from langgraph_effects.testing.scenario.graph import _Script as _Script
from langgraph_effects.testing.scenario.graph import _State as _State
from langgraph_effects.testing.scenario.graph import build_graph
from langgraph_effects.testing.scenario.graph import flaky_tool as flaky_tool
from langgraph_effects.testing.scenario.kills import ForkedChild as ForkedChild
from langgraph_effects.testing.scenario.kills import run_in_forked_child, start_forked_child
from langgraph_effects.testing.scenario.policies import bad_answer as bad_answer
from langgraph_effects.testing.scenario.policies import (
    confirm_if_seen,
    defer,
    operator,
    retry_when_safe,
)
from langgraph_effects.testing.scenario.policies import target_of as target_of
from langgraph_effects.testing.scenario.report import ScenarioReport
from langgraph_effects.testing.scenario.requests import _Invoke as _Invoke
from langgraph_effects.testing.scenario.requests import _Request as _Request
from langgraph_effects.testing.scenario.requests import _Tally as _Tally
from langgraph_effects.testing.scenario.run import arun_scenario, run_scenario
from langgraph_effects.testing.scenario.schedules import DRAWN, Kind, Schedule
from langgraph_effects.testing.scenario.tools import (
    OPERATOR,
    ProviderKind,
    Providers,
    ReviewPolicy,
    builtin_call,
    control_tools,
    effect_tools,
)

__all__ = [
    "DRAWN",
    "OPERATOR",
    "Kind",
    "ProviderKind",
    "Providers",
    "ReviewPolicy",
    "Scenario",
    "ScenarioReport",
    "Schedule",
    "arun_scenario",
    "build_graph",
    "builtin_call",
    "confirm_if_seen",
    "control_tools",
    "defer",
    "effect_tools",
    "operator",
    "retry_when_safe",
    "run_in_forked_child",
    "run_scenario",
    "start_forked_child",
]
