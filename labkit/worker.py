"""The leased flow: a worker that claims a lease, reads outside any transaction, commits fenced.

:class:`LeasedWorker` drives a run the way a production worker would
(:mod:`labkit.leases` explains why): claim a lease, read the provider with no transaction
open, then commit the evidence and the completion, each in one short transaction fenced by
(expected state version, token). The reference :class:`~labkit.coordinator.Coordinator`
stays as it is for lessons 02 to 09; both write the same rows, the leased one adds its lease.

The pool of worker processes that runs it, ``python -m labkit work``, is :mod:`labkit.pool`.
Taught in 10_leases_and_fencing.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import contract
from .clock import Clock, SystemClock
from .coordinator import WORKFLOW_VERSION, completion_decision_txn, issue_completion_txn, record_evidence_txn
from .crashpoints import NO_CRASH, CrashPlan, CrashPoint
from .database import transaction
from .errors import InconsistentRun, LabError, LeaseEnded, LeaseExpired, StaleLease, StepOrderError
from .leases import (
    FENCE,
    Lease,
    check_lease_seconds,
    check_worker_name,
    claim,
    claim_next,
    end_lease_txn,
    fenced_advance_txn,
    release,
    renew,
)
from .provider import ReadAdapter, Reading, read_with_diagnostic
from .receipts import Receipt
from .steps import Step
from .store import has_evidence_txn

#: A lease's time to live in ``work`` unless ``--lease-seconds`` says otherwise. Workers renew
#: at a third of it, so a slow provider never costs a live worker its lease; a killed
#: worker's run waits at most this long before another worker takes it over.
DEFAULT_LEASE_SECONDS = 5.0


@dataclass(frozen=True)
class CheckedReading:
    """A provider's answer that passed the evidence contract, not yet committed: a candidate.

    ``body`` is the contract-checked response; ``diagnostic`` the raw diagnostic it came
    from, stored apart and redacted with the evidence (:func:`labkit.coordinator.record_evidence_txn`).
    """

    incident: str
    body: dict
    diagnostic: bytes | str


@dataclass(frozen=True)
class LeasedResult:
    """What one worker did with one leased run."""

    incident: str
    token: int
    from_step: Step
    read_provider: bool
    receipt: Receipt
    took_over: int | None = None  # the expired lease this one replaced

    @property
    def outcome(self) -> str:
        read = "read the provider" if self.read_provider else "completed from committed evidence, no read"
        over = f", took over expired lease {self.took_over}" if self.took_over is not None else ""
        return f"report_completed under lease {self.token}{over}, receipt {self.receipt.receipt_id} ({read})"


class LeasedWorker:
    """A worker of the leased flow: claim, read outside any transaction, commit fenced.

    The same steps as :class:`~labkit.coordinator.Coordinator`, in other transactions:

    ====================  =====================================  ======================================
    step                  Coordinator (lessons 02-09)            LeasedWorker
    ====================  =====================================  ======================================
    who works on the run  whoever gets the write lock            the holder of its lease (``claim``)
    provider read         inside the write transaction           with no transaction open (``read``)
    evidence commit       same transaction as the read           short, fenced (``commit_evidence``)
    completion            one transaction                        one fenced transaction (``complete``)
    ====================  =====================================  ======================================

    ``condition`` replaces :data:`~labkit.leases.FENCE` (10_leases_and_fencing's exercise).
    ``crash`` arms a crash point, as for a run; ``after_lease`` is the leased flow's own.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        provider: ReadAdapter,
        *,
        name: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        clock: Clock | None = None,
        crash: CrashPlan = NO_CRASH,
        condition: str = FENCE,
    ):
        self.conn = conn
        self.provider = provider
        self.name = check_worker_name(name)
        self.lease_seconds = check_lease_seconds(lease_seconds)
        self.clock = clock or SystemClock(milliseconds=True)
        self.crash = crash
        self.condition = condition

    def __repr__(self) -> str:
        return f"LeasedWorker({self.name!r})"

    def claim(self, incident: str) -> Lease:
        lease = claim(self.conn, incident, self.name, self.lease_seconds, self.clock)
        self.crash.reached(CrashPoint.AFTER_LEASE, self.conn)
        return lease

    def claim_next(self, incidents: Sequence[str] | None = None, failed_after: int | None = None) -> Lease | None:
        lease = claim_next(self.conn, self.name, self.lease_seconds, self.clock, incidents=incidents, failed_after=failed_after)
        if lease is not None:
            self.crash.reached(CrashPoint.AFTER_LEASE, self.conn)
        return lease

    def renew(self, lease: Lease) -> Lease:
        return renew(self.conn, lease, self.lease_seconds, self.clock)

    def release(self, lease: Lease, failure: str | None = None) -> bool:
        return release(self.conn, lease, self.clock, failure=failure)

    def read(self, lease: Lease, *, renew: bool = False) -> CheckedReading:
        """Ask the provider, with no transaction open, and check the answer against the evidence contract.

        Nothing is committed: the answer is only a candidate until :meth:`commit_evidence`.
        The provider's own log records the read either way. With ``renew``, the lease is
        renewed at a third of its time to live while the provider takes its time
        (:meth:`_call_renewing`): a slow provider then never costs a live worker its lease.
        """
        if self.conn.in_transaction:
            raise RuntimeError("the leased flow reads the provider with no transaction open; this connection has one")
        if lease.step is not Step.NOT_INSPECTED:
            raise StepOrderError(lease.incident, lease.step.value, "inspect")
        self.crash.reached(CrashPoint.BEFORE_READ, self.conn)
        reading = self._call_renewing(lease) if renew else read_with_diagnostic(self.provider, lease.incident)
        self.crash.reached(CrashPoint.AFTER_READ, self.conn)
        return CheckedReading(lease.incident, contract.check_evidence(reading.response, lease.incident), reading.diagnostic)

    def _call_renewing(self, lease: Lease) -> Reading:
        """The provider call in a thread of its own, while this thread renews the lease on this worker's connection.

        Why not a second connection for a heartbeat: labkit opens a file by reading its header
        first, and POSIX drops every lock a process holds on a file when *any* descriptor of
        it is closed. A second connection in a process whose first one holds SQLite's locks
        therefore silently releases them, and another process may then take itself for the
        last user of the database and delete its write-ahead log under this one (SQLite's
        "How To Corrupt", 2.2): the soak found exactly that. The thread only calls the
        provider; every database statement stays on this thread and this connection.

        A worker paused as a whole (SIGSTOP, a swap storm) stops renewing too: that is the
        stale worker the fence is for.
        """
        answer: dict[str, Any] = {}

        def call() -> None:
            try:
                answer["reading"] = read_with_diagnostic(self.provider, lease.incident)
            except BaseException as error:  # handed to the worker's thread, which raises it
                answer["error"] = error

        caller = threading.Thread(target=call, name=f"provider-{lease.incident}", daemon=True)
        caller.start()
        current: Lease | None = lease
        while True:
            caller.join(self.lease_seconds / 3)
            if not caller.is_alive():
                break
            if current is None:
                continue  # lost: the fence will refuse this worker's commit; wait for the answer all the same
            try:
                current = self.renew(current)
            except (StaleLease, LeaseExpired, LeaseEnded):
                current = None
            except (LabError, sqlite3.Error):
                pass  # the database was busy: the next beat tries again, before the lease runs out
        if "error" in answer:
            raise answer["error"]
        return answer["reading"]

    def commit_evidence(self, lease: Lease, reading: CheckedReading) -> Lease:
        """Commit the evidence and the step, fenced; return the lease at ``evidence_recorded``.

        Raises :class:`~labkit.errors.StaleLease` if the fence refuses: the evidence is
        discarded, and only the refusal is written.
        """
        refused: StaleLease | None = None
        with transaction(self.conn):
            try:
                advanced = fenced_advance_txn(self.conn, lease, self.clock, condition=self.condition)
            except StaleLease as error:
                refused = error  # committed as a `refused` event, nothing else
            else:
                if has_evidence_txn(self.conn, lease.incident):
                    raise InconsistentRun(lease.incident, "it was at not_inspected but already had evidence")
                if reading.incident != lease.incident:
                    raise ValueError(f"a reading of {reading.incident} cannot be committed to run {lease.incident}")
                # The reference flow's evidence write: bounded evidence with a reference to the raw
                # diagnostic, kept apart, both redacted before anything is written.
                record_evidence_txn(self.conn, lease.incident, reading.body, reading.diagnostic, self.provider, self.clock,
                                    WORKFLOW_VERSION)
                self.crash.reached(CrashPoint.BEFORE_EVIDENCE_COMMIT, self.conn)
        if refused is not None:
            raise refused
        self.crash.reached(CrashPoint.AFTER_EVIDENCE_COMMIT, self.conn)
        return advanced

    def complete(self, lease: Lease) -> Receipt:
        """Build the report from stored evidence and commit receipt, step and the lease's end, fenced."""
        refused: StaleLease | None = None
        with transaction(self.conn):
            self.crash.reached(CrashPoint.BEFORE_RECEIPT_WRITE, self.conn)
            try:
                fenced_advance_txn(self.conn, lease, self.clock, condition=self.condition)
            except StaleLease as error:
                refused = error
            else:
                # The coordinator's completion decision and write; the fence above replaced its step check.
                _, evidence, assessment = completion_decision_txn(self.conn, lease.incident, WORKFLOW_VERSION)
                receipt, _ = issue_completion_txn(self.conn, lease.incident, WORKFLOW_VERSION, evidence, assessment, self.clock)
                end_lease_txn(self.conn, lease, self.clock)
                self.crash.reached(CrashPoint.BEFORE_COMPLETION_COMMIT, self.conn)
        if refused is not None:
            raise refused
        self.crash.reached(CrashPoint.AFTER_COMPLETION_COMMIT, self.conn)
        return receipt

    def finish(self, lease: Lease, *, renew: bool = False) -> LeasedResult:
        """Take a leased run from its step to ``report_completed``; with ``renew``, renew the lease while reading."""
        from_step = lease.step
        read = lease.step is Step.NOT_INSPECTED
        if read:
            lease = self.commit_evidence(lease, self.read(lease, renew=renew))
        receipt = self.complete(lease)
        return LeasedResult(lease.incident, lease.token, from_step, read, receipt, lease.replaces)

    def drive(self, incident: str) -> LeasedResult:
        """Claim ``incident``'s run and finish it, without renewing: for lessons, whose clock is in their hands."""
        return self.finish(self.claim(incident))
