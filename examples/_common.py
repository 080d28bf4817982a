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
            reply = AIMessage(content="Done. " + " | ".join(results[-2:]), id=f"ai-{turn}")
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


def work_dir(name: str, given: str | None, *, fresh: bool) -> Path:
    """The example's directory (``--dir`` or one under the system temp dir).

    ``fresh`` empties it first (a new run); a resume keeps what the crash left.
    """
    path = Path(given) if given else Path(tempfile.gettempdir()) / "langgraph-effects" / name
    if fresh and path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
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
