"""Child process for the payload-key rotation tests: text a PIN through a real graph.

Module-level and picklable, so ``run_in_child`` runs it in a fresh process: each
run builds the graph, the ledger and the checkpointer on their files (or schema)
with the keys it is given, as a deployment restarted with a rotated key does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _graphs import Env, build_graph, call
from langgraph.types import Command

from langgraph_effects import EffectContext, Evidence, effect
from langgraph_effects.testing.providers import FakeMail

PHONE = "+3460000"


def pin_tool(mail: FakeMail, keys: list[str], flavour: str) -> Any:
    """``text_pin`` as ``flavour`` declares it: ``"lost"`` (the default identity, a
    reconciler), ``"intent"`` (an intent key too) or ``"approval"`` (asked first)."""

    def find(op: Any) -> Evidence:
        if mail.search(idempotency_key=op.idempotency_key):
            return Evidence.confirmed("sent under our key", result={"sent": True})
        return Evidence.inconclusive("no message under our key")

    kw: dict[str, Any] = {
        "lost": {},
        "intent": {"intent_key": lambda a: a["attempt_id"]},
        "approval": {"require_approval": True},
    }[flavour]

    @effect(
        "sms.send_pin",
        target=lambda a: a["phone"],
        store_payload=False,
        payload_key=keys,
        reconcile=find,
        **kw,
    )
    def text_pin(phone: str, attempt_id: str, pin: str, ctx: EffectContext) -> dict[str, Any]:
        """Text a one-time PIN to a phone."""
        return mail.send(phone, "PIN", pin, idempotency_key=ctx.idempotency_key)

    return text_pin


def run(
    kind: str,
    mode: str,
    where: str,
    mail_path: str,
    keys: list[str],
    flavour: str,
    start: bool,
    pin: str = "482913",
    thread: str | None = None,
) -> dict[str, Any]:
    """Start (``start``) or resume ``thread`` (default: ``flavour``) with ``keys`` (current
    first); a pending approval is approved on resume. Returns the records of the
    thread's operations and its interrupts."""
    env = Env(kind, mode, path=Path(where), url=where)
    mail = FakeMail(mail_path)
    thread = thread or flavour
    cfg = {"configurable": {"thread_id": thread}}
    try:
        graph = build_graph(
            [pin_tool(mail, keys, flavour)],
            [call("text_pin", "call-1", phone=PHONE, attempt_id="login-7", pin=pin)],
            ledger=env.ledger,
            checkpointer=env.checkpointer,
        )
        value: Any = {"messages": [("user", "log me in")]}
        if not start:
            value = (
                Command(resume={"decision": "approve", "by": "ana"})
                if flavour == "approval"
                else None
            )
        try:
            env.invoke(graph, value, cfg)
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        state = graph.get_state(cfg) if not env.is_async else env.run(graph.aget_state(cfg))
        ops = [o for o in env.ops() if o.workflow_id in (thread, flavour)]
        return {
            "ops": [(o.operation_id, o.status.value) for o in ops],
            "interrupts": [i.value for t in state.tasks for i in t.interrupts],
        }
    finally:
        mail.close()
        env.close()
