"""Finding 1 of "Every answer applied" after a real freeze and a real kill: a review answered
with its ``request_id`` applies at once, whatever the inconclusive reconciler recorded since.

The lost-response path is ``tests/decide/test_every_answer.py``; here the two other ways
the issue found the same review asked forever:

* a frozen worker's takeover: worker A (a child process) acts at the CRM and is frozen
  (``SIGSTOP``) past its lease; the test's process takes the call over, reconciles (nothing
  found), asks a person, resumes again (reconciles again, the record's version moves) and
  then applies the answer echoing the first request's id;
* a crash mid fan-out: two calls of one AIMessage, one task each, both act and the worker
  is killed after the provider; both are reviewed, both answers (each with its request_id)
  apply in one resume, and the next user turn is not blocked behind them.

The CRM honours no idempotency key: every dispatch that reaches it is an effect, so a
resend would show as one more. SQLite and PostgreSQL, sync and async.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from _graphs import Env, build_graph, call, tool_messages
from langgraph.types import Command

from langgraph_effects import EffectContext, Evidence, OperationStatus, effect
from langgraph_effects.testing.faults import ChildExit, CrashPoint, scaled
from langgraph_effects.testing.providers import FakeCRM
from langgraph_effects.testing.scenario import run_in_forked_child

S = OperationStatus
CFG = {"configurable": {"thread_id": "t1"}}
LEASE = timedelta(seconds=1)
CLOSE_A = call("close_case", "call-a", case_id="A", resolution="fixed")
CLOSE_B = call("close_case", "call-b", case_id="B", resolution="fixed")


def _graph(
    env: Env, crm: FakeCRM, calls: list[dict[str, Any]], *, flag: Path | None, looked: Path
) -> Any:
    """``calls`` in one AIMessage, one task each. The tool closes its case (no key), then,
    when ``flag`` is given (the first worker), waits until every call of the message has
    acted and announces its pid there; a lone call then waits 2 s more (the test freezes
    it within that); of two, A returns (and the kill after its provider comes) while B is
    still in its tool, so neither receipt is written. The reconciler never finds anything;
    each look is a line in ``looked``."""
    acted = len(calls)

    def look(op: Any) -> Evidence:
        with looked.open("a") as f:
            f.write(f"{op.operation_id}\n")
        return Evidence.inconclusive("the CRM's search shows nothing yet")

    def close(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        closed = crm.close_case(case_id, resolution)
        if flag is not None:
            _announce_and_hold(crm, flag, acted, case_id)
        return closed

    async def aclose(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        closed = await asyncio.to_thread(crm.close_case, case_id, resolution)
        if flag is not None:
            await asyncio.to_thread(_announce_and_hold, crm, flag, acted, case_id)
        return closed

    declare = effect(
        "crm.close_case", target=lambda a: a["case_id"], reconcile=look, name="close_case"
    )
    return build_graph(
        [declare(aclose if env.is_async else close)],
        calls,
        ledger=env.ledger,
        checkpointer=env.checkpointer,
        node_kwargs={"lease_for": LEASE},
    )


def _announce_and_hold(crm: FakeCRM, flag: Path, acted: int, case_id: str) -> None:
    deadline = time.monotonic() + scaled(30)
    while crm.effects < acted and time.monotonic() < deadline:
        time.sleep(0.01)
    flag.write_text(str(os.getpid()))  # after the CRM's file is let go: never frozen holding it
    if acted == 1:
        time.sleep(2.0)  # the test freezes the lone call's worker here
    elif case_id != "A":
        time.sleep(scaled(30))  # still inside its tool when A's return kills the worker


def first_worker(
    kind: str, mode: str, where: str, crm_path: str, flag: str, looked: str, fan_out: bool
) -> None:
    """The child: start thread t1 (the test freezes or kills it inside the tool)."""
    env = Env(kind, mode, path=Path(where), url=where)
    crm = FakeCRM(crm_path)
    calls = [CLOSE_A, CLOSE_B] if fan_out else [CLOSE_A]
    try:
        graph = _graph(env, crm, calls, flag=Path(flag), looked=Path(looked))
        env.invoke(graph, {"messages": [("user", "close them")]}, CFG)
    finally:
        crm.close()
        env.close()


def _freeze_holding_no_lock(pid: int, kind: str, where: str) -> None:
    """SIGSTOP ``pid`` at a moment it holds no write lock on the SQLite ledger's file (its
    lease renewal writes there every third of the lease; frozen inside one, it would block
    the takeover). A PostgreSQL worker's statements finish on the server: no lock is held."""
    import sqlite3

    deadline = time.monotonic() + scaled(10)
    while True:
        os.kill(pid, signal.SIGSTOP)
        if kind != "sqlite":
            return
        probe = sqlite3.connect(where, timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:  # frozen inside a write: let it finish, try again
            assert time.monotonic() < deadline, "the worker never let the ledger go"
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.005)
        finally:
            probe.close()


def pending(env: Env, graph: Any) -> list[Any]:
    state = graph.get_state(CFG) if not env.is_async else env.run(graph.aget_state(CFG))
    return [i for task in state.tasks for i in task.interrupts]


def _answer(interrupt: Any) -> dict[str, Any]:
    """A person's confirm, echoing the request's id."""
    review = interrupt.value
    assert review["kind"] == "effect_review", review
    return {
        "operation_id": review["operation_id"],
        "request_id": review["request_id"],
        "decision": "confirm",
        "by": "ana",
        "reason": "the CRM's history shows it closed",
    }


def _looks(looked: Path) -> int:
    return len(looked.read_text().splitlines()) if looked.exists() else 0


def test_a_review_after_a_frozen_workers_takeover_applies_its_answer_at_once(
    backend: tuple[str, str, str], tmp_path: Path
) -> None:
    """A acts and is frozen past its lease; B takes over, reconciles (nothing), asks; B
    resumes again (reconciles again, same request); the answer echoing the request's id
    applies in the resume that carries it: confirmed, nothing asked again, one effect."""
    kind, mode, where = backend
    crm_path, flag, looked = tmp_path / "crm.db", tmp_path / "entered", tmp_path / "looked"
    crm = FakeCRM(crm_path)
    env = Env(kind, mode, path=Path(where), url=where)  # sets the schema up before A starts
    done: list[ChildExit] = []
    a = threading.Thread(
        target=lambda: done.append(
            run_in_forked_child(
                first_worker,
                *(kind, mode, where, str(crm_path), str(flag), str(looked), False),
                timeout=90,
            )
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
        _freeze_holding_no_lock(pid, kind, where)
        time.sleep(LEASE.total_seconds() + 0.3)  # frozen past its lease
        assert crm.effects == 1  # A acted; its answer never reached the ledger

        graph = _graph(env, crm, [CLOSE_A], flag=None, looked=looked)
        env.invoke(graph, None, CFG)  # B: takeover, reconcile (nothing), review
        [asked] = pending(env, graph)
        [op] = env.ops()
        assert op.status is S.UNKNOWN
        env.invoke(graph, None, CFG)  # another resume: reconciles again, the version moves
        [again] = pending(env, graph)
        assert again.value["request_id"] == asked.value["request_id"]  # no new round
        assert env.ops()[0].record_version > op.record_version
        assert _looks(looked) == 2

        out = env.invoke(graph, Command(resume={again.id: _answer(asked)}), CFG)
        assert pending(env, graph) == []
        [op] = env.ops()
        assert op.status is S.CONFIRMED
        assert [m.status for m in tool_messages(out)] == ["success"]
        assert _looks(looked) == 3  # the answering resume reconciled first, then applied
        assert (crm.effects, crm.duplicates) == (1, 0)  # nothing resent
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)  # A never comes back: its late receipt is another test
        a.join(scaled(90))
        env.close()
        crm.close()
    [child] = done
    assert child.exitcode == -signal.SIGKILL


def test_reviews_after_a_crash_mid_fan_out_apply_and_the_next_turn_runs(
    backend: tuple[str, str, str], tmp_path: Path
) -> None:
    """Two calls of one AIMessage both act; the worker is killed after the provider. The
    resume reviews both (nothing reconciled); both answers, each with its request_id, apply in
    one resume; the next user turn runs to the model's answer; two effects, none resent."""
    kind, mode, where = backend
    crm_path, flag, looked = tmp_path / "crm.db", tmp_path / "entered", tmp_path / "looked"
    crm = FakeCRM(crm_path)
    env = Env(kind, mode, path=Path(where), url=where)
    try:
        died = run_in_forked_child(
            first_worker,
            *(kind, mode, where, str(crm_path), str(flag), str(looked), True),
            crash_at=CrashPoint.AFTER_PROVIDER,
            mode="kill",
        )
        assert died.crashed_at is CrashPoint.AFTER_PROVIDER, died.error
        assert crm.effects == 2  # both acted before the kill

        graph = _graph(env, crm, [CLOSE_A, CLOSE_B], flag=None, looked=looked)
        env.invoke(graph, None, CFG)
        asked = pending(env, graph)
        assert len(asked) == 2, [(o.operation_id, o.status, o.attempts) for o in env.ops()]
        assert [op.status for op in env.ops()] == [S.UNKNOWN, S.UNKNOWN]

        out = env.invoke(graph, Command(resume={i.id: _answer(i) for i in asked}), CFG)
        assert pending(env, graph) == []
        assert [op.status for op in env.ops()] == [S.CONFIRMED, S.CONFIRMED]
        assert sorted(m.tool_call_id for m in tool_messages(out)) == ["call-a", "call-b"]

        out = env.invoke(graph, {"messages": [("user", "anything else?")]}, CFG)
        assert out["messages"][-1].content == "done"  # the next turn is not blocked
        assert pending(env, graph) == []
        assert (crm.effects, crm.duplicates) == (2, 0)  # nothing resent
    finally:
        env.close()
        crm.close()
