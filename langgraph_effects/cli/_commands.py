"""The commands as the operator sees them: names, arguments, options and help.

Each body runs in the module named by ``deferred``, imported only when the
command runs, so ``--help`` stays instant.
"""

from __future__ import annotations

from typing import Annotated

import typer

from langgraph_effects.cli._app import app, deferred
from langgraph_effects.ledger._defaults import DEFAULT_SCAN, LEDGER_URL_ENV

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar=list(LEDGER_URL_ENV),
        metavar="URL",
        help="Ledger URL: sqlite:///file.db, sqlite:////abs/file.db or postgresql://...",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output (stable keys).")]
OperationArg = Annotated[
    str,
    typer.Argument(metavar="OPERATION_ID", help="The operation id, or a unique prefix of it."),
]
TenantRequired = Annotated[
    str,
    typer.Option(
        "--tenant", "-t", envvar="LGE_TENANT", metavar="TENANT", help="The operation's tenant."
    ),
]
TenantFilter = Annotated[
    str | None,
    typer.Option("--tenant", "-t", envvar="LGE_TENANT", metavar="TENANT", help="Only this tenant."),
]
TenantFound = Annotated[
    str | None,
    typer.Option(
        "--tenant",
        "-t",
        envvar="LGE_TENANT",
        metavar="TENANT",
        help="The operation's tenant (default: the one tenant that holds this id).",
    ),
]
ByOption = Annotated[
    str | None,
    typer.Option(
        "--by",
        envvar="LGE_OPERATOR",
        metavar="NAME",
        help="Your name as you give it; recorded beside the verified identity "
        "(default: the verified identity).",
    ),
]
IdentityOption = Annotated[
    str | None,
    typer.Option(
        "--identity",
        envvar="LGE_IDENTITY",
        metavar="MODULE:FUNCTION",
        help="A hook returning your verified identity (default: the OS user).",
    ),
]
ReasonOption = Annotated[
    str,
    typer.Option("--reason", metavar="TEXT", help="Why: recorded in the event log (required)."),
]
PolicyOption = Annotated[
    str | None,
    typer.Option(
        "--policy",
        envvar="LGE_RESOLVE_POLICY",
        metavar="MODULE:FUNCTION",
        help="A hook deciding who may decide what.",
    ),
]


@app.command("list")
@deferred("_inspect")
def list_operations(
    ctx: typer.Context,
    db: DbOption = None,
    tenant: TenantFilter = None,
    status: Annotated[
        list[str] | None,
        typer.Option("--status", "-s", metavar="STATUS", help="Only these statuses (repeatable)."),
    ] = None,
    action: Annotated[
        str | None, typer.Option("--action", "-a", metavar="ACTION", help="Only this action.")
    ] = None,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="DURATION",
            help="Status unchanged for at least this long (10m, 2h, 1d).",
        ),
    ] = None,
    include_terminal: Annotated[
        bool, typer.Option("--all", help="Also confirmed and rejected operations.")
    ] = False,
    limit: Annotated[
        int, typer.Option("--limit", min=1, metavar="N", help="At most this many rows.")
    ] = 100,
    full_ids: Annotated[
        bool, typer.Option("--full-ids", help="Whole operation ids (default: unique prefixes).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """List operations: by default the open ones, unknown first, oldest status first.

    Age is the time in the current status (status_changed_at): recording
    inconclusive evidence does not make an old unknown look young. Ids are
    abbreviated to unique prefixes, which every command accepts.

    JSON: {"operations": [{tenant_id, operation_id, workflow_id, action,
    action_version, target, provider, status, attempts, idempotency_key,
    created_at, updated_at, status_changed_at, first_dispatched_at, age_seconds,
    error}], "count": N}
    """


@app.command()
@deferred("_inspect")
def show(
    ctx: typer.Context,
    operation_id: OperationArg,
    tenant: TenantFound = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one operation: its record, events, evidence, what the next run does and what a
    retry would risk.

    JSON: {"operation": {every record field}, "events": [event...],
    "conflict": the late receipt contradicting a rejected record, or null,
    "outlook": {decisions, status_since, next_run, risk, attempts,
    idempotency_key, first_dispatched_at, key_age_seconds, key_window_known,
    key_retention_seconds, key_expires_at, key_window_open}}
    """


@app.command()
@deferred("_inspect")
def stats(
    ctx: typer.Context,
    db: DbOption = None,
    tenant: TenantFilter = None,
    as_json: JsonOption = False,
) -> None:
    """Counts per status, age of the oldest unknown, reconciliation outcomes, resolutions.

    JSON: {counts: {status: n}, total, oldest_unknown_at, oldest_unknown_age_seconds,
    oldest_dispatching_at, reconciliation: {confirmed, rejected, inconclusive},
    operator_resolutions}. Duplicates prevented (replays) happen in the workers and are
    not stored in the ledger: the metric ``lge.duplicates_prevented`` counts them.
    """


@app.command()
@deferred("_inspect")
def events(
    ctx: typer.Context,
    db: DbOption = None,
    tenant: TenantFilter = None,
    after: Annotated[
        int, typer.Option("--after", min=0, metavar="EVENT_ID", help="Start after this event id.")
    ] = 0,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep polling for new events.")
    ] = False,
    interval: Annotated[
        float,
        typer.Option("--interval", min=0.01, metavar="SECONDS", help="Seconds between polls."),
    ] = 1.0,
    count: Annotated[
        int | None,
        typer.Option("--count", min=1, metavar="N", help="Stop after this many events."),
    ] = None,
    limit: Annotated[
        int,
        typer.Option("--limit", min=1, metavar="N", help="Without --follow: at most this many."),
    ] = 100,
    as_json: JsonOption = False,
) -> None:
    """Print the event log after --after; with --follow, keep polling (Ctrl-C stops).

    JSON: one object per line: {event_id, tenant_id, operation_id, seq, kind,
    from_status, to_status, actor, fencing_token, at, evidence, detail}.
    Resume later with --after <last event_id>.
    """


@app.command()
@deferred("_decide")
def resolve(
    ctx: typer.Context,
    operation_id: OperationArg,
    tenant: TenantRequired,
    reason: ReasonOption,
    confirm: Annotated[
        bool, typer.Option("--confirm", help="The effect happened: record it as confirmed.")
    ] = False,
    reject: Annotated[
        bool, typer.Option("--reject", help="The effect did not happen and never will.")
    ] = False,
    by: ByOption = None,
    identity: IdentityOption = None,
    evidence: Annotated[
        str | None,
        typer.Option(
            "--evidence",
            metavar="JSON",
            help='What you saw, e.g. {"summary": "...", "provider_result_id": "..."}.',
        ),
    ] = None,
    result: Annotated[
        str | None,
        typer.Option(
            "--result", metavar="JSON", help="The result to replay to the model (with --confirm)."
        ),
    ] = None,
    policy: PolicyOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Decide an unknown operation: --confirm (it happened) or --reject (it did not).

    JSON: {"operation": {every record field, after the decision}}
    """


@app.command()
@deferred("_decide")
def retry(
    ctx: typer.Context,
    operation_id: OperationArg,
    tenant: TenantRequired,
    reason: ReasonOption,
    by: ByOption = None,
    identity: IdentityOption = None,
    accept_duplicate_risk: Annotated[
        bool,
        typer.Option(
            "--accept-duplicate-risk",
            help="Retry even though the record does not prove the provider deduplicates the "
            "resend: no idempotency key, no recorded key window, or the window has passed "
            "(you checked that the first attempt did not apply).",
        ),
    ] = False,
    policy: PolicyOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Authorize a retry of an unknown operation: the next run dispatches it again.

    The resend reuses the operation's idempotency key and pinned payload. It
    is refused (exit 4) unless the record proves the provider still
    deduplicates it (a key, a recorded retention, first sent less than that
    ago), or --accept-duplicate-risk says you checked the provider.

    JSON: {"operation": {every record field, after the decision}}
    """


@app.command()
@deferred("_decide")
def approve(
    ctx: typer.Context,
    operation_id: OperationArg,
    tenant: TenantRequired,
    reason: ReasonOption,
    by: ByOption = None,
    identity: IdentityOption = None,
    policy: PolicyOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Approve a prepared operation waiting for approval: the next run dispatches it
    without asking (the pinned payload, after the effect's authorize check).

    JSON: {"operation": {every record field, after the decision}}
    """


@app.command("reject")
@deferred("_decide")
def reject_operation(
    ctx: typer.Context,
    operation_id: OperationArg,
    tenant: TenantRequired,
    reason: ReasonOption,
    by: ByOption = None,
    identity: IdentityOption = None,
    policy: PolicyOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Reject a prepared operation (refuse its approval) or an unknown one (it did not
    happen): the next run returns the rejection to the model and never sends it.

    JSON: {"operation": {every record field, after the decision}}
    """


@app.command()
@deferred("_stuck")
def stuck(
    ctx: typer.Context,
    db: DbOption = None,
    tenant: TenantFilter = None,
    scan: Annotated[
        int,
        typer.Option(
            "--scan", min=1, metavar="N", help="Examine at most N dispatching operations."
        ),
    ] = DEFAULT_SCAN,
    mark_unknown: Annotated[
        bool,
        typer.Option(
            "--mark-unknown",
            help="Mark each one unknown (with --reason), so resolve and retry can decide it.",
        ),
    ] = False,
    reason: Annotated[
        str | None,
        typer.Option("--reason", metavar="TEXT", help="Why (with --mark-unknown)."),
    ] = None,
    by: ByOption = None,
    identity: IdentityOption = None,
    full_ids: Annotated[
        bool, typer.Option("--full-ids", help="Whole operation ids (default: unique prefixes).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """List operations stuck dispatching: owner process gone (on this host) or lease expired.

    The next run of their thread would take them over; a thread nobody runs
    again leaves them dispatching for ever. --mark-unknown moves each to
    unknown (the event names you and the reason; the provider may have acted,
    so nothing is sent and nothing is rejected), where resolve and retry apply.
    Exit 4 when one could not be marked (its owner settled it meanwhile).

    JSON: {"stuck": [{the list keys, lease_owner, lease_expires_at, owner_dead,
    why, marked_unknown, refused}], "count": N, "scanned": N, "complete": bool}
    """
