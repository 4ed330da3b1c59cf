"""Refused: the command line itself and the settings it reads from the environment.

What belongs here: usage errors, unknown names (incident, crash point, --bug), options given
twice or abbreviated, and malformed LABKIT_* settings. Each is bad input: exit 2, one line on
stderr naming it, and nothing created or changed. No process boundary is involved, so the
refusal is asked of the entry point in this process (``cli_main``); test_cli_entry_point.py
shows a real ``python -m labkit`` prints the same.
"""

from __future__ import annotations

import signal
from contextlib import closing
from pathlib import Path

import pytest

KILLED = -signal.SIGKILL
INC = "INC-1001"
INC2 = "INC-1002"  # the incident of the tests that pinned the faults of issue 5


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def started(lab, cli):
    """A database with one completed run and one run at evidence_recorded."""
    assert cli("run", "--db", lab.db, "--incident", "INC-1005").returncode == 0
    assert cli("run", "--db", lab.db, "--incident", "INC-1006", "--crash-at", "after_evidence_commit").returncode == KILLED
    with closing(lab.connect()):  # replay the killed child's WAL, as any later opener would
        pass
    return lab.db


def test_unknown_incident_on_a_new_database_creates_nothing(db, folder, cli_main, refused):
    outcome = cli_main("run", "--db", db, "--incident", "INC-9999")
    refused(outcome, "INC-9999", "unknown incident")
    assert list(folder.iterdir()) == []


def test_unknown_incident_on_an_existing_database_changes_nothing(started, cli_main, refused, snapshot):
    before = snapshot(started)
    refused(cli_main("run", "--db", started, "--incident", "inc-1001"), "inc-1001")
    refused(cli_main("run", "--db", started, "--incident", "../data/incidents/INC-1001"), "INC-1001")
    assert snapshot(started) == before


def test_a_huge_unknown_id_gives_a_short_message(lab, cli_main, refused):
    line = refused(cli_main("run", "--db", lab.db, "--incident", "X" * 100_000), "unknown incident")
    assert len(line) < 300


def test_unknown_crash_point_creates_nothing(db, folder, cli_main, refused):
    refused(cli_main("run", "--db", db, "--incident", INC, "--crash-at", "halfway"), "halfway", "crash point")
    assert list(folder.iterdir()) == []


def test_unknown_crash_point_on_an_existing_database_changes_nothing(started, cli_main, refused, snapshot):
    before = snapshot(started)
    refused(cli_main("run", "--db", started, "--incident", "INC-1006", "--crash-at", "after-read"), "after-read")
    assert snapshot(started) == before


def test_an_empty_crash_point_is_an_unknown_crash_point(db, folder, cli_main, refused):
    """``--crash-at "$POINT"`` with an unset variable must not quietly run to completion."""
    outcome = cli_main("run", "--db", db, "--incident", INC, "--crash-at", "")
    refused(outcome, "crash point")
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize(("option", "point", "words"), [
    ("--crash-at", "before_send", "a run without --tickets"),
    ("--crash-at", "after_send", "a run without --tickets"),
    ("--crash-at", "after_lease", "the leased flow of `work`"),
    ("--pause-at", "after_lease", "the leased flow of `work`"),
    ("--pause-at", "before_send", "a run without --tickets"),
])
def test_a_crash_point_the_run_never_reaches_is_refused_before_anything_happens(option, point, words, db, folder, cli_main, refused):
    """Before the fix: the run finished and exited 0, though `crash-points` lists the point: a
    supervisor or a test that asked for a kill was told nothing."""
    refused(cli_main("run", "--db", db, "--incident", INC, option, point), f"crash point '{point}' is never reached", words)
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("command", ["run", "recover"])
def test_fault11_an_unknown_bug_name_is_refused(command, folder, db, cli, cli_main, refused):
    """Before the fix: exit 2 from argparse ("unrecognized arguments: --bug"), so this part
    already held; it pins the contract for ``--bug``."""
    args = ("run", "--db", db, "--incident", INC2) if command == "run" else ("recover", "--db", db)
    if command == "recover":
        assert cli("run", "--db", db, "--incident", INC2, "--crash-at", "after_evidence_commit").returncode == KILLED
    before = files(folder)
    refused(cli_main(*args, "--bug", "no_such_bug"), "no_such_bug")
    assert files(folder) == before


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((), ["command"]),
        (("frobnicate",), ["frobnicate"]),
        (("run", "--incident", INC), ["--db"]),
        (("run", "--db", "{db}"), ["--incident"]),
        (("recover",), ["--db"]),
        (("status", "--db", "{db}", "--yaml"), ["--yaml"]),
    ],
    ids=["no-command", "unknown-command", "run-without-db", "run-without-incident", "recover-without-db", "unknown-option"],
)
def test_usage_errors_are_one_line_and_exit_2(args, words, db, folder, cli_main, refused):
    outcome = cli_main(*(str(db) if a == "{db}" else a for a in args))
    refused(outcome, *words)
    assert "usage:" not in outcome.stderr
    assert list(folder.iterdir()) == []


def test_an_option_must_be_spelled_out(lab, cli_main, refused):
    refused(cli_main("run", "--db", lab.db, "--inc", INC), "--inc")
    assert not lab.db.exists()


def test_fault9_a_repeated_incident_option_is_refused(folder, cli_main, refused):
    """Before the fix: exit 0, silently running the last one (INC-1002)."""
    refused(cli_main("run", "--db", folder / "x.db", "--incident", "INC-1001", "--incident", "INC-1002"), "more than once")
    assert files(folder) == []


def test_a_malformed_lesson_clock_is_refused_before_any_file_is_made(folder, cli_main, refused):
    db = folder / "new.db"
    refused(cli_main("run", "--db", db, "--incident", INC, env={"LABKIT_CLOCK": "yesterday"}), "LABKIT_CLOCK", "yesterday")
    assert not db.exists()


def test_fault6_a_clock_at_the_end_of_year_9999_is_refused_before_any_file_is_made(folder, db, cli_main, refused):
    """Before the fix: the database is created, then an OverflowError traceback."""
    refused(cli_main("run", "--db", db, "--incident", INC2, env={"LABKIT_CLOCK": "9999-12-31T23:59:59Z"}), "LABKIT_CLOCK")
    assert files(folder) == []


def test_a_malformed_setting_is_refused_before_any_file_is_made(db, folder, cli_main, refused):
    refused(cli_main("run", "--db", db, "--incident", INC, env={"LABKIT_BUSY_TIMEOUT_MS": "soon"}), "LABKIT_BUSY_TIMEOUT_MS")
    refused(cli_main("run", "--db", db, "--incident", INC, env={"LABKIT_PROVIDER_DELAY": "nan"}), "LABKIT_PROVIDER_DELAY")
    assert list(folder.iterdir()) == []


#: Numbers Python's int() and float() read but a person does not write: Arabic-Indic and
#: full-width digits, underscores between digits, spaces around, and (for decimals) nan/inf.
NOT_TYPED_NUMBERS = ["١٢", "１２", "1_0", " 2", "2 ", "0x10"]
#: (command, the option's place) for every number option; the rest of each command is valid.
NUMBER_OPTIONS = [
    ["work", "--db", "{db}", "--workers", "{n}"],
    ["work", "--db", "{db}", "--workers", "1", "--lease-seconds", "{n}"],
    ["work", "--db", "{db}", "--workers", "1", "--provider-delay", "{n}"],
    ["run", "--db", "{db}", "--incident", INC, "--workflow-version", "{n}"],
    ["migrate", "--db", "{db}", "--to", "{n}", "--reason", "r"],
    ["reevaluate", "--db", "{db}", "--incident", INC, "--reason", "r", "--rules-revision", "{n}"],
    ["retain", "--db", "{db}", "--older-than", "{n}"],
    ["explore", "--db-dir", "{folder}/x", "--random", "{n}"],
    ["bench", "--rounds", "{n}"],
]


@pytest.mark.parametrize("number", NOT_TYPED_NUMBERS + ["nan", "inf"])
@pytest.mark.parametrize("words", NUMBER_OPTIONS, ids=lambda words: words[0] + " " + next(w for w in words[::-1] if w.startswith("--")))
def test_a_number_option_takes_ascii_digits_only(words, number, db, folder, cli_main, refused):
    """Before the fix: `--workers ١٢` meant 12 and `--lease-seconds 1_0` meant 10 (Python's
    int() and float() read them), so a script's typo became a value it never meant."""
    argv = [word.format(db=db, folder=folder, n=number) for word in words]
    refused(cli_main(*argv), repr(number))
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("setting", ["LABKIT_PROVIDER_DELAY", "LABKIT_BUSY_TIMEOUT_MS"])
@pytest.mark.parametrize("number", ["１", "1_0", "٣"])
def test_a_number_setting_takes_ascii_digits_only(setting, number, db, folder, cli_main, refused):
    refused(cli_main("run", "--db", db, "--incident", INC, env={setting: number}), setting)
    assert list(folder.iterdir()) == []


def test_an_empty_engine_name_is_refused_not_taken_for_labkit(folder, cli_main, refused):
    """Before the fix: `--engine "$ENGINE"` with the variable unset explored labkit, silently."""
    refused(cli_main("explore", "--db-dir", folder / "x", "--engine", ""), "unknown engine ''")
    assert list(folder.iterdir()) == []
