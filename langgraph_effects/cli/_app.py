"""The ``typer`` application, the exit codes, and the entry point.

Importing this module, or ``_commands`` which declares the commands on ``app``,
costs little: ``--help`` and ``--version`` load neither pydantic nor the ledger.
Each command's body lives in the module of its concern (``_inspect``,
``_decide``, ``_stuck``) and is imported when the command runs (``deferred``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
from collections.abc import Callable
from enum import IntEnum
from typing import Annotated, Any, TypeVar

import typer

__all__ = ["ExitCode", "app", "deferred", "main"]


class ExitCode(IntEnum):
    """The process exit codes of every command (see the module docstring)."""

    OK = 0
    FAILURE = 1
    USAGE = 2
    NOT_FOUND = 3
    REFUSED = 4
    FORBIDDEN = 5


app = typer.Typer(
    name="langgraph-effects",
    help="Inspect and resolve the operations of a langgraph-effects ledger.",
    epilog="Exit codes: 0 done, 1 unexpected failure, 2 usage or connection, 3 not found, "
    "4 refused by the state machine, 5 forbidden by the resolve policy.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

Command = TypeVar("Command", bound=Callable[..., None])


def deferred(module: str) -> Callable[[Command], Command]:
    """Run the declared command with the function of the same name in ``module``.

    The declaration (its options and help) stays here, cheap to import; the body
    and what it needs (pydantic, the ledger, rich tables) load only when the
    command runs. ``functools.wraps`` keeps the declared signature for typer.
    """

    def wrap(declared: Command) -> Command:
        @functools.wraps(declared)
        def run(*args: Any, **kwargs: Any) -> None:
            body = getattr(
                importlib.import_module(f"langgraph_effects.cli.{module}"), declared.__name__
            )
            body(*args, **kwargs)

        return run  # type: ignore[return-value]

    return wrap


def _version(value: bool) -> None:
    if value:
        typer.echo(f"langgraph-effects {_package_version()}")
        raise typer.Exit()


def _package_version() -> str:
    try:
        return importlib.metadata.version("langgraph-effects")
    except importlib.metadata.PackageNotFoundError:  # a checkout on sys.path, not installed
        return str(getattr(importlib.import_module("langgraph_effects"), "__version__", "unknown"))


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Inspect and decide the operations of a langgraph-effects ledger."""


def main() -> None:
    """Console-script entry point."""
    app()
