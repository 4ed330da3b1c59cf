"""The evidence record: what inspect writes, with its step, for one provider read.

Inspect keeps two things, in the one transaction that commits the step (the coordinator's
``record_evidence_txn`` calls :func:`bound_evidence`, then :func:`store_bounded_txn`):

- the **evidence row** (:func:`labkit.store.store_evidence_txn`): the contract-checked
  response, the *bounded summary* (at most :data:`SUMMARY_LIMIT` bytes of canonical JSON),
  with a **reference** to the raw diagnostic: its sha256 digest and its location
  (``diagnostics/INC-1015``); under workflow version 2 the row carries the adapter's decision
  inputs, and the original assessment is recorded with it (:mod:`labkit.assessments`);
- the **raw diagnostic**, in the table ``diagnostics`` of the same database, where a retention
  policy may later remove it (:func:`labkit.retention.retain`); the run, its evidence row and
  its receipt stay.

Both are redacted first (:mod:`labkit.redaction`), and the table ``redactions`` records
which fields held what kind of value, and how many, never the value.

Why a table in the same database rather than files beside it: the reference and what it
points at commit in one transaction, so no crash can leave a reference to a file never
written, or a file no row refers to; one file is backed up, copied and checked
(``PRAGMA integrity_check``) as a whole.

Why this is the core and not a later lesson's mechanism: every run of the current workflow
version writes it, so what a checkpoint *is* includes it. What stays a mechanism is what a
later lesson does to the record afterwards: re-evaluating it (:mod:`labkit.versioning`) and
removing raw diagnostics (:mod:`labkit.retention`). Taught in 11_capacity_and_retention.
"""

from __future__ import annotations

import sqlite3
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .clock import Clock
from .contract import MAX_RESPONSE_BYTES, check_diagnostic_size, check_evidence
from .database import require_write_transaction
from .errors import EvidenceRejected
from .jsontext import canonical_json, sha256_hex
from .redaction import Redaction, redact, redact_document, redact_field_path
from .store import Evidence, store_evidence_txn
from .typed import first_unprintable

#: The tables (``diagnostics``, ``redactions`` and the evidence row's reference columns) are
#: in labkit.schema.

#: The evidence row is bounded: the summary is at most this many bytes of canonical JSON,
#: the same bound the contract puts on a provider's response.
SUMMARY_LIMIT = MAX_RESPONSE_BYTES


def location_for(incident: str) -> str:
    """Where a run's raw diagnostic is kept: a table and a key in the same database file."""
    return f"diagnostics/{incident}"


@dataclass(frozen=True)
class BoundedEvidence:
    """What inspect stores for one read: the redacted summary, the redacted raw diagnostic, and the record.

    ``redactions`` pairs each :class:`~labkit.redaction.Redaction` with the part it was made
    in: ``"evidence"`` (the summary) or ``"diagnostic"`` (the raw diagnostic).
    """

    body: dict
    diagnostic: str
    diagnostic_digest: str
    redactions: tuple[tuple[str, Redaction], ...]

    @property
    def summary_bytes(self) -> int:
        return len(canonical_json(self.body).encode("utf-8"))

    @property
    def diagnostic_bytes(self) -> int:
        return len(self.diagnostic.encode("utf-8"))

    def reference(self, incident: str) -> tuple[str, str]:
        """What the evidence row names the raw diagnostic by: (digest, location)."""
        return self.diagnostic_digest, location_for(incident)


def check_printable(incident: str, body: object, field: str = "") -> None:
    """Refuse (rule ``printable-text``) evidence whose text, keys included, holds a control character.

    Why refuse rather than escape: the contract repairs nothing, and a queue name that carries
    a terminal escape or a right-to-left override is not a name anyone should read as it
    displays. Whatever is printed from evidence afterwards is plain text. The raw diagnostic is
    kept as it came (telemetry may colour its log lines); it is stored as JSON, escaped, or as
    text that labkit never prints.
    """
    if isinstance(body, str):
        char = first_unprintable(body)  # the characters are labkit.typed's rule
        if char is not None:
            what = unicodedata.name(char, "a control character").lower()
            raise EvidenceRejected(incident, field or "(response)", f"holds U+{ord(char):04X} ({what})", "printable-text")
    elif isinstance(body, list):
        for index, item in enumerate(body):
            check_printable(incident, item, f"{field}.{index}" if field else str(index))
    elif isinstance(body, dict):
        for key, item in body.items():
            path = f"{field}.{key}" if field else key
            check_printable(incident, key, path)
            check_printable(incident, item, path)


def check_summary_size(incident: str, body: dict) -> int:
    """The summary's size in bytes of canonical JSON, refused (rule ``size-limit``) over :data:`SUMMARY_LIMIT`."""
    size = len(canonical_json(body).encode("utf-8"))
    if size > SUMMARY_LIMIT:
        raise EvidenceRejected(incident, "(summary)", f"{size} bytes stored, over the {SUMMARY_LIMIT}-byte limit", "size-limit")
    return size


def bound_evidence(incident: str, body: dict, diagnostic: bytes | str) -> BoundedEvidence:
    """Redact a contract-checked response and its raw diagnostic, and bound them; nothing is stored.

    The summary is ``body`` with its sensitive values replaced. If anything was replaced it is
    checked against the contract again: a redaction that would make stored evidence break its
    contract (a marker longer than a field may be) refuses the read, rather than storing the
    value or a summary the contract never accepted. Evidence text holding a control character
    is refused (:func:`check_printable`). The raw diagnostic is UTF-8 text (bytes
    that are not are replaced by U+FFFD: binary telemetry is out of scope); JSON is stored as
    canonical JSON after redaction, anything else as redacted text.
    """
    raw = diagnostic.encode("utf-8", "surrogatepass") if isinstance(diagnostic, str) else diagnostic
    check_diagnostic_size(incident, len(raw))
    check_printable(incident, body)
    summary = redact(body)
    kept_body = summary.value
    if summary.count:
        kept_body = check_evidence(canonical_json(summary.value).encode("utf-8"), incident)
    check_summary_size(incident, kept_body)
    document = redact_document(raw.decode("utf-8", "replace"))
    text = document.value
    record = tuple(("evidence", r) for r in summary.redactions) + tuple(("diagnostic", r) for r in document.redactions)
    return BoundedEvidence(kept_body, text, sha256_hex(text), record)


def store_bounded_txn(
    conn: sqlite3.Connection,
    incident: str,
    contract: str,
    bounded: BoundedEvidence,
    clock: Clock,
    inputs: Mapping[str, object] | None = None,
    *,
    record_assessment: bool = True,
) -> Evidence:
    """Write what :func:`bound_evidence` prepared: evidence row and reference, raw diagnostic, redactions.

    The evidence write, once: :func:`labkit.store.store_evidence_txn` (the row, with the
    original assessment unless ``record_assessment`` is False), then :func:`keep_diagnostic_txn`.
    The coordinator's inspect and the leased worker's fenced commit both come here, through
    :func:`labkit.coordinator.record_evidence_txn`, which decides the workflow version's part.
    """
    require_write_transaction(conn, "store_bounded_txn")
    evidence = store_evidence_txn(conn, incident, contract, bounded.body, clock, inputs, record_assessment=record_assessment,
                                  diagnostic=bounded.reference(incident))
    keep_diagnostic_txn(conn, evidence, bounded)
    return evidence


def keep_diagnostic_txn(conn: sqlite3.Connection, evidence: Evidence, bounded: BoundedEvidence) -> None:
    """Beside the evidence row just stored: its raw diagnostic, kept apart, and the redaction record of the read.

    The raw diagnostic's ``kept_at`` is the evidence's ``recorded_at``: one reading of the
    clock for both, so the age retention counts is the evidence's age.
    """
    require_write_transaction(conn, "keep_diagnostic_txn")
    conn.execute(
        "INSERT INTO diagnostics (incident, digest, body, bytes, kept_at) VALUES (?, ?, ?, ?, ?)",
        (evidence.incident, bounded.diagnostic_digest, bounded.diagnostic, bounded.diagnostic_bytes, evidence.recorded_at),
    )
    record_redactions_txn(conn, evidence.incident, bounded.redactions)


def record_redactions_txn(conn: sqlite3.Connection, incident: str, redactions: tuple[tuple[str, Redaction], ...]) -> None:
    """Write the redaction record of one read: (part, field, kind, count) rows, never a value."""
    require_write_transaction(conn, "record_redactions_txn")
    conn.executemany(
        "INSERT INTO redactions (incident, part, field, kind, count) VALUES (?, ?, ?, ?, ?)",
        [(incident, part, r.field, r.kind, r.count) for part, r in redactions],
    )


def redact_fields_txn(conn: sqlite3.Connection, incidents: Sequence[str]) -> int:
    """Rewrite the recorded field paths of ``incidents`` as today's rule writes them; how many rows changed.

    An earlier labkit recorded the path of each value below a secret name, and a key there
    could be a secret itself. :func:`labkit.redaction.redact_field_path` cuts such a path after
    the secret name; rows that then share a path are merged, their counts added. Only the runs
    named: the whole table once per retention run made a year of daily retention quadratic.
    """
    require_write_transaction(conn, "redact_fields_txn")
    named = canonical_json(list(incidents))
    rows = conn.execute("SELECT incident, part, field, kind, count FROM redactions"
                        " WHERE incident IN (SELECT value FROM json_each(?))", (named,)).fetchall()
    merged: dict[tuple[str, str, str, str], int] = {}
    changed = 0
    for incident, part, field, kind, count in rows:
        safe = redact_field_path(field)
        changed += safe != field
        key = (incident, part, safe, kind)
        merged[key] = merged.get(key, 0) + count
    if changed:
        conn.execute("DELETE FROM redactions WHERE incident IN (SELECT value FROM json_each(?))", (named,))
        conn.executemany("INSERT INTO redactions (incident, part, field, kind, count) VALUES (?, ?, ?, ?, ?)",
                         [(*key, count) for key, count in merged.items()])
    return changed
