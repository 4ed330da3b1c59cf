"""Shared fixtures: a file database per test, the provider with its own log, and helpers.

Every test gets its own folder under ``tmp_path`` (``work/``) holding the checkpoint
database ``lab.db`` and, beside it, the provider's call log. Nothing is shared between
tests, so they can run in any order.

The command line runs as a real child process (``cli``: ``python -m labkit ...``), the way
a user, CI or an outside check drives it; crash points really SIGKILL that child. The suite
forks those children from a warm server rather than starting an interpreter for each
(tests/warm_children.py, below; tests/core/test_warm_children.py shows both end the same way). A refusal
that crosses no process boundary (no kill, signal, lock held by another process, stdin, or
child environment under test) calls the entry point in this process instead (``cli_main``):
same exit code, stdout and stderr, without starting an interpreter.
tests/core/test_cli_entry_point.py shows, for a sample of every refusal family, that the
two print the same.

Time limits, for every test file: a ``timeout=`` of 30 s or more on a child process, a
barrier, a queue or a thread only bounds how long a broken labkit takes to fail; the work it
waits for takes well under a second here. They are sized to hold with three CPU burners per
core beside the suite (``make test-under-load``, where a whole run took about 2 s). A test
whose outcome depends on time itself (a lease expiring, a client's timeout, a busy timeout)
says next to the number why it is safe under that load.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
import warm_children

import labkit
import labkit.cli
from labkit.clock import CLOCK_ENV
from labkit.database import SQLITE_HEADER
from labkit.lab.processes import LESSON_INSTANT, ChildOutcome, child_env
from labkit.provider import CallLog
from labkit.store import snapshot as table_rows

REPO = Path(labkit.__file__).resolve().parent.parent
DATA = REPO / "data"
INCIDENTS = sorted(path.stem for path in (DATA / "incidents").glob("INC-*.json"))

# The suite's `python -m labkit` children are forked from a warm server, not started as new
# interpreters: the same command in a process of its own, without 0.08 s of start-up each
# (tests/warm_children.py; what still starts a new interpreter is listed there).
# LABKIT_TEST_NEW_INTERPRETERS=1 starts every one afresh, to compare the two.
if warm_children.wanted():
    warm_children.install()


@pytest.fixture(autouse=True)
def _no_inherited_lab_settings(monkeypatch):
    """Children inherit our environment: make sure a developer's shell cannot steer them."""
    monkeypatch.delenv("LABKIT_DATA_DIR", raising=False)
    monkeypatch.delenv("LABKIT_CLOCK", raising=False)


# --------------------------------------------------------------------------- the lab


class Lab(labkit.lab.Workspace):
    """One test's durable world: a lesson Workspace in the test's own folder, plus two shorthands."""

    @property
    def log(self) -> CallLog:
        return self.provider_log

    def reads(self, incident: str) -> int:
        return self.provider_log.reads_of(incident)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


@pytest.fixture
def db(folder: Path) -> Path:
    return folder / "lab.db"


@pytest.fixture
def clock() -> labkit.TickingClock:
    return labkit.TickingClock()


@pytest.fixture
def lab(folder: Path, db: Path, clock: labkit.TickingClock) -> Lab:
    return Lab(folder, db, clock)


@pytest.fixture
def provider(lab: Lab) -> labkit.ReferenceProvider:
    return lab.provider()


@pytest.fixture
def conn(lab: Lab):
    with closing(lab.connect()) as connection:
        yield connection


# --------------------------------------------------------------------------- the command line


def run_cli(*args: str | Path, env: dict[str, str] | None = None) -> ChildOutcome:
    """``python -m labkit ARGS`` in a real child process; returncode, stdout, stderr."""
    return labkit.lab.labkit_cli(*(str(a) for a in args), env=env)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def cli_main(capsys, monkeypatch):
    """``labkit.cli.main(ARGS)`` in this process, answering like ``cli``: exit code, stdout, stderr.

    The environment is the one a ``cli`` child gets (the lesson's clock unless one is set,
    then ``env``), for the call only. ``labkit.__main__`` is not used: its Ctrl-C handling is
    about a process of its own (tests/core/test_interrupt.py), and would take this one's SIGINT.
    """

    def call(*args: str | Path, env: dict[str, str] | None = None) -> ChildOutcome:
        words = [str(a) for a in args]
        with monkeypatch.context() as patch:
            patch.setenv(CLOCK_ENV, os.environ.get(CLOCK_ENV, LESSON_INSTANT))  # as child_env() does
            for name, value in (env or {}).items():
                patch.setenv(name, value)
            capsys.readouterr()  # only what this call prints
            try:
                code = labkit.cli.main(words)
            except SystemExit as stop:  # argparse's errors leave this way, as in the real process
                code = _exit_status(stop.code)
            out, err = capsys.readouterr()
        return ChildOutcome("labkit.cli.main " + " ".join(words), code, out, err)

    return call


def _exit_status(code: object) -> int:
    """What ``sys.exit(code)`` would make the process's exit status (a message is printed: 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def run_python(code: str, *args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -c CODE ARGS`` in a child with the same environment the CLI children get."""
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=child_env(env), timeout=120
    )


@pytest.fixture
def python_child():
    return run_python


def status_json(db: Path, env: dict[str, str] | None = None) -> dict:
    """``status --json`` through the real command line, parsed; it must be one JSON object."""
    done = run_cli("status", "--db", db, "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1, f"status --json printed more than one line: {done.stdout!r}"
    status = json.loads(done.stdout)
    assert isinstance(status, dict)
    return status


@pytest.fixture
def status():
    return status_json


def assert_refused(outcome, *words: str, code: int = 2) -> str:
    """Bad input (exit 2), or with ``code=1`` a run-time failure: exactly one line on stderr
    naming the problem, no traceback."""
    assert outcome.returncode == code, f"{outcome}\nstdout: {outcome.stdout!r}\nstderr: {outcome.stderr!r}"
    assert "Traceback" not in outcome.stderr, outcome.stderr
    lines = outcome.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {outcome.stderr!r}"
    assert lines[0].strip(), "the one stderr line is empty"
    for word in words:
        assert word in lines[0], f"{word!r} not named in: {lines[0]!r}"
    return lines[0]


@pytest.fixture
def refused():
    return assert_refused


# --------------------------------------------------------------------------- "nothing changed"


def take_snapshot(db: Path) -> dict:
    """The whole observable state: files in the folder, the provider's log, every lab row.

    Files are listed before the database is opened (opening it creates -wal/-shm for a
    moment). A file that labkit refuses to open is recorded by its bytes' digest instead.
    """
    folder = db.parent
    files = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else None
    log = labkit.call_log_for(db)
    state: dict = {
        "files": files,
        "provider_log": log.read_text(encoding="utf-8") if log.exists() else None,
        "rows": None,
        "bytes": None,
    }
    if db.is_file():
        content = db.read_bytes()
        if content[: len(SQLITE_HEADER)] == SQLITE_HEADER:
            try:
                with closing(labkit.connect(db)) as conn:
                    state["rows"] = table_rows(conn)
            except labkit.errors.LabError:
                state["bytes"] = hashlib.sha256(content).hexdigest()
        else:
            state["bytes"] = hashlib.sha256(content).hexdigest()
    return state


@pytest.fixture
def snapshot():
    return take_snapshot


# --------------------------------------------------------------------------- direct db checks


def raw_query(db: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Read the database with plain sqlite3, independently of labkit's own helpers."""
    with closing(sqlite3.connect(db)) as conn:
        return [tuple(row) for row in conn.execute(sql, params).fetchall()]


@pytest.fixture
def query():
    return raw_query


# --------------------------------------------------------------------------- data copies


@pytest.fixture
def data_copy(tmp_path: Path) -> Path:
    """A writable copy of data/ (outside the db folder) for tests that alter an incident."""
    copy = tmp_path / "data"
    shutil.copytree(DATA / "incidents", copy / "incidents")
    return copy


# --------------------------------------------------------------------------- live services


@pytest.fixture
def live_service_url(request: pytest.FixtureRequest):
    """``url(ENV, missing)``: the service URL in the environment variable ENV, or a skip saying ``missing``.

    For the tests of a real server someone else runs (PostgreSQL, RabbitMQ): without the variable they
    are skipped with the reason, so ``make test`` runs them only where a server is configured. In CI (CI
    set), when the test's file was named on the command line (its own make target), a missing server
    fails instead: there the live path is the point, and a skip would pass unseen.
    """
    in_ci = os.environ.get("CI", "").lower() not in ("", "0", "false")
    start = Path(request.config.invocation_params.dir)
    asked_for = any((start / arg.split("::", 1)[0]).resolve() == request.path.resolve() for arg in request.config.args)

    def url(env: str, missing: str) -> str:
        value = os.environ.get(env)
        if value:
            return value
        if in_ci and asked_for:
            pytest.fail(f"{missing} (CI is set and this file was asked for, so this is a failure, not a skip)", pytrace=False)
        pytest.skip(missing)

    return url
