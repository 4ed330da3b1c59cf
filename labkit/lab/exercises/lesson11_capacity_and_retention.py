"""Lesson 11 (11_capacity_and_retention): which raw diagnostics a retention run may remove.
"""

from __future__ import annotations

import random
import secrets
import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass

from ...clock import TickingClock
from ...effects import Tickets
from ...errors import RunFailure
from ...provider import list_incidents
from ...retention import _UNFINISHED_SQL, retain
from ..lesson import restart_answers
from ..ticket_service import TicketService
from ..workspace import Workspace
from .runner import (
    answer_is_a_function,
    changed_tables,
    clear_trials,
    new_trial,
    one_line,
    own_work,
    refuse_if_called,
    source_of,
    tables_of,
    watching_labkit,
)

#: When Exercise 11.1's retention runs (a pinned clock), and how many days a raw diagnostic is kept.
RETENTION_AT = "2026-04-15T00:00:00Z"
RETENTION_DAYS = 30
#: When the "recent" runs of :data:`RETENTION_CASES` ran: five days before RETENTION_AT, inside the 30.
RECENT_AT = "2026-04-10T09:00:00Z"

#: The two databases of Exercise 11.1, incident -> what its run is. The old runs ran at the lessons'
#: pinned instant (2026-03-02), six weeks before the retention. The roles are dealt differently in
#: each database, so no fixed list of incidents passes both.
RETENTION_CASES: tuple[dict[str, str], ...] = (
    {"INC-1003": "finished", "INC-1015": "finished", "INC-1001": "unfinished", "INC-1004": "uncertain",
     "INC-1006": "recent", "INC-1008": "ticketed", "INC-1009": "intended"},
    {"INC-1001": "finished", "INC-1016": "ticketed", "INC-1006": "unfinished", "INC-1003": "uncertain",
     "INC-1004": "recent", "INC-1010": "intended", "INC-1011": "finished"},
)
#: The roles of one database of Exercise 11.1, as :data:`RETENTION_CASES` holds them.
ROLES = ("finished", "finished", "unfinished", "uncertain", "recent", "ticketed", "intended")


def dealt_cases(chance: random.Random) -> tuple[dict[str, str], ...]:
    """Two databases' roles, dealt at random for one try: seven incidents each, every role in each.

    :data:`RETENTION_CASES` is one such deal; a check deals new ones each try, so an answer that
    learnt the ids from the feedback (which names them) cannot pass the next try.
    """
    incidents = list_incidents()
    return tuple(dict(zip(chance.sample(incidents, len(ROLES)), chance.sample(ROLES, len(ROLES)), strict=True)) for _ in range(2))


#: The roles whose raw diagnostic a correct selection removes.
DUE_ROLES = ("finished", "ticketed")
#: A ticket service nobody listens on: a send is refused at once, so the effect stays ``intended``.
UNREACHABLE = "http://127.0.0.1:9"
_WHAT_IT_IS = {
    "finished": "report_completed six weeks ago, nothing owed",
    "unfinished": "at evidence_recorded: a crash stopped it, recovery will finish it",
    "uncertain": "report_completed, but its ticket effect is uncertain: a person or recovery still has to settle it",
    "recent": "report_completed five days ago, inside the 30-day retention",
    "ticketed": "report_completed six weeks ago, its ticket effect done: nothing owed",
    "intended": "report_completed, but its ticket effect is still intended (the send never got through): it owes its ticket",
}


def retention_case(space: Workspace, roles: dict[str, str]) -> None:
    """Leave one run per incident in ``space``'s database as ``roles`` says (see :data:`RETENTION_CASES`).

    Each is made by labkit's own coordinator: a run driven to the end (at the lessons' pinned
    instant, or at :data:`RECENT_AT`), one left at ``evidence_recorded`` as a crash after its
    evidence commit leaves it, and one whose ticket went to a service that drops its answer
    after committing (a real ticket service in a child process), which leaves its effect
    ``uncertain``.
    """
    with closing(space.connect()) as conn:
        for incident, role in roles.items():
            if role == "finished":
                space.coordinator(conn).drive(incident)
            elif role == "recent":
                space.coordinator(conn, clock=TickingClock(RECENT_AT)).drive(incident)
            elif role == "unfinished":
                space.coordinator(conn).start(incident)
                space.coordinator(conn).inspect(incident)
            elif role == "intended":
                try:
                    space.coordinator(conn, effects=Tickets(UNREACHABLE)).drive(incident)
                except RunFailure:
                    pass  # the send was refused: the effect is left intended, as intended here
            elif role not in ("uncertain", "ticketed"):
                raise ValueError(f"no such role {role!r} for {incident}: {', '.join(_WHAT_IT_IS)}")
        ticketed = [incident for incident, role in roles.items() if role == "ticketed"]
        if ticketed:
            with TicketService(space.folder / "tickets-done.db") as service:
                for incident in ticketed:
                    space.coordinator(conn, effects=Tickets(service.url)).drive(incident)
        uncertain = [incident for incident, role in roles.items() if role == "uncertain"]
        if uncertain:
            with TicketService(space.folder / "tickets.db", fault="drop-after-commit") as service:
                for incident in uncertain:
                    try:
                        space.coordinator(conn, effects=Tickets(service.url)).drive(incident)
                    except RunFailure:
                        pass  # the answer was dropped: the effect is left uncertain, as intended here


@dataclass(frozen=True)
class RetentionTrial:
    """One database of Exercise 11.1 after a retention run: what it kept, and what else changed."""

    roles: dict[str, str]
    kept: tuple[str, ...]  # incidents whose raw diagnostic is still stored
    changed: tuple[str, ...]  # tables, other than diagnostics and retentions, whose rows changed
    answers_before: dict[str, dict]
    answers_after: dict[str, dict]
    returned: tuple[str, ...] = ()  # what the selection returned


def retention_trial(roles: dict[str, str], due: Callable | None = None) -> RetentionTrial:
    """A fresh database left as ``roles`` says, then ``labkit.retention.retain(..., due=due)`` at :data:`RETENTION_AT`.

    ``due`` None is labkit's own selection. Every other table and the three restart answers
    of every run are read before and after.
    """
    def asked(conn: sqlite3.Connection, cutoff: str) -> list[str]:
        assert due is not None
        writes = conn.total_changes
        try:
            said = due(conn, cutoff)
        except Exception as error:  # the learner's error, as one line of feedback
            raise AssertionError(f"your selection raised {type(error).__name__}: {error}".splitlines()[0]) from None
        try:
            chosen: list[object] = list(said) if not isinstance(said, (str, bytes)) else [said]
        except TypeError:
            chosen = [said]
        if said is None or not all(isinstance(item, str) for item in chosen):
            raise AssertionError(f"the selection should return a list of incident ids (an empty list if none is due), not {said!r}"[:300])
        if conn.total_changes != writes:
            raise AssertionError("your selection wrote to the database itself: a selection only reads (SELECT) and returns "
                                 "the ids; retain removes what it names, in its own transaction")
        returned.extend(str(item) for item in chosen)
        return [str(item) for item in chosen]

    returned: list[str] = []
    trial = new_trial("11-exercise")
    retention_case(trial, roles)
    before = tables_of(trial)
    answers_before = {incident: restart_answers(trial.db, incident).as_row() for incident in sorted(roles)}
    retain(trial.db, RETENTION_DAYS, TickingClock(RETENTION_AT), due=asked if due is not None else None)
    after = tables_of(trial)
    kept = tuple(row[0] for row in after["diagnostics"])
    changed = changed_tables(before, after, apart_from=("diagnostics", "retentions"))
    answers_after = {incident: restart_answers(trial.db, incident).as_row() for incident in sorted(roles)}
    return RetentionTrial(roles, kept, changed, answers_before, answers_after, tuple(returned))


@one_line
def check_retention_selection(due: Callable, seed: int | None = None) -> None:
    """``due(conn, cutoff) -> list of incident ids``: which raw diagnostics a retention run may remove now.

    ``cutoff`` is an instant (``2026-03-16T00:00:00Z``): raw diagnostics kept before it are old
    enough. The check runs ``labkit.retention.retain(db, 30, clock, due=due)`` on two real
    databases, each holding runs labkit's coordinator left finished six weeks ago, finished
    five days ago, stopped after the evidence commit, and completed with a ticket effect left
    uncertain by a ticket service that dropped its answer (the roles dealt anew for each try,
    :func:`dealt_cases`; ``seed`` for a test). Correct: exactly the raw diagnostics of the old finished
    runs are removed; every other table is unchanged; every run answers the three restart
    questions as before.
    """
    clear_trials()
    answer_is_a_function(due, "def my_due(conn, cutoff): ...")
    source_of(due)
    own_work(due, "retain", "retain_txn", "_UNFINISHED_SQL", "OWED")
    removed_in_all: list[str] = []
    borrowed: list[str] = []

    def traced(conn: sqlite3.Connection, cutoff: str) -> object:
        # labkit's own condition, fetched by a name built at run time, is still its text in the SQL sent
        conn.set_trace_callback(lambda sql: borrowed.append(sql) if _UNFINISHED_SQL in sql else None)
        try:
            return due(conn, cutoff)
        finally:
            conn.set_trace_callback(None)

    cases = dealt_cases(random.Random(seed if seed is not None else secrets.randbits(64)))
    for number, roles in enumerate(cases, start=1):
        with watching_labkit("retain", "retain_txn") as calls:
            trial = retention_trial(roles, traced)
        refuse_if_called(calls)
        if borrowed:
            raise AssertionError("write it yourself: your selection's SQL holds labkit's own condition "
                                 "(labkit.retention._UNFINISHED_SQL), which already does the job (and is what the check compares with)")
        removed = sorted(set(roles) - set(trial.kept))
        for incident in sorted(removed, key=lambda incident: ROLES.index(roles[incident])):  # the same first hint every deal
            role = roles[incident]
            if role not in DUE_ROLES:
                hint = {
                    "unfinished": "An unfinished run keeps what it read: select only runs at report_completed",
                    "uncertain": "Finished means nothing owed: a run whose effect is intended or uncertain still owes its ticket "
                                 "(look in the effects table)",
                    "intended": "Finished means nothing owed: an effect still intended has not reached its ticket yet "
                                "(which states of effects.state owe something?)",
                    "recent": "Compare the raw diagnostic's kept_at with the cutoff: only those kept before it are due",
                }[role]
                raise AssertionError(f"database {number}: your selection removed the raw diagnostic of {incident}, "
                                     f"{_WHAT_IT_IS[role]}. {hint}")
        stayed = [incident for incident, role in roles.items() if role in DUE_ROLES and incident in trial.kept]
        ticket_kept = [incident for incident in stayed if roles[incident] == "ticketed"]
        if ticket_kept and len(ticket_kept) == len(stayed):
            raise AssertionError(f"database {number}: your selection kept the raw diagnostic of {ticket_kept[0]}, "
                                 f"{_WHAT_IT_IS['ticketed']}. A run with an effect is not owing by itself: "
                                 "only some states of effects.state owe a ticket")
        if stayed:
            runs = f"{' and '.join(stayed)} {'were' if len(stayed) > 1 else 'was'}"
            raise AssertionError(f"database {number}: {runs} finished six weeks ago and nothing is owed, yet your selection kept "
                                 "the raw diagnostic: a retention that removes nothing keeps every raw payload (and secret) for ever")
        if sorted(set(trial.returned)) != removed:
            raise AssertionError(f"database {number}: your selection named {len(set(trial.returned))} run(s), yet "
                                 f"{len(removed)} raw diagnostic(s) are gone: return the ids of the runs whose raw "
                                 "diagnostic is due, and let retain remove them")
        assert not trial.changed, (
            f"database {number}: your selection wrote to {', '.join(trial.changed)}: a selection only reads; retain removes what it names"
        )
        assert trial.answers_after == trial.answers_before, f"database {number}: the restart answers changed"
        removed_in_all.append(f"{' and '.join(removed)} in database {number}")
    print(f"✓ removed only the raw diagnostics of the finished runs older than the cutoff: {', '.join(removed_in_all)}")
    print("✓ kept the unfinished run's, the runs whose ticket effect is intended or uncertain, and the run inside the 30 days")
    print(f"✓ runs, transitions, evidence (summary, digest, reference), assessments, receipts, effects, redactions unchanged; "
          f"all {sum(len(roles) for roles in cases)} runs answer the three restart questions as before")
