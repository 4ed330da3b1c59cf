"""The command line, a stable contract that tests, CI and outside checks drive.

    python -m labkit incidents
    python -m labkit run --db PATH --incident ID [--crash-at POINT] [--pause-at POINT] [--bug NAME]
    python -m labkit recover --db PATH [--bug NAME]
    python -m labkit status --db PATH [--json]
    python -m labkit crash-points
    python -m labkit effects --db PATH [--json]
    python -m labkit resolve --db PATH --incident ID (--ticket T | --none) --reason TEXT
    python -m labkit ticket-service --store PATH [--port N] [--fault MODE]
    python -m labkit migrate --db PATH --to VERSION --reason TEXT
    python -m labkit migrations --db PATH [--json]
    python -m labkit reevaluate --db PATH --incident ID --reason TEXT [--rules-revision N]
    python -m labkit retain --db PATH --older-than DAYS
    python -m labkit work --db PATH --workers N [--incident ID ...] [--lease-seconds S] [--provider-delay S] [--crash-at POINT]
    python -m labkit bench [--peers] [--json] [--rounds N] [--incidents N]
    python -m labkit evaluate --db PATH [--json] [--ticket-store PATH]
    python -m labkit explore --db-dir PATH [--engine NAME] [--random N --seed S] [--bug NAME] [--singles] [--workers N] [--json]
        (NAME: labkit, dbos, temporal or langgraph)
    python -m labkit reset [--lesson NN]

Exit codes: 0 done; 2 bad input (one line on stderr naming the problem; nothing changed);
1 a failure at run time, such as the provider being down or the disk full (one line on
stderr per failure). The family of the error decides the code (:mod:`labkit.errors`).
Bad input is checked before the database is opened or created.
"""

from __future__ import annotations

import argparse
import errno
import json
import sqlite3
import sys
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

from .clock import clock_from_env
from .coordinator import WORKFLOW_VERSION, check_supported
from .crashpoints import CRASH_POINTS, CrashPlan, check_reached, still_ahead
from .database import busy_timeout_ms, check_path, read_transaction, translate, typed_path_problem
from .errors import (
    BadInput,
    BadTicketServiceUrl,
    CrashPointNotReached,
    CrashPointPassed,
    LabError,
    RunFailure,
    UnknownIncident,
    report,
    shown,
)
from .lab.naive import BUGS, CRASH_BUGS, coordinator_class
from .provider import CallLog, ReferenceProvider, call_log_for, list_incidents, provider_delay
from .recovery import Resumed, recover
from .status import status_of
from .steps import Step
from .store import connect, connect_readonly, latest_time_txn
from .typed import parse_decimal, parse_whole
from .versioning import migrate, migration_log, reevaluate
from .worker import DEFAULT_LEASE_SECONDS

# The modules of one command only (the ticket client's HTTP stack, the pool, the evaluation,
# retention, the workspace, the engines, the bench, the explorer, the ticket service) are
# imported inside that command: a `run` child, which lessons and tests start by the hundred,
# loads only the workflow (tests/core/test_start_cost.py lists what it must not load).
if TYPE_CHECKING:  # for the annotation only; _tickets imports it when --tickets is given
    from .effects import Tickets


class _Parser(argparse.ArgumentParser):
    """argparse prints usage plus a message; the contract is one line, so print only the message."""

    def error(self, message: str):
        raise SystemExit(report(BadInput(message)))


class _Once(argparse.Action):
    """An option that may be given once: `--incident A --incident B` must not quietly mean B."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"argument {option_string}: given more than once")
        setattr(namespace, self.dest, values)


def _db_path(text: str) -> Path:
    """The --db value, refused as :func:`~labkit.database.typed_path_problem` says."""
    problem = typed_path_problem(text, "database")
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return Path(text)


def _whole(text: str) -> int:
    """An integer option: ASCII digits only (:mod:`labkit.typed`); its range is checked where it is used."""
    try:
        return parse_whole(text)
    except ValueError as problem:
        raise argparse.ArgumentTypeError(str(problem)) from None


def _decimal(text: str) -> float:
    """A number option (seconds, days): ASCII digits, a point, an exponent; no ``1_0``, no ``nan``."""
    try:
        return parse_decimal(text)
    except ValueError as problem:
        raise argparse.ArgumentTypeError(str(problem)) from None


def _parser(words: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line. ``words`` (the arguments about to be parsed) lets the ticket
    service's options, and the HTTP server module behind them, load only when that command
    is asked for: every other command starts about a third faster without them. The engines,
    which name the Temporal engine's bugs in ``explore``'s help, likewise load only for it."""
    # allow_abbrev=False: `--inc` must not quietly mean `--incident`; scripts should break
    # loudly if an option is ever renamed, not drift onto another one.
    parser = _Parser(prog="python -m labkit", description="Durable, restart-safe incident workflows on SQLite.", allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    commands.add_parser("incidents", help="list the incident ids shipped in data/, one a line", allow_abbrev=False)
    run = commands.add_parser("run", help="drive one incident from its recorded step to report_completed", allow_abbrev=False)
    run.add_argument(
        "--db", required=True, type=_db_path, action=_Once, help="checkpoint database (created if missing; its folder must exist)"
    )
    run.add_argument("--incident", required=True, action=_Once, help="incident id, see: python -m labkit incidents")
    stop = run.add_mutually_exclusive_group()
    stop.add_argument("--crash-at", metavar="POINT", action=_Once, help="SIGKILL this process at POINT, see: python -m labkit crash-points")
    stop.add_argument("--pause-at", metavar="POINT", action=_Once,
                      help="for lessons and tests: at POINT print 'paused at POINT' and wait for a line on stdin")
    _add_bug_option(run)
    _add_version_option(run)
    _add_tickets_option(run)
    rec = commands.add_parser("recover", help="resume every unfinished run from its recorded step", allow_abbrev=False)
    rec.add_argument("--db", required=True, type=_db_path, action=_Once, help="an existing checkpoint database")
    _add_bug_option(rec)
    _add_version_option(rec)
    _add_tickets_option(rec)
    eff = commands.add_parser("effects", help="effects whose outcome is uncertain (or not yet sent), for a person", allow_abbrev=False)
    eff.add_argument("--db", required=True, type=_db_path, action=_Once, help="an existing checkpoint database (read only)")
    eff.add_argument("--json", action="store_true", help="print one JSON object")
    res = commands.add_parser("resolve", help="record a person's decision about an uncertain effect", allow_abbrev=False)
    res.add_argument("--db", required=True, type=_db_path, action=_Once, help="an existing checkpoint database")
    res.add_argument("--incident", required=True, action=_Once)
    which = res.add_mutually_exclusive_group(required=True)
    which.add_argument("--ticket", action=_Once, metavar="TICKET", help="the ticket that exists at the destination")
    which.add_argument("--none", action="store_true", help="no ticket exists at the destination")
    res.add_argument("--reason", required=True, action=_Once, help="how you know: the effect keeps it")
    service = commands.add_parser(
        "ticket-service", allow_abbrev=False,
        help="the remote ticket service of 09_external_effects (its own SQLite file); first stdout line: its base URL",
    )
    if words is None or "ticket-service" in words:
        # The HTTP server is loaded only for its own command: every other command starts without it.
        from .lab import ticket_service

        ticket_service.add_arguments(service)
    mig = commands.add_parser("migrate", help="move every run of the previous workflow version to VERSION, logged", allow_abbrev=False)
    mig.add_argument("--db", required=True, type=_db_path, action=_Once, help="an existing checkpoint database")
    mig.add_argument("--to", required=True, type=_whole, action=_Once, metavar="VERSION", help="the workflow version to move runs to")
    mig.add_argument("--reason", required=True, action=_Once, help="why: the migration log keeps it")
    log = commands.add_parser("migrations", help="the migration log", allow_abbrev=False)
    log.add_argument("--db", required=True, type=_db_path, action=_Once, help="an existing checkpoint database (read only)")
    log.add_argument("--json", action="store_true", help="print one JSON object")
    ree = commands.add_parser("reevaluate", help="a new assessment of a run's stored evidence, beside the original", allow_abbrev=False)
    ree.add_argument("--db", required=True, type=_db_path, action=_Once, help="an existing checkpoint database")
    ree.add_argument("--incident", required=True, action=_Once)
    ree.add_argument("--reason", required=True, action=_Once, help="why: the assessment keeps it")
    ree.add_argument("--rules-revision", type=_whole, action=_Once, metavar="N", help="the rules revision to apply (default: the newest)")
    ret = commands.add_parser(
        "retain", allow_abbrev=False,
        help="remove the raw diagnostics of finished runs older than DAYS, keep their evidence, receipts and checkpoints; VACUUM",
    )
    ret.add_argument("--db", required=True, type=_db_path, action=_Once, help="an existing checkpoint database")
    ret.add_argument("--older-than", required=True, action=_Once, metavar="DAYS",
                     help="age in days (a number from 0 to 36500, by the clock: LABKIT_CLOCK when set)")
    status = commands.add_parser("status", help="every run with its step, receipts and provider reads", allow_abbrev=False)
    status.add_argument("--db", required=True, type=_db_path, action=_Once, help="an existing checkpoint database (read only)")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    commands.add_parser("crash-points", help="crash point names, one a line, in run order", allow_abbrev=False)
    wrk = commands.add_parser(
        "work", allow_abbrev=False,
        help="create the runs, then N worker processes lease and finish every unfinished run (10_leases_and_fencing)",
    )
    wrk.add_argument(
        "--db", required=True, type=_db_path, action=_Once, help="checkpoint database (created if missing; its folder must exist)"
    )
    wrk.add_argument("--workers", required=True, type=_whole, action=_Once, metavar="N", help="how many worker processes to start")
    wrk.add_argument("--incident", action="append", metavar="ID",
                     help="a run to create and finish (repeat for more); default: every shipped incident and every unfinished run")
    wrk.add_argument("--lease-seconds", type=_decimal, action=_Once, metavar="S",
                     help=f"each lease's time to live (default {DEFAULT_LEASE_SECONDS:g}); workers renew at a third of it")
    wrk.add_argument("--provider-delay", type=_decimal, action=_Once, metavar="S",
                     help="seconds the provider takes per read (default: LABKIT_PROVIDER_DELAY, or 0)")
    wrk.add_argument("--crash-at", metavar="POINT", action=_Once,
                     help="for lessons and tests: worker 1 kills itself with SIGKILL at POINT (after_lease, or a run's point)")
    evl = commands.add_parser(
        "evaluate", allow_abbrev=False,
        help="the task scorecard (diagnoses vs data/ground_truth.csv) and the recovery scorecard, scored apart (read only)",
    )
    evl.add_argument("--db", required=True, type=_db_path, action=_Once, help="an existing checkpoint database (read only)")
    evl.add_argument("--json", action="store_true", help="print one JSON object")
    evl.add_argument("--ticket-store", type=_db_path, action=_Once, metavar="PATH",
                     help="the ticket service's store file (its --store), to count duplicated tickets at the destination")
    exp = commands.add_parser(
        "explore", allow_abbrev=False,
        help="every crash point and every pair of them, each in a fresh database, checked against every invariant (exit 1 if one broke)",
    )
    exp.add_argument("--db-dir", required=True, action=_Once, metavar="PATH", help="a new or empty folder: one sub-folder per scenario")
    exp.add_argument("--random", type=_whole, action=_Once, metavar="N", help="also N kills at random moments of the run (default 0)")
    exp.add_argument("--seed", type=_whole, action=_Once, metavar="S", help="the random kills' seed (default 0)")
    temporal_bugs = ""
    if words is None or "explore" in words:  # the engines load for explore only, like the ticket service above
        from .engines.temporal import BUGS as TEMPORAL_BUGS

        temporal_bugs = "; with --engine temporal, its broken activity: " + ", ".join(TEMPORAL_BUGS)
    exp.add_argument("--bug", metavar="NAME", action=_Once, help="explore a deliberately broken coordinator: " + ", ".join(CRASH_BUGS)
                     + temporal_bugs
                     + "; with --engine langgraph, one of its non-idempotent nodes (a wrong name lists them)")
    exp.add_argument("--engine", metavar="NAME", action=_Once,
                     help="the workflow's engine: labkit (default), or the same run on dbos (DBOS Transact), temporal "
                          "(a Temporal dev server the explorer starts) or langgraph (LangGraph's SQLite checkpointer): "
                          "14_choosing_an_engine")
    exp.add_argument("--singles", action="store_true", help="single crashes only, no pairs")
    exp.add_argument("--workers", type=_whole, action=_Once, metavar="N", help="processes playing scenarios at once (default: two a core)")
    exp.add_argument("--json", action="store_true", help="print one JSON object")
    ben = commands.add_parser(
        "bench", allow_abbrev=False, help="labkit against bare SQLite with the same commits (and, with --peers, DBOS and LangGraph)",
    )
    ben.add_argument("--peers", action="store_true", help="also DBOS and LangGraph (`make bench` installs them into .venv/bench)")
    ben.add_argument("--json", action="store_true", help="print one JSON object")
    ben.add_argument("--rounds", type=_whole, action=_Once, metavar="N", help="interleaved rounds measured after a warm-up (default 9)")
    ben.add_argument("--incidents", type=_whole, action=_Once, metavar="N", help="the first N shipped incidents a round (default: all)")
    reset = commands.add_parser(
        "reset", allow_abbrev=False,
        help="bring my-lab/ back to the committed lessons (one, or all) and remove what the lessons left in scratch",
    )
    reset.add_argument("--lesson", metavar="NN", action=_Once, help="only this lesson, e.g. 04")
    return parser


def _add_version_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--workflow-version", type=_whole, action=_Once, metavar="N", default=None,
        help=f"for lessons and tests: run as the release of workflow version N (default {WORKFLOW_VERSION})",
    )


def _add_tickets_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--tickets", metavar="URL", action=_Once, default=None, type=_tickets_url,
        help="also open the incident's ticket at this ticket service (see: python -m labkit ticket-service)",
    )


def _tickets_url(text: str) -> str:
    """``--tickets URL``, refused while the arguments are read: before any file is created or read."""
    try:
        from .ticket_client import check_url  # this option's own: see the imports at the top

        check_url(text)
    except BadTicketServiceUrl as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _add_bug_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--bug", metavar="NAME", action=_Once,
        help=f"for lessons and tests: run a deliberately broken variant ({', '.join(BUGS)})",
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser(sys.argv[1:] if argv is None else list(argv)).parse_args(argv)
    try:
        # Malformed settings are bad input: refuse them before any file is touched.
        clock_from_env()
        busy_timeout_ms()
        provider_delay()
        return COMMANDS[args.command](args)
    except sqlite3.Error as error:  # raised mid-command: classified by SQLite's result code
        return report(translate(error, getattr(args, "db", "")))
    except LabError as error:
        return report(error)
    except OSError as error:
        # Not foreseen by a named error: still one line, the file name quoted so that a
        # newline in it cannot make two. A name the system cannot take is bad input.
        where = f": {shown(error.filename, 200)}" if error.filename else ""
        kind = BadInput if error.errno == errno.ENAMETOOLONG else RunFailure
        return report(kind(f"{error.strerror or error}{where}"))


def _incidents(args) -> int:
    for incident in list_incidents():
        print(incident)
    return 0


def _crash_plan(args) -> CrashPlan:
    tickets = args.tickets is not None
    if args.crash_at is not None:
        return CrashPlan(check_reached(args.crash_at, tickets=tickets))
    if args.pause_at is not None:
        return CrashPlan(check_reached(args.pause_at, tickets=tickets), "pause")
    return CrashPlan()


def _provider(db: Path) -> ReferenceProvider:
    """The reference provider with its call log beside ``db``, the log's path checked first."""
    log = call_log_for(check_path(db, must_exist=False))
    CallLog(log).check()
    return ReferenceProvider(log)


def _run(args) -> int:
    # Every check of the input comes before the database is created: bad input changes nothing.
    plan = _crash_plan(args)
    version = _version(args)
    coordinator_type = coordinator_class(args.bug)
    provider = _provider(args.db)
    known = provider.incidents()
    if args.incident not in known:
        raise UnknownIncident(args.incident, len(known))
    with closing(connect(args.db)) as conn:
        with read_transaction(conn):
            latest = latest_time_txn(conn)
        coordinator = coordinator_type(
            conn, provider, clock=clock_from_env(after=latest), crash=plan, workflow_version=version, effects=_tickets(args)
        )
        run = coordinator.start(args.incident)
        killing = plan.point if plan.mode == "kill" else None  # a pause not reached is a race lost, not an error
        if killing is not None and not still_ahead(killing, run.step):
            raise CrashPointPassed(killing.value, args.incident, run.step.value)  # start() wrote nothing: it exists
        # flush: a crash point kills the process, and unflushed lines would vanish with it
        print(f"{args.incident}: recorded step is {run.step}", flush=True)
        result = coordinator.finish(args.incident)
        read = "read the provider" if result.read_provider else "no read needed"
        # In a race, exactly one worker completes the run; the others find it completed.
        who = "completed it" if result.completed else "found it already completed"
        print(f"{args.incident}: report_completed, receipt {result.receipt.receipt_id} ({read}; {who})", flush=True)
        reason = f"another process moved the run of {args.incident} past it first"
        if args.tickets is not None:
            effect = coordinator.carry_out_effect(args.incident)
            ticket = effect.ticket or "(none)"
            print(f"{args.incident}: ticket {ticket}, effect {effect.state} (operation {effect.operation_key})", flush=True)
            reason = f"no ticket request was sent this time (the effect is {effect.state}, ticket {ticket})"
    if killing is not None:  # still alive: the kill asked for never came, and a supervisor must hear it
        raise CrashPointNotReached(killing.value, reason)
    return 0


def _recover(args) -> int:
    version = _version(args)
    coordinator_type = coordinator_class(args.bug)
    check_path(args.db, must_exist=True)  # recovering a mistyped path must not create a database
    provider = _provider(args.db)
    with closing(connect(args.db, create=False)) as conn, read_transaction(conn):
        latest = latest_time_txn(conn)

    def progress(result: Resumed) -> None:
        if result.error is not None:
            report(result.error)
        else:
            print(f"resumed {result.incident} from {result.from_step}: {result.outcome}", flush=True)

    results = recover(
        args.db, provider, clock=clock_from_env(after=latest), progress=progress, coordinator_class=coordinator_type,
        workflow_version=version, effects=_tickets(args),
    )
    completed = sum(result.completed for result in results)
    failed = [result.error for result in results if result.error is not None]
    summary = f"recovered {completed} run{'s' if completed != 1 else ''}"
    owed = [r.effect for r in results if r.error is None and r.from_step is Step.REPORT_COMPLETED and r.effect is not None]
    settled = sum(effect.state != "uncertain" for effect in owed)
    if settled:
        summary += f", settled {settled} effect{'s' if settled != 1 else ''}"
    if len(owed) > settled:  # asked, and still unknowable: not settled, and not to be called so
        summary += f", {len(owed) - settled} effect{'s' if len(owed) - settled != 1 else ''} still uncertain (see: effects)"
    print(summary + (f", {len(failed)} failed" if failed else ""))
    return max((error.exit_code for error in failed), default=0)


def _tickets(args) -> Tickets | None:
    """``--tickets URL``: the ticket each completed run owes, at that service (09_external_effects)."""
    if args.tickets is None:
        return None
    from .effects import Tickets  # this command's own: see the imports at the top

    return Tickets(args.tickets)


def _version(args) -> int:
    return check_supported(args.workflow_version) if args.workflow_version is not None else WORKFLOW_VERSION


def _clock_after_latest(db: Path):
    with closing(connect(db, create=False)) as conn, read_transaction(conn):
        return clock_from_env(after=latest_time_txn(conn))


def _migrate(args) -> int:
    check_path(args.db, must_exist=True)
    done = migrate(args.db, args.to, args.reason, _clock_after_latest(args.db))
    if done is None:
        print(f"no run of workflow version {args.to - 1}: nothing migrated, nothing logged")
        return 0
    print(f"migrated {len(done.runs)} run{'s' if len(done.runs) != 1 else ''} from workflow version {done.from_version} to "
          f"{done.to_version}: {', '.join(done.runs)}")
    print(f"logged as migration {done.seq}: {done.reason}")
    return 0


def _migrations(args) -> int:
    log = migration_log(args.db)
    if args.json:
        print(json.dumps({"migrations": [vars(entry) for entry in log]}, sort_keys=True))
        return 0
    print(f"{'seq':>3} {'from':>4} {'to':>3} {'at':<20} {'runs':>4}  reason")
    for entry in log:
        print(f"{entry.seq:>3} {entry.from_version:>4} {entry.to_version:>3} {entry.at:<20} {len(entry.runs):>4}  {entry.reason}")
    return 0


def _reevaluate(args) -> int:
    check_path(args.db, must_exist=True)
    new = reevaluate(args.db, args.incident, args.reason, _clock_after_latest(args.db), args.rules_revision)
    changed = ", ".join(new.changed) or "nothing"
    print(f"{args.incident}: assessment {new.seq} by rules revision {new.rules_revision}: {new.kind} (decision inputs changed: {changed})")
    return 0


def _retain(args) -> int:
    from .retention import check_days, retain  # this command's own: see the imports at the top

    days = check_days(args.older_than)  # bad input is refused before the database is opened
    check_path(args.db, must_exist=True)
    report = retain(args.db, days, _clock_after_latest(args.db))
    for line in report.lines():
        print(line)
    return 0


def _effects(args) -> int:
    from .effects import OWED, list_effects_txn  # this command's own: see the imports at the top

    with closing(connect_readonly(args.db)) as conn, read_transaction(conn):
        open_effects = list_effects_txn(conn, OWED)
    if args.json:
        shown = [{"incident": e.incident, "state": e.state, "operation_key": e.operation_key, "ticket": e.ticket,
                  "attempts": e.attempts, "last_outcome": e.last_outcome} for e in open_effects]
        print(json.dumps({"effects": shown}, sort_keys=True))
        return 0
    if not open_effects:
        print("no effect is uncertain or waiting to be sent")
    for e in open_effects:
        print(f"{e.incident}  {e.state:<9} operation {e.operation_key}  attempts {e.attempts}  {e.last_outcome}")
    return 0


def _resolve(args) -> int:
    from .effects import resolve as resolve_effect  # this command's own: see the imports at the top

    check_path(args.db, must_exist=True)
    effect = resolve_effect(args.db, args.incident, None if args.none else args.ticket, args.reason, _clock_after_latest(args.db))
    print(f"{args.incident}: effect resolved, ticket {effect.ticket or '(none)'}: {args.reason}")
    return 0


def _status(args) -> int:
    status = status_of(args.db)
    if args.json:
        print(json.dumps(status, sort_keys=True))
        return 0
    print(f"{'incident':<10} {'step':<18} {'receipts':>8} {'reads':>5}")
    for run in status["runs"]:
        print(f"{run['incident']:<10} {run['step']:<18} {run['receipts']:>8} {run['provider_reads']:>5}")
    return 0


def _evaluate(args) -> int:
    from .evaluation import evaluate  # this command's own: see the imports at the top

    scores = evaluate(args.db, ticket_store=args.ticket_store)
    if args.json:
        print(json.dumps(scores.as_json(), sort_keys=True))
        return 0
    for line in scores.lines():
        print(line)
    return 0


def _bench(args) -> int:
    from .lab import bench  # imported here: every other command's process starts without it

    return bench.run(args)


def _explore(args) -> int:
    from .lab import explorer  # imported here: the explorer and its engines load DBOS, which no other command needs

    trials = args.random or 0
    if not 0 <= trials <= explorer.MAX_TRIALS:
        raise explorer.BadExploreOption("--random", f"a number of trials from 0 to {explorer.MAX_TRIALS}, not {trials}")
    if args.seed is not None and args.random is None:
        raise explorer.BadExploreOption("--seed", "seeds the random kills: give --random N with it")
    if args.workers is not None and not 1 <= args.workers <= explorer.MAX_WORKERS:
        raise explorer.BadExploreOption("--workers", f"a number of processes from 1 to {explorer.MAX_WORKERS}, not {args.workers}")
    found = explorer.explore(args.db_dir, pairs=not args.singles, bug=args.bug, random_trials=trials, seed=args.seed or 0,
                             workers=args.workers, engine="labkit" if args.engine is None else args.engine)
    print(json.dumps(found.as_json()) if args.json else found.text())
    return 0 if found.held else 1


def _ticket_service(args) -> int:
    from .lab import ticket_service  # imported here, as for its arguments: only this command serves HTTP

    return ticket_service.run(args)


def _crash_points(args) -> int:
    for point in CRASH_POINTS:
        print(point)
    return 0


def _work(args) -> int:
    from .pool import work  # this command's own: see the imports at the top

    lease = DEFAULT_LEASE_SECONDS if args.lease_seconds is None else args.lease_seconds
    return work(args.db, args.workers, incidents=args.incident, lease_seconds=lease, delay=args.provider_delay, crash_at=args.crash_at)


def _reset(args) -> int:
    from .lab.workspace import reset  # this command's own: see the imports at the top

    report = reset(args.lesson)
    for name in report.restored:
        print(f"restored my-lab/{name}")
    for backup in report.backed_up:
        print(f"kept your previous copy as {backup}")
    print(f"removed {len(report.scratch_removed)} scratch folder(s) that lessons left behind")
    if report.scratch_in_use:
        print(f"left {len(report.scratch_in_use)} in use by a running kernel; close it and reset again to remove them")
    return 0


COMMANDS = {
    "incidents": _incidents, "run": _run, "recover": _recover, "status": _status, "crash-points": _crash_points,
    "migrate": _migrate, "migrations": _migrations, "reevaluate": _reevaluate, "reset": _reset, "work": _work,
    "effects": _effects, "resolve": _resolve, "ticket-service": _ticket_service, "bench": _bench,
    "retain": _retain, "evaluate": _evaluate, "explore": _explore,
}
