"""The operator CLI: listing, showing, deciding and following operations, with stable exit codes."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from langgraph_effects._owners import current_owner
from langgraph_effects.cli import ExitCode, app, parse_duration
from langgraph_effects.core.digest import payload_digest
from langgraph_effects.core.model import (
    EventKind,
    Evidence,
    Operation,
    OperationDraft,
    OperationStatus,
    utcnow,
)
from langgraph_effects.errors import InvalidInput
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.ledger.sqlite import SQLiteLedger
from langgraph_effects.testing.faults import scaled
from langgraph_effects.testing.providers import FakeClock

S = OperationStatus


def ticking(clock: FakeClock) -> Callable[[], datetime]:
    """A ledger clock that moves ``clock`` on one second per reading, so order is
    deterministic."""
    return lambda: clock.advance(1)


KEY_RETENTION = 24 * 3600 - 300  # a 24 h key window minus a 5 min safety margin


def draft(  # type: ignore[no-untyped-def]
    tenant: str,
    operation_id: str,
    *,
    key: bool = True,
    retention: float | None = KEY_RETENTION,
    action: str = "crm.close_case",
):
    payload = {"case": operation_id}
    return OperationDraft(
        tenant_id=tenant,
        operation_id=operation_id,
        workflow_id="onboarding-42",
        action=action,
        target="case-318",
        payload_digest=payload_digest(action, 1, "case-318", payload),
        payload=payload,
        idempotency_key=f"lge-{operation_id}" if key else None,
        key_retention_seconds=retention if key else None,
    )


def make_unknown(ledger: Any, tenant: str, operation_id: str, **kw: Any) -> Operation:
    """Prepare and claim an operation, then lose its response (it becomes unknown)."""
    claimed = ledger.prepare(draft(tenant, operation_id, **kw), owner=current_owner())
    return ledger.mark_unknown(  # type: ignore[no-any-return]
        tenant, operation_id, token=claimed.operation.fencing_token, reason="timeout"
    )


def populate(ledger: Any, clock: FakeClock | None = None) -> None:
    """A small ledger: old and fresh unknowns, one without a key, one in flight, one done.

    acme:   op-old (unknown, 2 h old), op-nokey (unknown, no idempotency key),
            op-new (unknown), op-flight (dispatching, live lease), op-done (confirmed)
    globex: op-g (unknown), op-mail (prepared, action mail.send)
    """
    make_unknown(ledger, "acme", "op-old")
    if clock is not None:  # the ledger's clock starts two hours back (the fixture)
        clock.advance(timedelta(hours=2))
    make_unknown(ledger, "acme", "op-nokey", key=False)
    make_unknown(ledger, "acme", "op-new")
    ledger.prepare(draft("acme", "op-flight"), owner=current_owner(), lease_for=timedelta(hours=1))
    done = ledger.prepare(draft("acme", "op-done"), owner=current_owner()).operation
    ledger.confirm("acme", "op-done", token=done.fencing_token, result={"closed": True})
    make_unknown(ledger, "globex", "op-g")
    ledger.prepare(draft("globex", "op-mail", action="mail.send"))


@pytest.fixture
def clock() -> FakeClock:
    """The ledger's clock (read through ``ticking``): two hours and five minutes behind the
    real one, where ``populate`` writes its first operation before moving it on two hours."""
    return FakeClock(utcnow() - timedelta(hours=2, minutes=5))


@dataclass
class Backend:
    """A populated ledger and how the CLI reaches it: an injected object or a URL."""

    ledger: Any
    url: str | None


@contextlib.contextmanager
def open_backend(kind: str, clock: FakeClock, tmp_path: Path, request: Any) -> Iterator[Backend]:
    if kind == "memory":
        memory = InMemoryLedger(clock=ticking(clock))
        memory.setup()
        yield Backend(memory, None)
    elif kind == "sqlite":
        path = tmp_path / "effects.db"
        with SQLiteLedger.from_conn_string(str(path), clock=ticking(clock)) as ledger:
            ledger.setup()
            yield Backend(ledger, f"sqlite:///{path}")
    else:
        postgres = pytest.importorskip("langgraph_effects.ledger.postgres")
        if not hasattr(postgres, "PostgresLedger"):
            pytest.skip("PostgresLedger has not landed yet")
        url = request.getfixturevalue("pg_url")
        with postgres.PostgresLedger.from_conn_string(url, clock=ticking(clock)) as ledger:
            ledger.setup()
            yield Backend(ledger, url)


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: Any, clock: FakeClock, tmp_path: Path) -> Iterator[Backend]:
    with open_backend(request.param, clock, tmp_path, request) as opened:
        populate(opened.ledger, clock)
        yield opened


@pytest.fixture
def ledger(backend: Backend) -> Any:
    return backend.ledger


Invoke = Callable[..., Result]

SSO = "test_cli:sso_identity"
"""The identity hook the ``cli`` fixture installs (``LGE_IDENTITY``)."""


def sso_identity(claimed: str | None) -> str:
    """A stand-in for a single sign-on check: the signed-in name, or a refusal."""
    if claimed is None:
        raise PermissionError("no single sign-on session")
    return claimed


@pytest.fixture
def cli(backend: Backend) -> Invoke:
    """Run a command against the backend: the in-memory one injected, the others by LGE_DB."""

    def invoke(*args: str, env: dict[str, str | None] | None = None) -> Result:
        base: dict[str, str | None] = {
            "LGE_DB": backend.url,
            "LGE_LEDGER_URL": None,
            "LGE_TENANT": None,
            "LGE_OPERATOR": None,
            "LGE_RESOLVE_POLICY": None,
            "LGE_IDENTITY": SSO,
        }
        obj = backend.ledger if backend.url is None else None
        return CliRunner().invoke(app, list(args), obj=obj, env={**base, **(env or {})})

    return invoke


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def error(result: Result) -> dict[str, Any]:
    """The JSON error a --json command wrote to stderr."""
    return json.loads(result.stderr)  # type: ignore[no-any-return]


# -- list ------------------------------------------------------------------------


def test_list_shows_open_operations_unknown_first_oldest_first(cli: Invoke) -> None:
    """By default: open operations only, unknowns oldest first, then in flight, then prepared."""
    rows = as_json(cli("list", "--json"))["operations"]
    assert [(r["operation_id"], r["status"]) for r in rows] == [
        ("op-old", "unknown"),
        ("op-nokey", "unknown"),
        ("op-new", "unknown"),
        ("op-g", "unknown"),
        ("op-flight", "dispatching"),
        ("op-mail", "prepared"),
    ]
    assert "payload" not in rows[0]
    assert rows[0]["idempotency_key"] == "lge-op-old"


def test_list_filters_by_tenant_status_action_and_age(cli: Invoke) -> None:
    """--tenant, --status, --action and --older-than narrow the rows; --all adds terminal ones."""

    def ids(*args: str) -> list[str]:
        return [r["operation_id"] for r in as_json(cli("list", "--json", *args))["operations"]]

    assert ids("--tenant", "globex") == ["op-g", "op-mail"]
    assert ids("--status", "dispatching", "--status", "prepared") == ["op-flight", "op-mail"]
    assert ids("--action", "mail.send") == ["op-mail"]
    assert ids("--older-than", "1h") == ["op-old"]
    assert "op-done" in ids("--all", "--tenant", "acme")
    assert ids("--limit", "2") == ["op-old", "op-nokey"]


def test_list_table_names_each_operation(cli: Invoke) -> None:
    """The human table shows every open operation's id, tenant and status."""
    result = cli("list")
    assert result.exit_code == 0
    for op_id in ("op-old", "op-nokey", "op-new", "op-g", "op-flight", "op-mail"):
        assert op_id in result.stdout
    assert "op-done" not in result.stdout


def test_list_rejects_an_unknown_status_as_usage(cli: Invoke) -> None:
    """A status that does not exist is a usage error (exit 2) naming the valid ones."""
    result = cli("list", "--status", "stuck", "--json")
    assert result.exit_code == ExitCode.USAGE
    assert "prepared, dispatching" in error(result)["message"]


# -- show ------------------------------------------------------------------------


def test_show_gives_record_events_and_retry_outlook(cli: Invoke) -> None:
    """show --json carries the full record, its events and what may be decided and risked."""
    data = as_json(cli("show", "op-old", "--tenant", "acme", "--json"))
    assert data["operation"]["status"] == "unknown"
    assert data["operation"]["payload"] == {"case": "op-old"}
    assert [e["kind"] for e in data["events"]] == ["prepare", "claim", "mark_unknown"]
    outlook = data["outlook"]
    assert outlook["decisions"] == ["confirm", "reject", "retry"]
    assert outlook["status_since"] == data["events"][-1]["at"]
    assert outlook["idempotency_key"] == "lge-op-old"
    assert outlook["attempts"] == 1
    assert outlook["key_age_seconds"] >= 7200
    assert outlook["key_window_known"] is True
    assert outlook["key_retention_seconds"] == KEY_RETENTION
    first = datetime.fromisoformat(data["operation"]["first_dispatched_at"])
    expires = datetime.fromisoformat(outlook["key_expires_at"])
    assert expires == first + timedelta(seconds=KEY_RETENTION)
    assert outlook["key_window_open"] is True


def test_show_warns_that_a_keyless_retry_may_duplicate(cli: Invoke) -> None:
    """Without an idempotency key, the human view says a retry may apply the effect twice."""
    result = cli("show", "op-nokey", "--tenant", "acme")
    assert result.exit_code == 0
    assert "no idempotency key" in result.stdout
    assert "twice" in result.stdout


def test_show_offers_no_decision_on_a_confirmed_operation(cli: Invoke) -> None:
    """A confirmed operation offers no decision and says its result is replayed."""
    outlook = as_json(cli("show", "op-done", "--tenant", "acme", "--json"))["outlook"]
    assert outlook["decisions"] == []
    assert "replays" in outlook["next_run"]


def test_another_tenants_operation_is_indistinguishable_from_a_missing_one(cli: Invoke) -> None:
    """Asking for globex's operation as acme fails exactly like a made-up id: exit 3, same words."""
    theirs = cli("show", "op-g", "--tenant", "acme", "--json")
    missing = cli("show", "op-zzzz", "--tenant", "acme", "--json")
    assert theirs.exit_code == missing.exit_code == ExitCode.NOT_FOUND
    assert error(theirs)["error"] == error(missing)["error"] == "not_found"
    assert error(theirs)["message"].replace("op-g", "X") == error(missing)["message"].replace(
        "op-zzzz", "X"
    )


# -- resolve ---------------------------------------------------------------------


def test_resolve_confirm_records_the_operator_evidence_and_result(cli: Invoke, ledger: Any) -> None:
    """resolve --confirm moves unknown to confirmed, stores the result and logs who and why."""
    result = cli(
        "resolve", "op-old", "--tenant", "acme", "--confirm", "--by", "ana",
        "--reason", "case closed in the CRM UI",
        "--evidence", '{"provider_result_id": "case-318", "summary": "CRM history shows close"}',
        "--result", '{"closed": true}', "--json",
    )  # fmt: skip
    assert as_json(result)["operation"]["status"] == "confirmed"
    op = ledger.get("acme", "op-old")
    assert op is not None
    assert (op.status, op.result, op.provider_result_id) == (
        S.CONFIRMED,
        {"closed": True},
        "case-318",
    )
    last = ledger.events("acme", "op-old")[-1]
    assert (last.kind, last.actor) == (EventKind.RESOLVE, "ana")
    assert last.evidence is not None
    assert (last.evidence.source, last.evidence.summary) == ("operator", "CRM history shows close")
    assert last.detail == {
        "decision": "confirm",
        "reason": "case closed in the CRM UI",
        "claimed_by": "ana",
        "verified_by": "hook:ana",
    }


def test_resolve_reject_with_operator_from_environment(cli: Invoke, ledger: Any) -> None:
    """resolve --reject takes the operator from LGE_OPERATOR and rejects the operation."""
    result = cli(
        "resolve", "op-new", "-t", "acme", "--reject", "--reason", "CRM says no such close",
        env={"LGE_OPERATOR": "night-shift"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    op = ledger.get("acme", "op-new")
    assert op is not None
    assert op.status is S.REJECTED
    assert ledger.events("acme", "op-new")[-1].actor == "night-shift"


def test_an_unverified_operator_changes_nothing(cli: Invoke, ledger: Any) -> None:
    """When the identity hook does not verify the operator: forbidden (exit 5), nothing moves."""
    result = cli("resolve", "op-old", "-t", "acme", "--confirm", "--reason", "x", "--json")
    assert result.exit_code == ExitCode.FORBIDDEN
    assert "no single sign-on session" in error(result)["message"]
    assert ledger.get("acme", "op-old").status is S.UNKNOWN  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "args",
    [
        ("--reason", "x"),  # neither --confirm nor --reject
        ("--confirm", "--reject", "--reason", "x"),
        ("--confirm", "--reason", "x", "--evidence", "{not json"),
        ("--confirm", "--reason", "x", "--evidence", "[1, 2]"),
        ("--confirm", "--reason", "x", "--evidence", '{"kind": "rejected"}'),
        ("--confirm", "--reason", "x", "--evidence", '{"colour": "red"}'),
        ("--reject", "--reason", "x", "--result", "{}"),
        ("--confirm", "--reason", "  "),
    ],
)
def test_malformed_resolutions_are_usage_errors(
    cli: Invoke, ledger: Any, args: tuple[str, ...]
) -> None:
    """Contradictory flags, bad JSON or contradicting evidence: exit 2, nothing changed."""
    result = cli("resolve", "op-old", "-t", "acme", "--by", "ana", *args)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert ledger.get("acme", "op-old").record_version == 3  # type: ignore[union-attr]


def test_resolving_a_confirmed_operation_is_refused(cli: Invoke, ledger: Any) -> None:
    """The state machine refuses to decide a terminal operation: exit 4, record unchanged."""
    before = ledger.get("acme", "op-done")
    result = cli(
        "resolve", "op-done", "-t", "acme", "--reject", "--by", "ana", "--reason", "x", "--json"
    )
    assert result.exit_code == ExitCode.REFUSED
    assert error(result)["error"] == "refused"
    assert "nothing was changed" in error(result)["message"]
    assert ledger.get("acme", "op-done") == before


def test_resolving_another_tenants_operation_is_not_found(cli: Invoke, ledger: Any) -> None:
    """Deciding globex's operation under tenant acme is 'not found' and changes nothing."""
    result = cli("resolve", "op-g", "-t", "acme", "--confirm", "--by", "ana", "--reason", "x")
    assert result.exit_code == ExitCode.NOT_FOUND
    assert ledger.get("globex", "op-g").status is S.UNKNOWN  # type: ignore[union-attr]


# -- retry -----------------------------------------------------------------------


def test_retry_moves_unknown_to_prepared_keeping_the_key(cli: Invoke, ledger: Any) -> None:
    """An operator-authorized retry makes the operation prepared again, same key, same payload."""
    before = ledger.get("acme", "op-old")
    result = cli("retry", "op-old", "-t", "acme", "--by", "ana", "--reason", "inside Stripe's 24 h")
    assert result.exit_code == 0, result.output
    after = ledger.get("acme", "op-old")
    assert before is not None
    assert after is not None
    assert after.status is S.PREPARED
    assert (after.idempotency_key, after.payload_digest) == (
        before.idempotency_key,
        before.payload_digest,
    )
    assert ledger.events("acme", "op-old")[-1].detail == {
        "decision": "retry",
        "reason": "inside Stripe's 24 h",
        "claimed_by": "ana",
        "verified_by": "hook:ana",
    }


def test_retry_without_idempotency_key_needs_explicit_acceptance(cli: Invoke, ledger: Any) -> None:
    """A keyless retry is refused (exit 4) with the duplicate risk explained, unless accepted."""
    refused = cli("retry", "op-nokey", "-t", "acme", "--by", "ana", "--reason", "x", "--json")
    assert refused.exit_code == ExitCode.REFUSED
    assert "no idempotency key" in error(refused)["message"]
    assert ledger.get("acme", "op-nokey").status is S.UNKNOWN  # type: ignore[union-attr]

    accepted = cli(
        "retry", "op-nokey", "-t", "acme", "--by", "ana", "--reason", "checked: not in the CRM",
        "--accept-duplicate-risk",
    )  # fmt: skip
    assert accepted.exit_code == 0, accepted.output
    assert ledger.get("acme", "op-nokey").status is S.PREPARED  # type: ignore[union-attr]


def test_retry_is_refused_when_the_provider_promised_no_key_window(
    cli: Invoke, ledger: Any
) -> None:
    """A key recorded without a retention (no key contract) proves nothing: retry is exit 4."""
    make_unknown(ledger, "acme", "op-nocontract", retention=None)
    shown = as_json(cli("show", "op-nocontract", "-t", "acme", "--json"))["outlook"]
    assert (shown["key_window_known"], shown["key_window_open"]) == (False, False)
    assert "may apply the effect twice" in shown["risk"]
    refused = cli("retry", "op-nocontract", "-t", "acme", "--by", "ana", "--reason", "x", "--json")
    assert refused.exit_code == ExitCode.REFUSED
    assert "promised no deduplication" in error(refused)["message"]
    assert ledger.get("acme", "op-nocontract").status is S.UNKNOWN
    accepted = cli(
        "retry", "op-nocontract", "-t", "acme", "--by", "ana", "--reason", "checked",
        "--accept-duplicate-risk",
    )  # fmt: skip
    assert accepted.exit_code == 0, accepted.output
    assert ledger.get("acme", "op-nocontract").status is S.PREPARED


def test_retry_is_refused_once_the_recorded_key_window_has_passed(cli: Invoke, ledger: Any) -> None:
    """A key first sent longer ago than its recorded retention may be forgotten: exit 4."""
    make_unknown(ledger, "acme", "op-stale", retention=60)  # sent some 4 minutes ago
    shown = as_json(cli("show", "op-stale", "-t", "acme", "--json"))["outlook"]
    assert (shown["key_window_known"], shown["key_window_open"]) == (True, False)
    refused = cli("retry", "op-stale", "-t", "acme", "--by", "ana", "--reason", "x", "--json")
    assert refused.exit_code == ExitCode.REFUSED
    assert "key window closed" in error(refused)["message"]
    assert ledger.get("acme", "op-stale").status is S.UNKNOWN


def test_list_age_and_show_since_ignore_inconclusive_evidence(
    cli: Invoke, ledger: Any, clock: FakeClock
) -> None:
    """Evidence recorded on an old unknown keeps its age: --older-than, show and stats agree."""
    ledger.record_evidence("acme", "op-old", Evidence.inconclusive("still nothing"))
    assert [
        r["operation_id"]
        for r in as_json(cli("list", "--json", "--older-than", "1h"))["operations"]
    ] == ["op-old"]
    shown = as_json(cli("show", "op-old", "-t", "acme", "--json"))
    assert shown["outlook"]["status_since"] == shown["events"][-2]["at"]  # the mark_unknown
    assert as_json(cli("stats", "--json"))["oldest_unknown_age_seconds"] >= 7200


@pytest.mark.parametrize(
    ("operation_id", "tenant", "explains"),
    [
        ("op-flight", "acme", "holds the lease"),
        ("op-done", "acme", "replays the recorded result"),
        ("op-mail", "globex", "asks a person for approval"),
    ],
)
def test_retry_is_refused_outside_unknown_with_the_reason(
    cli: Invoke, ledger: Any, operation_id: str, tenant: str, explains: str
) -> None:
    """Retry applies to unknown operations only; elsewhere exit 4 says what is happening."""
    before = ledger.get(tenant, operation_id)
    result = cli("retry", operation_id, "-t", tenant, "--by", "ana", "--reason", "x", "--json")
    assert result.exit_code == ExitCode.REFUSED
    assert explains in error(result)["message"]
    assert ledger.get(tenant, operation_id) == before


# -- policy ----------------------------------------------------------------------

POLICY = '''
def only_own_tenant(operator, operation, decision):
    """ana decides acme only; nobody retries mail."""
    if operation.action == "mail.send" and decision.value == "retry":
        raise PermissionError("mail is never retried by hand")
    return operator == "ana" and operation.tenant_id == "acme"

def broken(operator, operation, decision):
    raise RuntimeError("policy backend down")
'''


@pytest.fixture
def policy_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A policy module in the working directory, under a fresh name."""
    name = f"lge_policy_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(POLICY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the CLI adds the cwd; undo it
    return name


def test_policy_decides_who_may_resolve_what(cli: Invoke, ledger: Any, policy_module: str) -> None:
    """The policy hook forbids (exit 5, nothing changed) or allows each operator's decision."""
    spec = f"{policy_module}:only_own_tenant"
    forbidden = cli(
        "resolve", "op-g", "-t", "globex", "--confirm", "--by", "ana", "--reason", "x",
        "--policy", spec, "--json",
    )  # fmt: skip
    assert forbidden.exit_code == ExitCode.FORBIDDEN
    assert error(forbidden)["error"] == "forbidden"
    assert ledger.get("globex", "op-g").status is S.UNKNOWN  # type: ignore[union-attr]

    allowed = cli(
        "resolve", "op-old", "-t", "acme", "--confirm", "--by", "ana", "--reason", "x",
        env={"LGE_RESOLVE_POLICY": spec},
    )  # fmt: skip
    assert allowed.exit_code == 0, allowed.output
    assert ledger.get("acme", "op-old").status is S.CONFIRMED  # type: ignore[union-attr]


def test_a_failing_policy_forbids(cli: Invoke, ledger: Any, policy_module: str) -> None:
    """A policy that raises fails closed: exit 5 with its message, the operation unchanged."""
    result = cli(
        "retry", "op-old", "-t", "acme", "--by", "ana", "--reason", "x",
        "--policy", f"{policy_module}:broken", "--json",
    )  # fmt: skip
    assert result.exit_code == ExitCode.FORBIDDEN
    assert "policy backend down" in error(result)["message"]
    assert ledger.get("acme", "op-old").status is S.UNKNOWN  # type: ignore[union-attr]


def test_an_unloadable_policy_is_a_usage_error(cli: Invoke, policy_module: str) -> None:
    """A policy spec that names nothing importable is a usage error (exit 2)."""
    for spec in ("no_such_module_xyz:f", f"{policy_module}:missing", "nocolon"):
        result = cli(
            "resolve",
            "op-old",
            "-t",
            "acme",
            "--confirm",
            "--by",
            "a",
            "--reason",
            "x",
            "--policy",
            spec,
        )
        assert result.exit_code == ExitCode.USAGE, (spec, result.output)


# -- stats and events ------------------------------------------------------------


def test_stats_counts_statuses_unknown_age_and_resolutions(cli: Invoke) -> None:
    """stats reports counts per status, the oldest unknown's age and operator resolutions."""
    assert (
        cli("resolve", "op-new", "-t", "acme", "--reject", "--by", "ana", "--reason", "x").exit_code
        == 0
    )
    data = as_json(cli("stats", "--json"))
    assert data["counts"] == {
        "unknown": 3,
        "dispatching": 1,
        "prepared": 1,
        "rejected": 1,
        "confirmed": 1,
    }
    assert data["total"] == 7
    assert data["oldest_unknown_age_seconds"] >= 7200
    assert data["operator_resolutions"] == 1
    assert set(data["reconciliation"]) == {"confirmed", "rejected", "inconclusive"}
    assert set(data) == {
        "counts",
        "total",
        "oldest_unknown_at",
        "oldest_unknown_age_seconds",
        "oldest_dispatching_at",
        "reconciliation",
        "operator_resolutions",
    }
    assert as_json(cli("stats", "--json", "--tenant", "globex"))["counts"]["unknown"] == 1


def test_events_print_the_feed_as_json_lines(cli: Invoke, ledger: Any) -> None:
    """events --json prints one object per event, in order, honouring --after and --tenant."""
    lines = cli("events", "--json", "--limit", "1000").stdout.splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["event_id"] for e in events] == list(range(1, len(ledger.feed(limit=1000)) + 1))
    later = [json.loads(x) for x in cli("events", "--json", "--after", "5").stdout.splitlines()]
    assert later[0]["event_id"] == 6
    globex = [json.loads(x) for x in cli("events", "--json", "-t", "globex").stdout.splitlines()]
    assert {e["tenant_id"] for e in globex} == {"globex"}
    assert len(globex) == 4


def test_events_follow_prints_new_events_as_they_commit(cli: Invoke, ledger: Any) -> None:
    """events --follow waits for events committed after it starts and stops after --count."""
    last = ledger.feed(limit=1000)[-1].event_id
    assert last is not None
    writer = threading.Thread(target=make_unknown, args=(ledger, "acme", "op-later"))
    writer.start()
    result = cli(
        "events", "--follow", "--after", str(last), "--count", "3", "--interval", "0.01", "--json"
    )
    writer.join()
    kinds = [json.loads(line)["kind"] for line in result.stdout.splitlines()]
    assert kinds == ["prepare", "claim", "mark_unknown"]


# -- connection errors -----------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "mysql://root@localhost/x",
        "sqlite:///does/not/exist.db",
        "sqlite:",
        "postgresql://nobody@127.0.0.1:1/none",
    ],
)
def test_an_unusable_ledger_url_is_exit_2(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong scheme, a missing SQLite file or an unreachable server: exit 2, nothing created."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["list", "--json"], env={"LGE_DB": url})
    assert result.exit_code == ExitCode.USAGE, result.output
    assert error(result)["error"] in ("usage", "unavailable")
    assert list(tmp_path.iterdir()) == []


def test_no_ledger_given_is_exit_2() -> None:
    """Without --db, LGE_LEDGER_URL or LGE_DB the CLI says how to name a ledger (exit 2)."""
    result = CliRunner().invoke(app, ["stats"], env={"LGE_DB": None, "LGE_LEDGER_URL": None})
    assert result.exit_code == ExitCode.USAGE
    assert "LGE_LEDGER_URL" in result.stderr


def test_a_password_never_appears_in_the_error() -> None:
    """A connection failure names the URL without its password."""
    url = "postgresql://op:hunter2@127.0.0.1:1/none"
    result = CliRunner().invoke(app, ["list"], env={"LGE_DB": url})
    assert result.exit_code == ExitCode.USAGE
    assert "hunter2" not in result.output


def test_parse_duration_reads_compound_units() -> None:
    """Durations like 90s, 10m, 1h30m and 2d parse; anything else is InvalidInput."""
    assert parse_duration("90s") == timedelta(seconds=90)
    assert parse_duration("1h30m") == timedelta(minutes=90)
    assert parse_duration("2d") == timedelta(days=2)
    for bad in ("", "10", "ten minutes", "5x", "1h-3m"):
        with pytest.raises(InvalidInput):
            parse_duration(bad)


def test_a_sqlite_file_without_ledger_tables_is_exit_2_and_stays_untouched(tmp_path: Path) -> None:
    """The CLI never sets a ledger up: a database without its tables is a usage error."""
    path = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE unrelated (x)")
        conn.commit()
    result = CliRunner().invoke(app, ["stats", "--json", "--db", f"sqlite:///{path}"])
    assert result.exit_code == ExitCode.USAGE
    assert "setup()" in error(result)["message"]
    with contextlib.closing(sqlite3.connect(path)) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert tables == {"unrelated"}


# -- the installed console script, in real processes -----------------------------

SCRIPT = Path(sys.executable).parent / "langgraph-effects"


def run_script(
    *args: str, db: str, operator: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LGE_") and k != "SUDO_USER"}
    env["LGE_DB"] = db
    if operator:
        env["LGE_OPERATOR"] = operator
    return subprocess.run(
        [str(SCRIPT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=False,
    )


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_console_script_lists_resolves_and_refuses_in_a_real_process(
    kind: str, clock: FakeClock, tmp_path: Path, request: Any
) -> None:
    """The installed script reads a real ledger, resolves an unknown one, exits with the codes."""
    assert SCRIPT.exists(), f"console script not installed at {SCRIPT}"
    with open_backend(kind, clock, tmp_path, request) as backend:
        populate(backend.ledger, clock)
        assert backend.url is not None
        listed = run_script(
            "list", "--json", "--status", "unknown", "--tenant", "acme", db=backend.url
        )
        assert listed.returncode == 0, listed.stderr
        ids = [r["operation_id"] for r in json.loads(listed.stdout)["operations"]]
        assert ids == ["op-old", "op-nokey", "op-new"]

        resolved = run_script(
            "resolve", "op-old", "-t", "acme", "--confirm", "--reason", "seen in CRM",
            db=backend.url, operator="ana",
        )  # fmt: skip
        assert resolved.returncode == 0, resolved.stderr
        assert backend.ledger.get("acme", "op-old").status is S.CONFIRMED
        # No identity hook: the OS account running the command is the verified actor.
        decided = backend.ledger.events("acme", "op-old")[-1]
        os_user = pwd.getpwuid(os.geteuid()).pw_name
        assert decided.actor == os_user
        assert decided.detail["claimed_by"] == "ana"
        assert decided.detail["verified_by"] == f"os:{os_user}"

        again = run_script(
            "resolve", "op-old", "-t", "acme", "--reject", "--reason", "x", db=backend.url,
            operator="ana",
        )  # fmt: skip
        assert again.returncode == 4
        assert "nothing was changed" in again.stderr
        hidden = run_script("show", "op-g", "-t", "acme", db=backend.url)
        assert hidden.returncode == 3
        assert backend.ledger.get("acme", "op-old").status is S.CONFIRMED


def test_console_script_follows_events_committed_by_another_process(
    clock: FakeClock, tmp_path: Path, request: Any
) -> None:
    """events --follow in its own process prints events this process commits to the SQLite file."""
    with open_backend("sqlite", clock, tmp_path, request) as backend:
        populate(backend.ledger, clock)
        assert backend.url is not None
        last = backend.ledger.feed(limit=1000)[-1].event_id
        env = {k: v for k, v in os.environ.items() if not k.startswith("LGE_") and k != "SUDO_USER"}
        follower = subprocess.Popen(
            [str(SCRIPT), "events", "--follow", "--json", "--after", str(last), "--count", "3",
             "--interval", "0.05", "--db", backend.url],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            make_unknown(backend.ledger, "acme", "op-later")
            out, err = follower.communicate(timeout=scaled(120))
        finally:
            follower.kill()
        assert follower.returncode == 0, err
        events = [json.loads(line) for line in out.splitlines()]
        assert [(e["operation_id"], e["kind"]) for e in events] == [
            ("op-later", "prepare"),
            ("op-later", "claim"),
            ("op-later", "mark_unknown"),
        ]


def test_cli_retry_of_a_keyless_support_ticket_is_refused(tmp_path: Path) -> None:
    """bugs.md: examples/support_ticket.py (no key contract) stopped at its review; the CLI's
    retry is refused (exit 4) instead of ordering a resend that creates a second ticket."""
    example = Path(__file__).resolve().parents[2] / "examples" / "support_ticket.py"
    stopped = subprocess.run(
        [sys.executable, str(example), "--stop-at-review", "--dir", str(tmp_path)],
        capture_output=True, text=True, check=False, timeout=scaled(180),
    )  # fmt: skip
    assert stopped.returncode == 2, stopped.stderr
    cli = Path(sys.executable).with_name("langgraph-effects")
    db = f"sqlite:///{tmp_path / 'effects.db'}"
    listed = subprocess.run(
        [str(cli), "list", "--db", db, "--json"],
        capture_output=True, text=True, check=True, timeout=scaled(60),
    )  # fmt: skip
    [op] = json.loads(listed.stdout)["operations"]
    assert (op["status"], op["tenant_id"]) == ("unknown", "acme")
    retried = subprocess.run(
        [str(cli), "retry", op["operation_id"], "--tenant", "acme", "--by", "bob",
         "--reason", "x", "--db", db, "--json"],
        capture_output=True, text=True, check=False, timeout=scaled(60),
    )  # fmt: skip
    assert retried.returncode == 4, retried.stdout
    assert "promised no deduplication" in json.loads(retried.stderr)["message"]
    with SQLiteLedger.from_conn_string(str(tmp_path / "effects.db")) as ledger:
        ledger.setup()
        record = ledger.get("acme", op["operation_id"])
    assert record is not None
    assert (record.status, record.key_retention_seconds) == (S.UNKNOWN, None)


def test_exit_codes_are_the_documented_numbers() -> None:
    """Scripts rely on these numbers: changing one is a breaking change."""
    assert {c.name: int(c) for c in ExitCode} == {
        "OK": 0,
        "FAILURE": 1,
        "USAGE": 2,
        "NOT_FOUND": 3,
        "REFUSED": 4,
        "FORBIDDEN": 5,
    }
