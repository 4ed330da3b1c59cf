"""The ``work`` command's pool: ``python -m labkit work`` and its worker processes.

:func:`work` creates the runs, starts N worker *processes* (each a
:class:`~labkit.worker.LeasedWorker`), and returns when every run it was given is
``report_completed``. Killed (SIGKILL to the command, to any of its workers, or both) and
started again, it finishes the rest:

- a worker killed while it holds a lease leaves the lease to expire; any worker, of this
  command or of the next, then takes the run over with a larger token. A read the dead
  worker made and never committed is made again (N1, as in 05_crash_and_reread);
- a worker that stalls past its lease and wakes up is refused at its commit (the fence),
  and goes on with other runs;
- workers whose command died finish the run they are on, then stop (they watch their
  standard input, which the command holds open: it closes when the command dies).

The pieces of a worker process (:func:`worker_parser`, :func:`run_worker`,
:func:`open_worker`, :func:`lease_loop`, :func:`spawn_worker`) also serve the lock
measurements of :mod:`labkit.lab.locks`. Taught in 10_leases_and_fencing.
"""

from __future__ import annotations

import argparse
import math
import os
import queue
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from contextlib import closing
from pathlib import Path
from typing import TextIO

from . import contract
from .children import ended, pump, this_labkit
from .clock import Clock, SystemClock, parse_instant
from .coordinator import WORKFLOW_VERSION, check_run_version
from .crashpoints import NO_CRASH, CrashPlan, CrashPoint, check_reached
from .database import check_path, read_transaction, transaction, translate
from .errors import BadWorkOption, LabError, RunFailure, StaleLease, UnknownIncident, error_line, one_line, report
from .leases import backlog_txn, check_lease_seconds, latest_token_txn
from .provider import CallLog, ReferenceProvider, call_log_for, list_incidents, provider_delay
from .steps import Step
from .store import connect, create_run_txn, list_runs_txn
from .worker import DEFAULT_LEASE_SECONDS, LeasedWorker

#: The most worker processes ``work`` starts (the lab runs on a laptop).
MAX_WORKERS = 32
#: The longest an idle worker sleeps before looking for work again, in seconds.
POLL_SECONDS = 0.1


# --------------------------------------------------------------------------- the pool: `work`


def check_workers(value: object) -> int:
    """A number of worker processes, 1 to :data:`MAX_WORKERS`; else :class:`~labkit.errors.BadWorkOption`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WORKERS:
        raise BadWorkOption("--workers", value, f"a whole number of worker processes from 1 to {MAX_WORKERS}")
    return value


def check_delay(value: object) -> float:
    """A provider delay, 0 to 60 seconds; else :class:`~labkit.errors.BadWorkOption`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and 0 <= value <= 60):
        raise BadWorkOption("--provider-delay", value, "a number of seconds from 0 to 60")
    return float(value)


def check_incidents(incidents: Sequence[str], known: list[str]) -> list[str]:
    """``incidents``, each one of ``known`` and named once."""
    seen: set[str] = set()
    for incident in incidents:
        if incident not in known:
            raise UnknownIncident(incident, len(known))
        if incident in seen:
            raise BadWorkOption("--incident", incident, "each incident once")
        seen.add(incident)
    return list(incidents)


def spawn_worker(args: list[str], module: str = __name__, main: str = "worker_process") -> subprocess.Popen:
    """A worker process running ``module.main(args)``, its three standard streams piped to this one."""
    # As in labkit/__main__.py: jsonschema's optional IRI checker costs a second of start-up and
    # the evidence contract uses no formats, so the worker lets that import fail.
    code = f"import sys; sys.modules.setdefault('rfc3987_syntax', None); from {module} import {main}; sys.exit({main}(sys.argv[1:]))"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=this_labkit(),  # the workers run this very labkit, installed or not
    )


def send_line(child: subprocess.Popen, line: str) -> None:
    """Say ``line`` on a worker's standard input; a worker that is gone already is not an error here."""
    try:
        assert child.stdin is not None
        child.stdin.write(line + "\n")
        child.stdin.flush()
    except (BrokenPipeError, OSError, ValueError):
        # The worker is gone already; its end is reported with the others. The line stays in
        # the pipe's buffer after a failed flush, and closing would try to write it again.
        close_input(child)


def close_input(child: subprocess.Popen) -> None:
    """Close a worker's standard input (it then knows its parent is done with it), even when the
    worker is gone and the pipe still buffers a line for it: that line is dropped, not an error."""
    if child.stdin is None:
        return
    try:
        child.stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass  # the buffered line had nowhere to go; the file is closed all the same


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
    count = check_workers(workers)
    seconds = check_lease_seconds(lease_seconds)
    slow = provider_delay() if delay is None else check_delay(delay)
    if crash_at is not None:
        check_reached(crash_at, leased=True)
    path = check_path(db, must_exist=False)
    CallLog(call_log_for(path)).check()
    known = list_incidents()
    named = check_incidents(incidents, known) if incidents else None
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
            child = spawn_worker([*common, "--number", str(number), *extra])
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
                    send_line(child, "go")
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
            close_input(child)
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


class WorkerOutput:
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
    """Standard input is the parent's: a line ``go`` starts the work; its end means the parent is gone."""
    for line in sys.stdin:
        if line.strip() == "go":
            go.set()
    stop.set()
    go.set()


def worker_parser(prog: str = "labkit-worker") -> argparse.ArgumentParser:
    """The options every worker process takes; a measuring worker (:mod:`labkit.lab.locks`) adds its own."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--db", required=True)
    parser.add_argument("--number", type=int, required=True)
    parser.add_argument("--lease-seconds", type=float, default=DEFAULT_LEASE_SECONDS)
    parser.add_argument("--provider-delay", type=float, default=0.0)
    parser.add_argument("--failed-after", type=int, default=None)
    parser.add_argument("--incident", action="append", default=None, help="the runs to work on; default: every unfinished run")
    parser.add_argument("--crash-at", default=None)
    parser.add_argument("--wait-for-go", action="store_true")
    return parser


def worker_process(argv: list[str]) -> int:
    """The main of one worker process of :func:`work`."""
    return run_worker(worker_parser().parse_args(argv), _work_as)


WorkerMain = Callable[[argparse.Namespace, WorkerOutput, threading.Event, threading.Event], int]


def run_worker(args: argparse.Namespace, main: WorkerMain) -> int:
    """Run ``main(args, output, stop, go)`` as a worker process does: watching the parent on
    standard input, and turning any error into one line on stderr and its exit code."""
    stop, go = threading.Event(), threading.Event()
    output = WorkerOutput(stop)
    threading.Thread(target=_watch_parent, args=(stop, go), daemon=True).start()
    try:
        return main(args, output, stop, go)
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


def open_worker(args: argparse.Namespace, output: WorkerOutput, go: threading.Event) -> tuple[sqlite3.Connection, ReferenceProvider]:
    """A worker's database connection and provider, ready for its first run; with
    ``--wait-for-go``, once it has said ``ready`` and its parent has said ``go``."""
    conn = connect(args.db, create=False)
    provider = ReferenceProvider(call_log_for(args.db), delay=args.provider_delay)
    # Load the evidence contract's validator now: the first check would otherwise pay for
    # it inside the first run (and, in the reference flow, inside its write transaction).
    contract.prepare()
    if args.wait_for_go:
        output.say("ready")
        go.wait()
    return conn, provider


def _work_as(args: argparse.Namespace, output: WorkerOutput, stop: threading.Event, go: threading.Event) -> int:
    crash = CrashPlan(CrashPoint(args.crash_at)) if args.crash_at else NO_CRASH
    conn, provider = open_worker(args, output, go)
    with closing(conn):
        worker = LeasedWorker(conn, provider, name=f"worker-{args.number}-pid{os.getpid()}", lease_seconds=args.lease_seconds,
                              clock=SystemClock(milliseconds=True), crash=crash)
        return lease_loop(worker, args.incident, args.failed_after, output, stop)


def lease_loop(worker: LeasedWorker, incidents: list[str] | None, failed_after: int | None, output: WorkerOutput,
               stop: threading.Event) -> int:
    """Claim and finish runs until none is left (or the parent is gone); the worst exit code met on the way."""
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
