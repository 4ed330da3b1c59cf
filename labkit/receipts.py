"""The receipt table: proof that a run completed locally, at most one per run.

"At most one" is held by the database: ``receipts.incident`` is the primary key, so a
second INSERT for the same run fails whatever the code above it does. The coordinator
checks first and returns the stored receipt on a repeat; the key is the backstop for the
day that check has a bug, or two processes race (06_single_receipt).

A receipt records local completion only. It says nothing about a ticket created, a page
sent or any other remote effect: those need their own ledger (09_external_effects).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass

from .clock import Clock
from .errors import ReceiptConflict
from .store import canonical_json


@dataclass(frozen=True)
class Receipt:
    incident: str
    receipt_id: str
    evidence_digest: str
    report: dict
    issued_at: str


def receipt_id_for(incident: str, workflow_version: int) -> str:
    """Derived, not random: the same run always gets the same receipt id, so outputs are stable."""
    digest = hashlib.sha256(f"receipt:{incident}:v{workflow_version}".encode("utf-8")).hexdigest()
    return f"rcpt-{digest[:12]}"


def find_receipt_txn(conn: sqlite3.Connection, incident: str) -> Receipt | None:
    row = conn.execute("SELECT * FROM receipts WHERE incident = ?", (incident,)).fetchone()
    if row is None:
        return None
    return Receipt(row["incident"], row["receipt_id"], row["evidence_digest"], json.loads(row["report"]), row["issued_at"])


def issue_receipt_txn(
    conn: sqlite3.Connection, incident: str, workflow_version: int, report: dict, clock: Clock
) -> Receipt:
    """Insert the run's receipt, or return the stored one if this is the same operation again.

    The coordinator only calls this for a run at ``evidence_recorded``, so the stored-receipt
    branch is a backstop: it keeps a second caller that skipped the step check (a bug, another
    tool) from either duplicating the receipt or silently overwriting it with other evidence.
    """
    stored = find_receipt_txn(conn, incident)
    if stored is not None:
        if stored.evidence_digest != report["evidence_digest"]:
            raise ReceiptConflict(incident, stored.evidence_digest, report["evidence_digest"])
        return stored
    receipt = Receipt(incident, receipt_id_for(incident, workflow_version), report["evidence_digest"], report, clock.now())
    conn.execute(
        "INSERT INTO receipts (incident, receipt_id, evidence_digest, report, issued_at) VALUES (?, ?, ?, ?, ?)",
        (receipt.incident, receipt.receipt_id, receipt.evidence_digest, canonical_json(report), receipt.issued_at),
    )
    return receipt
