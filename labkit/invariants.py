"""The seven invariants that must hold after any crash and one recovery.

1. every run ends at ``report_completed``;
2. every run has exactly one receipt;
3. evidence exists for every run at or past ``evidence_recorded``;
4. no run's step ever moved backwards (its transition history only climbs);
5. provider reads = 1 + the reads whose transaction never committed: a crash between a
   read and its commit (N1), or a read whose answer was refused or failed and retried;
6. ``PRAGMA integrity_check`` answers ``ok``;
7. running recovery again changes nothing (no row, no provider call);

and, for runs that open a ticket (09_external_effects), checked at the ticket service:

8. at most one ticket per operation at the destination: per operation key, and per incident
   (a retry under a new key is the same operation, and duplicates the ticket just as well);
9. every effect ends done (with a ticket the destination holds under its key), resolved by a
   person, or listed as uncertain: never still intended, never done without the ticket;

and, for runs driven by the leased flow (``python -m labkit work``, 10_leases_and_fencing),
checked from the lease rows alone:

10. no commit under a stale lease token was accepted: every committed lease event carries the
    token of the latest lease claimed on its run before it, and each run points at its latest;
11. every provider read was made under a lease: a run was read at least once, and at most once
    per lease claimed while it was at ``not_inspected`` (a stale or killed worker's read is one
    of those; a read outside the fence, or twice under one lease, is not).

The crash suite in ``tests/`` and 12_crash_explorer run every crash point through
:func:`check_invariants`; one table of results per database.

8 to 11 read the effect ledger's and the lease tables (labkit.schema) with plain SQL: what the
rows must satisfy is stated here, once; how they are written is :mod:`labkit.effects`'s and
:mod:`labkit.leases`'s, which this module does not import. What the ticket service holds is
asked of the effect itself (:meth:`labkit.coordinator.OwedEffect.held`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from .coordinator import Coordinator, OwedEffect
from .database import read_transaction
from .provider import CallLog, ReadAdapter
from .recovery import recover
from .steps import Step
from .store import connect_readonly, list_runs_txn, snapshot


@dataclass(frozen=True)
class InvariantResult:
    number: int
    statement: str
    held: bool
    detail: str


STATEMENTS = {
    1: "run ends at report_completed",
    2: "exactly one receipt per run",
    3: "evidence for every run past not_inspected",
    4: "step never moved backwards",
    5: "provider reads = 1 + reads never committed",
    6: "integrity_check is ok",
    7: "recovering again changes nothing",
    8: "at most one ticket per operation",
    9: "every effect done, resolved or listed uncertain",
    10: "no commit under a stale lease token accepted",
    11: "every provider read made under a lease",
}


def check_invariants(
    db_path: str | Path, call_log: str | Path, expected_reads: dict[str, int], provider: ReadAdapter,
    effects: OwedEffect | None = None, *, leases: bool = False, coordinator_class: type[Coordinator] = Coordinator,
    recover_again: Callable[[], int] | None = None,
) -> list[InvariantResult]:
    """Check all seven; ``expected_reads`` maps each incident to 1 + its reads that never committed.

    In the crash suite those are the crashes that fell inside the read window
    (:data:`~labkit.crashpoints.BETWEEN_READ_AND_COMMIT`); a test that also makes the
    provider fail counts those reads too.

    Invariant 7 runs :func:`~labkit.recovery.recover` once more with ``provider`` (and
    ``effects``), so call this only after the recovery under test has finished. ``effects``
    (``labkit.effects.Tickets(url)``, for runs that open a ticket) adds 8 and 9. ``leases=True`` adds 10 and 11, for
    runs driven by the leased flow; there, which killed worker had read before it died is
    not in the rows, so 11 bounds the reads that 5 would need predicted. ``coordinator_class``
    is the recovery 7 runs again: a deliberately broken variant (:mod:`labkit.lab.naive`) is
    judged by its own second recovery (12_crash_explorer). ``recover_again`` replaces that
    recovery with another engine's (it returns how many runs it resumed): the same checks
    then judge the DBOS version of the workflow (:mod:`labkit.engines`, 14_choosing_an_engine).
    """
    log = CallLog(call_log)
    with closing(connect_readonly(db_path)) as conn, read_transaction(conn):
        runs = list_runs_txn(conn)
        receipts = dict(conn.execute("SELECT incident, COUNT(*) FROM receipts GROUP BY incident").fetchall())
        with_evidence = {row[0] for row in conn.execute("SELECT incident FROM evidence")}
        history: dict[str, list[tuple]] = {}
        for incident, from_step, to_step, state_version in conn.execute(
            "SELECT incident, from_step, to_step, state_version FROM transitions ORDER BY seq"
        ):
            history.setdefault(incident, []).append((from_step, to_step, state_version))
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        ledger = conn.execute("SELECT incident, operation_key, state, ticket FROM effects ORDER BY incident").fetchall()
        stale = stale_commits_txn(conn) if leases else []
        leased_before_evidence = leases_before_evidence_txn(conn) if leases else {}
        before = snapshot(conn)
    calls_before = len(log.calls())

    results = []

    def record(number: int, failures: list[str], detail_ok: str) -> None:
        results.append(InvariantResult(number, STATEMENTS[number], not failures, "; ".join(failures) or detail_ok))

    missing = sorted(set(expected_reads) - {r.incident for r in runs})
    record(
        1,
        [f"{i} has no run" for i in missing] + [f"{r.incident} at {r.step}" for r in runs if r.step is not Step.REPORT_COMPLETED],
        f"{len(runs)} runs",
    )
    wrong_receipts = [f"{r.incident} has {receipts.get(r.incident, 0)}" for r in runs if receipts.get(r.incident, 0) != 1]
    record(2, wrong_receipts, f"{len(runs)} receipts")
    record(3, [r.incident for r in runs if r.step is not Step.NOT_INSPECTED and r.incident not in with_evidence], "all present")
    record(4, [r.incident for r in runs if not _climbs(history.get(r.incident, []), r.step, r.version)], "all histories climb")
    reads = {incident: log.reads_of(incident) for incident in expected_reads}
    record(
        5,
        [f"{i} read {reads[i]} times, expected {n}" for i, n in sorted(expected_reads.items()) if reads[i] != n],
        ", ".join(f"{i}: {n}" for i, n in sorted(reads.items())),
    )
    record(6, [] if integrity == "ok" else [integrity], "ok")

    if effects is not None:
        held = effects.held()
        by_key: dict[str, list[str]] = {}
        for ticket in held:
            if ticket.get("key") is not None:  # a service without idempotency keeps no key
                by_key.setdefault(str(ticket["key"]), []).append(str(ticket["ticket"]))
        key_of = {str(ticket["ticket"]): ticket.get("key") for ticket in held}
        by_incident: dict[str, list[str]] = {}
        for ticket in held:
            by_incident.setdefault(str(ticket.get("incident")), []).append(str(ticket["ticket"]))
        doubled = [f"key {key} has {len(found)} tickets ({', '.join(found)})" for key, found in sorted(by_key.items()) if len(found) > 1]
        doubled += [f"{incident} has {len(found)} tickets ({', '.join(found)})"
                    for incident, found in sorted(by_incident.items()) if len(found) > 1]
        record(8, doubled, f"{len(held)} tickets, {len(by_key)} keys")
        wrong = [f"{e['incident']} still intended" for e in ledger if e["state"] == "intended"]
        for effect in ledger:
            # done means the destination holds that ticket, under this key (or under none, where the
            # service keeps no keys)
            if effect["state"] == "done" and (
                effect["ticket"] not in key_of or key_of[effect["ticket"]] not in (effect["operation_key"], None)
            ):
                wrong.append(f"{effect['incident']} done as {effect['ticket']}, which the destination does not hold under its key")
        record(9, wrong, ", ".join(f"{e['incident']}: {e['state']}" for e in ledger) or "no effects")

    if leases:
        record(10, stale, "every commit under its run's latest lease")
        wrong_reads = []
        for incident in sorted(expected_reads):
            read, allowed = log.reads_of(incident), leased_before_evidence.get(incident, 0)
            if not 1 <= read <= allowed:
                wrong_reads.append(f"{incident} read {read} times under {allowed} leases taken before its evidence")
        record(11, wrong_reads, "within the leases taken")

    if recover_again is not None:
        resumed = recover_again()
    else:
        again = recover(db_path, provider, effects=effects, coordinator_class=coordinator_class)
        # An effect left uncertain for a person is asked about by every recovery (a look-up that
        # changes nothing): that is not work left undone, provided no row changed (checked below).
        resumed = len([r for r in again if not (r.error is None and r.effect is not None and r.effect.state == "uncertain"
                                                and not r.read_provider and not r.completed)])
    with closing(connect_readonly(db_path)) as conn:
        after = snapshot(conn)
    changed = [table for table in before if before[table] != after[table]]
    new_calls = len(log.calls()) - calls_before
    record(
        7,
        [f"{resumed} runs resumed"] * bool(resumed)
        + [f"{table} changed" for table in changed]
        + [f"{new_calls} new provider calls"] * bool(new_calls),
        "no change",
    )
    return sorted(results, key=lambda result: result.number)


def stale_commits_txn(conn: sqlite3.Connection) -> list[str]:
    """Commits accepted under a token that was not the run's latest lease: empty, or fencing failed.

    Read from rows alone. Events are written under the write lock, so their order is commit
    order, and tokens grow with every claim: a commit is stale if its token is not the
    largest claimed on its run before it. A run's ``lease_token`` must also be its latest.
    """
    wrong = []
    rows = conn.execute(
        "SELECT c.seq, c.incident, c.token, c.detail, (SELECT MAX(k.token) FROM lease_events k"
        "   WHERE k.incident = c.incident AND k.event = 'claimed' AND k.seq < c.seq) AS latest"
        " FROM lease_events c WHERE c.event = 'committed' ORDER BY c.seq"
    )
    for seq, incident, token, detail, latest in rows:
        if latest != token:
            wrong.append(f"{incident}: {detail} accepted under token {token} after token {latest} was claimed (event {seq})")
    rows = conn.execute(
        "SELECT r.incident, r.lease_token, (SELECT MAX(token) FROM leases l WHERE l.incident = r.incident)"
        " FROM runs r WHERE r.lease_token IS NOT (SELECT MAX(token) FROM leases l WHERE l.incident = r.incident)"
    )
    wrong += [f"{incident}: its lease_token is {token}, its latest lease {latest}" for incident, token, latest in rows]
    return wrong


def leases_before_evidence_txn(conn: sqlite3.Connection) -> dict[str, int]:
    """Per run, the leases claimed while it was at ``not_inspected``: the most reads it may have cost."""
    rows = conn.execute(
        "SELECT e.incident, COUNT(*) FROM lease_events e JOIN transitions t"
        "   ON t.incident = e.incident AND t.state_version = e.state_version"
        " WHERE e.event = 'claimed' AND t.to_step = 'not_inspected' GROUP BY e.incident"
    )
    return dict(rows.fetchall())


def _climbs(history: list[tuple], final: Step, final_version: int) -> bool:
    """The history starts at not_inspected, links each step to the last, only climbs, and ends where the run is."""
    if not history or history[0][0] is not None or history[0][1] != Step.NOT_INSPECTED.value:
        return False
    for (_, previous, previous_version), (source, target, version) in zip(history, history[1:], strict=False):
        if source != previous or Step(target).rank <= Step(previous).rank or version != previous_version + 1:
            return False
    return history[-1][1] == final.value and history[-1][2] == final_version
