"""The catalogue of hostile and malformed provider answers, and the means to replay them.

A provider's answer is data, not permission (07_evidence_contract). To show that, the lab
keeps a catalogue of answers a provider might really send back (an HTML error page, a
Windows-1252 byte, ``NaN``, a duplicated key, an extra ``"step": "report_completed"``, an
instruction where a diagnosis kind belongs, ...) as files in ``data/contract-cases/``: the
raw bytes in ``<nn>-<name>.response`` and, beside them, in ``<nn>-<name>.rule``, the rule
of the evidence contract (:mod:`labkit.contract`) that must refuse them and the field it
names. Each was made from one valid answer of the reference provider, changed in one place.

- :func:`cases` reads the catalogue; a response without its rule file is an error, so no
  case can be added without saying what must catch it.
- :class:`CannedProvider` is a read adapter that answers given bytes, logging each call in
  the provider's own log as the reference provider does, so the log shows the call even
  when the contract refuses what it answered.
- :func:`run_case` runs one case through the real coordinator and reports what happened,
  measured, never typed in: the rule that caught it, the run's step and evidence before and
  after, whether the database's bytes changed, and the calls the provider logged. Notebook
  07's table and ``tests/lab/test_catalogue.py`` are built from it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from ..clock import Clock
from ..coordinator import Coordinator
from ..database import read_transaction
from ..errors import BadInput, EvidenceRejected, ProviderUnavailable, StepOrderError, UnknownIncident
from ..provider import DEFAULT_DATA_DIR, CallLog, call_log_for, list_incidents
from ..steps import Step
from ..store import connect, find_run_txn

#: Where the catalogue lives: in the repository's data folder, beside the incidents.
CASES_DIR = DEFAULT_DATA_DIR / "contract-cases"
#: Every case answers a request about this incident (the answer it was made from is this one's).
INCIDENT = "INC-1001"

_STEM = re.compile(r"^[0-9]{2}-[a-z0-9]+(-[a-z0-9]+)*$")
_RULE_LINE = re.compile(r"^(?P<rule>[a-z0-9:A-Z-]+) (?P<field>\S+)$")


class CatalogueError(BadInput):
    """The catalogue folder is not as :func:`cases` expects: a file without its pair, a bad rule line."""

    def __init__(self, path: Path, problem: str):
        self.path, self.problem = path, problem
        super().__init__(f"contract case {path.name}: {problem}")


@dataclass(frozen=True)
class Case:
    """One provider answer and what the evidence contract must say about it.

    ``raw`` is the answer byte for byte. ``rule`` and ``field`` are what
    :class:`~labkit.errors.EvidenceRejected` must carry; both None for an answer the
    contract must accept (a lesson's own case, such as instruction-like text in a summary).
    """

    name: str
    incident: str
    raw: bytes
    rule: str | None
    field: str | None

    def __repr__(self) -> str:  # the bytes can be 16 KB: name the case, not its content
        return f"Case({self.name!r}, {self.incident!r}, {len(self.raw)} bytes, rule={self.rule!r}, field={self.field!r})"


def cases(folder: str | Path = CASES_DIR, incident: str = INCIDENT) -> list[Case]:
    """Every case in the catalogue, in file order; :class:`CatalogueError` if one is incomplete.

    A ``.response`` must have its ``.rule`` beside it and the other way round, and the rule
    file must hold exactly one line: the rule, a space, the field.
    """
    folder = Path(folder)
    responses = {path.stem: path for path in folder.glob("*.response")}
    rules = {path.stem: path for path in folder.glob("*.rule")}
    for stem in sorted(set(responses) ^ set(rules)):
        path = responses.get(stem) or rules[stem]
        other = ".rule" if stem in responses else ".response"
        raise CatalogueError(path, f"has no {stem}{other} beside it")
    found = []
    for stem in sorted(responses):
        if not _STEM.match(stem):
            raise CatalogueError(responses[stem], "its name is not <nn>-<name> (two digits, then lower-case words)")
        rule, field = _read_rule(rules[stem])
        found.append(Case(stem, incident, responses[stem].read_bytes(), rule, field))
    numbers = [case.name[:2] for case in found]
    if len(set(numbers)) != len(numbers):
        duplicated = sorted({number for number in numbers if numbers.count(number) > 1})
        raise CatalogueError(folder, f"case number {duplicated[0]} is used twice")
    return found


def _read_rule(path: Path) -> tuple[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise CatalogueError(path, "is not UTF-8 text") from None
    lines = text.splitlines()
    if len(lines) != 1 or text.count("\n") > 1:
        raise CatalogueError(path, f"must hold exactly one line, the rule and the field; it holds {len(lines)}")
    match = _RULE_LINE.match(lines[0])
    if match is None:
        raise CatalogueError(path, f"{lines[0][:60]!r} is not '<rule> <field>'")
    return match["rule"], match["field"]


class CannedProvider:
    """A read adapter that answers the bytes it was given, as they are.

    It stands in for a provider that misbehaves: ``answers`` maps an incident to the raw
    response to return. Like :class:`~labkit.provider.ReferenceProvider` it keeps its own
    call log and writes each call there before answering, so a read whose answer the
    contract then refuses is still in the log (07_evidence_contract). An incident with no
    canned answer is logged as ``unavailable`` and fails as a provider that is down.
    Its incidents are the ones shipped in ``data/`` (or ``data``).
    """

    def __init__(self, call_log: str | Path, answers: Mapping[str, bytes], data: str | Path | None = None):
        self.log = CallLog(call_log)
        self.answers = dict(answers)
        self.data = data

    @property
    def decision_inputs(self) -> dict[str, object]:
        """Who answered: a canned adapter has no rules or prompt of its own."""
        return {"provider": "canned", "rules_revision": None, "prompt_revision": None}

    def incidents(self) -> list[str]:
        return list_incidents(self.data)

    def read(self, incident: str) -> bytes:
        known = self.incidents()
        if incident not in known:
            raise UnknownIncident(incident, len(known))
        answer = self.answers.get(incident)
        if answer is None:
            self.log.append(incident, "unavailable", 0)
            raise ProviderUnavailable(incident, "the canned provider has no answer for it")
        self.log.append(incident, "ok", len(answer))
        return answer


@dataclass(frozen=True)
class CaseResult:
    """What running one case through the coordinator did, measured.

    ``rule``, ``field`` and ``message`` come from the EvidenceRejected that was raised (all
    None if the answer was accepted). ``db_before`` and ``db_after`` are sha256 digests of
    the database file and its write-ahead log (None for a file that does not exist), taken
    while the connection was open, so nothing but the inspection lies between them.
    ``provider_calls`` is how many calls the provider's own log gained.
    """

    case: str
    incident: str
    expected_rule: str | None
    expected_field: str | None
    rule: str | None
    field: str | None
    message: str | None
    step_before: Step
    step_after: Step
    evidence_before: int
    evidence_after: int
    db_before: dict[str, str | None]
    db_after: dict[str, str | None]
    provider_calls: int

    @property
    def refused(self) -> bool:
        return self.rule is not None

    @property
    def as_expected(self) -> bool:
        """The contract said exactly what the catalogue says it must."""
        return (self.rule, self.field) == (self.expected_rule, self.expected_field)

    @property
    def database_unchanged(self) -> bool:
        return self.db_before == self.db_after

    def row(self) -> dict[str, object]:
        """One row of notebook 07's table."""
        return {
            "case": self.case,
            "rule": self.rule or "(accepted)",
            "field": self.field or "",
            "expected": self.as_expected,
            "step before": self.step_before.value,
            "step after": self.step_after.value,
            "evidence rows": f"{self.evidence_before} -> {self.evidence_after}",
            "db bytes unchanged": self.database_unchanged,
            "provider calls": self.provider_calls,
        }


def database_digests(db: str | Path) -> dict[str, str | None]:
    """sha256 of the database file and of its write-ahead log (None where a file is absent)."""
    digests: dict[str, str | None] = {}
    for path in (Path(db), Path(f"{db}-wal")):
        try:
            digests[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
        except FileNotFoundError:
            digests[path.name] = None
    return digests


def run_case(db: str | Path, case: Case, *, clock: Clock | None = None, data: str | Path | None = None) -> CaseResult:
    """Inspect ``case.incident`` on ``db`` through a :class:`CannedProvider` answering ``case.raw``.

    The run is created at ``not_inspected`` if the database does not have it yet; a run
    already past that step is refused (:class:`~labkit.errors.StepOrderError`), since an
    inspection there would not ask the provider. The provider logs to the database's usual
    call log (:func:`~labkit.provider.call_log_for`). An EvidenceRejected is caught and
    reported; any other error propagates.
    """
    provider = CannedProvider(call_log_for(db), {case.incident: case.raw}, data)
    return measure_inspection(db, case.incident, provider, name=case.name, expected=(case.rule, case.field), clock=clock)


def measure_inspection(db: str | Path, incident: str, provider, *, name: str, expected: tuple[str | None, str | None] = (None, None),
                       clock: Clock | None = None) -> CaseResult:
    """One inspection through ``provider``, measured: the rule that refused (if any), the run's step
    and evidence before and after, the database's bytes, the calls in the provider's own log.

    Shared by :func:`run_case` and the 07 exercise check (:func:`labkit.lab.exercises.inspect_with_rule`).
    """
    log = CallLog(call_log_for(db))
    with closing(connect(db)) as conn:
        coordinator = Coordinator(conn, provider, clock=clock)
        run = coordinator.start(incident)
        if run.step is not Step.NOT_INSPECTED:
            raise StepOrderError(incident, run.step.value, "inspect with a canned answer")

        def observe() -> tuple[Step, int]:
            with read_transaction(conn):
                found = find_run_txn(conn, incident)
                count = conn.execute("SELECT COUNT(*) FROM evidence WHERE incident = ?", (incident,)).fetchone()[0]
            assert found is not None  # start() created it, and runs are never deleted
            return found.step, count

        step_before, evidence_before = observe()
        calls_before = len(log.calls())
        db_before = database_digests(db)
        rejected: EvidenceRejected | None = None
        try:
            coordinator.inspect(incident)
        except EvidenceRejected as error:
            rejected = error
        db_after = database_digests(db)
        step_after, evidence_after = observe()
        calls = len(log.calls()) - calls_before
    return CaseResult(
        case=name,
        incident=incident,
        expected_rule=expected[0],
        expected_field=expected[1],
        rule=rejected.rule if rejected else None,
        field=rejected.field if rejected else None,
        message=str(rejected) if rejected else None,
        step_before=step_before,
        step_after=step_after,
        evidence_before=evidence_before,
        evidence_after=evidence_after,
        db_before=db_before,
        db_after=db_after,
        provider_calls=calls,
    )
