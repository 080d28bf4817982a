"""``effect(..., answer=...)``: the answer rebuilt from a confirmed record, and bad input.

The crash paths (a ``Command`` effect reconciled or reviewed after a real kill) are in
``tests/campaign/test_settled_command.py``; here, what needs no crash.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _graphs import Env, build_graph, call, tool_messages

from langgraph_effects import EffectContext, EffectsError, InvalidInput, effect
from langgraph_effects.core.model import OperationStatus
from langgraph_effects.testing.providers import FakeCRM

S = OperationStatus
CFG = {"configurable": {"thread_id": "answer"}}
CLOSE = call("close_case", "c1", case_id="A", resolution="fixed")


@pytest.fixture(params=["sync", "async"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    e = Env("sqlite", request.param, path=tmp_path / "app.db")
    yield e
    e.close()


def close_tool(crm: FakeCRM, answer: Any) -> Any:
    @effect("crm.close_case", target=lambda a: a["case_id"], answer=answer)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    return close_case


def test_answer_must_be_callable() -> None:
    """A non-callable ``answer=`` is refused when the effect is declared, naming the effect."""
    with pytest.raises(InvalidInput, match=r"'crm.close_case': answer must be a callable"):
        effect("crm.close_case", answer="closed")  # type: ignore[arg-type]


def test_a_plain_return_answers_through_answer_on_the_first_run_and_every_replay(
    env: Env,
) -> None:
    """With ``answer=``, a plain return's record answers through it on the first run and on
    a replay alike (given the operation and its result); the provider acts once."""
    crm = FakeCRM()
    seen: list[Any] = []

    def answer(op: Any, result: Any) -> str:
        seen.append((op.status, result["version"]))
        return f"case {op.target} closed at version {result['version']}"

    graph = build_graph(
        [close_tool(crm, answer)], [CLOSE], ledger=env.ledger, checkpointer=env.checkpointer
    )
    first = env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    before = next(
        s
        for s in (
            list(graph.get_state_history(CFG))
            if not env.is_async
            else env.run(_alist(graph.aget_state_history(CFG)))
        )
        if s.next == ("tools",)
    )
    again = env.invoke(graph, None, before.config)
    assert crm.effects == 1
    for out in (first, again):
        [message] = tool_messages(out)
        assert message.content == "case A closed at version 1"
    assert seen == [(S.CONFIRMED, 1), (S.CONFIRMED, 1)]


def test_an_answer_that_raises_fails_the_step_and_sends_nothing_again(env: Env) -> None:
    """``answer=`` raising fails the step with an error naming the effect and the confirmed
    operation; running the step again replays (still failing), never resends."""
    crm = FakeCRM()

    def answer(op: Any, result: Any) -> Any:
        raise KeyError("refund_id")

    graph = build_graph(
        [close_tool(crm, answer)], [CLOSE], ledger=env.ledger, checkpointer=env.checkpointer
    )
    with pytest.raises(EffectsError, match=r"'crm.close_case': its answer= raised KeyError"):
        env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    with pytest.raises(EffectsError, match="is confirmed and will not be sent again"):
        env.invoke(graph, None, CFG)
    assert crm.effects == 1
    assert [op.status for op in env.ops()] == [S.CONFIRMED]


async def _alist(items: Any) -> list[Any]:
    return [item async for item in items]
