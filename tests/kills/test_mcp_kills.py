"""MCP tools as effects killed for real: the FastMCP server (``tests/_mcp_server.py``, over
stdio) kills its client (SIGKILL) after acting, before the client hears back; a fresh
process resumes the thread. The counts are the server's, kept in a file that survives the
kill; a plain ``create_agent`` is the control. The rest of MCP is in ``tests/mcp/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _mcp_child import CREATE, PRIORITY, acted, backend, kind_of, run

from langgraph_effects.testing import run_in_forked_child

__all__ = ["backend"]  # the fixture, from _mcp_child


def kill_then_resume(
    where: str, tmp_path: Path, call: dict[str, Any], plain: bool, trusted: bool = True
) -> Any:
    """Run in a child the server kills after acting, then resume in a fresh one."""
    effects, marker = tmp_path / "effects.jsonl", tmp_path / "kill-once"
    marker.touch()
    args = (kind_of(where), where, str(effects), str(marker), call, plain)
    assert run_in_forked_child(run, *args, True, trusted).crashed
    assert len(acted(effects)) == 1
    assert not marker.exists()
    resumed = run_in_forked_child(run, *args, False, trusted)
    assert resumed.ok, resumed.error
    return resumed.value, acted(effects)


def test_kill_after_the_server_acted_destructive(backend: str, tmp_path: Path) -> None:
    """An unannotated tool (destructive by the spec) is never resent: one ticket, then review."""
    resumed, sent = kill_then_resume(backend, tmp_path, CREATE, plain=False)
    assert len(sent) == 1
    assert resumed["statuses"] == ["unknown"]
    assert resumed["interrupts"] == 1  # a person decides; nothing was resent


def test_kill_after_the_server_acted_plain_control(tmp_path: Path) -> None:
    """The control: a plain create_agent opens the ticket a second time on resume."""
    _, sent = kill_then_resume(str(tmp_path / "app.db"), tmp_path, CREATE, plain=True)
    assert len(sent) == 2
    assert sent[0] == sent[1]


def test_kill_after_the_server_acted_idempotent(backend: str, tmp_path: Path) -> None:
    """idempotentHint: the same arguments are resent after the kill, and the call is answered."""
    resumed, sent = kill_then_resume(backend, tmp_path, PRIORITY, plain=False)
    assert len(sent) == 2
    assert sent[0] == sent[1]
    assert resumed["statuses"] == ["confirmed"]
    assert resumed["answers"] == ["T-0 is high"]


def test_kill_after_the_server_acted_untrusted(backend: str, tmp_path: Path) -> None:
    """An untrusted server's idempotentHint is ignored: set_priority is not resent after the
    kill (as a trusted server's is, above) but waits for a person: one act at the server."""
    resumed, sent = kill_then_resume(backend, tmp_path, PRIORITY, plain=False, trusted=False)
    assert len(sent) == 1
    assert resumed["statuses"] == ["unknown"]
    assert resumed["interrupts"] == 1
