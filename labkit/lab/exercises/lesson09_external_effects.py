"""Lesson 09 (09_external_effects): the reconciliation decision, against every fault of a real ticket service.
"""

from __future__ import annotations

import random
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
from ...ticket_client import KeyLookup, all_tickets
from ..processes import _FOLDERS, race
from ..progress import Progress
from ..ticket_service import Faults, ticket_service
from .runner import answer_is_a_function, clear_trials, new_trial, one_line, own_work, refuse_if_called, watching_labkit

#: The incident every case of Exercise 9.1 opens a ticket for.
RECONCILED_INCIDENT = "INC-1003"

#: The cases of :func:`reconciliation_trials`, in the order the check reads them: (name, the
#: ticket service's fault, --fault-times, where the run is killed, the look-up's fault).
#: Between them, every fault mode of the service, both crash points around the send, and a
#: look-up that gets no answer or a refusal (from a service that, unknown to the client,
#: keeps no keys: a resend there is a second ticket).
RECONCILIATION_CASES: tuple[tuple[str, str | None, int | None, str | None, str | None], ...] = (
    ("killed after_send", None, None, "after_send", None),
    ("no-idempotency, killed after_send", "no-idempotency", None, "after_send", None),
    ("fail-before-commit x1, killed after_send", "fail-before-commit", 1, "after_send", None),
    ("slow-after-commit x1", "slow-after-commit", 1, None, None),
    ("drop-after-commit", "drop-after-commit", None, None, None),
    ("no-idempotency, killed before_send", "no-idempotency", None, "before_send", None),
    ("no keys, look-up unanswered, killed after_send", "no-idempotency", None, "after_send", "unanswered"),
    ("no keys, look-up refused, killed after_send", "no-idempotency", None, "after_send", "refused"),
)

#: What a look-up's first word says about the ticket: knowable (found, absent) or not.
UNKNOWABLE = ("cannot_query", "unknown", "refused", "duplicate", "invalid")


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


def reconciliation_trials(decide: Callable | None = None,
                          judge: Callable[[ReconciliationTrial], None] | None = None) -> list[ReconciliationTrial]:
    """Every case of :data:`RECONCILIATION_CASES`, recovered with ``decide`` (labkit's own by default).

    ``judge``, if given, is called with each trial as soon as it is recovered, in the cases' order:
    what it raises ends the trials there (the services are stopped all the same), so a wrong
    answer hears about its first failing case without waiting for the rest.

    Each case has a workspace and a ticket service of its own (a real HTTP server in a forked child
    process, its own SQLite store). ``python -m labkit run --tickets URL`` runs in a child,
    killed by SIGKILL at the case's crash point or meeting the service's fault; all the runs
    start together; then each case is recovered in turn (about 6 s in all on an idle two-core
    machine: the unanswered look-up waits out its 1 s timeout each time). A progress bar shows.
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
    bar = Progress(len(RECONCILIATION_CASES) + 1)  # a picture nbval does not compare: the runs, then each case
    with ExitStack() as stack:
        stack.callback(bar.finish)
        spaces, services = [], []
        for _, fault, times, _, lookup in RECONCILIATION_CASES:
            space = new_trial("09-exercise")
            spaces.append(space)
            # A real HTTP server in a process of its own, forked from this one (a new Python
            # would spend a tenth of a second starting, seven tries a check, eight services a try).
            faults = Faults(fault, times, lookup=lookup)
            services.append(_Service(stack.enter_context(ticket_service(space.folder / "tickets.db", faults))))
        runs = race(*[
            ("run", "--db", space.db, "--incident", incident, "--tickets", service.url, *(("--crash-at", point) if point else ()))
            for space, service, (_, _, _, point, _) in zip(spaces, services, RECONCILIATION_CASES, strict=True)
        ])
        bar.step()
        for (case, *_), space, service, ran in zip(RECONCILIATION_CASES, spaces, services, runs, strict=True):
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
            bar.step()
            if judge is not None:
                judge(trials[-1])
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


#: One hint per look-up that settles nothing, for the feedback: why it is not "absent".
_NOT_ABSENT = {
    "cannot_query": "this service keeps no keys (501): a second POST is a second ticket",
    "unknown": "the look-up got no answer (a timeout): that says nothing about what the service holds, "
               "not even whether it keeps keys",
    "refused": "the look-up was refused (429, try later): a refusal says nothing about what the service holds",
    "duplicate": "the service lists two tickets under the one key: which one stands is not for a program to pick",
    "invalid": "the answer could not be believed (a ticket for another key or incident)",
}


def _probes(rng: random.Random) -> list[KeyLookup]:
    """A look-up of every kind, with ticket ids, statuses and details drawn at random (a memorised table fails)."""
    key = f"op-{rng.getrandbits(64):016x}"

    def ticket() -> dict[str, str]:
        return {"ticket": f"T-{rng.randint(2, 9999):04d}", "key": key, "incident": RECONCILED_INCIDENT}

    probes = [
        KeyLookup("found", (ticket(),), 200),
        KeyLookup("absent", (), 200),
        KeyLookup("duplicate", (ticket(), ticket()), 200, "2 tickets under one key"),
        KeyLookup("cannot_query", (), 501, "this service ignores Idempotency-Key"),
        KeyLookup("unknown", (), rng.choice([None, 500, 502, 503]), "no answer"),
        KeyLookup("refused", (), rng.choice([400, 403, 429]), "try again later"),
        KeyLookup("invalid", (), 200, "refused the answer: a ticket for another key"),
    ]
    rng.shuffle(probes)
    return probes


def _expected(lookup: KeyLookup) -> str:
    return {"found": "record", "absent": "send_again"}.get(lookup.outcome, "leave_uncertain")


def _judge(trial: ReconciliationTrial) -> None:
    """One recovered case of the check, judged: the first rule it breaks, as the learner's feedback."""
    told = _what_it_was_told(trial)
    first = trial.asked[0].split()[0] if trial.asked else ""
    if trial.tickets > 1:
        why = _NOT_ABSENT.get(first, "a second POST made a second ticket")
        raise AssertionError(
            f"{trial.case}: {trial.tickets} tickets for {RECONCILED_INCIDENT} at the destination after recovery "
            f"({told}). {why[0].upper() + why[1:]}. "
            "When nobody can know, leave it uncertain for a person"
        )
    if trial.error is not None and ("CHECK constraint" in trial.error or "RuleViolation" in trial.error):
        raise AssertionError(
            f"{trial.case}: {told}. That look-up names no ticket, so recording would mark the effect done without the "
            "destination's ticket (the effects table's CHECK refused it). Record only a ticket the destination names"
        )
    if trial.state == "done" and not trial.held:
        raise AssertionError(f"{trial.case}: the effect is done as {trial.ticket}, which the destination does not hold under its key")
    unknowable = first in UNKNOWABLE
    if unknowable and trial.state != "uncertain":
        raise AssertionError(f"{trial.case}: {told}, and the effect ended {trial.state}. {_NOT_ABSENT[first]}: "
                             "nobody can know whether the ticket exists; leave it uncertain, listed for a person")
    if not unknowable and trial.state != "done":
        hint = {"found": "the destination holds the ticket and named it: record it",
                "absent": "nothing is stored under this key, and a resend under the same key cannot duplicate (it "
                          "makes the one ticket, or, with the first request still in flight, a replay): send it again"}
        raise AssertionError(f"{trial.case}: {told}, and the effect ended {trial.state}"
                             + (f" ({trial.error})" if trial.error else "") + f". {hint.get(first, 'It could be known')}")
    if not trial.again_unchanged:
        raise AssertionError(f"{trial.case}: a second recovery changed rows or tickets ({told}): recovering again must change nothing")
    if trial.broken:
        raise AssertionError(f"{trial.case}: invariants {', '.join(map(str, trial.broken))} broke afterwards ({told})")


@one_line
def check_reconciliation(decide: Callable) -> None:
    """``decide(lookup) -> "record" | "send_again" | "leave_uncertain"``: what recovery does with the destination's answer.

    ``lookup`` is a :class:`labkit.ticket_client.KeyLookup`: ``lookup.outcome`` is ``"found"``
    (``lookup.ticket`` names the ticket), ``"absent"``, or something that settles nothing
    (``"cannot_query"``: the service keeps no keys; ``"unknown"``: no answer; ``"refused"``;
    ``"duplicate"``; ``"invalid"``). Every case of :func:`reconciliation_trials` runs with it
    (every fault mode, both crash points around the send, a look-up unanswered and one
    refused, a real HTTP service in a child process). In each: at most one ticket for the
    incident at the destination; never done without the destination's ticket; a knowable
    outcome ends done, an unknowable one uncertain; a second recovery changes nothing; and
    ``labkit.check_invariants`` holds all nine. Then every kind of look-up once more, with
    ticket ids and statuses drawn at random.
    """
    clear_trials()
    answer_is_a_function(decide, "def my_decide(lookup): ...")
    own_work(decide, "reconciliation_decision", "_reconcile", "open_ticket", "recover", "DECISIONS")
    with watching_labkit("reconciliation_decision", "_reconcile", "open_ticket", "recover") as calls:

        def judge(trial: ReconciliationTrial) -> None:
            # labkit's own decision, reached under any name, is refused at the first case that asked
            # it, not after all eight (each waits on a real service).
            refuse_if_called(calls)
            _judge(trial)

        trials = reconciliation_trials(decide, judge=judge)
    refuse_if_called(calls)
    with watching_labkit("reconciliation_decision", "_reconcile", "open_ticket", "recover") as calls:
        for lookup in _probes(random.Random()):
            said = decide(lookup)
            if said != _expected(lookup):
                about = f"{lookup.outcome} {lookup.ticket}" if lookup.ticket else lookup.outcome
                why = _NOT_ABSENT.get(lookup.outcome, "does your decide look at the outcome, or at one ticket id it saw?")
                raise AssertionError(f"a look-up that said {about} (status {lookup.status}), and your decide answered "
                                     f"{said!r}: {why}")
    refuse_if_called(calls)
    by_case = {trial.case: trial for trial in trials}
    found = [t.case for t in trials if t.asked and t.asked[0].startswith("found")]
    absent = [t.case for t in trials if t.asked and t.asked[0].startswith("absent")]
    cannot = [t.case for t in trials if t.asked and t.asked[0].split()[0] in UNKNOWABLE]
    never = [t.case for t in trials if not t.asked]
    print(f"✓ found by key → recorded, done with the destination's one ticket: {'; '.join(found)}")
    print(f"✓ absent → sent again under the same key, done, one ticket: {'; '.join(absent)}")
    print(f"✓ no answer, a refusal, or no keys → left uncertain for a person, one ticket: {'; '.join(cannot)}")
    print(f"✓ never sent, so sent without asking: {'; '.join(never)}; in all {len(by_case)} cases a second recovery changed "
          "nothing and invariants 1-9 held; every other kind of look-up left uncertain")
