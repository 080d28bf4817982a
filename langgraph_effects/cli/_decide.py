"""The deciding commands: ``resolve``, ``retry``, ``approve``, ``reject``."""

from __future__ import annotations

from collections.abc import Callable

import typer
from rich.text import Text

from langgraph_effects.cli._app import ExitCode
from langgraph_effects.cli._identity import _check_policy, _identify, _Identity, _load_hook
from langgraph_effects.cli._ledger import _ledger, _require
from langgraph_effects.cli._outlook import _outlook, _resend_risk
from langgraph_effects.cli._parse import _parse_json
from langgraph_effects.cli._report import _echo_json, _Failure, _reporting
from langgraph_effects.cli._text import _console, _lit
from langgraph_effects.core.model import (
    Decision,
    Evidence,
    EvidenceKind,
    Operation,
    OperationStatus,
    Resolution,
    utcnow,
)
from langgraph_effects.core.plan import AWAITS_APPROVAL, operator_decisions
from langgraph_effects.errors import (
    InvalidInput,
)
from langgraph_effects.ledger.base import Ledger

S = OperationStatus


_DONE = {
    Decision.APPROVE: "approved",
    Decision.REJECT: "rejected",
    Decision.CONFIRM: "confirmed",
    Decision.RETRY: "retry ordered",
}
"""What each decision did, in the words that report it."""


def _already(op: Operation, decision: Decision) -> str | None:
    """What the record says when ``decision`` was already taken (a repeated command)."""
    if decision is Decision.APPROVE and op.status is S.PREPARED and op.approved_by:
        return f"already approved by {op.approved_by}"
    if decision is Decision.RETRY and op.status is S.PREPARED and op.attempts > 0:
        return "already ordered to retry"
    if decision is Decision.REJECT and op.status is S.REJECTED:
        return "already rejected"
    if decision is Decision.CONFIRM and op.status is S.CONFIRMED:
        return "already confirmed"
    return None


def _settle(
    ledger: Ledger, op: Operation, order: Resolution, refusal: str | None, as_json: bool
) -> None:
    """Take the decision and say what happened: done, already done (nothing changes, exit
    0), or refused with ``refusal`` (exit 4)."""
    already = _already(op, order.decision)
    if already is None and refusal is not None:
        raise _Failure(
            ExitCode.REFUSED,
            "refused",
            f"{op.operation_id} cannot be {_DONE[order.decision]}: it is {op.status.value}, and "
            f"{refusal}; on its next run the graph {_outlook(op, utcnow()).next_run}; "
            "nothing was changed",
        )
    decided = op if already else ledger.resolve(op.tenant_id, op.operation_id, order)
    if as_json:
        _echo_json({"operation": decided.model_dump(mode="json"), "changed": not already})
        return
    what = f"is {already}" if already else f"{_DONE[order.decision]} by {order.by}"
    after = _outlook(decided, utcnow()).next_run
    line = f"{decided.operation_id} {what}; the next run {after}"
    _console().print(Text(_lit(line + ("; nothing was changed" if already else ""))))


def _not_unknown(op: Operation) -> str:
    """Why ``resolve`` / ``retry`` refuse a record that is not unknown."""
    why = "only an unknown operation is resolved or retried"
    if op.status is S.PREPARED:
        why += " (a prepared one is decided with approve or reject)"
    return why


def _operate(
    ctx: typer.Context,
    db: str | None,
    tenant: str,
    operation_id: str,
    who: _Identity,
    policy: str | None,
    order: Resolution,
    why_not: Callable[[Operation], str],
    as_json: bool,
    risk: Callable[[Operation], str | None] = lambda op: None,
) -> None:
    """Every deciding command's steps: read the record, check the policy, decide or refuse.

    Refused when ``operator_decisions`` does not allow ``order.decision`` on the record
    (``why_not`` says why), else when ``risk`` names one (``retry``'s resend risk).
    """
    loaded = _load_hook("--policy", policy)
    with _ledger(ctx, db) as ledger:
        op = _require(ledger, tenant, operation_id)
        _check_policy(loaded, who.verified, op, order.decision)
        refusal = risk(op) if order.decision in operator_decisions(op) else why_not(op)
        _settle(ledger, op, order, refusal, as_json)


def _checked_reason(reason: str) -> str:
    if not reason.strip():
        raise _Failure(ExitCode.USAGE, "usage", "--reason must say why")
    return reason


def resolve(
    ctx: typer.Context,
    operation_id: str,
    tenant: str,
    reason: str,
    confirm: bool,
    reject: bool,
    by: str | None,
    identity: str | None,
    evidence: str | None,
    result: str | None,
    policy: str | None,
    db: str | None,
    as_json: bool,
) -> None:
    """The body of ``resolve`` (declared in ``_commands``)."""
    with _reporting(as_json):
        if confirm == reject:
            raise _Failure(ExitCode.USAGE, "usage", "give exactly one of --confirm or --reject")
        if reject and result is not None:
            raise _Failure(ExitCode.USAGE, "usage", "--result goes with --confirm only")
        _checked_reason(reason)
        who = _identify(by, identity)
        decision = Decision.CONFIRM if confirm else Decision.REJECT
        seen = _parse_json("--evidence", evidence)
        if seen is not None and not isinstance(seen, dict):
            raise InvalidInput("--evidence must be a JSON object")
        replay = _parse_json("--result", result)
        proof = None
        if seen is not None:
            kind = EvidenceKind.CONFIRMED if confirm else EvidenceKind.REJECTED
            if seen.get("kind", kind.value) != kind.value or seen.get("source", "operator") != (
                "operator"
            ):
                raise InvalidInput(
                    f"--evidence kind/source contradict the decision (expected {kind.value}, "
                    "operator)"
                )
            # An operator's evidence is always the operator's: the ledger tells
            # a person from a reconciler by the evidence source.
            proof = Evidence(**{"summary": reason, **seen, "kind": kind, "source": "operator"})
        resolution = who.resolution(
            decision,
            reason,
            result=replay,
            provider_result_id=proof.provider_result_id if proof else None,
            evidence=proof,
        )
        _operate(ctx, db, tenant, operation_id, who, policy, resolution, _not_unknown, as_json)


def retry(
    ctx: typer.Context,
    operation_id: str,
    tenant: str,
    reason: str,
    by: str | None,
    identity: str | None,
    accept_duplicate_risk: bool,
    policy: str | None,
    db: str | None,
    as_json: bool,
) -> None:
    """The body of ``retry`` (declared in ``_commands``)."""

    def risky(op: Operation) -> str | None:
        """Why a retry is refused although the record allows it: the resend's risk."""
        problem = _resend_risk(op, utcnow())
        if problem is None or accept_duplicate_risk:
            return None
        return (
            f"{problem}: if the first attempt applied, a retry applies it twice. "
            "Check the provider and resolve --confirm/--reject, or pass "
            "--accept-duplicate-risk"
        )

    with _reporting(as_json):
        _checked_reason(reason)
        who = _identify(by, identity)
        order = who.resolution(Decision.RETRY, reason)
        _operate(ctx, db, tenant, operation_id, who, policy, order, _not_unknown, as_json, risky)


def approve(
    ctx: typer.Context,
    operation_id: str,
    tenant: str,
    reason: str,
    by: str | None,
    identity: str | None,
    policy: str | None,
    db: str | None,
    as_json: bool,
) -> None:
    """The body of ``approve`` (declared in ``_commands``)."""
    _decide(Decision.APPROVE, ctx, operation_id, tenant, reason, by, identity, policy, db, as_json)


def reject_operation(
    ctx: typer.Context,
    operation_id: str,
    tenant: str,
    reason: str,
    by: str | None,
    identity: str | None,
    policy: str | None,
    db: str | None,
    as_json: bool,
) -> None:
    """The body of ``reject_operation`` (declared in ``_commands``)."""
    _decide(Decision.REJECT, ctx, operation_id, tenant, reason, by, identity, policy, db, as_json)


_REFUSED = {
    Decision.APPROVE: AWAITS_APPROVAL,
    Decision.REJECT: "only a prepared or unknown operation is rejected",
}


def _decide(
    decision: Decision,
    ctx: typer.Context,
    operation_id: str,
    tenant: str,
    reason: str,
    by: str | None,
    identity: str | None,
    policy: str | None,
    db: str | None,
    as_json: bool,
) -> None:
    """``approve`` or ``reject``: the decision as ``operator_decisions`` allows it."""
    with _reporting(as_json):
        _checked_reason(reason)
        who = _identify(by, identity)
        order = who.resolution(decision, reason)
        refused = _REFUSED[decision]
        _operate(ctx, db, tenant, operation_id, who, policy, order, lambda op: refused, as_json)
