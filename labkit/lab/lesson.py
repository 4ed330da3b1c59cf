"""What every lesson notebook shares: its setup, the restart refrain, and friendly cell-order errors.

A lesson's first code cell is ``ws = labkit.lab.lesson.start("04")``: a fresh workspace of its
own (:class:`labkit.lab.Workspace`), and, inside Jupyter, an error handler so that a cell run
before the cell it depends on says in one line what to run, instead of a traceback.

The refrain of the lab, the three questions a restarted worker must answer without
guessing, is answered here once, from the rows alone: :func:`restart_answers`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from ..clock import clock_from_env
from ..coordinator import Coordinator
from ..crashpoints import CrashPlan, CrashPoint
from ..database import read_transaction
from ..errors import LabError
from ..provider import ReferenceProvider, call_log_for, data_dir
from ..receipts import find_receipt_txn
from ..steps import Step
from ..store import connect, connect_readonly, find_run_txn, latest_time_txn, load_evidence_txn
from .processes import ChildOutcome, child_env
from .sqlite_check import require_for
from .workspace import Workspace

#: The three questions, in the words every lesson uses.
QUESTIONS = ("read again?", "summary exists?", "action committed?")


@dataclass(frozen=True)
class RestartAnswers:
    """The three answers for one run, each with the row it comes from."""

    incident: str
    step: str | None
    evidence: bool
    receipt: str | None

    @property
    def read_again(self) -> bool:
        # Only committed evidence saves a read; a run at not_inspected (or no run at all)
        # must read, whatever a log or a transcript says about earlier reads.
        return not self.evidence

    @property
    def summary_exists(self) -> bool:
        return self.receipt is not None  # the summary is stored in the receipt

    @property
    def action_committed(self) -> bool:
        # In this lab the only committed action is the local receipt; a remote effect would
        # need its own ledger (09_external_effects).
        return self.receipt is not None

    def as_row(self) -> dict[str, object]:
        yes = {True: "yes", False: "no"}
        return {
            "incident": self.incident,
            "step": self.step or "(no run)",
            "evidence row": self.evidence,
            "receipt": self.receipt or "",
            QUESTIONS[0]: yes[self.read_again],
            QUESTIONS[1]: yes[self.summary_exists],
            QUESTIONS[2]: yes[self.action_committed],
        }


def restart_answers(db: str | Path | sqlite3.Connection, incident: str) -> RestartAnswers:
    """Answer the three restart questions for ``incident`` from its rows, and nothing else."""
    if isinstance(db, sqlite3.Connection):
        return _answers_txn(db, incident)
    with closing(connect_readonly(db)) as conn:
        return _answers_txn(conn, incident)


def _answers_txn(conn: sqlite3.Connection, incident: str) -> RestartAnswers:
    with read_transaction(conn):
        run = find_run_txn(conn, incident)
        evidence = load_evidence_txn(conn, incident)
        receipt = find_receipt_txn(conn, incident)
    step = run.step if run is not None else None
    return RestartAnswers(
        incident,
        step.value if isinstance(step, Step) else None,
        evidence is not None,
        receipt.receipt_id if receipt is not None else None,
    )


# --------------------------------------------------------------------------- cell order


class LessonOrderError(Exception):
    """A cell ran before the cell it needs; shown in Jupyter as one line, without a traceback."""

    def _render_traceback_(self) -> list[str]:
        return [f"⚠ {self}"]


#: Names a lesson defines in a particular cell, so the message can name that cell.
_DEFINED_BY: dict[str, str] = {}


def defined_by(names: dict[str, str]) -> None:
    """Tell the cell-order handler where names come from, e.g. ``{"my_answer": "Exercise 4.2's answer cell"}``."""
    _DEFINED_BY.update(names)


def require(condition: bool, what_to_run: str) -> None:
    """Stop a cell whose earlier cells have not run, with one line saying which to run."""
    if not condition:
        raise LessonOrderError(f"run {what_to_run} first, then this cell again")


def _name_error_hint(error: NameError) -> str:
    name = getattr(error, "name", None) or str(error)
    where = _DEFINED_BY.get(name)
    if where:
        return f"⚠ `{name}` is not defined yet: run {where} first, then this cell again"
    return f"⚠ `{name}` is not defined yet: it comes from an earlier cell; run the cells above this one, from the setup cell down"


def _install_cell_order_handler() -> None:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - labkit runs without IPython too
        return
    shell = get_ipython()
    if shell is None:
        return

    def handler(shell, etype, value, tb, tb_offset=None):
        # One line instead of a traceback. A NameError's fix is to run another cell, not to read
        # frames. A refusal (labkit's, or the database's own constraint) is what the cell
        # demonstrates: its name and message are the lesson, and twenty lines of labkit's source
        # above them would bury it. A learner's other errors keep their full traceback.
        lines = [_name_error_hint(value) if isinstance(value, NameError) else f"{etype.__name__}: {value}"]
        shell._showtraceback(etype, value, lines)
        return lines

    shell.set_custom_exc((NameError, LabError, sqlite3.IntegrityError), handler)


def start(lesson: str) -> Workspace:
    """A lesson's setup: its own workspace, and friendly messages for cells run out of order."""
    # As `python -m labkit` does (see labkit/__main__.py): jsonschema would compile the
    # optional "iri" format's parsers, a second of every lesson's first contract check, for a
    # format the evidence contract never uses. Only in a lesson's kernel, before first use.
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]  # None makes the import fail
    _DEFINED_BY.clear()
    _install_cell_order_handler()
    # A lesson that needs a SQLite feature this Python lacks (lesson 14 on Python 3.12+ with SQLite
    # before 3.42) stops here with one line, not eight cells later with DBOS's NULL timestamps.
    require_for(lesson)
    return Workspace.create(lesson)


# --------------------------------------------------------------------------- a transcript and its rows


def transcript_run(db: str | Path, incident: str, crash_at: str | None = None) -> tuple[ChildOutcome, list[str]]:
    """Run ``incident`` in a child that also keeps a chat transcript, killed at ``crash_at``.

    The child is the assistant: it says what it will do, logs its tool call and the tool's
    answer, and, like a chat model, announces "Done" while the completion is still being
    committed. Transcript and rows come from the same process and the same kill, so a
    lesson can lay them side by side (01_a_transcript_is_not_state).
    """
    transcript = Path(db).with_name(f"{incident}.transcript.txt")
    transcript.unlink(missing_ok=True)
    code = "from labkit.lab.lesson import _transcript_child; _transcript_child()"
    argv = [sys.executable, "-c", code, str(db), incident, str(transcript), crash_at or ""]
    done = subprocess.run(argv, capture_output=True, text=True, env=child_env(), timeout=120)
    shown = f"assistant on {incident}" + (f", killed at {crash_at}" if crash_at else "")
    lines = transcript.read_text(encoding="utf-8").splitlines() if transcript.exists() else []
    return ChildOutcome(shown, done.returncode, done.stdout, done.stderr), lines


@dataclass(frozen=True)
class _TranscriptPlan(CrashPlan):
    """A crash plan that also writes, at each point, what the assistant says by then."""

    transcript: Path = Path("transcript.txt")
    said: dict[CrashPoint, list[str]] = field(default_factory=dict)

    def reached(self, point: CrashPoint, conn: sqlite3.Connection | None = None) -> None:
        for line in self.said.get(point, []):
            fd = os.open(self.transcript, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (line + "\n").encode("utf-8"))  # handed to the OS: survives the kill
            finally:
                os.close(fd)
        super().reached(point, conn)


def _assistant_lines(incident: str, alert: str, queue: str) -> dict[CrashPoint, list[str]]:
    return {
        CrashPoint.BEFORE_READ: [
            f"alert        {alert}",
            f"assistant    I'll read the diagnostic of {queue}, write a summary, and open a ticket for the on-call team.",
            f'tool call    get_queue_diagnostic(incident="{incident}")',
        ],
        CrashPoint.AFTER_READ: ["tool result  (the diagnostic, 1 KB of JSON)"],
        # A chat model announces success as it writes the last call, before anything confirms it.
        CrashPoint.BEFORE_COMPLETION_COMMIT: ["assistant    Done. The summary is written and the on-call team has their ticket."],
    }


def _transcript_child() -> None:  # pragma: no cover - runs in the child process


    db, incident, transcript, crash_at = sys.argv[1:5]
    snapshot = json.loads((data_dir() / "incidents" / f"{incident}.json").read_text(encoding="utf-8"))
    said = _assistant_lines(incident, snapshot["alert"], snapshot["queue"]["name"])
    plan = _TranscriptPlan(CrashPoint(crash_at) if crash_at else None, "kill", Path(transcript), said)
    with closing(connect(db)) as conn:
        with read_transaction(conn):
            latest = latest_time_txn(conn)
        coordinator = Coordinator(conn, ReferenceProvider(call_log_for(db)), clock=clock_from_env(after=latest), crash=plan)
        coordinator.drive(incident)
