"""Observability: structured transition logs, and OpenTelemetry metrics and spans when installed."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects import observe
from langgraph_effects._owners import current_owner
from langgraph_effects.core.digest import payload_digest
from langgraph_effects.core.model import (
    Decision,
    Evidence,
    Operation,
    OperationDraft,
    Resolution,
)
from langgraph_effects.errors import StaleFencingToken
from langgraph_effects.ledger.base import Confirmation
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.ledger.sqlite import SQLiteLedger
from langgraph_effects.testing.contract import OWNER, make_draft

SECRET = "secret-customer-value-7731"
"""Appears in payloads and results; must never appear in a log record."""

TRANSITION_FIELDS = {
    "lge_operation_id",
    "lge_tenant_id",
    "lge_action",
    "lge_from",
    "lge_to",
    "lge_event",
    "lge_attempt",
    "lge_fencing_token",
    "lge_actor",
}


def _draft(operation_id: str = "op-1") -> OperationDraft:
    payload = {"case": "case-318", "note": SECRET}
    return OperationDraft(
        tenant_id="acme",
        operation_id=operation_id,
        action="crm.close_case",
        target="case-318",
        payload_digest=payload_digest("crm.close_case", 1, "case-318", payload),
        payload=payload,
        idempotency_key=f"lge-{operation_id}",
    )


@pytest.fixture
def ledger() -> InMemoryLedger:
    ledger = InMemoryLedger()
    ledger.setup()
    return ledger


def _unknown(ledger: InMemoryLedger, operation_id: str = "op-1") -> Operation:
    """Prepare, claim and lose the response of one operation."""
    claimed = ledger.prepare(_draft(operation_id), owner=current_owner()).operation
    return ledger.mark_unknown("acme", operation_id, token=claimed.fencing_token, reason="timeout")


def _transitions(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "langgraph_effects" and hasattr(r, "lge_to")]


def test_every_committed_transition_is_logged_with_structured_fields(
    ledger: InMemoryLedger, caplog: pytest.LogCaptureFixture
) -> None:
    """Each transition the ledger commits yields one record carrying the documented fields."""
    caplog.set_level(logging.INFO, logger="langgraph_effects")
    op = _unknown(ledger)
    ledger.resolve(
        "acme",
        op.operation_id,
        Resolution(decision=Decision.CONFIRM, by="ana", reason="seen", result={"x": SECRET}),
    )

    records = _transitions(caplog)
    assert [(r.lge_from, r.lge_to, r.lge_event) for r in records] == [  # type: ignore[attr-defined]
        (None, "prepared", "prepare"),
        ("prepared", "dispatching", "claim"),
        ("dispatching", "unknown", "mark_unknown"),
        ("unknown", "confirmed", "resolve"),
    ]
    for record in records:
        assert set(vars(record)) >= TRANSITION_FIELDS
        assert record.lge_operation_id == "op-1"  # type: ignore[attr-defined]
        assert record.lge_tenant_id == "acme"  # type: ignore[attr-defined]
        assert record.lge_action == "crm.close_case"  # type: ignore[attr-defined]
    claim, unknown, resolved = records[1:]
    assert (claim.lge_attempt, claim.lge_fencing_token) == (1, 1)  # type: ignore[attr-defined]
    assert unknown.lge_fencing_token == 2  # type: ignore[attr-defined]
    assert resolved.lge_actor == "ana"  # type: ignore[attr-defined]
    assert resolved.lge_evidence == "confirmed"  # type: ignore[attr-defined]


def test_logs_never_carry_payloads_or_results(
    ledger: InMemoryLedger, caplog: pytest.LogCaptureFixture
) -> None:
    """No log record's message or field contains the payload or the replayed result."""
    caplog.set_level(logging.DEBUG, logger="langgraph_effects")
    op = _unknown(ledger)
    confirmed = ledger.resolve(
        "acme",
        op.operation_id,
        Resolution(decision=Decision.CONFIRM, by="ana", reason="ok", result={"x": SECRET}),
    )
    observe.count_replay(confirmed)

    assert len(caplog.records) >= 5
    for record in caplog.records:
        assert SECRET not in record.getMessage()
        assert all(SECRET not in repr(value) for value in vars(record).values())


def test_a_move_to_unknown_warns_and_the_rest_inform(
    ledger: InMemoryLedger, caplog: pytest.LogCaptureFixture
) -> None:
    """Only the transition to unknown (a person may be needed) is logged at WARNING."""
    caplog.set_level(logging.INFO, logger="langgraph_effects")
    _unknown(ledger)

    levels = {r.lge_to: r.levelno for r in _transitions(caplog)}  # type: ignore[attr-defined]
    assert levels == {
        "prepared": logging.INFO,
        "dispatching": logging.INFO,
        "unknown": logging.WARNING,
    }


def test_a_refused_write_logs_no_transition(
    ledger: InMemoryLedger, caplog: pytest.LogCaptureFixture
) -> None:
    """A write with a stale fencing token changes nothing and logs no transition."""
    caplog.set_level(logging.INFO, logger="langgraph_effects")
    claimed = ledger.prepare(_draft(), owner=current_owner()).operation
    ledger.mark_unknown("acme", "op-1", token=claimed.fencing_token, reason="lease lapsed")
    before = len(_transitions(caplog))

    with pytest.raises(StaleFencingToken):
        ledger.confirm("acme", "op-1", token=claimed.fencing_token, result={"late": True})

    assert len(_transitions(caplog)) == before
    assert ledger.get("acme", "op-1").status.value == "unknown"  # type: ignore[union-attr]


def test_replays_and_stale_tokens_are_reported(caplog: pytest.LogCaptureFixture) -> None:
    """count_replay logs a prevented duplicate; log_stale_token warns with the ids."""
    caplog.set_level(logging.INFO, logger="langgraph_effects")
    ledger = InMemoryLedger()
    ledger.setup()
    op = _unknown(ledger)
    confirmed = ledger.resolve(
        "acme", op.operation_id, Resolution(decision=Decision.CONFIRM, by="ana", reason="ok")
    )

    observe.count_replay(confirmed)
    observe.log_stale_token("acme", "op-1", token=1, current=2, action="crm.close_case")

    replay, stale = caplog.records[-2:]
    assert (replay.levelno, replay.lge_event) == (logging.INFO, "replay")  # type: ignore[attr-defined]
    assert replay.lge_operation_id == "op-1"  # type: ignore[attr-defined]
    assert (stale.levelno, stale.lge_event) == (logging.WARNING, "stale_token")  # type: ignore[attr-defined]
    assert stale.lge_fencing_token == 1  # type: ignore[attr-defined]


def test_without_opentelemetry_only_logging_remains(
    ledger: InMemoryLedger, caplog: pytest.LogCaptureFixture
) -> None:
    """Without opentelemetry, configure says so; logging, spans and gauges still work."""
    caplog.set_level(logging.INFO, logger="langgraph_effects")
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setitem(sys.modules, "opentelemetry", None)
            patch.setitem(sys.modules, "opentelemetry.trace", None)
            patch.setitem(sys.modules, "opentelemetry.metrics", None)
            assert observe.configure() is False
            with observe.span("lge.dispatch", operation_id="op-1"):
                op = _unknown(ledger)
            observe.count_replay(op)
            assert observe.observe_ledger(ledger) is False
    finally:
        observe.configure()

    assert [r.lge_to for r in _transitions(caplog)] == [  # type: ignore[attr-defined]
        "prepared",
        "dispatching",
        "unknown",
    ]


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_ledger(request: pytest.FixtureRequest, sqlite_path: Path) -> Iterator[Any]:
    """A set-up ledger on each backend: in memory, a SQLite file, a PostgreSQL schema."""
    if request.param == "memory":
        memory = InMemoryLedger()
        memory.setup()
        yield memory
    elif request.param == "sqlite":
        with SQLiteLedger.from_conn_string(str(sqlite_path)) as opened:
            opened.setup()
            yield opened
    else:
        from langgraph_effects.ledger.postgres import PostgresLedger

        with PostgresLedger.from_conn_string(request.getfixturevalue("pg_url")) as pg:
            pg.setup()
            yield pg


def test_stale_token_refusals_are_logged_with_their_ids(
    any_ledger: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A refused stale write (confirm, and each stale receipt of confirm_many) is counted and
    reported through observe.log_stale_token with tenant, operation and both tokens."""
    caplog.set_level(logging.WARNING, logger="langgraph_effects")
    tenant = "tenant-a"
    for op_id in ("op-1", "op-2"):
        op = any_ledger.prepare(make_draft(op_id), owner=OWNER).operation
        any_ledger.mark_unknown(tenant, op_id, token=op.fencing_token, reason="taken over")
    with pytest.raises(StaleFencingToken):
        any_ledger.confirm(tenant, "op-1", token=1)
    stale_receipt = Confirmation(tenant_id=tenant, operation_id="op-2", token=1)
    [outcome] = any_ledger.confirm_many([stale_receipt])
    assert isinstance(outcome, StaleFencingToken)
    stale = [r for r in caplog.records if getattr(r, "lge_event", None) == "stale_token"]
    assert [(r.lge_tenant_id, r.lge_operation_id, r.lge_fencing_token) for r in stale] == [  # type: ignore[attr-defined]
        (tenant, "op-1", 1),
        (tenant, "op-2", 1),
    ]
    assert any_ledger.stats().stale_token_refusals == 2


# -- OpenTelemetry (skipped without the SDK) --------------------------------------------


@pytest.fixture
def otel() -> Iterator[tuple[Any, Any]]:
    """observe bound to an in-memory metric reader and span exporter; rebound to globals after."""
    pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is not installed")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    exporter = InMemorySpanExporter()
    tracers = TracerProvider()
    tracers.add_span_processor(SimpleSpanProcessor(exporter))
    assert observe.configure(meter_provider=meters, tracer_provider=tracers) is True
    try:
        yield reader, exporter
    finally:
        observe.configure()
        meters.shutdown()
        tracers.shutdown()


def _points(reader: Any) -> dict[str, list[tuple[dict[str, Any], float]]]:
    """Metric name -> [(attributes, value)] from one collection."""
    out: dict[str, list[tuple[dict[str, Any], float]]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out[metric.name] = [(dict(p.attributes), p.value) for p in metric.data.data_points]
    return out


def test_opentelemetry_counts_transitions_reconciliations_replays_and_refusals(
    ledger: InMemoryLedger, otel: tuple[Any, Any]
) -> None:
    """The counters add up what the ledger committed and what the runner reported."""
    reader, _ = otel
    op = _unknown(ledger)
    ledger.record_evidence("acme", "op-1", Evidence.inconclusive("index lag"))
    confirmed = ledger.resolve(
        "acme",
        op.operation_id,
        Resolution(
            decision=Decision.CONFIRM,
            by="reconciler",
            evidence=Evidence.confirmed("receipt found", provider_result_id="case-318"),
        ),
    )
    observe.count_replay(confirmed)
    observe.count_replay(confirmed)
    observe.log_stale_token("acme", "op-1", token=1, current=2, action="crm.close_case")

    points = _points(reader)
    to_status = {
        a["lge.to"]: v for a, v in points["lge.transitions"] if a["lge.event"] != "evidence"
    }
    assert to_status == {"prepared": 1, "dispatching": 1, "unknown": 1, "confirmed": 1}
    outcomes = {a["lge.outcome"]: v for a, v in points["lge.reconciliations"]}
    assert outcomes == {"inconclusive": 1, "confirmed": 1}
    assert points["lge.duplicates_prevented"] == [({"lge.action": "crm.close_case"}, 2)]
    assert points["lge.stale_token_refusals"] == [({"lge.action": "crm.close_case"}, 1)]


def test_opentelemetry_gauges_serve_the_ledger_stats(
    ledger: InMemoryLedger, otel: tuple[Any, Any]
) -> None:
    """observe_ledger exports counts per status and the oldest unknown's age from ledger.stats()."""
    reader, _ = otel
    _unknown(ledger, "op-1")
    _unknown(ledger, "op-2")
    ledger.prepare(_draft("op-3"))
    assert observe.observe_ledger(ledger, tenant_id="acme") is True

    points = _points(reader)
    per_status = {a["lge.status"]: v for a, v in points["lge.operations"]}
    assert per_status == {
        "prepared": 1,
        "dispatching": 0,
        "confirmed": 0,
        "rejected": 0,
        "unknown": 2,
    }
    [(attributes, age)] = points["lge.oldest_unknown_age"]
    assert attributes == {"lge.tenant_id": "acme"}
    assert age >= 0


def test_transitions_become_events_of_the_current_span(
    ledger: InMemoryLedger, otel: tuple[Any, Any]
) -> None:
    """Inside observe.span, each committed transition is a span event with the ids."""
    _, exporter = otel
    with observe.span("lge.dispatch", operation_id="op-1", tenant_id="acme", attempt=None):
        _unknown(ledger)

    [finished] = exporter.get_finished_spans()
    assert finished.name == "lge.dispatch"
    assert dict(finished.attributes) == {"lge.operation_id": "op-1", "lge.tenant_id": "acme"}
    assert [e.attributes["lge.to"] for e in finished.events] == [
        "prepared",
        "dispatching",
        "unknown",
    ]
    assert {e.attributes["lge.operation_id"] for e in finished.events} == {"op-1"}
