"""The temporal engine: the incident workflow on a Temporal server, the same read, evidence, receipt and ticket.

Temporal resumes a workflow by *replaying its event history*: the server records each
activity's result as an event when the worker reports it, and a worker that picks the workflow
up again re-runs the workflow code, taking every recorded result from the history instead of
running the activity. An activity whose worker died before reporting has no result event: the
server lets its ``start_to_close_timeout`` run out, then schedules another attempt, on whichever
worker polls the task queue. So an activity runs *at least* once, as a DBOS step does, and each
one must find its work done when it runs again.

====================================  ==========================================================
labkit                                Temporal
====================================  ==========================================================
the run row and its step              the workflow's event history on the server (its own
                                      SQLite file here: :mod:`labkit.lab.temporal_server`)
evidence committed with the step      the read activity's result, recorded when the worker
                                      reports it: earlier than labkit's commit, elsewhere
the evidence contract                 nothing: ``check_evidence`` runs inside the read activity,
                                      and a refusal fails it for good (not retried)
the receipt table (one per run)       nothing: the same labkit tables, written by activities
                                      that look before they write
the operation key of the ticket       the workflow id and the activity id, the same on every
                                      attempt and every replay
recovery from the recorded step       a worker polling the task queue: the server hands it the
                                      workflow's next task, and the timed-out activity again
====================================  ==========================================================

The business rows go into ``FOLDER/lab.db`` through labkit's own transactions, and the provider
logs its reads beside it, so :mod:`labkit.invariants` judges a Temporal run as it judges the
others. The crash points are labkit's names, placed inside the activities where they mean the
same. The worker is the calling process (the explorer's forked child): a kill at a point is a
real SIGKILL of the worker, after which the server waits out the activity's timeout
(:data:`~labkit.engines.temporal_workflow.ACTIVITY_TIMEOUT`, 3 s, so that a lesson waits seconds) and hands the next attempt to
the worker started again.

Each folder is a scope of its own on a shared server: its task queue and its workflow ids carry a
digest of the folder's path, so the explorer's scenarios, side by side on one server, never take
each other's tasks. The server's address comes from ``system_url`` or :data:`ADDRESS_ENV`.

temporalio is imported only where it is used: its client starts threads (a Rust runtime) that a
forked child would inherit broken, so every client and worker lives in a forked child; and the
workflow (:mod:`labkit.engines.temporal_workflow`) is imported when a worker starts, since its
module imports temporalio at its top, as the SDK wants (0.3 s no other command should pay).
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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
from ..errors import BadInput, LabError, RunFailure, UnknownIncident
from ..jsontext import sha256_hex
from ..provider import Reading, ReferenceProvider, call_log_for, read_with_diagnostic
from ..receipts import find_receipt_txn
from ..store import connect, list_runs_txn
from ..ticket_client import post_ticket
from .base import INCIDENT, Engine
from .dbos import write_evidence_once

#: Environment variable naming the Temporal server (``127.0.0.1:PORT``) when ``system_url`` does not.
ADDRESS_ENV = "LABKIT_TEMPORAL_ADDRESS"
#: The one deliberately broken activity (``explore --engine temporal --bug NAME``): the ticket keyed
#: by the attempt, as a client minting a fresh request id each try does, so a retry opens another.
BUGS: tuple[str, ...] = ("ticket_key_per_attempt",)


class NoTemporalServer(BadInput):
    def __init__(self) -> None:
        super().__init__(f"the temporal engine needs a server: give its address (127.0.0.1:PORT) or set {ADDRESS_ENV}")


class WorkflowFailed(RunFailure):
    def __init__(self, workflow_id: str, detail: str):
        super().__init__(f"the Temporal workflow {workflow_id} failed: {detail}")


def scope_of(folder: str | Path) -> str:
    """The folder's own corner of a shared server: a digest of its resolved path."""
    return sha256_hex(str(Path(folder).resolve()))[:12]


def task_queue(folder: str | Path) -> str:
    return f"labkit-{scope_of(folder)}"


def workflow_id(folder: str | Path, incident: str) -> str:
    """The incident's workflow: one per incident and folder, so starting it twice joins the first."""
    return f"{incident}@{scope_of(folder)}"


def ticket_key(workflow: str, activity_id: str) -> str:
    """The ticket's idempotency key: the workflow's and the activity's identity, the same on every attempt."""
    return "temporal-" + sha256_hex(f"open_ticket:{workflow}:{activity_id}")[:16]


def _failure(error: LabError) -> Exception:
    """A labkit error as Temporal's non-retryable failure, under its own name: a retry would meet it again."""
    from temporalio.exceptions import ApplicationError

    return ApplicationError(f"{type(error).__name__}: {error}".splitlines()[0], type=type(error).__name__, non_retryable=True)


class Activities:
    """The workflow's activities, for one folder, in one worker process armed with ``crash``."""

    def __init__(self, folder: Path, crash: CrashPlan, bug: str | None = None):
        self.db = Path(folder) / "lab.db"
        self.crash = crash
        self.bug = bug
        self.provider = ReferenceProvider(call_log_for(self.db))

    def coordinator(self, conn: Any) -> Coordinator:
        return Coordinator(conn, self.provider, crash=self.crash)

    def all(self) -> list[Callable[..., Any]]:
        from temporalio import activity

        def guarded(name: str, work: Callable[..., Any]) -> Callable[..., Any]:
            def run(*args: Any) -> Any:
                try:
                    return work(*args)
                except LabError as error:
                    raise _failure(error) from None
            run.__name__ = name
            return activity.defn(name=name)(run)

        return [guarded(name, work) for name, work in (
            ("start_run", self.start_run), ("read_diagnostic", self.read_diagnostic),
            ("record_evidence", self.record_evidence), ("complete_report", self.complete_report),
            ("open_ticket", self.open_ticket), ("record_ticket", self.record_ticket))]

    def start_run(self, incident: str) -> str:
        with closing(connect(self.db)) as conn:
            return self.coordinator(conn).start(incident).step.value

    def read_diagnostic(self, incident: str) -> dict[str, str]:
        self.crash.reached(CrashPoint.BEFORE_READ)
        reading = read_with_diagnostic(self.provider, incident)
        self.crash.reached(CrashPoint.AFTER_READ)  # answered; the server has no result yet: a retry reads again
        check_evidence(reading.response, incident)  # the contract: a refused answer is never recorded as the result
        # The history holds JSON: the bytes go as base64, and come back byte for byte.
        return {"response": base64.b64encode(reading.response).decode(), "diagnostic": base64.b64encode(reading.diagnostic).decode()}

    def record_evidence(self, incident: str, reading: dict[str, str]) -> str:
        kept = Reading(base64.b64decode(reading["response"]), base64.b64decode(reading["diagnostic"]))
        with closing(connect(self.db)) as conn:
            step = write_evidence_once(self.coordinator(conn), incident, kept)
            self.crash.reached(CrashPoint.AFTER_EVIDENCE_COMMIT, conn)  # committed; the server has no result yet
        return step

    def complete_report(self, incident: str) -> str:
        with closing(connect(self.db)) as conn:
            # Receipt and step in one commit; a completed run's receipt is returned with nothing written.
            return self.coordinator(conn).complete(incident).receipt_id

    def open_ticket(self, incident: str, tickets: str) -> dict[str, Any]:
        from temporalio import activity

        info = activity.info()
        workflow = str(info.workflow_id)
        with closing(connect(self.db)) as conn, read_transaction(conn):
            receipt = find_receipt_txn(conn, incident)
        if receipt is None:
            raise WorkflowFailed(workflow, "no receipt to open a ticket for")
        key = ticket_key(workflow, info.activity_id)
        if self.bug == "ticket_key_per_attempt":  # the bug: each attempt a request of its own
            key = ticket_key(workflow, f"{info.activity_id}#{info.attempt}")
        request = ticket_request(receipt.report)
        self.crash.reached(CrashPoint.BEFORE_SEND)
        answer = post_ticket(tickets, key, request, TICKET_TIMEOUT)
        self.crash.reached(CrashPoint.AFTER_SEND)  # answered; the server has not recorded the answer
        if answer.outcome not in ("created", "replayed") or answer.ticket is None:
            # Retryable: the service may answer next time, and the key makes a retry safe.
            raise RuntimeError(f"the ticket service answered {answer.outcome}: {answer.detail}")
        return {"key": key, "request": request, "ticket": answer.ticket, "outcome": answer.outcome}

    def record_ticket(self, incident: str, sent: dict[str, Any]) -> str:
        # As in the DBOS engine, no intent row: the history's scheduled-but-not-completed open_ticket
        # is the intent, and a retry sends again under the same key. The row is the business outcome.
        with closing(connect(self.db)) as conn, transaction(conn):
            clock = self.coordinator(conn).clock
            effect = find_effect_txn(conn, incident) or record_intent_txn(conn, incident, sent["key"], sent["request"], clock)
            return mark_done_txn(conn, effect, sent["ticket"], sent["outcome"], clock).state


def _sandbox() -> Any:
    """The SDK's sandbox, still guarding the workflow's calls, with modules passed through rather than
    re-imported inside it (the workflow's package, labkit, imports what the sandbox would refuse)."""
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    return SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_all_modules())


class Worker:
    """A client and a worker on ``folder``'s task queue, in this process: what drive, recover and restart share."""

    def __init__(self, address: str, folder: Path, crash: CrashPlan, bug: str | None):
        self.address, self.folder, self.crash, self.bug = address, Path(folder), crash, bug

    async def __aenter__(self) -> Worker:
        from temporalio.client import Client
        from temporalio.worker import Worker as SdkWorker

        from .temporal_workflow import IncidentWorkflow  # here: importing it loads temporalio (0.3 s), for workers only

        with closing(connect(self.folder / "lab.db")):  # labkit's schema, made or checked before anything is recorded
            pass
        self.client = await Client.connect(self.address)
        self.sdk_worker = SdkWorker(
            self.client, task_queue=task_queue(self.folder), workflows=[IncidentWorkflow],
            activities=Activities(self.folder, self.crash, self.bug).all(),
            activity_executor=ThreadPoolExecutor(4),
            # No sticky cache: a killed worker's sticky queue would hold the next workflow task for
            # seconds; without it every task goes to the shared queue and replays the history.
            max_cached_workflows=0,
            workflow_runner=_sandbox(),
        )
        await self.sdk_worker.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.sdk_worker.__aexit__(*exc)

    async def result(self, workflow: str) -> dict[str, Any]:
        from temporalio.client import WorkflowFailureError

        try:
            return await self.client.get_workflow_handle(workflow).result()
        except WorkflowFailureError as failure:
            cause: Any = failure.cause
            while getattr(cause, "cause", None) is not None:  # the activity's own error, under the workflow's
                cause = cause.cause
            raise WorkflowFailed(workflow, str(cause or failure)) from None

    async def run(self, incident: str, tickets: str | None) -> dict[str, Any]:
        """Start the incident's workflow (or join it: the same id) and wait for its end."""
        from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
        from temporalio.exceptions import WorkflowAlreadyStartedError

        from .temporal_workflow import WORKFLOW_NAME  # here: its module loads temporalio, for workers only

        known = ReferenceProvider(call_log_for(self.folder / "lab.db")).incidents()
        if incident not in known:  # refused before the server records anything
            raise UnknownIncident(incident, len(known))
        workflow = workflow_id(self.folder, incident)
        try:
            await self.client.start_workflow(WORKFLOW_NAME, args=[incident, tickets], id=workflow, task_queue=task_queue(self.folder),
                                             id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                                             id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        except WorkflowAlreadyStartedError:
            pass  # it ran to its end before: its result is in its history
        return await self.result(workflow)

    async def running(self) -> list[str]:
        """The ids of this folder's workflows the server has not seen end.

        The server's list (its visibility store) is written a moment after a workflow starts, so
        each run row of ``lab.db`` is also asked about by its workflow id, which is exact: a
        worker killed right after the run row was written is not missed.
        """
        from temporalio.client import WorkflowExecutionStatus
        from temporalio.service import RPCError, RPCStatusCode

        from .temporal_workflow import WORKFLOW_NAME  # here: its module loads temporalio, for workers only

        query = f'WorkflowType="{WORKFLOW_NAME}" AND TaskQueue="{task_queue(self.folder)}" AND ExecutionStatus="Running"'
        found = {execution.id async for execution in self.client.list_workflows(query)}
        with closing(connect(self.folder / "lab.db")) as conn, read_transaction(conn):
            rows = [workflow_id(self.folder, run.incident) for run in list_runs_txn(conn)]
        for workflow in rows:
            try:
                described = await self.client.get_workflow_handle(workflow).describe()
            except RPCError as error:
                if error.status is RPCStatusCode.NOT_FOUND:
                    continue  # a run another engine wrote in this folder: not this server's to resume
                raise
            if described.status == WorkflowExecutionStatus.RUNNING:
                found.add(workflow)
        return sorted(found)

    async def recover(self) -> list[str]:
        """Wait for every unfinished workflow of this folder, which this worker's polling resumes; their ids."""
        waiting = await self.running()
        for workflow in waiting:
            await self.result(workflow)
        return waiting


def history_of(address: str, folder: str | Path, incident: str = INCIDENT) -> list[dict[str, Any]]:
    """The incident's event history as the server keeps it: one row per event, with its activity's name.

    What is durable in Temporal: each activity's result is there once its ``ActivityTaskCompleted``
    event is; an attempt the worker died in shows only as ``ActivityTaskStarted`` then
    ``ActivityTaskTimedOut``. Read in a forked child, as every client here is.
    """
    out = Path(folder) / ".history.json"

    async def read() -> None:
        import json

        from temporalio.client import Client

        client = await Client.connect(address)
        history = await client.get_workflow_handle(workflow_id(folder, incident)).fetch_history()
        names: dict[int, str] = {}
        rows = []
        for event in history.events:
            kind = event.WhichOneof("attributes") or ""
            attributes = getattr(event, kind)
            if kind == "activity_task_scheduled_event_attributes":
                names[event.event_id] = attributes.activity_type.name
            scheduled = getattr(attributes, "scheduled_event_id", 0)
            rows.append({"event": event.event_id, "type": kind.removesuffix("_event_attributes"),
                         "activity": names.get(event.event_id) or names.get(scheduled, ""),
                         "attempt": getattr(attributes, "attempt", 0)})
        out.write_text(json.dumps(rows))

    end = in_child(lambda: asyncio.run(read()))
    if end.code != 0:
        raise RuntimeError(f"reading the history ended {end}")
    import json

    return list(json.loads(out.read_text()))


def replay(address: str, folder: str | Path, release: str, incident: str = INCIDENT) -> str:
    """Replay the incident's recorded history against a release of the workflow: ``replayed`` or the SDK's refusal.

    ``release`` is one of :data:`~labkit.engines.temporal_workflow.RELEASES`: ``current``, ``paging``
    (an activity added before the read, unguarded) or ``paging-patched`` (the same under
    ``workflow.patched``). The refusal is its first line, ``NondeterminismError: ...``. Nothing
    runs: a replay feeds the history's recorded results to the workflow code and checks that it
    asks for the same things in the same order. In a forked child, as every client here is.
    """
    out = Path(folder) / ".replay.txt"

    async def check() -> None:
        from temporalio.client import Client
        from temporalio.worker import Replayer

        from .temporal_workflow import RELEASES  # here: its module loads temporalio, for workers only

        if release not in RELEASES:
            raise BadInput(f"unknown release {release!r}; choose one of {', '.join(RELEASES)}")
        client = await Client.connect(address)
        history = await client.get_workflow_handle(workflow_id(folder, incident)).fetch_history()
        replayer = Replayer(workflows=[RELEASES[release]], workflow_runner=_sandbox())
        found = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        failure = found.replay_failure
        out.write_text("replayed" if failure is None else f"{type(failure).__name__}: {failure}".splitlines()[0])

    end = in_child(lambda: asyncio.run(check()))
    if end.code != 0:
        raise RuntimeError(f"the replay ended {end}")
    return out.read_text()


def late_result_workflow() -> tuple[Any, str]:
    """The late-result demonstration's workflow class and activity name (:func:`labkit.lab.engine_demos.late_result_refused`).

    Handed out from here, where the workflow module is imported on demand, so that importing the
    demonstrations costs no temporalio import; called in the forked child that runs the worker.
    """
    from .temporal_workflow import LATE_RESULT_ACTIVITY, LateResultWorkflow  # here: its module loads temporalio, for workers only

    return LateResultWorkflow, LATE_RESULT_ACTIVITY


@dataclass(frozen=True)
class TemporalEngine(Engine):
    """The incident workflow on a Temporal server, its worker in the calling process."""

    name: ClassVar[str] = "temporal"
    # The server records the read activity's result when the worker reports it, before the evidence
    # is written: only a kill between the provider's answer and that report costs a second read,
    # which the provider's own log shows (the retried attempt reads again).
    read_window: ClassVar[frozenset[CrashPoint]] = frozenset({CrashPoint.AFTER_READ})
    random_kills_refused: ClassVar[str | None] = (
        "random kills judge a repeated read from labkit's run row, which a Temporal "
        "workflow records on its server; explore the temporal engine's named points instead")
    bugs: ClassVar[tuple[str, ...]] = BUGS
    #: The server's address, ``127.0.0.1:PORT``; None: :data:`ADDRESS_ENV`'s, read when it is needed.
    address: str | None = None
    bug: str | None = None

    @classmethod
    def configured(cls, *, system_url: str | None = None, bug: str | None = None) -> TemporalEngine:
        if bug is not None and bug not in BUGS:
            raise BadInput(f"--bug {bug} breaks labkit's coordinator; the temporal engine breaks only {', '.join(BUGS)}")
        return cls(system_url, bug)

    def server(self) -> str:
        address = self.address or os.environ.get(ADDRESS_ENV)
        if not address:
            raise NoTemporalServer()
        return address

    def load(self) -> None:
        import temporalio.client  # noqa: F401 - imported once before the fork: no threads start until a client connects
        import temporalio.worker  # noqa: F401

    def _in_worker(self, folder: Path, crash: CrashPlan, work: Callable[[Worker], Any]) -> Any:
        async def main() -> Any:
            async with Worker(self.server(), folder, crash, self.bug) as worker:
                return await work(worker)

        return asyncio.run(main())

    def drive(self, folder: Path, crash: CrashPlan, tickets: str | None, incident: str = INCIDENT) -> str:
        return str(self._in_worker(folder, crash, lambda worker: worker.run(incident, tickets)))

    def recover(self, folder: Path, crash: CrashPlan, tickets: str | None) -> int:
        return len(self._in_worker(folder, crash, lambda worker: worker.recover()))

    def restart(self, folder: Path, crash: CrashPlan, tickets: str | None, incident: str = INCIDENT) -> str:
        """A worker again; the workflow is on the server from the moment its start returned, so joining it is resuming it."""
        return str(self._in_worker(folder, crash, lambda worker: worker.run(incident, tickets)))

    def final_recovery(self, folder: Path, tickets: str | None) -> str:
        """A forked child's recovery: a Temporal client never runs in the caller's process (a notebook's kernel)."""
        return str(in_child(lambda: self.recover(folder, NO_CRASH, tickets)))
