"""How ledger values are printed: inert text, ages, timestamps, event lines."""

from __future__ import annotations

import os
import re
import sys
from datetime import datetime, timedelta
from typing import Any

from rich.console import Console
from rich.text import Text

from langgraph_effects.core.model import (
    EventKind,
    Operation,
    OperationEvent,
    OperationStatus,
)

S = OperationStatus


def _console(*, stderr: bool = False) -> Console:
    # Created per command: CliRunner swaps sys.stdout between invocations. A
    # pipe gets a wide console (unless COLUMNS says otherwise) so ids are never cut.
    stream = sys.stderr if stderr else sys.stdout
    wide = stream.isatty() or "COLUMNS" in os.environ
    return Console(highlight=False, width=None if wide else 200, stderr=stderr, soft_wrap=stderr)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _lit(value: object) -> str:
    """A value from the ledger as inert text: control characters (terminal escapes),
    invisible and bidirectional-override characters shown as escapes.

    Rich markup stays literal because every value is printed as ``rich.text.Text``
    (or with ``markup=False``), never parsed.
    """

    def escape(match: re.Match[str]) -> str:
        char = match.group()
        code = ord(char)
        return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")

    return _CONTROL.sub(escape, str(value))


def _iso(value: datetime | None) -> str | None:
    """ISO 8601 as pydantic writes it (UTC as ``Z``), so all JSON timestamps look alike."""
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else round(value.total_seconds(), 3)


def _age(delta: timedelta | None) -> str:
    """``3d 4h``, ``12m 5s``: two units are enough for a person."""
    if delta is None:
        return "-"
    seconds = max(0, int(delta.total_seconds()))
    units = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
    parts: list[str] = []
    for name, size in units:
        if seconds >= size or (name == "s" and not parts):
            parts.append(f"{seconds // size}{name}")
            seconds %= size
        if len(parts) == 2:
            break
    return " ".join(parts)


_STATUS_STYLE = {
    S.UNKNOWN: "bold red",
    S.DISPATCHING: "yellow",
    S.PREPARED: "cyan",
    S.CONFIRMED: "green",
    S.REJECTED: "magenta",
}


def _status(status: OperationStatus) -> Text:
    return Text(status.value, style=_STATUS_STYLE[status])


def _summary(op: Operation, now: datetime) -> dict[str, Any]:
    """The ``list`` keys: the record without payload or result."""
    return {
        "tenant_id": op.tenant_id,
        "operation_id": op.operation_id,
        "workflow_id": op.workflow_id,
        "action": op.action,
        "action_version": op.action_version,
        "target": op.target,
        "provider": op.provider,
        "status": op.status.value,
        "attempts": op.attempts,
        "idempotency_key": op.idempotency_key,
        "created_at": _iso(op.created_at),
        "updated_at": _iso(op.updated_at),
        "status_changed_at": _iso(op.status_changed_at),
        "first_dispatched_at": _iso(op.first_dispatched_at),
        # Time in the current status: evidence and approvals do not reset it.
        "age_seconds": _seconds(now - op.status_changed_at),
        "error": op.error,
    }


def _event_json(event: OperationEvent) -> dict[str, Any]:
    data = event.model_dump(mode="json")
    return {
        "event_id": data["event_id"],
        "tenant_id": data["tenant_id"],
        "operation_id": data["operation_id"],
        "seq": data["seq"],
        "kind": data["kind"],
        "from_status": data["from_status"],
        "to_status": data["to_status"],
        "actor": data["actor"],
        "fencing_token": data["fencing_token"],
        "at": data["at"],
        "evidence": data["evidence"],
        "detail": data["detail"],
    }


def _event_line(event: OperationEvent) -> str:
    source = event.from_status.value if event.from_status else "-"
    line = (
        f"#{event.event_id} {event.at:%Y-%m-%d %H:%M:%S} {event.tenant_id} {event.operation_id} "
        f"{event.kind.value}: {source} -> {event.to_status.value} by {event.actor}"
    )
    note = _event_note(event)
    return f"{line} {note}" if note else line


def _event_note(event: OperationEvent) -> str:
    """What a person decided and why, or what evidence said; '' when nothing.

    A decision reads as ``[retry: provider was down (claimed ana, verified os:ana)]``;
    evidence as ``[confirmed by reconciler: ...]``.
    """
    detail = event.detail if isinstance(event.detail, dict) else {}
    decision = detail.get("decision")
    who = [f"{k.split('_')[0]} {detail[k]}" for k in ("claimed_by", "verified_by") if k in detail]
    said = f" ({', '.join(who)})" if who else ""
    if decision:
        text = str(decision) + (f": {detail['reason']}" if detail.get("reason") else "")
        return f"[{text}{said}]"
    if who and event.kind in (EventKind.APPROVE, EventKind.REJECT):
        # A person's answer in a graph: who the server verified, and the name given.
        named = ", ".join(who)
        return f"[{detail['reason']}{said}]" if detail.get("reason") else f"[{named}]"
    if event.evidence is not None:
        e = event.evidence
        return f"[{e.kind.value} by {e.source}" + (f": {e.summary}]" if e.summary else "]")
    if detail.get("reason"):
        return f"[{detail['reason']}]"
    return ""
