"""The read adapter and its own call log: the outside world's memory of what was asked."""

from __future__ import annotations

import json
import os

import pytest

import labkit
from labkit.provider import CallLog, data_dir, list_incidents

INC = "INC-1005"


def test_the_call_log_sits_beside_the_database(db):
    assert labkit.call_log_for(db) == db.parent / "lab.db.provider-calls.jsonl"


def test_every_read_is_logged_before_it_is_returned(lab, provider):
    first = provider.read(INC)
    second = provider.read(INC)
    assert first == second, "the reference provider is deterministic"
    calls = lab.log.calls()
    assert [(c.call, c.incident, c.outcome, c.response_bytes) for c in calls] == [
        (1, INC, "ok", len(first)),
        (2, INC, "ok", len(second)),
    ]
    lines = lab.call_log.read_text(encoding="utf-8").splitlines()
    assert all(json.loads(line)["incident"] == INC for line in lines)


def test_the_log_is_kept_across_provider_instances(lab):
    lab.provider().read(INC)
    lab.provider().read("INC-1006")
    assert [c.incident for c in CallLog(lab.call_log).calls()] == [INC, "INC-1006"]
    assert lab.reads(INC) == 1 and lab.reads("INC-1006") == 1 and lab.reads("INC-1001") == 0


def test_an_unknown_incident_is_refused_and_not_logged(lab, provider):
    with pytest.raises(labkit.UnknownIncident) as caught:
        provider.read("INC-0000")
    assert caught.value.incident == "INC-0000"
    assert not lab.call_log.exists()


def test_an_unreadable_incident_is_logged_as_unavailable(lab, data_copy):
    target = data_copy / "incidents" / f"{INC}.json"
    target.unlink()
    os.symlink(data_copy / "gone.json", target)
    with pytest.raises(labkit.ProviderUnavailable) as caught:
        lab.provider(data_copy).read(INC)
    assert caught.value.incident == INC
    assert [(c.incident, c.outcome, c.response_bytes) for c in lab.log.calls()] == [(INC, "unavailable", 0)]


def test_a_snapshot_it_cannot_understand_is_passed_through(lab, data_copy):
    """The provider does not judge; the contract does."""
    (data_copy / "incidents" / f"{INC}.json").write_bytes(b"<html>oops</html>")
    assert lab.provider(data_copy).read(INC) == b"<html>oops</html>"


def test_the_data_dir_can_be_moved_by_environment(monkeypatch, data_copy):
    monkeypatch.setenv("LABKIT_DATA_DIR", str(data_copy))
    assert data_dir() == data_copy
    (data_copy / "incidents" / "INC-1014.json").unlink()
    assert "INC-1014" not in list_incidents()


def test_a_missing_data_folder_is_named(tmp_path):
    with pytest.raises(labkit.DataFolderMissing) as caught:
        list_incidents(tmp_path / "nothing-here")
    assert "nothing-here" in str(caught.value)


def test_start_refuses_an_unknown_incident_and_writes_nothing(lab, conn):
    before = labkit.store.snapshot(conn)
    with pytest.raises(labkit.UnknownIncident):
        lab.coordinator(conn).start("INC-4242")
    assert labkit.store.snapshot(conn) == before


def test_complete_before_inspect_is_a_step_order_error(lab, conn):
    coordinator = lab.coordinator(conn)
    coordinator.start(INC)
    before = labkit.store.snapshot(conn)
    with pytest.raises(labkit.StepOrderError) as caught:
        coordinator.complete(INC)
    assert (caught.value.incident, caught.value.step, caught.value.wanted) == (INC, "not_inspected", "complete")
    assert labkit.store.snapshot(conn) == before


def test_inspect_of_a_run_that_was_never_started_is_refused(lab, conn):
    with pytest.raises(labkit.UnknownRun):
        lab.coordinator(conn).inspect(INC)
    assert not lab.call_log.exists(), "no read for a run that does not exist"
