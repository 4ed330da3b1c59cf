"""A second connection in one process must not drop the first one's SQLite locks.

POSIX releases every fcntl lock a process holds on a file when any descriptor of that file
is closed. labkit reads a file's first bytes before SQLite opens it; done while another
connection of the same process had the file open, that close silently released the open
connection's locks, and another process then took itself for the last user and deleted
the write-ahead log in use (the worker soak saw it as "Rowid out of order" corruption).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path

import labkit
from labkit import database
from labkit.database import held_open_here
from labkit.lab.processes import child_env

#: Another process opens the database, reads, and closes: as the last user it would
#: checkpoint and delete the -wal and -shm files, which it may do only if no one holds a lock.
OTHER_PROCESS = "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\nc.execute('SELECT count(*) FROM runs').fetchone()\nc.close()\n"


def other_process_opens_and_closes(db: Path) -> None:
    subprocess.run([sys.executable, "-c", OTHER_PROCESS, str(db)], check=True, env=child_env(), timeout=60)


def test_a_second_connection_keeps_the_first_ones_locks(tmp_path):
    db = tmp_path / "lab.db"
    with closing(labkit.connect(db)) as first:
        labkit.Coordinator(first, labkit.ReferenceProvider(tmp_path / "calls.jsonl")).start("INC-1001")  # the log now holds a commit
        assert Path(f"{db}-wal").exists()
        with closing(labkit.connect(db)) as second:  # a second labkit connection, opened and closed
            second.execute("SELECT 1").fetchone()
        other_process_opens_and_closes(db)
        # Had this process lost its locks, the other one would have deleted the log under us.
        assert Path(f"{db}-wal").exists() and Path(f"{db}-shm").exists()
        assert first.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    with closing(sqlite3.connect(db)) as check:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_the_file_is_forgotten_once_every_connection_is_closed(tmp_path):
    db = tmp_path / "lab.db"
    first = labkit.connect(db)
    second = labkit.connect(db)
    first.close()
    assert held_open_here(db)
    second.close()
    assert not held_open_here(db)
    db.write_bytes(b"this is no database, but a file of the same name\n" * 4)
    # With nothing open, the first bytes are read again, and another file is refused untouched.
    try:
        labkit.connect(db)
    except labkit.errors.NotADatabase:
        pass
    else:
        raise AssertionError("a text file was opened as a database")


def test_no_thread_opens_the_file_by_hand_while_another_thread_is_opening_it(tmp_path, monkeypatch):
    """The header check and the connection it precedes are one step for the threads of a process.

    Before the fix, thread A could find no connection open and start reading the header while
    thread B opened its connection and took a lock; A's close then dropped B's lock. A ticket
    service answering on several threads lost acknowledged tickets that way (issue 19). Here A's
    header read is held open on purpose; B's open must wait for it rather than slip past.
    """
    db = tmp_path / "lab.db"
    labkit.connect(db).close()
    reading, release = threading.Event(), threading.Event()
    real_open = database.open_regular_file

    def slow_first_header_read(*args, **kwargs):
        if not reading.is_set():
            reading.set()
            release.wait(10)  # thread A sits inside its header check
        return real_open(*args, **kwargs)

    monkeypatch.setattr(database, "open_regular_file", slow_first_header_read)
    opened: dict[str, float] = {}

    def open_and_close(name: str) -> None:
        database.open_database(db).close()
        opened[name] = time.monotonic()

    first = threading.Thread(target=open_and_close, args=("A",))
    first.start()
    assert reading.wait(10)
    second = threading.Thread(target=open_and_close, args=("B",))
    second.start()
    second.join(0.5)
    assert "B" not in opened, "thread B opened the file while thread A was reading its header by hand"
    release.set()
    first.join(10)
    second.join(10)
    assert set(opened) == {"A", "B"}
