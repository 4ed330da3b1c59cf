"""Checks for the lessons' exercises: the learner's code, run for real, against crashes and races.

A learner answers a "build" exercise by writing one function in a notebook cell. The check
does not read the code: it runs it, in fresh child processes, against the events the
lesson is about: a SIGKILL at the worst moment, a second worker racing the first, a run
that went back to an earlier step. A shortcut (a constant, an empty function, the naive
draft the lesson took apart) fails the check, and ``tests/test_exercises.py`` proves it.

How a function gets into a child: its source (``inspect.getsource``) is run there in a
namespace that holds labkit and the helpers a lesson names (:data:`ANSWER_NAMESPACE`),
so an answer may use those and its own arguments, nothing else from the notebook. Hooks
wrap some helpers in that namespace: ``kill_before="advance_txn"`` sends SIGKILL when the
answer calls ``advance_txn``, ``pause_before=...`` holds it there like ``--pause-at``.

Each ``check_*`` prints ``✓`` lines when the answer holds, and otherwise raises
``AssertionError`` with a hint.
"""

from __future__ import annotations

import ast
import functools
import inspect
import json
import os
import shutil
import signal
import sqlite3
import sys
import textwrap
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from .coordinator import WORKFLOW_VERSION
from .crashpoints import BETWEEN_READ_AND_COMMIT, CRASH_POINTS
from .invariants import check_invariants
from .lesson import restart_answers
from .processes import ChildOutcome, labkit_cli, race_commands, run_in_child
from .receipts import receipt_id_for
from .workspace import Workspace

#: The names an answer may use without importing them (it may also import from labkit).
ANSWER_NAMESPACE = (
    "labkit", "sqlite3", "closing",
    "transaction", "read_transaction",
    "find_run_txn", "create_run_txn", "advance_txn", "store_evidence_txn", "load_evidence_txn",
    "find_receipt_txn", "issue_receipt_txn", "build_report", "check_evidence", "CONTRACT", "Step",
)

#: The helpers a hook can stop at, and the module that defines each.
HOOKABLE = {
    "transaction": "labkit.database",
    "advance_txn": "labkit.store",
    "store_evidence_txn": "labkit.store",
    "issue_receipt_txn": "labkit.receipts",
}




def _one_line(check: Callable) -> Callable:
    """Show a check's feedback in Jupyter as one line, not as a traceback into labkit.

    The feedback is an ``AssertionError`` like any other (nbval compares its name and
    message); only its display is shortened, through IPython's ``_render_traceback_``.
    """

    @functools.wraps(check)
    def checked(*args, **kwargs):
        try:
            return check(*args, **kwargs)
        except AssertionError as error:
            shown = f"AssertionError: {error}"
            error._render_traceback_ = lambda: [shown]  # type: ignore[attr-defined]
            raise

    return checked


@_one_line
def waiting_for(exercise: str, **answers: object) -> None:
    """Raise the blank-answer feedback if any answer is still ``None``."""
    blank = [name for name, value in answers.items() if value is None]
    if blank:
        names = " and ".join(f"`{name}`" for name in blank)
        raise AssertionError(
            f"✏️ Exercise {exercise} is waiting for your answer: set {names} in the cell above, run it, then run this cell again."
        )


def source_of(function: Callable) -> str:
    """The source of a function a learner wrote in a notebook cell."""
    if not callable(function):
        raise AssertionError(f"the answer should be a function (def ...), not {type(function).__name__}")
    try:
        return textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        raise AssertionError(
            "the check cannot read this function's source: define it with `def` in a notebook cell, "
            "not with lambda or exec"
        ) from None


# --------------------------------------------------------------------------- running an answer in a child


def run_answer(
    function: Callable,
    kind: str,
    db: Path,
    incident: str,
    *,
    kill_before: str | None = None,
    pause_before: str | None = None,
) -> tuple[str, list[str]]:
    """(how to show it, argv) of a child process that runs ``function`` as an answer of ``kind``.

    ``kind`` says how the child calls it: ``"inspect"`` as ``f(conn, provider, incident,
    clock)``, ``"complete"`` as ``f(conn, incident, clock)``, ``"resume"`` as ``f(conn,
    provider, incident, clock)``.
    """
    for hook in (kill_before, pause_before):
        if hook is not None and hook not in HOOKABLE:
            raise ValueError(f"cannot hook {hook!r}; hookable: {', '.join(HOOKABLE)}")
    spec = {
        "source": source_of(function),
        "function": function.__name__,
        "kind": kind,
        "db": str(db),
        "incident": incident,
        "kill_before": kill_before,
        "pause_before": pause_before,
    }
    spec_path = db.with_name(f"answer-{os.getpid()}-{len(list(db.parent.glob('answer-*.json')))}.json")
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    argv = [sys.executable, "-c", "from labkit.exercises import child_main; child_main()", str(spec_path)]
    hooks = f" (killed before {kill_before})" if kill_before else ""
    return f"your {function.__name__}() on {incident}{hooks}", argv


def run_answer_once(function: Callable, kind: str, db: Path, incident: str, **hooks: str | None) -> ChildOutcome:
    """Run the answer in one child process to its end (or its kill)."""
    [outcome] = race_commands([run_answer(function, kind, db, incident, **hooks)])
    return outcome


def child_main() -> None:  # pragma: no cover - runs in the child process
    """The child's side of :func:`run_answer`."""
    import importlib

    import labkit
    from labkit.clock import clock_from_env
    from labkit.database import holds_write_lock, read_transaction
    from labkit.store import latest_time_txn

    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    namespace: dict[str, Any] = {"__name__": "answer"}
    modules = ("labkit", "labkit.store", "labkit.receipts", "labkit.database", "labkit.contract", "labkit.steps", "labkit.report")
    for module_name in modules:
        module = importlib.import_module(module_name)
        for name in ANSWER_NAMESPACE:
            if hasattr(module, name) and name not in namespace:
                namespace[name] = getattr(module, name)
    namespace.update({"labkit": labkit, "sqlite3": sqlite3, "closing": closing})

    def hooked(name: str, original: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            if name == spec["kill_before"]:
                os.kill(os.getpid(), signal.SIGKILL)
            if name == spec["pause_before"]:
                conn = args[0] if args else None
                holding = "holding the write lock" if holds_write_lock(conn) else "holding no lock"
                print(f"paused at {name} ({holding})", flush=True)
                sys.stdin.readline()
            return original(*args, **kwargs)

        return wrapper

    for name, module_name in HOOKABLE.items():
        if name in (spec["kill_before"], spec["pause_before"]):
            module = importlib.import_module(module_name)
            wrapped = hooked(name, getattr(module, name))
            namespace[name] = wrapped
            setattr(module, name, wrapped)  # for an answer that writes labkit.store.advance_txn(...)
    try:
        exec(compile(spec["source"], "<your answer>", "exec"), namespace)
        function = namespace[spec["function"]]
        db = Path(spec["db"])
        conn = labkit.connect(db)
        with read_transaction(conn):
            latest = latest_time_txn(conn)
        clock = clock_from_env(after=latest)
        provider = labkit.ReferenceProvider(labkit.call_log_for(db))
        incident = spec["incident"]
        if spec["kind"] in ("inspect", "resume"):
            returned = function(conn, provider, incident, clock)
        elif spec["kind"] == "complete":
            returned = function(conn, incident, clock)
        else:
            raise ValueError(f"unknown kind {spec['kind']!r}")
        shown = getattr(returned, "receipt_id", None) or (None if returned is None else repr(returned)[:80])
        print(f"returned {shown}", flush=True)
    except Exception as error:  # the learner's error, reported to the check as one line
        print(f"{type(error).__name__}: {error}".splitlines()[0][:300], file=sys.stderr, flush=True)
        sys.exit(1)


def _returned(outcome: ChildOutcome) -> str | None:
    for line in outcome.stdout.splitlines():
        if line.startswith("returned "):
            value = line[len("returned "):]
            return None if value == "None" else value
    return None


def _own_work(function: Callable, *names: str) -> None:
    """Refuse an answer that hands the exercise to the labkit code the check compares with.

    Names are looked for in the code (as names and attributes), not in comments or strings.
    """
    tree = ast.parse(source_of(function))
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    used |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    handed_over = [name for name in names if name in used]
    if handed_over:
        raise AssertionError(
            f"write it yourself with the store's helpers: your answer calls {handed_over[0]}, which already does the job "
            "(and is what the check compares with)"
        )


_TRIALS: list[Workspace] = []


def _trial(name: str) -> Workspace:
    """A scratch workspace for one check; removed by the next check, passed or failed, or at exit."""
    trial = Workspace.create(name)
    _TRIALS.append(trial)
    return trial


def _clear_trials() -> None:
    while _TRIALS:
        shutil.rmtree(_TRIALS.pop().folder, ignore_errors=True)


# --------------------------------------------------------------------------- 02: compare-and-set


@_one_line
def check_compare_and_set(move: Callable) -> None:
    """``move(conn, run, to, at) -> bool``: the learner's compare-and-set UPDATE of one run.

    Two connections (two workers) read the same run. Worker A moves it; worker B, with
    what it read before, must be refused (False, nothing changed). Then an operator puts
    the run back to the step B read (as a repair or a migration might): B's stale write
    must still be refused, which only the state version can tell. The runs table here has
    no trigger, so the condition is tested alone, without the database's backstop.
    """
    _clear_trials()
    from .steps import Step
    from .store import Run

    source_of(move)  # a clear message for a non-function before anything runs
    trial = _trial("02-exercise")
    path = trial.folder / "cas.db"

    def fresh(conn: sqlite3.Connection) -> None:
        conn.execute(
            "CREATE TABLE runs (incident TEXT PRIMARY KEY, workflow_version INTEGER NOT NULL, step TEXT NOT NULL,"
            " version INTEGER NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL) STRICT"
        )
        conn.execute("INSERT INTO runs VALUES ('INC-1001', 1, 'not_inspected', 0, 't0', 't0')")

    def read(conn: sqlite3.Connection) -> Run:
        row = conn.execute("SELECT * FROM runs WHERE incident = 'INC-1001'").fetchone()
        return Run(row[0], row[1], Step(row[2]), row[3], row[4], row[5])

    def stored(conn: sqlite3.Connection) -> tuple:
        return tuple(conn.execute("SELECT step, version FROM runs").fetchone())

    with closing(sqlite3.connect(path, isolation_level=None)) as a, closing(sqlite3.connect(path, isolation_level=None)) as b:
        fresh(a)
        seen_by_a, seen_by_b = read(a), read(b)
        moved = move(a, seen_by_a, Step.EVIDENCE_RECORDED, "t1")
        assert moved is True, f"a move from the state just read should succeed and return True, it returned {moved!r}"
        assert stored(a) == ("evidence_recorded", 1), (
            f"after the first move the row should be ('evidence_recorded', 1), it is {stored(a)}: set the step and add 1 to version"
        )
        print("✓ a move from the state just read is applied: step evidence_recorded, version 1")
        stale = move(b, seen_by_b, Step.EVIDENCE_RECORDED, "t2")
        assert stored(b) == ("evidence_recorded", 1), (
            "worker B's stale move overwrote worker A's: the WHERE clause must also require what B read (its step, its version)"
        )
        assert stale is False, f"a refused move should return False (cursor.rowcount is 0), it returned {stale!r}"
        print("✓ a second worker's move, from a state that is gone, is refused and changes nothing")
        # An operator puts the run back to not_inspected (a repair, a migration): version 2.
        a.execute("UPDATE runs SET step = 'not_inspected', version = version + 1")
        again = move(b, seen_by_b, Step.EVIDENCE_RECORDED, "t3")
        assert stored(b) == ("not_inspected", 2) and again is False, (
            "the run is back at the step worker B read, but it is not the same state: it has moved twice since. "
            "Only the state version tells them apart: require version = run.version too"
        )
        print("✓ even when the run came back to the step it had, the stale move is refused: the version differs")


# --------------------------------------------------------------------------- 03: the three questions


@_one_line
def check_restart_answers(answer: Callable) -> None:
    """``answer(conn, incident) -> dict``: the learner's answers to the three restart questions.

    A child is killed at every crash point, each in a database of its own; the answer is
    asked about each, through a fresh connection, and compared with the rows.
    """
    _clear_trials()
    from .lesson import QUESTIONS

    _own_work(answer, "restart_answers")
    wrong = []
    for point in CRASH_POINTS:
        trial = _trial("03-exercise")
        child = run_in_child(trial.db, "INC-1005", crash_at=point)
        assert child.killed_by == "SIGKILL", f"the child armed at {point} was not killed: {child.status}"
        truth = restart_answers(trial.db, "INC-1005").as_row()
        from .store import connect_readonly

        with closing(connect_readonly(trial.db)) as conn:
            given = answer(conn, "INC-1005")
        assert isinstance(given, dict), f"answer() should return a dict of the three questions, not {type(given).__name__}"
        for question in QUESTIONS:
            if given.get(question) not in ("yes", "no"):
                raise AssertionError(f"answer() should give 'yes' or 'no' for {question!r}, it gave {given.get(question)!r}")
            if given[question] != truth[question]:
                wrong.append(f"after a kill at {point}: {question} should be {truth[question]} (step {truth['step']}, "
                             f"evidence row {truth['evidence row']}, receipt {truth['receipt'] or 'none'})")
    assert not wrong, "; ".join(wrong[:3]) + (f"; and {len(wrong) - 3} more" if len(wrong) > 3 else "")
    print(f"✓ right at all {len(CRASH_POINTS)} crash points, from the rows alone")


# --------------------------------------------------------------------------- 04: one transaction


@_one_line
def check_single_transaction_inspect(inspect_fn: Callable) -> None:
    """``inspect_fn(conn, provider, incident, clock)``: evidence and step committed together.

    1. run cleanly in a child: the run must end at evidence_recorded with its evidence;
    2. killed in a child at the moment it moves the step (just before ``advance_txn``):
       then ``recover`` must finish the run, and all seven invariants must hold.
    """
    _clear_trials()
    _own_work(inspect_fn, "Coordinator", "two_commit_inspect", "naive")
    trial = _trial("04-exercise")
    started = labkit_cli("run", "--db", trial.db, "--incident", "INC-1003", "--crash-at", "before_read")
    assert started.killed_by == "SIGKILL", f"could not prepare the run: {started.stderr.strip()}"
    clean = run_answer_once(inspect_fn, "inspect", trial.db, "INC-1003")
    assert clean.returncode == 0, f"your function failed on a plain run: {clean.stderr.strip()}"
    answers = restart_answers(trial.db, "INC-1003")
    assert answers.step == "evidence_recorded" and answers.evidence, (
        f"after your function the run is at {answers.step} with{'' if answers.evidence else ' no'} evidence: "
        "it should read, store the evidence and move the step to evidence_recorded"
    )
    print("✓ a plain run: evidence stored, step evidence_recorded")

    crashed = _trial("04-exercise")
    started = labkit_cli("run", "--db", crashed.db, "--incident", "INC-1003", "--crash-at", "before_read")
    killed = run_answer_once(inspect_fn, "inspect", crashed.db, "INC-1003", kill_before="advance_txn")
    assert killed.killed_by == "SIGKILL", (
        f"your function never called advance_txn, so it could not be killed there ({killed.status}: {killed.stderr.strip()})"
    )
    recovered = labkit_cli("recover", "--db", crashed.db)
    assert recovered.returncode == 0, (
        f"after a kill between storing the evidence and moving the step, recovery failed: {recovered.stderr.strip()} "
        "(was the evidence committed on its own, before the step?)"
    )
    results = check_invariants(crashed.db, crashed.call_log, {"INC-1003": 2}, crashed.provider())
    broken = [f"{r.number} ({r.statement}): {r.detail}" for r in results if not r.held]
    assert not broken, "after the kill and one recovery, invariants broke: " + "; ".join(broken)
    print("✓ killed between the evidence and the step: nothing half-written, recovery read again and finished")


# --------------------------------------------------------------------------- 05: a recovery worker


@_one_line
def check_recovery_worker(resume: Callable) -> None:
    """``resume(conn, provider, incident, clock)``: finish one run from its recorded step.

    The decision to read is the exercise: an answer may complete through
    ``Coordinator.complete``, but not hand the read to ``inspect``, ``drive`` or ``recover``.

    For every crash point, a child is killed there (each in a database of its own); the
    learner's ``resume`` runs in a fresh child; the run must end completed with one
    receipt, and the provider's log must show exactly the reads N1 predicts: a second read
    only when the crash fell between a read and its commit.
    """
    _clear_trials()
    _own_work(resume, "drive", "inspect", "_inspect", "recover", "run_in_child", "labkit_cli")
    wrong = []
    for point in CRASH_POINTS:
        trial = _trial("05-exercise")
        child = run_in_child(trial.db, "INC-1004", crash_at=point)
        assert child.killed_by == "SIGKILL", f"the child armed at {point} was not killed: {child.status}"
        outcome = run_answer_once(resume, "resume", trial.db, "INC-1004")
        expected_reads = 1 + (point in BETWEEN_READ_AND_COMMIT)
        reads = trial.provider_log.reads_of("INC-1004")
        answers = restart_answers(trial.db, "INC-1004")
        if outcome.returncode != 0:
            wrong.append(f"after a kill at {point} your resume failed: {outcome.stderr.strip()}")
        elif answers.step != "report_completed" or answers.receipt is None:
            wrong.append(f"after a kill at {point} the run ended at {answers.step} without a receipt")
        elif reads != expected_reads:
            why = "it read although the evidence was committed" if reads > expected_reads else "it never read"
            wrong.append(f"after a kill at {point} the provider was read {reads} times, expected {expected_reads}: {why}")
    assert not wrong, "; ".join(wrong[:3]) + (f"; and {len(wrong) - 3} more" if len(wrong) > 3 else "")
    print(f"✓ from every one of the {len(CRASH_POINTS)} crash points: completed, one receipt, a read only where none was committed")


# --------------------------------------------------------------------------- 06: idempotent completion


@_one_line
def check_idempotent_completion(complete: Callable, workers: int = 3) -> None:
    """``complete(conn, incident, clock) -> Receipt``: completion that any number of workers may repeat.

    1. ``workers`` child processes race to complete one run, each held just before it
       begins a write transaction and released together once all are held (as
       :func:`labkit.race` does): so whatever an answer decides *before* its write
       transaction, every worker has decided it before any of them writes. All must exit
       0 and return the same receipt, and one receipt row must exist;
    2. completing again returns that receipt and writes nothing.
    """
    _clear_trials()
    _own_work(complete, "Coordinator")
    trial = _trial("06-exercise")
    prepared = labkit_cli("run", "--db", trial.db, "--incident", "INC-1006", "--crash-at", "after_evidence_commit")
    assert prepared.killed_by == "SIGKILL", f"could not prepare the run: {prepared.stderr.strip()}"
    commands = [run_answer(complete, "complete", trial.db, "INC-1006", pause_before="transaction") for _ in range(workers)]
    outcomes = race_commands(commands)
    failed = [o for o in outcomes if o.returncode != 0]
    assert not failed, (
        f"{len(failed)} of {workers} racing workers failed: {failed[0].stderr.strip()}. A worker that finds the run "
        "completed by another should return that receipt, not fail: decide and write in one transaction"
    )
    returned = {_returned(o) for o in outcomes}
    expected = receipt_id_for("INC-1006", WORKFLOW_VERSION)  # the run was started by this release
    assert returned == {expected}, f"every worker should return the one receipt {expected}; they returned {sorted(map(str, returned))}"
    with closing(sqlite3.connect(trial.db)) as conn:
        rows = conn.execute("SELECT COUNT(*) FROM receipts WHERE incident = 'INC-1006'").fetchone()[0]
        step = conn.execute("SELECT step FROM runs WHERE incident = 'INC-1006'").fetchone()[0]
    assert (rows, step) == (1, "report_completed"), f"after the race: {rows} receipt rows, step {step}"
    print(f"✓ {workers} workers raced, all held until every one had decided: one receipt, and each returned it")
    again = run_answer_once(complete, "complete", trial.db, "INC-1006")
    assert again.returncode == 0 and _returned(again) == expected, (
        f"completing a completed run should return its receipt: {again.stderr.strip() or _returned(again)}"
    )
    print("✓ completing once more returns the same receipt")
