"""The interface every engine implements: what the contract suite, the crash explorer and 14_choosing_an_engine call.

An engine is whatever runs the incident workflow and brings it back after a death. Each one is
a class of its own (:class:`~labkit.engines.labkit.LabkitEngine`,
:class:`~labkit.engines.dbos.DbosEngine`) behind this one, as huey keeps one storage class per
backend: what differs between engines is said in their classes and nowhere else.

Both keep their business rows in a labkit checkpoint database, ``FOLDER/lab.db``, with the
provider's call log beside it, so one invariant code (:func:`labkit.invariants.check_invariants`)
and one pair of scorecards (:mod:`labkit.evaluation`) judge either.
"""

from __future__ import annotations

import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import ClassVar

from ..children import in_child
from ..coordinator import Coordinator
from ..crashpoints import BETWEEN_READ_AND_COMMIT, NO_CRASH, CrashPlan, CrashPoint
from ..provider import ReferenceProvider, call_log_for

#: The incident a contract scenario drives (the explorer's too).
INCIDENT = "INC-1003"


def expected_reads(killed_at: Iterable[tuple[bool, str]], window: frozenset[CrashPoint] = BETWEEN_READ_AND_COMMIT) -> int:
    """Invariant 5's prediction (N1): one read, plus one per process killed inside the read window.

    ``killed_at`` pairs each process of a scenario (whether it was killed) with the point it was
    armed at; ``window`` is where a kill loses a read the provider already answered: labkit's
    :data:`~labkit.crashpoints.BETWEEN_READ_AND_COMMIT` by default, an :class:`Engine`'s own
    :attr:`~Engine.read_window` otherwise. The explorer, the engines' contract and 05's exercise
    check all predict with this one function.
    """
    return 1 + sum(killed and CrashPoint(point) in window for killed, point in killed_at)


def provider_for(db: Path) -> ReferenceProvider:
    """The reference provider of the run kept in ``db``, logging its reads beside it (what invariant 5 counts)."""
    return ReferenceProvider(call_log_for(db))


#: The engines (by class) whose scratch run this process has made (:meth:`Engine.warm`); a fork inherits it.
_WARMED: set[type] = set()


class Engine(ABC):
    """How one engine drives, recovers and re-checks a run kept in ``FOLDER/lab.db``."""

    #: The name ``explore --engine NAME`` and :func:`labkit.engines.engine` take.
    name: ClassVar[str]
    #: The crash points at which a kill loses a read the provider already answered (N1).
    read_window: ClassVar[frozenset[CrashPoint]]
    #: Why the explorer's random kills cannot judge this engine's runs, or None where they can.
    random_kills_refused: ClassVar[str | None] = None

    @classmethod
    @abstractmethod
    def configured(cls, *, system_url: str | None = None, bug: str | None = None) -> Engine:
        """This engine with the command line's options, refusing one it has no use for."""

    @property
    def flows(self) -> tuple[str, ...]:
        """The explorer's flows this engine plays: the ticketed ``run``; ``work`` is labkit's leased pool."""
        return ("run",)

    def coordinator_class(self) -> type[Coordinator]:
        """The coordinator invariant 7's labkit recovery uses on this engine's rows."""
        return Coordinator

    def db(self, folder: Path) -> Path:
        return Path(folder) / "lab.db"

    def expected_reads(self, killed_at: Iterable[tuple[bool, str]]) -> int:
        """Invariant 5's prediction for this engine: :func:`expected_reads` over its :attr:`read_window`."""
        return expected_reads(killed_at, self.read_window)

    def warm(self) -> None:
        """Build, before the explorer forks, what each child of this engine would otherwise build for itself.

        First the engine's imports (:meth:`load`); then, once a process, one unarmed run of the
        incident in a scratch folder that is thrown away (:meth:`scratch_run`). A child's first run
        builds what no import does: labkit's schema check, SQLAlchemy's compiled statements, the
        engine's own lazy imports. Built here, every fork inherits them. Measured (a child that
        drives the incident to its end): DBOS 0.35 CPU-seconds a child, 0.16 after this; labkit
        0.11, 0.03 after.
        """
        self.load()
        if type(self) in _WARMED:
            return
        with tempfile.TemporaryDirectory(prefix="labkit-warm-") as scratch:
            self.scratch_run(Path(scratch))
        _WARMED.add(type(self))

    def load(self) -> None:  # noqa: B027 - a hook: an engine with nothing heavy to import leaves it as it is
        """Import what this engine's children need, once, before the fork."""

    def scratch_run(self, folder: Path) -> None:  # noqa: B027 - a hook: an engine that needs a server (Temporal) leaves it
        """Drive the incident to its end in ``folder``, unarmed, with no ticket service: :meth:`warm`'s run."""

    # Each of these runs in the calling process: call it inside a forked child.

    @abstractmethod
    def drive(self, folder: Path, crash: CrashPlan, tickets: str | None, incident: str = INCIDENT) -> str:
        """What ``run --tickets URL`` does: take the incident's run from wherever it is to its end."""

    @abstractmethod
    def recover(self, folder: Path, crash: CrashPlan, tickets: str | None) -> int:
        """What a restart does: every unfinished run resumed by this engine's recovery; how many."""

    @abstractmethod
    def restart(self, folder: Path, crash: CrashPlan, tickets: str | None, incident: str = INCIDENT) -> str:
        """What a supervisor does after a death: recover, or give the command again where nothing was recorded."""

    # Safe to call from any process.

    @abstractmethod
    def final_recovery(self, folder: Path, tickets: str | None) -> str:
        """A scenario's last recovery, unarmed, run where this engine may run: what it said. Raises on a failure."""

    def recover_again(self, folder: Path, tickets: str | None) -> Callable[[], int] | None:
        """Invariant 7's further recovery for :func:`~labkit.invariants.check_invariants` (``recover_again``),
        or None for labkit's own, which the invariants run themselves with :meth:`coordinator_class`."""
        return lambda: self.recovered_again(folder, tickets)

    def recovered_again(self, folder: Path, tickets: str | None) -> int:
        """How many runs a further recovery resumed (invariant 7 wants 0), in a forked child."""
        out = Path(folder) / f".again-{self.name}.txt"
        end = in_child(lambda: print(self.recover(folder, NO_CRASH, tickets)), output=(out, out.with_suffix(".err")))
        if end.code != 0:
            raise RuntimeError(f"the {self.name} recovery run for invariant 7 ended {end}")
        return int(out.read_text().strip() or 0)
