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

The outside world lies: it is slow, wrong, and says things twice. So the client owns its
limits instead of trusting the service's:

- **one deadline per request**: connecting, sending and reading the whole answer end within
  ``timeout`` seconds in total, however the service paces its bytes (a byte every half second
  would reset a per-read timeout for ever);
- **answers of a bounded size and shape**: at most :data:`MAX_ANSWER_BYTES`, strict JSON no
  deeper than :data:`~labkit.jsontext.MAX_DEPTH`, ticket ids as :func:`ticket_id_problem`
  says (no line breaks, terminal escapes, NUL or right-to-left overrides: an id is stored and
  printed);
- **answers about what was asked**: a ticket that names another key or another incident is
  refused, and so is a look-up listing two tickets for one key (``duplicate``); neither may
  settle an effect as done.

Standard library only (``http.client``): each limit above is enforced where the bytes are read.
"""

from __future__ import annotations

import io
import re
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlencode, urlsplit

from .errors import BadTicketServiceUrl, TicketServiceUnanswered
from .jsontext import JsonProblem, canonical_json, strict_loads
from .typed import escaped

if TYPE_CHECKING:
    import http.client

PostOutcome = Literal["created", "replayed", "refused", "failed", "unknown"]
LookupOutcome = Literal["found", "absent", "duplicate", "cannot_query", "refused", "invalid", "unknown"]

#: The largest answer read from the service, in bytes: a ticket answer is about a hundred, a
#: look-up by key lists one. Anything longer is not an answer to this question.
MAX_ANSWER_BYTES = 64 * 1024
#: The largest listing of every ticket (``GET /tickets``, for lessons and invariant 8).
MAX_LISTING_BYTES = 4 * 1024 * 1024
#: A base URL longer than this is not one a person typed.
MAX_URL_LENGTH = 2000
#: A ticket id: what real systems use (``T-0001``, ``OPS-1234``, ``#42``, a UUID), never
#: whitespace or control characters.
#: A host in brackets (an IPv6 literal), then nothing but an optional port.
_BRACKETED_HOST = re.compile(r"\[[0-9A-Fa-f:.]+\](?::[0-9]*)?")
TICKET_ID = re.compile(r"[A-Za-z0-9#][A-Za-z0-9._:#-]{0,63}")


# --------------------------------------------------------------------------- what an answer means


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

    Not knowable: ``unknown``: the request may or may not have been committed. No whole answer
    within the deadline, a connection closed or reset before a whole answer, a 409 (a request
    with this key still in progress), a 5xx without the promise, or a 2xx the client refuses to
    believe: too large, not JSON, a ticket id that is not one, a ticket for another key or
    incident. Only asking the destination (:func:`tickets_for_key`) can settle it; where it
    cannot be asked, a person must.
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
    - ``duplicate``: the service lists two or more tickets under the one key (``tickets``):
      it broke its own promise, and which ticket stands is a person's decision; ``ticket`` is None.
    - ``cannot_query`` (501): the service keeps no keys; nobody but a person can settle it.
    - ``refused`` (another 4xx: a malformed key, 429 rate-limited), ``invalid`` (an answer the client refuses to
      believe: too large, malformed, a ticket for another key or incident) or ``unknown`` (no
      answer, a 5xx): nothing learnt; a GET changes nothing, so it may be asked again.
    """

    outcome: LookupOutcome
    tickets: tuple[dict[str, Any], ...] = ()
    status: int | None = None
    detail: str = ""

    @property
    def ticket(self) -> str | None:
        """The one ticket held under the key; None unless the outcome is ``found``."""
        return self.tickets[0]["ticket"] if self.outcome == "found" else None


# --------------------------------------------------------------------------- rules for what comes in


def ticket_id_problem(value: object) -> str | None:
    """Why ``value`` cannot be a ticket id, or None. Quoted safely: it may be an attack on a terminal."""
    if not isinstance(value, str):
        return f"the ticket id is {type(value).__name__}, not a string"
    if TICKET_ID.fullmatch(value) is None:
        return (f"the ticket id {ascii(value[:40])} is not 1 to 64 letters, digits or . _ : # - "
                "(an id is stored and printed, so nothing else is accepted)")
    return None


def safe_text(text: str, limit: int = 300) -> str:
    """``text`` as one line that cannot steer a terminal: whitespace runs become one space, and
    every other character that is not printable (NUL, ESC, a right-to-left override) is written
    as its escape, ``\\x1b``. For what the service says, before it is stored or printed."""
    text = " ".join(text[: limit * 2].split())
    return escaped(text)[:limit]


def check_url(url: str) -> str:
    """The ``/tickets`` endpoint under the base URL ``url``, or :class:`BadTicketServiceUrl`.

    Refused before anything is read or written (``--tickets`` is checked as an argument):
    not http or https, no host, a query or fragment, a port that is not one, a user name or
    password (sent in clear, then kept in shell histories and printed in errors), spaces or
    control characters, and a URL longer than :data:`MAX_URL_LENGTH`.
    """
    if not isinstance(url, str) or not url:
        raise BadTicketServiceUrl(str(url), "it is empty; expected a base URL like http://127.0.0.1:43117")
    if len(url) > MAX_URL_LENGTH:
        raise BadTicketServiceUrl(url, f"it is {len(url)} characters long; the limit is {MAX_URL_LENGTH}")
    if not all("!" <= char <= "~" for char in url):
        raise BadTicketServiceUrl(url, "it holds spaces, control or non-ASCII characters; a URL is printable ASCII")
    try:
        parts = urlsplit(url)
        _ = parts.hostname  # a bracketed host that is not an IPv6 address raises here (Python 3.11.4+)
    except ValueError as error:  # "Invalid IPv6 URL", "An IPv4 address cannot be in brackets"
        raise BadTicketServiceUrl(url, f"its host is malformed ({error})") from None
    if "@" in parts.netloc:
        # The password must not reach the error line either.
        hidden = f"{parts.scheme}://***@{parts.netloc.rsplit('@', 1)[1]}"
        raise BadTicketServiceUrl(hidden, "it carries a user name or password; the ticket service takes none")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadTicketServiceUrl(url, "expected a base URL like http://127.0.0.1:43117")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise BadTicketServiceUrl(url, "give the base URL only, without a query or fragment")
    if "[" in parts.netloc and not _BRACKETED_HOST.fullmatch(parts.netloc):
        raise BadTicketServiceUrl(url, "its host is malformed (text after the bracketed address)")
    try:
        port = parts.port  # urlsplit checks the port only when asked
    except ValueError:
        port = 0
    if port == 0:  # port 0 cannot be connected to (and "or 80" would quietly make it 80)
        raise BadTicketServiceUrl(url, "its port is not a number from 1 to 65535")
    return url.rstrip("/") + "/tickets"


# --------------------------------------------------------------------------- one exchange, one deadline


@dataclass(frozen=True)
class _Reply:
    """A whole answer, within the deadline and the size limit."""

    status: int
    reason: str
    body: bytes


@dataclass(frozen=True)
class _Failed:
    """No answer to use. ``not_sent``: no byte of the request left (the connection could not be
    made); ``no_answer``: the request may have left, and no whole answer came (the deadline, a
    reset, malformed framing); ``unbelievable``: an answer came and the client refuses it."""

    kind: Literal["not_sent", "no_answer", "unbelievable"]
    detail: str


class _DeadlineReader(io.RawIOBase):
    """A socket's reads, each allowed only what is left of one deadline.

    ``http.client`` reads through this; a socket timeout alone restarts with every byte.
    """

    def __init__(self, sock: socket.socket, deadline: float):
        self._sock, self._deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the deadline passed")
        self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class _DeadlineSocket:
    """What ``http.client`` uses of a socket, every wait cut to what is left of the deadline."""

    def __init__(self, sock: socket.socket, deadline: float):
        self._sock, self._deadline = sock, deadline

    def sendall(self, data: bytes) -> None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the deadline passed")
        self._sock.settimeout(left)  # sendall's timeout is for the whole call (Python 3.5+)
        self._sock.sendall(data)

    def makefile(self, mode: str, *args: Any, **kwargs: Any) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))

    def close(self) -> None:
        # http.client "closes" its socket as soon as it hands the response its reader; the
        # reader still needs it. _exchange closes the real socket once the answer is read.
        pass


@lru_cache(maxsize=1)
def _tls() -> ssl.SSLContext:
    """The system's certificate settings, made once (loading them costs milliseconds a request)."""
    return ssl.create_default_context()


def _exchange(
    url: str, method: str, target: str, *, body: bytes | None = None, headers: Mapping[str, str] | None = None,
    timeout: float, connect_timeout: float | None, limit: int = MAX_ANSWER_BYTES,
) -> _Reply | _Failed:
    """One request to the service under ``url``, finished within ``timeout`` seconds in all."""
    if not timeout > 0 or (connect_timeout is not None and not connect_timeout > 0):
        raise ValueError("timeouts must be positive numbers of seconds")
    # Imported on the first request: a `run` without --tickets (most of the children that lessons
    # and tests start) never sends one, and http.client's import is a tenth of its start-up.
    import http.client

    deadline = time.monotonic() + timeout
    endpoint = urlsplit(check_url(url))
    host = endpoint.hostname or ""
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    connect_within = min(timeout, connect_timeout if connect_timeout is not None else timeout)
    try:
        raw = socket.create_connection((host, port), timeout=connect_within)
    except OSError as error:  # refused, unreachable, timed out, a name that does not resolve
        return _Failed("not_sent", f"could not connect ({type(error).__name__}: {safe_text(str(error), 120)})")
    sock: socket.socket = raw
    if endpoint.scheme == "https":
        try:
            raw.settimeout(max(deadline - time.monotonic(), 0.001))  # one deadline for the whole handshake (CPython's ssl)
            sock = _tls().wrap_socket(raw, server_hostname=host)
        except OSError as error:  # ssl.SSLError is an OSError
            raw.close()
            return _Failed("not_sent", f"could not make a TLS connection ({type(error).__name__}: {safe_text(str(error), 120)})")
    conn = http.client.HTTPConnection(host, port)
    conn.sock = _DeadlineSocket(sock, deadline)  # http.client uses sendall, makefile and close only
    response: http.client.HTTPResponse | None = None
    try:
        conn.request(method, endpoint.path + target, body=body, headers={
            **(headers or {}), "Accept": "application/json", "Connection": "close",
        })
        response = conn.getresponse()
        declared = response.length  # None when chunked or read until the connection closes
        if declared is not None and declared > limit:
            return _Failed("unbelievable", f"the answer is {declared} bytes long; the limit is {limit}")
        data = response.read(limit + 1)
        if len(data) > limit:
            return _Failed("unbelievable", f"the answer is longer than {limit} bytes")
        if response.length:  # the connection ended before the declared length arrived
            return _Failed("no_answer", f"the connection closed {response.length} bytes before the answer's end")
        return _Reply(response.status, safe_text(response.reason or "", 80), data)
    except TimeoutError:
        return _Failed("no_answer", f"no whole answer within {timeout:g} s")
    except (OSError, http.client.HTTPException) as error:
        text = safe_text(str(error), 120) or "no answer"
        return _Failed("no_answer", f"the connection failed before a whole answer ({type(error).__name__}: {text})")
    finally:
        if response is not None:
            response.close()
        conn.close()
        sock.close()


def _json(reply: _Reply) -> tuple[Any, str | None]:
    """The answer's JSON, or why it is refused."""
    try:
        return strict_loads(reply.body), None
    except JsonProblem as problem:
        return None, f"{reply.status} with a body that is not JSON labkit accepts ({problem.reason})"


def _detail(reply: _Reply) -> str:
    """The problem's ``detail`` (RFC 9457), made safe to store and print; else the reason phrase."""
    payload, _ = _json(reply)
    text = payload.get("detail") if isinstance(payload, dict) else None
    return safe_text(text if isinstance(text, str) and text else reply.reason)


def _ticket_problem(item: object, *, key: str | None, incident: str | None, keyless: bool = False) -> str | None:
    """Why ``item`` is not a ticket for this key and incident, as the service described it; None if it is.

    ``keyless``: the answer may carry ``"key": null`` (a service that ignored the key says so).
    """
    if not isinstance(item, dict):
        return "a ticket in the answer is not a JSON object"
    problem = ticket_id_problem(item.get("ticket"))
    if problem is not None:
        return problem
    said_key = item.get("key")
    if key is not None and said_key != key and not (keyless and said_key is None):
        return f"the answer's ticket {item['ticket']} is for key {ascii(str(said_key)[:60])}, not the one sent"
    if incident is not None and item.get("incident") != incident:
        return f"the answer's ticket {item['ticket']} is for incident {ascii(str(item.get('incident'))[:60])}, not {incident!r}"
    return None


def _listing_problem(payload: object, *, key: str | None, incident: str | None) -> str | None:
    """Why a listing is refused (not a list, or a ticket in it that is not one for this key and incident)."""
    if not isinstance(payload, list):
        return "200 with a body that is not a list of tickets"
    return next((problem for item in payload if (problem := _ticket_problem(item, key=key, incident=incident))), None)


# --------------------------------------------------------------------------- the three requests


def post_ticket(
    url: str, key: str | None, body: Mapping[str, object], timeout: float, *, connect_timeout: float | None = None
) -> TicketAnswer:
    """Ask the service at ``url`` to open a ticket for ``body``, under Idempotency-Key ``key``.

    ``timeout`` bounds the whole exchange, connecting included; ``connect_timeout`` (default:
    ``timeout``) bounds making the connection. ``key=None`` sends no key (only a lesson's naive
    client does). Never raises for what the network or the service does; see
    :class:`TicketAnswer` for the outcomes. A malformed URL raises :class:`BadTicketServiceUrl`.
    """
    headers = {"Content-Type": "application/json"}
    if key is not None:
        escaped = key.replace("\\", "\\\\").replace('"', '\\"')
        headers["Idempotency-Key"] = f'"{escaped}"'  # a Structured Fields string, as the draft says
    data = canonical_json(dict(body)).encode("utf-8")
    reply = _exchange(url, "POST", "", body=data, headers=headers, timeout=timeout, connect_timeout=connect_timeout)
    if isinstance(reply, _Failed):
        if reply.kind == "not_sent":
            return TicketAnswer("failed", detail=f"not sent: {reply.detail}")
        return TicketAnswer("unknown", detail=f"sent, then {reply.detail}")
    status = reply.status
    if status in (200, 201):
        payload, problem = _json(reply)
        if problem is None:
            incident = body.get("incident")
            problem = _ticket_problem(payload, key=key, incident=incident if isinstance(incident, str) else None, keyless=True)
        if problem is not None:
            return TicketAnswer("unknown", None, status, f"{status}, refused: {problem}")
        created = status == 201 and payload.get("created") is True
        return TicketAnswer("created" if created else "replayed", payload["ticket"], status, "")
    if status == 409:
        return TicketAnswer("unknown", None, status, f"409: {_detail(reply)} (a request with this key is still in progress)")
    if 400 <= status < 500:
        return TicketAnswer("refused", None, status, _detail(reply))
    if status >= 500:
        payload, _ = _json(reply)
        promise = isinstance(payload, dict) and payload.get("stored") is False
        return TicketAnswer("failed" if promise else "unknown", None, status, _detail(reply))
    return TicketAnswer("unknown", None, status, f"unexpected status {status}")


def tickets_for_key(
    url: str, key: str, timeout: float, *, incident: str | None = None, connect_timeout: float | None = None
) -> KeyLookup:
    """Ask the service which tickets it holds for ``key`` (reconciliation after an unknown outcome).

    Every ticket listed must be under ``key`` and, when ``incident`` is given, for that incident;
    otherwise the answer is ``invalid``. Two or more tickets are ``duplicate``, never ``found``.
    """
    reply = _exchange(url, "GET", "?" + urlencode({"key": key}), timeout=timeout, connect_timeout=connect_timeout)
    if isinstance(reply, _Failed):
        if reply.kind == "unbelievable":
            return KeyLookup("invalid", detail=f"refused the answer: {reply.detail}")
        return KeyLookup("unknown", detail=f"no answer: {reply.detail}")
    status = reply.status
    if status == 200:
        payload, problem = _json(reply)
        problem = problem or _listing_problem(payload, key=key, incident=incident)
        if problem is not None:
            return KeyLookup("invalid", (), status, f"refused the answer: {problem}")
        tickets = tuple(payload)
        if len(tickets) > 1:
            ids = ", ".join(ticket["ticket"] for ticket in tickets[:5])
            return KeyLookup("duplicate", tickets, status, f"{len(tickets)} tickets under one key ({ids})")
        return KeyLookup("found" if tickets else "absent", tickets, status)
    if status == 501:
        return KeyLookup("cannot_query", (), status, _detail(reply))
    if 400 <= status < 500:
        return KeyLookup("refused", (), status, _detail(reply))
    return KeyLookup("unknown", (), status, _detail(reply))


def all_tickets(url: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    """Every ticket the service holds, in creation order (for lessons, and invariant 8's count).

    Raises :class:`~labkit.errors.TicketServiceUnanswered` when the service cannot tell: no
    answer within ``timeout``, a status other than 200, or a listing the client refuses (larger
    than :data:`MAX_LISTING_BYTES`, or an entry whose ticket id is not one).
    """
    reply = _exchange(url, "GET", "", timeout=timeout, connect_timeout=None, limit=MAX_LISTING_BYTES)
    if isinstance(reply, _Failed):
        raise TicketServiceUnanswered(url, reply.detail)
    if reply.status != 200:
        raise TicketServiceUnanswered(url, f"it answered {reply.status}: {_detail(reply)}")
    payload, problem = _json(reply)
    problem = problem or _listing_problem(payload, key=None, incident=None)
    if problem is not None:
        raise TicketServiceUnanswered(url, problem)
    return payload
