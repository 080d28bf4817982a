"""The runnable examples, run as a reader runs them: subprocesses, real crashes, fresh resumes.

Each example counts effects at its fake provider and prints the count; these
tests assert the exit code and those printed counts. Each example's default run
is the reader's command in a fresh interpreter (``run_fresh``); every other run is
a new process forked from a server that already imported LangGraph (``run``,
``launch``: no interpreter start, seconds a run). Every ``--crash-at`` point
an example offers (its ``CRASH_POINTS``) is run: the process must really die
there, and the resume must end with the counts the example promises. Every
example also runs on PostgreSQL (``--postgres``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from _example_child import run_example, run_script, unexplained_flags
from _pg import POSTGRES_URL, require_postgres

from langgraph_effects.testing import run_in_forked_child
from langgraph_effects.testing.faults import scaled

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CRASHED = 137

# Every example's default run and the lines it must print (regular expressions).
DEFAULT_RUN: dict[str, list[str]] = {
    "quickstart": [
        r"ToolNode \(control\)\s+2\s+1\s",
        r"EffectToolNode\s+1\s+0\s+confirmed",
        r"resolve\s+unknown -> confirmed\s+by reconciler",
        r"OK: one crash, one resume, one closure",
    ],
    "crm_onboarding": [
        r"crm\.close_case\s+case-318\s+confirmed\s+1",
        r"outbox\.owner\.notify\s+owner@acme\.example\s+confirmed\s+1",
        r"CRM closures of case-318: 1\n",
        r"e-mails to the account owner: 1\n",
    ],
    "support_ticket": [
        r"status\s+unknown",
        r"retry risk\s+the provider honours no idempotency key",
        r'"decision": "confirm", "by": "on-call policy"',
        r"resolve\s+unknown -> confirmed\s+by on-call policy",
        r"tickets created: 1\n",
    ],
    "outbox_notify": [r"messages the provider sent: 1 ", r"relay: 1 claimed, 1 sent\n"],
    "email_verification": [r"final_state: verified", r"verification_requests_received: 1\n"],
    "functional_api": [
        r"crm\.close_case\s+case-318\s+confirmed\s+1",
        r"CRM closures of case-318: 1\n",
        r"OK: the effect happened exactly once",
    ],
    "mcp_tools": [
        r"plain create_agent \(control\)\s+2\s+-",
        r"mcp_effects \+ EffectMiddleware\s+1\s+confirmed",
        r"mark_unknown\s+dispatching -> unknown\s+by takeover by process \d+",
        r"resolve\s+unknown -> confirmed\s+by on-call policy",
        r"OK: killed after the server acted; one ticket with mcp_effects, two without",
    ],
    "provider_presets": [
        r"stripe\.charge: prepare\(ledger\) -> claim\(process \d+\) -> mark_unknown\(process "
        r"\d+\) -> evidence\(preset:stripe\) -> claim\(process \d+\) -> confirm\(receipt\)",
        r"sendgrid\.send: prepare\(ledger\) -> claim\(process \d+\) -> mark_unknown\(process "
        r"\d+\) -> resolve\(preset:sendgrid\)",
        r"charges of cus_1042 at Stripe: 1 \(first responses replayed: 1\)",
        r"receipts SendGrid sent to ana@example\.com: 1\n",
        r"OK: each effect happened exactly once",
    ],
}


# What a resume after any crash must print (the example's promise, whatever crashed).
RESUMED_OK: dict[str, list[str]] = {
    "crm_onboarding": [
        r"CRM closures of case-318: 1\n",
        r"e-mails to the account owner: 1\n",
        r"OK: each effect happened exactly once",
    ],
    "support_ticket": [r"tickets created: [01]\n", r"OK: the ledger matches the ticketing system"],
    "outbox_notify": [r"messages the provider sent: 1 ", r": sent, receipt (accepted|delivered)"],
    "email_verification": [r"final_state: verified", r"verification_requests_received: 1\n"],
    "functional_api": [r"CRM closures of case-318: 1\n", r"OK: the effect happened exactly once"],
    "mcp_tools": [r"tickets the server opened: 1\n", r"OK: the effect happened exactly once"],
    "provider_presets": [
        r"charges of cus_1042 at Stripe: 1 ",
        r"receipts SendGrid sent to ana@example\.com: 1\n",
        r"OK: each effect happened exactly once",
    ],
}
NOT_REACHED = 3


def load(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` (its sibling ``_common`` importable, as for the script)."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def crash_cases() -> list[tuple[str, str]]:
    """Every (example, crash point) the examples offer."""
    return [(name, point) for name in sorted(RESUMED_OK) for point in load(name).CRASH_POINTS]


def run_fresh(name: str, *args: str | Path, expect: int = 0) -> str:
    """Run ``examples/<name>.py`` in a fresh interpreter, exactly as a reader does; assert its
    exit code; return stdout."""
    env = {k: v for k, v in os.environ.items() if k != "LGE_CRASH_AT"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=scaled(180),
        check=False,
    )
    assert done.returncode == expect, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def run(name: str, *args: str | Path, expect: int = 0) -> str:
    """``run_fresh`` in a child forked from a server that already imported LangGraph
    (``_example_child.run_example``): a new process all the same, without the interpreter's
    start (seconds a run); its exit code and stdout read as ``run_fresh`` reads them."""
    return run_example(EXAMPLES / f"{name}.py", *args, expect=expect)


def launch(name: str, *args: str | Path, expect: int, tmp_path: Path) -> str:
    """``run``, in a child forked from a server that already imported LangGraph (fast)."""
    output = tmp_path / f"{name}-{len(list(tmp_path.glob('*.out')))}.out"
    child = run_in_forked_child(
        run_script, str(EXAMPLES / f"{name}.py"), [str(a) for a in args], str(output)
    )
    code = child.exitcode if child.exitcode >= 0 else 128 - child.exitcode  # killed by a signal
    text = output.read_text(encoding="utf-8")
    assert code == expect, f"exit {code}\n{text}\n{child.error or ''}"
    return text


def assert_lines(output: str, patterns: list[str]) -> None:
    for pattern in patterns:
        assert re.search(pattern, output), f"missing {pattern!r} in:\n{output}"


def present(name: str) -> Path:
    path = EXAMPLES / f"{name}.py"
    if not path.exists():
        pytest.skip(f"examples/{name}.py is not there yet")
    return path


def test_every_example_has_a_default_run_check() -> None:
    """Every example script in examples/ is covered by the default-run table below."""
    scripts = {p.stem for p in EXAMPLES.glob("*.py") if not p.stem.startswith("_")}
    assert scripts <= set(DEFAULT_RUN), f"no check for {sorted(scripts - set(DEFAULT_RUN))}"


def test_every_crash_option_is_listed() -> None:
    """An example with ``--crash-at`` lists its points in CRASH_POINTS, and this file checks it."""
    for path in EXAMPLES.glob("*.py"):
        if "--crash-at" in path.read_text(encoding="utf-8") and not path.stem.startswith("_"):
            assert path.stem in RESUMED_OK, f"{path.name}: no resume check here"
            assert load(path.stem).CRASH_POINTS, f"{path.name}: no CRASH_POINTS"


@pytest.mark.parametrize(("name", "point"), crash_cases(), ids=lambda v: str(v))
def test_every_offered_crash_point_dies_and_resumes_true(
    name: str, point: str, tmp_path: Path
) -> None:
    """The process really dies at the point (137), and a fresh ``--resume`` ends as promised."""
    work = tmp_path / "run"
    crashed = launch(name, "--crash-at", point, "--dir", work, expect=CRASHED, tmp_path=tmp_path)
    assert "--resume --dir" in crashed
    resumed = launch(name, "--resume", "--dir", work, expect=0, tmp_path=tmp_path)
    assert_lines(resumed, RESUMED_OK[name])


def test_a_crash_point_not_reached_says_so(tmp_path: Path) -> None:
    """Armed at a point the run never reaches (a finished thread), it says so and exits 3."""
    run("crm_onboarding", "--dir", tmp_path)
    out = run("crm_onboarding", "--resume", "--crash-at", "after_prepare", "--dir", tmp_path,
              expect=NOT_REACHED)  # fmt: skip
    assert "was not reached in this run: nothing died" in out


@pytest.mark.parametrize("name", ["outbox_notify", "email_verification"])
def test_resume_of_a_missing_directory_is_a_clear_error(name: str, tmp_path: Path) -> None:
    """``--resume --dir`` of a directory with no run: a usage error naming it, no traceback."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), "--resume", "--dir", tmp_path / "nope"],
        capture_output=True, text=True, timeout=scaled(120), check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "no run there" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture
def pg_base(tmp_path: Path) -> Iterator[str]:
    """The PostgreSQL URL the examples get; the schemas they create are dropped afterwards."""
    require_postgres()
    yield POSTGRES_URL
    from _common import drop_schema

    for marker in tmp_path.rglob("postgres-schema"):
        drop_schema(POSTGRES_URL, marker.parent)


@pytest.mark.postgres
@pytest.mark.parametrize("name", sorted(DEFAULT_RUN))
def test_default_run_on_postgres(name: str, tmp_path: Path, pg_base: str) -> None:
    """Each example runs start to end with ``--postgres`` and prints the same counts."""
    assert_lines(run(name, "--postgres", pg_base, "--dir", tmp_path), DEFAULT_RUN[name])


PG_CRASHES = [
    ("crm_onboarding", "after_provider"),
    ("support_ticket", "during_review_resume"),
    ("outbox_notify", "after_send"),
    ("email_verification", "after_request"),
    ("functional_api", "after_provider"),
    ("mcp_tools", "after_provider"),
    ("provider_presets", "after_claim:2"),
]


@pytest.mark.postgres
@pytest.mark.parametrize(("name", "point"), PG_CRASHES, ids=lambda v: str(v))
def test_crash_and_resume_on_postgres(name: str, point: str, tmp_path: Path, pg_base: str) -> None:
    """Killed with ``--postgres``, resumed with it: the same true ending as on SQLite."""
    work = tmp_path / "run"
    crashed = launch(name, "--postgres", pg_base, "--crash-at", point, "--dir", work,
                     expect=CRASHED, tmp_path=tmp_path)  # fmt: skip
    assert "--postgres URL" in crashed
    resumed = launch(name, "--postgres", pg_base, "--resume", "--dir", work, expect=0,
                     tmp_path=tmp_path)  # fmt: skip
    assert_lines(resumed, RESUMED_OK[name])


@pytest.mark.parametrize("name", sorted(DEFAULT_RUN))
def test_default_run(name: str, tmp_path: Path) -> None:
    """Each example runs start to end with exit code 0 and prints its effect counts."""
    present(name)
    assert_lines(run_fresh(name, "--dir", tmp_path), DEFAULT_RUN[name])


def test_crm_onboarding_crash_then_resume(tmp_path: Path) -> None:
    """The process dies after the CRM acted, then --resume: one closure, one e-mail."""
    crashed = run(
        "crm_onboarding", "--crash-at", "after_provider", "--dir", tmp_path, expect=CRASHED
    )
    assert "--resume --dir" in crashed
    resumed = run("crm_onboarding", "--resume", "--dir", tmp_path)
    assert_lines(resumed, [*DEFAULT_RUN["crm_onboarding"][2:], "OK: each effect happened"])


def test_crm_onboarding_reconciles_after_a_relay_crash(tmp_path: Path) -> None:
    """The relay died after the mail was accepted: the resume reconciles instead of resending."""
    run("crm_onboarding", "--crash-at", "relay_after_send", "--dir", tmp_path, expect=CRASHED)
    resumed = run("crm_onboarding", "--resume", "--dir", tmp_path)
    assert_lines(
        resumed,
        [
            r"outbox\.owner\.notify: prepare\(ledger\) -> claim\(process \d+\) -> "
            r"mark_unknown\(takeover by process \d+\) -> resolve\(reconciler\)",
            r"e-mails to the account owner: 1\n",
        ],
    )


def test_support_ticket_crash_then_review_on_resume(tmp_path: Path) -> None:
    """The process dies after the ticket was created; the resume asks for review, one ticket."""
    run("support_ticket", "--crash-at", "after_provider", "--dir", tmp_path, expect=CRASHED)
    resumed = run("support_ticket", "--resume", "--dir", tmp_path)
    assert_lines(
        resumed,
        [
            r"last_error\s+the lease owner's process is gone",
            r"mark_unknown\s+dispatching -> unknown\s+by takeover",
            r"tickets created: 1\n",
        ],
    )


def test_support_ticket_retry_shows_the_duplicate_it_risks(tmp_path: Path) -> None:
    """--decision retry --by bob answers the review; with no idempotency key, a second ticket."""
    out = run("support_ticket", "--decision", "retry", "--by", "bob", "--dir", tmp_path)
    assert_lines(out, [r"unknown -> prepared\s+by bob", r"tickets created: 2\n", "duplicate"])


def test_support_ticket_resolved_out_of_band_with_the_cli(tmp_path: Path) -> None:
    """Stop at the review, resolve with the langgraph-effects CLI, resume: one ticket, confirmed."""
    stopped = run("support_ticket", "--stop-at-review", "--dir", tmp_path, expect=2)
    (op_id,) = set(re.findall(r"resolve (op-\w+) --tenant acme", stopped))
    cli = Path(sys.executable).with_name("langgraph-effects")
    db = f"sqlite:///{tmp_path / 'effects.db'}"
    resolved = subprocess.run(
        [str(cli), "resolve", op_id, "--tenant", "acme", "--confirm", "--by", "alice",
         "--reason", "seen in the ticketing UI", "--db", db],
        capture_output=True, text=True, check=False, timeout=scaled(60),
    )  # fmt: skip
    assert resolved.returncode == 0, resolved.stderr
    resumed = run("support_ticket", "--resume", "--dir", tmp_path)
    assert "Review request" not in resumed
    # The actor is the verified identity (the OS user); the name given is recorded beside it.
    assert_lines(
        resumed,
        [r"unknown -> confirmed\s+by \S+ .*'claimed_by': 'alice'", r"tickets created: 1\n"],
    )


def test_support_ticket_via_cli(tmp_path: Path) -> None:
    """--via-cli runs list, show and resolve through the console script and then continues."""
    out = run("support_ticket", "--via-cli", "--dir", tmp_path)
    assert_lines(
        out,
        [
            r"\$ langgraph-effects resolve op-",
            r"op-\S+ confirmed by \S+; the next run",
            r"tickets created: 1\n",
        ],
    )


@pytest.mark.parametrize("name", sorted(DEFAULT_RUN))
def test_every_flag_of_every_example_says_what_it_does(name: str) -> None:
    """``--help`` of each example explains each of its flags."""
    done = run_in_forked_child(unexplained_flags, str(present(name)), timeout=180)
    assert done.ok, done.error
    assert done.value == [], name


def test_a_run_without_dir_gets_a_directory_of_its_own_and_says_so() -> None:
    """Two runs without --dir never share a directory; each names the one it keeps; a
    --resume without --dir is a usage error saying what to pass."""
    seen = []
    try:
        for _ in range(2):
            out = run("outbox_notify")
            found = re.search(r"^files in (\S+) \(kept after the run: remove it", out, re.M)
            assert found is not None, out
            seen.append(Path(found.group(1)))
            assert seen[-1].is_dir()
            assert re.search(r"relay: 1 claimed, 1 sent\n", out)
            assert "RelayReport(" not in out
        assert seen[0] != seen[1]
    finally:
        for path in seen:
            shutil.rmtree(path, ignore_errors=True)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "crm_onboarding.py"), "--resume"],
        capture_output=True, text=True, timeout=scaled(180), check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--resume needs --dir DIR" in done.stderr


def test_the_server_example_is_a_template_that_stands_alone(tmp_path: Path) -> None:
    """examples/server copied anywhere imports its graph: it needs nothing else from the
    repository (no path into examples/)."""
    copy = tmp_path / "my-server"
    shutil.copytree(EXAMPLES / "server", copy)
    for source in copy.glob("*.py"):
        assert "sys.path" not in source.read_text(encoding="utf-8"), source.name
    env = {**os.environ, "LGE_LEDGER_URL": f"sqlite:///{tmp_path / 'effects.db'}"}
    done = subprocess.run(
        [sys.executable, "-c", "import graph; print(type(graph.graph).__name__)"],
        cwd=copy, capture_output=True, text=True, timeout=scaled(180), check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "CompiledStateGraph"
