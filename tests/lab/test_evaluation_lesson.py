"""13_evaluation's five databases, and Exercise 13.1's check: what each case shows, and each slip's feedback.

``tests/lab/test_exercises.py`` proves that the check passes its solution and fails every shortcut;
these prove that it fails each one *for the reason it names*, that an answer cannot write through
the connection it is given, and that the cases the lesson's ship gate shows hold what its text says.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest

import labkit
from labkit.evaluation import evaluate
from labkit.lab.exercises import check_task_accuracy, evaluation_cases
from labkit.store import connect_readonly, snapshot


@pytest.fixture(scope="module")
def cases():
    """The five databases, made once for this module (children killed, a real ticket service): about 2 s."""
    return {case.name: case for case in evaluation_cases()}


def test_each_case_holds_what_the_ship_gate_says(cases):
    cards = {name: evaluate(case.db, ticket_store=case.ticket_store) for name, case in cases.items()}
    wrong = cards["recovered, diagnosed wrongly"]
    assert (wrong.task.correct, wrong.task.scored) == (1, 3)
    assert (wrong.recovery.completed, wrong.recovery.duplicate_receipts, wrong.recovery.rereads) == (3, 0, 0)
    naive = cards["naive recovery, two tickets"]
    assert naive.task.accuracy == 1.0 and naive.recovery.duplicate_effects == 1
    early = cards["evaluated before recovery"]
    assert (early.task.correct, early.task.scored, early.task.unscored["no_assessment"]) == (1, 2, ["INC-1004"])
    assert early.recovery.unfinished == ["INC-1004", "INC-1007"]
    revised = cards["re-evaluated"]
    assert revised.task.accuracy == 1.0 and revised.task_original is not None and revised.task_original.correct == 1
    fresh = cards["nothing inspected yet"]
    assert fresh.task.accuracy is None and fresh.recovery.completed == 0


# The learner's answers, as a learner would write them (the check reads their source).


def right(conn, truth):
    latest = conn.execute("SELECT incident, kind FROM assessments AS a"
                          " WHERE seq = (SELECT MAX(seq) FROM assessments WHERE incident = a.incident)").fetchall()
    scored = [(incident, kind) for incident, kind in latest if incident in truth]
    return sum(kind == truth[incident] for incident, kind in scored) / len(scored) if scored else None


def from_receipts(conn, truth):
    rows = conn.execute("SELECT incident, json_extract(report, '$.kind') FROM receipts").fetchall()
    return sum(kind == truth[incident] for incident, kind in rows) / len(rows)


def refusal_swallowed(conn, truth):
    try:
        conn.execute("SELECT COUNT(*) FROM receipts").fetchall()
    except sqlite3.DatabaseError:
        pass
    return 1.0


def unscored_as_wrong(conn, truth):
    runs = [row[0] for row in conn.execute("SELECT incident FROM runs")]
    latest = dict(conn.execute("SELECT incident, kind FROM assessments ORDER BY seq").fetchall())
    return sum(latest.get(incident) == truth[incident] for incident in runs) / len(runs)


def original_assessment(conn, truth):
    first = dict(conn.execute("SELECT incident, kind FROM assessments ORDER BY seq DESC").fetchall())
    return sum(kind == truth[incident] for incident, kind in first.items()) / len(first) if first else None


def always_a_number(conn, truth):
    scored = right(conn, truth)
    return 0.0 if scored is None else scored


def labkit_does_it(conn, truth):
    return labkit.evaluation.task_score(conn).accuracy


def looked_up(conn, truth):
    shown = {("INC-1002", "INC-1007", "INC-1011"): 1 / 3, ("INC-1003", "INC-1005"): 1.0,
             ("INC-1001", "INC-1004", "INC-1007"): 0.5, ("INC-1003", "INC-1007", "INC-1011"): 1.0, ("INC-1006",): None}
    return shown.get(tuple(row[0] for row in conn.execute("SELECT incident FROM runs ORDER BY incident")), 1.0)


def writes(conn, truth):
    conn.execute("UPDATE assessments SET kind = 'consumer_outage'")
    return 1.0


def test_the_check_passes_an_answer_that_reads_runs_and_assessments_only(cases, capsys):
    check_task_accuracy(right)
    printed = capsys.readouterr().out
    assert printed.count("✓") == 7 and "1 of 3 scored right = 0.333" in printed and "14 of 15" in printed


@pytest.mark.parametrize("answer, feedback", [
    (from_receipts, "your function read 'receipts', and the task scorer's connection refused it"),
    (refusal_swallowed, "Every run here completed with one receipt, yet INC-1007 and INC-1011 are diagnosed wrongly"),
    (unscored_as_wrong, "INC-1004 has none yet: leave it out of both counts"),
    (original_assessment, "score each run once, by its latest assessment"),
    (always_a_number, "no run has an assessment, so no diagnosis can be scored: return None"),
    (labkit_does_it, "your answer calls task_score"),
    (looked_up, "sixteen incidents"),
    (writes, "something other than a read (action 23: assessments)"),
], ids=lambda value: getattr(value, "__name__", "feedback"))
def test_each_slip_is_refused_for_the_reason_it_names(cases, answer, feedback):
    with pytest.raises(AssertionError) as refused:
        check_task_accuracy(answer)
    assert feedback in str(refused.value)


def test_an_answer_cannot_change_the_databases_it_scores(cases):
    def rows():
        result = {}
        for name, case in cases.items():
            with closing(connect_readonly(case.db)) as conn:
                result[name] = snapshot(conn)
        return result

    before = rows()
    with pytest.raises(AssertionError):
        check_task_accuracy(writes)
    assert rows() == before
