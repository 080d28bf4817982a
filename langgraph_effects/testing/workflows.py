"""The scenario's script as a Functional API workflow: ``@entrypoint`` + ``@task``, effects
through ``run_effect`` / ``arun_effect`` (the campaign's ``functional_api`` kind).

The entrypoint asks the scripted model for its calls, runs them, and returns the
conversation (``{"messages": [...]}``, the state the scenario runner reads). Where
the calls run is the ``layout``:

* ``tasks``: one ``@task`` per call, all started before any result is read;
* ``one_task``: every call in one ``@task``, in order;
* ``body``: in the entrypoint's own body, in order (the entrypoint's task).

Each answer is a ``ToolMessage`` for the call's id, with the call's origin
(``<task id>#<place>``, the ``tool_call_id`` its operation records: the place among
the calls equal to it, ``functional.call_origin``), its action and its target in its
``response_metadata`` beside the status it answered with, so the runner can tell
which operation each "done" answer came from. A control runs the same calls as
plain tools in plain tasks (or the body): no ledger, nothing decided.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.func import entrypoint, task
from langgraph.runtime import get_runtime

from langgraph_effects._faces import task_id_of
from langgraph_effects.core.digest import canonical_json
from langgraph_effects.decide.messages import TRACE_KEY
from langgraph_effects.effects import effect_spec
from langgraph_effects.errors import EffectRejected, EffectUnconfirmed
from langgraph_effects.functional import arun_effect, call_origin, run_effect

__all__ = ["LAYOUTS", "Layout", "build_workflow"]

Layout = Literal["tasks", "one_task", "body"]
LAYOUTS: tuple[Layout, ...] = ("tasks", "one_task", "body")

ORIGIN = "origin"
"""The trace key naming the call's origin (``<task id>#<place>``) instead of its operation
(beside ``action`` and ``target``: calls unequal to each other may share a place)."""


def build_workflow(
    tools: Sequence[BaseTool],
    reply: Callable[[Sequence[AnyMessage]], AIMessage],
    *,
    ledger: Any = None,
    checkpointer: Any = None,
    control: bool = False,
    node_kwargs: Mapping[str, Any] | None = None,
    layout: Layout = "tasks",
    asynchronous: bool = False,
) -> Any:
    """An ``@entrypoint`` running the calls ``reply`` proposes, laid out as ``layout``.

    ``node_kwargs`` are ``run_effect``'s options (``tenant_id``, ``lease_for``,
    ``interrupt_on_unknown``, ``clock``); ``asynchronous`` builds an async entrypoint
    and tasks (``arun_effect``), to be driven with ``ainvoke``.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    by_name = {t.name: t for t in tools}
    options = dict(node_kwargs or {})
    saver = checkpointer if checkpointer is not None else InMemorySaver()

    def places() -> Callable[[BaseTool, dict[str, Any]], dict[str, Any]]:
        """The origins of this execution's effect calls (LangGraph's task id, the place
        among the calls equal to each), as ``run_effect`` records them."""
        task_id = task_id_of(get_runtime()) or "?"
        seen: Counter[tuple[str, bytes]] = Counter()
        lock = threading.Lock()

        def origin(tool: BaseTool, args: dict[str, Any]) -> dict[str, Any]:
            spec = effect_spec(tool)
            assert spec is not None
            key = (spec.action, canonical_json(args))
            with lock:
                place = seen[key]
                seen[key] = place + 1
            at = call_origin(task_id, place)
            return {ORIGIN: at, "action": spec.action, "target": spec.target_of(args)}

        return origin

    def answer(
        call: Mapping[str, Any], run: Callable[[], Any], origin: dict[str, Any] | None
    ) -> ToolMessage:
        trace: dict[str, Any] = {}
        try:
            content = run()
            status = "confirmed"
        except EffectRejected as exc:
            content, status = f"Error: the call was refused and NOT carried out: {exc}", "rejected"
        except EffectUnconfirmed as exc:
            content = f"Error: could not confirm the call ({exc.status}); nothing was resent"
            status = exc.status
        if origin is not None:
            trace = {TRACE_KEY: {**origin, "status": status}}
        return ToolMessage(
            content=content if isinstance(content, str) else json.dumps(content, default=str),
            tool_call_id=str(call["id"]),
            name=str(call["name"]),
            response_metadata=trace,
        )

    def one(call: Mapping[str, Any], origin: Callable[..., dict[str, Any]]) -> ToolMessage:
        tool = by_name[str(call["name"])]
        args = dict(call.get("args") or {})
        if control or effect_spec(tool) is None:
            return answer(call, lambda: tool.invoke(args), None)
        at = origin(tool, args)
        return answer(call, lambda: run_effect(tool, args, ledger=ledger, **options), at)

    async def aone(call: Mapping[str, Any], origin: Callable[..., dict[str, Any]]) -> ToolMessage:
        tool = by_name[str(call["name"])]
        args = dict(call.get("args") or {})
        if control or effect_spec(tool) is None:
            content: Any = await tool.ainvoke(args)
            return answer(call, lambda: content, None)
        at = origin(tool, args)
        try:
            value: Any = await arun_effect(tool, args, ledger=ledger, **options)
        except (EffectRejected, EffectUnconfirmed) as exc:
            failure: BaseException = exc

            def fail() -> Any:
                raise failure

            return answer(call, fail, at)
        return answer(call, lambda: value, at)

    def finish(messages: list[AnyMessage], proposal: AIMessage, answers: list[ToolMessage]) -> Any:
        messages = [*messages, proposal, *answers]
        return {"messages": [*messages, reply(messages)]}

    def start(inputs: Any, previous: Any) -> tuple[list[AnyMessage], AIMessage]:
        messages = [*((previous or {}).get("messages") or []), *inputs["messages"]]
        return messages, reply(messages)

    if not asynchronous:

        @task
        def run_call(call: dict[str, Any]) -> ToolMessage:
            return one(call, places())

        @task
        def run_calls(calls: list[dict[str, Any]]) -> list[ToolMessage]:
            origin = places()
            return [one(c, origin) for c in calls]

        @entrypoint(checkpointer=saver)
        def workflow(inputs: dict[str, Any], *, previous: Any = None) -> Any:
            messages, proposal = start(inputs, previous)
            calls = [dict(tc) for tc in proposal.tool_calls]
            if layout == "tasks":
                futures = [run_call(c) for c in calls]
                answers = [f.result() for f in futures]
            elif layout == "one_task":
                answers = run_calls(calls).result() if calls else []
            else:
                origin = places()
                answers = [one(c, origin) for c in calls]
            return finish(messages, proposal, answers)

        return workflow

    @task
    async def arun_call(call: dict[str, Any]) -> ToolMessage:
        return await aone(call, places())

    @task
    async def arun_calls(calls: list[dict[str, Any]]) -> list[ToolMessage]:
        origin = places()
        return [await aone(c, origin) for c in calls]

    @entrypoint(checkpointer=saver)
    async def aworkflow(inputs: dict[str, Any], *, previous: Any = None) -> Any:
        messages, proposal = start(inputs, previous)
        calls = [dict(tc) for tc in proposal.tool_calls]
        if layout == "tasks":
            answers = list(await asyncio.gather(*(arun_call(c) for c in calls)))
        elif layout == "one_task":
            answers = (await arun_calls(calls)) if calls else []
        else:
            origin = places()
            answers = [await aone(c, origin) for c in calls]
        return finish(messages, proposal, answers)

    return aworkflow
