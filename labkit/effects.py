"""The effect ledger: an action outside the database, recorded so that a restart cannot guess.

A receipt and a step share one database, so they commit together. A ticket opened through
a network API does not: the ticket service commits in its own store, and its answer can be
lost on the way back. So the effect gets a row of its own, and a stable **operation
identity** (:func:`operation_key`) that travels with every request as its
``Idempotency-Key``:

- ``intended``: recorded in the completion transaction, before anything is sent;
- ``done``: the destination answered with its ticket, which is recorded;
- ``uncertain``: a send whose outcome nobody knows (a timeout after sending, a dropped
  connection), or a destination that cannot be asked: listed by ``python -m labkit
  effects`` until reconciled or resolved;
- ``resolved``: a person decided (``python -m labkit resolve``), with a reason.

Recovery never resends blindly. It first asks the destination by key
(:func:`~labkit.ticket_client.tickets_for_key`): found, the ticket is recorded; absent, the same
request is sent again under the same key (it makes the one ticket; a first request still
in flight makes it a replay, never a duplicate);
cannot be asked, the effect stays uncertain for a person. So it does after an answer the
client refuses (:mod:`labkit.ticket_client`: a ticket for another key or incident), and after
a listing of two tickets under the one key: never done as the first of them; ``effects``
lists it, its last outcome names both, invariant 8 counts the duplicate, and ``resolve``
records the one a person keeps. That choice is one small function,
:func:`reconciliation_decision`, which recovery takes as a parameter (``decide=``) so that a
lesson's exercise can write its own.

The coordinator knows none of this: it is given an :class:`~labkit.coordinator.OwedEffect`
(``Coordinator(..., effects=Tickets(url))``) and only decides *when* each part happens.
:class:`Tickets` is labkit's. Taught in 09_external_effects.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping
from contextlib import closing
from dataclasses import dataclass

from .clock import Clock
from .crashpoints import NO_CRASH, CrashPlan, CrashPoint
from .database import require_write_transaction, transaction
from .errors import BadInput, EffectConflict, EffectNotDone, EffectNotUncertain, EffectOutcomeUnknown, NoEffect, RunFailure, UnknownRun
from .jsontext import canonical_json, sha256_hex
from .store import connect
from .ticket_client import KeyLookup, all_tickets, check_url, post_ticket, ticket_id_problem, tickets_for_key
from .typed import first_unprintable

#: The ledger's table is in labkit.schema (EFFECTS_TABLE_V4); its CHECK holds the rule the
#: lesson is about: an effect is never done without the destination's ticket.

#: How long one request to the ticket service may take in all (connecting, sending, the whole
#: answer) before its outcome is unknown, in s: a deadline, not a per-read timeout.
TICKET_TIMEOUT = 1.0

STATES = ("intended", "uncertain", "done", "resolved")
#: The states in which a completed run still owes its effect: recovery drives it again, and
#: retention keeps its raw diagnostic.
OWED = ("intended", "uncertain")

#: What reconciliation may do with the destination's answer to "what do you hold under this key?".
DECISIONS = ("record", "send_again", "leave_uncertain")


@dataclass(frozen=True)
class Effect:
    incident: str
    operation_key: str
    request: dict
    state: str
    ticket: str | None
    attempts: int
    last_outcome: str
    reason: str | None
    updated_at: str


def operation_key(incident: str, workflow_version: int, step: str = "open_ticket") -> str:
    """The effect's identity: the same run, step and workflow version always give the same key."""
    digest = sha256_hex(f"{step}:{incident}:v{workflow_version}")
    return f"op-{digest[:16]}"


def _from_row(row: sqlite3.Row) -> Effect:
    return Effect(
        row["incident"], row["operation_key"], json.loads(row["request"]), row["state"], row["ticket"], row["attempts"],
        row["last_outcome"], row["reason"], row["updated_at"],
    )


def find_effect_txn(conn: sqlite3.Connection, incident: str) -> Effect | None:
    row = conn.execute("SELECT * FROM effects WHERE incident = ?", (incident,)).fetchone()
    return _from_row(row) if row else None


def list_effects_txn(conn: sqlite3.Connection, states: tuple[str, ...] = STATES) -> list[Effect]:
    marks = ", ".join("?" for _ in states)
    rows = conn.execute(f"SELECT * FROM effects WHERE state IN ({marks}) ORDER BY incident", states)
    return [_from_row(row) for row in rows]


def record_intent_txn(conn: sqlite3.Connection, incident: str, key: str, request: Mapping[str, object], clock: Clock) -> Effect:
    """Record, before anything is sent, that this effect is to happen, under its operation key."""
    require_write_transaction(conn, "record_intent_txn")
    stored = find_effect_txn(conn, incident)
    if stored is not None:
        return stored
    at = clock.now()
    conn.execute(
        "INSERT INTO effects (incident, operation_key, request, state, updated_at) VALUES (?, ?, ?, 'intended', ?)",
        (incident, key, canonical_json(request), at),
    )
    return Effect(incident, key, dict(request), "intended", None, 0, "", None, at)


def _mark_txn(
    conn: sqlite3.Connection, effect: Effect, state: str, clock: Clock, *, ticket: str | None = None, outcome: str,
    starting_send: bool = False, reason: str | None = None,
) -> Effect:
    """Compare-and-set on the effect's state and attempts: another worker that moved it first wins.

    ``starting_send`` counts an attempt *before* the request leaves: after a crash, an effect
    with no attempt was certainly never sent, and one with an attempt may have been.
    """
    require_write_transaction(conn, "_mark_txn")
    attempts = effect.attempts + (1 if starting_send else 0)
    current = find_effect_txn(conn, effect.incident)
    unchanged = current is not None and reason in (None, current.reason) and (
        (current.state, current.ticket, current.attempts, current.last_outcome) == (state, ticket, attempts, outcome)
    )
    if current is not None and unchanged:
        # Nothing would change but the time (a destination that still cannot be asked, asked
        # again by a second recovery): write nothing, so that recovering again changes nothing.
        return current
    at = clock.now()
    cursor = conn.execute(
        "UPDATE effects SET state = ?, ticket = ?, attempts = ?, last_outcome = ?, reason = COALESCE(?, reason), updated_at = ?"
        " WHERE incident = ? AND state = ? AND attempts = ?",
        (state, ticket, attempts, outcome, reason, at, effect.incident, effect.state, effect.attempts),
    )
    if cursor.rowcount != 1:
        current = find_effect_txn(conn, effect.incident)
        return current if current is not None else effect
    kept = effect.reason if reason is None else reason
    return Effect(effect.incident, effect.operation_key, effect.request, state, ticket, attempts, outcome, kept, at)


def mark_done_txn(conn: sqlite3.Connection, effect: Effect, ticket: str, outcome: str, clock: Clock) -> Effect:
    """Inside the caller's write transaction: the effect is done, as ``ticket`` (a done effect is left as it is).

    For a workflow whose engine opened the ticket itself (the DBOS version, 14_choosing_an_engine).
    """
    if effect.state in ("done", "resolved"):
        return effect
    return _mark_txn(conn, effect, "done", clock, ticket=ticket, outcome=outcome)


def ticket_request(report: Mapping[str, object]) -> dict[str, str]:
    """The ticket the incident's report asks for: built from the receipt, so every resend is identical."""
    return {"incident": str(report["incident"]), "title": str(report["headline"]), "summary": str(report["summary"])}


def reconciliation_decision(lookup: KeyLookup) -> str:
    """What recovery does once the destination has answered "what do you hold under this key?".

    ``found``: record the ticket it names. ``absent``: nothing is stored under the key, so send
    again, under the same key: the resend makes the one ticket, or, if the first request is
    still in flight, whichever commits second gets the first one's ticket (a replay). Anything else
    (``cannot_query``: it keeps no keys; ``duplicate``: two tickets under one key, and which
    one stands is not for a program to pick; ``unknown``, ``refused`` or ``invalid``: no
    answer to believe) cannot be known from here: leave it uncertain, for a person or a later
    recovery.
    """
    if lookup.outcome == "found":
        return "record"
    if lookup.outcome == "absent":
        return "send_again"
    return "leave_uncertain"


def open_ticket(
    conn: sqlite3.Connection,
    incident: str,
    url: str,
    clock: Clock,
    *,
    crash: CrashPlan = NO_CRASH,
    timeout: float = TICKET_TIMEOUT,
    decide: Callable[[KeyLookup], str] = reconciliation_decision,
) -> Effect:
    """Bring the run's effect to ``done`` (or an honest ``uncertain``), never sending it twice.

    An effect recorded before this call may have been sent already (a crash between the
    send and its record, a timeout): it is reconciled first, by asking the destination for
    its key, and ``decide`` says what its answer means (:func:`reconciliation_decision`).
    Only an effect known not to be at the destination is sent, and always under the same
    key and body.
    """
    with transaction(conn):
        effect = find_effect_txn(conn, incident)
    if effect is None:
        raise NoEffect(incident)
    if effect.state in ("done", "resolved"):
        return effect
    if effect.attempts > 0:
        # A send may have left before the process died or the answer was lost: only the
        # destination knows whether the ticket exists. Ask it before anything else.
        effect = _reconcile(conn, effect, url, clock, timeout, tickets_for_key, decide)
        if effect.state != "intended":
            return effect
    crash.reached(CrashPoint.BEFORE_SEND, conn)
    with transaction(conn):
        effect = _mark_txn(conn, effect, "intended", clock, outcome="sending", starting_send=True)
    answer = post_ticket(url, effect.operation_key, effect.request, timeout)
    crash.reached(CrashPoint.AFTER_SEND, conn)
    with transaction(conn):
        if answer.outcome in ("created", "replayed"):
            return _mark_txn(conn, effect, "done", clock, ticket=answer.ticket, outcome=answer.outcome)
        if answer.outcome == "failed":
            _mark_txn(conn, effect, "intended", clock, outcome=f"failed: {answer.detail}"[:200])
            raise_after: RunFailure | BadInput = EffectNotDone(incident, answer.detail or "the service did nothing")
        elif answer.outcome == "refused":
            _mark_txn(conn, effect, "uncertain", clock, outcome=f"refused {answer.status}: {answer.detail}"[:200])
            raise_after = EffectConflict(incident, f"HTTP {answer.status}: {answer.detail}")
        else:
            _mark_txn(conn, effect, "uncertain", clock, outcome=f"unknown: {answer.detail}"[:200])
            raise_after = EffectOutcomeUnknown(incident, answer.detail or "no answer")
    raise raise_after


def _reconcile(conn, effect: Effect, url: str, clock: Clock, timeout: float, tickets_for_key,
               decide: Callable[[KeyLookup], str]) -> Effect:
    """Ask the destination what happened under the effect's key, and act as ``decide`` says."""
    lookup = tickets_for_key(url, effect.operation_key, timeout, incident=effect.incident)
    decision = decide(lookup)
    if decision not in DECISIONS:
        raise ValueError(f"decide() returned {decision!r} for a look-up that was {lookup.outcome}; expected one of {', '.join(DECISIONS)}")
    with transaction(conn):
        if decision == "record":
            # With no ticket named (a wrong decision), the table's CHECK refuses "done": never done without it.
            outcome = "reconciled: found by key" if lookup.outcome == "found" else f"recorded after the look-up said {lookup.outcome}"
            return _mark_txn(conn, effect, "done", clock, ticket=lookup.ticket, outcome=outcome)
        if decision == "send_again":
            # Nothing under this key: sending again, under the same key, is safe.
            outcome = ("reconciled: absent, to be sent again" if lookup.outcome == "absent"
                       else f"sent again after the look-up said {lookup.outcome}")
            return _mark_txn(conn, effect, "intended", clock, outcome=outcome)
        if lookup.outcome == "cannot_query":
            return _mark_txn(conn, effect, "uncertain", clock, outcome="the destination cannot be asked by key: a person must decide")
        if lookup.outcome == "duplicate":
            # Invariant 8 counts the duplicate at the destination; here the effect is not
            # quietly done as the first one listed: `effects` lists it, and a person resolves it.
            return _mark_txn(conn, effect, "uncertain", clock, outcome=f"duplicate: {lookup.detail}; a person must decide"[:200])
        if lookup.outcome in ("found", "absent"):
            return _mark_txn(conn, effect, "uncertain", clock, outcome=f"left uncertain although the look-up said {lookup.outcome}")
        if lookup.outcome == "invalid":
            # An answer about another key or incident, or one too large or malformed to read,
            # settles nothing: uncertain, and this command fails so that it is seen.
            _mark_txn(conn, effect, "uncertain", clock, outcome=f"look-up {lookup.detail}"[:200])
        if lookup.outcome in ("unknown", "refused"):
            # No answer (a timeout) or a refusal (429) says nothing about what the service holds:
            # not "absent". Uncertain and listed, like cannot_query; every recovery asks again.
            outcome = f"look-up {lookup.outcome} ({lookup.detail}): asked again by the next recovery"
            return _mark_txn(conn, effect, "uncertain", clock, outcome=outcome[:200])
    if lookup.outcome == "invalid":
        raise EffectOutcomeUnknown(effect.incident, f"the look-up by key gave no answer to believe: {lookup.detail}")
    raise EffectOutcomeUnknown(effect.incident, f"the ticket service could not be asked ({lookup.detail or lookup.outcome})")


@dataclass(frozen=True)
class Tickets:
    """The effect completion owes in 09_external_effects: the incident's ticket, at the service at ``url``.

    What a coordinator and recovery are given (``effects=Tickets(url)``; the command line's
    ``--tickets URL``): an :class:`~labkit.coordinator.OwedEffect`. ``decide`` says what a
    look-up by key means during reconciliation (:func:`reconciliation_decision`; 09's
    exercise writes its own).
    """

    url: str
    decide: Callable[[KeyLookup], str] = reconciliation_decision

    def __post_init__(self) -> None:
        check_url(self.url)  # a malformed URL is refused before any run starts or any intent is written

    def intend_txn(self, conn: sqlite3.Connection, incident: str, workflow_version: int, report: dict, clock: Clock) -> None:
        """Inside the completion transaction: the ticket's intent, under its operation key."""
        record_intent_txn(conn, incident, operation_key(incident, workflow_version), ticket_request(report), clock)

    def carry_out(self, conn: sqlite3.Connection, incident: str, clock: Clock, crash: CrashPlan) -> Effect:
        """After the completion's commit: :func:`open_ticket`."""
        return open_ticket(conn, incident, self.url, clock, crash=crash, decide=self.decide)

    def owed_txn(self, conn: sqlite3.Connection) -> set[str]:
        """The runs whose ticket is still owed (intended) or whose outcome is unknown (uncertain)."""
        return {effect.incident for effect in list_effects_txn(conn, OWED)}

    def held(self) -> list[dict]:
        """Every ticket the service holds, with the key it was opened under (:func:`labkit.ticket_client.all_tickets`)."""
        return all_tickets(self.url)


def resolve(db, incident: str, ticket: str | None, reason: str, clock: Clock) -> Effect:
    """Record a person's decision about an uncertain effect: the ticket that exists, or none."""
    if not reason.strip():
        raise BadInput("a resolution needs a reason (--reason TEXT): it is a decision someone made")
    if ticket is not None and not ticket.strip():
        raise BadInput("--ticket is empty: name the ticket that exists at the destination, or give --none")
    if ticket is not None and (problem := ticket_id_problem(ticket)) is not None:
        raise BadInput(f"--ticket: {problem}")
    if first_unprintable(reason) is not None:
        # The reason is stored and printed by `effects`: no line breaks, terminal escapes,
        # NUL or right-to-left overrides.
        raise BadInput(f"--reason {ascii(reason[:60])} holds control or formatting characters; give plain text")
    with closing(connect(db, create=False)) as conn, transaction(conn):
        effect = find_effect_txn(conn, incident)
        if effect is None:
            if conn.execute("SELECT 1 FROM runs WHERE incident = ?", (incident,)).fetchone() is None:
                raise UnknownRun(incident)  # a mistyped id, not a run without a ticket
            raise NoEffect(incident)
        if effect.state != "uncertain":
            raise EffectNotUncertain(incident, effect.state)
        outcome = f"resolved by hand: {'ticket ' + ticket if ticket else 'no ticket'}"
        return _mark_txn(conn, effect, "resolved", clock, ticket=ticket, outcome=outcome, reason=reason)
