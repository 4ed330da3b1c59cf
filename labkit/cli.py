"""The command line, a stable contract that tests, CI and outside checks drive.

    python -m labkit incidents
    python -m labkit run --db PATH --incident ID [--crash-at POINT]
    python -m labkit recover --db PATH
    python -m labkit status --db PATH [--json]
    python -m labkit crash-points

Exit codes: 0 done; 2 bad input (one line on stderr naming the problem, nothing changed);
1 anything else. Bad input is checked before the database is opened or created.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

from .clock import clock_from_env
from .coordinator import WORKFLOW_VERSION, Coordinator
from .crashpoints import CRASH_POINTS, CrashPlan, check_point
from .errors import LabError, UnknownIncident
from .provider import CallLog, ReferenceProvider, call_log_for, list_incidents
from .receipts import find_receipt_txn
from .recovery import recover
from .store import SCHEMA_VERSION, connect, latest_time_txn, list_runs_txn, load_evidence_txn

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    """argparse prints usage plus a message; the contract is one line, so print only the message."""

    def error(self, message: str):
        print(f"labkit: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m labkit", description="Durable, restart-safe incident workflows on SQLite.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    commands.add_parser("incidents", help="list the incident ids shipped in data/, one a line")
    run = commands.add_parser("run", help="drive one incident from its recorded step to report_completed")
    run.add_argument("--db", required=True, type=Path, help="checkpoint database (created if missing; its folder must exist)")
    run.add_argument("--incident", required=True, help="incident id, see: python -m labkit incidents")
    run.add_argument("--crash-at", metavar="POINT", help="SIGKILL this process at POINT, see: python -m labkit crash-points")
    rec = commands.add_parser("recover", help="resume every unfinished run from its recorded step")
    rec.add_argument("--db", required=True, type=Path)
    status = commands.add_parser("status", help="every run with its step, receipts and provider reads")
    status.add_argument("--db", required=True, type=Path)
    status.add_argument("--json", action="store_true", help="print one JSON object")
    commands.add_parser("crash-points", help="crash point names, one a line, in run order")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except LabError as error:
        print(f"labkit: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (sqlite3.Error, OSError) as error:
        print(f"labkit: failed: {type(error).__name__}: {error}", file=sys.stderr)
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
    how = "read the provider" if result.read_provider else "no read needed"
    print(f"{args.incident}: report_completed, receipt {result.receipt.receipt_id} ({how})", flush=True)
    return 0


def _recover(args) -> int:
    provider = ReferenceProvider(call_log_for(args.db))
    with closing(connect(args.db)) as conn:
        latest = latest_time_txn(conn)
    results = recover(args.db, provider, clock=clock_from_env(after=latest))
    for result in results:
        how = "read the provider" if result.read_provider else "completed from committed evidence, no read"
        print(f"resumed {result.incident} from {result.from_step}: {how}; receipt {result.receipt.receipt_id}")
    print(f"recovered {len(results)} run{'s' if len(results) != 1 else ''}")
    return 0


def status_of(db: str | Path) -> dict:
    """The status object that ``status --json`` prints (also used by notebooks and tests)."""
    log = CallLog(call_log_for(db))
    calls = log.calls()
    with closing(connect(db)) as conn:
        runs = []
        for run in list_runs_txn(conn):
            receipt = find_receipt_txn(conn, run.incident)
            runs.append({
                "incident": run.incident,
                "workflow_version": run.workflow_version,
                "step": run.step.value,
                "state_version": run.version,
                "evidence": load_evidence_txn(conn, run.incident) is not None,
                "receipts": conn.execute("SELECT COUNT(*) FROM receipts WHERE incident = ?", (run.incident,)).fetchone()[0],
                "receipt_id": receipt.receipt_id if receipt else None,
                "provider_reads": sum(1 for call in calls if call.incident == run.incident),
            })
    return {"schema_version": SCHEMA_VERSION, "workflow_version": WORKFLOW_VERSION, "runs": runs}


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


if __name__ == "__main__":
    sys.exit(main())
