"""Opening the ledger a command names, and finding an operation by (a prefix of) its id."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import typer

from langgraph_effects.cli._app import ExitCode
from langgraph_effects.cli._report import _SECRETS, _Failure, _passwords, _redact
from langgraph_effects.core.model import (
    Operation,
)
from langgraph_effects.errors import (
    EffectsError,
    InvalidInput,
    OperationNotFound,
)
from langgraph_effects.ledger.base import Ledger
from langgraph_effects.ledger.connect import parse_ledger_url


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


_MIN_ABBREV = 11
"""``op-`` and 8 base32 characters (40 bits): shown abbreviated, an id rarely collides."""


def _require(ledger: Ledger, tenant: str | None, operation_id: str) -> Operation:
    """The operation ``operation_id`` names: the whole id, or a unique prefix of one.

    Without a tenant every tenant is searched (``show``): the id, or prefix, must
    then name one operation of one tenant.
    """
    if tenant is not None:
        op = ledger.get(tenant, operation_id)
        if op is not None:
            return op
    found = ledger.list(tenant_id=tenant, id_prefix=operation_id, limit=6) if operation_id else []
    exact = [o for o in found if o.operation_id == operation_id]
    if len(exact) == 1 or len(found) == 1:
        return exact[0] if exact else found[0]
    where = f"in tenant {tenant!r}" if tenant is not None else "across tenants"
    if len({o.tenant_id for o in exact}) > 1:
        tenants = ", ".join(sorted(o.tenant_id for o in exact))
        raise InvalidInput(
            f"operation id {operation_id!r} exists in tenants {tenants}: pass --tenant"
        )
    if found:
        named = [o.operation_id + (f" ({o.tenant_id})" if tenant is None else "") for o in found]
        shown = ", ".join(named[:5]) + (", ..." if len(found) > 5 else "")
        raise InvalidInput(
            f"operation id prefix {operation_id!r} is ambiguous {where}: it starts "
            f"{shown}; give more characters"
        )
    if tenant is None:
        raise _Failure(
            ExitCode.NOT_FOUND, "not_found", f"no operation {operation_id!r} in any tenant"
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
