"""The recovery worker: reopen the database and finish what a dead process left.

It trusts nothing but the stored rows. A run at ``not_inspected`` is inspected (the
provider is read, possibly again: N1); a run at ``evidence_recorded`` is completed from
its committed evidence, without a read; a completed run is left alone. So running it twice
changes nothing the second time (invariant 7). It opens its own connection, as a separate
worker process would. Taught in 05_crash_and_reread and 06_single_receipt.
"""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

from .clock import Clock
from .coordinator import WORKFLOW_VERSION, Coordinator, DriveResult
from .crashpoints import NO_CRASH, CrashPlan
from .errors import WorkflowVersionMismatch
from .provider import ReadAdapter
from .steps import Step
from .store import connect, list_runs_txn


def recover(
    db_path: str | Path,
    provider: ReadAdapter,
    *,
    clock: Clock | None = None,
    crash: CrashPlan = NO_CRASH,
    workflow_version: int = WORKFLOW_VERSION,
) -> list[DriveResult]:
    """Resume every unfinished run from its recorded step; return what was done, by incident.

    Runs written by another workflow version are refused before anything is touched: this
    release cannot tell what their step means, and a half-done recovery is harder to reason
    about than none.
    """
    with closing(connect(db_path)) as conn:
        unfinished = [run for run in list_runs_txn(conn) if run.step is not Step.REPORT_COMPLETED]
        for run in unfinished:
            if run.workflow_version != workflow_version:
                raise WorkflowVersionMismatch(run.incident, run.workflow_version, workflow_version)
        coordinator = Coordinator(conn, provider, clock=clock, crash=crash, workflow_version=workflow_version)
        return [coordinator.drive(run.incident) for run in unfinished]
