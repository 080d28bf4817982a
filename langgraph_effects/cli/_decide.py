"""The deciding commands: ``resolve``, ``retry``, ``approve``, ``reject``."""

from __future__ import annotations

import typer
from rich.text import Text

from langgraph_effects.cli._app import ExitCode
from langgraph_effects.cli._identity import _check_policy, _identify, _load_hook
from langgraph_effects.cli._ledger import _ledger, _require
from langgraph_effects.cli._outlook import _approver, _outlook, _resend_risk
from langgraph_effects.cli._parse import _parse_json
from langgraph_effects.cli._report import _echo_json, _Failure, _reporting
from langgraph_effects.cli._text import _console, _lit, _status
from langgraph_effects.core.model import (
    Decision,
    Evidence,
    EvidenceKind,
    Operation,
    OperationStatus,
    utcnow,
)
from langgraph_effects.errors import (
    IllegalTransition,
    InvalidInput,
)

S = OperationStatus


def _report_decision(op: Operation, as_json: bool) -> None:
    if as_json:
        _echo_json({"operation": op.model_dump(mode="json")})
        return
    _console().print(
        Text.assemble(
            _lit(op.operation_id), " is now ", _status(op.status), f" (record v{op.record_version})"
        )
    )
    if op.status is S.PREPARED:
        _console().print(Text(_lit(f"next run: {_outlook(op, utcnow()).next_run}")))


def _not_unknown(op: Operation, decision: Decision) -> IllegalTransition:
    """Why ``resolve`` / ``retry`` refuse a record that is not unknown, and what to do."""
    hint = ""
    if op.status is S.PREPARED:
        hint = "; a prepared operation is decided with approve or reject"
    return IllegalTransition(
        op.operation_id,
        status=op.status.value,
        target=decision.value,
        why="only an unknown operation is resolved or retried; on its next run the graph "
        + _outlook(op, utcnow()).next_run
        + hint,
    )


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
        loaded = _load_hook("--policy", policy)
        with _ledger(ctx, db) as ledger:
            op = _require(ledger, tenant, operation_id)
            _check_policy(loaded, who.verified, op, decision)
            if op.status is not S.UNKNOWN:
                raise _not_unknown(op, decision)
            _report_decision(ledger.resolve(op.tenant_id, op.operation_id, resolution), as_json)


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
    with _reporting(as_json):
        _checked_reason(reason)
        who = _identify(by, identity)
        loaded = _load_hook("--policy", policy)
        with _ledger(ctx, db) as ledger:
            op = _require(ledger, tenant, operation_id)
            _check_policy(loaded, who.verified, op, Decision.RETRY)
            if op.status is not S.UNKNOWN:
                raise _not_unknown(op, Decision.RETRY)
            problem = _resend_risk(op, utcnow())
            if problem is not None and not accept_duplicate_risk:
                raise IllegalTransition(
                    op.operation_id,
                    status=op.status.value,
                    target="retry",
                    why=f"{problem}: if the first attempt applied, a retry applies it twice. "
                    "Check the provider and resolve --confirm/--reject, or pass "
                    "--accept-duplicate-risk",
                )
            order = who.resolution(Decision.RETRY, reason)
            _report_decision(ledger.resolve(op.tenant_id, op.operation_id, order), as_json)


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
    with _reporting(as_json):
        _checked_reason(reason)
        who = _identify(by, identity)
        loaded = _load_hook("--policy", policy)
        with _ledger(ctx, db) as ledger:
            op = _require(ledger, tenant, operation_id)
            _check_policy(loaded, who.verified, op, Decision.APPROVE)
            if op.status is not S.PREPARED or op.attempts > 0 or _approver(op) is not None:
                raise IllegalTransition(
                    op.operation_id,
                    status=op.status.value,
                    target="approved",
                    why="only a prepared operation that was never sent nor approved awaits "
                    "approval; on its next run the graph " + _outlook(op, utcnow()).next_run,
                )
            decided = ledger.resolve(
                op.tenant_id, op.operation_id, who.resolution(Decision.APPROVE, reason)
            )
            _report_decision(decided, as_json)


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
    with _reporting(as_json):
        _checked_reason(reason)
        who = _identify(by, identity)
        loaded = _load_hook("--policy", policy)
        with _ledger(ctx, db) as ledger:
            op = _require(ledger, tenant, operation_id)
            _check_policy(loaded, who.verified, op, Decision.REJECT)
            if op.status not in (S.PREPARED, S.UNKNOWN):
                raise IllegalTransition(
                    op.operation_id,
                    status=op.status.value,
                    target="rejected",
                    why="only a prepared or unknown operation is rejected; on its next run the "
                    "graph " + _outlook(op, utcnow()).next_run,
                )
            decided = ledger.resolve(
                op.tenant_id, op.operation_id, who.resolution(Decision.REJECT, reason)
            )
            _report_decision(decided, as_json)
