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
import re
import shutil
import signal
import sqlite3
import sys
import textwrap
from collections.abc import Callable
from contextlib import ExitStack, closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .children import in_child
from .coordinator import WORKFLOW_VERSION
from .crashpoints import RUN_POINTS
from .effects import Tickets
from .engines import expected_reads
from .invariants import InvariantResult, check_invariants
from .lesson import restart_answers
from .processes import ChildOutcome, child_env, labkit_cli, race_commands, run_in_child
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
    """Run the answer in one child process to its end (or its kill).

    The child is forked from this process instead of started as a new interpreter: it builds
    the same fresh namespace and hooks as :func:`child_main` and is just as much a process of
    its own, which a hook's SIGKILL ends, but it skips the third of a second a new Python
    spends importing labkit, and a check runs an answer up to seven times a try. Its output
    goes to files, not pipes, so an answer that prints a lot cannot block it. (Races need
    children released one by one on their standard input: :func:`race_commands` starts those.)
    """
    shown, argv = run_answer(function, kind, db, incident, **hooks)
    spec_path = Path(argv[-1])
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    out, err = spec_path.with_suffix(".out"), spec_path.with_suffix(".err")
    environment = child_env()

    def answer() -> None:  # pragma: no cover - the child
        os.environ.clear()
        os.environ.update(environment)  # the pinned clock, as a started child would get it
        sys.exit(_answer_main(spec))

    end = in_child(answer, output=(out, err))
    return ChildOutcome(shown, end.code if end.code is not None else 1, out.read_text(encoding="utf-8", errors="replace"),
                        err.read_text(encoding="utf-8", errors="replace"))


def child_main() -> None:  # pragma: no cover - runs in the child process
    """The child's side of :func:`run_answer`, started as a new interpreter (races)."""
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    sys.exit(_answer_main(spec))


def _answer_main(spec: dict[str, Any]) -> int:  # pragma: no cover - runs in the child process
    """Run the learner's answer as ``spec`` says; print ``returned ...``, or its error on stderr (exit 1)."""
    import importlib

    import labkit
    from labkit.clock import clock_from_env
    from labkit.database import holds_write_lock, read_transaction
    from labkit.store import latest_time_txn

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
        return 1
    return 0


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


#: (workspace name, incident, crash point) -> a workspace where a child was SIGKILLed there.
_KILLED: dict[tuple[str, str, str], Workspace] = {}


def _killed_at(name: str, incident: str, point: str) -> Workspace:
    """A trial workspace holding what a child killed at ``point`` left behind.

    The child really runs and really dies, once per crash point in this kernel; every later
    try of the check gets a copy of the files it left (the database, its write-ahead log, the
    provider's log), which are the same bytes it would leave again: the clock is pinned. A
    learner re-running a check waits for their own answer, not for seven kills.
    """
    key = (name, incident, point)
    original = _KILLED.get(key)
    if original is None or not original.db.exists():
        original = Workspace.create(name)
        child = run_in_child(original.db, incident, crash_at=point)
        assert child.killed_by == "SIGKILL", f"the child armed at {point} was not killed: {child.status}"
        _KILLED[key] = original
    trial = _trial(name)
    # The -shm file is left out on purpose: SQLite rebuilds it from the log on the first open.
    for source, target in ((original.db, trial.db), (Path(f"{original.db}-wal"), Path(f"{trial.db}-wal")),
                           (original.call_log, trial.call_log)):
        if source.exists():
            shutil.copyfile(source, target)
    return trial


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

    A child is killed at every crash point, each in a database of its own (once per kernel:
    later tries get a copy of what it left); the answer is asked about each, through a fresh
    connection, and compared with the rows.
    """
    _clear_trials()
    from .lesson import QUESTIONS

    _own_work(answer, "restart_answers")
    wrong = []
    for point in RUN_POINTS:
        trial = _killed_at("03-exercise", "INC-1005", point)
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
    print(f"✓ right at all {len(RUN_POINTS)} crash points, from the rows alone")


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

    For every crash point, a child is killed there (each in a database of its own, once per
    kernel: later tries get a copy of what it left); the
    learner's ``resume`` runs in a fresh child; the run must end completed with one
    receipt, and the provider's log must show exactly the reads N1 predicts: a second read
    only when the crash fell between a read and its commit.
    """
    _clear_trials()
    _own_work(resume, "drive", "inspect", "_inspect", "recover", "run_in_child", "labkit_cli")
    wrong = []
    for point in RUN_POINTS:
        trial = _killed_at("05-exercise", "INC-1004", point)
        outcome = run_answer_once(resume, "resume", trial.db, "INC-1004")
        expected = expected_reads([(True, point)])  # killed at that point, once
        reads = trial.provider_log.reads_of("INC-1004")
        answers = restart_answers(trial.db, "INC-1004")
        if outcome.returncode != 0:
            wrong.append(f"after a kill at {point} your resume failed: {outcome.stderr.strip()}")
        elif answers.step != "report_completed" or answers.receipt is None:
            wrong.append(f"after a kill at {point} the run ended at {answers.step} without a receipt")
        elif reads != expected:
            why = "it read although the evidence was committed" if reads > expected else "it never read"
            wrong.append(f"after a kill at {point} the provider was read {reads} times, expected {expected}: {why}")
    assert not wrong, "; ".join(wrong[:3]) + (f"; and {len(wrong) - 3} more" if len(wrong) > 3 else "")
    print(f"✓ from every one of the {len(RUN_POINTS)} crash points: completed, one receipt, a read only where none was committed")


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


# ---- 07: a contract rule


class RuleCheckedProvider:
    """A read adapter that applies one more contract rule to what another adapter answers.

    ``rule(body) -> str | None`` sees only an answer that labkit's contract has already
    accepted (:func:`~labkit.contract.check_evidence`), as a fresh copy: None accepts it,
    a string says what is wrong, and the read then raises
    :class:`~labkit.errors.EvidenceRejected` with the rule ``learner-rule:<its name>``.
    The coordinator calls ``read`` before it stores anything, inside the inspection's
    transaction, so a refusal rolls back like any other; the inner adapter has already
    logged the call. labkit's contract has no hook for extra rules, so a lesson adds one
    here (07_evidence_contract).
    """

    def __init__(self, inner: Any, rule: Callable[[dict], str | None]):
        self.inner, self.rule = inner, rule
        self.name = f"learner-rule:{getattr(rule, '__name__', 'rule')}"

    @property
    def decision_inputs(self) -> dict[str, object]:
        from .coordinator import decision_inputs_of

        return decision_inputs_of(self.inner)  # who answered is the inner adapter; the rule decides nothing

    def incidents(self) -> list[str]:
        return self.inner.incidents()

    def read(self, incident: str) -> bytes:
        import copy

        from .contract import check_evidence
        from .errors import EvidenceRejected

        raw = self.inner.read(incident)
        body = check_evidence(raw, incident)  # labkit's contract first: the rule sees only what it accepted
        problem = self.rule(copy.deepcopy(body))
        if problem is not None:
            said = (str(problem).splitlines() or ["(no reason given)"])[0][:160]
            raise EvidenceRejected(incident, "(response)", said, self.name)
        return raw


def inspect_with_rule(db: str | Path, raw: bytes, rule: Callable[[dict], str | None], *, incident: str = "INC-1001",
                      clock: Any = None, label: str | None = None) -> Any:
    """Inspect ``incident`` on ``db`` through a canned provider answering ``raw``, with ``rule`` applied.

    Measured as :func:`labkit.catalogue.run_case` measures a catalogue case (its
    :class:`~labkit.catalogue.CaseResult`, named ``label`` or after the rule): the rule that
    refused, the run's step and evidence before and after, the database's bytes, the
    provider's logged calls.
    """
    from .catalogue import CannedProvider, measure_inspection
    from .provider import call_log_for

    provider = RuleCheckedProvider(CannedProvider(call_log_for(db), {incident: raw}), rule)
    return measure_inspection(db, incident, provider, name=label or provider.name, clock=clock)


def _counts_that_contradict() -> list[tuple[str, bytes]]:
    """Answers the contract accepts whose counts disagree: messages != ready + unacknowledged.

    Each is a valid answer of the reference provider with one count changed, so that
    every field alone is still in range: too many messages, too few, and a second way to too few.
    """
    from .contract import check_evidence
    from .provider import ReferenceProvider

    log = _trial("07-answers").folder / "reference-calls.jsonl"
    made = []
    for incident, field, change in (("INC-1001", "messages", +1000), ("INC-1002", "messages_unacknowledged", +3600),
                                    ("INC-1011", "messages_ready", +24)):
        body = json.loads(ReferenceProvider(log).read(incident))
        body["queue"][field] += change
        raw = json.dumps(body, indent=1).encode("utf-8")
        check_evidence(raw, incident)  # the schema lets it through: that is the point
        queue = body["queue"]
        shown = (f"{incident} with messages {queue['messages']}, but messages_ready + messages_unacknowledged = "
                 f"{queue['messages_ready']} + {queue['messages_unacknowledged']}")
        made.append((shown, raw))
    return made


def _judge(rule: Callable, body: dict, what: str) -> str | None:
    import copy

    try:
        said = rule(copy.deepcopy(body))
    except Exception as error:  # the learner's error, as one line of feedback
        raise AssertionError(f"your rule raised {type(error).__name__}: {error} on {what}") from None
    if said is not None and not (isinstance(said, str) and said.strip()):
        raise AssertionError(f"your rule returned {said!r} on {what}: return None to accept, or the problem in words (a str)")
    return said


@_one_line
def check_contract_rule(rule: Callable[[dict], str | None]) -> None:
    """``rule(body) -> str | None``: a contract rule that catches counts that contradict each other.

    1. it must accept the valid answer of every shipped incident, under both rules revisions;
    2. it must refuse each answer of :func:`_counts_that_contradict`, which the schema accepts;
    3. run for real: a canned provider answers the first of those on a fresh workspace, the
       coordinator inspects with the rule applied (:func:`inspect_with_rule`), and the run's
       step, its evidence and the database's bytes must be unchanged, the call logged.
    """
    _clear_trials()
    from .contract import check_evidence
    from .provider import ReferenceProvider, list_incidents

    if not callable(rule):
        raise AssertionError(f"the answer should be a function (def my_rule(body): ...), not {type(rule).__name__}")
    log = _trial("07-answers").folder / "reference-calls.jsonl"
    honest = 0
    for revision in (1, 2):
        provider = ReferenceProvider(log, rules_revision=revision)
        for incident in list_incidents():
            what = f"{incident}'s valid answer (rules revision {revision})"
            said = _judge(rule, check_evidence(provider.read(incident), incident), what)
            if said is not None:
                raise AssertionError(
                    f"your rule refused {what}: {said!r}. A rule must accept every honest answer: "
                    "refuse only what cannot be true"
                )
            honest += 1
    print(f"✓ accepts all {honest} valid answers of the {honest // 2} shipped incidents (rules revisions 1 and 2)")
    hostile = _counts_that_contradict()
    for shown, raw in hostile:
        said = _judge(rule, json.loads(raw), f"the answer of {shown}")
        if said is None:
            raise AssertionError(
                f"your rule accepted the answer of {shown}. The schema checks each count alone; "
                "your rule must compare them"
            )
    print(f"✓ refuses all {len(hostile)} answers whose counts contradict each other (the schema accepted each)")
    trial = _trial("07-exercise")
    shown, raw = hostile[0]
    result = inspect_with_rule(trial.db, raw, rule, clock=trial.clock)
    assert result.rule == f"learner-rule:{getattr(rule, '__name__', 'rule')}", (
        f"through the coordinator, the answer of {shown} was {result.message or 'accepted'}"
    )
    unchanged = (result.step_before == result.step_after and result.evidence_before == result.evidence_after == 0
                 and result.database_unchanged and result.provider_calls == 1)
    assert unchanged, f"the refusal changed something: {result.row()}"
    print(f"✓ through the coordinator: refused by rule {result.rule} before any write; step {result.step_after.value}, "
          "no evidence row, database bytes unchanged, the call in the provider's log")


# ---- 08: a migration rule


#: The runs the previous release (workflow version 1) can leave behind, as the check builds them:
#: (incident, its step, re-evaluated so that it has an assessment, may it move to version 2?).
MIGRATION_CASES = (
    ("INC-1001", "not_inspected", False, True),
    ("INC-1002", "evidence_recorded", False, False),
    ("INC-1007", "evidence_recorded", True, True),
    ("INC-1003", "report_completed", False, True),
    ("INC-1011", "report_completed", True, True),
)


def _previous_release_runs(trial: Workspace, cases: tuple) -> None:
    """Leave each case's run where the previous release would, re-evaluated where the case says."""
    from .steps import Step
    from .versioning import reevaluate

    with closing(trial.connect()) as conn:
        old = trial.coordinator(conn, workflow_version=1)
        for incident, step, _, _ in cases:
            old.start(incident)
            if step != Step.NOT_INSPECTED:
                old.inspect(incident)
            if step == Step.REPORT_COMPLETED:
                old.complete(incident)
    for incident, _, assessed, _ in cases:
        if assessed:
            reevaluate(trial.db, incident, "rules revision 2, before the upgrade", trial.clock)


def _described(incident: str, step: str, assessed: bool) -> str:
    if step == "not_inspected":
        return f"{incident} at not_inspected"
    return f"{incident} at {step} {'with' if assessed else 'without'} an assessment"


@_one_line
def check_migration_rule(rule: Callable) -> None:
    """``rule(conn, incident, step, to_version) -> str | None``: the learner's mapping from workflow version 1 to 2.

    For each run the previous release can leave (at each step; at evidence_recorded and
    report_completed with and without an assessment), a database holding that run alone is
    migrated with ``labkit.migrate(db, 2, reason, clock, rule=rule)``. Exactly the run that
    version 2 cannot continue (evidence_recorded with no assessment) must be refused, nothing
    changed; every other must migrate, its workflow version the only change, and then this
    release's recovery must finish it. Last, all of them in one database: refused as a whole,
    and migrated in one step once the previous release has finished the unmappable run.
    """
    _clear_trials()
    from .recovery import recover
    from .steps import Step
    from .store import snapshot
    from .versioning import MigrationRefused, migrate

    source_of(rule)
    _own_work(rule, "why_not")
    answers: list[object] = []

    def asked(conn: sqlite3.Connection, incident: str, step: Step, to_version: int) -> str | None:
        why = rule(conn, incident, step, to_version)
        answers.append(why)
        if why is not None and not isinstance(why, str):
            raise AssertionError(f"the rule should return None or a sentence saying why not, not {why!r}")
        return why

    def attempt(trial: Workspace) -> MigrationRefused | None:
        try:
            migrate(trial.db, 2, "upgrade to workflow version 2", trial.clock, rule=asked)
        except MigrationRefused as refused:
            return refused
        except AssertionError:
            raise
        except Exception as error:  # the learner's code failed inside the migration's transaction
            raise AssertionError(f"your rule raised {type(error).__name__}: {error}".splitlines()[0]) from None
        return None

    def finish(trial: Workspace, what: str) -> None:
        failed = [r for r in recover(trial.db, trial.provider(), clock=trial.clock) if r.error is not None]
        assert not failed, (
            f"your rule let {what} through, and this release could not finish it: {failed[0].error}. "
            "Which runs would version 2 have to complete from a decision they never recorded?"
        )

    def only_the_version_moved(before: dict, after: dict, what: str) -> None:
        changed = [table for table in before if table not in ("runs", "migrations") and before[table] != after[table]]
        assert not changed, (
            f"migrating {what}, your rule wrote to {', '.join(changed)}: a rule only answers; a migration changes "
            "runs.workflow_version and nothing else (an invented assessment is a decision nobody made)"
        )
        moved = [(row[0], row[2:]) for row in after["runs"]] == [(row[0], row[2:]) for row in before["runs"]]
        assert moved and {row[1] for row in after["runs"]} == {2}, f"migrating {what} should change only the workflow version"

    mapped = []
    for incident, step, assessed, mappable in MIGRATION_CASES:
        what = _described(incident, step, assessed)
        trial = _trial("08-exercise")
        _previous_release_runs(trial, ((incident, step, assessed, mappable),))
        with closing(trial.connect()) as conn:
            before = snapshot(conn)
        answers.clear()
        refused = attempt(trial)
        assert answers, "migrate never called your rule: is it a function of (conn, incident, step, to_version)?"
        with closing(trial.connect()) as conn:
            after = snapshot(conn)
        if mappable:
            assert refused is None, (
                f"your rule refused {what}, saying {answers[-1]!r}; but version 2 can go on with it: "
                + {"not_inspected": "nothing has been decided yet, so version 2 simply inspects it",
                   "evidence_recorded": "it has an assessment, which is what version 2 completes a run from",
                   "report_completed": "it is done, and its receipt keeps what it said"}[step]
            )
            only_the_version_moved(before, after, what)
            finish(trial, what)
            mapped.append(what)
        else:
            if refused is None:
                only_the_version_moved(before, after, what)  # a rule that invents an assessment fails here
                finish(trial, what)  # one that lets the run through fails here
                raise AssertionError(f"your rule let {what} through")
            assert after == before, "a refused migration should change nothing"
            print(f"✓ refused {what}, and nothing was migrated: {answers[-1]}")
    print(f"✓ migrated each of the {len(mapped)} others alone, only its workflow version changed, and this release's "
          f"recovery finished it: {'; '.join(mapped)}")

    trial = _trial("08-exercise")
    _previous_release_runs(trial, MIGRATION_CASES)
    with closing(trial.connect()) as conn:
        before = snapshot(conn)
    refused = attempt(trial)
    with closing(trial.connect()) as conn:
        after = snapshot(conn)
    assert refused is not None and refused.incident == "INC-1002", (
        "with all five runs in one database, the migration should be refused for INC-1002 "
        + (f"alone, but your rule refused {refused.incident}" if refused else "(evidence_recorded, no assessment), but your "
           "rule let it through: does your query ask about this run, or about any run?")
    )
    assert after == before, "a refused migration should change nothing"
    with closing(trial.connect()) as conn:
        trial.coordinator(conn, workflow_version=1).complete("INC-1002")  # finish it under the release that started it
    assert attempt(trial) is None, "once INC-1002 is finished by the previous release, every run should migrate"
    finish(trial, "the five runs")
    print("✓ all five in one database: refused as a whole for INC-1002, nothing changed; once the previous release "
          "finished it, migrated in one step and completed by this release")


# ---- 09: the reconciliation decision

#: The incident every case of Exercise 9.1 opens a ticket for.
RECONCILED_INCIDENT = "INC-1003"

#: The cases of :func:`reconciliation_trials`, in the order the check reads them: (name, the
#: ticket service's fault, --fault-times, where the run is killed). Between them, every fault
#: mode of the service and both crash points around the send.
RECONCILIATION_CASES: tuple[tuple[str, str | None, int | None, str | None], ...] = (
    ("killed after_send", None, None, "after_send"),
    ("no-idempotency, killed after_send", "no-idempotency", None, "after_send"),
    ("fail-before-commit x1, killed after_send", "fail-before-commit", 1, "after_send"),
    ("slow-after-commit x1", "slow-after-commit", 1, None),
    ("drop-after-commit", "drop-after-commit", None, None),
    ("no-idempotency, killed before_send", "no-idempotency", None, "before_send"),
)


@dataclass(frozen=True)
class ReconciliationTrial:
    """One case of :func:`reconciliation_trials`: what the run left, what recovery was told and decided, what it left."""

    case: str
    run: str  # how the run's process ended: exit 1, killed by SIGKILL
    tickets_after_run: int
    asked: tuple[str, ...]  # what each look-up by key said during the first recovery ("found T-0001", "absent", ...)
    decided: tuple[str, ...]  # what decide answered to each
    error: str | None  # the first recovery's failure for the run, one line, folders cut
    state: str  # the effect after one recovery
    ticket: str | None
    tickets: int  # tickets at the destination after one recovery
    held: bool  # a done effect's ticket is one the destination holds, under the effect's key (or none)
    again_unchanged: bool  # a second recovery changed no row and no ticket
    broken: tuple[int, ...]  # the invariants (labkit.check_invariants, 1-9) that failed afterwards

    def row(self) -> dict[str, object]:
        return {
            "case": self.case, "the run": self.run, "tickets": self.tickets_after_run,
            "look-up by key": "; ".join(self.asked) or "(not asked)", "effect": self.state, "ticket": self.ticket or "",
            "tickets after": self.tickets, "2nd recovery": "no change" if self.again_unchanged else "CHANGED",
            "broken invariants": ", ".join(map(str, self.broken)) or "none",
        }


def _clock_after(db: Path) -> Any:
    """A ticking clock one second past the latest time stored in ``db``, as a recovering process's pinned clock."""
    from datetime import timedelta

    from .clock import TickingClock, parse_instant
    from .database import read_transaction
    from .store import connect_readonly, latest_time_txn

    with closing(connect_readonly(db)) as conn, read_transaction(conn):
        latest = latest_time_txn(conn)
    if latest is None:
        return TickingClock()
    return TickingClock((parse_instant(latest) + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ"))


def reconciliation_trials(decide: Callable | None = None) -> list[ReconciliationTrial]:
    """Every case of :data:`RECONCILIATION_CASES`, recovered with ``decide`` (labkit's own by default).

    Each case has a workspace and a ticket service of its own (a real HTTP server in a forked child
    process, its own SQLite store). ``python -m labkit run --tickets URL`` runs in a child,
    killed by SIGKILL at the case's crash point or meeting the service's fault; all the runs
    start together, so the cases take about as long as the slowest (a 1 s client timeout).
    Then, in this process, ``labkit.recover(..., effects=Tickets(URL, decide=decide))`` twice, and
    ``labkit.check_invariants`` with the service. Every service is stopped before returning.
    """
    from .database import read_transaction
    from .effects import DECISIONS, find_effect_txn, reconciliation_decision
    from .processes import _FOLDERS, race
    from .recovery import recover
    from .store import connect_readonly, snapshot
    from .tickets import Faults, ticket_service

    chosen = decide or reconciliation_decision
    asked: list[str] = []
    decided: list[str] = []

    def asking(lookup: Any) -> str:
        try:
            said = chosen(lookup)
        except Exception as error:  # the learner's error, as one line of feedback
            raise AssertionError(f"your decide raised {type(error).__name__}: {error} when the look-up said {lookup.outcome!r}"
                                 .splitlines()[0]) from None
        if said not in DECISIONS:
            raise AssertionError(f"your decide returned {said!r} when the look-up said {lookup.outcome!r}: "
                                 "return 'record', 'send_again' or 'leave_uncertain'")
        asked.append(f"{lookup.outcome} {lookup.ticket}" if lookup.ticket else lookup.outcome)
        decided.append(said)
        return said

    incident = RECONCILED_INCIDENT
    trials: list[ReconciliationTrial] = []
    with ExitStack() as stack:
        spaces, services = [], []
        for _, fault, times, _ in RECONCILIATION_CASES:
            space = _trial("09-exercise")
            spaces.append(space)
            # A real HTTP server in a process of its own, forked from this one (a new Python
            # would spend a third of a second starting, seven tries a check, six services a try).
            services.append(_Service(stack.enter_context(ticket_service(space.folder / "tickets.db", Faults(fault, times)))))
        runs = race(*[
            ("run", "--db", space.db, "--incident", incident, "--tickets", service.url, *(("--crash-at", point) if point else ()))
            for space, service, (_, _, _, point) in zip(spaces, services, RECONCILIATION_CASES, strict=True)
        ])
        for (case, _, _, _), space, service, ran in zip(RECONCILIATION_CASES, spaces, services, runs, strict=True):
            after_run = len(service.tickets())
            asked.clear()
            decided.clear()
            recovered = recover(space.db, space.provider(), clock=_clock_after(space.db), effects=Tickets(service.url, decide=asking))
            failure = next((r.error for r in recovered if r.error is not None), None)
            first_asked, first_decided = tuple(asked), tuple(decided)
            with closing(connect_readonly(space.db)) as conn:
                before = snapshot(conn)
                with read_transaction(conn):
                    effect = find_effect_txn(conn, incident)
            assert effect is not None, f"{case}: the run recorded no effect"  # the run committed its intent before any send
            held_tickets = service.tickets()
            held = effect.state != "done" or any(
                t["ticket"] == effect.ticket and t["key"] in (effect.operation_key, None) for t in held_tickets
            )
            recover(space.db, space.provider(), clock=_clock_after(space.db), effects=Tickets(service.url, decide=asking))
            with closing(connect_readonly(space.db)) as conn:
                unchanged = snapshot(conn) == before and service.tickets() == held_tickets
            results = check_invariants(space.db, space.call_log, {incident: 1}, space.provider(), effects=Tickets(service.url))
            trials.append(ReconciliationTrial(
                case, ran.status, after_run, first_asked, first_decided,
                _FOLDERS.sub("", f"{type(failure).__name__}: {failure}".splitlines()[0]) if failure else None,
                effect.state, effect.ticket, len(held_tickets), held, unchanged, tuple(r.number for r in results if not r.held),
            ))
    return trials


@dataclass(frozen=True)
class _Service:
    """A forked ticket service's URL, and what it holds."""

    url: str

    def tickets(self) -> list[dict[str, Any]]:
        from .tickets import all_tickets

        return all_tickets(self.url)


def _what_it_was_told(trial: ReconciliationTrial) -> str:
    pairs = [f"the look-up said {said} and your decide answered {answer!r}"
             for said, answer in zip(trial.asked, trial.decided, strict=True)]
    return "; then ".join(pairs) or "nothing was asked"


@_one_line
def check_reconciliation(decide: Callable) -> None:
    """``decide(lookup) -> "record" | "send_again" | "leave_uncertain"``: what recovery does with the destination's answer.

    ``lookup`` is a :class:`labkit.tickets.KeyLookup`: ``lookup.outcome`` is ``"found"``
    (``lookup.ticket`` names the ticket), ``"absent"``, or something that settles nothing
    (``"cannot_query"``: the service keeps no keys; ``"unknown"``, ``"refused"``). Every case
    of :func:`reconciliation_trials` runs with it (every fault mode, both crash points around
    the send, a real HTTP service in a child process). In each: at most one ticket for the
    incident at the destination; never done without the destination's ticket; a knowable
    outcome ends done, an unknowable one uncertain; a second recovery changes nothing; and
    ``labkit.check_invariants`` holds all nine.
    """
    _clear_trials()
    if not callable(decide):
        raise AssertionError(f"the answer should be a function (def my_decide(lookup): ...), not {type(decide).__name__}")
    _own_work(decide, "reconciliation_decision", "_reconcile", "open_ticket", "recover")
    trials = reconciliation_trials(decide)
    for trial in trials:
        told = _what_it_was_told(trial)
        if trial.tickets > 1:
            raise AssertionError(
                f"{trial.case}: {trial.tickets} tickets for {RECONCILED_INCIDENT} at the destination after recovery ({told}). "
                "This service keeps no keys: a second POST is a second ticket. When nobody can know, leave it uncertain for a person"
            )
        if trial.error is not None and ("CHECK constraint" in trial.error or "RuleViolation" in trial.error):
            raise AssertionError(
                f"{trial.case}: {told}. That look-up names no ticket, so recording would mark the effect done without the "
                "destination's ticket (the effects table's CHECK refused it). Record only a ticket the destination names"
            )
        if trial.state == "done" and not trial.held:
            raise AssertionError(f"{trial.case}: the effect is done as {trial.ticket}, which the destination does not hold under its key")
        unknowable = any(said.startswith("cannot_query") for said in trial.asked)
        if unknowable and trial.state != "uncertain":
            raise AssertionError(f"{trial.case}: {told}, and the effect ended {trial.state}. Nobody can know whether the ticket exists: "
                                 "leave it uncertain, listed for a person")
        if not unknowable and trial.state != "done":
            hint = {"found": "the destination holds the ticket and named it: record it",
                    "absent": "nothing is stored under this key, and a resend under the same key cannot duplicate (the service "
                              "would replay it): send it again"}
            last = trial.asked[-1].split()[0] if trial.asked else ""
            raise AssertionError(f"{trial.case}: {told}, and the effect ended {trial.state}"
                                 + (f" ({trial.error})" if trial.error else "") + f". {hint.get(last, 'It could be known')}")
        if not trial.again_unchanged:
            raise AssertionError(f"{trial.case}: a second recovery changed rows or tickets ({told}): recovering again must change nothing")
        if trial.broken:
            raise AssertionError(f"{trial.case}: invariants {', '.join(map(str, trial.broken))} broke afterwards ({told})")
    by_case = {trial.case: trial for trial in trials}
    found = [t.case for t in trials if t.asked and t.asked[0].startswith("found")]
    absent = [t.case for t in trials if t.asked and t.asked[0].startswith("absent")]
    cannot = [t.case for t in trials if t.asked and t.asked[0].startswith("cannot_query")]
    never = [t.case for t in trials if not t.asked]
    print(f"✓ found by key → recorded, done with the destination's one ticket: {'; '.join(found)}")
    print(f"✓ absent → sent again under the same key, done, one ticket: {'; '.join(absent)}")
    print(f"✓ cannot be asked → left uncertain for a person, still one ticket, nothing sent blindly: {'; '.join(cannot)}")
    print(f"✓ never sent, so sent without asking: {'; '.join(never)}; in all {len(by_case)} cases a second recovery changed "
          "nothing and invariants 1-9 held")


# --------------------------------------------------------------------------- 10: the fenced commit


@_one_line
def check_fenced_commit(condition: str) -> None:
    """``condition``: the WHERE clause of the fenced commit, as SQL over the ``runs`` row.

    It may use the run's columns (``version``, ``lease_token``, ``step``, ...) and the
    parameters ``:expected_version`` (the state version the worker read) and ``:token`` (its
    lease's). The leased flow runs with it in place of :data:`labkit.leases.FENCE`:
    ``UPDATE runs SET step = ..., version = version + 1 WHERE incident = :incident AND (condition)``.

    Replayed in real SQLite files, with two workers (two connections) sharing a clock that
    the check moves, and the real provider:

    1. a worker whose lease is live, on a run nobody moved, commits: accepted, and completes;
    2. worker A stalls past its lease, B takes the run over and finishes it; A's late commit: refused;
    3. A stalls, B takes over but has not committed yet; A's commit: refused; B's: accepted;
    4. while A holds its lease and reads, the reference flow (a real ``python -m labkit run``,
       which takes no lease) runs the incident; A's commit: refused;
    5. a worker commits to one run with the token of its lease on another: refused.

    The database's trigger (a step moves one forward) stands behind the condition, so a
    stale commit it lets through may still be stopped there: that counts as let through.
    """
    _clear_trials()
    from dataclasses import replace

    from .clock import ManualClock
    from .database import transaction
    from .invariants import stale_commits_txn
    from .leases import Lease, StaleLease
    from .store import create_run_txn
    from .worker import CheckedReading, LeasedWorker

    if not isinstance(condition, str) or not condition.strip():
        raise AssertionError(f"the answer should be the condition as a string of SQL, e.g. \"version = ...\", not {condition!r}")
    ttl = 30.0

    def setting(*incidents: str) -> tuple[Workspace, ManualClock, LeasedWorker, LeasedWorker]:
        trial, clock = _trial("10-exercise"), ManualClock()
        with closing(trial.connect()) as conn, transaction(conn):
            for incident in incidents:
                create_run_txn(conn, incident, WORKFLOW_VERSION, clock)
        provider = trial.provider()
        a = LeasedWorker(trial.connect(), provider, name="worker-A", lease_seconds=ttl, clock=clock, condition=condition)
        b = LeasedWorker(trial.connect(), provider, name="worker-B", lease_seconds=ttl, clock=clock, condition=condition)
        return trial, clock, a, b

    def commit(worker: LeasedWorker, lease: Lease, reading: CheckedReading) -> str:
        try:
            worker.commit_evidence(lease, reading)
        except StaleLease:
            return "refused"
        except sqlite3.IntegrityError:
            return "stopped by the trigger"
        except sqlite3.Error as error:
            raise AssertionError(f"SQLite cannot run your condition: {error}") from None
        return "accepted"

    def no_stale_commit(trial: Workspace) -> None:
        with closing(trial.connect()) as conn:
            stale = stale_commits_txn(conn)
        assert not stale, f"the rows show a commit under a stale token: {stale[0]}"

    def done(*workers: LeasedWorker) -> None:
        for worker in workers:
            worker.conn.close()

    trial, clock, a, b = setting("INC-1001")
    try:
        a.drive("INC-1001")
        outcome = "accepted"
    except StaleLease:
        outcome = "refused"
    except sqlite3.Error as error:
        raise AssertionError(f"SQLite cannot run your condition: {error}") from None
    finally:
        done(a, b)
    assert outcome == "accepted", (
        "worker A holds a live lease and nobody has touched the run, yet its commit was refused: the condition must hold "
        "when the run is still at the version A read and A's token is still the run's lease"
    )
    print("✓ a live lease on an untouched run commits its evidence, then completes")

    trial, clock, a, b = setting("INC-1002")
    lease_a = a.claim("INC-1002")
    reading_a = a.read(lease_a)
    clock.advance(ttl + 1)
    b.drive("INC-1002")
    outcome = commit(a, lease_a, reading_a)
    reads = trial.provider_log.reads_of("INC-1002")
    done(a, b)
    assert outcome == "refused", (
        f"A stalled past its lease; B took the run over (token {lease_a.token + 1}) and finished it. A's late commit, under "
        f"token {lease_a.token}, was {outcome}: " + ("your condition let it through. " if outcome != "refused" else "")
        + "A commit is fenced by the lease that is the run's now: compare the token"
    )
    assert reads == 2, f"the provider should show both reads, A's and B's; it shows {reads}"
    no_stale_commit(trial)
    print("✓ A stalled past its lease, B took over and finished: A's late commit is refused (the provider's log shows both reads)")

    trial, clock, a, b = setting("INC-1003")
    lease_a = a.claim("INC-1003")
    reading_a = a.read(lease_a)
    clock.advance(ttl + 1)
    lease_b = b.claim("INC-1003")
    reading_b = b.read(lease_b)
    outcome = commit(a, lease_a, reading_a)
    outcome_b = commit(b, lease_b, reading_b) if outcome == "refused" else "not tried"
    done(a, b)
    assert outcome == "refused", (
        f"B took the run over but has not committed yet, so the run is still at the state version A read. A's commit was "
        f"{outcome}, while B holds the lease: the version alone cannot tell that A is stale; the token can, if it must "
        "equal the run's lease_token (B's is larger than A's)"
    )
    assert outcome_b == "accepted", f"then B, the lease holder, committed from the state it read, and that was {outcome_b}"
    no_stale_commit(trial)
    print("✓ B took over but had not committed yet: A's commit is refused all the same, and B's is accepted")

    trial, clock, a, b = setting("INC-1004")
    lease_a = a.claim("INC-1004")
    reading_a = a.read(lease_a)
    # No connection of this process stays open while another process uses the file: a second
    # one here would have dropped the first one's locks (see LeasedWorker._call_renewing).
    done(a, b)
    other = labkit_cli("run", "--db", trial.db, "--incident", "INC-1004")
    assert other.returncode == 0, f"could not run the reference flow: {other.stderr.strip()}"
    a = LeasedWorker(trial.connect(), trial.provider(), name="worker-A", lease_seconds=ttl, clock=clock, condition=condition)
    outcome = commit(a, lease_a, reading_a)
    done(a)
    assert outcome == "refused", (
        "while A held its lease and read, the reference flow (which takes no lease) ran the incident to report_completed. "
        f"A's token is still the run's latest, and A's commit was {outcome}: the token alone cannot tell that the run moved "
        "on; compare the state version too"
    )
    print("✓ the run moved on without a lease while A read: A's commit is refused (its token alone looked current)")

    trial, clock, a, b = setting("INC-1005", "INC-1006")
    lease_x = a.claim("INC-1005")
    reading_x = a.read(lease_x)
    lease_y = b.claim("INC-1006")
    mixed_up = replace(lease_x, token=lease_y.token, worker=lease_y.worker)
    outcome = commit(b, mixed_up, reading_x)
    done(a, b)
    assert outcome == "refused", (
        f"worker B committed to run INC-1005 with token {lease_y.token}, its lease on INC-1006, larger than INC-1005's token "
        f"{lease_x.token}; that was {outcome}. A token is this run's lease or it is not: compare it for equality, never by size"
    )
    no_stale_commit(trial)
    print("✓ a token from another run's lease, though larger, is refused")


# --------------------------------------------------------------------------- 11: the retention selection

#: When Exercise 11.1's retention runs (a pinned clock), and how many days a raw diagnostic is kept.
RETENTION_AT = "2026-04-15T00:00:00Z"
RETENTION_DAYS = 30
#: When the "recent" runs of :data:`RETENTION_CASES` ran: five days before RETENTION_AT, inside the 30.
RECENT_AT = "2026-04-10T09:00:00Z"

#: The two databases of Exercise 11.1, incident -> what its run is. The old runs ran at the lessons'
#: pinned instant (2026-03-02), six weeks before the retention. The roles are dealt differently in
#: each database, so no fixed list of incidents passes both.
RETENTION_CASES: tuple[dict[str, str], ...] = (
    {"INC-1003": "finished", "INC-1015": "finished", "INC-1001": "unfinished", "INC-1004": "uncertain", "INC-1006": "recent"},
    {"INC-1001": "finished", "INC-1016": "finished", "INC-1006": "unfinished", "INC-1003": "uncertain", "INC-1004": "recent"},
)
_WHAT_IT_IS = {
    "finished": "report_completed six weeks ago, nothing owed",
    "unfinished": "at evidence_recorded: a crash stopped it, recovery will finish it",
    "uncertain": "report_completed, but its ticket effect is uncertain: a person or recovery still has to settle it",
    "recent": "report_completed five days ago, inside the 30-day retention",
}


def retention_case(space: Workspace, roles: dict[str, str]) -> None:
    """Leave one run per incident in ``space``'s database as ``roles`` says (see :data:`RETENTION_CASES`).

    Each is made by labkit's own coordinator: a run driven to the end (at the lessons' pinned
    instant, or at :data:`RECENT_AT`), one left at ``evidence_recorded`` as a crash after its
    evidence commit leaves it, and one whose ticket went to a service that drops its answer
    after committing (a real ticket service in a child process), which leaves its effect
    ``uncertain``.
    """
    from .clock import TickingClock
    from .errors import RunFailure
    from .tickets import TicketService

    with closing(space.connect()) as conn:
        for incident, role in roles.items():
            if role == "finished":
                space.coordinator(conn).drive(incident)
            elif role == "recent":
                space.coordinator(conn, clock=TickingClock(RECENT_AT)).drive(incident)
            elif role == "unfinished":
                space.coordinator(conn).start(incident)
                space.coordinator(conn).inspect(incident)
            elif role != "uncertain":
                raise ValueError(f"no such role {role!r} for {incident}: {', '.join(_WHAT_IT_IS)}")
        uncertain = [incident for incident, role in roles.items() if role == "uncertain"]
        if uncertain:
            with TicketService(space.folder / "tickets.db", fault="drop-after-commit") as service:
                for incident in uncertain:
                    try:
                        space.coordinator(conn, effects=Tickets(service.url)).drive(incident)
                    except RunFailure:
                        pass  # the answer was dropped: the effect is left uncertain, as intended here


@dataclass(frozen=True)
class RetentionTrial:
    """One database of Exercise 11.1 after a retention run: what it kept, and what else changed."""

    roles: dict[str, str]
    kept: tuple[str, ...]  # incidents whose raw diagnostic is still stored
    changed: tuple[str, ...]  # tables, other than diagnostics and retentions, whose rows changed
    answers_before: dict[str, dict]
    answers_after: dict[str, dict]


def retention_trial(roles: dict[str, str], due: Callable | None = None) -> RetentionTrial:
    """A fresh database left as ``roles`` says, then ``labkit.retention.retain(..., due=due)`` at :data:`RETENTION_AT`.

    ``due`` None is labkit's own selection. Every other table and the three restart answers
    of every run are read before and after.
    """
    from .clock import TickingClock
    from .retention import retain
    from .store import snapshot

    def asked(conn: sqlite3.Connection, cutoff: str) -> list[str]:
        assert due is not None
        try:
            said = due(conn, cutoff)
        except Exception as error:  # the learner's error, as one line of feedback
            raise AssertionError(f"your selection raised {type(error).__name__}: {error}".splitlines()[0]) from None
        try:
            chosen: list[object] = list(said) if not isinstance(said, (str, bytes)) else [said]
        except TypeError:
            chosen = [said]
        if said is None or not all(isinstance(item, str) for item in chosen):
            raise AssertionError(f"the selection should return a list of incident ids (an empty list if none is due), not {said!r}"[:300])
        return [str(item) for item in chosen]

    trial = _trial("11-exercise")
    retention_case(trial, roles)
    with closing(trial.connect()) as conn:
        before = snapshot(conn)
    answers_before = {incident: restart_answers(trial.db, incident).as_row() for incident in sorted(roles)}
    retain(trial.db, RETENTION_DAYS, TickingClock(RETENTION_AT), due=asked if due is not None else None)
    with closing(trial.connect()) as conn:
        after = snapshot(conn)
    kept = tuple(row[0] for row in after["diagnostics"])
    changed = tuple(table for table in before if table not in ("diagnostics", "retentions") and before[table] != after[table])
    answers_after = {incident: restart_answers(trial.db, incident).as_row() for incident in sorted(roles)}
    return RetentionTrial(roles, kept, changed, answers_before, answers_after)


@_one_line
def check_retention_selection(due: Callable) -> None:
    """``due(conn, cutoff) -> list of incident ids``: which raw diagnostics a retention run may remove now.

    ``cutoff`` is an instant (``2026-03-16T00:00:00Z``): raw diagnostics kept before it are old
    enough. The check runs ``labkit.retention.retain(db, 30, clock, due=due)`` on two real
    databases, each holding runs labkit's coordinator left finished six weeks ago, finished
    five days ago, stopped after the evidence commit, and completed with a ticket effect left
    uncertain by a ticket service that dropped its answer (the roles dealt differently in
    each: :data:`RETENTION_CASES`). Correct: exactly the raw diagnostics of the old finished
    runs are removed; every other table is unchanged; every run answers the three restart
    questions as before.
    """
    _clear_trials()
    if not callable(due):
        raise AssertionError(f"the answer should be a function (def my_due(conn, cutoff): ...), not {type(due).__name__}")
    source_of(due)
    _own_work(due, "retain", "retain_txn", "_UNFINISHED_SQL")
    removed_in_all: list[str] = []
    for number, roles in enumerate(RETENTION_CASES, start=1):
        trial = retention_trial(roles, due)
        removed = sorted(set(roles) - set(trial.kept))
        for incident in removed:
            role = roles[incident]
            if role != "finished":
                hint = {
                    "unfinished": "An unfinished run keeps what it read: select only runs at report_completed",
                    "uncertain": "Finished means nothing owed: a run whose effect is intended or uncertain still owes its ticket "
                                 "(look in the effects table)",
                    "recent": "Compare the raw diagnostic's kept_at with the cutoff: only those kept before it are due",
                }[role]
                raise AssertionError(f"database {number}: your selection removed the raw diagnostic of {incident}, "
                                     f"{_WHAT_IT_IS[role]}. {hint}")
        stayed = [incident for incident, role in roles.items() if role == "finished" and incident in trial.kept]
        if stayed:
            runs = f"{' and '.join(stayed)} {'were' if len(stayed) > 1 else 'was'}"
            raise AssertionError(f"database {number}: {runs} finished six weeks ago and nothing is owed, yet your selection kept "
                                 "the raw diagnostic: a retention that removes nothing keeps every raw payload (and secret) for ever")
        assert not trial.changed, (
            f"database {number}: your selection wrote to {', '.join(trial.changed)}: a selection only reads; retain removes what it names"
        )
        assert trial.answers_after == trial.answers_before, f"database {number}: the restart answers changed"
        removed_in_all.append(f"{' and '.join(removed)} in database {number}")
    print(f"✓ removed only the raw diagnostics of the finished runs older than the cutoff: {', '.join(removed_in_all)}")
    print("✓ kept the unfinished run's, the run with an uncertain ticket effect, and the run inside the 30 days")
    print(f"✓ runs, transitions, evidence (summary, digest, reference), assessments, receipts, effects, redactions unchanged; "
          f"all {sum(len(roles) for roles in RETENTION_CASES)} runs answer the three restart questions as before")


# --------------------------------------------------------------------------- 12: the crash explorer

#: The scenarios Exercise 12.1's answer plays, in the order that stops the common slips first.
SCENARIO_CASES: tuple[tuple[str, str | None], ...] = (
    ("after_read", None),                                       # a kill inside the read window: one more read
    ("after_evidence_commit", "reread_committed_evidence"),     # the recovery itself must carry the bug
    ("before_completion_commit", "no_receipt_key"),             # a run that can never finish
    ("before_receipt_write", None),
)
#: The bug section 3 of 12_crash_explorer shows row by row: a prediction about it would be a copy.
SHOWN_BUG = "reread_committed_evidence"


def _explorer_broken(point: str, bug: str | None, numbers: range) -> set[int]:
    """What the explorer finds broken, among ``numbers``, in the scenario killed once at ``point``."""
    from .explorer import Scenario, run_scenario

    trial = _trial("12-explorer")
    result = run_scenario(Scenario("run", (point,), bug), trial.folder / "scenario")
    return {number for number in result.broken if number in numbers}


def _with_bug(bug: str | None) -> str:
    return f" with --bug {bug}" if bug else " (labkit's coordinator)"


@_one_line
def check_scenario(scenario: Callable) -> None:
    """``scenario(db, point, bug) -> list of InvariantResult``: one scenario of the explorer, written by hand.

    For each of :data:`SCENARIO_CASES` the answer runs in this kernel against a fresh
    database, and the invariants it finds broken (1 to 7: a run without a ticket) must be
    those the explorer finds broken in the same scenario, which kills and recovers on its own.
    """
    _clear_trials()
    if not callable(scenario):
        raise AssertionError(f"the answer should be a function (def my_scenario(db, point, bug): ...), not {type(scenario).__name__}")
    _own_work(scenario, "explore", "run_scenario", "random_kills", "explorer")
    seven = range(1, 8)
    shown = []
    for point, bug in SCENARIO_CASES:
        trial = _trial("12-scenario")
        try:
            results = scenario(trial.db, point, bug)
        except AssertionError:
            raise
        except Exception as error:  # noqa: BLE001 - the learner's code: say what it raised, in one line
            raise AssertionError(f"{point}{_with_bug(bug)}: your scenario raised {type(error).__name__}: {error}") from None
        if not isinstance(results, list) or not all(isinstance(r, InvariantResult) for r in results):
            raise AssertionError(f"{point}{_with_bug(bug)}: return the list labkit.check_invariants(...) returns, "
                                 f"not {type(results).__name__}")
        checked = {r.number for r in results}
        if not set(seven) <= checked:
            raise AssertionError(f"{point}{_with_bug(bug)}: your list holds invariants {sorted(checked)}; check all of 1-7")
        mine = {r.number for r in results if not r.held and r.number in seven}
        theirs = _explorer_broken(point, bug, seven)
        if mine != theirs:
            said = ", ".join(f"{r.number} ({r.detail})" for r in results if r.number in mine - theirs)
            if theirs - mine:
                raise AssertionError(
                    f"{point}{_with_bug(bug)}: the explorer finds invariant(s) {sorted(theirs - mine)} broken here, your scenario "
                    "finds them held. Was the run really killed at the point (--crash-at), and did the run, the recovery and "
                    "invariant 7's second recovery (coordinator_class=) all use the bug?"
                )
            hint = ""
            reads = next((r.detail for r in results if r.number == 5 and not r.held), "")
            counted = re.search(r"read (\d+) times, expected (\d+)", reads)
            if counted and int(counted[1]) < int(counted[2]):
                hint = (" Your run read less than a kill at this point costs: was it really killed there "
                        "(--crash-at, and .killed_by == 'SIGKILL')?")
            elif counted:
                hint = " A kill between the read and its commit costs one more read: expect 1 + (point in labkit.BETWEEN_READ_AND_COMMIT)"

            raise AssertionError(f"{point}{_with_bug(bug)}: your scenario finds {said} broken; the explorer finds "
                                 f"{'nothing' if not theirs else sorted(theirs)} broken.{hint}")
        shown.append(f"{point}{_with_bug(bug)}: " + (f"{sorted(mine)} broken" if mine else "all 7 held"))
    for line in shown:
        print(f"✓ {line}, as the explorer finds")


@_one_line
def check_bug_prediction(bug: str, predicted: dict) -> None:
    """``predicted``: ``{crash point: {invariant numbers}}`` for the points where ``bug`` breaks something.

    The explorer then runs every single crash of the ``run`` flow with ``bug`` switched on,
    and the red cells must be exactly the predicted ones.
    """
    from .explorer import explore, flow_points
    from .naive import CRASH_BUGS

    _clear_trials()
    if bug not in CRASH_BUGS:
        raise AssertionError(f"my_bug should be one of {', '.join(CRASH_BUGS)}, not {bug!r}")
    if bug == SHOWN_BUG:
        raise AssertionError(f"section 3 showed {SHOWN_BUG} row by row; predict one you have not seen yet")
    if not isinstance(predicted, dict):
        raise AssertionError(f"my_prediction should be a dict {{crash point: {{invariant numbers}}}}, not {type(predicted).__name__}")
    points = flow_points()["run"]
    unknown = [point for point in predicted if point not in points]
    if unknown:
        raise AssertionError(f"{unknown[0]!r} is not a crash point of a run with a ticket: {', '.join(points)}")
    mine: dict[str, set[int]] = {}
    for point, numbers in predicted.items():
        if not isinstance(numbers, set | list | tuple) or not all(isinstance(n, int) and 1 <= n <= 9 for n in numbers):
            raise AssertionError(f"at {point}: give a set of invariant numbers from 1 to 9, like {{1, 7}}, not {numbers!r}")
        if numbers:
            mine[point] = set(numbers)
    if not mine:
        raise AssertionError(f"you predicted that {bug} breaks nothing: it is a bug the explorer catches, so some cell turns red")
    found = explore(_trial("12-prediction").folder / "explore", pairs=False, bug=bug, workers=1)
    theirs = {r.scenario.crash_points[0]: set(r.broken) for r in found.results if r.broken}
    if mine != theirs:
        differ = [point for point in points if mine.get(point, set()) != theirs.get(point, set())]
        wrong = [f"at {point} you predicted {sorted(mine.get(point, set())) or 'nothing'}, the explorer found "
                 f"{sorted(theirs.get(point, set())) or 'nothing'}" for point in differ]
        raise AssertionError(f"{bug}: " + "; ".join(wrong) + ". See the rows' detail with labkit.explore(folder, pairs=False, "
                             "bug=my_bug).text() and say why: which row did the bug leave behind, and which invariant reads it?")
    for point, numbers in theirs.items():
        print(f"✓ {bug} at {point}: invariants {sorted(numbers)} broken, as you predicted")
    print(f"✓ every other point of {len(points)}: every invariant held, as you predicted")


# --------------------------------------------------------------------------- 13: the task scorer's accuracy


@dataclass(frozen=True)
class EvaluationCase:
    """One small database of 13_evaluation's ship gate (section 4), scored by Exercise 13.1's check too.

    ``story`` says what happened to its runs; ``hint`` what an accuracy that disagrees with
    labkit's task scorer on it has most likely got wrong. ``ticket_store`` is the ticket
    service's file where its runs opened tickets, else None.
    """

    name: str
    story: str
    hint: str
    db: Path
    ticket_store: Path | None = None


_EVALUATION_CASES: list[EvaluationCase] = []


def evaluation_cases() -> list[EvaluationCase]:
    """The five databases of 13_evaluation's section 4, in the order that stops the common slips first.

    Made by labkit's own code (children really killed with SIGKILL, a real ticket service),
    once per kernel: afterwards they are only read (the scorers and Exercise 13.1's answer
    open them read-only), so a learner re-running a cell waits for nothing.
    """
    if not _EVALUATION_CASES or not all(case.db.exists() for case in _EVALUATION_CASES):
        _EVALUATION_CASES[:] = _build_evaluation_cases()
    return list(_EVALUATION_CASES)


def _killed(space: Workspace, incident: str, point: str, *options: str) -> None:
    child = labkit_cli("run", "--db", space.db, "--incident", incident, "--crash-at", point, *options)
    assert child.killed_by == "SIGKILL", f"the child armed at {point} was not killed: {child.status} {child.message}"


def _driven(space: Workspace, *incidents: str, **options: Any) -> None:
    with closing(space.connect()) as conn:
        for incident in incidents:
            space.coordinator(conn, **options).drive(incident)


def _build_evaluation_cases() -> list[EvaluationCase]:
    from .naive import coordinator_class
    from .recovery import recover
    from .tickets import TicketService
    from .versioning import reevaluate

    recovered = Workspace.create("13-case-recovered")
    _killed(recovered, "INC-1007", "after_evidence_commit")
    _driven(recovered, "INC-1002", "INC-1011")
    recover(recovered.db, recovered.provider(), clock=recovered.clock)

    naive = Workspace.create("13-case-naive")
    store = naive.folder / "tickets.db"
    with TicketService(store) as service:
        _killed(naive, "INC-1003", "after_send", "--bug", "retry_without_key", "--tickets", service.url)
        recover(naive.db, naive.provider(), clock=naive.clock, effects=Tickets(service.url),
                coordinator_class=coordinator_class("retry_without_key"))
        _driven(naive, "INC-1005", effects=Tickets(service.url))

    early = Workspace.create("13-case-early")
    _driven(early, "INC-1001")
    _killed(early, "INC-1007", "after_evidence_commit")
    _killed(early, "INC-1004", "after_read")

    revised = Workspace.create("13-case-revised")
    _driven(revised, "INC-1003", "INC-1007", "INC-1011")
    for incident in ("INC-1007", "INC-1011"):
        reevaluate(revised.db, incident, "rules revision 2 sees zombie consumers and poison messages dead-lettered", revised.clock,
                   rules_revision=2)

    fresh = Workspace.create("13-case-fresh")
    with closing(fresh.connect()) as conn:
        fresh.coordinator(conn).start("INC-1006")

    return [
        EvaluationCase(
            "recovered, diagnosed wrongly",
            "INC-1007 killed after its evidence commit, then recovered; INC-1002 and INC-1011 ran through",
            "Every run here completed with one receipt, yet INC-1007 and INC-1011 are diagnosed wrongly: compare each "
            "run's assessed kind with truth, not whether the run finished",
            recovered.db,
        ),
        EvaluationCase(
            "naive recovery, two tickets",
            "INC-1003 killed after sending its ticket, recovered by the retry_without_key variant; INC-1005 ran through",
            "INC-1003 opened two tickets, but both diagnoses are right: a duplicate is a failure of the recovery card, "
            "not a wrong diagnosis",
            naive.db, store,
        ),
        EvaluationCase(
            "evaluated before recovery",
            "INC-1001 completed; INC-1007 killed after its evidence commit; INC-1004 killed after its read, still not_inspected",
            "Score every run that has an assessment, finished or not (INC-1007's is wrong); INC-1004 has none yet: "
            "leave it out of both counts, it is not a wrong diagnosis",
            early.db,
        ),
        EvaluationCase(
            "re-evaluated",
            "INC-1003, INC-1007 and INC-1011 ran through; INC-1007 and INC-1011 were re-evaluated with rules revision 2",
            "Two runs have two assessments each: score each run once, by its latest assessment (the highest seq)",
            revised.db,
        ),
        EvaluationCase(
            "nothing inspected yet",
            "INC-1006 created, not yet inspected",
            "No run has an assessment, so there is nothing to score: return None",
            fresh.db,
        ),
    ]


_DEALT_AGAIN: list[EvaluationCase] = []


def _dealt_again() -> EvaluationCase:
    """A sixth case, never shown: all sixteen incidents, one re-evaluated, one not inspected.

    The five cases of section 4 are shown with their scores; an answer that looked its
    number up by the incidents it finds would pass them, and not this one.
    """
    from .provider import list_incidents
    from .versioning import reevaluate

    if not _DEALT_AGAIN or not _DEALT_AGAIN[0].db.exists():
        space = Workspace.create("13-case-sixteen")
        _driven(space, *[incident for incident in list_incidents() if incident != "INC-1016"])
        with closing(space.connect()) as conn:
            space.coordinator(conn).start("INC-1016")
        reevaluate(space.db, "INC-1011", "rules revision 2 sees poison messages dead-lettered", space.clock, rules_revision=2)
        _DEALT_AGAIN[:] = [EvaluationCase(
            "sixteen incidents",
            "fifteen ran through with rules revision 1, INC-1011 re-evaluated with revision 2, INC-1016 not inspected",
            "Score each run with an assessment once, by its latest one; leave a run without one out",
            space.db,
        )]
    return _DEALT_AGAIN[0]


@_one_line
def check_task_accuracy(accuracy: Callable) -> None:
    """``accuracy(conn, truth) -> float | None``: the task scorecard's accuracy, written by hand.

    ``truth`` is the answer key (``{incident: kind}``, :func:`labkit.evaluation.load_ground_truth`);
    ``conn`` is the task scorer's own connection (:func:`labkit.evaluation.scoped_connection`
    with :data:`~labkit.evaluation.TASK_TABLES`): it reads ``runs`` and ``assessments`` and is
    refused everything else. On each of :func:`evaluation_cases`, and on a sixth database
    never shown, the answer must equal labkit's :func:`~labkit.evaluation.task_score`:
    right / scored, where a run is scored by its latest assessment and a run without one is
    not scored at all; None when nothing is scored.
    """
    import math
    import numbers

    from .evaluation import TASK_TABLES, ScorerReadRefused, load_ground_truth, scoped_connection, task_score

    _clear_trials()
    if not callable(accuracy):
        raise AssertionError(f"the answer should be a function (def my_accuracy(conn, truth): ...), not {type(accuracy).__name__}")
    source_of(accuracy)
    _own_work(accuracy, "task_score", "evaluate", "_task_scores", "_score_tasks", "_score_task", "TaskScore")
    truth = load_ground_truth()
    shown = []
    for case in [*evaluation_cases(), _dealt_again()]:
        expected = task_score(case.db)
        try:
            with scoped_connection(case.db, "task", TASK_TABLES) as conn:
                given = accuracy(conn, dict(truth))
        except ScorerReadRefused as refusal:
            if refusal.table.startswith("(action"):  # not a read: a write, a PRAGMA, an ATTACH ...
                raise AssertionError(
                    f"{case.name}: your function asked for something other than a read {refusal.table}, and the task "
                    f"scorer's connection refused it: it only reads {' and '.join(TASK_TABLES)}. Count, never change"
                ) from None
            raise AssertionError(
                f"{case.name}: your function read {refusal.table!r}, and the task scorer's connection refused it (it reads "
                f"{' and '.join(TASK_TABLES)} only). Whether a run finished, its receipt and its report are the recovery "
                "card's evidence: judge a diagnosis by its assessment"
            ) from None
        except AssertionError:
            raise
        except Exception as error:  # noqa: BLE001 - the learner's code: say what it raised, in one line
            raise AssertionError(f"{case.name}: your function raised {type(error).__name__}: {error}".splitlines()[0][:300]) from None
        if expected.accuracy is None:
            if given is not None:
                raise AssertionError(f"{case.name} ({case.story}): your function returned {given!r}; no run has an assessment, "
                                     "so no diagnosis can be scored: return None (a run not inspected is not a wrong diagnosis)")
            shown.append(f"{case.name}: no run has an assessment, nothing scored: None")
            continue
        if isinstance(given, bool) or not isinstance(given, numbers.Real):
            raise AssertionError(f"{case.name}: return the accuracy as a number, right / scored (None only when nothing is "
                                 f"scored), not {given!r}"[:300])
        if not math.isclose(float(given), expected.accuracy, abs_tol=1e-9):
            raise AssertionError(
                f"{case.name} ({case.story}): your accuracy is {float(given):.3f}; the task scorer's is {expected.correct} of "
                f"{expected.scored} = {expected.accuracy:.3f}. {case.hint}"
            )
        shown.append(f"{case.name}: {expected.correct} of {expected.scored} scored right = {expected.accuracy:.3f}")
    for line in shown:
        print(f"✓ {line}, as labkit's task scorer says")
    print(f"✓ read only {' and '.join(TASK_TABLES)}: the recovery card's tables were never needed")


# --------------------------------------------------------------------------- 14: a DBOS step that runs at least once


#: The incident and the kill of Exercise 14.1 (14_choosing_an_engine, section 4): inside the
#: record_evidence step, after its commit, before DBOS records the step.
EVIDENCE_STEP_INCIDENT = "INC-1003"
EVIDENCE_STEP_KILL = "after_evidence_commit"


@dataclass(frozen=True)
class EvidenceStepTrial:
    """What one DBOS run of the incident workflow left, with a given record_evidence step.

    ``ends`` are the children's ends (the run's, then the recovery's when the run was
    killed); ``calls`` what the step did each time it ran ("returned 'evidence_recorded'",
    "raised IntegrityError: ..."); the rest are the business rows and DBOS's own record of
    the workflow.
    """

    ends: tuple[str, ...]
    calls: tuple[str, ...]
    step: str
    evidence_rows: int
    transitions: tuple[tuple[str, str], ...]
    receipt: str | None
    status: str
    attempts: int

    def rows(self) -> tuple:
        return (self.step, self.evidence_rows, self.transitions, self.receipt, self.status)

    @property
    def returned(self) -> list[str]:
        return [call.removeprefix("returned ") for call in self.calls if call.startswith("returned ")]

    @property
    def raised(self) -> list[str]:
        return [call.removeprefix("raised ") for call in self.calls if call.startswith("raised ")]


def _said(log: Path, line: str) -> None:
    with open(log, "a", encoding="utf-8") as out:  # one line each time the step ran: a file outlives the kill
        out.write(line + "\n")


def evidence_step_trial(write_evidence: Callable, *, killed: bool) -> EvidenceStepTrial:
    """Run INC-1003 on DBOS with ``write_evidence`` as the record_evidence step's work, in forked children.

    With ``killed``, the run is SIGKILLed at ``after_evidence_commit`` and a fresh DBOS process
    recovers it: the step runs a second time, as DBOS promises (at least once). The learner's
    function is used as it is: the children are forks of this kernel, so a function defined in a
    notebook cell needs no pickling.
    """
    from .crashpoints import NO_CRASH, CrashPlan, CrashPoint
    from .engines.dbos import DbosEngine, IncidentApp, workflows_of
    from .explorer import _warm
    from .store import connect_readonly

    _warm(DbosEngine())
    folder = _trial("14-evidence-step").folder
    said = folder / "returned.txt"

    def step(coordinator, incident, reading):
        try:
            value = write_evidence(coordinator, incident, reading)
        except BaseException as error:
            _said(said, f"raised {type(error).__name__}: {error}".splitlines()[0][:300])
            raise
        _said(said, f"returned {value!r}")
        return value

    def run() -> None:
        crash = CrashPlan(CrashPoint(EVIDENCE_STEP_KILL)) if killed else NO_CRASH
        app = IncidentApp(folder, crash=crash, write_evidence=step)
        try:
            app.run(EVIDENCE_STEP_INCIDENT)
        finally:
            app.close()

    def recover() -> None:
        app = IncidentApp(folder, write_evidence=step)
        try:
            app.recover()
        finally:
            app.close()

    quiet = (folder / "child.out", folder / "child.err")
    ends = [in_child(run, output=quiet)]
    if killed and ends[0].killed:
        ends.append(in_child(recover, output=quiet))
    with closing(connect_readonly(folder / "lab.db")) as conn:
        found = conn.execute("SELECT step FROM runs WHERE incident = ?", (EVIDENCE_STEP_INCIDENT,)).fetchone()
        evidence = conn.execute("SELECT COUNT(*) FROM evidence WHERE incident = ?", (EVIDENCE_STEP_INCIDENT,)).fetchone()[0]
        moves = conn.execute("SELECT from_step, to_step FROM transitions WHERE incident = ? ORDER BY seq",
                             (EVIDENCE_STEP_INCIDENT,)).fetchall()
        receipt = conn.execute("SELECT receipt_id FROM receipts WHERE incident = ?", (EVIDENCE_STEP_INCIDENT,)).fetchone()
    [workflow] = workflows_of(folder) or [{"status": "(not recorded)", "attempts": 0}]
    calls = tuple(said.read_text(encoding="utf-8").splitlines()) if said.exists() else ()
    return EvidenceStepTrial(
        tuple(str(end) for end in ends), calls, found[0] if found else "(no run)", evidence,
        tuple((str(a), str(b)) for a, b in moves), receipt[0] if receipt else None, workflow["status"], workflow["attempts"],
    )


_EVIDENCE_REFERENCE: dict[bool, EvidenceStepTrial] = {}


def _hands_over_to_the_reference(function: Callable) -> bool:
    """Whether the answer is, calls or imports labkit's own write_evidence_once (in code, not in comments)."""
    from .engines.dbos import write_evidence_once

    if function is write_evidence_once or getattr(function, "__wrapped__", None) is write_evidence_once:
        return True
    tree = ast.parse(source_of(function))
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    used |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    used |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    return "write_evidence_once" in used


@_one_line
def check_evidence_step(write_evidence: Callable) -> None:
    """``write_evidence(coordinator, incident, reading) -> str``: the record_evidence step's work, written by hand.

    Plugged into the DBOS version of the workflow (``IncidentApp(..., write_evidence=...)``) in
    forked children: a clean run, then a run killed at ``after_evidence_commit`` (after the
    step's commit, before DBOS records the step) and recovered, so that the step runs twice.
    Both must leave the rows labkit's :func:`~labkit.engines.dbos.write_evidence_once` leaves:
    one evidence row, one transition to evidence_recorded, one receipt, the workflow SUCCESS.
    """
    from .engines.dbos import write_evidence_once
    from .steps import Step

    _clear_trials()
    if not callable(write_evidence):
        raise AssertionError("the answer should be a function (def my_write_evidence(coordinator, incident, reading): ...), "
                             f"not {type(write_evidence).__name__}")
    if _hands_over_to_the_reference(write_evidence):
        raise AssertionError("write it yourself: your answer is (or calls) labkit.engines.dbos.write_evidence_once, which "
                             "already does the job and is what the check compares with; use coordinator.load_txn, "
                             "coordinator.record_reading_txn and transaction(coordinator.conn)")
    for killed in (False, True):
        if killed not in _EVIDENCE_REFERENCE:
            _EVIDENCE_REFERENCE[killed] = evidence_step_trial(write_evidence_once, killed=killed)
    shown = []
    for killed, story in ((False, "a clean run"), (True, f"a run killed at {EVIDENCE_STEP_KILL}, then recovered")):
        expected, mine = _EVIDENCE_REFERENCE[killed], evidence_step_trial(write_evidence, killed=killed)
        ran = f"{story} (your step ran {len(mine.calls)} time{'s' if len(mine.calls) != 1 else ''})"
        if killed and mine.ends[0] != "killed":
            raise AssertionError(f"{story}: the run was not killed at {EVIDENCE_STEP_KILL} ({mine.ends[0]}); "
                                 "did your step raise, or not return, after writing?")
        if killed and mine.raised and len(mine.calls) == 2 and mine.evidence_rows == 1:
            raise AssertionError(
                f"{ran}: the recovery ran your step a second time, and it raised {mine.raised[0]}; the workflow ended "
                f"{mine.status} with no receipt. A DBOS step runs at least once: look first, under the write lock, and leave a "
                "run already past not_inspected as it is"
            )
        if mine.raised:
            raise AssertionError(f"{ran}: your step raised {mine.raised[0]}; the workflow ended {mine.status}")
        if mine.evidence_rows == 0:
            raise AssertionError(
                f"{ran}: your step left no evidence row (the run is at {mine.step}), so completion had nothing to build the "
                f"report from and the workflow ended {mine.status}. Keep the reading: coordinator.record_reading_txn(run, "
                "reading), inside transaction(coordinator.conn)"
            )
        if mine.rows() != expected.rows():
            raise AssertionError(
                f"{ran}: your rows differ from labkit's: step {mine.step}, {mine.evidence_rows} evidence row(s), transitions "
                f"{[f'{a}→{b}' for a, b in mine.transitions]}, receipt {mine.receipt}, workflow {mine.status}; expected step "
                f"{expected.step}, transitions {[f'{a}→{b}' for a, b in expected.transitions]}, workflow {expected.status}"
            )
        wrong = [value for value in mine.returned if value != repr(Step.EVIDENCE_RECORDED.value)]
        if wrong:
            raise AssertionError(f"{ran}: your step returned {wrong[0]}; return the step the run is at when it ends, "
                                 f"as a string: {Step.EVIDENCE_RECORDED.value!r}, the first time and on a replay")
        shown.append(f"{ran}: one evidence row, one move to evidence_recorded, receipt {mine.receipt}, workflow {mine.status}")
    for line in shown:
        print(f"✓ {line}, as with labkit's write_evidence_once")
