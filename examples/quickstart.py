"""Quickstart: the CRM acted, the process died, and the resume does not close the case twice.

Run it (no API key, nothing to start; a few seconds)::

    python examples/quickstart.py            # files in a temp dir
    python examples/quickstart.py --dir ./qs # or keep them where you like
    python examples/quickstart.py --postgres postgresql://postgres@127.0.0.1:5432/test
                                             # ledger and checkpoints in PostgreSQL

An agent closes CRM case ``case-318`` through a tool. Twice over, once with a
plain LangGraph ``ToolNode`` (the control) and once with ``EffectToolNode``:

1. run 1, in a child process: the model proposes ``close_case``; the fake CRM
   closes the case, commits, and then the process is killed (``Fault.CRASH``,
   a real ``os._exit(137)``) before the tool's answer reaches the checkpoint;
2. run 2, in a fresh process: ``graph.invoke(None, config)`` resumes the thread.

LangGraph re-runs the unfinished tool node on resume. The plain tool therefore
closes the case a second time. The effect tool first asks the ledger: the
operation is ``dispatching`` under a lease whose owner process is provably
dead, so it becomes ``unknown``; the reconciler asks the CRM's status lookup,
which shows the case closed under this operation's idempotency key; the
operation is ``confirmed`` with that evidence and the recorded result is
replayed to the model. The CRM counts exactly one closure.

What it prints: for each node, one line per process (how it ended), the
agent's final answer, and for the effect tool the ledger's event log of the
operation (prepare, mark_unknown by the takeover, resolve by the reconciler);
then a table: CRM closures, duplicates and ledger status per node.

Exit code: 0 when EffectToolNode closed the case exactly once (and the plain
ToolNode control reproduced the duplicate); 1 otherwise. So it doubles as a
smoke test.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from _common import (
    begin,
    example_parser,
    open_ledger,
    open_saver,
    scripted,
    table,
    who,
)
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from langgraph_effects import (
    EffectContext,
    EffectToolNode,
    Evidence,
    Ledger,
    Operation,
    ProviderContract,
    effect,
    route_tool_calls,
)
from langgraph_effects.testing import FakeCRM, Fault

CASE = "case-318"
TENANT = "acme"
PLAN = [[{"name": "close_case", "args": {"case_id": CASE, "resolution": "onboarding complete"}}]]


# --------------------------------------------------------------------------- the tools


def effect_tool(crm: FakeCRM) -> Any:
    """``close_case`` as an effect: a ledger record, a key, a contract, a reconciler."""

    def find_closure(op: Operation) -> Evidence:
        # Conclusive only when the CRM shows THIS operation's key on the case: a
        # case that merely looks closed may have been closed by someone else.
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
        target=lambda args: args["case_id"],
        # The CRM keeps idempotency keys 24 h and has a status lookup.
        contract=ProviderContract(idempotency_window=timedelta(hours=24), status_lookup=True),
        reconcile=find_closure,
    )
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case with a resolution."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    return close_case


def plain_tool(crm: FakeCRM) -> Any:
    """The same tool as a plain LangChain tool: what most agents run today."""

    @tool("close_case")
    def close_case(case_id: str, resolution: str) -> dict[str, Any]:
        """Close a CRM case with a resolution."""
        return crm.close_case(case_id, resolution)

    return close_case


def build_graph(node: str, crm: FakeCRM, ledger: Ledger, saver: Any) -> Any:
    """agent -> tools -> agent, with a scripted model (no API key)."""
    model = scripted(PLAN)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    tools: ToolNode = (
        EffectToolNode([effect_tool(crm)], ledger=ledger, tenant_id=TENANT)
        if node == "effect"
        else ToolNode([plain_tool(crm)])
    )
    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


# --------------------------------------------------------------------------- one process


def run_phase(phase: str, node: str, directory: Path, pg: str | None) -> None:
    """Run 1 (``start``) or run 2 (``resume``) of one thread, in this process."""
    config = {"configurable": {"thread_id": f"quickstart-{node}"}}
    with (
        FakeCRM(directory / f"crm-{node}.db") as crm,
        open_ledger(directory, pg) as ledger,
        open_saver(directory, pg) as saver,
    ):
        graph = build_graph(node, crm, ledger, saver)
        # durability="sync": the AIMessage (and its tool-call ids) is saved
        # before the tool runs, so the resumed run sees the same call.
        if phase == "start":
            question = HumanMessage(f"The onboarding of {CASE} is complete: close the case.")
            result = graph.invoke({"messages": [question]}, config, durability="sync")
        else:
            result = graph.invoke(None, config, durability="sync")
        print(f"    agent: {result['messages'][-1].content}")


def child(phase: str, node: str, directory: Path, base_pg: str | None) -> int:
    """Run one phase in a fresh Python process; return its exit code."""
    command = [sys.executable, __file__, "--dir", str(directory), "--phase", phase, "--node", node]
    done = subprocess.run(
        command + (["--postgres", base_pg] if base_pg else []),
        check=False,
    )
    return done.returncode


# --------------------------------------------------------------------------- the demo


def demo(node: str, directory: Path, base_pg: str | None, pg: str | None) -> tuple[int, int, str]:
    """Crash one thread after the CRM acted, resume it; return (closures, duplicates, status)."""
    title = "EffectToolNode" if node == "effect" else "ToolNode (plain, the control)"
    print(f"\n== {title}")
    with FakeCRM(directory / f"crm-{node}.db") as crm:
        crm.faults.push(Fault.CRASH)  # the next close_case applies, commits, then kills
    print(f"  run 1, child process: the agent calls close_case; the CRM closes {CASE} ...")
    code = child("start", node, directory, base_pg)
    print(f"        ... and the process dies before the tool's answer is saved (exit code {code})")
    print("  run 2, fresh process: graph.invoke(None, config)")
    resumed = child("resume", node, directory, base_pg)
    with FakeCRM(directory / f"crm-{node}.db") as crm:
        closures, duplicates = crm.effects, crm.duplicates
    status = "-"
    if node == "effect":
        with open_ledger(directory, pg) as ledger:
            (op,) = ledger.list(tenant_id=TENANT)
            status = op.status.value
            print(f"  the ledger's log of operation {op.operation_id}:")
            for event in ledger.events(TENANT, op.operation_id):
                why = f"  [{event.evidence.summary}]" if event.evidence else ""
                frm = event.from_status.value if event.from_status else "-"
                actor = who(event.actor)
                print(
                    f"    {event.kind.value:<13} {frm:>11} -> {event.to_status.value:<11} "
                    f"by {actor}{why}"
                )
    verdict = "exactly once" if closures == 1 else "AGAIN on resume" if closures > 1 else "never"
    print(f"  the CRM counts {closures} closure(s) of {CASE}: it was closed {verdict}")
    if code == 0 or resumed != 0:
        print(f"  unexpected exit codes: run 1 {code} (expected 137), run 2 {resumed} (expected 0)")
        status = f"{status} (exit codes {code}/{resumed})"
    return closures, duplicates, status


def main(argv: list[str] | None = None) -> int:
    parser = example_parser(__doc__)
    parser.add_argument("--phase", choices=["start", "resume"], help=argparse.SUPPRESS)
    parser.add_argument("--node", choices=["effect", "plain"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # One of the child processes (--phase) runs in the parent's directory and schema; stdout
    # line-buffered: the parent's lines interleave with its children's.
    run = begin("quickstart", parser, args, fresh=not args.phase)
    directory, pg = run.directory, run.pg
    if args.phase:
        run_phase(args.phase, args.node, directory, pg)
        return 0
    if pg:
        print(
            f"Files: {directory} (crm-*.db = CRM); ledger and LangGraph's checkpoints: PostgreSQL"
        )
    else:
        print(
            f"Files: {directory} (effects.db = ledger, checkpoints.db = LangGraph, crm-*.db = CRM)"
        )
    plain = demo("plain", directory, args.postgres, pg)
    guarded = demo("effect", directory, args.postgres, pg)
    print()
    print(
        table(
            [
                ("ToolNode (control)", plain[0], plain[1], plain[2]),
                ("EffectToolNode", guarded[0], guarded[1], guarded[2]),
            ],
            header=("node", "CRM closures", "duplicates", "ledger status"),
        )
    )
    ok = guarded[0] == 1 and guarded[2] == "confirmed" and plain[0] == 2
    print(
        "\nOK: one crash, one resume, one closure with EffectToolNode."
        if ok
        else "\nUNEXPECTED: see the counts above."
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
