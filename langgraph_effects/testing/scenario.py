"""The scenario runner: run a real graph to a crash, resume it, answer reviews, count.

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
ledger), :func:`builtin_call`, and :class:`Schedule`: a seeded random scenario
(crash point, provider faults, lagging search, key expiry, revoked
authorization, concurrent resumers) used by the campaign.
"""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing
import random
import threading
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, TypeAlias

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from langgraph_effects.core.model import Evidence, Operation, OperationStatus, ProviderContract
from langgraph_effects.effects import EffectContext, EffectTool, effect
from langgraph_effects.ledger.base import DEFAULT_LEASE
from langgraph_effects.node import EffectState, EffectToolNode, route_tool_calls
from langgraph_effects.review import APPROVAL_KIND
from langgraph_effects.testing.assertions import mislabelled_operations
from langgraph_effects.testing.faults import (
    ChildExit,
    CrashMode,
    CrashPlan,
    CrashPoint,
    InjectedCrash,
    _child_main,
    crash_point,
)
from langgraph_effects.testing.providers import (
    FakeClock,
    FakeCRM,
    FakeMail,
    FakeTicketing,
    Fault,
    _FakeProvider,
)

__all__ = [
    "OPERATOR",
    "ProviderKind",
    "Providers",
    "ReviewPolicy",
    "Scenario",
    "ScenarioReport",
    "Schedule",
    "builtin_call",
    "build_graph",
    "confirm_if_seen",
    "control_tools",
    "defer",
    "effect_tools",
    "retry_when_safe",
    "run_in_forked_child",
    "arun_scenario",
    "run_scenario",
]

S = OperationStatus
OPERATOR = "harness-operator"
"""The ``by`` of every answer the built-in review policies give."""

ReviewPolicy: TypeAlias = Callable[[dict[str, Any]], "dict[str, Any] | None"]
"""Given an interrupt value (a review or approval request), the answer, or None to leave it."""

RETENTION = timedelta(hours=24)
"""Idempotency-key retention of the built-in CRM and mail fakes (Stripe's 24 h)."""

# Built-in contracts: keys for 24 h (the providers' retention), a status lookup,
# and transient retries that never sleep (the fakes answer retry_after=0 in
# schedules; a longer retry_after releases the operation, as in production).
_KEYED = ProviderContract(
    idempotency_window=RETENTION,
    status_lookup=True,
    backoff_initial=0.0,
    backoff_max=0.0,
)
_NO_KEY = ProviderContract(backoff_initial=0.0, backoff_max=0.0)


# --------------------------------------------------------------------------- providers


class ProviderKind(StrEnum):
    """The three provider shapes of the seeds, from safest to most dangerous."""

    CRM = "crm"
    """Idempotency key + strongly consistent status lookup."""
    MAIL = "mail"
    """Idempotency key + an eventually consistent Sent search ("accepted" is not "delivered")."""
    TICKETING = "ticketing"
    """No key, no lookup: only a person can resolve an unknown."""


_ACTIONS = {
    "crm.close_case": ProviderKind.CRM,
    "mail.send": ProviderKind.MAIL,
    "ticketing.create": ProviderKind.TICKETING,
}


@dataclass(eq=False)
class Providers:
    """A CRM, a mail service and a ticketing system on one clock, and an authorization flag.

    ``authorized`` is what the built-in tools' ``authorize`` hook answers (when
    built with ``authorize=True``); set it False to revoke. Provider-side
    revocation is ``provider.revoke_authorization()``.
    """

    clock: FakeClock
    crm: FakeCRM
    mail: FakeMail
    ticketing: FakeTicketing
    authorized: bool = True

    @classmethod
    def open(
        cls,
        directory: str | Path | None = None,
        *,
        clock: FakeClock | None = None,
        search_delay: timedelta = timedelta(0),
    ) -> Providers:
        """Fakes in ``directory`` (files: counts survive process kills) or in memory (None)."""
        base = Path(directory) if directory is not None else None

        def at(name: str) -> Path | None:
            return None if base is None else base / f"{name}.db"

        if clock is None:
            clock = FakeClock(path=at("clock"))
        return cls(
            clock=clock,
            crm=FakeCRM(at("crm"), clock=clock, retention=RETENTION),
            mail=FakeMail(at("mail"), clock=clock, retention=RETENTION, search_delay=search_delay),
            ticketing=FakeTicketing(at("ticketing"), clock=clock),
        )

    def __getitem__(self, kind: ProviderKind) -> _FakeProvider:
        return {
            ProviderKind.CRM: self.crm,
            ProviderKind.MAIL: self.mail,
            ProviderKind.TICKETING: self.ticketing,
        }[ProviderKind(kind)]

    @property
    def all(self) -> list[_FakeProvider]:
        return [self.crm, self.mail, self.ticketing]

    def applied(self, op: Operation) -> int | None:
        """Ground truth: effects the provider applied for a built-in operation (None: not ours).

        CRM and mail match by target and idempotency key; ticketing has no key,
        so by title (the built-in calls give every intent its own title).
        """
        kind = _ACTIONS.get(op.action)
        if kind is None or op.target is None:
            return None
        key = None if kind is ProviderKind.TICKETING else op.idempotency_key
        return self[kind].effects_for(op.target, idempotency_key=key)

    def shows(self, request: Mapping[str, Any]) -> bool:
        """What an operator sees in the provider's own console for a review request."""
        kind = _ACTIONS.get(str(request.get("action")))
        target = request.get("target")
        if kind is None or target is None:
            return False
        key = None if kind is ProviderKind.TICKETING else request.get("idempotency_key")
        return self[kind].effects_for(str(target), idempotency_key=key) > 0

    def close(self) -> None:
        for provider in self.all:
            provider.close()
        self.clock.close()


def effect_tools(
    providers: Providers, *, authorize: bool = False, key_window: timedelta = RETENTION
) -> list[EffectTool]:
    """``close_case`` (CRM), ``send_mail`` and ``create_ticket`` as effect tools.

    CRM and mail pass the operation's idempotency key and declare a 24 h key
    contract and a reconciler: the CRM's lookup is conclusive when the case was
    closed under our key; the mail search is conclusive only when the message
    is already visible (an empty search proves nothing). Ticketing declares
    neither: its unknowns go to a person. ``authorize=True`` adds a hook that
    answers ``providers.authorized``. ``key_window`` is the key window the CRM
    and mail contracts declare (shorter than the providers' retention is
    conservative; zero makes every unresolved unknown go to review).
    """
    crm, mail, tickets = providers.crm, providers.mail, providers.ticketing

    def authorized(ctx: EffectContext) -> bool:
        return providers.authorized

    hook = authorized if authorize else None
    keyed = _KEYED.model_copy(update={"idempotency_window": key_window})

    def find_closure(op: Operation) -> Evidence:
        case = crm.get_case(str(op.target))
        if case["status"] == "closed" and case["closed_by"] == op.idempotency_key:
            return Evidence.confirmed(
                "the CRM shows the case closed under our key",
                result={k: case[k] for k in ("case_id", "status", "resolution", "version")}
                | {"closed_by": case["closed_by"]},
                provider_result_id=f"{case['case_id']}@{case['version']}",
                source="crm.get_case",
            )
        return Evidence.inconclusive("the CRM shows no close under our key", source="crm.get_case")

    def find_message(op: Operation) -> Evidence:
        found = mail.search(idempotency_key=op.idempotency_key)
        if found:
            message = found[0]
            return Evidence.confirmed(
                "the Sent search shows the message",
                result={"message_id": message["message_id"], "status": "accepted"},
                provider_result_id=message["message_id"],
                source="mail.search",
            )
        return Evidence.inconclusive(
            "not in the Sent search (it lags: absence proves nothing)", source="mail.search"
        )

    @effect(
        "crm.close_case",
        target=lambda a: a["case_id"],
        contract=keyed,
        reconcile=find_closure,
        authorize=hook,
    )
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case with a resolution."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    @effect(
        "mail.send",
        target=lambda a: a["to"],
        contract=keyed,
        reconcile=find_message,
        authorize=hook,
    )
    def send_mail(to: str, subject: str, body: str, ctx: EffectContext) -> dict[str, Any]:
        """Send an e-mail."""
        return mail.send(to, subject, body, idempotency_key=ctx.idempotency_key)

    @effect("ticketing.create", target=lambda a: a["title"], contract=_NO_KEY, authorize=hook)
    def create_ticket(title: str, body: str) -> dict[str, Any]:
        """Open a ticket."""
        return tickets.create_ticket(title, body)

    return [close_case, send_mail, create_ticket]


def control_tools(providers: Providers) -> list[BaseTool]:
    """The same three calls as plain tools: what a ``ToolNode`` user has without a ledger.

    No idempotency key (without a ledger nothing stable derives one). Each calls
    ``crash_point(AFTER_CLAIM)`` before the provider and ``AFTER_PROVIDER``
    after it, so a schedule's crash lands at the same place as under the node.
    """
    crm, mail, tickets = providers.crm, providers.mail, providers.ticketing

    def around(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        crash_point(CrashPoint.AFTER_CLAIM)
        result = call()
        crash_point(CrashPoint.AFTER_PROVIDER)
        return result

    @tool
    def close_case(case_id: str, resolution: str) -> dict[str, Any]:
        """Close a CRM case with a resolution."""
        return around(lambda: crm.close_case(case_id, resolution))

    @tool
    def send_mail(to: str, subject: str, body: str) -> dict[str, Any]:
        """Send an e-mail."""
        return around(lambda: mail.send(to, subject, body))

    @tool
    def create_ticket(title: str, body: str) -> dict[str, Any]:
        """Open a ticket."""
        return around(lambda: tickets.create_ticket(title, body))

    return [close_case, send_mail, create_ticket]


def builtin_call(kind: ProviderKind, n: int, *, tag: str) -> dict[str, Any]:
    """The ``n``-th tool call of a scenario tagged ``tag``: its own target and payload."""
    call_id = f"call-{tag}-{n}"
    if kind is ProviderKind.CRM:
        args: dict[str, Any] = {"case_id": f"case-{tag}-{n}", "resolution": f"resolved {n}"}
        name = "close_case"
    elif kind is ProviderKind.MAIL:
        args = {"to": f"user{n}@{tag}.example", "subject": f"case {n}", "body": f"hello {n}"}
        name = "send_mail"
    else:
        args = {"title": f"ticket {tag} {n}", "body": f"please look at {n}"}
        name = "create_ticket"
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


# --------------------------------------------------------------------------- review policies


def _approve(request: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "operation_id": request["operation_id"],
        "decision": "approve",
        "by": OPERATOR,
        "reason": "approved by the scenario",
    }


def confirm_if_seen(seen: Callable[[dict[str, Any]], bool], *, by: str = OPERATOR) -> ReviewPolicy:
    """A careful operator: confirm when the provider shows the effect, reject when it does not.

    ``seen(request)`` looks at the provider (``Providers.shows`` for the
    built-ins). Approval requests are approved.
    """

    def policy(request: dict[str, Any]) -> dict[str, Any] | None:
        if request.get("kind") == APPROVAL_KIND:
            return _approve(request)
        shown = seen(request)
        return {
            "operation_id": request["operation_id"],
            "decision": "confirm" if shown else "reject",
            "by": by,
            "reason": "seen at the provider" if shown else "not found at the provider",
        }

    return policy


def retry_when_safe(fallback: ReviewPolicy, *, by: str = OPERATOR) -> ReviewPolicy:
    """Order a retry when the request says the provider would deduplicate it; else ``fallback``."""

    def policy(request: dict[str, Any]) -> dict[str, Any] | None:
        risk = request.get("retry_risk") or {}
        if (
            request.get("kind") != APPROVAL_KIND
            and "retry" in request.get("allowed_decisions", ())
            and risk.get("key_window_open")
        ):
            return {
                "operation_id": request["operation_id"],
                "decision": "retry",
                "by": by,
                "reason": "the provider deduplicates by key",
            }
        return fallback(request)

    return policy


def defer(request: dict[str, Any]) -> dict[str, Any] | None:
    """Nobody answers: the operation stays ``unknown``, pending review."""
    return None


# --------------------------------------------------------------------------- the graph


class _State(MessagesState, EffectState):
    pass


def build_graph(
    tools: Sequence[BaseTool],
    tool_calls: Sequence[Mapping[str, Any]],
    *,
    ledger: Any = None,
    checkpointer: Any = None,
    control: bool = False,
    node_kwargs: Mapping[str, Any] | None = None,
) -> Any:
    """agent -> tools -> agent, where the agent is a script: it proposes ``tool_calls`` once.

    The script answers from the conversation alone (same ids every time), so a
    fresh process rebuilds the same graph and resumes the thread. ``control``
    builds the stock setup: ``ToolNode`` + ``tools_condition``; otherwise
    ``EffectToolNode`` (with ``node_kwargs``) + ``route_tool_calls``.
    """
    proposal = [dict(tc) for tc in tool_calls]

    def agent(state: _State) -> dict[str, list[AnyMessage]]:
        if isinstance(state["messages"][-1], HumanMessage):
            return {"messages": [AIMessage(content="", tool_calls=proposal, id="ai-proposal")]}
        return {"messages": [AIMessage(content="done", id="ai-done")]}

    node: ToolNode = (
        ToolNode(list(tools))
        if control
        else EffectToolNode(list(tools), ledger=ledger, **dict(node_kwargs or {}))
    )
    builder = StateGraph(_State)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    router: Callable[..., Any] = tools_condition if control else route_tool_calls
    builder.add_conditional_edges("agent", router, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(
        checkpointer=checkpointer if checkpointer is not None else InMemorySaver()
    )


# --------------------------------------------------------------------------- the report


@dataclass(frozen=True, slots=True, kw_only=True)
class ScenarioReport:
    """What one scenario (or, summed with ``+``, a batch of them) did.

    Attributes:
        scenario: a label.
        runs: scenarios summed into this report.
        intents: tool calls the model proposed (one intent each).
        effects: effects the providers applied.
        duplicates: applied effects beyond the first per intent (providers' count).
        unknown: operations left ``unknown`` at the end.
        human_resolved: operations a person (the review policy, an operator) decided.
        completed: runs whose thread finished with every operation terminal.
        stale_token_refusals: fenced writes the ledger refused (a late worker).
        mislabelled: operations whose record contradicts the provider or the rules.
        crashes: injected crashes that struck.
        errors: runs that failed with another exception (a resume may finish them).
        problems: one line per mislabelled operation or duplicate, for the failure message.
    """

    scenario: str = ""
    runs: int = 1
    intents: int = 0
    effects: int = 0
    duplicates: int = 0
    unknown: int = 0
    human_resolved: int = 0
    completed: int = 0
    stale_token_refusals: int = 0
    mislabelled: int = 0
    crashes: int = 0
    errors: int = 0
    problems: tuple[str, ...] = ()

    @property
    def completion_rate(self) -> float:
        return self.completed / self.runs if self.runs else 1.0

    def __add__(self, other: ScenarioReport) -> ScenarioReport:
        counts = {
            f.name: getattr(self, f.name) + getattr(other, f.name)
            for f in fields(self)
            if f.name != "scenario"
        }
        return ScenarioReport(scenario=self.scenario or other.scenario, **counts)

    @classmethod
    def empty(cls, scenario: str = "") -> ScenarioReport:
        return cls(scenario=scenario, runs=0)


# --------------------------------------------------------------------------- the scenario


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One thread's story: what the model proposes, where it crashes, who resumes, who answers.

    Args:
        tools: effect tools (or, with ``control``, plain tools) as given to the node.
        tool_calls: the tool calls the scripted model proposes in one AIMessage
            (``{"name", "args", "id"}``; fixed ids).
        providers: the fake providers the tools call: effects and duplicates are counted there.
        clock: the ``FakeClock`` shared by providers, ledger and node; advanced past
            the lease after each in-process crash.
        crash_at: arm this point (``RAISE``) for the whole scenario; it fires once.
        crash_hit: crash on the ``hit``-th reach of the point.
        resumers: how many resumers pick the thread up at once after the first run.
        policy: answers review and approval interrupts; None answers leave them pending.
        between: called after the first run, before the resumers (revoke, expire keys...).
        applied: ground truth, effects the provider applied for an operation
            (None: unknown to the harness); enables the provider-side mislabel checks.
        control: run the tools in a plain ``ToolNode`` (no ledger).
        asynchronous: drive the graph with ``ainvoke`` (the ledger may be async).
        thread_id: the LangGraph thread (and the operations' tenant).
        lease_for: the node's lease.
        interrupt_on_unknown: as for ``EffectToolNode``.
        max_rounds: resume/answer rounds after the first run before giving up.
        name: a label for the report.
    """

    tools: Sequence[BaseTool]
    tool_calls: Sequence[Mapping[str, Any]]
    providers: Sequence[_FakeProvider]
    clock: FakeClock | None = None
    crash_at: CrashPoint | None = None
    crash_hit: int = 1
    resumers: int = 1
    policy: ReviewPolicy = defer
    between: Callable[[], None] | None = None
    applied: Callable[[Operation], int | None] | None = None
    control: bool = False
    asynchronous: bool = False
    thread_id: str = "scenario"
    lease_for: timedelta = DEFAULT_LEASE
    interrupt_on_unknown: bool = True
    max_rounds: int = 8
    fresh: bool = True
    """Start the thread; False: it was started elsewhere (a killed process), only resume it."""
    name: str = "scenario"


@dataclass(frozen=True, slots=True)
class _Invoke:
    inputs: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class _GetState:
    pass


@dataclass(frozen=True, slots=True)
class _LedgerCall:
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


_Request = _Invoke | _GetState | _LedgerCall


@dataclass(slots=True)
class _Tally:
    crashes: int = 0
    errors: int = 0
    pending: set[str] = field(default_factory=set)


def _story(sc: Scenario, tally: _Tally) -> Generator[_Request, Any, ScenarioReport]:
    """The scenario as a generator of requests (the sync and async drivers run it).

    First run (unless ``fresh`` is False), ``between``, the resumers at once,
    then rounds of: answer pending interrupts by the policy, or resume a run
    that failed, until the thread ends, only deferred reviews remain, or
    ``max_rounds`` pass. After every injected crash the clock passes the lease.
    """

    def settle(outcomes: list[BaseException | None]) -> None:
        for outcome in outcomes:
            if outcome is None:
                continue
            if isinstance(outcome, InjectedCrash):
                tally.crashes += 1
            else:
                tally.errors += 1
            if sc.clock is not None:
                # The failed worker is "gone": let its lease expire (see module doc).
                # An async crash can leave a sibling call's lease behind too (its
                # task is cancelled mid-dispatch), so any failure moves the clock.
                sc.clock.advance(sc.lease_for + timedelta(seconds=1))

    if sc.fresh:
        first = {"messages": [HumanMessage(content="go", id="human")]}
        settle((yield _Invoke((first,))))
        if sc.between is not None:
            sc.between()
    settle((yield _Invoke((None,) * max(1, sc.resumers))))
    finished = False
    for _ in range(sc.max_rounds):
        state = yield _GetState()
        if state.interrupts:
            answers = {}
            tally.pending.clear()
            for pending in state.interrupts:
                answer = sc.policy(pending.value)
                if answer is None:
                    tally.pending.add(str(pending.value.get("operation_id")))
                else:
                    answers[pending.id] = answer
            if not answers:
                break
            settle((yield _Invoke((Command(resume=answers),))))
        elif state.next:
            settle((yield _Invoke((None,))))
        else:
            finished = True
            break
    CrashPlan.disarm()  # counting must not crash
    return (yield from _count(sc, tally, finished=finished))


def _count(
    sc: Scenario, tally: _Tally, *, finished: bool
) -> Generator[_Request, Any, ScenarioReport]:
    effects = sum(p.effects for p in sc.providers)
    duplicates = sum(p.duplicates for p in sc.providers)
    problems: list[str] = []
    if duplicates:
        problems.append(f"{sc.name}: {duplicates} duplicate effect(s) at the providers")
    if sc.control:
        return ScenarioReport(
            scenario=sc.name,
            intents=len(sc.tool_calls),
            effects=effects,
            duplicates=duplicates,
            completed=int(finished),
            crashes=tally.crashes,
            errors=tally.errors,
            problems=tuple(problems),
        )
    ops: list[Operation] = yield _LedgerCall(
        "list", (), {"tenant_id": sc.thread_id, "limit": 10_000}
    )
    histories = {}
    for op in ops:
        histories[op.operation_id] = yield _LedgerCall(
            "events", (sc.thread_id, op.operation_id), {}
        )
    wrong = mislabelled_operations(ops, histories, pending_review=tally.pending, applied=sc.applied)
    problems.extend(f"{sc.name}: {line}" for line in wrong)
    stats = yield _LedgerCall("stats", (), {"tenant_id": sc.thread_id})
    human = sum(
        1
        for events in histories.values()
        if any(
            e.to_status.terminal and e.evidence is not None and e.evidence.source == "operator"
            for e in events
        )
    )
    settled = all(op.status.terminal for op in ops)
    return ScenarioReport(
        scenario=sc.name,
        intents=len(sc.tool_calls),
        effects=effects,
        duplicates=duplicates,
        unknown=sum(1 for op in ops if op.status is S.UNKNOWN),
        human_resolved=human,
        completed=int(finished and settled and len(ops) >= len(sc.tool_calls)),
        stale_token_refusals=stats.stale_token_refusals,
        mislabelled=len(wrong),
        crashes=tally.crashes,
        errors=tally.errors,
        problems=tuple(problems),
    )


def run_scenario(sc: Scenario, *, ledger: Any = None, checkpointer: Any = None) -> ScenarioReport:
    """Run ``sc`` to its crash, resume it, answer its reviews, and report.

    Args:
        sc: the scenario. With ``sc.asynchronous`` the graph runs under
            ``asyncio.run`` (use :func:`arun_scenario` inside a running loop).
        ledger: the ledger the node uses (sync, or async with ``asynchronous``);
            ignored for a control. Give each scenario its own ``thread_id``: the
            report reads the operations of tenant ``thread_id``.
        checkpointer: LangGraph's saver (default: a fresh ``InMemorySaver``).

    Returns:
        The report; ``problems`` lists every duplicate and mislabelled operation.
    """
    if sc.asynchronous:
        return asyncio.run(arun_scenario(sc, ledger=ledger, checkpointer=checkpointer))
    graph, config, story = _start(sc, ledger, checkpointer)
    with _armed(sc):
        return _drive_sync(story, graph, config, ledger)


async def arun_scenario(
    sc: Scenario, *, ledger: Any = None, checkpointer: Any = None
) -> ScenarioReport:
    """:func:`run_scenario` inside a running event loop (``ainvoke``; sync or async ledger)."""
    graph, config, story = _start(sc, ledger, checkpointer)
    with _armed(sc):
        return await _drive_async(story, graph, config, ledger)


def _start(
    sc: Scenario, ledger: Any, checkpointer: Any
) -> tuple[Any, dict[str, Any], Generator[_Request, Any, ScenarioReport]]:
    node_kwargs: dict[str, Any] = {
        "tenant_id": sc.thread_id,
        "lease_for": sc.lease_for,
        "interrupt_on_unknown": sc.interrupt_on_unknown,
    }
    if sc.clock is not None:
        node_kwargs["clock"] = sc.clock.now
    graph = build_graph(
        sc.tools,
        sc.tool_calls,
        ledger=ledger,
        checkpointer=checkpointer,
        control=sc.control,
        node_kwargs=node_kwargs,
    )
    config: dict[str, Any] = {"configurable": {"thread_id": sc.thread_id}}
    return graph, config, _story(sc, _Tally())


@contextmanager
def _armed(sc: Scenario) -> Iterator[None]:
    """Arm the scenario's crash (RAISE) for its whole run; disarm after."""
    if sc.crash_at is None:
        yield
        return
    with CrashPlan.arm(sc.crash_at, CrashMode.RAISE, hit=sc.crash_hit):
        yield


def _outcome(fn: Callable[[], Any]) -> BaseException | None:
    try:
        fn()
    except (InjectedCrash, Exception) as exc:
        return exc
    return None


def _drive_sync(
    story: Generator[_Request, Any, ScenarioReport], graph: Any, config: dict[str, Any], ledger: Any
) -> ScenarioReport:
    value: Any = None
    while True:
        try:
            request = story.send(value)
        except StopIteration as stop:
            report: ScenarioReport = stop.value
            return report
        match request:
            case _Invoke(inputs) if len(inputs) == 1:
                value = [_outcome(lambda: graph.invoke(inputs[0], config))]
            case _Invoke(inputs):
                outcomes: list[BaseException | None] = [None] * len(inputs)

                def resume(i: int, item: Any, out: list[BaseException | None]) -> None:
                    out[i] = _outcome(lambda: graph.invoke(item, config))

                threads = [
                    threading.Thread(target=resume, args=(i, item, outcomes))
                    for i, item in enumerate(inputs)
                ]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                value = outcomes
            case _GetState():
                value = graph.get_state(config)
            case _LedgerCall(method, args, kwargs):
                value = getattr(ledger, method)(*args, **kwargs)


async def _drive_async(
    story: Generator[_Request, Any, ScenarioReport], graph: Any, config: dict[str, Any], ledger: Any
) -> ScenarioReport:
    async def outcome(item: Any) -> BaseException | None:
        try:
            await graph.ainvoke(item, config)
        except (InjectedCrash, Exception) as exc:
            return exc
        return None

    value: Any = None
    while True:
        try:
            request = story.send(value)
        except StopIteration as stop:
            report: ScenarioReport = stop.value
            return report
        match request:
            case _Invoke(inputs):
                value = list(await asyncio.gather(*(outcome(item) for item in inputs)))
            case _GetState():
                value = await graph.aget_state(config)
            case _LedgerCall(method, args, kwargs):
                value = getattr(ledger, method)(*args, **kwargs)
                if inspect.isawaitable(value):
                    value = await value


# --------------------------------------------------------------------------- schedules


Revocation = Literal["none", "provider", "hook"]
PolicyName = Literal["confirm_if_seen", "retry_when_safe", "defer"]

_POINTS = tuple(CrashPoint)
_FAULTS = (
    None,
    None,
    Fault.LOSE_RESPONSE,
    Fault.LOSE_RESPONSE,
    Fault.LOSE_REQUEST,
    Fault.TRANSIENT,
    Fault.REJECT,
    Fault.LATE,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """One seeded random scenario over the built-in providers (see :meth:`generate`).

    Everything derives from ``seed``: ``Schedule.generate(seed)`` is the same
    schedule on every machine, so a failing one replays from its seed alone.
    """

    seed: int
    calls: tuple[ProviderKind, ...]
    faults: tuple[Fault | None, ...]
    """One scripted fault per call, aimed at its provider's next effect call."""
    transient_retry_after: float
    crash_at: CrashPoint | None
    crash_hit: int
    search_delay: bool
    """The mail search lags an hour: the reconciler sees nothing for a while."""
    late_lands: bool
    """Advance the clock past a LATE request's delay before resuming."""
    expire_keys: bool
    """Advance the clock past the key retention before resuming."""
    revoke: Revocation
    resumers: int
    asynchronous: bool
    policy: PolicyName

    @classmethod
    def generate(cls, seed: int) -> Schedule:
        """The schedule of ``seed`` (a seeded ``random.Random``; no global state)."""
        rng = random.Random(seed)
        calls = tuple(rng.choice(list(ProviderKind)) for _ in range(rng.choice((1, 1, 2, 3))))
        return cls(
            seed=seed,
            calls=calls,
            faults=tuple(rng.choice(_FAULTS) for _ in calls),
            transient_retry_after=rng.choice((0.0, 0.0, 5.0)),
            crash_at=rng.choice((None, *_POINTS, *_POINTS)),
            crash_hit=rng.choice((1, 1, 1, 2)),
            search_delay=rng.random() < 0.3,
            late_lands=rng.random() < 0.5,
            expire_keys=rng.random() < 0.15,
            revoke=rng.choice(("none",) * 6 + ("provider", "hook")),
            resumers=rng.choice((1, 1, 1, 2, 3)),
            asynchronous=rng.random() < 0.25,
            policy=rng.choice(("confirm_if_seen", "retry_when_safe", "retry_when_safe", "defer")),
        )

    def control_crash(self) -> CrashPoint | None:
        """Where the crash lands in a control's tool (before or after the provider call)."""
        if self.crash_at in (
            CrashPoint.BEFORE_PREPARE,
            CrashPoint.AFTER_PREPARE,
            CrashPoint.AFTER_CLAIM,
        ):
            return CrashPoint.AFTER_CLAIM
        if self.crash_at in (CrashPoint.AFTER_PROVIDER, CrashPoint.AFTER_RECEIPT):
            return CrashPoint.AFTER_PROVIDER
        return None  # reconciliation and review do not exist without a ledger

    def scenario(self, providers: Providers, *, control: bool = False) -> Scenario:
        """The :class:`Scenario` of this schedule over ``providers`` (fresh ones per run)."""
        tag = f"s{self.seed}"
        for kind in ProviderKind:
            script = [f for k, f in zip(self.calls, self.faults, strict=True) if k is kind]
            for fault in script:
                providers[kind].faults.push(
                    Fault.NONE if fault is None else fault,
                    retry_after=self.transient_retry_after,
                    delay=timedelta(minutes=10),
                )

        def between() -> None:
            if self.late_lands:
                providers.clock.advance(timedelta(minutes=11))
            if self.expire_keys:
                providers.clock.advance(RETENTION + timedelta(hours=1))
            if self.revoke == "provider":
                for provider in providers.all:
                    provider.revoke_authorization()
            elif self.revoke == "hook":
                providers.authorized = False

        careful = confirm_if_seen(providers.shows)
        policy: ReviewPolicy = {
            "confirm_if_seen": careful,
            "retry_when_safe": retry_when_safe(careful),
            "defer": defer,
        }[self.policy]
        return Scenario(
            tools=control_tools(providers)
            if control
            else effect_tools(providers, authorize=self.revoke == "hook"),
            tool_calls=[builtin_call(k, n, tag=tag) for n, k in enumerate(self.calls)],
            providers=providers.all,
            clock=providers.clock,
            crash_at=self.control_crash() if control else self.crash_at,
            crash_hit=self.crash_hit,
            resumers=self.resumers,
            policy=policy,
            between=between,
            applied=providers.applied,
            control=control,
            asynchronous=self.asynchronous and not control,
            thread_id=tag,
            # Short in real time: a resumer meeting a lease left by a cancelled
            # sibling waits at most this long before it reports LeaseHeld.
            lease_for=timedelta(seconds=0.5),
            name=f"schedule {self.seed}",
        )

    def with_(self, **changes: Any) -> Schedule:
        """A copy with some fields changed (to pin a dimension in a test)."""
        return replace(self, **changes)


# --------------------------------------------------------------------------- real kills


_forkserver_ready = False


def run_in_forked_child(
    fn: Callable[..., Any],
    *args: Any,
    crash_at: CrashPoint | None = None,
    mode: CrashMode | str = CrashMode.EXIT,
    hit: int = 1,
    timeout: float = 120.0,
) -> ChildExit:
    """``faults.run_in_child``, but forked from a server that already imported LangGraph.

    A spawned child pays 1-2 s importing LangGraph; a ``forkserver`` child is
    forked from a server process that preloaded this module, so it starts in
    milliseconds and is still a fresh process (new pid, nothing of the
    parent's connections or threads). Same contract as ``run_in_child``.
    """
    global _forkserver_ready
    ctx = multiprocessing.get_context("forkserver")
    if not _forkserver_ready:
        ctx.set_forkserver_preload([__name__])
        _forkserver_ready = True
    receiver, sender = ctx.Pipe(duplex=False)
    plan = None if crash_at is None else (CrashPoint(crash_at), CrashMode(mode), hit)
    process = ctx.Process(target=_child_main, args=(sender, fn, args, plan))
    process.start()
    sender.close()
    messages: list[tuple[str, Any]] = []
    try:
        while receiver.poll(timeout):
            messages.append(receiver.recv())
    except EOFError:
        pass
    finally:
        receiver.close()
    process.join(timeout)
    if process.exitcode is None:
        process.kill()
        process.join()
        raise TimeoutError(f"child running {fn!r} did not finish within {timeout}s")
    found = dict(messages)
    crashed = found.get("crashed")
    return ChildExit(
        exitcode=process.exitcode,
        crashed_at=None if crashed is None else CrashPoint(crashed),
        value=found.get("value"),
        error=found.get("error"),
    )
