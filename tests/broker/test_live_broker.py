"""The real read adapter (labkit/rabbitmq.py) against a live RabbitMQ broker, and against hostile HTTP services.

The live tests need the management API that LABKIT_RABBITMQ_URL names (``make test-broker`` starts a
throwaway 3.10.8 node on 127.0.0.1 with ``scripts/rabbitmq.sh`` and sets it); each makes queues of its own,
named after the test, through the management API, and deletes them afterwards. Without the variable they are
skipped with the reason (``-rs`` prints it); in CI (CI set) a run that names this file and has no broker fails
instead, as the PostgreSQL tests do.

The hostile services need no broker and always run: a tiny ``http.server`` on 127.0.0.1 that answers garbage,
answers slowly, redirects, refuses the password, or answers differently each time, and a port where nothing
listens. Each must give one clear line naming the broker without its password, and still be one logged read.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from labkit.contract import CONTRACT, check_evidence
from labkit.errors import BadSetting, ProviderUnavailable
from labkit.provider import CallLog, answer
from labkit.rabbitmq import URL_ENV, RabbitMQProvider, parse_broker_url

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
NO_BROKER = f"no RabbitMQ broker configured: set {URL_ENV}=http://USER:PASSWORD@HOST:15672 (or run make test-broker)"
SNAPSHOT_KEYS = {"incident", "opened_at", "broker", "node", "nodes", "queue"}
QUEUE_KEYS = {"name", "vhost", "type", "durable", "auto_delete", "node", "state", "idle_since", "arguments", "consumers",
              "consumer_details", "consumer_capacity", "messages", "messages_details", "messages_ready",
              "messages_unacknowledged", "memory", "message_bytes", "message_stats"}
NODE_KEYS = {"name", "running", "mem_used", "mem_limit", "mem_alarm", "disk_free", "disk_free_limit", "disk_free_alarm"}


@pytest.fixture
def broker_url(live_service_url) -> str:
    return live_service_url(URL_ENV, NO_BROKER)


class Management:
    """The test's own hands on the broker: the management API, as an operator would use it."""

    def __init__(self, url: str):
        broker = parse_broker_url(url)
        self.base, self.password = broker.base, broker.password
        self.auth = "Basic " + base64.b64encode(f"{broker.user}:{broker.password}".encode()).decode()

    def call(self, method: str, path: str, body: object = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Authorization": self.auth, "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            text = reply.read()
        return json.loads(text) if text else None

    def queue_path(self, name: str) -> str:
        return f"/api/queues/%2F/{urllib.parse.quote(name, safe='')}"

    def publish(self, queue: str, count: int) -> None:
        for number in range(count):
            routed = self.call("POST", "/api/exchanges/%2F/amq.default/publish",
                               {"properties": {}, "routing_key": queue, "payload": f"message {number}", "payload_encoding": "string"})
            assert routed == {"routed": True}


@pytest.fixture
def management(broker_url: str) -> Management:
    return Management(broker_url)


@pytest.fixture
def queue(management: Management, request: pytest.FixtureRequest) -> Iterator[str]:
    """A durable classic queue in vhost / named after the test, deleted afterwards."""
    name = "labkit-test." + re.sub(r"[^A-Za-z0-9_.-]", "-", request.node.name)
    management.call("PUT", management.queue_path(name), {"durable": True})
    yield name
    management.call("DELETE", management.queue_path(name))


def _provider(tmp_path: Path, url: str, queues: dict[str, tuple[str, str]], timeout: float = 10.0) -> RabbitMQProvider:
    return RabbitMQProvider(tmp_path / "lab.db.provider-calls.jsonl", queues, url=url, timeout=timeout)


def _wait_for(check: Callable[[], bool], what: str, seconds: float = 60) -> None:
    """The management API shows a change after its next statistics sample (every 5 s by default)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"the broker did not show {what} within {seconds} s")
        time.sleep(0.5)


# --------------------------------------------------------------------------- a live broker


def test_the_adapter_reads_a_queue_the_test_made(tmp_path, broker_url, management, queue):
    management.publish(queue, 3)
    provider = _provider(tmp_path, broker_url, {"INC-0001": ("/", queue)})
    _wait_for(lambda: provider.snapshot("/", queue)["queue"].get("messages") == 3, "the 3 published messages")
    reading = provider.read_with_diagnostic("INC-0001")
    snapshot = json.loads(reading.diagnostic)
    assert set(snapshot) == SNAPSHOT_KEYS
    assert snapshot["incident"] == "INC-0001"
    assert snapshot["broker"]["product"] == "RabbitMQ"
    assert snapshot["queue"]["name"] == queue and snapshot["queue"]["vhost"] == "/"
    assert snapshot["queue"]["messages"] == snapshot["queue"]["messages_ready"] == 3
    assert snapshot["queue"]["consumers"] == 0
    assert set(snapshot["queue"]) <= QUEUE_KEYS
    assert snapshot["node"]["name"] == snapshot["queue"]["node"]
    assert set(snapshot["node"]) <= NODE_KEYS and all(set(node) <= NODE_KEYS for node in snapshot["nodes"])
    assert snapshot["node"]["name"] in [node["name"] for node in snapshot["nodes"]]
    # A node's `running` is kept: it is what tells a stopped cluster node from one that lacks its memory fields.
    assert snapshot["node"]["running"] is True and all(node["running"] is True for node in snapshot["nodes"])
    # The response is the reference provider's shaping of this snapshot: same fields, same rules.
    assert reading.response == answer(reading.diagnostic, 1)
    assert json.loads(reading.response)["contract"] == CONTRACT


def test_values_are_kept_as_the_broker_sent_them_and_absent_stays_absent(tmp_path, broker_url, management, queue):
    """A queue nobody published to has no message_stats: the snapshot has none either, not zeros."""
    provider = _provider(tmp_path, broker_url, {"INC-0001": ("/", queue)})
    _wait_for(lambda: "messages" in provider.snapshot("/", queue)["queue"], "the new queue's counts")
    snapshot = provider.snapshot("/", queue)["queue"]
    sent = management.call("GET", management.queue_path(queue))
    assert isinstance(sent, dict)
    assert "message_stats" not in sent and "message_stats" not in snapshot
    for field in set(snapshot) - {"messages_details", "message_stats", "consumer_details"}:
        assert snapshot[field] == sent[field], field
        assert type(snapshot[field]) is type(sent[field]), field  # consumer_capacity 0 stays the integer 0
    assert set(snapshot) == set(sent) & QUEUE_KEYS


def test_the_call_log_counts_one_read_per_read_failed_reads_too(tmp_path, broker_url, queue):
    provider = _provider(tmp_path, broker_url, {"INC-0001": ("/", queue), "INC-0002": ("/", queue + ".gone")})
    provider.read("INC-0001")
    provider.read("INC-0001")
    with pytest.raises(ProviderUnavailable):
        provider.read("INC-0002")
    provider.snapshot("/", queue)  # a look without a read: not a call the coordinator made
    log = CallLog(tmp_path / "lab.db.provider-calls.jsonl")
    assert [(call.incident, call.outcome) for call in log.calls()] == [
        ("INC-0001", "ok"), ("INC-0001", "ok"), ("INC-0002", "unavailable")]
    assert log.reads_of("INC-0001") == 2


def test_a_queue_that_does_not_exist_is_one_clear_line(tmp_path, broker_url):
    provider = _provider(tmp_path, broker_url, {"INC-0001": ("/", "labkit-test.no-such-queue")})
    with pytest.raises(ProviderUnavailable) as caught:
        provider.read("INC-0001")
    message = str(caught.value)
    assert "queue 'labkit-test.no-such-queue' in vhost '/' does not exist" in message and "HTTP 404" in message
    assert "\n" not in message and parse_broker_url(broker_url).password not in message


def test_a_wrong_password_is_one_clear_line_without_the_password(tmp_path, broker_url, queue):
    broker = parse_broker_url(broker_url)
    wrong = broker_url.replace(f":{urllib.parse.quote(broker.password, safe='')}@", ":not-the-password@")
    assert wrong != broker_url
    provider = _provider(tmp_path, wrong, {"INC-0001": ("/", queue)})
    with pytest.raises(ProviderUnavailable) as caught:
        provider.read("INC-0001")
    message = str(caught.value)
    assert "HTTP 401" in message and "wrong user or password" in message and "\n" not in message
    assert "not-the-password" not in message and broker.password not in message


def test_the_broker_listens_on_loopback_only(broker_url):
    """Every socket the node and its epmd listen on, from ``ss -ltnp``: 127.0.0.1 or ::1, nothing else."""
    state = REPO / "build" / "rabbitmq.state"
    if not state.exists():
        pytest.skip("this broker was not started by scripts/rabbitmq.sh (no build/rabbitmq.state): its sockets are its owner's")
    if shutil.which("ss") is None:
        pytest.fail("ss (Debian's iproute2) is needed to list the listening sockets", pytrace=False)
    values = dict(re.findall(r"^(\w+)=(.*)$", state.read_text(), re.M))
    pid = int((Path(values["NODE_DIR"]) / "rabbit.pid").read_text())
    listening = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True, timeout=30).stdout.splitlines()
    ours = [line for line in listening
            if f"pid={pid}," in line or re.search(rf"[:\]]{values['EPMD_PORT']}\s", line)]
    ports = {re.split(r"\s+", line)[3].rpartition(":")[2] for line in ours}
    assert {values["AMQP_PORT"], values["MGMT_PORT"], values["EPMD_PORT"], values["DIST_PORT"]} <= ports, ours
    addresses = {re.split(r"\s+", line)[3].rpartition(":")[0] for line in ours}
    assert addresses <= {"127.0.0.1", "[::1]"}, ours


# --------------------------------------------------------------------------- hostile services (no broker needed)


PASSWORD = "s3cret-Pa55word-xyz"


class Hostile:
    """A tiny HTTP server on 127.0.0.1 whose answers a test writes: ``answers[path]`` is a function of the call number."""

    def __init__(self) -> None:
        self.answers: dict[str, Callable[[int], tuple[int, bytes]]] = {}
        self.calls: list[str] = []
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                hostile.calls.append(self.path)
                reply = hostile.answers.get(self.path)
                status, body = reply(len(hostile.calls)) if reply else (404, b'{"error":"Object Not Found"}')
                self.send_response(status)
                if status in (301, 302):
                    self.send_header("Location", body.decode())
                    body = b""
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the slow test's client gave up: expected
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://labkit:{PASSWORD}@127.0.0.1:{self.server.server_address[1]}"

    def broker(self, messages: Callable[[int], int] = lambda call: 5) -> None:
        """Answer like a one-node broker with queue q (``messages(call)`` of them)."""
        node = {"name": "rabbit@here", "mem_used": 1, "mem_limit": 10, "mem_alarm": False, "disk_free": 10,
                "disk_free_limit": 1, "disk_free_alarm": False, "uptime": 99}
        self.answers["/api/overview"] = lambda call: (200, json.dumps(
            {"product_name": "RabbitMQ", "rabbitmq_version": "3.10.8", "cluster_name": "here", "node": "rabbit@here"}).encode())
        self.answers["/api/nodes"] = lambda call: (200, json.dumps([node]).encode())
        self.answers["/api/nodes/rabbit%40here"] = lambda call: (200, json.dumps(node).encode())
        self.answers["/api/queues/%2F/q"] = lambda call: (200, json.dumps(
            {"name": "q", "vhost": "/", "type": "classic", "node": "rabbit@here", "messages": messages(call),
             "garbage_collection": {"minor_gcs": 1}}).encode())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hostile() -> Iterator[Hostile]:
    service = Hostile()
    yield service
    service.close()


def _refusal(tmp_path: Path, url: str, timeout: float = 10.0) -> str:
    provider = _provider(tmp_path, url, {"INC-0001": ("/", "q")}, timeout=timeout)
    with pytest.raises(ProviderUnavailable) as caught:
        provider.read("INC-0001")
    message = str(caught.value)
    assert "\n" not in message and PASSWORD not in message, message
    assert [(call.incident, call.outcome) for call in provider.log.calls()] == [("INC-0001", "unavailable")]
    return message


def test_a_service_that_answers_like_a_broker_is_read_into_the_snapshot_subset(tmp_path, hostile):
    hostile.broker()
    provider = _provider(tmp_path, hostile.url, {"INC-0001": ("/", "q")})
    snapshot = json.loads(provider.read_with_diagnostic("INC-0001").diagnostic)
    assert snapshot["queue"] == {"name": "q", "vhost": "/", "type": "classic", "node": "rabbit@here", "messages": 5}
    assert snapshot["broker"] == {"product": "RabbitMQ", "version": "3.10.8", "cluster_name": "here"}
    assert "uptime" not in snapshot["node"] and snapshot["nodes"] == [snapshot["node"]]


def _stopped_node_with_queue_q(hostile: Hostile, listed: list[dict]) -> None:
    """What 3.10.8 answered in cluster-node-stopped: the node `running: false`, its queue 404 alone but listed."""
    hostile.broker()
    stopped = {"name": "rabbit@gone", "type": "disc", "running": False, "cluster_links": []}
    running = json.loads(hostile.answers["/api/nodes/rabbit%40here"](0)[1])
    hostile.answers["/api/nodes"] = lambda call: (200, json.dumps([stopped, running]).encode())
    hostile.answers["/api/nodes/rabbit%40gone"] = lambda call: (200, json.dumps(stopped).encode())
    del hostile.answers["/api/queues/%2F/q"]
    page = {"filtered_count": len(listed), "item_count": len(listed), "items": listed, "page": 1, "page_count": 1}
    hostile.answers["/api/queues/%2F?page=1&page_size=500&name=q"] = lambda call: (200, json.dumps(page).encode())


DOWN = {"arguments": {}, "auto_delete": False, "durable": True, "exclusive": False, "name": "q", "node": "rabbit@gone",
        "state": "down", "type": "classic", "vhost": "/"}


def test_a_queue_on_a_stopped_node_is_read_from_the_vhosts_list_and_accepted_as_down(tmp_path, hostile):
    # The name filter matches substrings: only the entry named exactly q is the queue.
    _stopped_node_with_queue_q(hostile, [dict(DOWN, name="q2", node="rabbit@here", state="running"), DOWN])
    reading = _provider(tmp_path, hostile.url, {"INC-0001": ("/", "q")}).read_with_diagnostic("INC-0001")
    snapshot = json.loads(reading.diagnostic)
    assert snapshot["queue"] == {"name": "q", "vhost": "/", "type": "classic", "durable": True, "auto_delete": False,
                                 "node": "rabbit@gone", "state": "down", "arguments": {}}
    assert snapshot["node"] == {"name": "rabbit@gone", "running": False} == snapshot["nodes"][0]
    evidence = check_evidence(answer(reading.diagnostic, 3), "INC-0001")
    assert evidence["queue"]["state"] == "down" and evidence["diagnosis"]["kind"] == "unknown"


def test_a_queue_neither_answered_nor_listed_does_not_exist(tmp_path, hostile):
    _stopped_node_with_queue_q(hostile, [dict(DOWN, name="q2")])
    message = _refusal(tmp_path, hostile.url)
    assert "queue 'q' in vhost '/' does not exist" in message and "HTTP 404 from /api/queues/%2F/q" in message


def test_garbage_instead_of_json_is_one_clear_line(tmp_path, hostile):
    hostile.broker()
    hostile.answers["/api/overview"] = lambda call: (200, b"<html><body>502 Bad Gateway</body></html>")
    message = _refusal(tmp_path, hostile.url)
    assert "answered something that is not JSON" in message and "/api/overview" in message and "502 Bad Gateway" in message


def test_json_of_the_wrong_type_is_one_clear_line(tmp_path, hostile):
    hostile.broker()
    hostile.answers["/api/nodes"] = lambda call: (200, b'{"nodes": "all fine"}')
    assert "/api/nodes answered JSON that is not a list" in _refusal(tmp_path, hostile.url)
    hostile.answers["/api/nodes"] = lambda call: (200, b"[]")
    hostile.answers["/api/queues/%2F/q"] = lambda call: (200, b'"q"')
    (tmp_path / "again").mkdir()
    assert "/api/queues/%2F/q answered JSON that is not an object" in _refusal(tmp_path / "again", hostile.url)


def test_a_refused_password_is_one_clear_line(tmp_path, hostile):
    hostile.answers["/api/overview"] = lambda call: (401, b'{"error":"not_authorised"}')
    message = _refusal(tmp_path, hostile.url)
    assert "refused the user 'labkit' (HTTP 401): wrong user or password" in message
    assert f"http://labkit@127.0.0.1:{hostile.server.server_address[1]}" in message


def test_a_slow_service_is_given_up_on_after_the_timeout(tmp_path, hostile):
    hostile.broker()
    hostile.answers["/api/overview"] = lambda call: (time.sleep(3), (200, b"{}"))[1]
    start = time.monotonic()
    message = _refusal(tmp_path, hostile.url, timeout=0.3)
    assert "sent no answer to GET /api/overview within 0.3 s" in message
    assert time.monotonic() - start < 2.5  # well before the 3 s answer: the timeout, not the service, ended it


def test_a_port_where_nothing_listens_is_one_clear_line(tmp_path):
    with socket.socket() as probe:  # a port the system just handed out, closed again: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    message = _refusal(tmp_path, f"http://labkit:{PASSWORD}@127.0.0.1:{port}")
    assert f"the broker at http://labkit@127.0.0.1:{port} cannot be reached: Connection refused" in message


def test_a_redirect_is_not_followed_with_the_credentials(tmp_path, hostile):
    elsewhere = Hostile()
    try:
        elsewhere.broker()
        hostile.answers["/api/overview"] = lambda call: (302, f"http://127.0.0.1:{elsewhere.server.server_address[1]}/api/overview".encode())
        assert "/api/overview answered HTTP 302" in _refusal(tmp_path, hostile.url)
        assert elsewhere.calls == []
    finally:
        elsewhere.close()


def test_a_service_that_answers_differently_each_time_is_read_again_each_time(tmp_path, hostile):
    """No cache: each read asks again and reports what it was told; a bad second answer fails that read only."""
    hostile.broker(messages=lambda call: call * 100)
    provider = _provider(tmp_path, hostile.url, {"INC-0001": ("/", "q")})
    first = json.loads(provider.read_with_diagnostic("INC-0001").diagnostic)["queue"]["messages"]
    second = json.loads(provider.read_with_diagnostic("INC-0001").diagnostic)["queue"]["messages"]
    assert first != second
    hostile.answers["/api/queues/%2F/q"] = lambda call: (200, b'{"name": "q", "messages": ')
    with pytest.raises(ProviderUnavailable, match="not JSON"):
        provider.read("INC-0001")
    assert [call.outcome for call in provider.log.calls()] == ["ok", "ok", "unavailable"]
    assert len(hostile.calls) == 4 + 4 + 2  # four requests a read, none served from memory; the third stops at the queue


def test_a_bad_url_is_refused_without_its_password(monkeypatch):
    for url in (f"ftp://labkit:{PASSWORD}@127.0.0.1:15672", f"http://labkit:{PASSWORD}@127.0.0.1:15672/api",
                f"http://labkit:{PASSWORD}@127.0.0.1:port"):
        with pytest.raises(BadSetting) as caught:
            parse_broker_url(url)
        assert PASSWORD not in str(caught.value) and URL_ENV in str(caught.value)
    monkeypatch.delenv(URL_ENV, raising=False)
    with pytest.raises(BadSetting, match=URL_ENV):
        RabbitMQProvider("calls.jsonl", {"INC-0001": ("/", "q")})


# --------------------------------------------------------------------------- the committed captures


CAPTURES = sorted((REPO / "data" / "captures").glob("rabbitmq-*/INC-*.json"))
# ground_truth.csv's kinds and disk_alarm; unknown only for a queue that is down (cluster-node-stopped), which no kind names.
KINDS = {"consumer_outage", "consumer_lag", "poison_message", "stuck_consumer", "memory_alarm", "disk_alarm", "false_alarm",
         "unknown"}


def test_the_captures_are_snapshots_with_a_situation_and_an_expected_kind():
    assert len(CAPTURES) >= 40
    situations = set()
    for path in CAPTURES:
        capture = json.loads(path.read_text())
        assert path.name == f"{capture['incident']}-{capture['situation']}.json"
        assert set(capture) == SNAPSHOT_KEYS | {"situation", "expected_kind", "what"}, path.name
        assert capture["expected_kind"] in KINDS, path.name
        assert set(capture["queue"]) <= QUEUE_KEYS and set(capture["node"]) <= NODE_KEYS, path.name
        assert "default_pass" not in path.read_text() and "@127.0.0.1:" not in path.read_text()
        situations.add(capture["situation"])
    assert len(situations) >= 12


# --------------------------------------------------------------------------- lesson 07's live section


def test_lesson_07s_replayed_capture_gets_a_verdict_and_a_diagnosis_answer(monkeypatch, tmp_path):
    """Without rabbitmq-server the lesson's cell replays the committed capture, and says so."""
    from labkit.lab import live_broker

    monkeypatch.setattr(live_broker, "SERVER", tmp_path / "no-rabbitmq-server")
    replayed = live_broker.read_backlog(tmp_path)
    assert replayed.source.startswith("replayed data/captures/rabbitmq-3.10.8/")
    assert replayed.snapshot["situation"] == "no-consumers-backlog"
    # One read, judged with each rules revision: 1 and 2 read a counter a queue never consumed from lacks
    # (so no diagnosis, and the contract refuses the answer); 3 reads it absent as never moved.
    for revision in (1, 2):
        assert live_broker.verdict(replayed, revision) == {
            "contract": "refused by rule schema:required: diagnosis is missing",
            "diagnosis": f"(none: queue.message_stats.deliver_get_details.rate is missing; rules revision {revision} reads it)"}
    assert live_broker.verdict(replayed, 3) == {"contract": "accepted", "diagnosis": "consumer_outage"}


def test_lesson_07s_live_read_gets_the_verdict_its_replay_gets(monkeypatch, tmp_path, broker_url):
    """The compared output of the lesson's cell is the same on a machine with rabbitmq-server and one without."""
    from labkit.lab import live_broker

    if not live_broker.broker_installed():
        pytest.skip("rabbitmq-server is not installed here: the lesson replays its capture (the test above)")
    live = live_broker.read_backlog(tmp_path / "live", replay_if_not_started=False)
    assert live.source.startswith("a live RabbitMQ 3.10.8 on 127.0.0.1")
    assert live.snapshot["queue"]["messages"] == live_broker.BACKLOG
    monkeypatch.setattr(live_broker, "SERVER", tmp_path / "no-rabbitmq-server")
    replayed = live_broker.read_backlog(tmp_path)
    for revision in (1, 2, 3):
        assert live_broker.verdict(live, revision) == live_broker.verdict(replayed, revision)
    assert not (tmp_path / "live" / "rabbitmq.state").exists()  # its node was stopped, its state cleared


def test_the_suites_switch_replays_lesson_07s_read_where_a_broker_is_installed(monkeypatch, tmp_path):
    """LABKIT_LIVE_BROKER=0 (what the root conftest.py sets for the suites' lesson runs) replays, and says why."""
    from labkit.lab import live_broker

    installed = tmp_path / "rabbitmq-server"
    installed.touch()  # as if installed: without the switch the cell would boot a node
    monkeypatch.setattr(live_broker, "SERVER", installed)
    monkeypatch.setenv("LABKIT_LIVE_BROKER", "0")
    replayed = live_broker.read_backlog(tmp_path)
    assert replayed.source == "replayed data/captures/rabbitmq-3.10.8/INC-9013-no-consumers-backlog.json (LABKIT_LIVE_BROKER=0)"
    assert live_broker.verdict(replayed, 3) == {"contract": "accepted", "diagnosis": "consumer_outage"}
    assert list(tmp_path.iterdir()) == [installed]  # no node's folder, no state file


def test_lesson_07_run_with_a_live_broker_shows_the_verdicts_it_stores(monkeypatch, broker_url):
    """The lesson's own cells, in a kernel, on a node its cell boots: the compared verdicts are the committed ones.

    The suites' other runs of lesson 07 replay the capture (LABKIT_LIVE_BROKER=0, the root conftest.py); this is
    the run that reads a live node through the lesson's cell.
    """
    import nbformat
    from kernels import notebook_client

    from labkit.lab import live_broker

    if not live_broker.broker_installed():
        pytest.skip("rabbitmq-server is not installed here: the lesson replays its capture")
    path = Path(__file__).resolve().parents[2] / "notebooks" / "07_evidence_contract.ipynb"
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    reading = next(i for i, cell in enumerate(code) if "live_broker.read_backlog(" in cell.source)
    verdicts = code[reading + 1]
    committed = "".join(o.get("text", "") for o in verdicts.outputs if o.get("output_type") == "stream")
    assert "rules revision 3:" in committed
    monkeypatch.setenv("LABKIT_LIVE_BROKER", "1")  # before the kernel starts: it inherits this environment
    client = notebook_client(notebook, path)
    with client.setup_kernel():
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type == "code" and cell.source.strip():
                cell.outputs = []
                client.execute_cell(cell, index)
            if cell is verdicts:
                break
    printed = "".join(o.get("text", "") for o in code[reading].outputs if o.get("output_type") == "stream")
    assert printed.startswith("read from: a live RabbitMQ 3.10.8 on 127.0.0.1, started for this cell"), printed
    shown = "".join(o.get("text", "") for o in verdicts.outputs if o.get("output_type") == "stream")
    assert shown == committed


def test_lesson_07s_node_that_does_not_start_is_replayed_with_the_reason(monkeypatch, tmp_path, broker_url):
    """A real start that fails (no time allowed to boot): the cell replays and names why; strict, it raises that line."""
    from labkit.lab import live_broker

    if not live_broker.broker_installed():
        pytest.skip("rabbitmq-server is not installed here")
    monkeypatch.setenv("LABKIT_RABBITMQ_BOOT_SECONDS", "0")
    monkeypatch.setenv("LABKIT_LIVE_BROKER", "1")  # the lenient read below tries a node, as a learner's does
    why = "the node did not answer on its management port within 0 s (attempt 1)"
    with pytest.raises(live_broker.BrokerDidNotStart) as refused:
        live_broker.read_backlog(tmp_path / "strict", replay_if_not_started=False)
    assert str(refused.value) == why
    replayed = live_broker.read_backlog(tmp_path / "lenient")
    capture = "data/captures/rabbitmq-3.10.8/INC-9013-no-consumers-backlog.json"
    assert replayed.source == f"replayed {capture} (the live broker did not start: {why})"
    assert live_broker.verdict(replayed, 3) == {"contract": "accepted", "diagnosis": "consumer_outage"}
    for folder in ("strict", "lenient"):  # each failed start stopped its node and cleared its state
        assert not (tmp_path / folder / "rabbitmq.state").exists()


# --------------------------------------------------------------------------- judging a folder of captures


def _judge(folder) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "judge_captures.py"), str(folder)],
                          capture_output=True, text=True, timeout=120)


def test_every_committed_capture_is_accepted_and_the_rules_are_scored_on_them():
    judged = _judge(REPO / "data" / "captures" / "rabbitmq-3.10.8")
    assert judged.returncode == 0, judged.stdout + judged.stderr
    count = len(list((REPO / "data" / "captures" / "rabbitmq-3.10.8").glob("*.json")))
    assert judged.stdout.splitlines()[0] == (f"contract queue-evidence/3 (rules revision 3 writing the diagnosis): "
                                             f"{count} of {count} captures in rabbitmq-3.10.8 accepted")
    assert "rules revision 3 on" in judged.stdout and "confusion" in judged.stdout


def test_a_capture_the_contract_does_not_model_fails_the_judging_naming_its_rule(tmp_path):
    source = REPO / "data" / "captures" / "rabbitmq-3.10.8"
    for path in sorted(source.glob("*.json"))[:3]:
        shutil.copy(path, tmp_path / path.name)
    broken = sorted(tmp_path.glob("*.json"))[0]
    capture = json.loads(broken.read_text())
    capture["queue"]["messages"] = "many"  # no broker sends a count as text
    broken.write_text(json.dumps(capture))
    judged = _judge(tmp_path)
    assert judged.returncode == 1
    assert "2 of 3 captures" in judged.stdout
    assert "refused by rule schema:type: queue.messages" in judged.stdout
    assert _judge(tmp_path / "empty").returncode == 2
