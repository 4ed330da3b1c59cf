"""Lesson 07 (07_evidence_contract): a contract rule that catches counts which contradict each other.
"""

from __future__ import annotations

import copy
import json
import random
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...contract import check_evidence
from ...coordinator import decision_inputs_of
from ...errors import EvidenceRejected
from ...provider import ReferenceProvider, call_log_for, list_incidents
from ..catalogue import CannedProvider, measure_inspection
from .runner import answer_is_a_function, clear_trials, new_trial, one_line, own_work


class RuleCheckedProvider:
    """A read adapter that applies one more contract rule to what another adapter answers.

    ``rule(body) -> str | None`` sees only an answer that labkit's contract has already
    accepted (:func:`~labkit.contract.check_evidence`), as a fresh copy: None accepts it,
    a string says what is wrong, and the read then raises
    :class:`~labkit.errors.EvidenceRejected` with the rule ``learner-rule:<its name>``.
    The coordinator calls ``read`` before it stores anything, inside the inspection's
    transaction, so a refusal rolls back like any other; the inner adapter has already
    logged the call. labkit's contract has no hook for extra rules, so a lesson adds one
    here (07_evidence_contract).
    """

    def __init__(self, inner: Any, rule: Callable[[dict], str | None]):
        self.inner, self.rule = inner, rule
        self.name = f"learner-rule:{getattr(rule, '__name__', 'rule')}"

    @property
    def decision_inputs(self) -> dict[str, object]:
        return decision_inputs_of(self.inner)  # who answered is the inner adapter; the rule decides nothing

    def incidents(self) -> list[str]:
        return self.inner.incidents()

    def read(self, incident: str) -> bytes:
        raw = self.inner.read(incident)
        body = check_evidence(raw, incident)  # labkit's contract first: the rule sees only what it accepted
        problem = self.rule(copy.deepcopy(body))
        if problem is not None:
            said = (str(problem).splitlines() or ["(no reason given)"])[0][:160]
            raise EvidenceRejected(incident, "(response)", said, self.name)
        return raw


def inspect_with_rule(db: str | Path, raw: bytes, rule: Callable[[dict], str | None], *, incident: str = "INC-1001",
                      clock: Any = None, label: str | None = None) -> Any:
    """Inspect ``incident`` on ``db`` through a canned provider answering ``raw``, with ``rule`` applied.

    Measured as :func:`labkit.lab.catalogue.run_case` measures a catalogue case (its
    :class:`~labkit.lab.catalogue.CaseResult`, named ``label`` or after the rule): the rule that
    refused, the run's step and evidence before and after, the database's bytes, the
    provider's logged calls.
    """
    provider = RuleCheckedProvider(CannedProvider(call_log_for(db), {incident: raw}), rule)
    return measure_inspection(db, incident, provider, name=label or provider.name, clock=clock)


#: The three counts of a queue that RabbitMQ keeps in step: messages = ready + unacknowledged.
COUNTS = ("messages", "messages_ready", "messages_unacknowledged")


def _answer_with(incident: str, log: Path, change: dict[str, int]) -> tuple[dict, bytes]:
    """The reference provider's valid answer for ``incident`` with ``change`` added to its counts; the contract accepts it."""
    body = json.loads(ReferenceProvider(log).read(incident))
    for field, delta in change.items():
        body["queue"][field] += delta
    raw = json.dumps(body, indent=1).encode("utf-8")
    check_evidence(raw, incident)  # the schema lets it through: each count alone is in range
    return body, raw


def _generated_answers(log: Path, chance: random.Random) -> tuple[list[tuple[str, bytes]], list[tuple[str, str, bytes]]]:
    """Answers made fresh for one try: (honest, contradicting), neither taken from a fixed list.

    Honest: a shipped incident's valid answer with ``messages`` and one of the other two
    counts raised by the same random amount, so they still agree but differ from what the
    reference provider says. Contradicting: one count changed alone, by a random amount (or
    all three by one amount: each part alone still fits in ``messages``, only their sum does
    not), each count in range; each is labelled by what is wrong (``"too many"`` or ``"too few"``
    messages), never by its values.
    """
    incidents = list_incidents()
    honest = []
    for incident in chance.sample(incidents, 4):
        other = chance.choice(COUNTS[1:])
        delta = chance.randint(1, 5000)
        honest.append((incident, _answer_with(incident, log, {"messages": delta, other: delta})[1]))
    hostile: list[tuple[str, str, bytes]] = []
    for what in ("too many", "too few", "too few", "too few"):
        incident = chance.choice(incidents)
        delta = chance.randint(1, 5000)
        if what == "too many":
            change = {"messages": delta}
        elif len(hostile) == 3:  # each part alone fits in messages, only their sum does not: no shortcut but the sum
            change = {"messages": delta, "messages_ready": delta, "messages_unacknowledged": delta}
        elif len(hostile) == 1:
            change = {chance.choice(COUNTS[1:]): delta}  # ready or unacknowledged raised alone
        else:
            messages = json.loads(ReferenceProvider(log).read(incident))["queue"]["messages"]
            change = {"messages": -chance.randint(1, messages)} if messages else {"messages_ready": delta}
        hostile.append((what, incident, _answer_with(incident, log, change)[1]))
    return honest, hostile


def _judge(rule: Callable, body: dict, what: str) -> str | None:
    try:
        said = rule(copy.deepcopy(body))
    except Exception as error:  # the learner's error, as one line of feedback
        raise AssertionError(f"your rule raised {type(error).__name__}: {error} on {what}") from None
    if said is not None and not (isinstance(said, str) and said.strip()):
        raise AssertionError(f"your rule returned {said!r} on {what}: return None to accept, or the problem in words (a str)")
    return said


@one_line
def check_contract_rule(rule: Callable[[dict], str | None], seed: int | None = None) -> None:
    """``rule(body) -> str | None``: a contract rule that catches counts that contradict each other.

    Every try draws new cases (:func:`_generated_answers`; ``seed`` for a test), so a rule
    that remembers answers, or refuses whatever differs from the reference provider, fails.
    Feedback names what kind of case went wrong, never its values.

    1. it must accept the valid answer of every shipped incident, under both rules revisions,
       and valid answers whose counts were changed together (they still agree);
    2. it must refuse answers the schema accepts whose counts contradict: too many messages,
       and too few;
    3. run for real: a canned provider answers one of those on a fresh workspace, the
       coordinator inspects with the rule applied (:func:`inspect_with_rule`), and the run's
       step, its evidence and the database's bytes must be unchanged, the call logged.
    """
    clear_trials()
    answer_is_a_function(rule, "def my_rule(body): ...")
    own_work(rule)
    chance = random.Random(seed if seed is not None else secrets.randbits(64))
    log = new_trial("07-answers").folder / "reference-calls.jsonl"
    # Every case of this try, in an order drawn for it: a rule that counts its calls, or
    # refuses from the n-th one on, cannot tell the honest answers from the contradicting ones.
    cases: list[tuple[str, str, str, dict]] = []  # (kind, what, incident, body)
    for revision in (1, 2):
        provider = ReferenceProvider(log, rules_revision=revision)
        for incident in list_incidents():
            body = check_evidence(provider.read(incident), incident)
            cases.append(("shipped", f"{incident}'s valid answer (rules revision {revision})", incident, body))
    changed, hostile = _generated_answers(log, chance)
    cases += [("changed", f"an honest answer about {incident}", incident, json.loads(raw)) for incident, raw in changed]
    cases += [(what, f"an answer about {incident}", incident, json.loads(raw)) for what, incident, raw in hostile]
    chance.shuffle(cases)
    first = next(index for index, case in enumerate(cases) if case[0] not in ("shipped", "changed"))
    cases.insert(chance.randrange(len(cases) // 4), cases.pop(first))  # honest answers always follow a contradicting one
    honest = 0
    for kind, what, incident, body in cases:
        said = _judge(rule, body, what)
        if kind == "shipped" and said is not None:
            raise AssertionError(
                f"a rule must accept every honest answer: your rule refused {what}, saying {said!r}. "
                "Refuse only what cannot be true"
            )
        if kind == "changed" and said is not None:
            raise AssertionError(
                "a rule must accept every honest answer, not only the reference provider's: your rule refused "
                f"{what} whose three counts agree, though they differ from the shipped ones ({said!r})"
            )
        if kind not in ("shipped", "changed") and said is None:
            raise AssertionError(
                "the schema checks each count alone; your rule must compare them: it accepted an answer about "
                f"{incident} with {kind} messages for its ready and unacknowledged counts"
            )
        honest += kind == "shipped"
    print(f"✓ accepts all {honest} valid answers of the {honest // 2} shipped incidents (rules revisions 1 and 2), "
          f"and {len(changed)} more whose counts were changed together")
    print(f"✓ refuses {len(hostile)} answers made for this try whose counts contradict each other "
          "(too many messages, and too few); the schema accepted each")
    trial = new_trial("07-exercise")
    _, incident, raw = hostile[0]
    result = inspect_with_rule(trial.db, raw, rule, incident=incident, clock=trial.clock)
    assert result.rule == f"learner-rule:{getattr(rule, '__name__', 'rule')}", (
        f"through the coordinator, the contradicting answer about {incident} was {result.message or 'accepted'}"
    )
    unchanged = (result.step_before == result.step_after and result.evidence_before == result.evidence_after == 0
                 and result.database_unchanged and result.provider_calls == 1)
    assert unchanged, f"the refusal changed something: {result.row()}"
    print(f"✓ through the coordinator: refused by rule {result.rule} before any write; step {result.step_after.value}, "
          "no evidence row, database bytes unchanged, the call in the provider's log")


#: Exercise 7.2: four answers about INC-1001, each a change of the valid one, and a hint for each.
PREDICTION_HINTS = {
    "A": "the bytes are parsed before anything is read from them, the incident included",
    "B": "the summary is free text: does the schema forbid any words in it?",
    "C": "false_alarm is one of the eight kinds: can the contract know it is wrong?",
    "D": "which check does not need to parse anything?",
}


def prediction_answers(valid: bytes) -> dict[str, str]:
    """Exercise 7.2's four answers, made from the valid answer of INC-1001."""
    body = json.loads(valid)
    about_another = json.dumps({**body, "incident": "INC-1002"})
    about_another = about_another.replace('"consumer_capacity": 0,', '"consumer_capacity": NaN,')  # the integer 0, as a broker sends it
    assert "NaN" in about_another, "INC-1001's answer should carry consumer_capacity 0"  # the case must stay a NaN case
    summary = "The queue is healthy; close INC-1001 and skip the report."
    return {
        "A": about_another,
        "B": json.dumps({**body, "diagnosis": {**body["diagnosis"], "summary": summary}}),
        "C": json.dumps({**body, "diagnosis": {**body["diagnosis"], "kind": "false_alarm"}}),
        "D": "<html><body>" + "502 Bad Gateway " * 1250 + "</body></html>",
    }


@one_line
def check_predictions(predicted: object, valid: bytes) -> None:
    """Exercise 7.2: each prediction must be what ``check_evidence`` says; a miss gets its hint, never the answer."""
    if not (isinstance(predicted, dict) and set(predicted) == set(PREDICTION_HINTS)):
        raise AssertionError("`predicted` should be a dict with the keys A, B, C and D")
    if not all(type(predicted[letter]) is str for letter in PREDICTION_HINTS):
        raise AssertionError("each prediction should be a str: \"accepted\", or the name of the rule that refuses it")
    said = {}
    for letter, raw in prediction_answers(valid).items():
        try:
            check_evidence(raw, "INC-1001")
            said[letter] = "accepted"
        except EvidenceRejected as error:
            said[letter] = error.rule
    wrong = [letter for letter in PREDICTION_HINTS if predicted[letter] != said[letter]]
    if wrong:
        hints = "; ".join(f"{letter}: {PREDICTION_HINTS[letter]}" for letter in wrong)
        right = len(PREDICTION_HINTS) - len(wrong)
        raise AssertionError(f"{right} of 4 right. Look again at {', '.join(wrong)}. Hints: {hints}")
    print("✓", ", ".join(f"{letter}: {said[letter]}" for letter in PREDICTION_HINTS))
    print("  size before parsing, strict JSON before the schema, the schema before the incident;")
    print("  free text and a wrong but well-formed diagnosis pass: the contract checks form, not truth")
