"""Lesson 14 (14_choosing_an_engine): a DBOS step that runs at least once and leaves one set of rows.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from ...children import in_child
from ...coordinator import Coordinator
from ...crashpoints import NO_CRASH, CrashPlan, CrashPoint
from ...engines.dbos import DbosEngine, IncidentApp, workflows_of, write_evidence_once
from ...provider import ReferenceProvider, call_log_for, read_with_diagnostic
from ...steps import Step
from ...store import connect, connect_readonly
from ..explorer import _warm
from ..progress import Progress
from .runner import answer_is_a_function, clear_trials, new_trial, one_line, own_work, refuse_if_called, watching_labkit

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
    handed_over: tuple[str, ...] = ()

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


def _refusing_everything(action: int, *_args: object) -> int:
    """An SQLite authorizer that denies every statement: a real error, raised by SQLite itself."""
    return sqlite3.SQLITE_DENY


def evidence_step_trial(write_evidence: Callable, *, killed: bool, broken_replay: bool = False) -> EvidenceStepTrial:
    """Run INC-1003 on DBOS with ``write_evidence`` as the record_evidence step's work, in forked children.

    With ``killed``, the run is SIGKILLed at ``after_evidence_commit`` and a fresh DBOS process
    recovers it: the step runs a second time, as DBOS promises (at least once). With
    ``broken_replay`` too, that second call's connection refuses every statement (SQLite's
    "not authorized"): a real error, which the step must let out rather than return as if all
    went well. The learner's function is used as it is: the children are forks of this kernel,
    so a function defined in a notebook cell needs no pickling.
    """
    _warm(DbosEngine())
    folder = new_trial("14-evidence-step").folder
    said = folder / "returned.txt"

    def step(coordinator, incident, reading):
        if broken_replay and said.exists():  # a second call: its database now fails for real
            coordinator.conn.set_authorizer(_refusing_everything)
        try:
            with watching_labkit("write_evidence_once") as handed:  # labkit's own step, reached under any name
                value = write_evidence(coordinator, incident, reading)
        except BaseException as error:
            _said(said, f"raised {type(error).__name__}: {error}".splitlines()[0][:300])
            raise
        finally:
            for label in handed:
                _said(folder / "handed.txt", label)
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
    handed_file = folder / "handed.txt"
    handed_over = tuple(handed_file.read_text(encoding="utf-8").splitlines()) if handed_file.exists() else ()
    return EvidenceStepTrial(
        tuple(str(end) for end in ends), calls, found[0] if found else "(no run)", evidence,
        tuple((str(a), str(b)) for a, b in moves), receipt[0] if receipt else None, workflow["status"], workflow["attempts"],
        handed_over,
    )


_EVIDENCE_REFERENCE: dict[bool, EvidenceStepTrial] = {}


@dataclass(frozen=True)
class TwoAtOnce:
    """Two executions of the step at once on one run (two executors recovering the same workflow).

    ``ends`` is how each child ended; ``calls`` what each call returned or raised; the rest
    the rows they left between them.
    """

    ends: tuple[str, ...]
    calls: tuple[str, ...]
    evidence_rows: int
    moves: int


#: The longest the first execution to look waits for the second to look too. A step that took
#: the write lock before it looked does not wait: the second one cannot look until it is done.
GATE_SECONDS = 5.0


def two_at_once(write_evidence: Callable) -> TwoAtOnce:
    """Call ``write_evidence`` in two forked children at once, on a run at not_inspected, the same reading.

    The interleaving is forced, not hoped for: each child stops just after its first read of
    ``runs`` (at the next statement it starts) until the other has read too, or
    :data:`GATE_SECONDS` passed. A step that looks outside its write transaction then has both
    looks made before either writes, every time: the check-then-act race of 06_single_receipt.
    """
    folder = new_trial("14-two-at-once").folder
    db = folder / "lab.db"
    provider = ReferenceProvider(call_log_for(db))
    with closing(connect(db)) as conn:
        Coordinator(conn, provider).start(EVIDENCE_STEP_INCIDENT)
    reading = read_with_diagnostic(provider, EVIDENCE_STEP_INCIDENT)
    said = folder / "returned.txt"

    def execution(name: str) -> Callable[[], None]:
        def work() -> None:
            looked = folder / f"looked-{name}"

            seen: dict[str, bool] = {"look": False, "write_lock": False}

            def gate(statement: str) -> None:
                # SQLite reports a statement as it starts, before it has read or written anything:
                # the hold is at the statement after the first look of runs, once that look has
                # its row. No hold for a step that took the write lock before it looked: the other
                # execution runs the same code, so it cannot look until this one has committed.
                holds_write_lock = seen["write_lock"] and conn.in_transaction
                words = statement.lstrip().upper().split(maxsplit=2)
                verb = words[0] if words else ""
                if verb in ("COMMIT", "END", "ROLLBACK"):
                    seen["write_lock"] = False
                elif verb in ("INSERT", "UPDATE", "DELETE", "REPLACE") or words[1:2] in (["IMMEDIATE"], ["EXCLUSIVE"]):
                    seen["write_lock"] = True  # a write, or a transaction begun IMMEDIATE or EXCLUSIVE
                if looked.exists():
                    return
                if not seen["look"]:
                    seen["look"] = verb == "SELECT" and " runs" in statement
                    return
                looked.touch()
                if holds_write_lock:
                    return
                deadline = time.monotonic() + GATE_SECONDS
                while len(list(folder.glob("looked-*"))) < 2 and time.monotonic() < deadline:
                    time.sleep(0.01)

            (folder / f"started-{name}").touch()  # both start together: a slow fork must not look after the other wrote
            deadline = time.monotonic() + 10
            while len(list(folder.glob("started-*"))) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            with closing(connect(db)) as conn:
                conn.set_trace_callback(gate)
                try:
                    value = write_evidence(Coordinator(conn, provider), EVIDENCE_STEP_INCIDENT, reading)
                except BaseException as error:
                    _said(said, f"raised {type(error).__name__}: {error}".splitlines()[0][:300])
                    raise
                _said(said, f"returned {value!r}")

        return work

    import threading

    ends: dict[str, str] = {}
    children = [threading.Thread(target=lambda n=n: ends.__setitem__(n, str(in_child(
        execution(n), output=(folder / f"{n}.out", folder / f"{n}.err"))))) for n in ("a", "b")]
    for child in children:
        child.start()
    for child in children:
        child.join()
    with closing(connect_readonly(db)) as conn:
        evidence = conn.execute("SELECT COUNT(*) FROM evidence WHERE incident = ?", (EVIDENCE_STEP_INCIDENT,)).fetchone()[0]
        moves = conn.execute("SELECT COUNT(*) FROM transitions WHERE incident = ? AND to_step = ?",
                             (EVIDENCE_STEP_INCIDENT, Step.EVIDENCE_RECORDED.value)).fetchone()[0]
    calls = tuple(said.read_text(encoding="utf-8").splitlines()) if said.exists() else ()
    return TwoAtOnce((ends["a"], ends["b"]), calls, evidence, moves)


@one_line
def check_evidence_step(write_evidence: Callable) -> None:
    """``write_evidence(coordinator, incident, reading) -> str``: the record_evidence step's work, written by hand.

    Plugged into the DBOS version of the workflow (``IncidentApp(..., write_evidence=...)``) in
    forked children: a clean run, then a run killed at ``after_evidence_commit`` (after the
    step's commit, before DBOS records the step) and recovered, so that the step runs twice.
    Both must leave the rows labkit's :func:`~labkit.engines.dbos.write_evidence_once` leaves:
    one evidence row, one transition to evidence_recorded, one receipt, the workflow SUCCESS.
    """
    clear_trials()
    answer_is_a_function(write_evidence, "def my_write_evidence(coordinator, incident, reading): ...")
    own_work(write_evidence, "write_evidence_once")
    bar = Progress(4)  # four trials, each a few forked DBOS processes: some seconds in all
    try:
        _check_evidence_step(write_evidence, bar)
    finally:
        bar.finish()


def _check_evidence_step(write_evidence: Callable, bar: Progress) -> None:
    for killed in (False, True):
        if killed not in _EVIDENCE_REFERENCE:
            _EVIDENCE_REFERENCE[killed] = evidence_step_trial(write_evidence_once, killed=killed)
    shown = []
    for killed, story in ((False, "a clean run"), (True, f"a run killed at {EVIDENCE_STEP_KILL}, then recovered")):
        expected, mine = _EVIDENCE_REFERENCE[killed], evidence_step_trial(write_evidence, killed=killed)
        refuse_if_called(list(mine.handed_over))
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
                f"{ran}: the run should end with one evidence row, one move to evidence_recorded and a receipt, as labkit's "
                f"step leaves it; yours left step {mine.step}, {mine.evidence_rows} evidence row(s), transitions "
                f"{[f'{a}→{b}' for a, b in mine.transitions]}, receipt {mine.receipt}, workflow {mine.status}"
            )
        wrong = [value for value in mine.returned if value != repr(Step.EVIDENCE_RECORDED.value)]
        if wrong:
            raise AssertionError(f"{ran}: your step returned {wrong[0]}; return the step the run is at when it ends, "
                                 f"as a string: {Step.EVIDENCE_RECORDED.value!r}, the first time and on a replay")
        shown.append(f"{ran}: one evidence row, one move to evidence_recorded, receipt {mine.receipt}, workflow {mine.status}")
        bar.step()
    broken = evidence_step_trial(write_evidence, killed=True, broken_replay=True)
    if broken.status == "SUCCESS" or not broken.raised:
        raise AssertionError(
            "a run killed at after_evidence_commit, recovered while its database refused every statement (a real "
            f"error): your step returned {broken.returned[-1] if broken.returned else 'nothing'} and the workflow ended "
            f"{broken.status}. Catch only the case you expect, if any: a real error must leave the step, so that DBOS "
            "records it"
        )
    shown.append(f"a replay whose database fails for real: your step raised {broken.raised[-1].split(':')[0]}, "
                 f"workflow {broken.status}")
    bar.step()
    both = two_at_once(write_evidence)
    if len(both.calls) != 2:
        raise AssertionError(f"two executions of your step at once: {len(both.calls)} of the two calls ended "
                             f"(the children: {', '.join(both.ends)}); a step must return or raise")
    if any(call.startswith("raised ") for call in both.calls) or both.evidence_rows != 1 or both.moves != 1:
        first = next((call for call in both.calls if call.startswith("raised ")), None)
        raise AssertionError(
            "two executions of your step at once on one run (two processes recovering the same workflow): "
            + (f"one of them {first}" if first else f"they left {both.evidence_rows} evidence row(s), "
               f"{both.moves} move(s) to evidence_recorded")
            + ". Both looked before either wrote: look under the write lock, in the same transaction as the write (06)"
        )
    wrong = [call for call in both.calls if call != f"returned {Step.EVIDENCE_RECORDED.value!r}"]
    if wrong:
        raise AssertionError(f"two executions of your step at once: one {wrong[0]}; each should return the step the run "
                             "is at when it ends")
    shown.append("two executions at once: one evidence row, one move, both returned 'evidence_recorded'")
    for line in shown:
        print(f"✓ {line}, as with labkit's write_evidence_once")
