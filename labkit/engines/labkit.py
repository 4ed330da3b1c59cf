"""labkit's own coordinator as an engine: its state rows, ``python -m labkit run`` and ``recover``.

The reference the other engines are compared with (12_crash_explorer, 14_choosing_an_engine).
It records a read only when the evidence commits with the step, so a kill anywhere between the
provider's answer and that commit costs a second read: its read window is
:data:`~labkit.crashpoints.BETWEEN_READ_AND_COMMIT`. ``bug`` switches on one of the deliberately
broken coordinators of :mod:`labkit.lab.naive`, for the explorer, which hands the engine that
variant's class (``variant``): the engines import nothing of the lessons' machinery.

The functions below are what the commands do, in the calling process; the crash explorer's random
kills call them too.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from ..coordinator import Coordinator
from ..crashpoints import BETWEEN_READ_AND_COMMIT, NO_CRASH, CrashPlan, CrashPoint
from ..database import read_transaction
from ..effects import Tickets
from ..errors import BadInput, LabError
from ..recovery import recover
from ..store import connect, connect_readonly, find_run_txn
from .base import INCIDENT, Engine, provider_for


def _effects(tickets: str | None) -> Tickets | None:
    """``--tickets URL``: the ticket each completed run owes, at that service."""
    return Tickets(tickets) if tickets is not None else None


def drive_run(db: Path, crash: CrashPlan, tickets: str | None, kind: type[Coordinator], incident: str = INCIDENT) -> None:
    """What ``python -m labkit run --tickets URL`` does, in this process."""
    with closing(connect(db)) as conn:
        kind(conn, provider_for(db), crash=crash, effects=_effects(tickets)).drive(incident)


def recover_runs(db: Path, crash: CrashPlan, tickets: str | None, kind: type[Coordinator]) -> tuple[str, int]:
    """What ``python -m labkit recover --tickets URL`` does: what it said, and how many runs it resumed.

    Raises on the first run it could not finish.
    """
    resumed = recover(db, provider_for(db), crash=crash, effects=_effects(tickets), coordinator_class=kind)
    for result in resumed:
        if result.error is not None:
            raise result.error
    return "; ".join(result.outcome for result in resumed) or "nothing to recover", len(resumed)


def restart_run(db: Path, crash: CrashPlan, tickets: str | None, kind: type[Coordinator], incident: str = INCIDENT) -> str:
    """What a supervisor does after a death: recover the runs there are; a run whose row never
    committed is not there to recover, so its command is simply given again."""
    if recorded_step(db, incident) == "no run":
        drive_run(db, crash, tickets, kind, incident)
        return "ran it again: no run had been recorded"
    return recover_runs(db, crash, tickets, kind)[0]


def recorded_step(db: Path, incident: str = INCIDENT) -> str:
    """The run's recorded step, or ``no run`` when the process died before the run row committed."""
    try:
        with closing(connect_readonly(db)) as conn, read_transaction(conn):
            run = find_run_txn(conn, incident)
    except LabError:  # no file yet, or killed while the schema was being made: nothing recorded
        return "no run"
    return "no run" if run is None else run.step.value


@dataclass(frozen=True)
class LabkitEngine(Engine):
    """labkit's coordinator (or, with ``bug``, one of its broken variants) and ``python -m labkit recover``."""

    name: ClassVar[str] = "labkit"
    read_window: ClassVar[frozenset[CrashPoint]] = BETWEEN_READ_AND_COMMIT
    #: A deliberately broken labkit coordinator (:data:`labkit.lab.naive.CRASH_BUGS`), for the explorer:
    #: its name, and the class :meth:`with_variant` sets.
    bug: str | None = None
    variant: type[Coordinator] = Coordinator

    @classmethod
    def configured(cls, *, system_url: str | None = None, bug: str | None = None) -> LabkitEngine:
        if system_url is not None:
            raise BadInput("a system database URL is for the dbos engine only")
        return cls(bug)

    @property
    def flows(self) -> tuple[str, ...]:
        """Both flows; a broken variant is a coordinator, so it plays the ``run`` flow only."""
        return ("run",) if self.bug is not None else ("run", "work")

    def coordinator_class(self) -> type[Coordinator]:
        return self.variant

    def with_variant(self, variant: type[Coordinator]) -> LabkitEngine:
        """This engine driving ``variant`` (the broken coordinator its ``bug`` names) instead of labkit's own."""
        return replace(self, variant=variant)

    def scratch_run(self, folder: Path) -> None:
        drive_run(self.db(folder), NO_CRASH, None, Coordinator)  # labkit's own coordinator, whatever variant this engine drives

    def drive(self, folder: Path, crash: CrashPlan, tickets: str | None, incident: str = INCIDENT) -> str:
        drive_run(self.db(folder), crash, tickets, self.coordinator_class(), incident=incident)
        return "drove it"

    def recover(self, folder: Path, crash: CrashPlan, tickets: str | None) -> int:
        return recover_runs(self.db(folder), crash, tickets, self.coordinator_class())[1]

    def restart(self, folder: Path, crash: CrashPlan, tickets: str | None, incident: str = INCIDENT) -> str:
        return restart_run(self.db(folder), crash, tickets, self.coordinator_class(), incident=incident)

    def final_recovery(self, folder: Path, tickets: str | None) -> str:
        """``recover`` in this process: labkit has no process-wide state to keep out of a notebook's kernel."""
        return recover_runs(self.db(folder), NO_CRASH, tickets, self.coordinator_class())[0]

    def recover_again(self, folder: Path, tickets: str | None) -> Callable[[], int] | None:
        return None  # check_invariants runs labkit's own second recovery, with coordinator_class()
