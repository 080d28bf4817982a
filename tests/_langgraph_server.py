"""A ``langgraph dev`` process (the ``server`` extra) serving ``examples/server/`` and two
small graphs beside it, its fixtures and the SDK steps its tests take: shared by the
server's room (tests/server/test_server.py) and the kill room (tests/kills/test_server_kill.py).

Importing it skips the importing test module, with the reason, where the server cannot be
installed (the ``server`` extra is missing: ``pip install -e '.[dev]'`` installs it).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _pg import POSTGRES_URL, _postgres_problem, _with_search_path

from langgraph_effects import SQLiteLedger
from langgraph_effects.testing import FakeCRM
from langgraph_effects.testing.faults import scaled

for _module in ("langgraph_api", "langgraph_cli", "langgraph_runtime_inmem", "langgraph_sdk"):
    pytest.importorskip(
        _module, reason=f"{_module} is not installed: the 'server' extra is missing"
    )

from langgraph_sdk import get_sync_client  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "server"
GRAPH = "support"
CRASH_EXIT_CODE = 137

# Two small graphs beside the example, one per way of opening a ledger at module level:
# the README's sync SQLiteLedger, and the factory the example uses.
PATTERNS = '''
import os
import sqlite3
from datetime import timedelta

from langchain_core.messages import AIMessage
from langchain_core.tools import tool as plain_tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from langgraph_effects import (
    EffectContext, EffectState, EffectToolNode, SQLiteLedger, effect, ledger_from_url,
    route_tool_calls,
)


@effect("demo.touch", target=lambda args: args["name"])
def touch(name: str, ctx: EffectContext) -> str:
    """Touch a thing."""
    return f"touched {name}"


class State(MessagesState, EffectState):
    pass


def agent(state):
    if state["messages"][-1].type == "tool":
        return {"messages": [AIMessage("done")]}
    call = {"name": "touch", "args": {"name": "x"}, "id": "call-1", "type": "tool_call"}
    return {"messages": [AIMessage("", tool_calls=[call])]}


def build(ledger):
    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", EffectToolNode([touch], ledger=ledger))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile()


# A sync ledger opened (and set up) when the module loads: its calls run in a worker thread.
sync_ledger = SQLiteLedger(
    sqlite3.connect(os.environ["PATTERN_SYNC_DB"], check_same_thread=False, isolation_level=None)
)
sync_ledger.setup()
readme_pattern = build(sync_ledger)

# An effect with no idempotency promise and no reconciler: a lost answer goes to a person.
@effect("demo.ship", target=lambda args: args["case_id"])
def ship(case_id: str, ctx: EffectContext) -> dict:
    """Ship the replacement for a case."""
    from langgraph_effects.testing import FakeCRM

    return FakeCRM(os.environ["PATTERN_CRM"]).close_case(case_id, "shipped")


def ship_agent(state):
    if state["messages"][-1].type == "tool":
        return {"messages": [AIMessage("done")]}
    case = state["messages"][-1].content.split()[-1]
    call = {"name": "ship", "args": {"case_id": case}, "id": "call-ship", "type": "tool_call"}
    return {"messages": [AIMessage("", tool_calls=[call])]}


def build_review(ledger):
    builder = StateGraph(State)
    builder.add_node("agent", ship_agent)
    builder.add_node("tools", EffectToolNode([ship], ledger=ledger))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile()


review_pattern = build_review(ledger_from_url("sqlite:///" + os.environ["PATTERN_REVIEW_DB"]))

# A tool that outlives its 1 s lease (the lease is renewed while it runs), under the node and,
# as the control, under a plain ToolNode. It notes each entry, so a test sees it is inside.
SLOW_SECONDS = 3.0


def slow_body(case_id: str, key: str | None) -> dict:
    import time

    from langgraph_effects.testing import FakeCRM

    with open(os.path.join(os.environ["PATTERN_SLOW_DIR"], f"entered-{case_id}"), "a") as note:
        note.write(str(os.getpid()) + os.linesep)
    time.sleep(SLOW_SECONDS)
    crm = FakeCRM(os.path.join(os.environ["PATTERN_SLOW_DIR"], "crm.db"))
    return crm.close_case(case_id, "closed slowly", idempotency_key=key)


@effect("demo.slow_close", target=lambda args: args["case_id"])
def slow_close(case_id: str, ctx: EffectContext) -> dict:
    """Close a case, slowly."""
    return slow_body(case_id, ctx.idempotency_key)


def slow_agent(state):
    if state["messages"][-1].type == "tool":
        return {"messages": [AIMessage("done")]}
    case = state["messages"][-1].content.split()[-1]
    call = {"name": "slow_close", "args": {"case_id": case}, "id": "call-slow", "type": "tool_call"}
    return {"messages": [AIMessage("", tool_calls=[call])]}


def build_slow(node):
    builder = StateGraph(State)
    builder.add_node("agent", slow_agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile()


slow_ledger = ledger_from_url("sqlite:///" + os.path.join(os.environ["PATTERN_SLOW_DIR"], "l.db"))
slow_node = EffectToolNode([slow_close], ledger=slow_ledger, lease_for=timedelta(seconds=1))
slow_pattern = build_slow(slow_node)


@plain_tool("slow_close")
def slow_close_plain(case_id: str) -> dict:
    """Close a case, slowly (no ledger)."""
    return slow_body(case_id, None)


slow_control = build_slow(ToolNode([slow_close_plain]))

# The factory: no I/O now; opened without blocking in the server's loop on first use.
factory_pattern = build(ledger_from_url("sqlite:///" + os.environ["PATTERN_FACTORY_DB"]))
# The same on PostgreSQL, as in production (an AsyncConnectionPool in the server's loop).
factory_postgres = build(ledger_from_url(os.environ.get("PATTERN_PG_URL") or "unused.db"))
'''


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A ``langgraph dev`` process on a working dir; ``start`` again after a kill."""

    def __init__(self, workdir: Path, pg_url: str | None) -> None:
        self.workdir = workdir
        self.pg_url = pg_url
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / "server.log"
        self.crm_path = workdir / "crm.db"
        self.ledger_path = workdir / "effects.db"
        config = json.loads((EXAMPLE / "langgraph.json").read_text())
        # The example's own langgraph.json, its paths made absolute, plus the two patterns.
        config["dependencies"] = [str(EXAMPLE), str(workdir)]
        config["graphs"] = {
            name: str(EXAMPLE / spec.removeprefix("./")) for name, spec in config["graphs"].items()
        }
        config["auth"]["path"] = str(EXAMPLE / config["auth"]["path"].removeprefix("./"))
        names = ("readme_pattern", "factory_pattern", "factory_postgres", "review_pattern")
        for name in (*names, "slow_pattern", "slow_control"):
            config["graphs"][name] = f"{workdir / 'patterns.py'}:{name}"
        (workdir / "langgraph.json").write_text(json.dumps(config, indent=2))
        (workdir / "patterns.py").write_text(PATTERNS)

    def start(self) -> None:
        env = {
            **os.environ,
            "LGE_LEDGER_URL": f"sqlite:///{self.ledger_path}",
            "LGE_EXAMPLE_CRM": str(self.crm_path),
            "PATTERN_SYNC_DB": str(self.workdir / "pattern_sync.db"),
            "PATTERN_FACTORY_DB": str(self.workdir / "pattern_factory.db"),
            "PATTERN_PG_URL": self.pg_url or "",
            "PATTERN_REVIEW_DB": str(self.workdir / "pattern_review.db"),
            "PATTERN_CRM": str(self.workdir / "pattern_crm.db"),
            "PATTERN_SLOW_DIR": str(self.workdir),
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
            "LANGSMITH_TRACING": "false",
        }
        env.pop("LGE_DB", None)
        command = [sys.executable, "-m", "langgraph_cli", "dev", "--no-browser", "--no-reload"]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*command, "--port", str(self.port)],
                cwd=self.workdir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + scaled(90)
        with get_sync_client(url=self.url, timeout=scaled(5)) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise AssertionError(
                        f"langgraph dev exited {self.proc.returncode}:\n{self.tail()}"
                    )
                try:
                    client.http.get("/ok")
                    return
                except Exception:
                    time.sleep(0.25)
        raise AssertionError(f"langgraph dev did not answer /ok in 90 s:\n{self.tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=scaled(20))
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def crm(self) -> FakeCRM:
        return FakeCRM(self.crm_path)


@pytest.fixture(scope="module")
def pg_schema_url() -> Iterator[str | None]:
    """A fresh PostgreSQL schema for the module's server (None: PostgreSQL unreachable)."""
    if _postgres_problem() is not None:
        yield None
        return
    import psycopg

    schema = f"lge_srv_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield _with_search_path(POSTGRES_URL, schema)
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, pg_schema_url: str | None) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("server"), pg_schema_url)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def client(server: Server) -> Iterator[Any]:
    """The SDK as a signed-in user (``ana``, the example's demo auth), as a UI sends it."""
    with get_sync_client(
        url=server.url, timeout=scaled(60), headers={"Authorization": "Bearer demo-ana"}
    ) as sdk:
        yield sdk


def _ask(client: Any, text: str, *, tenant: str, graph: str = GRAPH) -> tuple[str, dict[str, Any]]:
    """Start a thread with one user message; return it and the run config."""
    config = {"configurable": {"tenant_id": tenant}}
    thread = client.threads.create()["thread_id"]
    client.runs.wait(
        thread, graph, config=config, input={"messages": [{"role": "user", "content": text}]}
    )
    return thread, config


def _pending(client: Any, thread: str) -> dict[str, dict[str, Any]]:
    """The thread's pending approval requests by target: {target: {"id", "value"}}."""
    interrupts = client.threads.get_state(thread)["interrupts"]
    return {it["value"]["target"]: it for it in interrupts}


def _answer(it: dict[str, Any], decision: str, by: str = "ana") -> dict[str, Any]:
    value = it["value"]
    return {
        "operation_id": value["operation_id"],
        "request_id": value["request_id"],
        "decision": decision,
        "by": by,
        "reason": f"{decision}d in a test",
    }


def _ledger_ops(server: Server, tenant: str) -> dict[str, Any]:
    with SQLiteLedger.from_conn_string(str(server.ledger_path)) as ledger:
        return {op.target: op for op in ledger.list(tenant_id=tenant, limit=1000)}
