"""``examples/server/`` under the real ``langgraph dev``, killed after the provider acted and
started again on the same directory: the CRM counts one closure. The server, its fixtures and
the SDK steps are the server room's (``tests/_langgraph_server.py``); skipped with the reason
where the ``server`` extra is missing.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from _langgraph_server import (
    CRASH_EXIT_CODE,
    GRAPH,
    Server,
    _answer,
    _ask,
    _ledger_ops,
    _pending,
    client,
    pg_schema_url,
    server,
)

from langgraph_effects import OperationStatus, SQLiteLedger
from langgraph_effects.testing import Fault
from langgraph_effects.testing.faults import scaled

__all__ = ["client", "pg_schema_url", "server"]  # fixtures from _langgraph_server


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
