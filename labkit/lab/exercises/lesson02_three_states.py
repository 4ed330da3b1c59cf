"""Lesson 02 (02_three_states): the learner's compare-and-set UPDATE of one run, raced by two workers.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing

from ...steps import Step
from ...store import Run
from .runner import clear_trials, new_trial, one_line, source_of


@one_line
def check_compare_and_set(move: Callable) -> None:
    """``move(conn, run, to, at) -> bool``: the learner's compare-and-set UPDATE of one run.

    Two connections (two workers) read the same run. Worker A moves it; worker B, with
    what it read before, must be refused (False, nothing changed). Then an operator puts
    the run back to the step B read (as a repair or a migration might): B's stale write
    must still be refused, which only the state version can tell. The runs table here has
    no trigger, so the condition is tested alone, without the database's backstop.
    """
    clear_trials()
    source_of(move)  # a clear message for a non-function before anything runs
    trial = new_trial("02-exercise")
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
