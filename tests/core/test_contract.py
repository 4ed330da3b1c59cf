"""The evidence contract: a provider response is data, not permission; nothing is repaired."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import labkit
from labkit.contract import MAX_RESPONSE_BYTES, check_evidence
from labkit.jsontext import canonical_json
from labkit.store import evidence_digest

INC = "INC-1003"


@pytest.fixture
def good(tmp_path: Path) -> dict:
    """A response the reference provider really gives, parsed."""
    raw = labkit.ReferenceProvider(tmp_path / "calls.jsonl").read(INC)
    return json.loads(raw)


def encode(body) -> bytes:
    return json.dumps(body).encode("utf-8")


def rejected(raw, incident: str = INC) -> labkit.errors.EvidenceRejected:
    with pytest.raises(labkit.errors.EvidenceRejected) as caught:
        check_evidence(raw, incident)
    assert caught.value.incident == incident
    assert caught.value.field in str(caught.value)
    assert "\n" not in str(caught.value), "the command line prints it as one line"
    return caught.value


def test_a_real_response_is_accepted_unchanged(good):
    body = check_evidence(encode(good), INC)
    assert body == good, "the contract returns what it was given: it repairs nothing"
    assert body["contract"] == labkit.CONTRACT
    assert check_evidence(json.dumps(good), INC) == good  # str is accepted too


def test_digest_is_of_the_canonical_form(good):
    import hashlib

    reordered = json.loads(json.dumps(good, sort_keys=True))
    assert evidence_digest(good) == evidence_digest(reordered)
    assert evidence_digest(good) == hashlib.sha256(canonical_json(good).encode("utf-8")).hexdigest()
    changed = copy.deepcopy(good)
    changed["queue"]["messages_ready"] += 1
    assert evidence_digest(changed) != evidence_digest(good)


def mutate(good: dict, path: str, value=..., delete: bool = False) -> dict:
    body = copy.deepcopy(good)
    *parents, last = path.split(".")
    target = body
    for part in parents:
        target = target[part]
    if delete:
        del target[last]
    else:
        target[last] = value
    return body


CASES = [
    # (id, path, value, delete, field named, words in the problem)
    ("missing-consumers", "queue.consumers", None, True, "queue.consumers", "missing"),
    ("missing-diagnosis", "diagnosis", None, True, "diagnosis", "missing"),
    ("negative-ready", "queue.messages_ready", -1, False, "queue.messages_ready", "minimum"),
    ("negative-rate", "queue.message_stats.ack_details.rate", -0.5, False, "queue.message_stats.ack_details.rate", "minimum"),
    ("capacity-above-one", "queue.consumer_capacity", 1.5, False, "queue.consumer_capacity", "maximum"),
    ("string-count", "queue.consumers", "3", False, "queue.consumers", "integer"),
    ("float-count", "queue.messages_unacknowledged", 2.5, False, "queue.messages_unacknowledged", "integer"),
    ("unknown-kind", "diagnosis.kind", "all_good_trust_me", False, "diagnosis.kind", "not one of"),
    ("unknown-state", "queue.state", "exploded", False, "queue.state", "not one of"),
    ("wrong-contract", "contract", "queue-evidence/2", False, "contract", "queue-evidence/3"),
    ("extra-top-level", "next_step", "report_completed", False, "next_step", "not part of the contract"),
    ("extra-nested", "queue.approve", True, False, "queue.approve", "not part of the contract"),
    ("bad-time", "observed_at", "yesterday", False, "observed_at", ""),
    ("long-summary", "diagnosis.summary", "x" * 281, False, "diagnosis.summary", "longer than"),
]


@pytest.mark.parametrize(("path", "value", "delete", "field", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_broken_field_is_rejected_by_name(good, path, value, delete, field, words):
    error = rejected(encode(mutate(good, path, value, delete)))
    assert error.field == field
    assert words in error.problem


def test_a_response_about_another_incident_is_rejected(good):
    error = rejected(encode(good), "INC-1004")
    assert error.field == "incident" and INC in error.problem


def test_not_json_and_not_utf8_are_rejected_as_a_whole():
    assert rejected(b"<html>502 Bad Gateway</html>").field == "(response)"
    assert "not JSON" in rejected(b"{").problem
    assert "UTF-8" in rejected(b"\xff\xfe{}").problem
    assert rejected(b"[1, 2, 3]").field == "(response)"


def test_the_size_limit_is_exact(good):
    raw = encode(good)
    at_limit = raw + b" " * (MAX_RESPONSE_BYTES - len(raw))  # JSON allows trailing whitespace
    assert len(at_limit) == MAX_RESPONSE_BYTES
    assert check_evidence(at_limit, INC) == good
    error = rejected(at_limit + b" ")
    assert error.field == "(response)"
    assert str(MAX_RESPONSE_BYTES) in error.problem and str(MAX_RESPONSE_BYTES + 1) in error.problem


def test_the_schema_is_the_one_shipped_with_labkit():
    schema = json.loads(labkit.contract.SCHEMA_PATH.read_text(encoding="utf-8"))
    assert schema["properties"]["contract"]["const"] == labkit.CONTRACT
    assert schema["additionalProperties"] is False
