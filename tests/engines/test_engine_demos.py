"""The demonstrations 14_choosing_an_engine calls (labkit.lab.engine_demos), on the engines' real machinery.

A Temporal dev server on 127.0.0.1 with its own SQLite file, DBOS on SQLite files under
``tmp_path``, forked children SIGKILLed: each test checks what a learner would see, and each
has a counter-case that gives a different answer, so the test can fail.
"""

from __future__ import annotations

import os

import pytest

from labkit.engines.temporal import ADDRESS_ENV
from labkit.lab.engine_demos import late_result_refused
from labkit.lab.temporal_server import TemporalServer


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A dev server for this module, named in ADDRESS_ENV so that forked workers find it (as tests/engines/test_temporal.py does)."""
    before = os.environ.get(ADDRESS_ENV)
    with TemporalServer(tmp_path_factory.mktemp("temporal") / "temporal.sqlite") as started:
        os.environ[ADDRESS_ENV] = started.address
        try:
            yield started
        finally:
            if before is None:
                del os.environ[ADDRESS_ENV]
            else:
                os.environ[ADDRESS_ENV] = before


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


def test_the_same_attempt_completed_within_its_timeout_is_accepted(server, tmp_path):
    """The counter-case: the refusal above is about lateness, not about completing by token from outside the worker."""
    seen = late_result_refused(tmp_path, server.address, in_time=True)
    assert (seen.late_attempt, seen.late) == (1, "accepted")
    assert seen.result_attempt == 1 and seen.started == (1,)
    assert seen.lines()[0] == "attempt 1 completed within its timeout: accepted"
    again = late_result_refused(tmp_path, server.address)  # the same folder and server again: a workflow of its own
    assert (again.late, again.fresh, again.result_attempt) == ("NOT_FOUND", "accepted", 2)
