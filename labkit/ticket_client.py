"""The client of the ticket service: how labkit's effects reach it over HTTP (09_external_effects).

The service (:mod:`labkit.lab.ticket_service`, "the outside world") follows the IETF
Idempotency-Key draft: ``POST /tickets`` with an ``Idempotency-Key`` answers 201 for a new key,
200 with the ticket already made for a replay, 422 for a key reused with another body, 400 for
a missing or malformed key or body; ``GET /tickets?key=K`` lists the tickets held under a key
(501 where the service keeps no keys). A 5xx that carries ``"stored": false`` promises that
nothing was committed.

:func:`post_ticket` and :func:`tickets_for_key` turn every way a request can end into an
outcome, and say which are knowable (see :class:`TicketAnswer`). This module knows the
contract only, never the server: the workflow would talk to a real ticket system the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from .errors import BadTicketServiceUrl
from .jsontext import canonical_json

if TYPE_CHECKING:  # httpx is imported where a request is made: `run` children that open no ticket never pay for it
    import ssl

    import httpx

PostOutcome = Literal["created", "replayed", "refused", "failed", "unknown"]
LookupOutcome = Literal["found", "absent", "cannot_query", "refused", "unknown"]


@dataclass(frozen=True)
class TicketAnswer:
    """How one ``POST /tickets`` ended, as far as the sender can know.

    Knowable (the destination's state for this key is certain):

    - ``created`` (201) / ``replayed`` (200): the ticket exists; ``ticket`` is its id.
    - ``refused`` (4xx; ``status`` says which): the destination did nothing for this request.
      400 is a programming error (no key, a malformed body); 422 means the key was already used
      with *another* body: the body must be rebuilt exactly as first sent, so record it with
      the intent.
    - ``failed``: nothing was done: the connection could not be made (the request never left),
      or the service answered 5xx with its ``"stored": false`` promise.

    Not knowable: ``unknown``: the request may or may not have been committed. A timeout after
    the connection was made, a connection closed or reset before a whole answer, a 409 (a
    request with this key still in progress), a 5xx without the promise, a 2xx whose body
    cannot be read. Only asking the destination (:func:`tickets_for_key`) can settle it; where
    it cannot be asked, a person must.
    """

    outcome: PostOutcome
    ticket: str | None = None
    status: int | None = None
    detail: str = ""

    @property
    def knowable(self) -> bool:
        return self.outcome != "unknown"

    @property
    def committed(self) -> bool | None:
        """True: a ticket exists for this key; False: this request made nothing; None: cannot know."""
        return {"created": True, "replayed": True, "refused": False, "failed": False}.get(self.outcome)


@dataclass(frozen=True)
class KeyLookup:
    """What ``GET /tickets?key=K`` told.

    - ``found`` (``ticket`` is the id) / ``absent``: knowable as of the read. ``absent`` does not
      stop a request still in flight from committing later; sending again *with the same key*
      is safe all the same, since the service replays it.
    - ``cannot_query`` (501): the service keeps no keys; nobody but a person can settle it.
    - ``refused`` (another 4xx: a malformed key) or ``unknown`` (no answer, a 5xx): nothing learnt;
      a GET changes nothing, so it may be asked again.
    """

    outcome: LookupOutcome
    tickets: tuple[dict[str, Any], ...] = ()
    status: int | None = None
    detail: str = ""

    @property
    def ticket(self) -> str | None:
        return self.tickets[0]["ticket"] if self.tickets else None


def _timeout(timeout: float, connect_timeout: float | None) -> httpx.Timeout:
    import httpx

    if not timeout > 0 or (connect_timeout is not None and not connect_timeout > 0):
        raise ValueError("timeouts must be positive numbers of seconds")
    return httpx.Timeout(timeout, connect=connect_timeout if connect_timeout is not None else timeout)


@lru_cache(maxsize=1)
def _tls() -> ssl.SSLContext:
    """httpx's own certificate settings, made once: each client would otherwise load the CA
    bundle again (about 15 ms), even for the plain-HTTP service on 127.0.0.1."""
    import httpx

    return httpx.create_ssl_context()


def _endpoint(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadTicketServiceUrl(url, "expected a base URL like http://127.0.0.1:43117")
    if parts.query or parts.fragment:
        raise BadTicketServiceUrl(url, "give the base URL only, without a query or fragment")
    try:
        _ = parts.port  # urlsplit checks the port only when asked
    except ValueError:
        raise BadTicketServiceUrl(url, "its port is not a number from 0 to 65535") from None
    return url.rstrip("/") + "/tickets"


def _detail(response: httpx.Response) -> str:
    try:
        payload = response.json()
    except ValueError:
        payload = None
    text = payload.get("detail") if isinstance(payload, dict) else None
    return " ".join(str(text or response.reason_phrase or "").split())[:300]


def post_ticket(
    url: str, key: str | None, body: Mapping[str, object], timeout: float, *, connect_timeout: float | None = None
) -> TicketAnswer:
    """Ask the service at ``url`` to open a ticket for ``body``, under Idempotency-Key ``key``.

    ``timeout`` bounds each of writing the request and waiting for the answer; ``connect_timeout``
    (default: ``timeout``) bounds making the connection. ``key=None`` sends no key (only a
    lesson's naive client does). Never raises for what the network or the service does; see
    :class:`TicketAnswer` for the outcomes. A malformed URL raises :class:`BadTicketServiceUrl`.
    """
    import httpx

    endpoint = _endpoint(url)
    headers = {"Content-Type": "application/json"}
    if key is not None:
        escaped = key.replace("\\", "\\\\").replace('"', '\\"')
        headers["Idempotency-Key"] = f'"{escaped}"'  # a Structured Fields string, as the draft says
    data = canonical_json(dict(body)).encode("utf-8")
    try:
        with httpx.Client(timeout=_timeout(timeout, connect_timeout), trust_env=False, verify=_tls()) as client:
            response = client.post(endpoint, content=data, headers=headers)
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as error:
        return TicketAnswer("failed", detail=f"not sent: could not connect ({type(error).__name__}: {error})")
    except httpx.TimeoutException as error:
        return TicketAnswer("unknown", detail=f"sent, then no answer within {timeout:g} s ({type(error).__name__})")
    except httpx.TransportError as error:
        return TicketAnswer("unknown", detail=f"sent, then the connection failed before an answer ({type(error).__name__}: {error})")
    status = response.status_code
    if status in (200, 201):
        try:
            payload = response.json()
        except ValueError:
            payload = None
        ticket = payload.get("ticket") if isinstance(payload, dict) else None
        if isinstance(ticket, str) and ticket:
            created = status == 201 and payload.get("created") is True
            return TicketAnswer("created" if created else "replayed", ticket, status, "")
        return TicketAnswer("unknown", None, status, f"{status} with a body that names no ticket")
    if status == 409:
        return TicketAnswer("unknown", None, status, f"409: {_detail(response)} (a request with this key is still in progress)")
    if 400 <= status < 500:
        return TicketAnswer("refused", None, status, _detail(response))
    if status >= 500:
        try:
            promise = response.json().get("stored") is False
        except (ValueError, AttributeError):
            promise = False
        return TicketAnswer("failed" if promise else "unknown", None, status, _detail(response))
    return TicketAnswer("unknown", None, status, f"unexpected status {status}")


def tickets_for_key(url: str, key: str, timeout: float, *, connect_timeout: float | None = None) -> KeyLookup:
    """Ask the service which tickets it holds for ``key`` (reconciliation after an unknown outcome)."""
    return _lookup(url, {"key": key}, timeout, connect_timeout)


def all_tickets(url: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    """Every ticket the service holds, in creation order; raises ``httpx.HTTPError`` if it cannot tell."""
    import httpx

    with httpx.Client(timeout=_timeout(timeout, None), trust_env=False, verify=_tls()) as client:
        response = client.get(_endpoint(url))
        response.raise_for_status()
        return response.json()


def _lookup(url: str, params: dict[str, str], timeout: float, connect_timeout: float | None) -> KeyLookup:
    import httpx

    endpoint = _endpoint(url)
    try:
        with httpx.Client(timeout=_timeout(timeout, connect_timeout), trust_env=False, verify=_tls()) as client:
            response = client.get(endpoint, params=params)
    except httpx.HTTPError as error:
        return KeyLookup("unknown", detail=f"no answer ({type(error).__name__}: {error})")
    status = response.status_code
    if status == 200:
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if isinstance(payload, list) and all(isinstance(item, dict) and isinstance(item.get("ticket"), str) for item in payload):
            return KeyLookup("found" if payload else "absent", tuple(payload), status)
        return KeyLookup("unknown", (), status, "200 with a body that is not a list of tickets")
    if status == 501:
        return KeyLookup("cannot_query", (), status, _detail(response))
    if 400 <= status < 500:
        return KeyLookup("refused", (), status, _detail(response))
    return KeyLookup("unknown", (), status, _detail(response))
