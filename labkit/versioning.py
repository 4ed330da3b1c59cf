"""Workflow versions, and the explicit, logged migration from one to the next.

A run carries the workflow version that wrote it, and the coordinator refuses a run of
another version everywhere (:meth:`labkit.Coordinator.check_version`): its step would
mean what *that* release meant by it. Moving runs to a new version is a decision with a
reason, made once, in one transaction, and written down: :func:`migrate`, and the log
:func:`migration_log`.

The versions labkit knows (the list and the check are the coordinator's,
:data:`labkit.coordinator.SUPPORTED_VERSIONS` and :func:`labkit.coordinator.check_run_version`:
the coordinator is a versioned state machine; what lives here is how runs move between versions):

- **1**, the previous release: inspect stores the evidence; completion builds the report
  from the evidence's own diagnosis.
- **2**, this release: inspect stores the evidence with its decision inputs and records
  the original *assessment* beside it; completion builds the report from the run's latest
  assessment (:mod:`labkit.assessments`).

From 1 to 2 a run at ``not_inspected`` maps as it is (nothing was decided), and so does a
run at ``report_completed`` (it is done; its receipt keeps what it said). A run at
``evidence_recorded`` maps only if it has an assessment: version 2 would complete it from
one, and inventing it is exactly the silent reinterpretation versions exist to prevent.
Finish it under version 1 first, or re-evaluate it (which records one).

Re-evaluation is the other explicit operation on stored rows: :func:`reevaluate` applies a
newer rules revision to a run's stored observation and records a new assessment beside the
original (:mod:`labkit.assessments` keeps the assessments and their rule). Taught in
08_versioning.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from . import rules
from .assessments import DECISION_INPUTS, Assessment, latest_assessment_txn, record_assessment_txn
from .clock import Clock
from .coordinator import SUPPORTED_VERSIONS, check_supported
from .database import read_transaction, require_write_transaction, transaction
from .errors import BadInput, MigrationRefused, NothingToReevaluate, UnknownRun, UnsupportedVersion
from .jsontext import canonical_json
from .steps import Step
from .store import connect, connect_readonly, find_run_txn, list_runs_txn, load_evidence_txn

#: The migration log's table is in labkit.schema (MIGRATIONS_TABLE_V3).


@dataclass(frozen=True)
class Migration:
    """One row of the migration log."""

    seq: int
    from_version: int
    to_version: int
    runs: list[str]
    at: str
    reason: str


#: A migration rule: None if the run (incident, its step) means the same under the new
#: version, otherwise why it does not. Read inside the migration's transaction.
MigrationRule = Callable[[sqlite3.Connection, str, Step, int], "str | None"]


def why_not(conn: sqlite3.Connection, incident: str, step: Step, to_version: int) -> str | None:
    """labkit's rule: None if a run at ``step`` means the same under ``to_version``; otherwise why it does not."""
    if to_version == 2 and step is Step.EVIDENCE_RECORDED:
        has_assessment = conn.execute("SELECT 1 FROM assessments WHERE incident = ?", (incident,)).fetchone()
        if has_assessment is None:
            return (
                "version 2 completes a run from its assessment, and this one has none; finish it under version 1 "
                "(run --workflow-version 1) or re-evaluate it (reevaluate --reason ...), then migrate"
            )
    return None


def migrate(
    db: str | Path,
    to_version: int,
    reason: str,
    clock: Clock,
    *,
    after_each: Callable[[str], None] | None = None,
    rule: MigrationRule | None = None,
) -> Migration | None:
    """Move every run of version ``to_version - 1`` to ``to_version``, all or none, and log it.

    Refuses (:class:`MigrationRefused`, nothing changed) if any run cannot be mapped. Returns
    the log row, or None when no run needed moving (nothing is logged then). ``after_each``
    is called after each run is updated, inside the transaction: lessons and tests use it to
    fail half way and show that the transaction leaves nothing half-migrated. ``rule`` replaces
    labkit's mapping rule (:func:`why_not`), for an exercise that writes its own.
    """
    check_supported(to_version)
    if to_version == SUPPORTED_VERSIONS[0]:
        raise UnsupportedVersion(to_version, "it is the first version: there is nothing to migrate to it from", SUPPORTED_VERSIONS)
    if not reason.strip():
        raise BadInput("a migration needs a reason (--reason TEXT): it is a decision, and the log keeps it")
    from_version = to_version - 1
    with closing(connect(db, create=False)) as conn, transaction(conn):
        runs = [run for run in list_runs_txn(conn) if run.workflow_version == from_version]
        newer = [run for run in list_runs_txn(conn) if run.workflow_version > to_version]
        if newer:
            raise MigrationRefused(newer[0].incident, newer[0].step.value, newer[0].workflow_version, to_version,
                                   "it is already past that version; migrations only go forward")
        for run in runs:
            why = (rule or why_not)(conn, run.incident, run.step, to_version)
            if why:
                raise MigrationRefused(run.incident, run.step.value, from_version, to_version, why)
        if not runs:
            return None
        for run in runs:
            _move_txn(conn, run.incident, from_version, to_version)
            if after_each is not None:
                after_each(run.incident)
        return _log_txn(conn, from_version, to_version, [run.incident for run in runs], reason, clock)


def _move_txn(conn: sqlite3.Connection, incident: str, from_version: int, to_version: int) -> None:
    # Only the version changes: the step and the state version stay, since a migration is not
    # a transition of the run, and the compare-and-set of its next step must still match.
    require_write_transaction(conn, "_move_txn")
    conn.execute(
        "UPDATE runs SET workflow_version = ? WHERE incident = ? AND workflow_version = ?", (to_version, incident, from_version)
    )


def _log_txn(conn: sqlite3.Connection, from_version: int, to_version: int, runs: list[str], reason: str, clock: Clock) -> Migration:
    require_write_transaction(conn, "_log_txn")
    at = clock.now()
    cursor = conn.execute(
        "INSERT INTO migrations (from_version, to_version, runs, at, reason) VALUES (?, ?, ?, ?, ?)",
        (from_version, to_version, canonical_json(runs), at, reason),
    )
    assert cursor.lastrowid is not None
    return Migration(cursor.lastrowid, from_version, to_version, runs, at, reason)


def migration_log(db: str | Path) -> list[Migration]:
    """Every migration made on the database, oldest first."""
    with closing(connect_readonly(db)) as conn, read_transaction(conn):
        rows = conn.execute("SELECT * FROM migrations ORDER BY seq").fetchall()
    return [
        Migration(row["seq"], row["from_version"], row["to_version"], json.loads(row["runs"]), row["at"], row["reason"])
        for row in rows
    ]


# --------------------------------------------------------------------------- re-evaluation


def reevaluate(db: str | Path, incident: str, reason: str, clock: Clock, rules_revision: int | None = None) -> Assessment:
    """Apply a rules revision to the run's stored observation and record a new assessment beside the old.

    No provider call: the observation is the committed evidence. The evidence, earlier
    assessments and any receipt stay as they are. ``rules_revision`` defaults to the newest.
    """
    if not reason.strip():
        raise NothingToReevaluate(incident, "a re-evaluation needs a reason (--reason TEXT): it is a decision someone made")
    revision = rules.LATEST_RULES_REVISION if rules_revision is None else rules_revision
    if revision not in rules.RULES_REVISIONS:
        known = ", ".join(map(str, rules.RULES_REVISIONS))
        raise NothingToReevaluate(incident, f"there is no rules revision {revision} (known: {known})")
    with closing(connect(db, create=False)) as conn, transaction(conn):
        if find_run_txn(conn, incident) is None:
            raise UnknownRun(incident)
        evidence = load_evidence_txn(conn, incident)
        if evidence is None:
            raise NothingToReevaluate(incident, "it has no committed evidence yet (it is at not_inspected); run or recover it first")
        observation = {key: value for key, value in evidence.body.items() if key != "diagnosis"}
        diagnosis = rules.assess(observation, revision)
        if latest_assessment_txn(conn, incident) is None:
            # A run inspected before assessments existed (workflow version 1): its evidence's own
            # diagnosis is the original decision; record it first, so the new one stands beside it.
            original_inputs = {name: getattr(evidence, name) for name in DECISION_INPUTS}
            record_assessment_txn(conn, incident, "inspection", evidence.body["diagnosis"], original_inputs, clock)
        inputs = {
            "provider": rules.REFERENCE_PROVIDER, "rules_revision": revision, "prompt_revision": None, "contract": evidence.contract,
        }
        return record_assessment_txn(conn, incident, "reevaluation", diagnosis, inputs, clock, reason=reason)
