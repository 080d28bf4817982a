"""``examples/server/`` under the real LangGraph API server, driven with ``langgraph_sdk``.

One ``langgraph dev`` process (the ``server`` extra: langgraph-cli with its in-memory
runtime) serves the module, from a temp working dir: its state goes to
``.langgraph_api/`` there, the ledger and the fake CRM to SQLite files beside it. The
server runs with its blocking-call detector (blockbuster) on, as ``langgraph dev`` does
by default (the server, its fixtures and the SDK steps: ``tests/_langgraph_server.py``).
The test that kills the server and starts it again on the same directory is in the kill
room, ``tests/kills/test_server_kill.py``.

Skipped, with the reason, only where the server cannot be installed (the ``server``
extra is missing: ``pip install -e '.[dev]'`` installs it).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

import pytest
from _langgraph_server import (
    GRAPH,
    ROOT,
    Server,
    _answer,
    _ask,
    _ledger_ops,
    _pending,
    client,
    pg_schema_url,
    server,
)
from _pg import require_postgres
from langgraph_sdk import get_sync_client  # after _langgraph_server: it skips without it

from langgraph_effects import OperationStatus, SQLiteLedger
from langgraph_effects.testing import FakeCRM, Fault
from langgraph_effects.testing.faults import scaled

__all__ = ["client", "pg_schema_url", "server"]  # fixtures from _langgraph_server


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
