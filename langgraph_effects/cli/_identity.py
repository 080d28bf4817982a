"""Who decides: the verified operator, the name given, and the resolve policy."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langgraph_effects.cli._app import ExitCode
from langgraph_effects.cli._report import _Failure
from langgraph_effects.cli._text import _lit
from langgraph_effects.core.actors import person_refusal
from langgraph_effects.core.model import (
    Decision,
    Operation,
    Resolution,
)

ResolvePolicy = Callable[[str, Operation, Decision], bool]
"""``policy(operator, operation, decision) -> bool``: may this person decide this?

Return ``True`` to allow. ``False`` or any exception (``PermissionError("why")``
reads best) forbids; a broken policy therefore fails closed.
"""


def _load_hook(option: str, spec: str | None) -> Callable[..., Any] | None:
    """Import ``module:function`` (the working directory is importable, as with ``python -m``)."""
    if not spec:
        return None
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise _Failure(ExitCode.USAGE, "usage", f"{option} {spec!r}: expected module:function")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        hook: object = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise _Failure(ExitCode.USAGE, "usage", f"cannot load {option} {spec!r}: {exc}") from exc
    if not callable(hook):
        raise _Failure(ExitCode.USAGE, "usage", f"{option} {spec!r} is not callable")
    return hook


def _check_policy(
    policy: Callable[..., Any] | None, operator: str, op: Operation, decision: Decision
) -> None:
    if policy is None:
        return
    try:
        allowed = policy(operator, op, decision) is True
        why = "the policy said no"
    except Exception as exc:  # fail closed: a broken policy allows nothing
        allowed, why = False, str(exc) or type(exc).__name__
    if not allowed:
        raise _Failure(
            ExitCode.FORBIDDEN,
            "forbidden",
            f"{operator!r} may not {decision.value} {op.action} operations of tenant "
            f"{op.tenant_id!r}: {why}",
        )


@dataclass(frozen=True)
class _Identity:
    """Who is deciding: the verified name (the event's actor) and the name given."""

    verified: str
    source: str
    """``os``, ``sudo`` or ``hook``."""
    claimed: str

    def resolution(self, decision: Decision, reason: str, **more: Any) -> Resolution:
        return Resolution(
            decision=decision,
            by=self.verified,
            reason=reason,
            claimed_by=self.claimed,
            verified_by=f"{self.source}:{self.verified}",
            **more,
        )


def _refuse_reserved(name: object, what: str) -> str:
    """``name`` stripped, if a person may carry it in the event log (the one rule for
    every path, ``core.actors.person_refusal``); else a usage error."""
    why = person_refusal(name)
    if why is not None:
        raise _Failure(ExitCode.USAGE, "usage", f"{what} {_lit(name)!r} cannot decide: {why}")
    assert isinstance(name, str)
    return name.strip()


def _os_user() -> tuple[str, str]:
    """The OS account running this process; under sudo, the account that invoked it."""
    try:
        import pwd

        name = pwd.getpwuid(os.geteuid()).pw_name
        root = os.geteuid() == 0
    except (ImportError, KeyError):  # Windows, or a uid without a passwd entry
        import getpass

        name, root = getpass.getuser(), False
    sudo_user = os.environ.get("SUDO_USER")
    if root and sudo_user and sudo_user != "root":
        return sudo_user, "sudo"
    return name, "os"


def _identify(by: str | None, hook_spec: str | None) -> _Identity:
    """The operator's verified identity (hook, else OS user) and claimed name (``--by``)."""
    claimed = _refuse_reserved(by, "--by") if by is not None and by.strip() else None
    hook = _load_hook("--identity", hook_spec)
    if hook is None:
        verified, source = _os_user()
    else:
        try:
            verified, source = hook(claimed), "hook"
        except Exception as exc:  # fail closed: an identity not verified decides nothing
            raise _Failure(
                ExitCode.FORBIDDEN,
                "forbidden",
                f"the identity hook {hook_spec!r} did not verify you: {exc or type(exc).__name__}",
            ) from exc
        if not isinstance(verified, str):
            raise _Failure(
                ExitCode.FORBIDDEN,
                "forbidden",
                f"the identity hook {hook_spec!r} returned {verified!r:.60}, not a name: "
                "it verified nobody",
            )
    verified = _refuse_reserved(verified, f"the verified identity ({source})")
    return _Identity(verified=verified, source=source, claimed=claimed or verified)
