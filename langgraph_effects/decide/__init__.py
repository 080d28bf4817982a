"""The decision engine: one effect tool call, planned, acted on and recorded, sync or async.

The parts, one concern each:

- ``call``: ``EffectCall``, a tool call with its identity derived once (digest,
  operation id and key, the write-ahead draft);
- ``loop``: the decision loop, a generator that yields ``actions``;
- ``actions``: what the loop asks for: typed ledger calls, hooks, the
  dispatch, a sleep, a question for a person;
- ``drive``: ``EffectRunner``, the sync and async drivers a face calls;
- ``group``: group commit, the write-aheads and receipts of concurrent calls
  coalesced into one transaction, each committed at once (never held for a sibling);
- ``policy``: where a face lets the loop hold it (ask, wait, sleep) or return;
- ``renew``: lease renewal while a dispatch runs;
- ``answers``: the log of a person's answers, the checks they pass, and who decided
  (the server's authenticated user, else ``by``);
- ``approvals``: the approvals of one AIMessage asked in one interrupt
  (``approvals="batched"``), the decisions recorded before the fan-out;
- ``messages``: the ToolMessage of a record, how a tool's output is recorded, and the
  trace metadata saying how the answer was obtained (``Via``);
- ``thread``: the thread's tenant binding and the durability warning.

Imports run one way: ``call`` / ``actions`` / ``messages`` / ``answers`` ->
``loop`` -> ``approvals`` / ``group`` -> ``drive``. The faces (``EffectToolNode``,
``EffectMiddleware``, ``OutboxRelay``) import from this package only.
"""

from langgraph_effects.decide.actions import ConfirmMany, LedgerAction, PrepareMany, Release
from langgraph_effects.decide.answers import ANONYMOUS, authenticated_user
from langgraph_effects.decide.approvals import APPROVAL_MODES, ApprovalMode, record_refusals
from langgraph_effects.decide.call import EffectCall, Execute, ProviderResult
from langgraph_effects.decide.commit import GroupCommit
from langgraph_effects.decide.drive import AsyncExecute, EffectRunner, aask_upstream, ask_upstream
from langgraph_effects.decide.messages import (
    Trace,
    Via,
    noticed,
    recorded_command,
    settled_answer,
    tool_message,
    traced,
)
from langgraph_effects.decide.policy import Policy
from langgraph_effects.decide.thread import (
    DEFAULT_TENANT,
    NO_THREAD,
    OPERATIONS_KEY,
    DurabilityWarning,
    warn_durability,
)

__all__ = [
    "ANONYMOUS",
    "APPROVAL_MODES",
    "DEFAULT_TENANT",
    "NO_THREAD",
    "OPERATIONS_KEY",
    "ApprovalMode",
    "AsyncExecute",
    "ConfirmMany",
    "DurabilityWarning",
    "EffectCall",
    "EffectRunner",
    "Execute",
    "GroupCommit",
    "LedgerAction",
    "Policy",
    "PrepareMany",
    "ProviderResult",
    "Release",
    "Trace",
    "Via",
    "aask_upstream",
    "ask_upstream",
    "authenticated_user",
    "noticed",
    "record_refusals",
    "recorded_command",
    "settled_answer",
    "tool_message",
    "traced",
    "warn_durability",
]
