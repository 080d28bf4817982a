"""E-mail verification that survives restarts, from a run snapshot (no API key needed).

A run leases a disposable mailbox, asks the application to send a verification
message, waits for it, and verifies the code:

    LEASED -> REQUESTED -> WAITING -> RECEIVED -> VERIFIED, or EXPIRED

Each step is an event appended to a versioned journal (``RunJournal``, on a
SQLite file); a restarted worker reads ``next_action`` from the snapshot, never
a conversation. A message is accepted only if its run id, recipient and event
type match; others are discarded and counted. Bodies are never stored: the
journal keeps message ids and a SHA-256 of the code.

Run it::

    python examples/email_verification.py                       # one run, start to end
    python examples/email_verification.py --crash-at waiting    # killed while WAITING ...
    python examples/email_verification.py --resume --dir DIR    # ... and resumed from DIR
    python examples/email_verification.py --postgres postgresql://postgres@127.0.0.1:5432/test

Crash points: ``after_request`` (the app accepted the request, the journal does
not know yet), ``waiting`` (after the first empty poll), ``after_receive``
(message accepted, code not verified). ``--crash-at`` kills the process with
``os._exit(137)`` and prints the directory to resume from. Before asking the
application for a message, the worker looks the request up by its key: after
an ``after_request`` crash the resumed run finds the request the crashed one
made and records it, instead of asking again. ``--postgres URL`` keeps the
journal in PostgreSQL (a schema of the run's own); the fake application and
inbox stay a SQLite file.

It prints each action as it happens (``[v3 waiting] poll_inbox -> 1 message(s)``),
then the snapshot and the metrics: runs resumed successfully, inbox polls for
the run, stale-version rejections, seconds from REQUESTED to RECEIVED,
messages discarded for another run id, and the verification requests the
application received (1, even after a crash and a resume). Exit code 0 when the
run is verified with exactly one request received; 137 when a crash point
killed it; 1 otherwise (2 for a usage error, such as ``--resume`` of a
directory holding no run).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from _common import SCHEMA_FILE, begin, example_parser

from langgraph_effects.errors import StaleVersion
from langgraph_effects.journal import RunEvent, RunJournal, RunMachine, RunState, Transition

RUN_ID = "checkout-1842"
RECIPIENT = "run-1842@disposable.test"
EVENT_TYPE = "email_verification"
CRASH_POINTS = ("after_request", "waiting", "after_receive")


def _lease_or_attempts_over(snap: Any, event: Any, now: Any) -> bool:
    return bool(snap.lease_expired(now) or snap.attempts_left <= 0)


EMAIL_VERIFICATION = RunMachine(
    "email_verification",
    initial="leased",
    expire_event="expire",
    states=[
        RunState(name="leased", next_action="request_message"),
        RunState(name="requested", next_action="poll_inbox"),
        RunState(name="waiting", next_action="poll_inbox"),
        RunState(name="received", next_action="verify_code"),
        RunState(name="verified", terminal=True, success=True),
        RunState(name="expired", terminal=True),
    ],
    transitions=[
        Transition(
            event="message_requested",
            sources=("leased",),
            target="requested",
            condition="the application accepted the request (its request id is the evidence)",
            accepts_evidence=True,
        ),
        Transition(
            event="inbox_polled",
            sources=("requested", "waiting"),
            target="waiting",
            condition="a poll found no matching message",
            consumes_attempt=True,
        ),
        Transition(
            event="message_discarded",
            sources=("requested", "waiting"),
            target=None,
            condition="a message whose run id, recipient or event type does not match",
        ),
        Transition(
            event="message_received",
            sources=("requested", "waiting"),
            target="received",
            condition="a message matching run id, recipient and event type",
            accepts_evidence=True,
        ),
        Transition(
            event="code_verified",
            sources=("received",),
            target="verified",
            condition="the code's hash matches the accepted message",
        ),
        Transition(
            event="expire",
            sources=("leased", "requested", "waiting", "received"),
            target="expired",
            condition="the mailbox lease expired or no attempts are left",
            guard=_lease_or_attempts_over,
        ),
    ],
)


class FakeVerificationProvider:
    """The application's mail side and the disposable inbox, in one SQLite file.

    ``request`` is idempotent by key (a resend applies nothing); every call is
    counted so a reader can see a restart did not request a second message.
    The message lands in the inbox on the second poll; a message for another
    run lands first (a shared disposable domain).
    """

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=30)
        self.conn.executescript(
            """
            CREATE TABLE IF NOT EXISTS requests (key TEXT PRIMARY KEY, request_id TEXT, code TEXT);
            CREATE TABLE IF NOT EXISTS messages (message_id TEXT PRIMARY KEY, run_id TEXT,
                recipient TEXT, event_type TEXT, body TEXT, visible_after_poll INTEGER);
            CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, n INTEGER);
            """
        )

    def _bump(self, name: str) -> int:
        self.conn.execute(
            "INSERT INTO counters VALUES (?, 1) ON CONFLICT (name) DO UPDATE SET n = n + 1",
            (name,),
        )
        return self.count(name)

    def count(self, name: str) -> int:
        row = self.conn.execute("SELECT n FROM counters WHERE name = ?", (name,)).fetchone()
        return int(row[0]) if row else 0

    def find_request(self, key: str) -> str | None:
        """The application's lookup: the request id made under ``key``, if any (sends nothing)."""
        row = self.conn.execute("SELECT request_id FROM requests WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def request(self, run_id: str, recipient: str, *, key: str) -> str:
        """Ask the application to send a verification code; returns the request id."""
        self._bump("requests_received")
        row = self.conn.execute("SELECT request_id FROM requests WHERE key = ?", (key,)).fetchone()
        if row:
            return str(row[0])  # idempotent: the same key applies nothing twice
        self._bump("requests_applied")
        request_id, code = f"req-{uuid.uuid4().hex[:8]}", f"{uuid.uuid4().int % 1000000:06d}"
        self.conn.execute("INSERT INTO requests VALUES (?, ?, ?)", (key, request_id, code))
        polls = self.count(f"polls:{recipient}")
        self.conn.execute(
            "INSERT INTO messages VALUES (?, 'checkout-0007', ?, ?, 'code 111111', ?)",
            (f"m-{uuid.uuid4().hex[:6]}", recipient, EVENT_TYPE, polls + 1),
        )
        self.conn.execute(
            "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?)",
            (f"m-{uuid.uuid4().hex[:6]}", run_id, recipient, EVENT_TYPE, f"code {code}", polls + 2),
        )
        return request_id

    def poll(self, recipient: str) -> list[dict[str, str]]:
        """Messages visible in the mailbox now (headers and id; the body via ``read``)."""
        polls = self._bump(f"polls:{recipient}")
        rows = self.conn.execute(
            "SELECT message_id, run_id, recipient, event_type FROM messages"
            " WHERE recipient = ? AND visible_after_poll <= ? ORDER BY rowid",
            (recipient, polls),
        ).fetchall()
        keys = ("message_id", "run_id", "recipient", "event_type")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def read(self, message_id: str) -> str:
        row = self.conn.execute("SELECT body FROM messages WHERE message_id = ?", (message_id,))
        return str(row.fetchone()[0])

    def verify(self, run_id: str, code: str) -> bool:
        row = self.conn.execute("SELECT code FROM requests WHERE key = ?", (f"{run_id}:request",))
        found = row.fetchone()
        return found is not None and found[0] == code


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _crash(point: str, crash_at: str | None, workdir: Path) -> None:
    if point == crash_at:
        pg = " --postgres URL" if (workdir / SCHEMA_FILE).exists() else ""
        print(f"** crash at {point}: process killed; resume with --resume --dir {workdir}{pg}")
        os._exit(137)


def work(
    journal: RunJournal,
    provider: FakeVerificationProvider,
    run_id: str,
    *,
    crash_at: str | None = None,
    workdir: Path = Path("."),
    say: Any = print,
) -> str:
    """Drive one run by its snapshot until it ends; return the final state."""
    seen = {
        e.data.get("message_id") for e in journal.events(run_id) if e.type == "message_discarded"
    }
    for _ in range(50):
        snap = journal.get(run_id)
        assert snap is not None
        action = journal.next_action(run_id)
        if action is None:
            return snap.state
        head = f"[v{snap.version} {snap.state}]"
        try:
            if action == "request_message":
                # Look before asking: a crashed worker may have made the request
                # and died before the journal recorded it.
                key = f"{run_id}:request"
                request_id = provider.find_request(key)
                if request_id is not None:
                    say(f"{head} request_message -> already made as {request_id}; recording it")
                else:
                    request_id = provider.request(run_id, RECIPIENT, key=key)
                    say(f"{head} request_message -> accepted as {request_id}")
                _crash("after_request", crash_at, workdir)
                journal.append(
                    run_id,
                    snap.version,
                    RunEvent(event_id="request", type="message_requested", evidence_id=request_id),
                )
            elif action == "poll_inbox":
                messages = [m for m in provider.poll(RECIPIENT) if m["message_id"] not in seen]
                say(f"{head} poll_inbox -> {len(messages)} new message(s)")
                accepted = _triage(journal, run_id, messages, seen, say)
                if accepted:
                    _crash("after_receive", crash_at, workdir)
                if not accepted:
                    snap = journal.get(run_id)
                    assert snap is not None
                    if snap.state in ("requested", "waiting"):
                        journal.append(
                            run_id,
                            snap.version,
                            RunEvent(event_id=f"poll@v{snap.version}", type="inbox_polled"),
                        )
                        _crash("waiting", crash_at, workdir)
            elif action == "verify_code":
                message_id = snap.evidence_ids[-1]
                code = provider.read(message_id).removeprefix("code ")
                ok = provider.verify(run_id, code)
                say(f"{head} verify_code -> {'valid' if ok else 'invalid'}")
                if ok:
                    journal.append(
                        run_id,
                        snap.version,
                        RunEvent(
                            event_id="verify",
                            type="code_verified",
                            data={"code_sha256": _sha(code)},
                        ),
                    )
            elif action == "expire":
                say(f"{head} expire -> the mailbox is not reused")
                journal.append(run_id, snap.version, RunEvent(event_id="expire", type="expire"))
        except StaleVersion as stale:
            say(f"{head} another worker moved first ({stale.current}); re-reading the snapshot")
    raise RuntimeError("the run did not finish in 50 steps")


def _triage(
    journal: RunJournal,
    run_id: str,
    messages: list[dict[str, str]],
    seen: set[Any],
    say: Any,
) -> bool:
    """Accept the first matching message; discard (and count) the others. True if accepted."""
    for m in messages:
        snap = journal.get(run_id)
        assert snap is not None
        mismatch = [
            field
            for field, wanted in (
                ("run_id", run_id),
                ("recipient", RECIPIENT),
                ("event_type", EVENT_TYPE),
            )
            if m[field] != wanted
        ]
        if mismatch:
            seen.add(m["message_id"])
            say(f"  discard {m['message_id']}: {', '.join(mismatch)} do(es) not match")
            journal.append(
                run_id,
                snap.version,
                RunEvent(
                    event_id=f"discard:{m['message_id']}",
                    type="message_discarded",
                    data={"message_id": m["message_id"], "reason": mismatch[0]},
                ),
            )
            continue
        journal.append(
            run_id,
            snap.version,
            RunEvent(
                event_id=f"receive:{m['message_id']}",
                type="message_received",
                evidence_id=m["message_id"],
            ),
        )
        say(f"  accept {m['message_id']} (run id, recipient and event type match)")
        return True
    return False


def report(journal: RunJournal, provider: FakeVerificationProvider, run_id: str) -> dict[str, Any]:
    """The seeds' metrics for this run, plus what the fake application counted."""
    metrics = journal.metrics(run_id)
    stats = journal.stats()
    assert metrics is not None
    discarded_other_run = sum(
        1
        for e in journal.events(run_id)
        if e.type == "message_discarded" and e.data.get("reason") == "run_id"
    )
    return {
        "final_state": metrics.state,
        "runs_resumed_successfully": stats.resumed_runs_succeeded,
        "inbox_polls": provider.count(f"polls:{RECIPIENT}"),
        "stale_version_rejections": stats.stale_version_rejections,
        "seconds_requested_to_received": metrics.seconds_between("requested", "received"),
        "discarded_for_another_run_id": discarded_other_run,
        "verification_requests_received": provider.count("requests_received"),
        "verification_requests_applied": provider.count("requests_applied"),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = example_parser(
        __doc__,
        CRASH_POINTS,
        counted=False,
        crash_help="kill this process after the request was sent, while it waits for the "
        "answer, or just after the answer arrived",
        resume_help="resume the run found in --dir",
    )
    args = parser.parse_args(argv)
    run = begin("email_verification", parser, args, needs="provider.db")
    workdir, pg = run.directory, run.pg
    provider = FakeVerificationProvider(workdir / "provider.db")
    with RunJournal.from_conn_string(pg or workdir / "runs.db", [EMAIL_VERIFICATION]) as journal:
        journal.setup()
        if args.resume:
            if journal.get(RUN_ID) is None:
                parser.error(f"--resume --dir {workdir}: no run {RUN_ID} in its journal")
            snap = journal.resume(RUN_ID, worker=f"pid-{os.getpid()}", boot_id=uuid.uuid4().hex)
            print(f"resumed {RUN_ID} at v{snap.version} in {snap.state}: next {snap.next_action}")
        else:
            journal.start(
                RUN_ID,
                EMAIL_VERIFICATION.name,
                resource=RECIPIENT,
                attempts=5,
                lease_for=timedelta(minutes=30),
            )
            where = " (journal: PostgreSQL)" if pg else ""
            print(f"started {RUN_ID} (mailbox {RECIPIENT} leased) in {workdir}{where}")
        work(journal, provider, RUN_ID, crash_at=args.crash_at, workdir=workdir)
        snap = journal.get(RUN_ID)
        assert snap is not None
        print(f"snapshot: {snap.model_dump_json(exclude={'updated_at'})}")
        figures = report(journal, provider, RUN_ID)
    for name, value in figures.items():
        print(f"  {name}: {value}")
    return figures


if __name__ == "__main__":
    done = main()
    ok = done["final_state"] == "verified" and done["verification_requests_received"] == 1
    sys.exit(0 if ok else 1)
