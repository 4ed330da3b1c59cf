"""Failures at run time (exit 1), and recovery going on past a run that fails.

What belongs here: what is not the caller's mistake and may succeed if tried again (a full
disk, a provider that cannot answer), a recovery that finishes every other run when one
fails, and the rule that decides the exit code: every error is either bad input (2) or a
run failure (1), never both.
"""

from __future__ import annotations

import errno
import os
import signal
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import pytest

import labkit

KILLED = -signal.SIGKILL
INC = "INC-1001"


def test_fault7_every_error_is_either_bad_input_or_a_run_failure():
    """The exit code follows from one of two bases: ``except labkit.errors.BadInput`` catches exactly
    what exits 2, ``except labkit.errors.RunFailure`` exactly what exits 1.

    Before the fix: AttributeError, there is no labkit.errors.BadInput.
    """
    assert issubclass(labkit.errors.BadInput, labkit.errors.LabError) and issubclass(labkit.errors.RunFailure, labkit.errors.LabError)
    errors = [
        value for value in vars(labkit.errors).values()
        if isinstance(value, type) and issubclass(value, labkit.errors.LabError)
        and value not in (labkit.errors.LabError, labkit.errors.BadInput, labkit.errors.RunFailure)
    ]
    assert errors
    both_or_neither = [e.__name__ for e in errors if issubclass(e, labkit.errors.BadInput) == issubclass(e, labkit.errors.RunFailure)]
    assert both_or_neither == []


def test_an_unreadable_incident_is_provider_unavailable(lab, data_copy, cli, cli_main, refused, snapshot):
    env = {"LABKIT_DATA_DIR": str(data_copy)}
    assert cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "before_read", env=env).returncode == KILLED
    target = data_copy / "incidents" / f"{INC}.json"
    target.unlink()
    os.symlink(data_copy / "nowhere.json", target)  # listed by the provider, but cannot be read
    before = snapshot(lab.db)
    # a provider outage is not the caller's mistake: exit 1, so a supervisor knows to retry
    refused(cli_main("run", "--db", lab.db, "--incident", INC, env=env), INC, "provider could not read", code=1)
    assert snapshot(lab.db)["rows"] == before["rows"]
    assert [(c.incident, c.outcome) for c in lab.log.calls()] == [(INC, "unavailable")]
    # once the provider is back, the same run completes from where it was
    target.unlink()
    (data_copy / "incidents" / f"{INC}.json").write_bytes((labkit.provider.DEFAULT_DATA_DIR / "incidents" / f"{INC}.json").read_bytes())
    assert cli("run", "--db", lab.db, "--incident", INC, env=env).returncode == 0
    with closing(sqlite3.connect(lab.db)) as conn:
        assert conn.execute("SELECT step FROM runs").fetchall() == [("report_completed",)]


def test_recover_exits_1_when_the_provider_is_down(lab, data_copy, cli):
    env = {"LABKIT_DATA_DIR": str(data_copy)}
    assert cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "before_read", env=env).returncode == KILLED
    target = data_copy / "incidents" / f"{INC}.json"
    target.unlink()
    os.symlink(data_copy / "nowhere.json", target)
    outcome = cli("recover", "--db", lab.db, env=env)
    assert (outcome.returncode, outcome.stdout) == (1, "recovered 0 runs, 1 failed\n")
    assert "provider could not read" in outcome.stderr


def test_recover_finishes_the_other_runs_when_one_fails(lab, data_copy, cli, status):
    env = {"LABKIT_DATA_DIR": str(data_copy)}
    incidents = ["INC-1001", "INC-1002", "INC-1003"]
    for incident in incidents:
        assert cli("run", "--db", lab.db, "--incident", incident, "--crash-at", "before_read", env=env).returncode == KILLED
    (data_copy / "incidents" / "INC-1002.json").write_text("{ broken", encoding="utf-8")

    outcome = cli("recover", "--db", lab.db, env=env)

    assert outcome.returncode == 2, "a rejected provider answer is bad data: exit 2"
    assert outcome.stderr.splitlines() == [outcome.stderr.strip()] and "INC-1002" in outcome.stderr
    assert "Traceback" not in outcome.stderr
    lines = outcome.stdout.splitlines()
    assert [line.split()[1] for line in lines[:-1]] == ["INC-1001", "INC-1003"], "the run after the failure was skipped"
    assert lines[-1] == "recovered 2 runs, 1 failed"
    steps = {run["incident"]: run["step"] for run in status(lab.db, env=env)["runs"]}
    assert steps == {"INC-1001": "report_completed", "INC-1002": "not_inspected", "INC-1003": "report_completed"}


def _fill(path: Path) -> None:
    with open(path, "wb", buffering=0) as handle:
        for size in (1 << 16, 4096, 512, 1):
            try:
                while handle.write(b"\0" * size):
                    pass
            except OSError as error:
                if error.errno not in (errno.ENOSPC, errno.EFBIG):
                    raise


def test_fault3_a_full_disk_is_named_and_everything_completes_once_space_is_freed(tmp_path, cli, refused, status):
    """A real full disk (a 1 MB tmpfs): ``run`` exits 1 saying the disk is full; after space is
    freed, recovery and a new run complete both runs with one receipt each, the log intact.

    Before the fix: exit 1, but the message says "disk I/O error", not that the disk is full.
    """
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root")
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "labkit-full-disk", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        db = mount / "lab.db"
        assert cli("run", "--db", db, "--incident", "INC-1002").returncode == 0
        _fill(mount / "filler")

        refused(cli("run", "--db", db, "--incident", "INC-1003"), "disk is full", code=1)

        (mount / "filler").unlink()
        recovered = cli("recover", "--db", db)
        assert recovered.returncode == 0, recovered.stderr
        # Whether INC-1003's run row was committed before the disk filled depends on where it
        # filled; running it again finishes it either way (or finds it completed).
        again = cli("run", "--db", db, "--incident", "INC-1003")
        assert again.returncode == 0, again.stderr
        runs = {run["incident"]: run for run in status(db)["runs"]}
        assert sorted(runs) == ["INC-1002", "INC-1003"]
        assert {(run["step"], run["receipts"]) for run in runs.values()} == {("report_completed", 1)}
        assert runs["INC-1002"]["provider_reads"] == 1
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
