"""Notifications through a transactional outbox (ARCHITECTURE.md, "Where each rule lives").

The package: ``model`` (the values), ``statements`` (the table's programs), ``writer``
(``Outbox``, the write side) and ``relay`` (``OutboxRelay``).

Where the application owns its database, the business change and the
intention to notify commit together, in the application's own transaction::

    with conn:                                    # the application's transaction
        conn.execute("UPDATE cases SET status = 'closed' WHERE id = ?", (case_id,))
        outbox.enqueue(conn, topic="case.closed", key=case_id, payload={...})
    # rolled back -> no notification; committed -> exactly one, later

``Outbox.enqueue`` only executes an INSERT on the caller's connection: it
never commits, never opens a second transaction, never touches the ledger.

A relay (``OutboxRelay``) delivers the entries later, from its own connection.
Each entry becomes an operation of its own in the ledger (operation id
derived from the entry id, its own idempotency key, its own evidence), decided
by the decision engine that decides every tool call (``decide``), so the same
rules apply: a receipt is saved at once; a lost receipt makes the operation
``unknown``, then it is reconciled, retried under the provider's idempotency
key while that is safe, or left for review; a receipt that arrives after a
takeover is kept and settles what it may. The relay's policy
(``decide.Policy.returning``) is never to hold: where a graph would ask a
person, wait for another worker's lease or sleep before a resend, the relay
settles the entry and looks again later. Accepted by the provider is not
delivered: the record keeps which one it knows. A pass is one generator of the
engine's actions (the relay's table work is a ``Hook``, each delivery the
decision loop itself), driven by the engine's own drivers: ``run_once`` (a
sync ``Ledger``) or ``arun_once`` (an ``AsyncLedger``).

Two fences, two purposes::

    relay A  claim entry (token 4) ─ prepare+claim op (fence 1) ─ send ─ confirm ─ settle(4)
    relay B      claim entry after A's entry lease expired (token 5) ─ op dispatching,
                 its lease alive -> wait, never send

The entry lease keeps relays from working on the same entry (efficiency);
the ledger's lease and fencing token decide who may dispatch (correctness).
A relay that lost its entry lease cannot settle the entry (token mismatch);
the next relay reads the ledger and settles it from there.

Entry states: ``pending`` (work to do), ``review`` (its operation is
``unknown`` and nothing resolved it: reconciled again every
``review_recheck``, and an operator's resolution in the ledger is picked up
there), ``sent`` (the provider acknowledged it: ``receipt_state`` says
``accepted`` or ``delivered``), ``dead`` (a definitive rejection, conclusive
evidence that it was not sent, or ``max_failures`` failures that provably did
not deliver). Nothing is compensated automatically: a dead entry stays dead
until a person enqueues something else.

After "accepted": the provider's later word that a message was delivered
arrives as a webhook (``Outbox.mark_delivered``) or from a status check
(``OutboxRelay.check_deliveries``, fenced like a delivery pass). Each is an
event in ``lge_outbox_events``, idempotent per evidence id, and raises the
entry's ``receipt_state`` to ``delivered``, never back.

Ordering (``ordered=True`` at enqueue): an entry is not claimed while an
earlier entry (lower ``seq``) of the same tenant, topic and key is still
``pending`` or ``review``; ``sent`` and ``dead`` entries do not block. ``seq``
is allocation order: when two transactions enqueue for one key concurrently
without a lock in common, PostgreSQL may commit them out of ``seq`` order.
Lock the business row (the usual case: both update the same case) to keep
commit order and ``seq`` order the same.
"""

from langgraph_effects.outbox.model import (
    Delivery,
    OutboxEntry,
    OutboxEvent,
    OutboxStatus,
    Receipt,
    RelayReport,
)
from langgraph_effects.outbox.relay import OutboxRelay
from langgraph_effects.outbox.writer import Outbox

__all__ = [
    "Delivery",
    "Outbox",
    "OutboxEntry",
    "OutboxEvent",
    "OutboxRelay",
    "OutboxStatus",
    "Receipt",
    "RelayReport",
]
