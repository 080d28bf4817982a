"""A real MCP server (the ``mcp`` package's FastMCP) for the tests, run over stdio.

``LGE_MCP_KILL_CLIENT`` names a marker file: while it exists, the next call that
acts removes it and kills the client process with SIGKILL before answering.

It counts what it does in the JSON-lines file named by ``LGE_MCP_EFFECTS``, one
line per call that acted, written and synced before the tool answers: the
counts survive the kill of the client that called it.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

server = FastMCP("tickets", log_level="WARNING")


def _act(tool: str, **args: Any) -> None:
    with open(os.environ["LGE_MCP_EFFECTS"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"tool": tool, **args}) + "\n")
        log.flush()
        os.fsync(log.fileno())
    # A real crash after the server acted: the client that called dies before it hears back.
    marker = os.environ.get("LGE_MCP_KILL_CLIENT")
    if marker and os.path.exists(marker):
        os.remove(marker)  # once: the resumed client is left alone
        os.kill(os.getppid(), signal.SIGKILL)


def _acted() -> list[dict[str, Any]]:
    try:
        with open(os.environ["LGE_MCP_EFFECTS"], encoding="utf-8") as log:
            return [json.loads(line) for line in log]
    except FileNotFoundError:
        return []


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def find_tickets(title: str) -> list[str]:
    """The ids of the tickets with this title."""
    acted = enumerate(_acted())
    return [f"T-{n}" for n, e in acted if e["tool"] == "create_ticket" and e["title"] == title]


@server.tool()
def create_ticket(title: str, body: str) -> str:
    """Open a ticket (no annotations: destructive, not idempotent, as the spec defaults)."""
    _act("create_ticket", title=title, body=body)
    return f"T-{len(_acted()) - 1}"


@server.tool(annotations=ToolAnnotations(destructiveHint=False, idempotentHint=True))
def set_priority(ticket: str, priority: str) -> str:
    """Set a ticket's priority (idempotent: the same arguments again change nothing)."""
    _act("set_priority", ticket=ticket, priority=priority)
    return f"{ticket} is {priority}"


if __name__ == "__main__":
    server.run("stdio")
