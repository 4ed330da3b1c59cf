"""Refused: a --db path that cannot name a checkpoint database, and paths that must work.

What belongs here: where the database is, before its content matters. A missing folder or
file, a folder, a trailing slash or an empty path, a FIFO, a symlink loop or a symlink that
leads elsewhere, a hard link, a name too long, ``:memory:`` or a URI, a read-only file or
folder. Refusals are bad input (exit 2) and create nothing; a read-only file is a run-time
failure (exit 1). The database's content (what the file is) is test_refuse_database_identity.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from labkit.lab.processes import child_env

KILLED = -signal.SIGKILL
INC = "INC-1001"
INC2 = "INC-1002"  # the incident of the tests that pinned the faults of issue 5


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_missing_folder_is_refused_and_not_created(tmp_path, cli_main, refused):
    target = tmp_path / "no-such-folder" / "lab.db"
    for args in (("run", "--db", target, "--incident", INC), ("recover", "--db", target), ("status", "--db", target, "--json")):
        refused(cli_main(*args), "no-such-folder", "does not exist")
    assert not (tmp_path / "no-such-folder").exists()


@pytest.mark.parametrize("command", ["status", "recover"])
def test_fault9_reading_a_database_that_does_not_exist_is_refused_not_created(command, folder, cli_main, refused):
    """Before the fix: exit 0 and a new empty database (plus -wal/-shm) appears."""
    missing = folder / "missing.db"
    refused(cli_main(command, "--db", missing, *(["--json"] if command == "status" else [])), "missing.db", "does not exist")
    assert files(folder) == []


def test_a_folder_given_as_the_database_is_refused(folder, cli_main, refused):
    inner = folder / "looks-like.db"
    inner.mkdir()
    refused(cli_main("run", "--db", inner, "--incident", INC), "looks-like.db")
    refused(cli_main("recover", "--db", inner), "looks-like.db")
    assert sorted(p.name for p in folder.iterdir()) == ["looks-like.db"]
    assert list(inner.iterdir()) == []


@pytest.mark.parametrize(("where", "words"), [(".", "not a SQLite database"), ("/", "names a folder"), ("", "empty"),
                                              ("./", "names a folder")])
def test_a_folder_given_as_the_database_is_refused_however_spelled(where, words, cli_main, refused, tmp_path):
    for args in (("run", "--db", where, "--incident", INC), ("recover", "--db", where), ("status", "--db", where, "--json")):
        refused(cli_main(*args), words)


def test_a_fifo_given_as_the_database_is_refused_without_hanging(folder, cli, refused):
    fifo = folder / "pipe.db"
    os.mkfifo(fifo)
    refused(cli("status", "--db", fifo, "--json"), "pipe.db", "not a regular file")


@pytest.mark.parametrize(("name", "word"), [(":memory:", ":memory:"), ("file:lab.db?mode=memory", "URI")], ids=["memory", "uri"])
def test_fault4_an_in_memory_or_uri_database_name_is_refused(name, word, folder, cli_main, refused, monkeypatch):
    """Before the fix: exit 0 with a receipt that is stored nowhere, and files appear in the cwd."""
    monkeypatch.chdir(folder)  # the command line resolves the name from there
    refused(cli_main("run", "--db", name, "--incident", INC2), word)
    assert files(folder) == []


def test_fault6_a_database_path_that_is_a_symlink_loop_is_one_line(folder, cli_main, refused):
    """Before the fix: a traceback (RuntimeError "Symlink loop" from resolving the call log's path)."""
    (folder / "a.db").symlink_to(folder / "b.db")
    (folder / "b.db").symlink_to(folder / "a.db")
    db = folder / "a.db"
    for args in (("run", "--db", db, "--incident", INC2), ("status", "--db", db, "--json"), ("recover", "--db", db)):
        refused(cli_main(*args), "loop")
    assert files(folder) == ["a.db", "b.db"]


def test_a_symlink_whose_target_name_is_too_long_is_one_line(folder, cli_main, refused):
    odd = folder / "new\nline"
    odd.mkdir()
    (odd / "s.db").symlink_to("t" * 240 + ".db")
    line = refused(cli_main("run", "--db", odd / "s.db", "--incident", INC), "too long")
    assert "\n" not in line


def test_a_database_reached_through_a_symlink_shares_one_provider_log(lab, cli, status):
    link = lab.folder / "link.db"
    link.symlink_to(lab.db)
    assert cli("run", "--db", link, "--incident", INC, "--crash-at", "after_read").returncode == KILLED
    assert cli("recover", "--db", lab.db).returncode == 0
    [run] = status(lab.db)["runs"]
    assert run["provider_reads"] == 2, "the read made through the link must be counted"
    assert sorted(p.name for p in lab.folder.glob("*.jsonl")) == ["lab.db.provider-calls.jsonl"]


def test_a_hard_linked_database_is_refused(lab, cli, cli_main, refused):
    assert cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "after_read").returncode == -signal.SIGKILL
    os.link(lab.db, lab.folder / "second-name.db")
    refused(cli_main("recover", "--db", lab.db), "hard links")


@pytest.mark.parametrize("length", [300, 250], ids=["name-too-long", "log-name-too-long"])
def test_fault7_a_file_name_too_long_is_bad_input_and_creates_nothing(length, folder, cli_main, refused):
    """300 characters: too long for the database itself; 250: fine for the database, but its
    provider call log's name (``+ .provider-calls.jsonl``) would pass 255 bytes.

    Before the fix: exit 1 "File name too long" (and at 250, the database is created first).
    """
    db = folder / ("x" * (length - 3) + ".db")
    refused(cli_main("run", "--db", db, "--incident", INC2), "too long")
    assert files(folder) == []


def test_a_read_only_database_file_is_named(lab, conn, cli_main, refused):
    lab.coordinator(conn).drive(INC)
    conn.close()
    if os.geteuid() == 0:
        pytest.skip("root ignores file permissions")
    lab.db.chmod(0o444)
    try:
        outcome = cli_main("run", "--db", lab.db, "--incident", "INC-1002")
        assert outcome.returncode == 1 and "lab.db" in outcome.stderr and "Traceback" not in outcome.stderr
    finally:
        lab.db.chmod(0o644)


@contextmanager
def _read_only_folder(folder: Path, how: str):
    """Make ``folder`` read-only for the child that will read it; yield the command prefix.

    ``mount``: a read-only bind mount, which binds root too (the file system says EROFS);
    needs root and a kernel that lets this sandbox mount. ``permissions``: mode 0555, which
    binds an ordinary user; as root the child drops to uid 65534, which needs an interpreter
    that user can read.
    """
    if how == "mount":
        if os.geteuid() != 0:
            pytest.skip("a read-only bind mount needs root; the permissions case covers ordinary users")
        bound = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, text=True)
        if bound.returncode != 0:
            pytest.skip(f"this machine does not allow a bind mount: {bound.stderr.strip()}")
        try:
            made_ro = subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], capture_output=True, text=True)
            assert made_ro.returncode == 0, made_ro.stderr
            yield []
        finally:
            subprocess.run(["umount", str(folder)], capture_output=True)
        return
    folder.chmod(0o555)
    try:
        if os.geteuid() != 0:
            yield []
            return
        probe = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", "import sqlite3, labkit"],
            capture_output=True, text=True, env=child_env(),
        ) if shutil.which("setpriv") else None
        if probe is None or probe.returncode != 0:
            pytest.skip("running as root, and uid 65534 cannot run this interpreter; the mount case covers root")
        yield ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize("how", ["mount", "permissions"])
def test_fault7_status_reads_a_database_in_a_read_only_folder(how, cli):
    """``status`` needs no write: it answers, lists the run, and leaves no file in the folder.

    Before the fix: exit 1 "attempt to write a readonly database".
    """
    folder = Path(tempfile.mkdtemp(prefix="labkit-readonly-", dir="/tmp"))
    db = folder / "lab.db"
    try:
        folder.chmod(0o755)
        assert cli("run", "--db", db, "--incident", "INC-1001").returncode == 0
        db.chmod(0o444)
        before = files(folder)
        with _read_only_folder(folder, how) as prefix:
            command = [*prefix, sys.executable, "-m", "labkit", "status", "--db", str(db)]
            done = subprocess.run(command, capture_output=True, text=True, env=child_env(), cwd=folder, timeout=60)
            assert done.returncode == 0, done.stderr
            assert "INC-1001" in done.stdout and "report_completed" in done.stdout, done.stdout
            assert files(folder) == before
            # and a command that must write says so in one line, exit 1, instead of a traceback
            refused_run = subprocess.run(
                [*prefix, sys.executable, "-m", "labkit", "run", "--db", str(db), "--incident", "INC-1002"],
                capture_output=True, text=True, env=child_env(), cwd=folder, timeout=60,
            )
            assert refused_run.returncode == 1 and len(refused_run.stderr.splitlines()) == 1, refused_run.stderr
            assert "Traceback" not in refused_run.stderr and files(folder) == before
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder, ignore_errors=True)
