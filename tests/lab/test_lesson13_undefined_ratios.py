"""13_evaluation's claim: a precision or recall with nothing to divide by is undefined ("none"), never 0.

A kind never predicted has no precision; a kind that never occurs has no recall. The lesson
scores INC-1007 and INC-1011 alone (both diagnosed wrongly by rules revision 1, with no
crash) and shows both kinds of "none" beside real zeros; this test holds the same numbers.
"""

from __future__ import annotations

from contextlib import closing

from labkit.evaluation import evaluate
from labkit.lab.workspace import Workspace


def test_a_kind_never_predicted_has_no_precision_and_a_kind_never_true_has_no_recall():
    space = Workspace.create("test-13-undefined")
    with closing(space.connect()) as conn:
        for incident in ("INC-1007", "INC-1011"):
            space.coordinator(conn).drive(incident)
    per_class = evaluate(space.db).task.per_class
    assert per_class["consumer_outage"]["predicted"] == 0 and per_class["consumer_outage"]["precision"] is None
    assert per_class["consumer_outage"]["recall"] == 0.0
    assert per_class["consumer_lag"]["truth"] == 0 and per_class["consumer_lag"]["recall"] is None
    assert per_class["consumer_lag"]["precision"] == 0.0
    assert per_class["poison_message"]["precision"] is None and per_class["false_alarm"]["recall"] is None


def test_the_same_two_runs_are_diagnosed_wrongly_with_no_crash_at_all():
    space = Workspace.create("test-13-no-crash")
    with closing(space.connect()) as conn:
        for incident in ("INC-1007", "INC-1011"):
            space.coordinator(conn).drive(incident)
    task = evaluate(space.db).task
    assert task.correct == 0 and task.scored == 2
    assert [(w["incident"], w["predicted"]) for w in task.misdiagnosed] == [
        ("INC-1007", "consumer_lag"), ("INC-1011", "false_alarm")]
