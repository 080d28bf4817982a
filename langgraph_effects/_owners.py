"""Lease owners as processes: who this process is, and whether an owner is provably dead.

``core.model.LeaseOwner`` is the pure value a lease records (host, pid,
process start, nonce). Telling it from the running system needs process I/O
(the pid, the host name, the process table through psutil), which ``core/``
never does: it lives here, for the decision engine and the outbox relay that
decide a takeover (ARCHITECTURE.md, "Concurrency").
"""

from __future__ import annotations

import os
import random
import socket
from functools import cache

import psutil

from langgraph_effects.core.model import LeaseOwner, Operation, unvalidated

__all__ = ["current_owner", "holder_dead", "holder_provably_dead", "owner_dead", "provably_dead"]

_START_TOLERANCE = 0.05
"""Seconds two readings of one process's start time may differ (both rounded to 0.01 s)."""


@cache
def _process_started_at(pid: int) -> float:
    return round(float(psutil.Process(pid).create_time()), 2)


_identity: tuple[int, str, float] | None = None


def _current_identity() -> tuple[int, str, float]:
    """``(pid, host, process start)`` of this process, computed once per pid.

    Keyed by pid, so a forked child computes its own instead of inheriting its
    parent's. Two threads racing here compute the same value: no lock needed.
    """
    global _identity
    pid = os.getpid()
    if _identity is None or _identity[0] != pid:
        _identity = (pid, socket.gethostname(), _process_started_at(pid))
    return _identity


_nonces: tuple[int, random.Random] | None = None


def _nonce(pid: int) -> str:
    """12 random hex digits (48 bits, as ``uuid4().hex[:12]`` gave) telling this process's
    claims apart.

    Drawn from a generator seeded once per process from ``os.urandom``, not from the
    OS on every claim: that syscall releases the GIL, a thread switch in each call of
    a busy fan-out. Keyed by pid, so a forked child draws its own sequence instead of
    repeating its parent's. ``getrandbits`` is one C call under the GIL: thread-safe;
    threads racing at first use each seed a generator, and either is as good.
    """
    global _nonces
    nonces = _nonces
    if nonces is None or nonces[0] != pid:
        nonces = _nonces = (pid, random.Random(os.urandom(32)))
    return f"{nonces[1].getrandbits(48):012x}"


def current_owner() -> LeaseOwner:
    """This process as a lease owner, with a fresh nonce (host and start are cached)."""
    pid, host, started_at = _current_identity()
    # Not validated (``core.model.unvalidated``): each field is this process's own, of
    # its type; one owner is made per claim.
    values = {"host": host, "pid": pid, "started_at": started_at, "nonce": _nonce(pid)}
    return unvalidated(LeaseOwner, values)


def owner_dead(owner: LeaseOwner) -> bool | None:
    """Whether ``owner``'s process is gone: True or False only when this host can tell.

    True: it ran on this host and its process is gone (the process start time
    excludes PID reuse: a new process with the same pid has another start time,
    and a zombie counts as gone). False: it ran on this host and that very
    process still runs. None: another host (never proven either way from here:
    its lease must expire), or the process table could not be read.
    """
    if owner.host != _current_identity()[1]:
        return None
    try:
        process = psutil.Process(owner.pid)
        started = round(process.create_time(), 2)
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return None
    if abs(started - owner.started_at) > _START_TOLERANCE:
        return True  # the pid was reused by another process
    try:
        return bool(process.status() == psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return True  # it went away between the two readings


def provably_dead(owner: LeaseOwner) -> bool:
    """True only when ``owner`` ran on this host and its process is gone (``owner_dead``)."""
    return owner_dead(owner) is True


def holder_dead(op: Operation) -> bool | None:
    """``owner_dead`` for the record's lease holder; None when there is none.

    An owner written by another tool (one ``LeaseOwner.decode`` cannot read)
    proves nothing either way.
    """
    try:
        owner = op.owner
    except (ValueError, TypeError):
        return None
    return None if owner is None else owner_dead(owner)


def holder_provably_dead(op: Operation) -> bool:
    """``provably_dead`` for the record's lease holder (``holder_dead``); False with none."""
    return holder_dead(op) is True
