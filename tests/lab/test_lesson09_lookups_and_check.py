"""Lesson 09's two claims issue 26 found unproven: a look-up with no answer is not "absent", and
the effects table refuses ``done`` without a ticket (its CHECK, not labkit's code, says so)."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest

import labkit
from labkit.database import transaction
from labkit.effects import find_effect_txn, operation_key, reconciliation_decision, record_intent_txn, resolve
from labkit.lab.exercises import reconciliation_trials
from labkit.store import create_run_txn
from labkit.ticket_client import KeyLookup

INC = "INC-1003"


@pytest.mark.parametrize("outcome", ["unknown", "refused", "cannot_query", "duplicate", "invalid"])
def test_a_look_up_that_settles_nothing_is_left_uncertain(outcome):
    assert reconciliation_decision(KeyLookup(outcome)) == "leave_uncertain"


def test_no_answer_and_a_refusal_keep_one_ticket_at_a_service_without_keys():
    """The real service, its look-up unanswered (a timeout) or refused (429): recovery leaves the
    effect uncertain, and the service, which keeps no keys, holds one ticket, not two."""
    trials = {trial.case: trial for trial in reconciliation_trials()}
    for case, said in (("no keys, look-up unanswered, killed after_send", "unknown"),
                       ("no keys, look-up refused, killed after_send", "refused")):
        trial = trials[case]
        assert trial.asked[0] == said, trial
        assert (trial.state, trial.tickets, trial.broken) == ("uncertain", 1, ()), trial
        assert trial.again_unchanged, trial


def test_a_judge_that_refuses_a_case_ends_the_trials_there():
    """Exercise 9.1's check judges each case as it is recovered: a wrong answer hears about its first failing case
    without the later ones being recovered (their recoveries never ask the look-up's decision)."""
    from labkit.lab.exercises.lesson09_external_effects import RECONCILIATION_CASES

    judged, asked, asked_when_judged = [], [], []

    def decide(lookup):
        asked.append(lookup.outcome)
        return reconciliation_decision(lookup)

    def judge(trial):
        judged.append(trial.case)
        asked_when_judged.append(len(asked))
        if len(judged) == 2:
            raise AssertionError(f"refused {trial.case}")

    second = RECONCILIATION_CASES[1][0]
    with pytest.raises(AssertionError, match=f"refused {second}"):
        reconciliation_trials(decide, judge=judge)
    assert judged == [RECONCILIATION_CASES[0][0], second]
    assert 0 < asked_when_judged[0] < asked_when_judged[1] == len(asked)  # nothing was asked after the refusal


def test_labkit_s_own_decision_reached_at_run_time_is_refused_at_the_first_case_that_asks_it():
    """Exercise 9.1's check watches labkit's decision while each case recovers: an answer that reaches it under a
    name built at run time is refused after the first case that asked, not after all eight (each on a live service)."""
    from labkit.lab.exercises import check_reconciliation
    from labkit.lab.exercises.lesson09_external_effects import RECONCILIATION_CASES

    asked = []

    def decide(lookup):
        asked.append(lookup.outcome)
        return getattr(labkit.effects, "reconciliation_" + "decision")(lookup)

    with pytest.raises(AssertionError, match="write it yourself: your answer called labkit's own") as refused:
        check_reconciliation(decide)
    assert RECONCILIATION_CASES[0][0] not in str(refused.value)  # the refusal, not a case's feedback
    assert len(asked) == 1, asked  # the first case's first recovery asked once; nothing ran after it


def test_the_effects_table_refuses_done_without_a_ticket(lab):
    with closing(lab.connect()) as conn:
        with transaction(conn):
            create_run_txn(conn, INC, labkit.WORKFLOW_VERSION, lab.clock)
            record_intent_txn(conn, INC, operation_key(INC, labkit.WORKFLOW_VERSION), {"incident": INC}, lab.clock)
        with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
            conn.execute("UPDATE effects SET state = 'done' WHERE incident = ?", (INC,))
        conn.execute("UPDATE effects SET state = 'done', ticket = 'T-0001' WHERE incident = ?", (INC,))  # with one: allowed


def test_a_resolution_keeps_the_ticket_and_the_reason_on_the_row(lab):
    with closing(lab.connect()) as conn:
        with transaction(conn):
            create_run_txn(conn, INC, labkit.WORKFLOW_VERSION, lab.clock)
            record_intent_txn(conn, INC, operation_key(INC, labkit.WORKFLOW_VERSION), {"incident": INC}, lab.clock)
        conn.execute("UPDATE effects SET state = 'uncertain', attempts = 1 WHERE incident = ?", (INC,))
    resolved = resolve(lab.db, INC, "T-0001", "the service lists T-0001", lab.clock)
    with closing(lab.connect()) as conn, transaction(conn):
        stored = find_effect_txn(conn, INC)
    assert stored is not None
    assert (resolved.state, stored.state, stored.ticket, stored.reason) == (
        "resolved", "resolved", "T-0001", "the service lists T-0001")
