"""``python -m labkit``: the command line, with Ctrl-C answered in one line at any moment.

A Ctrl-C raises ``KeyboardInterrupt`` wherever the process happens to be: importing the
command's modules, inside an open transaction (which rolls back on the way out), paused at a
crash point, or printing its result. Catching it here, around the imports as well as the
command, keeps the promise of the command-line contract: one line on stderr, exit 130,
and nothing half-written in the database. Before Python itself has started (the first few
milliseconds) a Ctrl-C ends the process silently; nothing has been opened by then.
"""

import signal
import sys

# jsonschema imports rfc3987_syntax, when installed (JupyterLab's dependencies bring it),
# only to check the "iri" format, and that import compiles ~35 parsers: about a second of
# start-up for every `python -m labkit` child process. The evidence contract uses no
# formats, so this process lets that optional import fail (python-jsonschema/jsonschema#1428).
# Done here, in the command-line entry point only, so importing labkit elsewhere (a notebook
# kernel) changes nothing in jsonschema.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]  # None makes the import fail

#: What an interrupted command says; the exit code is the shell's for "ended by SIGINT".
INTERRUPTED = "labkit: interrupted; nothing half-written is kept"
EXIT_INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    """Run one command; the console script ``labkit`` and ``python -m labkit`` both come here."""
    try:
        # Imported here, not at the top, so that a Ctrl-C during the import is caught below.
        from .cli import main as run_command

        code = run_command(argv)
        _ignore_further_interrupts()
        return code
    except KeyboardInterrupt:
        # Every transaction that was open has rolled back on the way here; commits stay.
        _ignore_further_interrupts()
        print(INTERRUPTED, file=sys.stderr)
        return EXIT_INTERRUPTED


def _ignore_further_interrupts() -> None:
    # The command is over: a second Ctrl-C could only turn its one line into a traceback.
    # Blocked, not ignored, so nothing of it reaches a handler; the exit ends it.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


if __name__ == "__main__":
    sys.exit(main())
