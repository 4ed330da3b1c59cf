"""Clocks that can be injected, so that stored timestamps are reproducible.

Durable rows carry timestamps, and notebooks print rows. With the wall clock, every run of
a notebook would print different times and nbval would (rightly) fail. Every component
that writes a time takes a :class:`Clock`; lessons and tests pass a :class:`TickingClock`.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Protocol

from .errors import BadClock

#: Environment variable that pins the clock of a ``python -m labkit`` process.
CLOCK_ENV = "LABKIT_CLOCK"

#: A pinned clock must start between these instants. The upper bound leaves a ticking
#: clock thousands of years before Python's ``datetime`` overflows at year 9999, so a
#: stored time can always be followed by a later one.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


class Clock(Protocol):
    def now(self) -> str:
        """The current instant as an ISO-8601 UTC string, ending in ``Z``."""


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_milliseconds(moment: datetime) -> str:
    """To the millisecond, always the same width, so that text order is time order."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class SystemClock:
    """The wall clock: what a real worker uses.

    ``milliseconds=True`` reads it to the millisecond: leases (10_leases_and_fencing) expire
    after fractions of a second, and the workers of ``python -m labkit work`` compare their
    expiry across processes, which only a shared, fine clock can do.
    """

    def __init__(self, *, milliseconds: bool = False):
        self.milliseconds = milliseconds

    def now(self) -> str:
        moment = datetime.now(UTC)
        return iso_milliseconds(moment) if self.milliseconds else _iso(moment)


class ManualClock:
    """A clock that moves only when told to: every reading is the same instant until :meth:`advance`.

    Two workers in one process that share it share one time, and a lesson or a test decides
    exactly when a lease runs out (10_leases_and_fencing): "worker A pauses past its lease"
    becomes ``clock.advance(31)``, the same on every run.
    """

    def __init__(self, start: str = "2026-03-02T09:00:00Z"):
        self._now = parse_instant(start)

    def now(self) -> str:
        return iso_milliseconds(self._now) if self._now.microsecond else _iso(self._now)

    def advance(self, seconds: float) -> str:
        """Move forward ``seconds`` (never back: a clock that goes back would revive expired leases)."""
        if not 0 <= seconds < float("inf"):  # also refuses NaN
            raise ValueError(f"a clock moves forward by a finite number of seconds, not {seconds!r}")
        self._now += timedelta(seconds=seconds)
        return self.now()


class TickingClock:
    """Starts at a fixed instant and moves forward ``step`` on every reading.

    Deterministic within one process: the n-th timestamp is always the same.
    """

    def __init__(self, start: str = "2026-03-02T09:00:00Z", step: timedelta = timedelta(seconds=1)):
        self._next = parse_instant(start)
        self._step = step

    def now(self) -> str:
        moment, self._next = self._next, self._next + self._step
        return _iso(moment)


def parse_instant(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"instant {text!r} has no time zone; write it as 2026-03-02T09:00:00Z")
    return moment


def _pinned_start(text: str) -> datetime:
    try:
        moment = parse_instant(text)
    except (ValueError, OverflowError):
        raise BadClock(text) from None
    if not EARLIEST <= moment < LATEST:
        raise BadClock(text, f"is outside the years {EARLIEST.year} to {LATEST.year - 1} that a pinned clock may start in")
    return moment


def clock_from_env(after: str | None = None) -> Clock:
    """The clock for a command-line process: pinned by ``LABKIT_CLOCK`` when it is set.

    Notebooks start crashing workflows as child processes and set this variable so the rows
    those children write are the same on every run. ``after`` is the latest time already
    stored in the database: a pinned clock starts one second past it, so a process that
    starts after another has finished never writes an earlier time. Processes that run
    *at the same time* each start past what was stored when they began, so their times
    can interleave out of commit order: the order of events is ``transitions.seq``, never
    the clock.
    """
    text = os.environ.get(CLOCK_ENV)
    if not text:
        return SystemClock()
    start = _pinned_start(text)
    if after:
        try:
            latest = parse_instant(after)
        except ValueError:
            latest = None  # not a time labkit wrote; the pinned start stands
        if latest is not None and latest >= start:
            if latest >= LATEST:
                raise BadClock(text, f"cannot follow the time {after} already stored in the database")
            start = latest + timedelta(seconds=1)
    return TickingClock(_iso(start))
