"""The remote ticket service of 09_external_effects: its store, its HTTP server, its command line, its launchers.

The service is "the outside world": a real HTTP server in its own process, on 127.0.0.1
only, keeping its own records in its own SQLite file (never labkit's checkpoint database).
Its contract follows the IETF Idempotency-Key draft (draft-ietf-httpapi-idempotency-key-header,
section "Error Scenarios"):

- ``POST /tickets`` with a JSON body ``{"incident", "title", "summary"}`` and an
  ``Idempotency-Key`` header: **201** ``{"ticket", "incident", "key", "created": true}`` for a
  new key; **200** with ``"created": false`` and the ticket already made, for a key already
  used with the same body (a replay: "respond with the result of the previously completed
  operation"); **422** for a key already used with another body (the draft's status for a
  reused key); **400** for a missing key (the draft's status), a malformed key, malformed JSON
  or fields. The body's fingerprint is the sha256 of its canonical JSON.
- ``GET /tickets?key=K``: a JSON list, empty or of one; ``GET /tickets``: every ticket, in
  creation order. Another path: 404; another method on ``/tickets``: 405.
- **409** (the draft's "request still being processed") is never sent: the look-up of the key
  and the insert are one SQLite write transaction, so a concurrent request with the same key
  waits for the lock and then finds the committed ticket (a replay).
- A 5xx from this service always carries ``"stored": false``: it is sent only when nothing was
  committed, and the client counts on that promise, not on the status alone.

Fault modes (``--fault``), for POST /tickets only, optionally for the first N POSTs only
(``--fault-times N``; the count lives in the process and starts again on a restart):
``slow-after-commit`` (commits, then waits ``--fault-delay`` seconds before answering),
``drop-after-commit`` (commits, then closes the connection without a response),
``fail-before-commit`` (500, nothing stored), ``no-idempotency`` (ignores the key: every POST
makes a new ticket, stored with no key; ``GET ?key=`` answers 501, "cannot be queried by key").
``--lookup-fault`` for a look-up by key (``GET ?key=``): ``unanswered`` (answers only after
``--fault-delay`` seconds, when the client has given up: it got no answer) or ``refused``
(429, rate-limited). It comes before ``no-idempotency``'s 501, so the client cannot tell
from it whether this service keeps keys at all (09's Exercise 9.1).

The client the workflow reaches it with is :mod:`labkit.ticket_client` (it never imports this
module). ``python -m labkit ticket-service`` runs :func:`run`; a lesson starts the service as a
child process with :class:`TicketService`, or forked with :func:`ticket_service`.
"""

from __future__ import annotations

import argparse
import atexit
import errno
import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from ..children import collect, fork, pump
from ..clock import Clock, clock_from_env
from ..database import (
    read_transaction,
    transaction,
    typed_path_problem,
)
from ..errors import BadServiceOption, CannotListen, DatabaseUnavailable, LabError, one_line, shown
from ..jsontext import JsonProblem, canonical_json, strict_loads
from ..ticket_client import all_tickets
from ..ticket_store import COLUMNS, open_store, request_digest, store_rows
from ..typed import first_unprintable, parse_decimal, parse_whole
from . import processes

#: The only address the service listens on: it is a lab's stand-in, never a public service.
HOST = "127.0.0.1"

SLOW, DROP, FAIL, NO_IDEMPOTENCY = "slow-after-commit", "drop-after-commit", "fail-before-commit", "no-idempotency"
FAULTS = (SLOW, DROP, FAIL, NO_IDEMPOTENCY)
#: Faults of a look-up by key (``--lookup-fault``): no answer in time, or a refusal (429).
LOOKUP_UNANSWERED, LOOKUP_REFUSED = "unanswered", "refused"
LOOKUP_FAULTS = (LOOKUP_UNANSWERED, LOOKUP_REFUSED)
#: The faults that --fault-times may limit: a service cannot sensibly start keeping keys half way.
COUNTED_FAULTS = (SLOW, DROP, FAIL)
DEFAULT_FAULT_DELAY = 2.0

FIELDS = {"incident": 200, "title": 200, "summary": 10_000}  # the request's fields and their longest length
MAX_BODY_BYTES = 64 * 1024
MAX_KEY_LENGTH = 255


# --------------------------------------------------------------------------- errors


class TicketServiceFailed(LabError):
    """The service's child process ended before it printed its URL; ``message`` is its one line."""

    def __init__(self, returncode: int, message: str):
        self.returncode, self.message = returncode, message
        self.exit_code = returncode if returncode in (1, 2) else 1
        super().__init__(message or f"the ticket service exited with status {returncode} before printing its URL")


# --------------------------------------------------------------------------- the HTTP server


class _Problem(Exception):
    """An HTTP error answer: status, title, detail, and whether nothing was stored."""

    def __init__(self, status: int, title: str, detail: str):
        self.status, self.title, self.detail = status, title, detail
        super().__init__(detail)


@dataclass
class Faults:
    """The fault a POST gets: ``mode`` for the first ``times`` POSTs (None: for all of them)."""

    mode: str | None = None
    times: int | None = None
    delay: float = DEFAULT_FAULT_DELAY
    #: What a look-up by key (GET ?key=) gets: None, ``unanswered`` (the answer comes only
    #: after ``delay`` seconds, past any client's timeout) or ``refused`` (429, try later).
    lookup: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def take(self) -> str | None:
        if self.mode is None:
            return None
        with self._lock:
            if self.times is None:
                return self.mode
            if self.times > 0:
                self.times -= 1
                return self.mode
            return None


_T = TypeVar("_T")


class _StoreKeeper:
    """The service's one connection to its store, opened once and kept while it serves.

    Why one: SQLite's locks are POSIX advisory locks, which belong to the process, and
    closing *any* descriptor of the file drops all of them (sqlite.org/howtocorrupt.html,
    section 2.2). With a connection per request, each opener checked the file's header
    through a descriptor of its own; closed while another request's connection held the
    locks, it released them, a second service on the same store then took itself for the
    last user and deleted the write-ahead log in use, and tickets already answered 201
    vanished, their ids handed to other keys (issue 19, finding 1). Opened once, the file
    is never opened again by this process while it serves.

    Python's sqlite3 ties a connection to the thread that made it, so one thread owns it
    (a one-worker executor) and each request hands it its work; SQLite would serialise the
    writes anyway, and a lab's service reads a few rows.
    """

    def __init__(self, store: Path):
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ticket-store")
        self._closed = False
        try:
            self._conn = self._executor.submit(open_store, store).result()
        except BaseException:
            self._executor.shutdown()
            raise
        self._store = store

    def run(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """``work(conn)`` in the store's thread; its result, or what it raised."""
        try:
            future = self._executor.submit(work, self._conn)
        except RuntimeError:  # shut down: a request that arrived as the service was stopping
            raise DatabaseUnavailable(str(self._store), "the ticket service is stopping") from None
        return future.result()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._executor.submit(self._conn.close).result()
            self._executor.shutdown()


class TicketServer(ThreadingHTTPServer):
    """The HTTP server: a thread per connection, one SQLite connection for them all (:class:`_StoreKeeper`)."""

    daemon_threads = True  # a slow answer still sleeping must not hold up SIGTERM
    keeper: _StoreKeeper

    def __init__(self, store: str | Path, *, port: int = 0, faults: Faults | None = None, host: str = HOST):
        if host != HOST:
            raise BadServiceOption("--host", host, f"the ticket service listens on {HOST} only")
        with closing(open_store(store)) as conn:  # refuse a file that is not its own before binding
            with read_transaction(conn):
                latest = conn.execute("SELECT max(created_at) FROM tickets").fetchone()[0]
        self.store = Path(store)
        self.faults = faults or Faults()
        self.clock: Clock = clock_from_env(latest)
        self.clock_lock = threading.Lock()
        try:
            super().__init__((HOST, port), _Handler)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise CannotListen(port, "the port is already in use", HOST) from None
            raise CannotListen(port, error.strerror or str(error), HOST) from None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_address[1]}"

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        # The store is kept open by the process that serves: ticket_service() forks after
        # __init__, and a connection (or its thread) must not cross a fork.
        self.keeper = _StoreKeeper(self.store)
        try:
            super().serve_forever(poll_interval)
        finally:
            self.keeper.close()

    def handle_error(self, request, client_address) -> None:
        # A client that went away (it timed out on a slow answer) is not the service's error.
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            return
        print(f"ticket service: {type(error).__name__}: {one_line(error)}", file=sys.stderr, flush=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "labkit-tickets/1"
    sys_version = ""
    timeout = 30  # a client that stops sending mid-request does not hold a thread for ever
    server: TicketServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # stdout carries only the URL; requests are not logged

    def version_string(self) -> str:
        return self.server_version

    # ----------------------------------------------------------------- routes

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_PATCH(self) -> None:
        self._route("PATCH")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        try:
            if url.path != "/tickets":
                self.close_connection = True  # any body is left unread
                raise _Problem(404, "Not Found", f"no such resource {url.path[:80]!r}: the service has /tickets only")
            if method == "GET":
                self._send(200, self._list(url.query))
            elif method == "POST":
                self._post(url.query)
            else:
                self.close_connection = True
                raise _Problem(405, "Method Not Allowed", f"{method} /tickets: use GET or POST")
        except _Problem as problem:
            self._send_problem(problem)
        except (sqlite3.Error, LabError) as error:  # a GET that could not read the store
            self._send_problem(_Problem(503, "Service Unavailable", f"cannot read the store: {one_line(error)[:200]}"))

    def _list(self, query: str) -> list[dict[str, Any]]:
        params = parse_qs(query, keep_blank_values=True)
        if set(params) - {"key"}:
            raise _Problem(400, "Bad Request", "GET /tickets takes one query parameter, key")
        args: tuple[str, ...] = ()
        if "key" not in params:
            query = f"SELECT {', '.join(COLUMNS)} FROM tickets ORDER BY rowid"
        else:
            if self.server.faults.lookup == LOOKUP_REFUSED:
                raise _Problem(429, "Too Many Requests", "look-ups by key are rate-limited: try again later")
            if self.server.faults.lookup == LOOKUP_UNANSWERED:
                time.sleep(self.server.faults.delay)  # the client has given up by then: it got no answer
            if self.server.faults.mode == NO_IDEMPOTENCY:
                raise _Problem(501, "Not Implemented", "this service ignores Idempotency-Key, so its tickets cannot be queried by key")
            if len(params["key"]) != 1:
                raise _Problem(400, "Bad Request", "give key once")
            args = (_check_key(params["key"][0]),)
            query = f"SELECT {', '.join(COLUMNS)} FROM tickets WHERE idempotency_key = ?"

        def read(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            with read_transaction(conn):
                return conn.execute(query, args).fetchall()

        return [_shown_ticket(row) for row in self.server.keeper.run(read)]

    def _post(self, query: str) -> None:
        if query:
            self.close_connection = True
            raise _Problem(400, "Bad Request", "POST /tickets takes no query parameters")
        request = _check_request(self._read_body())
        no_idempotency = self.server.faults.mode == NO_IDEMPOTENCY
        key = None if no_idempotency else self._key()
        fault = self.server.faults.take()
        if fault == FAIL:
            raise _Problem(500, "Internal Server Error", "fault fail-before-commit: nothing was stored")
        try:
            ticket, created = self._commit(key, request)
        except _Problem:
            raise
        except (DatabaseUnavailable, sqlite3.OperationalError) as error:  # rolled back: nothing was stored
            raise _Problem(503, "Service Unavailable", f"nothing was stored: {one_line(error)[:200]}") from None
        except Exception as error:  # rolled back by transaction(): nothing was stored
            print(f"ticket service: {type(error).__name__}: {one_line(error)}", file=sys.stderr, flush=True)
            raise _Problem(500, "Internal Server Error", "nothing was stored") from None
        # Committed. From here on the ticket exists, whatever the client hears.
        if fault == SLOW:
            time.sleep(self.server.faults.delay)
        if fault == DROP:
            self.close_connection = True
            return  # no status line, no headers: the connection just closes
        self._send(201 if created else 200, {"ticket": ticket, "incident": request["incident"], "key": key, "created": created})

    def _commit(self, key: str | None, request: dict[str, str]) -> tuple[str, bool]:
        return self.server.keeper.run(lambda conn: self._commit_with(conn, key, request))

    def _commit_with(self, conn: sqlite3.Connection, key: str | None, request: dict[str, str]) -> tuple[str, bool]:
        digest = request_digest(request)
        with transaction(conn):
            if key is not None:
                row = conn.execute("SELECT ticket_id, request_digest FROM tickets WHERE idempotency_key = ?", (key,)).fetchone()
                if row is not None:
                    if row["request_digest"] != digest:
                        raise _Problem(
                            422,
                            "Unprocessable Content",
                            f"Idempotency-Key {key[:60]!r} was already used for ticket {row['ticket_id']} with another body",
                        )
                    return row["ticket_id"], False
            ticket = "T-{:04d}".format(conn.execute("SELECT count(*) FROM tickets").fetchone()[0] + 1)
            with self.server.clock_lock:
                now = self.server.clock.now()
            conn.execute(
                f"INSERT INTO tickets ({', '.join(COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (ticket, key, digest, request["incident"], request["title"], canonical_json(request), now),
            )
        return ticket, True

    # ----------------------------------------------------------------- reading the request

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise _Problem(411, "Length Required", "send the body with a Content-Length, not chunked")
        lengths = self.headers.get_all("Content-Length") or []
        if len(set(lengths)) > 1:  # which one frames the body? RFC 9112 6.3: an error, not a guess
            self.close_connection = True
            raise _Problem(400, "Bad Request", "two different Content-Length headers")
        text = lengths[0] if lengths else None
        if text is None:
            self.close_connection = True
            raise _Problem(411, "Length Required", "POST /tickets needs a Content-Length")
        if not (text.isascii() and text.isdigit()):  # HTTP's 1*DIGIT: str.isdigit() alone takes '١٢'
            self.close_connection = True
            raise _Problem(400, "Bad Request", "Content-Length is not a number")
        length = int(text)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            raise _Problem(413, "Content Too Large", f"the body is {length} bytes; the limit is {MAX_BODY_BYTES}")
        return self.rfile.read(length)

    def _key(self) -> str:
        values = self.headers.get_all("Idempotency-Key") or []
        if not values:
            raise _Problem(400, "Bad Request", "Idempotency-Key is missing: POST /tickets requires one")
        if len(values) > 1:
            raise _Problem(400, "Bad Request", "Idempotency-Key is given more than once")
        return _check_key(_parse_key(values[0].strip()))

    # ----------------------------------------------------------------- answering

    def _send(self, status: int, payload: object, content_type: str = "application/json") -> None:
        data = canonical_json(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if status == 405:
            self.send_header("Allow", "GET, POST")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _send_problem(self, problem: _Problem) -> None:
        payload: dict[str, object] = {"status": problem.status, "title": problem.title, "detail": problem.detail}
        if problem.status >= 500:
            payload["stored"] = False  # the promise the client relies on: a 5xx from here stored nothing
        self._send(problem.status, payload, "application/problem+json")


def _shown_ticket(row: sqlite3.Row) -> dict[str, Any]:
    body = json.loads(row["body"])
    return {
        "ticket": row["ticket_id"],
        "incident": row["incident"],
        "title": row["title"],
        "summary": body.get("summary"),
        "key": row["idempotency_key"],
        "created_at": row["created_at"],
    }


def _parse_key(text: str) -> str:
    """The key from its header: a Structured Fields string (``"abc"``, as the draft says), or, leniently, bare."""
    if not text.startswith('"'):
        return text
    key, index = [], 1
    while index < len(text):
        char = text[index]
        if char == "\\":
            if index + 1 >= len(text) or text[index + 1] not in '"\\':
                raise _Problem(400, "Bad Request", "Idempotency-Key is not a valid string: a backslash may only escape \" or \\")
            key.append(text[index + 1])
            index += 2
        elif char == '"':
            if index != len(text) - 1:
                raise _Problem(400, "Bad Request", "Idempotency-Key has characters after its closing quote")
            return "".join(key)
        else:
            key.append(char)
            index += 1
    raise _Problem(400, "Bad Request", "Idempotency-Key has no closing quote")


def _check_key(key: str) -> str:
    if not key:
        raise _Problem(400, "Bad Request", "Idempotency-Key is empty")
    if len(key) > MAX_KEY_LENGTH:
        raise _Problem(400, "Bad Request", f"Idempotency-Key is longer than {MAX_KEY_LENGTH} characters")
    if not all(" " <= char <= "~" for char in key):
        raise _Problem(400, "Bad Request", "Idempotency-Key must be printable ASCII")
    return key


def _check_request(data: bytes) -> dict[str, str]:
    try:
        request = strict_loads(data)
    except JsonProblem as problem:
        raise _Problem(400, "Bad Request", f"the body is not JSON the service accepts: {problem.reason}") from None
    if not isinstance(request, dict):
        raise _Problem(400, "Bad Request", "the body must be a JSON object with incident, title and summary")
    missing, extra = sorted(set(FIELDS) - set(request)), sorted(set(request) - set(FIELDS))
    if missing or extra:
        parts = [f"missing {', '.join(missing)}"] if missing else []
        parts += [f"unknown {', '.join(name[:40] for name in extra[:3])}"] if extra else []
        raise _Problem(400, "Bad Request", f"the body must have exactly incident, title and summary ({'; '.join(parts)})")
    for name, longest in FIELDS.items():
        value = request[name]
        if not isinstance(value, str) or not value.strip():
            raise _Problem(400, "Bad Request", f"{name} must be a non-empty string")
        if len(value) > longest:
            raise _Problem(400, "Bad Request", f"{name} is longer than {longest} characters")
        # A ticket's fields are stored and shown to people: no NUL, terminal escapes or
        # right-to-left overrides (which make text read other than it is). A summary may
        # run over lines.
        if first_unprintable(value, allow="\n\t" if name == "summary" else "") is not None:
            raise _Problem(400, "Bad Request", f"{name} holds control or formatting characters (NUL, ESC, a direction override, ...)")
    return request


# --------------------------------------------------------------------------- the command line


def _store_path(text: str) -> Path:
    problem = typed_path_problem(text, "store")
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return Path(text)


def _port(text: str) -> int:
    try:
        value = parse_whole(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a port from 0 to 65535")
    return value


def _count(text: str) -> int:
    try:
        value = parse_whole(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a whole number of at least 1")
    return value


def _seconds(text: str) -> float:
    try:
        value = parse_decimal(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 600:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a number of seconds from 0 to 600")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``ticket-service``, for labkit's command line."""
    parser.add_argument("--store", required=True, type=_store_path, help="the service's own SQLite file (created if missing)")
    parser.add_argument("--port", type=_port, default=0, help="TCP port on 127.0.0.1 (default 0: a free one)")
    parser.add_argument("--host", default=HOST, help="must be 127.0.0.1: the service listens nowhere else")
    parser.add_argument("--fault", choices=FAULTS, help="misbehave on POST /tickets, one way")
    parser.add_argument("--lookup-fault", choices=LOOKUP_FAULTS,
                        help="misbehave on a look-up by key (GET /tickets?key=): answer after --fault-delay, or 429")
    parser.add_argument("--fault-times", type=_count, metavar="N", help="apply --fault to the first N POSTs only (default: all)")
    parser.add_argument(
        "--fault-delay", type=_seconds, default=DEFAULT_FAULT_DELAY, metavar="S",
        help=f"how long slow-after-commit waits before answering (default {DEFAULT_FAULT_DELAY:g} s)",
    )
    parser.add_argument("--until-stdin-closes", action="store_true", help=argparse.SUPPRESS)  # TicketService's lifeline


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT (exit 0). The first stdout line is the base URL.

    Options are checked before any file is touched; the store is opened (and refused if it
    is not the service's own) before the port is bound and the URL printed.
    """
    if args.host != HOST:
        raise BadServiceOption("--host", args.host, f"the ticket service listens on {HOST} only")
    if args.fault_times is not None and args.fault not in COUNTED_FAULTS:
        raise BadServiceOption("--fault-times", args.fault_times, f"it limits one of {', '.join(COUNTED_FAULTS)}; give that --fault")
    stopping = threading.Event()
    server: TicketServer | None = None

    def stop(signum, frame) -> None:
        # Ask serve_forever to return, from another thread (shutdown() waits for it to
        # return, so calling it here, in the serving thread, would wait for ever). Nothing is
        # raised into whatever the main thread was doing, so no lock is left half-held.
        if not stopping.is_set():
            stopping.set()
            if server is not None:
                threading.Thread(target=server.shutdown, daemon=True).start()

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        server = TicketServer(args.store, port=args.port, faults=Faults(args.fault, args.fault_times, args.fault_delay, args.lookup_fault))
        if stopping.is_set():  # stopped while the store was being opened
            return 0
        if args.until_stdin_closes:
            threading.Thread(target=_stop_when_stdin_closes, daemon=True).start()
        print(server.url, flush=True)
        server.serve_forever(poll_interval=0.1)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if server is not None:
            server.server_close()
    return 0


def _stop_when_stdin_closes() -> None:
    """The parent holds our stdin: when it goes (even killed by SIGKILL), stop, so nothing is left running."""
    # os.read, not sys.stdin: a daemon thread blocked inside the buffered reader holds its
    # lock, and the interpreter would abort at exit trying to close it.
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)


# --------------------------------------------------------------------------- the lessons' helpers


@contextmanager
def ticket_service(store: Path, faults: Faults | None = None) -> Iterator[str]:
    """The ticket service in a forked process of its own; yields its URL.

    The socket is bound before the fork, so the URL is known at once and no request can
    arrive before the server listens. ``faults`` makes it misbehave as ``ticket-service --fault``
    does (09's exercise check uses it). A fork costs a hundredth of :class:`TicketService`'s
    interpreter start-up: what the crash explorer (12_crash_explorer) starts one per scenario with.
    """
    server = TicketServer(store, faults=faults)
    pid = fork(server.serve_forever)
    server.server_close()  # the parent's copy of the listening socket; the child keeps its own
    try:
        yield server.url
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


#: How a child is started: the command-line contract of ../shared/DESIGN.md.
CHILD_COMMAND: tuple[str, ...] = ("-m", "labkit", "ticket-service")

_RUNNING: set[TicketService] = set()


class TicketService:
    """The ticket service in a child process, for a lesson or a test.

    ``with TicketService(folder / "tickets.db", fault="slow-after-commit") as service:`` starts
    ``python -m labkit ticket-service``, reads its URL (``service.url``) and, on leaving, stops it
    (SIGTERM). ``.kill()`` sends SIGKILL instead; ``.restart()`` starts it again on the same
    store and port. Nothing is left running: leaving the block stops it, an ``atexit`` hook
    stops what is still running at exit, and the child stops by itself when this process's end
    of its stdin closes, which happens even if this process is killed.
    """

    def __init__(
        self,
        store: str | Path,
        *,
        fault: str | None = None,
        fault_times: int | None = None,
        fault_delay: float | None = None,
        lookup_fault: str | None = None,
        port: int = 0,
        env: dict[str, str] | None = None,
        start_timeout: float = 30.0,
    ):
        self.store = Path(store)
        self.fault, self.fault_times, self.fault_delay = fault, fault_times, fault_delay
        self.lookup_fault = lookup_fault
        self.port, self.env, self.start_timeout = port, env, start_timeout
        self.child: subprocess.Popen[str] | None = None
        self._url: str | None = None
        self._stderr: list[str] = []
        self._stderr_reader: threading.Thread | None = None

    # ----------------------------------------------------------------- life

    def args(self) -> list[str]:
        args = ["--store", str(self.store), "--port", str(self.port)]
        if self.fault:
            args += ["--fault", self.fault]
        if self.fault_times is not None:
            args += ["--fault-times", str(self.fault_times)]
        if self.fault_delay is not None:
            args += ["--fault-delay", f"{self.fault_delay:g}"]
        if self.lookup_fault:
            args += ["--lookup-fault", self.lookup_fault]
        return args

    @property
    def command(self) -> str:
        """The command as a lesson shows it: the store by file name only."""
        shown_args = [Path(a).name if os.sep in a else a for a in self.args()]
        return "python -m labkit ticket-service " + " ".join(shown_args)

    def start(self) -> TicketService:
        if self.running:
            raise RuntimeError("this ticket service is already running; stop it first")
        self._stderr = []
        # Started as every labkit child is (processes.start_child: a new interpreter, or in the tests a warm fork).
        self.child = processes.start_child([sys.executable, *CHILD_COMMAND, *self.args(), "--until-stdin-closes"],
                                             processes.child_env(self.env))
        _RUNNING.add(self)
        lines: queue.Queue[tuple[str | None]] = queue.Queue()
        pump(self.child.stdout, lines)  # the URL, then nothing: still read, so that the pipe cannot fill
        self._stderr_reader = collect(self.child.stderr, self._stderr)
        try:
            (first,) = lines.get(timeout=self.start_timeout)
        except queue.Empty:
            first = None
        if first is None or not first.startswith(f"http://{HOST}:"):
            self._end(signal.SIGKILL)
            message = "".join(self._stderr).strip().splitlines()
            raise TicketServiceFailed(self.child.returncode if self.child.returncode is not None else 1, message[0] if message else "")
        self._url = first.strip()
        self.port = int(self._url.rsplit(":", 1)[1])  # so that restart() comes back on the same port
        return self

    def __enter__(self) -> TicketService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait for the exit (SIGKILL if it does not come); the child's exit status."""
        return self._end(signal.SIGTERM, timeout)

    def kill(self) -> int | None:
        """SIGKILL: no code of the service runs; what it committed stays in its store."""
        return self._end(signal.SIGKILL)

    def restart(self, **changes: Any) -> TicketService:
        """Stop (if running) and start again on the same store and port; ``changes`` may set
        ``fault``, ``fault_times``, ``fault_delay`` or ``lookup_fault`` anew."""
        self.stop()
        for name, value in changes.items():
            if name not in ("fault", "fault_times", "fault_delay", "lookup_fault"):
                raise TypeError(f"restart() cannot change {name!r}")
            setattr(self, name, value)
        return self.start()

    def _end(self, signum: signal.Signals, timeout: float = 10.0) -> int | None:
        child = self.child
        _RUNNING.discard(self)
        if child is None:
            return None
        if child.poll() is None:
            child.send_signal(signum)
            try:
                child.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if child.stdin is not None:
            child.stdin.close()
        if self._stderr_reader is not None:
            self._stderr_reader.join(timeout=5)  # so that .stderr holds everything it said
        self._url = None
        return child.returncode

    @property
    def running(self) -> bool:
        return self.child is not None and self.child.poll() is None

    @property
    def pid(self) -> int | None:
        return self.child.pid if self.child is not None else None

    @property
    def url(self) -> str:
        if self._url is None or not self.running:
            raise RuntimeError("the ticket service is not running")
        return self._url

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    # ----------------------------------------------------------------- what it holds

    def tickets(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        """``GET /tickets``: what the service says it holds."""
        return all_tickets(self.url, timeout)

    def store_rows(self) -> list[dict[str, Any]]:
        """The service's own table, read from its file directly (read-only), running or not."""
        return store_rows(self.store)


@atexit.register
def _stop_everything() -> None:
    for service in list(_RUNNING):
        service.stop(timeout=5)
