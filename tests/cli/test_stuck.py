"""The stuck-operation sweep (``find_stuck`` / ``afind_stuck``) and ``langgraph-effects stuck``."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest
from typer.testing import CliRunner, Result

from langgraph_effects._owners import current_owner
from langgraph_effects.cli import ExitCode, app
from langgraph_effects.core.model import LeaseOwner, OperationStatus, utcnow
from langgraph_effects.ledger.sqlite import AsyncSQLiteLedger, SQLiteLedger
from langgraph_effects.ledger.sweep import afind_stuck, find_stuck
from langgraph_effects.testing import FakeClock, make_draft
from langgraph_effects.testing.faults import scaled

S = OperationStatus
TENANT = "tenant-a"


def _dead_owner() -> LeaseOwner:
    """An owner on this host whose process is gone: this pid, another start time (pid reuse)."""
    me = current_owner()
    return LeaseOwner(host=me.host, pid=os.getpid(), started_at=me.started_at - 1000, nonce="x")


def populate(ledger: Any, clock: FakeClock) -> None:
    """op-far-old (another host, 30 s lease), then 30 minutes later, each with a 1 h lease:
    op-dead (owner gone), op-live (this process), op-far (another host: nothing provable),
    op-done (confirmed), op-unknown, and op-other of tenant-b (owner gone)."""
    far = LeaseOwner(host=f"not-{socket.gethostname()}", pid=1, started_at=1.0, nonce="y")
    hour = timedelta(hours=1)
    ledger.prepare(make_draft("op-far-old"), owner=far, lease_for=timedelta(seconds=30))
    clock.advance(timedelta(minutes=30))
    ledger.prepare(make_draft("op-dead"), owner=_dead_owner(), lease_for=hour)
    ledger.prepare(make_draft("op-live"), owner=current_owner(), lease_for=hour)
    ledger.prepare(make_draft("op-far"), owner=far, lease_for=hour)
    done = ledger.prepare(make_draft("op-done"), owner=_dead_owner()).operation
    ledger.confirm(TENANT, "op-done", token=done.fencing_token, result={"ok": True})
    gone = ledger.prepare(make_draft("op-unknown"), owner=current_owner()).operation
    ledger.mark_unknown(TENANT, "op-unknown", token=gone.fencing_token, reason="timeout")
    ledger.prepare(make_draft("op-other", tenant_id="tenant-b"), owner=_dead_owner())


@pytest.fixture
def clock() -> FakeClock:
    """The ledger's clock, an hour behind the real one; it does not tick, so leases are
    judged exactly."""
    return FakeClock(utcnow() - timedelta(hours=1))


@pytest.fixture
def db(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[SQLiteLedger, str]]:
    path = tmp_path / "effects.db"
    with SQLiteLedger.from_conn_string(str(path), clock=clock.now) as ledger:
        ledger.setup()
        populate(ledger, clock)
        yield ledger, f"sqlite:///{path}"


def _later(clock: FakeClock) -> datetime:
    """Five minutes after the last prepare: op-far-old's lease is over, the others' are not."""
    return clock.now() + timedelta(minutes=5)


def test_the_sweep_lists_dead_owners_and_expired_leases_only(db: Any, clock: FakeClock) -> None:
    """Owner gone or lease over: stuck. A live owner, another host's live lease, terminal and
    unknown operations: not stuck. The tenant filter narrows it."""
    ledger, _ = db
    sweep = find_stuck(ledger, now=clock.now() + timedelta(days=2))
    found = {f.operation.operation_id: f for f in sweep.stuck}
    # Two days on, every lease is over: all five dispatching operations are stuck.
    assert set(found) == {"op-dead", "op-live", "op-far", "op-far-old", "op-other"}
    assert sweep.scanned == 5
    assert sweep.complete
    # An expired lease does not hide what this host can tell about its owner: gone, still
    # running (this process), or unknowable (another host).
    assert {name: f.owner_dead for name, f in found.items()} == {
        "op-dead": True,
        "op-other": True,
        "op-live": False,
        "op-far": None,
        "op-far-old": None,
    }
    assert found["op-dead"].why.endswith("; the lease owner's process is gone")

    sweep = find_stuck(ledger, now=_later(clock))
    found = {f.operation.operation_id: f for f in sweep.stuck}
    assert set(found) == {"op-dead", "op-far-old", "op-other"}
    assert found["op-dead"].owner_dead
    assert found["op-dead"].why == "the lease owner's process is gone"
    assert found["op-far-old"].owner_dead is None
    assert found["op-far-old"].why.startswith("the lease expired at ")
    only_a = find_stuck(ledger, tenant_id=TENANT, now=_later(clock))
    assert {f.operation.operation_id for f in only_a.stuck} == {"op-dead", "op-far-old"}


def test_the_sweep_says_when_it_did_not_examine_everything(db: Any, clock: FakeClock) -> None:
    """With --scan below the number of dispatching operations the sweep says it is partial."""
    ledger, _ = db
    sweep = find_stuck(ledger, now=_later(clock), scan=2)
    assert sweep.scanned == 2
    assert not sweep.complete


def test_the_async_sweep_finds_the_same(db: Any, clock: FakeClock, tmp_path: Path) -> None:
    """``afind_stuck`` on the async ledger of the same file answers like ``find_stuck``."""
    ledger, _ = db

    async def sweep() -> set[str]:
        async with AsyncSQLiteLedger.from_conn_string(str(tmp_path / "effects.db")) as aledger:
            found = await afind_stuck(aledger, now=_later(clock))
        return {f.operation.operation_id for f in found.stuck}

    expected = {f.operation.operation_id for f in find_stuck(ledger, now=_later(clock)).stuck}
    assert asyncio.run(sweep()) == expected


# -- the CLI ---------------------------------------------------------------------------


def cli(url: str, *args: str) -> Result:
    env = {"LGE_LEDGER_URL": url, "LGE_DB": None, "LGE_TENANT": None, "LGE_IDENTITY": None}
    env["COLUMNS"] = "200"  # one line per row, whatever terminal runs the tests
    return CliRunner().invoke(app, list(args), env=env)


def test_cli_stuck_lists_them_with_the_reason(db: Any) -> None:
    """``stuck`` prints one row per stuck operation with why; ``--json`` has stable keys."""
    _, url = db
    result = cli(url, "stuck", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = {r["operation_id"]: r for r in data["stuck"]}
    # The real clock is an hour past the ledger's: op-far-old's 30 s lease is long over.
    assert {"op-dead", "op-far-old", "op-other"} <= set(rows)
    assert "op-live" not in rows
    assert "op-far" not in rows
    assert (data["count"], data["scanned"], data["complete"]) == (len(rows), 5, True)
    dead = rows["op-dead"]
    assert (dead["status"], dead["owner_dead"], dead["marked_unknown"]) == (
        "dispatching",
        True,
        False,
    )
    assert dead["lease_owner"].startswith(socket.gethostname() + "|")

    text = cli(url, "stuck", "--tenant", TENANT, "--full-ids")
    assert text.exit_code == 0, text.output
    assert "op-dead" in text.stdout
    assert "the lease owner's process is gone" in text.stdout
    assert "op-other" not in text.stdout


def test_cli_stuck_says_a_killed_owner_is_dead_after_its_lease_expired(tmp_path: Path) -> None:
    """A real process, killed while it held a lease that has since expired: ``stuck --json``
    says ``owner_dead: true`` (not false because the lease also expired)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        started = round(psutil.Process(child.pid).create_time(), 2)
    finally:
        child.kill()
        child.wait(timeout=scaled(60))
    owner = LeaseOwner(host=current_owner().host, pid=child.pid, started_at=started, nonce="k")
    path = tmp_path / "effects.db"
    with SQLiteLedger.from_conn_string(str(path)) as ledger:
        ledger.setup()
        ledger.prepare(make_draft("op-killed"), owner=owner, lease_for=timedelta(milliseconds=1))
    result = cli(f"sqlite:///{path}", "stuck", "--json")
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)["stuck"]
    assert (row["operation_id"], row["owner_dead"]) == ("op-killed", True)
    assert row["why"].startswith("the lease expired at ")


def test_cli_stuck_mark_unknown_hands_them_to_resolve(db: Any) -> None:
    """``--mark-unknown --reason`` moves each to unknown under the operator's name; ``resolve``
    may then decide it. Without --reason it is a usage error and changes nothing."""
    ledger, url = db
    refused = cli(url, "stuck", "--tenant", TENANT, "--mark-unknown")
    assert refused.exit_code == ExitCode.USAGE
    assert ledger.get(TENANT, "op-dead").status is S.DISPATCHING

    result = cli(url, "stuck", "--tenant", TENANT, "--mark-unknown", "--reason", "thread abandoned")
    assert result.exit_code == 0, result.output
    assert "op-dead is now unknown" in result.stdout
    op = ledger.get(TENANT, "op-dead")
    assert op.status is S.UNKNOWN
    last = ledger.events(TENANT, "op-dead")[-1]
    assert last.kind.value == "mark_unknown"
    assert "thread abandoned" in last.detail["reason"]
    assert "verified os:" in last.detail["reason"]
    assert ledger.get("tenant-b", "op-other").status is S.DISPATCHING  # another tenant

    decided = cli(
        url, "resolve", "op-dead", "--tenant", TENANT, "--confirm", "--reason", "CRM shows it"
    )
    assert decided.exit_code == 0, decided.output
    assert ledger.get(TENANT, "op-dead").status is S.CONFIRMED
    again = cli(url, "stuck", "--tenant", TENANT, "--json")
    assert "op-dead" not in {r["operation_id"] for r in json.loads(again.stdout)["stuck"]}


def test_cli_stuck_with_nothing_stuck_says_so(tmp_path: Path) -> None:
    """An empty sweep prints how many it examined."""
    path = tmp_path / "empty.db"
    with SQLiteLedger.from_conn_string(str(path)) as ledger:
        ledger.setup()
    result = cli(f"sqlite:///{path}", "stuck")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "no stuck operations (examined 0 dispatching)"


class ReceiptDuringSweep(SQLiteLedger):
    """A real ledger whose owner's receipt lands just after the sweep read the rows (the race
    ``--mark-unknown`` must lose): ``list`` returns, then op-dead is confirmed."""

    def list(self, **kwargs: Any) -> Any:
        rows = super().list(**kwargs)
        for op in rows:
            if op.operation_id == "op-dead" and op.status is S.DISPATCHING:
                self.confirm(TENANT, "op-dead", token=op.fencing_token, result={"ok": True})
        return rows


def test_cli_stuck_mark_unknown_loses_to_a_late_receipt(tmp_path: Path, clock: FakeClock) -> None:
    """A receipt recorded between the sweep and the mark wins: that operation stays confirmed,
    the command says it was refused and exits 4; the others are marked."""
    path = tmp_path / "effects.db"
    with ReceiptDuringSweep.from_conn_string(str(path), clock=clock.now) as ledger:
        ledger.setup()
        populate(ledger, clock)
        result = CliRunner().invoke(
            app,
            ["stuck", "-t", TENANT, "--mark-unknown", "--reason", "thread abandoned", "--json"],
            obj=ledger,
            env={"LGE_LEDGER_URL": None, "LGE_DB": None, "LGE_IDENTITY": None},
        )
        assert result.exit_code == ExitCode.REFUSED, result.output
        rows = {r["operation_id"]: r for r in json.loads(result.stdout)["stuck"]}
        assert rows["op-dead"]["marked_unknown"] is False
        assert "nothing was changed" in rows["op-dead"]["refused"]
        assert rows["op-far-old"]["marked_unknown"] is True
        assert ledger.get(TENANT, "op-dead").status is S.CONFIRMED
        assert ledger.get(TENANT, "op-far-old").status is S.UNKNOWN
