"""The MCP server ``examples/mcp_tools.py`` starts: a tiny ticketing system, over stdio.

A real server of the ``mcp`` package (``FastMCP``), nothing of langgraph-effects in it.
Its tools, annotated as such a server annotates them (the MCP spec, "Tool annotations"):

- ``find_tickets(title)``: ``readOnlyHint``: the ids of the tickets with that title;
- ``create_ticket(title, body)``: no annotations, so destructive and not idempotent by
  the spec's defaults: every call opens a ticket, the same arguments again too.

Its tickets are the JSON lines of the file ``TICKETS_FILE`` names, each written and
synced before the tool answers, so they survive whatever happens to the agent.

``TICKETS_KILL_CLIENT`` names a marker file that stands in for a crash: while it
exists, the next ``create_ticket`` opens the ticket, removes the marker, kills the
agent's process (its parent, SIGKILL) before answering, and exits.

Run by the example as ``python _tickets_mcp_server.py`` (MCP over stdio).
"""

from __future__ import annotations

import json
import os
import signal

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

server = FastMCP("tickets", log_level="WARNING")


def _tickets() -> list[dict[str, str]]:
    try:
        with open(os.environ["TICKETS_FILE"], encoding="utf-8") as f:
            return [json.loads(line) for line in f]
    except FileNotFoundError:
        return []


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def find_tickets(title: str) -> list[str]:
    """The ids of the tickets with this title."""
    return [t["id"] for t in _tickets() if t["title"] == title]


@server.tool()
def create_ticket(title: str, body: str) -> str:
    """Open a support ticket; returns its id."""
    ticket = {"id": f"T-{len(_tickets()) + 1}", "title": title, "body": body}
    with open(os.environ["TICKETS_FILE"], "a", encoding="utf-8") as f:
        f.write(json.dumps(ticket) + "\n")
        f.flush()
        os.fsync(f.fileno())
    marker = os.environ.get("TICKETS_KILL_CLIENT")
    if marker and os.path.exists(marker):
        os.remove(marker)  # once: the agent that resumes is left alone
        os.kill(os.getppid(), signal.SIGKILL)  # the agent dies before it hears back
        os._exit(0)  # and nobody is left to answer
    return ticket["id"]


if __name__ == "__main__":
    server.run("stdio")
