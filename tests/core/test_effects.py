"""``@effect``: still a LangChain tool for the model, never an unguarded effect."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.tools import tool

from langgraph_effects import EffectContext, effect
from langgraph_effects.effects import effect_spec
from langgraph_effects.errors import EffectsError, InvalidInput


@effect("crm.close_case", target=lambda a: a["case_id"])
def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
    """Close a CRM case."""
    return {"case_id": case_id, "key": ctx.idempotency_key}


def test_context_parameter_is_hidden_from_the_model() -> None:
    """A parameter annotated EffectContext is not in the schema the model sees."""
    schema = close_case.tool_call_schema.model_json_schema()
    assert set(schema["properties"]) == {"case_id", "resolution"}
    assert close_case.name == "close_case"
    assert close_case.description == "Close a CRM case."


def test_spec_is_attached() -> None:
    """The effect metadata travels with the tool; a plain tool has none."""
    spec = effect_spec(close_case)
    assert spec is not None
    assert spec.action == "crm.close_case"
    assert spec.target_of({"case_id": "A"}) == "A"

    @tool
    def plain(x: int) -> int:
        """Echo."""
        return x

    assert effect_spec(plain) is None


def test_effect_outside_the_core_is_refused() -> None:
    """Invoked outside EffectToolNode / EffectMiddleware an effect tool refuses to act."""
    with pytest.raises(EffectsError, match="outside EffectToolNode"):
        close_case.invoke({"case_id": "A", "resolution": "r"})


def test_existing_tool_becomes_an_effect() -> None:
    """effect(...)(existing_tool) keeps the tool's name, description and arguments."""

    @tool
    def send(to: str, subject: str) -> str:
        """Send a mail."""
        return f"sent to {to}"

    wrapped = effect("mail.send", target=lambda a: a["to"])(send)
    assert wrapped.name == "send"
    assert set(wrapped.tool_call_schema.model_json_schema()["properties"]) == {"to", "subject"}
    assert effect_spec(wrapped) is not None
    with pytest.raises(EffectsError):
        wrapped.invoke({"to": "x", "subject": "s"})


def test_async_function_effect() -> None:
    """An async function becomes an effect tool with a coroutine and the hidden context."""

    @effect("crm.update")
    async def update(record: str, ctx: EffectContext) -> str:
        """Update a record."""
        return ctx.operation_id

    assert update.coroutine is not None
    assert set(update.tool_call_schema.model_json_schema()["properties"]) == {"record"}


def test_docstring_is_required() -> None:
    """An effect needs a description the model can read."""

    def nodoc(x: int) -> int:
        return x

    with pytest.raises(InvalidInput):
        effect("a.b")(nodoc)


def test_a_tool_argument_named_like_the_slot_s_own_reaches_the_body() -> None:
    """The call slot runs a body with the tool's arguments as given: one named ``body``
    or ``self`` (a mail tool's ``body``) is the tool's, never the slot's."""
    import asyncio

    from langgraph_effects.effects import EffectContext
    from langgraph_effects.slot import CallSlot

    context = EffectContext(
        operation_id="op-1", idempotency_key="k", attempt=1, tenant_id="t", action="mail.send"
    )
    slot = CallSlot(context)
    assert slot.record(lambda body, self: (body, self), body="hi", self=2) == ("hi", 2)

    async def send(body: str, self: int) -> tuple[str, int]:
        return body, self

    assert asyncio.run(slot.arecord(send, body="hi", self=3)) == ("hi", 3)
    assert slot.value == ("hi", 3)
