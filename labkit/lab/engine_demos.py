"""What 14_choosing_an_engine shows each engine doing, run for real: a late result, a transaction, both scorecards.

Each demonstration here runs the engine's own machinery, not a picture of it: a Temporal dev
server on 127.0.0.1 (:mod:`labkit.lab.temporal_server`), DBOS on SQLite files in the folder
given, processes forked and SIGKILLed. Every client, worker and DBOS instance lives in a forked
child (:func:`labkit.children.in_child`): their threads must never start in a notebook's kernel.
What each returns is a frozen record whose ``lines()`` are the same on every run (no ids,
times or paths), so a lesson can print them under strict nbval.

- :func:`late_result_refused`: Temporal fences a timed-out activity attempt, as 10_leases
  fences a worker whose lease ran out; the service itself refuses the stale attempt's result.
- :func:`datasource_transaction`: DBOS's datasource transaction commits a business write and
  the step's record together (the engine's own G1, as labkit's evidence commits with its step),
  so a process killed right after that commit does not run the write again; a plain step does.
- :func:`scorecards` and :func:`scorecard_table`: both scorecards of 13_evaluation on all sixteen
  lab incidents, driven to their end on each engine; equal cards, and a broken engine's that is not.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from .. import contract
from ..children import end_of, fork, in_child
from ..crashpoints import NO_CRASH, CrashPlan, check_reached
from ..database import open_database
from ..engines import ENGINES
from ..engines import engine as engine_named
from ..engines.temporal import _sandbox, late_result_workflow, scope_of
from ..errors import BadInput, LabError
from ..evaluation import Evaluation, evaluate
from ..provider import ReferenceProvider
from .temporal_server import TemporalServer, serving
from .ticket_service import ticket_service

# --------------------------------------------------------------------------- Temporal: a late result

#: Each attempt's start-to-close timeout in the late-result demonstration: what the first attempt
#: outlives, so the demonstration waits about this long. Attempt 2 is completed within
#: milliseconds of starting, far inside it even on a loaded machine.
LATE_TIMEOUT_SECONDS = 1.0
#: How long the demonstration waits for an attempt to start before it calls the run failed.
ATTEMPT_WAIT_SECONDS = 30.0


class DemoFailed(LabError):
    """A demonstration's child process ended without its result; the message is its error's first line."""


@dataclass(frozen=True)
class LateResult:
    """What the late-result demonstration saw: whose completion the service refused, and what the workflow returned.

    ``late`` and ``fresh`` are the service's answers to completing attempt 1 (after its timeout,
    unless ``in_time``) and then the newest attempt: ``accepted`` or the gRPC status the service
    refused with (``NOT_FOUND``). ``started`` lists the attempt of each ``ActivityTaskStarted``
    event of the history, ``timed_out`` counts its ``ActivityTaskTimedOut`` events.
    """

    late_attempt: int
    late: str
    fresh_attempt: int
    fresh: str
    result: str
    started: tuple[int, ...]
    timed_out: int
    in_time: bool = False

    @property
    def result_attempt(self) -> int:
        """Which attempt the workflow's result came from (the answer says: ``answer of attempt N``)."""
        return int(self.result.rsplit(" ", 1)[-1])

    def lines(self) -> list[str]:
        when = "within its timeout" if self.in_time else "after the server timed it out"
        out = [f"attempt {self.late_attempt} completed {when}: {self.late}"]
        if self.fresh_attempt != self.late_attempt:
            out.append(f"attempt {self.fresh_attempt} completed while current: {self.fresh}")
        out += [f"workflow result: {self.result!r} (from attempt {self.result_attempt})",
                f"history: {len(self.started)} ActivityTaskStarted (attempt {', '.join(map(str, self.started))}), "
                f"{self.timed_out} ActivityTaskTimedOut"]
        return out


def late_result_refused(folder: str | Path, address: str | None = None, *, in_time: bool = False) -> LateResult:
    """Run one activity whose first attempt outlives its timeout, then complete that attempt late.

    The activity saves its task token (which names the attempt) to ``folder`` and leaves its
    completion to someone else (``activity.raise_complete_async()``), as a worker that stalls
    would. The server times attempt 1 out after :data:`LATE_TIMEOUT_SECONDS` and schedules
    attempt 2; the demonstration then completes attempt 1 with its answer, which the service
    refuses, and attempt 2, which it accepts. ``in_time`` completes attempt 1 before its timeout
    instead: accepted, the counter-case that shows the refusal is about lateness.

    On the server at ``address``, or on one started here on ``folder``'s own SQLite file and
    stopped before returning. The workflow's id carries a random suffix (never printed), so the
    demonstration can run again on the same server.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if address is not None:
        return _late_result(folder, address, in_time)
    db_file = folder / "late-result.sqlite"
    for stale in (db_file, db_file.with_name(db_file.name + "-wal"), db_file.with_name(db_file.name + "-shm")):
        stale.unlink(missing_ok=True)  # this demonstration's own server file, from a run before: a fresh history
    with TemporalServer(db_file) as server:
        return _late_result(folder, server.address, in_time)


def _late_result(folder: Path, address: str, in_time: bool) -> LateResult:
    tokens = folder / "late-result-tokens"
    tokens.mkdir(exist_ok=True)
    for old in tokens.glob("attempt-*.token"):
        old.unlink()
    out, err = folder / "late-result.json", folder / "late-result.err"
    out.unlink(missing_ok=True)
    end = in_child(lambda: asyncio.run(_late_result_child(folder, tokens, address, in_time, out)), output=(folder / "late-result.log", err))
    if end.code != 0 or not out.exists():
        raise DemoFailed(f"the late-result demonstration ended {end}")
    seen = json.loads(out.read_text())
    return LateResult(seen["late_attempt"], seen["late"], seen["fresh_attempt"], seen["fresh"], seen["result"],
                      tuple(seen["started"]), seen["timed_out"], in_time)


async def _late_result_child(folder: Path, tokens: Path, address: str, in_time: bool, out: Path) -> None:
    """In a forked child: a worker, the workflow, the completions by token, and the history read back."""
    from temporalio import activity
    from temporalio.client import Client
    from temporalio.service import RPCError
    from temporalio.worker import Worker

    workflow_class, activity_name = late_result_workflow()

    @activity.defn(name=activity_name)
    async def answer_later() -> str:
        info = activity.info()
        (tokens / f"attempt-{info.attempt}.token").write_bytes(info.task_token)
        activity.raise_complete_async()  # the answer comes from outside, by this attempt's token

    async def token_of(attempt: int) -> bytes:
        path = tokens / f"attempt-{attempt}.token"
        deadline = time.monotonic() + ATTEMPT_WAIT_SECONDS
        while not path.exists():
            if time.monotonic() > deadline:
                raise DemoFailed(f"attempt {attempt} did not start within {ATTEMPT_WAIT_SECONDS:.0f} s")
            await asyncio.sleep(0.01)
        return path.read_bytes()

    async def complete(attempt: int, token: bytes) -> str:
        try:
            await client.get_async_activity_handle(task_token=token).complete(f"answer of attempt {attempt}")
        except RPCError as refused:
            return refused.status.name  # the status only: the message's wording is the server's, and may change with it
        return "accepted"

    client = await Client.connect(address)
    queue = f"late-result-{scope_of(folder)}"
    async with Worker(client, task_queue=queue, workflows=[workflow_class], activities=[answer_later],
                      max_cached_workflows=0, workflow_runner=_sandbox()):
        handle = await client.start_workflow(workflow_class.run, LATE_TIMEOUT_SECONDS,
                                             id=f"late-result-{uuid.uuid4().hex[:12]}", task_queue=queue)
        first = await token_of(1)
        fresh_attempt = 1
        if not in_time:
            fresh_attempt = 2
            second = await token_of(2)  # exists once the server has timed attempt 1 out and handed out attempt 2
        late = await complete(1, first)
        fresh = late if in_time else await complete(2, second)
        result = await handle.result()
        history = await handle.fetch_history()
    started, timed_out = [], 0
    for event in history.events:
        kind = event.WhichOneof("attributes") or ""
        if kind == "activity_task_started_event_attributes":
            started.append(event.activity_task_started_event_attributes.attempt)
        timed_out += kind == "activity_task_timed_out_event_attributes"
    out.write_text(json.dumps({"late_attempt": 1, "late": late, "fresh_attempt": fresh_attempt, "fresh": fresh,
                               "result": result, "started": started, "timed_out": timed_out}))



# --------------------------------------------------------------------------- DBOS: the datasource transaction

#: The two ways the demonstration writes its business row inside a DBOS workflow.
PLAIN_STEP = "plain @DBOS.step"
TRANSACTION = "datasource transaction"
#: The application version both processes of a case run under: recovery resumes only its own version's workflows.
DEMO_APP_VERSION = "demo-1"
#: The one workflow of each case: a fixed id, so the process started again finds it to recover.
DEMO_WORKFLOW = "write-once"


@dataclass(frozen=True)
class TransactionCase:
    """One way of writing, killed (or not) right after its commit, then recovered by DBOS.launch().

    ``body_ran``: how many times the write's function ran, counted in a file outside every
    database; ``business_rows``: the rows it left. When the first process has ended (killed, or
    done), before any recovery: ``app_records``, the rows of DBOS's ``datasource_outputs``
    table in the business database (the step's record, committed with the row), and
    ``system_records``, the steps DBOS recorded in its system database. A workflow that
    finishes has its datasource records deleted by DBOS, so an unkilled run leaves 0 there
    too. ``recorded``: the step's output in DBOS's system database once the workflow ended;
    ``status``: the workflow's.
    """

    kind: str
    killed: bool
    body_ran: int
    business_rows: int
    app_records: int
    system_records: int
    recorded: str
    status: str


@dataclass(frozen=True)
class TransactionDemo:
    """The cases of :func:`datasource_transaction`, as a table."""

    cases: tuple[TransactionCase, ...]

    def rows(self) -> list[dict[str, Any]]:
        return [{"step": case.kind, "killed after commit": "yes" if case.killed else "no", "body ran": case.body_ran,
                 "business rows": case.business_rows, "app db record (1st)": case.app_records,
                 "system db record (1st)": case.system_records, "DBOS output": case.recorded, "status": case.status}
                for case in self.cases]

    def frame(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.rows())

    def lines(self) -> list[str]:
        return _fixed_width(self.rows())


def _fixed_width(rows: list[dict[str, Any]]) -> list[str]:
    """Rows as a fixed-width table under their keys (no index, no times, no paths): what a lesson prints and nbval compares."""
    heads = list(rows[0]) if rows else []
    cells = [[str(row[head]) for head in heads] for row in rows]
    widths = [max(len(head), *(len(line[i]) for line in cells)) for i, head in enumerate(heads)]
    return ["  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip() for line in [heads, *cells]]


def datasource_transaction(folder: str | Path, *, killed: bool = True) -> TransactionDemo:
    """A business write in a plain ``@DBOS.step`` and in a datasource transaction, each killed right after its commit.

    DBOS 3 (pinned 3.4.0) has no ``@DBOS.transaction`` nor an application database any more;
    its transactions are a *datasource*'s (``SQLAlchemyDatasource.create(URL)``, then
    ``@ds.transaction()``), which writes the step's output into a ``datasource_outputs`` table
    of the business database in the same commit as the business rows. A plain step's output
    is recorded in DBOS's system database after the step returns, in another commit. Each case
    runs in two forked processes on files of its own under ``folder``: the first runs the
    workflow and SIGKILLs itself in SQLAlchemy's ``after_commit`` hook, the moment the
    business row is durable and DBOS has recorded nothing yet in its system database; the
    second launches DBOS again, which recovers the workflow. ``killed=False`` runs the same
    without the kill: both write once (the baseline). The two cases run side by side.

    Documented at docs.dbos.dev/python/reference/datasources ("exactly-once" transactions); the
    code that joins the record to the commit is ``SQLAlchemyDatasource.run_tx_step`` in dbos/_datasource.py.
    """
    folder = Path(folder)
    cases = [(kind, folder / "datasource-transaction" / name) for kind, name in ((PLAIN_STEP, "plain-step"), (TRANSACTION, "transaction"))]
    for _, place in cases:
        place.mkdir(parents=True, exist_ok=True)
        for name in ("app.sqlite", "dbos-system.sqlite", "body.log", "seen.json"):
            for stale in (place / name, place / (name + "-wal"), place / (name + "-shm")):
                stale.unlink(missing_ok=True)  # this demonstration's own files, from a run before
    first = _side_by_side([partial(_transaction_child, kind, place, first=True, kill=killed) for kind, place in cases],
                          [place / "first" for _, place in cases])
    for (kind, place), end in zip(cases, first, strict=True):
        if end.killed != killed or (not killed and end.code != 0):
            wanted = "killed" if killed else "exit 0"
            raise DemoFailed(f"the {kind} first process ended {end}, not {wanted}: {_last_line(place / 'first.err')}")
    at_kill = [(_count(place / "app.sqlite", "datasource_outputs"), _count(place / "dbos-system.sqlite", "operation_outputs"))
               for _, place in cases]
    second = _side_by_side([partial(_transaction_child, kind, place, first=False, kill=False) for kind, place in cases],
                           [place / "second" for _, place in cases])
    out = []
    for (kind, place), end, checkpoints in zip(cases, second, at_kill, strict=True):
        seen = place / "seen.json"
        if end.code != 0 or not seen.exists():
            raise DemoFailed(f"the {kind} recovery ended {end}: {_last_line(place / 'second.err')}")
        recorded = json.loads(seen.read_text())
        out.append(TransactionCase(kind, killed, len((place / "body.log").read_text().splitlines()),
                                   _count(place / "app.sqlite", "notes"), *checkpoints, recorded["output"], recorded["status"]))
    return TransactionDemo(tuple(out))


def _side_by_side(works: list[Callable[[], object]], logs: list[Path]) -> list[Any]:
    """Fork one child per work at once, wait for all; how each ended (its stderr in LOG.err)."""
    pids = [fork(work, output=(log.with_suffix(".out"), log.with_suffix(".err"))) for work, log in zip(works, logs, strict=True)]
    return [end_of(os.waitpid(pid, 0)[1]) for pid in pids]


def _last_line(path: Path) -> str:
    lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    return lines[-1] if lines else "no error written"


def _count(db: Path, table: str) -> int:
    """Rows of ``table`` in ``db`` (0 when the table is not there), read without writing."""
    if not db.exists():
        return 0
    with closing(open_database(db, readonly=True)) as conn:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone() is None:
            return 0
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])  # noqa: S608 - a table name of ours


def _transaction_child(kind: str, place: Path, *, first: bool, kill: bool) -> None:
    """In a forked child: DBOS on ``place``'s files, the workflow run (first) or recovered (second), its step read back.

    The same function writes the row in both cases; only the decorator around it differs. The
    kill sits in the sessions' ``after_commit`` hook, so it falls at the same moment in both:
    after the row's commit, before the step returns to DBOS.
    """
    from dbos import DBOS, SetWorkflowID, SQLAlchemyDatasource
    from sqlalchemy import event, text
    from sqlalchemy.orm import Session, sessionmaker

    sessions = sessionmaker(expire_on_commit=False)
    if kill:
        event.listen(sessions, "after_commit", lambda _session: os.kill(os.getpid(), signal.SIGKILL))
    DBOS(config={"name": "labkit-datasource-demo", "system_database_url": f"sqlite:///{place / 'dbos-system.sqlite'}",
                 "application_version": DEMO_APP_VERSION, "executor_id": "local", "log_level": "ERROR"})
    ds = SQLAlchemyDatasource.create(f"sqlite:///{place / 'app.sqlite'}", sessionmaker=sessions)
    with ds.engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, note TEXT NOT NULL)"))

    def write_note(session: Session) -> str:
        with open(place / "body.log", "a") as ran:  # outside every database: counts runs the rollback cannot undo
            ran.write("ran\n")
        row = session.execute(text("INSERT INTO notes (note) VALUES ('incident noted')")).lastrowid  # type: ignore[attr-defined]
        return f"wrote row {row}"

    if kind == TRANSACTION:
        @ds.transaction(name="write_note")
        def write() -> str:
            return write_note(ds.sql_session())  # DBOS's own session: its record of the step joins this commit
    else:
        @DBOS.step(name="write_note")
        def write() -> str:
            with sessions(bind=ds.engine) as session, session.begin():
                return write_note(session)  # committed on leaving the block; DBOS records the step after the return

    @DBOS.workflow(name="note_workflow")
    def note_workflow() -> str:
        return write()

    DBOS.launch()  # in the second process, this recovers the PENDING workflow the first one left
    try:
        if first:
            with SetWorkflowID(DEMO_WORKFLOW):
                note_workflow()
            return
        handle: Any = DBOS.retrieve_workflow(DEMO_WORKFLOW)
        handle.get_result(polling_interval_sec=0.05)
        output = DBOS.list_workflow_steps(DEMO_WORKFLOW)[0]["output"]
        (place / "seen.json").write_text(json.dumps({"output": repr(output), "status": handle.get_status().status}))
    finally:
        DBOS.destroy(destroy_registry=True)


# --------------------------------------------------------------------------- both scorecards, every engine

#: The columns every engine's card must share for "evaluated the same way" to hold.
CARD_COLUMNS = ("runs", "completed", "correct", "scored", "duplicate receipts", "duplicate tickets", "rereads", "uncertain")


@dataclass(frozen=True)
class EngineCard:
    """Both scorecards (13_evaluation's) of the lab's incidents, each driven to its end on one engine.

    ``evaluation`` is :func:`labkit.evaluation.evaluate` on the engine's ``FOLDER/lab.db`` with the
    ticket service's store; ``seconds`` is the call's wall time, the ticket service's start and
    (for Temporal, when started here) the server's start and stop included: what the engine adds
    to a test command. Never in :meth:`lines`.
    ``bug`` and ``crash_at`` say how the run was broken or killed, if it was.
    """

    engine: str
    evaluation: Evaluation
    seconds: float
    bug: str | None = None
    crash_at: str | None = None

    def summary(self) -> dict[str, Any]:
        task, recovery = self.evaluation.task, self.evaluation.recovery
        return {"engine": self.engine + (f" ({self.bug})" if self.bug else ""), "killed at": self.crash_at or "-",
                "runs": recovery.runs, "completed": recovery.completed, "correct": task.correct, "scored": task.scored,
                "duplicate receipts": recovery.duplicate_receipts, "duplicate tickets": recovery.duplicate_effects,
                "rereads": recovery.rereads, "uncertain": recovery.uncertain_effects}

    def compared(self) -> dict[str, Any]:
        """What must be equal across engines: the card's numbers, nothing about which engine or how it was run."""
        return {column: self.summary()[column] for column in CARD_COLUMNS}

    def lines(self) -> list[str]:
        return [f"engine {self.summary()['engine']}", *self.evaluation.lines()]


def scorecards(engine_name: str, folder: str | Path, tickets: str | Path | None = None, *, bug: str | None = None,
               crash_at: str | None = None, incidents: list[str] | None = None) -> EngineCard:
    """Every lab incident (or ``incidents``) driven to its end on the engine named, then both scorecards of what it left.

    The runs go into ``FOLDER/lab.db`` (a fresh folder per engine: scorecards count every run
    there), each opening its ticket at a ticket service started here on ``tickets`` (default
    ``FOLDER/tickets.db``), whose table the recovery scorecard counts. ``crash_at`` kills the
    first incident's process at that point (a real SIGKILL in a forked child), and a second
    process restarts it as a supervisor would before driving the rest; ``bug`` is the engine's
    deliberately broken variant (``configured(bug=...)``), so a card can be made to differ.
    The temporal engine runs on the server :data:`~labkit.engines.temporal.ADDRESS_ENV` names,
    or on one started here on ``FOLDER/temporal.sqlite`` for the call.
    """
    driver = engine_named(engine_name, bug=bug)  # an unknown engine or bug: refused before anything is made
    point = CrashPlan(check_reached(crash_at, tickets=True)) if crash_at is not None else NO_CRASH
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / "lab.db").exists():
        raise BadInput(f"{folder} already holds a lab.db: give each engine's scorecards a folder of their own")
    store = Path(tickets) if tickets is not None else folder / "tickets.db"
    chosen = list(incidents) if incidents is not None else ReferenceProvider(folder / ".incidents.log").incidents()
    # Built before the fork, as the explorer does: a cold child compiles the evidence contract's
    # validator inside its first read, seconds on a loaded machine, and a Temporal read activity
    # that outlives its timeout that way is run again (a reread no kill caused).
    contract.prepare()
    driver.warm()
    started = time.perf_counter()
    with serving(engine_name, folder), ticket_service(store) as url:
        ends = []
        if point is not NO_CRASH:
            ends.append(in_child(lambda: driver.drive(folder, point, url, chosen[0]), output=_logs(folder, "killed")))
            if not ends[-1].killed:
                raise DemoFailed(f"the {engine_name} run of {chosen[0]} was not killed at {crash_at}: it ended {ends[-1]}")

        def rest() -> None:
            if point is not NO_CRASH:
                driver.restart(folder, NO_CRASH, url, chosen[0])
            for incident in chosen[1 if point is not NO_CRASH else 0:]:
                driver.drive(folder, NO_CRASH, url, incident)

        end = in_child(rest, output=_logs(folder, "runs"))
        if end.code != 0:
            raise DemoFailed(f"the {engine_name} runs ended {end}")
    seconds = time.perf_counter() - started
    return EngineCard(engine_name, evaluate(folder / "lab.db", ticket_store=store), seconds, bug, crash_at)


def _logs(folder: Path, name: str) -> tuple[Path, Path]:
    return folder / f".{name}.out", folder / f".{name}.err"


@dataclass(frozen=True)
class ScorecardTable:
    """One :class:`EngineCard` per engine, side by side: "evaluated the same way", measured."""

    cards: tuple[EngineCard, ...]

    def rows(self) -> list[dict[str, Any]]:
        return [card.summary() for card in self.cards]

    def frame(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.rows())

    def lines(self) -> list[str]:
        return _fixed_width(self.rows())

    def same(self) -> bool:
        """Whether every card has the same numbers (:data:`CARD_COLUMNS`) and the same task scorecard, wrong runs included."""
        first = self.cards[0]
        return all(card.compared() == first.compared() and card.evaluation.task.as_json() == first.evaluation.task.as_json()
                   for card in self.cards)

    def seconds(self) -> dict[str, float]:
        """Each engine's wall time for its runs: measured, so never part of :meth:`lines`."""
        return {card.engine: card.seconds for card in self.cards}


def scorecard_table(folder: str | Path, engines: tuple[str, ...] | None = None, **options: Any) -> ScorecardTable:
    """:func:`scorecards` for each engine (default: all four), each in ``FOLDER/NAME``; ``options`` go to every call."""
    names = engines if engines is not None else tuple(ENGINES)
    return ScorecardTable(tuple(scorecards(name, Path(folder) / name, **options) for name in names))
