"""``run_effect`` / ``arun_effect`` in one process: a deliberate repeat acts, a timed-out task's
retry waits for the dispatch in flight, a run replayed from the record, bad calls refused.

Effects are counted at the fake CRM; a plain ``@task`` beside each shows what LangGraph alone
does. SQLite and PostgreSQL, sync and async.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _graphs import Env
from langgraph.errors import NodeTimeoutError
from langgraph.func import entrypoint, task
from langgraph.types import Command, RetryPolicy, interrupt

from langgraph_effects import (
    EffectContext,
    EffectsError,
    EffectUnconfirmed,
    InvalidInput,
    arun_effect,
    effect,
    run_effect,
)
from langgraph_effects.core.model import utcnow
from langgraph_effects.review import REVIEW_KIND
from langgraph_effects.testing.providers import FakeCRM, Fault

CFG = {"configurable": {"thread_id": "t1"}}


@pytest.fixture
def crm() -> Any:
    with FakeCRM(None) as provider:
        yield provider


def closing(crm: FakeCRM, *, delay: float = 0.0) -> Any:
    @effect("crm.close_case", target=lambda a: a["case_id"])
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        time.sleep(delay)
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    return close_case


ARGS = {"case_id": "A", "resolution": "fixed"}
RETRY = RetryPolicy(max_attempts=5, initial_interval=0.01, jitter=False)
THREE = RetryPolicy(max_attempts=3, initial_interval=0.01, jitter=False)


def test_a_deliberate_repeat_acts(env: Env, crm: FakeCRM) -> None:
    """The same call twice in a task and twice in the entrypoint's body: four effects."""
    tool = closing(crm)
    if env.is_async:

        @task
        async def atwice() -> list[Any]:
            return [await arun_effect(tool, ARGS, ledger=env.ledger) for _ in range(2)]

        @entrypoint(checkpointer=env.checkpointer)
        async def aflow(_: Any) -> list[Any]:
            body = [await arun_effect(tool, ARGS, ledger=env.ledger) for _ in range(2)]
            return [*(await atwice()), *body]

        flow = aflow
    else:

        @task
        def twice() -> list[Any]:
            return [run_effect(tool, ARGS, ledger=env.ledger) for _ in range(2)]

        @entrypoint(checkpointer=env.checkpointer)
        def sflow(_: Any) -> list[Any]:
            body = [run_effect(tool, ARGS, ledger=env.ledger) for _ in range(2)]
            return [*twice().result(), *body]

        flow = sflow
    out = env.invoke(flow, "go", CFG)
    assert sorted(o["version"] for o in out) == [1, 2, 3, 4]  # each call closed once
    assert crm.effects == 4
    assert [o.status.value for o in env.ops()] == ["confirmed"] * 4
    # The finished run asked again on a new turn acts again; nothing of the first one re-sends.
    env.invoke(flow, "again", CFG)
    assert crm.effects == 8


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_timed_out_task_is_never_resent_blindly(
    kind: str, crm: FakeCRM, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A task timing out while its provider call runs is retried (NodeTimeoutError is
    retryable): each retry meets the same operation, in flight, and waits for its outcome,
    never sending again; the first retry after the provider answered replays it.
    (LangGraph times out async tasks only.)"""
    where = request.getfixturevalue("pg_url") if kind == "postgres" else str(tmp_path / "app.db")
    env = Env(kind, "async", path=Path(where), url=where)
    tool = closing(crm, delay=0.5)

    @task(timeout=0.2, retry_policy=RETRY)
    async def close() -> Any:
        return await arun_effect(tool, ARGS, ledger=env.ledger)

    @entrypoint(checkpointer=env.checkpointer)
    async def flow(_: Any) -> Any:
        return await close()

    try:
        out = env.invoke(flow, "go", CFG)
        assert out["version"] == 1
        assert crm.effects == 1
        assert [o.status.value for o in env.ops()] == ["confirmed"]
    finally:
        env.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_call_hung_past_every_retry_is_taken_over_never_resent(
    kind: str, crm: FakeCRM, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The CRM acts and its answer hangs past every retry of the task: the run fails with
    NodeTimeoutError, the task gave up on the call, so its lease is renewed no longer; once
    it ends the next run takes the operation over: unknown, asked to a person naming it,
    never resent. The hung answer, released at last, is kept: confirmed, the run replays it
    (one request, one effect)."""
    where = request.getfixturevalue("pg_url") if kind == "postgres" else str(tmp_path / "app.db")
    env = Env(kind, "async", path=Path(where), url=where)
    hung, sent = threading.Event(), []

    @effect("crm.close_case", target=lambda a: a["case_id"])
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case; its answer comes back only when the test releases it."""
        sent.append(case_id)
        out = crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)
        hung.wait(30)
        return out

    @task(timeout=0.2, retry_policy=THREE)
    async def close() -> Any:
        return await arun_effect(
            close_case, ARGS, ledger=env.ledger, lease_for=timedelta(seconds=2)
        )

    @entrypoint(checkpointer=env.checkpointer)
    async def flow(_: Any) -> Any:
        return await close()

    try:
        with pytest.raises(NodeTimeoutError):
            env.invoke(flow, "go", CFG)  # three attempts, 0.2 s each, all in the lease
        (op,) = env.ops()
        assert op.status.value == "dispatching"
        assert op.lease_expires_at is not None
        # Renewed no longer: the lease it had when the task gave up ends, and stays ended.
        env.run(asyncio.sleep((op.lease_expires_at - utcnow()).total_seconds() + 0.2))
        (still,) = env.ops()
        assert (still.status.value, still.lease_expires_at) == ("dispatching", op.lease_expires_at)
        asked = env.invoke(flow, None, CFG)  # the next run takes it over
        (question,) = [i.value for i in asked["__interrupt__"]]
        assert question["kind"] == REVIEW_KIND
        assert question["operation_id"] == op.operation_id
        (taken,) = env.ops()
        assert (taken.status.value, taken.fencing_token) == ("unknown", 2)
        assert (sent, crm.effects) == (["A"], 1)  # never resent
        hung.set()  # the hung answer comes back to the first attempt, still waiting for it
        deadline = time.monotonic() + 10
        while env.ops()[0].status.value != "confirmed" and time.monotonic() < deadline:
            env.run(asyncio.sleep(0.05))
        (kept,) = env.ops()
        assert kept.status.value == "confirmed"
        assert kept.result["closed_by"] == f"lge-{op.operation_id}"
        out = env.invoke(flow, None, CFG)
        assert out == kept.result
        assert (sent, crm.effects, crm.stats().requests) == (["A"], 1, 1)
    finally:
        hung.set()
        env.close()


def test_the_plain_task_control_resends_on_timeout(crm: FakeCRM) -> None:
    """The control: the same task calling the provider directly closes the case again."""

    def slow_close() -> Any:
        time.sleep(0.5)
        return crm.close_case("A", "fixed")

    @task(timeout=0.2, retry_policy=RETRY)
    async def close() -> Any:
        return await asyncio.to_thread(slow_close)

    @entrypoint()
    async def flow(_: Any) -> Any:
        return await close()

    async def main() -> None:
        with pytest.raises(NodeTimeoutError):
            await flow.ainvoke("go")
        await asyncio.sleep(0.6)  # the abandoned attempts finish in their threads

    asyncio.run(main())
    assert crm.effects == 5  # one per attempt


def test_an_unconfirmed_outcome_raises_and_resends_nothing(tmp_path: Path, crm: FakeCRM) -> None:
    """interrupt_on_unknown=False: the provider lost its answer; the task fails with
    EffectUnconfirmed and a later run of the task does not send again."""
    env = Env("sqlite", "sync", path=tmp_path / "app.db")
    tool = closing(crm)
    crm.faults.push(Fault.LOSE_RESPONSE)

    @task
    def close() -> Any:
        return run_effect(tool, ARGS, ledger=env.ledger, interrupt_on_unknown=False)

    @entrypoint(checkpointer=env.checkpointer)
    def flow(_: Any) -> Any:
        return close().result()

    try:
        for _ in range(2):
            with pytest.raises(EffectUnconfirmed) as raised:
                env.invoke(flow, "go" if _ == 0 else None, CFG)
            assert raised.value.status == "unknown"
        assert crm.effects == 1
    finally:
        env.close()


def test_refused_outside_a_task_or_for_a_plain_tool(tmp_path: Path, crm: FakeCRM) -> None:
    from langchain_core.tools import tool as plain_tool

    env = Env("memory", "sync")
    tool = closing(crm)
    with pytest.raises(EffectsError, match="inside a LangGraph @task or @entrypoint"):
        run_effect(tool, ARGS, ledger=env.ledger)
    with pytest.raises(EffectsError, match="run_effect"):
        tool.invoke(ARGS)  # unguarded: refused, pointing at run_effect

    @plain_tool
    def lookup(case_id: str) -> str:
        """Look a case up."""
        return case_id

    @entrypoint(checkpointer=env.checkpointer)
    def flow(_: Any) -> Any:
        return run_effect(lookup, {"case_id": "A"}, ledger=env.ledger)

    with pytest.raises(InvalidInput, match="'lookup' is not an effect"):
        flow.invoke("go", CFG, durability="sync")
    assert crm.effects == 0


def _reordering_flow(env: Env, crm: FakeCRM, order: list[list[str]], *, plain: bool) -> Any:
    """A task closing the cases of ``order[0]`` in that order, then asking a question; the
    task runs again from its first line on resume (LangGraph), in the order then in
    ``order[0]``. Async: one lookup per case first, as fast as ``order[0]`` says
    (``asyncio.gather``: the effects start in the order the lookups end)."""
    tool = closing(crm)

    def close_plain(case: str) -> Any:
        return crm.close_case(case, "fixed")

    if env.is_async:

        @task
        async def aclose_all() -> list[Any]:
            async def one(case: str) -> Any:
                await asyncio.sleep(0.02 * order[0].index(case))  # a lookup first
                if plain:
                    return close_plain(case)
                return await arun_effect(tool, {**ARGS, "case_id": case}, ledger=env.ledger)

            done = await asyncio.gather(*(one(case) for case in sorted(set(order[0]))))
            return [*done, interrupt("close the ticket too?")]

        @entrypoint(checkpointer=env.checkpointer)
        async def aflow(_: Any) -> list[Any]:
            return await aclose_all()

        return aflow

    @task
    def close_all() -> list[Any]:
        done = [
            close_plain(case)
            if plain
            else run_effect(tool, {**ARGS, "case_id": case}, ledger=env.ledger)
            for case in order[0]  # recipients read from an API: no stable order
        ]
        return [*done, interrupt("close the ticket too?")]

    @entrypoint(checkpointer=env.checkpointer)
    def flow(_: Any) -> list[Any]:
        return close_all().result()

    return flow


@pytest.mark.parametrize("plain", [False, True], ids=["run_effect", "plain-task"])
def test_a_task_run_again_in_another_order_sends_nothing_again(
    env: Env, crm: FakeCRM, plain: bool
) -> None:
    """A task makes its calls in another order when it runs again after an interrupt (the
    resume runs it from its first line): each call meets its own operation, nothing is
    sent again, and two identical calls stay two. Its place counted over all the task's
    calls gave each call another's place, read as a sibling's: both cases closed again
    (4 of 2 in 4 of 4 backends, as the plain task). Async: ``asyncio.gather`` over lookups
    that end in another order."""
    sync = not env.is_async
    order = [["A", "A", "B"] if sync else ["A", "B"]]
    flow = _reordering_flow(env, crm, order, plain=plain)
    first = env.invoke(flow, "go", CFG)
    assert len(first["__interrupt__"]) == 1
    order[0] = ["B", "A", "A"] if sync else ["B", "A"]
    env.invoke(flow, Command(resume="yes"), CFG)
    intended = 3 if sync else 2
    if plain:
        assert crm.effects == 2 * intended  # the control: every call again
        return
    assert crm.effects == intended
    assert [o.status.value for o in env.ops()] == ["confirmed"] * intended


def test_a_replay_from_before_the_answer_sends_nothing_again(env: Env, crm: FakeCRM) -> None:
    """Time travel: ``invoke(None, earlier_config)`` from before the effect's answer runs the
    task under a new id; the identity rule (docs/identity.md) meets the delivered operation
    and replays it. The next turn of the thread asks again and acts."""
    tool = closing(crm)
    if env.is_async:

        @task
        async def aclose() -> Any:
            return await arun_effect(tool, ARGS, ledger=env.ledger)

        @entrypoint(checkpointer=env.checkpointer)
        async def aflow(_: Any) -> Any:
            return await aclose()

        flow = aflow
        history = lambda: env.run(_alist(flow.aget_state_history(CFG)))  # noqa: E731
    else:

        @task
        def close() -> Any:
            return run_effect(tool, ARGS, ledger=env.ledger)

        @entrypoint(checkpointer=env.checkpointer)
        def sflow(_: Any) -> Any:
            return close().result()

        flow = sflow
        history = lambda: list(flow.get_state_history(CFG))  # noqa: E731
    first = env.invoke(flow, "go", CFG)
    before = [h for h in history() if h.next][-1]  # the input checkpoint, before the task
    replayed = env.invoke(flow, None, before.config)
    assert replayed == first
    assert crm.effects == 1
    env.invoke(flow, "again", CFG)
    assert crm.effects == 2


async def _alist(items: Any) -> list[Any]:
    return [item async for item in items]


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_an_approval_asked_from_a_task(env: Env, crm: FakeCRM, decision: str) -> None:
    """``require_approval``: the task asks with ``interrupt()`` before anything is sent; an
    approval acts once, a rejection sends nothing and raises ``EffectRejected`` in the task."""
    from langgraph.types import Command

    from langgraph_effects import EffectRejected

    @effect("crm.close_case", target=lambda a: a["case_id"], require_approval=True)
    def gated(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case, once a person approved."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    if env.is_async:

        @task
        async def aclose() -> Any:
            try:
                return await arun_effect(gated, ARGS, ledger=env.ledger)
            except EffectRejected as exc:
                return {"refused": exc.reason}

        @entrypoint(checkpointer=env.checkpointer)
        async def aflow(_: Any) -> Any:
            return await aclose()

        flow = aflow
    else:

        @task
        def close() -> Any:
            try:
                return run_effect(gated, ARGS, ledger=env.ledger)
            except EffectRejected as exc:
                return {"refused": exc.reason}

        @entrypoint(checkpointer=env.checkpointer)
        def sflow(_: Any) -> Any:
            return close().result()

        flow = sflow
    asked = env.invoke(flow, "go", CFG)
    (request,) = [i.value for i in asked["__interrupt__"]]
    assert request["kind"] == "effect_approval"
    assert crm.effects == 0  # nothing sent before the answer
    out = env.invoke(flow, Command(resume={"decision": decision, "by": "ana"}), CFG)
    (op,) = env.ops()
    if decision == "approve":
        assert out["status"] == "closed"
        assert op.status.value == "confirmed"
        assert crm.effects == 1
    else:
        assert "refused" in out
        assert op.status.value == "rejected"
        assert crm.effects == 0
