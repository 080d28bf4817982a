"""Support ticket: a provider with no idempotency and no lookup, so a person decides.

Seed ``001``: the agent creates a support ticket; the ticketing system (a
``FakeTicketing``) creates it but the response is lost (a timeout). It offers
no idempotency key and no way to look the ticket up, so nothing can tell
whether a resend would create a second ticket. ``EffectToolNode`` neither
retries blindly nor calls it failed: the operation is ``unknown`` and the
graph stops at an ``interrupt()`` carrying a review request (the operation id,
the evidence, what a retry would risk, the decisions allowed). No API key.

Run it::

    python examples/support_ticket.py                      # a policy answers the review
    python examples/support_ticket.py --decision confirm --by alice --reason "T-1 exists"
    python examples/support_ticket.py --decision retry --by bob   # see what a retry costs
    python examples/support_ticket.py --stop-at-review     # leave it for an operator ...
    langgraph-effects list --db sqlite:///DIR/effects.db   # ... who uses the CLI
    langgraph-effects show OP --tenant acme --db sqlite:///DIR/effects.db
    langgraph-effects resolve OP --tenant acme --confirm --by alice --reason "seen in the UI" \\
        --db sqlite:///DIR/effects.db
    python examples/support_ticket.py --resume             # ... and the graph continues
    python examples/support_ticket.py --via-cli            # all of the above in one go
    python examples/support_ticket.py --crash-at after_provider   # the process dies instead
    python examples/support_ticket.py --resume             # of a timeout: the same review
    python examples/support_ticket.py --postgres postgresql://postgres@127.0.0.1:5432/test

Answers: from Python, ``graph.invoke(Command(resume={"operation_id": ...,
"decision": "confirm", "by": "alice", "reason": ...}), config)``; out of
band, through the ledger (the CLI's ``resolve``), then
``graph.invoke(None, config)``. The default policy stands for the on-call
person: they look in the ticketing system's UI (here the fake's harness view)
and confirm when the ticket is there, reject when it is not.

``--crash-at POINT[:N]`` takes a ``CrashPoint`` this flow reaches:

- ``before_prepare``: nothing written; the resume starts the call afresh (and
  meets the scripted lost response);
- ``after_claim``: claimed, the ticketing system never heard of it; the resume
  finds the owner dead, so ``unknown``, and the review; the on-call person sees
  no ticket and rejects: no ticket, ``rejected``, and that is the truth;
- ``after_provider``: the ticket was created, the receipt not saved: review;
- ``after_receipt``: the receipt is saved, the checkpoint not: replayed;
- ``during_review_resume``: the answer arrived and the process died before the
  ledger recorded it; LangGraph saved the answer with the checkpoint, so the
  resumed run applies that same answer, once.

(``after_prepare`` and ``during_reconcile`` are not offered: with no approval,
no ``authorize`` hook and no reconciler this flow never stops there.) The
process really exits (code 137); ``--resume`` continues from ``--dir``
(default: a directory under the system temp dir). ``--postgres URL`` keeps the
ledger and LangGraph's checkpoints in PostgreSQL (a schema of the run's own).

What it prints: each step of the agent; the review request (operation,
status ``unknown``, attempts, evidence, retry risk, allowed decisions); the
answer given and by whom; the operation's status and event log; and
``tickets created: N`` as counted by the ticketing system. Exit code 0 when
the flow ended with the ledger matching the provider (``confirmed`` and one
ticket, ``rejected`` and no ticket, or ``retry`` chosen and the duplicate the
review warned of); 2 when stopped at the review on purpose; 137 when a crash
point killed it; 3 when the armed crash point was not reached; 1 otherwise.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from _common import (
    begin,
    chat_model,
    example_parser,
    ledger_url,
    narrate,
    open_ledger,
    open_saver,
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
from langgraph_effects.testing import FakeTicketing, Fault

TENANT = "acme"
THREAD = "support-7"
TITLE = "Customer 1042 cannot log in"
PLAN = [
    [
        {
            "name": "create_ticket",
            "args": {"title": TITLE, "body": "Password reset mails never arrive since Monday."},
        }
    ]
]
STOPPED_AT_REVIEW = 2
CRASH_POINTS = (
    "before_prepare",
    "after_claim",
    "after_provider",
    "after_receipt",
    "during_review_resume",
)


def build_graph(tickets: FakeTicketing, ledger: Ledger, saver: Any, model: Any) -> Any:
    # No contract (no idempotency key), no reconciler (no lookup): an unknown
    # outcome can only be resolved by a person.
    @effect("ticketing.create_ticket", target=lambda a: a["title"])
    def create_ticket(title: str, body: str, ctx: EffectContext) -> dict[str, Any]:
        """Create a support ticket."""
        return tickets.create_ticket(title, body)

    model = model.bind_tools([create_ticket])

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", EffectToolNode([create_ticket], ledger=ledger, tenant_id=TENANT))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def show_request(request: dict[str, Any]) -> None:
    """Print the review request the way an operator's UI would."""
    print("\nReview request (the interrupt's value):")
    for key in ("kind", "operation_id", "action", "target", "status", "attempts", "last_error"):
        print(f"  {key:<17} {request.get(key)}")
    for ev in request["evidence"]:
        print(f"  evidence          {ev['kind']}: {ev['summary']}")
    print(f"  retry risk        {request['retry_risk']['summary']}")
    print(f"  allowed decisions {', '.join(request['allowed_decisions'])}")


def policy_answer(request: dict[str, Any], tickets: FakeTicketing) -> dict[str, Any]:
    """The on-call person's check: is the ticket in the ticketing UI? (the fake's harness view)."""
    seen = tickets.effects_for(request["target"])
    if seen:
        return {
            "operation_id": request["operation_id"],
            "decision": "confirm",
            "by": "on-call policy",
            "reason": f"found {seen} ticket(s) titled {request['target']!r} in the ticketing UI",
        }
    return {
        "operation_id": request["operation_id"],
        "decision": "reject",
        "by": "on-call policy",
        "reason": "no such ticket in the ticketing UI",
    }


def cli(*args: str) -> int:
    """Run the operator CLI (the console script next to this Python), echoing the command."""
    script = Path(sys.executable).with_name("langgraph-effects")
    exe = (
        [str(script)]
        if script.exists()
        else [shutil.which("langgraph-effects") or "langgraph-effects"]
    )
    print(f"\n$ langgraph-effects {shlex.join(args)}")
    return subprocess.run([*exe, *args], check=False).returncode


def main(argv: list[str] | None = None) -> int:
    parser = example_parser(
        __doc__, CRASH_POINTS, resume_help="continue the thread in --dir", model=True
    )
    parser.add_argument(
        "--decision", choices=["confirm", "reject", "retry"], help="answer the review yourself"
    )
    parser.add_argument("--by", default="alice", help="who decides (with --decision)")
    parser.add_argument("--reason", default="", help="why (with --decision)")
    parser.add_argument(
        "--stop-at-review", action="store_true", help="leave the review for an operator"
    )
    parser.add_argument(
        "--via-cli", action="store_true", help="resolve with the langgraph-effects CLI"
    )
    args = parser.parse_args(argv)
    run = begin("support_ticket", parser, args, stores="ledger, checkpoints")
    directory, pg = run.directory, run.pg
    db_url = ledger_url(directory, pg)

    config = {"configurable": {"thread_id": THREAD}}
    with (
        FakeTicketing(directory / "ticketing.db") as tickets,
        open_ledger(directory, pg) as ledger,
        open_saver(directory, pg) as saver,
    ):
        graph = build_graph(tickets, ledger, saver, chat_model(args.model, PLAN))
        plan = run.arm()

        if not args.resume:
            if plan is None or plan.point.value not in ("after_provider", "after_receipt"):
                tickets.faults.push(Fault.LOSE_RESPONSE)  # creates the ticket, then times out
                print("Scripted: the ticketing system will create the ticket and lose the reply.")
            print("\nThe agent:")
            ask = f"Open a support ticket: {TITLE}."
            interrupts = narrate(graph, {"messages": [HumanMessage(ask)]}, config)
        elif not graph.get_state(config).values:
            print(f"Nothing to resume in {directory}: run without --resume first.")
            return 1
        else:
            print("\nThe agent resumes its thread: graph.invoke(None, config)")
            interrupts = narrate(graph, None, config)

        while interrupts:
            request = interrupts[0].value
            show_request(request)
            op_id = request["operation_id"]
            if args.via_cli:
                cli("list", "--db", db_url)
                cli("show", op_id, "--tenant", TENANT, "--db", db_url)
                cli(
                    "resolve", op_id, "--tenant", TENANT, "--confirm", "--by", args.by,
                    "--reason", args.reason or "ticket seen in the ticketing UI",
                    "--db", db_url,
                )  # fmt: skip
                print("\nResolved out of band; the graph continues: graph.invoke(None, config)")
                interrupts = narrate(graph, None, config)
                continue
            if args.stop_at_review:
                print("\nStopped at the review. An operator can now run:")
                print(f"  langgraph-effects list --db {db_url}")
                print(f"  langgraph-effects show {op_id} --tenant {TENANT} --db {db_url}")
                print(
                    f"  langgraph-effects resolve {op_id} --tenant {TENANT} --confirm --by alice"
                    f' --reason "seen in the UI" --db {db_url}'
                )
                print(f"and then: {run.resume_command()}")
                return STOPPED_AT_REVIEW
            if args.decision:
                answer = {
                    "operation_id": op_id,
                    "decision": args.decision,
                    "by": args.by,
                    "reason": args.reason,
                }
            else:
                answer = policy_answer(request, tickets)
            print(f"\nAnswer: graph.invoke(Command(resume={json.dumps(answer)}), config)")
            interrupts = narrate(graph, Command(resume=answer), config)

        (op,) = ledger.list(tenant_id=TENANT)
        print(f"\nOperation {op.operation_id}: {op.status.value}, {op.attempts} attempt(s)")
        for e in ledger.events(TENANT, op.operation_id):
            frm = e.from_status.value if e.from_status else "-"
            note = f"  [{e.detail}]" if e.kind.value == "resolve" and e.detail else ""
            print(
                f"  {e.kind.value:<13} {frm:>11} -> {e.to_status.value:<11} by {who(e.actor)}{note}"
            )
        created = tickets.effects_for(TITLE)
        print(f"tickets created: {created}")
        if op.status is OperationStatus.UNKNOWN:
            print("The operation is still unknown: resolve it (see --stop-at-review).")
            return STOPPED_AT_REVIEW
        retried = any(
            e.kind.value == "resolve" and e.to_status is OperationStatus.PREPARED
            for e in ledger.events(TENANT, op.operation_id)
        )
        if retried:
            print(
                "A person chose retry with no idempotency key: the duplicate the review warned of."
            )
        confirmed_right = op.status is OperationStatus.CONFIRMED and created == (
            2 if retried else 1
        )
        rejected_right = op.status is OperationStatus.REJECTED and created == 0
        if op.status is OperationStatus.REJECTED and created:
            print("Rejected, yet the ticketing system holds the ticket: the decision was wrong.")
        ok = confirmed_right or rejected_right
        print("OK: the ledger matches the ticketing system." if ok else "MISMATCH: see above.")
        return run.exit_code(plan, 0 if ok else 1)


if __name__ == "__main__":
    sys.exit(main())
