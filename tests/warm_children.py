"""``python -m labkit`` children for the test suite, forked from a warm server instead of started afresh.

The unit tests start well over a thousand ``python -m labkit`` children (runs killed at crash
points, recoveries, races, status reads). A new interpreter spends about 0.08 s on start-up and
imports before the command does anything; these children skip that. Each is forked from a server
process (``multiprocessing``'s forkserver) that has imported ``labkit.__main__`` and
``labkit.cli`` and nothing of any test, so a child starts with the modules a fresh
``python -m labkit`` would have loaded and no state of its own: no open connection, no cache, no
row read earlier. It is still a process of its own, with a pid, its own file descriptors and
locks; a crash point SIGKILLs it and ``killed by SIGKILL`` is what the caller reads.

What the child gets, as ``subprocess.Popen`` would give it: the argv's words, the environment,
the working directory, standard input, output and error as three pipes (output buffered as a
new interpreter buffers a pipe, unless PYTHONUNBUFFERED is set; error line by line), Python's
exit code rules (``SystemExit``, an uncaught error's traceback and exit 1) and its own
``atexit`` hooks. tests/core/test_warm_children.py runs each kind of command both ways and
compares what they print, their exit codes and the rows they leave. What only a new interpreter
can show stays with one: a child given a ``PYTHON*`` variable of its own (a ``sitecustomize``
hook, another path) is started afresh, and so are the children of tests/core/test_interrupt.py
(Ctrl-C at any moment, imports included) and test_start_cost.py (what a run loads). So are the
lessons' children, under nbval and for a learner: :func:`install` is called by tests/conftest.py in
the test process, and by tests/kernels.py in the kernels the tests start to run lessons themselves
(the exercise checks, the skipped-cell reruns), never in nbval's.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import multiprocessing
import os
import signal
import subprocess
import sys
from multiprocessing import reduction
from pathlib import Path

import labkit.__main__

# The only labkit modules imported here, so the only ones the server holds besides what the
# command line imports: labkit.lab.processes is imported by the functions that run in the test process.
PACKAGE_ROOT = str(Path(labkit.__main__.__file__).resolve().parent.parent)

_CONTEXT: multiprocessing.context.ForkServerContext | None = None

#: Set to start every one of the tests' ``python -m labkit`` children as a new interpreter, to compare the two.
NEW_INTERPRETERS = "LABKIT_TEST_NEW_INTERPRETERS"


def wanted() -> bool:
    """Whether the tests fork their children warm: unless :data:`NEW_INTERPRETERS` is set."""
    return not os.environ.get(NEW_INTERPRETERS)


def install() -> None:
    """Start ``python -m labkit`` children of :mod:`labkit.lab.processes` this way, in this process."""
    import labkit.lab.processes as processes

    processes.start_child = start


def start(argv: list[str], env: dict[str, str]) -> subprocess.Popen | WarmChild:
    """``argv`` (``[python, "-m", "labkit", ...]``) forked from the warm server; any other argv, or an
    environment whose ``PYTHON*`` variables differ from this process's, as a new interpreter."""
    import labkit.lab.processes as processes

    if argv[:3] != [sys.executable, "-m", "labkit"] or _python_settings(env) != _python_settings(os.environ) or not _same_path(env):
        return processes.new_interpreter(argv, env)
    return WarmChild(argv[3:], env)


def _python_settings(env) -> dict[str, str]:
    # What the interpreter reads at its start (PYTHONPATH apart: _same_path): a fork inherits the server's.
    return {k: v for k, v in env.items() if k.startswith("PYTHON") and k != "PYTHONPATH"}


def _same_path(env: dict[str, str]) -> bool:
    # The server imports labkit from this process's path; a child asked to find another labkit first is started afresh.
    return env.get("PYTHONPATH", "").split(os.pathsep)[:1] == [PACKAGE_ROOT]


def _context() -> multiprocessing.context.ForkServerContext:
    global _CONTEXT
    if _CONTEXT is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["labkit.__main__", "labkit.cli", __name__])
        _CONTEXT = context
    return _CONTEXT


class _Fd:
    """A file descriptor handed to the forked child (multiprocessing passes it over its Unix socket)."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        return _received, (reduction.DupFd(self.fd),)


def _received(duplicate) -> int:
    return duplicate.detach()


class WarmChild:
    """The part of ``subprocess.Popen``'s interface that :mod:`labkit.lab.processes` uses, for a warm child."""

    def __init__(self, words: list[str], env: dict[str, str]):
        ends = [os.pipe() for _ in range(3)]
        child_ends = (ends[0][0], ends[1][1], ends[2][1])
        # SIGINT as a new interpreter started now would find it: ignored if this process ignores it (exec keeps
        # SIG_IGN), else Python's own handler; not as the server found it when it started, maybe long ago.
        sigint_ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        self._process = _context().Process(
            target=_child_main, args=(words, env, os.getcwd(), sigint_ignored, *map(_Fd, child_ends)), daemon=False
        )
        try:
            self._process.start()
        finally:
            for fd in child_ends:
                os.close(fd)
        self.pid = self._process.pid
        self.args = ["python", "-m", "labkit", *words]
        self.stdin = open(ends[0][1], "w", encoding="utf-8")  # noqa: SIM115 - closed by communicate or the caller
        self.stdout = open(ends[1][0], encoding="utf-8", errors="replace")  # noqa: SIM115
        self.stderr = open(ends[2][0], encoding="utf-8", errors="replace")  # noqa: SIM115

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        # The forkserver, not this process, reaps the child, and tells us a moment later: a child that has just
        # ended can be gone while its exitcode still reads None. Popen.send_signal ignores that race the same way.
        if self._process.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input: str | None = None, timeout: float | None = None) -> tuple[str, str]:  # noqa: A002 - Popen's name
        """Send ``input``, close standard input, and read both outputs to their end, as Popen's does."""
        from labkit.children import collect  # not at the top: the server holds only what the command line imports

        out: list[str] = []
        err: list[str] = []
        readers = [collect(stream, into) for stream, into in ((self.stdout, out), (self.stderr, err)) if not stream.closed]
        try:
            if input:
                self.stdin.write(input)
            self.stdin.close()
        except BrokenPipeError:
            pass  # the child has gone; what it printed is still read below
        for reader in readers:
            reader.join(timeout)
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(timeout)
        return "".join(out), "".join(err)


def modules_of_a_child() -> list[str]:
    """The modules a child of the server starts with (tests/core/test_warm_children.py checks them)."""
    with _context().Pool(1) as pool:
        return pool.apply_async(_loaded_modules).get(timeout=60)  # a broken server fails the test, not hangs it


def _loaded_modules() -> list[str]:  # pragma: no cover - in the child
    return sorted(sys.modules)


def _child_main(words: list[str], env: dict[str, str], cwd: str, sigint_ignored: bool,  # pragma: no cover
                stdin: int, stdout: int, stderr: int) -> None:
    """In the forked child: become ``python -m labkit WORDS`` and leave with its exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN if sigint_ignored else signal.default_int_handler)
    for received, standard in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(received, standard)
        os.close(received)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    # The standard streams as a new interpreter makes them for pipes: output block-buffered (unbuffered
    # with PYTHONUNBUFFERED), errors line by line with backslash escapes, in the interpreter's encoding.
    encoding = sys.__stdout__.encoding if sys.__stdout__ is not None else "utf-8"
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdin = io.TextIOWrapper(open(0, "rb", closefd=False), encoding=encoding)
    sys.stdout = io.TextIOWrapper(open(1, "wb", buffering=0 if unbuffered else -1, closefd=False), encoding=encoding,
                                  write_through=unbuffered)
    sys.stderr = io.TextIOWrapper(open(2, "wb", buffering=0 if unbuffered else -1, closefd=False), encoding=encoding,
                                  errors="backslashreplace", line_buffering=True)
    sys.argv = [str(Path(labkit.__main__.__file__)), *words]  # as `python -m` sets it
    atexit._clear()  # the server's hooks are not this command's
    try:
        # What `python -m labkit` runs: sys.exit(main()), main being imported already by the server.
        code = _exit_code(labkit.__main__.main(words))
    except SystemExit as leaving:
        code = _exit_code(leaving.code)
    except BaseException:  # noqa: BLE001 - printed and exit 1, as Python does for an uncaught error
        sys.excepthook(*sys.exc_info())
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _exit_code(code: object) -> int:  # pragma: no cover - the child
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


__all__ = ["WarmChild", "install", "modules_of_a_child", "start"]
