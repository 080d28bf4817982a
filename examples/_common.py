"""Shared pieces of the examples: a scripted chat model, file paths, a tiny table printer.

Nothing here is part of the library. ``ScriptedChatModel`` stands in for a real
LLM so every example runs with no API key: it reads the conversation and
proposes the next step of a fixed plan, so a fresh process that rebuilds the
graph proposes exactly what the crashed one did. ``chat_model`` returns a real
model instead when you pass ``--model provider:name`` (``langchain`` and the
provider's package installed, its API key in the environment).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

ToolCallPlan = Sequence[dict[str, Any]]
"""One turn of the plan: the tool calls to propose, as ``{"name": ..., "args": {...}}``."""


class ScriptedChatModel(BaseChatModel):
    """A deterministic chat model: turn N proposes ``plan[N]``, then it summarises.

    The turn is the number of tool-calling AIMessages already in the
    conversation, so the model is a pure function of the messages (a resumed
    process never needs it again for a turn the checkpoint already holds).
    Tool-call ids are fixed (``call-<turn>-<index>``), like the ids a real
    model mints once and the checkpoint keeps.
    """

    plan: list[list[dict[str, Any]]]

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        return self  # the plan already names the tools

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        turn = sum(1 for m in messages if isinstance(m, AIMessage) and m.tool_calls)
        if turn < len(self.plan):
            calls = [
                {
                    "name": c["name"],
                    "args": c["args"],
                    "id": f"call-{turn}-{i}",
                    "type": "tool_call",
                }
                for i, c in enumerate(self.plan[turn])
            ]
            reply = AIMessage(content="", tool_calls=calls, id=f"ai-{turn}")
        else:
            results = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
            reply = AIMessage(content="Done. " + (results[-1] if results else ""), id=f"ai-{turn}")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def chat_model(spec: str | None, plan: list[list[dict[str, Any]]]) -> BaseChatModel:
    """The scripted model, or a real one for ``spec`` like ``"openai:gpt-4o-mini"``."""
    if not spec:
        return ScriptedChatModel(plan=plan)
    from langchain.chat_models import init_chat_model  # the 'agents' extra

    return init_chat_model(spec, temperature=0)


def add_model_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        metavar="PROVIDER:NAME",
        help="use a real chat model (e.g. openai:gpt-4o-mini) instead of the scripted one; "
        "needs langchain, the provider's package and its API key",
    )


MARKER = ".langgraph-effects-example"


def work_dir(name: str, given: str | None, *, fresh: bool) -> Path:
    """The example's directory (``--dir`` or one under the system temp dir).

    ``fresh`` empties it first (a new run); a resume keeps what the crash left.
    Only a directory an example created (it holds a marker file) or an empty
    one is ever emptied: a ``--dir`` pointing at anything else is refused.
    """
    path = Path(given) if given else Path(tempfile.gettempdir()) / "langgraph-effects" / name
    if fresh and path.exists() and any(path.iterdir()):
        if not (path / MARKER).exists():
            raise SystemExit(f"refusing to empty {path}: not a directory an example created")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).touch()
    return path


def saver_connection(path: Path) -> sqlite3.Connection:
    """The checkpointer's OWN connection (never share the ledger's: SqliteSaver commits it)."""
    return sqlite3.connect(path, check_same_thread=False)


def table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    """A plain text table."""
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def narrate(graph: Any, graph_input: Any, config: dict[str, Any]) -> list[Any]:
    """Run the graph (``durability="sync"``), printing each step; return pending interrupts.

    ``durability="sync"`` saves the AIMessage (and its tool-call ids) before a
    tool runs, so a resumed run meets the same calls, and so the same operations.
    """
    interrupts: list[Any] = []
    for chunk in graph.stream(graph_input, config, stream_mode="updates", durability="sync"):
        for node, update in chunk.items():
            if node == "__interrupt__":
                interrupts.extend(update)
                print("  [interrupt] the graph waits for a person (see the request below)")
                continue
            messages = update.get("messages", []) if isinstance(update, dict) else []
            for message in messages:
                print(f"  [{node}] {describe(message)}")
    return interrupts


def describe(message: BaseMessage) -> str:
    """One line for a message: tool calls, a tool result, or the text."""
    if isinstance(message, AIMessage) and message.tool_calls:
        calls = ", ".join(
            f"{c['name']}({', '.join(f'{k}={v!r}' for k, v in c['args'].items())})"
            for c in message.tool_calls
        )
        return f"model proposes {calls}"
    text = str(message.content)
    text = text if len(text) <= 160 else text[:157] + "..."
    if isinstance(message, ToolMessage):
        flag = " (error)" if message.status == "error" else ""
        return f"{message.name}{flag} -> {text}"
    return f"model says: {text}"


def parse_crash(value: str | None) -> tuple[Any, int] | None:
    """``POINT[:HIT]`` (a ``CrashPoint`` value, hit counting from 1) or None."""
    from langgraph_effects.testing.faults import CrashPoint

    if not value:
        return None
    point, _, hit = value.partition(":")
    return CrashPoint(point), int(hit or 1)


def crash_choices() -> list[str]:
    from langgraph_effects.testing.faults import CrashPoint

    return [p.value for p in CrashPoint]


def who(actor: str) -> str:
    """An event's actor; a lease owner (``[takeover:]host|pid|started|nonce``) as "process PID"."""
    if "|" not in actor:
        return actor
    head, pid = actor.split("|")[:2]
    return f"{'takeover by ' if head.startswith('takeover:') else ''}process {pid}"
