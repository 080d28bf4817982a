"""Run snapshots for long waits (ARCHITECTURE.md, "Where each rule lives").

A run that waits (for an e-mail, a webhook, a person) keeps a small explicit
snapshot: run id, leased resource, state, the single next allowed action,
attempts left, lease expiry, accepted evidence ids, version. A resumed agent
reads ``next_action`` instead of re-reading a conversation.

The snapshot is the fold of an append-only, versioned event log::

    journal.append("run-1842", 7, RunEvent(event_id="m-93", type="message_received"))

* the version must be the run's current one, else ``StaleVersion`` and
  nothing is written (two workers waking together cannot both move one step);
* repeating the same append (same ``event_id``, same content) returns the
  snapshot the first one produced and writes nothing (it consumes nothing twice);
* the ``RunMachine`` decides whether the event is allowed in the current
  state (``IllegalTransition`` otherwise): the model may choose among allowed
  actions, never invent a transition.

Events carry ids and hashes, not bodies: ``RunEvent.data`` is capped at
4 KiB of canonical JSON to keep it that way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from langgraph_effects.core.digest import canonical_json
from langgraph_effects.core.model import utcnow
from langgraph_effects.errors import IllegalTransition, InvalidInput, StaleVersion
from langgraph_effects.ledger._statements import (
    Dialect,
    Program,
    Result,
    Statement,
    Statements,
    migrate,
    single,
)
from langgraph_effects.ledger._tables import Tables

__all__ = [
    "AsyncRunJournal",
    "JournalStats",
    "RunEvent",
    "RunJournal",
    "RunMachine",
    "RunMetrics",
    "RunSnapshot",
    "RunState",
    "Transition",
]

JSON = Any
T = TypeVar("T")
MAX_EVENT_DATA_BYTES = 4096
STARTED = "started"
RESUMED = "resumed"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RunState(_Frozen):
    """One state of a run and the single action allowed next in it."""

    name: str = Field(min_length=1)
    next_action: str | None = None
    terminal: bool = False
    success: bool = False
    """A terminal state that counts as a successful run (metrics)."""


Guard = Callable[["RunSnapshot", "RunEvent", datetime], bool]


class Transition(_Frozen):
    """An event allowed in ``sources`` that moves the run to ``target`` (None: stays).

    Args:
        event: the event type.
        sources: the states it is allowed in.
        target: the state after it; None keeps the state (a poll, a discard).
        condition: the observable condition that justifies it, in words (docs, errors).
        consumes_attempt: takes one of the run's attempts; refused when none is left.
        accepts_evidence: the event must carry an ``evidence_id``, added to the
            snapshot's accepted evidence ids (never the same id twice).
        guard: an optional pure check ``(snapshot, event, now) -> bool``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    event: str = Field(min_length=1)
    sources: tuple[str, ...]
    target: str | None
    condition: str
    consumes_attempt: bool = False
    accepts_evidence: bool = False
    guard: Guard | None = None


class RunEvent(_Frozen):
    """One fact appended to a run's log. ``event_id`` makes a repeated append harmless."""

    event_id: str = Field(min_length=1, max_length=200)
    type: str = Field(min_length=1, max_length=100)
    evidence_id: str | None = Field(default=None, max_length=200)
    data: dict[str, JSON] = Field(default_factory=dict)
    """Small facts: ids, hashes, counts. Never message bodies (capped at 4 KiB)."""
    lease_expires_at: datetime | None = None
    """Set to extend or set the run's lease with this event."""

    @model_validator(mode="after")
    def _small(self) -> Self:
        if len(canonical_json(self.data)) > MAX_EVENT_DATA_BYTES:
            raise ValueError(
                f"event data is over {MAX_EVENT_DATA_BYTES} bytes: store ids and hashes, not bodies"
            )
        return self


class RunSnapshot(_Frozen):
    """What a resumed worker reads instead of the conversation."""

    run_id: str
    machine: str
    resource: str | None = None
    """The leased resource (a mailbox, an account)."""
    state: str
    next_action: str | None
    attempts_left: int
    lease_expires_at: datetime | None = None
    evidence_ids: tuple[str, ...] = ()
    version: int
    updated_at: datetime

    def lease_expired(self, now: datetime) -> bool:
        return self.lease_expires_at is not None and now >= self.lease_expires_at


class RunMachine:
    """A declared state machine: states, allowed transitions, one next action per state.

    Every run also accepts ``resumed`` (a worker picked it up again; no state
    change) in any non-terminal state. ``expire_event``, when given, is the
    next action wherever the lease has expired or the attempts are spent.

    Raises:
        InvalidInput: an unknown state in a transition, a non-terminal state
            without a next action, or two transitions for one (event, state).
    """

    def __init__(
        self,
        name: str,
        *,
        states: Sequence[RunState],
        transitions: Sequence[Transition],
        initial: str,
        expire_event: str | None = None,
    ) -> None:
        self.name = name
        self.states = {s.name: s for s in states}
        self.initial = initial
        self.expire_event = expire_event
        if len(self.states) != len(states):
            raise InvalidInput(f"machine {name!r}: duplicate state names")
        if initial not in self.states:
            raise InvalidInput(f"machine {name!r}: unknown initial state {initial!r}")
        for s in states:
            if not s.terminal and s.next_action is None:
                raise InvalidInput(f"machine {name!r}: state {s.name!r} needs a next_action")
        self._table: dict[tuple[str, str], Transition] = {}
        for t in transitions:
            for state in (*t.sources, *([t.target] if t.target else [])):
                if state not in self.states:
                    raise InvalidInput(f"machine {name!r}: {t.event!r} names unknown {state!r}")
            for source in t.sources:
                if (t.event, source) in self._table:
                    raise InvalidInput(f"machine {name!r}: two transitions for {t.event!r}")
                self._table[(t.event, source)] = t
        self.transitions = tuple(transitions)

    def allowed(self, state: str) -> list[Transition]:
        """The transitions allowed in ``state``, in declaration order."""
        return [t for t in self.transitions if state in t.sources]

    def next_action(self, snapshot: RunSnapshot, now: datetime) -> str | None:
        """The one action a worker should take now (None when the run is over)."""
        state = self.states[snapshot.state]
        if state.terminal:
            return None
        if self.expire_event and (
            snapshot.lease_expired(now)
            or (
                snapshot.attempts_left <= 0
                and any(t.consumes_attempt for t in self.allowed(state.name))
            )
        ):
            return self.expire_event
        return state.next_action

    def start(
        self,
        run_id: str,
        *,
        resource: str | None,
        attempts: int,
        lease_expires_at: datetime | None,
        now: datetime,
    ) -> RunSnapshot:
        draft = RunSnapshot(
            run_id=run_id,
            machine=self.name,
            resource=resource,
            state=self.initial,
            next_action=None,
            attempts_left=attempts,
            lease_expires_at=lease_expires_at,
            version=1,
            updated_at=now,
        )
        return draft.model_copy(update={"next_action": self.next_action(draft, now)})

    def apply(self, snap: RunSnapshot, event: RunEvent, now: datetime) -> RunSnapshot:
        """The snapshot after ``event`` (pure), or ``IllegalTransition``."""

        def refuse(why: str) -> IllegalTransition:
            return IllegalTransition(snap.run_id, status=snap.state, target=event.type, why=why)

        state = self.states[snap.state]
        if event.type == RESUMED and not state.terminal:
            target, consumes, evidence = snap.state, False, False
        else:
            t = self._table.get((event.type, snap.state))
            if t is None:
                allowed = ", ".join(x.event for x in self.allowed(snap.state)) or "nothing"
                raise refuse(f"not allowed in {snap.state!r} (allowed: {allowed})")
            if t.guard is not None and not t.guard(snap, event, now):
                raise refuse(f"condition not met: {t.condition}")
            target, consumes, evidence = (
                t.target or snap.state,
                t.consumes_attempt,
                t.accepts_evidence,
            )
        if consumes and snap.attempts_left <= 0:
            raise refuse("no attempts left")
        evidence_ids = snap.evidence_ids
        if evidence:
            if event.evidence_id is None:
                raise refuse("this transition accepts evidence: give evidence_id")
            if event.evidence_id in evidence_ids:
                raise refuse(f"evidence {event.evidence_id!r} was already accepted")
            evidence_ids = (*evidence_ids, event.evidence_id)
        new = snap.model_copy(
            update={
                "state": target,
                "attempts_left": snap.attempts_left - (1 if consumes else 0),
                "lease_expires_at": event.lease_expires_at or snap.lease_expires_at,
                "evidence_ids": evidence_ids,
                "version": snap.version + 1,
                "updated_at": now,
            }
        )
        return new.model_copy(update={"next_action": self.next_action(new, now)})

    def describe(self) -> str:
        """A plain-text table of the machine, for docs and review screens."""
        lines = [f"{self.name}: starts in {self.initial}"]
        for s in self.states.values():
            lines.append(
                f"  {s.name}: next {s.next_action or '-'}{' (terminal)' if s.terminal else ''}"
            )
        for t in self.transitions:
            lines.append(
                f"  {t.event}: {'|'.join(t.sources)} -> {t.target or '(same)'}  when {t.condition}"
            )
        return "\n".join(lines)


class RunMetrics(_Frozen):
    """One run's figures, from its event log and counters."""

    run_id: str
    state: str
    events_by_type: dict[str, int]
    entered_at: dict[str, datetime]
    """When the run first entered each state it visited."""
    stale_version_rejections: int
    resumed: int

    def seconds_between(self, first: str, then: str) -> float | None:
        a, b = self.entered_at.get(first), self.entered_at.get(then)
        return None if a is None or b is None else (b - a).total_seconds()


class JournalStats(_Frozen):
    """Figures over all runs of a journal (the seeds' metrics are derived from these)."""

    runs_by_state: dict[str, int]
    events_by_type: dict[str, int]
    stale_version_rejections: int
    resumed_runs: int
    resumed_runs_succeeded: int


# --------------------------------------------------------------------------- statements
# Programs of the statement engine (``ledger._statements``); the SQL of each
# backend is in ``ledger/sqlite/_journal.py`` and ``ledger/postgres/_journal.py``.


def _dump(model: BaseModel) -> str:
    return model.model_dump_json()


def _replay(row: dict[str, Any], event: RunEvent, run_id: str) -> RunSnapshot:
    """A repeated append: the same content returns the first result; other content is refused."""
    if RunEvent.model_validate_json(row["event"]) != event:
        raise InvalidInput(
            f"run {run_id!r}: event id {event.event_id!r} was already appended with other content"
        )
    return RunSnapshot.model_validate_json(row["snapshot"])


def _write_event(dialect: Dialect, snap: RunSnapshot, event: RunEvent, now: datetime) -> Statement:
    return Statement(
        "insert_event",
        {
            "run_id": snap.run_id,
            "version": snap.version,
            "event_id": event.event_id,
            "type": event.type,
            "state": snap.state,
            "event": _dump(event),
            "snapshot": _dump(snap),
            "now": dialect.dump_ts(now),
        },
    )


def _start(
    dialect: Dialect,
    machine: RunMachine,
    run_id: str,
    start: RunEvent,
    snap: RunSnapshot,
    now: datetime,
) -> Program[RunSnapshot]:
    def statements() -> Statements[Result[RunSnapshot]]:
        rows = yield Statement(
            "insert_run",
            {
                "run_id": run_id,
                "machine": machine.name,
                "state": snap.state,
                "version": snap.version,
                "snapshot": _dump(snap),
                "now": dialect.dump_ts(now),
            },
        )
        if not rows:  # already started: the same start returns the run as it is now
            existing = yield Statement("get_event", {"run_id": run_id, "event_id": start.event_id})
            if not existing:
                raise InvalidInput(f"run {run_id!r} already exists (started by another event)")
            first = _start_args(
                RunEvent.model_validate_json(existing[0]["event"]),
                RunSnapshot.model_validate_json(existing[0]["snapshot"]),
            )
            if first != _start_args(start, snap):
                raise InvalidInput(
                    f"run {run_id!r} was already started with {first}; "
                    f"this start asks for {_start_args(start, snap)}"
                )
            current = yield Statement("get_run", {"run_id": run_id})
            return Result(RunSnapshot.model_validate_json(current[0]["snapshot"]))
        yield _write_event(dialect, snap, start, now)
        return Result(snap)

    return Program(statements(), writes=True, atomic=True)


def _start_args(start: RunEvent, snap: RunSnapshot) -> str:
    """What a start asked for, in words: equal for a repeated start, whenever it runs.

    The lease is compared as the duration asked for (expiry minus start time),
    not as the expiry, which moves with the clock of each call.
    """
    lease_for = None if start.lease_expires_at is None else start.lease_expires_at - snap.updated_at
    data = ", ".join(f"{k}={v!r}" for k, v in sorted(start.data.items()))
    return f"machine={snap.machine!r}, {data}, lease_for={lease_for}"


def _append(
    dialect: Dialect,
    machine: RunMachine,
    run_id: str,
    expected: int,
    event: RunEvent,
    now: datetime,
) -> Program[RunSnapshot]:
    def statements() -> Statements[Result[RunSnapshot]]:
        rows = yield Statement("get_event", {"run_id": run_id, "event_id": event.event_id})
        if rows:
            return Result(_replay(rows[0], event, run_id))
        rows = yield Statement("get_run", {"run_id": run_id})
        if not rows:
            raise InvalidInput(f"no run {run_id!r}: start it first")
        current = RunSnapshot.model_validate_json(rows[0]["snapshot"])
        if current.version != expected:
            raise StaleVersion(run_id, expected=expected, current=current.version)
        new = machine.apply(current, event, now)
        rows = yield Statement(
            "update_run",
            {
                "run_id": run_id,
                "expected": expected,
                "state": new.state,
                "version": new.version,
                "snapshot": _dump(new),
                "now": dialect.dump_ts(now),
            },
        )
        if not rows:
            # Lost a race after reading (PostgreSQL, READ COMMITTED): the same event
            # may be what won; otherwise this append is stale.
            again = yield Statement("get_event", {"run_id": run_id, "event_id": event.event_id})
            if again:
                return Result(_replay(again[0], event, run_id))
            raise StaleVersion(run_id, expected=expected, current=expected + 1)
        yield _write_event(dialect, new, event, now)
        return Result(new)

    return Program(statements(), writes=True, atomic=True)


def _count(run_id: str, name: str) -> Program[Any]:
    return single("bump_counter", {"run_id": run_id, "name": name})


# --------------------------------------------------------------------------- journals


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
        """Open the journal's own connection: a SQLite path, or a ``postgresql://`` URL."""
        text = str(conn_string)
        if text.startswith(("postgres://", "postgresql://")):
            import psycopg

            with psycopg.connect(text, autocommit=True) as pg:
                yield cls(pg, machines, **kwargs)
            return
        import sqlite3

        conn = sqlite3.connect(text, isolation_level=None, timeout=30.0, check_same_thread=False)
        try:
            conn.execute("PRAGMA busy_timeout = 30000")
            yield cls(conn, machines, **kwargs)
        finally:
            conn.close()

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
