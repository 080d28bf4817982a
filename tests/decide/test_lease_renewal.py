"""Lease renewal while a dispatch runs (``decide.renew``).

A dropped ledger connection never lets a live worker's lease lapse (issue 10, finding 4).
Worker A claims the operation and starts a long provider call; right then its
ledger connection is dropped (PostgreSQL: ``pg_terminate_backend`` of every
connection of A's ledger pool; SQLite: the next statement on A's connection
fails as a disk or driver error would). A's first renewal fails; it must try
again and keep the lease. Worker B resumes the same thread after the lease
would have lapsed without renewals: it must find a live owner and never
dispatch. The provider is counted: one request, one effect. The effect has an
idempotency window, so a worker that took over would resend at once: the
control (renewal stopping after one failure) shows two requests.

The sync renewer's one thread wakes for the live leases only: the dispatches that
ended before their first renewal (most of them) never wake it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from _graphs import Env, build_graph, call

from langgraph_effects import EffectContext, OperationStatus, ProviderContract, effect
from langgraph_effects.core.model import EventKind
from langgraph_effects.decide.renew import Renewer
from langgraph_effects.errors import LeaseHeld
from langgraph_effects.testing.faults import scaled
from langgraph_effects.testing.providers import FakeCRM

S = OperationStatus
CFG = {"configurable": {"thread_id": "t1"}}
CLOSE_A = call("close_case", "call-a", case_id="A", resolution="fixed")
LEASE = timedelta(seconds=2.4)  # renewed every 0.8 s: slack for a loaded machine
CALL_SECONDS = 5.0  # the provider call outlasts two leases
KEYED = ProviderContract(idempotency_window=timedelta(hours=24))


class DroppingConnection(sqlite3.Connection):
    """A sqlite3 connection whose next ``fail`` statements fail as a dropped disk would."""

    fail = 0

    def cursor(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        if self.fail > 0:
            self.fail -= 1
            raise sqlite3.OperationalError("disk I/O error (dropped by the test)")
        return super().cursor(*args, **kwargs)


class Worker:
    """Worker A: its own ledger whose connection the test can drop, on ``kind``."""

    def __init__(self, kind: str, is_async: bool, where: str, name: str) -> None:
        self.kind, self.is_async, self.where, self.name = kind, is_async, where, name
        self.stack = contextlib.ExitStack()
        self.astack = contextlib.AsyncExitStack()
        self.sqlite: DroppingConnection | None = None

    async def aopen(self) -> Any:
        from langgraph_effects import AsyncPostgresLedger, AsyncSQLiteLedger

        if self.kind == "postgres":
            url = f"{self.where}&application_name={self.name}"
            return await self.astack.enter_async_context(AsyncPostgresLedger.from_conn_string(url))
        return AsyncSQLiteLedger(self._sqlite())

    def open(self) -> Any:
        from langgraph_effects import PostgresLedger, SQLiteLedger

        if self.kind == "postgres":
            url = f"{self.where}&application_name={self.name}"
            return self.stack.enter_context(PostgresLedger.from_conn_string(url))
        return SQLiteLedger(self._sqlite())

    def _sqlite(self) -> DroppingConnection:
        conn = sqlite3.connect(
            self.where, factory=DroppingConnection, check_same_thread=False, isolation_level=None
        )
        assert isinstance(conn, DroppingConnection)
        self.stack.callback(conn.close)
        self.sqlite = conn
        return conn

    def drop_connections(self) -> int:
        """Drop A's ledger connections now; return how many were dropped."""
        if self.kind == "sqlite":
            assert self.sqlite is not None
            self.sqlite.fail = 1
            return 1
        import psycopg
        from _pg import POSTGRES_URL

        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            rows = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (self.name,),
            ).fetchall()
        return len(rows)


def test_dropped_connection_mid_call_keeps_the_lease(
    backend: tuple[str, str, str], tmp_path: Path
) -> None:
    """A's connection drops during a long provider call: A keeps its lease, B never dispatches,
    the CRM sees one request and one effect, and A's receipt confirms the operation."""
    kind, mode, where = backend
    is_async = mode == "async"
    crm = FakeCRM(tmp_path / "crm.db")
    entered = threading.Event()
    worker = Worker(kind, is_async, where, f"lge-victim-{tmp_path.name[-20:]}")
    dropped: list[int] = []

    def slow_close(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case (a long call)."""
        dropped.append(worker.drop_connections())
        entered.set()
        time.sleep(CALL_SECONDS)
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    async def aslow_close(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case (a long call)."""
        dropped.append(worker.drop_connections())
        entered.set()
        await asyncio.sleep(CALL_SECONDS)
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    declare = effect(
        "crm.close_case", target=lambda a: a["case_id"], contract=KEYED, name="close_case"
    )
    tool = declare(aslow_close if is_async else slow_close)
    errors: list[BaseException] = []

    def run_a() -> None:
        env = Env(kind, mode, path=Path(where), url=where)
        try:
            ledger = env.run(worker.aopen()) if is_async else worker.open()
            graph = build_graph(
                [tool],
                [CLOSE_A],
                ledger=ledger,
                checkpointer=env.checkpointer,
                node_kwargs={"lease_for": LEASE},
            )
            env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
        except BaseException as exc:
            errors.append(exc)
        finally:
            if is_async:
                env.run(worker.astack.aclose())
            worker.stack.close()
            env.close()

    env_b = Env(kind, mode, path=Path(where), url=where)  # sets the schema up before A starts
    a = threading.Thread(target=run_a)
    a.start()
    try:
        assert entered.wait(scaled(30)), errors
        # Unrenewed, A's lease would have lapsed by now.
        time.sleep(LEASE.total_seconds() + 0.4)
        graph_b = build_graph(
            [tool],
            [CLOSE_A],
            ledger=env_b.ledger,
            checkpointer=env_b.checkpointer,
            node_kwargs={"lease_for": LEASE},
        )
        with contextlib.suppress(LeaseHeld):  # B gives up waiting for A's live lease
            env_b.invoke(graph_b, None, CFG)
        a.join(scaled(30))
        assert not a.is_alive()
        assert errors == []
        assert dropped[0] >= 1  # the connection really was dropped mid-call
        [op] = env_b.ops()
        assert op.status is S.CONFIRMED, op
        assert op.attempts == 1
        kinds = [e.kind for e in env_b.ledger_call("events", "default", op.operation_id)]
        assert EventKind.MARK_UNKNOWN not in kinds
        assert crm.stats().requests == 1  # B never dispatched
        assert crm.effects == 1
    finally:
        a.join(scaled(30))
        env_b.close()
        crm.close()


def test_dropped_jobs_never_wake_the_renewer() -> None:
    """Fifty dispatches end before their first renewal is due (their jobs dropped), one
    runs on: the renewer's thread wakes for the live lease's renewals only, never at a
    dropped job's deadline, and never renews a dropped job."""
    renewer = Renewer()
    renewals = 0
    renewed_ten_times = threading.Event()

    def renew() -> None:
        nonlocal renewals
        renewals += 1
        if renewals == 10:
            renewed_ten_times.set()

    def dropped() -> None:
        raise AssertionError("a dropped job was renewed")

    live = renewer.hold(renew, 0.05)
    for i in range(50):  # deadlines 10 ms apart, all before the tenth renewal
        renewer.drop(renewer.hold(dropped, 0.06 + 0.01 * i))
    try:
        assert renewed_ten_times.wait(scaled(30))
        wakeups = renewer.wakeups
        assert wakeups <= renewals + 1  # +1: woken, not renewed yet
    finally:
        renewer.drop(live)


def test_live_leases_due_together_share_a_wake_up() -> None:
    """Ten dispatches started a few milliseconds apart run on: each wake-up renews every
    lease due within a tenth of its delay, so the ten share one wake-up per round."""
    renewer = Renewer()
    rounds = [0] * 10
    second_round = threading.Event()

    def renewing(i: int) -> Any:
        def renew() -> None:
            rounds[i] += 1
            if min(rounds) >= 2:
                second_round.set()

        return renew

    # Due 5 ms apart (45 ms in all, within a tenth of the ~1 s delay), by their delays
    # rather than by sleeping between holds: a busy machine cannot spread them further.
    jobs = [renewer.hold(renewing(i), 1.0 + 0.005 * i) for i in range(10)]
    try:
        assert second_round.wait(scaled(30))
        assert renewer.wakeups <= 4  # two rounds (+2: stragglers on a busy machine)
    finally:
        for job in jobs:
            renewer.drop(job)


def test_dispatches_that_end_never_pile_up_in_the_queue() -> None:
    """A thousand dispatches end before their first renewal while one long dispatch runs
    on (its renewal due first): their places in the renewer's queue do not outlive them
    beyond twice the live jobs (plus a few), where they stayed until each deadline passed."""
    renewer = Renewer()
    live = renewer.hold(lambda: None, 30.0)
    try:
        for _ in range(1000):
            renewer.drop(renewer.hold(lambda: None, 60.0))
        assert renewer.queued <= 2 * 1 + 16
    finally:
        renewer.drop(live)


def test_a_dropped_job_is_not_kept_alive_by_the_renewer() -> None:
    """A job renewed once, then dropped (its dispatch ended): the renewer's sleeping thread
    holds no reference to its renewal, which closes over the call's ledger."""
    import gc
    import weakref

    renewer = Renewer()
    renewed = threading.Event()

    class Renewal:
        def __call__(self) -> None:
            renewed.set()

    def hold() -> tuple[int, weakref.ref[Renewal]]:
        renewal = Renewal()
        return renewer.hold(renewal, 0.02), weakref.ref(renewal)

    job, ref = hold()
    assert renewed.wait(scaled(30))
    renewer.drop(job)
    deadline = time.monotonic() + scaled(5)
    while ref() is not None and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    assert ref() is None
