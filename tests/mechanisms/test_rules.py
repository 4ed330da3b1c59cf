"""The reference rules, as revisions: 1 stays what it was, 2 follows RabbitMQ's documented mechanisms,
3 reads what a live broker sends and fixes what 2 misread on one.

Rules run on the observation (a contract response without its diagnosis), so the same
function serves the provider's answer and a re-evaluation of stored evidence.
"""

from __future__ import annotations

import copy
import csv
import json
from collections import Counter
from pathlib import Path

import pytest

import labkit
from labkit.contract import schema_for
from labkit.errors import RulesInputMissing, UnknownRulesRevision
from labkit.provider import diagnose, observation_of
from labkit.rules import LATEST_RULES_REVISION, RULES_REVISIONS, assess

DATA = Path(labkit.__file__).resolve().parent.parent / "data"
IDS = sorted(path.stem for path in (DATA / "incidents").glob("INC-*.json"))

#: What rules revision 1 decided before revision 2 existed (labkit 0.1, `git show 249463f:labkit/provider.py`,
#: run on that commit's data). Revision 1 must keep deciding exactly this: lessons 00-06 use it.
REVISION_1_KINDS = {
    "INC-1001": "consumer_outage", "INC-1002": "consumer_lag", "INC-1003": "poison_message",
    "INC-1004": "stuck_consumer", "INC-1005": "memory_alarm", "INC-1006": "false_alarm",
    "INC-1007": "consumer_lag", "INC-1008": "consumer_lag", "INC-1009": "stuck_consumer",
    "INC-1010": "memory_alarm", "INC-1011": "false_alarm", "INC-1012": "consumer_outage",
    "INC-1013": "false_alarm", "INC-1014": "consumer_lag",
    # Added with 11_capacity_and_retention (diagnostics that carry secrets), after revision 2:
    # what revision 1 decides of them, frozen the day they arrived.
    "INC-1015": "consumer_outage", "INC-1016": "stuck_consumer",
}
#: Two of revision 1's summaries as labkit 0.1 wrote them, word for word.
REVISION_1_SUMMARIES = {
    "INC-1007": "inventory.stock-sync receives 240.6/s but delivers 0.0/s; 392118 messages ready",
    "INC-1010": "publishers to inventory.price-snapshots are throttled by credit flow on rabbit@orders-eu-1-c",
}


def snapshot(incident: str) -> dict:
    return json.loads((DATA / "incidents" / f"{incident}.json").read_text(encoding="utf-8"))


def observation(incident: str) -> dict:
    return observation_of(snapshot(incident))


def truth() -> dict[str, str]:
    with open(DATA / "ground_truth.csv", newline="", encoding="utf-8") as handle:
        return {row["incident"]: row["kind"] for row in csv.DictReader(handle)}


def node_index(obs: dict, suffix: str) -> int:
    return next(i for i, node in enumerate(obs["nodes"]) if node["name"].endswith(suffix))


# --------------------------------------------------------------------------- revision 1: unchanged


def test_revision_1_decides_what_it_always_decided():
    assert IDS == sorted(REVISION_1_KINDS)
    assert {i: assess(observation(i), 1)["kind"] for i in IDS} == REVISION_1_KINDS
    for incident, summary in REVISION_1_SUMMARIES.items():
        assert assess(observation(incident), 1)["summary"] == summary


def test_diagnose_is_revision_1_on_a_raw_snapshot():
    for incident in IDS:
        assert diagnose(snapshot(incident)) == assess(observation(incident), 1)


def test_revision_1_still_gets_inc_1007_and_inc_1011_wrong():
    known = truth()
    misses = {i: (known[i], assess(observation(i), 1)["kind"]) for i in IDS if assess(observation(i), 1)["kind"] != known[i]}
    assert misses == {"INC-1007": ("consumer_outage", "consumer_lag"), "INC-1011": ("poison_message", "false_alarm")}


def test_revision_1_reads_only_what_contract_revision_1_carried():
    """Stored evidence of contract revision 1 (no `nodes`, no counts' rates) can still be re-assessed with it."""
    old = observation("INC-1004")
    del old["nodes"], old["queue"]["messages_details"], old["queue"]["arguments"], old["queue"]["messages"]
    old["contract"] = "queue-evidence/1"
    assert assess(old, 1)["kind"] == "stuck_consumer"


# --------------------------------------------------------------------------- revision 2: against ground truth


def test_revision_2_against_ground_truth(capsys):
    known = truth()
    guessed = {i: assess(observation(i), 2)["kind"] for i in IDS}
    confusion = Counter((known[i], guessed[i]) for i in IDS)
    with capsys.disabled():
        print("\nrules revision 2: truth -> guess (count)")
        for (real, guess), count in sorted(confusion.items()):
            print(f"  {real:16} -> {guess:16} {count}{'' if real == guess else '   <- miss'}")
    misses = {i: guessed[i] for i in IDS if guessed[i] != known[i]}
    assert misses == {"INC-1007": "consumer_lag"}, "revision 2 wants zombies' capacity exactly 0; a live broker says about 1e-7"


def test_revision_3_is_the_latest_and_each_is_deterministic():
    assert RULES_REVISIONS == (1, 2, 3) and LATEST_RULES_REVISION == 3
    for incident in IDS:
        obs = observation(incident)
        for revision in RULES_REVISIONS:
            assert assess(obs, revision) == assess(copy.deepcopy(obs), revision)
        assert obs == observation(incident), "assess does not change the observation"


# --------------------------------------------------------------------------- revision 2: one test per mechanism


def test_a_disk_alarm_on_another_node_blocks_publishers_everywhere():
    """Alarms are cluster-wide, and the free-disk alarm blocks publishers like the memory alarm."""
    obs = observation("INC-1002")  # consumer_lag, its queue on platform-eu-1-b
    obs["nodes"][node_index(obs, "-c")]["disk_free_alarm"] = True
    assert obs["node"]["disk_free_alarm"] is False, "the queue's own node has no alarm"
    decided = assess(obs, 2)
    assert decided["kind"] == "disk_alarm"
    assert "disk_free_alarm=rabbit@platform-eu-1-c" in decided["signals"] and "cluster-wide" in decided["summary"]
    assert assess(obs, 1)["kind"] == "consumer_lag", "revision 1 looks at the host node only"


def test_a_memory_alarm_on_another_node_blocks_publishers_everywhere():
    obs = observation("INC-1012")
    other = obs["nodes"][node_index(obs, "-b")]
    other["mem_alarm"], other["mem_used"] = True, other["mem_limit"] + 1
    assert assess(obs, 2)["kind"] == "memory_alarm"
    assert assess(obs, 1)["kind"] == "consumer_outage"


def test_flow_is_routine_back_pressure_not_memory_pressure():
    obs = observation("INC-1010")  # state flow, node c at 96% of its watermark
    assert assess(obs, 2)["kind"] == "memory_alarm"
    host = obs["nodes"][node_index(obs, "-c")]
    host["mem_used"] = host["mem_limit"] // 2
    decided = assess(obs, 2)
    assert decided["kind"] == "unknown", "credit flow alone says nothing about memory"
    assert assess(obs, 1)["kind"] == "memory_alarm", "revision 1 reads flow as memory pressure"


def test_a_node_at_the_edge_of_its_watermark_is_memory_pressure_even_without_flow():
    obs = observation("INC-1008")
    node = obs["nodes"][node_index(obs, "-a")]
    node["mem_used"] = int(node["mem_limit"] * 0.97)
    assert assess(obs, 2)["kind"] == "memory_alarm"
    node["mem_used"] = int(node["mem_limit"] * 0.90)
    assert assess(obs, 2)["kind"] == "consumer_lag"


def test_zombie_consumers_are_an_outage():
    """Consumers attached, capacity 0, no deliveries and nothing in flight (INC-1007, at the capacity revision 2 expects)."""
    obs = observation("INC-1007")
    obs["queue"]["consumer_capacity"] = 0.0
    decided = assess(obs, 2)
    assert decided["kind"] == "consumer_outage" and "consumer_capacity=0" in decided["signals"]
    working = copy.deepcopy(obs)
    working["queue"]["message_stats"]["deliver_get_details"]["rate"] = 20.0
    working["queue"]["consumer_capacity"] = 0.03
    assert assess(working, 2)["kind"] == "consumer_lag", "consumers that take deliveries are slow, not gone"
    holding = copy.deepcopy(obs)
    holding["queue"]["messages_unacknowledged"] = 40
    assert assess(holding, 2)["kind"] == "stuck_consumer", "consumers holding messages without acking are stuck"


def test_a_quorum_queue_dead_letters_poison_messages_at_its_delivery_limit():
    """publish - ack - d(messages)/dt > 0 while redelivering, with x-delivery-limit (INC-1011)."""
    obs = observation("INC-1011")
    decided = assess(obs, 2)
    assert decided["kind"] == "poison_message"
    assert "unexplained_rate=1.2" in decided["signals"] and "payments.dlx" in decided["summary"]

    no_limit = copy.deepcopy(obs)
    del no_limit["queue"]["arguments"]["x-delivery-limit"]
    assert assess(no_limit, 2)["kind"] == "unknown", "messages vanish, but no documented mechanism says why"

    no_loss = copy.deepcopy(obs)
    no_loss["queue"]["message_stats"]["ack_details"]["rate"] = 182.3
    assert assess(no_loss, 2)["kind"] == "false_alarm", "nothing lost: the redeliveries were retries that succeeded"

    dropped = copy.deepcopy(obs)
    del dropped["queue"]["arguments"]["x-dead-letter-exchange"]
    assert "dropped" in assess(dropped, 2)["summary"]

    classic = copy.deepcopy(obs)
    classic["queue"]["type"] = "classic"
    assert assess(classic, 2)["kind"] != "poison_message", "classic queues have no delivery limit"


def test_no_rule_matched_is_unknown_not_a_false_alarm():
    obs = observation("INC-1006")  # a burst that is draining: healthy on positive evidence
    assert assess(obs, 2)["kind"] == "false_alarm"
    standing = copy.deepcopy(obs)
    standing["queue"]["messages_details"]["rate"] = 0.0  # acks outpace publishes, yet the count stands still
    decided = assess(standing, 2)
    assert decided["kind"] == "unknown" and "unexplained_rate=-287.1" in decided["signals"]
    assert assess(standing, 1)["kind"] == "false_alarm", "revision 1 calls anything unmatched a false alarm"


def test_an_empty_quiet_queue_is_healthy_but_only_while_it_serves():
    obs = observation("INC-1013")
    assert obs["queue"]["state"] == "running" and "idle_since" in obs["queue"]
    assert assess(obs, 2)["kind"] == "false_alarm"
    for state in ("minority", "down", "recovering"):
        unavailable = copy.deepcopy(obs)
        unavailable["queue"]["type"], unavailable["queue"]["state"] = "quorum", state
        assert assess(unavailable, 2)["kind"] == "unknown"


def test_a_queue_that_is_not_serving_is_not_called_a_consumer_outage():
    obs = observation("INC-1001")
    obs["queue"]["state"] = "minority"
    decided = assess(obs, 2)
    assert decided["kind"] == "unknown" and "state=minority" in decided["signals"]


# --------------------------------------------------------------------------- inputs, errors and bounds


def test_revision_2_on_contract_revision_1_evidence_names_the_missing_field():
    old = observation("INC-1007")
    del old["nodes"]
    with pytest.raises(RulesInputMissing) as caught:
        assess(old, 2)
    error = caught.value
    assert isinstance(error, labkit.errors.EvidenceRejected) and isinstance(error, labkit.errors.BadInput)
    assert (error.incident, error.field, error.rule, error.revision) == ("INC-1007", "nodes", "rules-input", 2)
    assert "rules revision 2 reads it" in str(error) and "\n" not in str(error)


@pytest.mark.parametrize(("path", "value", "field", "words"), [
    ("queue.messages_details", None, "queue.messages_details.rate", "missing"),
    ("queue.consumers", "4", "queue.consumers", "not a count"),
    ("queue.message_stats.ack_details.rate", True, "queue.message_stats.ack_details.rate", "not a number"),
    ("queue.arguments", [], "queue.arguments", "not an object"),
    ("nodes", {}, "nodes", "not a list"),
])
def test_a_missing_or_mistyped_input_is_named(path, value, field, words):
    obs = observation("INC-1011")
    *parents, last = path.split(".")
    target = obs
    for part in parents:
        target = target[part]
    if value is None:
        del target[last]
    else:
        target[last] = value
    with pytest.raises(RulesInputMissing) as caught:
        assess(obs, 2)
    assert caught.value.field == field and words in caught.value.problem


def test_a_node_entry_without_its_alarm_is_named_by_position():
    obs = observation("INC-1011")
    del obs["nodes"][2]["disk_free_alarm"]
    with pytest.raises(RulesInputMissing) as caught:
        assess(obs, 2)
    assert caught.value.field == "nodes.2.disk_free_alarm" and "is missing" in caught.value.problem


@pytest.mark.parametrize("revision", [0, 4, -1, True, 2.0, "2", None])
def test_an_unknown_revision_is_refused(revision):
    with pytest.raises(UnknownRulesRevision):
        assess(observation("INC-1001"), revision)


def test_summaries_and_signals_fit_the_contract_even_with_the_longest_names():
    long_queue, long_node = "q" * 255, "rabbit@" + "n" * 248
    cases = []
    for incident in IDS:
        obs = observation(incident)
        obs["queue"]["name"] = long_queue
        for node in obs["nodes"]:
            node["name"] = long_node
        cases.append(obs)
    crowded = observation("INC-1005")
    crowded["nodes"] = [dict(crowded["nodes"][0], name=f"{long_node[:-2]}{i:02}", mem_alarm=True, disk_free_alarm=True)
                        for i in range(16)]
    cases.append(crowded)
    for obs in cases:
        decided = assess(obs, 2)
        assert 1 <= len(decided["summary"]) <= 280, decided["summary"]
        assert len(decided["signals"]) <= 8 and all(len(signal) <= 120 for signal in decided["signals"])


# --------------------------------------------------------------------------- contract revision 2


def test_the_newest_contract_accepts_every_shipped_incident_under_every_rule_revision(tmp_path):
    for revision in RULES_REVISIONS:
        provider = labkit.ReferenceProvider(tmp_path / "calls.jsonl", rules_revision=revision)
        for incident in IDS:
            body = labkit.check_evidence(provider.read(incident), incident)
            assert body["contract"] == "queue-evidence/3"


def test_contract_revision_2_refuses_the_idle_state(tmp_path):
    body = json.loads(labkit.ReferenceProvider(tmp_path / "calls.jsonl").read("INC-1013"))
    body["queue"]["state"] = "idle"
    with pytest.raises(labkit.errors.EvidenceRejected) as caught:
        labkit.check_evidence(json.dumps(body), "INC-1013")
    assert (caught.value.field, caught.value.rule) == ("queue.state", "schema:enum")


def test_contract_revision_2_allows_a_shrinking_count_and_no_other_argument(tmp_path):
    body = json.loads(labkit.ReferenceProvider(tmp_path / "calls.jsonl").read("INC-1006"))
    assert body["queue"]["messages_details"]["rate"] < 0
    body["queue"]["arguments"]["x-message-ttl"] = 1000
    with pytest.raises(labkit.errors.EvidenceRejected) as caught:
        labkit.check_evidence(json.dumps(body), "INC-1006")
    assert caught.value.field == "queue.arguments.x-message-ttl"


def test_each_revision_has_its_own_schema_file():
    from jsonschema import Draft202012Validator

    assert schema_for(labkit.CONTRACT) == labkit.contract.SCHEMA_PATH
    first = json.loads(schema_for("queue-evidence/1").read_text(encoding="utf-8"))
    second = json.loads(schema_for("queue-evidence/2").read_text(encoding="utf-8"))
    third = json.loads(schema_for("queue-evidence/3").read_text(encoding="utf-8"))
    for schema in (first, second, third):
        Draft202012Validator.check_schema(schema)
    assert third["properties"]["contract"]["const"] == "queue-evidence/3"
    assert "required" not in third["properties"]["queue"]["properties"]["message_stats"], "counters are absent until they move"
    assert first["properties"]["contract"]["const"] == "queue-evidence/1"
    assert "idle" not in second["properties"]["queue"]["properties"]["state"]["enum"]
    assert {"unknown", "disk_alarm"} <= set(second["properties"]["diagnosis"]["properties"]["kind"]["enum"])
    with pytest.raises(ValueError):
        schema_for("queue-evidence/4")


def test_a_revision_1_response_still_validates_against_revision_1(tmp_path):
    """Stored evidence is re-checked against the revision that accepted it."""
    from jsonschema import Draft202012Validator

    body = json.loads(labkit.ReferenceProvider(tmp_path / "calls.jsonl").read("INC-1004"))
    old = {"contract": "queue-evidence/1", "incident": body["incident"], "observed_at": body["observed_at"], "node": body["node"],
           "queue": {key: body["queue"][key] for key in ("name", "vhost", "type", "state", "consumers", "consumer_capacity",
                                                        "messages_ready", "messages_unacknowledged", "message_stats")},
           "diagnosis": body["diagnosis"]}
    first = Draft202012Validator(json.loads(schema_for("queue-evidence/1").read_text(encoding="utf-8")))
    second = Draft202012Validator(json.loads(schema_for("queue-evidence/2").read_text(encoding="utf-8")))
    assert list(first.iter_errors(old)) == []
    assert list(second.iter_errors(old)) != []


# --------------------------------------------------------------------------- revision 3: what a live broker sends


def live(incident: str) -> dict:
    """An incident's observation as a live broker would shape it: only the counters that moved."""
    obs = observation(incident)
    stats = obs["queue"]["message_stats"]
    for name in list(stats):
        if stats[name]["rate"] == 0:
            del stats[name]
    return obs


def test_revision_3_agrees_with_ground_truth_on_every_incident_in_either_shape():
    known = truth()
    assert {i: assess(observation(i), 3)["kind"] for i in IDS} == known
    assert {i: assess(live(i), 3)["kind"] for i in IDS} == known, "an absent counter reads as one that has not moved"


def test_revision_3_reads_no_message_stats_as_nothing_moved():
    obs = observation("INC-1013")
    del obs["queue"]["message_stats"]
    assert assess(obs, 3)["kind"] == "false_alarm"
    with pytest.raises(RulesInputMissing):
        assess(obs, 2)
    obs["queue"]["message_stats"] = {"publish_details": "fast"}
    with pytest.raises(RulesInputMissing) as caught:
        assess(obs, 3)
    assert caught.value.field == "queue.message_stats.publish_details.rate", "a counter that is there is still read strictly"


def test_zombie_consumers_after_working_ones_are_an_outage_whatever_their_capacity():
    """A zombie's capacity is about 1e-7 on a live broker, and a quorum queue's is 1.0 with consumers (3.10.8)."""
    obs = observation("INC-1007")  # AMQP 1.0 receivers that never grant credit, after working: deliveries stopped
    for capacity in (0.0, 1e-7, 1.0):
        obs["queue"]["consumer_capacity"] = capacity
        assert assess(obs, 3)["kind"] == "consumer_outage", capacity
    obs["queue"]["consumer_capacity"] = 1e-7
    assert assess(obs, 2)["kind"] == "consumer_lag", "revision 2 wanted capacity exactly 0 and calls this lag"
    assert assess(obs, 1)["kind"] == "consumer_lag"
    working = copy.deepcopy(obs)
    working["queue"]["message_stats"]["deliver_get_details"]["rate"] = 20.0
    assert assess(working, 3)["kind"] == "consumer_lag", "consumers that take deliveries are slow, not gone"


def test_a_burst_draining_fast_is_healthy_though_the_rates_disagree():
    """A live broker's rates are sampled at different instants: publish - ack - change misses while draining."""
    obs = observation("INC-1006")
    obs["queue"]["messages_details"]["rate"] = -268.0  # acks 309.9/s, 22.8/s in: the count should fall 287/s
    assert assess(obs, 2)["kind"] == "unknown"
    decided = assess(obs, 3)
    assert decided["kind"] == "false_alarm" and "unexplained_rate=-19.1" in decided["signals"]
    obs["queue"]["messages_details"]["rate"] = 0.0  # the count stands still while acks outpace publishes by 287/s
    assert assess(obs, 3)["kind"] == "unknown", "disagreement beyond the slack is still unexplained"


def test_a_healthy_queue_acking_a_little_under_its_publish_rate_is_healthy():
    obs = observation("INC-1006")
    stats, queue = obs["queue"]["message_stats"], obs["queue"]
    stats["publish_details"]["rate"], stats["deliver_get_details"]["rate"], stats["ack_details"]["rate"] = 50.0, 48.6, 48.6
    queue["messages"], queue["messages_ready"], queue["messages_unacknowledged"] = 12, 0, 12
    queue["messages_details"]["rate"] = 0.0
    assert assess(obs, 2)["kind"] == "unknown", "revision 2 wants acks at least the publish rate, to the message"
    assert assess(obs, 3)["kind"] == "false_alarm"
    queue["messages_details"]["rate"] = 30.0
    stats["ack_details"]["rate"] = 20.0
    assert assess(obs, 3)["kind"] != "false_alarm", "a count growing 30/s is not keeping up"


def test_flow_far_below_the_memory_limit_is_not_memory_pressure():
    obs = observation("INC-1010")  # flow; its node near its watermark
    for node in obs["nodes"]:
        node["mem_used"] = int(node["mem_limit"] * 0.08)
    assert assess(obs, 1)["kind"] == "memory_alarm", "revision 1 reads flow as memory pressure"
    assert assess(obs, 3)["kind"] != "memory_alarm"


def test_a_stopped_node_is_skipped_and_counted_not_read():
    obs = observation("INC-1002")
    obs["nodes"][node_index(obs, "-c")] = {"name": obs["nodes"][node_index(obs, "-c")]["name"], "running": False}
    with pytest.raises(RulesInputMissing):
        assess(obs, 2)
    decided = assess(obs, 3)
    assert decided["kind"] == "consumer_lag" and "stopped_nodes=1" in decided["signals"]
    obs["nodes"][0]["running"] = "no"
    with pytest.raises(RulesInputMissing) as caught:
        assess(obs, 3)
    assert caught.value.field == "nodes.0.running"


def test_a_queue_on_a_down_node_is_unknown_from_its_identity_alone():
    obs = observation("INC-1002")
    obs["queue"] = {key: obs["queue"][key] for key in ("name", "vhost", "type", "arguments")} | {"state": "down"}
    decided = assess(obs, 3)
    assert decided["kind"] == "unknown" and "state=down" in decided["signals"]


def test_a_stream_is_not_judged_on_its_counts():
    obs = observation("INC-1013")
    obs["queue"]["type"], obs["queue"]["arguments"] = "stream", {"x-queue-type": "stream"}
    del obs["queue"]["consumer_capacity"]
    obs["queue"]["messages"] = obs["queue"]["messages_ready"] = 5000
    assert assess(obs, 3)["kind"] == "unknown", "a stream keeps what is read: 5000 messages is no backlog"
    obs["nodes"][0]["mem_alarm"] = True
    assert assess(obs, 3)["kind"] == "memory_alarm"
