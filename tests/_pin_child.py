"""Child process for the keyed-digest tests: send a PIN once, through a real graph.

Module-level and picklable, so ``run_in_child`` runs it in a fresh process:
the digest key comes from ``LGE_PAYLOAD_KEY`` there, as in a deployment.
"""

from __future__ import annotations

import os
from typing import Any

from _graphs import build_graph, call, tool_messages
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_effects import EffectContext, SQLiteLedger, effect
from langgraph_effects.testing.providers import FakeMail


def send_pin(
    ledger_path: str, mail_path: str, thread: str, attempt_id: str, pin: str, key: str
) -> dict[str, Any]:
    """Run one thread whose model asks to text ``pin``; return the ledger's view and the reply."""
    os.environ["LGE_PAYLOAD_KEY"] = key
    mail = FakeMail(mail_path)

    @effect(
        "auth.send_pin",
        target=lambda a: a["phone"],
        intent_key=lambda a: a["attempt_id"],
        store_payload=False,
    )
    def text_pin(phone: str, attempt_id: str, pin: str, ctx: EffectContext) -> dict[str, Any]:
        """Text a one-time PIN to a phone."""
        return mail.send(phone, "PIN", pin, idempotency_key=ctx.idempotency_key)

    try:
        with SQLiteLedger.from_conn_string(ledger_path) as ledger:
            ledger.setup()
            graph = build_graph(
                [text_pin],
                [call("text_pin", "call-1", phone="+3460000", attempt_id=attempt_id, pin=pin)],
                ledger=ledger,
                checkpointer=InMemorySaver(),
            )
            result = graph.invoke(
                {"messages": [("user", "log me in")]}, {"configurable": {"thread_id": thread}}
            )
            ops = ledger.list(tenant_id="default")
            return {
                "ops": [(o.operation_id, o.status.value, o.payload_digest) for o in ops],
                "reply": [str(m.content) for m in tool_messages(result)],
                "sent": mail.effects,
            }
    finally:
        mail.close()
