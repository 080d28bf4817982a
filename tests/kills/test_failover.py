"""A PostgreSQL failover is survived (issue 23): 0 duplicates, every write-ahead record kept.

The test starts its own clusters on loopback, never the shared server: ``initdb``
once per module into a temporary directory (as the ``postgres`` user when run as
root, which ``initdb`` refuses), then per case a primary copied from it and a
streaming standby made with ``pg_basebackup``, synchronous
(``synchronous_standby_names = '*'``) as documented, or asynchronous for the one case
that shows why not, each on a free port. The ledger and the saver share one pool on a
multi-host URL (``host=a,b port=p,q target_session_attrs=read-write``), as
``docs/production-failover.md`` says.

A child process runs the graph and is SIGKILLed at a crash point (after the
write-ahead record, after the provider, after the receipt); the primary is
killed at once (``pg_ctl -m immediate``) and the standby promoted. Every
write-ahead record is on the standby; the receipt committed relaxed
(``synchronous_commit = off``) may or may not be. Another process (the test's
own) resumes on the same URL, which now reaches the promoted standby: the fake
CRM counts one effect and no duplicate at every point, a lost receipt reconciled.

Where a loss must happen for certain, the primary's walsender is frozen (SIGSTOP)
at the moment that matters and the primary's machine then dies (every process of it
SIGKILLed, so the frozen walsender never sends again): a relaxed receipt the standby
never received is reconciled and never resent, a ``"FULL"`` receipt waits for the
standby and survives, and under an asynchronous standby an acknowledged write-ahead
record is lost and the call sent again (the hazard the documentation warns of), as it
is under a synchronous one with ``synchronous_commit = local`` for the ledger's database
once the ledger is told to keep that setting (``prepare_synchronous="SERVER"``). By
default it raises it to ``on``: the same schedule then waits for the standby, and the
record survives the failover, the call sent once. So is a person's rejection given
before dispatch (every decision is raised the same way): kept, where the opt-out loses it
and leaves the call approved, to be sent.

The same template serves one more server, which checks passwords: a ledger opened
with a wrong one fails at once with the server's reason (issue 23, finding 9).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from _graphs import Env, build_graph, call
from _pg import unavailable

from langgraph_effects import EffectContext, Evidence, ProviderContract, effect
from langgraph_effects.ledger.base import Synchronous
from langgraph_effects.testing.faults import CrashPoint, scaled
from langgraph_effects.testing.providers import FakeCRM
from langgraph_effects.testing.scenario import run_in_forked_child, start_forked_child

CFG = {"configurable": {"thread_id": "t1"}}
_BINS = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
_AS_POSTGRES = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def _pg(tool: str, *args: str) -> None:
    """Run a PostgreSQL binary (as ``postgres`` when we are root); its output on failure."""
    done = subprocess.run(
        [*_AS_POSTGRES, f"{_BINS[-1]}/{tool}", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(args)} failed: {done.stdout}{done.stderr}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _private_dir() -> Path:
    """A temporary directory the server's user owns (mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix="lge-failover-"))
    if _AS_POSTGRES:
        shutil.chown(path, "postgres", "postgres")
    return path


@pytest.fixture(scope="module")
def template() -> Iterator[Path]:
    """One ``initdb`` for the module; each case copies it."""
    if not _BINS:
        unavailable(
            "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin",
            "install the server package, e.g. postgresql-15",
        )
    root = _private_dir()
    try:
        _pg("initdb", "-D", str(root / "data"), "-A", "trust", "-U", "postgres", "-N")
        yield root / "data"
    finally:
        shutil.rmtree(root, ignore_errors=True)


class Cluster:
    """A primary and a streaming standby on loopback, in a temporary directory: synchronous
    (``synchronous_standby_names = '*'``, as documented) unless ``synchronous=False``."""

    def __init__(self, template: Path, *, synchronous: bool = True) -> None:
        self.root = _private_dir()
        self.primary, self.standby = self.root / "primary", self.root / "standby"
        self.ports = (_free_port(), _free_port())
        self.synchronous = synchronous
        self.running: list[Path] = []
        try:
            self._build(template)
        except BaseException:
            self.close()  # never leave a server of ours running
            raise

    def _build(self, template: Path) -> None:
        subprocess.run([*_AS_POSTGRES, "cp", "-a", str(template), str(self.primary)], check=True)
        names = "'*'" if self.synchronous else "''"
        self._configure(self.primary, self.ports[0], f"synchronous_standby_names = {names}")
        self._start(self.primary)
        _pg(
            "pg_basebackup",
            *("-h", "127.0.0.1", "-p", str(self.ports[0]), "-U", "postgres"),
            *("-D", str(self.standby), "-R", "-X", "stream", "-c", "fast", "--no-sync"),
        )
        self._configure(self.standby, self.ports[1], "synchronous_standby_names = ''")
        self._start(self.standby)
        self._wait_sync()

    @staticmethod
    def _configure(data: Path, port: int, extra: str) -> None:
        conf = (
            f"port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n"
            f"fsync = off\n{extra}\n"
        )
        subprocess.run(
            [*_AS_POSTGRES, "sh", "-c", f"cat >> {data}/postgresql.auto.conf"],
            input=conf,
            text=True,
            check=True,
        )

    def _start(self, data: Path) -> None:
        _pg("pg_ctl", "-D", str(data), "-l", f"{data}.log", "-w", "start")
        self.running.append(data)

    def _wait_sync(self) -> None:
        import psycopg

        wanted = "sync" if self.synchronous else "async"
        deadline = time.monotonic() + scaled(20)
        with psycopg.connect(self.dsn(self.ports[0]), autocommit=True) as conn:
            while time.monotonic() < deadline:
                row = conn.execute("SELECT sync_state FROM pg_stat_replication").fetchone()
                if row is not None and row[0] == wanted:
                    return
                time.sleep(0.05)
        raise RuntimeError(f"the standby never became an {wanted} standby")

    def walsender(self) -> int:
        """The pid of the primary's process that streams the log to the standby."""
        import psycopg

        with psycopg.connect(self.dsn(self.ports[0]), autocommit=True) as conn:
            rows = conn.execute("SELECT pid FROM pg_stat_replication").fetchall()
        assert len(rows) == 1, rows
        return int(rows[0][0])

    @staticmethod
    def dsn(port: int) -> str:
        return f"host=127.0.0.1 port={port} user=postgres dbname=postgres"

    @property
    def url(self) -> str:
        """The application's URL: both hosts, the one that accepts writes."""
        a, b = self.ports
        return (
            f"host=127.0.0.1,127.0.0.1 port={a},{b} user=postgres dbname=postgres "
            "target_session_attrs=read-write connect_timeout=5"
        )

    def fail_over(self) -> None:
        """Kill the primary (no shutdown checkpoint: a crash) and promote the standby."""
        _pg("pg_ctl", "-D", str(self.primary), "-m", "immediate", "stop")
        self.running.remove(self.primary)
        _pg("pg_ctl", "-D", str(self.standby), "-w", "promote")

    def lose_primary(self) -> None:
        """The primary's machine dies: every process of it SIGKILLed at once (a frozen
        walsender included, which could not act on ``pg_ctl``'s signal), so what it never
        sent is never sent; then the standby is promoted."""
        self.running.remove(self.primary)
        _kill_server(self.primary)
        _pg("pg_ctl", "-D", str(self.standby), "-w", "promote")

    def close(self) -> None:
        for data in self.running:  # what is left after a failure too (a frozen walsender)
            _kill_server(data)
        self.running.clear()
        shutil.rmtree(self.root, ignore_errors=True)


def _children(parent: int) -> list[int]:
    """The pids whose parent is ``parent`` (``/proc``)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # gone meanwhile
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found.append(int(entry))
    return found


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")  # dead, waiting for init to reap it


def _kill_server(data: Path) -> None:
    """SIGKILL a server of ours and each of its processes, and wait until they are gone.

    Not ``killpg``: each backend of PostgreSQL is a session of its own (``setsid``). The
    postmaster is stopped first, so it forks nothing while its children are listed. Its
    small System V segment, which a killed postmaster leaves behind, is removed."""
    try:
        lines = (data / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:  # never started, or stopped
        return
    postmaster = int(lines[0])
    with contextlib.suppress(ProcessLookupError):
        os.kill(postmaster, signal.SIGSTOP)
    doomed = [*_children(postmaster), postmaster]
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + scaled(10)
    while not all(_gone(pid) for pid in doomed):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server in {data} did not die")
        time.sleep(0.01)
    shmid = lines[6].split()[1] if len(lines) > 6 else ""
    if shmid.isdigit():
        subprocess.run(["ipcrm", "-m", shmid], capture_output=True, check=False)


def freeze(pid: int) -> None:
    """SIGSTOP ``pid`` and return once it is stopped (``T`` in ``/proc``)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + scaled(5)
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        if time.monotonic() > deadline:
            raise RuntimeError(f"process {pid} did not stop")
        time.sleep(0.001)


@contextlib.contextmanager
def _cluster(template: Path, *, synchronous: bool) -> Iterator[Cluster]:
    made = Cluster(template, synchronous=synchronous)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def cluster(template: Path) -> Iterator[Cluster]:
    with _cluster(template, synchronous=True) as made:
        yield made


def _close_tool(crm: FakeCRM, *, then: Callable[[], None] | None = None) -> Any:
    """Close a case: a reconciler, and a 24 h key window the CRM honours; ``then`` runs once
    the CRM has answered, before the tool returns (before the receipt)."""

    def find(op: Any) -> Evidence:
        if crm.get_case(op.target)["closed_by"] == op.idempotency_key:
            return Evidence.confirmed("closed under our key", result={"closed": op.target})
        return Evidence.inconclusive("not closed under our key")

    @effect(
        "crm.close_case",
        target=lambda a: a["case_id"],
        reconcile=find,
        contract=ProviderContract(idempotency_window=timedelta(hours=24)),
    )
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        closed = crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)
        if then is not None:
            then()
        return closed

    return close_case


def failover_run(
    url: str,
    crm_path: str,
    start: bool,
    receipts: Synchronous = "NORMAL",
    freeze_after_provider: int | None = None,
    mode: str = "sync",
) -> dict[str, Any]:
    """Run (``start``) or resume thread t1 on ``url``: ledger and saver on one pool (``mode``
    sync or async), receipts committed ``receipts``; ``freeze_after_provider``: a pid to
    SIGSTOP once the CRM answered."""
    from langgraph_effects.ledger.postgres import AsyncPostgresLedger, PostgresLedger

    env = Env("postgres", mode, url=url)
    face = AsyncPostgresLedger if env.is_async else PostgresLedger
    env.ledger = face(env.checkpointer.conn, receipt_synchronous=receipts)
    crm = FakeCRM(crm_path)
    stop = None if freeze_after_provider is None else partial(freeze, freeze_after_provider)
    try:
        graph = build_graph(
            [_close_tool(crm, then=stop)],
            [call("close_case", "call-a", case_id="A", resolution="fixed")],
            ledger=env.ledger,
            checkpointer=env.checkpointer,
        )
        env.invoke(graph, {"messages": [("user", "close A")]} if start else None, CFG)
        ops = env.ops()
        return {"statuses": [o.status.value for o in ops], "attempts": [o.attempts for o in ops]}
    finally:
        crm.close()
        env.close()


def _hold(flag: str, go: str) -> None:
    """Say the CRM answered (``flag``), then wait for the test's ``go``."""
    Path(flag).write_text("answered")
    deadline = time.monotonic() + scaled(60)
    while not Path(go).exists():
        if time.monotonic() > deadline:
            raise RuntimeError("never told to go on")
        time.sleep(0.01)


def live_run(url: str, crm_path: str, flag: str, go: str, mode: str) -> dict[str, Any]:
    """Start thread t1; the tool holds once the CRM answered until the test has failed over."""
    env = Env("postgres", mode, url=url)
    crm = FakeCRM(crm_path)
    try:
        graph = build_graph(
            [_close_tool(crm, then=partial(_hold, flag, go))],
            [call("close_case", "call-a", case_id="A", resolution="fixed")],
            ledger=env.ledger,
            checkpointer=env.checkpointer,
        )
        out = env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
        return {"last": str(out["messages"][-1].content)}
    finally:
        crm.close()
        env.close()


def _caught_up(primary_dsn: str) -> None:
    """Return once the standby has flushed all the log the primary had written when called."""
    import psycopg

    deadline = time.monotonic() + scaled(20)
    with psycopg.connect(primary_dsn, autocommit=True) as conn:
        written = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
        assert written is not None
        target = written[0]
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT flush_lsn >= %s::pg_lsn FROM pg_stat_replication", (target,)
            ).fetchone()
            if row is not None and row[0]:
                return
            time.sleep(0.01)
    raise RuntimeError("the standby never caught up")


def unkeyed_run(
    url: str,
    crm_path: str,
    start: bool,
    primary: str,
    walsender: int,
    prepare_synchronous: str = "ON",
    waited: str = "",
) -> None:
    """Run or resume thread t1: a close sent without an idempotency key (a provider that
    keys nothing). Starting, the checkpoint that holds the model's tool call streams to the
    standby, then the walsender is frozen before the ledger's first write for the call.

    ``waited``: a file; a thread then watches the primary for a commit waiting for the
    standby (``SyncRep``), writes what it saw there, and thaws the walsender."""
    from langgraph_effects.ledger.postgres import PostgresLedger

    crm = FakeCRM(crm_path)

    @effect("crm.close_case", target=lambda a: a["case_id"])
    def close_case(case_id: str, resolution: str) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution)

    def before_the_ledger(request: Any, execute: Callable[[Any], Any]) -> Any:
        if start:
            _caught_up(primary)
            freeze(walsender)
            if waited:
                threading.Thread(
                    target=_thaw_on_sync_rep, args=(primary, walsender, waited)
                ).start()
        return execute(request)

    env = Env("postgres", "sync", url=url)
    env.ledger = PostgresLedger(env.checkpointer.conn, prepare_synchronous=prepare_synchronous)  # type: ignore[arg-type]
    try:
        graph = build_graph(
            [close_case],
            [call("close_case", "call-a", case_id="A", resolution="fixed")],
            ledger=env.ledger,
            checkpointer=env.checkpointer,
            node_kwargs={"wrap_tool_call": before_the_ledger},
        )
        env.invoke(graph, {"messages": [("user", "close A")]} if start else None, CFG)
    finally:
        crm.close()
        env.close()


def _thaw_on_sync_rep(primary: str, walsender: int, waited: str) -> None:
    """Wait for a backend of the primary whose commit waits for the standby; write what
    its statement was (or that none waited) to ``waited``; thaw the walsender."""
    import psycopg

    seen = "none waited"
    deadline = time.monotonic() + scaled(10)
    try:
        with psycopg.connect(primary, autocommit=True) as conn:
            while time.monotonic() < deadline:
                row = conn.execute(
                    "SELECT query FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
                ).fetchone()
                if row is not None:
                    seen = str(row[0])
                    break
                time.sleep(0.01)
    finally:
        Path(waited).write_text(seen)
        os.kill(walsender, signal.SIGCONT)


def _records(url: str) -> list[str]:
    from langgraph_effects.ledger.postgres import PostgresLedger

    with PostgresLedger.from_conn_string(url) as ledger:
        return [op.status.value for op in ledger.list(tenant_id="default")]


@pytest.mark.slow
@pytest.mark.parametrize(
    "point", [CrashPoint.AFTER_CLAIM, CrashPoint.AFTER_PROVIDER, CrashPoint.AFTER_RECEIPT]
)
def test_a_failover_at_each_crash_point_keeps_the_write_ahead_and_sends_once(
    cluster: Cluster, tmp_path: Path, point: CrashPoint
) -> None:
    """The worker and the primary die together at ``point``; the standby is promoted. The
    write-ahead record is there (synchronous standby); the resume on the same URL settles
    the call: one closure at the CRM, no duplicate."""
    crm_path = tmp_path / "crm.db"
    FakeCRM(crm_path).close()
    died = run_in_forked_child(
        failover_run, cluster.url, str(crm_path), True, crash_at=point, mode="kill"
    )
    assert died.crashed_at == point, died.error
    cluster.fail_over()

    kept = _records(cluster.url)  # read on the promoted standby
    if point is CrashPoint.AFTER_RECEIPT:
        assert kept in (["confirmed"], ["dispatching"])  # a relaxed receipt may be lost
    else:
        assert kept == ["dispatching"]  # the write-ahead record, kept
    resumed = failover_run(cluster.url, str(crm_path), False)  # not the killed process
    assert resumed["statuses"] == ["confirmed"]
    with FakeCRM(crm_path) as crm:
        assert crm.effects == 1
        assert crm.duplicates == 0


def _primary_waits(cluster: Cluster, event: str) -> bool:
    """A backend of the primary waits for ``event`` (``SyncRep``: a commit waiting for the
    synchronous standby) in a statement of the ledger."""
    import psycopg

    with psycopg.connect(Cluster.dsn(cluster.ports[0]), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = %s AND query LIKE %s",
            (event, "%lge_operations%"),
        ).fetchone()
    return row is not None and row[0] > 0


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_relaxed_receipt_the_standby_never_received_is_reconciled_never_resent(
    cluster: Cluster, tmp_path: Path, mode: str
) -> None:
    """The documented settings (a synchronous standby, receipts ``"NORMAL"``), the loss made
    certain: the primary's walsender is frozen once the CRM answered, so the receipt commits
    on the primary alone (it does not wait for the standby); the worker is killed after the
    receipt, the primary's machine dies (every process SIGKILLed, nothing more streamed), the
    standby is promoted. The write-ahead record is there, the receipt is not; the resume
    takes the call over and reconciles it: one closure, the CRM asked once more (the lookup),
    nothing resent.

    The primary's walsender, not the standby's walreceiver: a frozen receiver still gets
    what the primary sent into its socket's buffer, and writes it once it runs again."""
    crm_path = tmp_path / "crm.db"
    FakeCRM(crm_path).close()
    died = run_in_forked_child(
        failover_run,
        *(cluster.url, str(crm_path), True, "NORMAL", cluster.walsender(), mode),
        crash_at=CrashPoint.AFTER_RECEIPT,
        mode="kill",
    )
    assert died.crashed_at == CrashPoint.AFTER_RECEIPT, died.error  # the receipt committed
    cluster.lose_primary()

    assert _records(cluster.url) == ["dispatching"]  # the write-ahead kept, the receipt lost
    resumed = failover_run(cluster.url, str(crm_path), False, mode=mode)
    assert resumed == {"statuses": ["confirmed"], "attempts": [1]}
    with FakeCRM(crm_path) as crm:
        stats = crm.stats()
    assert (stats.effects, stats.duplicates, stats.replays) == (1, 0, 0)  # acted once, no resend
    assert stats.requests == 2  # the close, then the reconciler's lookup


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_full_receipt_waits_for_the_standby_and_survives_the_failover(
    cluster: Cluster, tmp_path: Path, mode: str
) -> None:
    """The same schedule with receipts ``"FULL"``: with the walsender frozen the receipt's
    commit waits for the standby (``SyncRep``) and the worker never gets past it; thawed, it
    streams, the commit returns, the worker is killed after the receipt and the primary's
    machine dies. The promoted standby holds the receipt: the resume replays it, the CRM is
    not asked again."""
    crm_path = tmp_path / "crm.db"
    FakeCRM(crm_path).close()
    walsender = cluster.walsender()
    child = start_forked_child(
        failover_run,
        *(cluster.url, str(crm_path), True, "FULL", walsender, mode),
        crash_at=CrashPoint.AFTER_RECEIPT,
        mode="kill",
    )
    try:
        deadline = time.monotonic() + scaled(30)
        while not _primary_waits(cluster, "SyncRep"):
            assert child.process.is_alive(), "the worker got past the receipt's commit"
            assert time.monotonic() < deadline, "the receipt's commit never waited"
            time.sleep(0.02)
        time.sleep(0.3)  # still waiting: the commit blocks while nothing streams
        assert child.process.is_alive()
        assert _primary_waits(cluster, "SyncRep")
    finally:
        os.kill(walsender, signal.SIGCONT)
    died = child.wait()
    assert died.crashed_at == CrashPoint.AFTER_RECEIPT, died.error
    cluster.lose_primary()

    assert _records(cluster.url) == ["confirmed"]  # the receipt is on the promoted standby
    resumed = failover_run(cluster.url, str(crm_path), False, mode=mode)
    assert resumed == {"statuses": ["confirmed"], "attempts": [1]}
    with FakeCRM(crm_path) as crm:
        stats = crm.stats()
    assert (stats.effects, stats.duplicates, stats.replays, stats.requests) == (1, 0, 0, 1)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_worker_that_lives_through_the_failover_keeps_its_receipt(
    cluster: Cluster, tmp_path: Path, mode: str
) -> None:
    """The primary dies and the standby is promoted while the worker is inside the provider
    call; the worker lives. Its receipt's commit meets the dropped connection and is tried
    again on a fresh one, which the multi-host URL takes to the promoted standby: the record
    is confirmed there and the run goes on to the model's answer; a resume replays it: one
    closure, the CRM never asked again."""
    crm_path, flag, go = tmp_path / "crm.db", tmp_path / "answered", tmp_path / "go"
    FakeCRM(crm_path).close()
    child = start_forked_child(live_run, cluster.url, str(crm_path), str(flag), str(go), mode)
    try:
        deadline = time.monotonic() + scaled(60)
        while not flag.exists():
            assert child.process.is_alive(), "the worker ended before the CRM answered"
            assert time.monotonic() < deadline, "the CRM never answered"
            time.sleep(0.01)
        cluster.fail_over()
    finally:
        go.write_text("go")
    lived = child.wait()
    assert lived.ok, lived.error
    assert lived.value == {"last": "done"}  # the run went on to the model's answer
    assert _records(cluster.url) == ["confirmed"]  # the receipt, on the promoted standby
    resumed = failover_run(cluster.url, str(crm_path), False, mode=mode)
    assert resumed == {"statuses": ["confirmed"], "attempts": [1]}
    with FakeCRM(crm_path) as crm:
        stats = crm.stats()
    assert (stats.effects, stats.duplicates, stats.replays, stats.requests) == (1, 0, 0, 1)


@pytest.mark.slow
@pytest.mark.parametrize(
    "standby",
    ["asynchronous", "synchronous, commits local, prepare_synchronous='SERVER'"],
    ids=["asynchronous", "local-opted-out"],
)
def test_an_asynchronous_standby_can_lose_an_acknowledged_write_ahead_record_and_sends_again(
    template: Path, tmp_path: Path, standby: str
) -> None:
    """Why ``docs/production-failover.md`` calls an asynchronous standby (``synchronous_standby_
    names = ''``) unsafe for effects (the write-ahead record's ``synchronous_commit = on``
    waits for no standby), and a synchronous one whose commits are ``local`` for the
    ledger's database no better once the ledger keeps the session's setting
    (``prepare_synchronous="SERVER"``, the opt-out), shown: the checkpoint holding the
    model's tool call has streamed; the walsender is frozen; the write-ahead record and the
    claim commit on the primary alone (acknowledged: nothing waits for the standby), the CRM
    acts, the worker is killed after the provider and the primary's machine dies. The promoted
    standby has the tool call and no record of it: the resume sends it again. A provider
    without a key closes the case twice (one honouring the key inside its window would answer
    from it)."""
    import psycopg

    crm_path = tmp_path / "crm.db"
    FakeCRM(crm_path).close()
    with _cluster(template, synchronous=standby != "asynchronous") as cluster:
        primary = Cluster.dsn(cluster.ports[0])
        if standby != "asynchronous":
            with psycopg.connect(primary, autocommit=True) as conn:
                conn.execute("ALTER DATABASE postgres SET synchronous_commit = local")
        died = run_in_forked_child(
            unkeyed_run,
            *(cluster.url, str(crm_path), True, primary, cluster.walsender()),
            "ON" if standby == "asynchronous" else "SERVER",
            crash_at=CrashPoint.AFTER_PROVIDER,
            mode="kill",
        )
        assert died.crashed_at == CrashPoint.AFTER_PROVIDER, died.error
        cluster.lose_primary()

        assert _records(cluster.url) == []  # the acknowledged write-ahead record is gone
        unkeyed_run(cluster.url, str(crm_path), False, primary, 0)
        assert _records(cluster.url) == ["confirmed"]
    with FakeCRM(crm_path) as crm:
        assert (crm.effects, crm.duplicates) == (2, 1)  # sent again: the hazard, as documented


@pytest.mark.slow
def test_a_synchronous_standby_keeps_the_write_ahead_record_though_commits_are_local(
    template: Path, tmp_path: Path
) -> None:
    """The same schedule as the ``local`` hazard above, with the default
    ``prepare_synchronous="ON"``: the ledger's database commits ``local``, the walsender is
    frozen before the ledger's first write, and the write-ahead record's commit is raised to
    ``on`` inside its statement, so it waits for the standby (``SyncRep``, seen in
    ``pg_stat_activity``) where under ``local`` it returned at once. Thawed, it commits;
    the CRM acts; the worker is killed after the provider and the primary's machine dies.
    The promoted standby holds the record: the resume meets it and does not send again
    (one closure, no duplicate)."""
    import psycopg

    crm_path = tmp_path / "crm.db"
    waited = tmp_path / "waited.txt"
    FakeCRM(crm_path).close()
    with _cluster(template, synchronous=True) as cluster:
        primary = Cluster.dsn(cluster.ports[0])
        with psycopg.connect(primary, autocommit=True) as conn:
            conn.execute("ALTER DATABASE postgres SET synchronous_commit = local")
        died = run_in_forked_child(
            unkeyed_run,
            *(cluster.url, str(crm_path), True, primary, cluster.walsender()),
            "ON",
            str(waited),
            crash_at=CrashPoint.AFTER_PROVIDER,
            mode="kill",
        )
        assert died.crashed_at == CrashPoint.AFTER_PROVIDER, died.error
        # the write-ahead commit waited for the standby (under "SERVER" it does not, and the
        # worker dies after the provider while the watcher still looks: no file)
        assert waited.exists(), "the write-ahead record's commit never waited for the standby"
        assert "lge_operations" in waited.read_text()
        cluster.lose_primary()

        kept = _records(cluster.url)
        assert kept == ["dispatching"]  # the acknowledged write-ahead record survived
        unkeyed_run(cluster.url, str(crm_path), False, primary, 0)
        assert _records(cluster.url) != []
    with FakeCRM(crm_path) as crm:
        assert (crm.effects, crm.duplicates) == (1, 0)  # not sent again


def test_a_wrong_password_fails_at_once_naming_the_cause(template: Path) -> None:
    """A server of this module's own, which checks passwords: a ledger opened with a wrong one
    fails at once with the server's reason, and the message holds no password."""
    from langgraph_effects.errors import LedgerUnavailable
    from langgraph_effects.ledger.postgres import PostgresLedger

    server = _private_dir()
    data, port = server / "data", _free_port()
    subprocess.run([*_AS_POSTGRES, "cp", "-a", str(template), str(data)], check=True)
    try:
        Cluster._configure(data, port, "")
        _pg("pg_ctl", "-D", str(data), "-l", f"{data}.log", "-w", "start")
        import psycopg

        with psycopg.connect(Cluster.dsn(port), autocommit=True) as conn:
            conn.execute("ALTER ROLE postgres PASSWORD 'right-one'")
        hba = "host all all 127.0.0.1/32 scram-sha-256\n"
        subprocess.run(
            [*_AS_POSTGRES, "sh", "-c", f"cat > {data}/pg_hba.conf"],
            input=hba,
            text=True,
            check=True,
        )
        _pg("pg_ctl", "-D", str(data), "reload")
        url = f"postgresql://postgres:wrong-one@127.0.0.1:{port}/postgres"
        with (
            pytest.raises(LedgerUnavailable, match="password authentication failed") as refused,
            PostgresLedger.from_conn_string(url),
        ):
            pass
        assert "wrong-one" not in str(refused.value)
    finally:
        with contextlib.suppress(RuntimeError):
            _pg("pg_ctl", "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(server, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("prepare_synchronous", ["ON", "SERVER"])
def test_a_rejection_before_dispatch_waits_for_the_standby_though_commits_are_local(
    template: Path, prepare_synchronous: str
) -> None:
    """A person's rejection of an approved call, before it was sent, under a synchronous
    standby and ``synchronous_commit = local`` for the ledger's database: the approval has
    streamed, the walsender is frozen, and the rejection is given. By default its commit is
    raised to ``on`` and waits for the standby (``SyncRep``); thawed, it commits; the
    primary's machine dies and the promoted standby holds the record ``rejected``. Under
    ``prepare_synchronous="SERVER"`` the rejection commits ``local`` at once, acknowledged,
    and the promoted standby holds the call ``prepared`` and approved: the next run would
    send what the person refused (the hazard the floor removes)."""
    import psycopg

    from langgraph_effects import Decision, Resolution
    from langgraph_effects.ledger.postgres import PostgresLedger
    from langgraph_effects.testing.contract import make_draft

    with _cluster(template, synchronous=True) as cluster:
        primary = Cluster.dsn(cluster.ports[0])
        with psycopg.connect(primary, autocommit=True) as conn:
            conn.execute("ALTER DATABASE postgres SET synchronous_commit = local")
        ledger = PostgresLedger.open(cluster.url, prepare_synchronous=prepare_synchronous)  # type: ignore[arg-type]
        try:
            ledger.setup()
            draft = make_draft("op-1")
            ledger.prepare(draft)
            ledger.approve("tenant-a", "op-1", payload_digest=draft.payload_digest, by="alice")
            _caught_up(primary)
            walsender = cluster.walsender()
            freeze(walsender)
            refusal = Resolution(decision=Decision.REJECT, by="alice", reason="do not refund")
            rejecting = threading.Thread(target=ledger.resolve, args=("tenant-a", "op-1", refusal))
            rejecting.start()
            try:
                if prepare_synchronous == "ON":
                    deadline = time.monotonic() + scaled(10)
                    while not _primary_waits(cluster, "SyncRep"):
                        assert time.monotonic() < deadline, "the rejection never waited"
                        time.sleep(0.01)
                    assert rejecting.is_alive()  # not acknowledged while nothing streams
                else:
                    rejecting.join(scaled(10))
                    assert not rejecting.is_alive()  # acknowledged at once, on the primary alone
            finally:
                if prepare_synchronous == "ON":
                    os.kill(walsender, signal.SIGCONT)
            rejecting.join(scaled(10))
            assert not rejecting.is_alive()
            cluster.lose_primary()
        finally:
            ledger.close()
        with PostgresLedger.from_conn_string(cluster.url) as promoted:
            [op] = promoted.list(tenant_id="tenant-a")
    if prepare_synchronous == "ON":
        assert op.status.value == "rejected"  # the last word before dispatch, kept
    else:
        assert (op.status.value, op.authorization_ref is not None) == ("prepared", True)
