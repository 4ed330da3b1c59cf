"""Lesson 12 (12_crash_explorer): one scenario written by hand, and a prediction of what a bug breaks.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator

from ... import invariants
from ...invariants import InvariantResult
from ..explorer import Scenario, explore, flow_points, run_scenario
from ..naive import CRASH_BUGS, coordinator_class
from .runner import answer_is_a_function, clear_trials, new_trial, one_line, own_work, refuse_if_called, watching_labkit

#: The scenarios Exercise 12.1's answer plays, in the order that stops the common slips first.
SCENARIO_CASES: tuple[tuple[str, str | None], ...] = (
    ("after_read", None),                                       # a kill inside the read window: one more read
    ("after_evidence_commit", "reread_committed_evidence"),     # the recovery itself must carry the bug
    ("before_completion_commit", "no_receipt_key"),             # a run that can never finish
    ("before_receipt_write", None),
)
#: The bug section 3 of 12_crash_explorer shows row by row: a prediction about it would be a copy.
SHOWN_BUG = "reread_committed_evidence"


def _explorer_broken(point: str, bug: str | None, numbers: range) -> set[int]:
    """What the explorer finds broken, among ``numbers``, in the scenario killed once at ``point``."""
    trial = new_trial("12-explorer")
    result = run_scenario(Scenario("run", (point,), bug), trial.folder / "scenario")
    return {number for number in result.broken if number in numbers}


@contextlib.contextmanager
def _second_recoveries() -> Iterator[list[object]]:
    """The coordinator class each invariant-7 recovery ran with, while the answer runs in this kernel.

    ``check_invariants`` looks ``recover`` up in its own module when it runs invariant 7, so
    this sees every call, whatever name the answer reached ``check_invariants`` by.
    """
    original = invariants.recover
    seen: list[object] = []

    def recorded(*args, **kwargs):
        seen.append(kwargs.get("coordinator_class"))
        return original(*args, **kwargs)

    invariants.recover = recorded
    try:
        yield seen
    finally:
        invariants.recover = original


def _with_bug(bug: str | None) -> str:
    return f" with --bug {bug}" if bug else " (labkit's coordinator)"


@one_line
def check_scenario(scenario: Callable) -> None:
    """``scenario(db, point, bug) -> list of InvariantResult``: one scenario of the explorer, written by hand.

    For each of :data:`SCENARIO_CASES` the answer runs in this kernel against a fresh
    database, and the invariants it finds broken (1 to 7: a run without a ticket) must be
    those the explorer finds broken in the same scenario, which kills and recovers on its own.
    """
    clear_trials()
    answer_is_a_function(scenario, "def my_scenario(db, point, bug): ...")
    own_work(scenario, "explore", "run_scenario", "random_kills", "explorer")
    seven = range(1, 8)
    shown = []
    for point, bug in SCENARIO_CASES:
        trial = new_trial("12-scenario")
        try:
            with _second_recoveries() as second, watching_labkit("explore", "run_scenario", "random_kills") as calls:
                results = scenario(trial.db, point, bug)
            refuse_if_called(calls)
        except AssertionError:
            raise
        except Exception as error:  # noqa: BLE001 - the learner's code: say what it raised, in one line
            raise AssertionError(f"{point}{_with_bug(bug)}: your scenario raised {type(error).__name__}: {error}") from None
        if not isinstance(results, list) or not all(isinstance(r, InvariantResult) for r in results):
            raise AssertionError(f"{point}{_with_bug(bug)}: return the list labkit.check_invariants(...) returns, "
                                 f"not {type(results).__name__}")
        if not second:
            raise AssertionError(f"{point}{_with_bug(bug)}: return the list labkit.check_invariants(...) returns; "
                                 "its invariant 7 runs a second recovery, which the check did not see")
        if any(used is not coordinator_class(bug) for used in second):
            raise AssertionError(f"{point}{_with_bug(bug)}: invariant 7's second recovery did not run the coordinator "
                                 "the bug names: which argument of check_invariants says which coordinator recovers again?")
        checked = {r.number for r in results}
        if not set(seven) <= checked:
            raise AssertionError(f"{point}{_with_bug(bug)}: your list holds invariants {sorted(checked)}; check all of 1-7")
        mine = {r.number for r in results if not r.held and r.number in seven}
        theirs = _explorer_broken(point, bug, seven)
        if mine != theirs:
            said = ", ".join(f"{r.number} ({r.detail})" for r in results if r.number in mine - theirs)
            if theirs - mine:
                raise AssertionError(
                    f"{point}{_with_bug(bug)}: the explorer finds invariant(s) {sorted(theirs - mine)} broken here, your scenario "
                    "finds them held. Was the run really killed at the point (--crash-at), and did the run, the recovery and "
                    "invariant 7's second recovery (coordinator_class=) all use the bug?"
                )
            hint = ""
            reads = next((r.detail for r in results if r.number == 5 and not r.held), "")
            counted = re.search(r"read (\d+) times, expected (\d+)", reads)
            if counted and int(counted[1]) < int(counted[2]):
                hint = (" Your run read less than a kill at this point costs: was it really killed there "
                        "(--crash-at, and .killed_by == 'SIGKILL')?")
            elif counted:
                hint = " A kill between the read and its commit costs one more read: expect 1 + (point in labkit.BETWEEN_READ_AND_COMMIT)"

            raise AssertionError(f"{point}{_with_bug(bug)}: your scenario finds {said} broken; the explorer finds "
                                 f"{'nothing' if not theirs else sorted(theirs)} broken.{hint}")
        shown.append(f"{point}{_with_bug(bug)}: " + (f"{sorted(mine)} broken" if mine else "all 7 held"))
    for line in shown:
        print(f"✓ {line}, as the explorer finds")


@one_line
def check_bug_prediction(bug: str, predicted: dict) -> None:
    """``predicted``: ``{crash point: {invariant numbers}}`` for the points where ``bug`` breaks something.

    The explorer then runs every single crash of the ``run`` flow with ``bug`` switched on,
    and the red cells must be exactly the predicted ones.
    """
    clear_trials()
    if bug not in CRASH_BUGS:
        raise AssertionError(f"my_bug should be one of {', '.join(CRASH_BUGS)}, not {bug!r}")
    if bug == SHOWN_BUG:
        raise AssertionError(f"section 3 showed {SHOWN_BUG} row by row; predict one you have not seen yet")
    if not isinstance(predicted, dict):
        raise AssertionError(f"my_prediction should be a dict {{crash point: {{invariant numbers}}}}, not {type(predicted).__name__}")
    points = flow_points()["run"]
    unknown = [point for point in predicted if point not in points]
    if unknown:
        raise AssertionError(f"{unknown[0]!r} is not a crash point of a run with a ticket: {', '.join(points)}")
    mine: dict[str, set[int]] = {}
    for point, numbers in predicted.items():
        if not isinstance(numbers, set | list | tuple) or not all(isinstance(n, int) and 1 <= n <= 9 for n in numbers):
            raise AssertionError(f"at {point}: give a set of invariant numbers from 1 to 9, like {{1, 7}}, not {numbers!r}")
        if numbers:
            mine[point] = set(numbers)
    if not mine:
        raise AssertionError(f"you predicted that {bug} breaks nothing: it is a bug the explorer catches, so some cell turns red")
    found = explore(new_trial("12-prediction").folder / "explore", pairs=False, bug=bug, workers=1)
    theirs = {r.scenario.crash_points[0]: set(r.broken) for r in found.results if r.broken}
    if mine != theirs:
        differ = [point for point in points if mine.get(point, set()) != theirs.get(point, set())]
        first = differ[0]
        said = sorted(mine.get(first, set())) or "nothing"
        raise AssertionError(
            f"{bug}: your prediction differs from the explorer at {len(differ)} of {len(points)} points; the first is "
            f"{first}, where you predicted {said}. Read the bug's code again (inspect.getsource(labkit.lab.naive.BUGS[my_bug])): "
            "killed there, which row does the bug leave behind, and which invariant reads that row?"
        )
    for point, numbers in theirs.items():
        print(f"✓ {bug} at {point}: invariants {sorted(numbers)} broken, as you predicted")
    print(f"✓ every other point of {len(points)}: every invariant held, as you predicted")
