"""A receipt is never lost: a worker frozen past its lease comes back, and its answer is kept.

Issue 10, finding 5. Worker A (a real child process) claims the operation and
enters the provider call; the test freezes it with ``SIGSTOP`` past its lease.
Worker B resumes the thread: the lease is dead, the operation becomes
``unknown``, the reconciler finds nothing yet, and a review is pending. Then
``SIGCONT``: A's provider acts and A's fenced confirm is refused. The receipt is
recorded as evidence (an ``evidence`` event with the provider's answer), and:

* the operation still ``unknown``: the receipt is conclusive, it is confirmed;
* a person already answered ``reject``: terminal states never move, so it stays
  ``rejected``, the conflict is in the log (``core.plan.receipt_conflict``) and
  A's answer to the model says the provider carried it out, never "NOT carried out".

The CRM counts one effect either way. SQLite and PostgreSQL, sync and async. The
same rules in one process (a late receipt after a retry was ordered, a receipt kept
by a worker that died): ``tests/decide/test_late_receipts.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _graphs import Env, build_graph, call, tool_messages
from langgraph.types import Command
from typer.testing import CliRunner

from langgraph_effects import EffectContext, Evidence, OperationStatus, effect
from langgraph_effects.cli import app
from langgraph_effects.core.model import EventKind, EvidenceKind
from langgraph_effects.core.plan import receipt_conflict
from langgraph_effects.testing.faults import ChildExit, scaled
from langgraph_effects.testing.providers import FakeCRM
from langgraph_effects.testing.scenario import run_in_forked_child

S = OperationStatus
CFG = {"configurable": {"thread_id": "t1"}}
CLOSE_A = call("close_case", "call-a", case_id="A", resolution="fixed")
LEASE = timedelta(seconds=1)


def _graph(env: Env, crm: FakeCRM, flag: Path) -> Any:
    """The graph both workers run: the tool announces itself (and its pid) before it acts."""

    def find(op: Any) -> Evidence:
        case = crm.get_case(op.target)
        if case["closed_by"] == op.idempotency_key:
            return Evidence.confirmed("closed under our key", result={"closed": op.target})
        return Evidence.inconclusive("not closed under our key (yet)")

    def close(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        flag.write_text(str(os.getpid()))
        time.sleep(2.0)  # the test freezes the process here (well within this)
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    async def aclose(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        await asyncio.to_thread(flag.write_text, str(os.getpid()))
        await asyncio.sleep(2.0)  # the test freezes the process here (well within this)
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    declare = effect(
        "crm.close_case", target=lambda a: a["case_id"], reconcile=find, name="close_case"
    )
    tool = declare(aclose if env.is_async else close)
    return build_graph(
        [tool],
        [CLOSE_A],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
        node_kwargs={"lease_for": LEASE},
    )


def worker_a(kind: str, mode: str, where: str, crm_path: str, flag: str) -> dict[str, Any]:
    """Child process A: start the thread; return the answer its tool call gave the model."""
    env = Env(kind, mode, path=Path(where), url=where)
    crm = FakeCRM(crm_path)
    try:
        out = env.invoke(_graph(env, crm, Path(flag)), {"messages": [("user", "close A")]}, CFG)
        [message] = tool_messages(out)
        return {"content": str(message.content), "status": message.status}
    finally:
        crm.close()
        env.close()


@pytest.mark.parametrize("decision", ["none", "reject"])
def test_frozen_worker_receipt_is_kept(
    backend: tuple[str, str, str], tmp_path: Path, decision: str
) -> None:
    """A frozen past its lease, B takes over (and a person may reject), A resumes and its
    provider acts: the receipt is recorded and settles the truth; the CRM counts one effect."""
    kind, mode, where = backend
    crm_path, flag = tmp_path / "crm.db", tmp_path / "entered"
    crm = FakeCRM(crm_path)
    env_b = Env(kind, mode, path=Path(where), url=where)  # sets the schema up before A starts
    done: list[ChildExit] = []
    a = threading.Thread(
        target=lambda: done.append(
            run_in_forked_child(worker_a, kind, mode, where, str(crm_path), str(flag), timeout=90)
        )
    )
    a.start()
    pid = 0
    try:
        deadline = time.monotonic() + scaled(60)
        while not flag.exists() or not flag.read_text():
            assert time.monotonic() < deadline, done
            time.sleep(0.01)
        pid = int(flag.read_text())
        os.kill(pid, signal.SIGSTOP)
        flag.unlink()
        time.sleep(LEASE.total_seconds() + 0.3)  # frozen past its lease

        graph_b = _graph(env_b, crm, flag)
        env_b.invoke(graph_b, None, CFG)
        [op] = env_b.ops()
        assert op.status is S.UNKNOWN, op
        assert crm.effects == 0  # A has not acted yet, and B never dispatched
        if decision == "reject":
            answer = {
                "operation_id": op.operation_id,
                "decision": "reject",
                "by": "ana",
                "reason": "the CRM shows case A open",
            }
            env_b.invoke(graph_b, Command(resume=answer), CFG)
            [op] = env_b.ops()
            assert op.status is S.REJECTED

        os.kill(pid, signal.SIGCONT)
        a.join(scaled(90))
        [child] = done
        assert child.ok, child.error
        assert not flag.exists()  # B's tool never ran: only A called the provider
        assert crm.effects == 1

        [op] = env_b.ops()
        events = env_b.ledger_call("events", "default", op.operation_id)
        [receipt] = [
            e.evidence
            for e in events
            if e.kind is EventKind.EVIDENCE
            and e.evidence is not None
            and e.evidence.kind is EvidenceKind.CONFIRMED
        ]
        assert receipt.source == "receipt"
        assert receipt.result["case_id"] == "A"  # the provider's own answer, kept
        answer_a = child.value
        assert "NOT carried out" not in answer_a["content"]
        if decision == "none":
            assert op.status is S.CONFIRMED
            assert op.result["case_id"] == "A"
            assert answer_a["status"] == "success"
            # B's review, still pending, is moot: answering it replays the confirmation.
            late_answer = {
                "operation_id": op.operation_id,
                "decision": "reject",
                "by": "ana",
                "reason": "answered before seeing the receipt",
            }
            out = env_b.invoke(graph_b, Command(resume=late_answer), CFG)
            [message_b] = tool_messages(out)
            assert message_b.status == "success"
            [op] = env_b.ops()
            assert op.status is S.CONFIRMED
        else:
            assert op.status is S.REJECTED  # a person's decision is never overwritten
            assert receipt_conflict(op, events) == receipt
            assert "WAS carried out" in answer_a["content"]
            assert "review" in answer_a["content"]
            # The operator's `show` names the conflict.
            db = where if kind == "postgres" else f"sqlite:///{where}"
            shown = CliRunner().invoke(
                app, ["show", op.operation_id, "--tenant", "default", "--json"], env={"LGE_DB": db}
            )
            assert shown.exit_code == 0, shown.output
            assert json.loads(shown.output)["conflict"]["result"]["case_id"] == "A"
    finally:
        if pid and a.is_alive():
            os.kill(pid, signal.SIGCONT)
        a.join(scaled(90))
        env_b.close()
        crm.close()
