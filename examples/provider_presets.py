"""Provider presets: a keyed API resent under its key, a keyless one reconciled by a marker.

An agent charges a customer through a Stripe-style API (``presets.STRIPE``: an
``Idempotency-Key`` kept 24 hours, a search that lags about a minute), then e-mails
the receipt through a SendGrid-style API (``presets.SENDGRID``: no key at all). Each
tool is an ``@effect`` declared with its preset's ``contract`` and
``reconciler(search)``: it sends ``ctx.idempotency_key`` where the API takes one and
puts ``preset.marker(ctx)`` into what it creates. The APIs are the package's
``FakeAPI`` fakes (``langgraph_effects.testing``), which behave as the providers
document and count what they applied. No network, no API key.

Run it::

    python examples/provider_presets.py                             # both answers lost
    python examples/provider_presets.py --crash-at after_provider   # killed after Stripe charged
    python examples/provider_presets.py --resume --dir DIR          # a fresh process resumes
    python examples/provider_presets.py --postgres postgresql://postgres@127.0.0.1:5432/test

Without ``--crash-at`` both providers act and their answers are lost (a timeout
after the fake committed): the charge's reconciler finds nothing yet (Stripe's
search lags), so the contract resends it under the same key and Stripe replays its
first response; the e-mail has no key, so it is never resent: its reconciler
finds the marker in SendGrid's activity and confirms it.

``--crash-at POINT[:N]`` really kills the process (exit code 137) at a boundary of
the charge, or with ``:2`` of the e-mail, and prints the ``--resume --dir DIR``
command; the resume runs ``graph.invoke(None, config)`` in a fresh process:

- ``before_prepare``, ``after_receipt``: nothing was sent, or everything was
  recorded: the charge is made, or its recorded result replayed;
- ``after_claim``, ``after_provider``: the charge's owner is dead, the operation
  ``unknown``; Stripe's search shows nothing yet, so it is resent under its key:
  Stripe charges once (``after_claim``: it had heard nothing) or replays the first
  response (``after_provider``);
- ``after_claim:2``: SendGrid never heard of the e-mail; nothing carries the
  marker, so a person decides (an ``interrupt()``): the on-call policy looks at
  SendGrid's activity, sees nothing and orders the send;
- ``after_provider:2``: SendGrid sent it; the marker is found, ``confirmed``.

``--postgres URL`` keeps the ledger and LangGraph's checkpoints in PostgreSQL (a
schema of the run's own); the fakes stay SQLite files.

What it prints: each step of the agent, any review and its answer, the ledger's
operations with their events, and what each provider counts:
``charges of cus_1042 at Stripe: 1`` (with the replays it answered) and
``receipts SendGrid sent to ana@example.com: 1``, whatever crashed. Exit code 0
when both counts are 1 and both operations are confirmed; 137 when a crash point
killed it; 3 when the armed point was not reached (nothing died); 1 otherwise.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from _common import (
    begin,
    example_parser,
    narrate,
    open_ledger,
    open_saver,
    scripted,
    table,
    who,
)
from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command

from langgraph_effects import (
    EffectContext,
    EffectToolNode,
    Ledger,
    OperationStatus,
    effect,
    route_tool_calls,
)
from langgraph_effects.presets import SENDGRID, STRIPE
from langgraph_effects.testing import FakeAPI, Fault

TENANT = "acme"
THREAD = "checkout-42"
CUSTOMER = "cus_1042"
EMAIL = "ana@example.com"
PLAN = [
    [{"name": "charge", "args": {"customer": CUSTOMER, "amount": 4900}}],
    [{"name": "send_receipt", "args": {"to": EMAIL, "body": "We charged 49.00 EUR. Thanks!"}}],
]
# POINT: the charge's boundary; POINT:2 the e-mail's (each effect crosses each point once).
CRASH_POINTS = (
    "before_prepare",
    "after_claim",
    "after_provider",
    "after_receipt",
    "after_claim:2",
    "after_provider:2",
)


def providers(directory: Path) -> tuple[FakeAPI, FakeAPI]:
    """The two APIs, as their documentation says they behave (state in SQLite files)."""
    stripe = FakeAPI(directory / "stripe.db", preset=STRIPE, search_delay=timedelta(minutes=1))
    sendgrid = FakeAPI(directory / "sendgrid.db", preset=SENDGRID)
    return stripe, sendgrid


def build_graph(stripe: FakeAPI, sendgrid: FakeAPI, ledger: Ledger, saver: Any) -> Any:
    """agent -> tools -> agent; each tool an effect declared with its provider's preset."""

    @effect(
        "stripe.charge",
        target=lambda a: a["customer"],
        contract=STRIPE.contract,  # resend under the same key for 23 of the key's 24 hours
        reconcile=STRIPE.reconciler(stripe.search),  # objects carrying the marker
    )
    def charge(customer: str, amount: int, ctx: EffectContext) -> dict[str, Any]:
        """Charge a customer (the amount in cents)."""
        metadata = {"lge_op": STRIPE.marker(ctx)}
        return stripe.create(
            customer, {"amount": amount, "metadata": metadata}, idempotency_key=ctx.idempotency_key
        )

    @effect(
        "sendgrid.send",
        target=lambda a: a["to"],
        contract=SENDGRID.contract,  # None: no key, never resent automatically
        reconcile=SENDGRID.reconciler(sendgrid.search),
    )
    def send_receipt(to: str, body: str, ctx: EffectContext) -> dict[str, Any]:
        """E-mail a receipt."""
        return sendgrid.create(to, {"body": body, "custom_args": {"lge_op": SENDGRID.marker(ctx)}})

    model = scripted(PLAN)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node(
        "tools", EffectToolNode([charge, send_receipt], ledger=ledger, tenant_id=TENANT)
    )
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def policy_answer(request: dict[str, Any], sendgrid: FakeAPI) -> dict[str, Any]:
    """The on-call person's check: does SendGrid's activity show the message? (the fake's
    consistent view). Seen: confirm; not there: send it (it never left)."""
    seen = sendgrid.effects_for(request["target"])
    return {
        "operation_id": request["operation_id"],
        "decision": "confirm" if seen else "retry",
        "by": "on-call policy",
        "reason": f"{seen} message(s) to {request['target']} in the activity"
        if seen
        else "SendGrid shows no message to this address: it never left",
    }


def report(ledger: Ledger, stripe: FakeAPI, sendgrid: FakeAPI) -> int:
    """Print what the ledger and the providers say; return the exit code."""
    flow = ["stripe.charge", "sendgrid.send"]
    ops = sorted(ledger.list(tenant_id=TENANT), key=lambda o: flow.index(o.action))
    print("\nLedger operations:")
    print(
        table(
            [(o.operation_id, o.action, o.target, o.status.value, o.attempts) for o in ops],
            header=("operation", "action", "target", "status", "attempts"),
        )
    )
    for o in ops:
        steps = [f"{e.kind.value}({who(e.actor)})" for e in ledger.events(TENANT, o.operation_id)]
        print(f"  {o.action}: {' -> '.join(steps)}")
    charges, replays = stripe.effects_for(CUSTOMER), stripe.stats().replays
    sent = sendgrid.effects_for(EMAIL)
    print(f"\ncharges of {CUSTOMER} at Stripe: {charges} (first responses replayed: {replays})")
    print(f"receipts SendGrid sent to {EMAIL}: {sent}")
    ok = (charges, sent) == (1, 1) and [o.status for o in ops] == [OperationStatus.CONFIRMED] * 2
    print("OK: each effect happened exactly once." if ok else "NOT DONE: see above.")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    crashes = f"die at a crash point: {', '.join(CRASH_POINTS)} (:2 is the e-mail's)"
    parser = example_parser(__doc__, CRASH_POINTS, crash_help=crashes)
    args = parser.parse_args(argv)
    run = begin("provider_presets", parser, args, stores="ledger, checkpoints")
    directory, pg = run.directory, run.pg

    config = {"configurable": {"thread_id": THREAD}}
    stripe, sendgrid = providers(directory)
    with stripe, sendgrid, open_ledger(directory, pg) as ledger, open_saver(directory, pg) as saver:
        graph = build_graph(stripe, sendgrid, ledger, saver)
        plan = run.arm()
        if not args.resume:
            if plan is None:
                stripe.faults.push(Fault.LOSE_RESPONSE)  # charges, then the answer is lost
                sendgrid.faults.push(Fault.LOSE_RESPONSE)  # sends, then the answer is lost
                print("Scripted: Stripe and SendGrid will act and lose their answers.")
            print("\nThe agent:")
            ask = HumanMessage(f"Charge {CUSTOMER} 49.00 EUR and e-mail the receipt to {EMAIL}.")
            interrupts = narrate(graph, {"messages": [ask]}, config)
        elif graph.get_state(config).next:
            print("\nA fresh process resumes the thread: graph.invoke(None, config)")
            interrupts = narrate(graph, None, config)
        elif graph.get_state(config).values:
            print("\nThe thread is finished; nothing to resume there.")
            interrupts = []
        else:
            print(f"Nothing to resume in {directory}: run without --resume first.")
            return 1
        while interrupts:
            request = interrupts[0].value
            print(f"\nReview: {request['action']} to {request['target']} is {request['status']}")
            for ev in request["evidence"]:
                print(f"  evidence  {ev['kind']}: {ev['summary']}")
            answer = policy_answer(request, sendgrid)
            print(f"Answer: graph.invoke(Command(resume={json.dumps(answer)}), config)")
            interrupts = narrate(graph, Command(resume=answer), config)
        return run.exit_code(plan, report(ledger, stripe, sendgrid))


if __name__ == "__main__":
    sys.exit(main())
