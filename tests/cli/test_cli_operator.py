"""The operator's night: out-of-band approval honoured by the next graph run, hostile text
printed literally, verified identities, abbreviations, and the errors an operator meets."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _graphs import Env, build_graph, call, tool_messages
from _schema_v1 import write_v1
from langgraph.types import Command
from test_cli import SSO, make_unknown, ticking
from typer.testing import CliRunner, Result

from langgraph_effects import EffectContext, effect
from langgraph_effects._owners import current_owner
from langgraph_effects.cli import ExitCode, app
from langgraph_effects.core.digest import payload_digest
from langgraph_effects.core.model import EventKind, OperationDraft, OperationStatus, utcnow
from langgraph_effects.errors import LedgerNotSetUp
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.ledger.sqlite import SQLiteLedger
from langgraph_effects.testing.providers import FakeClock, FakeCRM

S = OperationStatus
CFG = {"configurable": {"thread_id": "night-1"}}


def run(*args: str, obj: Any = None, env: dict[str, str | None] | None = None) -> Result:
    """The CLI in-process, with a clean environment and the test SSO hook as identity."""
    base: dict[str, str | None] = {
        "LGE_DB": None,
        "LGE_LEDGER_URL": None,
        "LGE_TENANT": None,
        "LGE_OPERATOR": None,
        "LGE_RESOLVE_POLICY": None,
        "LGE_IDENTITY": SSO,
        "COLUMNS": "200",
    }
    return CliRunner().invoke(app, list(args), obj=obj, env={**base, **(env or {})})


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


# -- out-of-band approval, honoured by the next run of a real graph ----------------


def gated_close(crm: FakeCRM) -> Any:
    @effect("crm.close_case", target=lambda a: a["case_id"], require_approval=True)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case (a person approves first)."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    return close_case


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def graph_env(request: Any, tmp_path: Path) -> Iterator[tuple[Env, str]]:
    """A real graph's ledger and checkpointer, and the URL the CLI opens the ledger by."""
    if request.param == "sqlite":
        path = tmp_path / "app.db"
        env = Env("sqlite", "sync", path=path)
        url = f"sqlite:///{path}"
    else:
        url = request.getfixturevalue("pg_url")
        env = Env("postgres", "sync", url=url)
    yield env, url
    env.close()


def waiting_for_approval(env: Env, crm: FakeCRM) -> tuple[Any, str]:
    graph = build_graph(
        [gated_close(crm)],
        [call("close_case", "call-a", case_id="A", resolution="fixed")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [op] = env.ops()
    assert op.status is S.PREPARED
    assert graph.get_state(CFG).tasks[0].interrupts  # the graph asks a person
    return graph, op.operation_id


def outlook(url: str, op_id: str) -> dict[str, Any]:
    shown = ok(run("show", op_id, "-t", "default", "--json", env={"LGE_LEDGER_URL": url}))
    return json.loads(shown.stdout)["outlook"]  # type: ignore[no-any-return]


def test_an_out_of_band_approval_dispatches_once_without_asking_again(
    graph_env: tuple[Env, str],
) -> None:
    """approve (by a unique prefix) records the approver; the next run sends exactly once
    without an interrupt, and show said beforehand what that run would do."""
    env, url = graph_env
    crm = FakeCRM()
    graph, op_id = waiting_for_approval(env, crm)
    before = outlook(url, op_id)
    assert before["decisions"] == ["approve", "reject"]
    assert before["next_run"].startswith("asks a person for approval")

    ok(
        run(
            "approve", op_id[:12], "--reason", "amount checked", "--by", "ana",
            env={"LGE_LEDGER_URL": url, "LGE_TENANT": "default"},
        )
    )  # fmt: skip
    after = outlook(url, op_id)
    assert after["next_run"].startswith("dispatches it for the first time without asking again")
    # show finds the tenant of a unique id by itself, and names who approved.
    shown = ok(run("show", op_id, env={"LGE_LEDGER_URL": url})).stdout
    assert re.search(r"^authorization +approved by ana$", shown, flags=re.M), shown
    assert crm.effects == 0

    out = env.invoke(graph, None, CFG)  # the next run of the interrupted step
    assert crm.effects == 1
    assert not graph.get_state(CFG).tasks  # no interrupt: the approval was honoured
    [op] = env.ops()
    assert op.status is S.CONFIRMED
    assert tool_messages(out)[-1].status == "success"
    env.invoke(graph, None, CFG)
    assert crm.effects == 1
    kinds = [e.kind for e in env.ledger_call("events", "default", op_id)]
    assert kinds == [EventKind.PREPARE, EventKind.APPROVE, EventKind.CLAIM, EventKind.CONFIRM]
    approval = env.ledger_call("events", "default", op_id)[1]
    assert approval.actor == "ana"
    assert approval.detail == {
        "decision": "approve",
        "reason": "amount checked",
        "claimed_by": "ana",
        "verified_by": "hook:ana",
    }


def test_an_out_of_band_rejection_is_replayed_and_never_sent(graph_env: tuple[Env, str]) -> None:
    """reject refuses a prepared operation; the next run returns the refusal, sends nothing."""
    env, url = graph_env
    crm = FakeCRM()
    graph, op_id = waiting_for_approval(env, crm)
    ok(
        run(
            "reject", op_id, "-t", "default", "--reason", "wrong customer", "--by", "bo",
            env={"LGE_LEDGER_URL": url},
        )
    )  # fmt: skip
    assert outlook(url, op_id)["next_run"] == "returns the recorded rejection to the model"
    out = env.invoke(graph, None, CFG)
    assert crm.effects == 0
    assert not graph.get_state(CFG).tasks
    message = tool_messages(out)[-1]
    assert message.status == "error"
    assert "wrong customer" in str(message.content)
    refused = run(
        "approve", op_id, "-t", "default", "--reason", "changed my mind", "--by", "bo",
        "--json", env={"LGE_LEDGER_URL": url},
    )  # fmt: skip
    assert refused.exit_code == ExitCode.REFUSED
    assert env.ops()[0].status is S.REJECTED


@pytest.mark.parametrize("ui", ["reject", "approve"])
def test_the_ui_s_answer_after_a_console_approval_is_the_last_word(
    graph_env: tuple[Env, str], ui: str
) -> None:
    """approve at the console while the approval is pending; the UI then answers (Agent
    Chat UI's shape, no interrupt id): reject stops the call (never sent, rejected, the
    log keeps both decisions), approve agrees (sent once; the log keeps both too) (issue 23)."""
    env, url = graph_env
    crm = FakeCRM()
    graph, op_id = waiting_for_approval(env, crm)
    ok(
        run(
            "approve", op_id, "-t", "default", "--reason", "amount checked", "--by", "olga",
            env={"LGE_LEDGER_URL": url},
        )
    )  # fmt: skip
    answer = {"decisions": [{"type": ui, "message": "not this one"}], "by": "ana"}
    env.invoke(graph, Command(resume=answer), CFG)
    assert not graph.get_state(CFG).tasks
    [op] = env.ops()
    decided = [
        (e.kind, e.actor)
        for e in env.ledger_call("events", "default", op_id)
        if e.kind in (EventKind.APPROVE, EventKind.REJECT)
    ]
    if ui == "reject":
        assert (crm.effects, op.status) == (0, S.REJECTED)
        assert decided == [(EventKind.APPROVE, "olga"), (EventKind.REJECT, "ana")]
    else:
        assert (crm.effects, op.status) == (1, S.CONFIRMED)
        # Applied as it agrees, its mark logged: a later run meets it as an answer given.
        assert decided == [(EventKind.APPROVE, "olga"), (EventKind.APPROVE, "ana")]


def test_the_ui_s_approve_after_a_console_rejection_is_told(graph_env: tuple[Env, str]) -> None:
    """reject at the console while the approval is pending; the UI's approve, given
    afterwards, sends nothing: the log keeps it as not applied, by ana, naming olga's
    rejection, and the ToolMessage says so (issue 23)."""
    env, url = graph_env
    crm = FakeCRM()
    graph, op_id = waiting_for_approval(env, crm)
    ok(
        run(
            "reject", op_id, "-t", "default", "--reason", "wrong customer", "--by", "olga",
            env={"LGE_LEDGER_URL": url},
        )
    )  # fmt: skip
    out = env.invoke(graph, Command(resume={"decisions": [{"type": "approve"}], "by": "ana"}), CFG)
    assert crm.effects == 0
    last = env.ledger_call("events", "default", op_id)[-1]
    assert (last.kind, last.actor) == (EventKind.EVIDENCE, "ana")
    assert last.evidence.summary.startswith(
        f"Not applied: ana's approve of operation {op_id} came too late: olga decided reject at "
    )
    message = tool_messages(out)[-1]
    assert "wrong customer" in str(message.content)
    assert str(message.content).endswith(last.evidence.summary)


def test_approve_refuses_what_is_not_waiting_for_approval() -> None:
    """approve on an unknown operation: exit 4; on one already approved: it says so (exit 0);
    nothing changes either way."""
    ledger = memory_ledger()
    make_unknown(ledger, "acme", "op-lost")
    refused = run("approve", "op-lost", "-t", "acme", "--reason", "x", "--by", "a", obj=ledger)
    assert refused.exit_code == ExitCode.REFUSED
    assert "only a prepared operation" in refused.stderr
    ledger.prepare(draft("op-wait"))
    ok(run("approve", "op-wait", "-t", "acme", "--reason", "x", "--by", "a", obj=ledger))
    again = run("approve", "op-wait", "-t", "acme", "--reason", "x", "--by", "b", obj=ledger)
    # Already done is not a refusal: it says so, and nothing changes.
    assert again.exit_code == 0, again.output
    assert again.stdout.startswith("op-wait is already approved by a; the next run dispatches")
    assert again.stdout.rstrip().endswith("nothing was changed")
    assert ledger.get("acme", "op-wait").authorization_ref == "approved-by:a"  # type: ignore[union-attr]
    resolve = run("resolve", "op-wait", "-t", "acme", "--confirm", "--reason", "x", "--by", "a")
    assert resolve.exit_code != 0


def test_reject_decides_an_unknown_operation_too_and_refuses_one_in_flight() -> None:
    """reject on unknown records the operator's rejection; on dispatching it is exit 4."""
    ledger = memory_ledger()
    make_unknown(ledger, "acme", "op-lost")
    ok(
        run(
            "reject",
            "op-lost",
            "-t",
            "acme",
            "--reason",
            "CRM has no such close",
            "--by",
            "a",
            obj=ledger,
        )
    )
    event = ledger.events("acme", "op-lost")[-1]
    assert (event.kind, event.to_status, event.actor) == (EventKind.RESOLVE, S.REJECTED, "a")
    ledger.prepare(draft("op-busy"), owner=current_owner())
    busy = run("reject", "op-busy", "-t", "acme", "--reason", "x", "--by", "a", obj=ledger)
    assert busy.exit_code == ExitCode.REFUSED
    assert ledger.get("acme", "op-busy").status is S.DISPATCHING  # type: ignore[union-attr]


# -- values from the ledger are printed literally -----------------------------------

HOSTILE_TARGET = "[/]x[bold red]PWNED\x1b[2J\x1b]0;title\x07[/bold red]\u202e"
HOSTILE_PAYLOAD = {"note": "[link=http://evil]click[/link] \x1b[31mred"}


def memory_ledger() -> InMemoryLedger:
    ledger = InMemoryLedger(clock=ticking(FakeClock(utcnow() - timedelta(minutes=5))))
    ledger.setup()
    return ledger


def draft(op_id: str, *, target: str = "case-1", payload: Any = None) -> OperationDraft:
    payload = {"case": op_id} if payload is None else payload
    return OperationDraft(
        tenant_id="acme",
        operation_id=op_id,
        action="crm.close_case",
        target=target,
        payload_digest=payload_digest("crm.close_case", 1, target, payload),
        payload=payload,
        idempotency_key=f"lge-{op_id}",
    )


def test_markup_and_terminal_escapes_from_the_ledger_are_printed_literally() -> None:
    """A model-controlled target or payload with rich markup and escape codes neither crashes
    list/show/events nor styles the output; control characters arrive escaped."""
    ledger = memory_ledger()
    ledger.prepare(draft("op-evil[/]", target=HOSTILE_TARGET, payload=HOSTILE_PAYLOAD))
    outputs = [
        ok(run("list", obj=ledger, env={"COLUMNS": "80"})).stdout,
        ok(run("show", "op-evil[/]", "-t", "acme", obj=ledger)).stdout,
        ok(run("events", obj=ledger)).stdout,
        ok(run("show", "op-evil[/]", "-t", "acme", "--json", obj=ledger)).stdout,
        ok(run("events", "--json", obj=ledger)).stdout,
    ]
    for text in outputs:
        assert "\x1b" not in text
        assert "\x07" not in text
        assert "\u202e" not in text
    human = outputs[1]
    assert "[/]x[bold red]PWNED\\x1b[2J\\x1b]0;title\\x07[/bold red]\\u202e" in human
    assert "[link=http://evil]click[/link]" in human
    assert "op-evil[/]" in outputs[2]
    assert json.loads(outputs[3])["operation"]["target"] == HOSTILE_TARGET
    missing = run("show", "[bold]nope\x1b[0m", "-t", "acme", obj=ledger)
    assert missing.exit_code == ExitCode.NOT_FOUND
    assert "[bold]nope\\x1b[0m" in missing.stderr


# -- who decides ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["receipt", "ledger", "Reconciler", "takeover:x", "h|1|2.0|n"])
def test_names_reserved_for_system_actors_are_refused(name: str) -> None:
    """--by receipt (or any system actor, or a lease-owner form): exit 2, nothing changed."""
    ledger = memory_ledger()
    make_unknown(ledger, "acme", "op-1")
    result = run(
        "resolve", "op-1", "-t", "acme", "--reject", "--reason", "x", "--by", name, obj=ledger
    )
    assert result.exit_code == ExitCode.USAGE
    assert "system actor" in result.stderr
    assert ledger.get("acme", "op-1").status is S.UNKNOWN  # type: ignore[union-attr]


def test_the_policy_sees_the_verified_identity_not_the_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the OS user as identity, --by admin does not pass a policy that admits only admin;
    the event records the claim and the verified OS user side by side."""
    (tmp_path / "lge_admin_only.py").write_text(
        "def policy(operator, operation, decision):\n    return operator == 'admin'\n"
        "def verify(claimed):\n    return 'admin'\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [str(tmp_path), *__import__("sys").path])
    monkeypatch.delenv("SUDO_USER", raising=False)
    ledger = memory_ledger()
    make_unknown(ledger, "acme", "op-1")
    args = ("resolve", "op-1", "-t", "acme", "--reject", "--reason", "x", "--by", "admin")
    forbidden = run(
        *args, "--policy", "lge_admin_only:policy", obj=ledger, env={"LGE_IDENTITY": None}
    )
    assert forbidden.exit_code == ExitCode.FORBIDDEN
    assert ledger.get("acme", "op-1").status is S.UNKNOWN  # type: ignore[union-attr]
    ok(
        run(
            *args, "--policy", "lge_admin_only:policy", "--identity", "lge_admin_only:verify",
            obj=ledger, env={"LGE_IDENTITY": None},
        )
    )  # fmt: skip
    event = ledger.events("acme", "op-1")[-1]
    assert (event.actor, event.detail["claimed_by"], event.detail["verified_by"]) == (
        "admin",
        "admin",
        "hook:admin",
    )


def test_an_operator_retry_reads_as_a_decision_in_the_log() -> None:
    """The event log shows who ordered a retry and why, not an empty evidence bracket."""
    ledger = memory_ledger()
    make_unknown(ledger, "acme", "op-1")
    ok(
        run(
            "retry",
            "op-1",
            "-t",
            "acme",
            "--reason",
            "provider was down",
            "--by",
            "bob",
            obj=ledger,
        )
    )
    lines = ok(run("events", obj=ledger)).stdout.splitlines()
    assert lines[-1].endswith("resolve: unknown -> prepared by bob [retry: provider was down]")
    assert "[inconclusive" not in lines[-1]


# -- reading the ledger at night -------------------------------------------------


def test_list_is_readable_at_80_columns_and_its_ids_work_as_prefixes() -> None:
    """At 80 columns no line is longer, the headers stay apart and whole, free text is cut
    with "…" at a word boundary (never mid-word), no line ends in spaces, and every
    abbreviated id opens its operation; an ambiguous prefix is a usage error naming the
    candidates."""
    ledger = memory_ledger()
    for n in range(3):
        op_id = f"op-{'k' * 8}{n}{'q' * 23}"
        make_unknown(ledger, "acme-corporation", op_id)
    ledger.prepare(
        draft("op-zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", target="customer-case-number-318-with-notes")
    )
    listed = ok(run("list", "--all", obj=ledger, env={"COLUMNS": "80"})).stdout
    lines = listed.splitlines()
    assert max(len(line) for line in lines) <= 80
    header = lines[0].split()
    assert header == ["operation", "status", "age", "tries", "tenant", "action", "target"]
    assert all(line == line.rstrip() for line in lines)
    values = {"acme-corporation", "acme", "crm.close_case", "case-318"}
    values.add("customer-case-number-318-with-notes")
    cells = [cell for line in lines[1:] for cell in re.split(r"\s{2,}", line.strip())[4:]]
    cut = [cell for cell in cells if cell.endswith("…")]
    assert cut, listed  # 80 columns are too few for every whole value
    for cell in cut:
        kept = cell[:-1]
        [value] = [v for v in values if v.startswith(kept)]
        assert kept[-1] in "._-/:|" or value[len(kept)] == " ", (cell, value)
    assert {cell for cell in cells if not cell.endswith("…")} <= values
    # Piped, nothing is cut: every value whole.
    piped = ok(run("list", "--all", obj=ledger, env={"COLUMNS": None})).stdout
    assert "acme-corporation  crm.close_case  case-318" in piped
    assert "customer-case-number-318-with-notes" in piped
    shown = re.findall(r"^(op-\S+)", listed, flags=re.M)
    assert len(shown) == 4
    assert all(len(s) < 35 for s in shown)
    for prefix in shown:
        tenant = "acme" if prefix.startswith("op-z") else "acme-corporation"
        data = json.loads(ok(run("show", prefix, "-t", tenant, "--json", obj=ledger)).stdout)
        assert data["operation"]["operation_id"].startswith(prefix)
    ambiguous = run("show", "op-kkkk", "-t", "acme-corporation", obj=ledger)
    assert ambiguous.exit_code == ExitCode.USAGE
    assert "ambiguous" in ambiguous.stderr


def test_tenant_and_ledger_url_come_from_the_environment(tmp_path: Path) -> None:
    """LGE_LEDGER_URL and LGE_TENANT stand for --db and --tenant."""
    path = tmp_path / "effects.db"
    with SQLiteLedger.from_conn_string(str(path)) as ledger:
        ledger.setup()
        make_unknown(ledger, "acme", "op-1")
    env = {"LGE_LEDGER_URL": f"sqlite:///{path}", "LGE_TENANT": "acme"}
    assert json.loads(ok(run("show", "op-1", "--json", env=env)).stdout)["operation"]["tenant_id"]
    listed = json.loads(ok(run("list", "--json", env=env)).stdout)
    assert [o["operation_id"] for o in listed["operations"]] == ["op-1"]
    other = json.loads(ok(run("list", "--json", env={**env, "LGE_TENANT": "globex"})).stdout)
    assert other["count"] == 0
    header = ok(run("list", env=env)).stdout.splitlines()[0].split()
    assert header == ["operation", "status", "age", "tries", "action", "target"]


def test_version_and_help_are_clean() -> None:
    """--version prints the version; help has no <bool> placeholders and keeps [event...]."""
    assert re.fullmatch(r"langgraph-effects \S+\n", ok(run("--version")).stdout)
    for command in ("list", "show", "resolve", "retry", "approve", "reject", "stats", "events"):
        text = ok(run(command, "--help")).stdout
        assert "<bool>" not in text, command
    assert '"events": [event...]' in ok(run("show", "--help")).stdout
    top = ok(run("--help")).stdout
    assert "approve" in top
    assert "reject" in top


def test_an_absurd_duration_is_a_clear_usage_error() -> None:
    """--older-than 99999999999d is exit 2 with a message, not an OverflowError."""
    ledger = memory_ledger()
    for value in ("99999999999d", "999999999d"):
        result = run("list", "--older-than", value, "--json", obj=ledger)
        assert result.exit_code == ExitCode.USAGE, (value, result.output)
        assert "--older-than" in result.stderr or "too long" in result.stderr


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://op:pa55@w0rd@127.0.0.1:1/none",
        "postgresql://op:hunter@22x@127.0.0.1:1/none?connect_timeout=1",
        "postgresql://op:pa55%40w0rd@127.0.0.1:1/none",
        "postgresql://127.0.0.1:1/none?user=op&password=s3cr@tXY9",
    ],
)
def test_a_password_with_an_at_sign_is_never_printed(url: str) -> None:
    """Whatever the password holds, no part of it reaches the output (an unescaped '@' is
    refused with the advice to percent-encode it)."""
    secret = re.search(r"(?<=op:)[^/]*(?=@127)|(?<=password=).*", url)
    assert secret is not None
    for as_json in ((), ("--json",)):
        result = run("list", *as_json, env={"LGE_LEDGER_URL": url})
        assert result.exit_code == ExitCode.USAGE
        for part in re.split(r"[@:]", secret.group()):
            assert part not in result.output, (part, result.output)


# -- an older schema ---------------------------------------------------------------


def test_an_older_schema_names_the_migration_to_run(tmp_path: Path) -> None:
    """A v1 ledger: get() raises LedgerNotSetUp naming the migrations to run; show and
    resolve exit 2 with the same words, and nothing is written."""
    from langgraph_effects.ledger.sqlite._migrations import MIGRATIONS
    from langgraph_effects.ledger.sqlite._sql import DIALECT, SCHEMA_VERSION_TABLE_SQL

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    with conn:
        write_v1(
            lambda sql, values: conn.execute(sql, values),
            MIGRATIONS,
            SCHEMA_VERSION_TABLE_SQL,
            lambda name: f":{name}",
            DIALECT.dump_ts,
        )
    conn.close()
    with SQLiteLedger.from_conn_string(str(path)) as ledger, pytest.raises(LedgerNotSetUp) as exc:
        ledger.get("acme", "op-v1")
    todo = f"migrations 2-{len(MIGRATIONS)}" if len(MIGRATIONS) > 2 else "migration 2"
    assert "schema is version 1" in str(exc.value)
    assert todo in str(exc.value)
    assert "setup()" in str(exc.value)
    env = {"LGE_LEDGER_URL": f"sqlite:///{path}"}
    for args in (
        ("show", "op-v1", "-t", "acme"),
        ("resolve", "op-v1", "-t", "acme", "--confirm", "--reason", "x", "--by", "a"),
    ):
        result = run(*args, env=env)
        assert result.exit_code == ExitCode.USAGE, result.output
        assert todo in result.stderr
        assert "Traceback" not in result.output
    with sqlite3.connect(path) as check:
        assert check.execute("SELECT status FROM lge_operations WHERE operation_id = 'op-v1'")
        (version,) = check.execute("SELECT MAX(version) FROM lge_schema_version").fetchone()
    assert version == 1


@pytest.mark.postgres
def test_an_older_postgres_schema_names_the_migration_to_run(pg_url: str) -> None:
    """The same on PostgreSQL: the library's get() says which migration to run."""
    import psycopg

    from langgraph_effects.ledger.postgres import PostgresLedger
    from langgraph_effects.ledger.postgres._migrations import MIGRATIONS
    from langgraph_effects.ledger.postgres._sql import SCHEMA_VERSION_TABLE_SQL

    with psycopg.connect(pg_url, autocommit=True) as conn:
        write_v1(
            lambda sql, values: conn.execute(sql, values),
            MIGRATIONS,
            SCHEMA_VERSION_TABLE_SQL,
            lambda name: f"%({name})s",
            lambda ts: ts,
        )
    with PostgresLedger.from_conn_string(pg_url) as ledger, pytest.raises(LedgerNotSetUp) as exc:
        ledger.get("acme", "op-v1")
    assert ("migration 2" if len(MIGRATIONS) == 2 else f"migrations 2-{len(MIGRATIONS)}") in str(
        exc.value
    )


# -- what the operator reads ------------------------------------------------------


def test_show_finds_the_tenant_of_a_unique_id_and_refuses_an_id_two_tenants_hold() -> None:
    """show needs no --tenant when one tenant holds the id (or prefix); when two do, it is a
    usage error naming both tenants."""
    ledger = memory_ledger()
    make_unknown(ledger, "acme", "op-only-here")
    make_unknown(ledger, "acme", "op-twice")
    make_unknown(ledger, "globex", "op-twice")
    found = json.loads(ok(run("show", "op-only", "--json", obj=ledger)).stdout)
    assert (found["operation"]["tenant_id"], found["operation"]["operation_id"]) == (
        "acme",
        "op-only-here",
    )
    both = run("show", "op-twice", obj=ledger)
    assert both.exit_code == ExitCode.USAGE
    assert "exists in tenants acme, globex: pass --tenant" in both.stderr
    assert ok(run("show", "op-twice", "-t", "globex", obj=ledger)).stdout.startswith("operation")
    missing = run("show", "op-nowhere", obj=ledger)
    assert missing.exit_code == ExitCode.NOT_FOUND


def test_output_has_no_trailing_spaces_and_fits_80_columns() -> None:
    """list, show, stats and stuck pad nothing with trailing spaces, piped or at 80 columns,
    and at 80 columns no line of show is wider; processes read as ``process N on HOST``."""
    ledger = memory_ledger()
    make_unknown(ledger, "acme", "op-a-rather-long-operation-identifier-0001")
    for columns in (None, "80"):
        for args in (("list", "--all"), ("show", "op-a-rather"), ("stats",), ("stuck",)):
            out = ok(run(*args, obj=ledger, env={"COLUMNS": columns})).stdout
            lines = out.splitlines()
            assert all(line == line.rstrip() for line in lines), (args, columns)
            if columns == "80":
                assert max(len(line) for line in lines) <= 80, (args, out)
    shown = ok(run("show", "op-a-rather", obj=ledger, env={"COLUMNS": "80"})).stdout
    owner = current_owner()
    assert f"by process {owner.pid} on {owner.host}" in shown.replace("\n     ", " ")
    assert "|" not in shown  # no lease owner in its stored form


def test_decisions_say_what_happened_and_what_the_next_run_does() -> None:
    """approve, reject, retry and resolve each say who decided and what the next run does;
    a decision already taken says so, exits 0 and changes nothing (--json: changed false)."""
    ledger = memory_ledger()
    ledger.prepare(draft("op-wait"))
    make_unknown(ledger, "acme", "op-lost")
    said = ok(run("approve", "op-wait", "-t", "acme", "--reason", "ok", "--by", "ana", obj=ledger))
    assert said.stdout.strip() == (
        "op-wait approved by ana; the next run dispatches it for the first time without asking "
        "again, after the effect's authorize check if it has one"
    )
    confirmed = ok(
        run("resolve", "op-lost", "-t", "acme", "--confirm", "--reason", "seen", "--by", "bo",
            obj=ledger)
    )  # fmt: skip
    assert confirmed.stdout.startswith("op-lost confirmed by bo; the next run replays the")
    version = ledger.get("acme", "op-lost").record_version  # type: ignore[union-attr]
    again = ok(
        run("resolve", "op-lost", "-t", "acme", "--confirm", "--reason", "seen", "--by", "bo",
            "--json", obj=ledger)
    )  # fmt: skip
    assert json.loads(again.stdout)["changed"] is False
    assert ledger.get("acme", "op-lost").record_version == version  # type: ignore[union-attr]
