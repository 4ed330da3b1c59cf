"""The reference provider's diagnosis rules: what an observation of a queue and its nodes means.

Deterministic functions of an observation (a contract response without its diagnosis), in
revisions: revision 1 is what the lab shipped first, revision 2 reads more of the observation
(08_versioning re-evaluates stored evidence with it), revision 3 reads what a live broker
actually sends (contract revision 3) and was scored on real captures it was not written from
(13_evaluation). The provider (:mod:`labkit.provider`)
applies them to build its answer; a re-evaluation (:mod:`labkit.versioning`) applies them to
stored evidence, never asking the provider again. A real adapter could put a model here.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import RulesInputMissing, UnknownRulesRevision

#: The reference provider's identity, as recorded in every piece of evidence's decision inputs.
REFERENCE_PROVIDER = "reference-rules"
#: The rule revisions this release can apply; re-evaluation defaults to the newest.
RULES_REVISIONS = (1, 2, 3)
LATEST_RULES_REVISION = RULES_REVISIONS[-1]

#: Rules 2: a node using this share of its memory high watermark is at the edge of the alarm.
MEMORY_EDGE = 0.95
#: Rules 2: messages per second that publish - ack - d(messages)/dt may leave unexplained before
#: they count as lost. The three rates are each rounded to 0.1/s, so they can disagree by 0.15.
UNEXPLAINED_RATE = 0.5
#: Rules 3: a live broker's rates are averages over its sampling interval, taken at slightly
#: different instants, so publish - ack - d(messages)/dt misses by more than rounding while a
#: queue drains, lags or is in flow (8 of 48 samples on RabbitMQ 3.10.8 missed by over 0.5/s).
#: Health allows this share of the flow, on top of UNEXPLAINED_RATE.
RATE_SLACK = 0.1
#: Queue states in which a queue is serving (RabbitMQ 3.13: classic running/flow).
_SERVING = ("running", "flow")


def check_rules_revision(revision: object) -> int:
    """``revision`` if this release has it; otherwise UnknownRulesRevision."""
    if type(revision) is not int or revision not in RULES_REVISIONS:
        raise UnknownRulesRevision(revision, RULES_REVISIONS)
    return revision


def assess(observation: dict, revision: int) -> dict:
    """Apply rules revision ``revision`` to an observation; return ``{"kind", "summary", "signals"}``.

    The observation is a contract response without its diagnosis (:func:`observation_of` of a
    snapshot, or stored evidence). Deterministic: the same observation and revision always give
    the same answer. A field the revision reads that is missing or of the wrong type raises
    RulesInputMissing, naming it.
    """
    rules = {1: _rules_1, 2: _rules_2, 3: _rules_3}[check_rules_revision(revision)]
    return rules(_Reader(observation, revision))


class _Reader:
    """Typed access to an observation's fields; a missing or mistyped one is RulesInputMissing.

    ``source`` reads inside a part already fetched (one entry of ``nodes``), ``where`` is that
    part's own path, so the error names the field in full (``nodes.2.disk_free_alarm``).
    """

    def __init__(self, observation: object, revision: int):
        self.observation, self.revision = observation, revision
        incident = observation.get("incident") if isinstance(observation, dict) else None
        self.incident = incident if isinstance(incident, str) else "(unknown)"

    def _missing(self, field: str, problem: str) -> RulesInputMissing:
        return RulesInputMissing(self.incident, field, problem, self.revision)

    def get(self, dotted: str, source: object = None, where: str = "") -> object:
        value = self.observation if source is None else source
        field = f"{where}.{dotted}" if where else dotted
        for part in dotted.split("."):
            if not isinstance(value, dict):
                raise self._missing(field, "is not an object")
            if part not in value:
                raise self._missing(field, "is missing")
            value = value[part]
        return value

    def number(self, dotted: str, source: object = None, where: str = "") -> float:
        value = self.get(dotted, source, where)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise self._missing(f"{where}.{dotted}" if where else dotted, "is not a number")
        return value

    def count(self, dotted: str) -> int:
        value = self.get(dotted)
        if type(value) is not int or value < 0:
            raise self._missing(dotted, "is not a count")
        return value

    def flag(self, dotted: str, source: object = None, where: str = "") -> bool:
        value = self.get(dotted, source, where)
        if not isinstance(value, bool):
            raise self._missing(f"{where}.{dotted}" if where else dotted, "is not true or false")
        return value

    def text(self, dotted: str, source: object = None, where: str = "") -> str:
        value = self.get(dotted, source, where)
        if not isinstance(value, str):
            raise self._missing(f"{where}.{dotted}" if where else dotted, "is not a string")
        return value

    def rate(self, name: str) -> float:
        return self.number(f"queue.message_stats.{name}_details.rate")

    def has(self, dotted: str) -> bool:
        """Whether ``dotted`` is present (each part above it an object); a mistyped part above is RulesInputMissing."""
        value = self.observation
        for index, part in enumerate(dotted.split(".")):
            if not isinstance(value, dict):
                raise self._missing(".".join(dotted.split(".")[:index]), "is not an object")
            if part not in value:
                return False
            value = value[part]
        return True

    def moved_rate(self, name: str) -> float:
        """Rules 3: a counter's rate, 0 when the broker has not sent it: it is absent until it has moved."""
        return self.rate(name) if self.has(f"queue.message_stats.{name}_details") else 0.0


def _rules_1(o: _Reader) -> dict:
    """Rules revision 1, first match wins. Deliberately simple, and wrong on two incidents.

    They look only at the host node and one snapshot, read ``flow`` as memory pressure, and
    cannot see zombie consumers or poison messages that the broker dead-letters quietly;
    13_evaluation scores them against ground truth. Unchanged since labkit 0.1.
    """
    node_name, mem_alarm = o.text("node.name"), o.flag("node.mem_alarm")
    name, state = o.text("queue.name"), o.text("queue.state")
    publish, deliver, ack, redeliver = o.rate("publish"), o.rate("deliver_get"), o.rate("ack"), o.rate("redeliver")
    consumers, ready = o.count("queue.consumers"), o.count("queue.messages_ready")
    unacked = o.count("queue.messages_unacknowledged")
    if mem_alarm:
        kind, summary = "memory_alarm", f"{node_name} is over its memory limit; publishers to {name} are blocked"
        signals = ["mem_alarm=true", f"state={state}"]
    elif state == "flow":
        # Credit flow: the broker slows publishers to this queue because it cannot keep up,
        # which revision 1 reads as memory pressure building below the alarm.
        kind, summary = "memory_alarm", f"publishers to {name} are throttled by credit flow on {node_name}"
        signals = ["mem_alarm=false", "state=flow"]
    elif consumers == 0 and ready > 0:
        kind, summary = "consumer_outage", f"{name} has no consumers and {ready} messages waiting"
        signals = ["consumers=0", f"messages_ready={ready}", f"publish_rate={publish}"]
    elif redeliver > 0 and redeliver >= 0.3 * deliver:
        kind, summary = "poison_message", f"{name} redelivers {redeliver}/s of {deliver}/s deliveries: messages keep failing"
        signals = [f"redeliver_rate={redeliver}", f"deliver_rate={deliver}"]
    elif unacked > 0 and ack == 0 and consumers > 0:
        kind, summary = "stuck_consumer", f"{consumers} consumers on {name} hold {unacked} unacknowledged messages and ack none"
        signals = [f"messages_unacknowledged={unacked}", "ack_rate=0", f"consumers={consumers}"]
    elif publish > 1.2 * deliver and ready >= 1000:
        kind, summary = "consumer_lag", f"{name} receives {publish}/s but delivers {deliver}/s; {ready} messages ready"
        signals = [f"publish_rate={publish}", f"deliver_rate={deliver}", f"messages_ready={ready}"]
    else:
        kind, summary = "false_alarm", f"{name} is keeping up: {publish}/s in, {deliver}/s out, {ready} ready"
        signals = [f"publish_rate={publish}", f"deliver_rate={deliver}"]
    return {"kind": kind, "summary": summary, "signals": signals}


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _rules_2(o: _Reader) -> dict:
    """Rules revision 2, first match wins, following RabbitMQ 3.13's documented mechanisms.

    1. A memory or disk alarm on ANY node blocks publishers in the whole cluster.
    2. No alarm, but a node at MEMORY_EDGE of its high watermark: memory pressure, the alarm at its edge.
       (``state: flow`` alone is routine credit-flow back-pressure and is not read as memory pressure.)
    3. A queue that is not serving (a quorum queue in minority, down or recovering; a crashed or
       stopped classic queue) is an availability problem none of the kinds names: unknown.
    4. No consumers and messages waiting: consumer_outage.
    5. Consumers hold unacknowledged messages and ack none: stuck_consumer.
    6. Consumers attached, capacity 0, nothing delivered and nothing held: zombie consumers, consumer_outage.
    7. Redeliveries are 30% or more of deliveries: messages are requeued and fail again, poison_message.
    8. A quorum queue with x-delivery-limit loses messages (publish - ack - d(messages)/dt > 0) while
       redelivering: poison messages dead-lettered (or dropped) at the limit, poison_message.
    9. Publishers outpace deliveries by 20%, 1000+ ready and growing: consumer_lag.
    10. false_alarm only on positive evidence of health: a serving queue that is empty and quiet, or whose
        consumers ack at least what is published while the count does not grow and nothing is unexplained.
    11. Otherwise unknown: no rule matched is not the same as healthy.
    """
    seen, stopped = _nodes(o, skip_stopped=False)
    name, state, qtype, arguments = _queue_identity(o)
    consumers, capacity = o.count("queue.consumers"), o.number("queue.consumer_capacity")
    messages, ready = o.count("queue.messages"), o.count("queue.messages_ready")
    unacked, change = o.count("queue.messages_unacknowledged"), o.number("queue.messages_details.rate")
    publish, deliver, ack, redeliver = o.rate("publish"), o.rate("deliver_get"), o.rate("ack"), o.rate("redeliver")
    flow = _Flow(name, state, qtype, arguments, consumers, messages, ready, unacked, change, publish, deliver, ack, redeliver)
    return (_alarm_verdict(seen, name, state, publish) or _not_serving_verdict(name, state, qtype, stopped)
            or _queue_verdict(flow, capacity=capacity, flow_slack=0.0, unexplained_slack=UNEXPLAINED_RATE, streams=False))


def _rules_3(o: _Reader) -> dict:
    """Rules revision 3: revision 2 made to read what a live broker sends, and fixed where it misread one.

    Scored on captures from a real RabbitMQ 3.10.8 that it was not written from (13_evaluation).
    What changed from revision 2, rule by rule:

    - A counter absent from ``message_stats`` has not moved: its rate is 0 (contract revision 3).
    - A stopped node (``running: false``) has no alarm and no memory to read; it is skipped for
      rules 1 and 2, and counted in the signals.
    - Rule 6, zombie consumers: consumers attached, messages ready, nothing delivered and nothing
      held. ``consumer_capacity`` is not read: a zombie's is about 1e-7, not 0, and a quorum
      queue with consumers reports exactly 1.0 (3.10.8), so capacity 0 missed both.
    - Rule 10, health: the rates may disagree by RATE_SLACK of the flow (plus UNEXPLAINED_RATE),
      since a live broker's rates are averages sampled at different instants; a burst draining
      fast or a healthy queue is no longer unknown for a few messages a second of disagreement.
    - A stream keeps what its consumers read, so its counts say nothing about them: without an
      alarm it is unknown, never healthy or lagging on counts alone.
    """
    seen, stopped = _nodes(o, skip_stopped=True)
    name, state, qtype, arguments = _queue_identity(o)
    publish, deliver = o.moved_rate("publish"), o.moved_rate("deliver_get")
    ack, redeliver = o.moved_rate("ack"), o.moved_rate("redeliver")
    verdict = _alarm_verdict(seen, name, state, publish) or _not_serving_verdict(name, state, qtype, stopped)
    if verdict:
        return verdict
    # The queue is up, so contract revision 3 guarantees its counts.
    consumers, messages = o.count("queue.consumers"), o.count("queue.messages")
    ready, unacked = o.count("queue.messages_ready"), o.count("queue.messages_unacknowledged")
    change = o.number("queue.messages_details.rate")
    flow = _Flow(name, state, qtype, arguments, consumers, messages, ready, unacked, change, publish, deliver, ack, redeliver)
    slack = UNEXPLAINED_RATE + RATE_SLACK * max(publish, ack, abs(change))
    verdict = _queue_verdict(flow, capacity=None, flow_slack=slack, unexplained_slack=slack, streams=True)
    if stopped and len(verdict["signals"]) < 8:
        verdict["signals"].append(f"stopped_nodes={len(stopped)}")
    return verdict


# --------------------------------------------------------------------------- the rules revisions 2 and 3 share


def _nodes(o: _Reader, *, skip_stopped: bool) -> tuple[list[tuple[str, bool, bool, float, float]], list[str]]:
    """Each node's (name, mem_alarm, disk_free_alarm, mem_used, mem_limit), and the names of stopped nodes.

    Revision 2 reads every node; revision 3 skips one the broker says is not running (it has no alarm
    and no memory to read) and names it instead.
    """
    nodes = o.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise o._missing("nodes", "is not a list of the cluster's nodes")
    seen, stopped = [], []
    for index, node in enumerate(nodes):
        where = f"nodes.{index}"
        if not isinstance(node, dict):
            raise o._missing(where, "is not an object")
        node_name = _short(o.text("name", node, where), 48)
        if skip_stopped and "running" in node and o.flag("running", node, where) is False:
            stopped.append(node_name)
            continue
        seen.append((
            node_name, o.flag("mem_alarm", node, where), o.flag("disk_free_alarm", node, where),
            o.number("mem_used", node, where), o.number("mem_limit", node, where),
        ))
    return seen, stopped


def _queue_identity(o: _Reader) -> tuple[str, str, str, dict]:
    name, state, qtype = _short(o.text("queue.name")), o.text("queue.state"), o.text("queue.type")
    arguments = o.get("queue.arguments")
    if not isinstance(arguments, dict):
        raise o._missing("queue.arguments", "is not an object")
    return name, state, qtype, arguments


def _alarm_verdict(seen: list[tuple[str, bool, bool, float, float]], name: str, state: str, publish: float) -> dict | None:
    """Rules 1 and 2: an alarm on any node (cluster-wide), or a node at the edge of its memory alarm."""
    mem_alarms = [node for node, mem, _disk, _used, _limit in seen if mem]
    disk_alarms = [node for node, _mem, disk, _used, _limit in seen if disk]
    at_edge = [(node, used / cap) for node, _m, _d, used, cap in seen if cap > 0 and used >= MEMORY_EDGE * cap]
    if mem_alarms or disk_alarms:
        which = "memory" if mem_alarms else "disk"
        summary = (f"{which} alarm on {', '.join((mem_alarms or disk_alarms)[:3])}: alarms are cluster-wide, "
                   f"so publishers to {name} are blocked ({publish}/s in)")
        signals = ([f"mem_alarm={node}" for node in mem_alarms] + [f"disk_free_alarm={node}" for node in disk_alarms])[:7]
        signals.append(f"publish_rate={publish}")
        return {"kind": "memory_alarm" if mem_alarms else "disk_alarm", "summary": summary, "signals": signals}
    if at_edge:
        node, share = at_edge[0]
        summary = (f"{node} uses {share:.0%} of its memory high watermark: the memory alarm, which blocks publishers "
                   f"to {name} and the whole cluster, is at its edge")
        return {"kind": "memory_alarm", "summary": summary,
                "signals": [f"mem_used/mem_limit={share:.2f} on {node}", "mem_alarm=false", f"state={state}"]}
    return None


def _not_serving_verdict(name: str, state: str, qtype: str, stopped: list[str]) -> dict | None:
    """Rule 3: a queue that is not serving is an availability problem none of the kinds names."""
    if state in _SERVING:
        return None
    summary = f"{name} is {state}: the queue is not serving, an availability problem none of the kinds names"
    signals = [f"state={state}", f"type={qtype}"] + [f"stopped={node}" for node in stopped[:6]]
    return {"kind": "unknown", "summary": summary, "signals": signals}


@dataclass(frozen=True)
class _Flow:
    """What a serving queue's counts and rates say, as rules 4 to 11 read them."""

    name: str
    state: str
    qtype: str
    arguments: dict
    consumers: int
    messages: int
    ready: int
    unacked: int
    change: float
    publish: float
    deliver: float
    ack: float
    redeliver: float

    @property
    def unexplained(self) -> float:
        """Messages per second that entered the queue and were neither acknowledged nor are still in it."""
        return round(self.publish - self.ack - self.change, 1) + 0.0


def _queue_verdict(q: _Flow, *, capacity: float | None, flow_slack: float, unexplained_slack: float, streams: bool) -> dict:
    """Rules 4 to 11 of revisions 2 and 3, first match wins; the keywords are where the revisions differ.

    ``capacity``: revision 2 also wants consumer_capacity 0 for zombie consumers (None: not read).
    ``flow_slack``, ``unexplained_slack``: how far health lets the rates disagree.
    ``streams``: revision 3 never judges a stream on its counts.
    """
    name, consumers, ready, unacked = q.name, q.consumers, q.ready, q.unacked
    publish, deliver, ack, redeliver, change, unexplained = q.publish, q.deliver, q.ack, q.redeliver, q.change, q.unexplained
    limit = q.arguments.get("x-delivery-limit")
    if streams and q.qtype == "stream":
        kind = "unknown"
        summary = f"{name} is a stream: it keeps what its consumers read, so its counts say nothing about them"
        signals = ["type=stream", f"consumers={consumers}", f"messages={q.messages}", f"publish_rate={publish}"]
    elif consumers == 0 and ready > 0:
        kind, summary = "consumer_outage", f"{name} has no consumers and {ready} messages waiting"
        signals = ["consumers=0", f"messages_ready={ready}", f"publish_rate={publish}"]
    elif consumers > 0 and unacked > 0 and ack == 0:
        kind, summary = "stuck_consumer", f"{consumers} consumers on {name} hold {unacked} unacknowledged messages and ack none"
        signals = [f"messages_unacknowledged={unacked}", "ack_rate=0", f"consumers={consumers}"]
    elif consumers > 0 and ready > 0 and unacked == 0 and deliver == 0 and capacity in (None, 0):
        kind = "consumer_outage"
        summary = f"{consumers} consumers are attached to {name} but take no deliveries: {ready} messages wait, none in flight"
        signals = [f"consumers={consumers}"] + ([] if capacity is None else ["consumer_capacity=0"]) + [
            "deliver_rate=0", "messages_unacknowledged=0", f"messages_ready={ready}"]
    elif redeliver > 0 and redeliver >= 0.3 * deliver:
        kind, summary = "poison_message", f"{name} redelivers {redeliver}/s of {deliver}/s deliveries: messages keep failing"
        signals = [f"redeliver_rate={redeliver}", f"deliver_rate={deliver}"]
    elif q.qtype == "quorum" and type(limit) is int and redeliver > 0 and unexplained > UNEXPLAINED_RATE:
        target = q.arguments.get("x-dead-letter-exchange")
        fate = f"dead-lettered to {_short(target, 40)!r}" if isinstance(target, str) else "dropped (no dead-letter exchange)"
        kind = "poison_message"
        summary = (f"{name} loses {unexplained}/s (publish - ack - change in messages) while redelivering {redeliver}/s: "
                   f"messages fail {limit} deliveries and are {fate}")
        signals = [f"x-delivery-limit={limit}", f"unexplained_rate={unexplained}", f"redeliver_rate={redeliver}",
                   f"publish_rate={publish}", f"ack_rate={ack}", f"messages_rate={change}"]
    elif publish > 1.2 * deliver and ready >= 1000 and change > 0:
        kind, summary = "consumer_lag", f"{name} receives {publish}/s but delivers {deliver}/s; {ready} ready, growing {change}/s"
        signals = [f"publish_rate={publish}", f"deliver_rate={deliver}", f"messages_ready={ready}", f"messages_rate={change}"]
    elif q.messages == 0 and publish == 0 and deliver == 0:
        kind, summary = "false_alarm", f"{name} is empty and quiet: nothing waits, nothing arrives, nothing is lost"
        signals = ["messages=0", "publish_rate=0", "deliver_rate=0", f"consumers={consumers}"]
    elif (consumers > 0 and change <= flow_slack and ack >= publish - flow_slack and redeliver <= 0.05 * deliver
          and abs(unexplained) <= unexplained_slack):
        kind = "false_alarm"
        summary = f"{name} is keeping up: acks {ack}/s for {publish}/s in, {q.messages} messages, changing {change}/s"
        signals = [f"ack_rate={ack}", f"publish_rate={publish}", f"messages_rate={change}", f"unexplained_rate={unexplained}"]
    else:
        kind = "unknown"
        summary = (f"no documented mechanism matches {name} ({publish}/s in, {deliver}/s out, {q.messages} messages, "
                   f"changing {change}/s), and nothing shows it healthy")
        signals = [f"state={q.state}", f"consumers={consumers}", f"publish_rate={publish}", f"deliver_rate={deliver}",
                   f"messages_rate={change}", f"unexplained_rate={unexplained}"]
    return {"kind": kind, "summary": summary, "signals": signals}
