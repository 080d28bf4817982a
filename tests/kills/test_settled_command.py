"""An effect returning a ``Command``, settled after a crash, keeps its update and ``goto``.

The child is killed by the CRM right after it applied (between the provider and
the receipt); a fresh process resumes the thread, takes the operation over and
settles it: reconciled (the reconciler finds the close), or reviewed (no
reconciler: a person confirms it). The record then holds what the reconciler or
the person saw, not the tool's ``Command``: the effect's ``answer=`` rebuilds it,
and the graph takes the Command's route (``after``) with its update, as the
uncrashed run does. Without ``answer=`` the documented answer is a plain
ToolMessage (the recorded result as content): no update, no route. The CRM
counts one effect every time.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _command_child import run

from langgraph_effects.testing.providers import FakeCRM, Fault
from langgraph_effects.testing.scenario import run_in_forked_child


def crash_then_settle(
    backend: tuple[str, str, str], tmp_path: Path, path: str, *, answer: bool
) -> dict[str, object]:
    kind, mode, where = backend
    crm_path = tmp_path / "crm.db"
    with FakeCRM(crm_path) as crm:
        crm.faults.push(Fault.CRASH)
    died = run_in_forked_child(run, kind, mode, where, str(crm_path), path, answer, True)
    assert died.crashed, died.error
    resumed = run_in_forked_child(run, kind, mode, where, str(crm_path), path, answer, False)
    assert resumed.ok, resumed.error
    with FakeCRM(crm_path) as crm:
        assert crm.effects == 1
    out: dict[str, object] = resumed.value
    return out


@pytest.mark.parametrize("path", ["reconciled", "reviewed"])
def test_a_settled_command_effect_takes_its_route(
    backend: tuple[str, str, str], tmp_path: Path, path: str
) -> None:
    """Killed after the provider applied, resumed in a new process and settled: ``answer=``
    rebuilds the Command, so the update lands and the graph goes where the tool sent it."""
    if path == "reviewed" and backend[:2] in (("sqlite", "async"), ("postgres", "sync")):
        pytest.skip("the reviewed path runs on SQLite sync and PostgreSQL async")
    out = crash_then_settle(backend, tmp_path, path, answer=True)
    assert out["statuses"] == ["confirmed"]
    assert out["asked"] == (1 if path == "reviewed" else 0)
    assert out["visited"] == ["after"]
    assert out["note"] == "closed A v1"
    assert out["messages"] == [("closed A", "c1")]
    assert out["via"] == [path]


def test_without_answer_a_settled_command_effect_is_a_plain_tool_message(
    backend: tuple[str, str, str], tmp_path: Path
) -> None:
    """The documented answer without ``answer=``: a plain ToolMessage whose content is the
    recorded result; the Command's update and route are not rebuilt (the graph ends)."""
    if backend[:2] != ("sqlite", "sync"):
        pytest.skip("the answer is built by the same code on every backend; covered once")
    out = crash_then_settle(backend, tmp_path, "reconciled", answer=False)
    assert out["statuses"] == ["confirmed"]
    assert out["visited"] == []
    assert out["note"] is None
    assert out["messages"] == [('{"version": 1}', "c1")]
