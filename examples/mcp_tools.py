"""MCP tools as effects: the server acted, the agent was killed, and the resume does not act again.

An agent built with ``create_agent`` gets its tools from a real MCP server (the
``mcp`` package's FastMCP, ``_tickets_mcp_server.py``, started over stdio through
``langchain-mcp-adapters``): ``find_tickets`` (``readOnlyHint``) and ``create_ticket``
(no annotations: destructive and not idempotent, as the spec defaults). MCP carries
no idempotency key, so nothing at the server can tell a resend from a new request.
``mcp_effects(tools, trusted=True, server="tickets")`` declares them from their
annotations: the lookup stays a plain tool, ``create_ticket`` becomes an effect that
is never resent blindly; ``EffectMiddleware`` runs it through the ledger.

Run it (no API key, nothing to start; a few seconds)::

    python examples/mcp_tools.py                              # the kill, twice over
    python examples/mcp_tools.py --crash-at after_provider    # this process dies instead
    python examples/mcp_tools.py --resume --dir DIR           # a fresh process resumes
    python examples/mcp_tools.py --postgres postgresql://postgres@127.0.0.1:5432/test

The default run tells the story twice, with a plain ``create_agent`` (the control)
and with ``mcp_effects`` + ``EffectMiddleware``: run 1, in a child process, asks for
a ticket; the server opens it and kills the agent's process (SIGKILL) before it
answers. Run 2, in this process (a new one: the killed one is gone), resumes the
thread with ``agent.ainvoke(None, config)``. LangGraph runs the unfinished tool call
again: the plain agent opens a second ticket. The effect finds its operation
``dispatching`` under a dead owner, so ``unknown``; with no key and no proof bound to
the operation, it is not resent but asks a person (an ``interrupt()``): the on-call
policy looks the ticket up through the server's own read-only ``find_tickets`` and
confirms it. The server counts one ticket.

``--crash-at POINT[:N]`` (``before_prepare``, ``after_claim``, ``after_provider``,
``after_receipt``) kills this process (exit code 137) at that boundary of the effect
agent's call and prints the ``--resume --dir DIR`` command; the resume asks the
person when the outcome is unknown (``after_claim``: the server heard nothing, the
policy finds no ticket and orders the call sent; ``after_provider``: it finds the
ticket and confirms). ``--postgres URL`` keeps the ledger and LangGraph's checkpoints
in PostgreSQL (a schema of the run's own); the server's tickets stay a file.

What it prints: each step of the agents, the review and its answer, the ledger's log
of the operation, then the tickets each server opened: 2 for the plain agent, 1 with
``mcp_effects`` (a crash run prints ``tickets the server opened: 1``). Exit code 0
when the effect agent's server opened exactly one ticket and its operation is
confirmed (and, in the default run, the control opened two); 137 when a crash point
killed it; 3 when the armed point was not reached (nothing died); 1 otherwise.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import sys
from pathlib import Path
from typing import Any

from _common import (
    anarrate,
    begin,
    example_parser,
    open_async_ledger,
    open_async_saver,
    table,
    who,
)
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools
from langgraph.types import Command

from langgraph_effects import EffectMiddleware, OperationStatus
from langgraph_effects.mcp import mcp_effects
from langgraph_effects.testing import ScriptedChatModel

SERVER = Path(__file__).resolve().with_name("_tickets_mcp_server.py")
TENANT = "acme"
TITLE = "Printer on fire"
PLAN = [[{"name": "create_ticket", "args": {"title": TITLE, "body": "Third floor, since 9:00."}}]]
CRASH_POINTS = ("before_prepare", "after_claim", "after_provider", "after_receipt")
AGENTS = {"plain": "plain create_agent (control)", "effect": "mcp_effects + EffectMiddleware"}


def tickets(directory: Path, agent: str) -> list[dict[str, str]]:
    """The tickets the server of ``agent`` opened (its own file: what survives a kill)."""
    path = directory / f"tickets-{agent}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def connection(directory: Path, agent: str) -> Any:
    """How langchain-mcp-adapters starts the server: MCP over stdio, its files in ``directory``."""
    env = {
        "TICKETS_FILE": str(directory / f"tickets-{agent}.jsonl"),
        "TICKETS_KILL_CLIENT": str(directory / f"kill-{agent}"),  # a crash, while it exists
    }
    return {"transport": "stdio", "command": sys.executable, "args": [str(SERVER)], "env": env}


async def on_call(request: dict[str, Any], find_tickets: Any) -> dict[str, Any]:
    """The on-call person's check, through the server's read-only tool: is the ticket there?"""
    blocks = await find_tickets.ainvoke({"title": request["target"]})
    found = [block["text"] for block in blocks]  # the adapter's content blocks, one per id
    answer = {"operation_id": request["operation_id"], "by": "on-call policy"}
    if found:
        shown = f"find_tickets shows {', '.join(found)} titled {request['target']!r}"
        return {**answer, "decision": "confirm", "result": found[0], "reason": shown}
    return {**answer, "decision": "retry", "reason": "find_tickets shows no such ticket"}


async def run_agent(agent: str, directory: Path, pg: str | None, *, start: bool) -> int:
    """Run (``start``) or resume the agent's thread over its own server; 1 if nothing to resume."""
    config: Any = {"configurable": {"thread_id": f"tickets-{agent}"}}
    client = MultiServerMCPClient({"tickets": connection(directory, agent)})
    async with (
        client.session("tickets") as session,
        open_async_ledger(directory, pg) as ledger,
        open_async_saver(directory, pg) as saver,
    ):
        served = await load_mcp_tools(session)
        if agent == "effect":
            tools = mcp_effects(
                served, trusted=True, server="tickets", target={"create_ticket": "title"}
            )
            middleware = [EffectMiddleware(ledger=ledger, tenant_id=TENANT)]
        else:
            tools, middleware = served, []
        graph = create_agent(
            ScriptedChatModel(plan=PLAN, final="Done."),
            tools=tools,
            middleware=middleware,
            checkpointer=saver,
        )
        if start:
            ask = HumanMessage(f"Open a ticket: {TITLE}.")
            interrupts = await anarrate(graph, {"messages": [ask]}, config)
        elif (await graph.aget_state(config)).next:
            interrupts = await anarrate(graph, None, config)
        elif (await graph.aget_state(config)).values:
            print("  The thread is finished; nothing to resume there.")
            interrupts = []
        else:
            print(f"Nothing to resume in {directory}: run without --resume first.")
            return 1
        find_tickets = next(t for t in served if t.name == "find_tickets")
        while interrupts:
            request = interrupts[0].value
            print(f"  Review: {request['action']} {request['target']!r} is {request['status']}")
            answer = await on_call(request, find_tickets)
            print(f"  Answer: agent.ainvoke(Command(resume={json.dumps(answer)}), config)")
            interrupts = await anarrate(graph, Command(resume=answer), config)
        if agent == "effect":
            for op in await ledger.list(tenant_id=TENANT):
                print(f"  the ledger's log of {op.operation_id} ({op.action}, {op.status.value}):")
                for e in await ledger.events(TENANT, op.operation_id):
                    frm = e.from_status.value if e.from_status else "-"
                    print(f"    {e.kind.value:<13} {frm:>11} -> {e.to_status.value:<11} "
                          f"by {who(e.actor)}")  # fmt: skip
    return 0


async def effect_status(directory: Path, pg: str | None) -> list[OperationStatus]:
    async with open_async_ledger(directory, pg) as ledger:
        return [op.status for op in await ledger.list(tenant_id=TENANT)]


def run_one(agent: str, directory: Path, pg: str | None) -> None:
    """Run 1 of one agent: what the forked child runs (the server kills it after acting)."""
    asyncio.run(run_agent(agent, directory, pg, start=True))


def killed(agent: str, directory: Path, pg: str | None) -> int | None:
    """Run 1 in a child process the server kills after it acted; the child's exit code."""
    print(f"-- {AGENTS[agent]}")
    (directory / f"kill-{agent}").touch()  # the server kills its client after the next ticket
    # Forked: a new process (its own pid, nothing open of this one's) that already has
    # LangChain imported. Nothing has run in this process yet, so it holds no thread.
    child = multiprocessing.get_context("fork").Process(target=run_one, args=(agent, directory, pg))
    child.start()
    child.join()
    opened = ", ".join(t["id"] for t in tickets(directory, agent))
    print(f"  the server opened {opened}, then killed the agent's process (exit {child.exitcode})")
    return child.exitcode


def main(argv: list[str] | None = None) -> int:
    crashes = f"die at a crash point of the effect agent: {', '.join(CRASH_POINTS)}"
    parser = example_parser(__doc__, CRASH_POINTS, crash_help=crashes)
    args = parser.parse_args(argv)
    # stdout line-buffered: this process's lines interleave with its children's
    run = begin("mcp_tools", parser, args, stores="ledger, checkpoints")
    directory, pg = run.directory, run.pg

    if not args.crash_at and not args.resume:
        print("\n== run 1, a child process per agent: it asks for a ticket, and its server")
        print("   opens it and kills the agent's process (SIGKILL) before it answers")
        codes = [killed(a, directory, pg) for a in AGENTS]
        print("\n== run 2, this process (a new one: the killed ones are gone) resumes each")
        print("   thread: agent.ainvoke(None, config)")
        for agent in AGENTS:
            print(f"-- {AGENTS[agent]}")
            asyncio.run(run_agent(agent, directory, pg, start=False))
        counts = {a: len(tickets(directory, a)) for a in AGENTS}
        statuses = asyncio.run(effect_status(directory, pg))
        status = statuses[0].value if len(statuses) == 1 else str([s.value for s in statuses])
        print()
        print(
            table(
                [
                    (AGENTS["plain"], counts["plain"], "-"),
                    (AGENTS["effect"], counts["effect"], status),
                ],
                header=("agent", "tickets the server opened", "ledger status"),
            )
        )
        ok = (
            counts == {"plain": 2, "effect": 1}
            and statuses == [OperationStatus.CONFIRMED]
            and codes == [-9, -9]  # SIGKILL
        )
        print(
            "\nOK: killed after the server acted; one ticket with mcp_effects, two without."
            if ok
            else "\nUNEXPECTED: see the counts above."
        )
        return 0 if ok else 1

    plan = run.arm()
    print(f"\n-- {AGENTS['effect']}" + (": a fresh process resumes" if args.resume else ""))
    if asyncio.run(run_agent("effect", directory, pg, start=not args.resume)):
        return 1
    opened = len(tickets(directory, "effect"))
    statuses = asyncio.run(effect_status(directory, pg))
    print(f"\ntickets the server opened: {opened}")
    ok = opened == 1 and statuses == [OperationStatus.CONFIRMED]
    print("OK: the effect happened exactly once." if ok else "NOT DONE: see above.")
    return run.exit_code(plan, 0 if ok else 1)


if __name__ == "__main__":
    sys.exit(main())
