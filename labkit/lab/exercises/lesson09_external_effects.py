"""Lesson 09 (09_external_effects): the reconciliation decision, against every fault of a real ticket service.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack, closing
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from ...clock import TickingClock, parse_instant
from ...database import read_transaction
from ...effects import DECISIONS, Tickets, find_effect_txn, reconciliation_decision
from ...invariants import check_invariants
from ...recovery import recover
from ...store import connect_readonly, latest_time_txn, snapshot
from ...ticket_client import all_tickets
from ..processes import _FOLDERS, race
from ..ticket_service import Faults, ticket_service
from .runner import answer_is_a_function, clear_trials, new_trial, one_line, own_work

#: The incident every case of Exercise 9.1 opens a ticket for.
RECONCILED_INCIDENT = "INC-1003"

#: The cases of :func:`reconciliation_trials`, in the order the check reads them: (name, the
#: ticket service's fault, --fault-times, where the run is killed). Between them, every fault
#: mode of the service and both crash points around the send.
RECONCILIATION_CASES: tuple[tuple[str, str | None, int | None, str | None], ...] = (
    ("killed after_send", None, None, "after_send"),
    ("no-idempotency, killed after_send", "no-idempotency", None, "after_send"),
    ("fail-before-commit x1, killed after_send", "fail-before-commit", 1, "after_send"),
    ("slow-after-commit x1", "slow-after-commit", 1, None),
    ("drop-after-commit", "drop-after-commit", None, None),
    ("no-idempotency, killed before_send", "no-idempotency", None, "before_send"),
)


@dataclass(frozen=True)
class ReconciliationTrial:
    """One case of :func:`reconciliation_trials`: what the run left, what recovery was told and decided, what it left."""

    case: str
    run: str  # how the run's process ended: exit 1, killed by SIGKILL
    tickets_after_run: int
    asked: tuple[str, ...]  # what each look-up by key said during the first recovery ("found T-0001", "absent", ...)
    decided: tuple[str, ...]  # what decide answered to each
    error: str | None  # the first recovery's failure for the run, one line, folders cut
    state: str  # the effect after one recovery
    ticket: str | None
    tickets: int  # tickets at the destination after one recovery
    held: bool  # a done effect's ticket is one the destination holds, under the effect's key (or none)
    again_unchanged: bool  # a second recovery changed no row and no ticket
    broken: tuple[int, ...]  # the invariants (labkit.check_invariants, 1-9) that failed afterwards

    def row(self) -> dict[str, object]:
        return {
            "case": self.case, "the run": self.run, "tickets": self.tickets_after_run,
            "look-up by key": "; ".join(self.asked) or "(not asked)", "effect": self.state, "ticket": self.ticket or "",
            "tickets after": self.tickets, "2nd recovery": "no change" if self.again_unchanged else "CHANGED",
            "broken invariants": ", ".join(map(str, self.broken)) or "none",
        }


def _clock_after(db: Path) -> Any:
    """A ticking clock one second past the latest time stored in ``db``, as a recovering process's pinned clock."""
    with closing(connect_readonly(db)) as conn, read_transaction(conn):
        latest = latest_time_txn(conn)
    if latest is None:
        return TickingClock()
    return TickingClock((parse_instant(latest) + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ"))


def reconciliation_trials(decide: Callable | None = None) -> list[ReconciliationTrial]:
    """Every case of :data:`RECONCILIATION_CASES`, recovered with ``decide`` (labkit's own by default).

    Each case has a workspace and a ticket service of its own (a real HTTP server in a forked child
    process, its own SQLite store). ``python -m labkit run --tickets URL`` runs in a child,
    killed by SIGKILL at the case's crash point or meeting the service's fault; all the runs
    start together, so the cases take about as long as the slowest (a 1 s client timeout).
    Then, in this process, ``labkit.recover(..., effects=Tickets(URL, decide=decide))`` twice, and
    ``labkit.check_invariants`` with the service. Every service is stopped before returning.
    """
    chosen = decide or reconciliation_decision
    asked: list[str] = []
    decided: list[str] = []

    def asking(lookup: Any) -> str:
        try:
            said = chosen(lookup)
        except Exception as error:  # the learner's error, as one line of feedback
            raise AssertionError(f"your decide raised {type(error).__name__}: {error} when the look-up said {lookup.outcome!r}"
                                 .splitlines()[0]) from None
        if said not in DECISIONS:
            raise AssertionError(f"your decide returned {said!r} when the look-up said {lookup.outcome!r}: "
                                 "return 'record', 'send_again' or 'leave_uncertain'")
        asked.append(f"{lookup.outcome} {lookup.ticket}" if lookup.ticket else lookup.outcome)
        decided.append(said)
        return said

    incident = RECONCILED_INCIDENT
    trials: list[ReconciliationTrial] = []
    with ExitStack() as stack:
        spaces, services = [], []
        for _, fault, times, _ in RECONCILIATION_CASES:
            space = new_trial("09-exercise")
            spaces.append(space)
            # A real HTTP server in a process of its own, forked from this one (a new Python
            # would spend a third of a second starting, seven tries a check, six services a try).
            services.append(_Service(stack.enter_context(ticket_service(space.folder / "tickets.db", Faults(fault, times)))))
        runs = race(*[
            ("run", "--db", space.db, "--incident", incident, "--tickets", service.url, *(("--crash-at", point) if point else ()))
            for space, service, (_, _, _, point) in zip(spaces, services, RECONCILIATION_CASES, strict=True)
        ])
        for (case, _, _, _), space, service, ran in zip(RECONCILIATION_CASES, spaces, services, runs, strict=True):
            after_run = len(service.tickets())
            asked.clear()
            decided.clear()
            recovered = recover(space.db, space.provider(), clock=_clock_after(space.db), effects=Tickets(service.url, decide=asking))
            failure = next((r.error for r in recovered if r.error is not None), None)
            first_asked, first_decided = tuple(asked), tuple(decided)
            with closing(connect_readonly(space.db)) as conn:
                before = snapshot(conn)
                with read_transaction(conn):
                    effect = find_effect_txn(conn, incident)
            assert effect is not None, f"{case}: the run recorded no effect"  # the run committed its intent before any send
            held_tickets = service.tickets()
            held = effect.state != "done" or any(
                t["ticket"] == effect.ticket and t["key"] in (effect.operation_key, None) for t in held_tickets
            )
            recover(space.db, space.provider(), clock=_clock_after(space.db), effects=Tickets(service.url, decide=asking))
            with closing(connect_readonly(space.db)) as conn:
                unchanged = snapshot(conn) == before and service.tickets() == held_tickets
            results = check_invariants(space.db, space.call_log, {incident: 1}, space.provider(), effects=Tickets(service.url))
            trials.append(ReconciliationTrial(
                case, ran.status, after_run, first_asked, first_decided,
                _FOLDERS.sub("", f"{type(failure).__name__}: {failure}".splitlines()[0]) if failure else None,
                effect.state, effect.ticket, len(held_tickets), held, unchanged, tuple(r.number for r in results if not r.held),
            ))
    return trials


@dataclass(frozen=True)
class _Service:
    """A forked ticket service's URL, and what it holds."""

    url: str

    def tickets(self) -> list[dict[str, Any]]:
        return all_tickets(self.url)


def _what_it_was_told(trial: ReconciliationTrial) -> str:
    pairs = [f"the look-up said {said} and your decide answered {answer!r}"
             for said, answer in zip(trial.asked, trial.decided, strict=True)]
    return "; then ".join(pairs) or "nothing was asked"


@one_line
def check_reconciliation(decide: Callable) -> None:
    """``decide(lookup) -> "record" | "send_again" | "leave_uncertain"``: what recovery does with the destination's answer.

    ``lookup`` is a :class:`labkit.ticket_client.KeyLookup`: ``lookup.outcome`` is ``"found"``
    (``lookup.ticket`` names the ticket), ``"absent"``, or something that settles nothing
    (``"cannot_query"``: the service keeps no keys; ``"unknown"``, ``"refused"``). Every case
    of :func:`reconciliation_trials` runs with it (every fault mode, both crash points around
    the send, a real HTTP service in a child process). In each: at most one ticket for the
    incident at the destination; never done without the destination's ticket; a knowable
    outcome ends done, an unknowable one uncertain; a second recovery changes nothing; and
    ``labkit.check_invariants`` holds all nine.
    """
    clear_trials()
    answer_is_a_function(decide, "def my_decide(lookup): ...")
    own_work(decide, "reconciliation_decision", "_reconcile", "open_ticket", "recover")
    trials = reconciliation_trials(decide)
    for trial in trials:
        told = _what_it_was_told(trial)
        if trial.tickets > 1:
            raise AssertionError(
                f"{trial.case}: {trial.tickets} tickets for {RECONCILED_INCIDENT} at the destination after recovery ({told}). "
                "This service keeps no keys: a second POST is a second ticket. When nobody can know, leave it uncertain for a person"
            )
        if trial.error is not None and ("CHECK constraint" in trial.error or "RuleViolation" in trial.error):
            raise AssertionError(
                f"{trial.case}: {told}. That look-up names no ticket, so recording would mark the effect done without the "
                "destination's ticket (the effects table's CHECK refused it). Record only a ticket the destination names"
            )
        if trial.state == "done" and not trial.held:
            raise AssertionError(f"{trial.case}: the effect is done as {trial.ticket}, which the destination does not hold under its key")
        unknowable = any(said.startswith("cannot_query") for said in trial.asked)
        if unknowable and trial.state != "uncertain":
            raise AssertionError(f"{trial.case}: {told}, and the effect ended {trial.state}. Nobody can know whether the ticket exists: "
                                 "leave it uncertain, listed for a person")
        if not unknowable and trial.state != "done":
            hint = {"found": "the destination holds the ticket and named it: record it",
                    "absent": "nothing is stored under this key, and a resend under the same key cannot duplicate (the service "
                              "would replay it): send it again"}
            last = trial.asked[-1].split()[0] if trial.asked else ""
            raise AssertionError(f"{trial.case}: {told}, and the effect ended {trial.state}"
                                 + (f" ({trial.error})" if trial.error else "") + f". {hint.get(last, 'It could be known')}")
        if not trial.again_unchanged:
            raise AssertionError(f"{trial.case}: a second recovery changed rows or tickets ({told}): recovering again must change nothing")
        if trial.broken:
            raise AssertionError(f"{trial.case}: invariants {', '.join(map(str, trial.broken))} broke afterwards ({told})")
    by_case = {trial.case: trial for trial in trials}
    found = [t.case for t in trials if t.asked and t.asked[0].startswith("found")]
    absent = [t.case for t in trials if t.asked and t.asked[0].startswith("absent")]
    cannot = [t.case for t in trials if t.asked and t.asked[0].startswith("cannot_query")]
    never = [t.case for t in trials if not t.asked]
    print(f"✓ found by key → recorded, done with the destination's one ticket: {'; '.join(found)}")
    print(f"✓ absent → sent again under the same key, done, one ticket: {'; '.join(absent)}")
    print(f"✓ cannot be asked → left uncertain for a person, still one ticket, nothing sent blindly: {'; '.join(cannot)}")
    print(f"✓ never sent, so sent without asking: {'; '.join(never)}; in all {len(by_case)} cases a second recovery changed "
          "nothing and invariants 1-9 held")
