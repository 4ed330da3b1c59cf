"""Measuring the two flows for real: how long each holds SQLite's write lock, and what that costs.

:func:`measure_flows` times the reference flow (the :class:`~labkit.coordinator.Coordinator`,
which reads the provider inside its write transaction) against the leased flow
(:class:`~labkit.worker.LeasedWorker`, which reads with no transaction open), with a slow
provider: how long each run holds the write lock, how long a second writer waits, and runs
per second with 1, 2 and 4 worker processes. Nothing is compared with a stored figure: the
machine decides. Taught in 10_leases_and_fencing (and scripts/measure_leases.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..children import ended
from ..clock import SystemClock
from ..coordinator import WORKFLOW_VERSION, Coordinator
from ..crashpoints import NO_CRASH, CrashPlan, CrashPoint
from ..database import BEGIN_WRITE, read_transaction, transaction, write_lock
from ..leases import check_lease_seconds
from ..pool import (
    WorkerOutput,
    check_delay,
    check_incidents,
    check_workers,
    close_input,
    lease_loop,
    open_worker,
    run_worker,
    send_line,
    spawn_worker,
    worker_parser,
)
from ..provider import list_incidents
from ..store import connect, create_run_txn
from ..worker import DEFAULT_LEASE_SECONDS, LeasedWorker


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


def measuring_worker(argv: list[str]) -> int:
    """The main of one worker process of :func:`measure_flows`: a ``work`` worker that runs
    either flow and, at the end, reports how long it held the write lock in each transaction."""
    parser = worker_parser("labkit-measuring-worker")
    parser.add_argument("--flow", choices=("leased", "in-transaction"), default="leased")
    parser.add_argument("--of", type=int, default=1, help="in-transaction flow: the number of workers sharing the runs")
    return run_worker(parser.parse_args(argv), _measure_as)


def _measure_as(args: argparse.Namespace, output: WorkerOutput, stop: threading.Event, go: threading.Event) -> int:
    crash = CrashPlan(CrashPoint(args.crash_at)) if args.crash_at else NO_CRASH
    clock = SystemClock(milliseconds=True)
    conn, provider = open_worker(args, output, go)
    timer = LockTimer(conn)
    with closing(conn):
        if args.flow == "in-transaction":
            # The reference flow: runs are dealt out in turn, since it has no leases to share
            # them by; the write lock alone keeps it correct.
            coordinator = Coordinator(conn, provider, clock=clock, crash=crash)
            for incident in (args.incident or [])[args.number - 1 :: args.of]:
                coordinator.finish(incident)
            code = 0
        else:
            worker = LeasedWorker(conn, provider, name=f"worker-{args.number}-pid{os.getpid()}", lease_seconds=args.lease_seconds,
                                  clock=clock, crash=crash)
            code = lease_loop(worker, args.incident, args.failed_after, output, stop)
    # The wall clock, not perf_counter: the measuring parent compares it with its own.
    output.say("lock-times " + json.dumps({"held": timer.held, "finished": time.time()}))
    return code


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
    count = [check_workers(n) for n in workers]
    slow = check_delay(provider_delay)
    seconds = check_lease_seconds(lease_seconds)
    chosen = check_incidents(incidents, list_incidents()) if incidents else None
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
            "--of", str(n), "--wait-for-go"]
    for incident in runs:
        args += ["--incident", incident]
    children = [spawn_worker([*args, "--number", str(k)], __name__, "measuring_worker") for k in range(1, n + 1)]
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
                send_line(child, "go")
            for child in children:
                assert child.stdout is not None
                for line in child.stdout:
                    if line.startswith("lock-times "):
                        report = json.loads(line[len("lock-times "):])
                        held += report["held"]
                        last = max(last, report["finished"])
        for child in children:
            assert child.stderr is not None
            close_input(child)
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
