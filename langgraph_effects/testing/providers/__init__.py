"""Fake third-party providers that count the effects they actually apply.

The package: ``clocks``, ``store`` (the file a fake keeps its state in), ``faults``, ``base``
(``FakeProvider``) and one module a fake: ``crm``, ``mail``, ``ticketing``, ``api``.

They stand for the CRM, the mail service and the ticketing system an effect
tool talks to, and only for those: never fake our own ledger or LangGraph.

Each fake keeps its whole state (records, idempotency keys, scripted faults,
counters) in a small SQLite database of its own: the provider's "database".
Give it a ``path`` and the state is a file shared by every process that opens
it, so a test can kill a child process in the middle of a call, resume in a
fresh process, and count effects from the parent. ``path=None`` keeps the
state in memory for single-process tests.

Guarantees:

* Every call is one ``BEGIN IMMEDIATE`` transaction, committed *before* the
  fake answers (or raises, or kills the process): what it applied survives a
  process kill. Thread-safe (a lock per object) and process-safe (SQLite
  locking with a busy timeout). WAL with ``synchronous=NORMAL``: durable
  across process death, not across power loss; this is a test double.
* Time comes from an injectable :class:`Clock`; :class:`FakeClock` is one you
  advance by hand (optionally stored in a file so processes share it). Nothing
  in the fakes sleeps: late answers, key expiry, delivery and search
  visibility all happen when the clock says so, so tests need no timing.

Counting (the harness view, never touched by faults):

* ``effects``: effects the provider applied (a replayed idempotent resend,
  a rejected, refused or dropped call applies nothing).
* ``effects_for(target, idempotency_key=...)``: the same, for one target
  (CRM: the case or record id; mail: the recipient; ticketing: the ticket
  title) and/or one idempotency key.
* ``duplicates``: applied effects beyond the first per *logical intent*,
  where an intent is ``(method, target, payload)`` (the payload compared by a
  canonical-JSON digest; the idempotency key is deliberately not part of it:
  the same request re-sent under a new key after the window closed is exactly
  the duplicate we hunt). Tests should give genuinely distinct intents
  distinct payloads. ``effects_for`` catches re-closes with another payload.

Faults are scripted per provider and consumed in call order
(``crm.faults.push(Fault.LOSE_RESPONSE)``, ``crm.script([None, Fault.TRANSIENT])``);
since they live in the database, a parent can script a child's calls. By
default a fault applies to the next *effect* call (``close_case``, ``update``,
``send``, ``create_ticket``); pass ``on="get_case"`` (a method name) to aim one
at a lookup instead.
"""

from langgraph_effects.testing.providers.api import FakeAPI
from langgraph_effects.testing.providers.base import AppliedEffect, FakeProvider, ProviderStats
from langgraph_effects.testing.providers.clocks import Clock, FakeClock, SystemClock
from langgraph_effects.testing.providers.crm import FakeCRM
from langgraph_effects.testing.providers.faults import Fault, FaultQueue, ProviderTimeout
from langgraph_effects.testing.providers.mail import FakeMail
from langgraph_effects.testing.providers.ticketing import FakeTicketing

__all__ = [
    "AppliedEffect",
    "Clock",
    "FakeAPI",
    "FakeCRM",
    "FakeClock",
    "FakeMail",
    "FakeProvider",
    "FakeTicketing",
    "Fault",
    "FaultQueue",
    "ProviderStats",
    "ProviderTimeout",
    "SystemClock",
]
