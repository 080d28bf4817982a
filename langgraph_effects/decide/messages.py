"""The ToolMessage of an operation, and how a tool's output is recorded and rebuilt.

A first run and every replay answer from the record alone (``tool_message``):
the same text, the same artifact, the same ``Command``. A tool's output is
recorded as JSON (``recordable``); a ``Command`` is kept whole, its messages
and ``Send`` encoded (``encode`` / ``decode``), and rebuilt on replay
(``recorded_command``).

Traces tell the truth: every ToolMessage of an effect carries, in
``response_metadata["langgraph_effects"]`` (shown with the message in LangSmith;
never sent to the model, whose content is unchanged), the operation id, its
status and how this answer was obtained (``Via``): ``dispatched`` (the provider
was called in this run), ``replayed`` (read from the ledger, decided before),
``reconciled`` (a reconciler's evidence, or a late receipt, settled it in this
run), ``reviewed`` (a person's answer settled it in this run) or ``refused``
(the effect's ``authorize`` hook refused it before any dispatch). The decision
loop records which in a ``Trace``; ``traced`` puts it on the answer, building
new messages, never changing one a tool or ToolNode made.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage, message_to_dict, messages_from_dict
from langgraph.prebuilt.tool_node import msg_content_output
from langgraph.types import Command, Send

from langgraph_effects.core.digest import canonical_json
from langgraph_effects.core.model import Evidence, Operation, OperationStatus
from langgraph_effects.core.storable import storable
from langgraph_effects.effects import Answerer
from langgraph_effects.errors import EffectsError

__all__ = [
    "CONFLICT",
    "TRACE_KEY",
    "Trace",
    "Via",
    "conflicted",
    "message_text",
    "noticed",
    "recordable",
    "recorded_command",
    "settled_answer",
    "tool_message",
    "trace_metadata",
    "traced",
]

S = OperationStatus
CONFLICT = "CONFLICT: "
"""Prefix of a rejected record's error when a late receipt says the provider applied it."""


TRACE_KEY = "langgraph_effects"
"""The key of an effect ToolMessage's ``response_metadata`` that says how it was obtained."""


class Via(StrEnum):
    """How the answer of an effect call was obtained in this run."""

    DISPATCHED = "dispatched"
    """The provider was called in this run (whatever it answered)."""
    REPLAYED = "replayed"
    """Read from the ledger: decided before this run (or by another worker, an operator)."""
    RECONCILED = "reconciled"
    """A reconciler's evidence, or a receipt kept by an earlier worker, settled it now."""
    REVIEWED = "reviewed"
    """A person's answer settled it in this run (a review, a refused approval)."""
    REFUSED = "refused"
    """The effect's ``authorize`` hook refused it before any dispatch."""


@dataclass(slots=True)
class Trace:
    """What the decision loop tells the face about the answer it is about to build."""

    via: Via = Via.REPLAYED
    notices: list[str] = dataclasses.field(default_factory=list)
    """Answers this run read and did not apply, and why (``decide.asking.Asking._late_answers``):
    said in the ToolMessage (``noticed``), after what the record says."""


def noticed(answer: Any, notices: list[str], *, tool_call_id: str) -> Any:
    """``answer`` with ``notices`` said at the end of its ToolMessage answering
    ``tool_call_id`` (a copy; a ``Command`` or a list is rebuilt around it)."""
    if not notices:
        return answer
    words = " ".join(notices)
    if isinstance(answer, ToolMessage):
        if answer.tool_call_id != tool_call_id:
            return answer
        content = answer.content
        said: str | list[Any] = (
            f"{content}\n\n{words}" if isinstance(content, str) else [*content, words]
        )
        return answer.model_copy(update={"content": said})
    if isinstance(answer, list):
        return [noticed(a, notices, tool_call_id=tool_call_id) for a in answer]
    if isinstance(answer, Command) and isinstance(answer.update, dict):
        update = {
            k: noticed(v, notices, tool_call_id=tool_call_id)
            if isinstance(v, ToolMessage | list)
            else v
            for k, v in answer.update.items()
        }
        return dataclasses.replace(answer, update=update)
    return answer


def trace_metadata(op: Operation, via: Via) -> dict[str, Any]:
    """The ``response_metadata`` entry of an effect ToolMessage (``TRACE_KEY``)."""
    return {
        TRACE_KEY: {"operation_id": op.operation_id, "status": op.status.value, "via": via.value}
    }


def traced(answer: Any, op: Operation, via: Via, *, tool_call_id: str) -> Any:
    """``answer`` with the trace metadata on its ToolMessage answering ``tool_call_id``.

    A ToolMessage is copied with the metadata added; a ``Command`` (or a list of
    answers) is rebuilt around such a copy. Nothing a tool or ToolNode returned is
    changed in place: the message the model reads keeps its content.
    """
    if isinstance(answer, ToolMessage):
        if answer.tool_call_id != tool_call_id:
            return answer
        meta = {**answer.response_metadata, **trace_metadata(op, via)}
        return answer.model_copy(update={"response_metadata": meta})
    if isinstance(answer, list):
        return [traced(a, op, via, tool_call_id=tool_call_id) for a in answer]
    if isinstance(answer, Command) and isinstance(answer.update, dict):
        update = {
            k: traced(v, op, via, tool_call_id=tool_call_id)
            if isinstance(v, ToolMessage | list)
            else v
            for k, v in answer.update.items()
        }
        return dataclasses.replace(answer, update=update)
    return answer


def _describe(op: Operation) -> str:
    return f"{op.action}" + (f" on {op.target!r}" if op.target else "")


def tool_message(
    op: Operation, *, tool_name: str, tool_call_id: str, via: Via | None = None
) -> ToolMessage:
    """The ToolMessage for an operation, built only from what the ledger recorded.

    confirmed: the recorded result (replayed identically); rejected: an error
    saying it was refused and not carried out; unknown: an error saying it
    could not be confirmed (which is not "was not done"); prepared after
    transient refusals: an error saying nothing was applied yet. With ``via``
    it carries the trace metadata (``trace_metadata``).
    """
    status = "error"
    artifact: Any = None
    if op.status is S.CONFIRMED:
        status = "success"
        content: str | list[Any] = (
            f"{_describe(op)} was carried out (operation {op.operation_id})."
            if op.result is None
            else msg_content_output(op.result)
        )
        result = op.result
        if isinstance(result, dict) and set(result) == {_MESSAGE}:
            content, artifact = result[_MESSAGE]["content"], result[_MESSAGE]["artifact"]
        elif isinstance(result, dict) and set(result) == {_COMMAND}:
            command = recorded_command(op, tool_call_id=tool_call_id)
            content = msg_content_output(_command_text(command)) if command else content
    elif op.status is S.REJECTED and (op.error or "").startswith(CONFLICT):
        content = (
            f"Error: {_describe(op)} was recorded as refused, but the provider reported "
            f"afterwards that it WAS carried out (operation {op.operation_id}). A person must "
            "review this conflict: do not assume it was not done, and do not repeat it."
        )
    elif op.status is S.REJECTED:
        content = (
            f"Error: {_describe(op)} was refused and NOT carried out "
            f"(operation {op.operation_id}): {op.error or 'rejected'}"
        )
    elif op.status is S.UNKNOWN:
        content = (
            f"Error: could not confirm whether {_describe(op)} happened (operation "
            f"{op.operation_id} is unresolved and awaits review). It may have been carried "
            "out: do not assume it was not, and do not repeat it."
        )
    elif op.status is S.PREPARED:
        content = (
            f"Error: {_describe(op)} was not carried out yet: the provider refused temporarily "
            f"before acting ({op.error or 'try later'}); nothing was applied. It will be sent "
            f"again when this step runs again (operation {op.operation_id})."
        )
    else:
        content = (
            f"Error: {_describe(op)} is being carried out by another worker (operation "
            f"{op.operation_id}); its outcome is not known yet."
        )
    return ToolMessage(
        content=content,
        name=tool_name,
        tool_call_id=tool_call_id,
        status=status,
        artifact=artifact,
        response_metadata={} if via is None else trace_metadata(op, via),
    )


def conflicted(op: Operation, receipt: Evidence) -> Operation:
    """The rejected record as answered: its error says a late receipt contradicts it."""
    return op.model_copy(
        update={
            "error": f"{CONFLICT}recorded as rejected ({op.error or 'rejected'}), but the "
            f"provider's late receipt ({receipt.observed_at.isoformat()}) says it was carried "
            "out; a person must review this operation"
        }
    )


_COMMAND = "lge.command"
"""Envelope of a recorded ``Command`` result (its update, goto, graph and resume)."""
_MESSAGE = "lge.message"
"""Envelope of a recorded ToolMessage with an artifact (``content_and_artifact`` tools)."""


def recordable(value: Any, message: Any = None) -> Any:
    """The JSON value to record for a tool's output (content text when nothing better fits).

    ``value`` is what the tool body returned, ``message`` what ToolNode made of it. A
    ``Command`` is recorded whole (``recorded_command`` rebuilds it on replay); a ToolMessage
    with an artifact keeps both parts; any other value is recorded as returned.
    """
    value = storable(value)  # NUL and lone surrogates escaped: the receipt is always stored
    if isinstance(message, Command):
        encoded = _encode(message.update), _encode(message.goto), _encode(message.resume)
        record = {
            _COMMAND: {
                "update": encoded[0],
                "goto": encoded[1],
                "resume": encoded[2],
                "graph": message.graph,
            }
        }
        if _is_json(record):
            return record
        return msg_content_output(_command_text(message))
    if isinstance(message, ToolMessage) and (
        message.artifact is not None or isinstance(value, tuple)  # content_and_artifact
    ):
        envelope = {_MESSAGE: {"content": message.content, "artifact": message.artifact}}
        if _is_json(envelope):
            return envelope
    if isinstance(value, ToolMessage):
        value = value.content
    return value if _is_json(value) else msg_content_output(value)


def _is_json(value: Any) -> bool:
    try:
        canonical_json(value)
    except EffectsError:
        return False
    return True


def _encode(value: Any) -> Any:
    """Messages and ``Send`` of a Command as JSON (``_decode`` reverses it)."""
    if isinstance(value, BaseMessage):
        return {"lc.message": message_to_dict(value)}
    if isinstance(value, Send):
        return {"lc.send": {"node": value.node, "arg": _encode(value.arg)}}
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any, ids: Mapping[str, str]) -> Any:
    if isinstance(value, dict):
        if set(value) == {"lc.message"}:
            [message] = messages_from_dict([value["lc.message"]])
            if isinstance(message, ToolMessage) and message.tool_call_id in ids:
                message.tool_call_id = ids[message.tool_call_id]
            return message
        if set(value) == {"lc.send"}:
            return Send(value["lc.send"]["node"], _decode(value["lc.send"]["arg"], ids))
        return {k: _decode(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, ids) for v in value]
    return value


def _command_text(command: Command[Any]) -> Any:
    """The text of a Command's own ToolMessage (what the model saw), for a lossy record."""
    update = command.update
    found = update.values() if isinstance(update, dict) else update or []
    for item in found:
        for m in item if isinstance(item, list) else [item]:
            if isinstance(m, ToolMessage):
                return m.content
    return str(command)


def recorded_command(op: Operation, *, tool_call_id: str) -> Command[Any] | None:
    """The Command a confirmed operation's tool returned, rebuilt from the record.

    Its ToolMessage answers ``tool_call_id`` (an intent key may map a re-proposed call,
    with a new id, to the recorded operation).
    """
    result = op.result
    if op.status is not S.CONFIRMED or not isinstance(result, dict) or set(result) != {_COMMAND}:
        return None
    body = result[_COMMAND]
    ids = {op.tool_call_id: tool_call_id} if op.tool_call_id else {}
    return Command(
        graph=body.get("graph"),
        update=_decode(body.get("update"), ids),
        goto=_decode(body.get("goto"), ids) or (),
        resume=_decode(body.get("resume"), ids),
    )


def settled_answer(
    op: Operation, answer: Answerer | None, *, tool_name: str, tool_call_id: str
) -> ToolMessage | Command[Any] | None:
    """The answer an effect's ``answer=`` rebuilds for a confirmed record that does not
    hold the tool's own ``Command`` (settled by a reconciler, a person or an operator, or
    a plain return); None when it does not apply.

    A ``Command`` or a ToolMessage is returned with its ToolMessage answering
    ``tool_call_id`` (an intent key may map a re-proposed call to the record); any other
    value becomes the content of a success ToolMessage.

    Raises:
        EffectsError: ``answer`` raised; the record stays confirmed, nothing is resent.
    """
    holds_command = isinstance(op.result, dict) and set(op.result) == {_COMMAND}
    if answer is None or op.status is not S.CONFIRMED or holds_command:
        return None
    try:
        value = answer(op, op.result)
    except Exception as exc:
        raise EffectsError(
            f"effect {op.action!r}: its answer= raised {type(exc).__name__}: {exc}. Operation "
            f"{op.operation_id} is confirmed and will not be sent again: fix answer= and run "
            "the step again"
        ) from exc
    ids = {op.tool_call_id: tool_call_id} if op.tool_call_id else {}
    if isinstance(value, Command):
        update, goto = _decode(_encode(value.update), ids), _decode(_encode(value.goto), ids)
        return dataclasses.replace(value, update=update, goto=goto)
    if isinstance(value, ToolMessage):
        return value.model_copy(
            update={"tool_call_id": ids.get(value.tool_call_id, value.tool_call_id)}
        )
    content: str | list[Any] = msg_content_output(value)
    return ToolMessage(content=content, name=tool_name, tool_call_id=tool_call_id)


def message_text(message: Any) -> str:
    if isinstance(message, ToolMessage):
        return message.text if hasattr(message, "text") else str(message.content)
    return ""
