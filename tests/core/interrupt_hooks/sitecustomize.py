"""Loaded by Python at start-up in the Ctrl-C tests' children (this folder is put first on
PYTHONPATH): it holds ``python -m labkit`` at one chosen moment so that a test's SIGINT
lands exactly there, not wherever the scheduler happens to be.

``LABKIT_TEST_HOLD`` names the moment:
- ``importing``: just before ``labkit.cli`` (and everything it needs) is imported, the
  first thing the entry point does.
- ``entered``: the same moment, without waiting: from here on labkit answers a SIGINT.
- ``returned``: the command has returned its exit code to the entry point.
- ``exiting``: the entry point is done and the process is about to exit (``sys.exit``).
- ``locking``: a transaction is about to wait for the write lock; no waiting here, the
  lock wait itself is the moment.

At each it prints ``held at MOMENT`` on stderr; a held moment waits for a line on stdin.
Before ``entered`` (about 25 ms: the interpreter, its site packages, runpy, labkit's
``__init__``, which imports nothing) Python itself answers a SIGINT.
"""

import os
import sys

_MOMENT = os.environ.get("LABKIT_TEST_HOLD", "")


def _hold(moment: str, wait: bool = True) -> None:
    print(f"held at {moment}", file=sys.stderr, flush=True)
    if not wait:
        return
    if moment == "importing":
        sys.stdin.readline()  # SIGINT is blocked here (labkit.__main__ holds it back), so it waits its turn
        return
    # Not sys.stdin.readline(): a SIGINT landing just before its read() would wait for a line
    # the test never sends (labkit's own pause had the same race, and this is its cure).
    from labkit.crashpoints import wait_for_a_line

    wait_for_a_line()


class _HoldBeforeCli:
    """A meta path finder that only watches: it finds nothing, so the normal import goes on."""

    def __init__(self, moment: str, wait: bool):
        self.moment, self.wait = moment, wait

    def find_spec(self, name, path=None, target=None):
        if name == "labkit.cli":
            sys.meta_path.remove(self)
            _hold(self.moment, self.wait)
        return None


if _MOMENT in ("importing", "entered"):
    sys.meta_path.insert(0, _HoldBeforeCli(_MOMENT, wait=_MOMENT == "importing"))
elif _MOMENT == "returned":
    import labkit.cli  # the package's __init__ imports nothing, so this is all of the command

    _command = labkit.cli.main

    def _main_then_hold(argv=None):
        code = _command(argv)
        _hold("returned")
        return code

    labkit.cli.main = _main_then_hold
elif _MOMENT == "exiting":
    _exit = sys.exit

    def _hold_then_exit(code=None):
        _hold("exiting")
        _exit(code)

    sys.exit = _hold_then_exit
elif _MOMENT == "locking":
    import labkit.database

    _take = labkit.database._take_write_lock

    def _say_then_take(conn):
        _hold("locking", wait=False)
        _take(conn)

    labkit.database._take_write_lock = _say_then_take
