"""DEMO ONLY, NOT SECURE: a LangGraph Server auth handler whose bearer token names the user.

``Authorization: Bearer demo-alice`` authenticates as ``alice``; any other token is
refused (401); a request without one is an unauthenticated visitor (allowed here, so the
SDK examples run without a token: an approval answered by a visitor must then say who
decides, ``"by"``). Anyone can claim any name with this handler: replace it with your
identity provider's token check (``langgraph.json``: ``"auth": {"path": ...}``).

Why it is here: the server passes the authenticated user to the graph as
``config["configurable"]["langgraph_auth_user"]``, and ``EffectToolNode`` records an
approval or a review as decided by that user, not by the name the answer gives (which is
kept beside it as ``claimed_by``). ``tests/test_server.py`` drives it with the SDK.
"""

from __future__ import annotations

from typing import Any

from langgraph_sdk import Auth

auth = Auth()
_PREFIX = "Bearer demo-"


@auth.authenticate
async def authenticate(authorization: str | None) -> dict[str, Any]:
    """The user a demo token names; no token: an unauthenticated visitor."""
    if not authorization:
        return {"identity": "visitor", "is_authenticated": False}
    if not authorization.startswith(_PREFIX) or not authorization[len(_PREFIX) :].strip():
        raise Auth.exceptions.HTTPException(status_code=401, detail="demo tokens only")
    return {"identity": authorization[len(_PREFIX) :].strip()}
