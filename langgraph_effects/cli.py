"""``langgraph-effects``: the operator's command line over a ledger.

The commands an operator needs at 3 a.m.: see what is stuck (``list``,
``stats``), look at one operation with its evidence, what the next run will do
and what a retry would risk (``show``), decide it (``resolve``, ``retry`` for
an unknown operation; ``approve``, ``reject`` for one waiting for approval)
and watch the event log (``events --follow``). Every decision goes through
``Ledger.resolve``, so the state machine refuses what it must and the event
log records who decided and why.

The ledger: ``--db sqlite:///relative/effects.db``, ``--db sqlite:////abs/effects.db``
(SQLAlchemy's convention), a plain path to an existing SQLite file, or
``--db postgresql://user@host/db``; or the environment variable
``LGE_LEDGER_URL`` (``LGE_DB`` also works). ``LGE_TENANT`` stands for
``--tenant``. The CLI never creates or migrates a ledger: a path with no file
or a database without the tables is an error, not a fresh empty ledger.

Operation ids may be abbreviated to any unique prefix, as in git; ``list``
prints them abbreviated (``--full-ids`` or ``--json`` for whole ones).

Who decides: the operator's identity is *verified*, never just claimed. By
default it is the OS user running the command (the invoking user under
``sudo``); ``--identity module:function`` (or ``LGE_IDENTITY``) names a hook
``identify(claimed: str | None) -> str`` that returns a verified name (from a
single sign-on token, say) or raises to refuse. ``--by`` (``LGE_OPERATOR``)
is the name the operator gives; the event records both, as ``claimed_by`` and
``verified_by`` (``os:NAME``, ``sudo:NAME`` or ``hook:NAME``), and its actor
and the resolve policy see the verified name. Names the system itself writes
as actors (``receipt``, ``ledger``, ``reconciler``, ...) are refused.

Everything read from the ledger is printed literally: markup-like text is not
interpreted and control characters (terminal escapes included) are shown
escaped (``\\x1b``); ``--json`` output is plain ASCII JSON.

Exit codes (stable; scripts may rely on them)::

    0  done
    1  unexpected failure (a bug, or interrupted): what Python and click
       exit with, so it never means anything specific here
    2  usage or connection: bad arguments, malformed URL or JSON, a reserved
       or unverifiable operator name, an ambiguous id prefix, a ledger that
       cannot be opened, reached, is not set up or has an older schema
    3  not found: no such operation for that tenant (another tenant's
       operation is reported exactly like a missing one)
    4  refused: the state machine (or a live lease) does not allow the decision;
       nothing was changed
    5  forbidden: the resolve policy (or the identity hook) did not allow this
       operator; nothing was changed

``--json`` prints one JSON document (``events``: one JSON object per line) with
the keys documented on each command; errors go to stderr (a JSON object
``{"error": KIND, "message": ..., "exit_code": N}`` under ``--json``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import IntEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import pydantic
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from langgraph_effects.core.model import (
    Decision,
    EventKind,
    Evidence,
    EvidenceKind,
    Operation,
    OperationEvent,
    OperationStatus,
    Resolution,
    utcnow,
)
from langgraph_effects.core.plan import (
    ResendRisk,
    key_expires_at,
    receipt_conflict,
    recorded_contract,
    resend_risk,
)
from langgraph_effects.errors import (
    ConcurrentUpdate,
    EffectsError,
    IllegalTransition,
    InvalidInput,
    LeaseHeld,
    LedgerError,
    OperationNotFound,
    StaleFencingToken,
)
from langgraph_effects.ledger.base import Ledger, LedgerStats
from langgraph_effects.ledger.connect import LEDGER_URL_ENV, _authority, parse_ledger_url
from langgraph_effects.ledger.sweep import DEFAULT_SCAN, Sweep, find_stuck

__all__ = ["ExitCode", "ResolvePolicy", "app", "main", "open_ledger", "parse_duration"]

S = OperationStatus

ResolvePolicy = Callable[[str, Operation, Decision], bool]
"""``policy(operator, operation, decision) -> bool``: may this person decide this?

Return ``True`` to allow. ``False`` or any exception (``PermissionError("why")``
reads best) forbids; a broken policy therefore fails closed.
"""


class ExitCode(IntEnum):
    """The process exit codes of every command (see the module docstring)."""

    OK = 0
    FAILURE = 1
    USAGE = 2
    NOT_FOUND = 3
    REFUSED = 4
    FORBIDDEN = 5


class _Failure(Exception):
    """An error to report and exit with; raised inside commands, never escapes ``main``."""

    def __init__(self, code: ExitCode, kind: str, message: str) -> None:
        self.code = code
        self.kind = kind
        super().__init__(message)


# Most urgent first: what needs a person, then what is in flight, then what waits.
_OPEN = (S.UNKNOWN, S.DISPATCHING, S.PREPARED)
_ORDER = (*_OPEN, S.REJECTED, S.CONFIRMED)

app = typer.Typer(
    name="langgraph-effects",
    help="Inspect and resolve the operations of a langgraph-effects ledger.",
    epilog="Exit codes: 0 done, 1 unexpected failure, 2 usage or connection, 3 not found, "
    "4 refused by the state machine, 5 forbidden by the resolve policy.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# -- options shared by the commands -------------------------------------------

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


def _version(value: bool) -> None:
    if value:
        typer.echo(f"langgraph-effects {_package_version()}")
        raise typer.Exit()


def _package_version() -> str:
    try:
        return importlib.metadata.version("langgraph-effects")
    except importlib.metadata.PackageNotFoundError:  # a checkout on sys.path, not installed
        return str(getattr(importlib.import_module("langgraph_effects"), "__version__", "unknown"))


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Inspect and decide the operations of a langgraph-effects ledger."""


# -- opening a ledger -----------------------------------------------------------


@contextlib.contextmanager
def open_ledger(url: str) -> Iterator[Ledger]:
    """Open the ledger a URL names, for the duration of the ``with`` block.

    Never creates anything: a SQLite path with no file raises ``InvalidInput``.

    Raises:
        InvalidInput: the URL is malformed, names an unsupported scheme or a
            missing SQLite file.
        LedgerError: the backend could not be opened or reached.
    """
    location = parse_ledger_url(url)
    if location.backend == "postgres":
        import psycopg

        from langgraph_effects.ledger.postgres import PostgresLedger

        # One connection, not a pool: a command runs a few statements, and an
        # unreachable server must fail within seconds, not a pool's timeout.
        with psycopg.connect(location.target, autocommit=True, connect_timeout=10) as conn:
            yield PostgresLedger(conn)
        return
    path = Path(location.target)
    if not path.is_file():
        hint = " (an absolute path takes four slashes: sqlite:////abs/path)" if "://" in url else ""
        raise InvalidInput(f"no SQLite ledger at {path.resolve()}: the file does not exist{hint}")
    from langgraph_effects.ledger.sqlite import SQLiteLedger

    with SQLiteLedger.from_conn_string(str(path)) as ledger:
        yield ledger


@contextlib.contextmanager
def _ledger(ctx: typer.Context, db: str | None) -> Iterator[Ledger]:
    """The ledger for this invocation: an injected object (tests, embedding) or ``--db``."""
    injected = ctx.find_root().obj
    if isinstance(injected, Ledger):
        yield injected
        return
    if not db:
        raise _Failure(
            ExitCode.USAGE, "usage", "no ledger given: pass --db URL or set LGE_LEDGER_URL"
        )
    _SECRETS.update(_passwords(db))
    stack = contextlib.ExitStack()
    try:
        ledger = stack.enter_context(open_ledger(db))
    except EffectsError as exc:
        raise _Failure(ExitCode.USAGE, "unavailable", f"cannot open the ledger: {exc}") from exc
    except Exception as exc:
        # Driver errors (connection refused, bad credentials, unreadable file)
        # all mean "cannot open" to an operator; the message says which.
        raise _Failure(
            ExitCode.USAGE, "unavailable", f"cannot open the ledger at {_redact(db)}: {exc}"
        ) from exc
    with stack:
        yield ledger


_SECRETS: set[str] = set()
"""Passwords of the URLs this process opened: never printed, whatever message holds them."""


def _passwords(url: str) -> list[str]:
    """The passwords a ledger URL carries: in its user info (which may itself hold
    an unescaped ``@``: the host follows the *last* one), or as ``password=``."""
    found = re.findall(r"password=([^&\s]+)", url)
    authority = _authority(url)
    if "@" in authority:
        userinfo = authority.rsplit("@", 1)[0]
        if ":" in userinfo:
            found.append(userinfo.split(":", 1)[1])
    return [secret for secret in found if secret]


def _redact(text: str) -> str:
    """``text`` with every known password replaced by ``***``."""
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


# -- error reporting ---------------------------------------------------------------


@contextlib.contextmanager
def _reporting(as_json: bool) -> Iterator[None]:
    """Turn failures into one message on stderr and the documented exit code."""
    try:
        yield
    except _Failure as exc:
        _fail(exc, as_json)
    except OperationNotFound as exc:
        _fail(_Failure(ExitCode.NOT_FOUND, "not_found", str(exc)), as_json)
    except (IllegalTransition, LeaseHeld, ConcurrentUpdate, StaleFencingToken) as exc:
        _fail(_Failure(ExitCode.REFUSED, "refused", f"{exc}; nothing was changed"), as_json)
    except (InvalidInput, pydantic.ValidationError) as exc:
        _fail(_Failure(ExitCode.USAGE, "usage", str(exc)), as_json)
    except LedgerError as exc:
        _fail(_Failure(ExitCode.USAGE, "unavailable", str(exc)), as_json)


def _fail(failure: _Failure, as_json: bool) -> NoReturn:
    message = _redact(str(failure))
    if as_json:
        error = {"error": failure.kind, "message": message, "exit_code": int(failure.code)}
        typer.echo(json.dumps(error), err=True)
    else:
        _console(stderr=True).print(Text.assemble(("error:", "bold red"), " ", _lit(message)))
    raise typer.Exit(int(failure.code))


def _echo_json(value: Any) -> None:
    # ASCII: control characters and look-alikes in ledger values arrive escaped.
    typer.echo(json.dumps(value, indent=2))


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


# -- parsing -------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """Parse ``90s``, ``10m``, ``1h30m``, ``2d`` into a ``timedelta``.

    Raises:
        InvalidInput: anything else.
    """
    compact = text.strip().lower().replace(" ", "")
    parts: list[tuple[str, str]] = _DURATION.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact:
        raise InvalidInput(f"cannot read duration {text!r}: use e.g. 90s, 10m, 1h30m, 2d")
    try:
        return timedelta(seconds=sum(float(n) * _UNIT_SECONDS[u] for n, u in parts))
    except OverflowError:
        raise InvalidInput(f"duration {text!r} is too long (at most 999999999d)") from None


def _parse_json(option: str, text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{option} is not valid JSON: {exc}") from None


def _statuses(values: list[str] | None, include_terminal: bool) -> list[OperationStatus]:
    if not values:
        return list(_ORDER if include_terminal else _OPEN)
    out: list[OperationStatus] = []
    for value in values:
        try:
            out.append(OperationStatus(value.lower()))
        except ValueError:
            valid = ", ".join(s.value for s in OperationStatus)
            raise InvalidInput(f"unknown status {value!r}; expected one of: {valid}") from None
    return out


# -- presentation --------------------------------------------------------------------


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


# -- what a retry would risk ---------------------------------------------------------


@dataclass(frozen=True)
class _Outlook:
    """What an operator may decide now, and what a resend would risk."""

    decisions: list[Decision]
    next_run: str
    risk: str

    def as_json(self, op: Operation, now: datetime) -> dict[str, Any]:
        return {
            "decisions": [d.value for d in self.decisions],
            "status_since": _iso(op.status_changed_at),
            "next_run": self.next_run,
            "risk": self.risk,
            "attempts": op.attempts,
            "idempotency_key": op.idempotency_key,
            "first_dispatched_at": _iso(op.first_dispatched_at),
            "key_age_seconds": (
                _seconds(now - op.first_dispatched_at) if op.first_dispatched_at else None
            ),
            # Recorded at prepare time from the effect's contract (None: the
            # provider promised no deduplication, or a row from before schema v2).
            "key_window_known": _recorded_expiry(op) is not None,
            "key_retention_seconds": op.key_retention_seconds,
            "key_expires_at": _iso(_recorded_expiry(op)),
            "key_window_open": _recorded_risk(op, now) is ResendRisk.DEDUPLICATED,
        }


_COMMAND = {
    Decision.CONFIRM: "resolve --confirm",
    Decision.REJECT: "reject",
    Decision.RETRY: "retry",
    Decision.APPROVE: "approve",
}
"""The command that takes each decision (``show`` lists those open to the operator)."""


def _approver(op: Operation) -> str | None:
    """Who approved a prepared operation's first dispatch (``Ledger.approve``), if anyone."""
    ref = op.authorization_ref or ""
    return ref.removeprefix("approved-by:") if ref.startswith("approved-by:") else None


def _recorded_expiry(op: Operation) -> datetime | None:
    """When a resend under the recorded key stops being deduplicated, from the record alone."""
    return key_expires_at(op, recorded_contract(op))


def _recorded_risk(op: Operation, now: datetime) -> ResendRisk:
    """``core.plan.resend_risk`` judged from the record alone: the CLI has no live contract."""
    return resend_risk(op, recorded_contract(op), now)


def _resend_risk(op: Operation, now: datetime) -> str | None:
    """Why a resend may not be deduplicated, judged from the record alone; None: it is.

    Only a recorded key with a recorded retention, first sent less than that
    retention ago, proves a resend safe (``core.plan.recorded_contract``).
    """
    match _recorded_risk(op, now):
        case ResendRisk.DEDUPLICATED | ResendRisk.NOT_SENT:
            return None
        case ResendRisk.NO_KEY:
            return "the provider got no idempotency key, so a resend is not deduplicated"
        case ResendRisk.NO_PROMISE:
            return (
                f"the provider promised no deduplication of idempotency key {op.idempotency_key!r}"
                " (no key contract recorded), so a resend may not be deduplicated"
            )
        case ResendRisk.WINDOW_CLOSED:
            return (
                f"the provider's key window closed at {_iso(_recorded_expiry(op))}: it may have "
                f"forgotten idempotency key {op.idempotency_key!r}, so a resend may not be "
                "deduplicated"
            )


def _key_expiry(op: Operation) -> str:
    expires = _recorded_expiry(op)
    if expires is not None:
        return f"{_iso(expires)} (recorded retention {op.key_retention_seconds:g} s)"
    if op.idempotency_key and op.first_dispatched_at is not None:
        return "- (no key window recorded: the provider promised no deduplication)"
    return "-"


def _outlook(op: Operation, now: datetime) -> _Outlook:
    """Say, from the record alone, what can be decided and what a retry would risk."""
    if op.status is S.CONFIRMED:
        return _Outlook(
            [],
            "replays the recorded result; the provider is not called",
            "none: confirmed is final. A retry would be a second effect, so none is offered.",
        )
    if op.status is S.REJECTED:
        return _Outlook(
            [],
            "returns the recorded rejection to the model",
            "none: rejected is final. Doing it anyway is a new operation with its own "
            "authorization.",
        )
    if op.status is S.DISPATCHING:
        if op.lease_alive(now):
            return _Outlook(
                [],
                f"waits: {op.lease_owner} holds the lease until {_iso(op.lease_expires_at)}",
                "a call is in flight; wait for its receipt or for the lease to lapse.",
            )
        return _Outlook(
            [],
            "marks it unknown (the lease lapsed), then reconciles",
            "the last attempt may have reached the provider; wait for reconciliation.",
        )
    if op.status is S.PREPARED:
        if op.attempts > 0:
            return _Outlook(
                [Decision.REJECT],
                "dispatches it again under the same key and pinned payload (a retry was "
                "ordered, or the provider refused it transiently); no approval is asked",
                "it was sent before; the resend reuses the same key, so the provider can "
                "deduplicate it only while it remembers the key.",
            )
        approver = _approver(op)
        if approver is not None:
            return _Outlook(
                [Decision.REJECT],
                f"dispatches it for the first time without asking again: approved by {approver} "
                "(after the effect's authorize check, if it has one)",
                "none yet: never sent.",
            )
        return _Outlook(
            [Decision.APPROVE, Decision.REJECT],
            "asks a person for approval (an interrupt) before the first dispatch if its effect "
            "requires approval, as a record left unclaimed suggests; otherwise runs its "
            "authorize check and dispatches it. After approve it dispatches without asking; "
            "after reject it never does",
            "none yet: never sent.",
        )
    # unknown
    sent = f"sent {op.attempts} time(s), first at {_iso(op.first_dispatched_at)}"
    if op.first_dispatched_at is not None:
        sent += f" ({_age(now - op.first_dispatched_at)} ago)"
    problem = _resend_risk(op, now)
    if problem is None:
        risk = (
            f"{sent} under idempotency key {op.idempotency_key!r}. A retry resends the same "
            "key and pinned payload, and the provider deduplicates it until "
            f"{_iso(_recorded_expiry(op))} (its recorded retention): a retry cannot apply "
            "the effect twice."
        )
    elif not op.idempotency_key:
        risk = (
            f"{sent} with no idempotency key: the provider cannot deduplicate. If the earlier "
            "attempt was applied, a retry applies the effect twice. Check the provider first; "
            "confirm or reject if you can tell."
        )
    else:
        risk = (
            f"{sent}; {problem}. If the earlier attempt was applied, a retry may apply the "
            "effect twice. Check the provider first; confirm or reject if you can tell."
        )
    return _Outlook(
        [Decision.CONFIRM, Decision.REJECT, Decision.RETRY],
        "asks the provider through the effect's reconciler, if it has one; if that is "
        "inconclusive, "
        + (
            f"resends under the same key while the recorded key window is open (until "
            f"{_iso(_recorded_expiry(op))}), else asks a person (review)"
            if problem is None
            else "asks a person (review)"
        ),
        risk,
    )


# -- policy ---------------------------------------------------------------------------


def _load_hook(option: str, spec: str | None) -> Callable[..., Any] | None:
    """Import ``module:function`` (the working directory is importable, as with ``python -m``)."""
    if not spec:
        return None
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise _Failure(ExitCode.USAGE, "usage", f"{option} {spec!r}: expected module:function")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        hook: object = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise _Failure(ExitCode.USAGE, "usage", f"cannot load {option} {spec!r}: {exc}") from exc
    if not callable(hook):
        raise _Failure(ExitCode.USAGE, "usage", f"{option} {spec!r} is not callable")
    return hook


def _check_policy(
    policy: Callable[..., Any] | None, operator: str, op: Operation, decision: Decision
) -> None:
    if policy is None:
        return
    try:
        allowed = policy(operator, op, decision) is True
        why = "the policy said no"
    except Exception as exc:  # fail closed: a broken policy allows nothing
        allowed, why = False, str(exc) or type(exc).__name__
    if not allowed:
        raise _Failure(
            ExitCode.FORBIDDEN,
            "forbidden",
            f"{operator!r} may not {decision.value} {op.action} operations of tenant "
            f"{op.tenant_id!r}: {why}",
        )


RESERVED_ACTORS = frozenset(
    {"authorize", "ledger", "lge", "operator", "provider", "receipt", "reconciler", "runner"}
)
"""Actors the system itself writes into the event log: never a person's name."""


@dataclass(frozen=True)
class _Identity:
    """Who is deciding: the verified name (the event's actor) and the name given."""

    verified: str
    source: str
    """``os``, ``sudo`` or ``hook``."""
    claimed: str

    def resolution(self, decision: Decision, reason: str, **more: Any) -> Resolution:
        return Resolution(
            decision=decision,
            by=self.verified,
            reason=reason,
            claimed_by=self.claimed,
            verified_by=f"{self.source}:{self.verified}",
            **more,
        )


def _refuse_reserved(name: str, what: str) -> str:
    """``name`` stripped, if a person may carry it in the event log; else a usage error."""
    name = name.strip()
    lowered = name.lower()
    why = None
    if not name:
        why = "it is empty"
    elif _CONTROL.search(name):
        why = "it holds control characters"
    elif lowered in RESERVED_ACTORS or lowered.startswith(("takeover:", "approved-by:")):
        reserved = ", ".join(sorted(RESERVED_ACTORS))
        why = f"it names a system actor (reserved: {reserved}, takeover:...)"
    elif "|" in name:
        why = "it has the form of a lease owner (host|pid|...), a system actor"
    if why is not None:
        raise _Failure(ExitCode.USAGE, "usage", f"{what} {_lit(name)!r} cannot decide: {why}")
    return name


def _os_user() -> tuple[str, str]:
    """The OS account running this process; under sudo, the account that invoked it."""
    try:
        import pwd

        name = pwd.getpwuid(os.geteuid()).pw_name
        root = os.geteuid() == 0
    except (ImportError, KeyError):  # Windows, or a uid without a passwd entry
        import getpass

        name, root = getpass.getuser(), False
    sudo_user = os.environ.get("SUDO_USER")
    if root and sudo_user and sudo_user != "root":
        return sudo_user, "sudo"
    return name, "os"


def _identify(by: str | None, hook_spec: str | None) -> _Identity:
    """The operator's verified identity (hook, else OS user) and claimed name (``--by``)."""
    claimed = _refuse_reserved(by, "--by") if by is not None and by.strip() else None
    hook = _load_hook("--identity", hook_spec)
    if hook is None:
        verified, source = _os_user()
    else:
        try:
            verified, source = str(hook(claimed)), "hook"
        except Exception as exc:  # fail closed: an identity not verified decides nothing
            raise _Failure(
                ExitCode.FORBIDDEN,
                "forbidden",
                f"the identity hook {hook_spec!r} did not verify you: {exc or type(exc).__name__}",
            ) from exc
    verified = _refuse_reserved(verified, f"the verified identity ({source})")
    return _Identity(verified=verified, source=source, claimed=claimed or verified)


_MIN_ABBREV = 11
"""``op-`` and 8 base32 characters (40 bits): shown abbreviated, an id rarely collides."""


def _require(ledger: Ledger, tenant: str, operation_id: str) -> Operation:
    """The operation ``operation_id`` names: the whole id, or a unique prefix of one."""
    op = ledger.get(tenant, operation_id)
    if op is not None:
        return op
    if operation_id.strip():
        found = ledger.list(tenant_id=tenant, id_prefix=operation_id, limit=6)
        if len(found) == 1:
            return found[0]
        if found:
            shown = ", ".join(o.operation_id for o in found[:5]) + (
                ", ..." if len(found) > 5 else ""
            )
            raise InvalidInput(
                f"operation id prefix {operation_id!r} is ambiguous in tenant {tenant!r}: it "
                f"starts {shown}; give more characters"
            )
    raise OperationNotFound(tenant, operation_id)


def _abbreviations(ids: list[str], full: bool) -> dict[str, str]:
    """Each id shortened to the shortest prefix (at least ``_MIN_ABBREV`` long) that tells
    it apart from the others shown, as git does."""
    if full:
        return {i: i for i in ids}
    out: dict[str, str] = {}
    for i in ids:
        size = _MIN_ABBREV
        while size < len(i) and any(o != i and o.startswith(i[:size]) for o in ids):
            size += 1
        out[i] = i[:size]
    return out


# -- commands -----------------------------------------------------------------------


@app.command("list")
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
        # Fixed columns never wrap; tenant, action and target share the rest and
        # fold, so 80 columns stay readable.
        table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        table.add_column("operation", no_wrap=True)
        table.add_column("status", no_wrap=True)
        table.add_column("age", no_wrap=True, justify="right")
        table.add_column("tries", no_wrap=True, justify="right")
        # One tenant asked for: its name on every row says nothing. A narrow
        # terminal gets the free text in one column that wraps between words.
        names = ("action", "target") if tenant else ("tenant", "action", "target")
        narrow = console.width < 110
        for name in [" ".join(names)] if narrow else names:
            table.add_column(name, overflow="fold", min_width=len(name))
        for op in rows:
            free = {"tenant": op.tenant_id, "action": op.action, "target": op.target or "-"}
            values = [_lit(free[name]) for name in names]
            table.add_row(
                Text(_lit(short[op.operation_id])),
                _status(op.status),
                Text(_age(now - op.status_changed_at)),
                Text(str(op.attempts)),
                *([Text(" ".join(values))] if narrow else [Text(v) for v in values]),
            )
        console.print(table)
        if len(rows) == limit:
            console.print(f"(first {limit}; raise --limit for more)")


@app.command()
def show(
    ctx: typer.Context,
    operation_id: OperationArg,
    tenant: TenantRequired,
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
        record.add_column(overflow="fold")
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
            ("authorization", op.authorization_ref or "-"),
            ("created", f"{_iso(op.created_at)} ({_age(now - op.created_at)} ago)"),
            ("first dispatched", _iso(op.first_dispatched_at) or "-"),
            ("last dispatched", _iso(op.last_dispatched_at) or "-"),
            ("evidence checked", _iso(op.evidence_checked_at) or "-"),
        ]
        if op.lease_owner:
            fields.append(("lease", f"{op.lease_owner} until {_iso(op.lease_expires_at)}"))
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
        # One line per event (soft-wrapped), readable at any terminal width.
        console.print(Text("events", style="bold"))
        for e in events:
            note = _event_note(e)
            source = e.from_status.value if e.from_status else "-"
            token = "-" if e.fencing_token is None else str(e.fencing_token)
            line = (
                f"{e.seq:>3}  {e.at:%Y-%m-%d %H:%M:%S}  {e.kind.value:<12} "
                f"{source:>11} -> {e.to_status.value:<11} token {token:<3} by {e.actor}"
            )
            console.print(Text(_lit(f"{line}  {note}" if note else line)), soft_wrap=True)
        console.print()
        console.print(Text.assemble(("next run: ", "bold"), _lit(outlook.next_run)))
        console.print(Text.assemble(("retry risk: ", "bold"), _lit(outlook.risk)))
        if outlook.decisions:
            commands = ", ".join(f"langgraph-effects {_COMMAND[d]}" for d in outlook.decisions)
            console.print(Text.assemble(("you may: ", "bold"), commands))


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


@app.command()
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


@app.command()
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


@app.command()
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


@app.command("reject")
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


@app.command()
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


@app.command()
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


@app.command()
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
                    except (IllegalTransition, StaleFencingToken, ConcurrentUpdate) as exc:
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
        table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        table.add_column("operation", no_wrap=True)
        table.add_column("since", no_wrap=True, justify="right")
        table.add_column("tries", no_wrap=True, justify="right")
        for name in ("tenant", "action", "target", "why"):
            table.add_column(name, overflow="fold", min_width=len(name))
        for f in sweep.stuck:
            op = f.operation
            table.add_row(
                Text(_lit(short[op.operation_id])),
                Text(_age(now - op.status_changed_at)),
                Text(str(op.attempts)),
                *(Text(_lit(v)) for v in (op.tenant_id, op.action, op.target or "-", f.why)),
            )
        console.print(table)
    for op_id, refusal in outcomes.items():
        line = f"{op_id}: refused: {refusal}" if refusal else f"{op_id} is now unknown"
        console.print(Text(_lit(line)))
    if not sweep.complete:
        console.print(f"(examined the oldest {sweep.scanned} dispatching; raise --scan for more)")


def main() -> None:
    """Console-script entry point."""
    app()
