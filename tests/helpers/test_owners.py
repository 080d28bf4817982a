"""Lease owners as processes (``langgraph_effects._owners``): who we are, who is provably dead."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

from langgraph_effects._owners import current_owner, holder_provably_dead, provably_dead
from langgraph_effects.core.model import LeaseOwner, Operation
from langgraph_effects.testing.contract import make_draft

NOW = datetime(2025, 1, 1, tzinfo=UTC)


def test_a_live_owner_is_not_dead_and_another_host_never_is() -> None:
    """This process is alive; an owner on another host cannot be proven dead from here."""
    me = current_owner()
    assert not provably_dead(me)
    assert not provably_dead(me.model_copy(update={"host": me.host + ".elsewhere"}))


def test_an_exited_process_or_a_reused_pid_is_dead() -> None:
    """A pid whose process ended, or now runs another process (other start time), is dead."""
    me = current_owner()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    gone = LeaseOwner(host=me.host, pid=child.pid, started_at=me.started_at, nonce="x")
    assert provably_dead(gone)
    assert provably_dead(me.model_copy(update={"started_at": me.started_at - 60}))


def test_a_record_names_its_holder_or_proves_nothing() -> None:
    """A record's holder is judged by provably_dead; none, or an unreadable one, is not dead."""
    me = current_owner()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    gone = LeaseOwner(host=me.host, pid=child.pid, started_at=me.started_at, nonce="x")
    record = make_draft("op-1")
    base = {**record.model_dump(), "status": "dispatching", "created_at": NOW, "updated_at": NOW}
    assert holder_provably_dead(Operation(**base, lease_owner=gone.encode()))
    assert not holder_provably_dead(Operation(**base, lease_owner=me.encode()))
    assert not holder_provably_dead(Operation(**base))
    assert not holder_provably_dead(Operation(**base, lease_owner="written by another tool"))
