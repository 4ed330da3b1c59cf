"""The langgraph engine beyond the contract suite (tests/engines/test_engines.py runs that on it too).

A graph on LangGraph's SQLite checkpointer, each scenario a real forked child SIGKILLed inside a
node and resumed by thread id: a node that is not idempotent must turn its row of the crash table
red, the checkpointer must keep what lesson 14 says it keeps, and bad input must change nothing.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from contextlib import closing

import pytest

from labkit.crashpoints import CrashPlan
from labkit.engines import INCIDENT, engine
from labkit.engines.langgraph import CHECKPOINTS, LangGraphEngine
from labkit.errors import BadInput
from labkit.lab.explorer import in_child


def test_an_unknown_incident_is_refused_before_the_checkpointer_records_anything(tmp_path):
    end = in_child(lambda: LangGraphEngine().drive(tmp_path, CrashPlan(None), None, "INC-9999"))
    assert end.code == 1 and end.error.startswith("UnknownIncident") and "INC-9999" in end.error
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

