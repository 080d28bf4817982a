"""Failures, exit codes and their messages; the passwords never printed."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from typing import Any, NoReturn

import pydantic
import typer
from rich.text import Text

from langgraph_effects.cli._app import ExitCode
from langgraph_effects.cli._text import _console, _lit
from langgraph_effects.errors import (
    RECORD_MOVED,
    InvalidInput,
    LedgerError,
    OperationNotFound,
)
from langgraph_effects.ledger.connect import _authority


class _Failure(Exception):
    """An error to report and exit with; raised inside commands, never escapes ``main``."""

    def __init__(self, code: ExitCode, kind: str, message: str) -> None:
        self.code = code
        self.kind = kind
        super().__init__(message)


_SECRETS: set[str] = set()
"""Passwords of the URLs this process opened: never printed, whatever message holds them."""


def _passwords(url: str) -> list[str]:
    """The passwords a ledger URL carries: in its user info (which may itself hold
    an unescaped ``@``: the host follows the *last* one), or as ``password=``."""
    found = re.findall(r"password=([^&\s]+)", url)
    authority = _authority(url)
    if "@" in authority:
        userinfo = authority.rsplit("@", 1)[0]
        if ":" in userinfo:
            found.append(userinfo.split(":", 1)[1])
    return [secret for secret in found if secret]


def _redact(text: str) -> str:
    """``text`` with every known password replaced by ``***``."""
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


@contextlib.contextmanager
def _reporting(as_json: bool) -> Iterator[None]:
    """Turn failures into one message on stderr and the documented exit code."""
    try:
        yield
    except _Failure as exc:
        _fail(exc, as_json)
    except OperationNotFound as exc:
        _fail(_Failure(ExitCode.NOT_FOUND, "not_found", str(exc)), as_json)
    except RECORD_MOVED as exc:
        _fail(_Failure(ExitCode.REFUSED, "refused", f"{exc}; nothing was changed"), as_json)
    except (InvalidInput, pydantic.ValidationError) as exc:
        _fail(_Failure(ExitCode.USAGE, "usage", str(exc)), as_json)
    except LedgerError as exc:
        _fail(_Failure(ExitCode.USAGE, "unavailable", str(exc)), as_json)


def _fail(failure: _Failure, as_json: bool) -> NoReturn:
    message = _redact(str(failure))
    if as_json:
        error = {"error": failure.kind, "message": message, "exit_code": int(failure.code)}
        typer.echo(json.dumps(error), err=True)
    else:
        _console(stderr=True).print(Text.assemble(("error:", "bold red"), " ", _lit(message)))
    raise typer.Exit(int(failure.code))


def _echo_json(value: Any) -> None:
    # ASCII: control characters and look-alikes in ledger values arrive escaped.
    typer.echo(json.dumps(value, indent=2))
