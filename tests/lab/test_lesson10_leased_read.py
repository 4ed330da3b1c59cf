"""Lesson 10's claim that the leased flow reads the provider with no lock held: another process
commits a whole run while a leased worker is *inside* its read (not merely before or after it)."""

from __future__ import annotations

from contextlib import closing

import matplotlib
import pytest

import labkit
from labkit.database import transaction
from labkit.errors import StaleLease
from labkit.lab import run_in_child
from labkit.lab.display import lease_timeline_figure, lease_timeline_table
from labkit.provider import read_with_diagnostic
from labkit.store import create_run_txn
from labkit.worker import LeasedWorker

matplotlib.use("Agg")  # no window: the picture is only drawn


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


def test_the_lease_timeline_table_holds_the_numbers_the_picture_draws(lab):
    """A stalls past its 30 s lease, B takes over at 35 s and finishes at 40 s, A's commit at 45 s is refused."""
    clock = labkit.ManualClock()
    with closing(lab.connect()) as conn, transaction(conn):
        create_run_txn(conn, "INC-1002", labkit.WORKFLOW_VERSION, clock)
    a, b = (LeasedWorker(lab.connect(), lab.provider(), name=f"worker-{n}", lease_seconds=30, clock=clock) for n in "AB")
    try:
        lease_a = a.claim("INC-1002")
        reading_a = a.read(lease_a)
        clock.advance(35)
        lease_b = b.claim("INC-1002")
        reading_b = b.read(lease_b)
        clock.advance(5)
        b.complete(b.commit_evidence(lease_b, reading_b))
        clock.advance(5)
        with pytest.raises(StaleLease):
            a.commit_evidence(lease_a, reading_a)
    finally:
        a.conn.close()
        b.conn.close()
    rows = lease_timeline_table(lab.db, "INC-1002").to_dict("records")
    assert [(r["worker"], r["token"], r["from s"], r["to s"], r["ends"], r["events (s)"]) for r in rows] == [
        ("worker-A", 1, 0.0, 30.0, "expired", "✗45"),
        ("worker-B", 2, 35.0, 40.0, "completed", "✓40 ✓40"),
    ]
    lease_timeline_figure(lab.db, "INC-1002")  # draws without error
