"""An application's use of the public API; ``mypy --strict`` must accept it as written.

Checked by ``tests/docs/test_public_api.py`` (never run, only type-checked): every
name comes from ``langgraph_effects`` itself, so a name served as ``Any`` or a
returned type that is not exported shows up here as an error.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import langgraph_effects as lge
from langgraph_effects import (
    AsyncLedger,
    AsyncPostgresLedger,
    AsyncRunJournal,
    AsyncSQLiteLedger,
    Confirmation,
    Decision,
    EffectAgentState,
    EffectContext,
    EffectMiddleware,
    EffectRejected,
    EffectsError,
    EffectSpec,
    EffectTool,
    EffectToolNode,
    Evidence,
    EvidenceKind,
    InMemoryLedger,
    LeaseOwner,
    Ledger,
    LedgerStats,
    Operation,
    OperationDraft,
    OperationEvent,
    OperationStatus,
    OutboxEntry,
    OutboxRelay,
    OutboxStatus,
    PostgresLedger,
    Prepared,
    ProviderContract,
    ProviderError,
    RelayReport,
    Resolution,
    RunJournal,
    RunSnapshot,
    SQLiteLedger,
    TransientProviderError,
    effect,
    payload_digest,
    route_tool_calls,
)

KEY_WINDOW = ProviderContract(idempotency_window=timedelta(hours=24))


def find_case(op: Operation) -> Evidence:
    """A reconciler: what the CRM shows for this operation."""
    if op.target == "case-1":
        return Evidence.confirmed("closed", provider_result_id="case-1")
    return Evidence.inconclusive("not visible yet")


def only_acme(ctx: EffectContext) -> bool:
    """An authorizer: asked before every new dispatch."""
    return ctx.tenant_id == "acme"


@effect(
    "crm.close_case",
    target=lambda args: str(args["case_id"]),
    contract=KEY_WINDOW,
    reconcile=find_case,
    authorize=only_acme,
)
def close_case(case_id: str, resolution: str) -> str:
    """Close a support case."""
    return f"{case_id}: {resolution}"


def the_tool() -> EffectSpec:
    tool: EffectTool = close_case
    spec = tool.effect_spec
    assert spec.contract is not None
    retention: timedelta | None = spec.contract.key_retention
    assert retention is not None
    return spec


def ledger_round_trip(ledger: Ledger, owner: LeaseOwner) -> OperationStatus:
    digest: str = payload_digest("crm.close_case", 1, "case-1", {"case_id": "case-1"})
    draft = OperationDraft(
        tenant_id="acme",
        operation_id="op-1",
        action="crm.close_case",
        target="case-1",
        payload_digest=digest,
    )
    prepared: Prepared = ledger.prepare(draft, owner=owner)
    op: Operation = prepared.operation
    confirmed = ledger.confirm_many(
        [Confirmation(tenant_id="acme", operation_id="op-1", token=op.fencing_token)]
    )
    for item in confirmed:
        if isinstance(item, EffectsError):
            raise item
    done = ledger.get("acme", "op-1")
    assert done is not None
    events: list[OperationEvent] = ledger.events("acme", "op-1")
    assert all(e.evidence is None or e.evidence.kind is EvidenceKind.CONFIRMED for e in events)
    stats: LedgerStats = ledger.stats(tenant_id="acme")
    assert stats.total >= 1
    decided = ledger.resolve(
        "acme", "op-1", Resolution(decision=Decision.CONFIRM, by="alice", reason="seen in CRM")
    )
    return decided.status


async def async_round_trip(ledger: AsyncLedger) -> Operation | None:
    await ledger.setup()
    return await ledger.get("acme", "op-1")


def ledgers() -> list[Ledger]:
    memory: Ledger = InMemoryLedger()
    with SQLiteLedger.from_conn_string(":memory:") as sqlite:
        sqlite.setup()
        return [memory, sqlite]


def async_ledgers(async_sqlite: AsyncSQLiteLedger, pg: AsyncPostgresLedger) -> list[AsyncLedger]:
    return [async_sqlite, pg]


def postgres(ledger: PostgresLedger) -> Ledger:
    return ledger


def faces(ledger: Ledger) -> tuple[EffectToolNode, EffectMiddleware, type[EffectAgentState]]:
    node = EffectToolNode([close_case], ledger=ledger, tenant_id="acme")
    middleware = EffectMiddleware(ledger=ledger, tenant_id="acme")
    assert callable(route_tool_calls)
    return node, middleware, EffectAgentState


def provider_errors(exc: ProviderError) -> float | None:
    if isinstance(exc, TransientProviderError):
        return exc.retry_after
    assert isinstance(exc, EffectRejected)
    return None


def journal(journal: RunJournal) -> int:
    snapshot: RunSnapshot | None = journal.get("run-1")
    return 0 if snapshot is None else snapshot.version


async def async_journal(journal: AsyncRunJournal) -> RunSnapshot | None:
    return await journal.get("run-1")


def outbox(relay: OutboxRelay, entries: list[OutboxEntry]) -> RelayReport:
    assert all(e.status in (OutboxStatus.PENDING, OutboxStatus.SENT) for e in entries)
    return relay.run_once()


def version() -> str:
    return lge.__version__ + datetime.now(UTC).isoformat()
