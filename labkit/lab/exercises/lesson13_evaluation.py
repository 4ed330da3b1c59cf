"""Lesson 13 (13_evaluation): the task scorecard's accuracy, on the ship gate's databases and one never shown.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...effects import Tickets
from ...errors import ScorerReadRefused
from ...evaluation import TASK_TABLES, load_ground_truth, scoped_connection, task_score
from ...provider import list_incidents
from ...recovery import recover
from ...versioning import reevaluate
from ..naive import coordinator_class
from ..ticket_service import TicketService
from ..workspace import Workspace
from .runner import answer_is_a_function, clear_trials, labkit_cli_forked, one_line, own_work, refuse_if_called, source_of, watching_labkit


@dataclass(frozen=True)
class EvaluationCase:
    """One small database of 13_evaluation's ship gate (section 4), scored by Exercise 13.1's check too.

    ``story`` says what happened to its runs; ``hint`` what an accuracy that disagrees with
    labkit's task scorer on it has most likely got wrong. ``ticket_store`` is the ticket
    service's file where its runs opened tickets, else None.
    """

    name: str
    story: str
    hint: str
    db: Path
    ticket_store: Path | None = None


_EVALUATION_CASES: list[EvaluationCase] = []


def evaluation_cases() -> list[EvaluationCase]:
    """The five databases of 13_evaluation's section 4, in the order that stops the common slips first.

    Made by labkit's own code (children really killed with SIGKILL, a real ticket service),
    once per kernel: afterwards they are only read (the scorers and Exercise 13.1's answer
    open them read-only), so a learner re-running a cell waits for nothing.
    """
    if not _EVALUATION_CASES or not all(case.db.exists() for case in _EVALUATION_CASES):
        _EVALUATION_CASES[:] = _build_evaluation_cases()
    return list(_EVALUATION_CASES)


def _killed(space: Workspace, incident: str, point: str, *options: str) -> None:
    child = labkit_cli_forked("run", "--db", space.db, "--incident", incident, "--crash-at", point, *options)
    assert child.killed_by == "SIGKILL", f"the child armed at {point} was not killed: {child.status} {child.message}"


def _driven(space: Workspace, *incidents: str, **options: Any) -> None:
    with closing(space.connect()) as conn:
        for incident in incidents:
            space.coordinator(conn, **options).drive(incident)


def _build_evaluation_cases() -> list[EvaluationCase]:
    recovered = Workspace.create("13-case-recovered")
    _killed(recovered, "INC-1007", "after_evidence_commit")
    _driven(recovered, "INC-1002", "INC-1011")
    recover(recovered.db, recovered.provider(), clock=recovered.clock)

    naive = Workspace.create("13-case-naive")
    store = naive.folder / "tickets.db"
    with TicketService(store) as service:
        _killed(naive, "INC-1003", "after_send", "--bug", "retry_without_key", "--tickets", service.url)
        recover(naive.db, naive.provider(), clock=naive.clock, effects=Tickets(service.url),
                coordinator_class=coordinator_class("retry_without_key"))
        _driven(naive, "INC-1005", effects=Tickets(service.url))

    early = Workspace.create("13-case-early")
    _driven(early, "INC-1001")
    _killed(early, "INC-1007", "after_evidence_commit")
    _killed(early, "INC-1004", "after_read")

    revised = Workspace.create("13-case-revised")
    _driven(revised, "INC-1003", "INC-1007", "INC-1011")
    for incident in ("INC-1007", "INC-1011"):
        reevaluate(revised.db, incident, "rules revision 3 sees zombie consumers and poison messages dead-lettered", revised.clock,
                   rules_revision=3)

    fresh = Workspace.create("13-case-fresh")
    with closing(fresh.connect()) as conn:
        fresh.coordinator(conn).start("INC-1006")

    return [
        EvaluationCase(
            "recovered, diagnosed wrongly",
            "INC-1007 killed after its evidence commit, then recovered; INC-1002 and INC-1011 ran through",
            "Every run here completed with one receipt, yet INC-1007 and INC-1011 are diagnosed wrongly: compare each "
            "run's assessed kind with truth, not whether the run finished",
            recovered.db,
        ),
        EvaluationCase(
            "naive recovery, two tickets",
            "INC-1003 killed after sending its ticket, recovered by the retry_without_key variant; INC-1005 ran through",
            "INC-1003 opened two tickets, but both diagnoses are right: a duplicate is a failure of the recovery card, "
            "not a wrong diagnosis",
            naive.db, store,
        ),
        EvaluationCase(
            "evaluated before recovery",
            "INC-1001 completed; INC-1007 killed after its evidence commit; INC-1004 killed after its read, still not_inspected",
            "Score every run that has an assessment, finished or not (INC-1007's is wrong); INC-1004 has none yet: "
            "leave it out of both counts, it is not a wrong diagnosis",
            early.db,
        ),
        EvaluationCase(
            "re-evaluated",
            "INC-1003, INC-1007 and INC-1011 ran through; INC-1007 and INC-1011 were re-evaluated with rules revision 3",
            "Two runs have two assessments each: score each run once, by its latest assessment (the highest seq)",
            revised.db,
        ),
        EvaluationCase(
            "nothing inspected yet",
            "INC-1006 created, not yet inspected",
            "No run has an assessment, so there is nothing to score: return None",
            fresh.db,
        ),
    ]


_DEALT_AGAIN: list[EvaluationCase] = []


def _dealt_again() -> EvaluationCase:
    """A sixth case, never shown: all sixteen incidents, one re-evaluated, one not inspected.

    The five cases of section 4 are shown with their scores; an answer that looked its
    number up by the incidents it finds would pass them, and not this one.
    """
    if not _DEALT_AGAIN or not _DEALT_AGAIN[0].db.exists():
        space = Workspace.create("13-case-sixteen")
        _driven(space, *[incident for incident in list_incidents() if incident != "INC-1016"])
        with closing(space.connect()) as conn:
            space.coordinator(conn).start("INC-1016")
        reevaluate(space.db, "INC-1011", "rules revision 2 sees poison messages dead-lettered", space.clock, rules_revision=2)
        _DEALT_AGAIN[:] = [EvaluationCase(
            "sixteen incidents",
            "fifteen ran through with rules revision 1, INC-1011 re-evaluated with revision 2, INC-1016 not inspected",
            "Score each run with an assessment once, by its latest one; leave a run without one out",
            space.db,
        )]
    return _DEALT_AGAIN[0]


#: labkit's own task scorer and what it is built from: the answer may not hand the job to them.
_LABKITS_OWN = ("task_score", "evaluate", "_task_scores", "_score_tasks", "_score_task", "TaskScore")


@one_line
def check_task_accuracy(accuracy: Callable) -> None:
    """``accuracy(conn, truth) -> float | None``: the task scorecard's accuracy, written by hand.

    ``truth`` is the answer key (``{incident: kind}``, :func:`labkit.evaluation.load_ground_truth`);
    ``conn`` is the task scorer's own connection (:func:`labkit.evaluation.scoped_connection`
    with :data:`~labkit.evaluation.TASK_TABLES`): it reads ``runs`` and ``assessments`` and is
    refused everything else. On each of :func:`evaluation_cases`, and on a sixth database
    never shown, the answer must equal labkit's :func:`~labkit.evaluation.task_score`:
    right / scored, where a run is scored by its latest assessment and a run without one is
    not scored at all; None when nothing is scored.
    """
    clear_trials()
    answer_is_a_function(accuracy, "def my_accuracy(conn, truth): ...")
    source_of(accuracy)
    own_work(accuracy, *_LABKITS_OWN)
    truth = load_ground_truth()
    shown = []
    for case in [*evaluation_cases(), _dealt_again()]:
        expected = task_score(case.db)
        try:
            with scoped_connection(case.db, "task", TASK_TABLES) as conn, watching_labkit(*_LABKITS_OWN) as calls:
                try:
                    given = accuracy(conn, dict(truth))
                finally:
                    refuse_if_called(calls)  # labkit's scorer reached under a name built at run time
        except ScorerReadRefused as refusal:
            if refusal.table.startswith("(action"):  # not a read: a write, a PRAGMA, an ATTACH ...
                raise AssertionError(
                    f"{case.name}: your function asked for something other than a read {refusal.table}, and the task "
                    f"scorer's connection refused it: it only reads {' and '.join(TASK_TABLES)}. Count, never change"
                ) from None
            raise AssertionError(
                f"{case.name}: your function read {refusal.table!r}, and the task scorer's connection refused it (it reads "
                f"{' and '.join(TASK_TABLES)} only). Whether a run finished, its receipt and its report are the recovery "
                "card's evidence: judge a diagnosis by its assessment"
            ) from None
        except AssertionError:
            raise
        except Exception as error:  # noqa: BLE001 - the learner's code: say what it raised, in one line
            raise AssertionError(f"{case.name}: your function raised {type(error).__name__}: {error}".splitlines()[0][:300]) from None
        if expected.accuracy is None:
            if given is not None:
                raise AssertionError(f"{case.name} ({case.story}): your function returned {given!r}; no run has an assessment, "
                                     "so no diagnosis can be scored: return None (a run not inspected is not a wrong diagnosis)")
            shown.append(f"{case.name}: no run has an assessment, nothing scored: None")
            continue
        if isinstance(given, bool) or not isinstance(given, numbers.Real):
            raise AssertionError(f"{case.name}: return the accuracy as a number, right / scored (None only when nothing is "
                                 f"scored), not {given!r}"[:300])
        if not math.isclose(float(given), expected.accuracy, abs_tol=1e-9):
            # The hint first. The scorer's number only for the five cases section 4 shows anyway:
            # the sixth, never shown, stays a case an answer cannot look up.
            shown_case = case.name != _dealt_again().name
            scorer = f"; the task scorer's is {expected.correct} of {expected.scored} = {expected.accuracy:.3f}" if shown_case else ""
            raise AssertionError(
                f"{case.name} ({case.story}): {case.hint}. Your accuracy is {float(given):.3f}{scorer}"
            )
        shown.append(f"{case.name}: {expected.correct} of {expected.scored} scored right = {expected.accuracy:.3f}")
    for line in shown:
        print(f"✓ {line}, as labkit's task scorer says")
    print(f"✓ read only {' and '.join(TASK_TABLES)}: the recovery card's tables were never needed")
