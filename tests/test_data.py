"""The shipped data set: readable, self-consistent, scored, and documented."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

import labkit
from labkit.provider import diagnose

DATA = Path(labkit.__file__).resolve().parent.parent / "data"
FILES = sorted((DATA / "incidents").glob("*.json"))
IDS = [path.stem for path in FILES]
KINDS = {"consumer_outage", "consumer_lag", "poison_message", "stuck_consumer", "memory_alarm", "false_alarm"}
RATES = ("publish_details", "deliver_get_details", "ack_details", "redeliver_details")

#: Every field of a snapshot that the reference provider reads (provider._answer and diagnose).
PROVIDER_FIELDS = [
    "incident", "opened_at",
    "node.name", "node.mem_alarm", "node.disk_free_alarm",
    "queue.name", "queue.vhost", "queue.type", "queue.state", "queue.consumers", "queue.consumer_capacity",
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
    assert queue["type"] in ("classic", "quorum") and queue["state"] in ("running", "idle", "flow")
    assert queue["node"] == node["name"]
    assert isinstance(node["mem_alarm"], bool) and isinstance(node["disk_free_alarm"], bool)
    for rate in RATES:
        value = queue["message_stats"][rate]["rate"]
        assert isinstance(value, (int, float)) and value >= 0, rate
        counter = queue["message_stats"][rate.removesuffix("_details")]
        assert isinstance(counter, int) and counter >= value, f"cumulative {rate} is smaller than its rate"


@pytest.mark.parametrize("incident", IDS)
def test_each_provider_response_passes_the_evidence_contract(incident, tmp_path):
    raw = labkit.ReferenceProvider(tmp_path / "calls.jsonl").read(incident)
    body = labkit.check_evidence(raw, incident)
    assert body["incident"] == incident and body["diagnosis"]["kind"] in KINDS


def test_ground_truth_covers_every_incident_once_with_a_known_kind():
    rows = ground_truth()
    assert list(rows[0]) == ["incident", "kind", "explanation"]
    incidents = [row["incident"] for row in rows]
    assert sorted(incidents) == IDS and len(incidents) == len(set(incidents))
    assert {row["kind"] for row in rows} <= KINDS
    assert len({row["kind"] for row in rows}) >= 4
    assert all(row["explanation"].strip() for row in rows)


def test_the_reference_rules_are_wrong_exactly_where_the_readme_says():
    """README: the rules agree with ground truth on 12 of 14; INC-1007 and INC-1011 are the misses."""
    truth = {row["incident"]: row["kind"] for row in ground_truth()}
    guessed = {path.stem: diagnose(load(path))["kind"] for path in FILES}
    misses = {i: (truth[i], guessed[i]) for i in IDS if truth[i] != guessed[i]}
    assert misses == {"INC-1007": ("consumer_outage", "consumer_lag"), "INC-1011": ("poison_message", "false_alarm")}


def test_readme_documents_every_field_the_provider_uses():
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`([^`]+)`", readme))
    missing = []
    for name in PROVIDER_FIELDS:
        if name in documented:
            continue
        if name.startswith("queue.message_stats.") and "queue.message_stats.*_details.rate" in documented:
            continue
        missing.append(name)
    assert missing == []


def test_readme_table_agrees_with_ground_truth():
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    table = dict(re.findall(r"^\| (INC-\d{4}) \|.*\| (\w+) \|$", readme, flags=re.MULTILINE))
    assert table == {row["incident"]: row["kind"] for row in ground_truth()}
    assert f"It has {len(FILES)} queue diagnostics" in readme
