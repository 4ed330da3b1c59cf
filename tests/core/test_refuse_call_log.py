"""The provider's call log beside the database: what it may be, and what it may hold.

What belongs here: the log's path (a symbolic link, a FIFO) and its content (a line that is
not JSON, NaN, Infinity, a huge integer, nesting, a line cut short or an unfinished last line,
a write cut short by a full file). A log labkit cannot trust is bad input named by its line
number; a fragment a crash left is not a call, and the next append is well formed.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

import labkit
from labkit.provider import CallLog

INC = "INC-1001"
INC2 = "INC-1002"  # the incident of the tests that pinned the faults of issue 5

#: A command that should answer at once is given this long before it counts as hanging.
HANG_SECONDS = 10


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def cli_within(seconds: float, *args, env: dict[str, str] | None = None):
    """``python -m labkit ARGS``, failing the test (not hanging it) if it does not end in time."""
    try:
        return labkit.lab.labkit_cli(*(str(a) for a in args), env=env, timeout=seconds)
    except subprocess.TimeoutExpired:
        pytest.fail(f"python -m labkit {' '.join(map(str, args))} was still running after {seconds}s: it hangs")


def calls_in(log: Path) -> list[str]:
    return [call.incident for call in CallLog(log).calls()]


@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_fault2_a_symlinked_provider_call_log_is_refused_and_its_target_untouched(dangling, tmp_path, folder, db, cli_main, refused):
    """``DB.provider-calls.jsonl`` is a symbolic link: exit 2 naming it, the link's target unchanged.

    Before the fix: exit 0, and the run's read is appended to the link's target (or creates it).
    """
    target = tmp_path / "someone-elses.txt"
    if not dangling:
        target.write_bytes(b"not yours\n")
    log = labkit.call_log_for(db)
    log.symlink_to(target)
    refused(cli_main("run", "--db", db, "--incident", INC2), "provider call log", "symbolic link")
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
    refused(cli_within(HANG_SECONDS, "run", "--db", db, "--incident", INC2), "not a regular file")
    assert not db.exists(), "bad input must not create the database"
    assert files(folder) == [log.name]


BAD_LOG_LINES = {
    "invalid-utf8": b"\xff\xfe\xfd not text\n",
    "infinity": b'{"incident": "INC-1002", "outcome": "ok", "response_bytes": Infinity}\n',
    "nan": b'{"incident": "INC-1002", "outcome": "ok", "response_bytes": NaN}\n',
    "deep-nesting": b"[" * 100_000 + b"]" * 100_000 + b"\n",
}


@pytest.mark.parametrize("line", BAD_LOG_LINES.values(), ids=BAD_LOG_LINES.keys())
def test_fault6_a_bad_line_in_the_call_log_is_named_by_its_number(line, lab, conn, cli_main, refused):
    """Before the fix: a traceback (UnicodeDecodeError, OverflowError, RecursionError); for NaN,
    one line but exit 1."""
    lab.coordinator(conn).drive("INC-1001")
    with open(lab.call_log, "ab") as handle:
        handle.write(line)
    refused(cli_main("status", "--db", lab.db, "--json"), "provider call log", "line 2")


def test_a_call_log_line_with_a_huge_integer_is_named_not_a_traceback(lab, cli, cli_main, refused):
    assert cli("run", "--db", lab.db, "--incident", INC).returncode == 0
    with open(lab.call_log, "a", encoding="utf-8") as log:
        log.write('{"incident": "INC-1001", "outcome": "ok", "response_bytes": ' + "9" * 5000 + "}\n")
    refused(cli_main("status", "--db", lab.db), "provider call log", "line 2")


def test_a_damaged_provider_log_is_named(lab, cli, cli_main, refused):
    assert cli("run", "--db", lab.db, "--incident", INC).returncode == 0
    with open(lab.call_log, "a", encoding="utf-8") as log:
        log.write('{"incident": "INC-10\n')  # a line someone cut short, followed by more
        log.write('{"incident": "INC-1001", "outcome": "ok", "response_bytes": 1}\n')
    refused(cli_main("status", "--db", lab.db, "--json"), "provider-calls.jsonl", "line 2")


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


def test_an_unfinished_last_line_longer_than_64_kib_is_cut_off_whole(lab, cli, status):
    assert cli("run", "--db", lab.db, "--incident", INC).returncode == 0
    with open(lab.call_log, "a", encoding="utf-8") as log:
        log.write("x" * 70_000)
    assert cli("run", "--db", lab.db, "--incident", "INC-1003").returncode == 0
    assert [r["provider_reads"] for r in status(lab.db)["runs"]] == [1, 1]
