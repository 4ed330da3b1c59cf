"""The receipt table: proof that a run completed locally, at most one per run.

The table and its rule live together here. "At most one" is held by the database:
``receipts.incident`` is the primary key, so a second INSERT for the same run fails
whatever the code above it does. The repeat policy is read beside it: a second issue of
the *same* receipt (same run, same evidence) returns the stored one; a receipt for other
evidence is a :class:`~labkit.errors.ReceiptConflict`. The coordinator checks the step
first and never reaches the key on a repeat; the key is the backstop for the day that
check has a bug, or two processes race (06_single_receipt).

A receipt records local completion only. It says nothing about a ticket created, a page
sent or any other remote effect: those need their own ledger (09_external_effects).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from .clock import Clock
from .database import require_write_transaction
from .errors import InconsistentRun, ReceiptConflict
from .jsontext import JsonProblem, canonical_json, sha256_hex, strict_loads

#: The table itself is in labkit.schema (RECEIPTS_TABLE_V1).

#: SQLite's extended result codes when a PRIMARY KEY or a UNIQUE column refuses a row: the
#: receipt id is derived from the run, so a second receipt can meet either first.
_KEY_REFUSED = {1555, 2067}


@dataclass(frozen=True)
class Receipt:
    incident: str
    receipt_id: str
    evidence_digest: str
    report: dict
    issued_at: str


def receipt_id_for(incident: str, workflow_version: int) -> str:
    """Derived, not random: the same run always gets the same receipt id, so outputs are stable."""
    digest = sha256_hex(f"receipt:{incident}:v{workflow_version}")
    return f"rcpt-{digest[:12]}"


def find_receipt_txn(conn: sqlite3.Connection, incident: str) -> Receipt | None:
    """The run's receipt, refused as inconsistent if its row is not what labkit wrote."""
    row = conn.execute("SELECT * FROM receipts WHERE incident = ?", (incident,)).fetchone()
    if row is None:
        return None
    try:
        report = strict_loads(row["report"])
    except JsonProblem as problem:
        raise InconsistentRun(incident, f"its receipt row is damaged ({problem.reason})") from None
    if not isinstance(report, dict):
        raise InconsistentRun(incident, "its receipt row holds no report")
    return Receipt(row["incident"], row["receipt_id"], row["evidence_digest"], report, row["issued_at"])


def receipt_id_txn(conn: sqlite3.Connection, incident: str) -> str | None:
    """The run's receipt id, without reading (or judging) the report."""
    row = conn.execute("SELECT receipt_id FROM receipts WHERE incident = ?", (incident,)).fetchone()
    return row[0] if row else None


def issue_receipt_txn(
    conn: sqlite3.Connection, incident: str, workflow_version: int, report: dict, clock: Clock
) -> Receipt:
    """Insert the run's receipt; on a repeat of the same operation, return the stored one.

    The primary key decides: the INSERT either succeeds or is refused because a receipt
    exists. A refused INSERT is the same operation again if the stored receipt was built
    from the same evidence; otherwise it is a conflict, and nothing is overwritten.
    """
    require_write_transaction(conn, "issue_receipt_txn")
    receipt = Receipt(incident, receipt_id_for(incident, workflow_version), report["evidence_digest"], report, clock.now())
    try:
        conn.execute(
            "INSERT INTO receipts (incident, receipt_id, evidence_digest, report, issued_at) VALUES (?, ?, ?, ?, ?)",
            (receipt.incident, receipt.receipt_id, receipt.evidence_digest, canonical_json(report), receipt.issued_at),
        )
    except sqlite3.IntegrityError as error:
        stored = find_receipt_txn(conn, incident)
        if getattr(error, "sqlite_errorcode", None) not in _KEY_REFUSED or stored is None:
            raise
        if stored.evidence_digest != receipt.evidence_digest:
            raise ReceiptConflict(incident, stored.evidence_digest, receipt.evidence_digest) from None
        return stored
    return receipt
