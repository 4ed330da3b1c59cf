"""The recovery worker: reopen the database and finish what a dead process left.

It trusts nothing but the stored rows. A run at ``not_inspected`` is inspected (the
provider is read, possibly again: N1); a run at ``evidence_recorded`` is completed from
its committed evidence, without a read; a completed run is left alone. So running it twice
changes nothing the second time (invariant 7). It opens its own connection, as a separate
worker process would. Taught in 05_crash_and_reread and 06_single_receipt.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from .clock import Clock
from .coordinator import WORKFLOW_VERSION, Coordinator, EffectState, OwedEffect
from .crashpoints import NO_CRASH, CrashPlan
from .database import read_transaction, translate
from .errors import LabError
from .provider import ReadAdapter
from .receipts import Receipt
from .steps import Step
from .store import connect, list_runs_txn


@dataclass(frozen=True)
class Resumed:
    """What recovery did with one run that was unfinished when it looked."""

    incident: str
    from_step: Step
    read_provider: bool = False
    completed: bool = False  # this worker committed the completion
    receipt: Receipt | None = None
    error: LabError | None = None
    effect: EffectState | None = None  # with effects: where the run's owed effect (its ticket) stands now

    @property
    def outcome(self) -> str:
        if self.error is not None:
            return f"failed: {self.error}"
        read = "read the provider" if self.read_provider else "no read"
        assert self.receipt is not None  # every run that did not fail has one
        ticket = ""
        if self.effect is not None:
            ticket = f"; ticket {self.effect.ticket}" if self.effect.state == "done" else f"; ticket {self.effect.state}"
        if self.from_step is Step.REPORT_COMPLETED:
            # An effect still uncertain was asked about, and nobody can know: it is not reconciled.
            settled = "left for a person" if self.effect is not None and self.effect.state == "uncertain" else "reconciled"
            return f"completed earlier, receipt {self.receipt.receipt_id}{ticket} (its effect {settled})"
        if not self.completed:
            return f"{read}; already completed by another worker, receipt {self.receipt.receipt_id}{ticket}"
        if self.read_provider:
            return f"read the provider; receipt {self.receipt.receipt_id}{ticket}"
        return f"completed from committed evidence, no read; receipt {self.receipt.receipt_id}{ticket}"


def recover(
    db_path: str | Path,
    provider: ReadAdapter,
    *,
    clock: Clock | None = None,
    crash: CrashPlan = NO_CRASH,
    workflow_version: int = WORKFLOW_VERSION,
    progress: Callable[[Resumed], None] | None = None,
    coordinator_class: type[Coordinator] = Coordinator,
    effects: OwedEffect | None = None,
) -> list[Resumed]:
    """Resume every unfinished run from its recorded step; return one :class:`Resumed` per run.

    Runs written by another workflow version are refused before anything is touched: this
    release cannot tell what their step means. After that, one run failing (its provider
    answer rejected, the provider down) does not stop the others; the failure is recorded
    in its ``Resumed.error``. ``progress`` is called after each run, so a caller can report
    as it goes rather than lose the report if the process dies half way. The database must
    exist: recovery of a mistyped path must not create an empty one.
    ``coordinator_class`` lets a lesson recover with a deliberately broken variant
    (:mod:`labkit.lab.naive`). With ``effects`` (:class:`labkit.effects.Tickets`), completed runs
    whose effect is still owed or uncertain (:meth:`~labkit.coordinator.OwedEffect.owed_txn`)
    are driven again, which reconciles them; without it, effects are left alone.
    """
    with closing(connect(db_path, create=False)) as conn:
        coordinator = coordinator_class(conn, provider, clock=clock, crash=crash, workflow_version=workflow_version, effects=effects)
        with read_transaction(conn):
            owed = effects.owed_txn(conn) if effects is not None else set()
            unfinished = [run for run in list_runs_txn(conn) if run.step is not Step.REPORT_COMPLETED or run.incident in owed]
        for run in unfinished:
            coordinator.check_version(run)
        results = []
        for run in unfinished:
            try:
                done = coordinator.drive(run.incident)
                result = Resumed(run.incident, run.step, done.read_provider, done.completed, done.receipt, effect=done.effect)
            except LabError as error:
                result = Resumed(run.incident, run.step, error=error)
            except sqlite3.Error as error:  # a lock held too long on this run: report it, go on
                result = Resumed(run.incident, run.step, error=translate(error, db_path))
            results.append(result)
            if progress is not None:
                progress(result)
        return results
