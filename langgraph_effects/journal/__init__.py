"""Run snapshots for long waits (ARCHITECTURE.md, "Where each rule lives").

The package: ``model`` (the values), ``machine`` (``RunMachine``), ``statements`` (the
tables' programs) and ``journals`` (``RunJournal``, ``AsyncRunJournal``).

A run that waits (for an e-mail, a webhook, a person) keeps a small explicit
snapshot: run id, leased resource, state, the single next allowed action,
attempts left, lease expiry, accepted evidence ids, version. A resumed agent
reads ``next_action`` instead of re-reading a conversation.

The snapshot is the fold of an append-only, versioned event log::

    journal.append("run-1842", 7, RunEvent(event_id="m-93", type="message_received"))

* the version must be the run's current one, else ``StaleVersion`` and
  nothing is written (two workers waking together cannot both move one step);
* repeating the same append (same ``event_id``, same content) returns the
  snapshot the first one produced and writes nothing (it consumes nothing twice);
* the ``RunMachine`` decides whether the event is allowed in the current
  state (``IllegalTransition`` otherwise): the model may choose among allowed
  actions, never invent a transition.

Events carry ids and hashes, not bodies: ``RunEvent.data`` is capped at
4 KiB of canonical JSON to keep it that way.
"""

from langgraph_effects.journal.journals import AsyncRunJournal, RunJournal
from langgraph_effects.journal.machine import RunMachine
from langgraph_effects.journal.model import (
    JournalStats,
    RunEvent,
    RunMetrics,
    RunSnapshot,
    RunState,
    Transition,
)

__all__ = [
    "AsyncRunJournal",
    "JournalStats",
    "RunEvent",
    "RunJournal",
    "RunMachine",
    "RunMetrics",
    "RunSnapshot",
    "RunState",
    "Transition",
]
