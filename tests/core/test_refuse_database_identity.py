"""Refused: a file at the --db path that is not this labkit's checkpoint database, or is damaged.

What belongs here: what the file is. Not a database at all (text, random bytes, an empty
file), another program's SQLite database (whatever its user_version or application_id), a
labkit database of another schema version, damaged pages. Each is bad input (exit 2) and
the file is left byte for byte, with no -wal, -shm or call log beside it. Rows that
contradict one another inside a real labkit database are test_refuse_runs.py.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

import labkit

INC = "INC-1001"
INC2 = "INC-1002"  # the incident of the tests that pinned the faults of issue 5


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _bytes(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""


NOT_DATABASES = {
    "text": b"incident,kind\nINC-1001,consumer_outage\n",
    "random-bytes": bytes(range(256)) * 16,
    "sqlite-header-then-garbage": b"SQLite format 3\x00" + bytes(range(255, -1, -1)) * 16,
}


@pytest.mark.parametrize("content", NOT_DATABASES.values(), ids=NOT_DATABASES.keys())
def test_a_file_that_is_not_a_database_is_left_byte_for_byte(content, folder, cli_main, refused):
    target = folder / "notes.db"
    target.write_bytes(content)
    commands = [("run", "--db", target, "--incident", INC)]
    if content.startswith(b"SQLite format 3"):  # the case SQLite itself gets to open: every command
        commands += [("recover", "--db", target), ("status", "--db", target, "--json")]
    for args in commands:
        refused(cli_main(*args), "notes.db", "not a SQLite database")
        assert target.read_bytes() == content
        assert sorted(p.name for p in folder.iterdir()) == ["notes.db"], "no -wal, -shm or provider log may appear"


def test_status_of_an_empty_file_says_it_is_empty(db, cli_main, refused):
    db.touch()
    refused(cli_main("status", "--db", db), "it is empty")
    assert db.read_bytes() == b""


#: Every command that reads or resumes an existing database. `run` and `work` are left out:
#: they create a database where there is none, and an empty file is one they may start.
READERS = {
    "status": ["status"], "effects": ["effects"], "evaluate": ["evaluate"], "migrations": ["migrations"],
    "recover": ["recover"], "migrate": ["migrate", "--to", "2", "--reason", "r"], "retain": ["retain", "--older-than", "1"],
    "resolve": ["resolve", "--incident", INC, "--none", "--reason", "r"],
    "reevaluate": ["reevaluate", "--incident", INC, "--reason", "r"],
}


def _empty_sqlite(path: Path) -> None:
    """A SQLite file with a header and nothing else: what another program's first open can leave."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA user_version = 0")
        conn.execute("VACUUM")


@pytest.mark.parametrize("empty", ["zero-bytes", "empty-sqlite"])
@pytest.mark.parametrize("command", READERS.values(), ids=READERS.keys())
def test_every_reader_refuses_an_empty_file_before_writing(command, empty, db, folder, cli_main, refused):
    """Before the fix recover, migrate and retain made the empty file a database (0 -> 100 KB),
    and resolve and reevaluate wrote to it before refusing."""
    if empty == "zero-bytes":
        db.touch()
    else:
        _empty_sqlite(db)
    before = db.read_bytes()
    refused(cli_main(*command, "--db", db), "lab.db", "it is empty")
    assert db.read_bytes() == before
    assert files(folder) == ["lab.db"], "no -wal, -shm or provider log may appear"


@pytest.mark.parametrize("command", READERS.values(), ids=READERS.keys())
def test_every_reader_refuses_a_zero_byte_file_without_deleting_the_log_beside_it(command, db, folder, cli_main, refused):
    """SQLite deletes the -wal of a database of no pages when it opens it: a file truncated to 0
    bytes (a full disk, a copy cut short) lost its log to a command that then refused it."""
    db.touch()
    log = Path(f"{db}-wal")
    log.write_bytes(b"what is left of the committed transactions")
    refused(cli_main(*command, "--db", db), "lab.db", "it is empty")
    assert log.read_bytes() == b"what is left of the committed transactions"
    assert files(folder) == ["lab.db", "lab.db-wal"]


@pytest.mark.parametrize(
    ("user_version", "words"),
    [(0, ["holds tables", "orders"]), (1, ["its tables (orders)", "labkit's schema version 1"])],
    ids=["unversioned", "version-1-without-runs"],
)
def test_another_programs_sqlite_database_is_left_byte_for_byte(user_version, words, folder, cli_main, refused):
    """A real SQLite file that some other program made: labkit must not add its tables to it."""
    target = folder / "shop.db"
    with closing(sqlite3.connect(target)) as other:
        other.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
        other.execute("INSERT INTO orders (total) VALUES (9.5)")
        other.execute(f"PRAGMA user_version = {user_version}")
        other.commit()
    content = target.read_bytes()
    for args in (("run", "--db", target, "--incident", INC), ("recover", "--db", target), ("status", "--db", target, "--json")):
        refused(cli_main(*args), "shop.db", "not a labkit one", *words)
        assert target.read_bytes() == content
        assert sorted(p.name for p in folder.iterdir()) == ["shop.db"], "no -wal, -shm or provider log may appear"


def _foreign_database(path: Path, kind: str) -> None:
    with closing(sqlite3.connect(path)) as other:
        if kind == "negative-version-empty":
            other.execute("PRAGMA user_version = -1")
        elif kind == "negative-version-with-table":
            other.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
            other.execute("INSERT INTO notes (body) VALUES ('keep me')")
            other.execute("PRAGMA user_version = -5")
        else:
            other.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, host TEXT, started REAL)")
            other.execute("INSERT INTO runs (host, started) VALUES ('build-7', 1700000000.5)")
            other.execute("PRAGMA user_version = 1")
        other.commit()


@pytest.mark.parametrize("kind", ["negative-version-empty", "negative-version-with-table", "version-1-with-its-own-runs"])
def test_fault5_another_programs_database_is_refused_before_anything_is_written(kind, folder, cli_main, refused):
    """Before the fix: the negative-version files get labkit's tables and WAL (exit 0); the one
    with its own ``runs`` table exits 1, "no such table: receipts"."""
    target = folder / "other.db"
    _foreign_database(target, kind)
    content = target.read_bytes()
    for args in (("run", "--db", target, "--incident", INC2), ("recover", "--db", target), ("status", "--db", target, "--json")):
        refused(cli_main(*args), "not a labkit one")
        assert target.read_bytes() == content, f"{args[0]} changed another program's database"
        assert files(folder) == ["other.db"], f"{args[0]} left files beside it"


@pytest.mark.parametrize("version", [0, 1, 2])
def test_another_programs_database_with_labkits_application_id_is_left_alone(version, folder, cli_main, refused):
    other = folder / "other.db"
    with closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE runs (x)")
        conn.execute(f"PRAGMA application_id = {labkit.store.APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {version}")
        conn.commit()
    before = other.read_bytes()
    for args in (("run", "--db", other, "--incident", INC), ("recover", "--db", other), ("status", "--db", other)):
        refused(cli_main(*args), "not a labkit one")
        assert other.read_bytes() == before and sorted(p.name for p in folder.iterdir()) == ["other.db"]


def test_a_database_with_a_newer_schema_is_refused(lab, cli_main, refused):
    with closing(lab.connect()) as conn:
        conn.execute("PRAGMA user_version = 99")
    content = lab.db.read_bytes()
    for args in (("run", "--db", lab.db, "--incident", INC), ("recover", "--db", lab.db), ("status", "--db", lab.db, "--json")):
        refused(cli_main(*args), "schema version 99", f"({labkit.store.SCHEMA_VERSION})")
        assert lab.db.read_bytes() == content
        assert sorted(p.name for p in lab.folder.iterdir()) == ["lab.db"]


def test_a_labkit_database_whose_version_was_lowered_is_refused(lab, cli_main, refused):
    lab.connect().close()
    with closing(sqlite3.connect(lab.db)) as conn:
        conn.execute("PRAGMA user_version = 1")
    before = lab.db.read_bytes()
    refused(cli_main("run", "--db", lab.db, "--incident", INC), "not those of labkit's schema version 1")
    assert lab.db.read_bytes() == before


def test_fault7_a_database_with_damaged_pages_is_bad_input_and_left_as_it_was(lab, cli, cli_main, refused):
    """Every page after the first overwritten (header and schema page intact): exit 2, "damaged".

    Before the fix: exit 1 "database disk image is malformed", so a supervisor retries forever.
    """
    for incident in ("INC-1001", "INC-1002"):
        assert cli("run", "--db", lab.db, "--incident", incident).returncode == 0
    assert not Path(f"{lab.db}-wal").exists(), "the WAL must be checkpointed before damaging the file"
    size = lab.db.stat().st_size
    assert size > 8192
    with open(lab.db, "r+b") as handle:
        handle.seek(4096)
        handle.write(b"\xab" * (size - 4096))
    content, log = lab.db.read_bytes(), lab.call_log.read_bytes()
    for args in (("status", "--db", lab.db, "--json"), ("run", "--db", lab.db, "--incident", "INC-1003")):
        refused(cli_main(*args), "damaged")
        assert lab.db.read_bytes() == content
        assert lab.call_log.read_bytes() == log


def test_a_damaged_page_is_refused_before_anything_is_written(lab, cli, cli_main, refused):
    assert cli("run", "--db", lab.db, "--incident", INC).returncode == 0
    with open(lab.db, "r+b") as handle:  # an index page: SQLite would still take some writes
        handle.seek(6 * 4096)
        handle.write(b"\xff" * 4096)
    before, log = _bytes(lab.db), _bytes(lab.call_log)
    for args in (("run", "--db", lab.db, "--incident", "INC-1002"), ("recover", "--db", lab.db), ("status", "--db", lab.db)):
        refused(cli_main(*args), "damaged")
        assert (_bytes(lab.db), _bytes(lab.call_log)) == (before, log)
        assert sorted(p.name for p in lab.folder.iterdir()) == ["lab.db", "lab.db.provider-calls.jsonl"]
