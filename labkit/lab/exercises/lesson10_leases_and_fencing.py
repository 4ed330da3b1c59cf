"""Lesson 10 (10_leases_and_fencing): the fenced commit's condition, replayed with stalled and racing workers.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import replace

from ...clock import ManualClock
from ...coordinator import WORKFLOW_VERSION
from ...database import transaction
from ...errors import StaleLease
from ...invariants import stale_commits_txn
from ...leases import Lease
from ...store import create_run_txn
from ...worker import CheckedReading, LeasedWorker
from ..processes import labkit_cli
from ..workspace import Workspace
from .runner import clear_trials, new_trial, one_line, own_work


@one_line
def check_fenced_commit(condition: str) -> None:
    """``condition``: the WHERE clause of the fenced commit, as SQL over the ``runs`` row.

    It may use the run's columns (``version``, ``lease_token``, ``step``, ...) and the
    parameters ``:expected_version`` (the state version the worker read) and ``:token`` (its
    lease's). The leased flow runs with it in place of :data:`labkit.leases.FENCE`:
    ``UPDATE runs SET step = ..., version = version + 1 WHERE incident = :incident AND (condition)``.

    Replayed in real SQLite files, with two workers (two connections) sharing a clock that
    the check moves, and the real provider:

    1. a worker whose lease is live, on a run nobody moved, commits: accepted, and completes;
    2. worker A stalls past its lease, B takes the run over and finishes it; A's late commit: refused;
    3. A stalls, B takes over but has not committed yet; A's commit: refused; B's: accepted;
    4. while A holds its lease and reads, the reference flow (a real ``python -m labkit run``,
       which takes no lease) runs the incident; A's commit: refused;
    5. a worker commits to one run with the token of its lease on another: refused.

    The database's trigger (a step moves one forward) stands behind the condition, so a
    stale commit it lets through may still be stopped there: that counts as let through.
    """
    clear_trials()
    if not isinstance(condition, str) or not condition.strip():
        raise AssertionError(f"the answer should be the condition as a string of SQL, e.g. \"version = ...\", not {condition!r}")
    own_work(condition, "FENCE")  # labkit's own condition, under any name (compared by identity)
    ttl = 30.0

    def setting(*incidents: str) -> tuple[Workspace, ManualClock, LeasedWorker, LeasedWorker]:
        trial, clock = new_trial("10-exercise"), ManualClock()
        with closing(trial.connect()) as conn, transaction(conn):
            for incident in incidents:
                create_run_txn(conn, incident, WORKFLOW_VERSION, clock)
        provider = trial.provider()
        a = LeasedWorker(trial.connect(), provider, name="worker-A", lease_seconds=ttl, clock=clock, condition=condition)
        b = LeasedWorker(trial.connect(), provider, name="worker-B", lease_seconds=ttl, clock=clock, condition=condition)
        return trial, clock, a, b

    def commit(worker: LeasedWorker, lease: Lease, reading: CheckedReading) -> str:
        try:
            worker.commit_evidence(lease, reading)
        except StaleLease:
            return "refused"
        except sqlite3.IntegrityError:
            return "stopped by the trigger"
        except sqlite3.Error as error:
            raise AssertionError(f"SQLite cannot run your condition: {error}") from None
        return "accepted"

    def no_stale_commit(trial: Workspace) -> None:
        with closing(trial.connect()) as conn:
            stale = stale_commits_txn(conn)
        assert not stale, f"the rows show a commit under a stale token: {stale[0]}"

    def done(*workers: LeasedWorker) -> None:
        for worker in workers:
            worker.conn.close()

    trial, clock, a, b = setting("INC-1001")
    try:
        a.drive("INC-1001")
        outcome = "accepted"
    except StaleLease:
        outcome = "refused"
    except sqlite3.Error as error:
        raise AssertionError(f"SQLite cannot run your condition: {error}") from None
    finally:
        done(a, b)
    assert outcome == "accepted", (
        "worker A holds a live lease and nobody has touched the run, yet its commit was refused: the condition must hold "
        "when the run is still at the version A read and A's token is still the run's lease"
    )
    print("✓ a live lease on an untouched run commits its evidence, then completes")

    trial, clock, a, b = setting("INC-1002")
    lease_a = a.claim("INC-1002")
    reading_a = a.read(lease_a)
    clock.advance(ttl + 1)
    b.drive("INC-1002")
    outcome = commit(a, lease_a, reading_a)
    reads = trial.provider_log.reads_of("INC-1002")
    done(a, b)
    assert outcome == "refused", (
        f"A stalled past its lease; B took the run over (token {lease_a.token + 1}) and finished it. A's late commit, under "
        f"token {lease_a.token}, was {outcome}: " + ("your condition let it through. " if outcome != "refused" else "")
        + "A commit is fenced by the lease that is the run's now: compare the token"
    )
    assert reads == 2, f"the provider should show both reads, A's and B's; it shows {reads}"
    no_stale_commit(trial)
    print("✓ A stalled past its lease, B took over and finished: A's late commit is refused (the provider's log shows both reads)")

    trial, clock, a, b = setting("INC-1003")
    lease_a = a.claim("INC-1003")
    reading_a = a.read(lease_a)
    clock.advance(ttl + 1)
    lease_b = b.claim("INC-1003")
    reading_b = b.read(lease_b)
    outcome = commit(a, lease_a, reading_a)
    outcome_b = commit(b, lease_b, reading_b) if outcome == "refused" else "not tried"
    done(a, b)
    assert outcome == "refused", (
        f"B took the run over but has not committed yet, so the run is still at the state version A read. A's commit was "
        f"{outcome}, while B holds the lease: the version alone cannot tell that A is stale; the token can, if it must "
        "equal the run's lease_token (B's is larger than A's)"
    )
    assert outcome_b == "accepted", f"then B, the lease holder, committed from the state it read, and that was {outcome_b}"
    no_stale_commit(trial)
    print("✓ B took over but had not committed yet: A's commit is refused all the same, and B's is accepted")

    trial, clock, a, b = setting("INC-1004")
    lease_a = a.claim("INC-1004")
    reading_a = a.read(lease_a)
    # No connection of this process stays open while another process uses the file: a second
    # one here would have dropped the first one's locks (see LeasedWorker._call_renewing).
    done(a, b)
    other = labkit_cli("run", "--db", trial.db, "--incident", "INC-1004")
    assert other.returncode == 0, f"could not run the reference flow: {other.stderr.strip()}"
    a = LeasedWorker(trial.connect(), trial.provider(), name="worker-A", lease_seconds=ttl, clock=clock, condition=condition)
    outcome = commit(a, lease_a, reading_a)
    done(a)
    assert outcome == "refused", (
        "while A held its lease and read, the reference flow (which takes no lease) ran the incident to report_completed. "
        f"A's token is still the run's latest, and A's commit was {outcome}: the token alone cannot tell that the run moved "
        "on; compare the state version too"
    )
    print("✓ the run moved on without a lease while A read: A's commit is refused (its token alone looked current)")

    trial, clock, a, b = setting("INC-1005", "INC-1006")
    lease_x = a.claim("INC-1005")
    reading_x = a.read(lease_x)
    lease_y = b.claim("INC-1006")
    mixed_up = replace(lease_x, token=lease_y.token, worker=lease_y.worker)
    outcome = commit(b, mixed_up, reading_x)
    done(a, b)
    assert outcome == "refused", (
        f"worker B committed to run INC-1005 with token {lease_y.token}, its lease on INC-1006, larger than INC-1005's token "
        f"{lease_x.token}; that was {outcome}. A token is this run's lease or it is not: compare it for equality, never by size"
    )
    no_stale_commit(trial)
    print("✓ a token from another run's lease, though larger, is refused")
