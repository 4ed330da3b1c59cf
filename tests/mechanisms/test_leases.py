"""Issue 10: leases with fencing tokens, renewal and expiry, the fenced commit, the stale-worker race.

Where the clock must be in the test's hands, two workers are two connections to one real
SQLite file, sharing a :class:`~labkit.clock.ManualClock` that the test moves: "worker A
pauses past its lease" is ``clock.advance(TTL + 1)``, the same on every run. The provider is
the real one, with its own call log. Real processes (the pool, SIGKILL) are in
``tests/mechanisms/test_work_pool.py``.
"""

from __future__ import annotations

import math
import sqlite3
from contextlib import closing
from dataclasses import replace

import pytest

import labkit
from labkit.clock import ManualClock
from labkit.database import read_transaction, transaction
from labkit.errors import (
    BadInput,
    BadLeaseSeconds,
    BadWorkerName,
    DatabaseUnavailable,
    InjectedFailure,
    LeaseEnded,
    LeaseExpired,
    LeaseHeld,
    NotLeaseHolder,
    RunCompleted,
    RunFailure,
    StaleLease,
    UnknownRun,
    WorkflowVersionMismatch,
)
from labkit.invariants import stale_commits_txn
from labkit.lab.exercises import check_fenced_commit
from labkit.lab.locks import measure_flows, measurement_table
from labkit.lab.races import stale_worker_race
from labkit.leases import (
    FENCE,
    claim,
    latest_token_txn,
    lease_events_txn,
    leases_txn,
    release,
    renew,
)
from labkit.store import create_run_txn, snapshot
from labkit.worker import LeasedWorker

TTL = 30.0
INC = "INC-1001"


@pytest.fixture
def manual() -> ManualClock:
    return ManualClock()


@pytest.fixture
def workers(lab, manual):
    """``workers("A", "B")``: LeasedWorkers on their own connections, sharing the manual clock; closed after the test."""
    made: list[LeasedWorker] = []

    def make(*names: str, **options) -> list[LeasedWorker]:
        options.setdefault("lease_seconds", TTL)
        for name in names:
            made.append(LeasedWorker(lab.connect(), options.pop("provider", None) or lab.provider(), name=f"worker-{name}",
                                     clock=manual, **options))
        return made[-len(names):]

    yield make
    for worker in made:
        worker.conn.close()


def create_runs(lab, clock, *incidents: str, workflow_version: int = labkit.WORKFLOW_VERSION) -> None:
    with closing(lab.connect()) as conn, transaction(conn):
        for incident in incidents:
            create_run_txn(conn, incident, workflow_version, clock)


def rows(lab) -> dict:
    with closing(lab.connect()) as conn:
        return snapshot(conn)


def events(lab, incident: str | None = None) -> list[tuple[str, str, int]]:
    with closing(lab.connect()) as conn:
        return [(e.worker, e.event, e.token) for e in lease_events_txn(conn, incident)]


# --------------------------------------------------------------------------- tokens and claims


def test_tokens_grow_with_every_claim_across_runs_and_takeovers(lab, manual, workers):
    create_runs(lab, manual, "INC-1001", "INC-1002", "INC-1003")
    a, b = workers("A", "B")
    first = [a.claim("INC-1001").token, b.claim("INC-1002").token, a.claim("INC-1003").token]
    manual.advance(TTL)
    taken = b.claim("INC-1001")  # A's lease on it expired: taken over with a larger token
    assert first == [1, 2, 3] and taken.token == 4 and taken.replaces == 1
    with closing(lab.connect()) as conn:
        assert latest_token_txn(conn) == 4
        listed = leases_txn(conn)
    assert [(row.token, row.incident, row.ended) for row in listed] == [
        (1, "INC-1001", "taken_over"), (2, "INC-1002", None), (3, "INC-1003", None), (4, "INC-1001", None)]


def test_a_live_lease_refuses_a_second_claim_naming_its_holder(lab, manual, workers):
    create_runs(lab, manual, INC)
    a, b = workers("A", "B")
    held = a.claim(INC)
    before = rows(lab)
    manual.advance(TTL - 0.001)
    with pytest.raises(LeaseHeld) as caught:
        b.claim(INC)
    assert (caught.value.worker, caught.value.token, caught.value.expires_at) == ("worker-A", held.token, held.expires_at)
    assert "worker-A" in str(caught.value) and held.expires_at in str(caught.value)
    assert isinstance(caught.value, RunFailure), "a held lease is a failure a later retry may cure (exit 1)"
    assert rows(lab) == before, "a refused claim writes nothing"
    assert b.claim_next() is None, "claim_next passes over a run whose lease is live"


def test_a_lease_is_live_until_its_expiry_instant_and_no_longer(lab, manual, workers):
    create_runs(lab, manual, INC)
    a, b = workers("A", "B")
    a.claim(INC)
    manual.advance(TTL)  # now == expires_at: the lease covers [claimed_at, expires_at)
    taken = b.claim(INC)
    assert taken.replaces == 1 and taken.token == 2
    assert events(lab) == [("worker-A", "claimed", 1), ("worker-B", "claimed", 2)]


def test_claim_of_a_completed_run_is_refused(lab, manual, workers):
    create_runs(lab, manual, INC)
    [a] = workers("A")
    a.drive(INC)
    before = rows(lab)
    with pytest.raises(RunCompleted) as caught:
        a.claim(INC)
    assert isinstance(caught.value, BadInput) and INC in str(caught.value)
    assert a.claim_next() is None
    assert rows(lab) == before


@pytest.mark.parametrize("seconds", [math.nan, math.inf, -math.inf, 0, -1, 0.01, 86_401, True, "5", None])
def test_a_lease_of_a_wrong_length_is_refused_and_changes_nothing(lab, manual, seconds):
    create_runs(lab, manual, INC)
    before = rows(lab)
    with closing(lab.connect()) as conn, pytest.raises(BadLeaseSeconds):
        claim(conn, INC, "worker-A", seconds, manual)
    assert rows(lab) == before


@pytest.mark.parametrize("name", ["", "two\nlines", "x" * 101, 7])
def test_a_worker_name_that_cannot_be_shown_is_refused(lab, manual, name):
    create_runs(lab, manual, INC)
    with closing(lab.connect()) as conn, pytest.raises(BadWorkerName):
        claim(conn, INC, name, TTL, manual)


def test_claims_of_a_missing_run_or_another_workflow_version_are_refused(lab, manual):
    create_runs(lab, manual, "INC-1002", workflow_version=1)
    before = rows(lab)
    with closing(lab.connect()) as conn:
        with pytest.raises(UnknownRun):
            claim(conn, "INC-9999", "worker-A", TTL, manual)
        with pytest.raises(WorkflowVersionMismatch):
            claim(conn, "INC-1002", "worker-A", TTL, manual)
    assert rows(lab) == before


# --------------------------------------------------------------------------- renewal and release


def test_renewal_before_expiry_extends_the_lease_from_now(lab, manual, workers):
    create_runs(lab, manual, INC)
    a, b = workers("A", "B")
    lease = a.claim(INC)
    manual.advance(20)
    renewed = a.renew(lease)
    assert renewed.expires_at == "2026-03-02T09:00:50.000Z" and renewed.token == lease.token
    manual.advance(15)  # past the first expiry (09:00:30), before the new one
    with pytest.raises(LeaseHeld):
        b.claim(INC)
    assert [event for _, event, _ in events(lab)] == ["claimed", "renewed"]


def test_renewal_at_the_expiry_instant_or_after_fails_and_the_run_is_claimed_again(lab, manual, workers):
    create_runs(lab, manual, INC)
    a, b = workers("A", "B")
    lease = a.claim(INC)
    manual.advance(TTL)
    with pytest.raises(LeaseExpired) as caught:
        a.renew(lease)
    assert caught.value.token == lease.token and "claim the run again" in str(caught.value)
    manual.advance(5)
    with pytest.raises(LeaseExpired):
        a.renew(lease)
    again = a.claim(INC)  # the way back: a new lease, a new token
    assert again.token == lease.token + 1 and again.replaces == lease.token


def test_renewal_after_a_takeover_names_both_tokens(lab, manual, workers):
    create_runs(lab, manual, INC)
    a, b = workers("A", "B")
    old = a.claim(INC)
    manual.advance(TTL + 1)
    new = b.claim(INC)
    with pytest.raises(StaleLease) as caught:
        a.renew(old)
    assert (caught.value.token, caught.value.current_token) == (old.token, new.token)
    assert f"token {old.token}" in str(caught.value) and f"token is {new.token}" in str(caught.value)


def test_renewal_by_a_worker_that_was_not_given_the_token_is_refused(lab, manual, workers):
    create_runs(lab, manual, INC)
    a, b = workers("A", "B")
    lease = a.claim(INC)
    before = rows(lab)
    with pytest.raises(NotLeaseHolder) as caught:
        b.renew(replace(lease, worker=b.name))
    assert (caught.value.holder, caught.value.worker) == ("worker-A", "worker-B")
    with closing(lab.connect()) as conn, pytest.raises(StaleLease):
        renew(conn, replace(lease, token=lease.token + 7), TTL, manual)  # a token never handed out
    assert rows(lab) == before


def test_renewal_of_an_ended_lease_is_refused(lab, manual, workers):
    create_runs(lab, manual, INC)
    [a] = workers("A")
    lease = a.claim(INC)
    a.finish(lease)
    with pytest.raises(LeaseEnded) as caught:
        a.renew(lease)
    assert caught.value.ended == "completed"


def test_a_released_lease_can_be_claimed_at_once_and_only_its_holder_releases(lab, manual, workers):
    create_runs(lab, manual, INC)
    a, b = workers("A", "B")
    lease = a.claim(INC)
    with closing(lab.connect()) as conn:
        assert release(conn, replace(lease, worker="worker-B"), manual) is False
    assert a.release(lease) is True
    assert a.release(lease) is False, "releasing twice writes nothing the second time"
    taken = b.claim(INC)
    assert taken.replaces is None, "a released lease is not taken over: it ended"


# --------------------------------------------------------------------------- the fenced commit


def test_the_stale_worker_race_is_refused_deterministically(lab, manual):
    race = stale_worker_race(lab.db, INC, manual, lease_seconds=TTL, provider=lab.provider())
    refused = race.refused
    assert (refused.incident, refused.token, refused.current_token) == (INC, 1, 2)
    assert (refused.expected_version, refused.current_version) == (0, 2)
    assert INC in str(refused) and "token 1" in str(refused) and "token is 2" in str(refused)
    assert race.winner.token == 2 and race.winner.took_over == 1 and race.winner.read_provider
    assert race.provider_reads == 2, "the provider's own log shows the stale worker's read and the winner's"
    assert race.receipts == 1
    assert [(e.worker, e.event, e.token) for e in race.events] == [
        ("worker-A", "claimed", 1), ("worker-B", "claimed", 2), ("worker-B", "committed", 2), ("worker-B", "committed", 2),
        ("worker-A", "refused", 1)]
    with closing(lab.connect()) as conn:
        digest = conn.execute("SELECT evidence_digest FROM receipts").fetchone()[0]
        committed_by = conn.execute("SELECT token FROM lease_events WHERE event = 'committed' AND detail = 'evidence_recorded'").fetchone()
    assert tuple(committed_by) == (2,) and digest
    results = labkit.check_invariants(lab.db, lab.call_log, {INC: 2}, lab.provider(), leases=True)
    assert [(r.number, r.held) for r in results] == [(n, True) for n in (1, 2, 3, 4, 5, 6, 7, 10, 11)], results


def test_a_stale_commit_is_refused_even_before_the_new_holder_commits(lab, manual, workers):
    create_runs(lab, manual, INC)
    a, b = workers("A", "B")
    lease_a = a.claim(INC)
    reading_a = a.read(lease_a)
    manual.advance(TTL + 1)
    lease_b = b.claim(INC)
    reading_b = b.read(lease_b)
    before = rows(lab)
    with pytest.raises(StaleLease) as caught:
        a.commit_evidence(lease_a, reading_a)
    assert (caught.value.expected_version, caught.value.current_version) == (0, 0), "the version alone could not have told"
    after = rows(lab)
    assert {table for table in before if before[table] != after[table]} == {"lease_events"}, "only the refusal is written"
    assert after["lease_events"][-1][3] == "refused"
    b.complete(b.commit_evidence(lease_b, reading_b))
    with closing(lab.connect()) as conn:
        assert conn.execute("SELECT COUNT(*) FROM receipts").fetchone()[0] == 1
        assert stale_commits_txn(conn) == []
    assert lab.reads(INC) == 2


def test_a_lease_that_expired_but_was_not_taken_over_still_commits(lab, manual, workers):
    # Safety rests on the token and the state version, not on the clock: nothing happened
    # between this worker's read and its commit, so nothing is lost by accepting it.
    create_runs(lab, manual, INC)
    [a] = workers("A")
    lease = a.claim(INC)
    reading = a.read(lease)
    manual.advance(TTL * 3)
    receipt = a.complete(a.commit_evidence(lease, reading))
    assert receipt.incident == INC
    with pytest.raises(LeaseEnded):
        a.renew(lease)


def test_a_run_moved_by_a_flow_that_takes_no_lease_refuses_the_holders_commit(lab, manual, workers, clock):
    create_runs(lab, manual, INC)
    [a] = workers("A")
    lease = a.claim(INC)
    reading = a.read(lease)
    with closing(lab.connect()) as conn:
        lab.coordinator(conn).inspect(INC)  # lessons 02-09's reference flow: no lease, the version moves
    with pytest.raises(StaleLease) as caught:
        a.commit_evidence(lease, reading)
    assert caught.value.current_token == lease.token and "moved on without it" in str(caught.value)
    assert (caught.value.expected_version, caught.value.current_version) == (0, 1)


def test_commit_and_completion_each_take_one_transaction(lab, manual, workers):
    create_runs(lab, manual, INC)
    [a] = workers("A", crash=labkit.CrashPlan(labkit.CrashPoint.BEFORE_EVIDENCE_COMMIT, "raise"))
    lease = a.claim(INC)
    reading = a.read(lease)
    before = rows(lab)
    with pytest.raises(InjectedFailure):
        a.commit_evidence(lease, reading)
    assert rows(lab) == before, "evidence, step, transition and commit event roll back together"
    a.crash = labkit.CrashPlan(labkit.CrashPoint.BEFORE_COMPLETION_COMMIT, "raise")
    advanced = a.commit_evidence(lease, reading)  # the lease is still live: the same worker goes on
    middle = rows(lab)
    with pytest.raises(InjectedFailure):
        a.complete(advanced)
    assert rows(lab) == middle, "receipt, step, transition and the lease's end roll back together"
    a.crash = labkit.CrashPlan()
    assert a.complete(advanced).incident == INC


def test_the_read_holds_no_lock_so_another_worker_commits_meanwhile(lab, manual, workers, monkeypatch):
    """The point of the lesson: during the leased flow's read, the database is free; during the reference flow's, it is not."""
    monkeypatch.setenv("LABKIT_BUSY_TIMEOUT_MS", "300")
    create_runs(lab, manual, "INC-1001", "INC-1002")
    other = lab.connect()

    class CommitsDuringTheRead:
        """The real provider; while it answers, a second worker commits about another incident."""

        def __init__(self, inner):
            self.inner, self.outcome = inner, None
            self.decision_inputs = inner.decision_inputs

        def incidents(self):
            return self.inner.incidents()

        def read(self, incident):
            try:
                with transaction(other):
                    create_run_txn(other, "INC-1003", labkit.WORKFLOW_VERSION, manual)
                self.outcome = "committed"
            except (sqlite3.OperationalError, DatabaseUnavailable):
                self.outcome = "blocked"
            return self.inner.read(incident)

    leased = CommitsDuringTheRead(lab.provider())
    [a] = workers("A", provider=leased)
    a.drive("INC-1001")
    classic = CommitsDuringTheRead(lab.provider())
    with closing(lab.connect()) as conn:
        labkit.Coordinator(conn, classic, clock=manual).inspect("INC-1002")
    other.close()
    assert (leased.outcome, classic.outcome) == ("committed", "blocked")


# --------------------------------------------------------------------------- the invariant, and that it can fail


def test_the_lease_invariant_catches_a_fence_that_checks_only_the_version(lab, manual, workers):
    create_runs(lab, manual, INC)
    a, b = workers("A", "B", condition="version = :expected_version")
    lease_a = a.claim(INC)
    reading_a = a.read(lease_a)
    manual.advance(TTL + 1)
    b.claim(INC)
    a.complete(a.commit_evidence(lease_a, reading_a))  # the broken fence lets the stale worker through
    with closing(lab.connect()) as conn:
        stale = stale_commits_txn(conn)
    assert stale and "accepted under token 1 after token 2 was claimed" in stale[0]
    results = {r.number: r for r in labkit.check_invariants(lab.db, lab.call_log, {INC: 1}, lab.provider(), leases=True)}
    assert not results[10].held


def test_the_read_invariant_catches_a_read_made_without_a_lease(lab, manual):
    create_runs(lab, manual, INC)
    with closing(lab.connect()) as conn:
        labkit.Coordinator(conn, lab.provider(), clock=manual).drive(INC)
    results = {r.number: r for r in labkit.check_invariants(lab.db, lab.call_log, {INC: 1}, lab.provider(), leases=True)}
    assert results[10].held and not results[11].held and "under 0 leases" in results[11].detail


def test_lease_tables_are_strict_and_come_from_the_appended_migration(lab):
    from labkit.schema import MIGRATIONS, SCHEMA_VERSION

    assert SCHEMA_VERSION == len(MIGRATIONS)
    with closing(lab.connect()) as conn, read_transaction(conn):
        sql = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall())
        columns = [row[1] for row in conn.execute("PRAGMA table_info(runs)")]
    assert sql["leases"].rstrip().endswith("STRICT") and sql["lease_events"].rstrip().endswith("STRICT")
    assert "lease_token" in columns


def test_fence_text_is_what_the_lesson_shows():
    assert FENCE == "version = :expected_version AND lease_token = :token"


# --------------------------------------------------------------------------- the exercise check


def test_the_exercise_check_passes_the_fence(capsys):
    check_fenced_commit("lease_token = :token AND :expected_version = version")
    assert capsys.readouterr().out.count("✓") == 5


@pytest.mark.parametrize("shortcut, feedback", [
    ("1", "compare the token"),
    ("version = :expected_version", "the version alone cannot tell"),
    ("lease_token = :token", "compare the state version too"),
    (":token >= lease_token AND version = :expected_version", "never by size"),
    ("lease_token >= :token AND version = :expected_version", "the version alone cannot tell"),
    ("0", "yet its commit was refused"),
    ("no_such_column = 1", "SQLite cannot run your condition"),
    ("", "as a string of SQL"),
])
def test_the_exercise_check_refuses_every_shortcut(shortcut, feedback):
    with pytest.raises(AssertionError) as caught:
        check_fenced_commit(shortcut)
    assert feedback in str(caught.value)


# --------------------------------------------------------------------------- the measurement (no timing asserted)


def test_measure_flows_runs_both_flows_for_real_and_the_in_transaction_read_holds_the_lock(tmp_path):
    results = measure_flows(workers=(1, 2), provider_delay=0.05, incidents=["INC-1001", "INC-1002"], folder=tmp_path)
    assert [(r.flow, r.workers, r.runs) for r in results] == [
        ("in-transaction", 1, 2), ("leased", 1, 2), ("in-transaction", 2, 2), ("leased", 2, 2)]
    for result in results:
        assert result.seconds > 0 and result.lock_ms_per_run > 0 and result.writer_tries >= 0
        if result.flow == "in-transaction":
            # Not a timing target: the provider sleeps 50 ms inside this flow's transaction, by construction.
            assert result.longest_hold_ms >= 50
    table = measurement_table(results)
    assert table.count("\n") == 4 and "leased" in table
    with pytest.raises(BadInput):
        measure_flows(workers=(0,), provider_delay=0.05)
    with pytest.raises(BadInput):
        measure_flows(provider_delay=math.nan)
