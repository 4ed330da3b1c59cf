"""Issue 5, "Harden the foundation": one or more tests per numbered fault (1-11).

Each test is named ``test_faultN_...`` after the fault it pins down, and drives the real
command line (``python -m labkit ...`` in a child) wherever the fault was found there.
How each test fared against the code before the fix (commit 825d86b) is noted in its
docstring, "Before the fix: ..."; all but four failed there (those four pin contracts the
fix must keep: the command-line variant of fault 1, which hits its window too rarely, the
asked-plain case of fault 8, and the two unknown ``--bug`` name cases of fault 11).

Fast by default (well under a minute). The soak variant runs the concurrency tests many
more times::

    LABKIT_SOAK=1 .venv/bin/python -m pytest tests/test_faults.py -k "fault1 or fault11"

``LABKIT_SOAK_ROUNDS`` sets the rounds of fault 1's library test (30, or 300 under
``LABKIT_SOAK``); the command-line variant runs a tenth as many rounds (at least 3), and the
fault-11 race is repeated 10 times under ``LABKIT_SOAK`` instead of twice.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import multiprocessing
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import tokenize
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

import labkit
from labkit.lab.processes import child_env
from labkit.provider import CallLog

KILLED = -signal.SIGKILL
INC = "INC-1002"
PACKAGE = Path(labkit.__file__).resolve().parent

SOAK = os.environ.get("LABKIT_SOAK", "") not in ("", "0")
ROUNDS = int(os.environ.get("LABKIT_SOAK_ROUNDS", "300" if SOAK else "30"))
CLI_ROUNDS = max(3, ROUNDS // 10)
RACE_REPEATS = 10 if SOAK else 2

#: A command that should answer at once is given this long before it counts as hanging.
HANG_SECONDS = 10


# --------------------------------------------------------------------------- helpers


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cli_within(seconds: float, *args, env: dict[str, str] | None = None):
    """``python -m labkit ARGS``, failing the test (not hanging it) if it does not end in time."""
    try:
        return labkit.lab.labkit_cli(*(str(a) for a in args), env=env, timeout=seconds)
    except subprocess.TimeoutExpired:
        pytest.fail(f"python -m labkit {' '.join(map(str, args))} was still running after {seconds}s: it hangs")


def calls_in(log: Path) -> list[str]:
    return [call.incident for call in CallLog(log).calls()]


# =========================================================================== fault 1


def _open_once(path: str, barrier, results) -> None:
    try:
        barrier.wait(timeout=30)
        labkit.connect(path).close()
        results.put(None)
    except BaseException as error:  # every failure is the finding
        results.put(f"{type(error).__name__}: {error}")


def open_together(path: Path, processes: int = 8) -> list[str]:
    """``processes`` forked processes released by one barrier, each opening ``path`` once."""
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(processes), context.Queue()
    workers = [context.Process(target=_open_once, args=(str(path), barrier, results)) for _ in range(processes)]
    for worker in workers:
        worker.start()
    errors = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0, f"an opener died: exit {worker.exitcode}"
    return [error for error in errors if error is not None]


def test_fault1_eight_processes_opening_one_new_database_at_once_never_fail(folder):
    """N=8 processes open one brand-new database at the same instant, ROUNDS times: no error.

    Before the fix: 13 to 25 of the 240 opens failed in each of 6 runs, with NotALabDatabase
    ("is a SQLite database, but not a labkit one") or DatabaseUnavailable "database is locked".
    """
    failures = []
    for round_ in range(ROUNDS):
        db = folder / f"new-{round_}.db"
        failures += [f"round {round_}: {error}" for error in open_together(db)]
        with closing(labkit.connect(db)) as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == labkit.store.SCHEMA_VERSION
    assert failures == [], f"{len(failures)} of {8 * ROUNDS} opens failed:\n" + "\n".join(failures[:10])


def test_fault1_eight_first_runs_on_one_new_database_all_exit_0(folder, status):
    """Eight ``run`` children, each on its own incident, started together on a new database.

    Before the fix: passes in most runs (the open-time window is hit in about 1 % of opens);
    the library test above is the one that reliably fails.
    """
    incidents = [f"INC-{1001 + i}" for i in range(8)]
    # What is tested is the first open, not contention: eight whole runs then queue for one
    # write lock, and on a loaded machine (three CPU burners a core, `make test-under-load`)
    # the last in line waited over the default 10 s busy timeout and rightly gave up with
    # exit 1. Two minutes lets them all through; a hang would still end at race's timeout.
    patient = {"LABKIT_BUSY_TIMEOUT_MS": "120000"}
    for round_ in range(CLI_ROUNDS):
        db = folder / f"cli-{round_}.db"
        outcomes = labkit.lab.race(*[("run", "--db", str(db), "--incident", incident) for incident in incidents], env=patient, timeout=300)
        bad = [f"{o}: {o.stderr.strip()}" for o in outcomes if o.returncode != 0]
        assert bad == [], f"round {round_}: " + "; ".join(bad)
        runs = status(db)["runs"]
        assert sorted(run["incident"] for run in runs) == incidents
        assert {(run["step"], run["receipts"]) for run in runs} == {("report_completed", 1)}


# =========================================================================== fault 2


@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_fault2_a_symlinked_provider_call_log_is_refused_and_its_target_untouched(dangling, tmp_path, folder, db, cli, refused):
    """``DB.provider-calls.jsonl`` is a symbolic link: exit 2 naming it, the link's target unchanged.

    Before the fix: exit 0, and the run's read is appended to the link's target (or creates it).
    """
    target = tmp_path / "someone-elses.txt"
    if not dangling:
        target.write_bytes(b"not yours\n")
    log = labkit.call_log_for(db)
    log.symlink_to(target)
    refused(cli("run", "--db", db, "--incident", INC), "provider call log", "symbolic link")
    if dangling:
        assert not target.exists(), "the link was followed and its target created"
    else:
        assert target.read_bytes() == b"not yours\n"
    assert not db.exists(), "bad input must not create the database"
    assert files(folder) == [log.name]


def test_fault2_a_fifo_as_the_provider_call_log_is_refused_without_hanging(folder, db, refused):
    """Before the fix: ``run`` blocks forever opening the FIFO, holding the write lock (timeout here)."""
    log = labkit.call_log_for(db)
    os.mkfifo(log)
    refused(cli_within(HANG_SECONDS, "run", "--db", db, "--incident", INC), "not a regular file")
    assert not db.exists(), "bad input must not create the database"
    assert files(folder) == [log.name]


def test_fault2_a_fifo_as_an_incident_data_file_is_refused_without_hanging(db, data_copy, refused, query):
    """Before the fix: ``run`` blocks forever reading the FIFO inside its write transaction (timeout here)."""
    snapshot_file = data_copy / "incidents" / f"{INC}.json"
    snapshot_file.unlink()
    os.mkfifo(snapshot_file)
    outcome = cli_within(HANG_SECONDS, "run", "--db", db, "--incident", INC, env={"LABKIT_DATA_DIR": str(data_copy)})
    refused(outcome, "not a regular file")
    if db.exists():
        assert query(db, "SELECT COUNT(*) FROM evidence") == [(0,)]


# =========================================================================== fault 3

SHORT_WRITE = textwrap.dedent(
    """
    import os, resource, signal, sys
    from labkit.errors import RunFailure
    from labkit.provider import CallLog

    path = sys.argv[1]
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a full file then fails the write instead of killing us
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path) + 10, hard))
    try:
        CallLog(path).append("INC-1002", "ok", 123)
    except Exception as error:
        kind = "RunFailure" if isinstance(error, RunFailure) else "other"
        print(kind, type(error).__name__, str(error).replace(chr(10), " "))
    else:
        print("returned")
    """
)


def test_fault3_a_short_write_raises_a_run_failure_and_leaves_no_torn_line(lab, cli, python_child):
    """Only 10 more bytes fit in the call log: ``append`` raises a RunFailure, the log keeps its
    old bytes, the next append works and every line parses; ``status`` still answers.

    Before the fix: ``append`` returns normally after writing 10 bytes (a torn line), and the
    next append joins it, so the log is damaged for good.
    """
    assert cli("run", "--db", lab.db, "--incident", "INC-1001").returncode == 0
    log = lab.call_log
    before = log.read_bytes()

    done = python_child(SHORT_WRITE, log)

    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:1] == ["RunFailure"], f"append must raise a labkit.errors.RunFailure, got: {done.stdout.strip()}"
    assert log.read_bytes() == before, "a torn line was left in the provider's call log"
    CallLog(log).append("INC-1002", "ok", 123)
    assert calls_in(log) == ["INC-1001", "INC-1002"]
    assert cli("status", "--db", lab.db).returncode == 0


def test_fault3_a_torn_last_line_is_not_a_call_and_the_next_append_is_well_formed(lab, cli, status):
    """A log whose last line has no newline (a write cut short): status ignores the fragment,
    and the next append leaves a file in which every line is a call.

    Before the fix: ``status`` exits 1 ("damaged at line 2") and the next append joins the fragment.
    """
    assert cli("run", "--db", lab.db, "--incident", "INC-1001").returncode == 0
    log = lab.call_log
    with open(log, "a", encoding="utf-8") as handle:
        handle.write('{"incident": "INC-10')

    [run] = status(lab.db)["runs"]
    assert run["provider_reads"] == 1
    assert calls_in(log) == ["INC-1001"], "the unterminated fragment is not a call"
    CallLog(log).append("INC-1002", "ok", 5)
    assert log.read_text(encoding="utf-8").endswith("\n")
    assert calls_in(log) == ["INC-1001", "INC-1002"]
    assert status(lab.db)["runs"][0]["provider_reads"] == 1


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


# =========================================================================== fault 4


@pytest.mark.parametrize(("name", "word"), [(":memory:", ":memory:"), ("file:lab.db?mode=memory", "URI")], ids=["memory", "uri"])
def test_fault4_an_in_memory_or_uri_database_name_is_refused(name, word, folder, cli, refused, monkeypatch):
    """Before the fix: exit 0 with a receipt that is stored nowhere, and files appear in the cwd."""
    monkeypatch.chdir(folder)  # the child inherits it
    refused(cli("run", "--db", name, "--incident", INC), word)
    assert files(folder) == []


# =========================================================================== fault 5


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
def test_fault5_another_programs_database_is_refused_before_anything_is_written(kind, folder, cli, refused):
    """Before the fix: the negative-version files get labkit's tables and WAL (exit 0); the one
    with its own ``runs`` table exits 1, "no such table: receipts"."""
    target = folder / "other.db"
    _foreign_database(target, kind)
    content = target.read_bytes()
    for args in (("run", "--db", target, "--incident", INC), ("recover", "--db", target), ("status", "--db", target, "--json")):
        refused(cli(*args), "not a labkit one")
        assert target.read_bytes() == content, f"{args[0]} changed another program's database"
        assert files(folder) == ["other.db"], f"{args[0]} left files beside it"


# =========================================================================== fault 6


def test_fault6_a_database_path_that_is_a_symlink_loop_is_one_line(folder, cli, refused):
    """Before the fix: a traceback (RuntimeError "Symlink loop" from resolving the call log's path)."""
    (folder / "a.db").symlink_to(folder / "b.db")
    (folder / "b.db").symlink_to(folder / "a.db")
    db = folder / "a.db"
    for args in (("run", "--db", db, "--incident", INC), ("status", "--db", db, "--json"), ("recover", "--db", db)):
        refused(cli(*args), "loop")
    assert files(folder) == ["a.db", "b.db"]


BAD_LOG_LINES = {
    "invalid-utf8": b"\xff\xfe\xfd not text\n",
    "infinity": b'{"incident": "INC-1002", "outcome": "ok", "response_bytes": Infinity}\n',
    "nan": b'{"incident": "INC-1002", "outcome": "ok", "response_bytes": NaN}\n',
    "deep-nesting": b"[" * 100_000 + b"]" * 100_000 + b"\n",
}


@pytest.mark.parametrize("line", BAD_LOG_LINES.values(), ids=BAD_LOG_LINES.keys())
def test_fault6_a_bad_line_in_the_call_log_is_named_by_its_number(line, lab, conn, cli, refused):
    """Before the fix: a traceback (UnicodeDecodeError, OverflowError, RecursionError); for NaN,
    one line but exit 1."""
    lab.coordinator(conn).drive("INC-1001")
    with open(lab.call_log, "ab") as handle:
        handle.write(line)
    refused(cli("status", "--db", lab.db, "--json"), "provider call log", "line 2")


def test_fault6_a_snapshot_nested_100000_deep_is_rejected_evidence_and_its_read_is_logged(db, data_copy, cli, refused, query):
    """Before the fix: a RecursionError traceback, and the provider's log has no call for the read."""
    (data_copy / "incidents" / f"{INC}.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    refused(cli("run", "--db", db, "--incident", INC, env={"LABKIT_DATA_DIR": str(data_copy)}), "rejected")
    assert calls_in(labkit.call_log_for(db)).count(INC) == 1, "the provider served the read: its log must show it"
    if db.exists():
        assert query(db, "SELECT COUNT(*) FROM evidence") == [(0,)]


def test_fault6_a_clock_at_the_end_of_year_9999_is_refused_before_any_file_is_made(folder, db, cli, refused):
    """Before the fix: the database is created, then an OverflowError traceback."""
    refused(cli("run", "--db", db, "--incident", INC, env={"LABKIT_CLOCK": "9999-12-31T23:59:59Z"}), "LABKIT_CLOCK")
    assert files(folder) == []


# =========================================================================== fault 7


def test_fault7_a_database_with_damaged_pages_is_bad_input_and_left_as_it_was(lab, cli, refused):
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
        refused(cli(*args), "damaged")
        assert lab.db.read_bytes() == content
        assert lab.call_log.read_bytes() == log


@pytest.mark.parametrize("length", [300, 250], ids=["name-too-long", "log-name-too-long"])
def test_fault7_a_file_name_too_long_is_bad_input_and_creates_nothing(length, folder, cli, refused):
    """300 characters: too long for the database itself; 250: fine for the database, but its
    provider call log's name (``+ .provider-calls.jsonl``) would pass 255 bytes.

    Before the fix: exit 1 "File name too long" (and at 250, the database is created first).
    """
    db = folder / ("x" * (length - 3) + ".db")
    refused(cli("run", "--db", db, "--incident", INC), "too long")
    assert files(folder) == []


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


# =========================================================================== fault 8


@pytest.mark.parametrize("token", ["NaN", "Infinity"])
def test_fault8_a_non_json_rate_is_refused_and_nothing_is_recorded(token, db, data_copy, cli, refused, query):
    """Before the fix: exit 0, the rate stored as a non-JSON token in the evidence."""
    path = data_copy / "incidents" / f"{INC}.json"
    snapshot = json.loads(path.read_text(encoding="utf-8"))
    snapshot["queue"]["message_stats"]["publish_details"]["rate"] = 987654.321
    text = json.dumps(snapshot, indent=2)
    assert text.count("987654.321") == 1
    path.write_text(text.replace("987654.321", token), encoding="utf-8")

    refused(cli("run", "--db", db, "--incident", INC, env={"LABKIT_DATA_DIR": str(data_copy)}), token)

    assert query(db, "SELECT step FROM runs WHERE incident = ?", (INC,)) == [("not_inspected",)]
    assert query(db, "SELECT COUNT(*) FROM evidence") == [(0,)]


@pytest.fixture
def valid_response(tmp_path) -> dict:
    raw = labkit.ReferenceProvider(tmp_path / "scratch.provider-calls.jsonl").read(INC)
    body = json.loads(raw)
    assert labkit.check_evidence(json.dumps(body), INC) == body  # the unaltered answer passes
    return body


def test_fault8_an_observed_at_ending_in_a_newline_is_rejected(valid_response):
    """Before the fix: accepted (``$`` in a Python regex matches before a final newline)."""
    valid_response["observed_at"] = "2026-03-02T09:00:00Z\n"
    with pytest.raises(labkit.errors.EvidenceRejected) as caught:
        labkit.check_evidence(json.dumps(valid_response), INC)
    assert caught.value.field == "observed_at"


@pytest.mark.parametrize("asked", [INC, INC + "\n"], ids=["asked-plain", "asked-with-newline"])
def test_fault8_an_incident_ending_in_a_newline_is_rejected(asked, valid_response):
    """Asked for the same id with the newline, only the pattern can refuse it.

    Before the fix: the asked-with-newline case is accepted; asked-plain already passed.
    """
    valid_response["incident"] = INC + "\n"
    with pytest.raises(labkit.errors.EvidenceRejected) as caught:
        labkit.check_evidence(json.dumps(valid_response), asked)
    assert caught.value.field == "incident"


# =========================================================================== fault 9


@pytest.mark.parametrize("command", ["status", "recover"])
def test_fault9_reading_a_database_that_does_not_exist_is_refused_not_created(command, folder, cli, refused):
    """Before the fix: exit 0 and a new empty database (plus -wal/-shm) appears."""
    missing = folder / "missing.db"
    refused(cli(command, "--db", missing, *(["--json"] if command == "status" else [])), "missing.db", "does not exist")
    assert files(folder) == []


def test_fault9_a_repeated_incident_option_is_refused(folder, cli, refused):
    """Before the fix: exit 0, silently running the last one (INC-1002)."""
    refused(cli("run", "--db", folder / "x.db", "--incident", "INC-1001", "--incident", "INC-1002"), "more than once")
    assert files(folder) == []


# =========================================================================== fault 10


@pytest.fixture
def at_evidence(db, cli) -> Path:
    """A database whose run INC-1002 is at evidence_recorded (its process was killed there)."""
    assert cli("run", "--db", db, "--incident", INC, "--crash-at", "after_evidence_commit").returncode == KILLED
    return db


@pytest.fixture
def at_start(db, cli) -> Path:
    """A database whose run INC-1002 is at not_inspected."""
    assert cli("run", "--db", db, "--incident", INC, "--crash-at", "before_read").returncode == KILLED
    return db


def _try_advance(db: Path, to: str, *, in_transaction: bool = True) -> None:
    """Call ``advance_txn`` on INC-1002, inside ``labkit.transaction`` or not; whatever it
    raises is re-raised after checking that no row changed."""
    raised = None
    with closing(labkit.connect(db)) as conn:
        before = labkit.store.snapshot(conn)
        run = labkit.store.find_run_txn(conn, INC)
        assert run is not None
        try:
            if in_transaction:
                with labkit.transaction(conn):
                    labkit.store.advance_txn(conn, run, labkit.Step(to), labkit.TickingClock())
            else:
                labkit.store.advance_txn(conn, run, labkit.Step(to), labkit.TickingClock())
        except Exception as error:  # re-raised below, after the rows are checked
            raised = error
        assert labkit.store.snapshot(conn) == before, "the refused transition changed rows"
    if raised is not None:
        raise raised


def test_fault10_a_sideways_move_is_refused_by_the_code(at_evidence):
    """evidence_recorded -> evidence_recorded. Before the fix: accepted and committed (the rows
    changed: version bumped, a transition row added)."""
    with pytest.raises(labkit.errors.StepOrderError):
        _try_advance(at_evidence, "evidence_recorded")


def test_fault10_a_skipped_step_is_refused_by_the_code(at_start):
    """not_inspected -> report_completed. Before the fix: accepted and committed (the rows changed)."""
    with pytest.raises(labkit.errors.StepOrderError):
        _try_advance(at_start, "report_completed")


@pytest.mark.parametrize(
    ("setup", "to"), [("at_evidence", "evidence_recorded"), ("at_start", "report_completed")], ids=["sideways", "skip"]
)
def test_fault10_the_database_refuses_a_sideways_or_skipping_update(setup, to, request):
    """Raw SQL through plain sqlite3, bypassing labkit. Before the fix: the trigger only refuses
    backward moves, so the UPDATE succeeds (DID NOT RAISE)."""
    db = request.getfixturevalue(setup)
    with closing(labkit.connect(db)) as conn:
        before = labkit.store.snapshot(conn)
    with closing(sqlite3.connect(db)) as raw:
        with pytest.raises(sqlite3.IntegrityError):
            raw.execute("UPDATE runs SET step = ?, version = version + 1 WHERE incident = ?", (to, INC))
        raw.rollback()
    with closing(labkit.connect(db)) as conn:
        assert labkit.store.snapshot(conn) == before


def test_fault10_a_run_at_evidence_recorded_with_a_receipt_is_inconsistent(at_evidence, cli, refused, snapshot):
    """A receipt inserted by hand beside evidence_recorded: ``run`` refuses like the other two
    contradictory states, and changes nothing.

    Before the fix: exit 0, the hand-made receipt adopted and the run advanced.
    """
    with closing(sqlite3.connect(at_evidence)) as raw:
        [(evidence_digest,)] = raw.execute("SELECT digest FROM evidence WHERE incident = ?", (INC,)).fetchall()
        raw.execute(
            "INSERT INTO receipts (incident, receipt_id, evidence_digest, report, issued_at) VALUES (?, ?, ?, ?, ?)",
            (INC, "rcpt-byhand000000", evidence_digest, json.dumps({"evidence_digest": evidence_digest}), "2026-03-02T09:00:30Z"),
        )
        raw.commit()
    before = snapshot(at_evidence)
    refused(cli("run", "--db", at_evidence, "--incident", INC), INC, "inconsistent")
    assert snapshot(at_evidence) == before


def test_fault10_a_write_helper_outside_a_transaction_raises_and_writes_nothing(at_evidence):
    """Before the fix: AttributeError (no labkit.errors.NotInTransaction); the helper commits on its own."""
    with pytest.raises(labkit.errors.NotInTransaction):
        _try_advance(at_evidence, "report_completed", in_transaction=False)


def test_fault10_only_the_database_module_begins_transactions():
    """No module but ``labkit/database.py`` has ``BEGIN`` in a string of its code (comments and
    docstrings mentioning it are fine; a trigger's ``... BEGIN SELECT ...`` body is fine).

    Before the fix: store.py (``"BEGIN IMMEDIATE"``, ``"BEGIN DEFERRED"``) and processes.py
    (the race's own ``"BEGIN IMMEDIATE"``).
    """
    starts = re.compile(r"""^[rRbBuUfF]*("{3}|'{3}|"|')\s*BEGIN\b""")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        # bench.py's floor is bare sqlite3 on purpose: what SQLite alone costs, without labkit.
        if path.relative_to(PACKAGE).as_posix() in ("database.py", "bench.py"):
            continue
        previous = None
        for token in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
            text = token.string
            if token.type == tokenize.STRING and starts.match(text):
                found.append(f"{path.name}:{token.start[0]}")
            # Python 3.12+ splits f-strings into FSTRING_START, FSTRING_MIDDLE, ...
            elif previous is not None and previous.type == getattr(tokenize, "FSTRING_START", -1) and re.match(r"\s*BEGIN\b", text):
                found.append(f"{path.name}:{token.start[0]}")
            previous = token
    assert found == [], "BEGIN outside labkit/database.py: " + ", ".join(found)


# =========================================================================== fault 11


def assert_one_completer(outcomes) -> None:
    """Every racer exits 0; exactly one says it completed the run, every other one found it
    completed; all print the same receipt id."""
    report = "\n".join(f"{o}\n  stdout: {o.stdout.strip()!r}\n  stderr: {o.stderr.strip()!r}" for o in outcomes)
    assert [o.returncode for o in outcomes] == [0] * len(outcomes), report
    winners = [o for o in outcomes if "; completed it)" in o.stdout]
    losers = [o for o in outcomes if "found it already completed" in o.stdout]
    assert len(winners) == 1, f"{len(winners)} racers say they completed the run:\n{report}"
    assert len(losers) == len(outcomes) - 1, report
    receipts = [re.findall(r"rcpt-[0-9a-f]+", o.stdout) for o in outcomes]
    assert all(len(found) == 1 for found in receipts) and len({found[0] for found in receipts}) == 1, report


def completion_race(db: Path, *extra: str, racers: int = 6):
    """Kill a run right after its evidence commit, then race ``racers`` runs to complete it,
    each paused inside its completion transaction until the gate lets them on."""
    assert labkit.lab.labkit_cli("run", "--db", str(db), "--incident", INC, "--crash-at", "after_evidence_commit").returncode == KILLED
    command = ("run", "--db", str(db), "--incident", INC, *extra)
    return labkit.lab.race(*[command] * racers, gate=db, pause_at="before_receipt_write", timeout=60)


def test_fault11_racing_completions_give_one_completer_and_one_receipt(folder, status):
    """Before the fix: TypeError, race() has no pause_at (and no before_receipt_write point)."""
    for repeat in range(RACE_REPEATS):
        db = folder / f"race-{repeat}.db"
        assert_one_completer(completion_race(db))
        [run] = status(db)["runs"]
        assert (run["step"], run["receipts"], run["provider_reads"]) == ("report_completed", 1, 1)


def test_fault11_the_race_catches_a_check_then_act_completion_every_time(folder):
    """The deliberately broken completion (decide in one transaction, write in another) must
    fail the race check, three times out of three.

    Before the fix: TypeError from race(pause_at=...), not the AssertionError expected.
    """
    for repeat in range(3):
        outcomes = completion_race(folder / f"bug-{repeat}.db", "--bug", "check_then_act_completion")
        with pytest.raises(AssertionError):
            assert_one_completer(outcomes)


def test_fault11_the_new_crash_point_sits_inside_the_completion_transaction(cli):
    """Before the fix: no before_receipt_write in ``crash-points``; no labkit.CrashPoint."""
    listed = cli("crash-points").stdout.split()
    assert "before_receipt_write" in listed
    position = listed.index("before_receipt_write")
    assert listed[position - 1 : position + 2] == ["after_evidence_commit", "before_receipt_write", "before_completion_commit"]
    assert issubclass(labkit.CrashPoint, str)
    assert [point.value for point in labkit.CrashPoint] == listed


def test_fault11_a_crash_before_the_receipt_write_is_recovered_with_one_receipt(db, cli, status):
    """Before the fix: exit 2 "unknown crash point 'before_receipt_write'"."""
    outcome = cli("run", "--db", db, "--incident", INC, "--crash-at", "before_receipt_write")
    assert outcome.returncode == KILLED, outcome.stderr
    assert cli("recover", "--db", db).returncode == 0
    [run] = status(db)["runs"]
    assert (run["step"], run["receipts"], run["provider_reads"]) == ("report_completed", 1, 1)


def test_fault11_pause_at_waits_for_a_line_inside_the_completion_transaction(at_evidence, query):
    """``--pause-at POINT`` prints a line starting ``paused at POINT`` and holds there until a line (or EOF)
    arrives; while it waits, the receipt is not written and readers still answer.

    Before the fix: exit 2, ``--pause-at`` is not an option.
    """
    command = [sys.executable, "-m", "labkit", "run", "--db", str(at_evidence), "--incident", INC, "--pause-at", "before_receipt_write"]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
    watchdog = threading.Timer(30, child.kill)  # a pause that never comes must fail the test, not hang it
    watchdog.start()
    assert child.stdout is not None and child.stderr is not None
    try:
        seen = []
        while (line := child.stdout.readline()) and not line.startswith("paused at before_receipt_write"):
            seen.append(line)
        assert line.startswith("paused at before_receipt_write"), f"never paused; printed {seen!r}, stderr {child.stderr.read()!r}"
        assert child.poll() is None, "it must wait for a line on stdin"
        assert query(at_evidence, "SELECT COUNT(*) FROM receipts") == [(0,)]
        assert labkit.status_of(at_evidence)["runs"][0]["step"] == "evidence_recorded"
        stdout, stderr = child.communicate("\n", timeout=30)
    finally:
        watchdog.cancel()
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, stderr
    assert "; completed it)" in stdout
    assert query(at_evidence, "SELECT COUNT(*) FROM receipts") == [(1,)]
    # EOF on stdin releases it too: a pause never waits on a closed pipe.
    again = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=child_env(), timeout=30)
    assert again.returncode == 0, again.stderr
    assert "found it already completed" in again.stdout


def test_fault11_the_broken_completion_is_switched_on_by_name_and_harmless_alone(db, cli, status):
    """``--bug check_then_act_completion`` is a known name; one run on its own still completes.

    Before the fix: exit 2, ``--bug`` is not an option.
    """
    outcome = cli("run", "--db", db, "--incident", INC, "--bug", "check_then_act_completion")
    assert outcome.returncode == 0, outcome.stderr
    assert "; completed it)" in outcome.stdout
    [run] = status(db)["runs"]
    assert (run["step"], run["receipts"]) == ("report_completed", 1)


@pytest.mark.parametrize("command", ["run", "recover"])
def test_fault11_an_unknown_bug_name_is_refused(command, folder, db, cli, refused):
    """Before the fix: exit 2 from argparse ("unrecognized arguments: --bug"), so this part
    already held; it pins the contract for ``--bug``."""
    args = ("run", "--db", db, "--incident", INC) if command == "run" else ("recover", "--db", db)
    if command == "recover":
        assert cli("run", "--db", db, "--incident", INC, "--crash-at", "after_evidence_commit").returncode == KILLED
    before = files(folder)
    refused(cli(*args, "--bug", "no_such_bug"), "no_such_bug")
    assert files(folder) == before
