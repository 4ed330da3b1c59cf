"""A ticket service that lies, against the real command line: ``python -m labkit run|recover --tickets URL``.

The outside world is slow, wrong, and says things twice. Each test starts a small hostile
HTTP server on 127.0.0.1 in this process (raw sockets, so that it can break HTTP as well as
the contract) and drives the workflow through a real ``python -m labkit`` child. The client
must own its deadline, bound what it reads, and refuse an answer about something else, and
none of these may settle the effect as ``done``: it stays ``uncertain``, listed by
``effects``, and nothing the service said reaches the database or the terminal raw.

Time limits: the client's deadline is ``labkit.effects.TICKET_TIMEOUT`` (1 s) for the whole
request. A dripping answer lasts :data:`DRIP_SECONDS`; ``run`` must end within
:data:`RUN_LIMIT`, which leaves many seconds for an interpreter's start-up on a loaded machine
and is still far below the drip.
"""

from __future__ import annotations

import json
import socketserver
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

import labkit
from labkit.effects import Tickets, operation_key

INC = "INC-1003"
OPERATION = operation_key(INC, labkit.WORKFLOW_VERSION)
DRIP_SECONDS = 60.0
RUN_LIMIT = 20.0
#: What must never reach a file labkit wrote, nor its output: NUL, ESC, the right-to-left override.
STEERING = ("\x00", "\x1b", "\u202e")


# --------------------------------------------------------------------------- the hostile server


class Handler(socketserver.StreamRequestHandler):
    server: Hostile

    def handle(self) -> None:
        line = self.rfile.readline(65537).decode("latin-1")
        if not line:
            return
        method, target, _ = line.split(" ", 2)
        headers = {}
        while (header := self.rfile.readline(65537)) not in (b"\r\n", b"\n", b""):
            name, _, value = header.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        body = self.rfile.read(int(headers.get("content-length", "0")))
        self.server.seen.append((method, target))
        try:
            self.server.behaviour(self, method, target, body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up: what this test wants

    def send(self, status: int, payload: object = None, *, raw: bytes | None = None, headers: str = "") -> None:
        data = raw if raw is not None else json.dumps(payload).encode()
        self.wfile.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                         f"Connection: close\r\n{headers}\r\n".encode() + data)


class Hostile(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, behaviour: Callable[[Handler, str, str, bytes], None]):
        self.behaviour = behaviour
        self.seen: list[tuple[str, str]] = []
        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def hostile() -> Iterator[Callable[..., Hostile]]:
    started: list[Hostile] = []

    def start(behaviour: Callable[[Handler, str, str, bytes], None]) -> Hostile:
        server = Hostile(behaviour)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def ticket(number: str = "T-0001", key: str = OPERATION, incident: str = INC) -> dict:
    return {"ticket": number, "key": key, "incident": incident, "title": "t", "summary": "s", "created_at": "x"}


def created(number: object = "T-0001", key: str = OPERATION, incident: str = INC) -> dict:
    return {"ticket": number, "incident": incident, "key": key, "created": True}


# --------------------------------------------------------------------------- checks


def the_effect(lab) -> dict:
    rows = labkit.status_of(lab.db)["runs"]
    assert [(r["incident"], r["step"], r["receipts"]) for r in rows] == [(INC, "report_completed", 1)]
    return rows[0]["effect"]


def effects_listed(cli, lab) -> list[dict]:
    done = cli("effects", "--db", lab.db, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["effects"]


def written(lab) -> bytes:
    """Every byte labkit wrote beside the database: the file, its log, the provider's call log."""
    return b"".join(path.read_bytes() for path in sorted(Path(lab.db).parent.iterdir()) if path.is_file())


def assert_nothing_raw(lab, *outcomes, raw: str = "") -> None:
    """No terminal-steering character in any output or effect row, and ``raw`` (what the service
    said) in no file labkit wrote. (A database file holds NUL and 0x1b bytes of its own.)"""
    for outcome in outcomes:
        for char in STEERING:
            assert char not in outcome.stdout + outcome.stderr, f"{char!r} was printed raw"
        if raw:
            assert raw not in outcome.stdout + outcome.stderr
    with closing(sqlite3.connect(lab.db)) as conn:
        texts = [value for row in conn.execute("SELECT * FROM effects") for value in row if isinstance(value, str)]
    assert not [text for text in texts if any(char in text for char in STEERING)], texts
    if raw:
        assert raw.encode() not in written(lab)


def assert_left_uncertain(outcome, lab, refused, *words: str) -> dict:
    """``run`` did its local work, then could not believe the service: exit 1, one line, uncertain."""
    assert "report_completed" in outcome.stdout, outcome.stdout
    refused(outcome, "may or may not exist", "recorded as uncertain", *words, code=1)
    effect = the_effect(lab)
    assert (effect["state"], effect["ticket"]) == ("uncertain", None)
    return effect


# --------------------------------------------------------------------------- slow: one deadline per request


def drip(handler: Handler, method: str, target: str, body: bytes) -> None:
    """A whole, valid 201, one byte every half second: each read gets a byte long before a per-read timeout."""
    answer = json.dumps(created()).encode()
    data = b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer)
    pause = DRIP_SECONDS / len(data)
    for byte in data:
        handler.wfile.write(bytes([byte]))
        handler.wfile.flush()
        time.sleep(min(pause, 0.5))


def test_a_service_dripping_one_byte_every_half_second_cannot_hold_run(lab, cli, refused, hostile):
    server = hostile(drip)
    started = time.monotonic()
    outcome = cli("run", "--db", lab.db, "--incident", INC, "--tickets", server.url)
    took = time.monotonic() - started
    assert took < RUN_LIMIT, f"run waited {took:.1f} s for a dripping answer; its deadline is 1 s"
    assert_left_uncertain(outcome, lab, refused)
    [entry] = effects_listed(cli, lab)
    assert "no whole answer within 1 s" in entry["last_outcome"]


# --------------------------------------------------------------------------- large and deep: bounded answers


def declared_huge(handler: Handler, method: str, target: str, body: bytes) -> None:
    handler.wfile.write(b"HTTP/1.1 201 Created\r\nContent-Length: 50000000\r\n\r\n")
    for _ in range(800):  # 50 MB promised, sent until the client hangs up
        handler.wfile.write(b" " * 65536)


def chunked_endless(handler: Handler, method: str, target: str, body: bytes) -> None:
    handler.wfile.write(b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(800):
        handler.wfile.write(b"10000\r\n" + b" " * 65536 + b"\r\n")


def until_close(handler: Handler, method: str, target: str, body: bytes) -> None:
    handler.wfile.write(b"HTTP/1.0 201 Created\r\n\r\n")
    for _ in range(800):
        handler.wfile.write(b" " * 65536)


def megabyte_id(handler: Handler, method: str, target: str, body: bytes) -> None:
    handler.send(201, created("T" * 1_000_000))


def deeply_nested(handler: Handler, method: str, target: str, body: bytes) -> None:
    handler.send(201, raw=b"[" * 5000 + b"]" * 5000)


def many_headers(handler: Handler, method: str, target: str, body: bytes) -> None:
    handler.send(201, created(), headers="".join(f"X-{n}: {n}\r\n" for n in range(1000)))


@pytest.mark.parametrize(
    ("behaviour", "words"),
    [
        (declared_huge, "the limit is 65536"),
        (chunked_endless, "longer than 65536 bytes"),
        (until_close, "longer than 65536 bytes"),
        (megabyte_id, "the limit is 65536"),
        (deeply_nested, "nested deeper than"),
        (many_headers, "more than 100 headers"),
    ],
    ids=["50-MB-declared", "chunked-endless", "read-until-close", "1-MB-ticket-id", "nested-5000-deep", "1000-headers"],
)
def test_an_answer_too_large_or_too_deep_is_refused_and_settles_nothing(behaviour, words, lab, cli, refused, hostile):
    server = hostile(behaviour)
    outcome = cli("run", "--db", lab.db, "--incident", INC, "--tickets", server.url)
    assert_left_uncertain(outcome, lab, refused)
    [entry] = effects_listed(cli, lab)
    assert words in entry["last_outcome"] and len(entry["last_outcome"]) <= 200
    assert b"T" * 1000 not in written(lab)


# --------------------------------------------------------------------------- wrong: ids and answers about something else


@pytest.mark.parametrize(
    "bad_id",
    ["T-1\nT-2", "T-1\x1b[2J\x1b[31mFIXED", "T-1\x00", "T-\u202e1000", "T 1", "T-" + "9" * 1000, "", 42, None],
    ids=["newline", "terminal-escapes", "NUL", "right-to-left-override", "space", "1000-characters", "empty", "a-number", "null"],
)
def test_a_ticket_id_that_is_not_one_is_refused_never_stored_or_printed(bad_id, lab, cli, refused, hostile):
    server = hostile(lambda handler, *_: handler.send(201, created(bad_id)))
    outcome = cli("run", "--db", lab.db, "--incident", INC, "--tickets", server.url)
    assert_left_uncertain(outcome, lab, refused)
    listed = cli("effects", "--db", lab.db)
    assert_nothing_raw(lab, outcome, listed, raw=bad_id if isinstance(bad_id, str) and len(bad_id) > 3 else "")
    [entry] = effects_listed(cli, lab)
    assert "ticket id" in entry["last_outcome"]


@pytest.mark.parametrize(
    "answer", [created(key="op-someone-else"), created(incident="INC-9999")], ids=["another-key", "another-incident"]
)
def test_a_created_answer_for_another_key_or_incident_is_not_done(answer, lab, cli, refused, hostile):
    server = hostile(lambda handler, *_: handler.send(201, answer))
    outcome = cli("run", "--db", lab.db, "--incident", INC, "--tickets", server.url)
    assert_left_uncertain(outcome, lab, refused)
    [entry] = effects_listed(cli, lab)
    assert "not the one sent" in entry["last_outcome"] or "not 'INC-1003'" in entry["last_outcome"]


def lookup_answers(listing: list[dict]) -> Callable[[Handler, str, str, bytes], None]:
    """POST: commit nothing visible and hang up (an unknown outcome); GET: answer ``listing``."""

    def behaviour(handler: Handler, method: str, target: str, body: bytes) -> None:
        if method == "GET":
            handler.send(200, listing)
        # POST: no answer at all: the connection just closes

    return behaviour


@pytest.mark.parametrize(
    "listing",
    [
        [ticket("T-0009", key="op-someone-else", incident="INC-9999")],
        [ticket("T-0009", key="op-someone-else")],
        [ticket("T-0009", incident="INC-9999")],
        [ticket("T-\x1b[2J")],
        {"ticket": "T-0001"},
    ],
    ids=["another-key-and-incident", "another-key", "another-incident", "escape-in-id", "not-a-list"],
)
def test_a_look_up_that_answers_about_something_else_leaves_the_effect_uncertain(listing, lab, cli, refused, hostile):
    server = hostile(lookup_answers(listing))
    assert_left_uncertain(cli("run", "--db", lab.db, "--incident", INC, "--tickets", server.url), lab, refused)
    recovered = cli("recover", "--db", lab.db, "--tickets", server.url)
    refused(recovered, "no answer to believe", code=1)
    assert ("GET", f"/tickets?key={OPERATION}") in server.seen
    assert (the_effect(lab)["state"], the_effect(lab)["ticket"]) == ("uncertain", None)
    [entry] = effects_listed(cli, lab)
    assert entry["last_outcome"].startswith("look-up refused the answer")
    assert_nothing_raw(lab, recovered)


def test_two_tickets_listed_for_one_key_are_flagged_and_left_for_a_person(lab, cli, refused, hostile):
    """The service lists two tickets under the run's key: not ``done`` with the first one.

    Decided: the effect stays uncertain, its last outcome names both tickets, ``effects``
    lists it, invariant 8 names the duplicate, and ``resolve`` records the one a person picks.
    """
    listing = [ticket("T-0001"), ticket("T-0002")]

    def behaviour(handler: Handler, method: str, target: str, body: bytes) -> None:
        if method == "GET":
            handler.send(200, listing)  # by key and in full: the same two

    server = hostile(behaviour)
    assert_left_uncertain(cli("run", "--db", lab.db, "--incident", INC, "--tickets", server.url), lab, refused)
    recovered = cli("recover", "--db", lab.db, "--tickets", server.url)
    assert recovered.returncode == 0, recovered.stderr
    assert "1 effect still uncertain (see: effects)" in recovered.stdout
    assert (the_effect(lab)["state"], the_effect(lab)["ticket"]) == ("uncertain", None)
    [entry] = effects_listed(cli, lab)
    assert "duplicate: 2 tickets under one key (T-0001, T-0002)" in entry["last_outcome"]

    results = {r.number: r for r in labkit.check_invariants(lab.db, lab.call_log, {INC: 1}, lab.provider(), effects=Tickets(server.url))}
    assert not results[8].held and f"key {OPERATION} has 2 tickets (T-0001, T-0002)" in results[8].detail
    assert results[7].held, "recovering again changes nothing"

    resolved = cli("resolve", "--db", lab.db, "--incident", INC, "--ticket", "T-0001", "--reason", "T-0002 closed as a duplicate")
    assert resolved.returncode == 0, resolved.stderr
    assert the_effect(lab) == {"state": "resolved", "operation_key": OPERATION, "ticket": "T-0001"}


# --------------------------------------------------------------------------- what a person types is held to the same rules


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--ticket", "T-1\x1b[2J", "ticket id"),
        ("--ticket", "T-\u202e1", "ticket id"),
        ("--ticket", "T" * 1000, "ticket id"),
        ("--reason", "checked\x1b[2J by hand", "control or formatting"),
        ("--reason", "checked\x00", "control or formatting"),
        ("--reason", "line one\nline two", "control or formatting"),
    ],
    ids=["escape-in-ticket", "rtl-in-ticket", "1000-character-ticket", "escape-in-reason", "NUL-in-reason", "newline-in-reason"],
)
def test_resolve_refuses_a_ticket_or_reason_that_could_steer_a_terminal(option, value, words, lab, cli, cli_main, refused,
                                                                        snapshot, hostile):
    server = hostile(lambda handler, *_: None)  # every POST: no answer
    assert_left_uncertain(cli("run", "--db", lab.db, "--incident", INC, "--tickets", server.url), lab, refused)
    given = {"--ticket": "T-0001", "--reason": "the service lists T-0001", option: value}
    before = snapshot(lab.db)
    line = refused(cli_main("resolve", "--db", lab.db, "--incident", INC, *[w for pair in given.items() for w in pair]), words)
    assert not any(char in line for char in STEERING)
    assert snapshot(lab.db) == before


# --------------------------------------------------------------------------- honest exit codes: a refusal after local work


@pytest.mark.parametrize("status", [404, 408, 422, 429], ids=["404", "408-request-timeout", "422-key-reused", "429-too-many"])
def test_a_4xx_after_the_run_completed_is_a_run_time_failure_not_bad_input(status, lab, cli, refused, hostile):
    """Exit 2 promises bad input and nothing changed; by the time the service refuses, the run is
    completed and its effect recorded as uncertain. So ``run`` and ``recover`` exit 1, one line."""
    server = hostile(lambda handler, *_: handler.send(status, {"detail": "no"}))
    outcome = cli("run", "--db", lab.db, "--incident", INC, "--tickets", server.url)
    assert "report_completed" in outcome.stdout, outcome.stdout
    refused(outcome, "refused the request", "recorded as uncertain", code=1)
    assert the_effect(lab)["state"] == "uncertain"
    ok = hostile(lambda handler, method, *_: handler.send(200, []) if method == "GET" else handler.send(status, {"detail": "no"}))
    recovered = cli("recover", "--db", lab.db, "--tickets", ok.url)
    refused(recovered, "refused the request", code=1)
