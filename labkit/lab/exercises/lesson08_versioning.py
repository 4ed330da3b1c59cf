"""Lesson 08 (08_versioning): the learner's migration rule from workflow version 1 to 2.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing

from ...errors import MigrationRefused
from ...recovery import recover
from ...steps import Step
from ...versioning import migrate, reevaluate
from ..workspace import Workspace
from .runner import (
    changed_tables,
    clear_trials,
    new_trial,
    one_line,
    own_work,
    refuse_if_called,
    source_of,
    tables_of,
    watching_labkit,
)

#: The runs the previous release (workflow version 1) can leave behind, as the check builds them:
#: (incident, its step, re-evaluated so that it has an assessment, may it move to version 2?).
MIGRATION_CASES = (
    ("INC-1001", "not_inspected", False, True),
    ("INC-1002", "evidence_recorded", False, False),
    ("INC-1007", "evidence_recorded", True, True),
    ("INC-1003", "report_completed", False, True),
    ("INC-1011", "report_completed", True, True),
)


def _previous_release_runs(trial: Workspace, cases: tuple) -> None:
    """Leave each case's run where the previous release would, re-evaluated where the case says."""
    with closing(trial.connect()) as conn:
        old = trial.coordinator(conn, workflow_version=1)
        for incident, step, _, _ in cases:
            old.start(incident)
            if step != Step.NOT_INSPECTED:
                old.inspect(incident)
            if step == Step.REPORT_COMPLETED:
                old.complete(incident)
    for incident, _, assessed, _ in cases:
        if assessed:
            reevaluate(trial.db, incident, "rules revision 2, before the upgrade", trial.clock)


def _described(incident: str, step: str, assessed: bool) -> str:
    if step == "not_inspected":
        return f"{incident} at not_inspected"
    return f"{incident} at {step} {'with' if assessed else 'without'} an assessment"


@one_line
def check_migration_rule(rule: Callable) -> None:
    """``rule(conn, incident, step, to_version) -> str | None``: see :func:`_check_migration_rule`.

    The rule is refused if it is, reaches or calls labkit's own rule (:func:`labkit.versioning.why_not`)
    under any name: while the check runs, any call of it from the learner's code is noticed.
    """
    clear_trials()
    source_of(rule)
    own_work(rule, "why_not")
    with watching_labkit("why_not") as calls:
        try:
            _check_migration_rule(rule, calls)
        except AssertionError:
            refuse_if_called(calls)  # labkit's own rule speaks first: the rest of the feedback is about it
            raise
    refuse_if_called(calls)


def _check_migration_rule(rule: Callable, calls: list[str]) -> None:
    """``rule(conn, incident, step, to_version) -> str | None``: the learner's mapping from workflow version 1 to 2.

    For each run the previous release can leave (at each step; at evidence_recorded and
    report_completed with and without an assessment), a database holding that run alone is
    migrated with ``labkit.versioning.migrate(db, 2, reason, clock, rule=rule)``. Exactly the run that
    version 2 cannot continue (evidence_recorded with no assessment) must be refused, nothing
    changed; every other must migrate, its workflow version the only change, and then this
    release's recovery must finish it. Last, all of them in one database: refused as a whole,
    and migrated in one step once the previous release has finished the unmappable run.
    """
    answers: list[object] = []

    def asked(conn: sqlite3.Connection, incident: str, step: Step, to_version: int) -> str | None:
        why = rule(conn, incident, step, to_version)
        refuse_if_called(calls)
        answers.append(why)
        if why is not None and not isinstance(why, str):
            raise AssertionError(f"the rule should return None or a sentence saying why not, not {why!r}")
        return why

    def attempt(trial: Workspace) -> MigrationRefused | None:
        try:
            migrate(trial.db, 2, "upgrade to workflow version 2", trial.clock, rule=asked)
        except MigrationRefused as refused:
            return refused
        except AssertionError:
            raise
        except Exception as error:  # the learner's code failed inside the migration's transaction
            raise AssertionError(f"your rule raised {type(error).__name__}: {error}".splitlines()[0]) from None
        return None

    def finish(trial: Workspace, what: str) -> None:
        failed = [r for r in recover(trial.db, trial.provider(), clock=trial.clock) if r.error is not None]
        assert not failed, (
            f"your rule let {what} through, and this release could not finish it: {failed[0].error}. "
            "Which runs would version 2 have to complete from a decision they never recorded?"
        )

    def only_the_version_moved(before: dict, after: dict, what: str) -> None:
        changed = changed_tables(before, after, apart_from=("runs", "migrations"))
        assert not changed, (
            f"migrating {what}, your rule wrote to {', '.join(changed)}: a rule only answers; a migration changes "
            "runs.workflow_version and nothing else (an invented assessment is a decision nobody made)"
        )
        moved = [(row[0], row[2:]) for row in after["runs"]] == [(row[0], row[2:]) for row in before["runs"]]
        assert moved and {row[1] for row in after["runs"]} == {2}, f"migrating {what} should change only the workflow version"

    mapped = []
    for incident, step, assessed, mappable in MIGRATION_CASES:
        what = _described(incident, step, assessed)
        trial = new_trial("08-exercise")
        _previous_release_runs(trial, ((incident, step, assessed, mappable),))
        before = tables_of(trial)
        answers.clear()
        refused = attempt(trial)
        assert answers, "migrate never called your rule: is it a function of (conn, incident, step, to_version)?"
        after = tables_of(trial)
        if mappable:
            assert refused is None, (
                f"your rule refused {what}, saying {answers[-1]!r}; but version 2 can go on with it: "
                + {"not_inspected": "nothing has been decided yet, so version 2 simply inspects it",
                   "evidence_recorded": "it has an assessment, which is what version 2 completes a run from",
                   "report_completed": "it is done, and its receipt keeps what it said"}[step]
            )
            only_the_version_moved(before, after, what)
            finish(trial, what)
            mapped.append(what)
        else:
            if refused is None:
                only_the_version_moved(before, after, what)  # a rule that invents an assessment fails here
                finish(trial, what)  # one that lets the run through fails here
                raise AssertionError(f"your rule let {what} through")
            assert after == before, "a refused migration should change nothing"
            print(f"✓ refused {what}, and nothing was migrated: {answers[-1]}")
    print(f"✓ migrated each of the {len(mapped)} others alone, only its workflow version changed, and this release's "
          f"recovery finished it: {'; '.join(mapped)}")

    trial = new_trial("08-exercise")
    _previous_release_runs(trial, MIGRATION_CASES)
    before = tables_of(trial)
    refused = attempt(trial)
    after = tables_of(trial)
    assert refused is not None and refused.incident == "INC-1002", (
        "with all five runs in one database, the migration should be refused for INC-1002 "
        + (f"alone, but your rule refused {refused.incident}" if refused else "(evidence_recorded, no assessment), but your "
           "rule let it through: does your query ask about this run, or about any run?")
    )
    assert after == before, "a refused migration should change nothing"
    with closing(trial.connect()) as conn:
        trial.coordinator(conn, workflow_version=1).complete("INC-1002")  # finish it under the release that started it
    assert attempt(trial) is None, "once INC-1002 is finished by the previous release, every run should migrate"
    finish(trial, "the five runs")
    print("✓ all five in one database: refused as a whole for INC-1002, nothing changed; once the previous release "
          "finished it, migrated in one step and completed by this release")
