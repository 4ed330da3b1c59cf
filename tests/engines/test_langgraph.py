"""The langgraph engine beyond the contract suite (tests/engines/test_engines.py runs that on it too).

A graph on LangGraph's SQLite checkpointer, each scenario a real forked child SIGKILLed inside a
node and resumed by thread id: a node that is not idempotent must turn its row of the crash table
red, the checkpointer must keep what lesson 14 says it keeps, and bad input must change nothing.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from contextlib import closing

import pytest

from labkit.crashpoints import CrashPlan, points
from labkit.engines import INCIDENT, engine
from labkit.engines.langgraph import CHECKPOINTS, LangGraphEngine, checkpoints_of, kill_inside_a_node
from labkit.errors import BadInput
from labkit.lab.explorer import Scenario, explore, in_child, run_scenario
from labkit.lab.ticket_service import ticket_service

RUN_POINTS = points(tickets=True)


def test_a_ticket_node_that_sends_under_a_fresh_key_turns_the_after_send_row_red(tmp_path):
    """The command a learner runs: only the kill after the send, whose node runs again, sends a second ticket."""
    done = subprocess.run([sys.executable, "-m", "labkit", "explore", "--db-dir", str(tmp_path / "explore"), "--engine", "langgraph",
                           "--bug", "ticket_key_per_attempt", "--singles"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:10]}
    assert list(rows) == ["before_read", "after_read", "before_evidence_commit", "after_evidence_commit", "before_receipt_write",
                          "before_completion_commit", "after_completion_commit", "before_send", "after_send"]
    red = {point for point, cells in rows.items() if "✗" in cells}
    assert red == {"after_send"}, done.stdout
    assert rows["after_send"][-3:] == ["1", "1", "2"]  # reads, receipts, tickets: the second ticket at the service
    assert "after_send: 8 at most one ticket per operation: INC-1003 has 2 tickets" in done.stdout


def test_an_evidence_node_that_writes_without_looking_never_completes_after_a_kill_past_its_commit(tmp_path):
    result = run_scenario(Scenario("run", ("after_evidence_commit",), "evidence_without_look", "langgraph"), tmp_path / "s")
    assert result.reached == (True,)
    assert set(result.broken) == {1, 2, 7}, result.broken  # not completed, no receipt, every resume stops again
    assert (result.receipts, result.tickets, result.completed) == (0, 0, False)
    assert result.final_recovery.startswith("failed: RunFailure: the last LangGraph resume ended exit 1"), result.final_recovery
    fixed = run_scenario(Scenario("run", ("after_evidence_commit",), None, "langgraph"), tmp_path / "fixed")
    assert fixed.broken == {} and (fixed.receipts, fixed.tickets) == (1, 1)


def test_a_kill_inside_a_node_leaves_the_checkpoint_before_it_and_that_node_runs_again(tmp_path):
    """What lesson 14 shows. Under durability "sync" every finished super-step is on disk before the next
    node starts (under "exit" the kill would leave no checkpoint at all, and the thread would start over)."""
    with ticket_service(tmp_path / "tickets.db") as url:
        evidence = kill_inside_a_node(tmp_path / "evidence", "after_evidence_commit", url)
        read = kill_inside_a_node(tmp_path / "read", "after_read", url)
    assert (evidence.killed, evidence.killed_in, evidence.runs_again) == (True, "record_evidence", ("record_evidence",))
    # the input, then the read node's super-step: the reading is kept, nothing of the killed node is
    assert [(row["step"], row["next"]) for row in evidence.kept] == [(-1, "__start__"), (0, "read_diagnostic"), (1, "record_evidence")]
    assert evidence.kept[-1]["kept"] == "diagnostic, incident, response"
    assert [row["next"] for row in evidence.after_resume][-4:] == ["record_evidence", "complete_report", "open_ticket", "(ended)"]
    assert evidence.after_resume[-1]["kept"] == "diagnostic, incident, receipt, response, step, ticket"
    # killed inside the read node after the provider answered: no reading kept, the read node runs again
    assert (read.killed, read.runs_again, read.kept[-1]["next"]) == (True, ("read_diagnostic",), "read_diagnostic")
    assert "response" not in read.kept[-1]["kept"]
    assert checkpoints_of(tmp_path / "read")[-1]["next"] == "(ended)"


def test_an_unknown_incident_is_refused_before_the_checkpointer_records_anything(tmp_path):
    end = in_child(lambda: LangGraphEngine().drive(tmp_path, CrashPlan(None), None, "INC-9999"))
    assert end.code == 1 and end.error.startswith("UnknownIncident") and "INC-9999" in end.error
    assert checkpoints_of(tmp_path, "INC-9999") == []
    with closing(sqlite3.connect(tmp_path / CHECKPOINTS)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0] == 0
    with closing(sqlite3.connect(tmp_path / "lab.db")) as conn:
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0


def test_a_business_database_that_is_not_labkits_is_refused_and_left_as_it_was(tmp_path):
    with closing(sqlite3.connect(tmp_path / "lab.db")) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
        conn.commit()
    before = (tmp_path / "lab.db").read_bytes()
    end = in_child(lambda: LangGraphEngine().drive(tmp_path, CrashPlan(None), None, INCIDENT))
    assert end.code == 1 and "NotALabDatabase" in end.error and "orders" in end.error
    assert (tmp_path / "lab.db").read_bytes() == before
    assert not (tmp_path / CHECKPOINTS).exists()


def test_bad_langgraph_options_are_refused_in_one_line(tmp_path):
    with pytest.raises(BadInput, match="--bug no_receipt_key: the langgraph engine's broken nodes are evidence_without_look, "
                                       "ticket_key_per_attempt"):
        engine("langgraph", bug="no_receipt_key")
    with pytest.raises(BadInput, match="for the dbos engine only"):
        engine("langgraph", system_url="sqlite:///x")
    cli = subprocess.run([sys.executable, "-m", "labkit", "explore", "--db-dir", str(tmp_path / "cli"), "--engine", "langgraph",
                          "--random", "2"], capture_output=True, text=True, timeout=60)
    assert (cli.returncode, cli.stdout) == (2, "")
    assert cli.stderr.startswith("labkit: error: --random: random kills judge a repeated read") and cli.stderr.count("\n") == 1
    assert not (tmp_path / "cli").exists()



@pytest.mark.skipif(not os.environ.get("LABKIT_SOAK"), reason="every pair on LangGraph takes about 15 s: make soak")
def test_every_pair_of_kills_on_langgraph_holds_every_invariant(tmp_path):
    exploration = explore(tmp_path / "pairs", engine="langgraph")
    assert len(exploration.results) == len(RUN_POINTS) * (1 + len(RUN_POINTS))
    assert [r.name for r in exploration.results if r.broken] == []
    second_reads = {r.name for r in exploration.results if r.provider_reads == 2}
    assert all("after_read" in name for name in second_reads) and "after_read" in second_reads
    print(f"\n{len(exploration.results)} LangGraph scenarios in {exploration.seconds:.1f} s, all held")
