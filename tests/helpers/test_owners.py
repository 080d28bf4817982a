"""Lease owners as processes (``langgraph_effects._owners``): who we are, who is provably dead."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from datetime import UTC, datetime

import psutil
import pytest

from langgraph_effects import _owners
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


def test_lease_owner_current_caches_host_and_start_per_pid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """current_owner() asks for the host name once per process, and again only under a new pid
    (a forked child), where it reads that process's own start time."""
    calls: list[int] = []
    real = socket.gethostname

    def counting() -> str:
        calls.append(os.getpid())
        return real()

    monkeypatch.setattr(_owners, "_identity", None)
    monkeypatch.setattr(socket, "gethostname", counting)
    owners = [current_owner() for _ in range(3)]
    assert len(calls) == 1
    assert len({o.nonce for o in owners}) == 3
    assert {(o.host, o.pid, o.started_at) for o in owners} == {
        (real(), os.getpid(), round(psutil.Process().create_time(), 2))
    }
    parent = os.getppid()  # stands in for "another pid", as after a fork
    monkeypatch.setattr(os, "getpid", lambda: parent)
    child = current_owner()
    assert len(calls) == 2
    assert (child.pid, child.started_at) == (parent, round(psutil.Process(parent).create_time(), 2))


def test_nonces_are_fresh_hex_and_a_forked_child_draws_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each owner gets a new 12-hex-digit nonce, with no call to the OS per claim; a child
    (another pid) inheriting its parent's generator draws a sequence of its own, not the
    parent's next nonces."""
    urandom_calls: list[int] = []
    real_urandom = os.urandom

    def counting(n: int) -> bytes:
        urandom_calls.append(n)
        return real_urandom(n)

    monkeypatch.setattr(_owners, "_nonces", None)
    monkeypatch.setattr(os, "urandom", counting)
    nonces = [current_owner().nonce for _ in range(50)]
    assert len(set(nonces)) == 50
    assert all(re.fullmatch("[0-9a-f]{12}", n) for n in nonces)
    assert len(urandom_calls) == 1  # seeded once for the process
    assert _owners._nonces is not None
    inherited = _owners._nonces[1].getstate()  # what a forked child starts with
    parent_next = [current_owner().nonce for _ in range(3)]
    _owners._nonces[1].setstate(inherited)
    parent = os.getppid()  # stands in for the child's own pid
    monkeypatch.setattr(os, "getpid", lambda: parent)
    child = [current_owner().nonce for _ in range(3)]
    assert child != parent_next
    assert len(urandom_calls) == 2  # the child seeded its own
