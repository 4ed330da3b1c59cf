"""Named places where a run can be stopped abruptly, to prove what survives.

At a crash point armed in ``kill`` mode the process sends itself SIGKILL: no ``except``,
no ``finally``, no ``atexit`` runs, and output still buffered in the process is lost. What
the process had already handed to the operating system (SQLite's writes included) stays.
That is the model of an out-of-memory kill, ``kill -9`` or a container being stopped; a
power cut, which also loses what the OS had not yet written to disk, is what
``synchronous=FULL`` is for, and cannot be shown from inside a notebook.

Two other modes serve lessons and tests: ``raise`` raises
:class:`~labkit.errors.InjectedFailure`, an ordinary exception that the transaction around
the point rolls back (04_rollback); ``pause`` prints ``paused at POINT`` and waits for a
line on standard input, so a race can be held at its most dangerous moment
(:func:`labkit.lab.race`, 06_single_receipt).

Run a crashing workflow in a child process (:mod:`labkit.lab.processes`) so the notebook's
kernel survives to look at the database. Taught in 05_crash_and_reread and 12_crash_explorer.
"""

from __future__ import annotations

import os
import select
import signal
import sqlite3
import sys
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from .database import holds_write_lock
from .errors import InjectedFailure, UnknownCrashPoint, UnreachableCrashPoint
from .steps import Step


class CrashPoint(StrEnum):
    """Every crash point, in the order a run reaches them; each value is its command-line name."""

    BEFORE_READ = "before_read"                            # run row committed, provider not yet asked
    AFTER_READ = "after_read"                              # provider answered, nothing about it committed
    BEFORE_EVIDENCE_COMMIT = "before_evidence_commit"      # evidence and step written inside the open transaction
    AFTER_EVIDENCE_COMMIT = "after_evidence_commit"        # evidence_recorded is durable
    BEFORE_RECEIPT_WRITE = "before_receipt_write"          # completion decided from the stored step, nothing written
    BEFORE_COMPLETION_COMMIT = "before_completion_commit"  # receipt and step written inside the open transaction
    AFTER_COMPLETION_COMMIT = "after_completion_commit"    # report_completed is durable
    BEFORE_SEND = "before_send"                            # with --tickets: the effect's intent durable, nothing sent
    AFTER_SEND = "after_send"                              # with --tickets: the ticket request answered, its answer not recorded
    AFTER_LEASE = "after_lease"                            # leased flow (`work`): a lease committed, nothing done under it yet

    def __str__(self) -> str:
        return self.value

    @property
    def needs_tickets(self) -> bool:
        """Reached only by a run that opens a ticket (``--tickets URL``, 09_external_effects)."""
        return self in (CrashPoint.BEFORE_SEND, CrashPoint.AFTER_SEND)

    @property
    def needs_lease(self) -> bool:
        """Reached only by the leased flow of ``python -m labkit work`` (10_leases_and_fencing).

        That flow reaches it first, before ``before_read``; it is listed last so that the
        points earlier lessons name keep their places.
        """
        return self is CrashPoint.AFTER_LEASE


#: The names, in run order: what ``python -m labkit crash-points`` prints.
CRASH_POINTS: tuple[str, ...] = tuple(point.value for point in CrashPoint)


def points(*, tickets: bool) -> tuple[str, ...]:
    """The crash points a run reaches: the three steps, and with ``tickets`` the send around them."""
    return tuple(point.value for point in CrashPoint if (tickets or not point.needs_tickets) and not point.needs_lease)


#: The points every run reaches, with or without a ticket to open: what lessons 03 to 06 kill at.
RUN_POINTS: tuple[str, ...] = points(tickets=False)
#: The points only a run with ``--tickets URL`` reaches (09_external_effects).
EFFECT_POINTS: tuple[str, ...] = tuple(point.value for point in CrashPoint if point.needs_tickets)
#: The points a worker of ``python -m labkit work`` reaches, in its order: the lease first, then
#: the same read, commits and completion as a run, with the read outside any transaction
#: (10_leases_and_fencing). ``work --crash-at`` takes these.
LEASE_POINTS: tuple[str, ...] = (CrashPoint.AFTER_LEASE.value, *RUN_POINTS)

#: A crash at these points loses a read that the provider already served: the read repeats (N1).
BETWEEN_READ_AND_COMMIT: frozenset[CrashPoint] = frozenset({CrashPoint.AFTER_READ, CrashPoint.BEFORE_EVIDENCE_COMMIT})

Mode = Literal["kill", "raise", "pause"]


#: The points a run passes on its way from each recorded step: the read's points only from
#: not_inspected, the completion's from evidence_recorded too; the send points follow
#: completion, so any step may still pass them (whether a ticket is sent is the effect's to say).
_STEP_OF_POINT = {
    CrashPoint.BEFORE_READ: Step.NOT_INSPECTED, CrashPoint.AFTER_READ: Step.NOT_INSPECTED,
    CrashPoint.BEFORE_EVIDENCE_COMMIT: Step.NOT_INSPECTED, CrashPoint.AFTER_EVIDENCE_COMMIT: Step.NOT_INSPECTED,
    CrashPoint.BEFORE_RECEIPT_WRITE: Step.EVIDENCE_RECORDED, CrashPoint.BEFORE_COMPLETION_COMMIT: Step.EVIDENCE_RECORDED,
    CrashPoint.AFTER_COMPLETION_COMMIT: Step.EVIDENCE_RECORDED,
}


def still_ahead(point: CrashPoint, step: Step) -> bool:
    """Whether a run recorded at ``step`` can still pass ``point`` (see :data:`_STEP_OF_POINT`)."""
    last = _STEP_OF_POINT.get(point)
    return last is None or list(Step).index(step) <= list(Step).index(last)


def check_point(point: str | CrashPoint) -> CrashPoint:
    """The crash point named ``point``, or :class:`UnknownCrashPoint` (bad input)."""
    try:
        return CrashPoint(point)
    except ValueError:
        raise UnknownCrashPoint(str(point), CRASH_POINTS) from None


def check_reached(point: str | CrashPoint, *, leased: bool = False, tickets: bool = False) -> CrashPoint:
    """The crash point named ``point``, if the flow asked for can reach it; else bad input.

    The flows: ``run`` (``leased=False``), with ``--tickets URL`` or not, and the leased flow of
    ``work`` (``leased=True``), which opens no tickets. A point that is asked for and never
    reached would let the command finish and exit 0, and a test or a supervisor that asked
    for a kill would be told nothing.
    """
    found = check_point(point)
    if found.needs_lease and not leased:
        raise UnreachableCrashPoint(found.value, "run", "the leased flow of `work`")
    if found.needs_tickets and (leased or not tickets):
        flow = "work" if leased else "a run without --tickets"
        raise UnreachableCrashPoint(found.value, flow, "a run that opens a ticket (run --tickets URL)")
    return found


@dataclass(frozen=True)
class CrashPlan:
    """Which point, if any, stops this process, and how."""

    point: CrashPoint | None = None
    mode: Mode = "kill"

    def __post_init__(self) -> None:
        if self.point is not None:
            object.__setattr__(self, "point", check_point(self.point))
        if self.mode not in ("kill", "raise", "pause"):
            raise ValueError(f"crash mode must be 'kill', 'raise' or 'pause', not {self.mode!r}")

    def reached(self, point: CrashPoint, conn: sqlite3.Connection | None = None) -> None:
        """Called by the coordinator as it passes ``point``; stops here if armed here.

        ``conn`` lets a paused process say whether it holds the write lock: a race
        (:func:`labkit.lab.race`) releases such a process at once, since nobody else can
        reach the point while it waits.
        """
        if point is not self.point:
            return
        if self.mode == "raise":
            raise InjectedFailure(point.value)
        if self.mode == "pause":
            holding = "holding the write lock" if holds_write_lock(conn) else "holding no lock"
            print(f"paused at {point.value} ({holding})", flush=True)
            wait_for_a_line()  # a line, or end of input, lets the run go on
            return
        os.kill(os.getpid(), signal.SIGKILL)


def wait_for_a_line() -> None:
    """Wait for a line, or the end, on standard input, and answer a Ctrl-C at once meanwhile.

    A plain ``sys.stdin.readline()`` can miss a SIGINT for good. Python runs its handler
    between bytecodes, so a signal that lands in the few microseconds between the last such
    check and the ``read`` system call is only noted, and the read then waits for a line that
    a paused run may never get (12 hangs in 4,500 prompt SIGINTs on a loaded two-core machine;
    one failed a CI run). Waiting in 0.1 s slices of ``select`` lets Python look again at every
    slice. The line is read from the file descriptor a byte at a time, not through
    ``sys.stdin``'s buffer, so a second line sent ahead stays for the next pause.
    """
    try:
        fd = sys.stdin.fileno() if sys.stdin is not None else None
    except (AttributeError, OSError, ValueError):  # a stand-in stdin (a notebook kernel's): read it plainly
        sys.stdin.readline()
        return
    if fd is None:  # no stdin at all is like end of input: go on
        return
    while not select.select([fd], [], [], 0.1)[0]:
        pass
    while os.read(fd, 1) not in (b"\n", b""):
        pass


NO_CRASH = CrashPlan()
