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

from typing import TYPE_CHECKING

from langgraph_effects._lazy import lazy_getattr

# Declaring the commands registers them on ``app``; their bodies load when they run.
from langgraph_effects.cli import _commands as _commands
from langgraph_effects.cli._app import ExitCode, app, main

if TYPE_CHECKING:
    from langgraph_effects.cli._identity import ResolvePolicy
    from langgraph_effects.cli._ledger import open_ledger
    from langgraph_effects.cli._parse import parse_duration

__all__ = ["ExitCode", "ResolvePolicy", "app", "main", "open_ledger", "parse_duration"]

# Public name -> defining module, imported on first use (they need pydantic and the ledger).
_LAZY = {
    "ResolvePolicy": "langgraph_effects.cli._identity",
    "open_ledger": "langgraph_effects.cli._ledger",
    "parse_duration": "langgraph_effects.cli._parse",
}

if not TYPE_CHECKING:  # type checkers see the imports above, not a catch-all ``Any``
    __getattr__ = lazy_getattr(__name__, _LAZY, globals())
