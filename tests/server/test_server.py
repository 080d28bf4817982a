"""``examples/server/`` under the real LangGraph API server, driven with ``langgraph_sdk``.

One ``langgraph dev`` process (the ``server`` extra: langgraph-cli with its in-memory
runtime) serves the module, from a temp working dir: its state goes to
``.langgraph_api/`` there, the ledger and the fake CRM to SQLite files beside it. The
server runs with its blocking-call detector (blockbuster) on, as ``langgraph dev`` does
by default. The crash test kills it and starts it again on the same directory.

Skipped, with the reason, only where the server cannot be installed (the ``server``
extra is missing: ``pip install -e '.[dev]'`` installs it).
"""

from __future__ import annotations

import json
import os
import re
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
from _pg import POSTGRES_URL, _postgres_problem, _with_search_path, require_postgres

from langgraph_effects import OperationStatus, SQLiteLedger
from langgraph_effects.testing import FakeCRM, Fault
from langgraph_effects.testing.faults import scaled

for _module in ("langgraph_api", "langgraph_cli", "langgraph_runtime_inmem", "langgraph_sdk"):
    pytest.importorskip(
        _module, reason=f"{_module} is not installed: the 'server' extra is missing"
    )

from langgraph_sdk import get_sync_client  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
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


def _agent_chat_ui_renders(value: Any) -> bool:
    """What Agent Chat UI (fdc87e6) checks before it shows an interrupt as a HITL request."""
    actions, configs = value.get("action_requests"), value.get("review_configs")
    return (
        isinstance(actions, list)
        and bool(actions)
        and all(isinstance(a.get("name"), str) and isinstance(a.get("args"), dict) for a in actions)
        and isinstance(configs, list)
        and bool(configs)
        and all(
            isinstance(c.get("action_name"), str) and isinstance(c.get("allowed_decisions"), list)
            for c in configs
        )
    )


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


def test_approve_one_call_and_reject_another_by_interrupt_id(server: Server, client: Any) -> None:
    """Two approval requests of one AIMessage, answered by interrupt id: the approved case is
    closed once, the rejected one never, and the ledger records who decided."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    first, second = f"case-{tenant}-a", f"case-{tenant}-b"
    thread, config = _ask(client, f"close {first} and {second}", tenant=tenant)
    pending = _pending(client, thread)
    assert set(pending) == {first, second}
    assert all(it["value"]["kind"] == "effect_approval" for it in pending.values())

    resume = {
        pending[first]["id"]: _answer(pending[first], "approve"),
        pending[second]["id"]: _answer(pending[second], "reject"),
    }
    final = client.runs.wait(thread, GRAPH, config=config, command={"resume": resume})

    crm = server.crm()
    assert (crm.effects_for(first), crm.effects_for(second)) == (1, 0)
    ops = _ledger_ops(server, tenant)
    assert ops[first].status is OperationStatus.CONFIRMED
    assert ops[second].status is OperationStatus.REJECTED
    assert ops[first].authorization_ref == "approved-by:ana"
    tools = {m["tool_call_id"]: m for m in final["messages"] if m["type"] == "tool"}
    assert [m["status"] for m in tools.values()] == ["success", "error"]
    assert client.threads.get_state(thread)["interrupts"] == []


def test_batched_approvals_answered_without_an_interrupt_id(server: Server, client: Any) -> None:
    """``support_hitl`` asks both approvals of one AIMessage in one HITL-shaped interrupt;
    answered as Agent Chat UI does (a bare ``{"decisions": [...]}``, no interrupt id: one
    approve, one reject with a message), the approved case is closed once, the other never."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    first, second = f"case-{tenant}-a", f"case-{tenant}-b"
    thread, config = _ask(
        client, f"close {first} and {second}", tenant=tenant, graph="support_hitl"
    )
    [asked] = client.threads.get_state(thread)["interrupts"]
    value = asked["value"]
    assert value["kind"] == "effect_approvals"
    assert _agent_chat_ui_renders(value)
    assert [a["args"]["case_id"] for a in value["action_requests"]] == [first, second]

    decisions = [{"type": "approve"}, {"type": "reject", "message": "not this one"}]
    final = client.runs.wait(
        thread, "support_hitl", config=config, command={"resume": {"decisions": decisions}}
    )

    crm = server.crm()
    assert (crm.effects_for(first), crm.effects_for(second)) == (1, 0)
    ops = _ledger_ops(server, tenant)
    assert ops[first].status is OperationStatus.CONFIRMED
    assert ops[second].status is OperationStatus.REJECTED
    tools = {m["tool_call_id"]: m["status"] for m in final["messages"] if m["type"] == "tool"}
    assert sorted(tools.values()) == ["error", "success"]
    assert client.threads.get_state(thread)["interrupts"] == []


def test_a_review_answered_in_the_hitl_shape(server: Server, client: Any) -> None:
    """The shipment's answer is lost (no key promise, no reconciler): the review interrupt
    carries the HITL shape (Agent Chat UI shows it; no retry offered, a resend could ship
    twice) and is answered as that UI edits fields, without an interrupt id: outcome
    "confirmed", the provider's result as text. The operation is confirmed; one shipment."""
    case = f"case-{uuid.uuid4().hex[:8]}"
    crm = FakeCRM(server.workdir / "pattern_crm.db")
    crm.faults.push(Fault.LOSE_RESPONSE)
    thread = client.threads.create()["thread_id"]
    client.runs.wait(
        thread, "review_pattern", input={"messages": [{"role": "user", "content": f"ship {case}"}]}
    )
    [asked] = client.threads.get_state(thread)["interrupts"]
    value = asked["value"]
    assert value["kind"] == "effect_review"
    assert _agent_chat_ui_renders(value)
    assert value["review_configs"][0]["allowed_decisions"] == ["edit", "reject"]
    assert "Retry risk" in value["action_requests"][0]["description"]

    edited = {"name": "ship", "args": {"outcome": "confirmed", "result": '{"shipped": true}'}}
    final = client.runs.wait(
        thread,
        "review_pattern",
        command={"resume": {"decisions": [{"type": "edit", "edited_action": edited}]}},
    )
    assert client.threads.get_state(thread)["interrupts"] == []
    assert [m["status"] for m in final["messages"] if m["type"] == "tool"] == ["success"]
    assert (crm.effects_for(case), crm.duplicates) == (1, 0)
    with SQLiteLedger.from_conn_string(str(server.workdir / "pattern_review.db")) as ledger:
        [op] = [o for o in ledger.list(limit=100) if o.target == case]
    assert op.status is OperationStatus.CONFIRMED
    assert op.result == {"shipped": True}


def test_an_approval_is_recorded_under_the_servers_authenticated_user(
    server: Server, client: Any
) -> None:
    """With the example's demo auth (a bearer token names the user), answers sent with the
    SDK are recorded under the authenticated user: a native answer claiming another name
    keeps that name as claimed_by; a HITL-shaped one needs no name; an unauthenticated
    answer naming nobody is refused and the request stays open."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    first, second = f"case-{tenant}-a", f"case-{tenant}-b"
    thread, config = _ask(client, f"close {first} and {second}", tenant=tenant)
    pending = _pending(client, thread)

    # An unauthenticated visitor answering without a name: refused, nothing recorded.
    nameless = {
        "operation_id": pending[second]["value"]["operation_id"],
        "decisions": [{"type": "approve"}],
    }
    with get_sync_client(url=server.url, timeout=scaled(60)) as visitor:  # no token
        refused = visitor.runs.wait(
            thread,
            GRAPH,
            config=config,
            command={"resume": {pending[second]["id"]: nameless}},
            raise_error=False,
        )
    assert "who decides" in json.dumps(refused)
    assert set(_pending(client, thread)) == {first, second}
    assert _ledger_ops(server, tenant)[second].authorization_ref is None

    headers = {"Authorization": "Bearer demo-alice"}
    with get_sync_client(url=server.url, timeout=scaled(60), headers=headers) as alice:
        claimed = _answer(pending[first], "approve", by="mallory")
        alice.runs.wait(
            thread, GRAPH, config=config, command={"resume": {pending[first]["id"]: claimed}}
        )
    [request] = _pending(client, thread).values()  # the second case, asked again
    with get_sync_client(
        url=server.url, timeout=scaled(60), headers={"Authorization": "Bearer demo-bob"}
    ) as bob:
        hitl = {
            "operation_id": request["value"]["operation_id"],
            "decisions": [{"type": "approve"}],
        }
        bob.runs.wait(thread, GRAPH, config=config, command={"resume": {request["id"]: hitl}})

    crm = server.crm()
    assert (crm.effects_for(first), crm.effects_for(second)) == (1, 1)
    ops = _ledger_ops(server, tenant)
    with SQLiteLedger.from_conn_string(str(server.ledger_path)) as ledger:
        approvals = {
            target: next(
                e for e in ledger.events(tenant, op.operation_id) if e.kind.value == "approve"
            )
            for target, op in ops.items()
        }
    assert approvals[first].actor == "alice"
    assert approvals[first].detail["claimed_by"] == "mallory"
    assert approvals[first].detail["verified_by"] == "langgraph-auth:alice"
    assert approvals[second].actor == "bob"
    assert "claimed_by" not in approvals[second].detail


def test_a_sync_ledger_runs_off_the_loop_under_the_blocking_detector_as_the_factory_does(
    server: Server, client: Any
) -> None:
    """Under ``langgraph dev`` a sync SQLiteLedger opened at module level passes the
    blocking-call detector (the async driver runs its calls in a worker thread) and
    confirms its effect; so does the same graph on ``ledger_from_url``."""
    inputs = {"messages": [{"role": "user", "content": "touch x"}]}
    for graph, db in (
        ("readme_pattern", "pattern_sync.db"),
        ("factory_pattern", "pattern_factory.db"),
    ):
        thread = client.threads.create()["thread_id"]
        final = client.runs.wait(thread, graph, input=inputs)
        assert [m["content"] for m in final["messages"] if m["type"] == "tool"] == ["touched x"]
        with SQLiteLedger.from_conn_string(str(server.workdir / db)) as ledger:
            [op] = ledger.list(limit=10)
        assert op.status is OperationStatus.CONFIRMED
    assert "Blocking call to sqlite3" not in server.tail(400)


@pytest.mark.postgres
def test_the_factory_runs_on_postgresql_under_the_server(server: Server, client: Any) -> None:
    """``ledger_from_url("postgresql://...")`` under ``langgraph dev``: the pool opens in the
    server's loop, the run succeeds and the operation is confirmed in PostgreSQL."""
    require_postgres()
    assert server.pg_url is not None
    thread = client.threads.create()["thread_id"]
    inputs = {"messages": [{"role": "user", "content": "touch x"}]}
    final = client.runs.wait(thread, "factory_postgres", input=inputs)
    assert [m["content"] for m in final["messages"] if m["type"] == "tool"] == ["touched x"]
    from langgraph_effects.ledger.postgres import PostgresLedger

    with PostgresLedger.from_conn_string(server.pg_url) as ledger:
        [op] = ledger.list(limit=10)
    assert op.status is OperationStatus.CONFIRMED


def test_no_duplicate_after_the_server_is_killed_after_the_provider_acted(
    server: Server, client: Any
) -> None:
    """The approved close reaches the CRM, then the server process dies before the receipt
    (state saved before the kill); restarted on the same directory, the thread answers the
    same approval again and the ledger settles it: the CRM counts one closure, not two."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    case = f"case-{tenant}"
    thread, config = _ask(client, f"close {case}", tenant=tenant)
    [request] = _pending(client, thread).values()
    # Save the state: langgraph dev's in-memory runtime writes its checkpoints to
    # .langgraph_api/ when it shuts down cleanly (runs and threads also every 10 s).
    server.stop()
    server.start()
    assert [it["id"] for it in client.threads.get_state(thread)["interrupts"]] == [request["id"]]

    # The CRM applies and commits the close, then kills the calling process: the server.
    server.crm().faults.push(Fault.CRASH, exit_code=CRASH_EXIT_CODE)
    client.runs.create(
        thread,
        GRAPH,
        config=config,
        command={"resume": {request["id"]: _answer(request, "approve")}},
    )
    assert server.proc is not None
    assert server.proc.wait(timeout=scaled(60)) == CRASH_EXIT_CODE
    assert server.crm().effects_for(case) == 1
    assert _ledger_ops(server, tenant)[case].status is OperationStatus.DISPATCHING

    server.start()
    # A run the last write saw running is retried by the restarted server itself; wait for it.
    for run in client.runs.list(thread):
        if run["status"] in ("pending", "running"):
            client.runs.join(thread, run["run_id"])
    for it in client.threads.get_state(thread)["interrupts"]:
        assert it["id"] == request["id"]  # the same request, as saved before the kill
        client.runs.wait(
            thread, GRAPH, config=config, command={"resume": {it["id"]: _answer(it, "approve")}}
        )

    crm = server.crm()
    assert (crm.effects_for(case), crm.duplicates) == (1, 0)
    op = _ledger_ops(server, tenant)[case]
    assert op.status is OperationStatus.CONFIRMED
    with SQLiteLedger.from_conn_string(str(server.ledger_path)) as ledger:
        kinds = [e.kind.value for e in ledger.events(tenant, op.operation_id)]
    assert "mark_unknown" in kinds  # the dead owner's lease was taken over, then reconciled
    messages = client.threads.get_state(thread)["values"]["messages"]
    [answer] = [m for m in messages if m["type"] == "tool"]
    assert answer["status"] == "success"
    assert json.loads(answer["content"])["closed_by"] == op.idempotency_key


@pytest.mark.parametrize("graph", ["slow_pattern", "slow_control"])
def test_a_second_execution_while_the_first_is_still_in_the_tool(
    server: Server, client: Any, graph: str
) -> None:
    """LangGraph Server re-dispatching a tool call that outlived its heartbeat (langgraph
    issues 7417, 7213), emulated: ``langgraph dev`` never re-dispatches a live run, so a
    second run on the same thread (``multitask_strategy="interrupt"``) executes the same
    tool call from the same checkpoint while the first run's tool, a sync body in a worker
    thread that the interrupt does not stop, is still inside past its 1 s lease.

    Under the node the second execution waits for the first (its lease is renewed) and
    replays its result: the body ran once, the CRM counts one closure, and the second run
    answers with the first one's result. The plain ToolNode (the control) closes it twice.
    """
    case = f"case-{uuid.uuid4().hex[:8]}"
    entered = server.workdir / f"entered-{case}"
    config = {"configurable": {"tenant_id": "acme"}}
    thread = client.threads.create()["thread_id"]
    inputs = {"messages": [{"role": "user", "content": f"close {case}"}]}
    first = client.runs.create(thread, graph, input=inputs, config=config)
    deadline = time.monotonic() + scaled(60)
    while not entered.exists():
        assert time.monotonic() < deadline, server.tail()
        time.sleep(0.05)
    time.sleep(1.5)  # past the first one's 1 s lease: only its renewals keep it
    second = client.runs.create(
        thread, graph, input=None, config=config, multitask_strategy="interrupt"
    )
    final = client.runs.join(thread, second["run_id"])
    assert client.runs.get(thread, first["run_id"])["status"] == "interrupted"
    crm = FakeCRM(server.workdir / "crm.db")
    if graph == "slow_control":
        assert len(entered.read_text().splitlines()) == 2
        assert crm.effects_for(case) == 2  # the duplicate of issue 7417
        return
    assert len(entered.read_text().splitlines()) == 1  # the second never entered the tool
    assert crm.effects_for(case) == 1
    with SQLiteLedger.from_conn_string(str(server.workdir / "l.db")) as ledger:
        [op] = [o for o in ledger.list(tenant_id="acme", limit=1000) if o.target == case]
    assert (op.status, op.attempts) == (OperationStatus.CONFIRMED, 1)
    [answer] = [m for m in final["messages"] if m["type"] == "tool"]
    assert json.loads(answer["content"])["closed_by"] == op.idempotency_key


def test_the_readme_sdk_block_runs_against_the_server(server: Server) -> None:
    """The SDK block of docs/server.md, run as written against this server: case-1 is
    closed once, case-2 never."""
    text = (ROOT / "docs" / "server.md").read_text(encoding="utf-8")
    section = text[text.index("Answer approvals with the SDK") :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    block = match.group(1)
    assert "http://127.0.0.1:2024" in block
    exec(compile(block.replace("http://127.0.0.1:2024", server.url), "server.md", "exec"), {})
    crm = server.crm()
    assert (crm.effects_for("case-1"), crm.effects_for("case-2")) == (1, 0)


# -- Agent Chat UI's own requests ----------------------------------------------------------
#
# What Agent Chat UI (commit fdc87e6, with @langchain/langgraph-sdk 1.8.10) sends, taken from
# its source: the key typed in its "LangSmith API Key" field goes out as ``x-api-key`` on
# every request (``src/providers/Stream.tsx``: ``useStream({apiKey})``; the SDK's client sets
# ``x-api-key``), never ``Authorization``. ``checkGraphStatus`` reads ``/info``; a message is
# ``stream.submit({messages: [human]}, {streamMode: ["values"], streamSubgraphs: true,
# streamResumable: true})`` (``src/components/thread/index.tsx``); an answer is
# ``stream.submit({}, {command: {resume: {decisions}}})`` (``agent-inbox``'s
# ``thread-actions-view.tsx`` and ``use-interrupted-actions.tsx``), which the SDK's
# ``useStream`` sends with the thread head's checkpoint (``fetchStateHistory: true``), the
# stream modes the UI reads (values, messages, and custom for its ``onCustomEvent``) and
# ``on_disconnect: "cancel"``. An error event's ``message`` is what the UI shows in its
# error toast (``index.tsx``: ``toast.error(..., stream.error.message)``).

UI_COMMIT = "fdc87e65307581b02898d33c62b3f285e56bd85b"
UI_GRAPH = "support_hitl"


def _ui_headers(api_key: str | None) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    if api_key:
        headers["x-api-key"] = api_key
    return headers


def _ui_stream(server: Server, path: str, body: dict[str, Any], api_key: str | None) -> list[Any]:
    """POST a run as the UI streams it; the (event, data) pairs of its server-sent events."""
    import httpx

    events: list[Any] = []
    event = None
    with httpx.stream(
        "POST", server.url + path, json=body, headers=_ui_headers(api_key), timeout=scaled(120)
    ) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((event, json.loads(line.removeprefix("data: "))))
    return events


def _ui_ask(server: Server, text: str, api_key: str | None) -> str:
    """Agent Chat UI's first message: a thread, then the run streaming it."""
    import httpx

    headers = _ui_headers(api_key)
    assert httpx.get(server.url + "/info", headers=headers, timeout=scaled(60)).status_code == 200
    thread = httpx.post(
        server.url + "/threads", json={"metadata": {}}, headers=headers, timeout=scaled(60)
    ).json()["thread_id"]
    human = {"id": str(uuid.uuid4()), "type": "human", "content": [{"type": "text", "text": text}]}
    body = {
        "input": {"messages": [human]},
        "on_disconnect": "continue",
        "stream_mode": ["values", "messages-tuple", "custom"],
        "stream_subgraphs": True,
        "stream_resumable": True,
        "assistant_id": UI_GRAPH,
    }
    _ui_stream(server, f"/threads/{thread}/runs/stream", body, api_key)
    return thread


def _ui_answer(server: Server, thread: str, decisions: list[Any], api_key: str | None) -> list[Any]:
    """Agent Chat UI's answer to the thread's open interrupt."""
    import httpx

    state = httpx.get(
        f"{server.url}/threads/{thread}/state", headers=_ui_headers(api_key), timeout=scaled(60)
    ).json()
    checkpoint = {k: v for k, v in state["checkpoint"].items() if k != "thread_id"}
    body = {
        "input": {},
        "command": {"resume": {"decisions": decisions}},
        "on_disconnect": "cancel",
        "checkpoint": checkpoint,
        "stream_mode": ["values", "messages-tuple", "custom"],
        "stream_resumable": False,
        "assistant_id": UI_GRAPH,
    }
    return _ui_stream(server, f"/threads/{thread}/runs/stream", body, api_key)


def test_agent_chat_ui_approves_rejects_and_edits_as_it_sends_them(
    server: Server, client: Any
) -> None:
    """Agent Chat UI's exact requests, with its API-key field set to ``demo-ana``: the batched
    approval it renders, answered "Submit all 3 decisions" (approve, reject with a reason,
    edit a field): one closure, none, one with the edited resolution; decided by ``ana``."""
    run = uuid.uuid4().hex[:8]
    approved, rejected, edited = (f"case-{run}-{x}" for x in "abc")
    thread = _ui_ask(server, f"close {approved}, {rejected} and {edited}", "demo-ana")
    [asked] = client.threads.get_state(thread)["interrupts"]
    assert _agent_chat_ui_renders(asked["value"])
    decisions = [
        {"type": "approve"},
        {"type": "reject", "message": "the customer called back"},
        {
            "type": "edit",
            "edited_action": {
                "name": "close_case",
                "args": {"case_id": edited, "resolution": "refunded instead"},
            },
        },
    ]
    events = _ui_answer(server, thread, decisions, "demo-ana")
    assert not [data for event, data in events if event == "error"], events

    crm = server.crm()
    counted = [crm.effects_for(c) for c in (approved, rejected, edited)]
    assert counted == [1, 0, 1]
    assert crm.get_case(edited)["resolution"] == "refunded instead"
    assert crm.get_case(rejected)["status"] == "open"
    ops = _ledger_ops(server, "default")
    assert ops[approved].status is OperationStatus.CONFIRMED
    assert ops[rejected].status is OperationStatus.REJECTED
    with SQLiteLedger.from_conn_string(str(server.ledger_path)) as ledger:
        decided = [
            e.actor
            for target in (approved, rejected)
            for e in ledger.events("default", ops[target].operation_id)
            if e.kind.value in ("approve", "reject")
        ]
    assert decided == ["ana", "ana"]  # the key named the user; no "by" was sent
    assert client.threads.get_state(thread)["interrupts"] == []


def test_agent_chat_ui_without_a_key_is_refused_with_a_message_it_shows(
    server: Server, client: Any
) -> None:
    """No API key (an unauthenticated visitor, who names nobody): "Approve" is refused,
    nothing is sent, and the approval is asked again at once (not a failed run) with the
    reason in its ``notice`` and in front of the action's description, which the UI renders;
    the same click with the key ``demo-ana`` closes the case once."""
    case = f"case-{uuid.uuid4().hex[:8]}"
    thread = _ui_ask(server, f"close {case}", None)
    events = _ui_answer(server, thread, [{"type": "approve"}], None)
    assert not [data for event, data in events if event == "error"], events
    assert server.crm().effects_for(case) == 0
    [asked] = client.threads.get_state(thread)["interrupts"]
    assert "who decides" in asked["value"]["notice"], asked
    [action] = asked["value"]["action_requests"]
    assert action["description"].startswith(asked["value"]["notice"])
    assert _agent_chat_ui_renders(asked["value"])

    events = _ui_answer(server, thread, [{"type": "approve"}], "demo-ana")
    assert not [data for event, data in events if event == "error"], events
    assert server.crm().effects_for(case) == 1
    assert client.threads.get_state(thread)["interrupts"] == []


def test_a_token_that_is_not_a_demo_token_is_refused_naming_the_headers(server: Server) -> None:
    """The demo auth refuses any other key with a 401 that says which headers it reads."""
    import httpx

    refused = httpx.get(
        server.url + "/threads/x", headers=_ui_headers("lsv2_pt_x"), timeout=scaled(60)
    )
    assert refused.status_code == 401
    assert "X-Api-Key: demo-<name>" in refused.text


def test_the_docs_name_the_agent_chat_ui_commit_these_requests_come_from() -> None:
    """docs/agent-chat-ui.md and the README name the UI commit the requests above are from."""
    page = (ROOT / "docs" / "agent-chat-ui.md").read_text()
    assert UI_COMMIT in page
    assert UI_COMMIT[:7] in (ROOT / "README.md").read_text()
