"""The reading commands: ``list``, ``show``, ``stats``, ``events``."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timedelta
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from langgraph_effects.cli._ledger import _abbreviations, _ledger, _require
from langgraph_effects.cli._outlook import _COMMAND, _key_expiry, _outlook
from langgraph_effects.cli._parse import _ORDER, _statuses, parse_duration
from langgraph_effects.cli._report import _echo_json, _reporting
from langgraph_effects.cli._text import (
    _age,
    _console,
    _event_json,
    _event_line,
    _event_note,
    _iso,
    _lit,
    _seconds,
    _status,
    _summary,
    _table,
    _width,
    _wrapped,
)
from langgraph_effects.core.model import (
    EvidenceKind,
    Operation,
    OperationStatus,
    describe_actor,
    utcnow,
)
from langgraph_effects.core.plan import operator_decisions, receipt_conflict
from langgraph_effects.errors import (
    InvalidInput,
)
from langgraph_effects.ledger.base import LedgerStats

S = OperationStatus


def list_operations(
    ctx: typer.Context,
    db: str | None,
    tenant: str | None,
    status: list[str] | None,
    action: str | None,
    older_than: str | None,
    include_terminal: bool,
    limit: int,
    full_ids: bool,
    as_json: bool,
) -> None:
    """The body of ``list_operations`` (declared in ``_commands``)."""
    with _reporting(as_json), _ledger(ctx, db) as ledger:
        now = utcnow()
        before = None
        if older_than:
            try:
                before = now - parse_duration(older_than)
            except OverflowError:
                raise InvalidInput(
                    f"--older-than {older_than!r} reaches back before the year 1"
                ) from None
        rows: list[Operation] = []
        for wanted in _statuses(status, include_terminal):
            if len(rows) >= limit:
                break
            rows += ledger.list(
                tenant_id=tenant,
                status=wanted,
                action=action,
                updated_before=before,
                limit=limit - len(rows),
            )
        if as_json:
            _echo_json({"operations": [_summary(op, now) for op in rows], "count": len(rows)})
            return
        console = _console()
        if not rows:
            console.print("no operations match")
            return
        short = _abbreviations([op.operation_id for op in rows], full_ids)
        # One tenant asked for: its name on every row says nothing.
        names = ["action", "target"] if tenant else ["tenant", "action", "target"]
        table: list[list[Text]] = []
        for op in rows:
            free = {"tenant": op.tenant_id, "action": op.action, "target": op.target or "-"}
            table.append(
                [
                    Text(_lit(short[op.operation_id])),
                    _status(op.status),
                    Text(_age(now - op.status_changed_at)),
                    Text(str(op.attempts)),
                    *(Text(_lit(free[name])) for name in names),
                ]
            )
        _table(
            console,
            ["operation", "status", "age", "tries", *names],
            table,
            right=frozenset({2, 3}),
            flexible=frozenset(range(4, 4 + len(names))),
        )
        if len(rows) == limit:
            console.print(f"(first {limit}; raise --limit for more)")


def show(
    ctx: typer.Context,
    operation_id: str,
    tenant: str | None,
    db: str | None,
    as_json: bool,
) -> None:
    """The body of ``show`` (declared in ``_commands``)."""
    with _reporting(as_json), _ledger(ctx, db) as ledger:
        op = _require(ledger, tenant, operation_id)
        events = ledger.events(op.tenant_id, op.operation_id)
        now = utcnow()
        outlook = _outlook(op, now)
        conflict = receipt_conflict(op, events)
        if as_json:
            _echo_json(
                {
                    "operation": op.model_dump(mode="json"),
                    "events": [_event_json(e) for e in events],
                    "outlook": outlook.as_json(op, now),
                    "conflict": None if conflict is None else conflict.model_dump(mode="json"),
                }
            )
            return
        console = _console()
        record = Table.grid(padding=(0, 2))
        record.add_column(style="bold", no_wrap=True)
        # Values wrap between words; on a terminal a word wider than the line (a digest) is
        # cut with an ellipsis (the whole value: --json); in a pipe nothing is cut.
        record.add_column(overflow="ellipsis" if _width(console) else "fold")
        fields: list[tuple[str, str | Text]] = [
            ("operation", op.operation_id),
            ("tenant", op.tenant_id),
            ("workflow", op.workflow_id or "-"),
            ("action", f"{op.action} v{op.action_version}"),
            ("target", op.target or "-"),
            ("provider", op.provider or "-"),
            ("status", Text.assemble(_status(op.status), f" since {_iso(op.status_changed_at)}")),
            ("attempts", str(op.attempts)),
            ("idempotency key", op.idempotency_key or "- (none: the provider cannot deduplicate)"),
            ("key expires", _key_expiry(op)),
            ("provider request", op.provider_request_id or "-"),
            ("provider result", op.provider_result_id or "-"),
            ("payload digest", op.payload_digest),
            ("payload", json.dumps(op.payload) if op.payload_stored else "(digest only)"),
            (
                "authorization",
                f"approved by {op.approved_by}" if op.approved_by else op.authorization_ref or "-",
            ),
            ("created", f"{_iso(op.created_at)} ({_age(now - op.created_at)} ago)"),
            ("first dispatched", _iso(op.first_dispatched_at) or "-"),
            ("last dispatched", _iso(op.last_dispatched_at) or "-"),
            ("evidence checked", _iso(op.evidence_checked_at) or "-"),
        ]
        if op.lease_owner:
            owner = describe_actor(op.lease_owner)
            fields.append(("lease", f"{owner} until {_iso(op.lease_expires_at)}"))
        if op.error:
            fields.append(("error", op.error))
        if conflict is not None:
            fields.append(
                (
                    "CONFLICT",
                    f"recorded rejected, but a receipt of {_iso(conflict.observed_at)} says the "
                    "provider carried it out: review it with the provider",
                )
            )
        if op.status is S.CONFIRMED:
            fields.append(("result", json.dumps(op.result)))
        for name, value in fields:
            record.add_row(name, value if isinstance(value, Text) else Text(_lit(value)))
        console.print(record)
        console.print()
        # One event per paragraph, wrapped between words under its sequence number.
        console.print(Text("events", style="bold"))
        width = _width(console)
        for e in events:
            note = _event_note(e)
            source = e.from_status.value if e.from_status else "-"
            token = "-" if e.fencing_token is None else str(e.fencing_token)
            line = (
                f"{e.seq:>3}  {e.at:%Y-%m-%d %H:%M:%S}  {e.kind.value:<12}  "
                f"{source} -> {e.to_status.value}  by {describe_actor(e.actor)}  (token {token})"
            )
            text = _lit(f"{line}  {note}" if note else line)
            console.print(Text(_wrapped(text, width, indent=5)), soft_wrap=True)
        console.print()
        console.print(Text.assemble(("next run: ", "bold"), _lit(outlook.next_run)))
        console.print(Text.assemble(("retry risk: ", "bold"), _lit(outlook.risk)))
        if decisions := operator_decisions(op):
            commands = ", ".join(f"langgraph-effects {_COMMAND[d]}" for d in decisions)
            console.print(Text.assemble(("you may: ", "bold"), commands))


def _stats_json(stats: LedgerStats, now: datetime) -> dict[str, Any]:
    oldest = stats.oldest_unknown_at
    return {
        "counts": {s.value: stats.counts.get(s, 0) for s in _ORDER},
        "total": stats.total,
        "oldest_unknown_at": _iso(oldest),
        "oldest_unknown_age_seconds": _seconds(now - oldest) if oldest else None,
        "oldest_dispatching_at": _iso(stats.oldest_dispatching_at),
        "reconciliation": {k.value: stats.reconciliation.get(k.value, 0) for k in EvidenceKind},
        "operator_resolutions": stats.operator_resolutions,
    }


def stats(
    ctx: typer.Context,
    db: str | None,
    tenant: str | None,
    as_json: bool,
) -> None:
    """The body of ``stats`` (declared in ``_commands``)."""
    with _reporting(as_json), _ledger(ctx, db) as ledger:
        figures = _stats_json(ledger.stats(tenant_id=tenant), utcnow())
        if as_json:
            _echo_json(figures)
            return
        console = _console()
        table = Table(show_header=False, show_edge=False, pad_edge=False)
        table.add_column(style="bold")
        table.add_column(justify="right")
        for name, count in figures["counts"].items():
            table.add_row(_status(S(name)), str(count))
        table.add_row("total", str(figures["total"]))
        console.print(table)
        age = figures["oldest_unknown_age_seconds"]
        console.print(
            "oldest unknown: " + ("-" if age is None else f"{_age(timedelta(seconds=age))} ago")
        )
        outcomes = ", ".join(f"{k} {v}" for k, v in figures["reconciliation"].items())
        console.print(f"reconciliation: {outcomes}")
        console.print(f"operator resolutions: {figures['operator_resolutions']}")


def events(
    ctx: typer.Context,
    db: str | None,
    tenant: str | None,
    after: int,
    follow: bool,
    interval: float,
    count: int | None,
    limit: int,
    as_json: bool,
) -> None:
    """The body of ``events`` (declared in ``_commands``)."""
    with _reporting(as_json), _ledger(ctx, db) as ledger:
        cursor, shown = after, 0
        budget = count if follow else min(limit, count or limit)
        console = None if as_json else _console()
        try:
            while True:
                page = ledger.feed(after_id=cursor, tenant_id=tenant, limit=100)
                for event in page:
                    if as_json:
                        typer.echo(json.dumps(_event_json(event)))
                    else:
                        assert console is not None
                        # One line per event, whatever the width: grep-friendly.
                        console.print(Text(_lit(_event_line(event))), soft_wrap=True)
                    cursor = event.event_id or cursor
                    shown += 1
                    if budget is not None and shown >= budget:
                        return
                sys.stdout.flush()
                if not page and not follow:
                    return
                if not page:
                    time.sleep(interval)
        except KeyboardInterrupt:
            return
