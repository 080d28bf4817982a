"""Late receipts decided in one process: a receipt is never lost, nothing is sent twice.

A worker whose operation was taken over while its provider call ran comes back
with the provider's answer after a person ordered a retry that has not gone out:
the receipt confirms the operation, the retry is moot. A receipt recorded as
evidence by a worker that died before it settled anything confirms the operation
on the next run. SQLite and PostgreSQL, sync and async. With a real frozen
process (``SIGSTOP`` past the lease): ``tests/kills/test_receipts.py``.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from _graphs import Env, build_graph, call, tool_messages

from langgraph_effects import EffectContext, Evidence, OperationStatus, effect
from langgraph_effects.core.model import Decision, Resolution
from langgraph_effects.testing.faults import scaled
from langgraph_effects.testing.providers import FakeCRM, Fault

S = OperationStatus
CFG = {"configurable": {"thread_id": "t1"}}
CLOSE_A = call("close_case", "call-a", case_id="A", resolution="fixed")


def test_late_receipt_makes_an_ordered_retry_moot(
    backend: tuple[str, str, str], tmp_path: Path
) -> None:
    """A is slow; meanwhile the operation is taken over and a person orders a retry that has not
    gone out: A's late receipt confirms it (claim + confirm), nothing is sent a second time."""
    kind, mode, where = backend
    crm = FakeCRM(tmp_path / "crm.db")
    entered, go = threading.Event(), threading.Event()

    def close(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case (held until the test lets it act)."""
        entered.set()
        assert go.wait(scaled(30))
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    async def aclose(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case (held until the test lets it act)."""
        entered.set()
        assert await asyncio.to_thread(go.wait, 30)
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    tool = effect("crm.close_case", target=lambda a: a["case_id"], name="close_case")(
        aclose if mode == "async" else close
    )
    other = Env(kind, mode, path=Path(where), url=where)  # the other worker / operator
    answers: list[Any] = []

    def run_a() -> None:
        env = Env(kind, mode, path=Path(where), url=where)
        try:
            graph = build_graph([tool], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer)
            out = env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
            answers.extend(tool_messages(out))
        except BaseException as exc:
            answers.append(exc)
        finally:
            env.close()

    a = threading.Thread(target=run_a)
    a.start()
    try:
        assert entered.wait(scaled(30))
        [op] = other.ops()
        assert op.status is S.DISPATCHING
        other.ledger_call(
            "mark_unknown",
            "default",
            op.operation_id,
            token=op.fencing_token,
            reason="taken over: the lease lapsed",
            actor="other-worker",
        )
        retry = Resolution(decision=Decision.RETRY, by="ana", reason="resend it")
        op = other.ledger_call("resolve", "default", op.operation_id, retry)
        assert op.status is S.PREPARED
        go.set()
        a.join(scaled(60))
        [message] = answers
        assert not isinstance(message, BaseException), message
        assert message.status == "success"
        [op] = other.ops()
        assert op.status is S.CONFIRMED
        assert op.result["case_id"] == "A"
        assert crm.stats().requests == 1
        assert crm.effects == 1
    finally:
        go.set()
        a.join(scaled(60))
        other.close()
        crm.close()


def test_receipt_kept_by_a_worker_that_died_settles_the_next_run(
    backend: tuple[str, str, str], tmp_path: Path
) -> None:
    """A receipt recorded as evidence whose worker died before applying it confirms the unknown
    operation on the next run: no review, no resend; the CRM counts one request."""
    kind, mode, where = backend
    crm = FakeCRM(tmp_path / "crm.db")
    crm.faults.push(Fault.LOSE_RESPONSE)
    env = Env(kind, mode, path=Path(where), url=where)
    try:
        tool = effect("crm.close_case", target=lambda a: a["case_id"], name="close_case")(
            _plain_close(crm)
        )
        graph = build_graph([tool], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer)
        env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
        [op] = env.ops()
        assert op.status is S.UNKNOWN  # and a review is pending
        # What a worker whose confirm the fence refused writes first (then it died).
        kept = Evidence.confirmed(
            "late receipt", result={"case_id": "A", "status": "closed"}, source="receipt"
        )
        env.ledger_call("record_evidence", "default", op.operation_id, kept)

        out = env.invoke(graph, None, CFG)
        [message] = tool_messages(out)
        assert message.status == "success"
        [op] = env.ops()
        assert op.status is S.CONFIRMED
        assert op.result == {"case_id": "A", "status": "closed"}
        assert crm.stats().requests == 1
        assert crm.effects == 1
    finally:
        env.close()
        crm.close()


def _plain_close(crm: FakeCRM) -> Any:
    def close(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    return close
