"""Property-based tests (hypothesis): random answers validate or change nothing; random orders keep the invariants.

(a) Random mutations of a valid answer (fields dropped, added, retyped, renumbered, number
    literals a double cannot hold, bytes inserted or overwritten, random bytes, random JSON)
    either pass :func:`labkit.check_evidence` or raise :class:`labkit.errors.EvidenceRejected`,
    never any other exception; an accepted answer survives the canonical spelling it is
    stored in. Through the coordinator (:func:`labkit.lab.catalogue.run_case`, a CannedProvider
    answering the mutation), either the evidence is stored and the step moved by one, or
    the database's bytes are unchanged.
(b) A stateful test (``RuleBasedStateMachine``) drives start / inspect / complete / a
    refused answer / an injected failure (``CrashPlan(point, "raise")`` at any crash point,
    inside ``drive``) / recover (with or without an injected failure) in random orders on
    three incidents of ONE database. After every step it copies the database (SQLite's
    backup API) and the provider's call log, recovers the copy once and checks the seven
    invariants with :func:`labkit.check_invariants`, expecting 1 + the reads whose
    transaction never committed (tracked by the model) per run; the real database then goes
    on from where it was. The model also checks each run's step and reads on the real one.

Settings, fixed so CI is repeatable (``derandomize=True``; no example database is kept):

- (a) ``max_examples=100`` for each of three tests: every kind of mutation through
  ``check_evidence``; renumbered fields only (numbers are where JSON readers disagree) through
  ``check_evidence``; every kind through the coordinator. ``deadline=None``,
  ``derandomize=True``, ``database=None``.
- (b) ``max_examples=30``, ``stateful_step_count=25``; ``deadline=None``, ``derandomize=True``,
  ``database=None``, health check ``too_slow`` suppressed (each step checks a recovered copy).

Databases live in /dev/shm where there is one (the fsync of every commit is not under test
here): the four tests take about 5 s on two cores with /dev/shm, about 25 s on a busy disk.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import sqlite3
import tempfile
from collections import Counter
from contextlib import closing
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from json_paths import at, paths, reference_answer

import labkit
from labkit import CrashPlan, CrashPoint, Step
from labkit.jsontext import JsonProblem, canonical_json, strict_loads
from labkit.lab.catalogue import INCIDENT, CannedProvider, Case, cases, run_case

MUTATION_SETTINGS = settings(max_examples=100, deadline=None, derandomize=True, database=None)
STATEFUL_SETTINGS = settings(
    max_examples=30, stateful_step_count=25, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

#: A folder in memory where the system has one: these tests are about what is committed and
#: rolled back, not about surviving a power cut, and each commit's fsync would otherwise
#: make the stateful test several times slower on a real disk.
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None

#: Rules a refusal may name: those of labkit.jsontext and labkit.contract, and schema:<validator>.
RULES = {
    "size-limit", "utf-8", "no-byte-order-mark", "json-syntax", "no-nan-or-infinity", "unique-keys", "nesting-depth",
    "unicode-text", "number-size", "real-instant", "same-incident",
}


@cache
def valid_answer() -> bytes:
    """Today's reference provider's answer for INCIDENT, the seed of every mutation."""
    return reference_answer(INCIDENT)


VALID = json.loads(valid_answer())
ALL_PATHS = paths(VALID)
INNER_PATHS = [path for path in ALL_PATHS if path]
OBJECT_PATHS = [path for path in ALL_PATHS if isinstance(at(VALID, path), dict)]
NUMBER_PATHS = [path for path in ALL_PATHS if type(at(VALID, path)) in (int, float)]

json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
#: Number spellings: edges a lenient parser turns into something else (1e400 becomes inf, a
#: 5,000-digit integer is refused by Python), and JSON numbers with any exponent a double has or has not.
number_literals = st.sampled_from(
    ["0", "-0", "-1", "1.5", "1e400", "-1e400", "1E309", "1e-400", "9" * 5000, "0.1e1", "01", "1.", ".5", "NaN", "-Infinity"]
) | st.builds(
    "{}{}{}e{}".format,
    st.sampled_from(["", "-"]), st.integers(0, 10**20), st.sampled_from(["", ".5", ".25"]), st.integers(-999, 999),
)

PLACEHOLDER = "\u2063labkit-placeholder\u2063"


def spelled(body) -> bytes:
    return json.dumps(body, indent=1).encode("utf-8")


def set_at(body, path, value):
    body = copy.deepcopy(body)
    if not path:
        return value
    at(body, path[:-1])[path[-1]] = value
    return body


@st.composite
def dropped(draw) -> bytes:
    path = draw(st.sampled_from(INNER_PATHS))
    body = copy.deepcopy(VALID)
    del at(body, path[:-1])[path[-1]]
    return spelled(body)


@st.composite
def added(draw) -> bytes:
    path = draw(st.sampled_from(OBJECT_PATHS))
    body = copy.deepcopy(VALID)
    at(body, path)[draw(st.text(max_size=12))] = draw(json_values)
    return spelled(body)


@st.composite
def retyped(draw) -> bytes:
    return spelled(set_at(VALID, draw(st.sampled_from(ALL_PATHS)), draw(json_values)))


@st.composite
def renumbered(draw) -> bytes:
    """A number replaced by another: Python's own (NaN and infinities spelled as Python spells them) or a literal."""
    path = draw(st.sampled_from(NUMBER_PATHS))
    if draw(st.booleans()):
        return spelled(set_at(VALID, path, draw(st.integers() | st.floats())))
    literal = draw(number_literals)
    return spelled(set_at(VALID, path, PLACEHOLDER)).replace(json.dumps(PLACEHOLDER).encode(), literal.encode())


@st.composite
def byte_edits(draw) -> bytes:
    raw = bytearray(valid_answer())
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(raw)))
        what = draw(st.sampled_from(["insert", "overwrite", "delete"]))
        chunk = draw(st.binary(min_size=1, max_size=4))
        if what == "insert":
            raw[at:at] = chunk
        elif what == "overwrite":
            raw[at : at + len(chunk)] = chunk
        else:
            del raw[at : at + len(chunk)]
    return bytes(raw)


answers = st.one_of(
    dropped(), added(), retyped(), renumbered(), byte_edits(),
    st.binary(max_size=64),
    json_values.map(lambda value: json.dumps(value).encode("utf-8")),
)


def refusal_is_well_formed(error: labkit.errors.EvidenceRejected) -> None:
    assert error.rule in RULES or error.rule.startswith("schema:"), error.rule
    assert isinstance(error.field, str) and error.field
    assert "\n" not in str(error) and f"rule {error.rule}" in str(error)


@MUTATION_SETTINGS
@given(raw=answers)
def test_a_mutated_answer_is_accepted_or_refused_nothing_else(raw):
    accepted_or_refused(raw)


@MUTATION_SETTINGS
@given(raw=renumbered())
def test_a_renumbered_answer_is_accepted_or_refused_nothing_else(raw):
    """Numbers get their own run: they are where JSON readers disagree (NaN, 1e400, -0, 5,000 digits)."""
    accepted_or_refused(raw)


def accepted_or_refused(raw: bytes) -> None:
    try:
        body = labkit.check_evidence(raw, INCIDENT)
    except labkit.errors.EvidenceRejected as error:
        refusal_is_well_formed(error)
        event(f"refused: {error.rule}")
        return
    event("accepted")
    assert isinstance(body, dict) and body["incident"] == INCIDENT
    # What is accepted is stored in its canonical spelling, which must mean the same thing.
    assert labkit.check_evidence(canonical_json(body), INCIDENT) == body


def _lone_surrogate_in(value: object) -> bool:
    """The full rule, walked by hand: a string (or key) anywhere that is not Unicode text."""
    if isinstance(value, str):
        return any(0xD800 <= ord(char) <= 0xDFFF for char in value)
    if isinstance(value, dict):
        return any(_lone_surrogate_in(key) or _lone_surrogate_in(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_lone_surrogate_in(item) for item in value)
    return False


#: Strings that mix what matters here: high and low surrogates alone, a pair (an emoji once escaped),
#: a backslash (so ``\\ud800`` may be text, not an escape), ASCII and other characters.
_tricky_text = st.lists(
    st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d\ude00", "\\", "u", "d8", "a", "é", "😀"])
    | st.characters(), max_size=6,
).map("".join)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | _tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_tricky_text, inner, max_size=3),
    max_leaves=8,
)


@MUTATION_SETTINGS
@given(value=_json_values, ascii_only=st.booleans(), upper_hex=st.booleans(), as_bytes=st.booleans())
def test_strict_json_refuses_a_lone_surrogate_wherever_and_however_it_is_written(value, ascii_only, upper_hex, as_bytes):
    """strict_loads walks the parsed value only when the text could hold a surrogate; the refusals
    must be exactly the full walk's, for escapes in either case, raw surrogates in text, and pairs."""
    text = json.dumps(value, ensure_ascii=ascii_only)
    if upper_hex:
        text = re.sub(r"\\u[0-9a-f]{4}", lambda m: m.group(0)[:2] + m.group(0)[2:].upper(), text)
    if as_bytes:
        try:
            data: bytes | str = text.encode("utf-8")
        except UnicodeEncodeError:
            data = text  # a raw lone surrogate has no UTF-8 bytes: only text can carry it
    else:
        data = text
    expected = _lone_surrogate_in(json.loads(text))  # what the text means, pairs joined as JSON joins them
    try:
        parsed = strict_loads(data)
    except JsonProblem as problem:
        assert expected and problem.rule == "unicode-text", (text, problem.rule)
        return
    assert not expected, text
    assert parsed == json.loads(text)


@MUTATION_SETTINGS
@given(raw=answers | renumbered())
def test_through_the_coordinator_evidence_is_stored_or_nothing_changes(raw):
    with tempfile.TemporaryDirectory(prefix="labkit-properties-", dir=SCRATCH) as scratch:
        db = Path(scratch) / "lab.db"
        result = run_case(db, Case("mutation", INCIDENT, raw, None, None), clock=labkit.TickingClock())
        assert result.step_before is Step.NOT_INSPECTED and result.evidence_before == 0
        assert result.provider_calls == 1
        event(f"refused: {result.rule}" if result.refused else "accepted")
        if result.refused:
            assert result.database_unchanged, (result.rule, result.db_before, result.db_after)
            assert (result.step_after, result.evidence_after) == (Step.NOT_INSPECTED, 0)
        else:
            assert (result.step_after, result.evidence_after) == (Step.EVIDENCE_RECORDED, 1)
            with closing(labkit.connect(db)) as conn, labkit.read_transaction(conn):
                evidence = labkit.store.load_evidence_txn(conn, INCIDENT)
            assert evidence is not None and evidence.body == labkit.check_evidence(raw, INCIDENT)


# --------------------------------------------------------------------------- (b) random orders, one database


INCIDENTS = ("INC-1001", "INC-1002", "INC-1003")
POINTS = tuple(CrashPoint)
#: Answers the contract refuses whichever incident was asked about (one says it is about another).
REFUSED = tuple(case for case in cases() if case.rule != "same-incident")


def simulate(step: Step | None, point: CrashPoint | None) -> tuple[Step, int, bool]:
    """The model: where ``drive`` leaves a run when an injected failure fires at ``point``.

    Returns (step afterwards, reads lost in a rolled-back transaction, raised). Written from
    ../shared/DESIGN.md's description of the crash points, not from the coordinator's code.
    """
    step = step or Step.NOT_INSPECTED  # drive() starts a run that does not exist
    if step is Step.NOT_INSPECTED:
        if point is CrashPoint.BEFORE_READ:
            return step, 0, True
        if point in (CrashPoint.AFTER_READ, CrashPoint.BEFORE_EVIDENCE_COMMIT):
            return step, 1, True
        step = Step.EVIDENCE_RECORDED
        if point is CrashPoint.AFTER_EVIDENCE_COMMIT:
            return step, 0, True
    if step is Step.EVIDENCE_RECORDED:
        if point in (CrashPoint.BEFORE_RECEIPT_WRITE, CrashPoint.BEFORE_COMPLETION_COMMIT):
            return step, 0, True
        step = Step.REPORT_COMPLETED
        if point is CrashPoint.AFTER_COMPLETION_COMMIT:
            return step, 0, True
    return step, 0, False


class Workflow(RuleBasedStateMachine):
    """One database, three incidents, every operation in any order; a recovered copy checked after each."""

    def __init__(self):
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="labkit-properties-", dir=SCRATCH))
        self.db = self.folder / "lab.db"
        self.log = labkit.CallLog(labkit.call_log_for(self.db))
        self.clock = labkit.TickingClock()
        self.provider = labkit.ReferenceProvider(self.log.path)
        self.conn = labkit.connect(self.db)
        self.steps: dict[str, Step] = {}  # the model: each run's step
        self.lost: Counter[str] = Counter()  # reads whose transaction never committed
        self.checks = 0

    def teardown(self):
        self.conn.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def coordinator(self, provider=None, point: CrashPoint | None = None) -> labkit.Coordinator:
        crash = CrashPlan(point, "raise") if point is not None else CrashPlan()
        return labkit.Coordinator(self.conn, provider or self.provider, clock=self.clock, crash=crash)

    @rule(incident=st.sampled_from(INCIDENTS))
    def start(self, incident):
        run = self.coordinator().start(incident)
        self.steps.setdefault(incident, Step.NOT_INSPECTED)
        assert run.step is self.steps[incident]

    @rule(incident=st.sampled_from(INCIDENTS))
    def inspect(self, incident):
        if incident not in self.steps:
            with pytest.raises(labkit.errors.UnknownRun):
                self.coordinator().inspect(incident)
            return
        self.coordinator().inspect(incident)
        if self.steps[incident] is Step.NOT_INSPECTED:
            self.steps[incident] = Step.EVIDENCE_RECORDED

    @rule(incident=st.sampled_from(INCIDENTS), case=st.sampled_from(REFUSED))
    def inspect_refused_answer(self, incident, case):
        canned = self.coordinator(CannedProvider(self.log.path, {incident: case.raw}))
        if incident not in self.steps:
            with pytest.raises(labkit.errors.UnknownRun):
                canned.inspect(incident)
        elif self.steps[incident] is Step.NOT_INSPECTED:
            with pytest.raises(labkit.errors.EvidenceRejected) as caught:
                canned.inspect(incident)
            assert (caught.value.rule, caught.value.field) == (case.rule, case.field)
            self.lost[incident] += 1  # read, refused, never committed: it will be read again
        else:
            canned.inspect(incident)  # past not_inspected: no read, nothing to refuse

    @rule(incident=st.sampled_from(INCIDENTS))
    def complete(self, incident):
        if incident not in self.steps:
            with pytest.raises(labkit.errors.UnknownRun):
                self.coordinator().complete(incident)
        elif self.steps[incident] is Step.NOT_INSPECTED:
            with pytest.raises(labkit.errors.StepOrderError):
                self.coordinator().complete(incident)
        else:
            self.coordinator().complete(incident)
            self.steps[incident] = Step.REPORT_COMPLETED

    @rule(incident=st.sampled_from(INCIDENTS), point=st.sampled_from(POINTS))
    def drive_with_injected_failure(self, incident, point):
        step, lost, raises = simulate(self.steps.get(incident), point)
        try:
            self.coordinator(point=point).drive(incident)
        except labkit.errors.InjectedFailure as failure:
            assert raises and failure.point == point.value
        else:
            assert not raises
        self.steps[incident] = step
        self.lost[incident] += lost

    @rule(point=st.none() | st.sampled_from(POINTS))
    def recover(self, point):
        unfinished = {i for i, step in self.steps.items() if step is not Step.REPORT_COMPLETED}
        crash = CrashPlan(point, "raise") if point is not None else CrashPlan()
        resumed = labkit.recover(self.db, self.provider, clock=self.clock, crash=crash)
        assert {r.incident for r in resumed} == unfinished
        for result in resumed:
            step, lost, raises = simulate(self.steps[result.incident], point)
            assert isinstance(result.error, labkit.errors.InjectedFailure) if raises else result.error is None, result
            self.steps[result.incident] = step
            self.lost[result.incident] += lost

    @invariant()
    def the_real_database_matches_the_model(self):
        with labkit.read_transaction(self.conn):
            runs = {run.incident: run.step for run in labkit.store.list_runs_txn(self.conn)}
        assert runs == self.steps
        for incident, step in self.steps.items():
            committed = 0 if step is Step.NOT_INSPECTED else 1
            assert self.log.reads_of(incident) == committed + self.lost[incident], incident

    @invariant()
    def a_recovered_copy_keeps_the_seven_invariants(self):
        self.checks += 1
        copy_folder = self.folder / f"copy-{self.checks}"
        copy_folder.mkdir()
        copy_db = copy_folder / "lab.db"
        with closing(sqlite3.connect(self.db)) as source, closing(sqlite3.connect(copy_db)) as target:
            source.backup(target)
        copy_log = labkit.call_log_for(copy_db)
        if self.log.path.exists():
            shutil.copyfile(self.log.path, copy_log)
        provider = labkit.ReferenceProvider(copy_log)
        labkit.recover(copy_db, provider, clock=labkit.TickingClock("2027-01-01T00:00:00Z"))
        expected = {incident: 1 + self.lost[incident] for incident in self.steps}
        results = labkit.check_invariants(copy_db, copy_log, expected, provider)
        assert len(results) == 7
        failed = [f"{r.number} {r.statement}: {r.detail}" for r in results if not r.held]
        assert not failed, failed
        shutil.rmtree(copy_folder)


Workflow.TestCase.settings = STATEFUL_SETTINGS
TestWorkflow = Workflow.TestCase
