"""The leased flow and its worker pool: ``python -m labkit work``.

:class:`LeasedWorker` drives a run the way a production worker would
(:mod:`labkit.leases` explains why): claim a lease, read the provider with no transaction
open, then commit the evidence and the completion, each in one short transaction fenced by
(expected state version, token). The reference :class:`~labkit.coordinator.Coordinator`
stays as it is for lessons 02 to 09; both write the same rows, the leased one adds its lease.

:func:`work` is the pool: it creates the runs, starts N worker *processes*, and returns when
every run it was given is ``report_completed``. Killed (SIGKILL to the command, to any of
its workers, or both) and started again, it finishes the rest:

- a worker killed while it holds a lease leaves the lease to expire; any worker, of this
  command or of the next, then takes the run over with a larger token. A read the dead
  worker made and never committed is made again (N1, as in 05_crash_and_reread);
- a worker that stalls past its lease and wakes up is refused at its commit (the fence),
  and goes on with other runs;
- workers whose command died finish the run they are on, then stop (they watch their
  standard input, which the command holds open: it closes when the command dies).

:func:`measure_flows` times both flows for real, with a slow provider: how long each run
holds SQLite's write lock, how long a second writer waits, and runs per second with 1, 2
and 4 workers. Taught in 10_leases_and_fencing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from . import contract
from .children import ended, pump, this_labkit
from .clock import Clock, ManualClock, SystemClock, parse_instant
from .coordinator import (
    WORKFLOW_VERSION,
    Coordinator,
    check_run_version,
    completion_decision_txn,
    issue_completion_txn,
    record_evidence_txn,
)
from .crashpoints import LEASE_POINTS, NO_CRASH, CrashPlan, CrashPoint
from .database import BEGIN_WRITE, check_path, read_transaction, transaction, translate, write_lock
from .errors import (
    BadInput,
    InconsistentRun,
    LabError,
    RunFailure,
    StepOrderError,
    UnknownCrashPoint,
    UnknownIncident,
    error_line,
    one_line,
    report,
    shown,
)
from .leases import (
    FENCE,
    Lease,
    LeaseEnded,
    LeaseEvent,
    LeaseExpired,
    StaleLease,
    backlog_txn,
    check_lease_seconds,
    check_worker_name,
    claim,
    claim_next,
    end_lease_txn,
    fenced_advance_txn,
    latest_token_txn,
    lease_events_txn,
    release,
    renew,
)
from .provider import CallLog, ReadAdapter, Reading, ReferenceProvider, call_log_for, list_incidents, provider_delay, read_with_diagnostic
from .receipts import Receipt
from .steps import Step
from .store import connect, create_run_txn, has_evidence_txn, list_runs_txn

#: A lease's time to live in ``work`` unless ``--lease-seconds`` says otherwise. Workers renew
#: at a third of it, so a slow provider never costs a live worker its lease; a killed
#: worker's run waits at most this long before another worker takes it over.
DEFAULT_LEASE_SECONDS = 5.0
#: The most worker processes ``work`` starts (the lab runs on a laptop).
MAX_WORKERS = 32
#: The longest an idle worker sleeps before looking for work again, in seconds.
POLL_SECONDS = 0.1


# --------------------------------------------------------------------------- the leased flow


@dataclass(frozen=True)
class CheckedReading:
    """A provider's answer that passed the evidence contract, not yet committed: a candidate.

    ``body`` is the contract-checked response; ``diagnostic`` the raw diagnostic it came
    from, stored apart and redacted with the evidence (:func:`labkit.coordinator.record_evidence_txn`).
    """

    incident: str
    body: dict
    diagnostic: bytes | str


@dataclass(frozen=True)
class LeasedResult:
    """What one worker did with one leased run."""

    incident: str
    token: int
    from_step: Step
    read_provider: bool
    receipt: Receipt
    took_over: int | None = None  # the expired lease this one replaced

    @property
    def outcome(self) -> str:
        read = "read the provider" if self.read_provider else "completed from committed evidence, no read"
        over = f", took over expired lease {self.took_over}" if self.took_over is not None else ""
        return f"report_completed under lease {self.token}{over}, receipt {self.receipt.receipt_id} ({read})"


class LeasedWorker:
    """A worker of the leased flow: claim, read outside any transaction, commit fenced.

    The same steps as :class:`~labkit.coordinator.Coordinator`, in other transactions:

    ====================  =====================================  ======================================
    step                  Coordinator (lessons 02-09)            LeasedWorker
    ====================  =====================================  ======================================
    who works on the run  whoever gets the write lock            the holder of its lease (``claim``)
    provider read         inside the write transaction           with no transaction open (``read``)
    evidence commit       same transaction as the read           short, fenced (``commit_evidence``)
    completion            one transaction                        one fenced transaction (``complete``)
    ====================  =====================================  ======================================

    ``condition`` replaces :data:`~labkit.leases.FENCE` (10_leases_and_fencing's exercise).
    ``crash`` arms a crash point, as for a run; ``after_lease`` is the leased flow's own.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        provider: ReadAdapter,
        *,
        name: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        clock: Clock | None = None,
        crash: CrashPlan = NO_CRASH,
        condition: str = FENCE,
    ):
        self.conn = conn
        self.provider = provider
        self.name = check_worker_name(name)
        self.lease_seconds = check_lease_seconds(lease_seconds)
        self.clock = clock or SystemClock(milliseconds=True)
        self.crash = crash
        self.condition = condition

    def __repr__(self) -> str:
        return f"LeasedWorker({self.name!r})"

    def claim(self, incident: str) -> Lease:
        lease = claim(self.conn, incident, self.name, self.lease_seconds, self.clock)
        self.crash.reached(CrashPoint.AFTER_LEASE, self.conn)
        return lease

    def claim_next(self, incidents: Sequence[str] | None = None, failed_after: int | None = None) -> Lease | None:
        lease = claim_next(self.conn, self.name, self.lease_seconds, self.clock, incidents=incidents, failed_after=failed_after)
        if lease is not None:
            self.crash.reached(CrashPoint.AFTER_LEASE, self.conn)
        return lease

    def renew(self, lease: Lease) -> Lease:
        return renew(self.conn, lease, self.lease_seconds, self.clock)

    def release(self, lease: Lease, failure: str | None = None) -> bool:
        return release(self.conn, lease, self.clock, failure=failure)

    def read(self, lease: Lease, *, renew: bool = False) -> CheckedReading:
        """Ask the provider, with no transaction open, and check the answer against the evidence contract.

        Nothing is committed: the answer is only a candidate until :meth:`commit_evidence`.
        The provider's own log records the read either way. With ``renew``, the lease is
        renewed at a third of its time to live while the provider takes its time
        (:meth:`_call_renewing`): a slow provider then never costs a live worker its lease.
        """
        if self.conn.in_transaction:
            raise RuntimeError("the leased flow reads the provider with no transaction open; this connection has one")
        if lease.step is not Step.NOT_INSPECTED:
            raise StepOrderError(lease.incident, lease.step.value, "inspect")
        self.crash.reached(CrashPoint.BEFORE_READ, self.conn)
        reading = self._call_renewing(lease) if renew else read_with_diagnostic(self.provider, lease.incident)
        self.crash.reached(CrashPoint.AFTER_READ, self.conn)
        return CheckedReading(lease.incident, contract.check_evidence(reading.response, lease.incident), reading.diagnostic)

    def _call_renewing(self, lease: Lease) -> Reading:
        """The provider call in a thread of its own, while this thread renews the lease on this worker's connection.

        Why not a second connection for a heartbeat: labkit opens a file by reading its header
        first, and POSIX drops every lock a process holds on a file when *any* descriptor of
        it is closed. A second connection in a process whose first one holds SQLite's locks
        therefore silently releases them, and another process may then take itself for the
        last user of the database and delete its write-ahead log under this one (SQLite's
        "How To Corrupt", 2.2): the soak found exactly that. The thread only calls the
        provider; every database statement stays on this thread and this connection.

        A worker paused as a whole (SIGSTOP, a swap storm) stops renewing too: that is the
        stale worker the fence is for.
        """
        answer: dict[str, Any] = {}

        def call() -> None:
            try:
                answer["reading"] = read_with_diagnostic(self.provider, lease.incident)
            except BaseException as error:  # handed to the worker's thread, which raises it
                answer["error"] = error

        caller = threading.Thread(target=call, name=f"provider-{lease.incident}", daemon=True)
        caller.start()
        current: Lease | None = lease
        while True:
            caller.join(self.lease_seconds / 3)
            if not caller.is_alive():
                break
            if current is None:
                continue  # lost: the fence will refuse this worker's commit; wait for the answer all the same
            try:
                current = self.renew(current)
            except (StaleLease, LeaseExpired, LeaseEnded):
                current = None
            except (LabError, sqlite3.Error):
                pass  # the database was busy: the next beat tries again, before the lease runs out
        if "error" in answer:
            raise answer["error"]
        return answer["reading"]

    def commit_evidence(self, lease: Lease, reading: CheckedReading) -> Lease:
        """Commit the evidence and the step, fenced; return the lease at ``evidence_recorded``.

        Raises :class:`~labkit.leases.StaleLease` if the fence refuses: the evidence is
        discarded, and only the refusal is written.
        """
        refused: StaleLease | None = None
        with transaction(self.conn):
            try:
                advanced = fenced_advance_txn(self.conn, lease, self.clock, condition=self.condition)
            except StaleLease as error:
                refused = error  # committed as a `refused` event, nothing else
            else:
                if has_evidence_txn(self.conn, lease.incident):
                    raise InconsistentRun(lease.incident, "it was at not_inspected but already had evidence")
                if reading.incident != lease.incident:
                    raise ValueError(f"a reading of {reading.incident} cannot be committed to run {lease.incident}")
                # The reference flow's evidence write: bounded evidence with a reference to the raw
                # diagnostic, kept apart, both redacted before anything is written.
                record_evidence_txn(self.conn, lease.incident, reading.body, reading.diagnostic, self.provider, self.clock,
                                    WORKFLOW_VERSION)
                self.crash.reached(CrashPoint.BEFORE_EVIDENCE_COMMIT, self.conn)
        if refused is not None:
            raise refused
        self.crash.reached(CrashPoint.AFTER_EVIDENCE_COMMIT, self.conn)
        return advanced

    def complete(self, lease: Lease) -> Receipt:
        """Build the report from stored evidence and commit receipt, step and the lease's end, fenced."""
        refused: StaleLease | None = None
        with transaction(self.conn):
            self.crash.reached(CrashPoint.BEFORE_RECEIPT_WRITE, self.conn)
            try:
                fenced_advance_txn(self.conn, lease, self.clock, condition=self.condition)
            except StaleLease as error:
                refused = error
            else:
                # The coordinator's completion decision and write; the fence above replaced its step check.
                _, evidence, assessment = completion_decision_txn(self.conn, lease.incident, WORKFLOW_VERSION)
                receipt, _ = issue_completion_txn(self.conn, lease.incident, WORKFLOW_VERSION, evidence, assessment, self.clock)
                end_lease_txn(self.conn, lease, self.clock)
                self.crash.reached(CrashPoint.BEFORE_COMPLETION_COMMIT, self.conn)
        if refused is not None:
            raise refused
        self.crash.reached(CrashPoint.AFTER_COMPLETION_COMMIT, self.conn)
        return receipt

    def finish(self, lease: Lease, *, renew: bool = False) -> LeasedResult:
        """Take a leased run from its step to ``report_completed``; with ``renew``, renew the lease while reading."""
        from_step = lease.step
        read = lease.step is Step.NOT_INSPECTED
        if read:
            lease = self.commit_evidence(lease, self.read(lease, renew=renew))
        receipt = self.complete(lease)
        return LeasedResult(lease.incident, lease.token, from_step, read, receipt, lease.replaces)

    def drive(self, incident: str) -> LeasedResult:
        """Claim ``incident``'s run and finish it, without renewing: for lessons, whose clock is in their hands."""
        return self.finish(self.claim(incident))


# --------------------------------------------------------------------------- the race, for the lesson


@dataclass(frozen=True)
class StaleRace:
    """What :func:`stale_worker_race` saw: the refusal, the winner, and the rows behind them."""

    refused: StaleLease
    winner: LeasedResult
    provider_reads: int
    receipts: int
    events: list[LeaseEvent]


def stale_worker_race(db: str | Path, incident: str, clock: ManualClock, *, lease_seconds: float = 30.0,
                      provider: ReadAdapter | None = None, condition: str = FENCE) -> StaleRace:
    """Worker A leases and reads, then stalls past its lease; B takes over and finishes; A commits late.

    Deterministic: the two workers are two connections in this process, and ``clock`` (a
    :class:`~labkit.clock.ManualClock` both share) is moved past A's lease by hand. The
    provider is read twice (its log shows both), the run ends with B's one receipt, and A's
    commit is refused with :class:`~labkit.leases.StaleLease`. With a ``condition`` weaker
    than :data:`~labkit.leases.FENCE`, A's commit may get through instead: then this raises
    AssertionError, which is what 10_leases_and_fencing's exercise checks.
    """
    provider = provider or ReferenceProvider(call_log_for(db))
    with closing(connect(db)) as conn_a, closing(connect(db)) as conn_b:
        with transaction(conn_a):
            create_run_txn(conn_a, incident, WORKFLOW_VERSION, clock)
        a = LeasedWorker(conn_a, provider, name="worker-A", lease_seconds=lease_seconds, clock=clock, condition=condition)
        b = LeasedWorker(conn_b, provider, name="worker-B", lease_seconds=lease_seconds, clock=clock, condition=condition)
        lease_a = a.claim(incident)
        reading_a = a.read(lease_a)
        clock.advance(lease_seconds + 1)  # A stalls: a pause, a swap storm; its lease runs out meanwhile
        winner = b.drive(incident)
        try:
            a.commit_evidence(lease_a, reading_a)
        except StaleLease as refused:
            error = refused
        else:
            raise AssertionError(f"worker A's late commit under lease {lease_a.token} was accepted after B's lease {winner.token}")
        with read_transaction(conn_a):
            receipts = conn_a.execute("SELECT COUNT(*) FROM receipts WHERE incident = ?", (incident,)).fetchone()[0]
            events = lease_events_txn(conn_a, incident)
    reads = CallLog(call_log_for(db)).reads_of(incident)
    return StaleRace(error, winner, reads, receipts, events)


# --------------------------------------------------------------------------- the pool: `work`


class BadWorkOption(BadInput):
    def __init__(self, option: str, value: object, expected: str):
        self.option, self.value, self.expected = option, value, expected
        super().__init__(f"{option} {shown(value)}: expected {expected}")


def _check_workers(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WORKERS:
        raise BadWorkOption("--workers", value, f"a whole number of worker processes from 1 to {MAX_WORKERS}")
    return value


def _check_delay(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and 0 <= value <= 60):
        raise BadWorkOption("--provider-delay", value, "a number of seconds from 0 to 60")
    return float(value)


def _check_incidents(incidents: Sequence[str], known: list[str]) -> list[str]:
    seen: set[str] = set()
    for incident in incidents:
        if incident not in known:
            raise UnknownIncident(incident, len(known))
        if incident in seen:
            raise BadWorkOption("--incident", incident, "each incident once")
        seen.add(incident)
    return list(incidents)


# As in labkit/__main__.py: jsonschema's optional IRI checker costs a second of start-up and
# the evidence contract uses no formats, so the worker lets that import fail.
_CHILD = ("import sys; sys.modules.setdefault('rfc3987_syntax', None); "
          "from labkit.worker import worker_process; sys.exit(worker_process(sys.argv[1:]))")


def _spawn(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=this_labkit(),  # the workers run this very labkit, installed or not
    )


def _send(child: subprocess.Popen, line: str) -> None:
    try:
        assert child.stdin is not None
        child.stdin.write(line + "\n")
        child.stdin.flush()
    except (BrokenPipeError, OSError, ValueError):
        pass  # the worker is gone already; its end is reported with the others


def work(
    db: str | Path,
    workers: int,
    *,
    incidents: Sequence[str] | None = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    delay: float | None = None,
    crash_at: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """``python -m labkit work``: create the runs, start ``workers`` processes, return the exit code.

    Every check of the input comes first, and raises :class:`~labkit.errors.BadInput`
    having changed nothing: the counts, the lease and the delay, the incidents (known, each
    once), the crash point, the paths, and the workflow version of every run to be worked
    on. Then, in one transaction, the missing runs are created: one for each of
    ``incidents`` or, by default, for every shipped incident; the runs to finish are those
    (by default, every unfinished run in the database). Workers lease and finish them;
    this returns 0 once none is left, and otherwise the worst exit code its workers
    reported (1 if they died without reporting: run the command again).

    ``delay`` makes the provider slow (seconds per read; default ``LABKIT_PROVIDER_DELAY``).
    ``crash_at`` arms a point of :data:`~labkit.crashpoints.LEASE_POINTS` in worker 1 alone.
    Workers run on the wall clock, to the millisecond, whatever ``LABKIT_CLOCK`` says: a
    pinned clock is one process's own, and leases compare instants across processes.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    count = _check_workers(workers)
    seconds = check_lease_seconds(lease_seconds)
    slow = provider_delay() if delay is None else _check_delay(delay)
    if crash_at is not None and crash_at not in LEASE_POINTS:
        raise UnknownCrashPoint(crash_at, LEASE_POINTS)
    path = check_path(db, must_exist=False)
    CallLog(call_log_for(path)).check()
    known = list_incidents()
    named = _check_incidents(incidents, known) if incidents else None
    clock = SystemClock(milliseconds=True)

    with closing(connect(path)) as conn:
        with transaction(conn):  # decide and create under one lock: nothing is created if anything is refused
            runs = {run.incident: run for run in list_runs_txn(conn)}
            if named is not None:
                targets = named
            else:
                targets = sorted(set(known) | {i for i, run in runs.items() if run.step is not Step.REPORT_COMPLETED})
            for incident in targets:
                run = runs.get(incident)
                if run is not None and run.step is not Step.REPORT_COMPLETED:  # a completed run is left as it is
                    check_run_version(incident, run.workflow_version, WORKFLOW_VERSION)
            for incident in targets:
                if incident not in runs:
                    create_run_txn(conn, incident, WORKFLOW_VERSION, clock)
            since = latest_token_txn(conn)
            unfinished = backlog_txn(conn, incidents=targets).unfinished
    done = len(targets) - len(unfinished)
    if not unfinished:
        print(f"work: all {len(targets)} runs are report_completed; nothing to do", file=out, flush=True)
        return 0
    print(f"work: {len(unfinished)} runs to finish ({done} already completed) with {count} worker processes, "
          f"leases of {seconds:g} s", file=out, flush=True)

    common = ["--db", str(path), "--lease-seconds", repr(seconds), "--provider-delay", repr(slow), "--failed-after", str(since),
              "--wait-for-go"]
    for incident in named or ():
        common += ["--incident", incident]
    children: list[subprocess.Popen] = []
    events: queue.Queue = queue.Queue()
    try:
        for number in range(1, count + 1):
            extra = ["--crash-at", crash_at] if crash_at is not None and number == 1 else []
            child = _spawn([*common, "--number", str(number), *extra])
            children.append(child)
            print(f"worker {number} started (pid {child.pid})", file=out, flush=True)
            pump(child.stdout, events, number, "out")
            pump(child.stderr, events, number, "err")
        # The workers start together, once each has loaded and said so: otherwise the first
        # to load takes the first runs, and the pool is only as wide as start-up allows.
        open_streams, ready, released = 2 * count, set(), False
        while open_streams:
            number, kind, line = events.get()
            line = line if line is None else line.rstrip("\n")
            if line is None:
                open_streams -= 1
                ready.add(number)  # a worker that ended before it was ready holds nobody up
            elif kind == "out" and line == "ready":
                ready.add(number)
            elif kind == "out":
                print(f"worker {number}: {line}", file=out, flush=True)
            else:
                print(line, file=err, flush=True)  # already one line, `labkit: failed: ...`
            if not released and len(ready) == count:
                released = True
                for child in children:
                    _send(child, "go")
        codes = [child.wait() for child in children]
    except BaseException:
        # Interrupted (Ctrl-C): the workers get the same signal from the terminal; a parent
        # that is simply going away stops them, and their open transactions roll back.
        for child in children:
            if child.poll() is None:
                child.terminate()
        raise
    finally:
        for child in children:
            if child.stdin is not None:
                child.stdin.close()
    for number, code in enumerate(codes, start=1):
        if code < 0:
            print(f"worker {number} died ({ended(code)})", file=out, flush=True)

    with closing(connect(path, create=False)) as conn, read_transaction(conn):
        left = backlog_txn(conn, incidents=targets).unfinished
        refused = conn.execute("SELECT COUNT(*) FROM lease_events WHERE event = 'refused' AND token > ?", (since,)).fetchone()[0]
        taken = conn.execute("SELECT COUNT(*) FROM leases WHERE token > ? AND replaces IS NOT NULL", (since,)).fetchone()[0]
    finished = len(targets) - len(left)
    print(f"work: {finished} of {len(targets)} runs report_completed; {refused} stale commit{'s' * (refused != 1)} refused, "
          f"{taken} expired lease{'s' * (taken != 1)} taken over", file=out, flush=True)
    if not left:
        return 0
    reported = [code for code in codes if code > 0]
    if not reported:
        return report(RunFailure(f"{len(left)} runs are not finished ({', '.join(left[:3])}{', ...' * (len(left) > 3)}): "
                                 f"every worker ended ({', '.join(ended(code) for code in codes)}); run work again, "
                                 "expired leases are taken over"), err)
    return max(reported)


# --------------------------------------------------------------------------- a worker process


class _Output:
    """A worker's standard output to its parent; a parent that is gone makes it a sink and stops the worker."""

    def __init__(self, stop: threading.Event):
        self.stop = stop
        self.lock = threading.Lock()

    def say(self, line: str, stream: TextIO | None = None) -> None:
        with self.lock:
            try:
                target = stream or sys.stdout
                print(one_line(line), file=target, flush=True)
            except (BrokenPipeError, ValueError, OSError):
                self.stop.set()
                sys.stdout = sys.stderr = open(os.devnull, "w")  # a sink until the process exits


def _watch_parent(stop: threading.Event, go: threading.Event) -> None:
    """Standard input is the parent's: a line ``go`` starts a measured run; its end means the parent is gone."""
    for line in sys.stdin:
        if line.strip() == "go":
            go.set()
    stop.set()
    go.set()


def worker_process(argv: list[str]) -> int:
    """The main of one worker process of :func:`work` (or of :func:`measure_flows`)."""
    parser = argparse.ArgumentParser(prog="labkit-worker")
    parser.add_argument("--db", required=True)
    parser.add_argument("--number", type=int, required=True)
    parser.add_argument("--lease-seconds", type=float, default=DEFAULT_LEASE_SECONDS)
    parser.add_argument("--provider-delay", type=float, default=0.0)
    parser.add_argument("--failed-after", type=int, default=None)
    parser.add_argument("--incident", action="append", default=None, help="the runs to work on; default: every unfinished run")
    parser.add_argument("--crash-at", default=None)
    parser.add_argument("--flow", choices=("leased", "in-transaction"), default="leased")
    parser.add_argument("--of", type=int, default=1, help="in-transaction flow: the number of workers sharing the runs")
    parser.add_argument("--wait-for-go", action="store_true")
    parser.add_argument("--report-lock-times", action="store_true")
    args = parser.parse_args(argv)
    stop, go = threading.Event(), threading.Event()
    output = _Output(stop)
    threading.Thread(target=_watch_parent, args=(stop, go), daemon=True).start()
    try:
        return _work_as(args, output, stop, go)
    except KeyboardInterrupt:
        return 130
    except (LabError, sqlite3.Error) as failure:
        error = failure if isinstance(failure, LabError) else translate(failure, args.db)
        output.say(error_line(error, f"worker {args.number}"), sys.stderr)
        return error.exit_code
    except Exception as error:  # a bug: still one line for the parent to pass on
        stopped = RunFailure(f"worker {args.number} stopped on {type(error).__name__}: {error}")
        output.say(error_line(stopped), sys.stderr)
        return stopped.exit_code


def _work_as(args: argparse.Namespace, output: _Output, stop: threading.Event, go: threading.Event) -> int:
    incidents = args.incident
    crash = CrashPlan(CrashPoint(args.crash_at)) if args.crash_at else NO_CRASH
    conn = connect(args.db, create=False)
    timer = LockTimer(conn) if args.report_lock_times else None
    provider = ReferenceProvider(call_log_for(args.db), delay=args.provider_delay)
    clock = SystemClock(milliseconds=True)
    # Load the evidence contract's validator now: the first check would otherwise pay for
    # it inside the first run (and, in the reference flow, inside its write transaction).
    contract._validator()
    if args.wait_for_go:
        output.say("ready")
        go.wait()
    code = 0
    with closing(conn):
        if args.flow == "in-transaction":
            # The reference flow, for measurements: runs are dealt out in turn, since it has no
            # leases to share them by; the write lock alone keeps it correct.
            coordinator = Coordinator(conn, provider, clock=clock, crash=crash)
            for incident in (incidents or [])[args.number - 1 :: args.of]:
                coordinator.finish(incident)
        else:
            worker = LeasedWorker(conn, provider, name=f"worker-{args.number}-pid{os.getpid()}", lease_seconds=args.lease_seconds,
                                  clock=clock, crash=crash)
            code = _lease_loop(worker, incidents, args.failed_after, output, stop)
    if timer is not None:
        # The wall clock, not perf_counter: the measuring parent compares it with its own.
        output.say("lock-times " + json.dumps({"held": timer.held, "finished": time.time()}))
    return code


def _lease_loop(worker: LeasedWorker, incidents: list[str] | None, failed_after: int | None, output: _Output,
                stop: threading.Event) -> int:
    code = 0
    while not stop.is_set():
        lease = worker.claim_next(incidents, failed_after)
        if lease is None:
            with read_transaction(worker.conn):
                backlog = backlog_txn(worker.conn, incidents=incidents, failed_after=failed_after)
            if not backlog.unfinished:
                return code
            # Others hold the rest: wait for them to finish, or for a dead one's lease to expire.
            wait = POLL_SECONDS
            if backlog.next_expiry is not None:
                until = _seconds_until(backlog.next_expiry, worker.clock)
                wait = min(POLL_SECONDS, max(0.005, until))
            stop.wait(wait)
            continue
        try:
            result = worker.finish(lease, renew=True)
            output.say(f"{lease.incident}: {result.outcome}")
        except StaleLease as refused:
            output.say(f"{lease.incident}: {refused}")
        except (LabError, sqlite3.Error) as failure:
            error = failure if isinstance(failure, LabError) else translate(failure, _path_of(worker.conn))
            try:
                worker.release(lease, failure=f"{type(error).__name__}: {error}")
            except (LabError, sqlite3.Error):
                pass  # it will expire instead
            output.say(error_line(error), sys.stderr)
            code = max(code, error.exit_code)
    return code


def _seconds_until(instant: str, clock: Clock) -> float:
    return (parse_instant(instant) - parse_instant(clock.now())).total_seconds()


def _path_of(conn: sqlite3.Connection) -> Path:
    """The file of a connection opened by :func:`labkit.store.connect` (a LabConnection knows it)."""
    return Path(getattr(conn, "path", ""))


# --------------------------------------------------------------------------- measuring the two flows


class LockTimer:
    """Records how long one connection holds SQLite's write lock: from BEGIN IMMEDIATE returning
    to COMMIT or ROLLBACK returning, for every write transaction it runs.

    It wraps this one connection's ``execute`` (an attribute of the instance, so no other
    connection and no code path changes): both flows are timed by the same clock, around the
    very statements that take and give back the lock.
    """

    def __init__(self, conn: sqlite3.Connection):
        self.held: list[float] = []
        self._since: float | None = None
        original = conn.execute

        def execute(sql: str, *args: Any) -> sqlite3.Cursor:
            cursor = original(sql, *args)
            if sql == BEGIN_WRITE:
                self._since = time.perf_counter()
            elif sql in ("COMMIT", "ROLLBACK") and self._since is not None:
                self.held.append(time.perf_counter() - self._since)
                self._since = None
            return cursor

        setattr(conn, "execute", execute)  # noqa: B010 - mypy refuses assigning to a method


@dataclass(frozen=True)
class FlowMeasurement:
    """One measured configuration: a flow, a number of worker processes, a provider delay."""

    flow: str  # "in-transaction" (the reference Coordinator) or "leased"
    workers: int
    runs: int
    provider_delay: float
    seconds: float  # from the workers' start signal to the last run completed
    lock_ms_per_run: float  # the write lock held, summed over a run's transactions, averaged over runs
    longest_hold_ms: float  # the longest single write transaction
    writer_tries: int  # how many times a probe writer got the write lock while the workers ran
    writer_wait_ms: float  # its mean wait for the lock: SQLite's busy wait is not a queue, so a
    writer_wait_max_ms: float  # writer can starve while another holds the lock nearly all the time

    @property
    def runs_per_second(self) -> float:
        return self.runs / self.seconds if self.seconds > 0 else math.inf


class _Probe:
    """A second writer that asks for the write lock every ``interval`` s and records how long it waited."""

    def __init__(self, db: Path, interval: float):
        self.db, self.interval = db, interval
        self.waits: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with closing(connect(self.db, create=False)) as conn:
            while not self._stop.wait(self.interval):
                started = time.perf_counter()
                with write_lock(conn):
                    self.waits.append(time.perf_counter() - started)

    def __enter__(self) -> _Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def _scratch(folder: str | Path | None) -> Iterator[Path]:
    if folder is not None:
        yield Path(folder)
        return
    with tempfile.TemporaryDirectory(prefix="labkit-measure-") as made:
        yield Path(made)


def measure_flows(
    *,
    workers: Sequence[int] = (1, 2, 4),
    provider_delay: float = 0.2,
    incidents: Sequence[str] | None = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    folder: str | Path | None = None,
    probe_interval: float = 0.05,
    progress: Callable[[FlowMeasurement], None] | None = None,
) -> list[FlowMeasurement]:
    """Run both flows with a slow provider, for real, and measure them; one result per flow and worker count.

    For each count, both flows run on a fresh database of their own with the same runs
    (default: every shipped incident), in real worker processes that start together on a
    signal. Each worker times its own write transactions (:class:`LockTimer`); a probe in this
    process asks for the write lock every ``probe_interval`` s, as a second worker committing
    about another incident would. Nothing is compared with a stored figure: the machine
    decides. A lesson passes small numbers (a few incidents, 0.1 s) to finish in seconds.
    """
    count = [_check_workers(n) for n in workers]
    slow = _check_delay(provider_delay)
    seconds = check_lease_seconds(lease_seconds)
    chosen = _check_incidents(incidents, list_incidents()) if incidents else None
    results = []
    with _scratch(folder) as scratch:
        for index, n in enumerate(count):
            for flow in ("in-transaction", "leased"):
                db = scratch / f"measure-{index}-{flow}.db"
                result = _measure_once(db, flow, n, slow, chosen, seconds, probe_interval)
                results.append(result)
                if progress is not None:
                    progress(result)
    return results


def _measure_once(db: Path, flow: str, n: int, delay: float, incidents: Sequence[str] | None, lease_seconds: float,
                  probe_interval: float) -> FlowMeasurement:
    clock = SystemClock(milliseconds=True)
    runs = list(incidents or list_incidents())
    with closing(connect(db)) as conn, transaction(conn):
        for incident in runs:
            create_run_txn(conn, incident, WORKFLOW_VERSION, clock)
    args = ["--db", str(db), "--lease-seconds", repr(lease_seconds), "--provider-delay", repr(delay), "--flow", flow,
            "--of", str(n), "--wait-for-go", "--report-lock-times"]
    for incident in runs:
        args += ["--incident", incident]
    children = [_spawn([*args, "--number", str(k)]) for k in range(1, n + 1)]
    try:
        for child in children:
            assert child.stdout is not None
            line = child.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"a measuring worker did not start: {line or child.communicate()[1].strip()}")
        held: list[float] = []
        with _Probe(db, probe_interval) as probe:
            started = last = time.time()
            for child in children:
                _send(child, "go")
            for child in children:
                assert child.stdout is not None
                for line in child.stdout:
                    if line.startswith("lock-times "):
                        report = json.loads(line[len("lock-times "):])
                        held += report["held"]
                        last = max(last, report["finished"])
        for child in children:
            assert child.stdin is not None and child.stderr is not None
            child.stdin.close()
            error = child.stderr.read()
            if child.wait(timeout=60) != 0:
                raise RuntimeError(f"a measuring worker failed ({ended(child.returncode)}): {error.strip()}")
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    with closing(connect(db, create=False)) as conn, read_transaction(conn):
        completed = conn.execute("SELECT COUNT(*) FROM runs WHERE step = 'report_completed'").fetchone()[0]
        receipts = conn.execute("SELECT COUNT(*) FROM receipts").fetchone()[0]
    if (completed, receipts) != (len(runs), len(runs)):
        raise RuntimeError(f"the {flow} flow ended with {completed} of {len(runs)} runs completed and {receipts} receipts")
    waits = probe.waits or [0.0]
    return FlowMeasurement(
        flow, n, len(runs), delay, last - started, 1000 * sum(held) / len(runs), 1000 * max(held, default=0.0),
        len(probe.waits), 1000 * sum(waits) / len(waits), 1000 * max(waits),
    )


def measurement_table(results: Sequence[FlowMeasurement]) -> str:
    """The measurements as a text table, one line per flow and worker count."""
    lines = [f"{'flow':<15} {'workers':>7} {'runs/s':>7} {'lock held per run':>18} {'longest hold':>13}   "
             "a second writer: writes, mean and longest wait"]
    for r in results:
        lines.append(f"{r.flow:<15} {r.workers:>7} {r.runs_per_second:>7.1f} {r.lock_ms_per_run:>15.1f} ms "
                     f"{r.longest_hold_ms:>10.1f} ms   {r.writer_tries:>6} {r.writer_wait_ms:>9.1f} ms {r.writer_wait_max_ms:>9.1f} ms")
    return "\n".join(lines)
