"""The crash explorer: every crash point the code defines, every pair of them, and kills at random moments.

A crash suite that tries a chosen few points proves little about the rest. The explorer takes
its points from :mod:`labkit.crashpoints` itself, so a point added there is explored without
an edit here, and runs each *scenario* in a folder of its own: a fresh checkpoint database,
the provider's call log beside it and, for a run that opens a ticket, its own ticket
service. In a scenario

1. a process drives the run and is killed with SIGKILL at the first crash point;
2. a recovery process, armed at the second point of a pair, is killed there too (if it
   gets there: a recovery that starts past a point never reaches it, and says so);
3. a last recovery finishes the job;
4. every invariant of :mod:`labkit.invariants` is checked: 1-9 for a run that opens its
   ticket (``run --tickets``), 1-7, 10 and 11 for the leased flow of ``work``.

Two flows cover every point: ``run`` reaches the three steps and the send around the ticket;
``work`` reaches ``after_lease`` first and then the same steps under a lease. Random kills
(:func:`random_kills`) stop the same run after a random delay instead, to find places the
named points miss. A deliberately broken coordinator (:data:`labkit.lab.naive.CRASH_BUGS`) can
be switched on by name, to see the table turn red: an explorer that cannot fail proves nothing.

The processes are made with ``os.fork`` (:mod:`labkit.children`) rather than by starting a new
interpreter: real processes with their own file descriptors and locks, killed by a real SIGKILL,
for a hundredth of the start-up cost, which is what lets a lesson run 160 scenarios in seconds.
A forked child only does labkit work, writes nothing to the parent's streams and leaves
with ``os._exit``. POSIX only, like SIGKILL itself. Taught in 12_crash_explorer.

Nothing the explorer reads back from its folder can run code: the processes that play scenarios
side by side hand their results back as JSON over a pipe (:func:`in_parallel`), never through a
file, and the folder must be the user's own, not one that others can write into (:func:`_fresh_folder`).
"""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import time
from collections.abc import Callable, Sequence
from contextlib import closing, contextmanager, suppress
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from .. import contract, database
from ..children import ChildEnd, collect, end_of, first_line, fork, in_child
from ..clock import ManualClock
from ..coordinator import Coordinator
from ..crashpoints import CRASH_POINTS, LEASE_POINTS, NO_CRASH, CrashPlan, CrashPoint, points
from ..database import read_transaction
from ..effects import Tickets
from ..engines import INCIDENT, Engine, LabkitEngine, expected_reads, provider_for
from ..engines import engine as engine_named
from ..engines.labkit import recorded_step
from ..errors import BadInput, RunFailure
from ..invariants import STATEMENTS, check_invariants
from ..jsontext import canonical_json, strict_loads
from ..provider import CallLog, call_log_for
from ..steps import Step
from ..store import connect, connect_readonly, find_run_txn
from ..ticket_client import all_tickets
from ..worker import LeasedWorker
from . import temporal_server
from .naive import CRASH_BUGS, coordinator_class
from .progress import Progress
from .ticket_service import ticket_service
from .workspace import not_private

# INCIDENT (from labkit.engines) is the incident every scenario drives: one run per database
# keeps each row of the table about one thing.
#: The invariants each flow is judged by; the others do not apply to it (shown as n/a, not as held).
FLOW_INVARIANTS = {"run": (1, 2, 3, 4, 5, 6, 7, 8, 9), "work": (1, 2, 3, 4, 5, 6, 7, 10, 11)}
INVARIANTS = tuple(sorted(STATEMENTS))

T = TypeVar("T")

_MARK = {True: "✓", False: "✗", None: "·"}
#: Each invariant in a few words, for the heat map's labels (the full statements: labkit.invariants.STATEMENTS).
SHORT_STATEMENTS = {
    1: "completed", 2: "one receipt", 3: "evidence kept", 4: "step only climbs", 5: "reads as predicted",
    6: "integrity ok", 7: "recover again: no change", 8: "one ticket per op", 9: "effects settled",
    10: "no stale-lease commit", 11: "reads under a lease",
}
#: How far apart the leased flow's workers stand in time: past any lease the one before took.
LEASE_SECONDS = 30.0
#: Bounds on the command line's numbers: beyond them a typo, not a plan.
MAX_TRIALS = 100_000
MAX_WORKERS = 64


class BadExploreOption(BadInput):
    def __init__(self, option: str, reason: str):
        super().__init__(f"{option}: {reason}")


class ExplorerWorkerFailed(RunFailure):
    """A process playing scenarios failed or died: the table would be short, so there is none.
    A run-time failure (exit 1, one line), not a traceback: the command line is a contract."""


def flow_points() -> dict[str, tuple[str, ...]]:
    """The crash points each flow reaches, from the code's own list, in run order.

    Every point must belong to a flow: a point that neither reaches would go unexplored, so
    that is an error here rather than a silent gap in the table.
    """
    flows = {"run": points(tickets=True), "work": LEASE_POINTS}
    unexplored = set(CRASH_POINTS) - {point for reached in flows.values() for point in reached}
    if unexplored:
        raise RuntimeError(f"crash points no flow reaches, so the explorer cannot try them: {sorted(unexplored)}")
    return flows


@dataclass(frozen=True)
class Scenario:
    """One or two crash points, in one flow: the first kills the run, the second its recovery."""

    flow: str
    crash_points: tuple[str, ...]
    bug: str | None = None
    engine: str = "labkit"             # or "dbos", "temporal", "langgraph": the same run flow on another engine (labkit.engines)
    system_url: str | None = None      # DBOS's system database on a PostgreSQL server, not in the scenario's folder

    @property
    def name(self) -> str:
        kills = " → ".join(self.crash_points)
        return f"{'leased ' if self.flow == 'work' else ''}{kills}"

    def driver(self) -> Engine:
        return driver_for(self.engine, self.bug, self.system_url)


def driver_for(engine: str, bug: str | None, system_url: str | None = None) -> Engine:
    """The engine named ``engine``; with ``bug``, driving labkit's broken coordinator of that name.

    The engine refuses a bug it cannot have (DBOS has no coordinator to break) before the name
    is looked up; an unknown bug is the one-line UnknownBug.
    """
    driver = engine_named(engine, system_url=system_url, bug=bug)
    if bug is not None and isinstance(driver, LabkitEngine):
        driver = driver.with_variant(coordinator_class(bug))
    return driver


def scenarios(*, pairs: bool = True, bug: str | None = None, engine: str = "labkit") -> list[Scenario]:
    """Every single crash, then (with ``pairs``) every ordered pair, per flow.

    A broken variant (``bug``) is a coordinator, so it is explored in the ``run`` flow only;
    so is the ``dbos`` engine, which has no leases (DBOS has executor ids instead).
    """
    driver = driver_for(engine, bug)  # an unknown engine, a bug the engine cannot have or an unknown bug is refused here
    chosen = []
    for flow, reached in flow_points().items():
        if flow not in driver.flows:
            continue
        chosen += [Scenario(flow, (point,), bug, engine) for point in reached]
        if pairs:
            chosen += [Scenario(flow, (first, second), bug, engine) for first in reached for second in reached]
    return chosen


# --------------------------------------------------------------------------- one scenario


@dataclass(frozen=True)
class ScenarioResult:
    scenario: Scenario
    ends: tuple[ChildEnd, ...]                 # the run's, then the armed recovery's
    invariants: dict[int, bool | None]         # None: does not apply to this flow
    broken: dict[int, str]                     # the detail of each invariant that did not hold
    provider_reads: int
    receipts: int
    tickets: int | None                        # at the scenario's own ticket service (run flow)
    final_recovery: str                        # what the last, unarmed recovery said
    read_bytes: int = 0                        # what the provider sent, over every read of the scenario
    completed: bool = False                    # the run's row says report_completed at the end

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScenarioResult:
        """The result :func:`dataclasses.asdict` wrote as JSON in an :func:`in_parallel` worker, rebuilt."""
        scenario = data["scenario"]
        return cls(
            Scenario(scenario["flow"], tuple(scenario["crash_points"]), scenario["bug"], scenario["engine"], scenario["system_url"]),
            tuple(ChildEnd(end["killed"], end["code"], end["error"]) for end in data["ends"]),
            {int(number): held for number, held in data["invariants"].items()},
            {int(number): detail for number, detail in data["broken"].items()},
            data["provider_reads"], data["receipts"], data["tickets"], data["final_recovery"], data["read_bytes"],
            data["completed"],
        )

    @property
    def name(self) -> str:
        return self.scenario.name

    @property
    def reached(self) -> tuple[bool, ...]:
        """Whether each armed point was reached (its process killed there)."""
        return tuple(end.killed for end in self.ends)

    @property
    def held(self) -> bool:
        return not self.broken

    def row(self) -> dict[str, object]:
        """One row of the explorer's table (and of ``explore --json``)."""
        return {
            "name": self.name,
            "engine": self.scenario.engine,
            "flow": self.scenario.flow,
            "bug": self.scenario.bug,
            "crash_points": list(self.scenario.crash_points),
            "reached": list(self.reached),
            "invariants": {str(number): held for number, held in self.invariants.items()},
            "broken": {str(number): detail for number, detail in self.broken.items()},
            "provider_reads": self.provider_reads,
            "receipts": self.receipts,
            "tickets": self.tickets,
            "read_bytes": self.read_bytes,
            "completed": self.completed,
            "ends": [str(end) for end in self.ends],
            "final_recovery": self.final_recovery,
        }


def _warm(driver: Engine | None = None) -> None:
    """Build once, here, what every child would otherwise build for itself after the fork.

    The evidence contract's validator takes a moment to compile; made before the fork, every
    child inherits it, and a child's time is spent on the workflow, as a killed worker's was.
    ``driver`` adds what its engine's children need (:meth:`~labkit.engines.base.Engine.warm`: its
    imports, and one scratch run that builds what a child's first run would).
    """
    contract.prepare()
    if driver is not None:
        driver.warm()


def run_scenario(scenario: Scenario, folder: str | Path) -> ScenarioResult:
    """Play ``scenario`` in ``folder`` (made here, and must not exist) and check every invariant."""
    _warm(scenario.driver())
    folder = Path(folder)
    folder.mkdir()
    db = folder / "lab.db"
    if scenario.flow == "run":
        with ticket_service(folder / "tickets.db") as url:
            return _play_run(scenario, folder, url)
    return _play_work(scenario, db)


def _play_run(scenario: Scenario, folder: Path, url: str) -> ScenarioResult:
    driver = scenario.driver()
    db = driver.db(folder)
    first, *rest = scenario.crash_points
    ends = [in_child(lambda: driver.drive(folder, CrashPlan(CrashPoint(first)), url))]
    if rest:
        ends.append(in_child(lambda: driver.recover(folder, CrashPlan(CrashPoint(rest[0])), url)))
    final = _final_recovery(lambda: driver.final_recovery(folder, url))
    expected = driver.expected_reads(list(zip((end.killed for end in ends), scenario.crash_points, strict=False)))
    results = check_invariants(db, call_log_for(db), {INCIDENT: expected}, provider_for(db), effects=Tickets(url),
                               coordinator_class=driver.coordinator_class(), recover_again=driver.recover_again(folder, url))
    return _result(scenario, tuple(ends), results, db, len(all_tickets(url)), final)


def _play_work(scenario: Scenario, db: Path) -> ScenarioResult:
    with closing(connect(db)) as conn:  # the run exists before any worker, as `work` makes it
        Coordinator(conn, provider_for(db)).start(INCIDENT)
    first, *rest = scenario.crash_points
    ends = [in_child(lambda: _lease_and_finish(db, CrashPlan(CrashPoint(first)), hours=0))]
    if rest:
        ends.append(in_child(lambda: _lease_and_finish(db, CrashPlan(CrashPoint(rest[0])), hours=1)))
    final = _final_recovery(lambda: _lease_and_finish(db, NO_CRASH, hours=2))
    expected = expected_reads(zip((end.killed for end in ends), scenario.crash_points, strict=True))
    results = check_invariants(db, call_log_for(db), {INCIDENT: expected}, provider_for(db), leases=True)
    return _result(scenario, tuple(ends), results, db, None, final)


def _lease_and_finish(db: Path, crash: CrashPlan, *, hours: int) -> str:
    """One worker of ``python -m labkit work``: lease the run if it is unfinished, and finish it.

    Each worker's clock stands ``hours`` later than the first one's, so a killed worker's
    lease has run out by the time the next one looks: what a real pool waits for.
    """
    clock = ManualClock()
    clock.advance(hours * 3600)
    with closing(connect(db, create=False)) as conn:
        worker = LeasedWorker(conn, provider_for(db), name=f"worker-{hours + 1}", lease_seconds=LEASE_SECONDS, clock=clock, crash=crash)
        lease = worker.claim_next([INCIDENT])
        if lease is None:
            return "nothing to recover"
        return worker.finish(lease).outcome


def _final_recovery(work: Callable[[], str]) -> str:
    """The last recovery, unarmed, in this process: what it said, or the error it met."""
    try:
        return work()
    except Exception as error:  # noqa: BLE001 - a broken variant may fail here; the invariants say what it cost
        return f"failed: {type(error).__name__}: {error}".splitlines()[0]


def _result(scenario: Scenario, ends: tuple[ChildEnd, ...], results: list, db: Path, tickets: int | None,
            final: str) -> ScenarioResult:
    applies = FLOW_INVARIANTS[scenario.flow]
    by_number = {result.number: result for result in results}
    invariants = {number: (by_number[number].held if number in applies else None) for number in INVARIANTS}
    broken = {number: by_number[number].detail for number in applies if not by_number[number].held}
    with closing(connect_readonly(db)) as conn, read_transaction(conn):
        receipts = conn.execute("SELECT COUNT(*) FROM receipts").fetchone()[0]
        run = find_run_txn(conn, INCIDENT)
    log = CallLog(call_log_for(db))
    sent = sum(call.response_bytes for call in log.calls() if call.incident == INCIDENT)
    completed = run is not None and run.step is Step.REPORT_COMPLETED
    return ScenarioResult(scenario, ends, invariants, broken, log.reads_of(INCIDENT), receipts, tickets, final, sent, completed)


# --------------------------------------------------------------------------- the whole exploration


def _held_over(members: list[ScenarioResult]) -> dict[str, str]:
    """Per invariant, ``held/judged`` over ``members`` (``·`` where it applies to none): a heat map's row."""
    row = {}
    for number in INVARIANTS:
        judged = [held for r in members if (held := r.invariants[number]) is not None]
        row[str(number)] = f"{sum(judged)}/{len(judged)}" if judged else "·"
    return row


@dataclass
class Exploration:
    """Every scenario's result, and the random kills' report if any were asked for."""

    results: list[ScenarioResult] = field(default_factory=list)
    random: RandomKills | None = None
    seconds: float = 0.0

    @property
    def held(self) -> bool:
        return all(result.held for result in self.results) and (self.random is None or not self.random.violations)

    def frame(self):
        """The table: one row per scenario, one column per invariant (True, False, or None where it does not apply)."""
        import pandas as pd  # an optional heavy dependency: loaded only when a frame is asked for

        rows = []
        for result in self.results:
            row: dict[str, object] = {"scenario": result.name, "flow": result.scenario.flow}
            row["reached"] = " ".join("killed" if killed else "not reached" for killed in result.reached)
            row.update({str(number): held for number, held in result.invariants.items()})
            row.update(provider_reads=result.provider_reads, receipts=result.receipts, tickets=result.tickets,
                       completed=result.completed)
            rows.append(row)
        return pd.DataFrame(rows)

    def summary(self):
        """The heat map's numbers: per first crash point (rows) and invariant (columns), held in how many scenarios.

        Each row gathers a point's single crash and every pair it starts; a cell reads
        ``held/scenarios``, or ``·`` where the invariant does not apply to the flow.
        """
        import pandas as pd  # an optional heavy dependency: loaded only when a frame is asked for

        groups: dict[str, list[ScenarioResult]] = {}
        for result in self.results:
            first = result.scenario.crash_points[0]
            groups.setdefault(f"{'leased ' if result.scenario.flow == 'work' else ''}{first}", []).append(result)
        rows = {name: _held_over(members) for name, members in groups.items()}
        return pd.DataFrame.from_dict(rows, orient="index")

    def heatmap_html(self) -> str:
        """:meth:`summary` coloured: green where every scenario held, red where one broke, grey where it does not apply.

        Plain HTML with fixed ids, so a notebook's stored output is the same on every run.
        """
        table = self.summary()

        def colour(cell: str) -> str:
            if cell == "·":
                return "background-color: #e5e7eb; color: #6b7280"
            held, judged = (int(n) for n in cell.split("/"))
            return "background-color: #bbf7d0" if held == judged else "background-color: #fca5a5; font-weight: bold"

        styled = table.style.map(colour).set_uuid("labkit-explorer").set_caption(
            "invariants held, per first crash point (scenarios held / scenarios judged)")
        return styled.to_html()

    def heatmap_figure(self, title: str = ""):
        """:meth:`summary` as a matplotlib heat map: invariants labelled, green held, red broken, grey not judged.

        A picture for the notebook (nbval does not compare images); its numbers are :meth:`summary`'s.
        """
        import matplotlib.pyplot as plt  # an optional heavy dependency: loaded only when a picture is asked for
        from matplotlib.colors import ListedColormap

        table = self.summary()
        colours = ListedColormap(["#e5e7eb", "#86efac", "#f87171"])
        codes = [[0 if cell == "·" else (1 if cell.split("/")[0] == cell.split("/")[1] else 2) for cell in row]
                 for row in table.to_numpy()]
        figure, axes = plt.subplots(figsize=(10, 0.34 * len(table) + 2.2))
        axes.imshow(codes, cmap=colours, vmin=0, vmax=2, aspect="auto")
        for y, row in enumerate(table.to_numpy()):
            for x, cell in enumerate(row):
                if cell != "·":
                    axes.text(x, y, cell, ha="center", va="center", fontsize=7)
        axes.set_xticks(range(len(table.columns)))
        axes.set_xticklabels([f"{n} {SHORT_STATEMENTS[int(n)]}" for n in table.columns], rotation=35, ha="right", fontsize=8)
        axes.set_yticks(range(len(table)))
        axes.set_yticklabels(table.index, fontsize=8)
        axes.set_title(title or "invariants held / judged, per first crash point", fontsize=10)
        figure.tight_layout()
        return figure

    def by_flow(self):
        """The heat map's numbers per flow: for each invariant, scenarios held / judged (``·``: does not apply)."""
        import pandas as pd  # an optional heavy dependency: loaded only when a frame is asked for

        rows = {}
        for flow in sorted({r.scenario.flow for r in self.results}, key=["run", "work"].index):
            members = [r for r in self.results if r.scenario.flow == flow]
            rows[f"{flow} ({len(members)} scenarios)"] = _held_over(members)
        return pd.DataFrame.from_dict(rows, orient="index")

    def collapsed(self):
        """The full table collapsed: one row per distinct outcome (invariants, reads, receipts, tickets), counted.

        Scenarios that ended alike are one row, with how many there are and the first of them,
        so the rows that differ (an extra read, a broken invariant) stand out.
        """
        import pandas as pd  # an optional heavy dependency: loaded only when a frame is asked for

        groups: dict[tuple, list[ScenarioResult]] = {}
        for result in self.results:
            broken = sorted(result.broken)
            held = "all held" if not broken else "broken: " + ", ".join(map(str, broken))
            tickets = "-" if result.tickets is None else result.tickets
            key = (result.scenario.flow, held, result.provider_reads, result.receipts, tickets)
            groups.setdefault(key, []).append(result)
        rows = [{"flow": flow, "invariants": held, "reads": reads, "receipts": receipts, "tickets": tickets,
                 "scenarios": len(members), "for example": members[0].name}
                for (flow, held, reads, receipts, tickets), members in groups.items()]
        return pd.DataFrame(rows)

    def text(self) -> str:
        """The table as text: ✓ held, ✗ broken, · does not apply; then what broke, and the random kills."""
        width = max([len("scenario"), *(len(result.name) for result in self.results)])
        lines = [f"{'scenario':<{width}}  {' '.join(f'{n:>2}' for n in INVARIANTS)}  reads receipts tickets  2nd kill"]
        for result in self.results:
            marks = " ".join(f"{_MARK[held]:>2}" for held in result.invariants.values())
            tickets = "-" if result.tickets is None else str(result.tickets)
            second = "" if len(result.reached) == 1 else ("killed" if result.reached[1] else "not reached")
            counts = f"{result.provider_reads:>5} {result.receipts:>8} {tickets:>7}"
            lines.append(f"{result.name:<{width}}  {marks}  {counts}  {second}".rstrip())
        broken = [r for r in self.results if r.broken]
        lines.append(f"{len(self.results)} scenarios, {len(broken)} with a broken invariant")
        for result in broken:
            lines += [f"  {result.name}: {number} {STATEMENTS[number]}: {detail}" for number, detail in result.broken.items()]
        if self.random is not None:
            kills = self.random
            lines.append(f"random kills: {kills.trials} trials, seed {kills.seed}, moments drawn inside a run of "
                         f"{kills.steps:.0f} counts of SQLite work, {len(kills.violations)} with a broken invariant")
            lines += [f"  trial {t.number} (seed {kills.seed}, run killed at count {t.run_at}, recovery at "
                      f"{t.recovery_at}): " + "; ".join(f"{n} {d}" for n, d in t.broken.items()) for t in kills.violations]
        return "\n".join(lines)

    def as_json(self) -> dict[str, object]:
        return {
            "scenarios": [result.row() for result in self.results],
            # The contract (DESIGN.md) shows an object: no random kills asked for is zero trials, not null.
            "random": (self.random or RandomKills(trials=0, seed=0, steps=0, results=[])).as_json(),
            "held": self.held,
        }


def explore(db_dir: str | Path, *, pairs: bool = True, bug: str | None = None, named: bool = True,
            random_trials: int = 0, seed: int = 0, workers: int | None = None, engine: str = "labkit",
            progress: bool = False) -> Exploration:
    """Run every scenario (and ``random_trials`` random kills) in folders under ``db_dir``.

    ``db_dir`` must be a new or empty folder: the explorer makes one folder per scenario and
    never reuses what an earlier exploration left. Scenarios share nothing, so ``workers``
    processes (default: :func:`default_workers`) play them side by side; the table is in scenario order
    whatever finished first. ``engine="dbos"`` plays the run flow's scenarios on the DBOS version of
    the workflow (:mod:`labkit.engines`), ``engine="temporal"`` on the Temporal one (on a dev server
    started for the exploration, :func:`labkit.lab.temporal_server.serving`), ``engine="langgraph"`` on the
    LangGraph graph, all judged by the same invariants. ``progress`` shows a bar of
    the scenarios played, in a notebook (:mod:`labkit.lab.progress`; nbval does not compare it).
    """
    if bug is not None and engine == "labkit" and bug not in CRASH_BUGS:  # another engine names its own bugs
        coordinator_class(bug)  # an unknown name: the one-line UnknownBug
        raise BadExploreOption("--bug", f"{bug} breaks only under a race, which no crash reveals; explore one of {', '.join(CRASH_BUGS)}")
    if random_trials < 0:
        raise BadExploreOption("--random", f"a number of trials, 0 or more, not {random_trials}")
    refused = engine_named(engine, bug=bug).random_kills_refused
    if random_trials and refused:
        raise BadExploreOption("--random", refused)
    root = _fresh_folder(db_dir)
    started = time.perf_counter()
    exploration = Exploration()
    if named:
        chosen = scenarios(pairs=pairs, bug=bug, engine=engine)
        tasks = [partial(run_scenario, scenario, root / f"{number:03d}") for number, scenario in enumerate(chosen, start=1)]
        _warm(engine_named(engine, bug=bug))  # here, once, rather than in each worker the scenarios are dealt to
        bar = Progress(len(tasks)) if progress else None
        try:
            with temporal_server.serving(engine, root):  # the temporal engine's one server for every scenario
                exploration.results = in_parallel(tasks, ScenarioResult.from_json, workers=workers,
                                                  on_progress=bar.to if bar is not None else None)
        finally:
            if bar is not None:
                bar.finish()
    if random_trials:
        exploration.random = random_kills(root / "random", random_trials, seed, bug=bug, workers=workers)
    exploration.seconds = time.perf_counter() - started
    return exploration


def default_workers() -> int:
    """Two processes a core: a scenario spends much of its time waiting for fsync and for its
    children, so one a core leaves the cores idle (measured: 162 scenarios on 2 cores, 7.2 s with 2
    workers, 5.3 s with 4, 5.2 s with 6)."""
    return min(MAX_WORKERS, 2 * (os.cpu_count() or 1))


def in_parallel(tasks: Sequence[Callable[[], object]], decode: Callable[[dict[str, Any]], T], *,
                workers: int | None = None, on_progress: Callable[[int], None] | None = None) -> list[T]:
    """Each task's result, in order; tasks dealt out in turn to ``workers`` forked processes.

    A worker hands each result back over a pipe of its own, as one line of JSON that ``decode``
    rebuilds, and never through a file: a file in the explorer's folder could have been put there,
    or swapped, by anyone who can write to that folder, and reading back a pickle runs whatever
    code it names. A line of JSON read with :func:`~labkit.jsontext.strict_loads` is only data.
    A worker that fails sends its error instead, raised here; one that ends without every result
    is an error too. ``on_progress`` is told how many results have arrived, as they arrive.
    """
    count = max(1, min(workers or default_workers(), len(tasks)))
    if count == 1:
        done = []
        for task in tasks:
            done.append(decode(_as_json(task())))  # the same round trip as a worker's
            if on_progress is not None:
                on_progress(len(done))
        return done
    _warm()
    children = []
    try:
        for number in range(count):
            read_end, write_end = os.pipe()
            pid = fork(partial(_share, tasks[number::count], read_end, write_end))
            os.close(write_end)  # the child's copy stays open: the pipe ends when the child does
            children.append((pid, os.fdopen(read_end, encoding="utf-8")))
        # Readers start after the last fork, so no child is forked while a reader holds a lock.
        lines: list[list[str]] = [[] for _ in children]
        readers = [collect(stream, into) for (_, stream), into in zip(children, lines, strict=True)]
        while on_progress is not None and any(reader.is_alive() for reader in readers):
            on_progress(sum(map(len, lines)))
            time.sleep(0.1)
        ends = [os.waitpid(pid, 0)[1] for pid, _ in children]
    except BaseException:
        for pid, _ in children:  # interrupted: leave no worker behind (its pipe then ends too)
            with suppress(ChildProcessError, ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        raise
    results: list[list[T]] = []
    for number, ((_, stream), reader, said, status) in enumerate(zip(children, readers, lines, ends, strict=True)):
        reader.join()
        stream.close()
        # A line cut short (a worker killed while writing it) is no result: the count below says so.
        sent = [strict_loads(line) for line in said if line.endswith("\n")]
        errors = [message["error"] for message in sent if "error" in message]
        if errors:
            raise ExplorerWorkerFailed(f"an explorer worker stopped: {errors[0]}")
        expected = len(tasks[number::count])
        if len(sent) != expected:
            raise ExplorerWorkerFailed(f"explorer worker {number} ended ({end_of(status)}) after {len(sent)} of {expected} results")
        results.append([decode(message["result"]) for message in sent])
    return [results[index % count][index // count] for index in range(len(tasks))]


def _as_json(result: Any) -> dict[str, Any]:
    """A result (a frozen dataclass of this module) as JSON data: what crosses the pipe."""
    return json.loads(canonical_json(asdict(result)))


def _share(tasks: Sequence[Callable[[], Any]], read_end: int, write_end: int) -> None:
    """In an :func:`in_parallel` worker: one JSON line per result, or the error that stopped the tasks."""
    os.close(read_end)
    with os.fdopen(write_end, "w", encoding="utf-8") as pipe:
        try:
            for task in tasks:
                pipe.write(canonical_json({"result": asdict(task())}) + "\n")
                pipe.flush()
        except BaseException as error:  # noqa: BLE001 - handed to the parent, which raises it
            pipe.write(canonical_json({"error": first_line(error)}) + "\n")
            raise SystemExit(1) from None


def _fresh_folder(path: str | Path) -> Path:
    """``path`` as a new or empty folder of this user's, that no other user can write into.

    The explorer writes databases there and reads them back to judge the invariants: a folder that
    others can write into (``chmod o+w``, with or without the sticky bit, which stops removal but
    not creation) lets them plant or swap what it reads, so it is refused, as is a folder that
    belongs to another user. A folder made here is made private (mode 0700).
    """
    folder = Path(path)
    if folder.is_symlink():
        raise BadExploreOption("--db-dir", f"{folder} is a symlink; give the folder itself")
    if folder.exists() and not folder.is_dir():
        raise BadExploreOption("--db-dir", f"{folder} is not a folder")
    if folder.is_dir() and any(folder.iterdir()):
        raise BadExploreOption("--db-dir", f"{folder} is not empty; the explorer needs a new or empty folder")
    _check_ancestors(folder)  # before anything is made under them
    if folder.is_dir():
        _check_private(folder)  # before anything is made in it
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise BadExploreOption("--db-dir", f"cannot make {folder}: {error.strerror or error}") from None
    _check_private(folder)  # the folder as it is now, had it been swapped since the first look
    _check_ancestors(folder)
    if not os.access(folder, os.W_OK):
        raise BadExploreOption("--db-dir", f"{folder} is not writable")
    return folder


def _check_ancestors(folder: Path) -> None:
    """No folder above ``folder`` may be one that others can write into without the sticky bit:
    there anyone can rename ``folder`` away while the explorer works and put a folder of their
    own, or a symlink to anywhere, in its place (the sticky bit, as on /tmp, stops the rename).
    Both the folders named in the path and those it resolves to through symlinks are checked."""
    above = [*Path(os.path.abspath(folder)).parents, *folder.resolve().parents]  # each the nearest first
    for parent in dict.fromkeys(above):
        try:
            found = parent.stat()
        except OSError:
            continue  # not made yet: the explorer makes it, private
        if found.st_mode & stat.S_IWOTH and not found.st_mode & stat.S_ISVTX:
            raise BadExploreOption("--db-dir", f"{folder} is inside {parent}, which every user can write to without the "
                                               "sticky bit: they could swap the folder while the explorer works; "
                                               "give a folder elsewhere")


def _check_private(folder: Path) -> None:
    found = folder.lstat()  # lstat: a symlink put in its place is refused, never followed
    if not stat.S_ISDIR(found.st_mode):
        raise BadExploreOption("--db-dir", f"{folder} is not a folder")
    if (problem := not_private(found)) is not None:
        raise BadExploreOption("--db-dir", f"{folder} {problem}, who could plant files in it; "
                                           "give a folder that only you own and can write to")


# --------------------------------------------------------------------------- random kills


@dataclass(frozen=True)
class Trial:
    """One random kill: the moments (counts of SQLite's work) that stopped the run and its recovery, and what broke."""

    number: int
    run_at: float                  # SQLite steps, or milliseconds for a kill by clock (RandomKills.unit)
    recovery_at: float
    killed: tuple[bool, bool]      # were the run, and the recovery, killed before they ended by themselves?
    step_after_kill: str           # where the run's rows stood after the first kill
    broken: dict[int, str]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trial:
        """The trial :func:`dataclasses.asdict` wrote as JSON in an :func:`in_parallel` worker, rebuilt."""
        return cls(data["number"], data["run_at"], data["recovery_at"], tuple(data["killed"]),
                   data["step_after_kill"], {int(number): detail for number, detail in data["broken"].items()})


@dataclass
class RandomKills:
    trials: int
    seed: int
    steps: float                   # a clean run's SQLite work, counted by its progress handler (or its ms, by clock)
    results: list[Trial]
    seconds: float = 0.0
    run_row_at: int = 0            # the count at the clean run's first commit with a run row
    unit: str = "steps"            # what run_at and recovery_at count: SQLite's steps, or milliseconds (by_clock)

    @property
    def violations(self) -> list[Trial]:
        return [trial for trial in self.results if trial.broken]

    def landed(self) -> dict[str, int]:
        """How many first kills left the run at each step (and how many came too late to kill), in the steps' order."""
        counts: dict[str, int] = {}
        for trial in self.results:
            where = trial.step_after_kill if trial.killed[0] else "finished before the kill"
            counts[where] = counts.get(where, 0) + 1
        order = ["no run", *(step.value for step in Step), "finished before the kill"]
        return {where: counts[where] for where in sorted(counts, key=lambda w: order.index(w) if w in order else len(order))}

    def recoveries_killed(self) -> int:
        """How many recoveries the second kill stopped (the others ended before their moment came)."""
        return sum(trial.killed[1] for trial in self.results)

    def as_json(self) -> dict[str, object]:
        return {
            "trials": self.trials,
            "seed": self.seed,
            "steps": int(self.steps),
            "unit": self.unit,
            "landed": self.landed(),
            "violations": [
                {"trial": t.number, "seed": self.seed, "run_kill_at": t.run_at, "recovery_kill_at": t.recovery_at,
                 "broken": {str(n): d for n, d in t.broken.items()}}
                for t in self.violations
            ],
            "seconds": round(self.seconds, 1),
        }


#: SQLite calls the counter once every this many virtual-machine instructions (its progress handler).
KILL_GRAIN = 1


class _SqliteSteps:
    """In a forked child: count SQLite's work on every connection labkit opens, and SIGKILL at a chosen count.

    A moment counted in SQLite's own instructions (:meth:`sqlite3.Connection.set_progress_handler`)
    rather than in milliseconds lands in the same place on a loaded machine as on an idle one:
    inside a statement, between two statements of a transaction, just after a commit. It also
    notes the count at the first commit after which a run row exists.
    """

    def __init__(self, kill_at: int | None) -> None:
        self.count = 0
        self.kill_at = kill_at
        self.paused = False
        self.run_row_at: int | None = None
        self.started = time.monotonic()
        self.run_row_seconds: float | None = None  # the same moment on the clock (kills by clock aim with it)

    def tick(self) -> int:
        if not self.paused:
            self.count += 1
            if self.kill_at is not None and self.count >= self.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        return 0

    def install(self) -> None:
        """Hook labkit's connections and commits (in this child only: the parent never calls this)."""
        connect_raw, atomic = database._connect, database._atomic

        def counted_connect(target: str, *, uri: bool):
            conn = connect_raw(target, uri=uri)
            conn.set_progress_handler(self.tick, KILL_GRAIN)
            return conn

        @contextmanager
        def noted_atomic(conn, begin, *, commit):
            with atomic(conn, begin, commit=commit) as inside:
                yield inside
            if self.run_row_at is None and commit:
                self.paused = True
                try:
                    row = conn.execute("SELECT 1 FROM runs LIMIT 1").fetchone()
                except Exception:  # noqa: BLE001 - no runs table yet
                    row = None
                finally:
                    self.paused = False
                if row is not None:
                    self.run_row_at = self.count
                    self.run_row_seconds = time.monotonic() - self.started

        database._connect = counted_connect
        database._atomic = noted_atomic


def _killed_after(steps: int | None, work: Callable[[], object], report: Path | None = None) -> Callable[[], object]:
    """``work`` for a forked child, SIGKILLed by itself after ``steps`` counts of SQLite work (None: never)."""

    def counted() -> object:
        counter = _SqliteSteps(steps)
        counter.install()
        done = work()
        if report is not None:
            report.write_text(json.dumps({"total": counter.count, "run_row_at": counter.run_row_at,
                                          "run_row_seconds": counter.run_row_seconds,
                                          "seconds": time.monotonic() - counter.started}), encoding="utf-8")
        return done

    return counted


def random_kills(folder: str | Path, trials: int, seed: int, *, bug: str | None = None, workers: int | None = None,
                 by_clock: bool = False) -> RandomKills:
    """Kill a ticketed run at a random moment of its work, then its recovery at another, ``trials`` times.

    ``by_clock`` kills from outside instead, after a random delay (milliseconds, drawn from a
    clean run's measured duration): a kill may then land anywhere, inside a file write or a
    provider read as well as between SQLite's instructions, but where it lands depends on the
    machine's speed and load, so it is for the soak, never for a compared lesson cell.

    A moment is a count of SQLite's work (:class:`_SqliteSteps`), drawn by ``random.Random(seed)``:
    trial n of seed s always draws the same two, so a failing trial is named by its seed, its
    number and its two moments, and it lands in the same place on every machine. The run's
    moment is drawn between its run row's commit and its end, measured in a clean run first,
    so every kill lands inside the run; the recovery's from the same span, so some
    recoveries end before theirs. Invariant 5 cannot be predicted from a point here; it is
    judged from the rows instead: a killed process that had read while the run stayed at
    ``not_inspected`` made the one read the rules allow to repeat.
    """
    root = _fresh_folder(folder)
    started = time.perf_counter()
    # Random kills judge labkit's run row: its coordinator, or a broken variant (an unknown bug is
    # the one-line UnknownBug, before any run).
    driver = LabkitEngine(bug, coordinator_class(bug))
    _warm(driver)
    if by_clock:
        # The median of three clean runs' durations: one run's clock is noisier than its count.
        runs = sorted((_clean_run(root / "clean" / str(attempt), driver) for attempt in range(3)), key=lambda r: r["seconds"])
        run_row, window = runs[1]["run_row_seconds"], runs[1]["seconds"]
        rng = random.Random(seed)
        # The run's kill is aimed between its run row's first commit and its end, as a clean run timed
        # them (from the fork, as the timer that kills counts); how this machine's load moves the run
        # decides where it really lands, which is what a kill by clock is for. The recovery's, anywhere.
        delays = [(rng.uniform(run_row, window), rng.uniform(0, window)) for _ in range(trials)]
        clocked = [partial(_random_trial, root / f"{number:04d}", number, run_delay, recovery_delay, driver, by_clock=True)
                   for number, (run_delay, recovery_delay) in enumerate(delays, start=1)]
        results = in_parallel(clocked, Trial.from_json, workers=workers)
        return RandomKills(trials, seed, window * 1000, results, time.perf_counter() - started, unit="ms")
    clean = _clean_run(root / "clean", driver)
    first, total = int(clean["run_row_at"]), int(clean["total"])
    rng = random.Random(seed)
    span = total - first
    draws = [(first + 1 + int(rng.random() * (span - 1)), 1 + int(rng.random() * span)) for _ in range(trials)]
    tasks = [partial(_random_trial, root / f"{number:04d}", number, run_at, recovery_at, driver)
             for number, (run_at, recovery_at) in enumerate(draws, start=1)]
    results = in_parallel(tasks, Trial.from_json, workers=workers)
    return RandomKills(trials, seed, float(total), results, time.perf_counter() - started, run_row_at=first)


def _clean_run(folder: Path, driver: LabkitEngine) -> dict[str, float]:
    """One uninterrupted run in a forked child with its own service, measured two ways.

    In SQLite's work: ``run_row_at`` (the count at the run row's first commit) and ``total``.
    On the clock, from the fork (as a timer that kills counts): ``run_row_seconds`` (the child
    times the commit from its own start; the fork and the child's start are added) and ``seconds``.
    """
    folder.mkdir(parents=True)
    report = folder / "steps.json"
    with ticket_service(folder / "tickets.db") as url:
        started = time.perf_counter()
        in_child(_killed_after(None, lambda: driver.drive(folder, NO_CRASH, url), report))
        seconds = time.perf_counter() - started
    measured = json.loads(report.read_text(encoding="utf-8"))
    before_work = max(0.0, seconds - float(measured["seconds"]))
    return {"run_row_at": int(measured["run_row_at"]), "total": int(measured["total"]),
            "run_row_seconds": before_work + float(measured["run_row_seconds"] or 0.0), "seconds": seconds}


def _random_trial(folder: Path, number: int, run_at: float, recovery_at: float, driver: LabkitEngine, *,
                  by_clock: bool = False) -> Trial:
    folder.mkdir()
    db = driver.db(folder)
    log = CallLog(call_log_for(db))

    def killed(moment: float, work: Callable[[], object]) -> ChildEnd:
        if by_clock:  # SIGKILL from outside after ``moment`` seconds, wherever the child is
            return in_child(work, kill_after=moment)
        return in_child(_killed_after(int(moment), work))

    with ticket_service(folder / "tickets.db") as url:
        first = killed(run_at, lambda: driver.drive(folder, NO_CRASH, url))
        reads_first = log.reads_of(INCIDENT)
        step_after = recorded_step(db)
        second = killed(recovery_at, lambda: driver.restart(folder, NO_CRASH, url))
        reads_second = log.reads_of(INCIDENT) - reads_first
        step_after_second = recorded_step(db)
        _final_recovery(lambda: driver.restart(folder, NO_CRASH, url))
        # A killed process whose read never committed left the run where it was: that read repeats.
        repeated = (first.killed and reads_first > 0 and step_after == Step.NOT_INSPECTED.value) + (
            second.killed and reads_second > 0 and step_after_second == Step.NOT_INSPECTED.value)
        results = check_invariants(db, call_log_for(db), {INCIDENT: 1 + repeated}, provider_for(db), effects=Tickets(url),
                                   coordinator_class=driver.coordinator_class())
    broken = {r.number: r.detail for r in results if not r.held}
    if by_clock:
        run_at, recovery_at = round(run_at * 1000, 2), round(recovery_at * 1000, 2)
    return Trial(number, run_at, recovery_at, (first.killed, second.killed), step_after, broken)
