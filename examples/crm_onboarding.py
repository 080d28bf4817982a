"""CRM onboarding: close a case, then notify the account owner through the outbox.

Two effects with two independent recoveries (seed ``000``): the CRM update is
an effect tool run by ``EffectToolNode`` (a ledger operation, the CRM's
idempotency key and status lookup); the notification is NOT sent by the
agent: its tool commits the local business change (the onboarding is
complete) and an outbox row in ONE transaction of the application's database,
and a relay delivers the e-mail later as an operation of its own, saving the
provider's receipt at once. No API key, nothing to start.

Run it::

    python examples/crm_onboarding.py                            # the whole flow
    python examples/crm_onboarding.py --crash-at after_provider  # the CRM acted, the process dies
    python examples/crm_onboarding.py --resume --dir DIR         # a fresh process finishes it
    python examples/crm_onboarding.py --crash-at relay_after_send  # the mail was accepted,
                                                                 # the relay died before the receipt
    python examples/crm_onboarding.py --model openai:gpt-4o-mini # a real model (optional)
    python examples/crm_onboarding.py --postgres postgresql://postgres@127.0.0.1:5432/test

``--crash-at`` takes a ``CrashPoint`` of the runner that this flow reaches
(``POINT:N`` dies on the N-th reach):

- ``before_prepare``: nothing written yet;
- ``after_prepare``: the record is written, not claimed (``close_case`` has an
  ``authorize`` hook, asked between the two: is the case on legal hold?);
- ``after_claim``, ``after_provider``, ``after_receipt``: around the CRM call;
- ``during_reconcile``: this run scripts a lost CRM response, so the close is
  ``unknown`` and reconciled, and the process dies inside the reconciliation;

or ``relay_after_send`` (a fault at the fake mail provider: it accepts the
message, then the relay's process is killed). ``during_review_resume`` is not
offered: the CRM's status lookup always settles the question, so no person is
ever asked here (see ``support_ticket.py``). The process really exits (code
137) and prints ``--resume --dir DIR``: a new run's files are in a fresh directory of
its own under the system temp dir, kept and named, unless ``--dir`` says where. The
resume can itself take ``--crash-at`` (e.g.
``during_reconcile`` after an ``after_provider`` crash). ``--postgres URL``
keeps the ledger, LangGraph's checkpoints and the application's tables (the
outbox) in PostgreSQL, in a schema of the run's own; the fake providers stay
SQLite files.

What it prints: each step of the agent (tool calls and results), what the
relay did, then the ledger's operations (two: ``crm.close_case`` and
``outbox.owner.notify``) with status and attempts, the outbox entries with
their receipt state (``accepted`` is not ``delivered``), and what the
providers counted: ``CRM closures of case-318: 1`` and ``e-mails to the
account owner: 1``, whatever crashed. Exit code 0 when both counts are 1 and
both operations are confirmed; 137 when a crash point killed it; 3 when the
armed crash point was not reached (nothing died); 1 otherwise.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from _common import (
    app_connection,
    app_relay,
    app_sql,
    app_transaction,
    begin,
    chat_model,
    example_parser,
    narrate,
    open_ledger,
    open_saver,
    table,
    who,
)
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph

from langgraph_effects import (
    EffectContext,
    EffectToolNode,
    Evidence,
    Ledger,
    Operation,
    OperationStatus,
    ProviderContract,
    effect,
    route_tool_calls,
)
from langgraph_effects.outbox import Delivery, Outbox, Receipt
from langgraph_effects.testing import CrashPoint, FakeCRM, FakeMail, Fault

TENANT = "acme"
THREAD = "onboarding-42"
CASE = "case-318"
OWNER = "owner@acme.example"
RELAY_CRASH = "relay_after_send"
CRASH_POINTS = (
    "before_prepare",
    "after_prepare",
    "after_claim",
    "after_provider",
    "after_receipt",
    "during_reconcile",
    RELAY_CRASH,
)
PLAN = [
    [{"name": "close_case", "args": {"case_id": CASE, "resolution": "onboarding complete"}}],
    [{"name": "complete_onboarding", "args": {"case_id": CASE, "owner_email": OWNER}}],
]
KEYS_24H = ProviderContract(idempotency_window=timedelta(hours=24), status_lookup=True)


# --------------------------------------------------------------------------- the application


def open_app(directory: Path, pg: str | None) -> Any:
    """The application's own database: its business tables and the outbox."""
    conn = app_connection(directory, pg)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS onboarding (case_id TEXT PRIMARY KEY, status TEXT NOT NULL)"
    )
    conn.execute("CREATE TABLE IF NOT EXISTS legal_holds (case_id TEXT PRIMARY KEY)")
    Outbox(tenant_id=TENANT).setup(conn)
    return conn


def build_tools(crm: FakeCRM, app: Any) -> list[Any]:
    """The agent's two tools: an effect on the CRM, a local transaction with an outbox row."""

    def not_on_hold(ctx: EffectContext) -> bool:
        # Asked before every new dispatch: a case put on legal hold since the
        # model proposed the close must not be closed.
        sql = app_sql(app, "SELECT 1 FROM legal_holds WHERE case_id = ?")
        return app.execute(sql, (ctx.target,)).fetchone() is None

    def find_closure(op: Operation) -> Evidence:
        # Conclusive only when the CRM shows THIS operation's key on the case.
        case = crm.get_case(op.target or "")
        if case["status"] == "closed" and case["closed_by"] == op.idempotency_key:
            return Evidence.confirmed(
                f"{case['case_id']} closed by this operation at version {case['version']}",
                provider_result_id=f"{case['case_id']}@v{case['version']}",
                result={k: case[k] for k in ("case_id", "status", "resolution", "version")},
            )
        return Evidence.inconclusive(f"{case['case_id']} is {case['status']}, not by this key")

    @effect(
        "crm.close_case",
        target=lambda a: a["case_id"],
        contract=KEYS_24H,
        reconcile=find_closure,
        authorize=not_on_hold,
    )
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case with a resolution."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    @tool
    def complete_onboarding(case_id: str, owner_email: str) -> str:
        """Mark the onboarding complete and notify the account owner by e-mail."""
        # One local transaction: the business change and the intention to notify
        # commit together or not at all. Running it again (a resume re-runs an
        # unfinished tool) is harmless: the UPDATE is idempotent and the
        # dedupe_key makes the second enqueue the same entry.
        outbox = Outbox(tenant_id=TENANT)
        with app_transaction(app):
            app.execute(
                app_sql(
                    app,
                    "INSERT INTO onboarding (case_id, status) VALUES (?, 'complete')"
                    " ON CONFLICT (case_id) DO UPDATE SET status = 'complete'",
                ),
                (case_id,),
            )
            entry_id = outbox.enqueue(
                app,
                topic="owner.notify",
                key=owner_email,
                dedupe_key=case_id,
                payload={
                    "to": owner_email,
                    "subject": f"Onboarding of {case_id} complete",
                    "body": f"The onboarding case {case_id} is closed.",
                },
            )
        return f"onboarding of {case_id} marked complete; owner notification queued ({entry_id})"

    return [close_case, complete_onboarding]


def build_graph(tools: list[Any], ledger: Ledger, saver: Any, model: Any) -> Any:
    model = model.bind_tools(tools)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", EffectToolNode(tools, ledger=ledger, tenant_id=TENANT))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def relay_for(app_dir: Path, pg: str | None, ledger: Ledger, mail: FakeMail) -> Any:
    """The outbox relay: each entry becomes a ledger operation; receipts saved at once."""

    def deliver(d: Delivery) -> Receipt:
        p = d.entry.payload
        sent = mail.send(p["to"], p["subject"], p["body"], idempotency_key=d.idempotency_key)
        return Receipt(message_id=sent["message_id"])  # accepted, not (yet) delivered

    def reconcile(op: Operation) -> Evidence:
        found = mail.search(idempotency_key=op.idempotency_key)
        if found:
            return Evidence.confirmed(
                "the Sent folder holds a message under this operation's key",
                provider_result_id=found[0]["message_id"],
                result={"message_id": found[0]["message_id"], "state": found[0]["status"]},
            )
        # The Sent search is eventually consistent: an empty result proves nothing.
        return Evidence.inconclusive("no message under this key in the Sent folder (yet)")

    return app_relay(
        app_dir,
        pg,
        ledger=ledger,
        deliver=deliver,
        reconcile=reconcile,
        contract=KEYS_24H,
        tenant_id=TENANT,
        provider="mail",
    )


# --------------------------------------------------------------------------- the run


def report(directory: Path, ledger: Ledger, app: Any) -> int:
    """Print what the ledger, the outbox and the providers say; return the exit code."""
    ops = ledger.list(tenant_id=TENANT)
    print("\nLedger operations:")
    print(
        table(
            [(o.operation_id, o.action, o.target, o.status.value, o.attempts) for o in ops],
            header=("operation", "action", "target", "status", "attempts"),
        )
    )
    for o in ops:  # how each got there: its own recovery, independent of the other
        steps = [f"{e.kind.value}({who(e.actor)})" for e in ledger.events(TENANT, o.operation_id)]
        print(f"  {o.action}: {' -> '.join(steps)}")
    entries = Outbox.list(app)
    print("\nOutbox entries:")
    print(
        table(
            [(e.entry_id, e.topic, e.status.value, e.receipt_state or "-") for e in entries],
            header=("entry", "topic", "status", "receipt"),
        )
    )
    with FakeCRM(directory / "crm.db") as crm, FakeMail(directory / "mail.db") as mail:
        closures, mails = crm.effects_for(CASE), mail.effects_for(OWNER)
    print(f"\nCRM closures of {CASE}: {closures}")
    print(f"e-mails to the account owner: {mails}")
    confirmed = [o for o in ops if o.status is OperationStatus.CONFIRMED]
    ok = closures == 1 and mails == 1 and len(ops) == 2 and len(confirmed) == 2
    print("OK: each effect happened exactly once." if ok else "NOT DONE: see above.")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = example_parser(__doc__, CRASH_POINTS, model=True)
    args = parser.parse_args(argv)
    run = begin("crm_onboarding", parser, args, stores="ledger, checkpoints, app")
    directory, pg = run.directory, run.pg
    relay_crash = args.crash_at == RELAY_CRASH

    app = open_app(directory, pg)
    config = {"configurable": {"thread_id": THREAD}}
    with (
        FakeCRM(directory / "crm.db") as crm,
        FakeMail(directory / "mail.db") as mail,
        open_ledger(directory, pg) as ledger,
        open_saver(directory, pg) as saver,
    ):
        if relay_crash:
            mail.faults.push(Fault.CRASH)  # accept the message, commit, then kill us
        plan = None if relay_crash else run.arm()
        if plan and plan.point is CrashPoint.DURING_RECONCILE and not args.resume:
            crm.faults.push(Fault.LOSE_RESPONSE)  # closes, then times out: reconcile follows
            print("Scripted: the CRM will close the case and lose the reply.")
        graph = build_graph(build_tools(crm, app), ledger, saver, chat_model(args.model, PLAN))

        if not args.resume:
            print("\nThe agent (one process; the checkpoint is saved at every step):")
            ask = f"Onboarding of {CASE} is done: close the case, then notify {OWNER}."
            narrate(graph, {"messages": [HumanMessage(ask)]}, config)
        elif not graph.get_state(config).values:
            print(f"Nothing to resume in {directory}: run without --resume first.")
            return 1
        elif graph.get_state(config).next:
            print("\nThe agent resumes its thread: graph.invoke(None, config)")
            narrate(graph, None, config)
        else:
            print("\nThe agent's thread is finished; nothing to resume there.")

        print("\nThe outbox relay delivers what the committed transactions queued:")
        with relay_for(directory, pg, ledger, mail) as relay:
            done = relay.run_until_idle()
        print(f"  claimed {done.claimed}, sent {done.sent}, review {done.review}, dead {done.dead}")
        return run.exit_code(plan, report(directory, ledger, app))


if __name__ == "__main__":
    sys.exit(main())
