"""A live RabbitMQ for lesson 07's optional section: a cell starts it, makes a backlog, reads it, stops it.

Where Debian's ``rabbitmq-server`` is installed, :func:`read_backlog` starts a throwaway node with
``scripts/rabbitmq.sh`` (everything on 127.0.0.1), declares a queue with no consumers, publishes a
backlog through the management API's publish endpoint (no AMQP client needed), waits until the
broker's statistics show it, and reads the queue once through the real adapter
(:class:`labkit.rabbitmq.RabbitMQProvider`). Elsewhere, or where the node does not start, it replays
the committed capture of the same situation (``data/captures/rabbitmq-3.10.8/``), which the same adapter read from such a node,
through the same shaping and rules. Either way the same contract judges the answer; the verdict
and the diagnosis are the same, the counts and rates are not, and the lesson compares only the first.

The node lives for one call: stopped when the read is done, and, if the kernel is killed first, by a
watchdog shell holding a pipe from the kernel, which stops the node when that pipe closes.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ..contract import check_evidence
from ..errors import EvidenceRejected, RulesInputMissing
from ..provider import answer, observation_of
from ..rabbitmq import RabbitMQProvider, parse_broker_url
from ..rules import assess

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "rabbitmq.sh"
SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
#: The situation a no-consumer backlog recreates, and its committed capture (sample 3: rates settled).
INCIDENT = "INC-9013"
CAPTURE = REPO / "data" / "captures" / "rabbitmq-3.10.8" / f"{INCIDENT}-no-consumers-backlog.json"
QUEUE = "lesson07.backlog"
BACKLOG = 50
#: Set to 0, the cell replays even where a broker is installed. The test suites set it (the root conftest.py): a
#: node takes about 20 s to boot, and nbval, Run All again and a skipped-cell rerun would each boot one. The live
#: read is checked by make test-broker instead, which runs this lesson's cells on a live node.
LIVE_SWITCH = "LABKIT_LIVE_BROKER"


@dataclass(frozen=True)
class LiveReading:
    """One read of the backlog: where it came from, the adapter's answer, and the snapshot it was made from."""

    source: str
    response: bytes
    snapshot: dict


def broker_installed() -> bool:
    return SERVER.exists() and SCRIPT.exists()


class BrokerDidNotStart(RuntimeError):
    """scripts/rabbitmq.sh could not start a node; the message is its one-line reason."""


def read_backlog(folder: Path, rules_revision: int = 1, *, replay_if_not_started: bool = True) -> LiveReading:
    """A live read where a broker can be started, else the committed capture replayed (see the module).

    A node that is installed but does not start (a machine too busy to boot it within the script's limit, a
    port taken) is replayed too, and ``source`` says why, in one line: the lesson's claim is the verdict,
    which is the same either way. ``replay_if_not_started=False`` raises :class:`BrokerDidNotStart`
    instead (the live test, which must not pass on a replay). With ``LABKIT_LIVE_BROKER=0`` in the environment
    it replays without trying, and says so; strict, it tries anyway.
    """
    if not broker_installed():
        return _replayed(rules_revision, "no rabbitmq-server here")
    if os.environ.get(LIVE_SWITCH) == "0" and replay_if_not_started:
        return _replayed(rules_revision, f"{LIVE_SWITCH}=0")
    try:
        return _read_live(folder, rules_revision)
    except BrokerDidNotStart as reason:
        if not replay_if_not_started:
            raise
        return _replayed(rules_revision, f"the live broker did not start: {reason}")


def _replayed(rules_revision: int, why: str) -> LiveReading:
    raw = CAPTURE.read_bytes()
    return LiveReading(f"replayed {CAPTURE.relative_to(REPO)} ({why})", answer(raw, rules_revision), json.loads(raw))


def _start_failure(stderr: str) -> str:
    """The line of scripts/rabbitmq.sh's stderr that says why the start failed (the last line only says it cleaned up)."""
    said = [line.removeprefix("rabbitmq.sh: ") for line in stderr.splitlines() if line.startswith("rabbitmq.sh: ")]
    reasons = [line.removesuffix("; its log:") for line in said if not line.startswith("stopped the node")]
    return (reasons or said or ["no reason printed"])[-1]


def _read_live(folder: Path, rules_revision: int) -> LiveReading:
    folder.mkdir(parents=True, exist_ok=True)
    state = folder / "rabbitmq.state"
    env = {**os.environ, "LABKIT_RABBITMQ_STATE": str(state)}
    # The watchdog: when the kernel's end of this pipe closes (an exit, or a SIGKILL), it stops the node.
    watchdog = subprocess.Popen(["bash", "-c", 'cat >/dev/null; exec bash "$0" stop', str(SCRIPT)], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO)
    try:
        try:
            # The script waits up to 300 s for another start's lock and boots a node for up to 120 s, three times
            # at most if it ends while booting.
            started = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True, env=env, cwd=REPO,
                                     timeout=900)
        except subprocess.TimeoutExpired:
            raise BrokerDidNotStart("scripts/rabbitmq.sh start ran for 900 s") from None
        if started.returncode != 0:
            raise BrokerDidNotStart(_start_failure(started.stderr))
        url = started.stdout.strip()
        _publish_backlog(url)
        provider = RabbitMQProvider(folder / "live-broker.provider-calls.jsonl", {INCIDENT: ("/", QUEUE)}, url=url,
                                    rules_revision=rules_revision)
        deadline = time.monotonic() + 60
        # The management API shows a change at its next statistics sample (every 5 s): wait for the backlog.
        while not _shows_backlog(provider.snapshot("/", QUEUE)["queue"]):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the broker did not show the {BACKLOG} messages within 60 s")
            time.sleep(0.5)
        reading = provider.read_with_diagnostic(INCIDENT)
        version = json.loads(reading.diagnostic)["broker"].get("version")
        return LiveReading(f"a live RabbitMQ {version} on 127.0.0.1, started for this cell", reading.response,
                           json.loads(reading.diagnostic))
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop"], capture_output=True, env=env, cwd=REPO, timeout=120)
        assert watchdog.stdin is not None
        watchdog.stdin.close()
        watchdog.wait(timeout=120)


def _shows_backlog(queue: dict) -> bool:
    return queue.get("messages") == BACKLOG and "message_stats" in queue


def _publish_backlog(url: str) -> None:
    """A queue with no consumers and a backlog, made through the management API (what an operator's script does)."""
    broker = parse_broker_url(url)
    auth = "Basic " + base64.b64encode(f"{broker.user}:{broker.password}".encode()).decode()

    def call(method: str, path: str, body: dict) -> None:
        request = urllib.request.Request(broker.base + path, data=json.dumps(body).encode(), method=method,
                                         headers={"Authorization": auth, "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            reply.read()

    call("PUT", f"/api/queues/%2F/{QUEUE}", {"durable": True})
    for number in range(BACKLOG):
        call("POST", "/api/exchanges/%2F/amq.default/publish",
             {"properties": {}, "routing_key": QUEUE, "payload": f"order {number}", "payload_encoding": "string"})


def verdict(reading: LiveReading, rules_revision: int) -> dict[str, str]:
    """What the lesson compares: the contract's verdict and the diagnosis (never the rates), with rules revision ``rules_revision``.

    The answer is shaped again from the snapshot the adapter read (:func:`labkit.provider.answer`),
    so one read shows what each rules revision makes of the same broker answer.
    """
    response = answer(json.dumps(reading.snapshot).encode("utf-8"), rules_revision)
    try:
        body = check_evidence(response, INCIDENT)
    except EvidenceRejected as refusal:
        body = json.loads(response)
        contract = f"refused by rule {refusal.rule}: {refusal.field} {refusal.problem}"
    else:
        contract = "accepted"
    diagnosis = body.get("diagnosis")
    if isinstance(diagnosis, dict):
        return {"contract": contract, "diagnosis": diagnosis["kind"]}
    try:  # no diagnosis: the rules could not run; say on which field, as a re-evaluation would
        assess(observation_of(reading.snapshot), rules_revision)
    except RulesInputMissing as missing:
        return {"contract": contract, "diagnosis": f"(none: {missing.field} {missing.problem})"}
    return {"contract": contract, "diagnosis": "(none)"}
