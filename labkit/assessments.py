"""Assessments: what was concluded from an observation, and with which decision inputs.

Evidence is the observation (what the queue looked like). An assessment is a decision
made from it (the diagnosis) by a particular provider, rule set (or model), prompt and
contract revision: its **decision inputs**. Under workflow version 2, inspect records the
original assessment in the same transaction as the evidence, and completion builds the
report from the run's latest assessment.

A newer rule set does not silently change a past decision. :func:`reevaluate` is a new,
identifiable operation: it applies a rules revision to the *stored* observation (no new
read), records a new assessment beside the original with its reason and the inputs that
changed, and never overwrites evidence, assessments or receipts. Recovery never calls it.
Taught in 08_versioning.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from .clock import Clock
from .database import require_write_transaction, transaction
from .errors import BadInput, UnknownRun
from .jsontext import canonical_json

#: Schema version 3 (store.MIGRATIONS applies it once; never edited).
ASSESSMENTS_TABLE_V3 = """CREATE TABLE assessments (
            incident         TEXT NOT NULL REFERENCES runs (incident),
            seq              INTEGER NOT NULL,            -- 1 is the original; later ones are re-evaluations
            origin           TEXT NOT NULL CHECK (origin IN ('inspection', 'reevaluation')),
            kind             TEXT NOT NULL,
            summary          TEXT NOT NULL,
            signals          TEXT NOT NULL,               -- JSON list
            provider         TEXT NOT NULL,
            rules_revision   INTEGER,
            prompt_revision  TEXT,
            contract         TEXT NOT NULL,
            reason           TEXT,                        -- why a re-evaluation ran
            changed          TEXT NOT NULL DEFAULT '[]',  -- JSON list: decision inputs that differ from the one before
            at               TEXT NOT NULL,
            PRIMARY KEY (incident, seq)
        ) STRICT"""

#: The decision inputs, in the order they are shown.
DECISION_INPUTS = ("provider", "rules_revision", "prompt_revision", "contract")


@dataclass(frozen=True)
class Assessment:
    incident: str
    seq: int
    origin: str
    kind: str
    summary: str
    signals: list[str]
    provider: str
    rules_revision: int | None
    prompt_revision: str | None
    contract: str
    reason: str | None
    changed: list[str]
    at: str

    @property
    def inputs(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in DECISION_INPUTS}

    @property
    def diagnosis(self) -> dict[str, object]:
        return {"kind": self.kind, "summary": self.summary, "signals": list(self.signals)}


class NothingToReevaluate(BadInput):
    def __init__(self, incident: str, why: str):
        self.incident = incident
        super().__init__(f"run {incident!r} cannot be re-evaluated: {why}")


def _from_row(row: sqlite3.Row) -> Assessment:
    return Assessment(
        row["incident"], row["seq"], row["origin"], row["kind"], row["summary"], json.loads(row["signals"]),
        row["provider"], row["rules_revision"], row["prompt_revision"], row["contract"], row["reason"],
        json.loads(row["changed"]), row["at"],
    )


def list_assessments_txn(conn: sqlite3.Connection, incident: str) -> list[Assessment]:
    rows = conn.execute("SELECT * FROM assessments WHERE incident = ? ORDER BY seq", (incident,))
    return [_from_row(row) for row in rows]


def latest_assessment_txn(conn: sqlite3.Connection, incident: str) -> Assessment | None:
    row = conn.execute("SELECT * FROM assessments WHERE incident = ? ORDER BY seq DESC LIMIT 1", (incident,)).fetchone()
    return _from_row(row) if row else None


def record_assessment_txn(
    conn: sqlite3.Connection,
    incident: str,
    origin: str,
    diagnosis: Mapping[str, object],
    inputs: Mapping[str, object],
    clock: Clock,
    reason: str | None = None,
) -> Assessment:
    """Append an assessment; the first of a run is its original, each later one a re-evaluation."""
    require_write_transaction(conn, "record_assessment_txn")
    previous = latest_assessment_txn(conn, incident)
    seq = 1 if previous is None else previous.seq + 1
    changed = [] if previous is None else [name for name in DECISION_INPUTS if previous.inputs[name] != inputs.get(name)]
    signals = diagnosis.get("signals", [])
    assessment = Assessment(
        incident, seq, origin, str(diagnosis["kind"]), str(diagnosis["summary"]), list(signals) if isinstance(signals, list) else [],
        str(inputs.get("provider") or "unknown"), _int_or_none(inputs.get("rules_revision")), _str_or_none(inputs.get("prompt_revision")),
        str(inputs["contract"]), reason, changed, clock.now(),
    )
    conn.execute(
        "INSERT INTO assessments (incident, seq, origin, kind, summary, signals, provider, rules_revision, prompt_revision,"
        " contract, reason, changed, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            incident, seq, origin, assessment.kind, assessment.summary, canonical_json(assessment.signals), assessment.provider,
            assessment.rules_revision, assessment.prompt_revision, assessment.contract, reason, canonical_json(changed), assessment.at,
        ),
    )
    return assessment


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def reevaluate(db: str | Path, incident: str, reason: str, clock: Clock, rules_revision: int | None = None) -> Assessment:
    """Apply a rules revision to the run's stored observation and record a new assessment beside the old.

    No provider call: the observation is the committed evidence. The evidence, earlier
    assessments and any receipt stay as they are. ``rules_revision`` defaults to the newest.
    """
    from . import provider
    from .store import connect, find_run_txn, load_evidence_txn

    if not reason.strip():
        raise NothingToReevaluate(incident, "a re-evaluation needs a reason (--reason TEXT): it is a decision someone made")
    revision = provider.LATEST_RULES_REVISION if rules_revision is None else rules_revision
    if revision not in provider.RULES_REVISIONS:
        known = ", ".join(map(str, provider.RULES_REVISIONS))
        raise NothingToReevaluate(incident, f"there is no rules revision {revision} (known: {known})")
    with closing(connect(db, create=False)) as conn, transaction(conn):
        if find_run_txn(conn, incident) is None:
            raise UnknownRun(incident)
        evidence = load_evidence_txn(conn, incident)
        if evidence is None:
            raise NothingToReevaluate(incident, "it has no committed evidence yet (it is at not_inspected); run or recover it first")
        observation = {key: value for key, value in evidence.body.items() if key != "diagnosis"}
        diagnosis = provider.assess(observation, revision)
        if latest_assessment_txn(conn, incident) is None:
            # A run inspected before assessments existed (workflow version 1): its evidence's own
            # diagnosis is the original decision; record it first, so the new one stands beside it.
            original_inputs = {name: getattr(evidence, name) for name in DECISION_INPUTS}
            record_assessment_txn(conn, incident, "inspection", evidence.body["diagnosis"], original_inputs, clock)
        inputs = {
            "provider": provider.REFERENCE_PROVIDER, "rules_revision": revision, "prompt_revision": None, "contract": evidence.contract,
        }
        return record_assessment_txn(conn, incident, "reevaluation", diagnosis, inputs, clock, reason=reason)
