"""The clocks a fake provider reads: the system's, and a fake one that processes share by a file."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar, Protocol

from langgraph_effects.testing.providers.store import _Database

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


def _to_us(when: datetime) -> int:
    if when.tzinfo is None:
        raise ValueError("naive datetime: fakes keep time in aware UTC datetimes")
    return (when - _EPOCH) // _MICRO


def _from_us(us: int) -> datetime:
    return _EPOCH + us * _MICRO


def _seconds(value: timedelta | float) -> timedelta:
    return value if isinstance(value, timedelta) else timedelta(seconds=value)


# --------------------------------------------------------------------------- clocks


class Clock(Protocol):
    """Where the fakes read the time: aware UTC datetimes."""

    def now(self) -> datetime:
        """The current time, timezone-aware."""


class SystemClock:
    """The real time."""

    def now(self) -> datetime:
        """The wall clock, in UTC."""
        return datetime.now(UTC)


class FakeClock:
    """A clock that moves only when a test advances it.

    Share one instance between providers and the code under test (the
    runner too, so it judges idempotency windows and leases on the same time).
    With a ``path`` the current time lives in a SQLite file, so a child process
    that opens ``FakeClock(path=...)`` (or unpickles this one) sees the same time
    and the parent can advance it. An in-memory clock pickles as a *copy*.

    Args:
        start: the initial time (aware). Ignored when ``path`` already holds a time.
        path: optional file to keep the time in, for several processes.
    """

    DEFAULT_START: ClassVar[datetime] = datetime(2030, 1, 1, tzinfo=UTC)

    def __init__(self, start: datetime | None = None, *, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._us = _to_us(start or self.DEFAULT_START)
        self._lock = threading.Lock()
        self._db = _Database(self.path) if self.path is not None else None
        if self._db is not None:
            with self._db.transaction() as conn:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS clock (id INTEGER PRIMARY KEY, us INTEGER)"
                )
                conn.execute("INSERT OR IGNORE INTO clock (id, us) VALUES (1, ?)", (self._us,))

    def now(self) -> datetime:
        """The fake time: from its file if it has one (shared by processes), else in memory."""
        if self._db is None:
            return _from_us(self._us)
        with self._db.transaction() as conn:
            (us,) = conn.execute("SELECT us FROM clock WHERE id = 1").fetchone()
        return _from_us(int(us))

    def advance(self, delta: timedelta | float) -> datetime:
        """Move the time forward by ``delta`` (seconds or a timedelta); return the new time."""
        step = _seconds(delta) // _MICRO
        if step < 0:
            raise ValueError("a clock does not go backwards")
        if self._db is None:
            with self._lock:
                self._us += step
                return _from_us(self._us)
        with self._db.transaction() as conn:
            conn.execute("UPDATE clock SET us = us + ? WHERE id = 1", (step,))
            (us,) = conn.execute("SELECT us FROM clock WHERE id = 1").fetchone()
        return _from_us(int(us))

    def close(self) -> None:
        """Close the clock's file, if it has one."""
        if self._db is not None:
            self._db.close()

    def __reduce__(self) -> tuple[Any, ...]:
        # A file clock travels as its path; an in-memory one as a copy of its time.
        if self.path is not None:
            return (_open_clock, (self.path,))
        return (FakeClock, (self.now(),))

    def __repr__(self) -> str:
        return f"FakeClock({self.now().isoformat()}{', shared' if self.path else ''})"


def _open_clock(path: Path) -> FakeClock:
    return FakeClock(path=path)
