"""Recreate the incidents' situations on a live RabbitMQ broker, and capture what its management API says.

    LABKIT_RABBITMQ_URL=http://user:pass@127.0.0.1:15672 LABKIT_RABBITMQ_AMQP_PORT=5672 \\
        .venv/bin/python scripts/broker_situations.py [--out data/captures/rabbitmq-3.10.8] [--only NAME ...]

(`make test-broker` starts a throwaway broker with scripts/rabbitmq.sh and runs this against it.)

Each situation is made with real AMQP 0-9-1 clients (pika, requirements-broker.txt): publishers, consumers
that ack, never ack, nack with requeue, or go slow; the alarms are set with rabbitmqctl (through
`scripts/rabbitmq.sh ctl`, so only on the node that script started). Its queue is then read a few times
through the real adapter (labkit.rabbitmq.RabbitMQProvider), and each read's snapshot is written as one small
JSON file: the snapshot (the incident files' shape, trimmed to their fields, values as the broker sent them),
plus `situation` and `expected_kind`, what an on-call engineer would call it in ground_truth.csv's words.
Each file gets an incident id INC-9xxx in a fixed order, so a rerun rewrites the same files.

The clustered situations are played last, together: `scripts/rabbitmq.sh start-second` joins a second node
(labkit2@localhost, on 127.0.0.1 too) to the first, a queue is declared on it, its app is stopped
(`rabbitmqctl stop_app`), and the queues are read from the FIRST node's management API; `stop-second` ends it.

Not recreated: consumers that attach AMQP 1.0 links and never grant credit (INC-1007's zombies; that needs the
AMQP 1.0 plugin and client): the zombie situation here is its AMQP 0-9-1 cousin, consumers that stop acking
after working.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pika  # type: ignore[import-untyped]
from pika.adapters.blocking_connection import BlockingChannel  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from labkit.rabbitmq import RabbitMQProvider, broker_from_environment  # noqa: E402
from labkit.rules import LATEST_RULES_REVISION  # noqa: E402

AMQP_PORT_ENV = "LABKIT_RABBITMQ_AMQP_PORT"
DEFAULT_OUT = ROOT / "data" / "captures" / "rabbitmq-3.10.8"
#: Seconds between two samples of one situation: the management plugin keeps a sample every 5 s (its default
#: retention policy), so reads closer together see the same numbers.
SAMPLE_GAP = 5.0


class Actors:
    """Client threads for one situation, each with its own connection (pika's are not thread-safe)."""

    def __init__(self, params: pika.ConnectionParameters):
        self.params = params
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def connect(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(self.params)

    def run(self, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=self._guard(target), daemon=True)
        thread.start()
        self.threads.append(thread)

    def _guard(self, target: Callable[[], None]) -> Callable[[], None]:
        def guarded() -> None:
            try:
                target()
            except Exception as error:  # a client torn down at the end of a situation: expected
                if not self.stop.is_set():
                    print(f"  client stopped: {type(error).__name__}: {error}", file=sys.stderr)
        return guarded

    def publisher(self, queue: str, per_second: float, body: bytes = b"x" * 200, total: int | None = None,
                  bodies: Callable[[int], bytes] | None = None) -> None:
        """Publish to ``queue`` at about ``per_second`` (all at once when 0), ``total`` messages at most."""
        def work() -> None:
            connection = self.connect()
            channel = connection.channel()
            sent, start = 0, time.monotonic()
            while not self.stop.is_set() and (total is None or sent < total):
                channel.basic_publish("", queue, bodies(sent) if bodies else body)
                sent += 1
                if per_second:
                    ahead = sent / per_second - (time.monotonic() - start)
                    if ahead > 0:
                        connection.sleep(ahead)
                elif sent % 500 == 0:
                    connection.process_data_events(0)
            while not self.stop.is_set():
                connection.sleep(0.2)
            connection.close()
        self.run(work)

    def consumer(self, queue: str, prefetch: int, handle: Callable[[BlockingChannel, object, bytes, int], None],
                 auto_ack: bool = False) -> None:
        """Consume ``queue``; ``handle(channel, method, body, count)`` acks, nacks, sleeps or does nothing."""
        def work() -> None:
            connection = self.connect()
            channel = connection.channel()
            channel.basic_qos(prefetch_count=prefetch)
            count = [0]

            def on_message(ch: BlockingChannel, method: object, _properties: object, body: bytes) -> None:
                count[0] += 1
                handle(ch, method, body, count[0])

            channel.basic_consume(queue, on_message, auto_ack=auto_ack)
            while not self.stop.is_set():
                connection.process_data_events(0.1)
            connection.close()
        self.run(work)

    def close(self) -> None:
        """Each client closes its own connection when told to stop (a connection is one thread's)."""
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=5)


def ack(channel: BlockingChannel, method, _body: bytes, _count: int) -> None:  # type: ignore[no-untyped-def]
    channel.basic_ack(method.delivery_tag)


def never_ack(_channel: BlockingChannel, _method, _body: bytes, _count: int) -> None:  # type: ignore[no-untyped-def]
    """Take the delivery and hold it: the prefetch fills, and nothing more is delivered."""


def slow_ack(seconds: float) -> Callable:
    def handle(channel: BlockingChannel, method, _body: bytes, _count: int) -> None:  # type: ignore[no-untyped-def]
        channel.connection.sleep(seconds)
        channel.basic_ack(method.delivery_tag)
    return handle


def nack_poison(channel: BlockingChannel, method, body: bytes, _count: int) -> None:  # type: ignore[no-untyped-def]
    """A message that fails every time goes back to the queue (requeue); the others are acked."""
    if body.startswith(b"poison"):
        channel.basic_nack(method.delivery_tag, requeue=True)
    else:
        channel.basic_ack(method.delivery_tag)


def ack_then_stop(after: int) -> Callable:
    """Work (ack) for ``after`` messages, then keep every delivery without acking: a zombie."""
    def handle(channel: BlockingChannel, method, _body: bytes, count: int) -> None:  # type: ignore[no-untyped-def]
        if count <= after:
            channel.basic_ack(method.delivery_tag)
    return handle


def poison_every(nth: int) -> Callable[[int], bytes]:
    return lambda sent: (b"poison-" if sent % nth == 0 else b"order-") + str(sent).encode()


@dataclass
class Situation:
    name: str
    expected_kind: str
    what: str
    arguments: dict = field(default_factory=dict)
    samples: int = 3
    settle: float = 11.0  # seconds of activity before the first sample: two of the plugin's 5-s samples, and some
    alone: bool = False   # played by itself: a flood, a burst or an alarm would disturb the others
    clustered: bool = False  # played last, with the others that need the second node, which is started for them
    number: int = 0       # its place in the run, set by situations(): its captures are INC-9<number><sample>

    @property
    def queue(self) -> str:
        return f"situation.{self.name}"


class Lab:
    def __init__(self, out: Path, amqp_port: int):
        broker = broker_from_environment()
        if broker is None:
            raise SystemExit(f"broker_situations.py: set LABKIT_RABBITMQ_URL (see {Path(__file__).name}'s docstring)")
        self.broker = broker
        host = broker.base.split("://", 1)[1].rsplit(":", 1)[0].strip("[]")
        self.params = pika.ConnectionParameters(host=host, port=amqp_port, credentials=pika.PlainCredentials(broker.user, broker.password),
                                                heartbeat=0, blocked_connection_timeout=None)
        self.out = out
        self.log_dir = tempfile.TemporaryDirectory(prefix="labkit-situations-")
        self.count = 0   # situations met so far, wanted or not: a situation's number never depends on --only
        self.only: set[str] = set()
        self.planned: list[tuple[Situation, Callable[[Actors, str], None], Callable[[], None] | None]] = []
        self.written: list[Path] = []

    def declare(self, situation: Situation) -> None:
        connection = pika.BlockingConnection(self.params)
        channel = connection.channel()
        channel.queue_delete(situation.queue)
        channel.queue_declare(situation.queue, durable=True, arguments=situation.arguments or None)
        connection.close()

    def sample(self, situation: Situation, number: int) -> None:
        incident = f"INC-9{situation.number:02d}{number}"
        provider = RabbitMQProvider(Path(self.log_dir.name) / "calls.jsonl", {incident: ("/", situation.queue)}, timeout=10,
                                    rules_revision=LATEST_RULES_REVISION)
        reading = provider.read_with_diagnostic(incident)
        snapshot = json.loads(reading.diagnostic)
        answer = json.loads(reading.response)
        capture = {"incident": incident, "situation": situation.name, "expected_kind": situation.expected_kind,
                   "what": situation.what, **{key: value for key, value in snapshot.items() if key != "incident"}}
        path = self.out / f"{incident}-{situation.name}.json"
        path.write_text(json.dumps(capture, indent=1) + "\n")
        self.written.append(path)
        queue = snapshot["queue"]
        said = answer.get("diagnosis", {}).get("kind", "(no diagnosis: the rules lacked a field)")
        print(f"  {incident} {situation.name}: messages={queue.get('messages')} consumers={queue.get('consumers')} "
              f"state={queue.get('state')} rules revision {LATEST_RULES_REVISION} says {said}")

    def run(self, situation: Situation, setup: Callable[[Actors, str], None], after: Callable[[], None] | None = None) -> None:
        """Register a situation; :meth:`play` makes them all, in the order registered."""
        self.count += 1
        situation.number = self.count
        if not self.only or situation.name in self.only:
            self.planned.append((situation, setup, after))

    def play(self) -> None:
        # Every queue first: a new queue's statistics take seconds to appear in the management API,
        # and by the time its situation comes, they have.
        for situation, _setup, _after in self.planned:
            self.declare(situation)
        together = [plan for plan in self.planned if not plan[0].alone and not plan[0].clustered]
        if together:
            self.play_together(together)
        for plan in self.planned:
            if plan[0].alone:
                self.play_together([plan])
        clustered = [plan for plan in self.planned if plan[0].clustered]
        if clustered:
            # Last: while the second node is down, every read of the first node's API lists it as stopped.
            rabbitmq_sh("start-second")
            try:
                self.play_together(clustered)
            finally:
                rabbitmq_sh("stop-second")

    def play_together(self, plans: list[tuple[Situation, Callable[[Actors, str], None], Callable[[], None] | None]]) -> None:
        """Start the situations' clients at once, let the rates settle, then sample each in turn, SAMPLE_GAP apart.

        The quiet situations share their minute; a flood, a burst or an alarm would disturb the
        others (an alarm blocks every publisher of the node), so each of those plays alone.
        """
        actors = []
        try:
            for situation, setup, _after in plans:
                print(f"{situation.name} (expected {situation.expected_kind}): {situation.what}")
                actors.append(Actors(self.params))
                setup(actors[-1], situation.queue)
            time.sleep(max(situation.settle for situation, _setup, _after in plans))
            for number in range(max(situation.samples for situation, _setup, _after in plans)):
                if number:
                    time.sleep(SAMPLE_GAP)
                for situation, _setup, _after in plans:
                    if number < situation.samples:
                        self.sample(situation, number + 1)
        finally:
            try:
                for _situation, _setup, after in plans:
                    if after:
                        after()
            finally:
                for each in actors:
                    each.close()


def rabbitmq_sh(*args: str) -> str:
    """scripts/rabbitmq.sh on the nodes it started (never another broker's); what it prints."""
    return subprocess.run(["bash", str(ROOT / "scripts" / "rabbitmq.sh"), *args], check=True, stdout=subprocess.PIPE,
                          text=True).stdout.strip()


def ctl(*args: str) -> None:
    """rabbitmqctl on the node scripts/rabbitmq.sh started."""
    rabbitmq_sh("ctl", *args)


def situations(lab: Lab) -> None:
    """Every situation, in a fixed order (their capture ids follow it); the alarms last, each undone after."""
    s = Situation("no-consumers-backlog", "consumer_outage", "publishers at 100/s, nobody consuming")
    lab.run(s, lambda a, q: a.publisher(q, 100))

    s = Situation("never-acking-consumers", "stuck_consumer", "two consumers take their prefetch of 20 and never ack; 50/s published")
    lab.run(s, lambda a, q: (a.consumer(q, 20, never_ack), a.consumer(q, 20, never_ack), a.publisher(q, 50)))

    s = Situation("requeue-loop", "poison_message", "one message in ten fails and is nacked with requeue, forever; 50/s published")
    lab.run(s, lambda a, q: (a.consumer(q, 10, nack_poison), a.publisher(q, 50, bodies=poison_every(10))))

    s = Situation("quorum-delivery-limit-dead-letter", "poison_message",
                  "quorum queue, x-delivery-limit 3, dead-letter exchange: one message in ten fails, is redelivered and dead-lettered",
                  arguments={"x-queue-type": "quorum", "x-delivery-limit": 3, "x-dead-letter-exchange": "",
                             "x-dead-letter-routing-key": "situation.dead-letters"})
    lab.run(s, lambda a, q: (a.consumer(q, 10, nack_poison), a.publisher(q, 50, bodies=poison_every(10))))

    s = Situation("consumer-lag", "consumer_lag", "150/s published, one consumer acking one message each 20 ms (at most 50/s)")
    lab.run(s, lambda a, q: (a.consumer(q, 10, slow_ack(0.02)), a.publisher(q, 150)))

    s = Situation("drained-burst", "false_alarm", "a burst of 30,000 messages at once, then two fast consumers draining it",
                  settle=4.0, alone=True)
    def burst(a: Actors, q: str) -> None:
        a.publisher(q, 0, total=30000)
        time.sleep(3)
        a.consumer(q, 200, ack)
        a.consumer(q, 200, ack)
    lab.run(s, burst)

    s = Situation("healthy", "false_alarm", "50/s published, two consumers keeping up", samples=6)
    lab.run(s, lambda a, q: (a.consumer(q, 20, ack), a.consumer(q, 20, ack), a.publisher(q, 50)))

    s = Situation("idle", "false_alarm", "declared and never used: nothing published, nothing consumed", samples=2)
    lab.run(s, lambda a, q: None)

    s = Situation("lazy-no-consumers", "consumer_outage", "x-queue-mode lazy, 100/s published, nobody consuming",
                  arguments={"x-queue-mode": "lazy"})
    lab.run(s, lambda a, q: a.publisher(q, 100))

    s = Situation("stream-with-reader", "false_alarm", "stream queue, 50/s published, one reader from the first offset, acking",
                  arguments={"x-queue-type": "stream"})
    def stream(a: Actors, q: str) -> None:
        def work() -> None:
            connection = a.connect()
            channel = connection.channel()
            channel.basic_qos(prefetch_count=50)
            channel.basic_consume(q, lambda ch, m, _p, _b: ch.basic_ack(m.delivery_tag),
                                  arguments={"x-stream-offset": "first"})
            while not a.stop.is_set():
                connection.process_data_events(0.1)
            connection.close()
        a.publisher(q, 50)
        a.run(work)
    lab.run(s, stream)

    s = Situation("zombie-consumers", "stuck_consumer",
                  "three consumers ack 100 messages each, then keep their prefetch of 10 without acking; 50/s published",
                  samples=3)
    lab.run(s, lambda a, q: ([a.consumer(q, 10, ack_then_stop(100)) for _ in range(3)], a.publisher(q, 50)))

    # Meant to provoke `flow` (credit flow throttling the publishers into the queue); whether it did is in each
    # capture's queue.state: on a busy 2-core machine it rarely does.
    s = Situation("publisher-flood", "consumer_lag",
                  "four publishers as fast as they can, one auto-ack consumer falling behind; credit flow may throttle them (state flow)",
                  settle=6.0, samples=4, alone=True)
    lab.run(s, lambda a, q: ([a.publisher(q, 0, body=b"x" * 2000) for _ in range(4)],
                          a.consumer(q, 100, lambda *_: None, auto_ack=True)))

    s = Situation("memory-alarm", "memory_alarm",
                  "vm_memory_high_watermark set to 0.0001 (a few MB): publishers blocked, consumers draining what was there",
                  settle=8.0, alone=True)
    def memory(a: Actors, q: str) -> None:
        a.publisher(q, 0, total=3000)
        time.sleep(2)
        ctl("set_vm_memory_high_watermark", "0.0001")
        a.publisher(q, 100)
        a.consumer(q, 10, slow_ack(0.05))
    lab.run(s, memory, after=lambda: ctl("set_vm_memory_high_watermark", "0.4"))

    s = Situation("disk-alarm", "disk_alarm", "disk_free_limit set to 10**15 bytes (1 PB): publishers blocked, one slow consumer",
                  settle=8.0, alone=True)
    def disk(a: Actors, q: str) -> None:
        a.publisher(q, 0, total=3000)
        time.sleep(2)
        ctl("set_disk_free_limit", str(10**15))
        a.publisher(q, 100)
        a.consumer(q, 10, slow_ack(0.05))
    lab.run(s, disk, after=lambda: ctl("set_disk_free_limit", "50MB"))

    # A cluster node stopped: no kind of ground_truth.csv names it (a queue that is down is an availability
    # problem, not a consumer's or an alarm's), so the expected kind of the queue on it is unknown, what rules
    # revisions 2 and 3 call a queue that is not serving.
    s = Situation("cluster-node-stopped", "unknown",
                  "durable classic queue on a second cluster node with 500 messages; that node's app stopped "
                  "(rabbitmqctl stop_app), read from the first node: no kind names a queue that is down",
                  settle=8.0, clustered=True)
    def on_second_node(_a: Actors, q: str) -> None:
        params = pika.ConnectionParameters(host=lab.params.host, port=int(rabbitmq_sh("amqp-port-second")),
                                           credentials=lab.params.credentials, heartbeat=0)
        connection = pika.BlockingConnection(params)
        channel = connection.channel()
        channel.queue_delete(q)   # declared on the first node with the others: this one lives on the second
        channel.queue_declare(q, durable=True)   # a classic queue's leader is the declaring client's node
        for _ in range(500):
            channel.basic_publish("", q, b"x" * 200)
        connection.close()
        time.sleep(SAMPLE_GAP)   # its statistics reach the first node's API before the node goes
        rabbitmq_sh("ctl-second", "stop_app")
    lab.run(s, on_second_node)

    s = Situation("queue-beside-stopped-node", "false_alarm",
                  "50/s published, two consumers keeping up, on the first node while a second cluster node is stopped",
                  settle=8.0, clustered=True)
    lab.run(s, lambda a, q: (a.consumer(q, 20, ack), a.consumer(q, 20, ack), a.publisher(q, 50)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for the capture files (default %(default)s)")
    parser.add_argument("--only", nargs="*", default=[], help="only these situations (by name)")
    args = parser.parse_args(argv)
    port = os.environ.get(AMQP_PORT_ENV)
    if not port or not port.isdigit():
        raise SystemExit(f"broker_situations.py: set {AMQP_PORT_ENV} to the broker's AMQP port (bash scripts/rabbitmq.sh amqp-port)")
    args.out.mkdir(parents=True, exist_ok=True)
    lab = Lab(args.out, int(port))
    lab.only = set(args.only)
    if not lab.only:  # a whole run rewrites the folder: no capture of an older run stays beside the new ones
        for old in args.out.glob("INC-9*.json"):
            old.unlink()
    start = time.monotonic()
    situations(lab)
    lab.declare(Situation("dead-letters", "", ""))
    lab.play()
    print(f"{len(lab.written)} captures in {os.path.relpath(args.out, ROOT)} in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
