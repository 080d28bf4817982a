"""A receipt lost after the provider acted is settled by reconcile, never re-sent (issue 13).

Receipts commit without waiting for the disk by default (``receipt_synchronous``,
``ledger.base``, "Durability of receipts"). These tests kill real processes in
the window that leaves open and count effects at the fake provider:

* SQLite, a power loss after the receipt: the child's CRM call takes the
  file's durable image right after the provider acted (every commit before it
  was synchronous, and nothing commits until the receipt), the child confirms
  with its NORMAL receipt and is killed before the checkpoint records the tool's
  result (``after_receipt``). Putting the image back is what a power loss may
  leave of the file: the receipt's unsynced WAL frames gone. The receipt really
  was committed before (the killed child's file says ``confirmed``).
* PostgreSQL (the shared server is never crashed): the child is killed between
  the provider's answer and the confirm (``after_provider``), the state a
  receipt lost with the server leaves.

A fresh process resumes the thread: it takes the operation over, reconciles it
(``attempts`` stays 1: the provider is not called again), or without a
reconciler asks a person; the CRM counts one effect either way.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from _crash_child import CFG, _tools
from _crash_child import run as resume
from _graphs import Env, build_graph, call

from langgraph_effects.ledger.sqlite import SQLiteLedger
from langgraph_effects.testing.faults import CrashPoint
from langgraph_effects.testing.providers import FakeCRM
from langgraph_effects.testing.scenario import run_in_forked_child


class ImagingCRM(FakeCRM):
    """The fake CRM; right after each close it copies the ledger file's durable image."""

    ledger_file: str | None = None
    image: str | None = None

    def close_case(
        self, case_id: str, resolution: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        out = super().close_case(case_id, resolution, idempotency_key=idempotency_key)
        if self.ledger_file and self.image:
            # Every commit so far was synchronous (the write-ahead record, the
            # saver's checkpoints): the committed state is the durable state.
            src, dst = sqlite3.connect(self.ledger_file), sqlite3.connect(self.image)
            try:
                src.backup(dst)
            finally:
                src.close()
                dst.close()
        return out


def first_run(kind: str, mode: str, where: str, crm_path: str, flavour: str, image: str) -> None:
    """Start thread t1 (the child armed to die); with ``image``, image the file after the CRM."""
    env = Env(kind, mode, path=Path(where), url=where)
    crm = ImagingCRM(crm_path)
    crm.ledger_file, crm.image = (where, image) if image else (None, None)
    try:
        graph = build_graph(
            _tools(crm, flavour),
            [call("close_case", "call-a", case_id="A", resolution="fixed")],
            ledger=env.ledger,
            checkpointer=env.checkpointer,
        )
        env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    finally:
        crm.close()
        env.close()


def _status(path: Path) -> list[str]:
    with SQLiteLedger.from_conn_string(str(path)) as ledger:
        return [op.status.value for op in ledger.list(tenant_id="default")]


def _power_loss(path: Path, image: Path) -> None:
    """Leave of the file what was durable at ``image``: the later, unsynced WAL frames go."""
    for extra in ("-wal", "-shm"):
        Path(f"{path}{extra}").unlink(missing_ok=True)
    os.replace(image, path)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("flavour", ["reconcile", "bare"])
def test_sqlite_receipt_lost_to_a_power_loss_is_settled_never_resent(
    tmp_path: Path, mode: str, flavour: str
) -> None:
    """SQLite, ledger and saver in one file: the NORMAL receipt is committed, the process
    killed, the receipt lost; the resume reconciles (or asks), the CRM counts one effect."""
    app, image, crm_path = tmp_path / "app.db", tmp_path / "image.db", tmp_path / "crm.db"
    FakeCRM(crm_path).close()
    died = run_in_forked_child(
        first_run,
        "sqlite",
        mode,
        str(app),
        str(crm_path),
        flavour,
        str(image),
        crash_at=CrashPoint.AFTER_RECEIPT,
        mode="kill",
    )
    assert died.crashed_at == CrashPoint.AFTER_RECEIPT, died.error
    assert _status(app) == ["confirmed"]  # the receipt was committed, NORMAL

    _power_loss(app, image)
    assert _status(app) == ["dispatching"]  # ... and is gone: the provider acted

    resumed = run_in_forked_child(resume, "sqlite", mode, str(app), str(crm_path), flavour, False)
    assert resumed.ok, resumed.error
    out: dict[str, Any] = resumed.value
    assert out["attempts"] == [1]  # the provider was not called again
    if flavour == "reconcile":
        assert out["statuses"] == ["confirmed"]
        assert out["interrupts"] == []
    else:  # nothing to reconcile with, no key window: a person decides
        assert out["statuses"] == ["unknown"]
        assert [i["kind"] for i in out["interrupts"]] == ["effect_review"]
    with FakeCRM(crm_path) as crm:
        assert crm.effects == 1
        assert crm.duplicates == 0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_postgres_killed_before_the_receipt_is_durable_is_reconciled_never_resent(
    pg_url: str, tmp_path: Path, mode: str
) -> None:
    """PostgreSQL, default NORMAL receipts: killed after the provider acted, before the
    confirm; a fresh process reconciles it; the CRM counts one effect."""
    crm_path = tmp_path / "crm.db"
    FakeCRM(crm_path).close()
    died = run_in_forked_child(
        first_run,
        "postgres",
        mode,
        pg_url,
        str(crm_path),
        "reconcile",
        "",
        crash_at=CrashPoint.AFTER_PROVIDER,
        mode="kill",
    )
    assert died.crashed_at == CrashPoint.AFTER_PROVIDER, died.error
    resumed = run_in_forked_child(
        resume, "postgres", mode, pg_url, str(crm_path), "reconcile", False
    )
    assert resumed.ok, resumed.error
    assert resumed.value["statuses"] == ["confirmed"]
    assert resumed.value["attempts"] == [1]
    with FakeCRM(crm_path) as crm:
        assert crm.effects == 1
        assert crm.duplicates == 0


def slow_sibling_run(
    kind: str, mode: str, where: str, crm_path: str, flavour: str, start: bool
) -> Any:
    """Run (``start``) or resume thread t1: three parallel calls in one task
    (``tools_condition``). Starting, the call on case C closes it, then waits (3 s at
    most) for the calls on A and B to return and SIGKILLs its own process: a kill
    while a slow sibling is still in flight."""
    env = Env(kind, mode, path=Path(where), url=where)
    crm = FakeCRM(crm_path)
    returned = threading.Event()
    answered: list[str] = []

    def note(request: Any) -> None:
        answered.append(request.tool_call["args"]["case_id"])
        if {"A", "B"} <= set(answered):
            returned.set()

    def wrap(request: Any, execute: Any) -> Any:
        out = execute(request)
        note(request)
        return out

    async def awrap(request: Any, execute: Any) -> Any:
        out = await execute(request)
        note(request)
        return out

    [tool] = _tools(crm, flavour)
    if start:
        inner = tool.func

        def close_case(case_id: str, resolution: str, **kw: Any) -> Any:
            out = inner(case_id, resolution, **kw)
            if case_id == "C":  # the slow sibling: the provider acted, its answer is late
                returned.wait(3)
                os.kill(os.getpid(), signal.SIGKILL)
            return out

        tool.func = close_case
    try:
        graph = build_graph(
            [tool],
            [call("close_case", f"call-{c}", case_id=c, resolution="fixed") for c in "ABC"],
            ledger=None if flavour == "plain" else env.ledger,
            checkpointer=env.checkpointer,
            per_call=False,
            plain=flavour == "plain",
            node_kwargs={"wrap_tool_call": wrap, "awrap_tool_call": awrap},
        )
        env.invoke(graph, {"messages": [("user", "close A, B and C")]} if start else None, CFG)
        ops = [] if flavour == "plain" else env.ops()
        return {"statuses": [o.status.value for o in ops], "attempts": [o.attempts for o in ops]}
    finally:
        crm.close()
        env.close()


def _statuses(kind: str, where: str) -> dict[str, str]:
    """The records by case, read from the ledger the killed child left."""
    if kind == "sqlite":
        with SQLiteLedger.from_conn_string(where) as ledger:
            return {op.target: op.status.value for op in ledger.list(tenant_id="default")}
    from langgraph_effects.ledger.postgres import PostgresLedger

    with PostgresLedger.from_conn_string(where) as ledger:
        return {op.target: op.status.value for op in ledger.list(tenant_id="default")}


@pytest.mark.parametrize(
    ("kind", "mode"),
    [("sqlite", "sync"), ("sqlite", "async"), ("postgres", "sync")],
)
def test_a_kill_during_a_slow_sibling_loses_no_finished_receipt(
    kind: str, mode: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Three parallel calls in one task; A and B answer, C's provider acts and is slow, and
    the process is SIGKILLed while C is in flight: A's and B's receipts are already in the
    ledger (committed when their calls answered, never held for C); only C's, in flight, is
    lost. A fresh process replays A and B and reconciles C: three effects, none sent again."""
    where = str(tmp_path / "app.db") if kind == "sqlite" else request.getfixturevalue("pg_url")
    crm_path = tmp_path / "crm.db"
    FakeCRM(crm_path).close()
    died = run_in_forked_child(
        slow_sibling_run, kind, mode, where, str(crm_path), "reconcile", True
    )
    assert died.exitcode == -signal.SIGKILL, died.error
    assert _statuses(kind, where) == {"A": "confirmed", "B": "confirmed", "C": "dispatching"}
    with FakeCRM(crm_path) as crm:
        assert crm.effects == 3
    resumed = run_in_forked_child(
        slow_sibling_run, kind, mode, where, str(crm_path), "reconcile", False
    )
    assert resumed.ok, resumed.error
    assert resumed.value["statuses"] == ["confirmed"] * 3
    assert resumed.value["attempts"] == [1, 1, 1]  # no provider was called again
    with FakeCRM(crm_path) as crm:
        assert crm.effects == 3
        assert crm.duplicates == 0


def test_a_kill_during_a_slow_sibling_resends_everything_with_a_plain_tool_node(
    tmp_path: Path,
) -> None:
    """The control: the same kill under a plain ``ToolNode``; the resume runs the task
    again and closes A, B and C a second time."""
    where, crm_path = str(tmp_path / "app.db"), tmp_path / "crm.db"
    FakeCRM(crm_path).close()
    died = run_in_forked_child(
        slow_sibling_run, "sqlite", "sync", where, str(crm_path), "plain", True
    )
    assert died.exitcode == -signal.SIGKILL, died.error
    resumed = run_in_forked_child(
        slow_sibling_run, "sqlite", "sync", where, str(crm_path), "plain", False
    )
    assert resumed.ok, resumed.error
    with FakeCRM(crm_path) as crm:
        assert crm.effects == 6
        assert crm.duplicates == 3
