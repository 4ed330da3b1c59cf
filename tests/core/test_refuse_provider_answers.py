"""Refused: provider answers and data files that the evidence contract does not accept.

What belongs here: the data folder (missing, an incident file that is a FIFO) and every answer
that is not evidence: not JSON, nested too deep, a field missing or of the wrong type, a
negative or non-JSON number, a huge integer, a lone surrogate, an impossible date, a trailing
newline, another incident's id, an instruction. Each is refused before evidence is recorded;
the provider's own log still shows the read. A provider that cannot answer at all is a
run-time failure: test_run_failures.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

import labkit
from labkit.provider import CallLog

KILLED = -signal.SIGKILL
INC = "INC-1001"
INC2 = "INC-1002"  # the incident of the tests that pinned the faults of issue 5

#: A command that should answer at once is given this long before it counts as hanging.
HANG_SECONDS = 10


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def cli_within(seconds: float, *args, env: dict[str, str] | None = None):
    """``python -m labkit ARGS``, failing the test (not hanging it) if it does not end in time."""
    try:
        return labkit.lab.labkit_cli(*(str(a) for a in args), env=env, timeout=seconds)
    except subprocess.TimeoutExpired:
        pytest.fail(f"python -m labkit {' '.join(map(str, args))} was still running after {seconds}s: it hangs")


def calls_in(log: Path) -> list[str]:
    return [call.incident for call in CallLog(log).calls()]


def test_a_missing_data_folder_is_refused(tmp_path, db, folder, cli_main, refused):
    empty = tmp_path / "empty-data"
    empty.mkdir()
    env = {"LABKIT_DATA_DIR": str(empty)}
    refused(cli_main("incidents", env=env), "empty-data")
    refused(cli_main("run", "--db", db, "--incident", INC, env=env), "empty-data")
    assert list(folder.iterdir()) == []


def test_fault2_a_fifo_as_an_incident_data_file_is_refused_without_hanging(db, data_copy, refused, query):
    """Before the fix: ``run`` blocks forever reading the FIFO inside its write transaction (timeout here)."""
    snapshot_file = data_copy / "incidents" / f"{INC2}.json"
    snapshot_file.unlink()
    os.mkfifo(snapshot_file)
    outcome = cli_within(HANG_SECONDS, "run", "--db", db, "--incident", INC2, env={"LABKIT_DATA_DIR": str(data_copy)})
    refused(outcome, "not a regular file")
    if db.exists():
        assert query(db, "SELECT COUNT(*) FROM evidence") == [(0,)]


def _snapshot_of(incident: str) -> dict:
    return json.loads((labkit.provider.DEFAULT_DATA_DIR / "incidents" / f"{incident}.json").read_text(encoding="utf-8"))


def _snapshot_with(edit):
    """A maker of a data file: the incident's real snapshot with one ``edit`` applied."""

    def make(incident):
        snapshot = _snapshot_of(incident)
        edit(snapshot)
        return json.dumps(snapshot)

    return make


_negative_ready = _snapshot_with(lambda s: s["queue"].update(messages_ready=-5))


_wrong_incident = _snapshot_with(lambda s: s.update(incident="INC-1002"))


_huge_queue_name = _snapshot_with(lambda s: s["queue"].update(name="q" * 20_000))


_snapshot_missing_consumers = _snapshot_with(lambda s: s["queue"].pop("consumers"))


_node_not_an_object = _snapshot_with(lambda s: s.update(node="rabbit@down"))


_string_consumers = _snapshot_with(lambda s: s["queue"].update(consumers="0"))


MALFORMED = {
    "not-json": (lambda incident: "{ this is not JSON", ["(response)", "not JSON"]),
    "negative-messages-ready": (_negative_ready, ["queue.messages_ready", "-5"]),
    "wrong-incident-id": (_wrong_incident, ["'incident'", "INC-1002"]),
    "oversized": (_huge_queue_name, ["(response)", "16384"]),
    "missing-field": (_snapshot_missing_consumers, ["queue.consumers", "missing"]),
    "node-not-an-object": (_node_not_an_object, ["'node'", "not of type 'object'"]),
    "string-for-a-count": (_string_consumers, ["queue.consumers"]),
}


@pytest.mark.parametrize(("make", "words"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_provider_response_changes_nothing(make, words, lab, data_copy, cli, cli_main, refused, snapshot):
    env = {"LABKIT_DATA_DIR": str(data_copy)}
    # the run exists and is waiting for its read: the crash at before_read reads nothing
    assert cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "before_read", env=env).returncode == KILLED
    (data_copy / "incidents" / f"{INC}.json").write_text(make(INC), encoding="utf-8")
    snapshot(lab.db)  # the first open after a kill folds the -wal file back in; compare from there
    before = snapshot(lab.db)
    assert before["provider_log"] is None

    line = refused(cli_main("run", "--db", lab.db, "--incident", INC, env=env), INC, "rejected", *words)
    after = snapshot(lab.db)
    assert after["rows"] == before["rows"], "a rejected response moved the checkpoint"
    assert after["files"] == before["files"] + [labkit.call_log_for(lab.db).name]
    # the provider did answer, and its own log says so: only the checkpoint refused it
    assert [(c.incident, c.outcome) for c in lab.log.calls()] == [(INC, "ok")]

    assert "Traceback" not in line


def test_an_instruction_inside_a_snapshot_does_not_steer_the_run(lab, data_copy, cli, status):
    """The provider builds its answer from the contract's fields only: a snapshot that says
    what the next step should be is not obeyed, and the words never reach the evidence."""
    env = {"LABKIT_DATA_DIR": str(data_copy)}
    hostile = _snapshot_of(INC)
    hostile["next_step"] = "report_completed"
    hostile["queue"]["step"] = "report_completed"
    (data_copy / "incidents" / f"{INC}.json").write_text(json.dumps(hostile), encoding="utf-8")
    assert cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "after_evidence_commit", env=env).returncode == KILLED
    with closing(lab.connect()) as conn:
        step, body = conn.execute(
            "SELECT runs.step, evidence.body FROM runs JOIN evidence USING (incident) WHERE incident = ?", (INC,)
        ).fetchone()
    assert step == "evidence_recorded"
    assert "next_step" not in body and '"step"' not in body


def test_recover_refuses_a_malformed_response_the_same_way(lab, data_copy, cli, cli_main, refused, snapshot):
    env = {"LABKIT_DATA_DIR": str(data_copy)}
    assert cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "after_read", env=env).returncode == KILLED
    (data_copy / "incidents" / f"{INC}.json").write_text(_negative_ready(INC), encoding="utf-8")
    snapshot(lab.db)
    before = snapshot(lab.db)
    refused(cli_main("recover", "--db", lab.db, env=env), INC, "rejected", "queue.messages_ready")
    assert snapshot(lab.db)["rows"] == before["rows"]
    assert lab.reads(INC) == 2


def test_a_snapshot_missing_a_field_is_reported_by_that_field(lab, data_copy, cli_main, refused, snapshot):
    """A queue snapshot without ``queue.consumers``: the one line should name what is missing,
    not an unrelated field of the raw snapshot."""
    env = {"LABKIT_DATA_DIR": str(data_copy)}
    broken = _snapshot_of(INC)
    del broken["queue"]["consumers"]
    (data_copy / "incidents" / f"{INC}.json").write_text(json.dumps(broken), encoding="utf-8")
    outcome = cli_main("run", "--db", lab.db, "--incident", INC, env=env)
    refused(outcome, INC, "consumers")


def test_a_malformed_response_on_a_new_database_records_no_evidence(lab, data_copy, cli_main, refused, status):
    """The run row is created (the request was accepted: not_inspected), but nothing past it."""
    env = {"LABKIT_DATA_DIR": str(data_copy)}
    (data_copy / "incidents" / f"{INC}.json").write_text("<html>502</html>", encoding="utf-8")
    refused(cli_main("run", "--db", lab.db, "--incident", INC, env=env), INC, "not JSON")
    runs = status(lab.db, env=env)["runs"]
    assert [(r["incident"], r["step"], r["evidence"], r["receipts"]) for r in runs] == [(INC, "not_inspected", False, 0)]


def _edit(data: Path, incident: str, old: str, new: str) -> None:
    path = data / "incidents" / f"{incident}.json"
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ('"orders.created"', '"orders\\ud800"', ["lone surrogate"]),
        ("2913402880", "9" * 5000, ["4300 digits"]),
        ('"2026-03-02T09:14:00Z"', '"2026-13-45T09:14:00Z"', ["observed_at", "not a real instant"]),
    ],
    ids=["lone-surrogate", "huge-integer", "impossible-date"],
)
def test_provider_data_that_json_accepts_but_labkit_cannot_hold_is_refused(old, new, words, lab, data_copy, cli_main, refused):
    _edit(data_copy, INC, old, new)
    refused(cli_main("run", "--db", lab.db, "--incident", INC, env={"LABKIT_DATA_DIR": str(data_copy)}), "rejected", *words)
    [answers] = [labkit.lab.lesson.restart_answers(lab.db, INC)]
    assert (answers.step, answers.evidence) == ("not_inspected", False)


def test_fault6_a_snapshot_nested_100000_deep_is_rejected_evidence_and_its_read_is_logged(db, data_copy, cli_main, refused, query):
    """Before the fix: a RecursionError traceback, and the provider's log has no call for the read."""
    (data_copy / "incidents" / f"{INC2}.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    refused(cli_main("run", "--db", db, "--incident", INC2, env={"LABKIT_DATA_DIR": str(data_copy)}), "rejected")
    assert calls_in(labkit.call_log_for(db)).count(INC2) == 1, "the provider served the read: its log must show it"
    if db.exists():
        assert query(db, "SELECT COUNT(*) FROM evidence") == [(0,)]


def test_a_huge_incident_file_is_refused_by_its_size_without_being_read_into_memory(db, data_copy):
    """Before the fix: a 300 MB (sparse) file was read whole, and then parsed, before the raw
    diagnostic's 1 MiB limit refused it: about 640 MB of memory for a one-line refusal."""
    huge = data_copy / "incidents" / f"{INC2}.json"
    size = 300 * 1024 * 1024
    with open(huge, "r+b") as handle:
        handle.truncate(size)  # sparse: no disk is used, but every byte reads as NUL
    # The child's peak memory, measured by a parent of its own (RUSAGE_CHILDREN of this test
    # process would include every other child it has started).
    measure = (
        "import resource, subprocess, sys; "
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
        "print(done.returncode); print(done.stderr.strip()); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    env = {**labkit.lab.processes.child_env(), "LABKIT_DATA_DIR": str(data_copy)}
    done = subprocess.run([sys.executable, "-c", measure, sys.executable, "-m", "labkit", "run", "--db",
                           str(db), "--incident", INC2], capture_output=True, text=True, env=env, timeout=120)
    code, stderr, peak_kib = done.stdout.splitlines()
    assert code == "2", stderr
    assert f"{size} bytes, over the 1048576-byte limit for a raw diagnostic" in stderr
    assert int(peak_kib) < 200 * 1024, f"the refusal cost {int(peak_kib) // 1024} MB of memory"
    assert calls_in(labkit.call_log_for(db)).count(INC2) == 1, "the provider was asked: its log must show it"


@pytest.mark.parametrize("token", ["NaN", "Infinity"])
def test_fault8_a_non_json_rate_is_refused_and_nothing_is_recorded(token, db, data_copy, cli_main, refused, query):
    """Before the fix: exit 0, the rate stored as a non-JSON token in the evidence."""
    path = data_copy / "incidents" / f"{INC2}.json"
    snapshot = json.loads(path.read_text(encoding="utf-8"))
    snapshot["queue"]["message_stats"]["publish_details"]["rate"] = 987654.321
    text = json.dumps(snapshot, indent=2)
    assert text.count("987654.321") == 1
    path.write_text(text.replace("987654.321", token), encoding="utf-8")

    refused(cli_main("run", "--db", db, "--incident", INC2, env={"LABKIT_DATA_DIR": str(data_copy)}), token)

    assert query(db, "SELECT step FROM runs WHERE incident = ?", (INC2,)) == [("not_inspected",)]
    assert query(db, "SELECT COUNT(*) FROM evidence") == [(0,)]


@pytest.fixture
def valid_response(tmp_path) -> dict:
    raw = labkit.ReferenceProvider(tmp_path / "scratch.provider-calls.jsonl").read(INC2)
    body = json.loads(raw)
    assert labkit.check_evidence(json.dumps(body), INC2) == body  # the unaltered answer passes
    return body


def test_fault8_an_observed_at_ending_in_a_newline_is_rejected(valid_response):
    """Before the fix: accepted (``$`` in a Python regex matches before a final newline)."""
    valid_response["observed_at"] = "2026-03-02T09:00:00Z\n"
    with pytest.raises(labkit.errors.EvidenceRejected) as caught:
        labkit.check_evidence(json.dumps(valid_response), INC2)
    assert caught.value.field == "observed_at"


@pytest.mark.parametrize("asked", [INC2, INC2 + "\n"], ids=["asked-plain", "asked-with-newline"])
def test_fault8_an_incident_ending_in_a_newline_is_rejected(asked, valid_response):
    """Asked for the same id with the newline, only the pattern can refuse it.

    Before the fix: the asked-with-newline case is accepted; asked-plain already passed.
    """
    valid_response["incident"] = INC2 + "\n"
    with pytest.raises(labkit.errors.EvidenceRejected) as caught:
        labkit.check_evidence(json.dumps(valid_response), asked)
    assert caught.value.field == "incident"
