"""A call met again under a payload key rotated out, or refused when its record's key is
no longer listed (``recognised``): read before the loop decides (``decide.loop``).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from langgraph_effects.core.digest import KEYED_PREFIX
from langgraph_effects.core.identity import decode_origins
from langgraph_effects.decide.actions import (
    Action,
    Get,
    ListOpen,
    ledger,
)
from langgraph_effects.decide.call import EffectCall
from langgraph_effects.errors import (
    PayloadKeyMissing,
)


def recognised(call: EffectCall) -> Generator[Action, Any, EffectCall]:
    """``call`` as a key rotated out wrote it, if its record is there; else ``call``.

    A ``payload_key`` rotation changes the keyed digest, and with it the operation
    id a call derives (and, under an intent key, what its record's digest must
    equal). Each key rotated out (``EffectSpec.older_payload_keys``) gives the
    call's identity under that key: the first whose record holds that digest is
    the call's operation, met again as before the rotation (an approval still
    answered, a lost receipt still settled, never a second dispatch). One read
    per key rotated out, and only for an effect that lists some.
    """
    for digest in call.spec.older_digests(call.target, call.args):
        old = call.with_digest(digest)
        op = yield from ledger(Get(old.key))
        if op is not None and op.payload_digest == digest:
            return old
    yield from _no_unknown_key(call)
    return call


_OPEN_LOOKED_AT = 50
"""How many open records of a target ``_no_unknown_key`` reads."""


def keyed_unknown_check(call: EffectCall) -> bool:
    """Whether ``call`` is checked for a record under a dropped payload key: a keyed
    digest, no intent key (its record is met by the key and refused on its own), a
    target and a task to recognise the call by."""
    return (
        call.payload_digest.startswith(KEYED_PREFIX)
        and not call.fixed_id
        and call.target is not None
        and call.timeline is not None
    )


def _no_unknown_key(call: EffectCall) -> Generator[Action, Any, None]:
    """Refuse a call whose own open record was digested under a key no longer listed.

    A re-run of a task (a crash, an interrupt) after ``payload_key`` lost the key its
    record was digested under derives another id: it would send again and leave the
    record open forever. Its own first candidate missing, the open records of its
    target are read: one of this thread and action whose origins hold this very task
    and tool call, with another keyed digest, is that record (the task's call has the
    same payload: only the key differs). ``PayloadKeyMissing`` says which key to list.
    An edit (the same call with other arguments) meets its own record first.
    """
    if not keyed_unknown_check(call):
        return
    if (yield from ledger(Get(call.key))) is not None:
        return  # met under the current key: the walk decides
    assert call.target is not None
    assert call.timeline is not None
    opens = yield from ledger(
        ListOpen(call.tenant_id, call.spec.action, call.target, _OPEN_LOOKED_AT)
    )
    mine = call.timeline.origin(call.tool_call_id)
    for op in opens.operations:
        if (
            op.workflow_id == call.workflow_id
            and op.payload_digest != call.payload_digest
            and op.payload_digest.startswith(KEYED_PREFIX)
            and any(o.task == mine.task and o.call == mine.call for o in decode_origins(op.origin))
        ):
            raise PayloadKeyMissing(
                op.operation_id,
                expected=op.payload_digest,
                actual=call.payload_digest,
                action=call.spec.action,
            )
