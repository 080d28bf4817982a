"""The scenario's providers and tools: the fakes a schedule acts on, the effect tools over
them, and the plain tools of its control run."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeAlias

from langchain_core.tools import BaseTool, StructuredTool

from langgraph_effects.core.model import (
    Evidence,
    Operation,
    OperationStatus,
    ProviderContract,
)
from langgraph_effects.effects import EffectContext, EffectTool, effect
from langgraph_effects.testing.faults import (
    CrashPoint,
    crash_point,
)
from langgraph_effects.testing.mcp_server import SERVER
from langgraph_effects.testing.providers import (
    FakeClock,
    FakeCRM,
    FakeMail,
    FakeProvider,
    FakeTicketing,
)

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


_SCHEMAS: dict[tuple[bool, str], Any] = {}
"""The argument schema of each built-in tool (effect or plain), inferred once: pydantic
builds one in milliseconds, and every schedule builds its tools again."""


def _plain(fn: Callable[..., Any], *, effect_tool: bool = False) -> StructuredTool:
    """``fn`` as a plain tool (what ``@tool`` makes of it), its schema inferred once per
    name; ``effect_tool``: the schema of ``@effect(...)(fn)``, the context left out."""
    key = (effect_tool, fn.__name__)
    schema = _SCHEMAS.get(key)
    if schema is None:
        made = effect("schema.probe")(fn) if effect_tool else StructuredTool.from_function(fn)
        schema = _SCHEMAS[key] = made.args_schema
    return StructuredTool(
        name=fn.__name__, description=inspect.getdoc(fn) or "", args_schema=schema, func=fn
    )


def _effect_plain(fn: Callable[..., Any]) -> StructuredTool:
    return _plain(fn, effect_tool=True)


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
    @_effect_plain
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
    @_effect_plain
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
    @_effect_plain
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

    @_plain
    def close_case(case_id: str, resolution: str) -> dict[str, Any]:
        """Close a CRM case with a resolution."""
        return around(lambda: crm.close_case(case_id, resolution))

    @_plain
    def send_mail(to: str, subject: str, body: str) -> dict[str, Any]:
        """Send an e-mail."""
        return around(lambda: mail.send(to, subject, body))

    @_plain
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
