"""The command line, a stable contract that tests, CI and outside checks drive.

    python -m labkit incidents
    python -m labkit run --db PATH --incident ID [--crash-at POINT]
    python -m labkit recover --db PATH
    python -m labkit status --db PATH [--json]
    python -m labkit crash-points

Exit codes: 0 done; 2 bad input (one line on stderr naming the problem; nothing changed);
1 a failure at run time, such as the provider being down (one line on stderr per failure).
Bad input is checked before the database is opened or created.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

from .clock import clock_from_env
from .coordinator import Coordinator
from .crashpoints import CRASH_POINTS, CrashPlan, check_point
from .errors import EXIT_BAD_INPUT, LabError, UnknownIncident
from .provider import ReferenceProvider, call_log_for, list_incidents
from .recovery import Resumed, recover
from .status import status_of
from .store import connect, latest_time_txn


class _Parser(argparse.ArgumentParser):
    """argparse prints usage plus a message; the contract is one line, so print only the message."""

    def error(self, message: str):
        print(f"labkit: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _parser() -> argparse.ArgumentParser:
    # allow_abbrev=False: `--inc` must not quietly mean `--incident`; scripts should break
    # loudly if an option is ever renamed, not drift onto another one.
    parser = _Parser(prog="python -m labkit", description="Durable, restart-safe incident workflows on SQLite.", allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    commands.add_parser("incidents", help="list the incident ids shipped in data/, one a line", allow_abbrev=False)
    run = commands.add_parser("run", help="drive one incident from its recorded step to report_completed", allow_abbrev=False)
    run.add_argument("--db", required=True, type=Path, help="checkpoint database (created if missing; its folder must exist)")
    run.add_argument("--incident", required=True, help="incident id, see: python -m labkit incidents")
    run.add_argument("--crash-at", metavar="POINT", help="SIGKILL this process at POINT, see: python -m labkit crash-points")
    rec = commands.add_parser("recover", help="resume every unfinished run from its recorded step", allow_abbrev=False)
    rec.add_argument("--db", required=True, type=Path)
    status = commands.add_parser("status", help="every run with its step, receipts and provider reads", allow_abbrev=False)
    status.add_argument("--db", required=True, type=Path)
    status.add_argument("--json", action="store_true", help="print one JSON object")
    commands.add_parser("crash-points", help="crash point names, one a line, in run order", allow_abbrev=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        clock_from_env()  # a malformed LABKIT_CLOCK is bad input: refuse it before any file is touched
        return COMMANDS[args.command](args)
    except LabError as error:
        print(f"labkit: error: {error}", file=sys.stderr)
        return error.exit_code
    except sqlite3.Error as error:  # e.g. still locked after the busy timeout
        print(f"labkit: failed: database {args.db.name!r}: {error}" if hasattr(args, "db") else f"labkit: failed: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"labkit: failed: {error.strerror or error}: {error.filename or ''}".rstrip(": "), file=sys.stderr)
        return 1


def _incidents(args) -> int:
    for incident in list_incidents():
        print(incident)
    return 0


def _run(args) -> int:
    plan = CrashPlan(check_point(args.crash_at)) if args.crash_at is not None else CrashPlan()
    provider = ReferenceProvider(call_log_for(args.db))
    known = provider.incidents()
    if args.incident not in known:  # before the database is created: bad input changes nothing
        raise UnknownIncident(args.incident, len(known))
    with closing(connect(args.db)) as conn:
        coordinator = Coordinator(conn, provider, clock=clock_from_env(after=latest_time_txn(conn)), crash=plan)
        run = coordinator.start(args.incident)
        # flush: a crash point kills the process, and unflushed lines would vanish with it
        print(f"{args.incident}: recorded step is {run.step}", flush=True)
        result = coordinator.drive(args.incident)
    read = "read the provider" if result.read_provider else "no read needed"
    # In a race, exactly one worker completes the run; the others find it completed.
    who = "completed it" if result.completed else "found it already completed"
    print(f"{args.incident}: report_completed, receipt {result.receipt.receipt_id} ({read}; {who})", flush=True)
    return 0


def _recover(args) -> int:
    provider = ReferenceProvider(call_log_for(args.db))
    with closing(connect(args.db)) as conn:
        latest = latest_time_txn(conn)

    def report(result: Resumed) -> None:
        if result.error is not None:
            print(f"labkit: error: {result.error}", file=sys.stderr, flush=True)
        else:
            print(f"resumed {result.incident} from {result.from_step}: {result.outcome}", flush=True)

    results = recover(args.db, provider, clock=clock_from_env(after=latest), progress=report)
    completed = sum(result.completed for result in results)
    failed = [result.error for result in results if result.error is not None]
    summary = f"recovered {completed} run{'s' if completed != 1 else ''}"
    print(summary + (f", {len(failed)} failed" if failed else ""))
    return max((error.exit_code for error in failed), default=0)


def _status(args) -> int:
    status = status_of(args.db)
    if args.json:
        print(json.dumps(status, sort_keys=True))
        return 0
    print(f"{'incident':<10} {'step':<18} {'receipts':>8} {'reads':>5}")
    for run in status["runs"]:
        print(f"{run['incident']:<10} {run['step']:<18} {run['receipts']:>8} {run['provider_reads']:>5}")
    return 0


def _crash_points(args) -> int:
    for point in CRASH_POINTS:
        print(point)
    return 0


COMMANDS = {"incidents": _incidents, "run": _run, "recover": _recover, "status": _status, "crash-points": _crash_points}
