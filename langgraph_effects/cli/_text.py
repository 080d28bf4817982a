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
    describe_actor,
)

S = OperationStatus


class _Console(Console):
    """A rich console that never pads a line with trailing spaces.

    Rich pads table cells and wrapped lines to the width; in a pipe, a diff or a
    notebook's stored output those spaces are noise (and make text compare unequal).
    """

    def print(self, *objects: Any, **kwargs: Any) -> None:
        with self.capture() as captured:
            super().print(*objects, **kwargs)
        self.file.write(_TRAILING.sub("", captured.get()))
        self.file.flush()


_TRAILING = re.compile(r"[ \t]+(?=(?:\x1b\[[0-9;]*m)*$)", re.MULTILINE)
"""Spaces at the end of a line, before any closing colour codes."""


def _console(*, stderr: bool = False) -> Console:
    # Created per command: CliRunner swaps sys.stdout between invocations. A
    # pipe gets a wide console (unless COLUMNS says otherwise) so ids are never cut.
    stream = sys.stderr if stderr else sys.stdout
    wide = stream.isatty() or "COLUMNS" in os.environ
    return _Console(highlight=False, width=None if wide else 200, stderr=stderr, soft_wrap=stderr)


def _width(console: Console) -> int | None:
    """The width lines must fit: the terminal's (or ``COLUMNS``); None in a pipe (no limit)."""
    wide = console.file.isatty() or "COLUMNS" in os.environ
    return console.width if wide else None


def _shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters with ``…`` at a word boundary: after the last
    space that keeps a third of the width, else after the last ``.``, ``_``, ``-``, ``/``,
    ``:`` or ``|`` that does; mid-word only when no boundary does (one long word)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    cut = text[: width - 1]
    for boundaries in (" ", "._-/:|"):
        at = max(cut.rfind(b) for b in boundaries)
        if at > 0 and at >= (width - 1) // 3:
            kept = cut[:at] if boundaries == " " else cut[: at + 1]
            return kept.rstrip() + "…"
    return cut + "…"


def _table(
    console: Console,
    headers: list[str],
    rows: list[list[Text]],
    *,
    right: frozenset[int] = frozenset(),
    flexible: frozenset[int] = frozenset(),
) -> None:
    """Print rows under headers, two spaces apart, no line wider than the terminal.

    The ``flexible`` columns (free text: tenant, action, target, why) give up width
    when the line is too wide, each keeping at least its header's; their cells are
    cut at a word boundary with ``…``. The other columns never shrink. In a pipe
    nothing is cut. Cells keep their style (a status's colour).
    """
    widths = [max([len(h), *(len(r[i].plain) for r in rows)]) for i, h in enumerate(headers)]
    limit = _width(console)
    if limit is not None:
        excess = sum(widths) + 2 * (len(widths) - 1) - limit
        # Take the excess from the widest flexible column, one character at a time.
        while excess > 0:
            shrinkable = [i for i in flexible if widths[i] > len(headers[i])]
            if not shrinkable:
                break
            widest = max(shrinkable, key=lambda i: widths[i])
            widths[widest] -= 1
            excess -= 1

    def line(cells: list[Text]) -> Text:
        out = Text()
        for i, cell in enumerate(cells):
            shown = Text(_shorten(cell.plain, widths[i]), style=cell.style)
            pad = " " * (widths[i] - len(shown.plain))
            if i:
                out.append("  ")
            out.append_text(Text(pad) + shown if i in right else shown + Text(pad))
        return out

    console.print(line([Text(h, style="bold") for h in headers]), soft_wrap=True)
    for row in rows:
        console.print(line(row), soft_wrap=True)


def _wrapped(text: str, width: int | None, indent: int = 0) -> str:
    """``text`` wrapped at spaces to ``width`` (None: one line), continuation lines indented;
    a word longer than a line is cut with ``…``. Runs of spaces inside a line are kept."""
    if width is None or len(text) <= width:
        return text
    space = max(width - indent, 10)
    lines: list[str] = []
    current = ""
    for piece in re.split(r"(?<=\S)(?= )", text):  # each piece keeps its leading spaces
        if current.strip() and len(current) + len(piece) > width:
            lines.append(current)
            current = " " * indent + _shorten(piece.lstrip(), space)
        else:
            current += piece
    lines.append(current)
    return "\n".join(_shorten(line, width) for line in lines)


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
        f"{event.kind.value}: {source} -> {event.to_status.value} by {describe_actor(event.actor)}"
    )
    note = _event_note(event)
    return f"{line} {note}" if note else line


def _event_note(event: OperationEvent) -> str:
    """What a person decided and why, or what evidence said; '' when nothing.

    A decision reads as ``[retry: provider was down]``; when the name the person
    gave differs from the verified one (the actor), it follows: ``[approve: amount
    checked; given as mallory]``. Evidence reads as ``[confirmed by reconciler: ...]``.
    How the name was verified (``os:ana``, ``hook:ana``) is in ``--json``.
    """
    detail = event.detail if isinstance(event.detail, dict) else {}
    decision = detail.get("decision")
    claimed = detail.get("claimed_by")
    given = f"given as {claimed}" if claimed and claimed != event.actor else ""
    reason = str(detail["reason"]) if detail.get("reason") else ""
    if decision:
        said = str(decision) + (f": {reason}" if reason else "")
        return f"[{'; '.join(filter(None, (said, given)))}]"
    if "verified_by" in detail and event.kind in (EventKind.APPROVE, EventKind.REJECT):
        # A person's answer in a graph: the server verified the actor.
        said = "; ".join(filter(None, (reason, given)))
        return f"[{said}]" if said else ""
    if event.evidence is not None:
        e = event.evidence
        return f"[{e.kind.value} by {e.source}" + (f": {e.summary}]" if e.summary else "]")
    if reason:
        return f"[{reason}]"
    return ""
