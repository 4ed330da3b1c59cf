"""The entry point called in this process prints what a real ``python -m labkit`` prints.

Refusal tests call ``labkit.cli.main`` in the test's own process (the ``cli_main`` fixture)
where no process boundary is under test. That is only sound while the two answer alike, so
here a sample of every refusal family runs both ways, each in a fresh folder of its own
(named relative to it, and the folder's own path masked where a message resolves a name):
the same exit code, the same stdout, the same stderr line.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

import labkit

INC = "INC-1001"


def _nothing(here: Path) -> None:
    pass


def _text_file(here: Path) -> None:
    (here / "lab.db").write_text("incident,kind\nINC-1001,consumer_outage\n", encoding="utf-8")


def _empty_file(here: Path) -> None:
    (here / "lab.db").touch()


def _folder(here: Path) -> None:
    (here / "lab.db").mkdir()


def _symlink_loop(here: Path) -> None:
    (here / "lab.db").symlink_to(here / "b.db")
    (here / "b.db").symlink_to(here / "lab.db")


def _another_programs_database(here: Path) -> None:
    with closing(sqlite3.connect(here / "lab.db")) as other:
        other.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
        other.commit()


def _newer_schema(here: Path) -> None:
    with closing(labkit.connect(here / "lab.db")) as conn:
        conn.execute("PRAGMA user_version = 99")


def _symlinked_call_log(here: Path) -> None:
    labkit.call_log_for(here / "lab.db").symlink_to(here / "elsewhere.txt")


def _bad_call_log_line(here: Path) -> None:
    lab = labkit.lab.Workspace(here, here / "lab.db", labkit.TickingClock())
    with closing(lab.connect()) as conn:
        lab.coordinator(conn).drive(INC)
    with open(labkit.call_log_for(here / "lab.db"), "ab") as log:
        log.write(b'{"incident": "INC-1001", "outcome": "ok", "response_bytes": NaN}\n')


def _data_copy(here: Path) -> Path:
    copy = here / "data"
    shutil.copytree(labkit.provider.DEFAULT_DATA_DIR / "incidents", copy / "incidents")
    return copy / "incidents" / f"{INC}.json"


def _not_json_answer(here: Path) -> None:
    _data_copy(here).write_text("{ this is not JSON", encoding="utf-8")


def _unreadable_answer(here: Path) -> None:
    target = _data_copy(here)
    target.unlink()
    target.symlink_to(here / "nowhere.json")


def _run_of_workflow_version_1(here: Path) -> None:
    lab = labkit.lab.Workspace(here, here / "lab.db", labkit.TickingClock())
    with closing(lab.connect()) as conn:
        lab.coordinator(conn, workflow_version=1).start(INC)


DATA = {"LABKIT_DATA_DIR": "data"}


def _relative(text: str, here: Path) -> str:
    # A message that names a file by its resolved path names the two folders apart.
    return text.replace(str(here.resolve()), "HERE").replace(str(here), "HERE")

#: family, case: how to make the folder, the command's words, its environment
CASES: dict[str, tuple[Callable[[Path], None], tuple[str, ...], dict[str, str]]] = {
    "arguments-no-command": (_nothing, (), {}),
    "arguments-unknown-incident": (_nothing, ("run", "--db", "lab.db", "--incident", "INC-9999"), {}),
    "arguments-repeated-option": (_nothing, ("run", "--db", "lab.db", "--incident", INC, "--incident", "INC-1002"), {}),
    "arguments-abbreviated-option": (_nothing, ("run", "--db", "lab.db", "--inc", INC), {}),
    "arguments-unknown-crash-point": (_nothing, ("run", "--db", "lab.db", "--incident", INC, "--crash-at", "halfway"), {}),
    "arguments-malformed-clock": (_nothing, ("run", "--db", "lab.db", "--incident", INC), {"LABKIT_CLOCK": "yesterday"}),
    "arguments-malformed-delay": (_nothing, ("status", "--db", "lab.db"), {"LABKIT_PROVIDER_DELAY": "nan"}),
    "paths-missing-folder": (_nothing, ("run", "--db", "no-such-folder/lab.db", "--incident", INC), {}),
    "paths-missing-file": (_nothing, ("status", "--db", "lab.db", "--json"), {}),
    "paths-trailing-slash": (_nothing, ("recover", "--db", "lab.db/"), {}),
    "paths-a-folder": (_folder, ("run", "--db", "lab.db", "--incident", INC), {}),
    "paths-symlink-loop": (_symlink_loop, ("status", "--db", "lab.db"), {}),
    "paths-in-memory": (_nothing, ("run", "--db", ":memory:", "--incident", INC), {}),
    "identity-text-file": (_text_file, ("run", "--db", "lab.db", "--incident", INC), {}),
    "identity-empty-file": (_empty_file, ("status", "--db", "lab.db"), {}),
    "identity-another-program": (_another_programs_database, ("recover", "--db", "lab.db"), {}),
    "identity-newer-schema": (_newer_schema, ("status", "--db", "lab.db", "--json"), {}),
    "call-log-symlink": (_symlinked_call_log, ("run", "--db", "lab.db", "--incident", INC), {}),
    "call-log-bad-line": (_bad_call_log_line, ("status", "--db", "lab.db", "--json"), {}),
    "provider-answer-not-json": (_not_json_answer, ("run", "--db", "lab.db", "--incident", INC), DATA),
    "runs-another-workflow-version": (_run_of_workflow_version_1, ("run", "--db", "lab.db", "--incident", INC), {}),
    "run-failure-provider-down": (_unreadable_answer, ("run", "--db", "lab.db", "--incident", INC), DATA),
}


@pytest.mark.parametrize(("make", "args", "env"), CASES.values(), ids=CASES.keys())
def test_in_process_and_a_real_process_answer_alike(make, args, env, tmp_path, cli, cli_main, monkeypatch):
    answers = []
    for how, call in (("in-process", cli_main), ("process", cli)):
        here = tmp_path / how
        here.mkdir()
        make(here)
        monkeypatch.chdir(here)
        outcome = call(*args, env=env)
        answers.append((outcome.returncode, _relative(outcome.stdout, here), _relative(outcome.stderr, here)))
    in_process, process = answers
    assert in_process == process
    code, _, err = process
    assert code in (1, 2) and len(err.splitlines()) == 1, process  # each case is a refusal


def test_the_environment_given_applies_to_one_call_only(cli_main):
    assert cli_main("incidents", env={"LABKIT_DATA_DIR": "/no/such/folder"}).returncode == 2
    assert "LABKIT_DATA_DIR" not in os.environ
    assert cli_main("incidents").stdout.split()[0] == INC
