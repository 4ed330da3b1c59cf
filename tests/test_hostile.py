"""What a second hostile pass found after the fixes of issue 5, each now a test.

An independent tester drove the command line with 678 hostile single commands and 1,548
random SIGKILLs. The kills broke nothing; these inputs did (a traceback, a wrong exit code,
or a file changed where exit 2 promised nothing would be). Each test below failed before
its fix.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

import labkit
from labkit.lab.processes import child_env

INC = "INC-1001"


def _edit(data: Path, incident: str, old: str, new: str) -> None:
    path = data / "incidents" / f"{incident}.json"
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _bytes(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ('"orders.created"', '"orders\\ud800"', ["lone surrogate"]),
        ("2913402880", "9" * 5000, ["4300 digits"]),
        ('"2026-03-02T09:14:00Z"', '"2026-13-45T09:14:00Z"', ["observed_at", "not a real instant"]),
    ],
    ids=["lone-surrogate", "huge-integer", "impossible-date"],
)
def test_provider_data_that_json_accepts_but_labkit_cannot_hold_is_refused(old, new, words, lab, data_copy, cli, refused):
    _edit(data_copy, INC, old, new)
    refused(cli("run", "--db", lab.db, "--incident", INC, env={"LABKIT_DATA_DIR": str(data_copy)}), "rejected", *words)
    [answers] = [labkit.lab.lesson.restart_answers(lab.db, INC)]
    assert (answers.step, answers.evidence) == ("not_inspected", False)


def test_a_call_log_line_with_a_huge_integer_is_named_not_a_traceback(lab, cli, refused):
    assert cli("run", "--db", lab.db, "--incident", INC).returncode == 0
    with open(lab.call_log, "a", encoding="utf-8") as log:
        log.write('{"incident": "INC-1001", "outcome": "ok", "response_bytes": ' + "9" * 5000 + "}\n")
    refused(cli("status", "--db", lab.db), "provider call log", "line 2")


def test_pause_at_with_no_stdin_goes_on(lab):
    done = subprocess.run(
        [sys.executable, "-m", "labkit", "run", "--db", str(lab.db), "--incident", INC, "--pause-at", "after_read"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, env=child_env(), timeout=60,
    )
    assert done.returncode == 0, done.stderr
    closed = subprocess.run(  # started with no fd 0 at all, as `<&-` in a shell does: sys.stdin is None
        [sys.executable, "-m", "labkit", "run", "--db", str(lab.db.with_name("b.db")), "--incident", INC, "--pause-at", "after_read"],
        capture_output=True, text=True, env=child_env(), timeout=60, stdin=None, preexec_fn=lambda: os.close(0),
    )
    assert closed.returncode == 0 and "paused at after_read" in closed.stdout, closed.stderr


@pytest.mark.parametrize(
    ("table", "column", "value", "words"),
    [
        ("evidence", "body", "x", ["evidence row is damaged"]),
        ("evidence", "body", "[" * 100_000 + "]" * 100_000, ["nested deeper"]),
        ("evidence", "body", "{}", ["does not match its digest"]),
        ("receipts", "report", "x", ["receipt row is damaged"]),
    ],
    ids=["evidence-not-json", "evidence-deep", "evidence-edited", "report-not-json"],
)
def test_a_row_edited_by_hand_is_named_and_recovery_goes_on(table, column, value, words, lab, conn, cli, refused, snapshot):
    coordinator = lab.coordinator(conn)
    coordinator.drive("INC-1001")          # completed: its receipt can be damaged
    coordinator.start("INC-1002")
    coordinator.inspect("INC-1002")        # at evidence_recorded: its evidence can be damaged
    coordinator.start("INC-1003")          # at not_inspected: recovery must still finish it
    target = "INC-1001" if table == "receipts" else "INC-1002"
    with labkit.transaction(conn):
        conn.execute(f"UPDATE {table} SET {column} = ? WHERE incident = ?", (value, target))
    conn.close()
    assert cli("status", "--db", lab.db, "--json").returncode == 0, "status reads steps and counts, never the bodies"
    before = snapshot(lab.db)
    refused(cli("run", "--db", lab.db, "--incident", target), target, "inconsistent", *words)
    assert snapshot(lab.db) == before
    recovered = cli("recover", "--db", lab.db)
    assert "resumed INC-1003 from not_inspected: read the provider" in recovered.stdout, "one damaged run must not stop the others"


def test_a_damaged_page_is_refused_before_anything_is_written(lab, cli, refused):
    assert cli("run", "--db", lab.db, "--incident", INC).returncode == 0
    with open(lab.db, "r+b") as handle:  # an index page: SQLite would still take some writes
        handle.seek(6 * 4096)
        handle.write(b"\xff" * 4096)
    before, log = _bytes(lab.db), _bytes(lab.call_log)
    for args in (("run", "--db", lab.db, "--incident", "INC-1002"), ("recover", "--db", lab.db), ("status", "--db", lab.db)):
        refused(cli(*args), "damaged")
        assert (_bytes(lab.db), _bytes(lab.call_log)) == (before, log)
        assert sorted(p.name for p in lab.folder.iterdir()) == ["lab.db", "lab.db.provider-calls.jsonl"]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_another_programs_database_with_labkits_application_id_is_left_alone(version, folder, cli, refused):
    other = folder / "other.db"
    with closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE runs (x)")
        conn.execute(f"PRAGMA application_id = {labkit.store.APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {version}")
        conn.commit()
    before = other.read_bytes()
    for args in (("run", "--db", other, "--incident", INC), ("recover", "--db", other), ("status", "--db", other)):
        refused(cli(*args), "not a labkit one")
        assert other.read_bytes() == before and sorted(p.name for p in folder.iterdir()) == ["other.db"]


def test_a_labkit_database_whose_version_was_lowered_is_refused(lab, cli, refused):
    lab.connect().close()
    with closing(sqlite3.connect(lab.db)) as conn:
        conn.execute("PRAGMA user_version = 1")
    before = lab.db.read_bytes()
    refused(cli("run", "--db", lab.db, "--incident", INC), "not those of labkit's schema version 1")
    assert lab.db.read_bytes() == before


def test_an_unfinished_last_line_longer_than_64_kib_is_cut_off_whole(lab, cli, status):
    assert cli("run", "--db", lab.db, "--incident", INC).returncode == 0
    with open(lab.call_log, "a", encoding="utf-8") as log:
        log.write("x" * 70_000)
    assert cli("run", "--db", lab.db, "--incident", "INC-1003").returncode == 0
    assert [r["provider_reads"] for r in status(lab.db)["runs"]] == [1, 1]


def test_a_symlink_whose_target_name_is_too_long_is_one_line(folder, cli, refused):
    odd = folder / "new\nline"
    odd.mkdir()
    (odd / "s.db").symlink_to("t" * 240 + ".db")
    line = refused(cli("run", "--db", odd / "s.db", "--incident", INC), "too long")
    assert "\n" not in line


def test_a_hard_linked_database_is_refused(lab, cli, refused):
    assert cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "after_read").returncode == -signal.SIGKILL
    os.link(lab.db, lab.folder / "second-name.db")
    refused(cli("recover", "--db", lab.db), "hard links")


def test_status_of_an_empty_file_says_it_is_empty(db, cli, refused):
    db.touch()
    refused(cli("status", "--db", db), "it is empty")
    assert db.read_bytes() == b""


def test_recover_reports_each_run_a_lock_holds_back_and_goes_on(lab, conn, cli):
    coordinator = lab.coordinator(conn)
    for incident in ("INC-1001", "INC-1002"):
        coordinator.start(incident)
    with labkit.database.write_lock(conn):
        started = time.monotonic()
        outcome = cli("recover", "--db", lab.db, env={"LABKIT_BUSY_TIMEOUT_MS": "200"})
    assert outcome.returncode == 1
    assert outcome.stdout.splitlines()[-1] == "recovered 0 runs, 2 failed"
    assert [line.count("write lock") for line in outcome.stderr.splitlines()] == [1, 1]
    assert time.monotonic() - started < 30  # two 0.2 s busy timeouts; 30 s only tells them from a hang
