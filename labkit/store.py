"""The checkpoint store: one SQLite file holding runs, evidence, receipts and their history.

Everything durable goes through three functions here: :func:`connect`, the only place
that calls ``sqlite3.connect``; :func:`transaction`, the only place that begins and ends a
write transaction; and :func:`read_transaction`, for several reads that must see one
moment. Helpers whose name ends in ``_txn`` take the caller's connection and never open a
transaction themselves, so several of them can share one atomic commit: that is how a
step and its evidence are committed together. (A single ``_txn`` read outside any
transaction is still one atomic statement.) Taught in 03_durable_checkpoint and 04_rollback.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import ContextManager, Iterator

from .clock import Clock
from .errors import (
    DatabaseFolderMissing,
    DatabaseUnavailable,
    NotADatabase,
    NotALabDatabase,
    SchemaVersionMismatch,
    StaleTransition,
    UnknownRun,
    WorkflowVersionMismatch,
)
from .steps import Step

SQLITE_HEADER = b"SQLite format 3\x00"

#: How long a writer waits for another process's write lock before giving up, in ms.
#: Long enough for the lab's concurrent-completion race; short enough to notice a hang.
BUSY_TIMEOUT_MS = 10_000

_STEP_RANK_SQL = "CASE {col} WHEN 'not_inspected' THEN 0 WHEN 'evidence_recorded' THEN 1 WHEN 'report_completed' THEN 2 END"

#: Ordered schema changes. Entry n moves the database from schema version n to n+1, in the
#: same transaction that bumps ``PRAGMA user_version``. Never edit an entry; append one.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE runs (
            incident          TEXT PRIMARY KEY,
            workflow_version  INTEGER NOT NULL,
            step              TEXT NOT NULL CHECK (step IN ('not_inspected', 'evidence_recorded', 'report_completed')),
            version           INTEGER NOT NULL DEFAULT 0,  -- bumped by every transition: the compare-and-set token
            created_at        TEXT NOT NULL,
            updated_at        TEXT NOT NULL
        ) STRICT""",
        """CREATE TABLE evidence (
            incident     TEXT PRIMARY KEY REFERENCES runs (incident),
            contract     TEXT NOT NULL,
            body         TEXT NOT NULL,   -- the validated provider response, canonical JSON
            digest       TEXT NOT NULL,   -- sha256 of body, so a receipt can name what it was built from
            recorded_at  TEXT NOT NULL
        ) STRICT""",
        # The primary key is the guarantee: the database itself refuses a second receipt for
        # a run, whatever the code above it does (G3).
        """CREATE TABLE receipts (
            incident         TEXT PRIMARY KEY REFERENCES runs (incident),
            receipt_id       TEXT NOT NULL UNIQUE,
            evidence_digest  TEXT NOT NULL,
            report           TEXT NOT NULL,
            issued_at        TEXT NOT NULL
        ) STRICT""",
        """CREATE TABLE transitions (
            seq            INTEGER PRIMARY KEY AUTOINCREMENT,
            incident       TEXT NOT NULL REFERENCES runs (incident),
            from_step      TEXT,
            to_step        TEXT NOT NULL,
            state_version  INTEGER NOT NULL,
            at             TEXT NOT NULL
        ) STRICT""",
        # Invariant 4 held by the database, not only by the coordinator's code.
        f"""CREATE TRIGGER runs_step_moves_forward BEFORE UPDATE OF step ON runs
            WHEN {_STEP_RANK_SQL.format(col='NEW.step')} < {_STEP_RANK_SQL.format(col='OLD.step')}
            BEGIN SELECT RAISE(ABORT, 'a run''s step may not move backwards'); END""",
    ),
)

SCHEMA_VERSION = len(MIGRATIONS)


def connect(path: str | Path) -> sqlite3.Connection:
    """Open (creating if needed) the checkpoint database at ``path``, with the lab's settings.

    - ``isolation_level=None``: Python's sqlite3 would otherwise open transactions on its
      own, and only before writes, so the read that decides a write would sit outside it.
      We issue ``BEGIN IMMEDIATE`` ourselves in :func:`transaction`.
    - WAL: readers (a notebook's tables) never block the writer, and a crash leaves a log
      that the next opener replays.
    - ``synchronous=FULL``: a commit is on disk when COMMIT returns; ``NORMAL`` in WAL mode
      may lose the last commits on power loss, which is the thing this lab is about.
    - ``busy_timeout``: a second process waits for the write lock instead of failing.
    - ``foreign_keys``: evidence and receipts cannot point at a run that does not exist.

    The file is checked before SQLite sees it, so a file that is not a database is left
    byte for byte as it was. The schema is brought up to date in one transaction.
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise DatabaseFolderMissing(str(path.parent))
    if path.is_dir():
        raise NotADatabase(str(path), "it is a folder")
    if path.exists() and not path.is_file():  # a FIFO or a device would block or be damaged
        raise NotADatabase(str(path), "it is not a regular file")
    if path.exists():
        with open(path, "rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
        if header and header != SQLITE_HEADER:  # an empty file is a new, empty database
            raise NotADatabase(str(path))
    try:
        conn = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error as error:
        raise DatabaseUnavailable(str(path), str(error)) from None
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # Refuse a newer schema before any setting below is written into the file.
        found = _refuse_newer_schema(conn, str(path))
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        if found < SCHEMA_VERSION:
            # Only an old or new file takes the write lock here; a reader of an up-to-date
            # database must not queue behind a worker whose transaction is open.
            _migrate(conn, str(path))
    except sqlite3.DatabaseError as error:
        conn.close()
        if "not a database" in str(error) or "malformed" in str(error):
            raise NotADatabase(str(path), str(error)) from None
        raise DatabaseUnavailable(str(path), str(error)) from None
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def _atomic(conn: sqlite3.Connection, begin: str) -> Iterator[sqlite3.Connection]:
    conn.execute(begin)
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        # SQLite may already have rolled back on its own (a full disk, an I/O error); a
        # second ROLLBACK would then raise and hide the error that matters.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def transaction(conn: sqlite3.Connection) -> ContextManager[sqlite3.Connection]:
    """One atomic unit of work: ``BEGIN IMMEDIATE``, commit on success, roll back on anything.

    IMMEDIATE takes the write lock up front. A deferred transaction that reads and then
    upgrades to a write can fail at once with "database is locked", skipping the busy timeout.
    Any exception, ``KeyboardInterrupt`` included, rolls back. A SIGKILL runs no code at all;
    SQLite's journal makes the uncommitted work vanish when the file is next opened.
    """
    return _atomic(conn, "BEGIN IMMEDIATE")


def read_transaction(conn: sqlite3.Connection) -> ContextManager[sqlite3.Connection]:
    """Several reads that see one committed moment, without taking the write lock.

    In WAL mode a reader neither waits for nor blocks the writer. Inside a caller's open
    transaction, that transaction already gives one moment, so nothing more is done.
    """
    return nullcontext(conn) if conn.in_transaction else _atomic(conn, "BEGIN DEFERRED")


def _refuse_newer_schema(conn: sqlite3.Connection, where: str) -> int:
    """The file's schema version, refusing what this labkit cannot read or must not change."""
    found = conn.execute("PRAGMA user_version").fetchone()[0]
    if found > SCHEMA_VERSION:
        raise SchemaVersionMismatch(where, found, SCHEMA_VERSION)
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if found == 0 and tables:
        raise NotALabDatabase(where, f"it holds tables ({', '.join(sorted(tables)[:3])}) but no labkit schema version")
    if found > 0 and "runs" not in tables:
        raise NotALabDatabase(where, f"its schema version is {found} but it has no runs table")
    return found


def _migrate(conn: sqlite3.Connection, where: str) -> None:
    with transaction(conn):
        # Read again under the write lock: another process may have migrated meanwhile.
        found = _refuse_newer_schema(conn, where)
        for statements in MIGRATIONS[found:]:
            for statement in statements:
                conn.execute(statement)
        if found < SCHEMA_VERSION:
            # PRAGMA takes no parameters; the value is our own integer.
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


@dataclass(frozen=True)
class Run:
    """One row of ``runs``: where an incident's workflow is, and under which version."""

    incident: str
    workflow_version: int
    step: Step
    version: int
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class Evidence:
    """A committed, contract-checked provider response."""

    incident: str
    contract: str
    body: dict
    digest: str
    recorded_at: str


def _run_from_row(row: sqlite3.Row) -> Run:
    return Run(row["incident"], row["workflow_version"], Step(row["step"]), row["version"], row["created_at"], row["updated_at"])


def find_run_txn(conn: sqlite3.Connection, incident: str) -> Run | None:
    row = conn.execute("SELECT * FROM runs WHERE incident = ?", (incident,)).fetchone()
    return _run_from_row(row) if row else None


def load_run_txn(conn: sqlite3.Connection, incident: str, workflow_version: int) -> Run:
    """The run, refused if another workflow version wrote it: its step would mean something else."""
    run = find_run_txn(conn, incident)
    if run is None:
        raise UnknownRun(incident)
    if run.workflow_version != workflow_version:
        raise WorkflowVersionMismatch(incident, run.workflow_version, workflow_version)
    return run


def create_run_txn(conn: sqlite3.Connection, incident: str, workflow_version: int, clock: Clock) -> Run:
    """Insert the run at ``not_inspected`` unless it exists; return the stored row either way."""
    existing = find_run_txn(conn, incident)
    if existing is not None:
        if existing.workflow_version != workflow_version:
            raise WorkflowVersionMismatch(incident, existing.workflow_version, workflow_version)
        return existing
    at = clock.now()
    conn.execute(
        "INSERT INTO runs (incident, workflow_version, step, version, created_at, updated_at) VALUES (?, ?, ?, 0, ?, ?)",
        (incident, workflow_version, Step.NOT_INSPECTED.value, at, at),
    )
    conn.execute(
        "INSERT INTO transitions (incident, from_step, to_step, state_version, at) VALUES (?, NULL, ?, 0, ?)",
        (incident, Step.NOT_INSPECTED.value, at),
    )
    return Run(incident, workflow_version, Step.NOT_INSPECTED, 0, at, at)


def advance_txn(conn: sqlite3.Connection, run: Run, to: Step, clock: Clock) -> Run:
    """Compare-and-set: move ``run`` to ``to`` only if it is still where ``run`` says it is.

    The WHERE clause carries the step and version we read; if another worker moved the run
    in between, no row matches and we refuse rather than overwrite its progress.
    """
    at = clock.now()
    cursor = conn.execute(
        "UPDATE runs SET step = ?, version = version + 1, updated_at = ? WHERE incident = ? AND step = ? AND version = ?",
        (to.value, at, run.incident, run.step.value, run.version),
    )
    if cursor.rowcount != 1:
        raise StaleTransition(run.incident, run.step.value, run.version)
    conn.execute(
        "INSERT INTO transitions (incident, from_step, to_step, state_version, at) VALUES (?, ?, ?, ?, ?)",
        (run.incident, run.step.value, to.value, run.version + 1, at),
    )
    return Run(run.incident, run.workflow_version, to, run.version + 1, run.created_at, at)


def store_evidence_txn(conn: sqlite3.Connection, incident: str, contract: str, body: dict, digest: str, clock: Clock) -> Evidence:
    at = clock.now()
    text = canonical_json(body)
    conn.execute(
        "INSERT INTO evidence (incident, contract, body, digest, recorded_at) VALUES (?, ?, ?, ?, ?)",
        (incident, contract, text, digest, at),
    )
    return Evidence(incident, contract, body, digest, at)


def load_evidence_txn(conn: sqlite3.Connection, incident: str) -> Evidence | None:
    row = conn.execute("SELECT * FROM evidence WHERE incident = ?", (incident,)).fetchone()
    if row is None:
        return None
    return Evidence(row["incident"], row["contract"], json.loads(row["body"]), row["digest"], row["recorded_at"])


def list_runs_txn(conn: sqlite3.Connection) -> list[Run]:
    return [_run_from_row(row) for row in conn.execute("SELECT * FROM runs ORDER BY incident")]


def canonical_json(value: object) -> str:
    """One spelling per value (sorted keys, no spaces), so equal evidence has equal digests."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def latest_time_txn(conn: sqlite3.Connection) -> str | None:
    """The latest timestamp written to the database (ISO strings sort in time order)."""
    return conn.execute(
        "SELECT MAX(at) FROM (SELECT MAX(at) AS at FROM transitions UNION ALL SELECT MAX(recorded_at) FROM evidence"
        " UNION ALL SELECT MAX(issued_at) FROM receipts)"
    ).fetchone()[0]


def snapshot(conn: sqlite3.Connection) -> dict[str, list[tuple]]:
    """Every row of every lab table, in a stable order: compare two to prove nothing changed.

    The tables are read in one read transaction, so the snapshot is of a single moment even
    while other processes commit.
    """
    tables = ("runs", "evidence", "receipts", "transitions")
    with read_transaction(conn):
        return {table: [tuple(row) for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1")] for table in tables}
