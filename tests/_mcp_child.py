"""What a child process runs in the MCP crash tests (tests/kills/test_mcp_kills.py): an agent
over a real MCP server, and what the MCP room and the kill room share.

Module-level and picklable, so ``run_in_child`` can spawn it in a fresh process.
The server (``_mcp_server.py``) runs over stdio as this process's own child, so its
kill of "the client" kills this process, after the server acted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from _graphs import Env, tool_messages

SERVER = str(Path(__file__).with_name("_mcp_server.py"))
CFG = {"configurable": {"thread_id": "t1"}}
CREATE = {"name": "create_ticket", "args": {"title": "printer", "body": "on fire"}, "id": "c1"}
PRIORITY = {"name": "set_priority", "args": {"ticket": "T-0", "priority": "high"}, "id": "p1"}


def acted(effects: Path) -> list[dict[str, Any]]:
    """What the MCP server did, one entry per call that acted."""
    if not effects.exists():
        return []
    return [json.loads(line) for line in effects.read_text().splitlines()]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the ledger and the checkpointer live: a SQLite file or a PostgreSQL URL."""
    if request.param == "sqlite":
        return str(tmp_path / "app.db")
    return str(request.getfixturevalue("pg_url"))


def kind_of(where: str) -> str:
    """The backend a ledger location names: a PostgreSQL URL or a SQLite file."""
    return "postgres" if where.startswith("postgresql") else "sqlite"


def connection(effects: Path, kill_marker: Path | None = None) -> dict[str, Any]:
    """How langchain-mcp-adapters starts the test server over stdio."""
    env = {"LGE_MCP_EFFECTS": str(effects)}
    if kill_marker is not None:
        env["LGE_MCP_KILL_CLIENT"] = str(kill_marker)
    return {"transport": "stdio", "command": sys.executable, "args": [SERVER], "env": env}


def run(
    kind: str,
    where: str,
    effects: str,
    marker: str,
    call: dict[str, Any],
    plain: bool,
    start: bool,
    trusted: bool = True,
) -> dict[str, Any]:
    """Run (``start``) or resume thread t1 of a create_agent over the server's tools
    (declared with ``mcp_effects``, the server ``trusted`` or not, unless ``plain``)."""
    from langchain.agents import create_agent
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from langchain_mcp_adapters.tools import load_mcp_tools

    from langgraph_effects import EffectMiddleware
    from langgraph_effects.mcp import mcp_effects
    from langgraph_effects.testing import ScriptedChatModel

    env = Env(kind, "async", path=Path(where), url=where)

    async def main() -> dict[str, Any]:
        client = MultiServerMCPClient({"tickets": connection(Path(effects), Path(marker))})
        async with client.session("tickets") as session:
            tools = await load_mcp_tools(session)
            agent = create_agent(
                ScriptedChatModel(plan=[[call]]),
                tools=tools if plain else mcp_effects(tools, trusted=trusted, server="tickets"),
                middleware=[] if plain else [EffectMiddleware(ledger=env.ledger)],
                checkpointer=env.checkpointer,
            )
            value = {"messages": [("user", "go")]} if start else None
            out = await agent.ainvoke(value, CFG, durability="sync")
        ops = [] if plain else await env.ledger.list(tenant_id="default")
        return {
            "statuses": [op.status.value for op in ops],
            "interrupts": len(out.get("__interrupt__", [])),
            "answers": [m.text for m in tool_messages(out)],
        }

    try:
        return env.run(main())  # type: ignore[no-any-return]
    finally:
        env.close()
