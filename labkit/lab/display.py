"""Small tables for notebooks: the durable state, as pandas frames.

Every function opens its own short, read-only connection and closes it, the way an
operator's query would; none of them writes, and a path where no database exists is
refused rather than created. Timestamps come from the injected clock, so frames are stable
from run to run. pandas is imported here only, so the command line starts fast.
"""

from __future__ import annotations

import json
import re
from contextlib import closing
from pathlib import Path

import pandas as pd

from ..clock import parse_instant
from ..database import read_transaction
from ..leases import lease_events_txn, lease_log, leases_txn
from ..provider import CallLog, call_log_for
from ..retention import diagnostic_of
from ..status import status_of
from ..store import connect_readonly
from .lesson import restart_answers
from .processes import ChildOutcome
from .ticket_service import TicketService, store_rows


def _query(db: str | Path, sql: str, params: tuple = ()) -> pd.DataFrame:
    with closing(connect_readonly(db)) as conn:
        cursor = conn.execute(sql, params)
        columns = [column[0] for column in cursor.description]
        return pd.DataFrame([tuple(row) for row in cursor.fetchall()], columns=columns)


def runs_frame(db: str | Path) -> pd.DataFrame:
    """One row per run: its step, the state version that guards its next transition."""
    return _query(db, "SELECT incident, workflow_version, step, version AS state_version, updated_at FROM runs ORDER BY incident")


def evidence_frame(db: str | Path) -> pd.DataFrame:
    """Committed evidence, reduced to what a reader checks: the diagnosis and the numbers behind it."""
    frame = _query(db, "SELECT incident, body, digest FROM evidence ORDER BY incident")
    bodies = [json.loads(body) for body in frame["body"]]
    return pd.DataFrame({
        "incident": frame["incident"],
        "queue": [b["queue"]["name"] for b in bodies],
        "consumers": [b["queue"]["consumers"] for b in bodies],
        "messages_ready": [b["queue"]["messages_ready"] for b in bodies],
        "kind": [b["diagnosis"]["kind"] for b in bodies],
        "digest": [digest[:12] for digest in frame["digest"]],
    })


def receipts_frame(db: str | Path) -> pd.DataFrame:
    frame = _query(db, "SELECT incident, receipt_id, evidence_digest, report, issued_at FROM receipts ORDER BY incident")
    return pd.DataFrame({
        "incident": frame["incident"],
        "receipt_id": frame["receipt_id"],
        "kind": [json.loads(report)["kind"] for report in frame["report"]],
        "evidence": [digest[:12] for digest in frame["evidence_digest"]],
        "issued_at": frame["issued_at"],
    })


def transitions_frame(db: str | Path, incident: str | None = None) -> pd.DataFrame:
    """The history of steps, oldest first: the timeline of each run."""
    where, params = ("WHERE incident = ?", (incident,)) if incident else ("", ())
    # The transition that creates a run comes from no step; show that instead of a NULL.
    sql = (
        "SELECT seq, incident, COALESCE(from_step, '(created)') AS from_step, to_step, state_version, at"
        f" FROM transitions {where} ORDER BY seq"
    )
    return _query(db, sql, params)


def provider_calls_frame(db_or_log: str | Path) -> pd.DataFrame:
    """The provider's own log of calls (kept outside the database), one row per call."""
    path = Path(db_or_log)
    log = CallLog(path if path.name.endswith(".jsonl") else call_log_for(path))
    rows = [(c.call, c.incident, c.outcome, c.response_bytes) for c in log.calls()]
    return pd.DataFrame(rows, columns=["call", "incident", "outcome", "response_bytes"])


def restart_frame(db: str | Path, incidents: list[str]) -> pd.DataFrame:
    """The three restart questions for each incident, answered from its rows (labkit.lab.lesson)."""

    return pd.DataFrame([restart_answers(db, incident).as_row() for incident in incidents]).set_index("incident")


def status_frame(db: str | Path) -> pd.DataFrame:
    """What ``python -m labkit status --json`` reports, as a table."""
    runs = status_of(db)["runs"]
    columns = ["incident", "workflow_version", "step", "evidence", "receipts", "provider_reads"]
    return pd.DataFrame([{c: run[c] for c in columns} for run in runs], columns=columns)


def assessments_frame(db: str | Path, incident: str | None = None) -> pd.DataFrame:
    """Every assessment, oldest first: what was concluded, by which decision inputs, and why."""
    where, params = ("WHERE incident = ?", (incident,)) if incident else ("", ())
    sql = (
        "SELECT incident, seq, origin, kind, provider, rules_revision, contract, COALESCE(reason, '') AS reason,"
        f" changed, at FROM assessments {where} ORDER BY incident, seq"
    )
    frame = _query(db, sql, params)
    # A revision may be NULL (a row from before revisions were kept): keep whole numbers whole.
    frame["rules_revision"] = frame["rules_revision"].astype("Int64")
    return frame


def migrations_frame(db: str | Path) -> pd.DataFrame:
    """The migration log: which runs moved from which workflow version to which, when and why."""
    return _query(db, "SELECT seq, from_version, to_version, runs, at, reason FROM migrations ORDER BY seq")


def effects_frame(db: str | Path) -> pd.DataFrame:
    """The checkpoint side of an external effect: each run's step and receipt beside its effect row.

    ``attempts`` counts the sends that may have left (one is counted before each send); the
    last outcome says what the workflow last learnt (09_external_effects).
    """
    return _query(
        db,
        "SELECT runs.incident, runs.step, receipts.receipt_id, effects.operation_key, effects.state, effects.ticket,"
        " effects.attempts, effects.last_outcome, COALESCE(effects.reason, '') AS reason"
        " FROM runs LEFT JOIN receipts USING (incident) JOIN effects USING (incident) ORDER BY runs.incident",
    )


def tickets_frame(store: str | Path | TicketService) -> pd.DataFrame:
    """The ticket service's own table, read from its file (a path, or a running or killed TicketService).

    Its ids come from the store's own sequence and its times from the service's pinned clock,
    so the frame is the same on every run of a lesson; a NULL key is a service that ignores keys.
    """

    path = store.store if isinstance(store, TicketService) else store
    rows = [(r["ticket_id"], r["idempotency_key"] or "(none)", r["incident"], r["created_at"]) for r in store_rows(path)]
    return pd.DataFrame(rows, columns=["ticket_id", "idempotency_key", "incident", "created_at"])


def effect_and_tickets(db: str | Path, store: str | Path | TicketService) -> str:
    """Both sides of an external effect, as text: the checkpoint rows above the ticket service's own table.

    An outcome's details in parentheses are cut: which exception a lost answer raised (a
    timeout, a reset, a closed connection) can vary with timing, and a lesson's output must not.
    """
    effects = effects_frame(db).drop(columns="reason")
    effects["last_outcome"] = effects["last_outcome"].str.split(" (", regex=False).str[0]
    return "\n".join(["checkpoint database: run, receipt, effect", effects.to_string(index=False),
                      "ticket service's own table", tickets_frame(store).to_string(index=False)])


def outcome_text(outcome: ChildOutcome, every_line: bool = False) -> str:
    """A child's command and how it ended, as a lesson prints it: its one-line error, or its last
    line of output (``every_line``: all of them).

    The ticket service's URL is hidden (its port changes on every run), and so are an error's
    details in parentheses, for the reason given in :func:`effect_and_tickets`.
    """
    lines = outcome.stdout.strip().splitlines()
    said = [outcome.message.split(" (")[0]] if outcome.message else (lines if every_line else lines[-1:])
    command = re.sub(r"--tickets \S+", "--tickets URL", outcome.command)
    return f"$ {command}\n  {outcome.status}: " + "\n  ".join(said)


# --------------------------------------------------------------------------- leases (10_leases_and_fencing)


def _worker(name: str) -> str:
    # `work` names a worker after its process (worker-1-pid4242); the pid changes on every run.
    return re.sub(r"-pid\d+$", "", name)


def lease_events_frame(db: str | Path, incident: str | None = None) -> pd.DataFrame:
    """:func:`labkit.leases.lease_log` as a table: every claim, renewal, commit, refusal and release, in commit order.

    ``state_version`` is the run's when claimed or renewed, the new one when committed, and
    the one the worker expected when refused. ``at`` drops the date (a lesson's runs share one day).
    """

    rows = [(e.seq, e.at[11:], e.incident, _worker(e.worker), e.token, e.event, e.state_version, e.detail)
            for e in lease_log(db, incident)]
    return pd.DataFrame(rows, columns=["seq", "at", "incident", "worker", "token", "event", "state_version", "detail"])


def leases_frame(db: str | Path, incident: str | None = None, times: bool = True) -> pd.DataFrame:
    """One row per lease, by token: who held it, which expired lease it replaced, how it ended.

    ``times=False`` leaves the instants out: leases taken on the wall clock (``work``) differ on every run.
    """

    with closing(connect_readonly(db)) as conn, read_transaction(conn):
        leases = leases_txn(conn, incident)
    frame = pd.DataFrame(
        [(row.token, row.incident, _worker(row.worker), row.claimed_at, row.expires_at, row.replaces, row.ended or "(live)",
          row.ended_at) for row in leases],
        columns=["token", "incident", "worker", "claimed_at", "expires_at", "replaces", "ended", "ended_at"],
    )
    frame["replaces"] = frame["replaces"].astype("Int64")
    return frame if times else frame.drop(columns=["claimed_at", "expires_at", "ended_at"])


#: Seconds per column the timeline may use: the smallest that fits the picture in its width.
_TIMELINE_STEPS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600)
_TIMELINE_MARKS = {"claimed": "[", "renewed": "r", "committed": "✓", "refused": "✗"}


def lease_timeline(db: str | Path, incident: str | None = None, width: int = 60) -> str:
    """A picture of the leases as text: one lane per worker, time left to right, the refused commits marked.

    Drawn from the rows alone (``leases`` and ``lease_events``), so it shows what the
    database knows: a bar is a lease from its claim to its expiry (``)``) or to its end
    (``]``); a stall or a provider read leaves no row, so it shows as nothing. Meant for a
    clock in the lesson's hands (:class:`~labkit.clock.ManualClock`); its text table is
    :func:`lease_events_frame`.
    """

    with closing(connect_readonly(db)) as conn, read_transaction(conn):
        leases = leases_txn(conn, incident)
        events = lease_events_txn(conn, incident)
    if not leases:
        return "(no leases)"
    origin = min(parse_instant(lease.claimed_at) for lease in leases)

    def at(instant: str) -> float:
        return (parse_instant(instant) - origin).total_seconds()

    def end(lease) -> tuple[float, str]:
        if lease.ended in ("completed", "released", "failed") and lease.ended_at is not None:
            return at(lease.ended_at), "]"
        return at(lease.expires_at), ")"  # live, or taken over: drawn to the instant it expired

    span = max([at(e.at) for e in events] + [end(lease)[0] for lease in leases])
    step = next((s for s in _TIMELINE_STEPS if span / s <= width), _TIMELINE_STEPS[-1])
    columns = int(round(span / step)) + 1
    workers = list(dict.fromkeys(lease.worker for lease in leases))  # in the order of their first claim
    lanes = {worker: [" "] * columns for worker in workers}

    def col(seconds: float) -> int:
        return min(columns - 1, int(round(seconds / step)))

    for lease in leases:
        lane, first = lanes[lease.worker], col(at(lease.claimed_at))
        seconds, closer = end(lease)
        last = col(seconds)
        lane[first:last + 1] = ["="] * (last - first + 1)
        label = f"lease {lease.token}"
        if last - first - 1 >= len(label) + 2:  # the token inside its bar, when it fits
            middle = first + 1 + (last - first - 1 - len(label)) // 2
            lane[middle:middle + len(label)] = list(label)
        lane[last] = closer
        lane[first] = "["
    refusals = []
    for event in events:
        mark = _TIMELINE_MARKS.get(event.event)
        if mark:
            lanes[event.worker][col(at(event.at))] = mark
        if event.event == "refused":
            refusals.append(f"✗ at {at(event.at):g} s, {_worker(event.worker)} under token {event.token}: {event.detail}")
    name_width = max(len(_worker(worker)) for worker in workers) + 3
    ticks = [" "] * (columns + 8)
    for column in range(0, columns, 10):
        text = f"{column * step:g}s"
        ticks[column:column + len(text)] = list(text)
    lines = [" " * name_width + "".join(ticks).rstrip()]
    lines += [_worker(worker).ljust(name_width) + "".join(lanes[worker]).rstrip() for worker in workers]
    lines.append("[ claimed  = lease live  ) expired  ] ended  r renewed  ✓ commit accepted  ✗ commit refused")
    return "\n".join(lines + refusals)


def _lease_spans(db: str | Path, incident: str | None) -> tuple[list[dict], list[dict]]:
    """The leases and their events in seconds since the first claim: what the picture and its table show."""
    with closing(connect_readonly(db)) as conn, read_transaction(conn):
        leases = leases_txn(conn, incident)
        events = lease_events_txn(conn, incident)
    if not leases:
        return [], []
    origin = min(parse_instant(lease.claimed_at) for lease in leases)

    def at(instant: str) -> float:
        return round((parse_instant(instant) - origin).total_seconds(), 3)

    spans = []
    for lease in leases:
        ended_at = lease.ended_at if lease.ended in ("completed", "released", "failed") else None
        spans.append({
            "worker": _worker(lease.worker), "token": lease.token, "from s": at(lease.claimed_at),
            # live, or taken over: drawn to the instant it expired
            "to s": at(ended_at) if ended_at is not None else at(lease.expires_at),
            "ends": lease.ended if ended_at is not None else ("expired" if lease.ended == "taken_over" else "expires"),
        })
    marks = [{"worker": _worker(e.worker), "token": e.token, "at s": at(e.at), "event": e.event}
             for e in events if e.event in ("renewed", "committed", "refused")]
    return spans, marks


def lease_timeline_table(db: str | Path, incident: str | None = None) -> pd.DataFrame:
    """The numbers :func:`lease_timeline_figure` draws, one row per lease: its span, and when each
    of its renewals and commits (✓ accepted, ✗ refused) happened, in seconds since the first claim."""
    spans, marks = _lease_spans(db, incident)
    symbol = {"renewed": "r", "committed": "✓", "refused": "✗"}
    rows = []
    for span in spans:
        mine = [m for m in marks if m["token"] == span["token"] and m["worker"] == span["worker"]]
        events = " ".join(f"{symbol[m['event']]}{m['at s']:g}" for m in mine)
        rows.append({**span, "events (s)": events})
    return pd.DataFrame(rows, columns=["worker", "token", "from s", "to s", "ends", "events (s)"])


def lease_timeline_figure(db: str | Path, incident: str | None = None, title: str = "") -> object:
    """The leases as a picture (matplotlib): one lane per worker, a bar per lease from its claim to
    its expiry (hatched: it ran out) or its end, renewals as ticks, commits as ✓ (accepted) or ✗ (refused).

    Drawn from the rows alone, like :func:`lease_timeline`: a stall or a provider read leaves no
    row, so it shows as a gap. A fixed size and no dates, so the picture is the same every run;
    nbval does not compare pictures, so :func:`lease_timeline_table` prints its numbers beside it.
    """
    import matplotlib.pyplot as plt  # only the lessons draw; the command line starts without it

    spans, marks = _lease_spans(db, incident)
    workers = list(dict.fromkeys(span["worker"] for span in spans))
    lane = {worker: len(workers) - 1 - index for index, worker in enumerate(workers)}
    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.7 * max(len(workers), 1)))
    for span in spans:
        expired = span["ends"] in ("expired", "expires")
        ax.barh(lane[span["worker"]], span["to s"] - span["from s"], left=span["from s"], height=0.5,
                color="#90caf9", edgecolor="#1565c0", hatch="//" if expired else None)
        ax.text((span["from s"] + span["to s"]) / 2, lane[span["worker"]], f"lease {span['token']}",
                ha="center", va="center", fontsize=9, bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    style = {"renewed": ("|", "#1565c0", 14), "committed": ("$✓$", "#2e7d32", 12), "refused": ("X", "#c62828", 10)}
    for kind, (marker, color, size) in style.items():
        chosen = [m for m in marks if m["event"] == kind]
        if chosen:
            ax.plot([m["at s"] for m in chosen], [lane[m["worker"]] + 0.42 for m in chosen], linestyle="none",
                    marker=marker, color=color, markersize=size, label={"renewed": "renewed", "committed": "commit accepted",
                                                                          "refused": "commit refused"}[kind])
    ax.set_yticks(list(lane.values()), list(lane))
    ax.set_ylim(-0.6, len(workers) - 0.1)
    ax.set_xlabel("seconds since the first claim (hatched: the lease ran out)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def work_text(outcome: ChildOutcome, runs: bool = True) -> str:
    """``python -m labkit work`` as a lesson prints it: the command, how it ended, its lines, its one-line error.

    Process ids are hidden (they change on every run). ``runs=False`` leaves out the lines
    that say which worker finished which run: with several workers, that varies from run to run.
    """
    lines = [line for line in outcome.stdout.strip().splitlines() if runs or not re.match(r"worker \d+: ", line)]
    lines = [re.sub(r" \(pid \d+\)", "", line) for line in lines]
    if outcome.message:
        lines.append(outcome.message)
    return f"$ {outcome.command}\n  {outcome.status}\n  " + "\n  ".join(lines)


def references_frame(db: str | Path, incidents: list[str] | None = None) -> pd.DataFrame:
    """Each run's evidence summary and its reference, where its raw diagnostic stands, its effect and receipt.

    ``reference`` is the raw diagnostic's location and (in parentheses) the start of its
    digest, as the evidence row names them; ``raw diagnostic`` is what :func:`labkit.retention.diagnostic_of` says of the reference:
    kept (with its size), removed (by which retention run), none (no evidence, or evidence
    stored without one) or missing. ``incidents`` picks some runs (default: every run), in
    the database's order (11_capacity_and_retention).
    """

    chosen = f"WHERE runs.incident IN ({', '.join('?' * len(incidents))})" if incidents is not None else ""
    frame = _query(
        db,
        "SELECT runs.incident, runs.step, length(CAST(evidence.body AS BLOB)) AS summary, evidence.digest,"
        " evidence.diagnostic_digest, evidence.diagnostic_location AS reference, effects.state AS effect,"
        " receipts.receipt_id AS receipt"
        " FROM runs LEFT JOIN evidence USING (incident) LEFT JOIN effects USING (incident) LEFT JOIN receipts USING (incident)"
        f" {chosen} ORDER BY runs.incident",
        tuple(incidents or ()),
    )
    raw = []
    for incident in frame["incident"]:
        found = diagnostic_of(db, incident)
        raw.append({"kept": f"kept, {found.bytes or 0:,} bytes", "removed": f"removed by retention {found.removed_by}"}
                   .get(found.state, found.state))
    return pd.DataFrame({
        "incident": frame["incident"],
        "step": frame["step"],
        "summary bytes": [f"{int(size):,}" if pd.notna(size) else "" for size in frame["summary"]],
        "digest": [digest[:12] if isinstance(digest, str) else "" for digest in frame["digest"]],
        "reference": [f"{where} ({digest[:12]})" if isinstance(where, str) and isinstance(digest, str) else ""
                      for where, digest in zip(frame["reference"], frame["diagnostic_digest"], strict=True)],
        "raw diagnostic": raw,
        "effect": [state if isinstance(state, str) else "" for state in frame["effect"]],
        "receipt": [receipt if isinstance(receipt, str) else "" for receipt in frame["receipt"]],
    })


def text_bars(rows: list[dict], label: str, columns: list[str], width: int = 40, unit: str = "") -> str:
    """A bar chart in text, one bar per column for each row: a plot nbval can compare.

    Bars share one scale, the largest value; each series has its own mark, named in the
    first line. For the numbers themselves, print the rows as a table beside it.
    """
    marks = "█▒░"
    if not rows or not 1 <= len(columns) <= len(marks):
        raise ValueError(f"text_bars draws one to {len(marks)} columns of at least one row")
    top = max(float(row[column]) for row in rows for column in columns) or 1.0
    legend = "   ".join(f"{mark} {column}" for mark, column in zip(marks, columns, strict=False))
    head = max(len(f"{label} {row[label]}") for row in rows)
    lines = [legend]
    for row in rows:
        for number, (mark, column) in enumerate(zip(marks, columns, strict=False)):
            value = float(row[column])
            name = f"{label} {row[label]}" if number == 0 else ""
            lines.append(f"{name:>{head}}  {mark * round(value / top * width):<{width}}  {value:,.1f}{unit}")
    return "\n".join(lines)
