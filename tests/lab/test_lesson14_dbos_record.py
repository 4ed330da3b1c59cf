"""14_choosing_an_engine's claim about DBOS's own record: a refused answer is the read step's error, never its output.

The DBOS read step checks the evidence contract before it returns, so DBOS records the refusal
as ``read_diagnostic``'s error and never runs ``record_evidence``. Were the check left to the
evidence step, the business rows would look the same (that step refuses too); only DBOS's
record would differ, with the refused answer kept as the read's output. The lesson shows
the record; this test holds it without the notebook.
"""

from __future__ import annotations

import os

import pytest

from labkit.children import in_child
from labkit.engines.dbos import IncidentApp, workflows_of
from labkit.provider import ReferenceProvider, call_log_for

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="DBOS runs in a forked child")


class AnswersAnotherIncident(ReferenceProvider):
    def read_with_diagnostic(self, incident):
        return super().read_with_diagnostic("INC-1001")


def test_a_refused_answer_is_recorded_as_the_read_steps_error_and_the_evidence_step_never_runs(tmp_path):
    provider = AnswersAnotherIncident(call_log_for(tmp_path / "lab.db"))

    def run() -> None:
        app = IncidentApp(tmp_path, provider=provider)
        try:
            app.run("INC-1003")
        finally:
            app.close()

    end = in_child(run, output=(tmp_path / "out", tmp_path / "err"))
    assert str(end).startswith("exit 1 (EvidenceRejected: evidence for 'INC-1003' rejected by rule same-incident")
    [workflow] = workflows_of(tmp_path)
    assert workflow["status"] == "ERROR"
    assert workflow["outcomes"] == ["start_run: output", "read_diagnostic: error EvidenceRejected"]


def test_a_clean_run_records_an_output_for_every_step(tmp_path):
    def run() -> None:
        app = IncidentApp(tmp_path)
        try:
            app.run("INC-1003")
        finally:
            app.close()

    assert str(in_child(run, output=(tmp_path / "out", tmp_path / "err"))) == "exit 0"
    [workflow] = workflows_of(tmp_path)
    assert workflow["outcomes"] == [f"{step}: output" for step in
                                    ("start_run", "read_diagnostic", "record_evidence", "complete_report")]


def test_the_workflow_id_is_the_incident_so_starting_it_twice_joins_the_first(tmp_path):
    def run() -> None:
        app = IncidentApp(tmp_path)
        try:
            app.run("INC-1003")
        finally:
            app.close()

    for _ in range(2):
        assert str(in_child(run, output=(tmp_path / "out", tmp_path / "err"))) == "exit 0"
    assert [(w["workflow_id"], w["status"]) for w in workflows_of(tmp_path)] == [("INC-1003", "SUCCESS")]
