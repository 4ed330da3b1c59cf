"""The temporal engine on a real Temporal dev server (127.0.0.1, its own SQLite file), beyond the contract suite.

One server per test module (a start takes a second or two); each test keeps to folders of its
own, which are task queues and workflow ids of their own on it. Every worker is a forked child,
SIGKILLed at a crash point and started again; nothing here stands in for the server or the SDK.
"""

from __future__ import annotations

import socket
import sqlite3
from contextlib import closing

import pytest

from labkit import evaluation
from labkit.crashpoints import NO_CRASH, CrashPlan, CrashPoint
from labkit.engines import INCIDENT, engine
from labkit.engines.temporal import ADDRESS_ENV, NoTemporalServer, TemporalEngine, history_of, replay
from labkit.errors import BadInput
from labkit.lab.explorer import Scenario, explore, in_child, run_scenario
from labkit.lab.temporal_server import TemporalServer
from labkit.lab.ticket_service import ticket_service
from labkit.provider import CallLog, ReferenceProvider, call_log_for


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_the_dev_server_listens_on_loopback_with_its_own_file_and_stops(tmp_path):
    with TemporalServer(tmp_path / "own.sqlite") as started:
        host, port = started.address.rsplit(":", 1)
        assert host == "127.0.0.1" and _listening(int(port))
        assert (tmp_path / "own.sqlite").stat().st_size > 0  # the server's state, in the file it was given
        assert 0 < started.start_seconds < 30
    assert not started.running and not _listening(int(port))


def test_a_read_activity_killed_after_the_answer_runs_again_and_the_providers_log_shows_it(temporal_server, tmp_path):
    """The history keeps the read's result once, from its second attempt; the provider was asked twice."""
    killed = in_child(lambda: engine("temporal").drive(tmp_path, CrashPlan(CrashPoint.AFTER_READ), None))
    assert killed.killed
    assert CallLog(call_log_for(tmp_path / "lab.db")).reads_of(INCIDENT) == 1
    recovered = in_child(lambda: print(engine("temporal").recover(tmp_path, NO_CRASH, None)),
                         output=(tmp_path / "recover.out", tmp_path / "recover.err"))
    assert recovered.code == 0, (tmp_path / "recover.err").read_text()[-400:]
    assert (tmp_path / "recover.out").read_text().strip() == "1"
    assert CallLog(call_log_for(tmp_path / "lab.db")).reads_of(INCIDENT) == 2
    assert CrashPoint.AFTER_READ in engine("temporal").read_window
    events = history_of(temporal_server.address, tmp_path)
    started = [e for e in events if e["type"] == "activity_task_started" and e["activity"] == "read_diagnostic"]
    assert [e["attempt"] for e in started] == [2]  # the first attempt died with its worker: no result recorded
    completed = [e["activity"] for e in events if e["type"] == "activity_task_completed"]
    assert completed == ["start_run", "read_diagnostic", "record_evidence", "complete_report"]
    assert events[-1]["type"] == "workflow_execution_completed"


def test_a_ticket_activity_keyed_by_attempt_turns_its_row_red(temporal_server, tmp_path):
    """The deliberately broken activity: killed after the send, its retry opens a second ticket, and invariant 8 says so."""
    broken = run_scenario(Scenario("run", ("after_send",), "ticket_key_per_attempt", "temporal"), tmp_path / "broken")
    assert broken.reached == (True,)
    assert broken.tickets == 2 and set(broken.broken) == {8}, broken.broken
    assert "2 tickets" in broken.broken[8]  # the same kill with the key from the activity's identity: test_engines.py, 1 ticket


def test_both_scorecards_read_a_temporal_run_as_they_read_a_labkit_one(temporal_server, tmp_path):
    incidents = ReferenceProvider(tmp_path / "probe.log").incidents()[:4]
    scores = {}
    for name in ("labkit", "temporal"):
        folder = tmp_path / name
        folder.mkdir()
        driver = engine(name)
        with ticket_service(folder / "tickets.db") as url:
            end = in_child(lambda: [driver.drive(folder, NO_CRASH, url, incident) for incident in incidents],  # noqa: B023
                           output=(folder / "out", folder / "err"))
            assert end.code == 0, (folder / "err").read_text()[-400:]
        scores[name] = evaluation.evaluate(folder / "lab.db", ticket_store=folder / "tickets.db").as_json()
    assert scores["temporal"] == scores["labkit"]
    assert scores["temporal"]["recovery"]["completed"] == len(incidents)


def test_an_unknown_incident_is_refused_before_the_server_records_anything(temporal_server, tmp_path):
    end = in_child(lambda: engine("temporal").drive(tmp_path, NO_CRASH, None, "INC-9999"))
    assert end.code == 1 and "UnknownIncident" in end.error and "INC-9999" in end.error
    with closing(sqlite3.connect(tmp_path / "lab.db")) as conn:
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0
    with pytest.raises(RuntimeError, match="reading the history ended exit 1"):
        history_of(temporal_server.address, tmp_path, "INC-9999")  # no such workflow on the server


def test_bad_temporal_options_are_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv(ADDRESS_ENV, raising=False)
    with pytest.raises(BadInput, match="the temporal engine breaks only ticket_key_per_attempt"):
        engine("temporal", bug="no_receipt_key")
    with pytest.raises(NoTemporalServer, match=f"give its address .* or set {ADDRESS_ENV}"):
        TemporalEngine().server()
    with pytest.raises(BadInput, match="--random: random kills judge"):
        explore(tmp_path / "random", engine="temporal", random_trials=2)
    assert not (tmp_path / "random").exists()


def test_the_history_outlives_the_server_in_its_sqlite_file(tmp_path):
    """A worker killed after the read, the server stopped and started again on its file (on another port): the run finishes."""
    work = tmp_path / "run"
    work.mkdir()
    with TemporalServer(tmp_path / "kept.sqlite") as first:
        killed = in_child(lambda: TemporalEngine(first.address).drive(work, CrashPlan(CrashPoint.AFTER_READ), None))
        assert killed.killed
    with TemporalServer(tmp_path / "kept.sqlite") as again:
        end = in_child(lambda: print(TemporalEngine(again.address).recover(work, NO_CRASH, None)),
                       output=(work / "out", work / "err"))
        assert end.code == 0, (work / "err").read_text()[-400:]
        assert (work / "out").read_text().strip() == "1"  # the workflow the first server recorded, resumed
        assert history_of(again.address, work)[-1]["type"] == "workflow_execution_completed"
    assert CallLog(call_log_for(work / "lab.db")).reads_of(INCIDENT) == 2


def test_a_recorded_history_refuses_an_unguarded_change_and_replays_under_a_patch(temporal_server, tmp_path):
    """The counterpart of 08's versioning: an activity added before the read breaks the replay of a recorded run."""
    end = in_child(lambda: engine("temporal").drive(tmp_path, NO_CRASH, None))
    assert end.code == 0, end
    assert replay(temporal_server.address, tmp_path, "current") == "replayed"
    refused = replay(temporal_server.address, tmp_path, "paging")
    assert refused.startswith("NondeterminismError") and "page_oncall" in refused and "read_diagnostic" in refused, refused
    assert replay(temporal_server.address, tmp_path, "paging-patched") == "replayed"
