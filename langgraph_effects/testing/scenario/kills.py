"""Real kills: a function run in a forked child that may be killed (SIGKILL) mid-way."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langgraph_effects.testing.faults import (
    ChildExit,
    CrashMode,
    CrashPoint,
    _child_main,
    scaled,
)

# --------------------------------------------------------------------------- real kills


_forkserver_ready = False

PRELOAD = (
    "langgraph_effects.testing.scenario",
    "langgraph_effects.ledger.memory",
    "langgraph_effects.ledger.sqlite",
    "langgraph_effects.ledger.postgres",
    "langgraph.checkpoint.sqlite",
    "langgraph.checkpoint.postgres",
    "langgraph_effects.middleware",
    "langchain.agents",
    "langgraph_effects.mcp",
    "langchain_mcp_adapters.tools",
    "mcp.server.fastmcp",
    "mcp.shared.memory",
)
"""What the forkserver imports once, so that no child forked from it imports it again: the
scenario package, the ledgers and checkpointers children open, and the faces a schedule
may draw (``create_agent``'s middleware, MCP tools; one the extras did not install is
skipped, as the forkserver skips any ``ImportError``). Imports only: a child starts with no
connection, thread or state of any test. Not the campaign module: a child of
``python -m langgraph_effects.testing.campaign`` runs it again as its ``__mp_main__``, and runpy
warns when it is already imported."""


def run_in_forked_child(
    fn: Callable[..., Any],
    *args: Any,
    crash_at: CrashPoint | None = None,
    mode: CrashMode | str = CrashMode.EXIT,
    hit: int = 1,
    timeout: float = 120.0,
) -> ChildExit:
    """``faults.run_in_child``, but forked from a server that already imported LangGraph.

    A spawned child pays 1-2 s importing LangGraph; a ``forkserver`` child is
    forked from a server process that preloaded the scenario package, so it starts in
    milliseconds and is still a fresh process (new pid, nothing of the
    parent's connections or threads). Same contract as ``run_in_child``.
    """
    return start_forked_child(fn, *args, crash_at=crash_at, mode=mode, hit=hit).wait(timeout)


@dataclass(eq=False)
class ForkedChild:
    """A child started by :func:`start_forked_child`: its ``pid``, then :meth:`wait`."""

    process: Any
    receiver: Any

    @property
    def pid(self) -> int:
        """The child's process id."""
        return int(self.process.pid)

    def wait(self, timeout: float = 120.0) -> ChildExit:
        """Collect what the child reported and its exit (kill it after ``timeout`` s of silence,
        multiplied by ``faults.timeout_scale()``)."""
        timeout = scaled(timeout)
        messages: list[tuple[str, Any]] = []
        try:
            while self.receiver.poll(timeout):
                messages.append(self.receiver.recv())
        except EOFError:
            pass
        finally:
            self.receiver.close()
        self.process.join(timeout)
        if self.process.exitcode is None:
            self.process.kill()
            self.process.join()
            raise TimeoutError(f"child {self.pid} did not finish within {timeout:.0f}s")
        found = dict(messages)
        crashed = found.get("crashed")
        return ChildExit(
            exitcode=self.process.exitcode,
            crashed_at=None if crashed is None else CrashPoint(crashed),
            value=found.get("value"),
            error=found.get("error"),
        )


def start_forked_child(
    fn: Callable[..., Any],
    *args: Any,
    crash_at: CrashPoint | None = None,
    mode: CrashMode | str = CrashMode.EXIT,
    hit: int = 1,
) -> ForkedChild:
    """Start ``fn(*args)`` in a forkserver child and return at once (freeze it, then wait)."""
    global _forkserver_ready
    ctx = multiprocessing.get_context("forkserver")
    if not _forkserver_ready:
        ctx.set_forkserver_preload(list(PRELOAD))
        _forkserver_ready = True
    receiver, sender = ctx.Pipe(duplex=False)
    plan = None if crash_at is None else (CrashPoint(crash_at), CrashMode(mode), hit)
    process = ctx.Process(target=_child_main, args=(sender, fn, args, plan))
    process.start()
    sender.close()
    return ForkedChild(process, receiver)
