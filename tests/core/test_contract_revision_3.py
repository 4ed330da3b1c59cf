"""Contract revision 3: what a live RabbitMQ sends is accepted as it is, by the contract's rules, never repaired.

Each shape here is one a RabbitMQ 3.10.8 answered with (issue 22): counters absent from
``message_stats`` until they move, ``consumer_capacity`` the integer 0 without consumers and absent
on a stream, a stopped cluster node with only its name and ``running: false``, a queue on a down node
with only its identity and state. Revision 2 refused each of them; each test checks both.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

import labkit
from labkit.contract import check_evidence, schema_for
from labkit.errors import EvidenceRejected

INC = "INC-1013"  # an idle classic queue: no consumers, nothing moving


@pytest.fixture
def good(tmp_path: Path) -> dict:
    return json.loads(labkit.ReferenceProvider(tmp_path / "calls.jsonl").read(INC))


def revision_2_refuses(body: dict) -> bool:
    old = copy.deepcopy(body)
    old["contract"] = "queue-evidence/2"
    schema = json.loads(schema_for("queue-evidence/2").read_text(encoding="utf-8"))
    return any(True for _ in Draft202012Validator(schema).iter_errors(old))


def accepted(body: dict) -> dict:
    checked = check_evidence(json.dumps(body), INC)
    assert checked == body, "the contract returns what it was given: it fills nothing in"
    return checked


def refused(body: dict) -> EvidenceRejected:
    with pytest.raises(EvidenceRejected) as caught:
        check_evidence(json.dumps(body), INC)
    return caught.value


def test_a_queue_never_consumed_from_reports_only_its_publish_counter(good):
    good["queue"]["message_stats"] = {"publish_details": {"rate": 2.0}}
    assert accepted(good)["queue"]["message_stats"] == {"publish_details": {"rate": 2.0}}
    assert revision_2_refuses(good)


def test_a_queue_never_published_to_has_no_message_stats(good):
    del good["queue"]["message_stats"]
    assert "message_stats" not in accepted(good)["queue"]
    assert revision_2_refuses(good)


def test_a_counter_that_is_there_is_still_checked(good):
    good["queue"]["message_stats"] = {"publish_details": {"rate": -1.0}}
    problem = refused(good)
    assert (problem.field, problem.rule) == ("queue.message_stats.publish_details.rate", "schema:minimum")
    good["queue"]["message_stats"] = {"publish_details": {}}
    assert refused(good).field == "queue.message_stats.publish_details.rate"


def test_capacity_is_the_integer_0_without_consumers_and_absent_only_on_a_stream(good):
    good["queue"]["consumer_capacity"] = 0
    accepted(good)
    del good["queue"]["consumer_capacity"]
    problem = refused(good)
    assert (problem.field, problem.rule) == ("queue.consumer_capacity", "schema:required"), "a classic queue reports it"
    good["queue"]["type"] = "stream"
    good["queue"]["arguments"] = {"x-queue-type": "stream"}
    accepted(good)
    assert revision_2_refuses(good)


def test_a_stopped_node_reports_its_name_and_that_it_is_not_running(good):
    good["nodes"].append({"name": "rabbit@lab-2", "running": False})
    accepted(good)
    assert revision_2_refuses(good)


def test_a_stopped_node_that_reports_memory_is_refused(good):
    good["nodes"].append({"name": "rabbit@lab-2", "running": False, "mem_used": 1})
    problem = refused(good)
    assert (problem.field, problem.rule) == (f"nodes.{len(good['nodes']) - 1}", "schema:maxProperties")
    assert "stopped node" in str(problem)


def test_a_running_node_must_still_report_its_memory_and_alarms(good):
    good["nodes"].append({"name": "rabbit@lab-2", "running": True})
    last = f"nodes.{len(good['nodes']) - 1}"
    problem = refused(good)
    assert (problem.field, problem.rule) == (f"{last}.mem_used", "schema:required")
    good["nodes"][-1] = {"name": "rabbit@lab-2"}
    assert refused(good).field == f"{last}.mem_used", "a node that does not say it is stopped is running"


def test_a_queue_on_a_down_node_reports_only_its_identity_and_state(good):
    good["node"] = {"name": good["node"]["name"], "running": False}
    good["nodes"] = [{"name": good["node"]["name"], "running": False}, {"name": "rabbit@lab-2", "running": True, "mem_used": 1,
                     "mem_limit": 2, "mem_alarm": False, "disk_free_alarm": False}]
    queue = good["queue"]
    good["queue"] = {"name": queue["name"], "vhost": queue["vhost"], "type": "classic", "state": "down", "arguments": {}}
    accepted(good)
    assert revision_2_refuses(good)


def test_a_queue_that_is_up_must_report_its_counts(good):
    del good["queue"]["messages_ready"]
    problem = refused(good)
    assert (problem.field, problem.rule) == ("queue.messages_ready", "schema:required")
    good["queue"]["state"] = "stopped"
    accepted(good)


def test_what_is_absent_reaches_the_rules_absent(tmp_path):
    """Revisions 1 and 2 cannot read an absent counter and say which; revision 3 reads it as not moved."""
    body = json.loads(labkit.ReferenceProvider(tmp_path / "calls.jsonl").read("INC-1001"))
    observation = {key: value for key, value in body.items() if key != "diagnosis"}
    observation["queue"]["message_stats"] = {"publish_details": {"rate": 41.3}}
    for revision in (1, 2):
        with pytest.raises(labkit.errors.RulesInputMissing) as caught:
            labkit.rules.assess(observation, revision)
        assert caught.value.field == "queue.message_stats.deliver_get_details.rate"
    assert labkit.rules.assess(observation, 3)["kind"] == "consumer_outage"
