"""The dbos engine: the incident workflow on DBOS Transact, the same read, evidence, receipt and ticket.

labkit's coordinator keeps its own state rows and decides from them what a restart must do.
Here DBOS Transact does that part: a *workflow* made of *steps*, each step's output recorded
in DBOS's system database when the step returns, and ``DBOS.launch()`` resuming, after a
crash, every PENDING workflow from its first unrecorded step. Taught in 14_choosing_an_engine.

What the engine gives, and what this module still adds itself:

====================================  ==========================================================
labkit                                DBOS Transact
====================================  ==========================================================
the run row and its step              the workflow's status row (PENDING, SUCCESS, ERROR) and
                                      its recorded steps
evidence committed with the step      the read step's output, recorded when the step returns:
                                      earlier than labkit's commit, in another database
the evidence contract                 nothing: ``check_evidence`` runs inside the read step, so
                                      a refused answer is never recorded as its output
the receipt table (one per run)       nothing: the same labkit tables, written by ordinary
                                      steps; a step runs *at least* once (a crash after its
                                      work, before DBOS records it, runs it again), so each
                                      write must be idempotent, as labkit's are
the operation key of the ticket       the workflow's own id, and the step's name
recovery from the recorded step       ``DBOS.launch()``: the PENDING workflows of this executor
                                      *and this application version*; other versions wait
====================================  ==========================================================

The business rows (run, evidence, assessment, receipt, effect) go into a labkit checkpoint
database, ``lab.db``, through labkit's own transactions: DBOS keeps its workflow state in
tables of its own, whose layout is its business, so the rows by which the outcome is judged
must be the application's. That is what lets the same invariant code
(:mod:`labkit.invariants`), the crash explorer and both scorecards of 13_evaluation read a
DBOS run as they read a labkit one.

The crash points are labkit's names, placed where they mean the same for the business rows.
Two of them fall inside a step after its work, before DBOS has recorded it
(``after_evidence_commit``, ``after_completion_commit``, ``after_send``): there the step runs
again on recovery, and finds its work done. DBOS is imported only where it is used, and only
when it is.

:class:`DbosEngine` is this workflow behind the engines' one interface (:mod:`labkit.engines`),
recovered by ``DBOS.launch()``; its system database in SQLite beside the run, or on the
PostgreSQL server that ``system_url`` names. Every call that starts DBOS runs in a forked
child (:func:`labkit.children.in_child`): DBOS is one instance per process, with threads of its
own, and a notebook's kernel must not be it.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ..children import in_child
from ..contract import check_evidence
from ..coordinator import Coordinator
from ..crashpoints import NO_CRASH, CrashPlan, CrashPoint
from ..database import read_transaction, transaction
from ..effects import TICKET_TIMEOUT, find_effect_txn, mark_done_txn, record_intent_txn, ticket_request
from ..errors import BadInput, RunFailure, UnknownIncident
from ..jsontext import sha256_hex
from ..provider import Reading, ReferenceProvider, call_log_for, read_with_diagnostic
from ..receipts import find_receipt_txn
from ..steps import Step
from ..store import connect
from ..ticket_client import post_ticket
from .base import INCIDENT, Engine

APP_NAME = "labkit-incidents"
#: The application version a workflow is recorded under unless told otherwise. DBOS's own
#: default is a digest of the workflow functions' source, so any edit makes a new version;
#: the lab names its versions, so that a lesson can say which one it runs.
DEFAULT_APP_VERSION = "incidents-1"
#: How often a waiting caller asks whether a workflow has ended (DBOS's default is 1 s; the
#: lab's runs take milliseconds). DBOS's own internal queue, which recovery goes through, is
#: polled as often (its default is once a second): see :func:`_poll_internal_queue`.
RESULT_POLL_SECONDS = 0.02
#: Environment variable naming a PostgreSQL server for DBOS's system database (the
#: several-hosts path of 14_choosing_an_engine): ``postgresql://user@127.0.0.1:5432/db``.
POSTGRES_ENV = "LABKIT_DBOS_POSTGRES_URL"


class BadDbosUrl(BadInput):
    def __init__(self, url: str, reason: str):
        super().__init__(f"DBOS system database {url!r}: {reason}")


class WorkflowFailed(RunFailure):
    def __init__(self, incident: str, status: str, detail: str):
        super().__init__(f"the DBOS workflow for {incident} ended {status}: {detail}")


@dataclass(frozen=True)
class Paths:
    """Where one DBOS installation of the workflow keeps its files (or reaches its server)."""

    folder: Path
    system_url: str       # DBOS's own tables: workflows and their steps' outputs

    @classmethod
    def of(cls, folder: str | Path, system_url: str | None = None) -> Paths:
        folder = Path(folder)
        url = system_url or f"sqlite:///{folder / 'dbos-system.sqlite'}"
        if not url.startswith(("sqlite:///", "postgresql://", "postgres://")):
            raise BadDbosUrl(url, "give sqlite:///PATH or postgresql://USER@HOST:PORT/DATABASE")
        return cls(folder, url)

    @property
    def db(self) -> Path:
        """The labkit checkpoint database holding the business rows: what invariants and scorecards read."""
        return self.folder / "lab.db"

    @property
    def call_log(self) -> Path:
        return call_log_for(self.db)

    @property
    def system_db(self) -> Path | None:
        return Path(self.system_url.removeprefix("sqlite:///")) if self.system_url.startswith("sqlite") else None


def write_evidence_once(coordinator: Coordinator, incident: str, reading: Reading) -> str:
    """The record_evidence step's work: keep the checkpointed reading as evidence, once; the step it leaves.

    A DBOS step runs at least once: killed after this commit and before DBOS recorded the
    step, it runs again on recovery. So it looks first, under the write lock, and a run
    already past ``not_inspected`` is left as it is (Exercise 14.1 writes this function).
    """
    with transaction(coordinator.conn):
        run = coordinator.load_txn(incident)
        if run.step is not Step.NOT_INSPECTED:
            return run.step.value  # this step ran before, and its process died before DBOS recorded it
        coordinator.record_reading_txn(run, reading)
        coordinator.crash.reached(CrashPoint.BEFORE_EVIDENCE_COMMIT, coordinator.conn)
    return Step.EVIDENCE_RECORDED.value


def ticket_key(workflow_id: str) -> str:
    """The ticket's idempotency key: derived from the workflow's identity, the same on every replay."""
    return "dbos-" + sha256_hex(f"open_ticket:{workflow_id}")[:16]


class IncidentApp:
    """DBOS configured and launched in this process, with the incident workflow registered.

    DBOS is one instance per process: make one of these in a process of its own (the
    explorer and the lesson fork one per run), use it, :meth:`close` it. Launching starts
    recovering the PENDING workflows of ``executor_id`` recorded under ``app_version``, in
    DBOS's own threads; :meth:`recover` waits for them. ``crash`` arms a crash point in this
    process, as ``--crash-at`` does for labkit. ``write_evidence`` is the record_evidence
    step's work (:func:`write_evidence_once`; a learner's own in Exercise 14.1).
    """

    def __init__(self, folder: str | Path, *, crash: CrashPlan = NO_CRASH, app_version: str = DEFAULT_APP_VERSION,
                 executor_id: str = "local", system_url: str | None = None,
                 write_evidence: Callable[[Coordinator, str, Reading], str] = write_evidence_once,
                 provider: ReferenceProvider | None = None):
        from dbos import DBOS, SetWorkflowID  # an optional heavy dependency, loaded when a DBOS app is made

        self.paths = Paths.of(folder, system_url)
        self.crash = crash
        self.app_version = app_version
        self.executor_id = executor_id
        self.write_evidence = write_evidence
        self.provider = provider if provider is not None else ReferenceProvider(self.paths.call_log)
        self._set_id = SetWorkflowID
        self._dbos = DBOS
        with closing(connect(self.paths.db)):  # labkit's schema, made or checked before DBOS starts
            pass
        if self.paths.system_db is not None:
            _fresh_system_db(self.paths.system_db, DBOS)
        instance = DBOS(config={
            "name": APP_NAME, "system_database_url": self.paths.system_url, "application_version": app_version,
            "executor_id": executor_id, "log_level": "ERROR",
            "notification_listener_polling_interval_sec": RESULT_POLL_SECONDS,
        })
        _poll_internal_queue(instance)
        self.workflow = _register(DBOS, self)
        DBOS.launch()

    def coordinator(self, conn: Any) -> Coordinator:
        return Coordinator(conn, self.provider, crash=self.crash)

    # ----------------------------------------------------------------- using it

    def run(self, incident: str, tickets: str | None = None) -> dict:
        """Start (or join) the incident's workflow, whose id is the incident itself, and wait for its end.

        An id the provider does not know is refused here, before DBOS records anything.
        """
        self.check_incident(incident)
        with self._set_id(incident):
            return self.workflow(incident, tickets)

    def start(self, incident: str, tickets: str | None = None) -> Any:
        """Start the incident's workflow in DBOS's threads and return its handle (a worker of several)."""
        self.check_incident(incident)
        with self._set_id(incident):
            return self._dbos.start_workflow(self.workflow, incident, tickets)

    def check_incident(self, incident: str) -> None:
        known = self.provider.incidents()
        if incident not in known:
            raise UnknownIncident(incident, len(known))

    def recover(self, executor_ids: list[str] | None = None) -> list[str]:
        """Wait for the workflows being recovered; their ids.

        With ``executor_ids``, this process also takes over the PENDING workflows those
        executors left (a worker that died on another host). DBOS 3 recovers by putting each
        workflow back on an internal queue, which its own thread polls once a second by default
        (every RESULT_POLL_SECONDS here: :func:`_poll_internal_queue`).
        """
        if executor_ids:
            self._dbos._recover_pending_workflows(executor_ids)  # what DBOS Conductor asks a live executor to do
        waiting = self._dbos.list_workflows(status=["PENDING", "ENQUEUED"], app_version=self.app_version)
        for status in waiting:
            handle: Any = self._dbos.retrieve_workflow(status.workflow_id)
            handle.get_result(polling_interval_sec=RESULT_POLL_SECONDS)
        return [status.workflow_id for status in waiting]

    def close(self) -> None:
        self._dbos.destroy(destroy_registry=True)


def _fresh_system_db(path: Path, DBOS: Any) -> None:
    """Give a SQLite system database that does not exist yet a copy of one DBOS has just migrated.

    A new system database replays every one of DBOS's schema migrations (125 of them in 3.4,
    a fifth of a second), and the lab makes one per run it explores. They are replayed once,
    by ``DBOS.migrate`` into a template file kept in the temporary folder under this DBOS
    version's name, and each new system database starts as a copy of its bytes: what
    ``DBOS.launch()`` would have made, which it then finds up to date. Linked into place, so
    a database another process made meanwhile is never replaced.
    """
    if path.exists():
        return
    from importlib.metadata import version

    template = Path(tempfile.gettempdir()) / f"labkit-dbos-{version('dbos')}-{os.getuid()}.sqlite"
    if not template.exists():
        making = template.with_name(f"{template.name}.{os.getpid()}")
        making.unlink(missing_ok=True)
        DBOS.migrate(f"sqlite:///{making}")
        os.replace(making, template)  # whole or not at all, for every process that looks
    copy = path.with_name(f"{path.name}.{os.getpid()}")
    shutil.copyfile(template, copy)
    try:
        os.link(copy, path)
    except FileExistsError:
        pass  # another process made it first: DBOS migrates or opens that one
    finally:
        copy.unlink()


def _poll_internal_queue(instance: Any) -> None:
    """Poll DBOS's internal queue every RESULT_POLL_SECONDS instead of once a second.

    DBOS 3 recovers a workflow by putting it on that queue; with the default, every recovery
    waits about a second for work that takes milliseconds. DBOS has no setting for this queue,
    so it is registered here, before ``launch`` starts its thread, with the interval DBOS's own
    constructor takes (an internal call: if a later DBOS lacks it, the default stays).
    """
    from dbos._utils import INTERNAL_QUEUE_NAME

    register = getattr(getattr(instance, "_registry", None), "_register_internal_queue", None)
    if register is not None and INTERNAL_QUEUE_NAME not in instance._registry.internal_queue_map:
        register(INTERNAL_QUEUE_NAME, polling_interval_sec=RESULT_POLL_SECONDS)


def _register(DBOS: Any, app: IncidentApp) -> Any:
    """Define the workflow and its steps for ``app``: DBOS registers them by name, once per process."""
    db = app.paths.db

    @DBOS.step(name="start_run")
    def start_run(incident: str) -> str:
        with closing(connect(db)) as conn:
            return app.coordinator(conn).start(incident).step.value

    @DBOS.step(name="read_diagnostic")
    def read_diagnostic(incident: str) -> dict:
        app.crash.reached(CrashPoint.BEFORE_READ)
        reading = read_with_diagnostic(app.provider, incident)
        app.crash.reached(CrashPoint.AFTER_READ)
        check_evidence(reading.response, incident)  # the contract: a refused answer is never recorded as the output
        return {"response": reading.response, "diagnostic": reading.diagnostic}

    @DBOS.step(name="record_evidence")
    def record_evidence(incident: str, reading: dict) -> str:
        with closing(connect(db)) as conn:
            step = app.write_evidence(app.coordinator(conn), incident, Reading(reading["response"], reading["diagnostic"]))
            app.crash.reached(CrashPoint.AFTER_EVIDENCE_COMMIT, conn)  # committed; DBOS has not recorded the step
        return step

    @DBOS.step(name="complete_report")
    def complete_report(incident: str) -> str:
        with closing(connect(db)) as conn:
            # labkit's completion: receipt and step in one commit, and a completed run's receipt
            # returned with nothing written (so running this step again is harmless).
            return app.coordinator(conn).complete(incident).receipt_id

    @DBOS.step(name="open_ticket")
    def open_ticket(incident: str, tickets: str) -> dict:
        with closing(connect(db)) as conn, read_transaction(conn):
            receipt = find_receipt_txn(conn, incident)
        if receipt is None:
            raise WorkflowFailed(incident, "PENDING", "no receipt to open a ticket for")
        key, request = ticket_key(DBOS.workflow_id), ticket_request(receipt.report)
        app.crash.reached(CrashPoint.BEFORE_SEND)
        answer = post_ticket(tickets, key, request, TICKET_TIMEOUT)
        app.crash.reached(CrashPoint.AFTER_SEND)  # answered; DBOS has not recorded the answer
        if answer.outcome not in ("created", "replayed") or answer.ticket is None:
            raise WorkflowFailed(incident, "PENDING", f"the ticket service answered {answer.outcome}: {answer.detail}")
        return {"key": key, "request": request, "ticket": answer.ticket, "outcome": answer.outcome}

    @DBOS.step(name="record_ticket")
    def record_ticket(incident: str, sent: dict) -> str:
        # DBOS needs no intent row: its record that open_ticket has not returned is the intent,
        # and a replay sends again under the same key. The row is for the business outcome.
        with closing(connect(db)) as conn, transaction(conn):
            clock = app.coordinator(conn).clock
            effect = find_effect_txn(conn, incident) or record_intent_txn(conn, incident, sent["key"], sent["request"], clock)
            return mark_done_txn(conn, effect, sent["ticket"], sent["outcome"], clock).state

    @DBOS.workflow(name="incident_workflow")
    def incident_workflow(incident: str, tickets: str | None) -> dict:
        start_run(incident)
        reading = read_diagnostic(incident)
        record_evidence(incident, reading)
        receipt = complete_report(incident)
        ticket = None
        if tickets:
            sent = open_ticket(incident, tickets)
            record_ticket(incident, sent)
            ticket = sent["ticket"]
        return {"incident": incident, "receipt": receipt, "ticket": ticket}

    return incident_workflow


def workflows_of(folder: str | Path, system_url: str | None = None) -> list[dict[str, Any]]:
    """Every workflow DBOS recorded: id, status, application version, executor, its recorded steps.

    ``steps`` names them; ``outcomes`` says, for each, whether DBOS recorded an output or an
    error (``"read_diagnostic: error EvidenceRejected"``).

    Read with plain SQL from DBOS's ``workflow_status`` and ``operation_outputs`` tables, as an
    operator would look; for a SQLite system database only.
    """

    path = Paths.of(folder, system_url).system_db
    if path is None or not path.exists():
        return []
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        rows = conn.execute("SELECT workflow_uuid, status, application_version, executor_id, recovery_attempts"
                            " FROM workflow_status ORDER BY workflow_uuid").fetchall()
        steps = conn.execute("SELECT workflow_uuid, function_name, error FROM operation_outputs"
                             " ORDER BY workflow_uuid, function_id").fetchall()
    recorded: dict[str, list[str]] = {}
    outcomes: dict[str, list[str]] = {}
    for workflow_id, name, error in steps:
        recorded.setdefault(workflow_id, []).append(name)
        outcomes.setdefault(workflow_id, []).append(f"{name}: " + ("output" if error is None else _error_named(error)))
    return [{"workflow_id": r[0], "status": r[1], "app_version": r[2], "executor_id": r[3], "attempts": r[4],
             "steps": recorded.get(r[0], []), "outcomes": outcomes.get(r[0], [])} for r in rows]


def _error_named(recorded: str) -> str:
    """"error NAME" for a step's recorded error (DBOS pickles it), named without unpickling it.

    The class's name is read from the pickle's opcodes (the first string that looks like
    one), so a record is shown without running anything it holds.
    """
    import base64
    import pickletools

    try:
        texts = [arg for _op, arg, _pos in pickletools.genops(base64.b64decode(recorded)) if isinstance(arg, str)]
    except Exception:  # noqa: BLE001 - another serialization: say only that it is an error
        return "error"
    names = [text for text in texts if text.isidentifier() and text[:1].isupper()]
    return f"error {names[0]}" if names else "error"


@dataclass(frozen=True)
class DbosEngine(Engine):
    """The incident workflow on DBOS Transact (:class:`IncidentApp`), recovered by ``DBOS.launch()``."""

    name: ClassVar[str] = "dbos"
    # DBOS records the read when its step returns, before the evidence is written: a kill inside
    # the evidence transaction no longer costs a read; only one between the provider's answer
    # and the step's end does.
    read_window: ClassVar[frozenset[CrashPoint]] = frozenset({CrashPoint.AFTER_READ})
    random_kills_refused: ClassVar[str | None] = (
        "random kills judge a repeated read from labkit's run row, which a DBOS "
        "workflow records elsewhere; explore the dbos engine's named points instead")
    #: DBOS's system database when not the SQLite file in the run's folder.
    system_url: str | None = None

    @classmethod
    def configured(cls, *, system_url: str | None = None, bug: str | None = None) -> DbosEngine:
        if bug is not None:
            raise BadInput(f"--bug {bug} breaks labkit's coordinator; the dbos engine has none to break")
        return cls(system_url)

    def load(self) -> None:
        import dbos  # noqa: F401 - an optional heavy dependency: a third of a second, once, instead of in every child

    def scratch_run(self, folder: Path) -> None:
        # The first DBOS made in a process gives the "dbos" logger a handler on that process's standard error.
        # Made here, a fork would inherit it and log there (in a notebook, into the cell's output) rather
        # than where the child's own output goes (labkit.children.quiet_child): so the logger is put back.
        logger = logging.getLogger("dbos")
        handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
        app = IncidentApp(folder)  # its system database in the scratch folder, whatever this engine is configured with
        try:
            app.run(INCIDENT)
        finally:
            app.close()
            logger.handlers[:] = handlers
            logger.setLevel(level)
            logger.propagate = propagate

    def drive(self, folder: Path, crash: CrashPlan, tickets: str | None, incident: str = INCIDENT) -> str:
        app = self._app(folder, crash)
        try:
            return str(app.run(incident, tickets))
        finally:
            app.close()

    def recover(self, folder: Path, crash: CrashPlan, tickets: str | None) -> int:
        app = self._app(folder, crash)
        try:
            return len(app.recover())
        finally:
            app.close()

    def restart(self, folder: Path, crash: CrashPlan, tickets: str | None, incident: str = INCIDENT) -> str:
        """Recover, or run again a workflow whose status row never committed: it is not there to recover."""
        app = self._app(folder, crash)
        try:
            resumed = app.recover()
            return str(app.run(incident, tickets)) if incident not in resumed else f"recovered {len(resumed)}"
        finally:
            app.close()

    def final_recovery(self, folder: Path, tickets: str | None) -> str:
        """How a forked child's recovery ended: DBOS starts in a process of its own, never in the caller's
        (a notebook's kernel, or an explorer worker)."""
        return str(in_child(lambda: self.recover(folder, NO_CRASH, tickets)))

    def _app(self, folder: Path, crash: CrashPlan) -> IncidentApp:
        return IncidentApp(folder, crash=crash, system_url=self.system_url)
