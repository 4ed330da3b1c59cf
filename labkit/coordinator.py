"""The coordinator: a versioned state machine that owns every transition of a run.

    not_inspected --inspect--> evidence_recorded --complete--> report_completed

It decides what comes next from the stored row alone, never from a transcript or from
what a provider says about state. Each transition is one transaction that carries its
own proof: ``inspect`` commits the evidence with the step, ``complete`` commits the
receipt with the step. A run stored under another workflow version is refused.

As in the lab's source design, ``inspect`` calls the provider while its write
transaction is open: simple, and it makes the crash window between read and commit
easy to see. 10_leases_and_fencing moves the call outside. Taught in 02_three_states.

This module imports only the core (the test in ``tests/docs/test_layout.py`` reads its imports),
so everything the coordinator does is here or one module away:

- the **workflow version** check is here (:data:`SUPPORTED_VERSIONS`, :func:`check_run_version`):
  a versioned state machine must know which versions it runs; moving runs between versions
  is a later lesson's operation (:mod:`labkit.versioning`), which imports the check from here;
- the **evidence write** is :func:`record_evidence_txn` here, then :mod:`labkit.evidence`
  (bounded, redacted, the raw diagnostic kept apart) and :mod:`labkit.store` (the row, with
  its original assessment): every run of this version writes all of it with its step;
- an **effect outside the database** (09_external_effects' ticket) is given to the coordinator
  as an :class:`OwedEffect`. The coordinator decides *when*: its intent inside the completion
  transaction, the action after the commit, and recovery drives the ones still owed. *What*
  it is, and how a lost answer is reconciled, is :mod:`labkit.effects`'s, which the
  coordinator never imports: lessons 02 to 08 read this file without meeting tickets.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, replace
from typing import Protocol

from . import contract
from .assessments import Assessment, latest_assessment_txn
from .clock import Clock, SystemClock
from .crashpoints import NO_CRASH, CrashPlan, CrashPoint
from .database import require_write_transaction, transaction
from .errors import InconsistentRun, StepOrderError, UnknownIncident, UnknownRun, UnsupportedVersion, WorkflowVersionMismatch
from .evidence import bound_evidence, store_bounded_txn
from .provider import ReadAdapter, Reading, knows, read_with_diagnostic
from .receipts import Receipt, find_receipt_txn, issue_receipt_txn
from .report import build_report
from .steps import Step
from .store import Evidence, Run, advance_txn, create_run_txn, find_run_txn, load_evidence_txn

#: The workflow versions this labkit can run; the last is the current one (08_versioning):
#:
#: - 1, the previous release: inspect stores the evidence; completion builds the report from
#:   the evidence's own diagnosis;
#: - 2, this release: inspect stores the evidence with its decision inputs and records the
#:   original assessment beside it; completion builds the report from the latest assessment.
SUPPORTED_VERSIONS = (1, 2)
#: The control flow this code implements. Bumped when a step changes meaning; runs stored
#: under the old number are then refused until migrated (:func:`labkit.versioning.migrate`).
WORKFLOW_VERSION = SUPPORTED_VERSIONS[-1]


def check_supported(version: int) -> int:
    """``version``, if this labkit can run it; else :class:`~labkit.errors.UnsupportedVersion`."""
    if version not in SUPPORTED_VERSIONS:
        raise UnsupportedVersion(version, "unknown", SUPPORTED_VERSIONS)
    return version


def check_run_version(incident: str, found: int, expected: int = WORKFLOW_VERSION) -> None:
    """The one workflow-version check: a run written by another version is refused.

    Its step would mean whatever that version meant by it; reading it as ours would be a
    guess. The coordinator (:meth:`Coordinator.check_version`), a lease's claim and
    ``python -m labkit work`` all ask here (02_three_states, 08_versioning).
    """
    if found != expected:
        raise WorkflowVersionMismatch(incident, found, expected)


def decision_inputs_of(provider: ReadAdapter) -> dict[str, object]:
    """The adapter's decision inputs (provider, rules or model revision, prompt revision).

    Asked of the adapter, never of its answer: what a provider says about itself is data.
    An adapter that does not tell is recorded under its class name.
    """
    inputs = getattr(provider, "decision_inputs", None)
    if isinstance(inputs, dict):
        return {"provider": inputs.get("provider"), "rules_revision": inputs.get("rules_revision"),
                "prompt_revision": inputs.get("prompt_revision")}
    return {"provider": type(provider).__name__, "rules_revision": None, "prompt_revision": None}


def record_evidence_txn(
    conn: sqlite3.Connection, incident: str, body: dict, diagnostic: bytes | str, provider: ReadAdapter, clock: Clock,
    workflow_version: int,
) -> Evidence:
    """Inside the caller's write transaction: keep a contract-checked reading as the run's evidence.

    The one evidence write of both flows: the coordinator's inspect and the leased worker's
    fenced commit. What is written is the evidence record (:mod:`labkit.evidence`): the
    bounded summary with a reference to the raw diagnostic, which is kept apart, both redacted
    before they are written. What the workflow version decides is here: under version 2 the
    row carries the adapter's decision inputs and the original assessment is recorded with it;
    the previous release (version 1) recorded neither.
    """
    require_write_transaction(conn, "record_evidence_txn")
    current = workflow_version >= 2
    bounded = bound_evidence(incident, body, diagnostic)  # redacted and bounded; nothing written yet
    return store_bounded_txn(conn, incident, contract.CONTRACT, bounded, clock, decision_inputs_of(provider) if current else None,
                             record_assessment=current)


def completion_decision_txn(
    conn: sqlite3.Connection, incident: str, workflow_version: int, *, refuse_receipt: bool = True
) -> tuple[Receipt | None, Evidence, Assessment | None]:
    """Inside the caller's write transaction: the completion decision for a run at ``evidence_recorded``.

    Returns (the receipt stored for it if any, its evidence, and under workflow version 2 its
    latest assessment): what the report is built from, never a new read. Refused as
    inconsistent: evidence or an assessment missing, and (unless ``refuse_receipt`` is False,
    for a broken variant that never looks) a receipt already there. Shared by the coordinator
    and the leased worker.
    """
    stored = find_receipt_txn(conn, incident)
    evidence = load_evidence_txn(conn, incident)
    if evidence is None:
        raise InconsistentRun(incident, "it is at evidence_recorded but has no evidence")
    assessment = None
    if workflow_version >= 2:  # the report says what the latest assessment concluded
        assessment = latest_assessment_txn(conn, incident)
        if assessment is None:
            raise InconsistentRun(incident, "it is at evidence_recorded under workflow version 2 but has no assessment")
    if refuse_receipt and stored is not None:
        raise InconsistentRun(incident, "it is at evidence_recorded but already has a receipt")
    return stored, evidence, assessment


def issue_completion_txn(
    conn: sqlite3.Connection, incident: str, workflow_version: int, evidence: Evidence, assessment: Assessment | None, clock: Clock
) -> tuple[Receipt, dict]:
    """Inside the caller's write transaction: the completion's write, the report and its receipt.

    The report is built from the stored evidence and assessment alone; the receipt's primary
    key is the backstop for a second one (:mod:`labkit.receipts`). Returns (receipt, report).
    """
    report = build_report(evidence, assessment)
    return issue_receipt_txn(conn, incident, workflow_version, report, clock), report


class EffectState(Protocol):
    """Where a run's owed effect stands: a row of the effect ledger (:class:`labkit.effects.Effect`)."""

    @property
    def incident(self) -> str: ...
    @property
    def operation_key(self) -> str: ...
    @property
    def state(self) -> str: ...  # intended, uncertain, done or resolved
    @property
    def ticket(self) -> str | None: ...  # what the destination named it, once done


class OwedEffect(Protocol):
    """An action outside the database that completing a run owes: 09_external_effects' ticket.

    The coordinator knows only this much of it; :class:`labkit.effects.Tickets` is labkit's
    (``Coordinator(..., effects=Tickets(url))``, the command line's ``--tickets URL``). What
    the coordinator keeps is *when* each part happens, which is what makes the action safe:

    - :meth:`intend_txn`, inside the completion transaction: the run that is done locally
      always knows the action it still owes, even if the process dies before sending it;
    - :meth:`carry_out`, after that commit: send it, or first ask the destination, when an
      earlier attempt may have reached it (a crash, a lost answer); never twice blindly;
    - :meth:`owed_txn`: the completed runs whose action is still owed or uncertain, which
      recovery drives again;
    - :meth:`held`: what the destination holds, for the invariants that check it (8 and 9).
    """

    def intend_txn(self, conn: sqlite3.Connection, incident: str, workflow_version: int, report: dict, clock: Clock) -> None: ...
    def carry_out(self, conn: sqlite3.Connection, incident: str, clock: Clock, crash: CrashPlan) -> EffectState: ...
    def owed_txn(self, conn: sqlite3.Connection) -> set[str]: ...
    def held(self) -> list[dict]: ...


@dataclass(frozen=True)
class DriveResult:
    """What one call of :meth:`Coordinator.drive` did to a run.

    ``completed`` is True only if this call committed the completion; False means the run
    was already completed, by an earlier call or by another worker that got there first.
    """

    incident: str
    from_step: Step
    read_provider: bool
    completed: bool
    receipt: Receipt
    effect: EffectState | None = None  # with effects: the action it carried out (or an honest uncertain)


class Coordinator:
    """Drives runs in one checkpoint database, through one read adapter.

    ``crash`` arms a crash point (for lessons and tests); ``workflow_version`` lets a lesson
    play the previous release against a database. With ``effects`` (an :class:`OwedEffect`,
    such as :class:`labkit.effects.Tickets`), completion also records the action it owes, in
    the same transaction, and ``drive`` then carries it out (09_external_effects).
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        provider: ReadAdapter,
        *,
        clock: Clock | None = None,
        crash: CrashPlan = NO_CRASH,
        workflow_version: int = WORKFLOW_VERSION,
        effects: OwedEffect | None = None,
    ):
        self.conn = conn
        self.provider = provider
        self.clock = clock or SystemClock()
        self.crash = crash
        self.workflow_version = check_supported(workflow_version)
        self.effects = effects

    def check_version(self, run: Run) -> Run:
        """The run, unless another workflow version wrote it (:func:`check_run_version`)."""
        check_run_version(run.incident, run.workflow_version, self.workflow_version)
        return run

    def load_txn(self, incident: str) -> Run:
        """The run as stored, refused if missing or of another version; inside the caller's transaction."""
        run = find_run_txn(self.conn, incident)
        if run is None:
            raise UnknownRun(incident)
        return self.check_version(run)

    def start(self, incident: str) -> Run:
        """Create the run at ``not_inspected`` (or return it if it exists). Unknown ids change nothing.

        An existing run is returned from its row alone: resuming a run must not depend on the
        provider being reachable, since completion needs only the committed evidence.
        """
        # No write lock: a resumed run only needs reading. One statement outside a transaction
        # is atomic by itself; a read transaction around it would be two statements more, and a commit.
        run = find_run_txn(self.conn, incident)
        if run is not None:
            return self.check_version(run)
        if not knows(self.provider, incident):  # one file asked of, not the folder listed
            raise UnknownIncident(incident, len(self.provider.incidents()))
        with transaction(self.conn):  # another worker may create it first; this returns theirs
            return self.check_version(create_run_txn(self.conn, incident, self.workflow_version, self.clock))

    def inspect(self, incident: str) -> Run:
        """Read the incident and commit evidence and step together; a no-op past ``not_inspected``."""
        return self._inspect(incident)[0]

    def _inspect(self, incident: str) -> tuple[Run, bool]:
        with transaction(self.conn):
            run = self.load_txn(incident)
            if run.step is not Step.NOT_INSPECTED:
                return run, False
            if load_evidence_txn(self.conn, incident) is not None:
                # Only a writer that commits evidence and step apart leaves this (labkit.lab.naive);
                # which row is right cannot be known, so refuse rather than guess.
                raise InconsistentRun(incident, "it is at not_inspected but already has evidence")
            self.crash.reached(CrashPoint.BEFORE_READ, self.conn)
            reading = read_with_diagnostic(self.provider, incident)
            self.crash.reached(CrashPoint.AFTER_READ, self.conn)
            run = self.record_reading_txn(run, reading)
            self.crash.reached(CrashPoint.BEFORE_EVIDENCE_COMMIT, self.conn)
        self.crash.reached(CrashPoint.AFTER_EVIDENCE_COMMIT, self.conn)
        return run, True

    def record_reading_txn(self, run: Run, reading: Reading) -> Run:
        """Inside the caller's write transaction: check ``reading``, keep it as evidence, move to evidence_recorded.

        The write half of :meth:`inspect`. The DBOS version of the workflow (14_choosing_an_engine)
        calls it too, with a reading its engine checkpointed, so both keep evidence the same way.
        """
        body = contract.check_evidence(reading.response, run.incident)
        record_evidence_txn(self.conn, run.incident, body, reading.diagnostic, self.provider, self.clock, self.workflow_version)
        return advance_txn(self.conn, run, Step.EVIDENCE_RECORDED, self.clock)

    def complete(self, incident: str) -> Receipt:
        """Build the report from stored evidence and commit receipt and step together.

        Completing a completed run returns its receipt and writes nothing.
        """
        return self._complete(incident)[0]

    def _complete(self, incident: str) -> tuple[Receipt, bool]:
        # One transaction decides and writes: under the write lock nobody can complete the
        # run between our reading its step and our writing its receipt (06_single_receipt).
        with transaction(self.conn):
            inputs = self.completion_inputs_txn(incident)
            if isinstance(inputs, Receipt):  # completed earlier: its receipt, nothing written
                return inputs, False
            run, _, evidence, assessment = inputs
            self.crash.reached(CrashPoint.BEFORE_RECEIPT_WRITE, self.conn)
            receipt, report = issue_completion_txn(self.conn, incident, self.workflow_version, evidence, assessment, self.clock)
            self.mark_completed_txn(run, report)
        self.crash.reached(CrashPoint.AFTER_COMPLETION_COMMIT, self.conn)
        return receipt, True

    def mark_completed_txn(self, run: Run, report: dict) -> None:
        """Inside the caller's write transaction: the owed effect's intent (with ``effects``) and the step to report_completed."""
        if self.effects is not None:
            # The intent is part of completing: a run that is done locally always knows
            # the action it still owes, even if the process dies before sending it.
            self.effects.intend_txn(self.conn, run.incident, self.workflow_version, report, self.clock)
        advance_txn(self.conn, run, Step.REPORT_COMPLETED, self.clock)
        self.crash.reached(CrashPoint.BEFORE_COMPLETION_COMMIT, self.conn)

    def completion_inputs_txn(
        self, incident: str, *, refuse_receipt: bool = True
    ) -> Receipt | tuple[Run, Receipt | None, Evidence, Assessment | None]:
        """Inside the caller's write transaction: what completing ``incident`` starts from.

        A completed run gives its stored receipt alone. A run at ``evidence_recorded`` gives
        (run, the receipt stored for it if any, its evidence, and under workflow version 2 its
        latest assessment): :func:`completion_decision_txn`. Anything else is refused: a completed
        run without a receipt, a run at another step, evidence or an assessment missing, and a
        receipt already there (unless ``refuse_receipt`` is False: a broken variant never looks).
        """
        run = self.load_txn(incident)
        if run.step is Step.REPORT_COMPLETED:
            stored = find_receipt_txn(self.conn, incident)
            if stored is None:
                raise InconsistentRun(incident, "it is at report_completed but has no receipt")
            return stored
        if run.step is not Step.EVIDENCE_RECORDED:
            raise StepOrderError(incident, run.step.value, "complete")
        return (run, *completion_decision_txn(self.conn, incident, self.workflow_version, refuse_receipt=refuse_receipt))

    def drive(self, incident: str) -> DriveResult:
        """Take a run from wherever it is recorded to ``report_completed``.

        The stored step alone decides what to do: a run with committed evidence is
        completed from that evidence, without asking the provider again.
        """
        result = self.finish(incident)
        if self.effects is None:
            return result
        return replace(result, effect=self.carry_out_effect(incident))

    def finish(self, incident: str) -> DriveResult:
        """The three steps of :meth:`drive`, without the owed effect: the run ends ``report_completed``."""
        from_step = self.start(incident).step
        _, read = self._inspect(incident)
        receipt, completed = self._complete(incident)
        return DriveResult(incident, from_step, read, completed, receipt)

    def carry_out_effect(self, incident: str) -> EffectState:
        """Carry out the completed run's owed effect (its ticket), reconciling first if it may exist.

        Raises when the outcome stays unknown (recorded as uncertain) or the destination did
        nothing; see :meth:`OwedEffect.carry_out` and :func:`labkit.effects.open_ticket`.
        """
        if self.effects is None:
            raise ValueError("this coordinator owes no effect (effects=None)")
        return self.effects.carry_out(self.conn, incident, self.clock, self.crash)
