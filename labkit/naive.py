"""A first draft the lessons run on purpose, to show what the coordinator avoids.

Nothing else in labkit calls this. 04_rollback runs :func:`two_commit_inspect` beside the
coordinator's one-transaction ``inspect``: the evidence and the step are committed in two
transactions, so a failure between them leaves rows that contradict each other.
"""

from __future__ import annotations

import sqlite3

from .clock import Clock
from .contract import CONTRACT, check_evidence, evidence_digest
from .coordinator import WORKFLOW_VERSION
from .errors import InjectedFailure, StepOrderError
from .provider import ReadAdapter
from .steps import Step
from .store import advance_txn, load_run_txn, store_evidence_txn, transaction


def two_commit_inspect(
    conn: sqlite3.Connection, provider: ReadAdapter, incident: str, clock: Clock, *, fail_between: bool = False
) -> None:
    """Inspect the naive way: commit the evidence, then move the step in a second transaction.

    ``fail_between`` raises :class:`~labkit.errors.InjectedFailure` after the first commit,
    standing in for any crash in that gap.
    """
    with transaction(conn):
        run = load_run_txn(conn, incident, WORKFLOW_VERSION)
        if run.step is not Step.NOT_INSPECTED:
            raise StepOrderError(incident, run.step.value, "inspect")
        body = check_evidence(provider.read(incident), incident)
        store_evidence_txn(conn, incident, CONTRACT, body, evidence_digest(body), clock)
    if fail_between:
        raise InjectedFailure("between_the_two_commits")
    with transaction(conn):
        advance_txn(conn, run, Step.EVIDENCE_RECORDED, clock)
