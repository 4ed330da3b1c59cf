"""The evaluation layer: two scorecards that never read each other's data.

Two questions stay apart. *Did the workflow recover correctly?* and *is the diagnosis right?*
A run can come back from a crash perfectly and still carry a wrong diagnosis; a run can carry
the right diagnosis and have opened its ticket twice. One number mixing the two would let
either failure hide behind the other, so there are two scorers:

- the **task scorecard** (:func:`task_score`): each run's diagnosis, the ``kind`` of its
  assessment (:mod:`labkit.assessments`), against ``data/ground_truth.csv``: accuracy,
  per-kind precision and recall, a confusion table. It reads the ``runs`` and
  ``assessments`` tables and the ground truth, nothing else;
- the **recovery scorecard** (:func:`recovery_score`): completion, receipts beyond one per
  run, tickets beyond one per incident at the destination, effects left uncertain, provider
  reads beyond one per run. It reads the ``runs``, ``receipts`` and ``effects`` tables, the
  provider's own call log and (when given) the ticket service's store, nothing else.
  :func:`recovery_from_scenarios` computes the same card from the crash explorer's rows.

"Never read each other's data" is held by the code, not promised: each scorer opens its own
read-only connection and installs an SQLite authorizer that denies reading any table outside
its list (:func:`scoped_connection`), so an edit that makes one score look at the other's
tables fails loudly (:class:`ScorerReadRefused`). The files outside the database are kept
apart by the signatures: the task scorer is never handed the call log or the ticket store,
the recovery scorer never the ground truth.

The task scorer's arithmetic also scores the rules revisions on labelled snapshots without a
database (:func:`compare_rules`): the lab's incidents, which the rules were written from, beside
captures from a live broker, which they were not (:func:`capture_set`, a held-out set).

``python -m labkit evaluate --db PATH [--json] [--ticket-store PATH]`` prints both; it only
reads. pandas frames for notebooks: :func:`per_class_frame`, :func:`confusion_frame`,
:func:`recovery_frame`. Taught in 13_evaluation.
"""

from __future__ import annotations

import csv
import io
import json
import math
import numbers
import os
import sqlite3
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from .contract import CONTRACT, schema_for
from .database import open_regular_file, read_transaction
from .errors import BadGroundTruth, BadScenarioRow, NotARegularFile, RulesInputMissing, ScorerReadRefused, TicketStoreMissing, shown
from .provider import DEFAULT_DATA_DIR, CallLog, call_log_for, data_dir, incident_file, list_incidents, observation_of
from .rules import RULES_REVISIONS, assess
from .steps import Step
from .store import connect_readonly
from .ticket_store import store_rows

if TYPE_CHECKING:  # pandas is imported where a frame is made (an optional heavy dependency): commands never load it
    import pandas as pd

#: The only tables each scorer may read. ``runs`` is in both: it is the list of runs being
#: scored, not either side's evidence of success.
TASK_TABLES: tuple[str, ...] = ("runs", "assessments")
RECOVERY_TABLES: tuple[str, ...] = ("runs", "receipts", "effects")

# The scorers' queries, kept as constants so a test can swap in one that reads a table the
# scorer must not (and watch the authorizer refuse it).
TASK_RUNS_SQL = "SELECT incident FROM runs ORDER BY incident"
TASK_ASSESSMENTS_SQL = "SELECT incident, seq, kind FROM assessments ORDER BY incident, seq"
RECOVERY_RUNS_SQL = (
    "SELECT runs.incident, runs.step,"
    " (SELECT COUNT(*) FROM receipts WHERE receipts.incident = runs.incident) AS receipts,"
    " (SELECT COUNT(*) FROM effects WHERE effects.incident = runs.incident AND effects.state = 'uncertain') AS uncertain"
    " FROM runs ORDER BY runs.incident"
)

#: The answer key's name inside the data folder; its columns.
GROUND_TRUTH_FILE = "ground_truth.csv"
GROUND_TRUTH_COLUMNS = ("incident", "kind")
#: 16 rows take about 3 KB; a file a thousand times larger is not an answer key.
MAX_GROUND_TRUTH_BYTES = 1 << 20


# --------------------------------------------------------------------------- the fence between them


#: What the authorizer lets through besides reading an allowed table: the statement itself,
#: functions (count, max), and BEGIN/COMMIT of the read transaction.
_ALWAYS_ALLOWED = (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_TRANSACTION)


@contextmanager
def scoped_connection(db: str | Path, scorer: str, tables: tuple[str, ...]) -> Iterator[sqlite3.Connection]:
    """A read-only connection to ``db`` that can read ``tables`` and nothing else, in one read transaction.

    The authorizer runs when each statement is prepared: reading a column of any other table
    (``SELECT count(*)`` included: SQLite reports the table with an empty column name), any
    write and any PRAGMA are denied, and the statement fails; leaving the block then raises
    :class:`ScorerReadRefused` naming the table. Refusing at prepare time means a forbidden
    query never returns a row, even one that a caller might swallow.
    """
    refused: list[str] = []

    def authorize(action: int, first: str | None, second: str | None, database: str | None, trigger: str | None) -> int:
        if action in _ALWAYS_ALLOWED:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ and first in tables:
            return sqlite3.SQLITE_OK
        refused.append(str(first) if action == sqlite3.SQLITE_READ else f"(action {action}: {first})")
        return sqlite3.SQLITE_DENY

    with closing(connect_readonly(db)) as conn:
        conn.set_authorizer(authorize)
        try:
            with read_transaction(conn):
                yield conn
        except sqlite3.DatabaseError as error:
            if refused:
                raise ScorerReadRefused(scorer, refused[0], tables) from error
            raise


# --------------------------------------------------------------------------- the ground truth


@cache
def known_kinds() -> tuple[str, ...]:
    """Every diagnosis kind the current evidence contract allows, in its order."""
    schema = json.loads(schema_for(CONTRACT).read_text(encoding="utf-8"))
    return tuple(schema["properties"]["diagnosis"]["properties"]["kind"]["enum"])


def ground_truth_path() -> Path:
    """``data/ground_truth.csv`` of the data folder the provider reads (``LABKIT_DATA_DIR`` when set)."""
    return data_dir() / GROUND_TRUTH_FILE


def load_ground_truth(path: str | Path | None = None) -> dict[str, str]:
    """The answer key, ``{incident: kind}``, checked whole before any score is computed.

    Refused in one line (:class:`BadGroundTruth`): a missing file, a folder, FIFO or device
    in its place, a file over :data:`MAX_GROUND_TRUTH_BYTES`, text that is not UTF-8 CSV, a
    header without ``incident`` and ``kind``, a row of the wrong width, an empty or padded
    incident id (or one with control characters), a kind the evidence contract does not know, an incident listed twice, no
    rows. A wrong answer key would make every score wrong, so nothing is skipped quietly.
    """
    path = Path(path) if path is not None else ground_truth_path()
    try:
        fd = open_regular_file(path, os.O_RDONLY, "ground truth", follow_symlinks=True)
    except FileNotFoundError:
        raise BadGroundTruth(path, "it does not exist") from None
    except NotARegularFile as refusal:
        raise BadGroundTruth(path, f"{refusal.reason}, not a CSV file") from None
    except OSError as error:
        raise BadGroundTruth(path, f"it cannot be read ({error.strerror or error})") from None
    with os.fdopen(fd, "rb") as handle:
        raw = handle.read(MAX_GROUND_TRUTH_BYTES + 1)
    if len(raw) > MAX_GROUND_TRUTH_BYTES:
        raise BadGroundTruth(path, f"it is larger than {MAX_GROUND_TRUTH_BYTES} bytes, too large for an answer key")
    try:
        text = raw.decode("utf-8-sig")  # a spreadsheet's byte-order mark is not part of the header
    except UnicodeDecodeError as error:
        raise BadGroundTruth(path, f"it is not UTF-8 text (byte {error.start})") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    truth: dict[str, str] = {}
    try:
        header = next(reader, None)
        if header is None:
            raise BadGroundTruth(path, "it is empty; expected a header with the columns incident and kind")
        missing = [column for column in GROUND_TRUTH_COLUMNS if header.count(column) != 1]
        if missing:
            raise BadGroundTruth(path, f"its header {shown(','.join(header), 80)} lacks the column {missing[0]!r} (or has it twice)")
        at_incident, at_kind = header.index("incident"), header.index("kind")
        kinds = known_kinds()
        for row in reader:
            line = reader.line_num
            if not row:
                continue  # a blank line
            if len(row) != len(header):
                raise BadGroundTruth(path, f"line {line} has {len(row)} fields, the header {len(header)}")
            incident, kind = row[at_incident], row[at_kind]
            if not incident or incident != incident.strip() or not incident.isprintable():
                raise BadGroundTruth(
                    path, f"line {line} has the incident id {shown(incident)}: empty, with spaces around it, or with control characters"
                )
            if kind not in kinds:
                expected = ", ".join(kinds)
                raise BadGroundTruth(path, f"line {line} gives {incident} the unknown kind {shown(kind)}: expected one of {expected}")
            if incident in truth:
                raise BadGroundTruth(path, f"line {line} lists {incident} again; each incident has one true kind")
            truth[incident] = kind
    except csv.Error as error:
        raise BadGroundTruth(path, f"line {reader.line_num} is not CSV ({error})") from None
    if not truth:
        raise BadGroundTruth(path, "it lists no incidents")
    return truth


def _ground_truth_label(path: Path) -> str:
    # The shipped answer key is named the way the lab names it; another one by its path.
    return f"data/{GROUND_TRUTH_FILE}" if path == DEFAULT_DATA_DIR / GROUND_TRUTH_FILE else str(path)


# --------------------------------------------------------------------------- the task scorecard


@dataclass(frozen=True)
class TaskScore:
    """How right the diagnoses are, against the ground truth; nothing about recovery.

    ``assessments`` says which assessment of each run was scored: ``"latest"`` (what its
    report says) or ``"original"`` (seq 1, before any re-evaluation).

    - ``accuracy`` = correct / scored, None when nothing was scored;
    - ``per_class[kind]``: ``precision`` = correct / predicted of that kind, **None when no
      run was predicted that kind**; ``recall`` = correct / truly of that kind, **None when
      the kind never occurs** among the scored runs; also the three counts. The kinds are
      those that occur among the scored runs, as truth or as prediction;
    - ``confusion[truth][predicted]`` = runs, only counts above zero;
    - ``unscored``: runs not counted at all (not as wrong): ``no_assessment`` (not inspected
      yet, or inspected by workflow version 1, which recorded none) and
      ``not_in_ground_truth``;
    - ``misdiagnosed``: the scored runs whose kind is wrong; ``reevaluated``: the runs with
      more than one assessment.
    """

    assessments: str
    ground_truth: str
    scored: int
    correct: int
    accuracy: float | None
    per_class: dict[str, dict[str, float | int | None]]
    confusion: dict[str, dict[str, int]]
    misdiagnosed: list[dict[str, str]]
    unscored: dict[str, list[str]]
    reevaluated: list[str]

    def as_json(self) -> dict:
        return {
            "assessments": self.assessments, "scored": self.scored, "correct": self.correct, "accuracy": self.accuracy,
            "per_class": self.per_class, "confusion": self.confusion, "misdiagnosed": self.misdiagnosed,
            "unscored": self.unscored, "reevaluated": self.reevaluated,
        }


def task_score(db: str | Path, *, assessments: str = "latest", ground_truth: str | Path | None = None) -> TaskScore:
    """Score each run's diagnosis (``assessments``: ``"latest"`` or ``"original"``) against the ground truth.

    Reads only ``runs`` and ``assessments`` (and the ground truth file), read-only.
    """
    return _task_scores(db, ground_truth, (assessments,))[0]


def _task_scores(db: str | Path, ground_truth: str | Path | None, which: tuple[str, ...]) -> list[TaskScore]:
    if any(choice not in ("latest", "original") for choice in which):
        raise ValueError(f"assessments must be 'latest' or 'original', not {which!r}")
    truth_path = Path(ground_truth) if ground_truth is not None else ground_truth_path()
    truth = load_ground_truth(truth_path)  # bad input is refused before the database is opened
    return _score_tasks(db, truth, _ground_truth_label(truth_path), which)


def _score_tasks(db: str | Path, truth: dict[str, str], label: str, which: tuple[str, ...]) -> list[TaskScore]:
    with scoped_connection(db, "task", TASK_TABLES) as conn:
        runs = [row["incident"] for row in conn.execute(TASK_RUNS_SQL)]
        kinds: dict[str, dict[int, str]] = {}
        for row in conn.execute(TASK_ASSESSMENTS_SQL):
            kinds.setdefault(row["incident"], {})[row["seq"]] = row["kind"]
    return [_score_task(runs, kinds, truth, choice, label) for choice in which]


def _score_task(
    runs: list[str], kinds: dict[str, dict[int, str]], truth: dict[str, str], which: str, label: str
) -> TaskScore:
    pairs: list[tuple[str, str, str]] = []  # incident, truth, predicted
    no_assessment, not_in_truth = [], []
    for incident in runs:
        found = kinds.get(incident)
        if not found:
            no_assessment.append(incident)
        elif incident not in truth:
            not_in_truth.append(incident)
        else:
            pairs.append((incident, truth[incident], found[max(found)] if which == "latest" else found[min(found)]))
    confusion: dict[str, dict[str, int]] = {}
    for _incident, actual, predicted in pairs:
        row = confusion.setdefault(actual, {})
        row[predicted] = row.get(predicted, 0) + 1
    classes = sorted({actual for _, actual, _ in pairs} | {predicted for _, _, predicted in pairs})
    per_class: dict[str, dict[str, float | int | None]] = {}
    for kind in classes:
        right = sum(1 for _, actual, predicted in pairs if actual == predicted == kind)
        told = sum(1 for _, _, predicted in pairs if predicted == kind)
        true = sum(1 for _, actual, _ in pairs if actual == kind)
        per_class[kind] = {
            "precision": right / told if told else None, "recall": right / true if true else None,
            "truth": true, "predicted": told, "correct": right,
        }
    correct = sum(1 for _, actual, predicted in pairs if actual == predicted)
    return TaskScore(
        assessments=which, ground_truth=label, scored=len(pairs), correct=correct,
        accuracy=correct / len(pairs) if pairs else None,
        per_class=per_class, confusion={actual: dict(sorted(row.items())) for actual, row in sorted(confusion.items())},
        misdiagnosed=[{"incident": i, "truth": a, "predicted": p} for i, a, p in pairs if a != p],
        unscored={"no_assessment": no_assessment, "not_in_ground_truth": not_in_truth},
        reevaluated=sorted(incident for incident, found in kinds.items() if len(found) > 1),
    )


# --------------------------------------------------------------------------- the rules on two data sets


#: What a live RabbitMQ 3.10.8 answered in situations recreated on it (scripts/broker_situations.py):
#: a held-out set, since no rules revision was written from it. Each file is a snapshot plus its
#: ``situation`` and ``expected_kind``.
CAPTURES_DIR = DEFAULT_DATA_DIR / "captures" / "rabbitmq-3.10.8"
#: What a rules revision "predicts" when it cannot read a snapshot (a field it reads is absent):
#: counted as wrong, never left out, so a revision cannot score well by reading less.
CANNOT_READ = "(cannot read)"


@dataclass(frozen=True)
class LabelledSnapshots:
    """Snapshots and what each truly is, keyed alike: the lab's incidents, or captures from a broker."""

    name: str
    snapshots: dict[str, dict]
    truth: dict[str, str]


def incident_set(data: str | Path | None = None) -> LabelledSnapshots:
    """The lab's incidents (``data/incidents/``) and their ground truth: the set the rules were written from."""
    folder = Path(data) if data is not None else data_dir()
    truth = load_ground_truth(folder / GROUND_TRUTH_FILE)
    snapshots = {incident: json.loads(incident_file(folder, incident).read_text(encoding="utf-8"))
                 for incident in list_incidents(folder)}
    return LabelledSnapshots(f"{len(snapshots)} lab incidents", snapshots, {i: truth[i] for i in snapshots if i in truth})


def capture_set(folder: str | Path = CAPTURES_DIR, name: str | None = None) -> LabelledSnapshots:
    """Captures from a live broker, keyed ``"<incident> <situation>"``, with their ``expected_kind``.

    A capture without a situation or with a kind the contract does not know is refused
    (:class:`BadGroundTruth`): it is this set's answer key.
    """
    folder = Path(folder)
    snapshots: dict[str, dict] = {}
    truth: dict[str, str] = {}
    for path in sorted(folder.glob("*.json")):
        capture = json.loads(path.read_text(encoding="utf-8"))
        situation, kind = capture.get("situation"), capture.get("expected_kind")
        if not isinstance(situation, str) or not isinstance(kind, str) or kind not in known_kinds():
            raise BadGroundTruth(path, "a capture needs a situation and an expected_kind the evidence contract knows")
        key = f"{capture.get('incident')} {situation}"
        snapshots[key], truth[key] = capture, kind
    if not snapshots:
        raise BadGroundTruth(folder, "it holds no captures (*.json)")
    return LabelledSnapshots(name or f"{len(snapshots)} captures, {folder.name}", snapshots, truth)


def rules_kind(snapshot: dict, revision: int) -> str:
    """What rules revision ``revision`` says of a snapshot, or :data:`CANNOT_READ` when a field it reads is absent."""
    try:
        return str(assess(observation_of(snapshot), revision)["kind"])
    except RulesInputMissing:
        return CANNOT_READ


def score_rules(labelled: LabelledSnapshots, revision: int) -> TaskScore:
    """The task scorecard of rules revision ``revision`` on a labelled set: no database, the same scoring."""
    kinds = {key: {1: rules_kind(snapshot, revision)} for key, snapshot in labelled.snapshots.items()}
    return _score_task(sorted(labelled.snapshots), kinds, labelled.truth, "latest", labelled.name)


def compare_rules(sets: Iterable[LabelledSnapshots], revisions: Iterable[int] = RULES_REVISIONS) -> dict[tuple[str, int], TaskScore]:
    """Every rules revision scored on every set: ``{(set name, revision): TaskScore}``."""
    return {(labelled.name, revision): score_rules(labelled, revision) for labelled in sets for revision in revisions}


def rules_comparison_frame(scores: Mapping[tuple[str, int], TaskScore]) -> pd.DataFrame:
    """One row per (set, rules revision): scored, correct, accuracy, how many it could not read, and each miss by kind."""
    import pandas as pd  # an optional heavy dependency: loaded only when a frame is asked for

    rows = []
    for (name, revision), score in scores.items():
        misses = Counter(f"{wrong['truth']} -> {wrong['predicted']}" for wrong in score.misdiagnosed)
        rows.append({
            "data": name, "rules": revision, "scored": score.scored, "correct": score.correct,
            "accuracy": round(score.accuracy, 3) if score.accuracy is not None else None,
            "cannot_read": sum(1 for wrong in score.misdiagnosed if wrong["predicted"] == CANNOT_READ),
            "misses": "; ".join(f"{miss} x{count}" for miss, count in sorted(misses.items())),
        })
    return pd.DataFrame(rows)


def rules_comparison_text(scores: Mapping[tuple[str, int], TaskScore]) -> str:
    """The comparison as plain text, one line a (set, revision), then each set's misses: for a terminal or CI log."""
    lines = [f"{'data':<40} {'rules':>5} {'correct':>11} {'cannot read':>11}"]
    for (name, revision), score in scores.items():
        unread = sum(1 for wrong in score.misdiagnosed if wrong["predicted"] == CANNOT_READ)
        lines.append(f"{name:<40} {revision:>5} {f'{score.correct} of {score.scored}':>11} {unread:>11}")
    for (name, revision), score in scores.items():
        for wrong in score.misdiagnosed:
            lines.append(f"rules {revision}, {name}: {wrong['incident']} is {wrong['truth']}, said {wrong['predicted']}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the recovery scorecard


@dataclass(frozen=True)
class RunRecovery:
    """One run (or one explorer scenario) as the recovery scorecard sees it.

    ``tickets`` is None where no destination was looked at; ``uncertain`` None where the
    effect's state is not known to the caller.
    """

    name: str
    completed: bool
    receipts: int
    provider_reads: int
    tickets: int | None = None
    uncertain: bool | None = None


@dataclass(frozen=True)
class RecoveryScore:
    """Whether the workflow recovered correctly; nothing about whether its diagnosis is right.

    - ``completed``: runs at ``report_completed``;
    - ``duplicate_receipts``: receipts beyond one per run (labkit's primary key keeps this 0;
      it is counted all the same, so a variant without the key would show);
    - ``duplicate_effects``: tickets beyond one per incident at the destination, None when no
      destination was given. Counting per incident also counts a retry under a new key,
      the same operation duplicated; two tickets under one key are two for one incident too;
    - ``uncertain_effects``: effects whose outcome is still unknown (None: not known);
    - ``rereads``: provider reads beyond one per run, from the provider's own log: a crash
      between a read and its commit costs one (N1), and shows here.
    """

    runs: int
    completed: int
    duplicate_receipts: int
    duplicate_effects: int | None
    uncertain_effects: int | None
    rereads: int
    unfinished: list[str]
    per_run: tuple[RunRecovery, ...] = ()

    def as_json(self) -> dict:
        return {
            "runs": self.runs, "completed": self.completed, "duplicate_receipts": self.duplicate_receipts,
            "duplicate_effects": self.duplicate_effects, "uncertain_effects": self.uncertain_effects,
            "rereads": self.rereads, "unfinished": self.unfinished,
        }


def _tally(rows: list[RunRecovery]) -> RecoveryScore:
    """The one definition of every recovery number, whatever the rows came from."""
    measured_tickets = [row.tickets for row in rows if row.tickets is not None]
    known_uncertain = [row.uncertain for row in rows if row.uncertain is not None]
    return RecoveryScore(
        runs=len(rows),
        completed=sum(1 for row in rows if row.completed),
        duplicate_receipts=sum(max(0, row.receipts - 1) for row in rows),
        duplicate_effects=sum(max(0, n - 1) for n in measured_tickets) if measured_tickets else None,
        uncertain_effects=sum(1 for flag in known_uncertain if flag) if known_uncertain else None,
        rereads=sum(max(0, row.provider_reads - 1) for row in rows),
        unfinished=[row.name for row in rows if not row.completed],
        per_run=tuple(rows),
    )


def recovery_score(db: str | Path, *, ticket_store: str | Path | None = None) -> RecoveryScore:
    """The recovery scorecard of a checkpoint database, with the destination's tickets when ``ticket_store`` is given.

    Reads only ``runs``, ``receipts`` and ``effects``, the provider's call log beside ``db``
    and the ticket store (read-only, :func:`labkit.ticket_store.store_rows`). Tickets are counted
    for this database's runs only: a store may serve several databases.
    """
    log = CallLog(call_log_for(db))
    log.calls()  # a damaged log is refused before anything else is read
    held: list[dict] | None = None
    if ticket_store is not None:
        if not os.path.lexists(ticket_store):
            raise TicketStoreMissing(ticket_store)
        held = store_rows(ticket_store)
    with scoped_connection(db, "recovery", RECOVERY_TABLES) as conn:
        runs = [(row["incident"], row["step"], row["receipts"], row["uncertain"]) for row in conn.execute(RECOVERY_RUNS_SQL)]
    # Read after the database, as status does: a read is logged before its evidence commits,
    # so this order never shows committed evidence with fewer reads than it took.
    calls = log.calls()
    reads: dict[str, int] = {}
    for call in calls:
        reads[call.incident] = reads.get(call.incident, 0) + 1
    at_destination: dict[str, int] = {}
    for ticket in held or []:
        at_destination[ticket["incident"]] = at_destination.get(ticket["incident"], 0) + 1
    return _tally([
        RunRecovery(
            incident, step == Step.REPORT_COMPLETED.value, receipts, reads.get(incident, 0),
            at_destination.get(incident, 0) if held is not None else None, bool(uncertain),
        )
        for incident, step, receipts, uncertain in runs
    ])


def recovery_from_scenarios(rows: Iterable[Mapping[str, object]]) -> RecoveryScore:
    """The recovery scorecard of the crash explorer's results: one row per scenario, one run each.

    Each row needs ``provider_reads`` and ``receipts`` (whole numbers from 0) and
    ``completed`` (true or false); ``tickets`` (the run's tickets at the destination) and
    ``uncertain`` (its effect left uncertain) may be missing, None or NaN (a pandas gap):
    not measured. ``name`` (or the explorer table's ``scenario``) names the scenario in ``unfinished``
    (default: its index). numpy numbers are accepted, so the explorer's
    ``frame().to_dict("records")`` can be passed as it is.
    """
    return _tally([_scenario(index, row) for index, row in enumerate(rows)])


def _scenario(index: int, row: Mapping[str, object]) -> RunRecovery:
    if not isinstance(row, Mapping):
        raise BadScenarioRow(index, f"expected a mapping of counts, got {type(row).__name__}")
    for key in ("provider_reads", "receipts", "completed"):
        if key not in row:
            raise BadScenarioRow(index, f"it has no {key!r}")

    def count(key: str, optional: bool = False) -> int | None:
        value = row.get(key)
        if optional and (value is None or (isinstance(value, float) and math.isnan(value))):
            return None
        if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 0:
            return int(value)
        if isinstance(value, float) and value.is_integer() and value >= 0:  # pandas keeps a column with gaps as floats
            return int(value)
        raise BadScenarioRow(index, f"{key} is {shown(value)}, not a whole number from 0")

    def flag(key: str, optional: bool = False) -> bool | None:
        value = row.get(key)
        if optional and (value is None or (isinstance(value, float) and math.isnan(value))):
            return None
        if isinstance(value, str) or value not in (True, False):  # numpy's bool compares equal too
            raise BadScenarioRow(index, f"{key} is {shown(value)}, not true or false")
        return bool(value)

    reads, receipts = count("provider_reads"), count("receipts")
    assert reads is not None and receipts is not None  # not optional: count() raised otherwise
    completed = flag("completed")
    return RunRecovery(
        str(row.get("name", row.get("scenario", index))), bool(completed), receipts, reads, count("tickets", optional=True),
        flag("uncertain", optional=True),
    )


# --------------------------------------------------------------------------- both, side by side


@dataclass(frozen=True)
class Evaluation:
    """Both scorecards of one database: what ``python -m labkit evaluate`` prints.

    ``task_original`` scores each run's original assessment (seq 1) beside ``task`` (the
    latest) when at least one run was re-evaluated; otherwise it is None.
    """

    task: TaskScore
    task_original: TaskScore | None
    recovery: RecoveryScore

    def as_json(self) -> dict:
        return {
            "task": self.task.as_json(),
            "task_original": self.task_original.as_json() if self.task_original is not None else None,
            "recovery": self.recovery.as_json(),
        }

    def lines(self) -> list[str]:
        """The human form: a small table for each scorecard, under its title."""
        out = _task_lines(self.task, f"Task (diagnosis vs {self.task.ground_truth})")
        if self.task_original is not None:
            out += [""] + _task_lines(
                self.task_original, f"Task, original assessments (before re-evaluation of {', '.join(self.task.reevaluated)})"
            )
        return out + [""] + _recovery_lines(self.recovery)


def evaluate(db: str | Path, *, ticket_store: str | Path | None = None, ground_truth: str | Path | None = None) -> Evaluation:
    """Both scorecards of ``db``, each from its own connection and its own data; read-only."""
    # Every input outside the database (answer key, call log, ticket store) is checked before
    # either scorer opens it: bad input is refused with nothing read half way.
    truth_path = Path(ground_truth) if ground_truth is not None else ground_truth_path()
    truth = load_ground_truth(truth_path)
    recovery = recovery_score(db, ticket_store=ticket_store)
    latest, original = _score_tasks(db, truth, _ground_truth_label(truth_path), ("latest", "original"))
    return Evaluation(latest, original if latest.reevaluated else None, recovery)


def _ratio(value: float | int | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _task_lines(score: TaskScore, title: str) -> list[str]:
    which = "latest assessment" if score.assessments == "latest" else "original assessment"
    lines = [title, f"accuracy {_ratio(score.accuracy)}: {score.correct} of {score.scored} runs scored right ({which} of each run)"]
    lines.append(f"{'kind':<16} {'truth':>5} {'predicted':>9} {'correct':>7} {'precision':>9} {'recall':>6}")
    for kind, row in score.per_class.items():
        lines.append(f"{kind:<16} {row['truth']:>5} {row['predicted']:>9} {row['correct']:>7} "
                     f"{_ratio(row['precision']):>9} {_ratio(row['recall']):>6}")
    for wrong in score.misdiagnosed:
        lines.append(f"wrong: {wrong['incident']} is {wrong['truth']}, diagnosed {wrong['predicted']}")
    if score.unscored["no_assessment"]:
        lines.append(f"not scored, no assessment yet: {', '.join(score.unscored['no_assessment'])}")
    if score.unscored["not_in_ground_truth"]:
        lines.append(f"not scored, not in the ground truth: {', '.join(score.unscored['not_in_ground_truth'])}")
    return lines


def _recovery_lines(score: RecoveryScore) -> list[str]:
    def shown_count(value: int | None, missing: str) -> str:
        return f"{value:>5}" if value is not None else f"{'-':>5}  ({missing})"

    lines = [
        "Recovery",
        f"{'runs':<19}{score.runs:>5}",
        f"{'completed':<19}{score.completed:>5}",
        f"{'duplicate_receipts':<19}{score.duplicate_receipts:>5}",
        f"{'duplicate_effects':<19}{shown_count(score.duplicate_effects, 'no destination given: add --ticket-store PATH')}",
        f"{'uncertain_effects':<19}{shown_count(score.uncertain_effects, 'not known')}",
        f"{'rereads':<19}{score.rereads:>5}",
    ]
    if score.unfinished:
        lines.append(f"not completed: {', '.join(score.unfinished)}")
    return lines


# --------------------------------------------------------------------------- pandas frames for notebooks


def per_class_frame(score: TaskScore) -> pd.DataFrame:
    """One row per kind: how many runs truly were it, were predicted it, were right; precision, recall."""
    import pandas as pd  # an optional heavy dependency: loaded only when a frame is asked for

    columns = ["kind", "truth", "predicted", "correct", "precision", "recall"]
    rows = [{"kind": kind, **{c: row[c] for c in columns[1:]}} for kind, row in score.per_class.items()]
    # None becomes NaN in a float column: shown as NaN, meaning "undefined", not 0.
    return pd.DataFrame(rows, columns=columns).astype({"precision": "float64", "recall": "float64"})


def confusion_frame(score: TaskScore) -> pd.DataFrame:
    """The confusion table as a square frame: rows the true kind, columns the predicted kind, zeros filled."""
    import pandas as pd  # an optional heavy dependency: loaded only when a frame is asked for

    kinds = list(score.per_class)
    frame = pd.DataFrame(
        [[score.confusion.get(actual, {}).get(predicted, 0) for predicted in kinds] for actual in kinds],
        index=pd.Index(kinds, name="truth"), columns=pd.Index(kinds, name="predicted"),
    )
    return frame


def recovery_frame(score: RecoveryScore) -> pd.DataFrame:
    """One row per run (or scenario): completed, receipts, provider reads, tickets at the destination, uncertain."""
    import pandas as pd  # an optional heavy dependency: loaded only when a frame is asked for

    columns = ["run", "completed", "receipts", "provider_reads", "tickets", "uncertain"]
    rows = [(r.name, r.completed, r.receipts, r.provider_reads, r.tickets, r.uncertain) for r in score.per_run]
    frame = pd.DataFrame(rows, columns=columns)
    frame["tickets"] = frame["tickets"].astype("Int64")  # whole numbers stay whole beside a gap
    return frame
