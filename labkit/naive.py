"""Deliberately broken variants of the coordinator, which lessons and tests run on purpose.

Each one looks reasonable and passes a happy-path test; each breaks a guarantee under a
crash or a race, which is what the lessons show and what the crash suite and the race
test must catch. Nothing in labkit uses them unless asked by name
(``python -m labkit run --bug NAME``, :func:`coordinator_class`).

- ``evidence_and_step_apart`` (04_rollback): inspect commits the evidence, then moves the
  step in a second transaction. A crash between the two (at ``after_evidence_commit``)
  leaves a run at ``not_inspected`` that already has evidence.
- ``check_then_act_completion`` (06_single_receipt): complete reads the step in one
  transaction and writes the receipt in another. Two workers that both read
  ``evidence_recorded`` both go on to write; the loser fails instead of returning the
  winner's receipt.
- ``retry_without_key`` (09_external_effects): opens the ticket with a new idempotency key
  for every attempt and, when an answer times out, simply tries again. A request that was
  committed but answered too late becomes a second ticket.
"""

from __future__ import annotations

import sqlite3

from .clock import Clock
from .contract import CONTRACT, check_evidence
from .coordinator import Coordinator
from .crashpoints import NO_CRASH, CrashPlan, CrashPoint
from .database import read_transaction, transaction
from .effects import TICKET_TIMEOUT, Effect, EffectNotDone, find_effect_txn, open_ticket
from .errors import InconsistentRun, StepOrderError, UnknownBug
from .provider import ReadAdapter
from .receipts import Receipt, find_receipt_txn, issue_receipt_txn
from .report import build_report
from .steps import Step
from .store import Run, advance_txn, load_evidence_txn, store_evidence_txn


class TwoCommitCoordinator(Coordinator):
    """Evidence and step committed in two transactions: the gap between them is a trap."""

    def _inspect(self, incident: str) -> tuple[Run, bool]:
        with transaction(self.conn):
            run = self.load_txn(incident)
            if run.step is not Step.NOT_INSPECTED:
                return run, False
            self.crash.reached(CrashPoint.BEFORE_READ, self.conn)
            body = check_evidence(self.provider.read(incident), incident)
            self.crash.reached(CrashPoint.AFTER_READ, self.conn)
            store_evidence_txn(self.conn, incident, CONTRACT, body, self.clock)
            self.crash.reached(CrashPoint.BEFORE_EVIDENCE_COMMIT, self.conn)
        self.crash.reached(CrashPoint.AFTER_EVIDENCE_COMMIT, self.conn)  # the gap: evidence without its step
        with transaction(self.conn):
            run = advance_txn(self.conn, run, Step.EVIDENCE_RECORDED, self.clock)
        return run, True


class CheckThenActCoordinator(Coordinator):
    """Completion decided in one transaction and written in another: a race gets between them."""

    def _complete(self, incident: str) -> tuple[Receipt, bool]:
        with read_transaction(self.conn):
            run = self.load_txn(incident)
            stored = find_receipt_txn(self.conn, incident)
            if run.step is Step.REPORT_COMPLETED and stored is not None:
                return stored, False
            if run.step is not Step.EVIDENCE_RECORDED:
                raise StepOrderError(incident, run.step.value, "complete")
            evidence = load_evidence_txn(self.conn, incident)
            if evidence is None:
                raise InconsistentRun(incident, "it is at evidence_recorded but has no evidence")
        self.crash.reached(CrashPoint.BEFORE_RECEIPT_WRITE, self.conn)  # decided; the lock is not held
        with transaction(self.conn):
            receipt = issue_receipt_txn(self.conn, incident, self.workflow_version, build_report(evidence), self.clock)
            advance_txn(self.conn, run, Step.REPORT_COMPLETED, self.clock)
            self.crash.reached(CrashPoint.BEFORE_COMPLETION_COMMIT, self.conn)
        self.crash.reached(CrashPoint.AFTER_COMPLETION_COMMIT, self.conn)
        return receipt, True


class RetryWithoutKeyCoordinator(Coordinator):
    """Opens the ticket the way a hurried client does: a new request id per attempt, retry on timeout."""

    def open_ticket(self, incident: str) -> Effect:
        from .tickets import post_ticket

        assert self.tickets is not None, "this variant needs a ticket service"
        with transaction(self.conn):
            effect = find_effect_txn(self.conn, incident)
        if effect is None or effect.state in ("done", "resolved"):
            return open_ticket(self.conn, incident, self.tickets, self.clock, crash=self.crash)
        for attempt in (1, 2, 3):
            key = f"{effect.operation_key}-attempt-{attempt}"  # the bug: the key changes with the attempt
            self.crash.reached(CrashPoint.BEFORE_SEND, self.conn)
            answer = post_ticket(self.tickets, key, effect.request, TICKET_TIMEOUT)
            self.crash.reached(CrashPoint.AFTER_SEND, self.conn)
            if answer.outcome in ("created", "replayed"):
                with transaction(self.conn):
                    self.conn.execute(
                        "UPDATE effects SET state = 'done', ticket = ?, attempts = attempts + ?, last_outcome = ? WHERE incident = ?",
                        (answer.ticket, attempt, f"{answer.outcome} on attempt {attempt}", incident),
                    )
                    stored = find_effect_txn(self.conn, incident)
                assert stored is not None
                return stored
        raise EffectNotDone(incident, "three attempts, no answer")


#: The broken variants by name, for ``--bug NAME``.
BUGS: dict[str, type[Coordinator]] = {
    "evidence_and_step_apart": TwoCommitCoordinator,
    "check_then_act_completion": CheckThenActCoordinator,
    "retry_without_key": RetryWithoutKeyCoordinator,
}


def coordinator_class(bug: str | None) -> type[Coordinator]:
    """The coordinator to run: the real one, or the broken variant named ``bug``."""
    if bug is None:
        return Coordinator
    if bug not in BUGS:
        raise UnknownBug(bug, tuple(BUGS))
    return BUGS[bug]


def two_commit_inspect(
    conn: sqlite3.Connection, provider: ReadAdapter, incident: str, clock: Clock, *, fail_between: bool = False
) -> None:
    """Inspect the naive way (04_rollback): commit the evidence, then move the step.

    ``fail_between`` raises :class:`~labkit.errors.InjectedFailure` at
    ``after_evidence_commit``, the gap between the two commits, standing in for any crash
    there.
    """
    crash = CrashPlan(CrashPoint.AFTER_EVIDENCE_COMMIT, "raise") if fail_between else NO_CRASH
    TwoCommitCoordinator(conn, provider, clock=clock, crash=crash).inspect(incident)
