"""Lesson 07's claims and exercise checks, beside the notebook's compared cells.

- An evidence row names the adapter that answered (its decision inputs), never what its answer says.
- Exercise 7.1's check draws new answers on every try: a rule that remembers earlier answers,
  or refuses whatever differs from the reference provider, fails; the solution passes every draw.
- Exercise 7.2's feedback gives a hint for each miss and never the contract's answer.
"""

from __future__ import annotations

import json

import pytest

import labkit
from labkit.lab.catalogue import CannedProvider
from labkit.lab.exercises.lesson07_evidence_contract import (
    PREDICTION_HINTS,
    check_contract_rule,
    check_predictions,
    prediction_answers,
)


def test_the_evidence_row_names_the_adapter_that_answered(lab, conn):
    valid = lab.provider().read("INC-1001")
    lab.coordinator(conn, provider=CannedProvider(lab.call_log, {"INC-1001": valid})).drive("INC-1001")
    lab.coordinator(conn, provider=labkit.ReferenceProvider(lab.call_log, rules_revision=2)).drive("INC-1011")
    rows = conn.execute("SELECT incident, contract, provider, rules_revision, prompt_revision FROM evidence ORDER BY incident")
    assert [tuple(row) for row in rows] == [
        ("INC-1001", "queue-evidence/3", "canned", None, None),
        ("INC-1011", "queue-evidence/3", "reference-rules", 2, None),
    ]


def solution(body):
    queue = body["queue"]
    if queue["messages"] != queue["messages_ready"] + queue["messages_unacknowledged"]:
        return "messages is not messages_ready + messages_unacknowledged"


def remembers(body):
    queue = body["queue"]
    seen = (body["incident"], queue["messages"], queue["messages_ready"], queue["messages_unacknowledged"])
    if seen in {("INC-1001", 49112, 48112, 0), ("INC-1002", 183850, 183450, 4000), ("INC-1011", 24, 24, 24)}:
        return "the counts contradict each other"


def differs_from_the_reference(body):
    import pathlib
    import tempfile

    log = pathlib.Path(tempfile.mkdtemp()) / "calls.jsonl"
    honest = json.loads(labkit.ReferenceProvider(log).read(body["incident"]))
    if body["queue"] != honest["queue"]:
        return "not what the reference provider says"


def only_too_many(body):
    queue = body["queue"]
    if queue["messages"] > queue["messages_ready"] + queue["messages_unacknowledged"]:
        return "too many messages"


@pytest.mark.parametrize("seed", range(6))
def test_the_solution_passes_every_draw(seed, capsys):
    check_contract_rule(solution, seed=seed)
    assert capsys.readouterr().out.count("✓") == 3


@pytest.mark.parametrize(("rule", "words"), [
    (remembers, "your rule must compare them"),
    (differs_from_the_reference, "not only the reference provider's"),
    (only_too_many, "too few messages"),
], ids=["remembers", "differs-from-the-reference", "only-too-many"])
@pytest.mark.parametrize("seed", range(4))
def test_a_shortcut_fails_every_draw_with_its_hint(rule, words, seed):
    with pytest.raises(AssertionError) as failed:
        check_contract_rule(rule, seed=seed)
    assert words in str(failed.value)


def test_two_tries_draw_different_answers(capsys):
    seen = []

    def recording(body):
        seen.append(json.dumps(body["queue"], sort_keys=True))
        return solution(body)

    check_contract_rule(recording)
    first = set(seen)
    seen.clear()
    check_contract_rule(recording)
    assert set(seen) != first


def test_a_wrong_prediction_gets_a_hint_and_never_the_answer(lab):
    valid = lab.provider().read("INC-1001")
    said = {}
    for letter, raw in prediction_answers(valid).items():
        try:
            labkit.check_evidence(raw, "INC-1001")
            said[letter] = "accepted"
        except labkit.errors.EvidenceRejected as error:
            said[letter] = error.rule
    wrong = {"A": "same-incident", "B": "schema:enum", "C": "accepted", "D": "json-syntax"}
    with pytest.raises(AssertionError) as failed:
        check_predictions(wrong, valid)
    message = str(failed.value)
    assert message.startswith("1 of 4 right. Look again at A, B, D.")
    for letter in "ABD":
        assert PREDICTION_HINTS[letter] in message
        assert said[letter] not in message, f"the feedback gives away {letter}'s answer"


def test_the_right_predictions_pass(lab, capsys):
    valid = lab.provider().read("INC-1001")
    check_predictions({"A": "no-nan-or-infinity", "B": "accepted", "C": "accepted", "D": "size-limit"}, valid)
    assert "✓" in capsys.readouterr().out
