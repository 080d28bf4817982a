"""Who may be recorded as the person who decided: one rule for every path.

The event log names an actor for every move. Some names belong to the system
itself (``receipt``, ``reconciler``, ``takeover:<owner>``, a lease owner
``host|pid|...``, the server's verified ``langgraph-auth:<user>``, ...): a person
who could give one of them as their name could pass a decision off as the
system's, or as another verified identity. So every path that records a person
(a graph answer's ``by``, the server's authenticated user, the CLI's ``--by``
and its identity hook, an upstream reviewer) asks ``person_refusal`` first,
and a reconciler's evidence cannot speak for an operator (``reconciler_source``).
"""

from __future__ import annotations

import re

__all__ = [
    "APPROVED_BY_PREFIX",
    "MAX_ACTOR",
    "RESERVED_PREFIXES",
    "SYSTEM_ACTORS",
    "TAKEOVER_PREFIX",
    "approval_ref",
    "approver",
    "person_name",
    "person_refusal",
    "reconciler_source",
]

SYSTEM_ACTORS = frozenset(
    {
        "anonymous",
        "authorize",
        "ledger",
        "lge",
        "operator",
        "provider",
        "receipt",
        "reconciler",
        "runner",
        "validation",
    }
)
"""Actors the system itself writes into the event log: never a person's name."""
APPROVED_BY_PREFIX = "approved-by:"
"""The ``authorization_ref`` of an approved operation: ``approved-by:`` + who approved it."""


def approval_ref(by: str) -> str:
    """The ``authorization_ref`` that records ``by``'s approval (``approved-by:NAME``)."""
    return f"{APPROVED_BY_PREFIX}{by}"


def approver(ref: str | None) -> str | None:
    """Who an ``authorization_ref`` says approved (``approval_ref``'s inverse); None: nobody."""
    if ref is None or not ref.startswith(APPROVED_BY_PREFIX):
        return None
    return ref.removeprefix(APPROVED_BY_PREFIX)


TAKEOVER_PREFIX = "takeover:"
"""How the event log names a process that took over a lapsed lease: ``takeover:`` + owner."""
RESERVED_PREFIXES = (
    TAKEOVER_PREFIX,
    APPROVED_BY_PREFIX,
    "langgraph-auth:",
    "os:",
    "sudo:",
    "hook:",
)
"""Forms the system writes (a takeover, a verified identity): never a person's name."""
MAX_ACTOR = 200
"""Longest name an actor may have."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
"""Control characters (terminal escapes), invisible and bidirectional-override characters."""


def person_refusal(name: object) -> str | None:
    """Why ``name`` cannot be recorded as a person who decided; None: it can.

    Refused: anything but a string, an empty or blank one, one longer than
    ``MAX_ACTOR``, control or invisible characters (ANSI escapes), a system
    actor (``SYSTEM_ACTORS``, any case), a reserved form (``RESERVED_PREFIXES``)
    and the form of a lease owner (``host|pid|...``).
    """
    if not isinstance(name, str):
        return f"a name must be a string, not {type(name).__name__}"
    stripped = name.strip()
    lowered = stripped.lower()
    if not stripped:
        return "it is empty"
    if len(stripped) > MAX_ACTOR:
        return f"it is longer than {MAX_ACTOR} characters"
    if _CONTROL.search(stripped):
        return "it holds control or invisible characters"
    if lowered in SYSTEM_ACTORS or lowered.startswith(RESERVED_PREFIXES):
        reserved = ", ".join(sorted(SYSTEM_ACTORS))
        forms = ", ".join(f"{p}..." for p in RESERVED_PREFIXES)
        return f"it names a system actor (reserved: {reserved}, {forms})"
    if "|" in stripped:
        return "it has the form of a lease owner (host|pid|...), a system actor"
    return None


def person_name(name: object) -> str:
    """``name`` stripped, once ``person_refusal`` found nothing to refuse.

    Raises:
        ValueError: the refusal, for the caller to word as its own error.
    """
    why = person_refusal(name)
    if why is not None:
        raise ValueError(why)
    assert isinstance(name, str)
    return name.strip()


def reconciler_source(source: str) -> str:
    """The evidence source a reconciler may record: never ``operator``, which would
    make its evidence a person's decision (``ledger`` reads it so)."""
    return "reconciler" if source.strip().lower() == "operator" else source
