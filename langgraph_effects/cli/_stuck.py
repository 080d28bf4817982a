"""``stuck``: operations left dispatching by a dead owner or a lapsed lease."""

from __future__ import annotations

from datetime import datetime

import typer
from rich.text import Text

from langgraph_effects.cli._app import ExitCode
from langgraph_effects.cli._decide import _checked_reason
from langgraph_effects.cli._identity import _identify
from langgraph_effects.cli._ledger import _abbreviations, _ledger
from langgraph_effects.cli._report import _echo_json, _Failure, _reporting
from langgraph_effects.cli._text import _age, _console, _iso, _lit, _summary, _table
from langgraph_effects.core.model import (
    utcnow,
)
from langgraph_effects.errors import RECORD_MOVED
from langgraph_effects.ledger.sweep import Sweep, find_stuck


def stuck(
    ctx: typer.Context,
    db: str | None,
    tenant: str | None,
    scan: int,
    mark_unknown: bool,
    reason: str | None,
    by: str | None,
    identity: str | None,
    full_ids: bool,
    as_json: bool,
) -> None:
    """The body of ``stuck`` (declared in ``_commands``)."""
    with _reporting(as_json):
        who = None
        if mark_unknown:
            if reason is None:
                raise _Failure(ExitCode.USAGE, "usage", "--mark-unknown needs --reason")
            _checked_reason(reason)
            who = _identify(by, identity)
        elif reason is not None:
            raise _Failure(ExitCode.USAGE, "usage", "--reason goes with --mark-unknown")
        with _ledger(ctx, db) as ledger:
            now = utcnow()
            sweep = find_stuck(ledger, tenant_id=tenant, now=now, scan=scan)
            outcomes: dict[str, str | None] = {}
            if who is not None and reason is not None:
                verified = f"{who.source}:{who.verified}"
                note = f"stuck: {reason} (claimed {who.claimed}, verified {verified})"
                for found in sweep.stuck:
                    op = found.operation
                    try:
                        ledger.mark_unknown(
                            op.tenant_id,
                            op.operation_id,
                            token=op.fencing_token,
                            reason=f"{found.why}; {note}"[:2000],
                            actor=who.verified,
                        )
                        outcomes[op.operation_id] = None
                    except RECORD_MOVED as exc:
                        outcomes[op.operation_id] = f"{exc}; nothing was changed"
            refused = [m for m in outcomes.values() if m is not None]
            if as_json:
                rows = [
                    {
                        **_summary(f.operation, now),
                        "lease_owner": f.operation.lease_owner,
                        "lease_expires_at": _iso(f.operation.lease_expires_at),
                        "owner_dead": f.owner_dead,
                        "why": f.why,
                        "marked_unknown": f.operation.operation_id in outcomes
                        and outcomes[f.operation.operation_id] is None,
                        "refused": outcomes.get(f.operation.operation_id),
                    }
                    for f in sweep.stuck
                ]
                _echo_json(
                    {
                        "stuck": rows,
                        "count": len(rows),
                        "scanned": sweep.scanned,
                        "complete": sweep.complete,
                    }
                )
            else:
                _print_stuck(sweep, outcomes, now, full_ids)
            if refused:
                raise typer.Exit(int(ExitCode.REFUSED))


def _print_stuck(
    sweep: Sweep, outcomes: dict[str, str | None], now: datetime, full_ids: bool
) -> None:
    console = _console()
    if not sweep.stuck:
        console.print(f"no stuck operations (examined {sweep.scanned} dispatching)")
    else:
        short = _abbreviations([f.operation.operation_id for f in sweep.stuck], full_ids)
        rows = [
            [
                Text(_lit(short[f.operation.operation_id])),
                Text(_age(now - f.operation.status_changed_at)),
                Text(str(f.operation.attempts)),
                *(
                    Text(_lit(v))
                    for v in (f.operation.tenant_id, f.operation.action, f.operation.target or "-")
                ),
                Text(_lit(f.why)),
            ]
            for f in sweep.stuck
        ]
        _table(
            console,
            ["operation", "since", "tries", "tenant", "action", "target", "why"],
            rows,
            right=frozenset({1, 2}),
            flexible=frozenset({3, 4, 5, 6}),
        )
    for op_id, refusal in outcomes.items():
        line = f"{op_id}: refused: {refusal}" if refusal else f"{op_id} is now unknown"
        console.print(Text(_lit(line)))
    if not sweep.complete:
        console.print(f"(examined the oldest {sweep.scanned} dispatching; raise --scan for more)")
