"""What reaches the files through the command line: a refused answer's secret in ``work``'s
lease events, details an earlier labkit stored as they came and ``retain``, and control
characters in evidence text (refused, never printed raw).
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

SECRET = "Hunter2-Qx7pw"


def plant(data: Path, incident: str, change) -> None:
    path = data / "incidents" / f"{incident}.json"
    snapshot = json.loads(path.read_text(encoding="utf-8"))
    change(snapshot)
    path.write_text(json.dumps(snapshot), encoding="utf-8")


def files_holding(folder: Path, needle: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.is_file() and needle.encode() in p.read_bytes())


@pytest.mark.parametrize("refused_value", [f"password={SECRET}", f"amqp://ops:{SECRET}@rabbit.example.com/crm"])
def test_work_never_stores_a_refused_answers_secret_in_lease_events(lab, cli, data_copy, query, refused_value):
    """Before the fix: the failed lease's detail quoted the refused value, password and all."""
    plant(data_copy, "INC-1001", lambda s: s["queue"].update(consumers=refused_value))
    done = cli("work", "--db", lab.db, "--workers", "1", "--incident", "INC-1001", env={"LABKIT_DATA_DIR": str(data_copy)})
    assert done.returncode == 2, done.stderr
    (detail,) = query(lab.db, "SELECT detail FROM lease_events WHERE event = 'failed'")[0]
    assert "EvidenceRejected" in detail and "queue.consumers" in detail, detail
    assert SECRET not in detail and SECRET not in done.stderr
    assert files_holding(lab.folder, SECRET) == []


def test_retain_redacts_what_an_earlier_labkit_stored_unredacted(lab, cli, data_copy, query):
    """A database written before redaction reached lease events and field paths: after ``retain``
    no file holds the secret. Before the fix ``retain`` left both, and VACUUM kept them."""
    env = {"LABKIT_DATA_DIR": str(data_copy)}
    assert cli("work", "--db", lab.db, "--workers", "1", "--incident", "INC-1002", env=env).returncode == 0
    with closing(sqlite3.connect(lab.db)) as conn, conn:  # as an earlier labkit wrote them
        conn.execute("UPDATE lease_events SET detail = ? WHERE seq = 1",
                     (f'EvidenceRejected: field queue.consumers: "password={SECRET}" is not of type integer',))
        conn.execute("INSERT INTO redactions VALUES ('INC-1002', 'diagnostic', ?, 'secret', 1)", (f"probe.credentials.{SECRET}",))
        conn.execute("INSERT INTO redactions VALUES ('INC-1002', 'diagnostic', 'probe.credentials.user', 'secret', 2)")
    assert files_holding(lab.folder, SECRET) == ["lab.db"]
    done = cli("retain", "--db", lab.db, "--older-than", "0", env={**env, "LABKIT_CLOCK": "2026-04-15T00:00:00Z"})
    assert done.returncode == 0, done.stderr
    assert files_holding(lab.folder, SECRET) == []
    assert "redacted 1 lease event detail(s) and 2 recorded field path(s)" in done.stdout
    assert query(lab.db, "SELECT field, count FROM redactions WHERE field LIKE 'probe.%'") == [("probe.credentials", 3)]
    (detail,) = query(lab.db, "SELECT detail FROM lease_events WHERE seq = 1")[0]
    assert detail == 'EvidenceRejected: field queue.consumers: "password=[redacted:secret]" is not of type integer'
    again = cli("retain", "--db", lab.db, "--older-than", "0", env={**env, "LABKIT_CLOCK": "2026-04-15T00:00:00Z"})
    assert "redacted" not in again.stdout.splitlines()[-1], "a second retention finds nothing left to redact"


@pytest.mark.parametrize(("char", "named"), [("\x1b", "U+001B"), ("\x00", "U+0000"), ("\u202e", "U+202E"), ("\n", "U+000A")])
def test_evidence_text_with_a_control_character_is_refused_and_never_printed_raw(lab, cli, data_copy, query, refused, char, named):
    """NUL, ESC (a terminal escape), a right-to-left override: a contract violation, named in plain text.

    Before the fix the run completed and stored the queue name with the character in it."""
    plant(data_copy, "INC-1001", lambda s: s["queue"].update(name=f"orders{char}[31mred"))
    done = cli("run", "--db", lab.db, "--incident", "INC-1001", env={"LABKIT_DATA_DIR": str(data_copy)})
    refused(done, "printable-text", "'queue.name'", named)
    if char != "\n":  # the one line break is the line's own end
        assert char not in done.stdout + done.stderr
    assert query(lab.db, "SELECT COUNT(*) FROM evidence") == [(0,)]
    assert query(lab.db, "SELECT step FROM runs") == [("not_inspected",)]
