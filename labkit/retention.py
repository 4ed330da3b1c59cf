"""A retention policy for raw diagnostics: remove the old ones, keep each run's proof.

Inspect keeps a run's raw diagnostic apart from its evidence row, referenced by digest and
location (:mod:`labkit.evidence`): raw telemetry would otherwise make every row as big as the
telemetry and keep it for as long as the run's proof. :func:`retain` removes the raw
diagnostics of finished runs that are older than a number of days, and keeps the run, its
checkpoints, its evidence row (summary, digest, reference) and its receipt, so a restarted
worker still answers the three questions (:func:`labkit.lab.lesson.restart_answers`) and a
re-evaluation still has the summary it reads (:func:`labkit.versioning.reevaluate`).
:func:`diagnostic_txn` tells a removed diagnostic from one that is missing.

Keeping them in the same database costs this: removing rows frees pages inside the file
rather than returning them to the file system. :func:`retain` runs ``VACUUM`` afterwards and
reports the size before and after: VACUUM rewrites the file, so a removed diagnostic's bytes
are nowhere in it afterwards. ``secure_delete`` is on while it removes, so the commit itself
zeroes the space it frees: a process that dies before VACUUM runs leaves no removed byte in the
file once the write-ahead log is next checkpointed (11_capacity_and_retention shows that crash).

Taught in 11_capacity_and_retention.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from contextlib import closing
from dataclasses import dataclass, replace
from datetime import UTC, timedelta
from pathlib import Path

from .clock import Clock, parse_instant
from .database import read_transaction, require_write_transaction, transaction, translate
from .effects import OWED
from .errors import BadRetentionDays, InconsistentRun, UnknownRun, VacuumFailed
from .evidence import redact_fields_txn
from .jsontext import sha256_hex
from .leases import redact_details_txn
from .store import connect, connect_readonly
from .typed import parse_decimal

#: The tables (``diagnostics``, ``redactions``, ``retentions`` and the evidence row's reference
#: columns) are in labkit.schema.

#: A retention window longer than a century is a typing mistake.
MAX_RETENTION_DAYS = 36_500

#: Diagnostic states, as :func:`diagnostic_txn` reports them.
KEPT, REMOVED, NONE, MISSING = "kept", "removed", "none", "missing"


# --------------------------------------------------------------------------- reading back


@dataclass(frozen=True)
class Diagnostic:
    """Where a run's raw diagnostic stands, from its evidence row's reference.

    ``state`` is one of:

    - ``kept``: the raw diagnostic is in ``diagnostics`` and matches the digest (``text`` holds it);
    - ``removed``: retention run ``removed_by`` removed it; the summary, digest and receipt stay;
    - ``none``: the evidence was recorded without one (before labkit kept them, or by a variant
      that stores the response alone);
    - ``missing``: the reference names a diagnostic that is not there and that no retention run
      removed: someone deleted it by hand, or the file was damaged.
    """

    incident: str
    state: str
    digest: str | None
    location: str | None
    bytes: int | None = None
    kept_at: str | None = None
    removed_by: int | None = None
    text: str | None = None


def diagnostic_txn(conn: sqlite3.Connection, incident: str) -> Diagnostic:
    """The run's raw diagnostic and where it stands; its text is checked against the digest."""
    ref = conn.execute(
        "SELECT e.diagnostic_digest, e.diagnostic_location, e.recorded_at, r.issued_at FROM evidence e"
        " LEFT JOIN receipts r USING (incident) WHERE e.incident = ?", (incident,)
    ).fetchone()
    if ref is None:
        if conn.execute("SELECT 1 FROM runs WHERE incident = ?", (incident,)).fetchone() is None:
            raise UnknownRun(incident)
        return Diagnostic(incident, NONE, None, None)
    digest, location, recorded_at, completed_at = ref
    if digest is None:
        return Diagnostic(incident, NONE, None, None)
    row = conn.execute("SELECT digest, body, bytes, kept_at FROM diagnostics WHERE incident = ?", (incident,)).fetchone()
    if row is not None:
        if row["digest"] != digest or sha256_hex(row["body"]) != digest:
            raise InconsistentRun(incident, "its raw diagnostic does not match the digest its evidence names")
        return Diagnostic(incident, KEPT, digest, location, row["bytes"], row["kept_at"], text=row["body"])
    # The first retention run, after the run was completed, whose cutoff had passed it: the
    # one that was due to remove it (an earlier one left it alone while the run was unfinished).
    remover = conn.execute(
        "SELECT MIN(seq) FROM retentions WHERE cutoff > ? AND at >= ?", (recorded_at, completed_at or recorded_at)
    ).fetchone()[0]
    return Diagnostic(incident, REMOVED if remover is not None else MISSING, digest, location, kept_at=recorded_at, removed_by=remover)


def diagnostic_of(db: str | Path, incident: str) -> Diagnostic:
    """:func:`diagnostic_txn` on a database path, read only."""
    with closing(connect_readonly(db)) as conn, read_transaction(conn):
        return diagnostic_txn(conn, incident)


def redactions_of(db: str | Path | sqlite3.Connection, incident: str | None = None) -> list[dict[str, object]]:
    """The redaction record: one dict per (incident, part, field, kind) with its count; never a value."""
    def rows(conn: sqlite3.Connection) -> list[dict[str, object]]:
        where, params = ("WHERE incident = ?", (incident,)) if incident is not None else ("", ())
        cursor = conn.execute(f"SELECT incident, part, field, kind, count FROM redactions {where} ORDER BY incident, part, field, kind",
                              params)
        return [dict(row) for row in cursor]

    if isinstance(db, sqlite3.Connection):
        return rows(db)
    with closing(connect_readonly(db)) as conn, read_transaction(conn):
        return rows(conn)


# --------------------------------------------------------------------------- retention


def check_days(value: object) -> float:
    """``value`` as a number of days, or :class:`BadRetentionDays`: negative, NaN, infinite, not a number."""
    if isinstance(value, bool):
        raise BadRetentionDays(value, MAX_RETENTION_DAYS)
    if isinstance(value, str):
        try:
            number = parse_decimal(value)
        except ValueError:
            raise BadRetentionDays(value, MAX_RETENTION_DAYS) from None
    elif isinstance(value, (int, float)):
        number = float(value)
    else:
        raise BadRetentionDays(value, MAX_RETENTION_DAYS)
    if not 0 <= number <= MAX_RETENTION_DAYS:  # also refuses NaN
        raise BadRetentionDays(value, MAX_RETENTION_DAYS)
    return number


@dataclass(frozen=True)
class RetentionReport:
    """What one retention run did: what it removed, what it left and why, and the sizes.

    ``bytes_before`` and ``bytes_after`` are the database's size as SQLite counts it (pages
    times page size, free pages included), before the removal and after ``VACUUM``; the
    write-ahead log is merged back (checkpointed) afterwards, so ``bytes_after`` is also the
    file's size on disk unless a reader kept the log from being truncated.
    """

    seq: int
    at: str
    older_than_days: float
    cutoff: str
    removed: tuple[str, ...]
    removed_bytes: int
    kept_unfinished: tuple[str, ...]
    kept_recent: int
    bytes_before: int = 0
    bytes_after: int = 0
    redacted_details: int = 0
    redacted_fields: int = 0

    def lines(self) -> list[str]:
        """What ``python -m labkit retain`` prints."""
        plural = "" if len(self.removed) == 1 else "s"
        unfinished = ", ".join(self.kept_unfinished[:5]) + (", ..." if len(self.kept_unfinished) > 5 else "")
        return [
            f"retention {self.seq}: removed {len(self.removed)} raw diagnostic{plural} kept before {self.cutoff} "
            f"(older than {self.older_than_days:g} days), {self.removed_bytes:,} bytes",
            f"kept {len(self.kept_unfinished)} of unfinished runs{f' ({unfinished})' if unfinished else ''} "
            f"and {self.kept_recent} newer than the cutoff; every run keeps its checkpoints, evidence summary, digest and receipt",
            f"database {self.bytes_before:,} bytes before, {self.bytes_after:,} bytes after VACUUM",
        ] + ([f"redacted {self.redacted_details} lease event detail(s) and {self.redacted_fields} recorded field path(s)"
              " that an earlier labkit stored unredacted"] if self.redacted_details or self.redacted_fields else [])


def database_bytes(conn: sqlite3.Connection) -> int:
    """The database's size as SQLite counts it: page count times page size, free pages included."""
    return conn.execute("PRAGMA page_count").fetchone()[0] * conn.execute("PRAGMA page_size").fetchone()[0]


#: A run is unfinished while it is not completed, or its completion still owes an action
#: (an effect in one of :data:`labkit.effects.OWED`, our own constants, spelled into the SQL).
_UNFINISHED_SQL = (
    "(r.step != 'report_completed' OR EXISTS (SELECT 1 FROM effects e WHERE e.incident = r.incident"
    f" AND e.state IN ({', '.join(repr(state) for state in OWED)})))"
)


#: A retention selection: given the connection (inside the retention's transaction) and the
#: cutoff (an instant, ``2026-03-16T00:00:00Z``), the incidents whose raw diagnostic to remove.
Selection = Callable[[sqlite3.Connection, str], Iterable[str]]


def retain_txn(conn: sqlite3.Connection, older_than_days: float, clock: Clock, *, due: Selection | None = None) -> RetentionReport:
    """Remove the due raw diagnostics of finished runs and log the retention run; in the caller's transaction.

    ``due`` replaces labkit's own selection (raw diagnostics kept before the cutoff, of
    finished runs): the incidents it names lose their raw diagnostic, whatever they are.
    Exercise 11.1 passes the learner's, and its check judges what it removed. The report's
    sizes are left at 0: they are measured around the transaction, by :func:`retain`.
    """
    require_write_transaction(conn, "retain_txn")
    days = check_days(older_than_days)
    at = clock.now()
    cutoff = (parse_instant(at) - timedelta(days=days)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    past = conn.execute(
        f"SELECT d.incident, d.bytes, {_UNFINISHED_SQL} AS unfinished FROM diagnostics d JOIN runs r USING (incident)"
        " WHERE d.kept_at < ? ORDER BY d.incident",
        (cutoff,),
    ).fetchall()
    if due is None:
        removed = [row["incident"] for row in past if not row["unfinished"]]
        removed_bytes = sum(row["bytes"] for row in past if not row["unfinished"])
        # The same rule again in the DELETE itself, so the statement that removes can never
        # reach an unfinished run, whatever the lines above computed. Correlated, so it looks at
        # the due rows' runs only, not at every run in the database.
        conn.execute(
            "DELETE FROM diagnostics WHERE kept_at < ? AND EXISTS (SELECT 1 FROM runs r WHERE r.incident = diagnostics.incident"
            f" AND NOT {_UNFINISHED_SQL})",
            (cutoff,),
        )
    else:
        chosen = sorted(set(due(conn, cutoff)))
        found = [conn.execute("SELECT bytes FROM diagnostics WHERE incident = ?", (incident,)).fetchone() for incident in chosen]
        removed = [incident for incident, row in zip(chosen, found, strict=True) if row is not None]
        removed_bytes = sum(row["bytes"] for row in found if row is not None)
        conn.executemany("DELETE FROM diagnostics WHERE incident = ?", [(incident,) for incident in removed])
    gone = set(removed)
    unfinished = [row["incident"] for row in past if row["unfinished"] and row["incident"] not in gone]
    recent = conn.execute("SELECT COUNT(*) FROM diagnostics WHERE kept_at >= ?", (cutoff,)).fetchone()[0]
    cursor = conn.execute(
        "INSERT INTO retentions (at, older_than_days, cutoff, removed, removed_bytes, kept_unfinished) VALUES (?, ?, ?, ?, ?, ?)",
        (at, days, cutoff, len(removed), removed_bytes, len(unfinished)),
    )
    assert cursor.lastrowid is not None
    # What an earlier labkit stored unredacted outside the raw diagnostics (a refused answer in
    # a lease event's detail, a key below a secret name in a recorded field path) is redacted
    # too, for the runs retained now: retaining a run is when its stored text is cleaned, and
    # VACUUM below leaves no copy of it in the file. (Every run, every time, made a year of
    # daily retention quadratic: lesson 11's simulated year went from 2 s to over 5 minutes.)
    details, fields = redact_details_txn(conn, removed), redact_fields_txn(conn, removed)
    return RetentionReport(cursor.lastrowid, at, days, cutoff, tuple(removed), removed_bytes, tuple(unfinished), recent,
                           redacted_details=details, redacted_fields=fields)


def retain(
    db: str | Path,
    older_than_days: object,
    clock: Clock,
    *,
    after_delete: Callable[[], None] | None = None,
    before_vacuum: Callable[[], None] | None = None,
    due: Selection | None = None,
) -> RetentionReport:
    """Remove raw diagnostics older than ``older_than_days`` days, of finished runs only, then VACUUM.

    Age is counted by ``clock`` (pinned by ``LABKIT_CLOCK`` on the command line), from the
    moment the evidence was recorded. A run that is not ``report_completed``, or whose
    completion still owes a ticket (an effect intended or uncertain), is never touched. The
    run, its checkpoints, its evidence row (summary, digest, reference) and its receipt stay.
    Lease event details and recorded field paths that an earlier labkit stored unredacted are
    redacted in the same transaction (:func:`retain_txn`). The removal and its log row commit in
    one transaction; ``VACUUM`` runs after it, so a crash in between leaves the removal done and
    the space not yet reclaimed (the next run reclaims it). ``after_delete`` is called inside the transaction and ``before_vacuum``
    after its commit: tests kill the process there. ``due`` replaces the selection of what to
    remove (:func:`retain_txn`; Exercise 11.1).

    Bad input (days that are negative, NaN or not a number; a path that is not a labkit
    database) is refused before anything is written.
    """
    days = check_days(older_than_days)
    with closing(connect(db, create=False)) as conn:
        before = database_bytes(conn)
        # Removed bytes are overwritten with zeros rather than left in free pages: what
        # retention removes is meant to be gone, not merely unreferenced.
        conn.execute("PRAGMA secure_delete = ON")
        with transaction(conn):
            report = retain_txn(conn, days, clock, due=due)
            if after_delete is not None:
                after_delete()
        if before_vacuum is not None:
            before_vacuum()
        try:
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error as error:
            raise VacuumFailed(str(db), len(report.removed), str(translate(error, db))) from None
        return replace(report, bytes_before=before, bytes_after=database_bytes(conn))


def retentions_of(db: str | Path) -> list[dict[str, object]]:
    """The retention log, oldest first: one dict per retention run."""
    with closing(connect_readonly(db)) as conn, read_transaction(conn):
        return [dict(row) for row in conn.execute("SELECT * FROM retentions ORDER BY seq")]
