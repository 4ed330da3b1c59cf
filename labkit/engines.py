"""One workflow, two engines: what the contract suite, the crash explorer and 14_choosing_an_engine drive.

An engine here is whatever runs the incident workflow and brings it back after a death:

- ``labkit``: the coordinator of this package, its state rows and ``python -m labkit recover``;
- ``dbos``: the same workflow written for DBOS Transact (:mod:`labkit.dbos_workflow`),
  recovered by ``DBOS.launch()``; its system database in SQLite beside the run, or on the
  PostgreSQL server that ``system_url`` names.

Both keep their business rows in a labkit checkpoint database, ``FOLDER/lab.db``, with the
provider's call log beside it, so one invariant code (:func:`labkit.invariants.check_invariants`)
and one pair of scorecards (:mod:`labkit.evaluation`) judge either. What differs is said
here and nowhere else: how to drive and recover a run, and which crash points lose a read
the provider already served (each engine records a read at a different moment).

Every call that starts DBOS runs in a forked child (:func:`labkit.children.in_child`): DBOS is
one instance per process, with threads of its own, and a notebook's kernel must not be it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .children import in_child
from .crashpoints import BETWEEN_READ_AND_COMMIT, NO_CRASH, CrashPlan, CrashPoint
from .errors import BadInput

#: The incident a contract scenario drives (the explorer's too).
INCIDENT = "INC-1003"
ENGINES = ("labkit", "dbos")


class UnknownEngine(BadInput):
    def __init__(self, name: str):
        super().__init__(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")


def expected_reads(killed_at: Iterable[tuple[bool, str]], window: frozenset[CrashPoint] = BETWEEN_READ_AND_COMMIT) -> int:
    """Invariant 5's prediction (N1): one read, plus one per process killed inside the read window.

    ``killed_at`` pairs each process of a scenario (whether it was killed) with the point it was
    armed at; ``window`` is where a kill loses a read the provider already answered: labkit's
    :data:`~labkit.crashpoints.BETWEEN_READ_AND_COMMIT` by default, an :class:`Engine`'s own
    :attr:`~Engine.read_window` otherwise. The explorer, the engines' contract and 05's exercise
    check all predict with this one function.
    """
    return 1 + sum(killed and CrashPoint(point) in window for killed, point in killed_at)


@dataclass(frozen=True)
class Engine:
    """How one engine drives, recovers and re-checks a run kept in ``FOLDER/lab.db``."""

    name: str
    #: The crash points at which a kill loses a read the provider already answered (N1).
    read_window: frozenset[CrashPoint]
    #: DBOS's system database when not the SQLite file in the run's folder.
    system_url: str | None = None
    #: A deliberately broken labkit coordinator (:data:`labkit.naive.CRASH_BUGS`), for the explorer.
    bug: str | None = None

    def coordinator_class(self):
        from .naive import coordinator_class

        return coordinator_class(self.bug)

    def db(self, folder: Path) -> Path:
        return Path(folder) / "lab.db"

    def expected_reads(self, killed_at: Iterable[tuple[bool, str]]) -> int:
        """Invariant 5's prediction for this engine: :func:`expected_reads` over its :attr:`read_window`."""
        return expected_reads(killed_at, self.read_window)

    # Each of these runs in the calling process: call it inside a forked child.

    def drive(self, folder: Path, crash: CrashPlan, tickets: str | None, incident: str = INCIDENT) -> str:
        """What ``run --tickets URL`` does: take the incident's run from wherever it is to its end."""
        if self.name == "dbos":
            app = self._app(folder, crash)
            try:
                return str(app.run(incident, tickets))
            finally:
                app.close()
        from .explorer import _drive

        _drive(self.db(folder), crash, tickets, self.coordinator_class(), incident=incident)
        return "drove it"

    def recover(self, folder: Path, crash: CrashPlan, tickets: str | None) -> int:
        """What a restart does: every unfinished run resumed by this engine's recovery; how many."""
        if self.name == "dbos":
            app = self._app(folder, crash)
            try:
                return len(app.recover())
            finally:
                app.close()
        from .explorer import _recover

        return _recover(self.db(folder), crash, tickets, self.coordinator_class())[1]

    def restart(self, folder: Path, crash: CrashPlan, tickets: str | None, incident: str = INCIDENT) -> str:
        """What a supervisor does after a death: recover, or give the command again where nothing was recorded.

        A labkit run whose row never committed, or a DBOS workflow whose status row never
        did, is not there to recover.
        """
        if self.name == "dbos":
            app = self._app(folder, crash)
            try:
                resumed = app.recover()
                return str(app.run(incident, tickets)) if incident not in resumed else f"recovered {len(resumed)}"
            finally:
                app.close()
        from .explorer import _restart

        return _restart(self.db(folder), crash, tickets, self.coordinator_class(), incident=incident)

    def _app(self, folder: Path, crash: CrashPlan):
        from .dbos_workflow import IncidentApp

        return IncidentApp(folder, crash=crash, system_url=self.system_url)

    # Safe to call from any process: each forks where it starts DBOS.

    def recovered_again(self, folder: Path, tickets: str | None) -> int:
        """How many runs a further recovery resumed (invariant 7 wants 0); DBOS's in a forked child."""
        out = Path(folder) / f".again-{self.name}.txt"
        end = in_child(lambda: print(self.recover(folder, NO_CRASH, tickets)), output=(out, out.with_suffix(".err")))
        if end.code != 0:
            raise RuntimeError(f"the {self.name} recovery run for invariant 7 ended {end}")
        return int(out.read_text().strip() or 0)


def engine(name: str, *, system_url: str | None = None, bug: str | None = None) -> Engine:
    """The engine called ``name``; ``system_url`` puts DBOS's system database on a PostgreSQL server.

    ``bug`` switches on one of labkit's deliberately broken coordinators (the explorer's ``--bug``).
    """
    if name == "labkit":
        if system_url is not None:
            raise BadInput("a system database URL is for the dbos engine only")
        return Engine("labkit", BETWEEN_READ_AND_COMMIT, bug=bug)
    if name == "dbos":
        if bug is not None:
            raise BadInput(f"--bug {bug} breaks labkit's coordinator; the dbos engine has none to break")
        # DBOS records the read when its step returns, before the evidence is written: a
        # kill inside the evidence transaction no longer costs a read; only one between the
        # provider's answer and the step's end does.
        return Engine("dbos", frozenset({CrashPoint.AFTER_READ}), system_url)
    raise UnknownEngine(name)
