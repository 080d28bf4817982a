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
refused, a resume under another tenant not refused, an operation recorded
under a tenant the thread is not bound to, a call repeated on purpose that got
no operation of its own). A person's own decision is theirs: an operator who
rejects what later turns out applied is not counted against the library.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import multiprocessing
import random
import threading
from collections import Counter
from collections.abc import Callable, Collection, Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, TypeAlias

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, RetryPolicy

from langgraph_effects.core.model import (
    Evidence,
    Operation,
    OperationEvent,
    OperationKey,
    OperationStatus,
    ProviderContract,
)
from langgraph_effects.decide.answers import answer_digest
from langgraph_effects.decide.loop import _REPLACED
from langgraph_effects.decide.messages import TRACE_KEY
from langgraph_effects.decide.thread import durability_chosen
from langgraph_effects.effects import EffectContext, EffectTool, effect
from langgraph_effects.errors import InvalidInput
from langgraph_effects.ledger.base import DEFAULT_LEASE, AsyncLedger, Ledger
from langgraph_effects.node import EffectState, EffectToolNode, route_tool_calls
from langgraph_effects.review import APPROVAL_KIND
from langgraph_effects.testing.assertions import mislabelled_operations
from langgraph_effects.testing.draws import (
    VARIANTS,
    Shape,
    Variant,
    branch_targets,
    build_shape,
    index_ids,
    queued_reviews,
    stateless_story,
)
from langgraph_effects.testing.faults import (
    ChildExit,
    CrashMode,
    CrashPlan,
    CrashPoint,
    InjectedCrash,
    _child_main,
    crash_point,
    scaled,
)
from langgraph_effects.testing.mcp_server import READ_ONLY, SERVER, mcp_tools
from langgraph_effects.testing.models import ScriptedChatModel
from langgraph_effects.testing.providers import (
    FakeClock,
    FakeCRM,
    FakeMail,
    FakeProvider,
    FakeTicketing,
    Fault,
)
from langgraph_effects.testing.workflows import LAYOUTS, ORIGIN, Layout, build_workflow

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


_MCP_ACTIONS = {
    f"{SERVER}.close_case": ProviderKind.CRM,
    f"{SERVER}.send_mail": ProviderKind.MAIL,
    f"{SERVER}.create_ticket": ProviderKind.TICKETING,
}
"""The effects of the in-process MCP server (``testing.mcp_server``): no key reaches the fakes."""
_ACTIONS = {
    "crm.close_case": ProviderKind.CRM,
    "mail.send": ProviderKind.MAIL,
    "ticketing.create": ProviderKind.TICKETING,
    **_MCP_ACTIONS,
}
_KEYLESS = frozenset({"ticketing.create", *_MCP_ACTIONS})
_SERVER_IDEMPOTENT = frozenset({f"{SERVER}.close_case"})
"""Actions the server itself makes idempotent (``testing.mcp_server``): a repeat acts once."""
"""Actions whose effects the providers count by target alone (no idempotency key reaches them)."""


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

    def __getitem__(self, kind: ProviderKind) -> FakeProvider:
        return {
            ProviderKind.CRM: self.crm,
            ProviderKind.MAIL: self.mail,
            ProviderKind.TICKETING: self.ticketing,
        }[ProviderKind(kind)]

    @property
    def all(self) -> list[FakeProvider]:
        """The three fake providers, CRM, mail and ticketing, in that order."""
        return [self.crm, self.mail, self.ticketing]

    def applied(self, op: Operation) -> int | None:
        """Ground truth: effects the provider applied for a built-in operation (None: not ours).

        CRM and mail match by target and idempotency key; ticketing has no key,
        so by title (the built-in calls give every intent its own title), and an MCP
        tool's effect by its target (MCP carries no key).
        """
        kind = _ACTIONS.get(op.action)
        if kind is None or op.target is None:
            return None
        key = None if op.action in _KEYLESS else op.idempotency_key
        return self[kind].effects_for(op.target, idempotency_key=key)

    def shows(self, request: Mapping[str, Any]) -> bool:
        """What an operator sees in the provider's own console for a review request."""
        action = str(request.get("action"))
        kind = _ACTIONS.get(action)
        target = request.get("target")
        if kind is None or target is None:
            return False
        key = None if action in _KEYLESS else request.get("idempotency_key")
        return self[kind].effects_for(str(target), idempotency_key=key) > 0

    def close(self) -> None:
        """Close every provider and the shared clock."""
        for provider in self.all:
            provider.close()
        self.clock.close()


def effect_tools(
    providers: Providers,
    *,
    authorize: bool = False,
    key_window: timedelta = RETENTION,
    require_approval: bool = False,
    pause: Callable[[str, str], None] | None = None,
    payload_key: Sequence[str] | None = None,
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
    ``require_approval`` asks a person before each first dispatch. ``pause``,
    if given, is called with the action and ``"before"`` / ``"after"`` around
    each provider call (a test freezes or blocks the worker there).
    ``payload_key``: keep only keyed digests (``store_payload=False``) under these keys,
    the current one first.
    """
    crm, mail, tickets = providers.crm, providers.mail, providers.ticketing

    def around(action: str, call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        if pause is not None:
            pause(action, "before")
        result = call()
        if pause is not None:
            pause(action, "after")
        return result

    def authorized(ctx: EffectContext) -> bool:
        return providers.authorized

    hook = authorized if authorize else None
    keyed = _KEYED.model_copy(update={"idempotency_window": key_window})
    digests: dict[str, Any] = (
        {} if payload_key is None else {"store_payload": False, "payload_key": list(payload_key)}
    )

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
        require_approval=require_approval,
        **digests,
    )
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case with a resolution."""
        return around(
            "crm.close_case",
            lambda: crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key),
        )

    @effect(
        "mail.send",
        target=lambda a: a["to"],
        contract=keyed,
        reconcile=find_message,
        authorize=hook,
        require_approval=require_approval,
        **digests,
    )
    def send_mail(to: str, subject: str, body: str, ctx: EffectContext) -> dict[str, Any]:
        """Send an e-mail."""
        return around(
            "mail.send", lambda: mail.send(to, subject, body, idempotency_key=ctx.idempotency_key)
        )

    @effect(
        "ticketing.create",
        target=lambda a: a["title"],
        contract=_NO_KEY,
        authorize=hook,
        require_approval=require_approval,
        **digests,
    )
    def create_ticket(title: str, body: str) -> dict[str, Any]:
        """Open a ticket."""
        return around("ticketing.create", lambda: tickets.create_ticket(title, body))

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


def target_of(call: Mapping[str, Any]) -> str | None:
    """The provider-side target of a built-in tool call (what its effects are counted by)."""
    args = call.get("args") or {}
    field_name = {"close_case": "case_id", "send_mail": "to", "create_ticket": "title"}.get(
        str(call.get("name"))
    )
    return None if field_name is None else args.get(field_name)


def edited_args(tool_name: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """A reviewer's edit of a built-in call: another payload (a ticket also gets another title)."""
    if tool_name == "close_case":
        return {**args, "resolution": f"{args['resolution']} (edited)"}
    if tool_name == "send_mail":
        return {**args, "body": f"{args['body']} (edited)"}
    return {**args, "title": f"{args['title']} (edited)"}


def operator(
    providers: Providers,
    rng: random.Random,
    *,
    by: str = OPERATOR,
    collide: Sequence[Mapping[str, Any]] = (),
) -> ReviewPolicy:
    """A truthful person deciding at random among the answers the provider's console allows.

    Approvals: approve, reject or edit, in the native or the HITL shape. Reviews:
    when the provider shows the effect, ``confirm`` (sometimes with a result) or,
    inside an open key window, ``retry``; when it shows none and nothing is in
    flight there, ``reject`` or ``retry``; otherwise the review is left pending.
    It never gives an answer that could itself apply an effect twice, so every
    duplicate a schedule finds is the library's. With ``collide`` (tool calls) an approval
    is edited more often, and then, half the time, to the arguments of another of these
    calls of its tool: an edit that collides with a sibling or an earlier answered call.
    """

    def policy(request: dict[str, Any]) -> dict[str, Any] | None:
        answer = decide(request)
        if answer is not None and "request_id" in request and rng.random() < 0.5:
            # A careful UI names the request it answers (half of them do): an answer to
            # a request that is no longer current (shown after a crash) is then asked
            # again, saying why; one to the current request applies, whatever was
            # reconciled since it was asked.
            answer = {**answer, "request_id": request["request_id"]}
        return answer

    def decide(request: dict[str, Any]) -> dict[str, Any] | None:
        op_id = request["operation_id"]
        if request.get("kind") == APPROVAL_KIND:
            choice = rng.choice(("approve", "approve", "hitl-approve", "reject", "hitl-reject"))
            choice = "edit" if rng.random() < 0.25 else choice
            name = str(request["tool"])
            others = [
                dict(tc["args"])
                for tc in collide
                if tc["name"] == name and dict(tc["args"]) != request["args"]
            ]
            if others and rng.random() < 0.5:
                edit = {"name": name, "args": rng.choice(others)}
                return {"decisions": [{"type": "edit", "edited_action": edit}], "by": by}
            if choice == "approve":
                return {**_approve(request), "by": by}
            if choice == "reject":
                return {"operation_id": op_id, "decision": "reject", "by": by, "reason": "no"}
            if choice == "hitl-approve":
                return {"decisions": [{"type": "approve"}], "by": by}
            if choice == "hitl-reject":
                return {"decisions": [{"type": "reject", "message": "not this one"}], "by": by}
            name = str(request["tool"])
            edit = {"name": name, "args": edited_args(name, request["args"])}
            return {"decisions": [{"type": "edit", "edited_action": edit}], "by": by}
        allowed = request.get("allowed_decisions", ())
        window_open = bool((request.get("retry_risk") or {}).get("key_window_open"))
        kind = _ACTIONS.get(str(request.get("action")))
        in_flight = 0 if kind is None else providers[kind].stats().in_flight
        if providers.shows(request):
            options = ["confirm", "confirm-with-result"]
            options += ["retry"] if window_open and "retry" in allowed else []
        elif in_flight == 0:
            options = ["reject"] + (["retry"] if "retry" in allowed else [])
        elif window_open and "retry" in allowed:
            options = ["retry"]
        else:
            return None
        choice = rng.choice(options)
        answer = {"operation_id": op_id, "decision": choice.split("-")[0], "by": by}
        if choice == "confirm-with-result":
            answer["result"] = {"seen_in_console_by": by}
        return answer | {"reason": f"{choice} after looking at the provider"}

    return policy


_NAN = float("nan")


def bad_answer(request: Mapping[str, Any], rng: random.Random) -> Any:
    """An answer that must be refused (and leave the request answerable): wrong id, shape, value."""
    op_id = request["operation_id"]
    if request.get("kind") == APPROVAL_KIND:
        name = str(request.get("tool"))
        options: list[Any] = [
            {"operation_id": "op-not-this-one", "decision": "approve", "by": OPERATOR},
            {"operation_id": op_id, "decision": "confirm", "by": OPERATOR},
            {"operation_id": op_id, "decision": "approve"},
            {"decisions": [{"type": "edit", "edited_action": {"name": "rm_rf", "args": {}}}]},
            {"decisions": [{"type": "maybe"}]},
            {"decisions": [{"type": "approve"}, {"type": "approve"}]},
            {
                "decisions": [
                    {
                        "type": "edit",
                        "edited_action": {"name": name, "args": {**request["args"], "x": _NAN}},
                    }
                ]
            },
        ]
    else:
        options = [
            {"operation_id": "op-not-this-one", "decision": "confirm", "by": OPERATOR},
            {"operation_id": op_id, "decision": "approve", "by": OPERATOR},
            {"operation_id": op_id, "decision": "confirm"},
            {"operation_id": op_id, "decision": "confirm", "by": OPERATOR, "result": _NAN},
            {"decisions": [{"type": "approve"}]},
            "confirm",
        ]
    bad = rng.choice(options)
    if isinstance(bad, dict) and "request_id" in request:
        bad = {**bad, "request_id": request["request_id"]}  # as the UI would send it
    return bad


# --------------------------------------------------------------------------- the graph


ToolRetryOrder = Literal["none", "before", "after"]
"""Where ``ToolRetryMiddleware`` sits relative to ``EffectMiddleware`` (``none``: absent)."""


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
    subgraph: bool = False,
    flakes: int = 0,
    fresh_ids: bool = False,
) -> Any:
    """agent -> tools -> agent, where the agent is a script: it proposes ``tool_calls``.

    The script answers from the conversation alone (same ids every time), so a
    fresh process rebuilds the same graph and resumes the thread. ``control``
    builds the stock setup: ``ToolNode`` + ``tools_condition``; otherwise
    ``EffectToolNode`` (with ``node_kwargs``) + ``route_tool_calls``.

    ``subgraph`` runs agent and tools as a subgraph of a one-node parent.
    ``flakes`` adds a read-only tool call that raises ``ConnectionError`` that
    many times, and a node ``RetryPolicy`` that retries it (the whole node
    re-runs). ``fresh_ids``: every proposal after the first mints new tool-call
    ids, as a real model does when it is asked again.
    """
    proposal = [dict(tc) for tc in tool_calls]
    tools = list(tools)
    if flakes:
        flaky = flaky_tool(flakes)
        tools.append(flaky)
        proposal.append(
            {"name": flaky.name, "args": {"ref": "r-1"}, "id": "call-flaky", "type": "tool_call"}
        )
    script = _Script(proposal, fresh_ids=fresh_ids)

    def agent(state: _State) -> dict[str, list[AnyMessage]]:
        return {"messages": [script.reply(state["messages"])]}

    node: ToolNode = (
        ToolNode(tools)
        if control
        else EffectToolNode(tools, ledger=ledger, **dict(node_kwargs or {}))
    )
    retry = (
        RetryPolicy(
            max_attempts=flakes + 1, initial_interval=0.0, jitter=False, retry_on=ConnectionError
        )
        if flakes
        else None
    )
    builder = StateGraph(_State)
    builder.add_node("agent", agent)
    builder.add_node("tools", node, retry_policy=retry)
    builder.add_edge(START, "agent")
    router: Callable[..., Any] = tools_condition if control else route_tool_calls
    builder.add_conditional_edges("agent", router, ["tools", END])
    builder.add_edge("tools", "agent")
    saver = checkpointer if checkpointer is not None else InMemorySaver()
    if not subgraph:
        return builder.compile(checkpointer=saver)
    parent = StateGraph(_State)
    parent.add_node("assistant", builder.compile())
    parent.add_edge(START, "assistant")
    parent.add_edge("assistant", END)
    return parent.compile(checkpointer=saver)


def build_agent(
    tools: Sequence[BaseTool],
    tool_calls: Sequence[Mapping[str, Any]],
    *,
    ledger: Any = None,
    checkpointer: Any = None,
    control: bool = False,
    node_kwargs: Mapping[str, Any] | None = None,
    tool_retry: ToolRetryOrder = "none",
) -> Any:
    """The same script as a ``create_agent`` agent: ``EffectMiddleware`` (none for a control).

    ``tool_retry``: LangChain's ``ToolRetryMiddleware`` (its defaults, without the
    delay) listed ``before`` or ``after`` ``EffectMiddleware`` (a control has it alone).
    """
    from langchain.agents import create_agent
    from langchain.agents.middleware import ToolRetryMiddleware

    from langgraph_effects.middleware import EffectMiddleware

    middleware: list[Any] = (
        [] if control else [EffectMiddleware(ledger=ledger, **dict(node_kwargs or {}))]
    )
    if tool_retry != "none":
        retry = ToolRetryMiddleware(initial_delay=0.0, jitter=False)
        middleware.insert(0 if tool_retry == "before" else len(middleware), retry)
    return create_agent(
        ScriptedChatModel(script=_Script([dict(tc) for tc in tool_calls]).reply),
        tools=list(tools),
        middleware=middleware,
        checkpointer=checkpointer if checkpointer is not None else InMemorySaver(),
    )


def flaky_tool(flakes: int) -> BaseTool:
    """A read-only tool that raises ``ConnectionError`` on its first ``flakes`` calls."""
    left = [flakes]
    lock = threading.Lock()

    @tool
    def check_status(ref: str) -> str:
        """Look up the status of a reference (read-only)."""
        with lock:
            failing = left[0] > 0
            left[0] -= failing
        if failing:
            raise ConnectionError("the status service is unreachable")
        return f"{ref}: ok"

    return check_status


class _Script:
    """The scripted model: after each human turn it proposes the calls; after tool results, done.

    Message ids derive from the conversation (the n-th human turn), so a replay
    rebuilds the same messages. With ``fresh_ids`` every proposal after the
    first carries new tool-call ids (``-g1``, ``-g2``...), like a model asked again.
    """

    def __init__(self, proposal: list[dict[str, Any]], *, fresh_ids: bool = False) -> None:
        self.proposal = proposal
        self.fresh_ids = fresh_ids
        self.proposals = 0
        self.lock = threading.Lock()

    def reply(self, messages: Sequence[BaseMessage]) -> AIMessage:
        turn = sum(1 for m in messages if isinstance(m, HumanMessage))
        suffix = "" if turn <= 1 else f"-h{turn}"
        if not isinstance(messages[-1], HumanMessage):
            return AIMessage(content="done", id=f"ai-done{suffix}")
        calls = self.proposal
        if self.fresh_ids:
            with self.lock:
                generation, self.proposals = self.proposals, self.proposals + 1
            if generation:
                suffix += f"-g{generation}"
                calls = [{**tc, "id": f"{tc['id']}-g{generation}"} for tc in calls]
        return AIMessage(content="", tool_calls=calls, id=f"ai-proposal{suffix}")


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
        lost_receipts: effects a provider applied that the ledger does not record
            (not confirmed, not an evidenced or pending unknown) or that the model was
            told were not carried out; a person's own decision excepted.
        lost_answers: answers a person gave that were consumed silently: not
            applied, not refused, and the same question (same operation, status and
            attempts) asked again without a ``notice`` saying why.
        lost_effects: intended effects that never acted: the model was told an
            operation was done more often than the provider applied it (a call meant
            again, answered with an earlier call's receipt), or the thread ended with a
            call of its last AIMessage never answered; a person's own decision excepted.
        violations: broken promises that are neither: a bad answer accepted, a
            valid answer refused, a resume under another tenant not refused, an
            operation recorded under a tenant the thread was not bound to, a call
            repeated on purpose that got no operation of its own.
        crashes: injected crashes that struck.
        errors: runs that failed with another exception (a resume may finish them).
        problems: one line per finding above, for the failure message.
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
    lost_receipts: int = 0
    lost_answers: int = 0
    lost_effects: int = 0
    violations: int = 0
    crashes: int = 0
    errors: int = 0
    problems: tuple[str, ...] = ()

    @property
    def completion_rate(self) -> float:
        """The share of runs that completed (1.0 when there were none)."""
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
        """A report of no runs, to add others to."""
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
        tenant_from_config: pass the tenant in ``config["configurable"]["tenant_id"]``
            (as most applications do) instead of to the node.
        resume_tenant: how the resumes after the first run name the tenant:
            ``same``; ``absent`` (no ``tenant_id``: the thread's bound tenant must
            be used); ``other`` (one resume under another tenant first: it must be
            refused, nothing dispatched).
        travel: after the thread ends, re-run it from a random history snapshot's
            own config (``history``, no tenant in it) or from an ``update_state``
            fork of one (``fork``), then answer again.
        reissue: after the first run, the model re-issues the calls with new
            tool-call ids: ``lost`` (the checkpoint holding its AIMessage was lost:
            the thread goes on from the checkpoint before the model ran) or
            ``resend`` (the person sends the request again in a new turn; see
            ``reused_ids`` and ``summarize``).
        face: ``node`` (``EffectToolNode`` in a hand-built graph),
            ``middleware`` (``EffectMiddleware`` in ``create_agent``) or ``functional``
            (an ``@entrypoint`` + ``@task`` workflow calling ``run_effect``, laid out as
            ``layout``).
        tool_retry: ``middleware`` face: ``ToolRetryMiddleware`` listed ``before``
            ``EffectMiddleware`` (a retry re-runs the decision) or ``after`` it (a retry
            would re-enter the tool inside its dispatch: refused with
            ``MiddlewareOrderError`` before the provider acts again, and the run resumed).
        subgraph: run agent and tools as a subgraph (``node`` face).
        flakes: a read-only sibling call fails that many times; a node
            ``RetryPolicy`` re-runs the whole node (``node`` face).
        by_position: chance that an answer to a lone interrupt is given by
            position (``Command(resume=value)``) rather than by interrupt id.
        bad_answers: chance that a round starts with a bad answer (it must be
            refused and the request stay answerable).
        seed: seeds the story's own choices (position or id, bad answers).
        count_by_target: count duplicates per target against the intended
            effects (two identical calls, a call repeated on purpose and an edit
            are intended), instead of the providers' per-payload count.
    """

    tools: Sequence[BaseTool]
    tool_calls: Sequence[Mapping[str, Any]]
    providers: Sequence[FakeProvider]
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
    tenant_from_config: bool = False
    resume_tenant: Literal["same", "absent", "other"] = "same"
    travel: Literal["none", "history", "fork"] = "none"
    reissue: Literal["none", "lost", "resend"] = "none"
    tools_after: Sequence[BaseTool] | None = None
    """The tools every run after the first uses: the deployment restarted with other
    settings (a rotated ``payload_key``, listed after the new one)."""
    reused_ids: bool = False
    """A re-sent request's calls keep the first proposal's tool-call ids (``call_0``
    every turn), instead of new ones."""
    summarize: bool = False
    """The thread first runs to its end; then its answered exchange is removed from the
    messages (``RemoveMessage``, as summarization and the delete-messages recipe do)
    before the request is sent again."""
    summary: bool = False
    """With ``summarize``: every message is replaced by one summary (``RemoveMessage`` of
    all, as ``SummarizationMiddleware`` does), not only the answered exchange removed."""
    shape: Shape = "agent"
    """``node`` face: the graph the calls run in (``testing.draws``): ``agent`` (agent ->
    tools -> agent), ``parallel``, ``fanout``, ``sub_agent`` or ``stateless``."""
    variant: Variant = "send"
    """The shape's variant (``draws.VARIANTS``)."""
    repeat: bool = False
    """After the thread ends, the person asks for the same again (new tool-call ids, but
    index ids for ``fanout`` and the worker's own for ``sub_agent``)."""
    requests: int = 1
    """``stateless`` shape: how many times the same request is sent, each its own invoke."""
    collide: bool = False
    """The reviewer's edits give a call the arguments of another call of its tool (a
    sibling, or one a repeated turn's earlier answer carried out)."""
    face: Literal["node", "middleware", "functional"] = "node"
    layout: Layout = "tasks"
    """``functional`` face: where the workflow runs the calls (``testing.workflows``)."""
    tool_retry: ToolRetryOrder = "none"
    subgraph: bool = False
    flakes: int = 0
    by_position: float = 0.0
    bad_answers: float = 0.0
    seed: int = 0
    count_by_target: bool = False


INTRUDER = "another-tenant"
"""The tenant an ``other`` resume claims (see ``Scenario.resume_tenant``)."""


@dataclass(frozen=True, slots=True)
class _Invoke:
    inputs: tuple[Any, ...]
    config: dict[str, Any] | None = None
    """None: the thread's config."""


@dataclass(frozen=True, slots=True)
class _GetState:
    pass


@dataclass(frozen=True, slots=True)
class _History:
    pass


@dataclass(frozen=True, slots=True)
class _Fork:
    """``update_state(config, values)``: a fork of a snapshot (no values), or an edit."""

    config: dict[str, Any]
    values: Any = None
    as_node: str | None = None


@dataclass(frozen=True, slots=True)
class _LedgerCall:
    """A read of the ledger, written against the protocol (sync or async: the driver awaits)."""

    read: Callable[[Ledger | AsyncLedger], Any]


@dataclass(frozen=True, slots=True)
class _Rebuild:
    """The deployment restarts with ``Scenario.tools_after`` (same ledger and saver)."""


_Request = _Invoke | _GetState | _History | _Fork | _LedgerCall | _Rebuild


@dataclass(slots=True)
class _Tally:
    crashes: int = 0
    errors: int = 0
    pending: set[str] = field(default_factory=set)
    intended: Counter[str] = field(default_factory=Counter)
    repeated: Counter[str] = field(default_factory=Counter)
    """Targets of calls repeated on purpose: each needs an operation of its own."""
    violations: list[str] = field(default_factory=list)
    lost_answers: list[str] = field(default_factory=list)
    """Answers neither applied, nor refused, nor asked again with a notice saying why."""


def _thread_config(sc: Scenario, tenant: str | None) -> dict[str, Any]:
    configurable = {"thread_id": sc.thread_id}
    if tenant is not None:
        configurable["tenant_id"] = tenant
    return {"configurable": configurable}


def _with_tenant(config: Mapping[str, Any], tenant: str) -> dict[str, Any]:
    return {**config, "configurable": {**config["configurable"], "tenant_id": tenant}}


def _story(sc: Scenario, tally: _Tally) -> Generator[_Request, Any, ScenarioReport]:
    """The scenario as a generator of requests (the sync and async drivers run it).

    First run (unless ``fresh`` is False), ``between``, then the recovery: the
    resumers at once (or a re-issue, or a resume under another tenant first),
    then rounds of: answer pending interrupts by the policy, or resume a run
    that failed, until the thread ends, only deferred reviews remain, or
    ``max_rounds`` pass; then, with ``travel``, once more from the past.
    After every failed run the clock passes the lease.
    """
    rng = random.Random(sc.seed)
    if sc.count_by_target:
        tally.intended.update(t for t in map(target_of, sc.tool_calls) if t is not None)
        tally.intended.update(branch_targets(sc))

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

    tenant = sc.thread_id if sc.tenant_from_config else None
    config = _thread_config(sc, tenant)

    def run(*inputs: Any, at: dict[str, Any] | None = None) -> Generator[_Request, Any, Any]:
        outcomes = yield _Invoke(inputs, at or config)
        settle(outcomes)
        return outcomes

    def answer_rounds() -> Generator[_Request, Any, bool]:
        for _ in range(sc.max_rounds):
            state = yield _GetState()
            if not state.interrupts:
                if not state.next:
                    return True
                yield from run(None)
                continue
            answers: dict[str, tuple[dict[str, Any], Any]] = {}
            tally.pending.clear()
            for pending in state.interrupts:
                answer = sc.policy(pending.value)
                if answer is None:
                    tally.pending.add(str(pending.value.get("operation_id")))
                else:
                    answers[pending.id] = (pending.value, answer)
            if not answers:
                return False
            lone = len(state.interrupts) == 1
            if rng.random() < sc.bad_answers:
                yield from refuse_bad(state, rng.choice(sorted(answers)), lone)
                continue  # the story looks again: the request must still be there
            if lone and rng.random() < sc.by_position:
                ((_, answer),) = answers.values()
                command: Command[Any] = Command(resume=answer)
            else:
                command = Command(resume={i: a for i, (_, a) in answers.items()})
            (outcome,) = yield from run(command)
            if isinstance(outcome, InvalidInput):
                tally.violations.append(f"a valid answer was refused: {outcome}")
            if outcome is None:
                after = yield _GetState()
                for line, given in _asked_again(answers.values(), after.interrupts):
                    # Asked again is fine when the ledger applied it (LangGraph may still
                    # show a request whose answer a crash kept it from saving).
                    if not (yield from _answer_applied(sc, given)):
                        tally.lost_answers.append(line)
        return False

    def refuse_bad(state: Any, interrupt_id: str, lone: bool) -> Generator[_Request, Any, None]:
        request = next(p.value for p in state.interrupts if p.id == interrupt_id)
        bad = bad_answer(request, rng)
        by_position = lone and rng.random() < sc.by_position
        (outcome,) = yield from run(Command(resume=bad if by_position else {interrupt_id: bad}))
        if isinstance(outcome, InjectedCrash):
            return
        if outcome is None:
            # Refused in words (asked again with a notice), or not read at all: harmless
            # only if it was not applied. LangGraph may never hand it to a task (its
            # interrupt id went stale) while the run applies a good answer saved before a
            # crash; the ledger logs every answer it applies
            # with its value's digest, so only the bad value's own digest convicts it.
            if (yield from _answer_applied(sc, bad)):
                tally.violations.append(f"a bad answer was applied: {bad!r}")
            return
        after = yield _GetState()
        waiting = {str(p.value.get("operation_id")) for p in after.interrupts}
        if str(request["operation_id"]) not in waiting:
            tally.violations.append(
                f"after refusing {bad!r}, operation {request['operation_id']} is no longer "
                "asked about"
            )

    def intrude() -> Generator[_Request, Any, None]:
        state = yield _GetState()
        if not state.next:
            return  # nothing would run: there is nothing to refuse
        before = sum(p.effects for p in sc.providers)
        (outcome,) = yield _Invoke((None,), _with_tenant(config, INTRUDER))
        if isinstance(outcome, InjectedCrash):
            settle([outcome])
        elif outcome is None:
            tally.violations.append(f"a resume under tenant {INTRUDER!r} was not refused")
        if sum(p.effects for p in sc.providers) != before:
            tally.violations.append(f"a resume under tenant {INTRUDER!r} dispatched")

    def summarize(tally: _Tally) -> Generator[_Request, Any, None]:
        # The answered calls are meant again by the request that follows: noted now,
        # as their messages are about to go (the final messages no longer show them).
        state = yield _GetState()
        messages = (state.values or {}).get("messages", [])
        _note_repeats(sc, tally, messages)
        answered = _answered_first(messages)
        gone = [
            m
            for m in messages
            if sc.summary
            or (isinstance(m, AIMessage) and m.tool_calls)
            or (isinstance(m, ToolMessage) and m.tool_call_id in answered)
        ]
        if gone:
            removal: dict[str, list[Any]] = {
                "messages": [RemoveMessage(id=str(m.id)) for m in gone]
            }
            if sc.summary:  # what SummarizationMiddleware leaves: the summary alone
                removal["messages"] = [
                    RemoveMessage(id=REMOVE_ALL_MESSAGES),
                    HumanMessage(content="Summary: the cases were handled.", id="summary"),
                ]
            # As the tools node (a plain edge on): a node with a router would read the
            # update once more while routing, and remove each message twice.
            yield _Fork(state.config, removal, "tools")

    if sc.fresh:
        first = {"messages": [HumanMessage(content="go", id="human")]}
        yield from run(first)
        if sc.between is not None:
            sc.between()
    if sc.tools_after is not None:
        yield _Rebuild()
    recorded = bool((yield from _thread_ops(sc))) if tenant is not None else False
    if tenant is not None and recorded and sc.resume_tenant == "absent":
        config = _thread_config(sc, None)  # the thread is bound: its tenant must be used
    if tenant is not None and recorded and sc.resume_tenant == "other":
        yield from intrude()
    if sc.reissue == "lost":
        history = yield _History()
        before_model = [h for h in history if h.next and _ends_with_human(h)]
        start = before_model[-1].config if before_model else config
        yield from run(None, at=_with_tenant(start, tenant) if tenant else start)
    elif sc.reissue == "resend":
        if sc.summarize:
            # The thread runs to its end, its answered exchange is removed, then the
            # person asks for the same again (issue 22, row 1).
            yield from run(*((None,) * max(1, sc.resumers)))
            if (yield from answer_rounds()):
                yield from summarize(tally)
        again = {"messages": [HumanMessage(content="go again", id="human-2")]}
        yield from run(again)
    else:
        yield from run(*((None,) * max(1, sc.resumers)))
    finished = yield from answer_rounds()
    if sc.repeat and finished:
        # A deliberate repeat: every call the first turn answered is meant again.
        state = yield _GetState()
        _note_repeats(sc, tally, (state.values or {}).get("messages", []))
        yield from run({"messages": [HumanMessage(content="the same again", id="human-2")]})
        finished = yield from answer_rounds()
    if sc.travel != "none":
        history = yield _History()
        past = [h for h in history[1:] if h.next]
        if past:
            origin = rng.choice(past).config
            if sc.travel == "fork":
                origin = yield _Fork(origin)
            yield from run(None, at=origin)  # a snapshot's own config: no tenant in it
            finished = yield from answer_rounds()
    CrashPlan.disarm()  # counting must not crash
    state = yield _GetState()
    return (yield from _count(sc, tally, state, finished=finished))


def _events(key: OperationKey, ledger: Ledger | AsyncLedger) -> Any:
    return ledger.events(key.tenant_id, key.operation_id)


def _answer_applied(sc: Scenario, value: Any) -> Generator[_Request, Any, bool]:
    """Whether the ledger applied ``value`` as an answer to any operation of the thread
    (``decide.answers.answer_mark``: every applied answer is logged with its digest)."""
    digest = answer_digest(value)
    for op in (yield from _thread_ops(sc)):
        events = yield _LedgerCall(functools.partial(_events, op.key))
        marks = (e.detail.get("answer") for e in events if isinstance(e.detail, dict))
        if any(isinstance(mark, str) and digest in mark for mark in marks):
            return True
    return False


def _asked_again(answered: Any, interrupts: Sequence[Any]) -> list[tuple[str, Any]]:
    """The answers whose question the next state asks again, unchanged and unexplained.

    An answer applies (the operation moves on: another status or attempt, or no
    question at all, or the ledger logged it), or the
    question is asked again with a ``notice`` saying why. The same question asked
    again without one, by an answer the ledger never logged, is a lost answer (a
    refusal asks again with a notice too: ``decide.answers.REFUSED_NOTE``).
    """
    asked = {
        (str(i.value.get("operation_id")), i.value.get("status"), i.value.get("attempts")): i.value
        for i in interrupts
        if isinstance(i.value, dict)
    }
    again = []
    for request, answer in answered:
        key = (str(request.get("operation_id")), request.get("status"), request.get("attempts"))
        shown = asked.get(key)
        if shown is not None and "notice" not in shown:
            line = (
                f"the answer {answer!r:.160} to {request.get('request_id')} was neither applied "
                "nor refused: the same question was asked again without a word"
            )
            again.append((line, answer))
    return again


def _thread_ops(sc: Scenario) -> Generator[_Request, Any, list[Operation]]:
    """The thread's operations: of its tenant, or (tenant from the config) of any tenant.

    With the tenant in the config, an operation recorded under another tenant
    must show, so every tenant's operations of this thread are read.
    """
    if sc.control:
        return []
    if not sc.tenant_from_config:
        ops: list[Operation] = yield _LedgerCall(
            lambda ledger: ledger.list(tenant_id=sc.thread_id, limit=10_000)
        )
        return ops
    ops = yield _LedgerCall(lambda ledger: ledger.list(tenant_id=None, limit=100_000))
    return [op for op in ops if op.workflow_id == sc.thread_id]


def _ends_with_human(snapshot: Any) -> bool:
    messages = snapshot.values.get("messages") or []
    return bool(messages) and isinstance(messages[-1], HumanMessage)


def _note_repeats(sc: Scenario, tally: _Tally, messages: Sequence[AnyMessage]) -> None:
    """A re-sent request repeats on purpose the first calls the thread's messages answer.

    Read from the final messages: a sibling's answer LangGraph showed in
    ``get_state`` (a pending write) but dropped when the new request came was
    never part of the thread, and its call maps back to the earlier operation.
    """
    answered = _answered_first(messages)
    if sc.shape == "sub_agent" and sc.variant == "last":
        # Only the worker's last word came back: the turn ended, so it answered every call.
        answered = {str(tc["id"]) for tc in sc.tool_calls}
    meant = [*sc.tool_calls, *([sc.tool_calls[0]] * len(branch_targets(sc)))]
    for call in meant:
        target = target_of(call)
        if call["id"] in answered and target is not None:
            tally.intended[target] += 1
            tally.repeated[target] += 1


def _answered_first(messages: Sequence[AnyMessage]) -> set[str]:
    """The ids of the calls a ToolMessage of the first turn answers (a later turn may reuse
    the ids: only what comes before the next human message counts). A turn's calls may be
    proposed by no AIMessage (a hand-made ``Send`` fan-out)."""
    first = next((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), None)
    answered: set[str] = set()
    for m in messages[(len(messages) if first is None else first + 1) :]:
        if isinstance(m, HumanMessage):
            break
        if isinstance(m, ToolMessage):
            answered.add(m.tool_call_id)
    return answered


def _replaced(ops: Sequence[Operation]) -> dict[str, Operation]:
    """The operations a reviewer's edit replaced, by id -> the operation that replaced them."""
    by_id = {op.operation_id: op for op in ops}
    moved = {}
    for op in ops:
        if op.status is S.REJECTED and op.error and op.error.startswith(_REPLACED):
            new = by_id.get(op.error[len(_REPLACED) :].split(" ", 1)[0])
            if new is not None:
                moved[op.operation_id] = new
    return moved


def _apply_edits(tally: _Tally, ops: Sequence[Operation]) -> None:
    """Each edit the ledger records moves its call's intended effect to the edited call's
    target (an edit to a sibling's arguments makes that target meant twice)."""
    by_id = {op.operation_id: op for op in ops}
    for old_id, new in _replaced(ops).items():
        old = by_id[old_id].target
        if old is not None and new.target is not None and tally.intended[old] > 0:
            tally.intended[old] -= 1
            tally.intended[new.target] += 1


def _never_acted(
    sc: Scenario, tally: _Tally, ops: Sequence[Operation], decided: Collection[str]
) -> list[str]:
    """Intended effects the providers never applied, per target, beyond those an operation
    accounts for (rejected by a person or the provider, failed, left unknown, decided by a
    person): a call merged into an earlier call's operation, or never sent. Read when the
    thread has ended; an edited call's intent went to its replacement. Where the server
    makes a repeat a no-op (``_SERVER_IDEMPOTENT``), each intent needs an operation of its
    own, not an effect."""
    log = [e for provider in sc.providers for e in provider.effect_log()]
    applied: Counter[str] = Counter(e.target for e in log)
    replaced = _replaced(ops)
    mine = [op for op in ops if op.target is not None and op.operation_id not in replaced]
    excused: Counter[str] = Counter(
        str(op.target) for op in mine if op.status is not S.CONFIRMED or op.operation_id in decided
    )
    for target in {str(op.target) for op in mine if op.action in _SERVER_IDEMPOTENT}:
        applied[target], excused[target] = 0, sum(1 for op in mine if op.target == target)
    return [
        f"{sc.name}: target {target!r}: {n} intended, the provider applied "
        f"{applied[target]}, {excused[target]} operation(s) account for the rest: "
        f"{n - applied[target] - excused[target]} never acted"
        for target, n in sorted(tally.intended.items())
        if n > applied[target] + excused[target]
    ]


def _count_at_providers(
    sc: Scenario, tally: _Tally, ops: Sequence[Operation], *, finished: bool
) -> Generator[_Request, Any, dict[str, Any]]:
    """Counted at the providers and the ledger alone (no thread to read): duplicates and
    intended effects never acted, by target, and mislabelled operations."""
    histories = {}
    for op in ops:
        histories[op.operation_id] = yield _LedgerCall(functools.partial(_events, op.key))
    _apply_edits(tally, ops)
    duplicates, problems = _excess_by_target(sc, tally)
    decided = _decided_by_person(ops, histories)
    unsent = _never_acted(sc, tally, ops, decided) if finished else []
    wrong = mislabelled_operations(ops, histories, applied=_attributable(sc.applied, ops))
    problems += unsent + [f"{sc.name}: {line}" for line in wrong]
    return {
        "effects": sum(p.effects for p in sc.providers),
        "duplicates": duplicates,
        "lost_effects": len(unsent),
        "mislabelled": len(wrong),
        "unknown": sum(1 for op in ops if op.status is S.UNKNOWN),
        "problems": tuple(problems),
    }


def _excess_by_target(sc: Scenario, tally: _Tally) -> tuple[int, list[str]]:
    """Effects per target beyond the intended ones (two twins, a repeat, an edit are intended)."""
    log = [e for provider in sc.providers for e in provider.effect_log()]
    applied: Counter[str] = Counter(e.target for e in log)
    # Each line says under which keys the effects landed (one key twice: the provider
    # applied a resend; two keys: two operations) and whether a late request landed.
    keys = {
        t: [(e.idempotency_key, "late" if e.late else "now") for e in log if e.target == t]
        for t in applied
    }
    lines = [
        f"{sc.name}: target {target!r}: {n} effects for {tally.intended[target]} intended "
        f"(keys {keys[target]})"
        for target, n in sorted(applied.items())
        if n > tally.intended[target]
    ]
    return sum(max(0, n - tally.intended[t]) for t, n in applied.items()), lines


_NOT_DONE = ("NOT carried out", "was not carried out")


def _attributable(
    applied: Callable[[Operation], int | None] | None, ops: Sequence[Operation]
) -> Callable[[Operation], int | None] | None:
    """``applied``, but None where the provider cannot tell operations apart.

    A provider without idempotency key (the ticketing fake, any MCP tool) counts by
    target: two operations on one target (twins, a deliberate repeat) share its count.
    """
    if applied is None:
        return None
    shared = Counter((op.action, op.target) for op in ops)

    def attributable(op: Operation) -> int | None:
        keyless = op.action in _KEYLESS
        return None if keyless and shared[(op.action, op.target)] > 1 else applied(op)

    return attributable


def _decided_by_person(
    ops: Sequence[Operation], histories: Mapping[str, Sequence[OperationEvent]]
) -> set[str]:
    """The operations a person decided (their decision is theirs, not the library's)."""
    return {
        op.operation_id
        for op in ops
        for e in histories.get(op.operation_id, ())
        if e.evidence is not None and e.evidence.source == "operator"
    }


def _lost_receipts(
    name: str,
    applied: Callable[[Operation], int | None] | None,
    ops: Sequence[Operation],
    histories: Mapping[str, Sequence[OperationEvent]],
    messages: Sequence[AnyMessage],
    *,
    pending: Collection[str],
    finished: bool,
) -> list[str]:
    """Applied effects the ledger or the model's answer does not own up to (see ScenarioReport)."""
    if applied is None:
        return []
    problems = []
    decided_by_person = _decided_by_person(ops, histories)
    for op in ops:
        n = applied(op)
        if not n or op.operation_id in decided_by_person:
            continue
        events = histories.get(op.operation_id, ())
        evidenced = op.evidence_checked_at is not None or any(
            e.evidence is not None for e in events
        )
        # Dispatching: a worker holds (or held) the lease; the receipt is still on
        # its way or goes to reconciliation when the lease lapses: not lost yet.
        owned = (
            op.status in (S.CONFIRMED, S.DISPATCHING)
            or (op.status is S.UNKNOWN and (evidenced or op.operation_id in pending))
            or (op.status is S.PREPARED and not finished)
        )
        if not owned:
            problems.append(
                f"{name}: operation {op.operation_id} ({op.action} {op.target!r}): the "
                f"provider applied it {n} time(s), the ledger says {op.status.value}"
            )
    calls = {tc["id"]: tc for m in messages if isinstance(m, AIMessage) for tc in m.tool_calls}
    for m in messages:
        if not isinstance(m, ToolMessage) or not any(x in str(m.content) for x in _NOT_DONE):
            continue
        mine = _spoken_for(m, ops, calls)
        if not mine or any(op.operation_id in decided_by_person for op in mine):
            continue
        if all(applied(op) for op in mine):
            problems.append(
                f"{name}: the model was told call {m.tool_call_id} was not carried out; "
                "the provider applied it"
            )
    return problems


def _spoken_for(
    message: ToolMessage, ops: Sequence[Operation], calls: Mapping[str | None, Any]
) -> list[Operation]:
    """The operations a ToolMessage answers for: the one its trace names
    (``decide.messages.trace_metadata``), else those of its tool-call id, else its
    call's target. The record's own ``tool_call_id`` is only the id of the call that
    wrote it: twins of one AIMessage re-proposed under the same ids (``reused_ids``)
    may each meet the other's record, so that id can name the wrong twin."""
    trace = message.response_metadata.get(TRACE_KEY)
    if isinstance(trace, Mapping) and trace.get("operation_id") is not None:
        named = [op for op in ops if op.operation_id == str(trace["operation_id"])]
        if named:
            return named
    call = calls.get(message.tool_call_id)
    target = None if call is None else target_of(call)
    return [op for op in ops if op.tool_call_id == message.tool_call_id] or [
        op for op in ops if target is not None and op.target == target
    ]


def _delivered(history: Sequence[Any], head: Any) -> list[ToolMessage]:
    """Every ToolMessage the timeline ending at ``head`` delivered, once each: the messages
    of each checkpoint on its lineage (parent to parent), so one a later step removed
    (summarization, ``RemoveMessage``) still counts, and one of an abandoned branch
    (a replay or fork went elsewhere) does not."""
    by_id = {h.config["configurable"]["checkpoint_id"]: h for h in history}
    seen: dict[str, ToolMessage] = {}
    at = head
    while at is not None:
        for m in (at.values or {}).get("messages", []):
            if isinstance(m, ToolMessage):
                seen.setdefault(str(m.id), m)
        parent = at.parent_config
        at = None if parent is None else by_id.get(parent["configurable"]["checkpoint_id"])
    return list(seen.values())


def _lost_effects(
    name: str,
    applied: Callable[[Operation], int | None] | None,
    ops: Sequence[Operation],
    messages: Sequence[AnyMessage],
    delivered: Sequence[ToolMessage],
    *,
    decided: Collection[str],
    finished: bool,
) -> list[str]:
    """Intended effects that never acted (see ScenarioReport).

    Reported done when not: every effect ToolMessage names its operation and the
    status it answered with (``decide.messages.trace_metadata``); an operation
    answered ``confirmed`` in its timeline (``delivered``) more often than its
    provider applied it told the model of an effect that did not happen (a call
    meant again, answered from an earlier call's record). Never sent: a finished
    thread whose last AIMessage (in ``messages``, the final ones) still has a call
    that no ToolMessage after it answers. A person's own decision is theirs.
    """
    problems = []
    by_id = {op.operation_id: op for op in ops}
    # A Functional API answer names the call's origin (its task and place), which the
    # operation records as its tool-call id (testing.workflows).
    origins = {op.tool_call_id: op.operation_id for op in ops if op.tool_call_id}
    done: Counter[str] = Counter()
    for m in delivered:
        trace = m.response_metadata.get(TRACE_KEY) if isinstance(m, ToolMessage) else None
        if not isinstance(trace, Mapping) or trace.get("status") != S.CONFIRMED.value:
            continue
        if ORIGIN in trace and str(trace[ORIGIN]) not in origins:
            problems.append(
                f"{name}: call {m.tool_call_id} was answered done from {trace[ORIGIN]}, "
                "which no operation of the thread records"
            )
            continue
        done[str(trace.get("operation_id") or origins.get(str(trace.get(ORIGIN))))] += 1
    for op_id, answers in sorted(done.items()):
        op = by_id.get(op_id)
        n = None if op is None or applied is None or op_id in decided else applied(op)
        if op is not None and n is not None and answers > n:
            problems.append(
                f"{name}: operation {op_id} ({op.action} {op.target!r}) was answered done "
                f"{answers} time(s); the provider applied it {n} time(s)"
            )
    last = next(
        (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], AIMessage)), None
    )
    if finished and last is not None:
        answered = {m.tool_call_id for m in messages[last + 1 :] if isinstance(m, ToolMessage)}
        message = messages[last]
        assert isinstance(message, AIMessage)
        problems.extend(
            f"{name}: call {tc['id']} ({tc['name']}) was never answered: the thread ended "
            "without it"
            for tc in message.tool_calls
            if tc["id"] not in answered
        )
    return problems


def _count(
    sc: Scenario, tally: _Tally, state: Any, *, finished: bool
) -> Generator[_Request, Any, ScenarioReport]:
    effects = sum(p.effects for p in sc.providers)
    ops = yield from _thread_ops(sc)
    _apply_edits(tally, ops)
    if sc.reissue == "resend" and not sc.summarize:
        _note_repeats(sc, tally, (state.values or {}).get("messages", []))
    if sc.count_by_target:
        duplicates, problems = _excess_by_target(sc, tally)
    else:
        duplicates = sum(p.duplicates for p in sc.providers)
        problems = [f"{sc.name}: {duplicates} duplicate effect(s) at the providers"] * bool(
            duplicates
        )
    # A read among the calls (the MCP server's lookup) is no intended effect.
    effect_calls = sum(1 for call in sc.tool_calls if target_of(call) is not None)
    intents = effect_calls + len(branch_targets(sc)) + sum(tally.repeated.values())
    messages = (state.values or {}).get("messages", [])
    if sc.control:
        unsent = _lost_effects(sc.name, None, (), messages, (), decided=(), finished=finished)
        return ScenarioReport(
            scenario=sc.name,
            intents=intents,
            effects=effects,
            duplicates=duplicates,
            lost_effects=len(unsent),
            completed=int(finished),
            crashes=tally.crashes,
            errors=tally.errors,
            problems=tuple(problems + unsent),
        )
    histories = {}
    for op in ops:
        histories[op.operation_id] = yield _LedgerCall(functools.partial(_events, op.key))
    applied = _attributable(sc.applied, ops)
    # Pending a person: every operation an open interrupt asks about.
    pending = tally.pending | {str(i.value.get("operation_id")) for i in state.interrupts}
    pending |= queued_reviews(sc, ops, state)
    wrong = mislabelled_operations(ops, histories, pending_review=pending, applied=applied)
    problems.extend(f"{sc.name}: {line}" for line in wrong)
    lost = _lost_receipts(
        sc.name, applied, ops, histories, messages, pending=pending, finished=finished
    )
    problems.extend(lost)
    decided = _decided_by_person(ops, histories)
    delivered = _delivered((yield _History()), state)
    unsent = _lost_effects(
        sc.name, applied, ops, messages, delivered, decided=decided, finished=finished
    )
    if sc.count_by_target and finished:
        unsent += _never_acted(sc, tally, ops, decided)
    problems.extend(unsent)
    violations = list(tally.violations)
    if sc.tenant_from_config:
        violations += [
            f"operation {op.operation_id} recorded under tenant {op.tenant_id!r}, not the "
            f"thread's {sc.thread_id!r}"
            for op in ops
            if op.tenant_id != sc.thread_id
        ]
    for target in tally.repeated:
        made = sum(1 for op in ops if op.target == target)
        if finished and made < tally.intended[target]:
            violations.append(
                f"a call on {target!r} repeated on purpose after it was answered got no "
                f"operation of its own ({made} operation(s) for {tally.intended[target]} intents)"
            )
    problems.extend(f"{sc.name}: {line}" for line in violations)
    problems.extend(f"{sc.name}: {line}" for line in tally.lost_answers)
    stats = yield _LedgerCall(lambda ledger: ledger.stats(tenant_id=sc.thread_id))
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
        intents=intents,
        effects=effects,
        duplicates=duplicates,
        unknown=sum(1 for op in ops if op.status is S.UNKNOWN),
        human_resolved=human,
        completed=int(finished and settled and len(ops) >= effect_calls),
        stale_token_refusals=stats.stale_token_refusals,
        mislabelled=len(wrong),
        lost_receipts=len(lost),
        lost_answers=len(tally.lost_answers),
        lost_effects=len(unsent),
        violations=len(violations),
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
    # The scenario draws the default durability on purpose: no DurabilityWarning in the
    # user's test, and the user's own graphs still get theirs.
    with durability_chosen(), _armed(sc):
        return _drive_sync(story, graph, config, ledger)


async def arun_scenario(
    sc: Scenario, *, ledger: Any = None, checkpointer: Any = None
) -> ScenarioReport:
    """:func:`run_scenario` inside a running event loop (``ainvoke``; sync or async ledger)."""
    graph, config, story = _start(sc, ledger, checkpointer)
    with durability_chosen(), _armed(sc):
        return await _drive_async(story, graph, config, ledger)


def _start(
    sc: Scenario, ledger: Any, checkpointer: Any
) -> tuple[_Graphs, dict[str, Any], Generator[_Request, Any, ScenarioReport]]:
    node_kwargs: dict[str, Any] = {
        "tenant_id": None if sc.tenant_from_config else sc.thread_id,
        "lease_for": sc.lease_for,
        "interrupt_on_unknown": sc.interrupt_on_unknown,
    }
    if sc.clock is not None:
        node_kwargs["clock"] = sc.clock.now
    common: dict[str, Any] = {
        "ledger": ledger,
        # One saver for the graph a restart rebuilds too (``Scenario.tools_after``).
        "checkpointer": checkpointer if checkpointer is not None else InMemorySaver(),
        "control": sc.control,
        "node_kwargs": node_kwargs,
    }

    def graph_of(tools: Sequence[BaseTool]) -> Any:
        if sc.face == "functional":
            reply = _Script([dict(tc) for tc in sc.tool_calls]).reply
            return build_workflow(
                tools, reply, layout=sc.layout, asynchronous=sc.asynchronous, **common
            )
        if sc.face == "middleware":
            return build_agent(tools, sc.tool_calls, tool_retry=sc.tool_retry, **common)
        if sc.shape != "agent":
            return build_shape(
                sc.shape,
                tools,
                sc.tool_calls,
                asynchronous=sc.asynchronous,
                flakes=sc.flakes,
                fresh_ids=sc.repeat and sc.shape != "fanout",
                variant=sc.variant,
                **common,
            )
        return build_graph(
            tools,
            sc.tool_calls,
            subgraph=sc.subgraph,
            flakes=sc.flakes,
            fresh_ids=(sc.reissue != "none" or sc.repeat) and not sc.reused_ids,
            **common,
        )

    graphs = _Graphs(graph_of(sc.tools), lambda: graph_of(sc.tools_after or sc.tools))
    config: dict[str, Any] = {"configurable": {"thread_id": sc.thread_id}}
    story = stateless_story if sc.shape == "stateless" else _story
    return graphs, config, story(sc, _Tally())


@dataclass(slots=True)
class _Graphs:
    """The scenario's graph, and how a restart with ``tools_after`` rebuilds it."""

    graph: Any
    rebuilt: Callable[[], Any]


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
    story: Generator[_Request, Any, ScenarioReport],
    graphs: _Graphs,
    config: dict[str, Any],
    ledger: Any,
) -> ScenarioReport:
    value: Any = None
    while True:
        try:
            request = story.send(value)
        except StopIteration as stop:
            report: ScenarioReport = stop.value
            return report
        match request:
            case _Invoke(inputs, at) if len(inputs) == 1:
                value = [_outcome(lambda: graphs.graph.invoke(inputs[0], at or config))]
            case _Invoke(inputs, at):
                outcomes: list[BaseException | None] = [None] * len(inputs)

                def resume(i: int, item: Any, out: list[BaseException | None]) -> None:
                    out[i] = _outcome(lambda: graphs.graph.invoke(item, at or config))

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
                value = graphs.graph.get_state(config)
            case _History():
                value = list(graphs.graph.get_state_history(config))
            case _Fork(origin, values, as_node):
                value = graphs.graph.update_state(origin, values, as_node=as_node)
            case _Rebuild():
                graphs.graph, value = graphs.rebuilt(), None
            case _LedgerCall(read):
                value = read(ledger)


async def _drive_async(
    story: Generator[_Request, Any, ScenarioReport],
    graphs: _Graphs,
    config: dict[str, Any],
    ledger: Any,
) -> ScenarioReport:
    async def outcome(item: Any, at: dict[str, Any]) -> BaseException | None:
        try:
            await graphs.graph.ainvoke(item, at)
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
            case _Invoke(inputs, at):
                value = list(await asyncio.gather(*(outcome(i, at or config) for i in inputs)))
            case _GetState():
                value = await graphs.graph.aget_state(config)
            case _History():
                value = [h async for h in graphs.graph.aget_state_history(config)]
            case _Fork(origin, values, as_node):
                value = await graphs.graph.aupdate_state(origin, values, as_node=as_node)
            case _Rebuild():
                graphs.graph, value = graphs.rebuilt(), None
            case _LedgerCall(read):
                value = read(ledger)
                if inspect.isawaitable(value):
                    value = await value


# --------------------------------------------------------------------------- schedules


Revocation = Literal["none", "provider", "hook"]
PolicyName = Literal["confirm_if_seen", "retry_when_safe", "defer", "operator"]


class Kind(StrEnum):
    """What a schedule exercises besides crashes and provider faults (one kind each).

    Every kind but ``base`` answers through :func:`operator` more often than not
    (several rounds, by position or by interrupt id, sometimes a bad answer
    first) and counts duplicates per target against the intended effects.
    """

    BASE = "base"
    """Crashes, faults, lagging search, key expiry, revocation, racing resumers."""
    REVIEW_ROUNDS = "review_rounds"
    """Reviews over several rounds: every resend can be lost again (retry -> unknown -> review)."""
    APPROVAL = "approval"
    """``require_approval`` effects: approve, reject or edit, then dispatch, unknown, review."""
    HISTORY = "history_replay"
    """After the thread ends: ``invoke(None, snapshot.config)`` from a random history snapshot."""
    FORK = "update_state_fork"
    """After the thread ends: an ``update_state`` fork of a random snapshot, run on."""
    NO_TENANT = "no_tenant"
    """Resumes without ``tenant_id`` in the config: the thread's bound tenant applies."""
    OTHER_TENANT = "other_tenant"
    """A resume under another tenant first: refused, nothing dispatched."""
    REISSUED = "reissued_call"
    """Default durability lost the AIMessage: the model re-issues the calls with new ids."""
    RESENT = "resent_request"
    """The person sends the request again: unanswered calls map back, answered ones repeat."""
    REUSED_IDS = "reused_ids"
    """As ``resent_request``, the model reusing its first proposal's tool-call ids (``call_0``
    every turn): an older ToolMessage with a new call's id answers nothing of it."""
    KEY_ROTATION = "key_rotation"
    """Only keyed digests kept (``store_payload=False``); the ``payload_key`` is rotated
    between the first run and the resume, the old key listed after the new one."""
    SUMMARIZED = "summarized_thread"
    """As ``resent_request``, the answered exchange removed first (``RemoveMessage``, or
    every message replaced by a summary, as ``SummarizationMiddleware`` does): answered
    calls still repeat on purpose."""
    HAND_MADE = "hand_made_ids"
    """No AIMessage proposes the calls: a router sends each as ``Send("tools", [call])``
    with an index id (``mail-0``...), the same ids again in the next turn."""
    NO_CHECKPOINTER = "no_checkpointer"
    """A stateless service: no checkpointer, each request its own invoke (twice the same),
    a node ``RetryPolicy`` re-running the calls within one."""
    COLLIDING = "colliding_edits"
    """Approvals whose reviewer edits a call to the arguments of a sibling (two calls of
    one tool) or, in a repeated turn, of an earlier answered call."""
    PARALLEL = "parallel_branches"
    """Two tool nodes issue the same call in one superstep (an audit branch)."""
    SUB_AGENT = "sub_agent"
    """A supervisor hands a worker subgraph only the latest request, asked again next turn."""
    MIDDLEWARE = "middleware"
    """``EffectMiddleware`` in ``create_agent`` (one task per call)."""
    SUBGRAPH = "subgraph"
    """Agent and tools as a subgraph of the graph the person talks to."""
    RETRY_POLICY = "retry_policy"
    """A sibling read fails; the node's ``RetryPolicy`` re-runs every call of the node."""
    FUNCTIONAL = "functional_api"
    """The graph is an ``@entrypoint`` + ``@task`` workflow calling ``run_effect`` /
    ``arun_effect``: a task per call, every call in one task, or in the entrypoint's body."""
    MCP = "mcp_tools"
    """The tools are an in-process MCP server's (``testing.mcp_server``), declared with
    ``mcp_effects`` from its annotations (trusted, or not: every tool an effect); async."""


_FIRST_KINDS: tuple[Kind, ...] = (
    Kind.BASE,
    Kind.REVIEW_ROUNDS,
    Kind.APPROVAL,
    Kind.HISTORY,
    Kind.FORK,
    Kind.NO_TENANT,
    Kind.OTHER_TENANT,
    Kind.REISSUED,
    Kind.RESENT,
    Kind.MIDDLEWARE,
    Kind.SUBGRAPH,
    Kind.RETRY_POLICY,
)
"""The kinds drawn before the variants below existed: each seed still draws among these
first, so its schedule is the one it always was."""
_VARIANTS = {
    Kind.BASE: Kind.KEY_ROTATION,
    Kind.RESENT: Kind.REUSED_IDS,
    Kind.NO_TENANT: Kind.FUNCTIONAL,
    Kind.OTHER_TENANT: Kind.MCP,
    # Issue 22's identity draws (testing.draws).
    Kind.REISSUED: Kind.SUMMARIZED,
    Kind.FORK: Kind.HAND_MADE,
    Kind.HISTORY: Kind.NO_CHECKPOINTER,
    Kind.APPROVAL: Kind.COLLIDING,
    Kind.RETRY_POLICY: Kind.PARALLEL,
    Kind.SUBGRAPH: Kind.SUB_AGENT,
}
"""Half the schedules of a kind become its variant, by a random stream of their own."""
DRAWN: tuple[Kind, ...] = (*_FIRST_KINDS, *_VARIANTS.values())
"""The kinds a schedule draws by default: those the library passes today. The others
show what is still open (``python -m langgraph_effects.testing.campaign --kinds ...``)."""

_POINTS = tuple(CrashPoint)
_TOOL_RETRY: tuple[ToolRetryOrder, ...] = ("none", "before", "after")
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
    kind: Kind = Kind.BASE
    refaults: tuple[Fault | None, ...] = ()
    """Scripted after ``faults``: what each resend meets (a retried call can be lost again)."""
    key_window_zero: bool = False
    """The keyed tools declare no key window: their unknowns go to a person, not to a retry."""
    approval: bool = False
    """The effects require approval before their first dispatch."""
    twins: bool = False
    """The first call is proposed twice in one AIMessage (same arguments, two intents)."""
    flakes: int = 0
    by_position: float = 0.0
    bad_answers: float = 0.0
    tool_retry: ToolRetryOrder = "none"
    """``middleware`` kind: where ``ToolRetryMiddleware`` sits (``Scenario.tool_retry``)."""
    layout: Layout = "tasks"
    """``functional_api`` kind: where the workflow runs the calls (``Scenario.layout``)."""
    trusted: bool = True
    """``mcp_tools`` kind: whether ``mcp_effects`` believes the server's annotations."""
    repeat: bool = False
    """After the thread ends the person asks for the same again (a new turn, new ids)."""
    variant: Variant = "send"
    """``parallel_branches`` and ``sub_agent`` kinds: the graph's variant (``draws.VARIANTS``)."""
    summary: bool = False
    """``summarized_thread`` kind: every message replaced by a summary, not only the
    answered exchange removed."""

    @classmethod
    def generate(cls, seed: int, kinds: Sequence[Kind] | None = None) -> Schedule:
        """The schedule of ``seed`` (a seeded ``random.Random``; no global state), its
        kind drawn from ``kinds`` (default ``DRAWN``)."""
        rng = random.Random(seed)
        calls = tuple(rng.choice(list(ProviderKind)) for _ in range(rng.choice((1, 1, 2, 3))))
        base = cls._draw(rng, seed, calls)
        kind: Kind
        if kinds is None:
            kind = rng.choice(_FIRST_KINDS)
            if kind in _VARIANTS and random.Random(f"variant-{seed}").random() < 0.5:
                kind = _VARIANTS[kind]
        else:
            kind = rng.choice(list(kinds))
        if kind is Kind.BASE:
            return base
        faults = base.faults
        if kind is Kind.REVIEW_ROUNDS:
            lost = (Fault.LOSE_RESPONSE, Fault.LOSE_REQUEST, Fault.LOSE_RESPONSE, Fault.LATE)
            faults = tuple(rng.choice(lost) for _ in calls)
        operator_answers = (
            kind in (Kind.REVIEW_ROUNDS, Kind.APPROVAL, Kind.COLLIDING) or rng.random() < 0.6
        )
        # The kinds drawn later draw what is theirs from streams of their own.
        faces = random.Random(f"faces-{seed}")
        drawn = random.Random(f"identity-{seed}")
        if kind is Kind.COLLIDING:  # two calls of one tool: an edit can collide
            calls = (calls[0], *calls)[:3]
            base = base.with_(calls=calls, faults=(base.faults[0], *base.faults)[:3])
            faults = base.faults
        if kind is Kind.NO_CHECKPOINTER:  # nobody can be asked: no unknown is drawn
            faults = tuple(f if f in _STATELESS_FAULTS else None for f in faults)
        schedule = base.with_(
            kind=kind,
            faults=faults,
            refaults=tuple(rng.choice(_FAULTS) for _ in calls),
            key_window_zero=rng.random() < (0.7 if kind is Kind.REVIEW_ROUNDS else 0.25),
            approval=kind in (Kind.APPROVAL, Kind.COLLIDING)
            or (kind in (Kind.MIDDLEWARE, Kind.SUBGRAPH) and rng.random() < 0.3)
            or (kind in (Kind.FUNCTIONAL, Kind.MCP) and faces.random() < 0.3)
            or (kind in _SHAPES and kind is not Kind.NO_CHECKPOINTER and drawn.random() < 0.3),
            twins=(
                kind in (Kind.REISSUED, Kind.RESENT, Kind.REUSED_IDS, Kind.SUMMARIZED)
                and calls[0] is not ProviderKind.TICKETING
                and rng.random() < 0.4
            )
            or (
                kind in (Kind.FUNCTIONAL, Kind.MCP)
                and calls[0] is not ProviderKind.TICKETING
                and faces.random() < 0.4
            )
            or (
                kind in (Kind.HAND_MADE, Kind.SUB_AGENT)
                and calls[0] is not ProviderKind.TICKETING
                and drawn.random() < 0.4
            ),
            layout=faces.choice(LAYOUTS) if kind is Kind.FUNCTIONAL else "tasks",
            trusted=faces.random() < 0.75 if kind is Kind.MCP else True,
            # langchain-mcp-adapters' tools are async only.
            asynchronous=base.asynchronous or kind is Kind.MCP,
            flakes=rng.choice((1, 2)) if kind is Kind.RETRY_POLICY else 0,
            policy="operator" if operator_answers else base.policy,
            by_position=rng.choice((0.0, 0.5, 1.0)),
            bad_answers=rng.choice((0.0, 0.0, 0.3, 0.6)),
            # Its own stream: every other draw of every seed stays as it was.
            tool_retry=random.Random(f"tool-retry-{seed}").choice(_TOOL_RETRY)
            if kind is Kind.MIDDLEWARE
            else "none",
        )
        # Issue 22's draws (testing.draws), from a stream of their own.
        repeat = kind in (Kind.HAND_MADE, Kind.SUB_AGENT) or (
            kind in _REPEATABLE and random.Random(f"repeat-{seed}").random() < 0.3
        )
        if kind is Kind.NO_CHECKPOINTER:
            return schedule.with_(
                crash_at=None,  # a crash is the client's retry: a new request by design
                refaults=tuple(f if f in _STATELESS_FAULTS else None for f in schedule.refaults),
                flakes=drawn.choice((1, 2)),
                approval=False,
                twins=False,
            )
        shape = _SHAPES.get(kind, "agent")
        return schedule.with_(
            repeat=repeat,
            summary=kind is Kind.SUMMARIZED and drawn.random() < 0.5,
            variant=drawn.choice(VARIANTS[shape]) if shape in VARIANTS else "send",
        )

    @classmethod
    def _draw(cls, rng: random.Random, seed: int, calls: tuple[ProviderKind, ...]) -> Schedule:
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
        scripted = [*zip(self.calls, self.faults, strict=True)]
        scripted += zip(self.calls, self.refaults, strict=False)
        for kind in ProviderKind:
            script = [f for k, f in scripted if k is kind]
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

        calls = [builtin_call(k, n, tag=tag) for n, k in enumerate(self.calls)]
        if self.twins:
            calls.insert(1, {**calls[0], "id": f"{calls[0]['id']}-twin"})
        if self.kind is Kind.HAND_MADE:
            calls = index_ids(calls)
        careful = confirm_if_seen(providers.shows)
        policy: ReviewPolicy = {
            "confirm_if_seen": careful,
            "retry_when_safe": retry_when_safe(careful),
            "defer": defer,
            "operator": operator(
                providers,
                random.Random(f"operator-{self.seed}"),
                collide=calls if self.kind is Kind.COLLIDING else (),
            ),
        }[self.policy]
        if self.kind is Kind.MCP:  # and a read of the server's, which stays a plain tool
            lookup = {"case_id": f"case-{tag}-0"}
            calls.append({"name": "lookup_case", "args": lookup, "id": f"call-{tag}-lookup"})
        rotated = self.kind is Kind.KEY_ROTATION and not control

        def tools_of(keys: Sequence[str] | None) -> list[Any]:
            if self.kind is Kind.MCP:
                return self._mcp_tools(providers, control=control)
            if control:
                return list(control_tools(providers))
            return list(
                effect_tools(
                    providers,
                    authorize=self.revoke == "hook",
                    key_window=timedelta(0) if self.key_window_zero else RETENTION,
                    require_approval=self.approval,
                    payload_key=keys,
                )
            )

        tools = tools_of([_OLD_KEY] if rotated else None)
        story = self.kind
        return Scenario(
            tools=tools,
            tools_after=tools_of([_NEW_KEY, _OLD_KEY]) if rotated else None,
            tool_calls=calls,
            providers=providers.all,
            clock=providers.clock,
            crash_at=self.control_crash() if control else self.crash_at,
            crash_hit=self.crash_hit,
            resumers=self.resumers,
            policy=policy,
            between=between,
            applied=providers.applied,
            control=control,
            # MCP tools are async only: their control runs async too.
            asynchronous=self.asynchronous and (not control or story is Kind.MCP),
            thread_id=tag,
            # Short in real time: a resumer meeting a lease left by a cancelled
            # sibling waits at most this long before it reports LeaseHeld.
            lease_for=timedelta(seconds=0.5),
            name=f"schedule {self.seed} ({story.value}"
            + (f", ToolRetryMiddleware {self.tool_retry}" if self.tool_retry != "none" else "")
            + (f", {self.layout}" if story is Kind.FUNCTIONAL else "")
            + ("" if self.trusted else ", untrusted server")
            + ")",
            # A stateless service names no thread: its tenant goes to the node.
            tenant_from_config=story not in (Kind.BASE, Kind.NO_CHECKPOINTER),
            resume_tenant=_RESUME_TENANT.get(story, "same"),
            travel=_TRAVEL.get(story, "none"),
            reissue=_REISSUE.get(story, "none"),
            reused_ids=story is Kind.REUSED_IDS,
            summarize=story is Kind.SUMMARIZED,
            summary=self.summary,
            shape=_SHAPES.get(story, "agent"),
            variant=self.variant,
            repeat=self.repeat,
            requests=2 if story is Kind.NO_CHECKPOINTER else 1,
            collide=story is Kind.COLLIDING,
            interrupt_on_unknown=story is not Kind.NO_CHECKPOINTER,
            face=_FACES.get(story, "node"),
            layout=self.layout,
            tool_retry=self.tool_retry,
            subgraph=story is Kind.SUBGRAPH,
            flakes=self.flakes,
            by_position=self.by_position,
            bad_answers=self.bad_answers,
            seed=self.seed,
            count_by_target=story is not Kind.BASE,
            max_rounds=12 if story is not Kind.BASE else 8,
        )

    def with_(self, **changes: Any) -> Schedule:
        """A copy with some fields changed (to pin a dimension in a test)."""
        return replace(self, **changes)

    def _mcp_tools(self, providers: Providers, *, control: bool) -> list[BaseTool]:
        """The in-process MCP server's tools: plain for a control, else through ``mcp_effects``."""
        from langgraph_effects.mcp import mcp_effects

        served = mcp_tools(providers, control=control)
        if control:
            return served
        asked = [t.name for t in served if t.name not in READ_ONLY] if self.approval else []
        return mcp_effects(
            served,
            trusted=self.trusted,
            server=SERVER,
            target={"close_case": "case_id", "send_mail": "to", "create_ticket": "title"},
            require_approval=asked,
        )


_OLD_KEY, _NEW_KEY = "campaign-key-old-" + "5a" * 8, "campaign-key-new-" + "c3" * 8
"""The ``payload_key`` a ``key_rotation`` schedule starts with, and the one it rotates to."""

_SHAPES: dict[Kind, Shape] = {
    Kind.PARALLEL: "parallel",
    Kind.HAND_MADE: "fanout",
    Kind.SUB_AGENT: "sub_agent",
    Kind.NO_CHECKPOINTER: "stateless",
}
_REPEATABLE = frozenset(
    {
        Kind.REVIEW_ROUNDS,
        Kind.APPROVAL,
        Kind.COLLIDING,
        Kind.NO_TENANT,
        Kind.OTHER_TENANT,
        Kind.MIDDLEWARE,
        Kind.SUBGRAPH,
        Kind.RETRY_POLICY,
        Kind.PARALLEL,
        Kind.MCP,
    }
)
"""The kinds whose person asks for the same again, in a third of their schedules."""
_STATELESS_FAULTS = (Fault.TRANSIENT, Fault.REJECT)
"""What a ``no_checkpointer`` schedule's providers may answer besides success."""
_TRAVEL: dict[Kind, Literal["history", "fork"]] = {Kind.HISTORY: "history", Kind.FORK: "fork"}
_FACES: dict[Kind, Literal["middleware", "functional"]] = {
    Kind.MIDDLEWARE: "middleware",
    Kind.FUNCTIONAL: "functional",
}
_REISSUE: dict[Kind, Literal["lost", "resend"]] = {
    Kind.REISSUED: "lost",
    Kind.RESENT: "resend",
    Kind.REUSED_IDS: "resend",
    Kind.SUMMARIZED: "resend",
}
_RESUME_TENANT: dict[Kind, Literal["absent", "other"]] = {
    Kind.NO_TENANT: "absent",
    Kind.OTHER_TENANT: "other",
}


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
    return start_forked_child(fn, *args, crash_at=crash_at, mode=mode, hit=hit).wait(timeout)


@dataclass(eq=False)
class ForkedChild:
    """A child started by :func:`start_forked_child`: its ``pid``, then :meth:`wait`."""

    process: Any
    receiver: Any

    @property
    def pid(self) -> int:
        """The child's process id."""
        return int(self.process.pid)

    def wait(self, timeout: float = 120.0) -> ChildExit:
        """Collect what the child reported and its exit (kill it after ``timeout`` s of silence,
        multiplied by ``faults.timeout_scale()``)."""
        timeout = scaled(timeout)
        messages: list[tuple[str, Any]] = []
        try:
            while self.receiver.poll(timeout):
                messages.append(self.receiver.recv())
        except EOFError:
            pass
        finally:
            self.receiver.close()
        self.process.join(timeout)
        if self.process.exitcode is None:
            self.process.kill()
            self.process.join()
            raise TimeoutError(f"child {self.pid} did not finish within {timeout:.0f}s")
        found = dict(messages)
        crashed = found.get("crashed")
        return ChildExit(
            exitcode=self.process.exitcode,
            crashed_at=None if crashed is None else CrashPoint(crashed),
            value=found.get("value"),
            error=found.get("error"),
        )


def start_forked_child(
    fn: Callable[..., Any],
    *args: Any,
    crash_at: CrashPoint | None = None,
    mode: CrashMode | str = CrashMode.EXIT,
    hit: int = 1,
) -> ForkedChild:
    """Start ``fn(*args)`` in a forkserver child and return at once (freeze it, then wait)."""
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
    return ForkedChild(process, receiver)
