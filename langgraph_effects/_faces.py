"""What both faces share: a tool call of LangGraph's hooks, as the runner takes it and answers it.

``EffectToolNode`` (``node.py``) and ``EffectMiddleware`` (``middleware.py``) both
see an effect call as a ``ToolCallRequest`` and an ``execute`` / ``handler``
callable (ToolNode's ``wrap_tool_call`` and the agent middleware's hook have the
same shape). From there the path is the same:

1. ``build_call``: the request's ``EffectCall`` (digest, operation id), for the
   tenant and thread the face resolved;
2. ``Execution``: ``execute`` as the runner calls it (``run(args)``), remembering
   what the tool produced in this run;
3. ``effect_result``: the answer, built from the ledger's record (so a first run
   and every replay answer alike), with the operation ids the thread owns;
4. ``trace_decision`` / ``atrace_decision``: the decision as a run of its own for
   every LangChain tracer of the task (LangSmith, Langfuse, ``astream_events``),
   named after the tool and how the answer was obtained (``close_case (replayed)``),
   the tool, operation id, status and ``via`` in its metadata and tags. A replayed
   call runs no tool: this run is what shows it.

Only LangGraph's public API is used: ``ToolCallRequest`` (``tool_call``,
``tool``, ``state``, ``runtime``) and ``override``.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.messages import AIMessage, ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import (
    get_async_callback_manager_for_config,
    get_callback_manager_for_config,
)
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolCallRequest, msg_content_output
from langgraph.types import Command

from langgraph_effects.core.digest import canonical_json
from langgraph_effects.core.model import Operation, OperationDraft, OperationStatus
from langgraph_effects.decide import (
    OPERATIONS_KEY,
    EffectCall,
    Via,
    noticed,
    recorded_command,
    settled_answer,
    thread,
    tool_message,
    traced,
)
from langgraph_effects.decide.identity import (
    Timeline,
    graph_answers,
    graph_channel,
    timeline_of,
    warn_no_checkpointer,
)
from langgraph_effects.effects import effect_spec
from langgraph_effects.errors import EffectsError
from langgraph_effects.slot import current_slot

__all__ = [
    "NO_CALL_ID",
    "TRACE_TAG",
    "Execution",
    "add_operations",
    "atrace_decision",
    "build_call",
    "call_id_of",
    "effect_calls",
    "effect_result",
    "messages_of",
    "places",
    "task_id_of",
    "timeline_of_request",
    "trace_decision",
    "twins_in",
    "unanswered_calls",
]

S = OperationStatus
NO_CALL_ID = "no-call-id"
"""The tool-call id of a call the model sent without one."""


def call_id_of(tool_call: ToolCall, place: int | None = None) -> str:
    """The id a tool call is known by in the ledger: the model's, or for a call sent
    without one (``""`` or None) its ``place`` among its AIMessage's calls of the same
    tool (``places``): two id-less calls of one message are two intents, and a re-run
    of the task meets each at its place again. Place 0 or unknown: ``NO_CALL_ID``."""
    if tool_call["id"]:
        return tool_call["id"]
    return NO_CALL_ID if not place else f"{NO_CALL_ID}-{place}"


def places(tool_calls: Sequence[ToolCall]) -> list[int]:
    """Each call's place among the calls of the same tool (``call_id_of``)."""
    seen: dict[str, int] = {}
    out = []
    for tool_call in tool_calls:
        out.append(seen.get(tool_call["name"], 0))
        seen[tool_call["name"]] = out[-1] + 1
    return out


def add_operations(left: list[str] | None, right: list[str] | None) -> list[str]:
    """Reducer of ``effect_operations``: append new ids, keep order, no duplicates.

    LangGraph calls it on the thread that runs the graph, where a DurabilityWarning
    kept by a worker thread finds the user's line (``decide.thread.flush``)."""
    thread.flush()
    out = list(left or [])
    seen = set(out)
    for op_id in right or []:
        if op_id not in seen:
            seen.add(op_id)
            out.append(op_id)
    return out


def messages_of(state: Any, messages_key: str = "messages") -> list[Any]:
    """The messages of a graph state: a list of messages, a dict or an object."""
    if isinstance(state, list):
        return state
    if isinstance(state, dict):
        return state.get(messages_key) or []
    return getattr(state, messages_key, None) or []


def build_call(
    tool: BaseTool,
    tool_call: ToolCall,
    *,
    tenant_id: str,
    workflow_id: str,
    timeline: Timeline | None = None,
    task_id: str | None = None,
    single: bool = True,
    siblings: dict[str, OperationDraft] | None = None,
    preapproved_by: str | None = None,
    user: str | None = None,
    place: int | None = None,
    index: int = 0,
    twin: int = 0,
    canonical: bytes | None = None,
) -> EffectCall:
    """The ``EffectCall`` of a tool call, for a tenant and thread resolved by the face;
    ``timeline``: where its task runs (``timeline_of``; shared by the calls of a task);
    ``user``: the run's authenticated user (``decide.answers.authenticated_user``);
    ``place``: its place among the task's calls of its tool (``call_id_of``);
    ``index`` and ``twin``: where its walk starts (``EffectCall.build``)."""
    spec = effect_spec(tool)
    if spec is None:
        raise EffectsError(f"tool {tool.name!r} is not an effect")
    if timeline is not None and timeline.saver is None:
        warn_no_checkpointer()
    return EffectCall.build(
        spec,
        tool_name=tool_call["name"],
        tool_call_id=call_id_of(tool_call, place),
        args=tool_call["args"],
        tenant_id=tenant_id,
        workflow_id=workflow_id,
        single=single,
        siblings=siblings,
        preapproved_by=preapproved_by,
        timeline=timeline,
        index=index,
        twin=twin,
        task_id=task_id,
        user=user,
        canonical=canonical,
    )


def unanswered_calls(state: Any, messages_key: str = "messages") -> list[ToolCall]:
    """The tool calls of the latest AIMessage that no ToolMessage after it answers: what
    ``route_tool_calls`` sends, one task each, and what an approval batch asks about.

    The AIMessage is the state's last message, or the last one before a run of
    ToolMessages (a reviewer's refusals answer some of its calls, as
    ``HumanInTheLoopMiddleware`` writes them); after any other message no call is
    open. Only a ToolMessage *after* the AIMessage answers one of its calls, as
    ``create_agent``'s own router reads it: models that reuse ids (``call_0``
    every turn) leave older ToolMessages carrying the id of a new call, and those
    answered an earlier call.
    """
    messages = messages_of(state, messages_key)
    at = len(messages) - 1
    while at >= 0 and isinstance(messages[at], ToolMessage):
        at -= 1
    if at < 0 or not isinstance(messages[at], AIMessage):
        return []
    answered = {m.tool_call_id for m in messages[at + 1 :]}
    return [tc for tc in messages[at].tool_calls if tc["id"] not in answered]


def twins_in(
    config: Mapping[str, Any] | None, tool_calls: Sequence[ToolCall], messages_key: str
) -> dict[str, int]:
    """For calls a task holds without their AIMessage (a task per call: ``route_tool_calls``,
    a hand-made ``Send``), by tool-call id: how many calls identical to it (same tool,
    same arguments) come before it in the graph's latest AIMessage that lists it, read
    from the graph's messages channel (``decide.identity.graph_channel``). A call is not
    numbered (it walks from its first candidate, as it always may) when its id is empty,
    listed more than once in that message, or listed with other arguments."""
    wanted = {tc["id"]: tc for tc in tool_calls if tc["id"]}
    values = graph_channel(config, messages_key) if wanted else None
    messages = None if values is None else values.get(messages_key)
    if not isinstance(messages, list):
        return {}
    message = next(
        (
            m
            for m in reversed(messages)
            if isinstance(m, AIMessage) and any(tc["id"] in wanted for tc in m.tool_calls)
        ),
        None,
    )
    if message is None:
        return {}
    numbered = _numbered(message)
    out = {}
    for call_id, tc in wanted.items():
        known = numbered.get(call_id)
        if known is not None and known[0] == tc["name"] and known[1] == tc["args"]:
            out[call_id] = known[2]
    return out


def _numbered(message: AIMessage) -> dict[str, tuple[str, Any, int]]:
    """By tool-call id (each listed once): ``(tool, arguments, twins before it)`` of an
    AIMessage's calls, counted once per message object (the tasks of one step read the
    same one): ``n`` tasks pay ``n`` canonicalisations, not ``n * n``."""
    with _NUMBERED_LOCK:
        kept = _NUMBERED.get(id(message))
        if kept is not None and kept[0] is message:
            return kept[1]
    ids = Counter(tc["id"] for tc in message.tool_calls)
    seen: Counter[tuple[str, bytes]] = Counter()
    out: dict[str, tuple[str, Any, int]] = {}
    for tc in message.tool_calls:
        try:
            same = (tc["name"], canonical_json(dict(tc["args"])))
        except Exception:
            continue
        if tc["id"] and ids[tc["id"]] == 1:
            out[tc["id"]] = (tc["name"], tc["args"], seen[same])
        seen[same] += 1
    with _NUMBERED_LOCK:
        _NUMBERED[id(message)] = (message, out)  # the message kept: its id is not reused
        while len(_NUMBERED) > _NUMBERED_KEPT:
            _NUMBERED.popitem(last=False)
    return out


_NUMBERED: OrderedDict[int, tuple[AIMessage, dict[str, tuple[str, Any, int]]]] = OrderedDict()
_NUMBERED_KEPT = 32
_NUMBERED_LOCK = threading.Lock()


def effect_calls(
    tools: Mapping[str, BaseTool],
    tool_calls: Sequence[ToolCall],
    *,
    thread: tuple[str, str],
    timeline: Timeline | None = None,
    task_id: str | None = None,
    user: str | None = None,
    siblings: dict[str, OperationDraft] | None = None,
    twins: Mapping[str, int] | None = None,
) -> list[EffectCall]:
    """The ``EffectCall`` of each effect tool's call among ``tool_calls``, in order.

    ``thread`` is ``(workflow_id, tenant_id)``; ``timeline`` where the task runs;
    ``user`` the run's authenticated user. A call is ``single`` when it is the only
    one of ``tool_calls``. A call that cannot be built (unknown tool, unstorable
    arguments) is left out: its own run reports it. ``siblings``: filled with each
    built call's draft by operation id, and every call knows it as its ``siblings``
    (the calls of one task; none when not given).

    Identical calls (same tool, same arguments) are numbered once, in order, and the
    call after ``k`` of them starts its walk at its ``k``-th open candidate
    (``EffectCall.build``), counted on from the twin before it in ``tool_calls``: ``n``
    twins pay ``n`` prepares, not ``n * (n + 1) / 2``. ``twins``: by tool-call id, how
    many identical calls come before it in its AIMessage (``twins_in``), for calls that
    are only some of the message's (one task per call, the unanswered ones); a call it
    does not number starts at its first candidate. Every face numbering one AIMessage
    alike starts a call at the same candidate, never past its own record.
    """
    workflow_id, tenant_id = thread
    calls = []
    counted: Counter[tuple[str, bytes]] = Counter()
    started: dict[tuple[str, bytes], tuple[int, int]] = {}
    """By tool and canonical arguments: the last such call's number and start."""
    for place, tool_call in zip(places(tool_calls), tool_calls, strict=True):
        tool = tools.get(tool_call["name"])
        if tool is None or effect_spec(tool) is None:
            continue
        try:
            canonical = canonical_json(dict(tool_call["args"]))
            same = (tool_call["name"], canonical)
            if twins is None:
                number: int | None = counted[same]
                counted[same] += 1
            else:
                number = twins.get(tool_call["id"] or "")
            index, twin = 0, number or 0
            before = started.get(same)
            if number is not None and before is not None and before[0] < number:
                index, twin = before[1] + 1, number - before[0] - 1
            call = build_call(
                tool,
                tool_call,
                tenant_id=tenant_id,
                workflow_id=workflow_id,
                timeline=timeline,
                task_id=task_id,
                single=len(tool_calls) <= 1,
                siblings=siblings,
                user=user,
                place=place,
                index=index,
                twin=twin,
                canonical=canonical,
            )
        except Exception:
            continue
        if number is not None:
            started[same] = (number, call.index)
        if siblings is not None:
            siblings.setdefault(call.operation_id, call.draft())
        calls.append(call)
    return calls


def timeline_of_request(request: ToolCallRequest) -> Timeline | None:
    """Where a hook's tool call runs (``decide.identity.timeline_of``)."""
    runtime = request.runtime
    if runtime is None:
        return None
    return timeline_of(getattr(runtime, "config", None), task_id_of(runtime), request.state)


def task_id_of(runtime: Any) -> str | None:
    """LangGraph's task id from a ``ToolRuntime`` / ``Runtime`` (None outside a task)."""
    info = getattr(runtime, "execution_info", None)
    return getattr(info, "task_id", None)


def effect_result(
    request: ToolCallRequest,
    call: EffectCall,
    op: Operation,
    *,
    messages_key: str = "messages",
    produced: Any = None,
    via: Via | None = None,
    notices: list[str] | None = None,
) -> ToolMessage | Command[Any]:
    """The call's answer, plus the operation id when the state tracks them.

    ``produced`` is this run's own answer when it must be returned as made
    (``Execution.first_answer``): a ``Command``, or a message an inner layer changed.
    Otherwise the answer is built from the record (on a replay, the recorded
    ``Command`` with its update, goto and graph), so a first run and every replay
    answer identically. With ``via`` (how the answer was obtained), its ToolMessage
    carries the trace metadata (``decide.messages.traced``: new messages, never the
    one a tool or ToolNode made, changed). ``notices``: answers this run read and did
    not apply (too late), said at the end of the ToolMessage (``Trace.notices``).
    """
    tool_call_id = request.tool_call["id"] or ""
    answer: Any = produced
    if answer is None:
        answer = recorded_command(op, tool_call_id=tool_call_id)
    if answer is None:
        answer = settled_answer(
            op, call.spec.answer, tool_name=call.tool_name, tool_call_id=tool_call_id
        )
    if answer is None:
        # Made here: the message carries the metadata from the start (no copy).
        answer = tool_message(op, tool_name=call.tool_name, tool_call_id=tool_call_id, via=via)
    elif via is not None:
        answer = traced(answer, op, via, tool_call_id=tool_call_id)
    if notices:
        # Answers read and not applied (too late): said after what the record says.
        answer = noticed(answer, notices, tool_call_id=tool_call_id)
    state = request.state
    if not (isinstance(state, dict) and OPERATIONS_KEY in state):
        # A task whose input is not the graph state (a Send's payload) still answers into
        # the graph's channel when the graph has one: a later turn reads it there.
        config = request.runtime.config if request.runtime is not None else None
        if graph_answers(config) is None:
            return answer  # type: ignore[no-any-return]
    # An edited call ends in another operation: the thread owns both.
    owned = list(dict.fromkeys([call.operation_id, op.operation_id]))
    return _with_owned(answer, owned, messages_key)


TRACE_TAG = "langgraph_effects"
"""The tag of every traced effect decision (``trace_decision``)."""


def _decision_run(
    manager: BaseCallbackManager,
    request: ToolCallRequest,
    call: EffectCall,
    op: Operation,
    via: Via,
) -> tuple[str, dict[str, Any]]:
    """The traced run of one decision: its tags and metadata put on ``manager`` (for this
    run only), its name and inputs returned."""
    tags = [TRACE_TAG, f"effect:{via}", f"tool:{call.tool_name}", f"operation:{op.operation_id}"]
    manager.add_tags(tags, inherit=False)
    manager.add_metadata(
        {
            "effect_tool": call.tool_name,
            "effect_action": op.action,
            "effect_operation_id": op.operation_id,
            "effect_status": op.status.value,
            "effect_via": via.value,
        },
        inherit=False,
    )
    tool_call = request.tool_call
    inputs = {"name": tool_call["name"], "args": tool_call["args"], "id": tool_call["id"]}
    return f"{call.tool_name} ({via})", inputs


def _untraced(config: RunnableConfig) -> bool:
    """The task has no tracer: the callback manager LangGraph handed it has no handler.

    LangGraph configures a run's callbacks once, when the graph starts (the tracers of
    the config, of the environment, such as ``LANGSMITH_TRACING``, and of a tracing
    context), and hands each task a child manager carrying them. An empty one means
    nobody traces this task, so the decision's run is not configured again per call
    (``CallbackManager.configure``: a tenth of a millisecond). Anything else (a list
    of handlers, no manager: a face called outside a graph) is configured as usual.
    """
    callbacks = config.get("callbacks")
    return (
        isinstance(callbacks, BaseCallbackManager)
        and not callbacks.handlers
        and not callbacks.inheritable_handlers
    )


def trace_decision(
    request: ToolCallRequest, call: EffectCall, op: Operation, via: Via, answer: Any
) -> None:
    """Report the decision to the task's tracers as a run of its own (none: nothing to do).

    A child of the tools node's run, started and ended once the decision is made (its
    ``via`` is known only then); ``answer`` (the ToolMessage or Command) is its output.
    """
    config: RunnableConfig = (request.runtime.config if request.runtime else None) or {}
    if _untraced(config):
        return
    manager = get_callback_manager_for_config(config)
    if manager.handlers:
        name, inputs = _decision_run(manager, request, call, op, via)
        manager.on_chain_start(None, inputs, name=name).on_chain_end({"output": answer})


async def atrace_decision(
    request: ToolCallRequest, call: EffectCall, op: Operation, via: Via, answer: Any
) -> None:
    """``trace_decision`` for the async faces (async tracers awaited in the task's loop)."""
    config: RunnableConfig = (request.runtime.config if request.runtime else None) or {}
    if _untraced(config):
        return
    manager = get_async_callback_manager_for_config(config)
    if manager.handlers:
        name, inputs = _decision_run(manager, request, call, op, via)
        run = await manager.on_chain_start(None, inputs, name=name)
        await run.on_chain_end({"output": answer})


def _with_owned(answer: Any, owned: list[str], messages_key: str) -> ToolMessage | Command[Any]:
    """``answer`` that also appends ``owned`` to the state's ``effect_operations``."""
    if isinstance(answer, ToolMessage):
        return Command(update={messages_key: [answer], OPERATIONS_KEY: owned})
    if isinstance(answer, Command) and answer.graph is None and isinstance(answer.update, dict):
        update = dict(answer.update)
        update[OPERATIONS_KEY] = add_operations(update.get(OPERATIONS_KEY), owned)
        return dataclasses.replace(answer, update=update)
    return answer  # type: ignore[no-any-return]  # a parent handoff or a list: not our state


class Execution:
    """A face's ``execute`` for one call, as the runner calls it (``run(args)``).

    Keeps what the tool returned through the chain in this run (``produced``: its
    ToolMessage or Command as is) and the exceptions ``execute`` itself raised
    (``raised_here``): ToolNode's error handling decided those, not the runner.
    """

    def __init__(self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]) -> None:
        self.request = request
        self.execute = execute
        self.produced: Any = None
        self.answered: Any = None
        self.value: Any = None
        self.raised: list[BaseException] = []

    def _request(self, args: dict[str, Any]) -> ToolCallRequest:
        if args == self.request.tool_call["args"]:
            return self.request
        return self.request.override(tool_call={**self.request.tool_call, "args": args})

    def _keep(self, out: Any) -> Any:
        slot = current_slot()
        self.produced = self.answered = None
        if slot is not None and slot.started and slot.error is None:
            self.produced, self.value = out, slot.value  # what the chain made of a return
        elif slot is not None and not slot.started:
            self.answered = out  # an inner layer answered without running the tool
        return out

    def raised_here(self, exc: BaseException) -> bool:
        """``exc`` came out of ``execute`` itself (not out of the decision around it)."""
        return any(exc is e for e in self.raised)

    def first_answer(self, op: Operation) -> Any:
        """This run's answer as made, where the record would lose something; else None.

        A ``Command`` (or a list) the tool returned; a ToolMessage an inner layer
        changed (ToolNode refusing the output, a reviewer-edit notice) or made
        instead of running the tool (invalid arguments, a reviewer's reject/respond).
        """
        if op.status is S.CONFIRMED and self.produced is not None:
            out = self.produced
            if isinstance(out, Command | list):
                return out
            if isinstance(out, ToolMessage) and (
                out.status == "error" or out.content != msg_content_output(self.value)
            ):
                return out
        if op.status is S.REJECTED and isinstance(self.answered, ToolMessage):
            return self.answered
        return None

    def __call__(self, args: dict[str, Any]) -> Any:
        try:
            return self._keep(self.execute(self._request(args)))
        except Exception as exc:
            self.raised.append(exc)
            raise

    async def acall(self, args: dict[str, Any]) -> Any:
        try:
            return self._keep(await self.execute(self._request(args)))
        except Exception as exc:
            self.raised.append(exc)
            raise
