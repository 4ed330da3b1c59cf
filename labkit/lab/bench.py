"""The benchmark: what explicit state rows cost, against the disk's floor and two frameworks.

    python -m labkit bench [--peers] [--json] [--rounds N] [--incidents N]

One process, one run, the same incident workflow on every system, interleaved round by
round (floor, labkit, dbos, langgraph, floor, labkit, ...) so that a machine that slows
down part way slows every system alike:

- **the floor**: bare ``sqlite3`` with labkit's durability (WAL, ``synchronous=FULL``,
  ``BEGIN IMMEDIATE``), making exactly the commits labkit makes for each incident, each
  carrying as many bytes as labkit's rows in that commit. Both numbers are measured, not
  assumed: a calibration run drives every incident through labkit one step at a time and
  counts the commit frames in SQLite's write-ahead log (:func:`wal_counts`) and the bytes
  of the rows each step added or changed.
- **the floor + call log**: the floor, plus the provider's fsync'd call log line for each
  read. labkit promises that every read is counted on disk (N1), so this is the physical
  limit of what it promises; every row's "x floor + log" is its ms over this row's.
- **labkit's SQL replayed**: the statements labkit ran for each incident in the calibration
  (sqlite3's trace callback, values bound in), replayed on a database with labkit's schema,
  with the call log line, and no labkit Python: what is left between this and labkit is Python.
- **labkit**: the real :class:`~labkit.coordinator.Coordinator` and
  :class:`~labkit.provider.ReferenceProvider` on a fresh database each round. labkit pays
  for things the floor does not: the provider's read (its data file, its rules and its own
  fsync'd call log), the evidence contract (strict JSON and the JSON Schema), and the
  redaction and bounding of the answer and its raw diagnostic (labkit.retention). Each is
  measured on its own, so the ratio of what is left, labkit's state machine and store, to
  the floor is honest.
- **each speed-up, as it was**: beside the line it changed, the same work done the earlier way in
  the same rounds (:data:`STEPS`): the contract's schema walked by jsonschema on every read (now a
  compiled validator accepts, and jsonschema explains only a refusal), redaction with nothing
  remembered from an earlier string, and the provider's ``sleep(0)`` once a read.
- with ``--peers``: **DBOS Transact** on a SQLite system database (a workflow with a read
  step and a complete step) and **LangGraph** (a graph of the same two nodes, its SQLite
  checkpointer, ``durability="sync"``). Their read step returns the provider's answer and
  their complete step the report, both taken from the calibration run, so they store the
  same evidence and report that labkit stores. Both are given a file in WAL mode with
  SQLite's default ``synchronous=FULL``: the same durability as labkit (DBOS would
  otherwise use SQLite's rollback journal).

The peers are not part of the lab's environment: ``make bench`` installs them from
``requirements-bench.txt`` into a venv of their own (``.venv/bench``), because one of
their dependencies (langsmith) registers a pytest plugin that would load into every test
run of the lab's ``.venv``. They run there, in one child process that this one drives in
lockstep, so the rounds stay interleaved. A peer that is not installed is reported as
``{"error": "not installed"}``, never left out.

Reported per system: ms per incident (the median over the rounds), incidents per second,
bytes per incident (what the database's pages hold after the round, less what they held
before it), commits and pages per incident (counted in the write-ahead log: every page a
commit changes is written there whole and fsync'd), and the ratios to the floor (the
median of each round's ratio: both were measured in the same round). Speed is measured
here and never asserted in a test. Taught in 11_capacity_and_retention.

This file also runs as a plain script in the peers' venv, which has neither labkit's
dependencies nor labkit: so what the peer side needs is the standard library only, and
labkit itself is imported only when this is ``labkit.lab.bench``.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypedDict

if __package__:  # imported as labkit.lab.bench; run as a script in the peers' venv, only the peer side is used
    from .. import redaction as _redaction
    from ..contract import _validator, check_evidence
    from ..coordinator import Coordinator
    from ..errors import BadInput, BadSetting, RunFailure
    from ..evidence import bound_evidence
    from ..provider import CallLog, ReferenceProvider, call_log_for, list_incidents
    from ..store import connect, snapshot

#: Rounds measured by default (after one warm-up round that is not counted). Odd, so the
#: median is a measured round; few enough that ``bench`` without peers takes seconds.
DEFAULT_ROUNDS = 9  # labkit/cli.py names it in the help of --rounds
MAX_ROUNDS = 1000

#: The four floors and labkit, in the order the table shows them (the peers follow).
FLOORS = ("floor", "floor_call_log", "labkit_sql_replayed")
#: The peers (named as their packages are, whose versions are shown), each with the modules it needs.
PEERS: dict[str, tuple[str, ...]] = {"dbos": ("dbos",), "langgraph": ("langgraph", "langgraph.checkpoint.sqlite")}
NOT_INSTALLED = {"error": "not installed"}

#: The interpreter of the peers' venv: ``make bench`` makes ``.venv/bench`` (inside .venv, so
#: git, ruff and ``make clean`` treat it as they treat .venv). This variable points elsewhere.
PEER_PYTHON_ENV = "LABKIT_BENCH_PYTHON"
DEFAULT_PEER_PYTHON = Path(__file__).resolve().parents[2] / ".venv" / "bench" / "bin" / "python"

#: How long the peers' process may take to answer one request before it is given up on.
PEER_TIMEOUT_S = 300

_WAL_HEADER, _FRAME_HEADER = 32, 24


# --------------------------------------------------------------------------- measuring a file (both sides)


def wal_counts(db: Path) -> tuple[int, int] | None:
    """(commits, pages) written to ``db``'s write-ahead log since it was last emptied, read from the log itself.

    Each commit appends every page it changed as a frame; the last frame of a commit records
    the database's size after it, every other frame records 0. Frames count while their
    salts match the log header's. None when the log was restarted part way (a checkpoint
    let the next writer start again from its beginning, so earlier commits are gone):
    stale frames from before the restart are then left past the valid ones.
    """
    try:
        data = Path(f"{db}-wal").read_bytes()
    except FileNotFoundError:
        return 0, 0
    if len(data) < _WAL_HEADER:
        return 0, 0
    page_size, _sequence, salt1, salt2 = struct.unpack(">IIII", data[8:24])
    frame = _FRAME_HEADER + page_size
    commits = pages = 0
    end = _WAL_HEADER
    while end + frame <= len(data):
        _page, size_after, frame_salt1, frame_salt2 = struct.unpack(">IIII", data[end:end + 16])
        if (frame_salt1, frame_salt2) != (salt1, salt2):
            break
        commits += size_after != 0
        pages += 1
        end += frame
    return (commits, pages) if end == len(data) else None


def settle(db: Path) -> int:
    """Fold ``db``'s write-ahead log into the file and empty it; return the bytes its pages hold.

    Called with every writer idle, before a round (so :func:`wal_counts` counts that round
    alone) and after it (the difference is what the round stored). Bytes held are what
    SQLite's ``dbstat`` counts as used in each page: unlike the file's size, they do not
    jump a page at a time, and the empty root page each table starts with does not hide
    the first rows put in it. Without ``dbstat`` (a SQLite built without it) the file's size.
    A reader that holds a snapshot can delay the checkpoint for a moment; it is asked again.
    """
    with closing(sqlite3.connect(db)) as conn:  # a plain connection: it reads every system's file alike
        for _ in range(200):
            busy, _log, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy:
                break
            time.sleep(0.01)
        try:
            return conn.execute("SELECT coalesce(sum(pgsize - unused), 0) FROM dbstat").fetchone()[0]
        except sqlite3.OperationalError:  # no dbstat in this SQLite
            wal = Path(f"{db}-wal")
            return db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


@dataclass(frozen=True)
class Sample:
    """One system's round: seconds for all incidents, what its log shows (None: lost count), bytes stored."""

    seconds: float
    logged: tuple[int, int] | None  # (commits, pages) in the write-ahead log
    grown: int

    @classmethod
    def measured(cls, seconds: float, db: Path, before: int) -> Sample:
        """The round just timed on ``db``, whose writers are now idle; ``before`` is what :func:`settle` said before it."""
        logged = wal_counts(db)
        return cls(seconds, logged, settle(db) - before)


# --------------------------------------------------------------------------- the peers (their own venv)


class _IncidentState(TypedDict, total=False):
    """LangGraph's state for one incident: what each node adds."""

    incident: str
    evidence: dict
    report: dict


def _peer_module(name: str) -> Any:
    # Imported by name: the peers live in their own venv, so labkit's type checker never sees them.
    import importlib

    return importlib.import_module(name)


def peer_missing(name: str) -> bool:
    """Whether a module the peer ``name`` needs cannot be found in this interpreter."""
    import importlib.util

    for module in PEERS[name]:
        try:
            if importlib.util.find_spec(module) is None:
                return True
        except ModuleNotFoundError:  # finding a submodule imports its parent package
            return True
    return False


class _DbosPeer:
    """DBOS Transact: one workflow per incident, a read step and a complete step.

    DBOS lives as one instance per process (launching it starts its background threads),
    so every round uses the same system database, with each round's workflows under their
    own ids; the round's commits and growth are measured from a settled file, as for the others.
    """

    journal = "WAL (set on its file by the bench)"

    def __init__(self, folder: Path, work: list[dict]):
        dbos = _peer_module("dbos")
        DBOS, SetWorkflowID = dbos.DBOS, dbos.SetWorkflowID
        self.db, self.work, self.set_id, self.dbos = folder / "dbos.sqlite", work, SetWorkflowID, DBOS
        with closing(sqlite3.connect(self.db)) as conn:  # WAL persists in the file: the durability labkit has
            conn.execute("PRAGMA journal_mode = WAL")
        responses = {item["incident"]: item["response"] for item in work}
        reports = {item["incident"]: item["report"] for item in work}
        DBOS(config={"name": "labkit-bench", "system_database_url": f"sqlite:///{self.db}", "log_level": "WARNING"})

        @DBOS.step()
        def read_step(incident: str) -> dict:
            return json.loads(responses[incident])

        @DBOS.step()
        def complete_step(incident: str, evidence: dict) -> dict:
            return reports[incident]

        @DBOS.workflow()
        def incident_workflow(incident: str) -> dict:
            return complete_step(incident, read_step(incident))

        self.workflow = incident_workflow
        DBOS.launch()

    def round(self, number: int) -> Sample:
        before = settle(self.db)
        started = time.perf_counter()
        for item in self.work:
            with self.set_id(f"{item['incident']}-round-{number}"):
                self.workflow(item["incident"])
        return Sample.measured(time.perf_counter() - started, self.db, before)

    def close(self) -> None:
        self.dbos.destroy(destroy_registry=True)


class _LangGraphPeer:
    """LangGraph: read -> complete, checkpointed by SqliteSaver with ``durability="sync"``, a fresh file a round."""

    journal = "WAL (SqliteSaver sets it)"

    def __init__(self, folder: Path, work: list[dict]):
        SqliteSaver = _peer_module("langgraph.checkpoint.sqlite").SqliteSaver
        graph = _peer_module("langgraph.graph")
        StateGraph, START, END = graph.StateGraph, graph.START, graph.END
        self.folder, self.work, self.saver_class = folder, work, SqliteSaver
        responses = {item["incident"]: item["response"] for item in work}
        reports = {item["incident"]: item["report"] for item in work}

        def read(state: _IncidentState) -> dict:
            return {"evidence": json.loads(responses[state["incident"]])}

        def complete(state: _IncidentState) -> dict:
            return {"report": reports[state["incident"]]}

        builder = StateGraph(_IncidentState)
        builder.add_node("read", read)
        builder.add_node("complete", complete)
        builder.add_edge(START, "read")
        builder.add_edge("read", "complete")
        builder.add_edge("complete", END)
        self.builder = builder

    def round(self, number: int) -> Sample:
        db = self.folder / f"langgraph-{number}.sqlite"
        # As LangGraph's own example opens it; SqliteSaver.setup() switches the file to WAL.
        with closing(sqlite3.connect(db, check_same_thread=False)) as conn:
            saver = self.saver_class(conn)
            saver.setup()
            graph = self.builder.compile(checkpointer=saver)
            before = settle(db)
            started = time.perf_counter()
            for item in self.work:
                config = {"configurable": {"thread_id": item["incident"]}}
                graph.invoke({"incident": item["incident"]}, config, durability="sync")
            return Sample.measured(time.perf_counter() - started, db, before)

    def close(self) -> None:
        pass


_PEER_CLASSES: dict[str, Callable[[Path, list[dict]], Any]] = {"dbos": _DbosPeer, "langgraph": _LangGraphPeer}


def _default_synchronous() -> str:
    """SQLite's ``synchronous`` on a connection that sets none (FULL, unless this SQLite was built otherwise)."""
    with closing(sqlite3.connect(":memory:")) as conn:
        level = conn.execute("PRAGMA synchronous").fetchone()[0]
    return {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(level, str(level))


def serve_peers(requests: IO[str], replies: IO[str]) -> int:
    """The peers' side: set up every installed peer, then run the rounds the parent asks for.

    One JSON object a line each way. First the setup (a folder and the work) and the answer
    for every peer: ready (with its version and durability), not installed, or the error
    that stopped it. Then ``{"system", "round"}`` requests, each answered with a sample
    or an error. Ends when the parent closes its side.
    """
    from importlib.metadata import version

    def reply(message: dict) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    setup = json.loads(requests.readline())
    folder, work = Path(setup["folder"]), setup["work"]
    ready: dict[str, Any] = {}
    status: dict[str, dict] = {}
    for name in setup["peers"]:
        if peer_missing(name):
            status[name] = dict(NOT_INSTALLED)
            continue
        try:
            ready[name] = _PEER_CLASSES[name](folder, work)
            status[name] = {"version": version(name), "durability": f"{ready[name].journal}, synchronous={_default_synchronous()} "
                            "(SQLite's default: it sets none)"}
        except Exception as error:  # a peer that cannot start is reported, and the others still run
            status[name] = {"error": f"could not start: {type(error).__name__}: {error}"[:300]}
    reply(status)
    try:
        for line in requests:
            request = json.loads(line)
            try:
                sample = ready[request["system"]].round(request["round"])
                reply({"seconds": sample.seconds, "logged": sample.logged, "grown": sample.grown})
            except Exception as error:
                reply({"error": f"{type(error).__name__}: {error}"[:300]})
    finally:
        for peer in ready.values():
            peer.close()
    return 0


def _serve_peers_on_stdio() -> int:
    # Libraries log to stdout too: keep the real stdout for the replies, send the rest to stderr.
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    return serve_peers(sys.stdin, replies)


# --------------------------------------------------------------------------- labkit and the floor


@dataclass(frozen=True)
class IncidentPlan:
    """What labkit did for one incident, as measured by the calibration run.

    ``commits`` holds the payload bytes of each of labkit's write commits for the incident,
    in order: the floor makes the same commits with the same bytes. ``response`` (the
    provider's answer) and ``report`` (the receipt's report) are what the peers store;
    ``diagnostic`` (the raw snapshot the provider handed over with its answer) is what labkit
    redacts and keeps apart.
    """

    incident: str
    response: bytes
    report: dict
    commits: tuple[int, ...]
    diagnostic: bytes
    statements: tuple[str, ...] = ()  # every statement labkit ran for it, values bound in (sqlite3's trace)


class TimedProvider:
    """The reference provider, doing the real work, with the time spent inside it added up.

    labkit's coordinator sees the provider it would see (every method and property is the
    real one's, ``read_with_diagnostic`` included); the bench sees how much of a run was the
    provider (its data file, its rules, its fsync'd call log) rather than labkit, and keeps
    each contract response it handed over.
    """

    def __init__(self, inner: ReferenceProvider):
        self.inner = inner
        self.seconds = 0.0
        self.responses: dict[str, bytes] = {}
        self.diagnostics: dict[str, bytes] = {}

    def incidents(self) -> list[str]:
        return self._timed(self.inner.incidents)()

    def read(self, incident: str) -> bytes:
        return self._timed(self.inner.read)(incident)

    def __getattr__(self, name: str) -> Any:
        # Whatever else the coordinator asks of a provider, now or in a later release.
        value = getattr(self.inner, name)
        return self._timed(value) if callable(value) else value

    def _timed(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                result = method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started
            response = result if isinstance(result, bytes) else getattr(result, "response", None)
            if args and isinstance(args[0], str) and isinstance(response, bytes):
                self.responses[args[0]] = response
                diagnostic = getattr(result, "diagnostic", None)  # an adapter that hands none over: its answer is all there is
                self.diagnostics[args[0]] = diagnostic if isinstance(diagnostic, bytes) else response
            return result

        return timed


def _value_bytes(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, bytes):
        return len(value)
    return 8  # an integer or a real: SQLite stores it in at most eight bytes


def _rows(conn: sqlite3.Connection) -> set[tuple]:
    return {(table, row) for table, rows in snapshot(conn).items() for row in rows}


def _split(total: int, commits: int) -> list[int]:
    """``total`` bytes over ``commits`` commits, as evenly as whole bytes allow."""
    if commits == 0:
        return []
    share, extra = divmod(total, commits)
    return [share + (1 if index < extra else 0) for index in range(commits)]


def calibrate(folder: Path, incidents: list[str]) -> list[IncidentPlan]:
    """Drive each incident through labkit one step at a time; measure its commits and their bytes.

    Not timed. The log is emptied before each incident, so it never grows long enough for
    SQLite to checkpoint it part way and lose the count. sqlite3's trace callback records
    every statement labkit runs for the incident, with its values bound in (SQLite's expanded
    SQL): :func:`replay_round` runs exactly these, with no Python of labkit's around them.
    """
    db = folder / "calibration.db"
    provider = TimedProvider(ReferenceProvider(call_log_for(db)))
    plans = []
    with closing(connect(db)) as conn:
        coordinator = Coordinator(conn, provider)
        traced: list[str] = []

        def measured(step: Callable[[str], Any], incident: str) -> tuple[Any, list[int]]:
            rows, before = _rows(conn), wal_counts(db)
            conn.set_trace_callback(traced.append)  # the step's statements only, not the bench's own snapshots
            try:
                outcome = step(incident)
            finally:
                conn.set_trace_callback(None)
            after = wal_counts(db)
            if before is None or after is None:
                raise RunFailure(f"the benchmark lost count of labkit's commits on {incident}")
            written = sum(_value_bytes(value) for _table, row in _rows(conn) - rows for value in row)
            return outcome, _split(written, after[0] - before[0])

        for incident in incidents:
            settle(db)
            traced.clear()
            _, started = measured(coordinator.start, incident)
            _, inspected = measured(coordinator.inspect, incident)
            receipt, completed = measured(coordinator.complete, incident)
            plans.append(IncidentPlan(incident, provider.responses[incident], receipt.report, (*started, *inspected, *completed),
                                      provider.diagnostics[incident], statements_run(traced)))
    return plans


def statements_run(traced: list[str]) -> tuple[str, ...]:
    """The statements a connection ran, from what its trace callback saw.

    SQLite reports a trigger's program once more under the text of the statement that fired
    it, so an UPDATE of a run's step shows up twice in a row: the echo is not a statement run
    (replaying it would move the step twice). labkit never runs one statement twice in a row.
    """
    run: list[str] = []
    for statement in traced:
        if not run or statement != run[-1]:
            run.append(statement)
    return tuple(run)


def _durable_connection(db: Path) -> sqlite3.Connection:
    """A bare sqlite3 connection with labkit's durability: WAL, synchronous=FULL, explicit transactions."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


def _floor_writes(plans: list[IncidentPlan]) -> list[tuple[str, str, bool]]:
    """Each of labkit's commits as (incident, payload, whether the provider's read comes before it): made before a clock starts.

    labkit logs the read before it commits the evidence: that is the incident's second commit
    (its first creates the run), so the floor with the call log appends its line there.
    """
    return [(plan.incident, "x" * size, index == 1) for plan in plans for index, size in enumerate(plan.commits)]


def floor_round(db: Path, plans: list[IncidentPlan]) -> Sample:
    """Bare sqlite3: labkit's durability, labkit's commits, labkit's bytes, nothing else."""
    return _floor(db, plans, None)


def floor_call_log_round(db: Path, plans: list[IncidentPlan]) -> Sample:
    """The floor, plus the provider's fsync'd call log line for each read: the least that labkit's promises cost.

    labkit promises that every read is counted in a log that survives the reader being killed
    (N1), so that fsync is part of any honest lower bound, not overhead labkit could shed.
    """
    return _floor(db, plans, CallLog(db.with_name(db.name + ".calls.jsonl")))


def _floor(db: Path, plans: list[IncidentPlan], log: CallLog | None) -> Sample:
    # The floor is what SQLite alone costs, so it opens the file itself rather than through labkit.
    with closing(_durable_connection(db)) as conn:
        conn.execute("CREATE TABLE floor (seq INTEGER PRIMARY KEY, incident TEXT NOT NULL, payload TEXT NOT NULL) STRICT")
        writes = _floor_writes(plans)
        sizes = {plan.incident: len(plan.response) for plan in plans}
        before = settle(db)
        started = time.perf_counter()
        for incident, payload, read_before in writes:
            if log is not None and read_before:
                log.append(incident, "ok", sizes[incident])
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO floor (incident, payload) VALUES (?, ?)", (incident, payload))
            conn.execute("COMMIT")
        return Sample.measured(time.perf_counter() - started, db, before)


def replay_round(db: Path, plans: list[IncidentPlan]) -> Sample:
    """labkit's own SQL, replayed with no labkit Python around it, on a database with labkit's schema.

    Exactly the statements the calibration traced (transactions, reads, writes, pragmas), with
    labkit's durability and its foreign keys, and the call log's line appended where labkit
    reads: before the incident's evidence transaction (its second ``BEGIN IMMEDIATE``). What
    is left between this and labkit is Python: the provider's parsing and rules, the
    contract, redaction, and labkit's own code.
    """
    connect(db).close()  # the schema, made by labkit (not timed)
    log = CallLog(db.with_name(db.name + ".calls.jsonl"))
    with closing(_durable_connection(db)) as conn:
        conn.execute("PRAGMA foreign_keys = ON")
        before = settle(db)
        started = time.perf_counter()
        for plan in plans:
            writes = 0
            for statement in plan.statements:
                if statement == "BEGIN IMMEDIATE":
                    writes += 1
                    if writes == 2:
                        log.append(plan.incident, "ok", len(plan.response))
                conn.execute(statement).fetchall()
        return Sample.measured(time.perf_counter() - started, db, before)


def labkit_round(db: Path, plans: list[IncidentPlan]) -> tuple[Sample, float]:
    """labkit as a user runs it: the coordinator drives each incident to report_completed.

    Returns the sample and the seconds spent inside the provider.
    """
    provider = TimedProvider(ReferenceProvider(call_log_for(db)))
    with closing(connect(db)) as conn:
        coordinator = Coordinator(conn, provider)
        before = settle(db)
        started = time.perf_counter()
        for plan in plans:
            coordinator.drive(plan.incident)
        return Sample.measured(time.perf_counter() - started, db, before), provider.seconds


def call_log_round(path: Path, plans: list[IncidentPlan]) -> float:
    """The provider's own log alone: one fsync'd line per incident, as every labkit read appends."""
    log = CallLog(path)
    started = time.perf_counter()
    for plan in plans:
        log.append(plan.incident, "ok", len(plan.response))
    return time.perf_counter() - started


def contract_round(plans: list[IncidentPlan]) -> float:
    """The evidence contract alone: strict JSON and the JSON Schema over each provider answer."""
    started = time.perf_counter()
    for plan in plans:
        check_evidence(plan.response, plan.incident)
    return time.perf_counter() - started


def redaction_round(plans: list[IncidentPlan]) -> float:
    """Redaction and bounding alone: what labkit does to an accepted answer and its raw diagnostic before storing them."""
    bodies = [check_evidence(plan.response, plan.incident) for plan in plans]  # checked before the clock starts
    started = time.perf_counter()
    for plan, body in zip(plans, bodies, strict=True):
        bound_evidence(plan.incident, body, plan.diagnostic)
    return time.perf_counter() - started


def contract_full_round(plans: list[IncidentPlan]) -> float:
    """The step before the compiled validator: jsonschema's full walk over each accepted answer (what every read paid).

    Strict JSON is parsed before the clock starts, so this is the schema walk alone, set beside
    the contract's line (which now walks only a refused answer this way).
    """
    bodies = [check_evidence(plan.response, plan.incident) for plan in plans]
    validator = _validator()
    started = time.perf_counter()
    for body in bodies:
        for _error in validator.iter_errors(body):
            pass
    return time.perf_counter() - started


def redaction_fresh_round(plans: list[IncidentPlan]) -> float:
    """The step before remembered redaction: the same bounding with nothing remembered from an earlier string."""
    bodies = [check_evidence(plan.response, plan.incident) for plan in plans]
    elapsed = 0.0
    for plan, body in zip(plans, bodies, strict=True):
        _redaction._redact_short.cache_clear()
        _redaction._secret_name.cache_clear()
        _redaction._flat_short.cache_clear()
        started = time.perf_counter()
        bound_evidence(plan.incident, body, plan.diagnostic)
        elapsed += time.perf_counter() - started
    return elapsed


def sleep_zero_round(plans: list[IncidentPlan]) -> float:
    """The step before the provider skipped it: ``time.sleep(0)`` once a read, which yields the processor."""
    started = time.perf_counter()
    for _plan in plans:
        time.sleep(0)
    return time.perf_counter() - started


# --------------------------------------------------------------------------- driving the peers' process


class PeerProcess:
    """The peers' child process, asked for one round at a time so the rounds stay interleaved.

    Whatever goes wrong there (an interpreter that will not start, a peer that raises, a
    process that dies or hangs) becomes an ``{"error": ...}`` for the peers concerned; the
    floor and labkit are measured all the same.
    """

    def __init__(self, python: Path, folder: Path, plans: list[IncidentPlan], peers: tuple[str, ...]):
        self.errors = (folder / "peers.stderr").open("w+", encoding="utf-8")
        self.process: subprocess.Popen[str] | None = None
        answer: dict[str, Any]
        try:
            # -I: the child sees neither this folder's modules nor the caller's PYTHON* settings.
            self.process = subprocess.Popen(
                [str(python), "-I", str(Path(__file__).resolve())], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self.errors, text=True, encoding="utf-8", cwd=folder,
            )
        except OSError as error:
            answer = {"error": f"the peers' interpreter did not start: {error.strerror or error}"}
        else:
            work = [{"incident": p.incident, "response": p.response.decode("utf-8"), "report": p.report} for p in plans]
            answer = self._ask({"folder": str(folder), "work": work, "peers": list(peers)})
        if "error" in answer:  # the process itself failed: every peer is reported with its reason
            answer = {name: dict(answer) for name in peers}
        self.status = {name: answer.get(name, {"error": "the peers' process did not answer for it"}) for name in peers}

    def round(self, system: str, number: int) -> dict:
        return self._ask({"system": system, "round": number})

    def _ask(self, message: dict) -> dict:
        process = self.process
        if process is None or process.stdin is None or process.stdout is None:
            return {"error": "the peers' process is not running"}
        try:
            process.stdin.write(json.dumps(message) + "\n")
            process.stdin.flush()
            ready, _, _ = select.select([process.stdout], [], [], PEER_TIMEOUT_S)
            if not ready:
                return {"error": f"the peers' process did not answer within {PEER_TIMEOUT_S} s"}
            line = process.stdout.readline()
        except OSError:  # a broken pipe: it has gone
            line = ""
        if not line:
            return {"error": f"the peers' process stopped: {self._last_error()}"}
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        return answer if isinstance(answer, dict) else {"error": f"the peers' process answered {line[:80]!r}"}

    def _last_error(self) -> str:
        self.errors.flush()
        self.errors.seek(0)
        lines = [line.strip() for line in self.errors.read().splitlines() if line.strip()]
        return lines[-1][:200] if lines else "no answer"

    def close(self) -> None:
        process = self.process
        if process is not None:
            for pipe in (process.stdin, process.stdout):
                try:
                    if pipe is not None:
                        pipe.close()  # closing its stdin tells it to finish
                except OSError:
                    pass
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.errors.close()


def peer_python() -> Path | None:
    """The peers' interpreter: ``LABKIT_BENCH_PYTHON`` when set (it must exist), else ``.venv/bench``'s, if made."""
    text = os.environ.get(PEER_PYTHON_ENV)
    if text:
        if not os.access(text, os.X_OK) or not Path(text).is_file():
            raise BadSetting(PEER_PYTHON_ENV, text, "a Python interpreter that exists (the venv of requirements-bench.txt)")
        return Path(text)
    return DEFAULT_PEER_PYTHON if DEFAULT_PEER_PYTHON.is_file() else None


# --------------------------------------------------------------------------- the run


def filesystem_of(folder: Path) -> str | None:
    """The type of file system holding ``folder`` (on Linux, from the mount table), or None if unknown.

    On ``tmpfs`` an fsync costs nothing, so the floor and labkit would be compared on CPU alone.
    """
    try:
        mounts = Path("/proc/self/mounts").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    target, best, kind = str(folder.resolve()), "", None
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")  # the mount table writes a space as \040
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def _median(values: Sequence[float]) -> float:
    # Not statistics.median: importing statistics would slow every `python -m labkit` child a little.
    ordered, middle = sorted(values), len(values) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _system(rounds: list[Sample], floor: list[Sample], incidents: int, **extra: object) -> dict:
    ms = [sample.seconds * 1000 / incidents for sample in rounds]
    ratio = [sample.seconds / base.seconds for sample, base in zip(rounds, floor, strict=True)]
    grown = [sample.grown / incidents for sample in rounds]
    floor_grown = _median([base.grown / incidents for base in floor])
    logged = [sample.logged for sample in rounds if sample.logged is not None]
    return {
        "ms_per_incident": round(_median(ms), 3),
        "incidents_per_second": round(1000 / _median(ms), 1),
        "ratio_to_floor": round(_median(ratio), 2),
        "bytes_per_incident": round(_median(grown)),
        "bytes_ratio_to_floor": round(_median(grown) / floor_grown, 2) if floor_grown else None,
        "commits_per_incident": round(_median([c for c, _ in logged]) / incidents, 2) if logged else None,
        "pages_per_incident": round(_median([p for _, p in logged]) / incidents, 2) if logged else None,
        **extra,
    }


def _part(seconds: list[float], floor: list[Sample], incidents: int) -> dict:
    return {
        "ms_per_incident": round(_median(seconds) * 1000 / incidents, 3),
        "ratio_to_floor": round(_median([s / base.seconds for s, base in zip(seconds, floor, strict=True)]), 2),
    }


def run_benchmark(rounds: int = DEFAULT_ROUNDS, incidents: int | None = None, peers: bool = False,
                  python: str | Path | None = None) -> dict:
    """Run the benchmark and return what ``bench --json`` prints (see the module's docstring).

    ``incidents`` takes the first N shipped incidents (all by default); ``python`` is the
    peers' interpreter (by default :func:`peer_python`, the venv ``make bench`` makes).
    """
    if type(rounds) is not int or not 1 <= rounds <= MAX_ROUNDS:
        raise BadInput(f"--rounds must be a whole number of rounds from 1 to {MAX_ROUNDS}, not {rounds!r}")
    every = list_incidents()
    if incidents is not None and (type(incidents) is not int or not 1 <= incidents <= len(every)):
        raise BadInput(f"--incidents must be a whole number of incidents from 1 to {len(every)}, not {incidents!r}")
    chosen = every[:incidents]
    interpreter = Path(python) if python is not None else peer_python()
    with tempfile.TemporaryDirectory(prefix="labkit-bench-") as scratch:
        folder = Path(scratch)
        plans = calibrate(folder, chosen)
        process = None
        peer_status: dict[str, dict] = {}
        if peers and interpreter is None:
            peer_status = {name: dict(NOT_INSTALLED) for name in PEERS}
        elif peers and interpreter is not None:
            process = PeerProcess(interpreter, folder, plans, tuple(PEERS))
            peer_status = process.status
        try:
            samples, parts = _measure_rounds(folder, plans, rounds, process, peer_status)
        finally:
            if process is not None:
                process.close()
        return _summary(samples, parts, plans, rounds, peer_status, filesystem_of(folder))


def _measure_rounds(folder: Path, plans: list[IncidentPlan], rounds: int, process: PeerProcess | None,
                    peer_status: dict[str, dict]) -> tuple[dict[str, list[Sample]], dict[str, list[float]]]:
    """Every round, every system in turn: floor, labkit (and its parts alone), then each running peer.

    Round 0 warms every system up (imports, caches, the schema validator) and is not counted.
    A peer that fails leaves the run with its error in ``peer_status``.
    """
    running = [name for name, status in peer_status.items() if "error" not in status]
    samples: dict[str, list[Sample]] = {name: [] for name in (*FLOORS, "labkit", *running)}
    parts: dict[str, list[float]] = {name: [] for name in (*PARTS, *STEPS)}
    for number in range(rounds + 1):
        floor = floor_round(folder / f"floor-{number}.db", plans)
        floor_log = floor_call_log_round(folder / f"floor-log-{number}.db", plans)
        replayed = replay_round(folder / f"replay-{number}.db", plans)
        lab, provider_seconds = labkit_round(folder / f"labkit-{number}.db", plans)
        call_log = call_log_round(folder / f"calls-{number}.jsonl", plans)
        contract = contract_round(plans)
        redaction = redaction_round(plans)
        before = {"evidence_contract_full": contract_full_round(plans), "redaction_fresh": redaction_fresh_round(plans),
                  "provider_sleep_zero": sleep_zero_round(plans)}
        if number > 0:
            samples["floor"].append(floor)
            samples["floor_call_log"].append(floor_log)
            samples["labkit_sql_replayed"].append(replayed)
            samples["labkit"].append(lab)
            parts["provider"].append(provider_seconds)
            parts["provider_call_log"].append(call_log)
            parts["evidence_contract"].append(contract)
            parts["redaction"].append(redaction)
            for name, seconds in before.items():
                parts[name].append(seconds)
        for name in list(running):
            assert process is not None
            answer = process.round(name, number)
            if "error" in answer:
                peer_status[name] = {"error": answer["error"]}
                running.remove(name)
                del samples[name]
            elif number > 0:
                logged = answer["logged"]
                samples[name].append(Sample(answer["seconds"], tuple(logged) if logged is not None else None, answer["grown"]))
    return samples, parts


def _summary(samples: dict[str, list[Sample]], parts: dict[str, list[float]], plans: list[IncidentPlan], rounds: int,
             peer_status: dict[str, dict], filesystem: str | None) -> dict:
    n, floor = len(plans), samples["floor"]
    payload = round(sum(sum(plan.commits) for plan in plans) / n)
    durability = "WAL, synchronous=FULL, BEGIN IMMEDIATE"
    labkit_statements = round(sum(len(plan.statements) for plan in plans) / n, 2)
    floor_statements = round(3 * sum(len(plan.commits) for plan in plans) / n, 2)  # BEGIN IMMEDIATE, INSERT, COMMIT
    systems: dict[str, dict] = {
        "floor": _system(floor, floor, n, payload_bytes_per_incident=payload, durability=durability,
                         statements_per_incident=floor_statements),
        "floor_call_log": _system(samples["floor_call_log"], floor, n, payload_bytes_per_incident=payload,
                                  durability=durability + "; the call log fsync'd once a read", statements_per_incident=floor_statements),
        "labkit_sql_replayed": _system(samples["labkit_sql_replayed"], floor, n, payload_bytes_per_incident=payload,
                                       durability=durability + "; the call log fsync'd once a read",
                                       statements_per_incident=labkit_statements),
        "labkit": _system(samples["labkit"], floor, n, payload_bytes_per_incident=payload, durability=durability,
                          statements_per_incident=labkit_statements),
    }
    for name, status in peer_status.items():
        systems[name] = dict(status) if "error" in status else _system(samples[name], floor, n, **status)
    add_call_log_ratios(systems)
    # What is left of labkit's time once its provider (timed inside the run), the contract and redaction (timed alone) are out.
    state = [lab.seconds - provider - contract - redaction for lab, provider, contract, redaction in
             zip(samples["labkit"], parts["provider"], parts["evidence_contract"], parts["redaction"], strict=True)]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "cores": os.cpu_count(),
        "load_average": round(load, 2) if load is not None else None,
        "incidents": n,
        "rounds": rounds,
        "scratch_filesystem": filesystem,
        "systems": systems,
        "labkit_parts": {**{name: _part(parts[name], floor, n) for name in PARTS}, "state": _part(state, floor, n)},
        "labkit_steps": {name: _part(parts[name], floor, n) for name in STEPS},
    }


def add_call_log_ratios(systems: dict[str, dict]) -> None:
    """Each system's ms per incident over "floor + call log"'s, computed from the rows as printed.

    A ratio of medians (not the median of each round's ratio, as ``ratio_to_floor`` is), so a
    reader can check it from the table: the physical limit of what labkit promises is the row
    every other row is held against.
    """
    base = systems["floor_call_log"]["ms_per_incident"]
    for entry in systems.values():
        if "ms_per_incident" in entry:
            entry["ratio_to_floor_call_log"] = round(entry["ms_per_incident"] / base, 2)


# --------------------------------------------------------------------------- the table


#: The parts of labkit's time measured alone each round (the state machine and store are what is left).
PARTS = ("provider", "provider_call_log", "evidence_contract", "redaction")
#: Each speed-up of issue 23, measured as it was before, in the same rounds: the table sets it
#: beside the line it changed, so the step's effect is read from one run.
STEPS = ("evidence_contract_full", "redaction_fresh", "provider_sleep_zero")
_STEP_LABELS = {
    "evidence_contract": ("evidence_contract_full", "    was: jsonschema's walk on every read"),
    "redaction": ("redaction_fresh", "    was: nothing remembered"),
    "provider_call_log": ("provider_sleep_zero", "    no longer in it: sleep(0) a read"),
}

_PART_LABELS = {
    "provider": "  provider: data file, rules, own log",
    "provider_call_log": "    of which its fsync'd call log",
    "evidence_contract": "  evidence contract (compiled schema)",
    "redaction": "  redaction and bounding (remembered)",
    "state": "  the rest: state machine and store",
}


SYSTEM_LABELS = {
    "floor": "floor: bare sqlite3, labkit's commits",
    "floor_call_log": "floor + call log (fsync'd, once a read)",
    "labkit_sql_replayed": "labkit's SQL replayed, + call log",
    "labkit": "labkit: coordinator, reference provider",
}


def format_table(result: dict) -> str:
    """The benchmark as a table a person reads; the same numbers as ``--json``.

    "x floor+log" is each row's ms per incident over the "floor + call log" row's: the
    physical limit of what labkit promises (its commits, and the read counted on disk).
    """
    systems, width = result["systems"], 40
    load = result.get("load_average")
    lines = [
        f"{result['incidents']} incidents a round, median of {result['rounds']} interleaved rounds, "
        f"{result['cores']} cores" + (f", load average {load}" if load is not None else ""),
        "",
        f"{'':<{width}} {'ms per':>8} {'':>7} {'x floor':>7} {'incidents':>9} {'bytes per':>9} {'':>7} {'commits':>7} {'pages':>6}"
        f" {'stmts':>6}",
        f"{'':<{width}} {'incident':>8} {'x floor':>7} {'+ log':>7} {'a second':>9} {'incident':>9} {'x floor':>7} {'per inc':>7}"
        f" {'per inc':>6} {'per inc':>6}",
    ]

    def number(value: object, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    def row(label: str, entry: dict) -> str:
        if "error" in entry:
            return f"{label:<{width}} {entry['error']}"
        return (f"{label:<{width}} {entry['ms_per_incident']:>8.3f} {entry['ratio_to_floor']:>6.2f}x "
                f"{number(entry.get('ratio_to_floor_call_log'), '>6.2f')}x "
                f"{entry['incidents_per_second']:>9,.0f} {entry['bytes_per_incident']:>9,} "
                f"{number(entry['bytes_ratio_to_floor'], '>6.2f')}x {number(entry['commits_per_incident'], '>7.2f')} "
                f"{number(entry['pages_per_incident'], '>6.1f')} {number(entry.get('statements_per_incident'), '>6.1f')}")

    for name, label in SYSTEM_LABELS.items():
        lines.append(row(label, systems[name]))
    steps = result.get("labkit_steps", {})
    for name, label in _PART_LABELS.items():
        part = result["labkit_parts"][name]
        lines.append(f"{label:<{width}} {part['ms_per_incident']:>8.3f} {part['ratio_to_floor']:>6.2f}x")
        if name in _STEP_LABELS and _STEP_LABELS[name][0] in steps:
            step, step_label = _STEP_LABELS[name]
            was = steps[step]
            lines.append(f"{step_label:<{width}} {was['ms_per_incident']:>8.3f} {was['ratio_to_floor']:>6.2f}x")
    for name in PEERS:
        if name in systems:
            entry = systems[name]
            lines.append(row(f"{name} {entry['version']}" if "version" in entry else name, entry))
    if not any(name in systems for name in PEERS):
        lines.append("dbos, langgraph: not run (add --peers; `make bench` installs them)")
    lines += [
        "",
        f"floors and labkit: {systems['floor']['durability']}; each incident's commits carry "
        f"{systems['floor']['payload_bytes_per_incident']:,} bytes of row values",
        "floor + call log, labkit's SQL replayed: and the provider's call log line, fsync'd, once a read",
        "timed: the incidents' transactions (and reads) only; each system's file is made, its schema created and its log "
        "checkpointed before the clock starts",
    ]
    lines += [f"{name}: {systems[name]['durability']}" for name in PEERS if "durability" in systems.get(name, {})]
    lines.append("pages: pages written to the write-ahead log (and fsync'd) per incident; "
                 "stmts: SQL statements run per incident (sqlite3's trace)")
    if result.get("scratch_filesystem") in ("tmpfs", "ramfs"):
        lines.append("warning: the scratch folder is in memory (tmpfs), where an fsync costs nothing; "
                     "set TMPDIR to a folder on disk to measure durability")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the command line


def run(args: argparse.Namespace) -> int:
    """``python -m labkit bench``: its options are declared in :mod:`labkit.cli`, which imports this only for it."""
    peer_python()  # a malformed setting is bad input, refused before any work
    result = run_benchmark(rounds=DEFAULT_ROUNDS if args.rounds is None else args.rounds, incidents=args.incidents, peers=args.peers)
    print(json.dumps(result, sort_keys=True) if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(_serve_peers_on_stdio())
