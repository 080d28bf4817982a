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
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from _crash_child import CFG, _tools
from _crash_child import run as resume
from _graphs import Env, build_graph, call

from langgraph_effects.ledger.sqlite import SQLiteLedger
from langgraph_effects.testing.faults import CrashPoint, run_in_child
from langgraph_effects.testing.providers import FakeCRM


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
    died = run_in_child(
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

    resumed = run_in_child(resume, "sqlite", mode, str(app), str(crm_path), flavour, False)
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
    died = run_in_child(
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
    resumed = run_in_child(resume, "postgres", mode, pg_url, str(crm_path), "reconcile", False)
    assert resumed.ok, resumed.error
    assert resumed.value["statuses"] == ["confirmed"]
    assert resumed.value["attempts"] == [1]
    with FakeCRM(crm_path) as crm:
        assert crm.effects == 1
        assert crm.duplicates == 0


def batch_run(kind: str, mode: str, where: str, crm_path: str, start: bool) -> dict[str, Any]:
    """Run (``start``) or resume thread t1: two parallel calls in one task (``tools_condition``),
    whose receipts the task holds and commits together (``decide.deferred``)."""
    env = Env(kind, mode, path=Path(where), url=where)
    crm = FakeCRM(crm_path)
    try:
        graph = build_graph(
            _tools(crm, "reconcile"),
            [
                call("close_case", "call-a", case_id="A", resolution="fixed"),
                call("close_case", "call-b", case_id="B", resolution="fixed"),
            ],
            ledger=env.ledger,
            checkpointer=env.checkpointer,
            per_call=False,
        )
        env.invoke(graph, {"messages": [("user", "close A and B")]} if start else None, CFG)
        ops = env.ops()
        return {"statuses": [o.status.value for o in ops], "attempts": [o.attempts for o in ops]}
    finally:
        crm.close()
        env.close()


@pytest.mark.parametrize(
    ("kind", "mode"), [("sqlite", "sync"), ("sqlite", "async"), ("postgres", "sync")]
)
def test_a_held_receipt_lost_with_its_process_is_reconciled_never_resent(
    kind: str, mode: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two parallel calls in one task: both providers answered, both receipts are held for
    the task's commit, and the process is killed at the second (``after_receipt``, hit 2):
    nothing of them was committed. A fresh process takes both records over and reconciles
    them; the CRM counts one effect per case, none sent again."""
    where = str(tmp_path / "app.db") if kind == "sqlite" else request.getfixturevalue("pg_url")
    crm_path = tmp_path / "crm.db"
    FakeCRM(crm_path).close()
    died = run_in_child(
        batch_run,
        kind,
        mode,
        where,
        str(crm_path),
        True,
        crash_at=CrashPoint.AFTER_RECEIPT,
        mode="kill",
        hit=2,
    )
    assert died.crashed_at == CrashPoint.AFTER_RECEIPT, died.error
    if kind == "sqlite":
        assert _status(Path(where)) == ["dispatching", "dispatching"]  # held, not committed
    with FakeCRM(crm_path) as crm:
        assert crm.effects == 2
    resumed = run_in_child(batch_run, kind, mode, where, str(crm_path), False)
    assert resumed.ok, resumed.error
    assert resumed.value["statuses"] == ["confirmed", "confirmed"]
    assert resumed.value["attempts"] == [1, 1]  # the providers were not called again
    with FakeCRM(crm_path) as crm:
        assert crm.effects == 2
        assert crm.duplicates == 0
