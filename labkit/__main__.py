"""``python -m labkit``: the command line, with Ctrl-C answered in one line at any moment.

A Ctrl-C raises ``KeyboardInterrupt`` wherever the process happens to be: importing the
command's modules, inside an open transaction (which rolls back on the way out), paused at a
crash point, or printing its result. Catching it here, around the imports as well as the
command, keeps the promise of the command-line contract: one line on stderr, exit 130,
and nothing half-written in the database. A second Ctrl-C, and any after the command has
finished, is ignored. A process started with SIGINT ignored (a background job of a
non-interactive shell) keeps ignoring it, as every program does. Before Python itself has started (the first few
milliseconds) a Ctrl-C ends the process silently; nothing has been opened by then.
"""

import signal
import sys
import threading

# jsonschema 4.25 and later import rfc3987_syntax, when installed (jupyter-events' dependencies
# bring it), only to check the "iri" format, and that import compiles ~35 parsers: a second or
# more of start-up for every `python -m labkit` child process. The lab pins 4.24 (requirements.txt)
# but labkit asks only for jsonschema>=4.20, and the evidence contract uses no formats, so this
# process lets that optional import fail (python-jsonschema/jsonschema#1428).
# Done here, in the command-line entry point only, so importing labkit elsewhere (a notebook
# kernel) changes nothing in jsonschema.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]  # None makes the import fail

#: What an interrupted command says; the exit code is the shell's for "ended by SIGINT".
INTERRUPTED = "labkit: interrupted; nothing half-written is kept"
EXIT_INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    """Run one command; the console script ``labkit`` and ``python -m labkit`` both come here."""
    listening = threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    if listening:
        signal.signal(signal.SIGINT, _interrupted)
    try:
        # Imported here, not at the top, so that a Ctrl-C during the import is caught below;
        # and held back until the imports are done (a few tenths of a second): raised inside
        # the import machinery's own callbacks, it would be printed and lost instead.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            from .cli import main as run_command
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

        code = run_command(argv)
        if listening:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # the command is over: nothing left to stop
        return code
    except KeyboardInterrupt:
        # Every transaction that was open has rolled back on the way here; commits stay.
        print(INTERRUPTED, file=sys.stderr)
        _forget_the_interrupt()
        return EXIT_INTERRUPTED


def _forget_the_interrupt() -> None:
    # CPython (3.11, 3.12) notes a KeyboardInterrupt that passes through code evaluated from a
    # string (dataclasses and namedtuple build their methods with exec) as "unhandled", even
    # when caught later, and under ``python -m`` then ends the process by SIGINT after it has
    # exited with 130: the caller sees -2 (1 run in 40 when the Ctrl-C landed in the imports).
    # Evaluating a string resets that note; nothing else is done here.
    exec("None")


def _interrupted(signum: int, frame: object) -> None:
    # One Ctrl-C is enough. Ignored from now on, for the whole process (any thread may be the
    # one a signal is delivered to), so a second one cannot cut the rollback short or turn the
    # one line into a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
