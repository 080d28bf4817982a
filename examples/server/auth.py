"""DEMO ONLY, NOT SECURE: a LangGraph Server auth handler whose token names the user.

A token ``demo-<name>`` authenticates as ``<name>``, in either header:

* ``X-Api-Key: demo-ana``: what Agent Chat UI sends. It has no sign-in of its own and
  never sends ``Authorization``; the key typed in its form's "LangSmith API Key" field is
  sent as ``X-Api-Key`` on every request (``docs/agent-chat-ui.md``);
* ``Authorization: Bearer demo-ana``: what the SDK examples and the tests send.

Any other token is refused (401). A request with neither is an unauthenticated visitor,
allowed here so the SDK examples run without a token: an approval answered by a visitor
must then say who decides (``"by"``), or it is refused and the request stays open (Agent
Chat UI shows the refusal as its error toast). Anyone can claim any name with this
handler: replace it with your identity provider's token check (``langgraph.json``:
``"auth": {"path": ...}``).

Why it is here: the server passes the authenticated user to the graph as
``config["configurable"]["langgraph_auth_user"]``, and ``EffectToolNode`` records an
approval or a review as decided by that user, not by the name the answer gives (which is
kept beside it as ``claimed_by``). ``tests/server/test_server.py`` drives it with the SDK
and with Agent Chat UI's own requests.
"""

from __future__ import annotations

from typing import Any

from langgraph_sdk import Auth

auth = Auth()
TOKEN_PREFIX = "demo-"


def _token(headers: dict[bytes, bytes]) -> str | None:
    """The demo token of a request: its ``X-Api-Key``, else its ``Authorization`` bearer."""
    key = headers.get(b"x-api-key", b"").decode().strip()
    if key:
        return key
    authorization = headers.get(b"authorization", b"").decode().strip()
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else authorization


@auth.authenticate
async def authenticate(headers: dict[bytes, bytes]) -> dict[str, Any]:
    """The user a demo token names; no token: an unauthenticated visitor."""
    token = _token(headers)
    if token is None:
        return {"identity": "visitor", "is_authenticated": False}
    name = token.removeprefix(TOKEN_PREFIX).strip()
    if not token.startswith(TOKEN_PREFIX) or not name:
        raise Auth.exceptions.HTTPException(
            status_code=401,
            detail="demo tokens only: send 'X-Api-Key: demo-<name>' (Agent Chat UI's API key "
            "field) or 'Authorization: Bearer demo-<name>'",
        )
    return {"identity": name}
