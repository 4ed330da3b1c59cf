"""What ``python -m labkit status --json`` reports: every run, its proof, and its reads.

``provider_reads`` comes from the provider's own call log, not from the database, which is
the point: it counts reads the database kept no trace of (N1). A run's ``effect`` is read
from the effect ledger's table directly (labkit.schema); what the states mean, and how an
effect moves between them, is :mod:`labkit.effects`'s.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from contextlib import closing
from pathlib import Path

from .coordinator import WORKFLOW_VERSION
from .database import read_transaction
from .provider import CallLog, call_log_for
from .receipts import receipt_id_txn
from .store import SCHEMA_VERSION, connect_readonly, has_evidence_txn, list_runs_txn


def status_of(db: str | Path) -> dict:
    """The status object, with at least incident, workflow_version, step, receipts, provider_reads per run.

    Read only: the database must exist, and nothing is written to it or beside it, so
    status works in a read-only folder and on a mistyped path it creates nothing.
    """
    log = CallLog(call_log_for(db))
    log.calls()  # a damaged log is refused before the database is even opened
    with closing(connect_readonly(db)) as conn, read_transaction(conn):
        runs = [
            {
                "incident": run.incident,
                "workflow_version": run.workflow_version,
                "step": run.step.value,
                "state_version": run.version,
                "evidence": has_evidence_txn(conn, run.incident),
                "receipts": conn.execute("SELECT COUNT(*) FROM receipts WHERE incident = ?", (run.incident,)).fetchone()[0],
                "receipt_id": receipt_id_txn(conn, run.incident),
                "assessments": conn.execute("SELECT COUNT(*) FROM assessments WHERE incident = ?", (run.incident,)).fetchone()[0],
                "effect": _effect_txn(conn, run.incident),
            }
            for run in list_runs_txn(conn)
        ]
    # The log is read after the database: a read is logged before its evidence commits, so
    # this order never shows committed evidence with fewer reads than it took.
    reads = Counter(call.incident for call in log.calls())  # one pass over the log, not one per run
    for run in runs:
        run["provider_reads"] = reads[run["incident"]]
    return {"schema_version": SCHEMA_VERSION, "workflow_version": WORKFLOW_VERSION, "runs": runs}


def _effect_txn(conn: sqlite3.Connection, incident: str) -> dict[str, object]:
    """The run's effect as status shows it: its state, operation key and ticket, or state ``none``."""
    row = conn.execute("SELECT state, operation_key, ticket FROM effects WHERE incident = ?", (incident,)).fetchone()
    return dict(row) if row is not None else {"state": "none", "operation_key": None, "ticket": None}
