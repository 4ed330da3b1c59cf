"""Child processes, one toolkit: reading a started child's output, and forking a child.

Two ways to make a child, each written once here:

- **a started process** (``python -m labkit ...``, ``subprocess.Popen``): its standard output
  and error are pipes, read by a daemon thread each (:func:`pump`, :func:`collect`) so that a
  child that prints a lot never blocks on a full pipe while its parent waits for something else;
- **a forked process** (:func:`fork`, :func:`in_child`): real processes with their own file
  descriptors and locks, killed by a real SIGKILL, for a hundredth of an interpreter's start-up
  cost (the crash explorer of 12_crash_explorer runs 160 scenarios this way). A forked child
  only does the work it is given, writes nothing to the parent's streams (a notebook kernel's)
  and leaves with ``os._exit``, so the parent's ``atexit`` handlers never run twice. POSIX only,
  like SIGKILL itself.

It imports nothing from labkit: the leased worker, the lessons' runners and the engines all
use it, so it must sit below every one of them.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: The folder holding the labkit package: a started child puts it first on its PYTHONPATH.
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)

# --------------------------------------------------------------------------- a started child


def this_labkit(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) with this labkit first on ``PYTHONPATH``, so
    that a started child runs this very labkit, from a clone or installed, whatever else is found."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    return env


def pump(stream: Iterable[str] | None, events: queue.Queue, *tag: object) -> threading.Thread:
    """Put ``(*tag, line)`` on ``events`` for every line ``stream`` gives, then ``(*tag, None)`` at its end
    (at once for ``None``, a stream that was not piped).

    Runs in a daemon thread (returned, started): the parent waits on one queue for every
    child's lines, in the order they came, and learns from the ``None`` that a pipe closed.
    """
    thread = threading.Thread(target=_pump, args=(stream, events, tag), daemon=True)
    thread.start()
    return thread


def _pump(stream: Iterable[str] | None, events: queue.Queue, tag: tuple) -> None:
    for line in stream or ():
        events.put((*tag, line))
    events.put((*tag, None))


def killed_by(returncode: int) -> str | None:
    """The signal that ended a child (``'SIGKILL'``), from its negative return code; None if it exited."""
    return signal.Signals(-returncode).name if returncode < 0 else None


def ended(returncode: int) -> str:
    """How a started child ended, in words: ``exit 0``, or ``killed by SIGKILL`` for a negative code."""
    signal_name = killed_by(returncode)
    return f"killed by {signal_name}" if signal_name else f"exit {returncode}"


def collect(stream: Iterable[str] | None, into: list[str]) -> threading.Thread:
    """Append every line of ``stream`` to ``into``, in a daemon thread (returned, started): join it
    to know ``into`` holds all the child said."""
    thread = threading.Thread(target=into.extend, args=(stream or (),), daemon=True)
    thread.start()
    return thread


# --------------------------------------------------------------------------- a forked child


@dataclass(frozen=True)
class ChildEnd:
    """How a forked child ended: killed by SIGKILL, or exited with a code (and the error that caused 1)."""

    killed: bool
    code: int | None = None
    error: str = ""

    def __str__(self) -> str:
        if self.killed:
            return "killed"
        return f"exit {self.code}" + (f" ({self.error})" if self.error else "")


def end_of(status: int, error: str = "") -> ChildEnd:
    """The :class:`ChildEnd` for a wait status from ``os.waitpid``."""
    if os.WIFSIGNALED(status):
        return ChildEnd(killed=os.WTERMSIG(status) == signal.SIGKILL, code=-os.WTERMSIG(status), error=error)
    return ChildEnd(killed=False, code=os.WEXITSTATUS(status), error=error)


def first_line(error: BaseException) -> str:
    """``Type: message``, its first line only: what a child passes back about the error that ended it."""
    return f"{type(error).__name__}: {error}".splitlines()[0]


def quiet_child(output: tuple[Path, Path] | None = None) -> None:
    """In a forked child: write nothing where the parent writes (a notebook kernel's streams).

    Standard output and error go to ``output``'s two files when given (files, not pipes: a
    child that prints a lot cannot block on a reader), else nowhere.
    """
    for fd, path in zip((1, 2), output or (Path(os.devnull), Path(os.devnull)), strict=True):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - the child leaves by os._exit
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


def fork(
    work: Callable[[], object],
    *,
    output: tuple[Path, Path] | None = None,
    on_error: Callable[[BaseException], object] | None = None,
) -> int:
    """Run ``work`` in a forked child, quiet (:func:`quiet_child`, to ``output``); return its pid at once.

    The child exits 0 when ``work`` returns, with the code of a ``SystemExit`` it raises, and
    1 on any other error, which it first hands to ``on_error`` (in the child) to pass back.
    The caller waits for the pid (``os.waitpid``; :func:`end_of` reads the status).
    """
    pid = os.fork()
    if pid == 0:  # the child: the work only, then out without running the parent's atexit
        code = 0
        try:
            quiet_child(output)
            work()
        except SystemExit as leaving:  # the work's own exit code, as a started process would give
            code = leaving.code if isinstance(leaving.code, int) else 1
        except BaseException as error:  # noqa: BLE001 - reported to the parent, whatever it was
            code = 1
            if on_error is not None:
                on_error(error)
        finally:
            os._exit(code)
    return pid


def in_child(work: Callable[[], object], *, kill_after: float | None = None, output: tuple[Path, Path] | None = None) -> ChildEnd:
    """Run ``work`` in a forked child and wait for it; ``kill_after`` seconds SIGKILL it from outside.

    A child that reaches an armed crash point kills itself (:class:`~labkit.crashpoints.CrashPlan`);
    one that raises exits 1 (``SystemExit(n)``: n) and passes its error's first line back through a
    pipe. ``output`` names the files its standard output and error go to (else nowhere).
    """
    read_end, write_end = os.pipe()

    def run() -> object:
        os.close(read_end)
        return work()

    pid = fork(run, output=output, on_error=lambda error: os.write(write_end, first_line(error).encode()[:400]))
    os.close(write_end)
    try:
        if kill_after is not None:
            time.sleep(kill_after)
            os.kill(pid, signal.SIGKILL)  # a child that already ended is a zombie until waited for: no harm
        _, status = os.waitpid(pid, 0)
        with os.fdopen(read_end, "rb") as pipe:
            message = pipe.read().decode(errors="replace")
    except BaseException:
        os.kill(pid, signal.SIGKILL)  # interrupted (a notebook's stop button): leave no child behind
        os.waitpid(pid, 0)
        raise
    return end_of(status, message)
