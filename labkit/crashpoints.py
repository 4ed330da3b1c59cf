"""Named places where a run can be stopped abruptly, to prove what survives.

At a crash point armed in ``kill`` mode the process sends itself SIGKILL: no ``except``,
no ``finally``, no ``atexit`` runs, and output still buffered in the process is lost. What
the process had already handed to the operating system (SQLite's writes included) stays.
That is the model of an out-of-memory kill, ``kill -9`` or a container being stopped; a
power cut, which also loses what the OS had not yet written to disk, is what
``synchronous=FULL`` is for, and cannot be shown from inside a notebook.
In ``raise`` mode the point raises :class:`~labkit.errors.InjectedFailure` instead, an
ordinary exception that the transaction around it rolls back (04_rollback).

Run a crashing workflow in a child process (:mod:`labkit.processes`) so the notebook's
kernel survives to look at the database. Taught in 05_crash_and_reread and 12_crash_explorer.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Literal

from .errors import InjectedFailure, UnknownCrashPoint

#: Every crash point, in the order a run reaches them.
CRASH_POINTS: tuple[str, ...] = (
    "before_read",               # run row committed, provider not yet asked
    "after_read",                # provider answered, nothing about it committed
    "before_evidence_commit",    # evidence and step written inside the open transaction
    "after_evidence_commit",     # evidence_recorded is durable
    "before_completion_commit",  # receipt and step written inside the open transaction
    "after_completion_commit",   # report_completed is durable
)

#: A crash at these points loses a read that the provider already served: the read repeats (N1).
BETWEEN_READ_AND_COMMIT: frozenset[str] = frozenset({"after_read", "before_evidence_commit"})


def check_point(point: str) -> str:
    if point not in CRASH_POINTS:
        raise UnknownCrashPoint(point, CRASH_POINTS)
    return point


@dataclass(frozen=True)
class CrashPlan:
    """Which point, if any, stops this process, and how."""

    point: str | None = None
    mode: Literal["kill", "raise"] = "kill"

    def __post_init__(self) -> None:
        if self.point is not None:
            check_point(self.point)
        if self.mode not in ("kill", "raise"):
            raise ValueError(f"crash mode must be 'kill' or 'raise', not {self.mode!r}")

    def reached(self, point: str) -> None:
        """Called by the coordinator as it passes ``point``; stops here if armed here."""
        check_point(point)
        if point != self.point:
            return
        if self.mode == "raise":
            raise InjectedFailure(point)
        os.kill(os.getpid(), signal.SIGKILL)


NO_CRASH = CrashPlan()
