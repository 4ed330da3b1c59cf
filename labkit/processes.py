"""Run workflows in child processes, so a notebook's kernel survives their crashes.

Every child is ``python -m labkit ...``, the same command line a user or CI would type,
started with the interpreter of the current environment. Its clock is pinned
(``LABKIT_CLOCK``) so the rows it writes are the same on every run of a lesson.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .clock import CLOCK_ENV
from .store import connect

#: The instant every child's clock starts from, unless the caller's environment sets one.
LESSON_INSTANT = "2026-03-02T09:00:00Z"
_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


@dataclass(frozen=True)
class ChildOutcome:
    """How a child process ended, and what it printed."""

    command: str
    returncode: int
    stdout: str
    stderr: str

    @property
    def killed_by(self) -> str | None:
        """``'SIGKILL'`` when a signal ended the process, else None."""
        return signal.Signals(-self.returncode).name if self.returncode < 0 else None

    @property
    def status(self) -> str:
        return f"killed by {self.killed_by}" if self.killed_by else f"exit {self.returncode}"

    def __str__(self) -> str:
        return f"$ {self.command}\n{self.status}"


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault(CLOCK_ENV, LESSON_INSTANT)
    # Works from a clone without an installed package, and keeps the child on this labkit.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


def _argv(args: tuple[str, ...]) -> list[str]:
    return [sys.executable, "-m", "labkit", *map(str, args)]


def _shown(args: tuple[str, ...]) -> str:
    # Paths are shown by file name only: outputs must not carry a machine's folders.
    return "python -m labkit " + " ".join(Path(a).name if os.sep in str(a) else str(a) for a in args)


def labkit_cli(*args: str | Path, env: dict[str, str] | None = None, timeout: float = 120) -> ChildOutcome:
    """Run ``python -m labkit ARGS`` to completion (or to its crash) and return how it ended."""
    done = subprocess.run(_argv(args), capture_output=True, text=True, env=child_env(env), timeout=timeout)
    return ChildOutcome(_shown(args), done.returncode, done.stdout, done.stderr)


def run_in_child(db: str | Path, incident: str, crash_at: str | None = None, **kwargs) -> ChildOutcome:
    """Drive one incident in a child process, optionally killing it at a crash point."""
    args = ["run", "--db", str(db), "--incident", incident]
    if crash_at:
        args += ["--crash-at", crash_at]
    return labkit_cli(*args, **kwargs)


def race(
    *commands: tuple[str | Path, ...],
    gate: str | Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> list[ChildOutcome]:
    """Start every command at once, wait for all, and return their outcomes in order.

    Without ``gate`` the children merely start together; the first may finish before the
    last has begun. With ``gate``, a database whose runs already exist, this process holds
    that database's write lock while the children start and lets go only once every child
    has printed its first line, which it does after reading its run's step. So every child
    has seen the run as it was before any of them could change it, and all of them go for
    the next write together: a real race, decided by SQLite's lock, not by start-up order.
    """
    holder = None
    if gate is not None:
        holder = connect(gate)
        holder.execute("BEGIN IMMEDIATE")
    try:
        started = [
            (args, subprocess.Popen(_argv(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(env)))
            for args in commands
        ]
        # A child that needs the lock before its first line (a new run) gives up after the
        # busy timeout and exits, so this read cannot wait forever.
        first_lines = [process.stdout.readline() if holder is not None else "" for _, process in started]
    finally:
        if holder is not None:
            holder.execute("ROLLBACK")
            holder.close()
    outcomes = []
    for (args, process), first in zip(started, first_lines):
        stdout, stderr = process.communicate(timeout=timeout)
        outcomes.append(ChildOutcome(_shown(args), process.returncode, first + stdout, stderr))
    return outcomes
