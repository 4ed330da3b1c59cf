"""Lesson 07 (07_evidence_contract): a contract rule that catches counts which contradict each other.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...contract import check_evidence
from ...coordinator import decision_inputs_of
from ...errors import EvidenceRejected
from ...provider import ReferenceProvider, call_log_for, list_incidents
from ..catalogue import CannedProvider, measure_inspection
from .runner import answer_is_a_function, clear_trials, new_trial, one_line


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


def _counts_that_contradict() -> list[tuple[str, bytes]]:
    """Answers the contract accepts whose counts disagree: messages != ready + unacknowledged.

    Each is a valid answer of the reference provider with one count changed, so that
    every field alone is still in range: too many messages, too few, and a second way to too few.
    """
    log = new_trial("07-answers").folder / "reference-calls.jsonl"
    made = []
    for incident, field, change in (("INC-1001", "messages", +1000), ("INC-1002", "messages_unacknowledged", +3600),
                                    ("INC-1011", "messages_ready", +24)):
        body = json.loads(ReferenceProvider(log).read(incident))
        body["queue"][field] += change
        raw = json.dumps(body, indent=1).encode("utf-8")
        check_evidence(raw, incident)  # the schema lets it through: that is the point
        queue = body["queue"]
        shown = (f"{incident} with messages {queue['messages']}, but messages_ready + messages_unacknowledged = "
                 f"{queue['messages_ready']} + {queue['messages_unacknowledged']}")
        made.append((shown, raw))
    return made


def _judge(rule: Callable, body: dict, what: str) -> str | None:
    try:
        said = rule(copy.deepcopy(body))
    except Exception as error:  # the learner's error, as one line of feedback
        raise AssertionError(f"your rule raised {type(error).__name__}: {error} on {what}") from None
    if said is not None and not (isinstance(said, str) and said.strip()):
        raise AssertionError(f"your rule returned {said!r} on {what}: return None to accept, or the problem in words (a str)")
    return said


@one_line
def check_contract_rule(rule: Callable[[dict], str | None]) -> None:
    """``rule(body) -> str | None``: a contract rule that catches counts that contradict each other.

    1. it must accept the valid answer of every shipped incident, under both rules revisions;
    2. it must refuse each answer of :func:`_counts_that_contradict`, which the schema accepts;
    3. run for real: a canned provider answers the first of those on a fresh workspace, the
       coordinator inspects with the rule applied (:func:`inspect_with_rule`), and the run's
       step, its evidence and the database's bytes must be unchanged, the call logged.
    """
    clear_trials()
    answer_is_a_function(rule, "def my_rule(body): ...")
    log = new_trial("07-answers").folder / "reference-calls.jsonl"
    honest = 0
    for revision in (1, 2):
        provider = ReferenceProvider(log, rules_revision=revision)
        for incident in list_incidents():
            what = f"{incident}'s valid answer (rules revision {revision})"
            said = _judge(rule, check_evidence(provider.read(incident), incident), what)
            if said is not None:
                raise AssertionError(
                    f"your rule refused {what}: {said!r}. A rule must accept every honest answer: "
                    "refuse only what cannot be true"
                )
            honest += 1
    print(f"✓ accepts all {honest} valid answers of the {honest // 2} shipped incidents (rules revisions 1 and 2)")
    hostile = _counts_that_contradict()
    for shown, raw in hostile:
        said = _judge(rule, json.loads(raw), f"the answer of {shown}")
        if said is None:
            raise AssertionError(
                f"your rule accepted the answer of {shown}. The schema checks each count alone; "
                "your rule must compare them"
            )
    print(f"✓ refuses all {len(hostile)} answers whose counts contradict each other (the schema accepted each)")
    trial = new_trial("07-exercise")
    shown, raw = hostile[0]
    result = inspect_with_rule(trial.db, raw, rule, clock=trial.clock)
    assert result.rule == f"learner-rule:{getattr(rule, '__name__', 'rule')}", (
        f"through the coordinator, the answer of {shown} was {result.message or 'accepted'}"
    )
    unchanged = (result.step_before == result.step_after and result.evidence_before == result.evidence_after == 0
                 and result.database_unchanged and result.provider_calls == 1)
    assert unchanged, f"the refusal changed something: {result.row()}"
    print(f"✓ through the coordinator: refused by rule {result.rule} before any write; step {result.step_after.value}, "
          "no evidence row, database bytes unchanged, the call in the provider's log")
