"""Leases with fencing tokens: the slow read leaves the transaction, and only a current lease may commit.

The reference flow (:mod:`labkit.coordinator`) reads the provider while its write
transaction is open, and SQLite's write lock covers the whole file: while one worker waits
on a slow provider, no other worker can commit anything, about any incident. The leased
flow (:class:`labkit.worker.LeasedWorker`) takes the read out of the transaction:

1. **claim**: one short transaction gives a worker a *lease* on one run, for a time to
   live, and a *fencing token*;
2. **read**: the provider is asked with no transaction open; other workers commit meanwhile;
3. **fenced commit**: one short transaction writes the result only if the run is still in
   the state the worker read *and* its lease is still the run's current one, a
   compare-and-set on (expected state version, token): :data:`FENCE`.

A worker can stall (a pause, a swap storm, a debugger) past its lease; another worker then
takes the run over with a larger token and finishes it. When the first one wakes up and
commits, the fence refuses it, and its result is discarded; the provider's own log still
shows its read. Renewal (:func:`renew`) keeps a lease alive while its worker waits on a slow read.

**Tokens** come from one counter for the whole database: the AUTOINCREMENT key of
``leases``. Every claim gets a larger token than any claim before it, on any run, and
SQLite never hands out a number twice, even after rows are deleted. One counter rather than
one per run: a token then names exactly one lease of one run, so a token presented to the
wrong run can never match, whatever its size; and "every lease since token T" is one
comparison (``python -m labkit work`` tells its own attempts from earlier ones that way).

**Time** only decides when a run may be taken over: a lease is live while
``now < expires_at``. Safety never rests on the clock. The fence compares the token and the
state version, so a lease that expired but that nobody took over still commits (nothing
happened in between), and a lease that was taken over never commits, whatever its
holder's clock says. Renewal is a promise about the future, so it needs a live lease;
after expiry a worker claims the run again, with a new token. Lease instants are stored to
the millisecond, always the same width, so that their text order is their time order.

The rows that tell the story: ``runs.lease_token`` (the run's latest lease), ``leases``
(one row per lease) and ``lease_events`` (every claim, renewal, commit, refusal and
release, in commit order). From them alone, :func:`labkit.invariants.stale_commits_txn`
checks that no commit under a stale token was ever accepted (invariant 10). Taught in 10_leases_and_fencing.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Collection, Generator, Sequence
from contextlib import closing
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

from .clock import Clock, iso_milliseconds, parse_instant
from .coordinator import check_run_version
from .database import read_transaction, require_write_transaction, transaction
from .errors import (
    BadLeaseSeconds,
    BadWorkerName,
    LeaseEnded,
    LeaseExpired,
    LeaseHeld,
    NotLeaseHolder,
    RunCompleted,
    StaleLease,
    StaleTransition,
    StepOrderError,
    UnknownRun,
)
from .jsontext import canonical_json
from .redaction import redact_line
from .steps import Step
from .store import Fence, advance_txn, connect_readonly, find_run_txn

#: The tables (``leases``, ``lease_events`` and ``runs.lease_token``) are in labkit.schema.

#: The fenced commit's condition: the WHERE clause of its compare-and-set on ``runs``. The run
#: is still in the state this worker read (``:expected_version``), and its lease is still this
#: worker's (``:token``). Either alone lets a stale commit through (10_leases_and_fencing).
FENCE = "version = :expected_version AND lease_token = :token"

#: Bounds of a lease's time to live, in seconds. Below 50 ms a worker could not renew in
#: time; above a day, a dead worker's run would wait longer than anyone would.
MIN_LEASE_SECONDS = 0.05
MAX_LEASE_SECONDS = 86_400.0
#: The longest worker name kept: it is shown in errors and tables.
MAX_WORKER_NAME = 100


@dataclass(frozen=True)
class Lease:
    """A worker's lease on one run, as that worker knows it.

    ``step`` and ``state_version`` are the run's state as the worker last saw it: what its
    next fenced commit expects. A commit moves them on (the lease returned by
    :func:`fenced_advance_txn`); a renewal moves ``expires_at`` on.
    """

    incident: str
    token: int
    worker: str
    step: Step
    state_version: int
    claimed_at: str
    expires_at: str
    replaces: int | None = None  # the token of the expired lease this claim took over


@dataclass(frozen=True)
class LeaseRow:
    """One row of ``leases``."""

    token: int
    incident: str
    worker: str
    claimed_at: str
    expires_at: str
    replaces: int | None
    ended: str | None
    ended_at: str | None


@dataclass(frozen=True)
class LeaseEvent:
    """One row of ``lease_events``, with the worker that held the token."""

    seq: int
    at: str
    incident: str
    token: int
    worker: str
    event: str
    state_version: int
    detail: str


# --------------------------------------------------------------------------- checks of input


def check_lease_seconds(value: object) -> float:
    """``value`` as a time to live in seconds, or BadLeaseSeconds (NaN, infinity, a bool, out of range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadLeaseSeconds(value, MIN_LEASE_SECONDS, MAX_LEASE_SECONDS)
    seconds = float(value)
    if not (math.isfinite(seconds) and MIN_LEASE_SECONDS <= seconds <= MAX_LEASE_SECONDS):
        raise BadLeaseSeconds(value, MIN_LEASE_SECONDS, MAX_LEASE_SECONDS)
    return seconds


def check_worker_name(name: object) -> str:
    if not isinstance(name, str) or not 0 < len(name) <= MAX_WORKER_NAME or not name.isprintable():
        raise BadWorkerName(name, MAX_WORKER_NAME)
    return name


def _now(clock: Clock) -> tuple[str, str]:
    """One reading of ``clock``: as rows store it, and as a lease instant (fixed width, ms)."""
    text = clock.now()
    return text, iso_milliseconds(parse_instant(text))


def _later(instant: str, seconds: float) -> str:
    return iso_milliseconds(parse_instant(instant) + timedelta(seconds=seconds))


#: A lease event's detail is one line of at most this many characters.
MAX_DETAIL_CHARS = 300


def _event_txn(conn: sqlite3.Connection, token: int, incident: str, event: str, state_version: int, at: str,
               detail: str = "") -> None:
    # A detail can quote what a provider answered (a refused answer's value, in the error that
    # ended a lease): redacted like the evidence, before it is cut, never stored as it came.
    detail = redact_line(detail, MAX_DETAIL_CHARS)
    conn.execute(
        "INSERT INTO lease_events (token, incident, event, state_version, at, detail) VALUES (?, ?, ?, ?, ?, ?)",
        (token, incident, event, state_version, at, detail),
    )


def _lease_row(row: sqlite3.Row) -> LeaseRow:
    return LeaseRow(row["token"], row["incident"], row["worker"], row["claimed_at"], row["expires_at"], row["replaces"],
                    row["ended"], row["ended_at"])


def find_lease_txn(conn: sqlite3.Connection, token: int) -> LeaseRow | None:
    row = conn.execute("SELECT * FROM leases WHERE token = ?", (token,)).fetchone()
    return _lease_row(row) if row else None


# --------------------------------------------------------------------------- claim


def claim(conn: sqlite3.Connection, incident: str, worker: str, lease_seconds: float, clock: Clock) -> Lease:
    """Lease the run of ``incident`` to ``worker`` for ``lease_seconds``, in one transaction.

    Refused: a run that does not exist (UnknownRun) or is of another workflow version, a
    completed run (:class:`RunCompleted`), a run whose lease is live (:class:`LeaseHeld`).
    A run whose lease expired is taken over: that lease ends as ``taken_over``, and the new
    one, with a larger token, records which it replaced.
    """
    seconds = check_lease_seconds(lease_seconds)
    check_worker_name(worker)
    with transaction(conn):
        return claim_txn(conn, incident, worker, seconds, clock)


def claim_txn(conn: sqlite3.Connection, incident: str, worker: str, lease_seconds: float, clock: Clock) -> Lease:
    """:func:`claim` inside the caller's write transaction (whose lock makes read-then-write atomic)."""
    require_write_transaction(conn, "claim_txn")
    row = conn.execute(
        "SELECT r.workflow_version, r.step, r.version, r.lease_token, l.worker, l.expires_at, l.ended"
        " FROM runs r LEFT JOIN leases l ON l.token = r.lease_token WHERE r.incident = ?",
        (incident,),
    ).fetchone()
    if row is None:
        raise UnknownRun(incident)
    check_run_version(incident, row["workflow_version"])
    step = Step(row["step"])
    if step is Step.REPORT_COMPLETED:
        raise RunCompleted(incident)
    _, now = _now(clock)
    replaces, detail = None, ""
    if row["lease_token"] is not None and row["ended"] is None:
        if now < row["expires_at"]:
            raise LeaseHeld(incident, row["lease_token"], row["worker"], row["expires_at"])
        replaces = row["lease_token"]
        detail = f"took over token {replaces} from {row['worker']}, expired at {row['expires_at']}"
        conn.execute("UPDATE leases SET ended = 'taken_over', ended_at = ? WHERE token = ?", (now, replaces))
    expires = _later(now, lease_seconds)
    token = conn.execute(
        "INSERT INTO leases (incident, worker, claimed_at, expires_at, replaces) VALUES (?, ?, ?, ?, ?)",
        (incident, worker, now, expires, replaces),
    ).lastrowid
    assert token is not None
    # Not UPDATE OF step: the trigger that holds the step order does not fire, and the state
    # version does not move. A lease changes who may move the run, not where it is.
    conn.execute("UPDATE runs SET lease_token = ? WHERE incident = ?", (token, incident))
    _event_txn(conn, token, incident, "claimed", row["version"], now, detail)
    return Lease(incident, token, worker, step, row["version"], now, expires, replaces)


def claimable_txn(conn: sqlite3.Connection, now: str, *, failed_after: int | None = None) -> Generator[str, None, None]:
    """Unfinished runs that nobody holds a live lease on, in incident order, read lazily.

    Lazily, so that a claim reads only as far as the first free run it wants, not every
    unfinished run (which made a pool's claims grow with the backlog squared). With
    ``failed_after``, a run whose lease with a token above it ended ``failed`` is left out:
    one attempt of a ``work`` command that failed is not retried by that same command.
    """
    cursor = conn.execute(
        "SELECT r.incident FROM runs r LEFT JOIN leases l ON l.token = r.lease_token"
        " WHERE r.step != 'report_completed'"
        "   AND (l.token IS NULL OR l.ended IS NOT NULL OR l.expires_at <= :now)"
        "   AND (:after IS NULL OR NOT EXISTS (SELECT 1 FROM leases f WHERE f.incident = r.incident"
        "                                        AND f.ended = 'failed' AND f.token > :after))"
        " ORDER BY r.incident",
        {"now": now, "after": failed_after},
    )
    with closing(cursor):
        for (incident,) in cursor:
            yield incident


def claim_next(conn: sqlite3.Connection, worker: str, lease_seconds: float, clock: Clock, *,
               incidents: Collection[str] | None = None, failed_after: int | None = None) -> Lease | None:
    """Claim the first run (of ``incidents``, if given) that is unfinished and free; None if there is none.

    Choosing and claiming share one transaction, so two workers never both get one run.
    """
    seconds = check_lease_seconds(lease_seconds)
    check_worker_name(worker)
    wanted = None if incidents is None else set(incidents)
    with transaction(conn):
        _, now = _now(clock)
        free = claimable_txn(conn, now, failed_after=failed_after)
        chosen = next((incident for incident in free if wanted is None or incident in wanted), None)
        free.close()  # its cursor is closed before the claim writes
        if chosen is not None:
            return claim_txn(conn, chosen, worker, seconds, clock)
    return None


@dataclass(frozen=True)
class Backlog:
    """What is left for workers: unfinished runs, and when the first live lease among them expires."""

    unfinished: list[str]
    next_expiry: str | None


def backlog_txn(conn: sqlite3.Connection, *, incidents: Collection[str] | None = None, failed_after: int | None = None) -> Backlog:
    """Runs not yet completed (nor failed since ``failed_after``), and the earliest expiry among their live leases."""
    wanted = None if incidents is None else set(incidents)
    rows = conn.execute(
        "SELECT r.incident, CASE WHEN l.ended IS NULL THEN l.expires_at END AS live_until"
        " FROM runs r LEFT JOIN leases l ON l.token = r.lease_token"
        " WHERE r.step != 'report_completed'"
        "   AND (:after IS NULL OR NOT EXISTS (SELECT 1 FROM leases f WHERE f.incident = r.incident"
        "                                        AND f.ended = 'failed' AND f.token > :after))"
        " ORDER BY r.incident",
        {"after": failed_after},
    ).fetchall()
    rows = [row for row in rows if wanted is None or row[0] in wanted]
    expiries = [row[1] for row in rows if row[1] is not None]
    return Backlog([row[0] for row in rows], min(expiries) if expiries else None)


def latest_token_txn(conn: sqlite3.Connection) -> int:
    """The largest token handed out so far (0 before the first claim): every later claim is above it."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'leases'").fetchone()
    return int(row[0]) if row else 0


# --------------------------------------------------------------------------- renew, release


def renew(conn: sqlite3.Connection, lease: Lease, lease_seconds: float, clock: Clock) -> Lease:
    """Extend a live lease to ``now + lease_seconds``; return the lease with its new expiry.

    Refused: a lease that is no longer the run's (:class:`StaleLease`), that belongs to
    another worker (:class:`NotLeaseHolder`), that ended (:class:`LeaseEnded`) or that
    expired, even if nobody took it over yet (:class:`LeaseExpired`): a live lease is
    ``now < expires_at``, so renewing at the very instant of expiry is too late.
    """
    seconds = check_lease_seconds(lease_seconds)
    with transaction(conn):
        current = _current_token_txn(conn, lease.incident)
        mine = find_lease_txn(conn, lease.token)
        if mine is None or mine.incident != lease.incident:
            raise StaleLease(lease.incident, "renewal", lease.token, current)
        if mine.worker != lease.worker:
            raise NotLeaseHolder(lease.incident, lease.token, mine.worker, lease.worker)
        if current != lease.token:
            raise StaleLease(lease.incident, "renewal", lease.token, current)
        if mine.ended is not None:
            raise LeaseEnded(lease.incident, lease.token, mine.ended)
        _, now = _now(clock)
        if now >= mine.expires_at:
            raise LeaseExpired(lease.incident, lease.token, mine.expires_at, now)
        expires = _later(now, seconds)
        conn.execute("UPDATE leases SET expires_at = ? WHERE token = ?", (expires, lease.token))
        version = conn.execute("SELECT version FROM runs WHERE incident = ?", (lease.incident,)).fetchone()[0]
        _event_txn(conn, lease.token, lease.incident, "renewed", version, now, f"until {expires}")
    return replace(lease, expires_at=expires)


def release(conn: sqlite3.Connection, lease: Lease, clock: Clock, *, failure: str | None = None) -> bool:
    """End ``lease`` early, so that another worker need not wait for it to expire.

    With ``failure`` (a one-line reason) it ends as ``failed``, which keeps the same
    ``work`` command from retrying the run; otherwise as ``released``. Returns False, and
    writes nothing, if the lease is no longer the run's or has already ended.
    """
    with transaction(conn):
        mine = find_lease_txn(conn, lease.token)
        if mine is None or mine.ended is not None or mine.worker != lease.worker:
            return False
        if _current_token_txn(conn, lease.incident) != lease.token:
            return False
        _, now = _now(clock)
        ended = "failed" if failure is not None else "released"
        conn.execute("UPDATE leases SET ended = ?, ended_at = ? WHERE token = ?", (ended, now, lease.token))
        version = conn.execute("SELECT version FROM runs WHERE incident = ?", (lease.incident,)).fetchone()[0]
        _event_txn(conn, lease.token, lease.incident, ended, version, now, failure or "")
    return True


def end_lease_txn(conn: sqlite3.Connection, lease: Lease, clock: Clock) -> None:
    """Mark the lease ``completed``, inside the transaction that completed its run."""
    require_write_transaction(conn, "end_lease_txn")
    _, now = _now(clock)
    conn.execute("UPDATE leases SET ended = 'completed', ended_at = ? WHERE token = ? AND ended IS NULL", (now, lease.token))


def _current_token_txn(conn: sqlite3.Connection, incident: str) -> int | None:
    row = conn.execute("SELECT lease_token FROM runs WHERE incident = ?", (incident,)).fetchone()
    if row is None:
        raise UnknownRun(incident)
    return row[0]


# --------------------------------------------------------------------------- the fenced commit


def fenced_advance_txn(conn: sqlite3.Connection, lease: Lease, clock: Clock, *, condition: str = FENCE) -> Lease:
    """Move the run one step on from where ``lease`` saw it, only if :data:`FENCE` (or ``condition``) holds.

    The store's compare-and-set decides (:func:`labkit.store.advance_txn` with a
    :class:`~labkit.store.Fence`): ``UPDATE runs SET step = next, version = version + 1 ...
    WHERE incident = :incident AND (condition)``, with ``:expected_version`` and ``:token``
    from the lease. On success the transition and a ``committed`` event are written, and the
    lease is returned as it now stands (the next step, the next version). On refusal nothing
    but a ``refused`` event is written, and :class:`StaleLease` is raised: the caller should
    let its transaction commit that event (so the refusal is on record) and then raise it.

    ``condition`` is for 10_leases_and_fencing's exercise, where the learner writes it. The
    database's own trigger (one step forward, the version by one) still stands behind it.
    """
    require_write_transaction(conn, "fenced_advance_txn")
    to = lease.step.next
    if to is None:
        raise StepOrderError(lease.incident, lease.step.value, "a leased commit")
    action = "evidence commit" if to is Step.EVIDENCE_RECORDED else "completion"
    at, now = _now(clock)
    run = find_run_txn(conn, lease.incident)
    if run is None:
        raise UnknownRun(lease.incident)
    seen = replace(run, step=lease.step, version=lease.state_version)  # the run as this worker read it
    try:
        advance_txn(conn, seen, to, clock, fence=Fence(lease.token, condition), at=at)
    except StaleTransition:
        version, current = conn.execute("SELECT version, lease_token FROM runs WHERE incident = ?", (lease.incident,)).fetchone()
        _event_txn(conn, lease.token, lease.incident, "refused", lease.state_version, now,
                   f"{action}: expected state version {lease.state_version} under token {lease.token}; "
                   f"found version {version} under token {current}")
        raise StaleLease(lease.incident, action, lease.token, current, lease.state_version, version) from None
    _event_txn(conn, lease.token, lease.incident, "committed", lease.state_version + 1, now, to.value)
    return replace(lease, step=to, state_version=lease.state_version + 1)


# --------------------------------------------------------------------------- reading the rows


def leases_txn(conn: sqlite3.Connection, incident: str | None = None) -> list[LeaseRow]:
    where, params = ("WHERE incident = ?", (incident,)) if incident is not None else ("", ())
    return [_lease_row(row) for row in conn.execute(f"SELECT * FROM leases {where} ORDER BY token", params)]


def lease_events_txn(conn: sqlite3.Connection, incident: str | None = None) -> list[LeaseEvent]:
    """Every lease event in commit order: the timeline of who held what, and which commits were refused."""
    where, params = ("WHERE e.incident = ?", (incident,)) if incident is not None else ("", ())
    rows = conn.execute(
        "SELECT e.seq, e.at, e.incident, e.token, l.worker, e.event, e.state_version, e.detail"
        f" FROM lease_events e JOIN leases l ON l.token = e.token {where} ORDER BY e.seq",
        params,
    )
    return [LeaseEvent(*row) for row in rows]


def lease_log(db: str | Path, incident: str | None = None) -> list[LeaseEvent]:
    """:func:`lease_events_txn` through a read-only connection of its own (for lessons and reports)."""
    with closing(connect_readonly(db)) as conn, read_transaction(conn):
        return lease_events_txn(conn, incident)


def refused_commits_txn(conn: sqlite3.Connection) -> int:
    """How many stale commits the fence refused (each left a ``refused`` event)."""
    return conn.execute("SELECT COUNT(*) FROM lease_events WHERE event = 'refused'").fetchone()[0]


def redact_details_txn(conn: sqlite3.Connection, incidents: Sequence[str]) -> int:
    """Redact the lease events' details of ``incidents`` as :func:`_event_txn` writes one today; how many changed.

    For details an earlier labkit stored as they came (a refused password, a URI with its
    credentials): :func:`labkit.retention.retain` calls it for the runs it retains.
    """
    require_write_transaction(conn, "redact_details_txn")
    rows = conn.execute("SELECT seq, detail FROM lease_events WHERE detail != ''"
                        " AND incident IN (SELECT value FROM json_each(?))", (canonical_json(list(incidents)),)).fetchall()
    changed = [(clean, seq) for seq, detail in rows if (clean := redact_line(detail, MAX_DETAIL_CHARS)) != detail]
    conn.executemany("UPDATE lease_events SET detail = ? WHERE seq = ?", changed)
    return len(changed)
