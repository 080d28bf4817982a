"""The run journal's example killed (SIGKILL) at each crash point and resumed in a new
process: one verification request applies."""

from __future__ import annotations

from pathlib import Path

import pytest
from _example_child import run_example
from _journal_example import EXAMPLE, MACHINE, ex

from langgraph_effects.journal import RunJournal


@pytest.mark.parametrize("crash_at", ["after_request", "waiting", "after_receive"])
def test_example_resumes_after_a_kill_without_a_second_request(
    tmp_path: Path, crash_at: str
) -> None:
    """Killed at a crash point and resumed in a new process, it verifies; one request applies."""
    run_example(EXAMPLE, "--dir", tmp_path, "--crash-at", crash_at, expect=137)
    resumed = run_example(EXAMPLE, "--dir", tmp_path, "--resume")
    assert "final_state: verified" in resumed
    assert "runs_resumed_successfully: 1" in resumed
    assert "verification_requests_applied: 1" in resumed
    assert "discarded_for_another_run_id: 1" in resumed
    provider = ex.FakeVerificationProvider(tmp_path / "provider.db")
    # Resumed in LEASED (after_request), the run finds the request by its key instead of
    # asking again; resumed later, it only polls: the app received exactly one request.
    assert provider.count("requests_received") == 1
    with RunJournal.from_conn_string(tmp_path / "runs.db", [MACHINE]) as journal:
        types = [e.type for e in journal.events(ex.RUN_ID)]
        assert types.count("message_requested") == 1
        assert all("body" not in e.data for e in journal.events(ex.RUN_ID))
