"""Two DBOS workers sharing one PostgreSQL system database: one killed mid-run, the other finishing its work.

On one machine DBOS can keep its system database in a SQLite file beside the run; to let
workers on several hosts share the runs, it keeps it on a PostgreSQL server. Every worker
process is an *executor*, named by its executor id, and each workflow's status row says
which executor runs it. When one dies, its PENDING workflows stay its own until a live
executor is told to take them over: DBOS Conductor, DBOS's hosted control plane, notices
the death and asks a live executor to recover them; here the test asks, with
:meth:`~labkit.engines.dbos.IncidentApp.recover` (``executor_ids=["worker-a"]``). Taught in
14_choosing_an_engine, whose several-hosts path this module tests.

:func:`two_workers` plays it with real processes: worker A and worker B, forked, each
with DBOS launched in it, run their shares of the incidents at the same time; A is killed
with SIGKILL at a crash point inside its last workflow; B, still alive, takes over A's
PENDING workflow and finishes it. Then the lab's invariants judge the business rows, the
ticket service is asked for duplicates, and DBOS's own ``workflow_status`` rows on the
server are read back with SQL.

What is honest to say about the layout: only DBOS's system database is on the server.
The business rows (run, evidence, receipt, effect) stay in the labkit checkpoint database
``FOLDER/lab.db``, which both workers share because in this test they run on one machine.
Workers on several hosts would need those tables on the server too, and the lab's
scorecards and invariants, which read SQLite, would have to follow them there; the lab
does not do that.

Each test gets a database of its own on the server (:func:`fresh_database`), so tests can
run side by side and a failed one leaves nothing behind. The server is named by
:data:`~labkit.engines.dbos.POSTGRES_ENV`; its user needs the right to create databases.
"""

from __future__ import annotations

import os
import select
import signal
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..children import ChildEnd, end_of, first_line, fork, in_child
from ..crashpoints import CrashPlan, check_point, points
from ..effects import Tickets
from ..engines.dbos import POSTGRES_ENV, DbosEngine, IncidentApp
from ..errors import BadInput, UnknownIncident, shown
from ..invariants import InvariantResult, check_invariants
from ..provider import CallLog, ReferenceProvider, call_log_for, data_dir, list_incidents
from ..ticket_client import all_tickets
from .ticket_service import ticket_service

#: The incidents :func:`two_workers` shares out unless told otherwise: A takes the 1st and 3rd, B the 2nd and 4th.
INCIDENTS = ("INC-1001", "INC-1002", "INC-1003", "INC-1004")
WORKERS = ("worker-a", "worker-b")
#: How long the test waits for a worker to say its next word: DBOS's start-up and a recovery take about a
#: second each; a worker silent for this long is stuck, and is killed rather than waited for.
WORKER_TIMEOUT = 60.0
#: How long connecting to the server may take before the lab calls it unreachable.
CONNECT_TIMEOUT = 5


class PostgresServerUnusable(BadInput):
    """The PostgreSQL URL is malformed, the server cannot be reached, or it refused what the lab needs."""

    def __init__(self, url: str, reason: str):
        self.url = shown_url(url)
        super().__init__(f"PostgreSQL server {self.url}: {reason}")


def shown_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***``: safe to print in an error or a log."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return shown(url)
    if parts.password is None:
        return url
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user.partition(':')[0]}:***@{host}"))


def configured_url() -> str | None:
    """The server the environment names (:data:`~labkit.engines.dbos.POSTGRES_ENV`), or None."""
    return os.environ.get(POSTGRES_ENV) or None


def _connect(url: str) -> Any:
    """An autocommit connection to ``url`` (CREATE DATABASE refuses to run inside a transaction)."""
    import psycopg  # an optional dependency: only the PostgreSQL path needs it

    if not url.startswith(("postgresql://", "postgres://")):
        raise PostgresServerUnusable(url, "give a URL like postgresql://USER@HOST:PORT/DATABASE")
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
    except psycopg.Error as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise PostgresServerUnusable(url, f"cannot connect: {first_line}") from None


@contextmanager
def fresh_database(server_url: str, prefix: str = "labkit") -> Iterator[str]:
    """A new, uniquely named database on the server at ``server_url``; yields its URL, and drops it afterwards.

    Each scenario's DBOS system database starts empty, as a SQLite one made in a fresh folder
    does, so no workflow of an earlier test can be recovered into a later one. The drop uses
    ``WITH (FORCE)`` (PostgreSQL 13 and later): a worker killed with SIGKILL may leave a session
    the server has not yet noticed is gone.
    """
    import psycopg  # an optional dependency: only the PostgreSQL path needs it
    from psycopg import sql

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with closing(_connect(server_url)) as conn:
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.Error as error:
            raise PostgresServerUnusable(server_url, f"cannot create a database (the lab's user needs CREATEDB): "
                                                     f"{str(error).strip().splitlines()[0]}") from None
    try:
        yield urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))
    finally:
        with closing(_connect(server_url)) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def workflow_rows(system_url: str) -> list[dict[str, Any]]:
    """DBOS's ``workflow_status`` rows on the server, read with plain SQL as an operator would look.

    The PostgreSQL twin of :func:`labkit.engines.dbos.workflows_of`: DBOS keeps these tables in
    a schema of its own, ``dbos``.
    """
    with closing(_connect(system_url)) as conn:
        rows = conn.execute("SELECT workflow_uuid, status, executor_id, recovery_attempts, application_version"
                            " FROM dbos.workflow_status ORDER BY workflow_uuid").fetchall()
    return [{"workflow_id": r[0], "status": r[1], "executor_id": r[2], "attempts": r[3], "app_version": r[4]} for r in rows]


# --------------------------------------------------------------------------- a worker process we can talk to


class _Channel:
    """A forked worker's two pipes, seen from either side: one line is one message."""

    def __init__(self, listen: int, speak: int):
        self.listen, self.speak, self._pending = listen, speak, b""

    def say(self, *words: object) -> None:
        os.write(self.speak, (" ".join(map(str, words)) + "\n").encode())

    def hear(self, timeout: float | None = None) -> str | None:
        """The next line, or None when the other side has gone (a killed worker's pipe closes)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._pending:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.listen], [], [], wait)[0]:
                raise TimeoutError(f"no word for {timeout} s")
            chunk = os.read(self.listen, 4096)
            if not chunk:
                return None
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode()


@dataclass
class _Worker:
    name: str
    pid: int
    channel: _Channel
    folder: Path
    end: ChildEnd | None = None

    def expect(self, word: str) -> list[str]:
        """Wait for this worker's next message, which must start with ``word``; the words after it."""
        try:
            line = self.channel.hear(WORKER_TIMEOUT)
        except TimeoutError:
            self.kill()
            raise RuntimeError(f"{self.name} said nothing for {WORKER_TIMEOUT:.0f} s while we waited for {word!r}") from None
        if line is None or line.split()[0] != word:
            self.wait()
            said = "nothing" if line is None else repr(line)
            raise RuntimeError(f"{self.name} said {said} while we waited for {word!r}; it ended {self.end}; "
                               f"its stderr is {self.folder / (self.name + '.err')}")
        return line.split()[1:]

    def wait(self, timeout: float = WORKER_TIMEOUT) -> ChildEnd:
        if self.end is None:
            deadline = time.monotonic() + timeout
            while (found := os.waitpid(self.pid, os.WNOHANG)) == (0, 0):
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"{self.name} did not end within {timeout:.0f} s")
                time.sleep(0.01)
            self.end = end_of(found[1])
        return self.end

    def kill(self) -> None:
        if self.end is None:
            os.kill(self.pid, signal.SIGKILL)
            self.wait()


def _fork_worker(name: str, folder: Path, work: Callable[[_Channel], None]) -> _Worker:
    """``work`` in a forked process of its own, its output in ``FOLDER/NAME.out`` and ``.err``.

    Not :func:`~labkit.children.in_child`, which waits for its child: these two run side by
    side, and the test talks to each while the other works.
    """
    orders_read, orders_write = os.pipe()
    reports_read, reports_write = os.pipe()
    channel = _Channel(orders_read, reports_write)  # the worker's side

    def run() -> None:  # in the worker: DBOS work only
        os.close(orders_write)
        os.close(reports_read)
        work(channel)

    output = (folder / f"{name}.out", folder / f"{name}.err")
    pid = fork(run, output=output, on_error=lambda error: channel.say("failed", first_line(error)))
    os.close(orders_read)
    os.close(reports_write)
    return _Worker(name, pid, _Channel(reports_read, orders_write), folder)


# --------------------------------------------------------------------------- the scenario


@dataclass
class TwoWorkers:
    """What :func:`two_workers` saw: who ran what, who died where, who finished it, and whether it all held."""

    kill_at: str
    shares: dict[str, tuple[str, ...]]
    killed_incident: str                    # A's last incident, the one it was killed inside
    a_end: ChildEnd
    b_end: ChildEnd
    left_by_a: dict[str, Any]               # the killed workflow's status row before B took it over
    recovered: tuple[str, ...]              # the workflows B took over from A
    overlap_seconds: float                  # how long both workers were running workflows at once
    expected_reads: dict[str, int]
    reads: dict[str, int]
    invariants: list[InvariantResult]
    workflows: list[dict[str, Any]]         # DBOS's status rows on the server, at the end
    tickets: int
    seconds: float
    problems: list[str] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return not self.problems

    def text(self) -> str:
        lines = [f"worker-a ran {', '.join(self.shares['worker-a'])} and was {self.a_end} at {self.kill_at} "
                 f"in {self.killed_incident}; worker-b ran {', '.join(self.shares['worker-b'])}, both at once for "
                 f"{self.overlap_seconds:.2f} s; {self.killed_incident} waited {self.left_by_a.get('status')} under "
                 f"{self.left_by_a.get('executor_id')} until worker-b took over {', '.join(self.recovered) or 'nothing'} "
                 f"({self.seconds:.1f} s in all)"]
        lines += [f"  {w['workflow_id']}: {w['status']} by {w['executor_id']}, attempts {w['attempts']}" for w in self.workflows]
        lines += [f"  invariant {r.number} {'held' if r.held else 'BROKEN'}: {r.detail}" for r in self.invariants]
        lines += [f"  problem: {problem}" for problem in self.problems]
        return "\n".join(lines)


def two_workers(folder: str | Path, system_url: str, incidents: Sequence[str] = INCIDENTS, kill_at: str = "after_read") -> TwoWorkers:
    """Worker A killed at ``kill_at`` inside its last workflow; worker B, alive, finishes that workflow.

    ``folder`` (made here, and must not exist) holds the business rows (``lab.db``), the
    provider's call log, the ticket store and the workers' output; ``system_url`` is DBOS's
    system database on a PostgreSQL server, empty (:func:`fresh_database`). A takes the 1st,
    3rd, ... of ``incidents`` and B the others; A runs its share one workflow after another,
    so that exactly one workflow is in flight when it dies and invariant 5 can predict the
    reads: one per incident, plus one for A's last if ``kill_at`` falls in DBOS's read window.
    """
    point = check_point(kill_at)
    if point.value not in points(tickets=True):
        raise BadInput(f"{kill_at} is not reached by a run that opens its ticket; choose one of {', '.join(points(tickets=True))}")
    incidents = tuple(incidents)
    if len(incidents) < 2 or len(set(incidents)) != len(incidents):
        raise BadInput(f"two workers need at least two different incidents, one for each; got {list(incidents)}")
    known = list_incidents(data_dir())
    for incident in incidents:
        if incident not in known:
            raise UnknownIncident(incident, len(known))
    started = time.monotonic()
    folder = Path(folder)
    folder.mkdir()
    shares = {"worker-a": incidents[0::2], "worker-b": incidents[1::2]}
    DbosEngine().warm()  # DBOS imported once here, before the forks, rather than in each worker

    with ticket_service(folder / "tickets.db") as tickets:
        def worker_a(channel: _Channel) -> None:
            app = IncidentApp(folder, system_url=system_url, executor_id="worker-a")
            channel.say("ready")
            channel.hear()
            channel.say("started", time.monotonic())
            *before, last = shares["worker-a"]
            for incident in before:
                app.run(incident, tickets)
            # Armed only now: the steps read the app's plan as they pass each point, so A dies inside
            # its last workflow, with every earlier one finished.
            app.crash = CrashPlan(point)
            app.run(last, tickets)
            app.close()
            channel.say("finished")  # only if kill_at was never reached

        def worker_b(channel: _Channel) -> None:
            app = IncidentApp(folder, system_url=system_url, executor_id="worker-b")
            channel.say("ready")
            channel.hear()
            channel.say("started", time.monotonic())
            for incident in shares["worker-b"]:
                app.run(incident, tickets)
            channel.say("done", time.monotonic())
            channel.hear()  # told that worker-a is dead: take over what it left
            channel.say("recovered", *app.recover(executor_ids=["worker-a"]))
            app.close()

        # One at a time through DBOS's start-up, which makes its tables on an empty database;
        # then both set off together.
        a = _fork_worker("worker-a", folder, worker_a)
        workers = [a]
        try:
            a.expect("ready")
            b = _fork_worker("worker-b", folder, worker_b)
            workers.append(b)
            b.expect("ready")
            for worker in (a, b):
                worker.channel.say("go")
            a_started, b_started = float(a.expect("started")[0]), float(b.expect("started")[0])
            a_end = a.wait()
            a_gone = time.monotonic()  # at most this late: A died between its last word and now
            b_done = float(b.expect("done")[0])
            # What A left, seen on the server before anyone takes it over: its own, and unfinished.
            left = {row["workflow_id"]: row for row in workflow_rows(system_url)}.get(shares["worker-a"][-1], {})
            b.channel.say("take over worker-a")
            recovered = tuple(b.expect("recovered"))
            b_end = b.wait()
        finally:
            for worker in workers:
                worker.kill()
        overlap = max(0.0, min(a_gone, b_done) - max(a_started, b_started))

        db = folder / "lab.db"
        killed_incident = shares["worker-a"][-1]
        expected = {incident: 1 for incident in incidents}
        expected[killed_incident] = DbosEngine().expected_reads([(a_end.killed, point.value)])
        results = check_invariants(db, call_log_for(db), expected, ReferenceProvider(call_log_for(db)), effects=Tickets(tickets),
                                   recover_again=lambda: _recovered_again(folder, system_url, tickets))
        held_tickets = len(all_tickets(tickets))
    workflows = workflow_rows(system_url)
    log = CallLog(call_log_for(db))
    result = TwoWorkers(point.value, shares, killed_incident, a_end, b_end, left, recovered, overlap, expected,
                        {incident: log.reads_of(incident) for incident in incidents}, results, workflows, held_tickets,
                        time.monotonic() - started)
    result.problems = _problems(result, incidents)
    return result


def _recovered_again(folder: Path, system_url: str, tickets: str) -> int:
    """Invariant 7 for two workers: a third executor takes over whatever either left; how many it found.

    :meth:`labkit.engines.Engine.recovered_again` recovers the workflows of executor ``local``
    only, which ran none here, so it would find nothing whatever was left: a check that
    cannot fail. This one asks for both workers' PENDING workflows.
    """
    out = folder / ".again-worker-c.txt"

    def again() -> None:
        app = IncidentApp(folder, system_url=system_url, executor_id="worker-c")
        try:
            print(len(app.recover(executor_ids=list(WORKERS))))
        finally:
            app.close()

    end = in_child(again, output=(out, out.with_suffix(".err")))
    if end.code != 0:
        raise RuntimeError(f"the third executor's recovery for invariant 7 ended {end}")
    return int(out.read_text().strip() or 0)


def _problems(result: TwoWorkers, incidents: tuple[str, ...]) -> list[str]:
    """Everything that says the takeover did not happen as it should, in words; empty when it did."""
    problems = [f"invariant {r.number} ({r.detail})" for r in result.invariants if not r.held]
    if not result.a_end.killed:
        problems.append(f"worker-a was never killed at {result.kill_at}: it ended {result.a_end}")
    if result.b_end.code != 0:
        problems.append(f"worker-b ended {result.b_end}")
    if (result.left_by_a.get("status"), result.left_by_a.get("executor_id")) != ("PENDING", "worker-a"):
        problems.append(f"before the takeover {result.killed_incident} was {result.left_by_a or 'not recorded'}, "
                        "not PENDING under worker-a")
    if result.recovered != (result.killed_incident,):
        problems.append(f"worker-b took over {list(result.recovered)}, not [{result.killed_incident!r}]")
    by_id = {row["workflow_id"]: row for row in result.workflows}
    if sorted(by_id) != sorted(incidents):
        problems.append(f"the server holds workflows {sorted(by_id)}, not {sorted(incidents)}")
    problems += [f"{w} is {row['status']}" for w, row in sorted(by_id.items()) if row["status"] != "SUCCESS"]
    killed = by_id.get(result.killed_incident)
    # DBOS marks a takeover on the row: the executor that finished it, and one attempt more.
    if killed is not None and (killed["executor_id"] != "worker-b" or (killed["attempts"] or 0) < 2):
        problems.append(f"{result.killed_incident} is recorded as run by {killed['executor_id']} in "
                        f"{killed['attempts']} attempts, not taken over by worker-b")
    for worker, share in result.shares.items():
        for incident in share:
            row = by_id.get(incident)
            if incident != result.killed_incident and row is not None and row["executor_id"] != worker:
                problems.append(f"{incident} is recorded as run by {row['executor_id']}, not {worker}")
    return problems


__all__ = ["INCIDENTS", "POSTGRES_ENV", "PostgresServerUnusable", "TwoWorkers", "configured_url",
           "fresh_database", "shown_url", "two_workers", "workflow_rows"]
