"""The ``typer`` application, the options every command shares, and the entry point."""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Annotated

import typer

from langgraph_effects.ledger.connect import LEDGER_URL_ENV

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

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar=list(LEDGER_URL_ENV),
        metavar="URL",
        help="Ledger URL: sqlite:///file.db, sqlite:////abs/file.db or postgresql://...",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output (stable keys).")]
OperationArg = Annotated[
    str,
    typer.Argument(metavar="OPERATION_ID", help="The operation id, or a unique prefix of it."),
]
TenantRequired = Annotated[
    str,
    typer.Option(
        "--tenant", "-t", envvar="LGE_TENANT", metavar="TENANT", help="The operation's tenant."
    ),
]
TenantFilter = Annotated[
    str | None,
    typer.Option("--tenant", "-t", envvar="LGE_TENANT", metavar="TENANT", help="Only this tenant."),
]
ByOption = Annotated[
    str | None,
    typer.Option(
        "--by",
        envvar="LGE_OPERATOR",
        metavar="NAME",
        help="Your name as you give it; recorded beside the verified identity "
        "(default: the verified identity).",
    ),
]
IdentityOption = Annotated[
    str | None,
    typer.Option(
        "--identity",
        envvar="LGE_IDENTITY",
        metavar="MODULE:FUNCTION",
        help="A hook returning your verified identity (default: the OS user).",
    ),
]
ReasonOption = Annotated[
    str,
    typer.Option("--reason", metavar="TEXT", help="Why: recorded in the event log (required)."),
]
PolicyOption = Annotated[
    str | None,
    typer.Option(
        "--policy",
        envvar="LGE_RESOLVE_POLICY",
        metavar="MODULE:FUNCTION",
        help="A hook deciding who may decide what.",
    ),
]


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
