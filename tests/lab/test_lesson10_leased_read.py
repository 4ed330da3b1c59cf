"""Lesson 10's claim that the leased flow reads the provider with no lock held: another process
commits a whole run while a leased worker is *inside* its read (not merely before or after it)."""

from __future__ import annotations

from contextlib import closing

import labkit
from labkit.database import transaction
from labkit.lab import run_in_child
from labkit.provider import read_with_diagnostic
from labkit.store import create_run_txn
from labkit.worker import LeasedWorker


class _ReadingWhile:
    """The real provider, running ``meanwhile()`` to its end in the middle of each read."""

    def __init__(self, provider, meanwhile):
        self.provider, self.meanwhile, self.seen = provider, meanwhile, []

    def read_with_diagnostic(self, incident):
        self.seen.append(self.meanwhile())
        return read_with_diagnostic(self.provider, incident)


def test_another_process_commits_a_run_while_the_leased_worker_is_inside_its_read(lab):
    clock = labkit.ManualClock()
    with closing(lab.connect()) as conn, transaction(conn):
        create_run_txn(conn, "INC-1001", labkit.WORKFLOW_VERSION, clock)
    impatient = {"LABKIT_BUSY_TIMEOUT_MS": "200"}
    provider = _ReadingWhile(lab.provider(), lambda: run_in_child(lab.db, "INC-1002", env=impatient))
    worker = LeasedWorker(lab.connect(), provider, name="worker-A", lease_seconds=30, clock=clock)
    try:
        lease = worker.claim("INC-1001")
        reading = worker.read(lease)
        worker.complete(worker.commit_evidence(lease, reading))
    finally:
        worker.conn.close()
    [meanwhile] = provider.seen
    assert meanwhile.status == "exit 0", meanwhile.message
    assert "INC-1002: report_completed" in meanwhile.stdout
