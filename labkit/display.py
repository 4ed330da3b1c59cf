"""Small tables for notebooks: the durable state, as pandas frames.

Every function opens its own short, read-only connection and closes it, the way an
operator's query would; none of them writes, and a path where no database exists is
refused rather than created. Timestamps come from the injected clock, so frames are stable
from run to run. pandas is imported here only, so the command line starts fast.
"""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

import pandas as pd

from .provider import CallLog, call_log_for
from .status import status_of
from .store import connect_readonly


def _query(db: str | Path, sql: str, params: tuple = ()) -> pd.DataFrame:
    with closing(connect_readonly(db)) as conn:
        cursor = conn.execute(sql, params)
        columns = [column[0] for column in cursor.description]
        return pd.DataFrame([tuple(row) for row in cursor.fetchall()], columns=columns)


def runs_frame(db: str | Path) -> pd.DataFrame:
    """One row per run: its step, the state version that guards its next transition."""
    return _query(db, "SELECT incident, workflow_version, step, version AS state_version, updated_at FROM runs ORDER BY incident")


def evidence_frame(db: str | Path) -> pd.DataFrame:
    """Committed evidence, reduced to what a reader checks: the diagnosis and the numbers behind it."""
    frame = _query(db, "SELECT incident, body, digest FROM evidence ORDER BY incident")
    bodies = [json.loads(body) for body in frame["body"]]
    return pd.DataFrame({
        "incident": frame["incident"],
        "queue": [b["queue"]["name"] for b in bodies],
        "consumers": [b["queue"]["consumers"] for b in bodies],
        "messages_ready": [b["queue"]["messages_ready"] for b in bodies],
        "kind": [b["diagnosis"]["kind"] for b in bodies],
        "digest": [digest[:12] for digest in frame["digest"]],
    })


def receipts_frame(db: str | Path) -> pd.DataFrame:
    frame = _query(db, "SELECT incident, receipt_id, evidence_digest, report, issued_at FROM receipts ORDER BY incident")
    return pd.DataFrame({
        "incident": frame["incident"],
        "receipt_id": frame["receipt_id"],
        "kind": [json.loads(report)["kind"] for report in frame["report"]],
        "evidence": [digest[:12] for digest in frame["evidence_digest"]],
        "issued_at": frame["issued_at"],
    })


def transitions_frame(db: str | Path, incident: str | None = None) -> pd.DataFrame:
    """The history of steps, oldest first: the timeline of each run."""
    where, params = ("WHERE incident = ?", (incident,)) if incident else ("", ())
    # The transition that creates a run comes from no step; show that instead of a NULL.
    sql = (
        "SELECT seq, incident, COALESCE(from_step, '(created)') AS from_step, to_step, state_version, at"
        f" FROM transitions {where} ORDER BY seq"
    )
    return _query(db, sql, params)


def provider_calls_frame(db_or_log: str | Path) -> pd.DataFrame:
    """The provider's own log of calls (kept outside the database), one row per call."""
    path = Path(db_or_log)
    log = CallLog(path if path.name.endswith(".jsonl") else call_log_for(path))
    rows = [(c.call, c.incident, c.outcome, c.response_bytes) for c in log.calls()]
    return pd.DataFrame(rows, columns=["call", "incident", "outcome", "response_bytes"])


def restart_frame(db: str | Path, incidents: list[str]) -> pd.DataFrame:
    """The three restart questions for each incident, answered from its rows (labkit.lesson)."""
    from .lesson import restart_answers

    return pd.DataFrame([restart_answers(db, incident).as_row() for incident in incidents]).set_index("incident")


def status_frame(db: str | Path) -> pd.DataFrame:
    """What ``python -m labkit status --json`` reports, as a table."""
    runs = status_of(db)["runs"]
    columns = ["incident", "workflow_version", "step", "evidence", "receipts", "provider_reads"]
    return pd.DataFrame([{c: run[c] for c in columns} for run in runs], columns=columns)


def assessments_frame(db: str | Path, incident: str | None = None) -> pd.DataFrame:
    """Every assessment, oldest first: what was concluded, by which decision inputs, and why."""
    where, params = ("WHERE incident = ?", (incident,)) if incident else ("", ())
    sql = (
        "SELECT incident, seq, origin, kind, provider, rules_revision, contract, COALESCE(reason, '') AS reason,"
        f" changed, at FROM assessments {where} ORDER BY incident, seq"
    )
    frame = _query(db, sql, params)
    # A revision may be NULL (a row from before revisions were kept): keep whole numbers whole.
    frame["rules_revision"] = frame["rules_revision"].astype("Int64")
    return frame


def migrations_frame(db: str | Path) -> pd.DataFrame:
    """The migration log: which runs moved from which workflow version to which, when and why."""
    return _query(db, "SELECT seq, from_version, to_version, runs, at, reason FROM migrations ORDER BY seq")
