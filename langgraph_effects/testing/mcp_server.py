"""An in-process MCP server over the campaign's fake providers (the ``mcp_tools`` kind).

A real FastMCP server (the ``mcp`` package) serves the built-in calls as MCP tools,
each annotated as such a server would annotate it; the client side is what
``langchain-mcp-adapters`` makes of the listed tools, each call sent over a real MCP
session on the ``mcp`` package's in-memory transport
(``mcp.shared.memory.create_connected_server_and_client_session``): no process is
spawned. The server is built once per process; the fakes a call reaches are the
scenario's own, carried to the server's tools in a context variable.

========================  ==========================================  ====================
tool                      annotations                                  what the server does
========================  ==========================================  ====================
``close_case``            ``idempotentHint``, not destructive          closes the case once:
                                                                       the same arguments
                                                                       again change nothing
``send_mail``             none (the spec's defaults: destructive,      sends, every time
                          not idempotent)
``create_ticket``         not destructive, not idempotent (appends)    opens a ticket, every
                                                                       time
``lookup_case``           ``readOnlyHint``                             reads the case
========================  ==========================================  ====================

``close_case`` is idempotent by the server's own doing: it does nothing when the case is
already closed with that resolution, and it closes under a key of its arguments, so a
request of its that lands late is not applied twice either. MCP carries no idempotency
key: the operation's key never reaches the providers, which count every call by target.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from langchain_core.tools import BaseTool

from langgraph_effects.testing.faults import CrashPoint, crash_point

__all__ = ["READ_ONLY", "SERVER", "mcp_tools"]

SERVER = "campaign"
"""The server's name: its effects' actions are ``campaign.<tool name>``."""
READ_ONLY = frozenset({"lookup_case"})
"""The tools the server annotates ``readOnlyHint``."""

_BACKEND: ContextVar[Any] = ContextVar("lge_campaign_mcp_backend")


def _providers() -> Any:
    providers = _BACKEND.get(None)
    if providers is None:  # pragma: no cover - a call from outside mcp_tools' session
        raise RuntimeError("the campaign MCP server was called outside a scenario")
    return providers


@functools.cache
def _served() -> tuple[Any, tuple[Any, ...]]:
    """The server (built once per process) and its tools as a client lists them."""
    from mcp.server.fastmcp import FastMCP
    from mcp.shared.memory import create_connected_server_and_client_session
    from mcp.types import ToolAnnotations

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    server = FastMCP(SERVER, log_level="WARNING")
    # FastMCP configures the root logger (a rich handler) when none is set: not its to do here.
    root.handlers[:], root.level = handlers, level

    @server.tool(annotations=ToolAnnotations(idempotentHint=True, destructiveHint=False))
    def close_case(case_id: str, resolution: str) -> dict[str, Any]:
        """Close a CRM case with a resolution (closing it again with the same one is a no-op)."""
        crm = _providers().crm
        case = crm.get_case(case_id)
        if case["status"] == "closed" and case["resolution"] == resolution:
            return {k: case[k] for k in ("case_id", "status", "resolution", "version")}
        closed = crm.close_case(case_id, resolution, idempotency_key=f"mcp:{case_id}:{resolution}")
        return {k: closed[k] for k in ("case_id", "status", "resolution", "version")}

    @server.tool()
    def send_mail(to: str, subject: str, body: str) -> dict[str, Any]:
        """Send an e-mail."""
        sent: dict[str, Any] = _providers().mail.send(to, subject, body)
        return sent

    @server.tool(annotations=ToolAnnotations(destructiveHint=False, idempotentHint=False))
    def create_ticket(title: str, body: str) -> dict[str, Any]:
        """Open a ticket."""
        opened: dict[str, Any] = _providers().ticketing.create_ticket(title, body)
        return opened

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def lookup_case(case_id: str) -> dict[str, Any]:
        """Look up a CRM case (read-only)."""
        case = _providers().crm.get_case(case_id)
        return {k: case[k] for k in ("case_id", "status", "resolution")}

    async def listed() -> tuple[Any, ...]:
        async with create_connected_server_and_client_session(server) as session:
            return tuple((await session.list_tools()).tools)

    with ThreadPoolExecutor(1) as pool:  # a loop of its own, whatever runs here
        return server, pool.submit(asyncio.run, listed()).result()


@dataclass(frozen=True, slots=True)
class _Session:
    """What the adapter's tools call: each call on a new in-memory session to the server.

    ``control``: the call crosses the campaign's crash points as a plain tool does
    (``AFTER_CLAIM`` before the server, ``AFTER_PROVIDER`` after it), read-only tools
    excepted; under the ledger the runner crosses them.
    """

    providers: Any
    control: bool

    async def call_tool(self, name: str, arguments: Any = None, **kwargs: Any) -> Any:
        from mcp.shared.memory import create_connected_server_and_client_session

        server, _ = _served()
        crashes = self.control and name not in READ_ONLY
        if crashes:
            crash_point(CrashPoint.AFTER_CLAIM)
        token = _BACKEND.set(self.providers)
        try:
            async with create_connected_server_and_client_session(server) as session:
                result = await session.call_tool(name, arguments, **kwargs)
        finally:
            _BACKEND.reset(token)
        if crashes:
            crash_point(CrashPoint.AFTER_PROVIDER)
        return result


def mcp_tools(providers: Any, *, control: bool = False) -> list[BaseTool]:
    """The server's tools as ``langchain-mcp-adapters`` converts them (async only), calling
    the fakes of ``providers`` (a ``scenario.Providers``)."""
    from langchain_mcp_adapters.tools import convert_mcp_tool_to_langchain_tool

    _, listed = _served()
    session: Any = _Session(providers, control)
    return [convert_mcp_tool_to_langchain_tool(session, tool) for tool in listed]
