"""The remote ticket service of 09_external_effects, always a real HTTP server in a child process.

Its contract follows the IETF Idempotency-Key draft: a replay returns the ticket already
made, the same key with another body is refused with 422, a missing key with 400. Its fault
modes make the one thing a sender cannot know (did my request commit?) happen on demand.

Time limits: ``TIMEOUT`` and every wait for a child to answer or end (30 s and more) only
bound how long a broken service takes to fail; a healthy one answers on this machine in
milliseconds, and they hold with three CPU burners a core beside the suite
(``make test-under-load``). The fault tests' one real race, a client's ``SHORT`` timeout
against the service's ``--fault-delay``, keeps a margin of seconds, not milliseconds.
"""

from __future__ import annotations

import hashlib
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from contextlib import closing
from pathlib import Path

import httpx
import pytest

import labkit
from labkit.jsontext import canonical_json
from labkit.lab import ticket_service
from labkit.lab.processes import child_env
from labkit.lab.ticket_service import HOST, TicketService, TicketServiceFailed
from labkit.ticket_client import post_ticket, tickets_for_key
from labkit.ticket_store import request_digest, store_rows

BODY = {"incident": "INC-1005", "title": "Queue orders.created is backing up", "summary": "consumers stalled"}
OTHER = {**BODY, "summary": "a different summary"}
TIMEOUT = 30.0  # a healthy local service answers in milliseconds: this only catches a hang
SHORT = 0.3  # the client's read timeout in the fault tests, seconds under --fault-delay


@pytest.fixture
def store(tmp_path) -> Path:
    return tmp_path / "tickets.db"


@pytest.fixture
def service(store):
    """A healthy service on a fresh store, stopped (SIGTERM) after the test: exit 0, nothing on stderr."""
    running = TicketService(store).start()
    try:
        yield running
    finally:
        code = running.stop()
    assert (code, running.stderr) == (0, "")


def raw_post(url: str, body: bytes, key: str | None = '"k-raw"', **headers: str) -> httpx.Response:
    if key is not None:
        headers["Idempotency-Key"] = key
    return httpx.post(f"{url}/tickets", content=body, headers=headers, timeout=TIMEOUT, trust_env=False)


def ticket_ids(rows) -> list[str]:
    return [row["ticket_id"] if "ticket_id" in row else row["ticket"] for row in rows]


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for a parent to reap it does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_gone(pid: int, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def run_module(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "labkit", "ticket-service", *args], capture_output=True, text=True, env=child_env(), timeout=timeout
    )


# --------------------------------------------------------------------------- the contract


def test_a_key_makes_one_ticket_and_a_replay_returns_it(service, store):
    first = post_ticket(service.url, "op-1", BODY, TIMEOUT)
    again = post_ticket(service.url, "op-1", BODY, TIMEOUT)
    assert (first.outcome, first.ticket, first.status, first.committed) == ("created", "T-0001", 201, True)
    assert (again.outcome, again.ticket, again.status, again.committed) == ("replayed", "T-0001", 200, True)
    second = post_ticket(service.url, "op-2", OTHER, TIMEOUT)
    assert (second.outcome, second.ticket) == ("created", "T-0002")

    rows = service.store_rows()
    assert [(r["ticket_id"], r["idempotency_key"], r["incident"], r["created_at"]) for r in rows] == [
        ("T-0001", "op-1", "INC-1005", "2026-03-02T09:00:00Z"),  # the child's clock is pinned
        ("T-0002", "op-2", "INC-1005", "2026-03-02T09:00:01Z"),
    ]
    assert rows[0]["request_digest"] == hashlib.sha256(canonical_json(BODY).encode()).hexdigest() == request_digest(BODY)
    assert rows[0]["body"] == canonical_json(BODY)
    assert store_rows(store) == rows


def test_the_answers_are_the_documented_json(service):
    answer = raw_post(service.url, canonical_json(BODY).encode(), key='"op-1"')
    assert answer.status_code == 201 and answer.headers["content-type"] == "application/json"
    assert answer.json() == {"ticket": "T-0001", "incident": "INC-1005", "key": "op-1", "created": True}
    replay = raw_post(service.url, canonical_json(BODY).encode(), key="op-1")  # a bare key is accepted too
    assert replay.status_code == 200 and replay.json() == {"ticket": "T-0001", "incident": "INC-1005", "key": "op-1", "created": False}


def test_the_same_key_with_another_body_is_refused_with_422(service):
    assert post_ticket(service.url, "op-1", BODY, TIMEOUT).outcome == "created"
    refused = post_ticket(service.url, "op-1", OTHER, TIMEOUT)
    assert (refused.outcome, refused.status, refused.ticket, refused.committed) == ("refused", 422, None, False)
    assert "already used for ticket T-0001" in refused.detail
    assert ticket_ids(service.store_rows()) == ["T-0001"]


@pytest.mark.parametrize(
    ("body", "key", "words"),
    [
        (canonical_json(BODY).encode(), None, "Idempotency-Key is missing"),
        (canonical_json(BODY).encode(), '""', "Idempotency-Key is empty"),
        (canonical_json(BODY).encode(), '"unclosed', "no closing quote"),
        (b'{"incident": "INC-1005", "title": ', '"k"', "not JSON"),
        (b'{"incident": NaN}', '"k"', "not JSON"),
        (b"[1, 2]", '"k"', "JSON object"),
        (canonical_json({"incident": "INC-1005", "title": "t"}).encode(), '"k"', "missing summary"),
        (canonical_json({**BODY, "priority": "p1"}).encode(), '"k"', "unknown priority"),
        (canonical_json({**BODY, "title": 7}).encode(), '"k"', "title must be a non-empty string"),
        (canonical_json({**BODY, "title": "  "}).encode(), '"k"', "title must be a non-empty string"),
        (canonical_json({**BODY, "incident": "INC-1005\x00"}).encode(), '"k"', "incident holds control or formatting"),
        (canonical_json({**BODY, "title": "Queue \x1b[2J\x1b[31mFIXED"}).encode(), '"k"', "title holds control or formatting"),
        (canonical_json({**BODY, "title": "Queue \u202edexif"}).encode(), '"k"', "title holds control or formatting"),
        (canonical_json({**BODY, "title": "two\nlines"}).encode(), '"k"', "title holds control or formatting"),
        (canonical_json({**BODY, "summary": "stalled \x1b]8;;http://x\x07"}).encode(), '"k"', "summary holds control or formatting"),
    ],
    ids=["no-key", "empty-key", "bad-key", "truncated", "nan", "not-object", "missing-field", "extra-field", "not-string", "blank",
         "NUL-in-incident", "escape-in-title", "rtl-override-in-title", "newline-in-title", "escape-in-summary"],
)
def test_a_bad_request_is_refused_with_400_and_stores_nothing(service, body, key, words):
    answer = raw_post(service.url, body, key=key)
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert words in answer.json()["detail"]
    assert service.store_rows() == []


def test_a_summary_may_hold_line_breaks_and_tabs(service):
    answer = post_ticket(service.url, "op-1", {**BODY, "summary": "consumers stalled\n\tsince 09:00"}, TIMEOUT)
    assert answer.outcome == "created"
    assert service.tickets()[0]["summary"] == "consumers stalled\n\tsince 09:00"


def test_the_client_maps_a_missing_key_to_refused(service):
    answer = post_ticket(service.url, None, BODY, TIMEOUT)
    assert (answer.outcome, answer.status, answer.knowable) == ("refused", 400, True)


def test_get_by_key_and_get_all(service):
    assert tickets_for_key(service.url, "op-1", TIMEOUT).outcome == "absent"
    for number, key in enumerate(["op-3", "op-1", "op-2"], start=1):
        assert post_ticket(service.url, key, {**BODY, "title": f"ticket {number}"}, TIMEOUT).outcome == "created"
    found = tickets_for_key(service.url, "op-1", TIMEOUT)
    assert (found.outcome, found.ticket, len(found.tickets)) == ("found", "T-0002", 1)
    assert found.tickets[0] == {
        "ticket": "T-0002", "incident": "INC-1005", "title": "ticket 2", "summary": "consumers stalled",
        "key": "op-1", "created_at": "2026-03-02T09:00:01Z",
    }
    everything = service.tickets()
    assert [(t["ticket"], t["key"]) for t in everything] == [("T-0001", "op-3"), ("T-0002", "op-1"), ("T-0003", "op-2")]
    assert tickets_for_key(service.url, 'with "quotes" \\ and spaces', TIMEOUT).outcome == "absent"


def test_any_other_resource_is_404_and_other_methods_405(service):
    client = httpx.Client(timeout=TIMEOUT, trust_env=False)
    with client:
        assert client.get(f"{service.url}/").status_code == 404
        assert client.post(f"{service.url}/tickets/T-0001", content=b"{}").status_code == 404
        assert client.get(f"{service.url}/tickets", params={"incident": "INC-1005"}).status_code == 400
        deleted = client.delete(f"{service.url}/tickets")
        assert deleted.status_code == 405 and deleted.headers["allow"] == "GET, POST"
    assert service.store_rows() == []


def test_a_key_with_quotes_and_backslashes_survives_the_round_trip(service):
    key = 'op "7" \\ retry'
    assert post_ticket(service.url, key, BODY, TIMEOUT).outcome == "created"
    assert post_ticket(service.url, key, BODY, TIMEOUT).outcome == "replayed"
    assert tickets_for_key(service.url, key, TIMEOUT).ticket == "T-0001"
    assert [r["idempotency_key"] for r in service.store_rows()] == [key]


# --------------------------------------------------------------------------- durability


def test_the_store_survives_sigkill_and_a_restart_continues_it(store):
    service = TicketService(store).start()
    try:
        assert post_ticket(service.url, "op-1", BODY, TIMEOUT).ticket == "T-0001"
        port = service.port
        assert service.kill() == -signal.SIGKILL
        assert not service.running
        assert ticket_ids(store_rows(store)) == ["T-0001"], "committed before the kill, so it is in the file"
        service.restart()
        assert service.port == port, "restart() comes back on the same port"
        assert ticket_ids(service.tickets()) == ["T-0001"]
        again = post_ticket(service.url, "op-1", BODY, TIMEOUT)
        assert (again.outcome, again.ticket) == ("replayed", "T-0001"), "the key is remembered across the kill"
        fresh = post_ticket(service.url, "op-2", BODY, TIMEOUT)
        assert fresh.ticket == "T-0002"
        times = [r["created_at"] for r in service.store_rows()]
        assert times == sorted(times) and len(set(times)) == 2, "a restarted clock never goes back"
    finally:
        service.stop()


# --------------------------------------------------------------------------- fault modes


def test_slow_after_commit_times_out_but_the_ticket_exists(store):
    # The answer comes 4 s after the commit; the client gives up at 0.3 s. Ending before
    # 3 s tells the two apart with seconds to spare for a loaded machine's scheduler.
    with TicketService(store, fault="slow-after-commit", fault_delay=4.0, fault_times=1) as service:
        started = time.monotonic()
        answer = post_ticket(service.url, "op-1", BODY, SHORT)
        assert time.monotonic() - started < 3.0, "the client gave up at its own timeout"
        assert (answer.outcome, answer.ticket, answer.status, answer.knowable, answer.committed) == ("unknown", None, None, False, None)
        found = tickets_for_key(service.url, "op-1", TIMEOUT)
        assert (found.outcome, found.ticket) == ("found", "T-0001"), "committed before the slow answer"
        retry = post_ticket(service.url, "op-1", BODY, TIMEOUT)  # the fault applied to the first POST only
        assert (retry.outcome, retry.ticket) == ("replayed", "T-0001")
        assert ticket_ids(service.store_rows()) == ["T-0001"]


def test_slow_after_commit_by_default_slows_every_post(store):
    with TicketService(store, fault="slow-after-commit", fault_delay=3.0) as service:  # 10x SHORT
        assert post_ticket(service.url, "op-1", BODY, SHORT).outcome == "unknown"
        assert post_ticket(service.url, "op-1", BODY, SHORT).outcome == "unknown"
        assert ticket_ids(service.tickets()) == ["T-0001"], "two sends under one key, one ticket"
        assert service.stop() == 0, "SIGTERM does not wait for a slow answer"
        assert service.stderr == "", "a client that gave up is not the service's error"


def test_drop_after_commit_closes_the_connection_but_the_ticket_exists(store):
    with TicketService(store, fault="drop-after-commit", fault_times=1) as service:
        answer = post_ticket(service.url, "op-1", BODY, TIMEOUT)
        assert (answer.outcome, answer.status, answer.knowable) == ("unknown", None, False)
        assert "closed connection without response" in answer.detail
        assert tickets_for_key(service.url, "op-1", TIMEOUT).ticket == "T-0001"
        assert post_ticket(service.url, "op-1", BODY, TIMEOUT).outcome == "replayed"
        assert ticket_ids(service.store_rows()) == ["T-0001"]


def test_fail_before_commit_answers_500_and_stores_nothing(store):
    with TicketService(store, fault="fail-before-commit", fault_times=2) as service:
        for _ in range(2):
            answer = post_ticket(service.url, "op-1", BODY, TIMEOUT)
            assert (answer.outcome, answer.status, answer.knowable, answer.committed) == ("failed", 500, True, False)
        assert service.store_rows() == [] and tickets_for_key(service.url, "op-1", TIMEOUT).outcome == "absent"
        assert post_ticket(service.url, "op-1", BODY, TIMEOUT).ticket == "T-0001", "the third POST is not faulted"


def test_no_idempotency_makes_a_ticket_per_post_and_cannot_be_asked_by_key(store):
    with TicketService(store, fault="no-idempotency") as service:
        first = post_ticket(service.url, "op-1", BODY, TIMEOUT)
        second = post_ticket(service.url, "op-1", BODY, TIMEOUT)
        assert [(a.outcome, a.ticket) for a in (first, second)] == [("created", "T-0001"), ("created", "T-0002")]
        lookup = tickets_for_key(service.url, "op-1", TIMEOUT)
        assert (lookup.outcome, lookup.status, lookup.ticket) == ("cannot_query", 501, None)
        assert "cannot be queried by key" in lookup.detail
        assert [(r["ticket_id"], r["idempotency_key"]) for r in service.store_rows()] == [("T-0001", None), ("T-0002", None)]
        assert post_ticket(service.url, None, BODY, TIMEOUT).outcome == "created", "no key is needed either"


def test_a_service_that_is_not_there_means_nothing_was_sent(store):
    service = TicketService(store).start()
    url = service.url
    service.stop()
    answer = post_ticket(url, "op-1", BODY, TIMEOUT)
    assert (answer.outcome, answer.knowable, answer.committed) == ("failed", True, False)
    assert answer.detail.startswith("not sent")
    assert tickets_for_key(url, "op-1", TIMEOUT).outcome == "unknown"


def test_a_malformed_url_is_bad_input():
    for url in ("127.0.0.1:8000", "ftp://127.0.0.1:8000", "http://127.0.0.1:99999", "http://127.0.0.1:8000?x=1"):
        with pytest.raises(labkit.errors.BadInput):
            post_ticket(url, "op-1", BODY, TIMEOUT)


# --------------------------------------------------------------------------- concurrency


def race(count: int, send) -> list:
    gate = threading.Barrier(count)
    answers: list = [None] * count

    def one(index: int) -> None:
        gate.wait()
        answers[index] = send(index)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return answers


def test_concurrent_posts_with_one_key_make_exactly_one_ticket(service):
    answers = race(12, lambda _: post_ticket(service.url, "op-1", BODY, TIMEOUT))
    assert sorted(a.outcome for a in answers) == ["created"] + ["replayed"] * 11
    assert {a.ticket for a in answers} == {"T-0001"}
    assert ticket_ids(service.store_rows()) == ["T-0001"]


def test_concurrent_posts_with_distinct_keys_get_distinct_ids(service):
    answers = race(8, lambda i: post_ticket(service.url, f"op-{i}", BODY, TIMEOUT))
    assert all(a.outcome == "created" for a in answers)
    assert sorted(a.ticket for a in answers) == [f"T-{n:04d}" for n in range(1, 9)]
    assert sorted(r["idempotency_key"] for r in service.store_rows()) == sorted(f"op-{i}" for i in range(8))


# --------------------------------------------------------------------------- the process


def test_the_first_line_is_the_url_and_sigterm_or_sigint_end_it_with_0(store):
    for signum in (signal.SIGTERM, signal.SIGINT):
        child = subprocess.Popen(
            [sys.executable, "-m", "labkit", "ticket-service", "--store", str(store)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(),
        )
        try:
            assert child.stdout is not None
            url = child.stdout.readline().strip()
            assert url.startswith(f"http://{HOST}:") and int(url.rsplit(":", 1)[1]) > 0
            assert httpx.get(f"{url}/tickets", timeout=TIMEOUT, trust_env=False).json() == []
            child.send_signal(signum)
            stdout, stderr = child.communicate(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
        assert (child.returncode, stdout, stderr) == (0, "", ""), signum


def test_it_refuses_to_listen_anywhere_but_127_0_0_1(tmp_path, store):
    for host in ("0.0.0.0", "::", "localhost", "192.168.1.10"):
        done = run_module("--store", str(store), "--host", host)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.count("\n") == 1 and "listens on 127.0.0.1 only" in done.stderr
    assert list(tmp_path.iterdir()) == [], "refused before the store was touched"
    with pytest.raises(labkit.errors.BadInput, match="127.0.0.1 only"):
        ticket_service.TicketServer(store, host="0.0.0.0")


def other_programs_database(path: Path) -> None:
    with closing(sqlite3.connect(path)) as other:
        other.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
        other.commit()


def labkit_checkpoint_database(path: Path) -> None:
    from labkit.store import connect

    connect(path).close()
    for sidecar in ("-wal", "-shm"):
        Path(f"{path}{sidecar}").unlink(missing_ok=True)


def a_text_file(path: Path) -> None:
    path.write_text("not a database\n")


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (other_programs_database, "not a ticket service store (it holds tables (orders)"),
        (labkit_checkpoint_database, "it is a labkit checkpoint database"),
        (a_text_file, "is not a SQLite database"),
    ],
    ids=["another-program", "labkit-checkpoint", "text"],
)
def test_a_store_that_is_not_its_own_is_refused_and_left_byte_for_byte(tmp_path, make, words):
    target = tmp_path / "elsewhere.db"
    make(target)
    content = target.read_bytes()
    done = run_module("--store", str(target))
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.count("\n") == 1 and words in done.stderr and "refusing to touch it" in done.stderr
    with pytest.raises(TicketServiceFailed, match="refusing to touch it") as caught:
        TicketService(target).start()
    assert caught.value.returncode == 2
    assert target.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.db"], "no -wal or -shm may appear"


def test_a_content_length_in_digits_other_than_ascii_is_a_400_not_a_crash(service):
    """HTTP headers arrive as Latin-1, where the superscript two passes str.isdigit() and fails
    int(): before the fix the request thread raised ValueError and the client got no answer."""
    with socket.create_connection((HOST, service.port), timeout=5) as sock:
        sock.sendall(b"POST /tickets HTTP/1.1\r\nHost: x\r\nIdempotency-Key: \"k\"\r\n"
                     b"Content-Type: application/json\r\nContent-Length: \xb2\r\n\r\n{}")
        # Until the service closes: its status line and its body may come in separate reads.
        answer = b"".join(iter(lambda: sock.recv(4096), b"")).decode("latin-1")
    assert answer.startswith("HTTP/1.1 400"), answer
    assert "Content-Length is not a number" in answer
    assert service.tickets() == []


def test_two_different_content_lengths_are_a_400_not_a_guess(service):
    """Before the fix the first header framed the body; a proxy believing the second would read
    another request out of the same bytes (request smuggling)."""
    with socket.create_connection((HOST, service.port), timeout=5) as sock:
        body = b'{"incident": "INC-1001", "title": "t", "summary": "s"}'
        sock.sendall(b"POST /tickets HTTP/1.1\r\nHost: x\r\nIdempotency-Key: \"k2\"\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nContent-Length: 2\r\n\r\n" % len(body) + body)
        answer = b"".join(iter(lambda: sock.recv(4096), b"")).decode("latin-1")
    assert answer.startswith("HTTP/1.1 400"), answer
    assert "two different Content-Length headers" in answer
    assert service.tickets() == []


def test_bad_options_are_refused_in_one_line(store, service):
    taken = str(service.port)
    cases = [
        (("--store", str(store), "--fault", "no-idempotency", "--fault-times", "2"), 2, "--fault-times 2"),
        (("--store", str(store), "--fault", "explode"), 2, "invalid choice"),
        (("--store", str(store), "--port", "70000"), 2, "not a port"),
        (("--store", str(store), "--port", "８０８０"), 2, "not a port"),  # full-width digits: int() reads them
        (("--store", str(store), "--fault-delay", "1_0"), 2, "not a number of seconds"),  # float() reads it as 10
        (("--store", str(store), "--fault", "no-idempotency", "--fault-times", "١"), 2, "not a whole number"),
        (("--store", str(store), "--fault-delay", "-1"), 2, "not a number of seconds"),
        (("--store", str(store), "--port", taken), 1, "already in use"),
    ]
    for args, code, words in cases:
        done = run_module(*args)
        assert (done.returncode, done.stdout, done.stderr.count("\n")) == (code, "", 1), (args, done.stderr)
        assert words in done.stderr, done.stderr


def test_a_refusal_with_a_line_break_in_its_reason_is_still_one_line(store, monkeypatch, capsys):
    """The ticket service's command prints its errors through labkit.errors.error_line, like every command."""
    from labkit import cli

    def cannot_listen(*args, **kwargs):
        raise labkit.errors.CannotListen(8080, "first line\nsecond line")

    monkeypatch.setattr(ticket_service, "TicketServer", cannot_listen)
    assert cli.main(["ticket-service", "--store", str(store)]) == 1
    assert capsys.readouterr() == ("", f"labkit: failed: the ticket service cannot listen on {HOST}:8080: first line second line\n")
    with pytest.raises(SystemExit) as refused:  # argparse's own message quotes the stray word as typed
        cli.main(["ticket-service", "--store", str(store), "stray\nword"])
    assert refused.value.code == 2
    assert capsys.readouterr().err == "labkit: error: unrecognized arguments: stray word\n"


def test_the_service_logs_an_unexpected_error_in_one_line(capsys):
    try:
        raise ValueError("first line\nsecond line")
    except ValueError:
        ticket_service.TicketServer.handle_error(None, None, None)  # type: ignore[arg-type]
    assert capsys.readouterr().err == "ticket service: ValueError: first line second line\n"


def test_nothing_is_left_running(tmp_path, store):
    """Closing its stdin stops it; so does the atexit hook; so does the parent dying by SIGKILL."""
    service = TicketService(store).start()
    assert service.child is not None and service.child.stdin is not None
    service.child.stdin.close()
    assert service.child.wait(timeout=30) == 0

    script = textwrap.dedent(
        f"""
        import os, signal, sys
        from labkit.lab.ticket_service import TicketService
        service = TicketService({str(store)!r}).start()
        print(service.pid, flush=True)
        if sys.argv[1] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    for how in ("exit", "kill"):
        done = subprocess.run([sys.executable, "-c", script, how], capture_output=True, text=True, env=child_env(), timeout=20)
        assert done.returncode == (0 if how == "exit" else -signal.SIGKILL), done.stderr
        assert wait_gone(int(done.stdout.strip())), f"the service outlived a parent that did {how}"
