"""The ticket service's own SQLite file: its format, opening it safely, and a read-only look at it.

The service (:mod:`labkit.lab.ticket_service`) writes this file; the recovery scorecard
(:mod:`labkit.evaluation`) reads it as the destination's own record of what was created,
which is why the format lives here, beside the mechanisms, and not inside the lab's server.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

from . import store as checkpoint_store
from .database import (
    check_path,
    closed_on_failure,
    file_identity,
    open_database,
    quick_check,
    schema_made_by,
    set_wal,
    transaction,
)
from .errors import NotATicketStore
from .jsontext import canonical_json, sha256_hex

#: Written into the store's header (``PRAGMA application_id``): "TKTS". labkit's checkpoint
#: database says "LABK"; the two files can never be mistaken for each other.
APPLICATION_ID = int.from_bytes(b"TKTS", "big")
SCHEMA_VERSION = 1
SCHEMA = (
    """CREATE TABLE tickets (
        ticket_id        TEXT PRIMARY KEY,        -- T-0001, T-0002, ...: from the store's own sequence
        idempotency_key  TEXT UNIQUE,             -- NULL when the service ignored the key (no-idempotency)
        request_digest   TEXT NOT NULL,           -- sha256 of the canonical request body: the draft's fingerprint
        incident         TEXT NOT NULL,
        title            TEXT NOT NULL,
        body             TEXT NOT NULL,           -- the request as canonical JSON
        created_at       TEXT NOT NULL
    ) STRICT""",
)
COLUMNS = ("ticket_id", "idempotency_key", "request_digest", "incident", "title", "body", "created_at")


def open_store(path: str | Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open (and, unless ``readonly``, create) the service's store, refusing any other file.

    The same steps as :func:`labkit.store.connect`: the path checked, the file identified by
    its application id, version and tables before anything is written, WAL, ``synchronous=FULL``
    and the table made in one transaction. A missing file is created only when not ``readonly``.
    """
    path = check_path(path, must_exist=readonly)
    conn = open_database(path, readonly=readonly)
    with closed_on_failure(conn, path):
        found = _identify(conn, path)
        quick_check(conn, path)
        if not readonly:
            set_wal(conn)
            conn.execute("PRAGMA synchronous = FULL")
            if found == 0:
                with transaction(conn):
                    if _identify(conn, path) == 0:  # read again under the write lock
                        for statement in SCHEMA:
                            conn.execute(statement)
                        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return conn


def _identify(conn: sqlite3.Connection, path: Path) -> int:
    """0 for an empty file, else the store's version; anything else is refused in one line."""
    app_id, version, schema = file_identity(conn)
    tables = ", ".join(sorted(name for kind, name, _, _ in schema if kind == "table")[:3])
    where = str(path)
    if app_id == checkpoint_store.APPLICATION_ID:
        raise NotATicketStore(where, "it is a labkit checkpoint database; the service keeps its own file")
    if app_id not in (0, APPLICATION_ID):
        raise NotATicketStore(where, f"its application id is {app_id}, another program's")
    if app_id == 0:
        if schema or version:
            raise NotATicketStore(where, f"it holds tables ({tables or 'none'}) but not the ticket service's application id")
        return 0
    if version != SCHEMA_VERSION or schema != schema_made_by(list(SCHEMA)):
        raise NotATicketStore(where, f"its schema (version {version}, tables {tables or 'none'}) is not the one this service writes")
    return version


def store_rows(path: str | Path) -> list[dict[str, Any]]:
    """Every row of the service's ``tickets`` table, in creation order, read directly and read-only.

    For a lesson's "the service's own table" view; works while the service runs and after it
    was killed (what it committed is in the file).
    """
    with closing(open_store(path, readonly=True)) as conn:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tickets'").fetchone() is None:
            return []  # an empty file: the service has not started on it yet
        return [dict(row) for row in conn.execute(f"SELECT {', '.join(COLUMNS)} FROM tickets ORDER BY rowid")]


def request_digest(request: Mapping[str, object]) -> str:
    """The request's fingerprint: sha256 of its canonical JSON (the draft's "checksum of the entire payload")."""
    return sha256_hex(canonical_json(request))
