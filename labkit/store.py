"""The checkpoint store: one SQLite file holding runs, evidence, receipts and their history.

:func:`connect` is how every part of labkit opens a checkpoint database. It decides
whether the file is a labkit database *before* anything is written to it (another
program's database is left byte for byte as it was), then switches it to write-ahead
logging and brings its schema up to date in one transaction. :func:`connect_readonly`
opens one for reading only, and never writes, even in a read-only folder.

Helpers whose name ends in ``_txn`` take the caller's connection and never open a
transaction themselves, so several of them can share one atomic commit: that is how a
step and its evidence are committed together. The ones that write check that a write
transaction is open (:func:`labkit.database.require_write_transaction`); a read outside
any transaction is still one atomic statement. Transactions themselves, and the one call
of ``sqlite3.connect``, live in :mod:`labkit.database`; every table and the ordered list
of migrations, in :mod:`labkit.schema`. Taught in 03_durable_checkpoint and 04_rollback.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from .assessments import record_assessment_txn
from .clock import Clock
from .database import (
    check_path,
    closed_on_failure,
    file_identity,
    open_database,
    quick_check,
    read_transaction,
    require_write_transaction,
    schema_made_by,
    set_wal,
    transaction,
)
from .errors import InconsistentRun, NotALabDatabase, SchemaVersionMismatch, StaleTransition, StepOrderError
from .jsontext import JsonProblem, canonical_json, sha256_hex, strict_loads
from .schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, TABLES
from .steps import Step


def connect(path: str | Path, *, create: bool = True) -> sqlite3.Connection:
    """Open the checkpoint database at ``path``, creating it if ``create`` (its folder must exist).

    In order, and nothing written until the file is known to be labkit's:

    1. the path is checked (:func:`labkit.database.check_path`); with ``create=False`` a
       path where no database exists is refused rather than made into an empty one, and so
       is an empty file (0 bytes, or a SQLite file with nothing in it): a command that
       resumes or reads must not be the one that quietly initialises a database;
    2. the file's application id, schema version and tables are read in one statement,
       and anything that is not a labkit database (or is a newer one) is refused;
    3. WAL: readers (a notebook's tables) never block the writer, and after a crash the
       next opener finds committed transactions in the log and discards the rest;
    4. ``synchronous=FULL``: a commit is on disk when COMMIT returns; ``NORMAL`` in WAL
       mode may lose the last commits on power loss, which is the thing this lab is about;
    5. the schema is migrated in one transaction, checked again under the write lock.
    """
    path = check_path(path, must_exist=not create)
    if not create:
        _refuse_zero_bytes(path)
    conn = open_database(path)
    with closed_on_failure(conn, path):
        found = _identify(conn, path)
        if found == 0 and not create:
            raise _empty(path)
        quick_check(conn, path)
        set_wal(conn)
        conn.execute("PRAGMA synchronous = FULL")
        if found < SCHEMA_VERSION:
            # Only an old or new file takes the write lock here; a reader of an up-to-date
            # database must not queue behind a worker whose transaction is open.
            _migrate(conn, path)
    return conn


def connect_readonly(path: str | Path) -> sqlite3.Connection:
    """Open an existing checkpoint database for reading only: ``status``, tables, invariants.

    Nothing is written, not even the journal mode, so it works in a read-only folder. A
    database written by an older labkit is refused with the command that upgrades it.
    """
    path = check_path(path, must_exist=True)
    _refuse_zero_bytes(path)
    conn = open_database(path, readonly=True)
    with closed_on_failure(conn, path):
        found = _identify(conn, path)
        if found == 0:
            raise _empty(path)
        quick_check(conn, path)
        if found != SCHEMA_VERSION:
            raise SchemaVersionMismatch(str(path), found, SCHEMA_VERSION)
    return conn


def _refuse_zero_bytes(path: Path) -> None:
    """A 0-byte file is refused before SQLite opens it: opening a database of no pages deletes a
    ``-wal`` beside it (SQLite's rule), and a command that refuses must leave every file as it was."""
    try:
        empty = path.stat().st_size == 0
    except OSError:
        return  # gone or unreadable since check_path: the opener says which
    if empty:
        raise _empty(path)


def _empty(path: Path) -> NotALabDatabase:
    """An existing file with no labkit schema in it, opened by a command that needs one."""
    return NotALabDatabase(str(path), "it is empty: no labkit command has recorded anything in it yet")


def _identify(conn: sqlite3.Connection, path: Path) -> int:
    """The file's schema version, refusing what is not labkit's or is newer than this labkit.

    Read in one statement (:func:`labkit.database.file_identity`).
    """
    app_id, version, schema = file_identity(conn)
    where = str(path)
    if app_id not in (0, APPLICATION_ID):
        raise NotALabDatabase(where, f"its application id is {app_id}, another program's")
    if version < 0:
        raise NotALabDatabase(where, f"its schema version is {version}, which labkit never writes")
    if version == 0:
        if schema:
            tables = sorted(name for kind, name, _, _ in schema if kind == "table")
            raise NotALabDatabase(where, f"it holds tables ({', '.join(tables[:3])}) but no labkit schema version")
        return 0
    if version > SCHEMA_VERSION:
        if app_id == APPLICATION_ID:
            raise SchemaVersionMismatch(where, version, SCHEMA_VERSION)
        raise NotALabDatabase(where, f"its schema version is {version} but it lacks labkit's application id")
    if app_id == 0 and version > 1:  # only version 1 predates the application id
        raise NotALabDatabase(where, f"its schema version is {version} but it lacks labkit's application id")
    if schema != expected_schema(version):
        tables = sorted(name for kind, name, _, _ in schema if kind == "table")
        raise NotALabDatabase(
            where, f"its tables ({', '.join(tables[:4]) or 'none'}) are not those of labkit's schema version {version}"
        )
    return version


@cache
def expected_schema(version: int) -> list[tuple]:
    """Exactly what labkit's migrations create up to ``version``: tables, indexes, triggers."""
    return schema_made_by([statement for step in MIGRATIONS[:version] for statement in step if not statement.startswith("PRAGMA")])


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    with transaction(conn):
        # Read again under the write lock: another process may have migrated meanwhile.
        found = _identify(conn, path)
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
    """A committed, contract-checked provider response, with the decision inputs that produced it.

    ``provider``, ``rules_revision`` and ``prompt_revision`` come from the read adapter, not
    from its answer; they are None on evidence recorded before labkit stored them.
    """

    incident: str
    contract: str
    body: dict
    digest: str
    recorded_at: str
    provider: str | None = None
    rules_revision: int | None = None
    prompt_revision: str | None = None


def evidence_digest(body: dict) -> str:
    """sha256 of the canonical JSON: the identity a receipt records for the evidence it used."""
    return sha256_hex(canonical_json(body))


def _run_from_row(row: sqlite3.Row) -> Run:
    return Run(row["incident"], row["workflow_version"], Step(row["step"]), row["version"], row["created_at"], row["updated_at"])


def find_run_txn(conn: sqlite3.Connection, incident: str) -> Run | None:
    row = conn.execute("SELECT * FROM runs WHERE incident = ?", (incident,)).fetchone()
    return _run_from_row(row) if row else None


def create_run_txn(conn: sqlite3.Connection, incident: str, workflow_version: int, clock: Clock) -> Run:
    """Insert the run at ``not_inspected`` unless it exists; return the stored row either way.

    Under the write lock, so two workers creating the same run get the same row. Whether
    the stored row's workflow version is acceptable is the coordinator's question.
    """
    require_write_transaction(conn, "create_run_txn")
    at = clock.now()
    # One statement both asks and writes: a run that exists already is left as it is (and read
    # below), so a new run costs one statement under the lock instead of a read and then a write.
    inserted = conn.execute(
        "INSERT INTO runs (incident, workflow_version, step, version, created_at, updated_at) VALUES (?, ?, ?, 0, ?, ?)"
        " ON CONFLICT (incident) DO NOTHING",
        (incident, workflow_version, Step.NOT_INSPECTED.value, at, at),
    ).rowcount
    if inserted != 1:
        existing = find_run_txn(conn, incident)
        assert existing is not None  # the conflict was with this very row, under the write lock
        return existing
    conn.execute(
        "INSERT INTO transitions (incident, from_step, to_step, state_version, at) VALUES (?, NULL, ?, 0, ?)",
        (incident, Step.NOT_INSPECTED.value, at),
    )
    return Run(incident, workflow_version, Step.NOT_INSPECTED, 0, at, at)


#: The compare-and-set of a transition: the run is still at the step and state version its
#: caller read. A fenced commit (:class:`Fence`) compares its own condition instead.
COMPARE_AND_SET = "step = :from_step AND version = :expected_version"


@dataclass(frozen=True)
class Fence:
    """A lease's fencing token for :func:`advance_txn`: move the run only while that lease is its latest.

    ``condition`` is the WHERE clause that replaces :data:`COMPARE_AND_SET`; labkit's is
    :data:`labkit.leases.FENCE` (the same state version, and the run's ``lease_token`` still
    ``:token``). 10_leases_and_fencing's exercise has the learner write it.
    """

    token: int
    condition: str


def advance_txn(
    conn: sqlite3.Connection, run: Run, to: Step, clock: Clock, *, fence: Fence | None = None, at: str | None = None
) -> Run:
    """Compare-and-set: move ``run`` one step forward to ``to``, only if it is still where ``run`` says.

    A move that is not exactly the next step is refused before any write
    (:class:`~labkit.errors.StepOrderError`); the database's trigger refuses it too. The
    WHERE clause carries the step and version we read; if another worker moved the run in
    between, no row matches and we refuse (:class:`~labkit.errors.StaleTransition`) rather
    than overwrite its progress. With ``fence``, the WHERE clause is the fence's condition:
    the same predicate with the lease's token (:func:`labkit.leases.fenced_advance_txn`).
    Either way the move writes its ``transitions`` row in the same transaction, at ``clock``'s
    time, or at ``at`` when the caller has read the clock already (a fenced commit's lease
    event shares the transition's instant).
    """
    require_write_transaction(conn, "advance_txn")
    if run.step.next is not to:
        raise StepOrderError(run.incident, run.step.value, f"move to {to.value}")
    at = clock.now() if at is None else at
    condition = COMPARE_AND_SET if fence is None else fence.condition
    cursor = conn.execute(
        f"UPDATE runs SET step = :to, version = version + 1, updated_at = :at WHERE incident = :incident AND ({condition})",
        {"to": to.value, "at": at, "incident": run.incident, "from_step": run.step.value, "expected_version": run.version,
         "token": None if fence is None else fence.token},
    )
    if cursor.rowcount != 1:
        raise StaleTransition(run.incident, run.step.value, run.version)
    conn.execute(
        "INSERT INTO transitions (incident, from_step, to_step, state_version, at) VALUES (?, ?, ?, ?, ?)",
        (run.incident, run.step.value, to.value, run.version + 1, at),
    )
    return Run(run.incident, run.workflow_version, to, run.version + 1, run.created_at, at)


def store_evidence_txn(
    conn: sqlite3.Connection,
    incident: str,
    contract: str,
    body: dict,
    clock: Clock,
    inputs: Mapping[str, object] | None = None,
    *,
    record_assessment: bool = True,
    diagnostic: tuple[str, str] | None = None,
) -> Evidence:
    """Record contract-checked evidence and, with it, the original assessment it carries.

    The digest is computed here, from exactly what is stored. ``inputs`` are the read
    adapter's decision inputs (provider, rules_revision, prompt_revision). The assessment
    (the response's diagnosis, with those inputs and the contract revision) is what a
    workflow-version-2 completion builds its report from; the previous release
    (workflow version 1) did not record one (``record_assessment=False``). ``diagnostic`` is
    the reference to the raw diagnostic kept apart, (digest, location): written with the row,
    not added to it later (:func:`labkit.evidence.store_bounded_txn`).
    """
    require_write_transaction(conn, "store_evidence_txn")
    inputs = dict(inputs or {})
    text = canonical_json(body)
    digest = sha256_hex(text)
    at = clock.now()
    provider, rules, prompt = inputs.get("provider"), inputs.get("rules_revision"), inputs.get("prompt_revision")
    diagnostic_digest, diagnostic_location = diagnostic or (None, None)
    conn.execute(
        "INSERT INTO evidence (incident, contract, body, digest, recorded_at, provider, rules_revision, prompt_revision,"
        " diagnostic_digest, diagnostic_location) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (incident, contract, text, digest, at, provider, rules, prompt, diagnostic_digest, diagnostic_location),
    )
    evidence = Evidence(incident, contract, body, digest, at, *(_typed(provider, str), _typed(rules, int), _typed(prompt, str)))
    if record_assessment and isinstance(body.get("diagnosis"), dict):
        record_assessment_txn(conn, incident, "inspection", body["diagnosis"], {**inputs, "contract": contract}, clock)
    return evidence


def _typed(value: object, kind: type) -> Any:
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


def load_evidence_txn(conn: sqlite3.Connection, incident: str) -> Evidence | None:
    """The run's committed evidence, refused as inconsistent if its row is not what labkit wrote."""
    row = conn.execute("SELECT * FROM evidence WHERE incident = ?", (incident,)).fetchone()
    if row is None:
        return None
    try:
        body = strict_loads(row["body"])
    except JsonProblem as problem:
        raise InconsistentRun(incident, f"its evidence row is damaged ({problem.reason})") from None
    if not isinstance(body, dict) or sha256_hex(row["body"]) != row["digest"]:
        raise InconsistentRun(incident, "its evidence row does not match its digest")
    return Evidence(
        row["incident"], row["contract"], body, row["digest"], row["recorded_at"],
        row["provider"], row["rules_revision"], row["prompt_revision"],
    )


def has_evidence_txn(conn: sqlite3.Connection, incident: str) -> bool:
    """Whether evidence is committed, without reading (or judging) its body."""
    return conn.execute("SELECT 1 FROM evidence WHERE incident = ?", (incident,)).fetchone() is not None


def list_runs_txn(conn: sqlite3.Connection) -> list[Run]:
    return [_run_from_row(row) for row in conn.execute("SELECT * FROM runs ORDER BY incident")]


def latest_time_txn(conn: sqlite3.Connection) -> str | None:
    """The latest timestamp written to the database (ISO strings sort in time order)."""
    return conn.execute(
        "SELECT MAX(at) FROM (SELECT MAX(at) AS at FROM transitions UNION ALL SELECT MAX(recorded_at) FROM evidence"
        " UNION ALL SELECT MAX(issued_at) FROM receipts UNION ALL SELECT MAX(at) FROM assessments"
        " UNION ALL SELECT MAX(at) FROM migrations UNION ALL SELECT MAX(updated_at) FROM effects"
        " UNION ALL SELECT MAX(at) FROM retentions)"
    ).fetchone()[0]


def snapshot(conn: sqlite3.Connection) -> dict[str, list[tuple]]:
    """Every row of every lab table, in a stable order: compare two to prove nothing changed.

    The tables are read in one read transaction, so the snapshot is of a single moment even
    while other processes commit.
    """
    with read_transaction(conn):
        return {table: [tuple(row) for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2")] for table in TABLES}
