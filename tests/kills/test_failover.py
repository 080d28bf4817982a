"""A PostgreSQL failover is survived (issue 23): 0 duplicates, every write-ahead record kept.

The test starts its own cluster on loopback, never the shared server: ``initdb``
once per module into a temporary directory (as the ``postgres`` user when run as
root, which ``initdb`` refuses), then per case a primary copied from it and a
streaming standby made with ``pg_basebackup``, synchronous
(``synchronous_standby_names = '*'``), each on a free port. The ledger and the
saver share one pool on a multi-host URL (``host=a,b port=p,q
target_session_attrs=read-write``), as ``docs/production-failover.md`` says.

A child process runs the graph and is SIGKILLed at a crash point (after the
write-ahead record, after the provider, after the receipt); the primary is
killed at once (``pg_ctl -m immediate``) and the standby promoted. Every
write-ahead record is on the standby; the receipt committed relaxed
(``synchronous_commit = off``) may or may not be. Another process (the test's
own) resumes on the same URL, which now reaches the promoted standby: the fake
CRM counts one effect and no duplicate at every point, a lost receipt reconciled.

The same template serves one more server, which checks passwords: a ledger opened
with a wrong one fails at once with the server's reason (issue 23, finding 9).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _graphs import Env, build_graph, call
from _pg import unavailable

from langgraph_effects import EffectContext, Evidence, ProviderContract, effect
from langgraph_effects.testing.faults import CrashPoint, scaled
from langgraph_effects.testing.providers import FakeCRM
from langgraph_effects.testing.scenario import run_in_forked_child

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
    """A primary and a synchronous streaming standby on loopback, in a temporary directory."""

    def __init__(self, template: Path) -> None:
        self.root = _private_dir()
        self.primary, self.standby = self.root / "primary", self.root / "standby"
        self.ports = (_free_port(), _free_port())
        self.running: list[Path] = []
        try:
            self._build(template)
        except BaseException:
            self.close()  # never leave a server of ours running
            raise

    def _build(self, template: Path) -> None:
        subprocess.run([*_AS_POSTGRES, "cp", "-a", str(template), str(self.primary)], check=True)
        self._configure(self.primary, self.ports[0], "synchronous_standby_names = '*'")
        self._start(self.primary)
        _pg(
            "pg_basebackup",
            *("-h", "127.0.0.1", "-p", str(self.ports[0]), "-U", "postgres"),
            *("-D", str(self.standby), "-R", "-X", "stream", "-c", "fast"),
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

        deadline = time.monotonic() + scaled(20)
        with psycopg.connect(self.dsn(self.ports[0]), autocommit=True) as conn:
            while time.monotonic() < deadline:
                row = conn.execute("SELECT sync_state FROM pg_stat_replication").fetchone()
                if row is not None and row[0] == "sync":
                    return
                time.sleep(0.05)
        raise RuntimeError("the standby never became a synchronous standby")

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

    def close(self) -> None:
        for data in self.running:
            with contextlib.suppress(RuntimeError):  # already down: nothing to stop
                _pg("pg_ctl", "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def cluster(template: Path) -> Iterator[Cluster]:
    made = Cluster(template)
    try:
        yield made
    finally:
        made.close()


def _close_tool(crm: FakeCRM) -> Any:
    """Close a case: a reconciler, and a 24 h key window the CRM honours."""

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
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    return close_case


def failover_run(url: str, crm_path: str, start: bool) -> dict[str, Any]:
    """Run (``start``) or resume thread t1 on ``url``: ledger and saver on one pool."""
    env = Env("postgres", "sync", url=url)
    crm = FakeCRM(crm_path)
    try:
        graph = build_graph(
            [_close_tool(crm)],
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
