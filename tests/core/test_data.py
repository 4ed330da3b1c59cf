"""The shipped data set: readable, self-consistent, scored, and documented."""

from __future__ import annotations

import csv
import json
import re
from datetime import datetime
from pathlib import Path

import pytest

import labkit
from labkit.provider import diagnose
from labkit.rules import RATE_SLACK, RULES_REVISIONS, UNEXPLAINED_RATE

DATA = Path(labkit.__file__).resolve().parent.parent / "data"
FILES = sorted((DATA / "incidents").glob("*.json"))
IDS = [path.stem for path in FILES]
#: What actually happened can only be one of these (rules revision 2 may also say disk_alarm or unknown).
KINDS = {"consumer_outage", "consumer_lag", "poison_message", "stuck_consumer", "memory_alarm", "false_alarm"}
RULE_KINDS = KINDS | {"disk_alarm", "unknown"}
RATES = ("publish_details", "deliver_get_details", "ack_details", "redeliver_details")
NODE_FIELDS = ("name", "mem_used", "mem_limit", "mem_alarm", "disk_free", "disk_free_limit", "disk_free_alarm")
#: The states RabbitMQ 3.13 reports, by queue type (there is no "idle").
STATES = {"classic": {"running", "flow", "crashed", "stopped"}, "quorum": {"running", "minority", "down", "recovering"}}
#: The delivery acknowledgement timeout when the queue does not set x-consumer-timeout: 30 minutes.
DEFAULT_CONSUMER_TIMEOUT_MS = 30 * 60 * 1000
#: A classic queue keeps messages on disk (3.12+), a few thousand at most in memory, bodies never in the process.
CLASSIC_QUEUE_MEMORY_MAX = 16 * 1024 * 1024
#: A quorum queue keeps at least 32 bytes of metadata a message in memory.
QUORUM_BYTES_PER_MESSAGE = 32

#: Every field of a snapshot that the reference provider reads (provider.observation_of and the rules),
#: apart from the fields of each entry of `nodes` (NODE_FIELDS) and the optional queue.idle_since.
PROVIDER_FIELDS = [
    "incident", "opened_at",
    "node.name", "node.mem_alarm", "node.disk_free_alarm", "nodes",
    "queue.name", "queue.vhost", "queue.type", "queue.state", "queue.arguments", "queue.consumers",
    "queue.consumer_capacity", "queue.messages", "queue.messages_details.rate",
    "queue.messages_ready", "queue.messages_unacknowledged",
    *(f"queue.message_stats.{rate}.rate" for rate in RATES),
]


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def field(snapshot: dict, dotted: str):
    value = snapshot
    for part in dotted.split("."):
        value = value[part]
    return value


def ground_truth() -> list[dict]:
    with open(DATA / "ground_truth.csv", newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_there_are_enough_incidents():
    assert len(FILES) >= 12
    assert all(re.fullmatch(r"INC-\d{4}", i) for i in IDS), IDS
    assert IDS == labkit.list_incidents()


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_each_incident_is_a_consistent_rabbitmq_snapshot(path):
    snapshot = load(path)
    assert snapshot["incident"] == path.stem
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", snapshot["opened_at"])
    for name in PROVIDER_FIELDS:
        field(snapshot, name)  # KeyError names the missing field
    queue, node = snapshot["queue"], snapshot["node"]
    for count in ("consumers", "messages", "messages_ready", "messages_unacknowledged"):
        assert isinstance(queue[count], int) and not isinstance(queue[count], bool) and queue[count] >= 0, count
    assert queue["messages"] == queue["messages_ready"] + queue["messages_unacknowledged"]
    assert 0 <= queue["consumer_capacity"] <= 1
    assert queue["type"] in STATES and queue["state"] in STATES[queue["type"]], queue["state"]
    assert queue["node"] == node["name"]
    assert isinstance(node["mem_alarm"], bool) and isinstance(node["disk_free_alarm"], bool)
    assert isinstance(queue["arguments"], dict)
    assert isinstance(queue["messages_details"]["rate"], (int, float))
    for rate in RATES:
        value = queue["message_stats"][rate]["rate"]
        assert isinstance(value, (int, float)) and value >= 0, rate
        counter = queue["message_stats"][rate.removesuffix("_details")]
        assert isinstance(counter, int) and counter >= value, f"cumulative {rate} is smaller than its rate"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_nodes_list_the_whole_cluster_and_alarms_follow_the_watermarks(path):
    snapshot = load(path)
    nodes = snapshot["nodes"]
    names = [node["name"] for node in nodes]
    assert len(nodes) >= 3 and len(set(names)) == len(names)
    assert [node for node in nodes if node["name"] == snapshot["queue"]["node"]] == [snapshot["node"]], "node is the host's entry"
    cluster = snapshot["broker"]["cluster_name"].removeprefix("rabbit@")
    for node in nodes:
        assert tuple(node) == NODE_FIELDS
        assert node["name"].startswith(f"rabbit@{cluster}-")
        assert all(type(node[f]) is int and node[f] > 0 for f in ("mem_used", "mem_limit", "disk_free", "disk_free_limit"))
        assert node["mem_alarm"] is (node["mem_used"] > node["mem_limit"]), f"{node['name']}: the memory alarm is the watermark"
        assert node["disk_free_alarm"] is (node["disk_free"] < node["disk_free_limit"]), f"{node['name']}: the disk alarm too"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_a_steady_queue_balances_and_a_moving_one_need_not(path):
    """publish - ack - d(messages)/dt, as far as a live broker's rates show it.

    The rates are averages sampled at slightly different instants. Of the 48 captures from RabbitMQ
    3.10.8 (data/captures/) that carry rates (3 more are a queue on a stopped node: no counts), 19 miss the
    balance by more than 0.5/s: a burst draining by 1,600/s, consumers with auto-ack (no ack counter), a
    stream. Of the 20 whose count was steady (changing by less than 0.5/s plus 10% of the flow), 19
    balanced within that same slack (zombies stopping mid-sample did not). So a steady queue here
    balances within UNEXPLAINED_RATE plus RATE_SLACK of the flow, the
    bound rules revision 3 reads health with; a draining, lagging or flowing one may miss by any amount.
    A quorum queue with x-delivery-limit may lose more while it redelivers: messages dead-lettered at the
    limit (INC-1011).
    """
    queue = load(path)["queue"]
    stats = queue["message_stats"]
    publish, ack, deliver, redeliver = (stats[f"{name}_details"]["rate"] for name in ("publish", "ack", "deliver_get", "redeliver"))
    change = queue["messages_details"]["rate"]
    slack = UNEXPLAINED_RATE + RATE_SLACK * max(publish, ack, deliver)
    if queue["messages"] == 0:
        assert change <= 0, "an empty queue does not grow"
    if abs(change) > slack or queue["state"] != "running":
        return  # draining, lagging or in flow: a live broker's rates need not balance
    if queue["type"] == "quorum" and "x-delivery-limit" in queue["arguments"] and redeliver > 0:
        assert publish - ack - change >= -slack, "dead-lettering at the limit only loses messages"
        return
    assert abs(publish - ack - change) <= slack, f"{publish - ack - change:.2f}/s unaccounted for in a steady queue"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_consumer_capacity_is_what_rabbitmq_would_compute(path):
    """What RabbitMQ 3.10.8 answered live, and 3.13.7's source computes (data/README.md, Sources).

    The integer 0 without consumers (``0 -> 0`` in rabbit_amqqueue_process.erl and rabbit_quorum_queue.erl).
    A quorum queue with consumers: exactly 1.0, since its capacity starts at 1.0 and nothing updates it
    (rabbit_fifo.erl). A classic queue with consumers: a moving average of the time they could take a
    delivery (rabbit_queue_consumers.erl), never exactly 0 once they have taken one (zombies: about 1e-7),
    and low while a backlog stands with every prefetch slot full.
    """
    queue = load(path)["queue"]
    capacity = queue["consumer_capacity"]
    if queue["consumers"] == 0:
        assert type(capacity) is int and capacity == 0, "the integer 0, not 0.0"
    elif queue["type"] == "quorum":
        assert type(capacity) is float and capacity == 1.0, "a quorum queue with consumers reports 1.0"
    else:
        assert type(capacity) is float and 0 < capacity <= 1, "a moving average is never exactly 0 once consumers worked"
        if queue["messages_ready"] > queue["messages_unacknowledged"]:
            assert capacity <= 0.5, "a standing backlog with full prefetch: the queue can rarely deliver at once"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_a_counter_is_there_only_once_it_has_moved(path):
    """A live broker leaves a counter out of message_stats until it moves; one that is there has moved."""
    stats = load(path)["queue"]["message_stats"]
    for name in ("publish", "deliver_get", "ack", "redeliver"):
        assert (name in stats) is (f"{name}_details" in stats), name
        if name in stats:
            assert stats[name] > 0, f"{name} is 0: a live broker would leave it out"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_queue_memory_is_plausible_for_its_type(path):
    queue = load(path)["queue"]
    if queue["type"] == "classic":
        assert queue["memory"] <= CLASSIC_QUEUE_MEMORY_MAX, "since 3.12 a classic queue keeps its messages on disk"
    else:
        assert queue["memory"] >= QUORUM_BYTES_PER_MESSAGE * queue["messages"]


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_no_delivery_is_held_past_its_consumer_timeout(path):
    snapshot = load(path)
    held = re.search(r"no acks for (\d+)m", snapshot["alert"])
    timeout = snapshot["queue"]["arguments"].get("x-consumer-timeout", DEFAULT_CONSUMER_TIMEOUT_MS)
    if held:
        assert int(held.group(1)) * 60_000 < timeout, "RabbitMQ would have closed the channel and requeued the delivery"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_idle_since_is_a_3_13_timestamp_before_the_alert(path):
    snapshot = load(path)
    queue = snapshot["queue"]
    if "idle_since" not in queue:
        return
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d", queue["idle_since"])
    assert queue["state"] == "running"
    opened = datetime.fromisoformat(snapshot["opened_at"].replace("Z", "+00:00"))
    assert datetime.fromisoformat(queue["idle_since"]) <= opened


@pytest.mark.parametrize("revision", RULES_REVISIONS)
@pytest.mark.parametrize("incident", IDS)
def test_each_provider_response_passes_the_evidence_contract(incident, revision, tmp_path):
    raw = labkit.ReferenceProvider(tmp_path / "calls.jsonl", rules_revision=revision).read(incident)
    body = labkit.check_evidence(raw, incident)
    assert body["incident"] == incident and body["diagnosis"]["kind"] in (KINDS if revision == 1 else RULE_KINDS)


def test_ground_truth_covers_every_incident_once_with_a_known_kind():
    rows = ground_truth()
    assert list(rows[0]) == ["incident", "kind", "explanation"]
    incidents = [row["incident"] for row in rows]
    assert sorted(incidents) == IDS and len(incidents) == len(set(incidents))
    assert {row["kind"] for row in rows} <= KINDS
    assert len({row["kind"] for row in rows}) >= 4
    assert all(row["explanation"].strip() for row in rows)


def test_the_reference_rules_are_wrong_exactly_where_the_readme_says():
    """README: rules revision 1 agrees with ground truth on 14 of 16; INC-1007 and INC-1011 are the misses."""
    truth = {row["incident"]: row["kind"] for row in ground_truth()}
    guessed = {path.stem: diagnose(load(path))["kind"] for path in FILES}
    misses = {i: (truth[i], guessed[i]) for i in IDS if truth[i] != guessed[i]}
    assert misses == {"INC-1007": ("consumer_outage", "consumer_lag"), "INC-1011": ("poison_message", "false_alarm")}


def test_readme_documents_every_field_the_provider_uses():
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`([^`]+)`", readme))
    missing = []
    for name in [*PROVIDER_FIELDS, "queue.idle_since", *(f"nodes[].{field}" for field in NODE_FIELDS)]:
        if name in documented:
            continue
        if name.startswith("queue.message_stats.") and "queue.message_stats.*_details.rate" in documented:
            continue
        missing.append(name)
    assert missing == []


def test_readme_says_what_3_13_returns_and_cites_its_sources():
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    assert "`consumer_utilisation`" in readme and "still returns" in readme
    sources = readme.split("## Sources", 1)[1]
    assert len(re.findall(r"https://www\.rabbitmq\.com/docs/3\.13/", sources)) >= 5


def test_readme_table_agrees_with_ground_truth():
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    table = dict(re.findall(r"^\| (INC-\d{4}) \|.*\| (\w+) \|$", readme, flags=re.MULTILINE))
    assert table == {row["incident"]: row["kind"] for row in ground_truth()}
    assert f"It has {len(FILES)} queue diagnostics" in readme
