"""langgraph-effects: effect-aware checkpointing for LangGraph.

A checkpoint records what the graph saved, not whether the CRM did it. This
package keeps a durable ledger of every side-effecting tool call, so a resumed,
retried, replayed or forked graph replays confirmed results, reconciles or
safely retries uncertain ones, and asks a person about the rest.

Every public name loads on first use (``_FROM`` maps it to its module), and
type checkers read the ``TYPE_CHECKING`` imports that name its real type.
``import langgraph_effects`` therefore costs nothing; ``effect`` or
``EffectToolNode`` bring langgraph and langchain_core, ``PostgresLedger`` brings
psycopg (``[postgres]``), ``EffectMiddleware`` langchain (``[agents]``), and a
program that needs only the ledger (the operator CLI) loads none of them.
The parts and their import rule:
ARCHITECTURE.md at the repository root.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from langgraph_effects._lazy import lazy_getattr

if TYPE_CHECKING:
    from langgraph_effects.core.digest import payload_digest
    from langgraph_effects.core.model import (
        Decision,
        EventKind,
        Evidence,
        EvidenceKind,
        LeaseOwner,
        Operation,
        OperationDraft,
        OperationEvent,
        OperationKey,
        OperationStatus,
        Prepared,
        ProviderContract,
        Resolution,
    )
    from langgraph_effects.decide import DurabilityWarning
    from langgraph_effects.decide.identity import NoCheckpointerWarning
    from langgraph_effects.effects import (
        Answerer,
        Authorizer,
        EffectContext,
        EffectSpec,
        EffectTool,
        Reconciler,
        effect,
    )
    from langgraph_effects.errors import (
        ConcurrentUpdate,
        EffectRejected,
        EffectsError,
        EffectUnconfirmed,
        IllegalTransition,
        InvalidAnswer,
        InvalidInput,
        LeaseHeld,
        LedgerError,
        LedgerNotSetUp,
        LedgerUnavailable,
        MiddlewareOrderError,
        OperationNotFound,
        PayloadMismatch,
        ProviderError,
        StaleFencingToken,
        StaleVersion,
        TenantMismatch,
        TransientProviderError,
    )
    from langgraph_effects.functional import arun_effect, run_effect
    from langgraph_effects.journal import (
        AsyncRunJournal,
        JournalStats,
        RunEvent,
        RunJournal,
        RunMachine,
        RunMetrics,
        RunSnapshot,
        RunState,
        Transition,
    )
    from langgraph_effects.ledger.base import (
        AsyncLedger,
        Confirmation,
        Ledger,
        LedgerStats,
        OpenOperations,
    )
    from langgraph_effects.ledger.connect import (
        LazyLedger,
        LedgerLocation,
        ledger_from_env,
        ledger_from_url,
    )
    from langgraph_effects.ledger.memory import InMemoryLedger
    from langgraph_effects.ledger.postgres import AsyncPostgresLedger, PostgresLedger
    from langgraph_effects.ledger.sqlite import AsyncSQLiteLedger, SQLiteLedger
    from langgraph_effects.ledger.sweep import StuckOperation, Sweep, afind_stuck, find_stuck
    from langgraph_effects.middleware import EffectAgentState, EffectMiddleware
    from langgraph_effects.node import EffectState, EffectToolNode, route_tool_calls
    from langgraph_effects.outbox import (
        Delivery,
        Outbox,
        OutboxEntry,
        OutboxEvent,
        OutboxRelay,
        OutboxStatus,
        Receipt,
        RelayReport,
    )

__version__ = "0.1.0"  # keep equal to pyproject's version (tests/docs/test_readme.py checks)

__all__ = [
    "Answerer",
    "AsyncLedger",
    "AsyncPostgresLedger",
    "AsyncRunJournal",
    "AsyncSQLiteLedger",
    "Authorizer",
    "ConcurrentUpdate",
    "Confirmation",
    "Decision",
    "Delivery",
    "DurabilityWarning",
    "EffectAgentState",
    "EffectContext",
    "EffectMiddleware",
    "EffectRejected",
    "EffectSpec",
    "EffectState",
    "EffectTool",
    "EffectToolNode",
    "EffectUnconfirmed",
    "EffectsError",
    "EventKind",
    "Evidence",
    "EvidenceKind",
    "IllegalTransition",
    "InMemoryLedger",
    "InvalidAnswer",
    "InvalidInput",
    "JournalStats",
    "LazyLedger",
    "LeaseHeld",
    "LeaseOwner",
    "Ledger",
    "LedgerError",
    "LedgerLocation",
    "LedgerNotSetUp",
    "LedgerStats",
    "LedgerUnavailable",
    "MiddlewareOrderError",
    "NoCheckpointerWarning",
    "OpenOperations",
    "Operation",
    "OperationDraft",
    "OperationEvent",
    "OperationKey",
    "OperationNotFound",
    "OperationStatus",
    "Outbox",
    "OutboxEntry",
    "OutboxEvent",
    "OutboxRelay",
    "OutboxStatus",
    "PayloadMismatch",
    "PostgresLedger",
    "Prepared",
    "ProviderContract",
    "ProviderError",
    "Receipt",
    "Reconciler",
    "RelayReport",
    "Resolution",
    "RunEvent",
    "RunJournal",
    "RunMachine",
    "RunMetrics",
    "RunSnapshot",
    "RunState",
    "SQLiteLedger",
    "StaleFencingToken",
    "StaleVersion",
    "StuckOperation",
    "Sweep",
    "TenantMismatch",
    "TransientProviderError",
    "Transition",
    "afind_stuck",
    "arun_effect",
    "effect",
    "find_stuck",
    "ledger_from_env",
    "ledger_from_url",
    "payload_digest",
    "route_tool_calls",
    "run_effect",
]

# Public name -> defining module, imported on first use: ``import langgraph_effects``
# costs nothing, and a program that needs only the ledger (the operator CLI) never
# loads langgraph, langchain or psycopg. Type checkers read the imports above.
_FROM: dict[str, tuple[str, ...]] = {
    "langgraph_effects.core.digest": ("payload_digest",),
    "langgraph_effects.core.model": (
        "Decision",
        "EventKind",
        "Evidence",
        "EvidenceKind",
        "LeaseOwner",
        "Operation",
        "OperationDraft",
        "OperationEvent",
        "OperationKey",
        "OperationStatus",
        "Prepared",
        "ProviderContract",
        "Resolution",
    ),
    "langgraph_effects.decide": ("DurabilityWarning",),
    "langgraph_effects.decide.identity": ("NoCheckpointerWarning",),
    "langgraph_effects.effects": (
        "Answerer",
        "Authorizer",
        "EffectContext",
        "EffectSpec",
        "EffectTool",
        "Reconciler",
        "effect",
    ),
    "langgraph_effects.errors": (
        "ConcurrentUpdate",
        "EffectRejected",
        "EffectUnconfirmed",
        "EffectsError",
        "IllegalTransition",
        "InvalidAnswer",
        "InvalidInput",
        "LeaseHeld",
        "LedgerError",
        "LedgerNotSetUp",
        "LedgerUnavailable",
        "MiddlewareOrderError",
        "OperationNotFound",
        "PayloadMismatch",
        "ProviderError",
        "StaleFencingToken",
        "StaleVersion",
        "TenantMismatch",
        "TransientProviderError",
    ),
    "langgraph_effects.functional": ("arun_effect", "run_effect"),
    "langgraph_effects.journal": (
        "AsyncRunJournal",
        "JournalStats",
        "RunEvent",
        "RunJournal",
        "RunMachine",
        "RunMetrics",
        "RunSnapshot",
        "RunState",
        "Transition",
    ),
    "langgraph_effects.ledger.base": (
        "AsyncLedger",
        "Confirmation",
        "Ledger",
        "LedgerStats",
        "OpenOperations",
    ),
    "langgraph_effects.ledger.connect": (
        "LazyLedger",
        "LedgerLocation",
        "ledger_from_env",
        "ledger_from_url",
    ),
    "langgraph_effects.ledger.memory": ("InMemoryLedger",),
    "langgraph_effects.ledger.postgres": (
        "AsyncPostgresLedger",
        "PostgresLedger",
    ),
    "langgraph_effects.ledger.sqlite": (
        "AsyncSQLiteLedger",
        "SQLiteLedger",
    ),
    "langgraph_effects.ledger.sweep": (
        "StuckOperation",
        "Sweep",
        "afind_stuck",
        "find_stuck",
    ),
    "langgraph_effects.middleware": (
        "EffectAgentState",
        "EffectMiddleware",
    ),
    "langgraph_effects.node": (
        "EffectState",
        "EffectToolNode",
        "route_tool_calls",
    ),
    "langgraph_effects.outbox": (
        "Delivery",
        "Outbox",
        "OutboxEntry",
        "OutboxEvent",
        "OutboxRelay",
        "OutboxStatus",
        "Receipt",
        "RelayReport",
    ),
}
_LAZY: dict[str, str] = {name: module for module, names in _FROM.items() for name in names}

if not TYPE_CHECKING:  # type checkers see the imports above, not a catch-all ``Any``
    __getattr__ = lazy_getattr(__name__, _LAZY, globals())


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
