"""langgraph-effects: effect-aware checkpointing for LangGraph.

A checkpoint records what the graph saved, not whether the CRM did it. This
package keeps a durable ledger of every side-effecting tool call, so a resumed,
retried, replayed or forked graph replays confirmed results, reconciles or
safely retries uncertain ones, and asks a person about the rest.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"  # keep equal to pyproject.toml's version (tests/test_readme.py checks)

# Public name -> defining module. Imported on first use (PEP 562), so importing
# the package stays cheap and optional extras (psycopg, langchain) load only
# when their faces are used.
_EXPORTS: dict[str, str] = {
    # core model
    "Decision": "langgraph_effects.core.model",
    "Evidence": "langgraph_effects.core.model",
    "EvidenceKind": "langgraph_effects.core.model",
    "LeaseOwner": "langgraph_effects.core.model",
    "Operation": "langgraph_effects.core.model",
    "OperationDraft": "langgraph_effects.core.model",
    "OperationEvent": "langgraph_effects.core.model",
    "OperationStatus": "langgraph_effects.core.model",
    "ProviderContract": "langgraph_effects.core.model",
    "Resolution": "langgraph_effects.core.model",
    "payload_digest": "langgraph_effects.core.digest",
    # errors
    "ConcurrentUpdate": "langgraph_effects.errors",
    "EffectRejected": "langgraph_effects.errors",
    "EffectsError": "langgraph_effects.errors",
    "IllegalTransition": "langgraph_effects.errors",
    "InvalidAnswer": "langgraph_effects.errors",
    "InvalidInput": "langgraph_effects.errors",
    "LeaseHeld": "langgraph_effects.errors",
    "LedgerError": "langgraph_effects.errors",
    "LedgerNotSetUp": "langgraph_effects.errors",
    "LedgerUnavailable": "langgraph_effects.errors",
    "MiddlewareOrderError": "langgraph_effects.errors",
    "OperationNotFound": "langgraph_effects.errors",
    "PayloadMismatch": "langgraph_effects.errors",
    "StaleFencingToken": "langgraph_effects.errors",
    "StaleVersion": "langgraph_effects.errors",
    "TenantMismatch": "langgraph_effects.errors",
    "TransientProviderError": "langgraph_effects.errors",
    # ledgers
    "AsyncLedger": "langgraph_effects.ledger.base",
    "Confirmation": "langgraph_effects.ledger.base",
    "Ledger": "langgraph_effects.ledger.base",
    "LedgerStats": "langgraph_effects.ledger.base",
    "InMemoryLedger": "langgraph_effects.ledger.memory",
    "SQLiteLedger": "langgraph_effects.ledger.sqlite",
    "AsyncSQLiteLedger": "langgraph_effects.ledger.sqlite",
    "PostgresLedger": "langgraph_effects.ledger.postgres",
    "AsyncPostgresLedger": "langgraph_effects.ledger.postgres",
    "ledger_from_env": "langgraph_effects.ledger.connect",
    "ledger_from_url": "langgraph_effects.ledger.connect",
    "find_stuck": "langgraph_effects.ledger.sweep",
    "afind_stuck": "langgraph_effects.ledger.sweep",
    # effects and faces
    "effect": "langgraph_effects.effects",
    "EffectContext": "langgraph_effects.effects",
    "EffectToolNode": "langgraph_effects.node",
    "route_tool_calls": "langgraph_effects.node",
    "EffectState": "langgraph_effects.node",
    "DurabilityWarning": "langgraph_effects.runner",
    "EffectMiddleware": "langgraph_effects.middleware",
    # notifications and run snapshots
    "Outbox": "langgraph_effects.outbox",
    "OutboxRelay": "langgraph_effects.outbox",
    "Receipt": "langgraph_effects.outbox",
    "RunJournal": "langgraph_effects.journal",
    "RunMachine": "langgraph_effects.journal",
    "RunEvent": "langgraph_effects.journal",
    "RunState": "langgraph_effects.journal",
    "Transition": "langgraph_effects.journal",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'langgraph_effects' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
