"""``RunJournal`` and ``AsyncRunJournal``: start, append, read and count runs, one transaction
each, sync or async."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from langgraph_effects.core.model import utcnow
from langgraph_effects.errors import InvalidInput, StaleVersion
from langgraph_effects.journal.machine import RunMachine
from langgraph_effects.journal.model import (
    RESUMED,
    STARTED,
    JournalStats,
    RunEvent,
    RunMetrics,
    RunSnapshot,
)
from langgraph_effects.journal.statements import _append, _count, _start
from langgraph_effects.ledger.connect import table_connection
from langgraph_effects.ledger.engine import (
    Program,
    Result,
    Statement,
    Statements,
    migrate,
)
from langgraph_effects.ledger.engine.tables import Tables

T = TypeVar("T")


class _JournalBase:
    def __init__(
        self,
        conn: Any,
        machines: Sequence[RunMachine],
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.conn = conn
        self._tables = Tables.on(conn, "journal")
        self.machines = {m.name: m for m in machines}
        self.clock = clock
        self._lock = threading.RLock()

    def _machine(self, name: str) -> RunMachine:
        try:
            return self.machines[name]
        except KeyError:
            raise InvalidInput(f"no machine {name!r} was given to this journal") from None

    def _start(
        self,
        run_id: str,
        machine: str,
        *,
        resource: str | None,
        attempts: int,
        lease_for: timedelta | None,
        event_id: str,
    ) -> Program[RunSnapshot]:
        m, now = self._machine(machine), self.clock()
        expires = None if lease_for is None else now + lease_for
        start = RunEvent(
            event_id=event_id,
            type=STARTED,
            lease_expires_at=expires,
            data={"resource": resource, "attempts": attempts},
        )
        snap = m.start(
            run_id, resource=resource, attempts=attempts, lease_expires_at=expires, now=now
        )
        return _start(self._tables.dialect, m, run_id, start, snap, now)

    def _append(
        self, machine: RunMachine, run_id: str, expected: int, event: RunEvent
    ) -> Program[RunSnapshot]:
        return _append(self._tables.dialect, machine, run_id, expected, event, self.clock())

    def _machine_of(self, run_id: str) -> Program[RunMachine]:
        def statements() -> Statements[Result[RunMachine]]:
            rows = yield Statement("get_run", {"run_id": run_id})
            if not rows:
                raise InvalidInput(f"no run {run_id!r}: start it first")
            snap = RunSnapshot.model_validate_json(rows[0]["snapshot"])
            return Result(self._machine(snap.machine))

        return Program(statements(), writes=False)

    @staticmethod
    def _get(run_id: str) -> Program[RunSnapshot | None]:
        def statements() -> Statements[Result[RunSnapshot | None]]:
            rows = yield Statement("get_run", {"run_id": run_id})
            return Result(RunSnapshot.model_validate_json(rows[0]["snapshot"]) if rows else None)

        return Program(statements(), writes=False)

    @staticmethod
    def _events(run_id: str) -> Program[list[RunEvent]]:
        def statements() -> Statements[Result[list[RunEvent]]]:
            rows = yield Statement("events", {"run_id": run_id})
            return Result([RunEvent.model_validate_json(r["event"]) for r in rows])

        return Program(statements(), writes=False)

    def _metrics(self, run_id: str) -> Program[RunMetrics | None]:
        dialect = self._tables.dialect

        def statements() -> Statements[Result[RunMetrics | None]]:
            events = yield Statement("events", {"run_id": run_id})
            if not events:
                return Result(None)
            counters = yield Statement("counters")
            by_type: dict[str, int] = {}
            entered: dict[str, datetime] = {}
            for e in events:
                by_type[e["type"]] = by_type.get(e["type"], 0) + 1
                if e["state"] not in entered:
                    at = dialect.load_ts(e["at"])
                    assert at is not None, "lge_run_events.at is NOT NULL"
                    entered[e["state"]] = at
            return Result(
                RunMetrics(
                    run_id=run_id,
                    state=events[-1]["state"],
                    events_by_type=by_type,
                    entered_at=entered,
                    stale_version_rejections=sum(
                        c["n"]
                        for c in counters
                        if c["run_id"] == run_id and c["name"] == "stale_version"
                    ),
                    resumed=by_type.get(RESUMED, 0),
                )
            )

        return Program(statements(), writes=False)

    def _stats(self) -> Program[JournalStats]:
        def statements() -> Statements[Result[JournalStats]]:
            runs = yield Statement("runs")
            events = yield Statement("all_event_types")
            counters = yield Statement("counters")
            by_state: dict[str, int] = {}
            success: set[str] = set()
            for r in runs:
                by_state[r["state"]] = by_state.get(r["state"], 0) + 1
                snap = RunSnapshot.model_validate_json(r["snapshot"])
                machine = self.machines.get(snap.machine)
                if machine is not None and machine.states[snap.state].success:
                    success.add(snap.run_id)
            by_type: dict[str, int] = {}
            resumed: set[str] = set()
            for e in events:
                by_type[e["type"]] = by_type.get(e["type"], 0) + 1
                if e["type"] == RESUMED:
                    resumed.add(e["run_id"])
            return Result(
                JournalStats(
                    runs_by_state=by_state,
                    events_by_type=by_type,
                    stale_version_rejections=sum(
                        c["n"] for c in counters if c["name"] == "stale_version"
                    ),
                    resumed_runs=len(resumed),
                    resumed_runs_succeeded=len(resumed & success),
                )
            )

        return Program(statements(), writes=False)


class RunJournal(_JournalBase):
    """Durable run snapshots over a versioned event log, on SQLite or PostgreSQL (sync).

    Args:
        conn: a connection this journal owns: ``sqlite3`` (autocommit,
            ``isolation_level=None``) or psycopg (``autocommit=True``). Each
            append is one transaction (``BEGIN IMMEDIATE`` on SQLite).
        machines: the state machines runs may follow (by name).
        clock: the time source.
    """

    @classmethod
    @contextmanager
    def from_conn_string(
        cls, conn_string: str | Path, machines: Sequence[RunMachine], **kwargs: Any
    ) -> Iterator[RunJournal]:
        """Open the journal's own connection on the database a ledger URL names
        (``ledger.connect.table_connection``: a SQLite path or ``sqlite:///`` URL, or a
        ``postgresql://`` URL).

        Raises:
            InvalidInput: the URL is malformed or names an unsupported scheme.
        """
        with table_connection(conn_string) as conn:
            yield cls(conn, machines, **kwargs)

    def _tx(self, program: Program[T]) -> T:
        """Run a write in one transaction; count a stale-version refusal after rollback."""
        with self._lock:
            try:
                return self._tables.run(program)
            except StaleVersion as stale:
                self._tables.run(_count(stale.run_id, "stale_version"))
                raise

    def _read(self, program: Program[T]) -> T:
        with self._lock:
            return self._tables.run(program, commit=True)

    def setup(self) -> None:
        """Create or migrate the journal's tables (idempotent, locked)."""
        self._tx(migrate(self._tables.dialect))

    def start(
        self,
        run_id: str,
        machine: str,
        *,
        resource: str | None = None,
        attempts: int = 3,
        lease_for: timedelta | None = None,
        event_id: str = "start",
    ) -> RunSnapshot:
        """Create the run at version 1 in the machine's initial state; return its snapshot.

        Idempotent: a repeated start with the same arguments (and event id)
        writes nothing and returns the run's current snapshot, so a restarted
        worker may call it again; ``lease_for`` counts as the duration asked
        for. Other arguments for an existing run raise ``InvalidInput``.
        """
        return self._tx(
            self._start(
                run_id,
                machine,
                resource=resource,
                attempts=attempts,
                lease_for=lease_for,
                event_id=event_id,
            )
        )

    def append(self, run_id: str, expected_version: int, event: RunEvent) -> RunSnapshot:
        """Append ``event`` if the run is at ``expected_version``; return the new snapshot.

        Raises:
            StaleVersion: the run moved on; nothing was written (counted in metrics).
            IllegalTransition: the machine does not allow the event now.
            InvalidInput: no such run, or the event id was used with other content.
        """
        with self._lock:
            machine = self._read(self._machine_of(run_id))
            result: RunSnapshot = self._tx(self._append(machine, run_id, expected_version, event))
            return result

    def resume(self, run_id: str, *, worker: str, boot_id: str) -> RunSnapshot:
        """Record that ``worker`` picked the run up again; return the current snapshot.

        ``boot_id`` names this restart (the same restart recorded twice is one
        event). A terminal run is returned as it is, without an event.
        """
        snap = self.get(run_id)
        if snap is None:
            raise InvalidInput(f"no run {run_id!r}")
        if self._machine(snap.machine).states[snap.state].terminal:
            return snap
        event = RunEvent(event_id=f"resume:{boot_id}", type=RESUMED, data={"worker": worker})
        return self.append(run_id, snap.version, event)

    def get(self, run_id: str) -> RunSnapshot | None:
        return self._read(self._get(run_id))

    def next_action(self, run_id: str) -> str | None:
        """The one action to take now (lease expiry checked against the clock)."""
        snap = self.get(run_id)
        if snap is None:
            raise InvalidInput(f"no run {run_id!r}")
        return self._machine(snap.machine).next_action(snap, self.clock())

    def events(self, run_id: str) -> list[RunEvent]:
        return self._read(self._events(run_id))

    def metrics(self, run_id: str) -> RunMetrics | None:
        return self._read(self._metrics(run_id))

    def stats(self) -> JournalStats:
        return self._read(self._stats())


class AsyncRunJournal(_JournalBase):
    """``RunJournal`` on a psycopg ``AsyncConnection`` (autocommit): the same programs."""

    async def _tx(self, program: Program[T]) -> T:
        try:
            return await self._tables.arun(program)
        except StaleVersion as stale:
            await self._tables.arun(_count(stale.run_id, "stale_version"))
            raise

    async def setup(self) -> None:
        await self._tx(migrate(self._tables.dialect))

    async def start(
        self,
        run_id: str,
        machine: str,
        *,
        resource: str | None = None,
        attempts: int = 3,
        lease_for: timedelta | None = None,
        event_id: str = "start",
    ) -> RunSnapshot:
        return await self._tx(
            self._start(
                run_id,
                machine,
                resource=resource,
                attempts=attempts,
                lease_for=lease_for,
                event_id=event_id,
            )
        )

    async def append(self, run_id: str, expected_version: int, event: RunEvent) -> RunSnapshot:
        machine = await self._tables.arun(self._machine_of(run_id))
        result: RunSnapshot = await self._tx(self._append(machine, run_id, expected_version, event))
        return result

    async def get(self, run_id: str) -> RunSnapshot | None:
        return await self._tables.arun(self._get(run_id))

    async def metrics(self, run_id: str) -> RunMetrics | None:
        return await self._tables.arun(self._metrics(run_id))

    async def stats(self) -> JournalStats:
        return await self._tables.arun(self._stats())
