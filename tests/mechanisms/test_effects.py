"""External effects against the real ticket service and the real command line (09_external_effects).

Every case has its own checkpoint database and its own ticket service: a child process on
127.0.0.1 (``labkit.lab.ticket_service.TicketService``) keeping its own SQLite store in a folder of its
own. The workflow is always driven through ``python -m labkit run|recover --tickets URL``. For
every fault mode and every crash point around the send, the tests check:

- at most one ticket per operation key and per incident at the destination;
- no effect is marked done unless the destination holds its ticket (under its key);
- an outcome nobody can know is listed as uncertain (``effects --json``) and never retried
  blindly; ``resolve`` records a person's decision, and refuses an effect that is not uncertain;
- a second recovery changes nothing (rows, provider log, tickets), and
  ``labkit.check_invariants(..., effects=Tickets(URL))`` holds all nine.

Each case prints one ``TABLE|`` line (``pytest -s``): fault or crash point x tickets at the
destination x effect state after recovery.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import labkit
from labkit.effects import Tickets
from labkit.lab.processes import child_env
from labkit.lab.ticket_service import DROP, FAIL, NO_IDEMPOTENCY, SLOW, TicketService

INC = "INC-1003"
KILLED = -signal.SIGKILL
OPERATION = labkit.effects.operation_key(INC, labkit.WORKFLOW_VERSION)


# --------------------------------------------------------------------------- fixtures and helpers


@pytest.fixture
def services(tmp_path: Path):
    """Start ticket services on stores outside the lab's folder; every one is stopped afterwards."""
    started: list[TicketService] = []
    (tmp_path / "service").mkdir()

    def start(fault: str | None = None, times: int | None = None, delay: float | None = None) -> TicketService:
        service = TicketService(tmp_path / "service" / f"tickets{len(started)}.db", fault=fault, fault_times=times, fault_delay=delay)
        started.append(service)
        return service.start()

    yield start
    for service in started:
        service.stop()


def run(cli, lab, service: TicketService, *extra: str):
    return cli("run", "--db", lab.db, "--incident", INC, "--tickets", service.url, *extra)


def recover(cli, lab, service: TicketService):
    return cli("recover", "--db", lab.db, "--tickets", service.url)


def effect_of(status, lab) -> dict:
    [only] = status(lab.db)["runs"]
    assert only["step"] == "report_completed" and only["receipts"] == 1 and only["provider_reads"] == 1
    return only["effect"]


def listed(cli, lab) -> list[dict]:
    """``effects --json``: the effects a person may have to look at (intended or uncertain)."""
    done = cli("effects", "--db", lab.db, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["effects"]


def held(service: TicketService, effect: dict | None = None) -> list[dict]:
    """The destination's tickets, checked: at most one per key and per incident; a done effect's
    ticket is held, under the effect's key (or under none, where the service keeps no keys)."""
    tickets = service.tickets()
    keys = [t["key"] for t in tickets if t["key"] is not None]
    incidents = [t["incident"] for t in tickets]
    assert len(keys) == len(set(keys)), f"two tickets under one key: {tickets}"
    assert len(incidents) == len(set(incidents)), f"two tickets for one incident: {tickets}"
    if effect is not None and effect["state"] == "done":
        by_id = {t["ticket"]: t for t in tickets}
        assert effect["ticket"] in by_id, f"done as {effect['ticket']}, which the destination does not hold"
        assert by_id[effect["ticket"]]["key"] in (effect["operation_key"], None)
    return tickets


def assert_all_nine(lab, service: TicketService) -> None:
    results = labkit.check_invariants(lab.db, lab.call_log, {INC: 1}, lab.provider(), effects=Tickets(service.url))
    assert [r.number for r in results] == list(range(1, 10))
    assert [f"{r.number} {r.statement}: {r.detail}" for r in results if not r.held] == []


def assert_recovering_again_changes_nothing(cli, lab, service: TicketService, snapshot) -> None:
    before = (snapshot(lab.db), service.tickets(), service.store_rows())
    again = recover(cli, lab, service)
    assert again.returncode == 0, again.stderr
    assert (snapshot(lab.db), service.tickets(), service.store_rows()) == before


def assert_unknown_outcome(outcome, refused) -> None:
    """Exit 1, one stderr line: the outcome is unknown and was recorded as uncertain."""
    assert "report_completed" in outcome.stdout  # the local work is done and committed
    refused(outcome, "may or may not exist", "recorded as uncertain", code=1)


def table(case: str, tickets: int, state: str) -> None:
    print(f"TABLE| {case:<44} | {tickets} | {state}")


# =========================================================================== every fault mode


#: fault, --fault-times, the state the run leaves, the tickets it leaves at the destination
FAULTS = [
    pytest.param(SLOW, None, "uncertain", 1, id="slow-after-commit"),
    pytest.param(SLOW, 1, "uncertain", 1, id="slow-after-commit-x1"),
    pytest.param(DROP, None, "uncertain", 1, id="drop-after-commit"),
    pytest.param(DROP, 1, "uncertain", 1, id="drop-after-commit-x1"),
    pytest.param(NO_IDEMPOTENCY, None, "done", 1, id="no-idempotency"),
]


@pytest.mark.parametrize(("fault", "times", "after_run", "tickets_after_run"), FAULTS)
def test_a_fault_mode_ends_with_one_ticket_and_the_effect_done(fault, times, after_run, tickets_after_run, lab, cli, status,
                                                              refused, snapshot, services):
    service = services(fault, times)
    first = run(cli, lab, service)
    if after_run == "uncertain":
        assert_unknown_outcome(first, refused)
        [entry] = listed(cli, lab)
        assert (entry["state"], entry["operation_key"], entry["ticket"], entry["attempts"]) == ("uncertain", OPERATION, None, 1)
    else:
        assert first.returncode == 0, first.stderr
        assert listed(cli, lab) == []
    effect = effect_of(status, lab)
    assert effect["state"] == after_run
    assert len(held(service, effect)) == tickets_after_run  # the request committed, whatever the client heard

    if times is not None:
        # A one-time fault comes back with a restart (its count lives in the process). Recovery
        # only asks by key, so the re-armed fault never fires: had it sent again, slow would
        # time out and drop would drop.
        service.restart()
    recovered = recover(cli, lab, service)
    assert recovered.returncode == 0, recovered.stderr
    effect = effect_of(status, lab)
    [ticket] = held(service, effect)
    assert effect == {"state": "done", "operation_key": OPERATION, "ticket": ticket["ticket"]}
    assert ticket["key"] == (None if fault == NO_IDEMPOTENCY else OPERATION)
    if after_run == "uncertain":
        assert f"ticket {ticket['ticket']}" in recovered.stdout
    assert listed(cli, lab) == []
    assert_recovering_again_changes_nothing(cli, lab, service, snapshot)
    assert_all_nine(lab, service)
    table(f"{fault}{' --fault-times 1' if times else ''}", len(service.tickets()), effect["state"])


def test_fail_before_commit_once_leaves_the_effect_intended_and_a_later_run_opens_it(lab, cli, status, refused, snapshot, services):
    service = services(FAIL, 1)
    failed = run(cli, lab, service)
    assert "report_completed" in failed.stdout
    refused(failed, "was not opened", code=1)
    effect = effect_of(status, lab)
    assert effect == {"state": "intended", "operation_key": OPERATION, "ticket": None}
    assert [e["state"] for e in listed(cli, lab)] == ["intended"]  # owed, and shown
    assert held(service) == []

    service.restart()  # the one-time fault is armed again: recovery sends, and fails once more
    again = recover(cli, lab, service)
    refused(again, "was not opened", code=1)
    assert effect_of(status, lab)["state"] == "intended" and held(service) == []
    assert listed(cli, lab)[0]["attempts"] == 2  # two sends, under one key, nothing stored

    later = run(cli, lab, service)  # the fault is spent: the same request, the same key
    assert later.returncode == 0, later.stderr
    effect = effect_of(status, lab)
    [ticket] = held(service, effect)
    assert effect == {"state": "done", "operation_key": OPERATION, "ticket": ticket["ticket"]} and ticket["key"] == OPERATION
    assert f"ticket {ticket['ticket']}, effect done" in later.stdout
    assert_recovering_again_changes_nothing(cli, lab, service, snapshot)
    assert_all_nine(lab, service)
    table("fail-before-commit --fault-times 1", 1, "done (run 1 and recover 1 failed: intended, 0 tickets)")


def test_fail_before_commit_for_good_keeps_it_intended_until_the_service_is_healthy(lab, cli, status, refused, snapshot, services):
    service = services(FAIL)
    refused(run(cli, lab, service), "was not opened", code=1)
    refused(recover(cli, lab, service), "was not opened", code=1)
    assert effect_of(status, lab)["state"] == "intended" and held(service) == []
    results = {r.number: r for r in labkit.check_invariants(lab.db, lab.call_log, {INC: 1}, lab.provider(), effects=Tickets(service.url))}
    assert not results[9].held and "still intended" in results[9].detail  # owed: not silently done, not dropped

    service.restart(fault=None)
    recovered = recover(cli, lab, service)
    assert recovered.returncode == 0, recovered.stderr
    effect = effect_of(status, lab)
    assert effect["state"] == "done" and len(held(service, effect)) == 1
    assert_recovering_again_changes_nothing(cli, lab, service, snapshot)
    assert_all_nine(lab, service)
    table("fail-before-commit (for good, then healthy)", 1, "done (intended while it failed)")


# =========================================================================== every crash point around the send


#: crash point, the service's fault, tickets at the destination right after the crash
CRASHES = [
    pytest.param("after_completion_commit", None, 0, id="after_completion_commit"),
    pytest.param("after_completion_commit", NO_IDEMPOTENCY, 0, id="after_completion_commit-no-idempotency"),
    pytest.param("before_send", None, 0, id="before_send"),
    pytest.param("before_send", NO_IDEMPOTENCY, 0, id="before_send-no-idempotency"),
    pytest.param("after_send", None, 1, id="after_send"),
    pytest.param("after_send", SLOW, 1, id="after_send-slow-after-commit-x1"),
    pytest.param("after_send", DROP, 1, id="after_send-drop-after-commit-x1"),
    pytest.param("after_send", FAIL, 0, id="after_send-fail-before-commit-x1"),
]


def test_the_crash_cases_cover_every_effect_point():
    assert set(labkit.crashpoints.EFFECT_POINTS) == {"before_send", "after_send"}
    assert {case.values[0] for case in CRASHES} == {*labkit.crashpoints.EFFECT_POINTS, "after_completion_commit"}


@pytest.mark.parametrize(("point", "fault", "tickets_at_crash"), CRASHES)
def test_a_crash_around_the_send_is_reconciled_to_one_ticket(point, fault, tickets_at_crash, lab, cli, status, refused, snapshot,
                                                            services):
    one_time = fault in (SLOW, DROP, FAIL)
    service = services(fault, 1 if one_time else None)
    crashed = run(cli, lab, service, "--crash-at", point)
    assert crashed.returncode == KILLED, crashed.stderr
    assert "ticket" not in crashed.stdout
    # The intent was committed with the completion, before anything was sent.
    effect = effect_of(status, lab)
    assert effect == {"state": "intended", "operation_key": OPERATION, "ticket": None}
    [entry] = listed(cli, lab)
    assert entry["attempts"] == (1 if point == "after_send" else 0)  # 0: certainly never sent
    assert len(held(service)) == tickets_at_crash

    if one_time:
        service.restart()  # re-armed: only a resend under the same key could meet it
    recovered = recover(cli, lab, service)
    if fault == FAIL:
        # Asked by key: absent, so the same request is sent again, and the restarted service fails it once more.
        refused(recovered, "was not opened", code=1)
        assert effect_of(status, lab)["state"] == "intended" and held(service) == []
        recovered = recover(cli, lab, service)
    assert recovered.returncode == 0, recovered.stderr
    assert f"resumed {INC} from report_completed" in recovered.stdout
    effect = effect_of(status, lab)
    [ticket] = held(service, effect)
    assert effect == {"state": "done", "operation_key": OPERATION, "ticket": ticket["ticket"]}
    assert ticket["key"] == (None if fault == NO_IDEMPOTENCY else OPERATION)
    assert listed(cli, lab) == []
    assert_recovering_again_changes_nothing(cli, lab, service, snapshot)
    assert_all_nine(lab, service)
    table(f"crash {point}" + (f" + {fault}" if fault else "") + (" x1" if one_time else ""), 1, "done")


def test_without_tickets_recovery_leaves_an_intended_effect_alone(lab, cli, status, services):
    """An intent owed by a crashed run waits for a recovery that is given the service."""
    service = services()
    assert run(cli, lab, service, "--crash-at", "after_completion_commit").returncode == KILLED
    plain = cli("recover", "--db", lab.db)
    assert plain.returncode == 0 and "recovered 0 runs" in plain.stdout, plain.stderr
    assert effect_of(status, lab)["state"] == "intended" and held(service) == []


# =========================================================================== no idempotency: a person decides


def test_no_idempotency_and_a_crash_after_sending_stays_uncertain_until_a_person_resolves(lab, cli, cli_main, status, refused, snapshot,
                                                                                         services):
    service = services(NO_IDEMPOTENCY)
    assert run(cli, lab, service, "--crash-at", "after_send").returncode == KILLED
    [ticket] = held(service)
    assert ticket["key"] is None  # the service kept no key

    recovered = recover(cli, lab, service)
    assert recovered.returncode == 0, recovered.stderr
    assert "ticket uncertain" in recovered.stdout
    [entry] = listed(cli, lab)
    assert (entry["state"], entry["ticket"], entry["attempts"]) == ("uncertain", None, 1)
    assert "cannot be asked" in entry["last_outcome"]
    assert effect_of(status, lab)["state"] == "uncertain"
    assert held(service) == [ticket]  # not retried blindly: still one ticket

    # Recovering again asks again (a GET), learns nothing, and writes nothing.
    assert_recovering_again_changes_nothing(cli, lab, service, snapshot)
    assert held(service) == [ticket] and listed(cli, lab) == [entry]

    before = snapshot(lab.db)
    refused(cli_main("resolve", "--db", lab.db, "--incident", INC, "--ticket", ticket["ticket"], "--reason", " "), "reason")
    refused(cli_main("resolve", "--db", lab.db, "--incident", INC, "--ticket", "", "--reason", "r"), "--ticket is empty")
    assert snapshot(lab.db) == before
    resolved = cli("resolve", "--db", lab.db, "--incident", INC, "--ticket", ticket["ticket"],
                   "--reason", f"GET /tickets shows {ticket['ticket']} for {INC}")
    assert resolved.returncode == 0, resolved.stderr
    assert f"{INC}: effect resolved, ticket {ticket['ticket']}" in resolved.stdout
    assert effect_of(status, lab) == {"state": "resolved", "operation_key": OPERATION, "ticket": ticket["ticket"]}
    assert listed(cli, lab) == []

    before = snapshot(lab.db)
    refused(cli_main("resolve", "--db", lab.db, "--incident", INC, "--none", "--reason", "changed my mind"), "resolved, not uncertain")
    assert snapshot(lab.db) == before
    assert_recovering_again_changes_nothing(cli, lab, service, snapshot)
    assert held(service) == [ticket]
    assert_all_nine(lab, service)
    table("crash after_send + no-idempotency", 1, "uncertain, then resolved --ticket")


def test_resolve_none_records_that_no_ticket_exists(lab, cli, status, refused, snapshot, services):
    """The send failed before committing, then the process died; the service comes back without
    keys, so nobody can ask it by key. A person looks at GET /tickets and decides: none."""
    service = services(FAIL)
    assert run(cli, lab, service, "--crash-at", "after_send").returncode == KILLED
    service.restart(fault=NO_IDEMPOTENCY)
    assert recover(cli, lab, service).returncode == 0
    assert [e["state"] for e in listed(cli, lab)] == ["uncertain"]
    assert held(service) == []  # nothing sent blindly to a service that cannot replay

    resolved = cli("resolve", "--db", lab.db, "--incident", INC, "--none", "--reason", f"GET /tickets lists no ticket for {INC}")
    assert resolved.returncode == 0, resolved.stderr
    assert "ticket (none)" in resolved.stdout
    assert effect_of(status, lab) == {"state": "resolved", "operation_key": OPERATION, "ticket": None}
    assert listed(cli, lab) == []
    assert_recovering_again_changes_nothing(cli, lab, service, snapshot)
    assert held(service) == []
    assert_all_nine(lab, service)
    table("crash after_send + fail, back as no-idempotency", 0, "uncertain, then resolved --none")


def test_resolve_refuses_an_effect_that_is_not_uncertain(lab, cli, cli_main, refused, snapshot, services):
    service = services()
    assert run(cli, lab, service, "--crash-at", "before_send").returncode == KILLED
    snapshot(lab.db)  # the killed run left its -wal and -shm; the first clean close removes them
    before = snapshot(lab.db)
    refused(cli_main("resolve", "--db", lab.db, "--incident", INC, "--none", "--reason", "r"), "intended, not uncertain")
    assert snapshot(lab.db) == before
    assert recover(cli, lab, service).returncode == 0
    before = snapshot(lab.db)
    refused(cli_main("resolve", "--db", lab.db, "--incident", INC, "--ticket", "T-0001", "--reason", "r"), "done, not uncertain")
    refused(cli_main("resolve", "--db", lab.db, "--incident", "INC-1001", "--none", "--reason", "r"), "INC-1001")
    assert snapshot(lab.db) == before


# =========================================================================== the service killed after committing


@pytest.mark.parametrize("fault", [SLOW, DROP])
def test_the_service_killed_after_committing_and_before_answering(fault, lab, cli, status, refused, snapshot, services):
    service = services(fault, delay=30 if fault == SLOW else None)
    child = subprocess.Popen(
        [sys.executable, "-m", "labkit", "run", "--db", str(lab.db), "--incident", INC, "--tickets", service.url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(),
    )
    try:
        deadline = time.monotonic() + 20  # the commit takes milliseconds; this only bounds a broken service
        while not service.store_rows() and time.monotonic() < deadline:  # the commit, seen in the service's own file
            time.sleep(0.02)
        assert service.store_rows(), "the service never committed the ticket"
        assert service.kill() == KILLED  # slow: while it sleeps before answering
        stdout, stderr = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    outcome = labkit.lab.processes.ChildOutcome("run", child.returncode, stdout, stderr)
    assert_unknown_outcome(outcome, refused)
    assert [e["state"] for e in listed(cli, lab)] == ["uncertain"]
    [row] = service.store_rows()  # what it committed survived the kill
    assert row["idempotency_key"] == OPERATION

    service.restart(fault=None)  # same store, same port
    recovered = recover(cli, lab, service)
    assert recovered.returncode == 0, recovered.stderr
    effect = effect_of(status, lab)
    assert effect == {"state": "done", "operation_key": OPERATION, "ticket": row["ticket_id"]}
    assert [t["ticket"] for t in held(service, effect)] == [row["ticket_id"]]
    assert_recovering_again_changes_nothing(cli, lab, service, snapshot)
    assert_all_nine(lab, service)
    table(f"service SIGKILLed after commit ({fault}), restarted", 1, "done")


# =========================================================================== the naive retry


def test_retry_without_key_opens_two_tickets_and_invariant_8_catches_it(lab, cli, status, services):
    service = services(SLOW, 1)
    naive = run(cli, lab, service, "--bug", "retry_without_key")
    assert naive.returncode == 0, naive.stderr  # it looks like a success
    tickets = service.tickets()
    assert [t["incident"] for t in tickets] == [INC, INC]
    assert [t["key"] for t in tickets] == [f"{OPERATION}-attempt-1", f"{OPERATION}-attempt-2"]
    assert effect_of(status, lab) == {"state": "done", "operation_key": OPERATION, "ticket": tickets[1]["ticket"]}

    results = {r.number: r for r in labkit.check_invariants(lab.db, lab.call_log, {INC: 1}, lab.provider(), effects=Tickets(service.url))}
    assert not results[8].held and f"{INC} has 2 tickets" in results[8].detail
    assert not results[9].held and "does not hold under its key" in results[9].detail
    assert [n for n, r in results.items() if not r.held] == [8, 9]
    table("--bug retry_without_key, slow-after-commit x1", 2, "done (invariants 8, 9 broken)")


# =========================================================================== without --tickets


def test_without_tickets_no_effect_is_written_and_nothing_changes(lab, cli, cli_main, status, query, refused, snapshot):
    for point in ("before_send", "after_send"):  # only a run that opens a ticket reaches them: asked for, refused
        refused(cli_main("run", "--db", lab.db, "--incident", INC, "--crash-at", point), "never reached by a run without --tickets")
    done = cli("run", "--db", lab.db, "--incident", INC)
    assert done.returncode == 0 and "ticket" not in done.stdout, done.stderr
    assert effect_of(status, lab) == {"state": "none", "operation_key": None, "ticket": None}
    assert query(lab.db, "SELECT COUNT(*) FROM effects") == [(0,)]
    assert listed(cli, lab) == []
    assert cli("effects", "--db", lab.db).stdout == "no effect is uncertain or waiting to be sent\n"
    refused(cli_main("resolve", "--db", lab.db, "--incident", INC, "--none", "--reason", "r"), "no effect", "without --tickets")
    before = snapshot(lab.db)
    again = cli("recover", "--db", lab.db)
    assert again.returncode == 0 and again.stdout == "recovered 0 runs\n", again.stderr
    assert snapshot(lab.db) == before
    results = labkit.check_invariants(lab.db, lab.call_log, {INC: 1}, lab.provider())
    assert [(r.number, r.held) for r in results] == [(n, True) for n in range(1, 8)]


def test_resolve_names_an_unknown_incident_as_unknown_and_changes_nothing(lab, cli, cli_main, refused, snapshot):
    assert cli("run", "--db", lab.db, "--incident", INC).returncode == 0
    before = snapshot(lab.db)
    refused(
        cli_main("resolve", "--db", lab.db, "--incident", "INC-0000", "--none", "--reason", "a typo"), "no run for incident", "INC-0000"
    )
    refused(cli_main("resolve", "--db", lab.db, "--incident", INC, "--none", "--reason", "no ticket"), INC, "no effect to resolve")
    assert snapshot(lab.db) == before


# =========================================================================== a bad --tickets URL


BAD_URLS = [
    pytest.param("notaurl", "expected a base URL", id="not-a-url"),
    pytest.param("ftp://127.0.0.1:21", "expected a base URL", id="ftp"),
    pytest.param("http://", "expected a base URL", id="no-host"),
    pytest.param("http://127.0.0.1:99999", "port", id="port-too-large"),
    pytest.param("http://127.0.0.1:8000/?x=1", "without a query", id="query"),
    pytest.param("http://127.0.0.1:8000#top", "without a query or fragment", id="fragment"),
    pytest.param("http://ops:hunter2@127.0.0.1:8000", "user name or password", id="credentials"),
    pytest.param("http://127.0.0.1:8000/\x1b[2J", "control", id="terminal-escape"),
    pytest.param("http://127.0.0.1:8000/a b", "spaces", id="space"),
    pytest.param("http://" + "a" * 3000, "characters long", id="3000-characters"),
    pytest.param("", "empty", id="empty"),
    pytest.param("http://[::1:8000", "host is malformed", id="unclosed-ipv6-bracket"),
    pytest.param("http://[127.0.0.1]:8000", "host is malformed", id="ipv4-in-brackets"),
    pytest.param("http://[::1]evil:8000", "host is malformed", id="text-after-ipv6-bracket"),
    pytest.param("http://127.0.0.1:0", "port", id="port-0-would-mean-80"),
]


def file_bytes(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.mark.parametrize(("url", "words"), BAD_URLS)
def test_a_bad_tickets_url_is_refused_before_run_creates_anything(url, words, lab, cli_main, refused):
    line = refused(cli_main("run", "--db", lab.db, "--incident", INC, "--tickets", url), "--tickets", words)
    assert "hunter2" not in line, "a password is not repeated in the error"
    assert not lab.db.exists() and list(lab.db.parent.iterdir()) == [], "no database, no provider log"


@pytest.mark.parametrize(("url", "words"), BAD_URLS)
def test_a_bad_tickets_url_is_refused_before_recover_changes_anything(url, words, lab, cli, cli_main, refused):
    assert cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "after_evidence_commit").returncode == KILLED
    before = file_bytes(lab.db.parent)
    line = refused(cli_main("recover", "--db", lab.db, "--tickets", url), "--tickets", words)
    assert "hunter2" not in line
    assert file_bytes(lab.db.parent) == before, "the unfinished run is neither completed nor touched"


def test_a_bad_tickets_url_is_refused_by_the_real_command_line(lab, cli, refused):
    refused(cli("run", "--db", lab.db, "--incident", INC, "--tickets", "notaurl"), "ticket service URL 'notaurl'")
    assert list(lab.db.parent.iterdir()) == []
    with pytest.raises(labkit.errors.BadTicketServiceUrl):
        Tickets("ftp://127.0.0.1:21")  # the library refuses it too, before any run is given it
