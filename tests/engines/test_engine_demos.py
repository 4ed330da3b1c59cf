"""The demonstrations 14_choosing_an_engine calls (labkit.lab.engine_demos), on the engines' real machinery.

A Temporal dev server on 127.0.0.1 with its own SQLite file, DBOS on SQLite files under
``tmp_path``, forked children SIGKILLed: each test checks what a learner would see, and each
has a counter-case that gives a different answer, so the test can fail.
"""

from __future__ import annotations

import pytest

from labkit.crashpoints import UnknownCrashPoint
from labkit.engines import UnknownEngine
from labkit.errors import BadInput
from labkit.lab.engine_demos import (
    PLAIN_STEP,
    TRANSACTION,
    datasource_transaction,
    late_result_refused,
    scorecard_table,
    scorecards,
)


def test_a_timed_out_attempts_late_result_is_refused_by_the_service_and_the_fresh_one_accepted(tmp_path):
    """On a server of its own: attempt 1 completed after its timeout is refused (NOT_FOUND); attempt 2's answer is the result."""
    seen = late_result_refused(tmp_path)
    assert (seen.late_attempt, seen.late) == (1, "NOT_FOUND")
    assert (seen.fresh_attempt, seen.fresh) == (2, "accepted")
    assert seen.result == "answer of attempt 2" and seen.result_attempt == 2
    # The history keeps only the attempt that ended the activity: the timed-out one left no event.
    assert seen.started == (2,) and seen.timed_out == 0
    assert seen.lines() == [
        "attempt 1 completed after the server timed it out: NOT_FOUND",
        "attempt 2 completed while current: accepted",
        "workflow result: 'answer of attempt 2' (from attempt 2)",
        "history: 1 ActivityTaskStarted (attempt 2), 0 ActivityTaskTimedOut",
    ]


def test_the_same_attempt_completed_within_its_timeout_is_accepted(temporal_server, tmp_path):
    """The counter-case: the refusal above is about lateness, not about completing by token from outside the worker."""
    seen = late_result_refused(tmp_path, temporal_server.address, in_time=True)
    assert (seen.late_attempt, seen.late) == (1, "accepted")
    assert seen.result_attempt == 1 and seen.started == (1,)
    assert seen.lines()[0] == "attempt 1 completed within its timeout: accepted"
    again = late_result_refused(tmp_path, temporal_server.address)  # the same folder and server again: a workflow of its own
    assert (again.late, again.fresh, again.result_attempt) == ("NOT_FOUND", "accepted", 2)


def test_a_datasource_transaction_killed_after_its_commit_is_not_run_again_and_a_plain_step_is(tmp_path):
    """DBOS's G1: the row and the step's record in one commit; a plain step's record comes after, and a kill between costs a rerun."""
    demo = datasource_transaction(tmp_path)
    plain, transaction = demo.cases
    assert (plain.kind, transaction.kind) == (PLAIN_STEP, TRANSACTION)
    # The plain step ran twice and left two rows; DBOS recorded the second run's output.
    assert (plain.body_ran, plain.business_rows, plain.app_records, plain.system_records) == (2, 2, 0, 0)
    assert plain.recorded == "'wrote row 2'"
    # The transaction ran once: its record was in the business database beside the row when the process died.
    assert (transaction.body_ran, transaction.business_rows, transaction.app_records, transaction.system_records) == (1, 1, 1, 0)
    assert transaction.recorded == "'wrote row 1'"
    assert plain.status == transaction.status == "SUCCESS"
    assert demo.lines() == [
        "step                    killed after commit  body ran  business rows  app db record (1st)  system db record (1st)"
        "  DBOS output    status",
        "plain @DBOS.step        yes                  2         2              0                    0"
        "                       'wrote row 2'  SUCCESS",
        "datasource transaction  yes                  1         1              1                    0"
        "                       'wrote row 1'  SUCCESS",
    ]
    assert list(demo.frame().columns)[:4] == ["step", "killed after commit", "body ran", "business rows"]


def test_without_the_kill_both_ways_write_once(tmp_path):
    """The counter-case: the plain step's second row above comes from the kill, not from the way it writes."""
    plain, transaction = datasource_transaction(tmp_path, killed=False).cases
    assert (plain.body_ran, plain.business_rows, plain.recorded) == (1, 1, "'wrote row 1'")
    assert (transaction.body_ran, transaction.business_rows, transaction.recorded) == (1, 1, "'wrote row 1'")
    assert transaction.app_records == 0  # DBOS deletes a finished workflow's datasource records


#: What every correct engine's card says of the sixteen lab incidents, each driven to its end.
SIXTEEN = {"runs": 16, "completed": 16, "correct": 14, "scored": 16, "duplicate receipts": 0, "duplicate tickets": 0,
           "rereads": 0, "uncertain": 0}


def test_all_four_engines_give_the_same_scorecards_on_the_sixteen_incidents(temporal_server, tmp_path):
    """"Evaluated the same way", measured: both scorecards of every incident, one card per engine, all equal."""
    table = scorecard_table(tmp_path)
    assert [card.engine for card in table.cards] == ["labkit", "dbos", "temporal", "langgraph"]
    for card in table.cards:
        assert card.compared() == SIXTEEN, card.engine
    assert table.same()
    first = table.cards[0].evaluation.as_json()
    assert all(card.evaluation.as_json() == first for card in table.cards)  # the same wrong diagnoses too
    assert table.lines()[0].split("  ")[0] == "engine"
    assert table.lines()[3].startswith("temporal   -          16    16         14       16      0")
    assert set(table.seconds()) == {"labkit", "dbos", "temporal", "langgraph"}


def test_a_ticket_keyed_per_attempt_killed_after_the_send_gives_a_different_card(tmp_path):
    """The cards can differ: the broken ticket node, killed after its send, opens a second ticket; the same kill
    on the correct node leaves the card as every engine's."""
    broken = scorecards("langgraph", tmp_path / "broken", bug="ticket_key_per_attempt", crash_at="after_send")
    assert broken.compared() == {**SIXTEEN, "duplicate tickets": 1}
    assert broken.summary()["engine"] == "langgraph (ticket_key_per_attempt)" and broken.summary()["killed at"] == "after_send"
    killed = scorecards("langgraph", tmp_path / "killed", crash_at="after_send")
    assert killed.compared() == SIXTEEN


def test_bad_scorecard_options_are_refused_in_one_line_before_anything_is_made(tmp_path):
    with pytest.raises(UnknownEngine, match="unknown engine 'airflow'"):
        scorecards("airflow", tmp_path / "a")
    with pytest.raises(BadInput, match="the dbos engine has none to break"):
        scorecards("dbos", tmp_path / "b", bug="ticket_key_per_attempt")
    with pytest.raises(UnknownCrashPoint):
        scorecards("labkit", tmp_path / "c", crash_at="after_lunch")
    assert not any((tmp_path / name).exists() for name in "abc")
    used = tmp_path / "used"
    used.mkdir()
    (used / "lab.db").write_bytes(b"")
    with pytest.raises(BadInput, match="already holds a lab.db"):
        scorecards("labkit", used)
    assert (used / "lab.db").read_bytes() == b"" and sorted(p.name for p in used.iterdir()) == ["lab.db"]
