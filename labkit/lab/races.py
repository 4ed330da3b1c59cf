"""The stale worker's race, played out deterministically for 10_leases_and_fencing.

Two :class:`~labkit.worker.LeasedWorker` on two connections of this process share one
:class:`~labkit.clock.ManualClock`: worker A's lease runs out by hand, worker B takes the run
over, and A's late commit meets the fence.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from ..clock import ManualClock
from ..coordinator import WORKFLOW_VERSION
from ..database import read_transaction, transaction
from ..errors import StaleLease
from ..leases import FENCE, LeaseEvent, lease_events_txn
from ..provider import CallLog, ReadAdapter, ReferenceProvider, call_log_for
from ..store import connect, create_run_txn
from ..worker import LeasedResult, LeasedWorker


@dataclass(frozen=True)
class StaleRace:
    """What :func:`stale_worker_race` saw: the refusal, the winner, and the rows behind them."""

    refused: StaleLease
    winner: LeasedResult
    provider_reads: int
    receipts: int
    events: list[LeaseEvent]


def stale_worker_race(db: str | Path, incident: str, clock: ManualClock, *, lease_seconds: float = 30.0,
                      provider: ReadAdapter | None = None, condition: str = FENCE) -> StaleRace:
    """Worker A leases and reads, then stalls past its lease; B takes over and finishes; A commits late.

    Deterministic: the two workers are two connections in this process, and ``clock`` (a
    :class:`~labkit.clock.ManualClock` both share) is moved past A's lease by hand. The
    provider is read twice (its log shows both), the run ends with B's one receipt, and A's
    commit is refused with :class:`~labkit.errors.StaleLease`. With a ``condition`` weaker
    than :data:`~labkit.leases.FENCE`, A's commit may get through instead: then this raises
    AssertionError, which is what 10_leases_and_fencing's exercise checks.
    """
    provider = provider or ReferenceProvider(call_log_for(db))
    with closing(connect(db)) as conn_a, closing(connect(db)) as conn_b:
        with transaction(conn_a):
            create_run_txn(conn_a, incident, WORKFLOW_VERSION, clock)
        a = LeasedWorker(conn_a, provider, name="worker-A", lease_seconds=lease_seconds, clock=clock, condition=condition)
        b = LeasedWorker(conn_b, provider, name="worker-B", lease_seconds=lease_seconds, clock=clock, condition=condition)
        lease_a = a.claim(incident)
        reading_a = a.read(lease_a)
        clock.advance(lease_seconds + 1)  # A stalls: a pause, a swap storm; its lease runs out meanwhile
        winner = b.drive(incident)
        try:
            a.commit_evidence(lease_a, reading_a)
        except StaleLease as refused:
            error = refused
        else:
            raise AssertionError(f"worker A's late commit under lease {lease_a.token} was accepted after B's lease {winner.token}")
        with read_transaction(conn_a):
            receipts = conn_a.execute("SELECT COUNT(*) FROM receipts WHERE incident = ?", (incident,)).fetchone()[0]
            events = lease_events_txn(conn_a, incident)
    reads = CallLog(call_log_for(db)).reads_of(incident)
    return StaleRace(error, winner, reads, receipts, events)
