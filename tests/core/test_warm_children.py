"""The suite's warm children (tests/warm_children.py) answer as new interpreters do.

Most tests start ``python -m labkit`` forked from a warm server; these show, command by command,
that such a child ends the same way as a new interpreter given the same words: exit code, what it
printed on each stream, what it left in the database. They also show that it starts with nothing
of the test process in it, and that what needs a new interpreter still gets one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import warm_children

from labkit.lab import processes
from labkit.lab.processes import child_env

INC = "INC-1001"


def both(tmp_path, *words: str, env: dict[str, str] | None = None, stdin: str | None = None, relative_to_cwd: bool = False):
    """Run WORDS as a new interpreter and as a warm child, each in a folder of its own; both outcomes.

    ``{db}`` in a word is that folder's database (its bare name when ``relative_to_cwd``, the child
    then running in the folder)."""
    outcomes = []
    for starter in (processes.new_interpreter, warm_children.start):
        folder = tmp_path / starter.__name__
        folder.mkdir()
        db = "lab.db" if relative_to_cwd else str(folder / "lab.db")
        argv = [sys.executable, "-m", "labkit", *(w.replace("{db}", db) for w in words)]
        cwd = os.getcwd()
        os.chdir(folder)
        try:
            child = starter(argv, child_env(env))
        finally:
            os.chdir(cwd)
        out, err = child.communicate(input=stdin, timeout=60)
        outcomes.append((child.returncode, out.replace(str(folder), "<folder>"), err.replace(str(folder), "<folder>"),
                         type(child).__name__))
    return outcomes


@pytest.mark.parametrize("words", [
    ("run", "--db", "{db}", "--incident", INC),                                     # a run to its end
    ("run", "--db", "{db}", "--incident", INC, "--crash-at", "after_evidence_commit"),  # killed by its crash point
    ("run", "--db", "{db}", "--incident", "INC-404"),                               # refused: exit 2, one line
    ("run", "--db", "{db}", "--incident", INC, "--pause-at", "before_read"),        # paused, let go by a line
    ("status", "--db", "{db}", "--json"),                                           # a database that is not there
    ("no-such-command",),                                                           # argparse's own refusal
    ("incidents",),                                                                 # printed without a flush
])
def test_a_warm_child_ends_as_a_new_interpreter_does(tmp_path, words):
    (cold_code, cold_out, cold_err, cold_kind), (warm_code, warm_out, warm_err, warm_kind) = both(tmp_path, *words, stdin="\n")
    assert (cold_kind, warm_kind) == ("Popen", "WarmChild")
    assert (warm_code, warm_out, warm_err) == (cold_code, cold_out, cold_err)


def test_a_kill_at_a_crash_point_is_a_real_sigkill_and_the_rows_are_the_same(tmp_path):
    outcomes = both(tmp_path, "run", "--db", "{db}", "--incident", INC, "--crash-at", "after_evidence_commit")
    assert [code for code, *_ in outcomes] == [-signal.SIGKILL, -signal.SIGKILL]
    rows = []
    for starter in ("new_interpreter", "start"):
        status = processes.labkit_cli("status", "--db", tmp_path / starter / "lab.db", "--json")
        rows.append(json.loads(status.stdout)["runs"])
    assert rows[0] == rows[1] and rows[0][0]["step"] == "evidence_recorded"


def test_the_environment_and_the_working_folder_are_the_callers(tmp_path, query):
    # A relative --db lands in the folder the caller was in; the pinned clock comes from the env given.
    outcomes = both(tmp_path, "run", "--db", "{db}", "--incident", INC, env={"LABKIT_CLOCK": "2031-01-02T03:04:05Z"},
                    relative_to_cwd=True)
    assert outcomes[0][:3] == outcomes[1][:3]
    for starter in ("new_interpreter", "start"):
        assert query(tmp_path / starter / "lab.db", "SELECT incident, substr(created_at, 1, 13) FROM runs") == [(INC, "2031-01-02T03")]


def test_a_warm_child_holds_nothing_of_the_test_process(tmp_path):
    # The server imported labkit's command line and nothing of the tests: no pytest, no test module,
    # and of labkit only the modules a fresh `python -m labkit` has loaded once its command line is in.
    fresh = subprocess.run([sys.executable, "-c", "import json, sys, labkit.__main__, labkit.cli; print(json.dumps(sorted(sys.modules)))"],
                           capture_output=True, text=True, env=child_env(), check=True)
    loaded_fresh = set(json.loads(fresh.stdout))
    seen = set(warm_children.modules_of_a_child())
    assert "labkit.cli" in seen
    assert not {name for name in seen if name.split(".")[0] in ("pytest", "_pytest", "conftest", "xdist", "hypothesis")
                or name.startswith("test_")}
    assert {name for name in seen if name.startswith("labkit")} == {name for name in loaded_fresh if name.startswith("labkit")}


def test_what_needs_a_new_interpreter_gets_one(tmp_path):
    # A PYTHON* setting, another labkit first on the path, or not a labkit command: all started afresh.
    argv = [sys.executable, "-m", "labkit", "incidents"]
    assert type(warm_children.start(argv, child_env())).__name__ == "WarmChild"
    for env in (child_env({"PYTHONWARNINGS": "error"}), {**child_env(), "PYTHONPATH": str(tmp_path)}):
        child = warm_children.start(argv, env)
        child.communicate(timeout=60)
        assert isinstance(child, subprocess.Popen)
    other = warm_children.start([sys.executable, "-c", "print('hello')"], child_env())
    assert isinstance(other, subprocess.Popen) and other.communicate(timeout=60)[0] == "hello\n"


def _lines_until_paused(child):
    for line in child.stdout:
        yield line
        if line.startswith("paused at "):
            return


@pytest.fixture
def sigint_answered():
    """This process's SIGINT as an interactive shell leaves it for a command (not ignored), for the test only:
    an earlier test in the same process may have left it ignored, and a child inherits that."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("starter", ["new_interpreter", "start"])
def test_sigint_ignored_here_is_ignored_by_the_child_as_by_a_new_interpreter(tmp_path, starter):
    # What a non-interactive shell does for a background job: SIGINT ignored. A new interpreter
    # inherits that across exec and labkit keeps ignoring it; a warm child must too, whatever
    # the server found when it started.
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        start = processes.new_interpreter if starter == "new_interpreter" else warm_children.start
        child = start([sys.executable, "-m", "labkit", "run", "--db", str(tmp_path / "lab.db"), "--incident", INC,
                       "--pause-at", "before_read"], child_env())
        assert any(line.startswith("paused at before_read") for line in _lines_until_paused(child))
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(input="\n", timeout=60)
    finally:
        signal.signal(signal.SIGINT, before)
    assert (child.returncode, err) == (0, ""), err  # the SIGINT changed nothing: the run went on when let go


def test_a_ctrl_c_to_a_paused_warm_child_is_answered_in_one_line(tmp_path, sigint_answered):
    child = warm_children.start([sys.executable, "-m", "labkit", "run", "--db", str(tmp_path / "lab.db"), "--incident", INC,
                                 "--pause-at", "before_read"], child_env())
    assert any(line.startswith("paused at before_read") for line in _lines_until_paused(child))
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert (child.returncode, err) == (130, "labkit: interrupted; nothing half-written is kept\n")


@pytest.mark.parametrize("unbuffered", ["", "1"])
@pytest.mark.parametrize("words", [("run", INC), ("run", INC, "--crash-at", "after_evidence_commit"), ("incidents",)])
def test_output_is_buffered_as_a_new_interpreter_buffers_it(tmp_path, unbuffered, words):
    # What a child killed by SIGKILL leaves unprinted depends on its buffering: with PYTHONUNBUFFERED
    # set or not, a warm child and a new interpreter print the same before the kill.
    env = {k: v for k, v in child_env().items() if k != "PYTHONUNBUFFERED"} | ({"PYTHONUNBUFFERED": "1"} if unbuffered else {})
    outcomes = []
    for kind in ("cold", "warm"):
        db = tmp_path / kind / "lab.db"
        db.parent.mkdir()
        argv = ["run", "--db", str(db), "--incident", *words[1:]] if words[0] == "run" else list(words)
        child = (warm_children.WarmChild(argv, env) if kind == "warm"
                 else processes.new_interpreter([sys.executable, "-m", "labkit", *argv], env))
        out, err = child.communicate(timeout=60)
        outcomes.append((child.returncode, out.replace(str(db.parent), ""), err.replace(str(db.parent), "")))
    assert outcomes[0] == outcomes[1]


def test_the_tests_own_lesson_kernels_fork_their_children_warm_and_nbvals_do_not(tmp_path):
    """tests/kernels.py's start_warm_children: a lesson cell's child in such a kernel is a warm child, killed for real."""
    import nbformat
    from kernels import notebook_client, start_warm_children

    if not warm_children.wanted():
        pytest.skip(f"{warm_children.NEW_INTERPRETERS} is set: the tests' kernels start new interpreters too")
    cell = nbformat.v4.new_code_cell(
        "import labkit.lab.processes as p\n"
        "print(p.start_child.__module__)\n"
        f"print(p.labkit_cli('run', '--db', {str(tmp_path / 'lab.db')!r}, '--incident', {INC!r}, '--crash-at', 'after_read').status)"
    )
    for warm in (False, True):
        client = notebook_client(nbformat.v4.new_notebook(cells=[cell]), tmp_path / "lesson.ipynb")
        with client.setup_kernel():
            if warm:
                start_warm_children(client)
                assert client.nb.cells == [cell]  # the notebook's cells as they were: indexes unchanged
            cell.outputs = []
            client.execute_cell(cell, 0)
        printed = "".join(o.get("text", "") for o in cell.outputs)
        assert printed == f"{'warm_children' if warm else 'labkit.lab.processes'}\nkilled by SIGKILL\n", cell.outputs
        (tmp_path / "lab.db").unlink()
