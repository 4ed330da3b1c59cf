"""Assessments: what was concluded from an observation, and with which decision inputs.

Evidence is the observation (what the queue looked like). An assessment is a decision
made from it (the diagnosis) by a particular provider, rule set (or model), prompt and
contract revision: its **decision inputs**. Under workflow version 2, inspect records the
original assessment in the same transaction as the evidence, and completion builds the
report from the run's latest assessment.

A newer rule set does not silently change a past decision. :func:`labkit.versioning.reevaluate`
is a new, identifiable operation: it applies a rules revision to the *stored* observation (no new
read), records a new assessment beside the original with its reason and the inputs that
changed, and never overwrites evidence, assessments or receipts. Recovery never calls it.

The original assessment is part of the evidence record every run of the current workflow
version writes (:func:`labkit.store.store_evidence_txn` records it with the row), and the
report is built from the latest: so this module is the core's, and re-evaluation, which only
adds rows, is the mechanism's (:mod:`labkit.versioning`). Taught in 08_versioning.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass

from .clock import Clock
from .database import require_write_transaction
from .jsontext import canonical_json

#: The table itself is in labkit.schema (ASSESSMENTS_TABLE_V3).

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
