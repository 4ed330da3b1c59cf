"""Lesson 14 (14_choosing_an_engine): a DBOS step that runs at least once and leaves one set of rows (14.1),
and a LangGraph ticket node that a kill right after the send leaves with one ticket (14.2).
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import random
import sqlite3
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ... import ticket_client
from ...children import in_child
from ...contract import check_evidence
from ...coordinator import Coordinator
from ...crashpoints import NO_CRASH, CrashPlan, CrashPoint
from ...database import read_transaction, transaction
from ...effects import Tickets, find_effect_txn, mark_done_txn, record_intent_txn, ticket_request
from ...engines.dbos import DbosEngine, IncidentApp, workflows_of, write_evidence_once
from ...engines.langgraph import GraphFailed, IncidentGraph, IncidentState, LangGraphEngine
from ...errors import LabError
from ...invariants import check_invariants
from ...provider import ReferenceProvider, call_log_for, read_with_diagnostic
from ...receipts import find_receipt_txn
from ...steps import Step
from ...store import connect, connect_readonly
from ...ticket_client import all_tickets
from ..explorer import _warm
from ..progress import Progress
from ..ticket_service import FAIL, Faults, ticket_service
from .runner import answer_is_a_function, clear_trials, new_trial, one_line, own_work, refuse_if_called, watching_labkit

#: The incident and the kill of Exercise 14.1 (14_choosing_an_engine, section 4): inside the
#: record_evidence step, after its commit, before DBOS records the step.
EVIDENCE_STEP_INCIDENT = "INC-1003"
EVIDENCE_STEP_KILL = "after_evidence_commit"


class _SaidCalls:
    """What a trial's function said at each call: ``calls`` holds "returned ..." and "raised ..." lines."""

    calls: tuple[str, ...]

    @property
    def returned(self) -> list[str]:
        return [call.removeprefix("returned ") for call in self.calls if call.startswith("returned ")]

    @property
    def raised(self) -> list[str]:
        return [call.removeprefix("raised ") for call in self.calls if call.startswith("raised ")]


@dataclass(frozen=True)
class EvidenceStepTrial(_SaidCalls):
    """What one DBOS run of the incident workflow left, with a given record_evidence step.

    ``ends`` are the children's ends (the run's, then the recovery's when the run was
    killed); ``calls`` what the step did each time it ran ("returned 'evidence_recorded'",
    "raised IntegrityError: ..."); the rest are the business rows and DBOS's own record of
    the workflow.
    """

    ends: tuple[str, ...]
    calls: tuple[str, ...]
    step: str
    evidence_rows: int
    transitions: tuple[tuple[str, str], ...]
    receipt: str | None
    status: str
    attempts: int
    handed_over: tuple[str, ...] = ()

    def rows(self) -> tuple:
        return (self.step, self.evidence_rows, self.transitions, self.receipt, self.status)


def _said(log: Path, line: str) -> None:
    with open(log, "a", encoding="utf-8") as out:  # one line each time the step ran: a file outlives the kill
        out.write(line + "\n")


def _refusing_everything(action: int, *_args: object) -> int:
    """An SQLite authorizer that denies every statement: a real error, raised by SQLite itself."""
    return sqlite3.SQLITE_DENY


def evidence_step_trial(write_evidence: Callable, *, killed: bool, broken_replay: bool = False) -> EvidenceStepTrial:
    """Run INC-1003 on DBOS with ``write_evidence`` as the record_evidence step's work, in forked children.

    With ``killed``, the run is SIGKILLed at ``after_evidence_commit`` and a fresh DBOS process
    recovers it: the step runs a second time, as DBOS promises (at least once). With
    ``broken_replay`` too, that second call's connection refuses every statement (SQLite's
    "not authorized"): a real error, which the step must let out rather than return as if all
    went well. The learner's function is used as it is: the children are forks of this kernel,
    so a function defined in a notebook cell needs no pickling.
    """
    _warm(DbosEngine())
    folder = new_trial("14-evidence-step").folder
    said = folder / "returned.txt"

    def step(coordinator, incident, reading):
        if broken_replay and said.exists():  # a second call: its database now fails for real
            coordinator.conn.set_authorizer(_refusing_everything)
        try:
            with watching_labkit("write_evidence_once") as handed:  # labkit's own step, reached under any name
                value = write_evidence(coordinator, incident, reading)
        except BaseException as error:
            _said(said, f"raised {type(error).__name__}: {error}".splitlines()[0][:300])
            raise
        finally:
            for label in handed:
                _said(folder / "handed.txt", label)
        _said(said, f"returned {value!r}")
        return value

    def run() -> None:
        crash = CrashPlan(CrashPoint(EVIDENCE_STEP_KILL)) if killed else NO_CRASH
        app = IncidentApp(folder, crash=crash, write_evidence=step)
        try:
            app.run(EVIDENCE_STEP_INCIDENT)
        finally:
            app.close()

    def recover() -> None:
        app = IncidentApp(folder, write_evidence=step)
        try:
            app.recover()
        finally:
            app.close()

    quiet = (folder / "child.out", folder / "child.err")
    ends = [in_child(run, output=quiet)]
    if killed and ends[0].killed:
        ends.append(in_child(recover, output=quiet))
    with closing(connect_readonly(folder / "lab.db")) as conn:
        found = conn.execute("SELECT step FROM runs WHERE incident = ?", (EVIDENCE_STEP_INCIDENT,)).fetchone()
        evidence = conn.execute("SELECT COUNT(*) FROM evidence WHERE incident = ?", (EVIDENCE_STEP_INCIDENT,)).fetchone()[0]
        moves = conn.execute("SELECT from_step, to_step FROM transitions WHERE incident = ? ORDER BY seq",
                             (EVIDENCE_STEP_INCIDENT,)).fetchall()
        receipt = conn.execute("SELECT receipt_id FROM receipts WHERE incident = ?", (EVIDENCE_STEP_INCIDENT,)).fetchone()
    [workflow] = workflows_of(folder) or [{"status": "(not recorded)", "attempts": 0}]
    calls = tuple(said.read_text(encoding="utf-8").splitlines()) if said.exists() else ()
    handed_file = folder / "handed.txt"
    handed_over = tuple(handed_file.read_text(encoding="utf-8").splitlines()) if handed_file.exists() else ()
    return EvidenceStepTrial(
        tuple(str(end) for end in ends), calls, found[0] if found else "(no run)", evidence,
        tuple((str(a), str(b)) for a, b in moves), receipt[0] if receipt else None, workflow["status"], workflow["attempts"],
        handed_over,
    )


_EVIDENCE_REFERENCE: dict[bool, EvidenceStepTrial] = {}


@dataclass(frozen=True)
class TwoAtOnce:
    """Two executions of the step at once on one run (two executors recovering the same workflow).

    ``ends`` is how each child ended; ``calls`` what each call returned or raised; the rest
    the rows they left between them.
    """

    ends: tuple[str, ...]
    calls: tuple[str, ...]
    evidence_rows: int
    moves: int


#: The longest the first execution to look waits for the second to look too. A step that took
#: the write lock before it looked does not wait: the second one cannot look until it is done.
GATE_SECONDS = 5.0


def two_at_once(write_evidence: Callable) -> TwoAtOnce:
    """Call ``write_evidence`` in two forked children at once, on a run at not_inspected, the same reading.

    The interleaving is forced, not hoped for: each child stops just after its first read of
    ``runs`` (at the next statement it starts) until the other has read too, or
    :data:`GATE_SECONDS` passed. A step that looks outside its write transaction then has both
    looks made before either writes, every time: the check-then-act race of 06_single_receipt.
    """
    folder = new_trial("14-two-at-once").folder
    db = folder / "lab.db"
    provider = ReferenceProvider(call_log_for(db))
    with closing(connect(db)) as conn:
        Coordinator(conn, provider).start(EVIDENCE_STEP_INCIDENT)
    reading = read_with_diagnostic(provider, EVIDENCE_STEP_INCIDENT)
    said = folder / "returned.txt"

    def execution(name: str) -> Callable[[], None]:
        def work() -> None:
            looked = folder / f"looked-{name}"

            seen: dict[str, bool] = {"look": False, "write_lock": False}

            def gate(statement: str) -> None:
                # SQLite reports a statement as it starts, before it has read or written anything:
                # the hold is at the statement after the first look of runs, once that look has
                # its row. No hold for a step that took the write lock before it looked: the other
                # execution runs the same code, so it cannot look until this one has committed.
                holds_write_lock = seen["write_lock"] and conn.in_transaction
                words = statement.lstrip().upper().split(maxsplit=2)
                verb = words[0] if words else ""
                if verb in ("COMMIT", "END", "ROLLBACK"):
                    seen["write_lock"] = False
                elif verb in ("INSERT", "UPDATE", "DELETE", "REPLACE") or words[1:2] in (["IMMEDIATE"], ["EXCLUSIVE"]):
                    seen["write_lock"] = True  # a write, or a transaction begun IMMEDIATE or EXCLUSIVE
                if looked.exists():
                    return
                if not seen["look"]:
                    seen["look"] = verb == "SELECT" and " runs" in statement
                    return
                looked.touch()
                if holds_write_lock:
                    return
                deadline = time.monotonic() + GATE_SECONDS
                while len(list(folder.glob("looked-*"))) < 2 and time.monotonic() < deadline:
                    time.sleep(0.01)

            (folder / f"started-{name}").touch()  # both start together: a slow fork must not look after the other wrote
            deadline = time.monotonic() + 10
            while len(list(folder.glob("started-*"))) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            with closing(connect(db)) as conn:
                conn.set_trace_callback(gate)
                try:
                    value = write_evidence(Coordinator(conn, provider), EVIDENCE_STEP_INCIDENT, reading)
                except BaseException as error:
                    _said(said, f"raised {type(error).__name__}: {error}".splitlines()[0][:300])
                    raise
                _said(said, f"returned {value!r}")

        return work

    import threading

    ends: dict[str, str] = {}
    children = [threading.Thread(target=lambda n=n: ends.__setitem__(n, str(in_child(
        execution(n), output=(folder / f"{n}.out", folder / f"{n}.err"))))) for n in ("a", "b")]
    for child in children:
        child.start()
    for child in children:
        child.join()
    with closing(connect_readonly(db)) as conn:
        evidence = conn.execute("SELECT COUNT(*) FROM evidence WHERE incident = ?", (EVIDENCE_STEP_INCIDENT,)).fetchone()[0]
        moves = conn.execute("SELECT COUNT(*) FROM transitions WHERE incident = ? AND to_step = ?",
                             (EVIDENCE_STEP_INCIDENT, Step.EVIDENCE_RECORDED.value)).fetchone()[0]
    calls = tuple(said.read_text(encoding="utf-8").splitlines()) if said.exists() else ()
    return TwoAtOnce((ends["a"], ends["b"]), calls, evidence, moves)


@one_line
def check_evidence_step(write_evidence: Callable) -> None:
    """``write_evidence(coordinator, incident, reading) -> str``: the record_evidence step's work, written by hand.

    Plugged into the DBOS version of the workflow (``IncidentApp(..., write_evidence=...)``) in
    forked children: a clean run, then a run killed at ``after_evidence_commit`` (after the
    step's commit, before DBOS records the step) and recovered, so that the step runs twice.
    Both must leave the rows labkit's :func:`~labkit.engines.dbos.write_evidence_once` leaves:
    one evidence row, one transition to evidence_recorded, one receipt, the workflow SUCCESS.
    """
    clear_trials()
    answer_is_a_function(write_evidence, "def my_write_evidence(coordinator, incident, reading): ...")
    own_work(write_evidence, "write_evidence_once")
    bar = Progress(4)  # four trials, each a few forked DBOS processes: some seconds in all
    try:
        _check_evidence_step(write_evidence, bar)
    finally:
        bar.finish()


def _check_evidence_step(write_evidence: Callable, bar: Progress) -> None:
    for killed in (False, True):
        if killed not in _EVIDENCE_REFERENCE:
            _EVIDENCE_REFERENCE[killed] = evidence_step_trial(write_evidence_once, killed=killed)
    shown = []
    for killed, story in ((False, "a clean run"), (True, f"a run killed at {EVIDENCE_STEP_KILL}, then recovered")):
        expected, mine = _EVIDENCE_REFERENCE[killed], evidence_step_trial(write_evidence, killed=killed)
        refuse_if_called(list(mine.handed_over))
        ran = f"{story} (your step ran {len(mine.calls)} time{'s' if len(mine.calls) != 1 else ''})"
        if killed and mine.ends[0] != "killed":
            raise AssertionError(f"{story}: the run was not killed at {EVIDENCE_STEP_KILL} ({mine.ends[0]}); "
                                 "did your step raise, or not return, after writing?")
        if killed and mine.raised and len(mine.calls) == 2 and mine.evidence_rows == 1:
            raise AssertionError(
                f"{ran}: the recovery ran your step a second time, and it raised {mine.raised[0]}; the workflow ended "
                f"{mine.status} with no receipt. A DBOS step runs at least once: look first, under the write lock, and leave a "
                "run already past not_inspected as it is"
            )
        if mine.raised:
            raise AssertionError(f"{ran}: your step raised {mine.raised[0]}; the workflow ended {mine.status}")
        if mine.evidence_rows == 0:
            raise AssertionError(
                f"{ran}: your step left no evidence row (the run is at {mine.step}), so completion had nothing to build the "
                f"report from and the workflow ended {mine.status}. Keep the reading: coordinator.record_reading_txn(run, "
                "reading), inside transaction(coordinator.conn)"
            )
        if mine.rows() != expected.rows():
            raise AssertionError(
                f"{ran}: the run should end with one evidence row, one move to evidence_recorded and a receipt, as labkit's "
                f"step leaves it; yours left step {mine.step}, {mine.evidence_rows} evidence row(s), transitions "
                f"{[f'{a}→{b}' for a, b in mine.transitions]}, receipt {mine.receipt}, workflow {mine.status}"
            )
        wrong = [value for value in mine.returned if value != repr(Step.EVIDENCE_RECORDED.value)]
        if wrong:
            raise AssertionError(f"{ran}: your step returned {wrong[0]}; return the step the run is at when it ends, "
                                 f"as a string: {Step.EVIDENCE_RECORDED.value!r}, the first time and on a replay")
        shown.append(f"{ran}: one evidence row, one move to evidence_recorded, receipt {mine.receipt}, workflow {mine.status}")
        bar.step()
    broken = evidence_step_trial(write_evidence, killed=True, broken_replay=True)
    if broken.status == "SUCCESS" or not broken.raised:
        raise AssertionError(
            "a run killed at after_evidence_commit, recovered while its database refused every statement (a real "
            f"error): your step returned {broken.returned[-1] if broken.returned else 'nothing'} and the workflow ended "
            f"{broken.status}. Catch only the case you expect, if any: a real error must leave the step, so that DBOS "
            "records it"
        )
    shown.append(f"a replay whose database fails for real: your step raised {broken.raised[-1].split(':')[0]}, "
                 f"workflow {broken.status}")
    bar.step()
    both = two_at_once(write_evidence)
    if len(both.calls) != 2:
        raise AssertionError(f"two executions of your step at once: {len(both.calls)} of the two calls ended "
                             f"(the children: {', '.join(both.ends)}); a step must return or raise")
    if any(call.startswith("raised ") for call in both.calls) or both.evidence_rows != 1 or both.moves != 1:
        first = next((call for call in both.calls if call.startswith("raised ")), None)
        raise AssertionError(
            "two executions of your step at once on one run (two processes recovering the same workflow): "
            + (f"one of them {first}" if first else f"they left {both.evidence_rows} evidence row(s), "
               f"{both.moves} move(s) to evidence_recorded")
            + ". Both looked before either wrote: look under the write lock, in the same transaction as the write (06)"
        )
    wrong = [call for call in both.calls if call != f"returned {Step.EVIDENCE_RECORDED.value!r}"]
    if wrong:
        raise AssertionError(f"two executions of your step at once: one {wrong[0]}; each should return the step the run "
                             "is at when it ends")
    shown.append("two executions at once: one evidence row, one move, both returned 'evidence_recorded'")
    for line in shown:
        print(f"✓ {line}, as with labkit's write_evidence_once")


# --------------------------------------------------------------------------- Exercise 14.2
#
# The ticket-opening node of the LangGraph version of the workflow, written by the learner, and
# checked as a worker would meet it: SIGKILLed right after the send, then resumed by thread id.
# LangGraph, not Temporal: a Temporal worker killed inside an activity costs the activity's
# timeout (3 s) before the retry; one kill and restart took 7.4 s on a two-core machine, a server's
# start 1 s more, so a check of two trials would pass ten seconds. A graph resumes at once (0.1 s).

#: What labkit already has for the job, refused under any name: the engines' keys and ticket steps.
TICKET_NODE_OWN = ("ticket_key", "_key_per_attempt", "_open_ticket", "open_ticket")


@dataclass(frozen=True)
class TicketThread(_SaidCalls):
    """One thread of :func:`ticket_node_trial`: its ids, what the learner's function did, what it left."""

    thread: str
    incident: str
    calls: tuple[str, ...]          # "started", then "returned 'T-0002'" or "raised RuntimeError: ..." (none: killed)
    tickets: tuple[tuple[str, str], ...]  # (ticket, key) the service holds for the incident
    effect: tuple[str, str | None] | None  # (state, ticket) of the incident's effect row, None: no row
    receipts: int
    posts: tuple[tuple[str, str, str], ...] = ()  # each post_ticket the function made: (key sent, outcome, status)

    @property
    def runs(self) -> int:
        """How many times the node called the function for this thread (a kill ends a call without a word)."""
        return self.calls.count("started")


@dataclass(frozen=True)
class TicketTrial:
    """What :func:`ticket_node_trial` saw: how each child ended, each thread, and the invariants that broke."""

    ends: tuple[str, ...]
    threads: tuple[TicketThread, ...]
    broken: tuple[str, ...]          # "8: INC-1001 has 2 tickets (...)", one per invariant that failed
    handed_over: tuple[str, ...]


@contextlib.contextmanager
def _posts_recorded(function: Callable, log: Path, thread: str, crash: CrashPlan) -> Iterator[None]:
    """While ``function`` runs (in a forked child), note each ``post_ticket`` it makes, and die right after one.

    labkit's client is replaced where the learner reaches it (its module, the function's globals)
    by one that does the same, writes the key it sent and the answer to ``log`` (for feedback
    that names the key), and reaches ``after_send`` the moment the service has made or replayed
    the ticket: armed, that is the SIGKILL, before the function's next line. So a function that
    notes its ticket somewhere after the send (a file, a dict) never gets to: only the key can
    make the resumed node's send the same request.
    """
    original = ticket_client.post_ticket

    def recorded(url: str, key: str | None, body: Any, timeout: float, **options: Any) -> Any:
        answer = original(url, key, body, timeout, **options)
        _said(log, f"{thread}\t{key!r}\t{answer.outcome}\t{answer.status}")
        if answer.outcome in ("created", "replayed"):
            crash.reached(CrashPoint.AFTER_SEND)
        return answer

    namespace = getattr(function, "__globals__", {})
    names = [name for name, value in namespace.items() if value is original]
    ticket_client.post_ticket = recorded
    for name in names:
        namespace[name] = recorded
    try:
        yield
    finally:
        ticket_client.post_ticket = original
        for name in names:
            namespace[name] = original


def _ticket_graph(folder: Path, open_ticket: Callable, threads: dict[str, str], *, crash: CrashPlan = NO_CRASH):
    """An :class:`~labkit.engines.langgraph.IncidentGraph` whose open_ticket node calls the learner's function.

    ``threads`` maps each incident to its thread id (drawn at random by the check). The node
    finds the receipt, builds the ticket request from it, calls ``open_ticket(thread_id,
    tickets_url, request)``, then reaches ``after_send`` (a SIGKILL when armed: the send is made,
    the node has not returned, so the checkpointer has nothing of it), then records the effect
    row under the key the service holds the returned ticket under.
    """
    said = folder / "calls.txt"

    class TicketExerciseGraph(IncidentGraph):
        def config(self, incident: str) -> dict:
            return {"configurable": {"thread_id": threads.get(incident, incident)}}

        def _open_ticket(self, state: IncidentState) -> dict:
            incident, tickets = state["incident"], state["tickets"]
            assert tickets is not None
            with closing(connect(self.db)) as conn, read_transaction(conn):
                receipt = find_receipt_txn(conn, incident)
            if receipt is None:
                raise GraphFailed(incident, "no receipt to open a ticket for")
            request = ticket_request(receipt.report)
            thread = threads[incident]
            handed: list[str] = []
            _said(said, f"{thread} started")
            try:
                # The recorder outside the watch: the watch would count the check's own generator, entered from contextlib.
                with _posts_recorded(open_ticket, folder / "posts.txt", thread, self.crash):
                    with watching_labkit(*TICKET_NODE_OWN) as handed:  # labkit's own, reached under any name
                        value = open_ticket(thread, tickets, dict(request))
            except BaseException as error:
                _said(said, f"{thread} raised {type(error).__name__}: {error}".splitlines()[0][:300])
                raise
            finally:
                for label in handed:
                    _said(folder / "handed.txt", label)
            _said(said, f"{thread} returned {value!r}"[:300])
            # A function that sent by other means than post_ticket (or not at all) dies here: the node has not returned.
            self.crash.reached(CrashPoint.AFTER_SEND)
            if not isinstance(value, str):
                raise GraphFailed(incident, f"open_ticket returned {value!r}, not a ticket id")
            keys = {str(t["ticket"]): str(t.get("key")) for t in all_tickets(tickets)}
            with closing(connect(self.db)) as conn, transaction(conn):
                clock = self._coordinator(conn).clock
                # The key the service holds the ticket under (none: a ticket it does not hold), so
                # that invariant 9 compares the row with the service, not with the learner's word.
                effect = find_effect_txn(conn, incident) or record_intent_txn(
                    conn, incident, keys.get(value, "(no such ticket)"), request, clock)
                mark_done_txn(conn, effect, value, "created", clock)
            return {"ticket": value}

    return TicketExerciseGraph(folder, crash=crash)


def ticket_node_trial(open_ticket: Callable, *, rng: random.Random, faults: Faults | None = None,
                      how_many: int = 2, killed: bool = True) -> TicketTrial:
    """Run ``how_many`` threads (incidents and thread ids drawn with ``rng``) on one ticket service, in forked children.

    Each thread's run is SIGKILLed right after ``open_ticket`` returns (with ``killed``), then
    one resume takes every thread to its end. ``faults`` makes the service misbehave (the
    check's second trial fails the first POST). Then labkit's invariants judge the rows and
    the service's table, invariant 7 with one more resume.
    """
    LangGraphEngine().warm()
    _ticketed_incidents()
    folder = new_trial("14-ticket-node").folder
    provider = ReferenceProvider(call_log_for(folder / "lab.db"))
    incidents = rng.sample(_TICKETED, how_many)
    threads = {incident: f"thread-{rng.getrandbits(48):012x}" for incident in incidents}
    quiet = (folder / "child.out", folder / "child.err")
    crash = CrashPlan(CrashPoint.AFTER_SEND) if killed else NO_CRASH

    def run(incident: str, url: str) -> Callable[[], None]:
        def work() -> None:
            random.seed()  # a fork starts with the kernel's random state; a new worker process would not
            graph = _ticket_graph(folder, open_ticket, threads, crash=crash)
            try:
                graph.run(incident, url)
            finally:
                graph.close()
        return work

    def resume() -> int:
        random.seed()  # as in work(): a "random" key must differ between the killed worker and this one
        graph = _ticket_graph(folder, open_ticket, threads)
        try:
            unfinished = [thread for thread, nodes in graph.threads().items() if nodes]
            for thread in unfinished:
                try:
                    graph.resume(thread)
                except Exception:  # noqa: BLE001 - one thread stopping again must not hide the others
                    continue
            return len(unfinished)
        finally:
            graph.close()

    def resumed_again() -> int:
        out = folder / ".again.txt"
        in_child(lambda: out.write_text(str(resume())), output=quiet)
        return int(out.read_text()) if out.exists() else len(threads)

    with ticket_service(folder / "tickets.db", faults) as url:
        ends = [in_child(run(incident, url), output=quiet) for incident in incidents]
        ends.append(in_child(resume, output=quiet))
        held = all_tickets(url)
        results = check_invariants(folder / "lab.db", call_log_for(folder / "lab.db"), dict.fromkeys(incidents, 1), provider,
                                   effects=Tickets(url), recover_again=resumed_again)
    said = folder / "calls.txt"
    lines = said.read_text(encoding="utf-8").splitlines() if said.exists() else []
    with closing(connect_readonly(folder / "lab.db")) as conn:
        effects = dict(((row[0]), (row[1], row[2])) for row in conn.execute("SELECT incident, state, ticket FROM effects"))
        receipts = dict(conn.execute("SELECT incident, COUNT(*) FROM receipts GROUP BY incident").fetchall())
    shown = []
    for incident in incidents:
        thread = threads[incident]
        shown.append(TicketThread(
            thread, incident, tuple(line.removeprefix(thread + " ") for line in lines if line.startswith(thread + " ")),
            tuple((str(t["ticket"]), str(t.get("key"))) for t in held if t.get("incident") == incident),
            effects.get(incident), receipts.get(incident, 0),
        ))
    posts_file = folder / "posts.txt"
    posts = [line.split("\t", 3) for line in posts_file.read_text(encoding="utf-8").splitlines()] if posts_file.exists() else []
    shown = [replace(t, posts=tuple((key, outcome, status) for thread, key, outcome, status in posts if thread == t.thread))
             for t in shown]
    handed_file = folder / "handed.txt"
    handed = tuple(handed_file.read_text(encoding="utf-8").splitlines()) if handed_file.exists() else ()
    broken = tuple(f"{r.number}: {r.detail}" for r in results if not r.held)
    return TicketTrial(tuple(str(end) for end in ends), tuple(shown), broken, handed)


#: The incidents whose reading passes the evidence contract, so that their runs reach the ticket node:
#: found by reading each once a kernel, not listed by hand.
_TICKETED: list[str] = []


def _ticketed_incidents() -> None:
    """Fill :data:`_TICKETED` once a kernel: every incident the provider knows whose reading passes the contract."""
    if _TICKETED:
        return
    folder = new_trial("14-incidents").folder
    provider = ReferenceProvider(call_log_for(folder / "lab.db"))
    for incident in sorted(provider.incidents()):
        try:
            check_evidence(read_with_diagnostic(provider, incident).response, incident)
        except LabError:
            continue
        _TICKETED.append(incident)


#: Built-ins whose value a forked child shares with the kernel but a new worker process does not.
_PER_PROCESS = {
    "hash": "Python salts the hash of a str afresh in each process (PYTHONHASHSEED)",
    "id": "an object's id is its address in one process's memory",
}


def _same_only_in_a_fork(function: Callable) -> None:
    """Refuse a key built with ``hash()`` or ``id()``: the same in the check's forked workers, not in a restarted one.

    The check's workers are forks of the kernel, so they share its hash salt and often its memory
    layout; a worker started again in production is a new process, with new ones. No kill in a
    fork can show that, so the call is refused by reading the function's code (its own, not a
    helper's; comments and strings do not count).
    """
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return  # no source to read (own_work has already refused what it must)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _PER_PROCESS:
            raise AssertionError(
                f"your function calls {node.func.id}(): {_PER_PROCESS[node.func.id]}, so a worker started again after a "
                "kill would build another key. The check's workers are forks and cannot show it: use only what is the same "
                "in every process"
            )


def _ticket_shortfall(trial: TicketTrial, story: str) -> None:
    """The first thing wrong with one trial's threads, as one line that names it and hints, never answers."""
    for t in trial.threads:
        where = f"{story}, thread {t.thread} ({t.incident})"
        ran = f"your function ran {t.runs} time{'s' if t.runs != 1 else ''}"
        sent = [key for key, _, _ in t.posts]
        if len(t.tickets) > 1:
            keys = sorted({key for _, key in t.tickets})
            raise AssertionError(
                f"{where}: {len(t.tickets)} tickets at the service for one thread ({ran}, and the service holds them under "
                f"{len(keys)} different keys). The resume ran the node again from its start, and your function sent again "
                "under a new key: what stays the same every time the node runs for this thread?"
            )
        if not t.tickets:
            if "None" in sent:
                raise AssertionError(f"{where}: no ticket; your function sent no Idempotency-Key, and the service refused "
                                     "the request (400). Send every request under a key")
            refused = [(key, status) for key, outcome, status in t.posts if outcome == "refused"]
            if refused and refused[0][1] == "422":
                raise AssertionError(
                    f"{where}: no ticket; the service refused key {refused[0][0]} (422: already used with another request). "
                    "Another thread's ticket holds it: one thread, one key, the same on every attempt"
                )
            if t.raised:
                raise AssertionError(f"{where}: no ticket at the service; your function raised {t.raised[0]}")
            returned = t.returned[0] if t.returned else "nothing"
            raise AssertionError(
                f"{where}: the service holds no ticket for this incident, yet your function returned {returned}"
                + ("" if sent else ", and sent nothing") + ". Send the request under an Idempotency-Key, and return "
                "the ticket id the service answers"
            )
        [(ticket, _)] = t.tickets
        if not t.posts:
            raise AssertionError(f"{where}: the service holds {ticket}, but your function did not send it with post_ticket. "
                                 "Send with labkit.ticket_client.post_ticket: the check kills the worker the moment it answers")
        wrong = [value for value in t.returned if value != repr(ticket)]
        if wrong:
            raise AssertionError(f"{where}: your function returned {wrong[0]}, but the service's ticket for this thread is "
                                 f"{ticket}: return the id the service answered, not one of your own")
        if t.effect != ("done", ticket) or t.receipts != 1:
            raise AssertionError(f"{where}: the run ended with effect {t.effect} and {t.receipts} receipt(s), not one receipt "
                                 f"and its ticket {ticket} done ({', '.join(trial.ends)}; {t.raised[0] if t.raised else ran})")
    if trial.broken:
        raise AssertionError(f"{story}: labkit's invariant {trial.broken[0]}")


@one_line
def check_ticket_node(open_ticket: Callable) -> None:
    """``open_ticket(thread_id, tickets, request) -> str``: the LangGraph open_ticket node's send, written by hand.

    ``tickets`` is the ticket service's URL, ``request`` the ticket the receipt asks for (a dict),
    ``thread_id`` the LangGraph thread the node runs for; it returns the ticket id the service
    answered. Plugged into the LangGraph version of the workflow (:func:`_ticket_graph`) in forked
    children: two threads on one real ticket service (incidents and thread ids drawn at random
    each check), each SIGKILLed right after the send and resumed by thread id, so that the node
    runs twice; then a service that fails the first request (503, nothing stored) and works on
    the resume. Each thread must leave one ticket, the one its effect row names, and one
    receipt, and labkit's invariants 1 to 9 must hold.
    """
    clear_trials()
    answer_is_a_function(open_ticket, "def my_open_ticket(thread_id, tickets, request): ...")
    own_work(open_ticket, *TICKET_NODE_OWN)
    _same_only_in_a_fork(open_ticket)
    rng = random.Random()
    bar = Progress(2)
    try:
        killed = ticket_node_trial(open_ticket, rng=rng)
        refuse_if_called(list(killed.handed_over))
        _ticket_shortfall(killed, "killed right after the send, then resumed")
        bar.step()
        failing = ticket_node_trial(open_ticket, rng=rng, faults=Faults(FAIL, 1), how_many=1, killed=False)
        refuse_if_called(list(failing.handed_over))
        [first] = failing.threads
        if not first.raised:
            said = first.returned[0] if first.returned else "nothing"
            raise AssertionError(
                f"the service failed your first request (503, nothing stored) and your function returned {said}: a node "
                "that returns has done its work, and the graph never sends again. Raise when the service gives no ticket"
            )
        _ticket_shortfall(failing, "a service that failed the first request")
        bar.step()
    finally:
        bar.finish()
    ran = " and ".join(sorted({str(t.runs) for t in killed.threads}))
    print(f"✓ two threads, each killed right after your send and resumed by thread id (your function ran {ran} times "
          "for each): one ticket each at the service, the one its effect row names, and one receipt")
    print(f"✓ the service failed the first request: your function raised {first.raised[0].split(':')[0]}, the resume sent "
          "again: one ticket, one receipt")
    print("✓ labkit's invariants 1-9 held after both, and each thread's ticket is its own")
