"""Run workflows in child processes, so a notebook's kernel survives their crashes.

Every child is ``python -m labkit ...``, the same command line a user or CI would type,
started with the interpreter of the current environment. Its clock is pinned
(``LABKIT_CLOCK``) so the rows it writes are the same on every run of a lesson.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..children import collect, ended, killed_by, pump, this_labkit
from ..clock import CLOCK_ENV
from ..database import write_lock
from ..store import connect

_FOLDERS = re.compile(r"(?<=['\"\s])/(?:[^/'\"\s]+/)+")

#: The instant every child's clock starts from, unless the caller's environment sets one.
LESSON_INSTANT = "2026-03-02T09:00:00Z"


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
        return killed_by(self.returncode)

    @property
    def status(self) -> str:
        return ended(self.returncode)

    @property
    def message(self) -> str:
        """The first line the child printed on stderr, with folders cut from any path in it.

        Lessons print it; a temporary folder in a stored output would differ on every run.
        """
        first = self.stderr.strip().splitlines()[0] if self.stderr.strip() else ""
        return _FOLDERS.sub("", first)

    def __str__(self) -> str:
        return f"$ {self.command}\n{self.status}"


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = this_labkit()  # works from a clone without an installed package, and keeps the child on this labkit
    env.setdefault(CLOCK_ENV, LESSON_INSTANT)
    env.update(extra or {})
    return env


def new_interpreter(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    """Start ``argv`` as a new process with three text pipes: how every child here is started."""
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


#: What starts a child (argv, environment). A new interpreter, always, for lessons and learners; the test
#: suite alone forks its ``python -m labkit`` children from a warm server instead (tests/warm_children.py).
start_child: Callable[[list[str], dict[str, str]], Any] = new_interpreter


def _argv(args: tuple[str | Path, ...]) -> list[str]:
    return [sys.executable, "-m", "labkit", *map(str, args)]


def _shown(args: tuple[str | Path, ...]) -> str:
    # Paths are shown by file name only: outputs must not carry a machine's folders.
    return "python -m labkit " + " ".join(Path(a).name if os.sep in str(a) else str(a) for a in args)


def labkit_cli(*args: str | Path, env: dict[str, str] | None = None, timeout: float = 120) -> ChildOutcome:
    """Run ``python -m labkit ARGS`` to completion (or to its crash) and return how it ended."""
    child = start_child(_argv(args), child_env(env))
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except BaseException:  # a timeout, or Ctrl-C in a lesson: leave no child behind
        child.kill()
        child.wait()
        raise
    return ChildOutcome(_shown(args), child.returncode, stdout, stderr)


def run_in_child(db: str | Path, incident: str, crash_at: str | None = None, **kwargs) -> ChildOutcome:
    """Drive one incident in a child process, optionally killing it at a crash point."""
    args = ["run", "--db", str(db), "--incident", incident]
    if crash_at:
        args += ["--crash-at", crash_at]
    return labkit_cli(*args, **kwargs)


def race(
    *commands: tuple[str | Path, ...],
    gate: str | Path | None = None,
    pause_at: str | None = None,
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

    ``pause_at`` forces the most dangerous interleaving at a crash point: every ``run``
    child pauses there (``--pause-at``). A child that pauses while holding the write lock
    is let go at once, since nobody else can reach the point while it waits. Children that
    pause holding no lock are let go together, once every child still running has paused:
    so code that decides in one transaction and writes in another has every worker decide
    before any writes, every time, not only when the scheduler happens to interleave badly.
    """
    argvs = [tuple(map(str, args)) for args in commands]
    if pause_at is not None:
        argvs = [args + ("--pause-at", pause_at) if args[:1] == ("run",) else args for args in argvs]
    return race_commands([(_shown(args), _argv(args)) for args in argvs], gate=gate, env=env, timeout=timeout)


def race_commands(
    commands: list[tuple[str, list[str]]],
    *,
    gate: str | Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> list[ChildOutcome]:
    """:func:`race` for any commands, each given as (how to show it, argv): the same gate, the
    same release rule for children that print ``paused at ...``."""
    events: queue.Queue[tuple[int, str | None]] = queue.Queue()
    children: list[subprocess.Popen] = []
    errors: list[list[str]] = [[] for _ in commands]
    lines: list[list[str]] = [[] for _ in commands]
    holder = connect(gate) if gate is not None else None
    try:
        lock = write_lock(holder) if holder is not None else nullcontext()
        with lock:
            for index, (_, argv) in enumerate(commands):
                child = start_child(argv, child_env(env))
                children.append(child)
                pump(child.stdout, events, index)
                collect(child.stderr, errors[index])
            # A child that needs the lock before its first line (a new run) gives up after the
            # busy timeout and exits, so this wait cannot last forever.
            backlog = _wait_for_first_lines(events, lines, timeout) if holder is not None else []
        _follow(children, events, backlog, lines, timeout)
    finally:
        if holder is not None:
            holder.close()
        for child in children:
            if child.poll() is None:
                child.kill()
    outcomes = []
    for (shown, _), child, printed, stderr in zip(commands, children, lines, errors, strict=True):
        child.wait(timeout=timeout)
        outcomes.append(ChildOutcome(shown, child.returncode, "".join(printed), "".join(stderr)))
    return outcomes


def _wait_for_first_lines(events: queue.Queue, lines: list[list[str]], timeout: float) -> list[tuple[int, str | None]]:
    """Wait until every child has printed a line or ended; return the other events seen meanwhile."""
    waiting = set(range(len(lines)))
    backlog: list[tuple[int, str | None]] = []
    while waiting:
        index, line = events.get(timeout=timeout)
        if index in waiting and line is not None:
            lines[index].append(line)
        else:
            backlog.append((index, line))  # handled by _follow, in the order they came
        waiting.discard(index)
    return backlog


def _follow(
    children: list[subprocess.Popen],
    events: queue.Queue,
    backlog: list[tuple[int, str | None]],
    lines: list[list[str]],
    timeout: float,
) -> None:
    """Collect every child's output to its end, releasing paused children by the rule of :func:`race`."""
    running = set(range(len(children)))
    paused: set[int] = set()
    deadline = time.monotonic() + timeout
    while running:
        if backlog:
            index, line = backlog.pop(0)
        else:
            index, line = events.get(timeout=max(0.0, deadline - time.monotonic()))
        if line is None:
            running.discard(index)
            paused.discard(index)
        else:
            lines[index].append(line)
            if line.startswith("paused at "):
                if "(holding the write lock)" in line:
                    _release(children[index])
                else:
                    paused.add(index)
        if paused and paused == running:
            for waiting in sorted(paused):
                _release(children[waiting])
            paused.clear()


def _release(child: subprocess.Popen) -> None:
    assert child.stdin is not None
    child.stdin.write("\n")
    child.stdin.flush()


class PausedRun:
    """A ``run`` child held at a crash point, for a lesson to act while it waits there.

    ``with PausedRun(db, incident, "before_read") as held:`` starts the child and returns
    once it has printed ``paused at before_read (...)``: it is inside the read, holding
    the write lock, as a worker waiting on a slow provider would be. Leaving the block
    lets it go on and waits for it to finish; its outcome is then ``held.outcome``.
    """

    def __init__(self, db: str | Path, incident: str, point: str, env: dict[str, str] | None = None, timeout: float = 120):
        self.args: tuple[str | Path, ...] = ("run", "--db", str(db), "--incident", incident, "--pause-at", point)
        self.env, self.timeout = env, timeout
        self.paused_line = ""
        self.outcome: ChildOutcome | None = None

    def __enter__(self) -> PausedRun:
        self.child = start_child(_argv(self.args), child_env(self.env))
        assert self.child.stdout is not None
        self.printed = []
        for line in self.child.stdout:
            self.printed.append(line)
            if line.startswith("paused at "):
                self.paused_line = line.strip()
                return self
        self.child.wait(timeout=self.timeout)
        raise RuntimeError(f"the child ended before it paused: {self.child.stderr.read() if self.child.stderr else ''}")

    def __exit__(self, *exc: object) -> None:
        stdout, stderr = self.child.communicate(input="\n", timeout=self.timeout)
        self.outcome = ChildOutcome(_shown(self.args), self.child.returncode, "".join(self.printed) + stdout, stderr)
