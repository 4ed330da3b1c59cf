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
- ``retry_without_key`` (09_external_effects, 12_crash_explorer): opens the ticket with a
  new idempotency key for every attempt (numbered by the attempts it has committed) and, when
  an answer times out, simply tries again. A request that was committed but answered too
  late, or answered to a process that then died, becomes a second ticket.
- ``no_receipt_key`` (12_crash_explorer): completion mints a fresh receipt id for every
  attempt instead of deriving it from the run, and commits the receipt before the step. A
  crash between the two leaves a receipt nobody will recognise as this attempt's: the next
  attempt inserts another, the table's primary key refuses it, and the run can never finish.
- ``reread_committed_evidence`` (12_crash_explorer): recovery that "refreshes" a resumed run
  by asking the provider again, although the evidence it needs is committed. Every crash
  after the evidence commit costs a read that invariant 5 says never happens.

The explorer (:mod:`labkit.lab.explorer`) switches on the ones a crash can reveal
(:data:`CRASH_BUGS`); ``check_then_act_completion`` needs a race, not a crash, to show.
"""

from __future__ import annotations

import os
import sqlite3

from ..clock import Clock
from ..contract import CONTRACT, check_evidence
from ..coordinator import Coordinator, DriveResult
from ..crashpoints import NO_CRASH, CrashPlan, CrashPoint
from ..database import read_transaction, transaction
from ..effects import TICKET_TIMEOUT, Effect, Tickets, find_effect_txn
from ..errors import EffectNotDone, InconsistentRun, StepOrderError, UnknownBug
from ..jsontext import canonical_json
from ..provider import ReadAdapter
from ..receipts import Receipt, find_receipt_txn, issue_receipt_txn
from ..report import build_report
from ..steps import Step
from ..store import Run, advance_txn, load_evidence_txn, store_evidence_txn
from ..ticket_client import post_ticket


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

    def carry_out_effect(self, incident: str) -> Effect:
        assert isinstance(self.effects, Tickets), "this variant needs a ticket service (effects=Tickets(url))"
        with transaction(self.conn):
            effect = find_effect_txn(self.conn, incident)
        if effect is None or effect.state in ("done", "resolved"):
            return self.effects.carry_out(self.conn, incident, self.clock, self.crash)
        for _ in range(3):
            with transaction(self.conn):  # it does count its attempts, durably, before each send ...
                self.conn.execute("UPDATE effects SET attempts = attempts + 1 WHERE incident = ?", (incident,))
                attempt = self.conn.execute("SELECT attempts FROM effects WHERE incident = ?", (incident,)).fetchone()[0]
            key = f"{effect.operation_key}-attempt-{attempt}"  # ... and that is the bug: the key changes with the attempt
            self.crash.reached(CrashPoint.BEFORE_SEND, self.conn)
            answer = post_ticket(self.effects.url, key, effect.request, TICKET_TIMEOUT)
            self.crash.reached(CrashPoint.AFTER_SEND, self.conn)
            if answer.outcome in ("created", "replayed"):
                with transaction(self.conn):
                    self.conn.execute(
                        "UPDATE effects SET state = 'done', ticket = ?, last_outcome = ? WHERE incident = ?",
                        (answer.ticket, f"{answer.outcome} on attempt {attempt}", incident),
                    )
                    stored = find_effect_txn(self.conn, incident)
                assert stored is not None
                return stored
        raise EffectNotDone(incident, "three attempts, no answer")


class FreshReceiptIdCoordinator(Coordinator):
    """Completion without a receipt key: a new receipt id per attempt, the receipt committed before the step."""

    def _complete(self, incident: str) -> tuple[Receipt, bool]:
        with transaction(self.conn):
            inputs = self.completion_inputs_txn(incident, refuse_receipt=False)
            if isinstance(inputs, Receipt):
                return inputs, False
            run, _, evidence, assessment = inputs  # the stored receipt, if any, is never looked at: the bug
            self.crash.reached(CrashPoint.BEFORE_RECEIPT_WRITE, self.conn)
            report = build_report(evidence, assessment)
            # The bug: an id minted for this attempt (its process and clock), not derived from the
            # run, and no look-up first: nothing tells this attempt that an earlier one got this far.
            receipt = Receipt(incident, f"rcpt-{os.getpid()}-{self.clock.now()}", report["evidence_digest"], report, self.clock.now())
            self.conn.execute(
                "INSERT INTO receipts (incident, receipt_id, evidence_digest, report, issued_at) VALUES (?, ?, ?, ?, ?)",
                (incident, receipt.receipt_id, receipt.evidence_digest, canonical_json(report), receipt.issued_at),
            )
        with transaction(self.conn):  # ... and the step in a second commit
            self.mark_completed_txn(self.load_txn(incident), report)
        self.crash.reached(CrashPoint.AFTER_COMPLETION_COMMIT, self.conn)
        return receipt, True


class RereadOnRecoveryCoordinator(Coordinator):
    """Recovery that asks the provider again for a run whose evidence is already committed."""

    def finish(self, incident: str) -> DriveResult:
        from_step = self.start(incident).step
        if from_step is not Step.NOT_INSPECTED:
            # The bug: "refresh before finishing". The answer is checked and thrown away; the
            # committed evidence is what completion uses, so only the provider's log shows it.
            check_evidence(self.provider.read(incident), incident)
            receipt, completed = self._complete(incident)
            return DriveResult(incident, from_step, True, completed, receipt)
        return super().finish(incident)


#: The broken variants by name, for ``--bug NAME``.
BUGS: dict[str, type[Coordinator]] = {
    "evidence_and_step_apart": TwoCommitCoordinator,
    "check_then_act_completion": CheckThenActCoordinator,
    "retry_without_key": RetryWithoutKeyCoordinator,
    "no_receipt_key": FreshReceiptIdCoordinator,
    "reread_committed_evidence": RereadOnRecoveryCoordinator,
}

#: The variants a crash reveals, which the crash explorer switches on by name (12_crash_explorer).
#: ``check_then_act_completion`` is left out: it breaks only when two workers race (06).
CRASH_BUGS: tuple[str, ...] = ("evidence_and_step_apart", "no_receipt_key", "reread_committed_evidence", "retry_without_key")


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
