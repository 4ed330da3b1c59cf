"""The kernels the tests start to run a lesson (exercise checks, skipped-cell reruns).

Each talks to its client over Unix sockets in a folder of its own, not over TCP on 127.0.0.1:
jupyter_client picks a kernel's TCP ports by binding and releasing them, and the kernel binds them a
moment later, so another process binding an ephemeral port meanwhile (a ticket service, another
kernel; the suite starts many) can take one, and the kernel dies with "Address already in use"
(a fresh clone's make test met it once, in 5 runs). A socket file cannot be taken that way.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import nbformat
import warm_children
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

TESTS = Path(__file__).resolve().parent
# Run in the kernel before the lesson: its `python -m labkit` children forked from a warm server, as the
# suite's own are (tests/warm_children.py). nbval's kernels never run this: the lessons are checked there
# as learners run them, every child a new interpreter.
_WARM_START = f"""
import sys as _sys
_sys.path.append({str(TESTS)!r})
import warm_children as _warm_children
_warm_children.install()
del _sys, _warm_children
"""


def notebook_client(notebook, path: Path) -> NotebookClient:
    """An nbclient for ``notebook`` run in ``path``'s folder, errors kept in the outputs, on an IPC kernel."""
    sockets = tempfile.mkdtemp(prefix="lk-")  # short: a Unix socket's path has a limit of about 100 bytes
    atexit.register(shutil.rmtree, sockets, ignore_errors=True)
    manager = AsyncKernelManager(kernel_name="python3", transport="ipc", ip=str(Path(sockets) / "kernel"))
    return NotebookClient(
        notebook, km=manager, timeout=300, kernel_name="python3", record_timing=False, allow_errors=True,
        resources={"metadata": {"path": str(path.parent)}},
    )


def start_warm_children(client: NotebookClient) -> None:
    """In ``client``'s running kernel: fork the lesson's ``python -m labkit`` children from a warm server
    (unless warm_children.NEW_INTERPRETERS is set, as in the test process: tests/conftest.py)."""
    if not warm_children.wanted():
        return
    cell = nbformat.v4.new_code_cell(_WARM_START)
    # nbclient stores an executed cell at its index in the notebook: give this one a place of its own, then take
    # it away, so the lesson's cells (and their indexes) are as the test read them.
    client.nb.cells.append(cell)
    try:
        client.execute_cell(cell, len(client.nb.cells) - 1)
    finally:
        client.nb.cells.pop()
    errors = [output for output in cell.outputs if output.get("output_type") == "error"]
    if errors:
        raise RuntimeError(f"the kernel could not start warm children: {errors[0]['ename']}: {errors[0]['evalue']}")
