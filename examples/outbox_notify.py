"""Close a case and notify its owner through a transactional outbox (no API key needed).

The application's database (``app.db``) gets the business change and the
outbox entry in ONE transaction; a relay later delivers the notification as an
operation of its own in the ledger (``ledger.db``), through a fake mail
provider (``mail.db``) that counts what it really sent.

Run it::

    python examples/outbox_notify.py                              # close, relay, report
    python examples/outbox_notify.py --crash-at before_relay      # killed after the commit ...
    python examples/outbox_notify.py --crash-at after_send        # killed after the provider sent,
                                                                  # before the receipt was saved
    python examples/outbox_notify.py --resume --dir DIR           # ... a new relay finishes the job
    python examples/outbox_notify.py --postgres postgresql://postgres@127.0.0.1:5432/test

``--postgres URL`` keeps the application's tables (cases, outbox) and the
ledger in PostgreSQL, in a schema of the run's own; the fake mail provider
stays a SQLite file.

It prints: the case closed (and a second change rolled back, so its
notification never exists), what the relay did (claimed, sent, review, dead),
each outbox entry with its status and receipt state ("accepted" is not
"delivered"), each ledger operation with its status and events, and the
number of messages the mail provider actually sent: 1, whatever the crash.
Exit code 0 when that count is 1 and every entry is sent; 137 when a crash
point killed it; 1 otherwise (2 for a usage error, such as ``--resume`` of a
directory holding no run).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from _common import (
    RollBack,
    app_connection,
    app_relay,
    app_sql,
    app_transaction,
    begin,
    example_parser,
    open_ledger,
)

from langgraph_effects.core.model import Evidence, Operation
from langgraph_effects.outbox import Delivery, Outbox, OutboxStatus, Receipt
from langgraph_effects.testing.providers import FakeMail, Fault

CRASH_POINTS = ("before_relay", "after_send")


def close_case(conn: Any, case_id: str, *, commit: bool) -> None:
    """The business transaction: the case change and its notification commit together."""
    try:
        with app_transaction(conn):
            conn.execute(
                app_sql(conn, "UPDATE cases SET status = 'closed' WHERE id = ?"), (case_id,)
            )
            Outbox().enqueue(
                conn,
                topic="case.closed",
                key=case_id,
                dedupe_key=f"closed:{case_id}",
                payload={
                    "to": "owner@example.com",
                    "subject": f"{case_id} closed",
                    "body": "Done.",
                },
            )
            if not commit:
                raise RollBack
    except RollBack:
        pass
    print(f"case {case_id}: {'closed and notification enqueued' if commit else 'rolled back'}")


def sender(mail: FakeMail) -> Callable[[Delivery], Receipt]:
    def deliver(d: Delivery) -> Receipt:
        p = d.entry.payload
        sent = mail.send(p["to"], p["subject"], p["body"], idempotency_key=d.idempotency_key)
        return Receipt(message_id=sent["message_id"])  # accepted, not yet delivered

    return deliver


def reconciler(mail: FakeMail) -> Callable[[Operation], Evidence]:
    def reconcile(op: Operation) -> Evidence:
        found = mail.search(idempotency_key=op.idempotency_key)
        if not found:
            return Evidence.inconclusive("not in Sent (the search may lag)")
        m = found[0]
        return Evidence.confirmed(
            "found in Sent by idempotency key",
            provider_result_id=m["message_id"],
            result={"message_id": m["message_id"], "state": m["status"]},
        )

    return reconcile


def main(argv: list[str] | None = None) -> int:
    parser = example_parser(
        __doc__,
        CRASH_POINTS,
        counted=False,
        crash_help="kill this process before the relay runs, or just after the provider sent",
        resume_help="let a new relay finish the run found in --dir",
    )
    args = parser.parse_args(argv)
    run = begin("outbox_notify", parser, args, needs="mail.db")
    workdir, pg = run.directory, run.pg
    mail = FakeMail(workdir / "mail.db")
    app = app_connection(workdir, pg)
    if not args.resume:
        Outbox().setup(app)
        app.execute("CREATE TABLE IF NOT EXISTS cases (id TEXT PRIMARY KEY, status TEXT)")
        for case_id in ("case-318", "case-319"):
            app.execute(
                app_sql(app, "INSERT INTO cases VALUES (?, 'open') ON CONFLICT (id) DO NOTHING"),
                (case_id,),
            )
        print(f"working in {workdir}" + (" (app tables and ledger: PostgreSQL)" if pg else ""))
        close_case(app, "case-318", commit=True)
        close_case(app, "case-319", commit=False)
        resume = run.resume_command()
        if args.crash_at == "before_relay":
            print(f"** crash before the relay ran; resume with {resume}")
            os._exit(137)
        if args.crash_at == "after_send":
            mail.faults.push(Fault.CRASH)  # send, commit at the provider, kill this process
            print(f"** the provider will send and then this process dies; resume with {resume}")
    with (
        open_ledger(workdir, pg) as ledger,
        app_relay(
            workdir, pg, ledger=ledger, deliver=sender(mail), reconcile=reconciler(mail)
        ) as relay,
    ):
        report = relay.run_until_idle()
        print(f"relay: {report}")
        entries = Outbox.list(app)
        for entry in entries:
            print(
                f"entry {entry.entry_id} [{entry.key}]: {entry.status.value}, "
                f"receipt {entry.receipt_state}, message {entry.provider_message_id}"
            )
            op = ledger.get(entry.tenant_id, entry.operation_id)
            events = [e.kind.value for e in ledger.events(entry.tenant_id, entry.operation_id)]
            print(f"  operation {op.operation_id}: {op.status.value}, events {events}")
    app.close()
    sent = mail.effects
    print(f"messages the provider sent: {sent} (to case-319's owner: none)")
    mail.close()
    ok = sent == 1 and [e.status for e in entries] == [OutboxStatus.SENT]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
