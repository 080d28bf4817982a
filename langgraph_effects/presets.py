"""Provider presets: what each API promises about a resend, and how to ask it what it did.

Each ``Preset`` is a ``ProviderContract`` (may an unclear outcome be resent, and for how
long) plus a reconciler skeleton over the user's own client, documented with its source
and its limits. Three families, one mechanism:

* keyed APIs (Stripe, PayPal, Adyen, Square, Zendesk): the effect sends
  ``ctx.idempotency_key`` where the API takes it (``Preset.key``); an unclear outcome is
  resent under the same key while the documented window (minus a margin) is open;
* natural-key upserts (Salesforce by external id, HubSpot batch upsert by a unique
  property): the same payload again changes nothing, so a resend is always safe
  (``ProviderContract.convergent()``);
* no key at all (SendGrid, Postmark, Mailgun, SES, GitHub, Slack): never an automatic
  resend.

Every preset reconciles the same way: the effect puts ``preset.marker(ctx)`` into the
object it creates (metadata, a custom argument, a hidden comment), and
``preset.reconciler(search)`` asks the user's client for the objects carrying it. An
object carrying this operation's marker confirms it; none yet is inconclusive (searches
lag), which sends the operation to a person (``interrupt()``), never to a blind resend.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from langgraph_effects.core.model import Evidence, Operation, ProviderContract
from langgraph_effects.effects import EffectContext, Reconciler
from langgraph_effects.errors import InvalidInput

__all__ = [
    "ADYEN",
    "GITHUB",
    "HUBSPOT",
    "MAILGUN",
    "PAYPAL",
    "POSTMARK",
    "PRESETS",
    "SALESFORCE",
    "SENDGRID",
    "SES",
    "SLACK",
    "SQUARE",
    "STRIPE",
    "ZENDESK",
    "Preset",
    "Search",
]

MARKER_PREFIX = "lge-op:"
"""What ``Preset.marker`` puts before the operation's idempotency key."""

Search = Callable[[str], "Iterable[Mapping[str, Any]] | Awaitable[Iterable[Mapping[str, Any]]]"]
"""The user's client asked for the objects carrying a marker (sync or async)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Preset:
    """One API's resend promise and reconciliation, with where they come from.

    Attributes:
        name: the provider (``"stripe"``).
        contract: the ``ProviderContract`` for ``effect(contract=...)``; None: the API
            honours no key and an unclear outcome is never resent automatically.
        key: where the effect sends ``ctx.idempotency_key`` (a header, a body field);
            None: the API takes none.
        marker_at: where the effect puts ``marker(ctx)`` so a search finds it.
        search_hint: which call of the user's client finds objects by that marker.
        source: the provider's documentation this preset follows.
        limits: what the preset cannot promise.
    """

    name: str
    contract: ProviderContract | None
    key: str | None
    marker_at: str
    search_hint: str
    source: str
    limits: str

    @property
    def resend(self) -> str:
        """``"under key"``, ``"convergent"`` or ``"never"``: what an unclear outcome may do."""
        if self.contract is None:
            return "never"
        if self.contract == ProviderContract.convergent():
            return "convergent"
        return "under key"

    def with_window(self, window: timedelta, *, safety_margin: timedelta | None = None) -> Preset:
        """This preset with the key window your API documents (PayPal: one per API)."""
        if self.key is None:
            raise InvalidInput(f"preset {self.name!r}: the API takes no idempotency key")
        margin = safety_margin if safety_margin is not None else min(window / 4, timedelta(hours=1))
        if window <= margin:
            raise InvalidInput(
                f"preset {self.name!r}: a window of {window} leaves no time to resend "
                f"after a safety margin of {margin}"
            )
        return replace(
            self, contract=ProviderContract(idempotency_window=window, safety_margin=margin)
        )

    @staticmethod
    def marker(ctx: EffectContext | Operation) -> str:
        """The text the effect adds to what it creates, naming this operation for a search."""
        key = ctx.idempotency_key
        if not key:
            raise InvalidInput("a marker needs the operation's idempotency key")
        return f"{MARKER_PREFIX}{key}"

    def reconciler(self, search: Search) -> Reconciler:
        """A reconciler asking ``search(marker)`` for the objects carrying this operation's marker.

        Found: ``confirmed`` (the object's ``id`` as the provider's result id). Nothing yet:
        ``inconclusive``, never ``rejected``: searches lag, so absence proves nothing, and
        the operation goes to review rather than to a resend the API would not deduplicate.
        """

        def judge(op: Operation, found: Iterable[Mapping[str, Any]]) -> Evidence:
            marker = self.marker(op)
            carrying = [dict(o) for o in found if marker in json.dumps(o, default=str)]
            if not carrying:
                return Evidence.inconclusive(
                    f"{self.name}: no object carries {marker} yet ({self.search_hint}); "
                    "a search may lag, so this proves nothing",
                    source=f"preset:{self.name}",
                )
            first = carrying[0]
            also = f" ({len(carrying)} objects carry it)" if len(carrying) > 1 else ""
            return Evidence.confirmed(
                f"{self.name}: object {first.get('id')} carries {marker}{also}",
                provider_result_id=None if first.get("id") is None else str(first["id"]),
                result=first,
                source=f"preset:{self.name}",
            )

        def reconcile(op: Operation) -> Evidence | Awaitable[Evidence]:
            found = search(self.marker(op))
            if inspect.isawaitable(found):
                return _judged(op, found, judge)
            return judge(op, found)

        return reconcile


async def _judged(
    op: Operation,
    found: Awaitable[Iterable[Mapping[str, Any]]],
    judge: Callable[[Operation, Iterable[Mapping[str, Any]]], Evidence],
) -> Evidence:
    return judge(op, await found)


def _keyed(window: timedelta, margin: timedelta) -> ProviderContract:
    return ProviderContract(idempotency_window=window, safety_margin=margin)


STRIPE = Preset(
    name="stripe",
    contract=_keyed(timedelta(hours=24), timedelta(hours=1)),
    key="Idempotency-Key header",
    marker_at="metadata (metadata={'lge_op': marker})",
    search_hint="the object's search API: PaymentIntent.search(query=\"metadata['lge_op']:'…'\")",
    source="https://docs.stripe.com/api/idempotent_requests",
    limits=(
        "Keys are kept at least 24 hours; resends stop an hour before. The first response is "
        "replayed, errors included; another payload under the same key is an error; a resend "
        "while the first request is in flight is a 409. Search lags (about a minute)."
    ),
)
PAYPAL = Preset(
    name="paypal",
    contract=None,
    key="PayPal-Request-Id header",
    marker_at="the order's custom_id or invoice_id",
    search_hint="GET the order or look the custom_id up in your records",
    source="https://developer.paypal.com/api/rest/reference/idempotency/",
    limits=(
        "How long a PayPal-Request-Id is kept differs per API and is not one number: state "
        "yours with PAYPAL.with_window(...); until then nothing is resent automatically."
    ),
)
ADYEN = Preset(
    name="adyen",
    contract=_keyed(timedelta(days=31), timedelta(days=1)),
    key="Idempotency-Key header (at most 64 characters)",
    marker_at="the payment's reference or metadata",
    search_hint="your webhook store (AUTHORISATION notifications) by reference",
    source="https://docs.adyen.com/development-resources/api-idempotency",
    limits=(
        "Keys are valid at least 31 days after first submission, per company account and per "
        "region: a resend to another regional endpoint is not deduplicated."
    ),
)
SQUARE = Preset(
    name="square",
    contract=_keyed(timedelta(minutes=15), timedelta(minutes=5)),
    key="idempotency_key body field",
    marker_at="the payment's reference_id or note",
    search_hint="ListPayments / SearchOrders filtered by reference_id",
    source="https://developer.squareup.com/docs/build-basics/common-api-patterns/idempotency",
    limits=(
        "Square publishes no key window, so the preset assumes a short one: resends only "
        "within 10 minutes of the first dispatch; after that, reconciliation or a person."
    ),
)
ZENDESK = Preset(
    name="zendesk",
    contract=_keyed(timedelta(hours=2), timedelta(minutes=15)),
    key="Idempotency-Key header (ticket creation, POST /api/v2/tickets)",
    marker_at="a ticket tag or external_id",
    search_hint="Search API: type:ticket external_id:<marker> (indexed with a delay)",
    source="https://developer.zendesk.com/api-reference/ticketing/introduction/#idempotency",
    limits=(
        "Documented: the same body under the same key creates no second ticket and gets the "
        "cached response; keys expire after two hours, and a duplicate key sent later creates a "
        "new ticket (resends stop 15 minutes before); another body under the key is a 400 "
        "IdempotentRequestError. Unpublished: whether an error response is cached, what a resend "
        "meets while the first request is in flight, the key's scope beyond the account. Only "
        "ticket creation takes a key. The search index lags ticket creation."
    ),
)
SALESFORCE = Preset(
    name="salesforce",
    contract=ProviderContract.convergent(),
    key=None,
    marker_at="a field of the record (the external id is the natural key)",
    search_hint="GET /sobjects/<Object>/<ExternalIdField>/<value>",
    source="https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/dome_upsert.htm",
    limits=(
        "Convergent only when the effect is an upsert by external id with the full payload: "
        "a PATCH of the same fields again changes nothing, so a resend is always safe. Triggers "
        "and flows on the object still run again on each resend."
    ),
)
HUBSPOT = Preset(
    name="hubspot",
    contract=ProviderContract.convergent(),
    key=None,
    marker_at="a property of the record (the unique property is the natural key)",
    search_hint="batch read by idProperty",
    source="https://developers.hubspot.com/docs/api/crm/contacts (batch/upsert)",
    limits=(
        "Convergent only through batch/upsert by a unique property (idProperty) with the full "
        "properties: the same batch again leaves the same records. Workflows may fire again."
    ),
)


def _mail(name: str, marker_at: str, search_hint: str, source: str) -> Preset:
    return Preset(
        name=name,
        contract=None,
        key=None,
        marker_at=marker_at,
        search_hint=search_hint,
        source=source,
        limits=(
            "No idempotency key: an unclear send is never resent automatically. The message id "
            "comes back in the response that may be lost, so reconcile by the marker; the "
            "activity or event search lags, and an empty search goes to a person."
        ),
    )


SENDGRID = _mail(
    "sendgrid",
    "custom_args",
    "Email Activity API: query by unique_args",
    "https://www.twilio.com/docs/sendgrid/api-reference/e-mail-activity",
)
POSTMARK = _mail(
    "postmark",
    "Metadata",
    "Messages API: outbound search by metadata_<field>",
    "https://postmarkapp.com/developer/api/messages-api",
)
MAILGUN = _mail(
    "mailgun",
    "v: custom variables (X-Mailgun-Variables)",
    "Events API filtered by user-variables",
    "https://documentation.mailgun.com/docs/mailgun/user-manual/tracking-messages/",
)
SES = _mail(
    "ses",
    "a message tag or header",
    "your SES event destination (SNS / Firehose) by tag",
    "https://docs.aws.amazon.com/ses/latest/dg/monitor-using-event-publishing.html",
)
GITHUB = Preset(
    name="github",
    contract=None,
    key=None,
    marker_at="a hidden comment in the body (<!-- marker -->)",
    search_hint="Search API: is:issue in:body <marker> (indexed with a delay)",
    source="https://docs.github.com/en/rest/search/search#search-issues-and-pull-requests",
    limits=(
        "No idempotency key: never resent automatically. The search index lags, so an empty "
        "search goes to a person; listing the repository's recent issues is consistent."
    ),
)
SLACK = Preset(
    name="slack",
    contract=None,
    key=None,
    marker_at="message metadata (metadata.event_payload)",
    search_hint="conversations.history with include_all_metadata, or search.messages",
    source="https://api.slack.com/methods/chat.postMessage",
    limits=(
        "No idempotency key: never resent automatically (a resend posts twice). Read the "
        "channel's history for the marker; search.messages lags."
    ),
)

PRESETS: Mapping[str, Preset] = {
    p.name: p
    for p in (
        STRIPE,
        PAYPAL,
        ADYEN,
        SQUARE,
        ZENDESK,
        SALESFORCE,
        HUBSPOT,
        SENDGRID,
        POSTMARK,
        MAILGUN,
        SES,
        GITHUB,
        SLACK,
    )
}
"""Every preset by provider name."""
