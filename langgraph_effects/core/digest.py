"""Canonical payload digests (RFC 8785 JSON Canonicalization Scheme + SHA-256 or HMAC-SHA256).

Two formats, told apart by their prefix:

* ``<64 hex>``: plain SHA-256. Used when the ledger also keeps the payload,
  so the digest reveals nothing the record does not already show.
* ``hmac:<64 hex>``: HMAC-SHA256 under a secret the deployment provides.
  Required when only the digest is kept (``store_payload=False``): a plain hash
  of a low-entropy payload (a 6-digit PIN) is reversed by trying every value;
  without the key that search is impossible. The digest is part of the
  operation's identity: a rotated key stays listed after the new one until the
  records it digested are settled (``resolve_payload_keys``, docs/payload-keys.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Sequence
from typing import Any

import rfc8785

from langgraph_effects.errors import InvalidInput

__all__ = [
    "DIGEST_PATTERN",
    "MAX_PAYLOAD_BYTES",
    "MIN_PAYLOAD_KEY_BYTES",
    "PAYLOAD_KEY_ENV",
    "PAYLOAD_OLD_KEYS_ENV",
    "canonical_json",
    "compact_encoder",
    "payload_digest",
    "resolve_payload_key",
    "resolve_payload_keys",
]

MAX_PAYLOAD_BYTES = 1 << 20
"""Largest canonical payload accepted (1 MiB): ledgers are not blob stores."""

PAYLOAD_KEY_ENV = "LGE_PAYLOAD_KEY"
"""Environment variable holding the deployment's payload digest key."""

PAYLOAD_OLD_KEYS_ENV = "LGE_PAYLOAD_OLD_KEYS"
"""Environment variable holding the keys rotated out, comma-separated, newest first."""

MIN_PAYLOAD_KEY_BYTES = 16
"""Shortest key accepted: a guessable key would make the keyed digest guessable too."""

KEYED_PREFIX = "hmac:"
DIGEST_PATTERN = r"^(hmac:)?[0-9a-f]{64}$"
"""Both digest formats (records written before keyed digests have no prefix)."""


def canonical_json(value: Any) -> bytes:
    """Serialize a JSON value canonically: sorted keys, no spaces, JCS numbers.

    Raises ``InvalidInput`` for anything that is not plain JSON (NaN, infinities,
    sets, bytes, non-string keys, arbitrary objects) or larger than 1 MiB.
    """
    data = _by_json(value)
    if data is None:
        try:
            data = rfc8785.dumps(value)
        except (
            rfc8785.CanonicalizationError,
            UnicodeEncodeError,
            TypeError,
            RecursionError,
        ) as exc:
            # UnicodeEncodeError: a key with a lone surrogate (rfc8785 sorts keys by their
            # UTF-16 encoding, which fails before its own check of the text).
            raise InvalidInput(f"payload is not canonical JSON: {exc}") from exc
    if len(data) > MAX_PAYLOAD_BYTES:
        raise InvalidInput(
            f"payload is {len(data)} bytes of canonical JSON; the limit is {MAX_PAYLOAD_BYTES}"
        )
    return data


# -- the fast path: the json module's C encoder, where it writes RFC 8785's bytes -------
#
# ``rfc8785`` is pure Python (a few microseconds for a small payload; a tool call
# canonicalises several). For the values below, ``json``'s encoder writes the same
# bytes: strings escaped with the same table (``"``, ``\\``, ``\b \f \n \r \t``, other
# controls as lowercase ``\u00xx``, everything else as is, then UTF-8; a lone surrogate
# fails the encode), integers in decimal, and members sorted by key, where Python's
# code-point order is JCS's UTF-16 order because the keys are ASCII. Anything else
# (a float: JCS writes ``1.0`` as ``1`` and ``1e16`` in full; a subclass; a non-ASCII
# key; a deep nesting) is left to ``rfc8785``, so its output and its errors are
# exactly today's. ``tests/core/test_digest.py`` checks the equality by property.

_INT_MIN, _INT_MAX = -(2**53) + 1, 2**53 - 1
"""RFC 8785's integer domain (``rfc8785`` refuses integers outside it)."""

_MAX_DEPTH = 64
"""Deeper values go to ``rfc8785``: it alone decides where nesting is too deep."""


def compact_encoder(*, sort_keys: bool) -> Callable[[Any], str]:
    """``json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys,
    allow_nan=False, check_circular=False).encode``, as one C call.

    ``JSONEncoder.encode`` builds the C encoder anew on every call, under two Python
    layers (``encode``, ``iterencode``); this one is built once and called directly: the
    same text and the same errors (a cycle is a ``RecursionError``). Without the C
    accelerator (another interpreter) it is that ``encode``.
    """
    python = json.JSONEncoder(
        ensure_ascii=False,
        separators=(",", ":"),
        sort_keys=sort_keys,
        allow_nan=False,
        check_circular=False,
    )
    make = json.encoder.c_make_encoder  # type: ignore[attr-defined]
    if make is None:  # pragma: no cover - CPython has it
        return python.encode
    encoder = make(
        None,
        python.default,
        json.encoder.encode_basestring,
        None,
        ":",
        ",",
        sort_keys,
        False,
        False,
    )

    def encode(value: Any) -> str:
        return "".join(encoder(value, 0))

    return encode


_ENCODE = compact_encoder(sort_keys=True)


_STRING = json.encoder.encode_basestring
"""What ``_ENCODE`` writes for a string (``ensure_ascii=False``), without its Python layers."""


_ONLY_STR = {str}
"""The item types of a list of exact strings (``_by_json``: checked in C, not by a generator)."""


def _by_json(value: Any) -> bytes | None:
    """``rfc8785.dumps(value)``, written by ``json``'s encoder; None where it may differ.

    A string, and a list of strings (every id's parts, ``core.ids``), are written
    directly, as ``_ENCODE`` writes them, without walking them first.
    """
    try:
        kind = type(value)
        if kind is str:
            return _STRING(value).encode("utf-8")
        if kind is list and value and set(map(type, value)) == _ONLY_STR:
            return ("[" + ",".join(map(_STRING, value)) + "]").encode("utf-8")
        if _plain(value, 0):
            return _ENCODE(value).encode("utf-8")
    except (UnicodeEncodeError, RecursionError):
        pass  # a lone surrogate, or a caller's stack already deep: rfc8785 decides
    return None


def _plain(value: Any, depth: int) -> bool:
    """``value`` is made only of exact dicts with ASCII string keys, lists, tuples, strings,
    booleans, None and integers in JCS's domain, at most ``_MAX_DEPTH`` deep."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(_INT_MIN <= value <= _INT_MAX)
    if depth >= _MAX_DEPTH:
        return False
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not key.isascii() or not _plain(item, depth + 1):
                return False
        return True
    if kind is list or kind is tuple:
        # A loop, not all(...): no generator per level (this walk runs on every call).
        for item in value:  # noqa: SIM110
            if not _plain(item, depth + 1):
                return False
        return True
    return False


def resolve_payload_key(key: bytes | str | None, *, what: str) -> bytes:
    """The digest key as bytes: refused when missing or short.

    Args:
        key: the key given in code (bytes, or text read as UTF-8), or the
            value of ``$LGE_PAYLOAD_KEY`` (``effects.effect`` reads it; core
            reads no environment), or None.
        what: names the caller in errors (``"effect 'auth.send_pin'"``).
    """
    if key is None or key == "" or key == b"":
        raise InvalidInput(
            f"{what}: store_payload=False needs a secret key for the payload digest "
            f"(an unkeyed hash of a low-entropy payload can be reversed by trying every "
            f"value): pass payload_key=... or set {PAYLOAD_KEY_ENV}"
        )
    raw = key.encode() if isinstance(key, str) else bytes(key)
    if len(raw) < MIN_PAYLOAD_KEY_BYTES:
        raise InvalidInput(
            f"{what}: the payload digest key is {len(raw)} bytes; use at least "
            f"{MIN_PAYLOAD_KEY_BYTES} random bytes (e.g. secrets.token_hex(32))"
        )
    return raw


def resolve_payload_keys(
    keys: bytes | str | Sequence[bytes | str] | None, *, what: str
) -> tuple[bytes, ...]:
    """The digest keys as bytes, the current one first, then the keys rotated out.

    New records are digested under the first key; the others only recognise the
    records they digested (an operation prepared before a rotation is met again,
    never sent as a new one). Each key is checked as ``resolve_payload_key``
    checks one; repeats are dropped.
    """
    if keys is None or isinstance(keys, bytes | str):
        return (resolve_payload_key(keys, what=what),)
    listed = tuple(dict.fromkeys(resolve_payload_key(key, what=what) for key in keys))
    if not listed:
        return (resolve_payload_key(None, what=what),)  # an empty list: no key at all
    return listed


def payload_digest(
    action: str,
    version: int,
    target: str | None,
    payload: Any,
    *,
    key: bytes | None = None,
    canonical: bytes | None = None,
) -> str:
    """Digest of canonical JSON of the payload plus action, version and target.

    Without ``key``: SHA-256 hex. With ``key``: ``"hmac:"`` + HMAC-SHA256 hex,
    which nobody without the key can compute, so nobody can test guesses of
    the payload against it. Equal for equal JSON values whatever the dict
    order; different when any of the four (or the key) changes.

    ``canonical``: ``canonical_json(payload)``, when the caller already made it
    (the payload is then not serialized again). The digested text is the same
    either way: JCS writes an object's members sorted by name, each value in
    its own canonical form, so the envelope is assembled around that text.
    """
    body = canonical_json(payload) if canonical is None else canonical
    data = b"".join(
        (
            b'{"action":',
            canonical_json(action),
            b',"payload":',
            body,
            b',"target":',
            canonical_json(target),
            b',"version":',
            canonical_json(version),
            b"}",
        )
    )
    if len(data) > MAX_PAYLOAD_BYTES:
        raise InvalidInput(
            f"payload is {len(data)} bytes of canonical JSON; the limit is {MAX_PAYLOAD_BYTES}"
        )
    if key is None:
        return hashlib.sha256(data).hexdigest()
    return KEYED_PREFIX + hmac.new(key, data, hashlib.sha256).hexdigest()
