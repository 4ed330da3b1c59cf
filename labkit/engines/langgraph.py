"""The langgraph engine: the incident workflow as a LangGraph graph on its SQLite checkpointer.

LangGraph runs a graph of *nodes* in *super-steps* and, given a checkpointer, keeps after each
super-step a checkpoint of the graph's state (the channels' values) and of the nodes still to
run, under a *thread id*. Invoking the graph again on that thread with no input resumes it from
its latest checkpoint. Here the checkpointer is :class:`~langgraph.checkpoint.sqlite.SqliteSaver`,
in ``FOLDER/langgraph-checkpoints.sqlite``, and the thread id is the incident.

The durability mode is named on every invoke: ``durability="sync"``, LangGraph's most durable,
in which each super-step's checkpoint is written before the next super-step starts. (``"async"``
writes it while the next one runs, so a kill there may lose the step just finished; ``"exit"``
writes only when the graph ends, so a kill loses the whole run.)

The graph, one node per piece of the workflow, each a super-step of its own:

====================  =========================================================  ==============================
node                  its work                                                   crash points inside it
====================  =========================================================  ==============================
``read_diagnostic``   the run row, the provider's read, the evidence contract    before_read, after_read
``record_evidence``   the reading as evidence, once (``write_evidence_once``)    before/after_evidence_commit
``complete_report``   labkit's completion: report and receipt in one commit      before_receipt_write,
                                                                                 before/after_completion_commit
``open_ticket``       the ticket under a key of thread and node, then its row    before_send, after_send
====================  =========================================================  ==============================

What a kill inside a node leaves: the checkpoint of the super-step before it, whose next node is
the killed one; nothing of the node's own work is checkpointed, since LangGraph records a node's
output only when the node returns. So the killed node runs again from its start on resume, and
whatever it did outside the graph before the kill (a commit in ``lab.db``, a ticket sent) it
meets again: each node's work must be idempotent, which the graph does not give. That is what
the user adds: :func:`write_evidence_once` looks before it writes, labkit's completion returns a
completed run's receipt, and the ticket's key is derived from the thread and the node, the same
on every attempt. ``bug`` removes one of these (:data:`BUGS`), to see the crash table turn red.

The business rows (run, evidence, assessment, receipt, effect) go into the labkit checkpoint
database ``FOLDER/lab.db``, the provider's call log beside it, as for the other engines, so the
same invariant code (:mod:`labkit.invariants`) and scorecards judge a LangGraph run.
LangGraph is imported only where it is used.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypedDict

from .. import contract
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
from .dbos import write_evidence_once

#: The checkpointer's file, beside the run's lab.db.
CHECKPOINTS = "langgraph-checkpoints.sqlite"
#: LangGraph's durability mode for every invoke: each super-step's checkpoint written before the next starts.
DURABILITY = "sync"
#: The node each business crash point is inside: the node that runs again after a kill there.
NODE_OF: dict[CrashPoint, str] = {
    CrashPoint.BEFORE_READ: "read_diagnostic", CrashPoint.AFTER_READ: "read_diagnostic",
    CrashPoint.BEFORE_EVIDENCE_COMMIT: "record_evidence", CrashPoint.AFTER_EVIDENCE_COMMIT: "record_evidence",
    CrashPoint.BEFORE_RECEIPT_WRITE: "complete_report", CrashPoint.BEFORE_COMPLETION_COMMIT: "complete_report",
    CrashPoint.AFTER_COMPLETION_COMMIT: "complete_report",
    CrashPoint.BEFORE_SEND: "open_ticket", CrashPoint.AFTER_SEND: "open_ticket",
}


class IncidentState(TypedDict, total=False):
    """The graph's state: what the checkpointer keeps after each super-step."""

    incident: str
    tickets: str | None
    response: bytes       # the provider's answer, once read_diagnostic has returned
    diagnostic: bytes
    step: str             # the run's step after record_evidence
    receipt: str
    ticket: str | None


class GraphFailed(RunFailure):
    def __init__(self, incident: str, detail: str):
        super().__init__(f"the LangGraph thread {incident} stopped: {detail}")


def ticket_key(thread_id: str) -> str:
    """The ticket's idempotency key: the thread's id and the node's name, the same on every attempt."""
    return "langgraph-" + sha256_hex(f"open_ticket:{thread_id}")[:16]


def _key_per_attempt(thread_id: str) -> str:
    """The ``ticket_key_per_attempt`` bug: a fresh key each time the node runs, so a re-run sends a second ticket."""
    return "langgraph-" + os.urandom(8).hex()


def _write_evidence_without_look(coordinator: Coordinator, incident: str, reading: Reading) -> str:
    """The ``evidence_without_look`` bug: write the evidence whatever the run's step, so a re-run of the node fails."""
    with transaction(coordinator.conn):
        coordinator.record_reading_txn(coordinator.load_txn(incident), reading)
        coordinator.crash.reached(CrashPoint.BEFORE_EVIDENCE_COMMIT, coordinator.conn)
    return Step.EVIDENCE_RECORDED.value


#: The deliberately non-idempotent nodes ``bug`` switches on (``explore --engine langgraph --bug NAME``).
BUGS: dict[str, str] = {
    "evidence_without_look": "record_evidence writes without looking at the run's step first",
    "ticket_key_per_attempt": "open_ticket sends under a fresh key each time it runs",
}


class IncidentGraph:
    """The incident workflow compiled on a :class:`SqliteSaver` in ``folder``; :meth:`close` it when done.

    ``crash`` arms a crash point in this process, as ``--crash-at`` does for labkit; ``bug`` one of :data:`BUGS`.
    """

    def __init__(self, folder: str | Path, *, crash: CrashPlan = NO_CRASH, bug: str | None = None,
                 provider: ReferenceProvider | None = None):
        from langgraph.checkpoint.sqlite import SqliteSaver  # an optional heavy dependency, loaded when a graph is made

        self.folder = Path(folder)
        self.crash = crash
        self.db = self.folder / "lab.db"
        self.provider = provider if provider is not None else ReferenceProvider(call_log_for(self.db))
        self.write_evidence = _write_evidence_without_look if bug == "evidence_without_look" else write_evidence_once
        self.key_of = _key_per_attempt if bug == "ticket_key_per_attempt" else ticket_key
        with closing(connect(self.db)):  # labkit's schema, made or checked before the checkpointer's file exists
            pass
        # SqliteSaver serialises its use of the connection with a lock of its own, as its documentation says.
        self.conn = sqlite3.connect(self.folder / CHECKPOINTS, check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.saver.setup()  # its tables, and WAL
        self.graph = self._build().compile(checkpointer=self.saver)

    def _coordinator(self, conn: sqlite3.Connection) -> Coordinator:
        return Coordinator(conn, self.provider, crash=self.crash)

    def _build(self) -> Any:
        from langgraph.graph import END, START, StateGraph

        builder = StateGraph(IncidentState)
        builder.add_node("read_diagnostic", self._read_diagnostic)
        builder.add_node("record_evidence", self._record_evidence)
        builder.add_node("complete_report", self._complete_report)
        builder.add_node("open_ticket", self._open_ticket)
        builder.add_edge(START, "read_diagnostic")
        builder.add_edge("read_diagnostic", "record_evidence")
        builder.add_edge("record_evidence", "complete_report")
        builder.add_conditional_edges("complete_report", lambda state: "open_ticket" if state.get("tickets") else END,
                                      ["open_ticket", END])
        builder.add_edge("open_ticket", END)
        return builder

    # ----------------------------------------------------------------- the nodes

    def _read_diagnostic(self, state: IncidentState) -> dict:
        incident = state["incident"]
        with closing(connect(self.db)) as conn:
            self._coordinator(conn).start(incident)  # the run row; a node run again finds it there
        self.crash.reached(CrashPoint.BEFORE_READ)
        reading = read_with_diagnostic(self.provider, incident)
        self.crash.reached(CrashPoint.AFTER_READ)
        check_evidence(reading.response, incident)  # the contract: a refused answer never reaches the checkpoint
        return {"response": reading.response, "diagnostic": reading.diagnostic}

    def _record_evidence(self, state: IncidentState) -> dict:
        with closing(connect(self.db)) as conn:
            step = self.write_evidence(self._coordinator(conn), state["incident"], Reading(state["response"], state["diagnostic"]))
            self.crash.reached(CrashPoint.AFTER_EVIDENCE_COMMIT, conn)  # committed; the node has not returned
        return {"step": step}

    def _complete_report(self, state: IncidentState) -> dict:
        with closing(connect(self.db)) as conn:
            # labkit's completion: a completed run's receipt returned with nothing written, so a re-run is harmless
            return {"receipt": self._coordinator(conn).complete(state["incident"]).receipt_id}

    def _open_ticket(self, state: IncidentState) -> dict:
        incident, tickets = state["incident"], state["tickets"]
        assert tickets is not None  # the conditional edge runs this node only with a ticket service
        with closing(connect(self.db)) as conn, read_transaction(conn):
            receipt = find_receipt_txn(conn, incident)
        if receipt is None:
            raise GraphFailed(incident, "no receipt to open a ticket for")
        key, request = self.key_of(incident), ticket_request(receipt.report)
        self.crash.reached(CrashPoint.BEFORE_SEND)
        answer = post_ticket(tickets, key, request, TICKET_TIMEOUT)
        self.crash.reached(CrashPoint.AFTER_SEND)  # answered; the node has not returned, so nothing is checkpointed
        if answer.outcome not in ("created", "replayed") or answer.ticket is None:
            raise GraphFailed(incident, f"the ticket service answered {answer.outcome}: {answer.detail}")
        # No intent row before the send: the checkpoint whose next node is open_ticket is the intent,
        # and a re-run sends again under the same key. The row is the business outcome.
        with closing(connect(self.db)) as conn, transaction(conn):
            clock = self._coordinator(conn).clock
            effect = find_effect_txn(conn, incident) or record_intent_txn(conn, incident, key, request, clock)
            mark_done_txn(conn, effect, answer.ticket, answer.outcome, clock)
        return {"ticket": answer.ticket}

    # ----------------------------------------------------------------- using it

    def config(self, incident: str) -> dict:
        return {"configurable": {"thread_id": incident}}

    def run(self, incident: str, tickets: str | None = None) -> dict:
        """Start the incident's thread (or resume it, if it has a checkpoint) and run it to its end.

        An id the provider does not know is refused here, before the checkpointer records anything.
        """
        known = self.provider.incidents()
        if incident not in known:
            raise UnknownIncident(incident, len(known))
        if incident in self.threads():
            return self.resume(incident)
        return self.graph.invoke({"incident": incident, "tickets": tickets}, self.config(incident), durability=DURABILITY)

    def resume(self, incident: str) -> dict:
        """Run the thread on from its latest checkpoint (no input: LangGraph's resume)."""
        return self.graph.invoke(None, self.config(incident), durability=DURABILITY)

    def threads(self) -> dict[str, tuple[str, ...]]:
        """Every thread the checkpointer holds, and the nodes its latest checkpoint says run next (none: ended)."""
        ids = dict.fromkeys(checkpoint.config["configurable"]["thread_id"] for checkpoint in self.saver.list(None))
        return {thread: tuple(self.graph.get_state(self.config(thread)).next) for thread in sorted(ids)}

    def recover(self) -> list[str]:
        """Resume every unfinished thread; their ids. Raises on the first that stops again."""
        unfinished = [thread for thread, nodes in self.threads().items() if nodes]
        for thread in unfinished:
            self.resume(thread)
        return unfinished

    def checkpoints(self, incident: str) -> list[dict[str, object]]:
        """The thread's checkpoints, oldest first: what the checkpointer keeps (see :func:`checkpoints_of`)."""
        rows = []
        for snapshot in reversed(list(self.graph.get_state_history(self.config(incident)))):
            rows.append({
                "step": snapshot.metadata.get("step") if snapshot.metadata else None,
                "source": snapshot.metadata.get("source") if snapshot.metadata else None,
                "next": ", ".join(snapshot.next) or "(ended)",
                "kept": ", ".join(sorted(key for key in snapshot.values if key != "tickets")),
            })
        return rows

    def close(self) -> None:
        self.conn.close()


@contextmanager
def opened(folder: str | Path, **options: Any) -> Iterator[IncidentGraph]:
    graph = IncidentGraph(folder, **options)
    try:
        yield graph
    finally:
        graph.close()


def checkpoints_of(folder: str | Path, incident: str = INCIDENT) -> list[dict[str, object]]:
    """What the checkpointer keeps for ``incident``'s thread, oldest checkpoint first.

    Each row: the super-step it closed (``-1`` the input), its source (``input``, ``loop``), the
    node(s) it says run next (``(ended)`` for none), and the state keys it holds (``response``
    once read_diagnostic returned, ``receipt`` once complete_report did ...).
    """
    with opened(folder) as graph:
        return graph.checkpoints(incident)


@dataclass(frozen=True)
class KillInsideANode:
    """What :func:`kill_inside_a_node` saw: the kill, what the checkpointer kept, and what ran again."""

    point: str
    killed_in: str                            # the node the point is inside
    killed: bool                              # the child was SIGKILLed there
    kept: list[dict[str, object]]             # the thread's checkpoints after the kill (:func:`checkpoints_of`)
    runs_again: tuple[str, ...]               # the latest checkpoint's next node(s): what resuming runs first
    after_resume: list[dict[str, object]]     # the checkpoints once the thread was resumed to its end


def kill_inside_a_node(folder: str | Path, point: str | CrashPoint, tickets: str | None = None,
                       incident: str = INCIDENT) -> KillInsideANode:
    """Drive ``incident`` in a forked child SIGKILLed at ``point``, look at the checkpoints, resume by thread id.

    For 14_choosing_an_engine: the node the point is inside is the one the latest checkpoint
    names next, so it runs again from its start. A point of the ticket node needs ``tickets``.
    """
    point = CrashPoint(point)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    engine = LangGraphEngine()
    engine.warm()  # imported here once: each child below inherits it
    end = in_child(lambda: engine.drive(folder, CrashPlan(point), tickets, incident))
    with opened(folder) as graph:
        kept = graph.checkpoints(incident)
        runs_again = graph.threads().get(incident, ())
    resumed = in_child(lambda: engine.recover(folder, NO_CRASH, tickets))
    if resumed.code != 0:
        raise GraphFailed(incident, f"its resume ended {resumed}")
    return KillInsideANode(point.value, NODE_OF[point], end.killed, kept, runs_again, checkpoints_of(folder, incident))


@dataclass(frozen=True)
class LangGraphEngine(Engine):
    """The incident workflow as a LangGraph graph (:class:`IncidentGraph`), resumed by thread id."""

    name: ClassVar[str] = "langgraph"
    # A node's output is checkpointed when the node returns: the reading is durable once
    # read_diagnostic has returned. A kill inside read_diagnostic after the provider answered
    # (after_read) runs that node again, and it reads again; a kill in any later node runs that
    # node again from the checkpointed reading. The same window as DBOS's, for the same reason.
    read_window: ClassVar[frozenset[CrashPoint]] = frozenset({CrashPoint.AFTER_READ})
    random_kills_refused: ClassVar[str | None] = (
        "random kills judge a repeated read from labkit's run row, which a LangGraph "
        "thread records elsewhere; explore the langgraph engine's named points instead")
    #: A deliberately non-idempotent node (:data:`BUGS`), or None.
    bug: str | None = None

    @classmethod
    def configured(cls, *, system_url: str | None = None, bug: str | None = None) -> LangGraphEngine:
        if system_url is not None:
            raise BadInput("a system database URL is for the dbos engine only")
        if bug is not None and bug not in BUGS:
            raise BadInput(f"--bug {bug}: the langgraph engine's broken nodes are {', '.join(BUGS)}")
        return cls(bug)

    def load(self) -> None:
        """LangGraph's import (about a second) and the evidence contract's validator, once, before the children fork."""
        import langgraph.checkpoint.sqlite  # noqa: F401 - an optional heavy dependency: imported once, not in every child
        import langgraph.graph  # noqa: F401

        contract.prepare()

    def scratch_run(self, folder: Path) -> None:
        with opened(folder) as graph:  # the plain graph, whatever bug this engine plays
            graph.run(INCIDENT, None)

    def drive(self, folder: Path, crash: CrashPlan, tickets: str | None, incident: str = INCIDENT) -> str:
        with opened(folder, crash=crash, bug=self.bug) as graph:
            return str(graph.run(incident, tickets).get("receipt"))

    def recover(self, folder: Path, crash: CrashPlan, tickets: str | None) -> int:
        with opened(folder, crash=crash, bug=self.bug) as graph:
            return len(graph.recover())

    def restart(self, folder: Path, crash: CrashPlan, tickets: str | None, incident: str = INCIDENT) -> str:
        """Resume the thread, or start it where the kill came before its first checkpoint: there is nothing to resume."""
        with opened(folder, crash=crash, bug=self.bug) as graph:
            if incident in graph.threads():
                return f"recovered {len(graph.recover())}"
            return str(graph.run(incident, tickets).get("receipt"))

    def final_recovery(self, folder: Path, tickets: str | None) -> str:
        """The resume in a forked child, as every other call: LangGraph runs nodes in threads of its own,
        and a process that forks (the explorer's workers) must not hold them."""
        end = in_child(lambda: self.recover(folder, NO_CRASH, tickets))
        if end.code != 0:
            raise RunFailure(f"the last LangGraph resume ended {end}")
        return f"resumed: {end}"

    def recovered_again(self, folder: Path, tickets: str | None) -> int:
        """How many unfinished threads a further resume found (invariant 7 wants 0), in a forked child.

        A thread that stops again is counted, as labkit's own recovery counts a run it could not
        finish: a broken node (``bug``) then turns invariant 7 red instead of stopping the explorer.
        """
        out = Path(folder) / f".again-{self.name}.txt"

        def resume() -> None:
            with opened(folder, bug=self.bug) as graph:
                out.write_text(str(sum(1 for nodes in graph.threads().values() if nodes)))
                graph.recover()

        in_child(resume)
        if not out.exists():
            raise RuntimeError(f"the {self.name} resume for invariant 7 could not open the checkpoints")
        return int(out.read_text())


__all__ = ["BUGS", "CHECKPOINTS", "DURABILITY", "NODE_OF", "IncidentGraph", "KillInsideANode", "LangGraphEngine",
           "checkpoints_of", "kill_inside_a_node", "ticket_key"]
