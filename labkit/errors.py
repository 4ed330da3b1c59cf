"""Every error labkit raises on purpose.

One base class, :class:`LabError`, so the command line can turn any of them into a
one-line message, and one subclass per thing that went wrong, each carrying its fields so
a notebook or a test can inspect them instead of parsing text.

Each class says how the command line exits: 2 for bad input (the caller must change
something before trying again), 1 for a failure at run time (a provider outage, a lost
race) that the same command may survive later.
"""

from __future__ import annotations

EXIT_BAD_INPUT = 2
EXIT_FAILURE = 1


def shown(value: str, limit: int = 60) -> str:
    """``repr`` of a user-supplied value, cut short: a 100 KB id must not become a 100 KB message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


class LabError(Exception):
    """Base class: a problem labkit detected and refused to act on.

    The transaction in which it was raised has been rolled back; what earlier
    transactions committed stays committed.
    """

    exit_code = EXIT_BAD_INPUT


class UnknownIncident(LabError):
    def __init__(self, incident: str, known: int):
        self.incident = incident
        super().__init__(
            f"unknown incident {shown(incident)}: not one of the {known} incidents in data/ "
            "(list them with: python -m labkit incidents)"
        )


class UnknownRun(LabError):
    def __init__(self, incident: str):
        self.incident = incident
        super().__init__(f"no run for incident {incident!r} in this database")


class UnknownCrashPoint(LabError):
    def __init__(self, point: str, known: tuple[str, ...]):
        self.point = point
        super().__init__(f"unknown crash point {shown(point)}: expected one of {', '.join(known)}")


class DatabaseFolderMissing(LabError):
    def __init__(self, folder: str):
        self.folder = folder
        super().__init__(f"folder {folder!r} does not exist: create it first, labkit only creates the database file")


class NotADatabase(LabError):
    def __init__(self, path: str, reason: str = "it does not start with the SQLite header"):
        self.path = path
        super().__init__(f"{path!r} is not a SQLite database ({reason}); refusing to touch it")


class NotALabDatabase(LabError):
    """A SQLite database that some other program made: labkit will not add its tables to it."""

    def __init__(self, path: str, reason: str):
        self.path = path
        super().__init__(f"{path!r} is a SQLite database, but not a labkit one ({reason}); refusing to touch it")


class SchemaVersionMismatch(LabError):
    """The database was written by a newer labkit whose schema this one does not know."""

    def __init__(self, path: str, found: int, expected: int):
        self.path, self.found, self.expected = path, found, expected
        super().__init__(
            f"database {path!r} has schema version {found}, newer than this labkit understands ({expected})"
        )


class WorkflowVersionMismatch(LabError):
    """A run was written under another workflow version; reading its step would be a guess.

    Taught in 02_three_states and, with migrations, in 08_versioning.
    """

    def __init__(self, run: str, found: int, expected: int):
        self.run, self.found, self.expected = run, found, expected
        super().__init__(
            f"run {run!r} was written by workflow version {found}, this coordinator runs version {expected}; "
            "it needs an explicit migration, not a guess"
        )


class StaleTransition(LabError):
    """A compare-and-set transition found the run somewhere other than where it expected."""

    exit_code = EXIT_FAILURE

    def __init__(self, run: str, expected_step: str, expected_version: int):
        self.run, self.expected_step, self.expected_version = run, expected_step, expected_version
        super().__init__(
            f"run {run!r} is no longer at step {expected_step!r} version {expected_version}; "
            "another worker moved it first"
        )


class StepOrderError(LabError):
    def __init__(self, run: str, step: str, wanted: str):
        self.run, self.step, self.wanted = run, step, wanted
        super().__init__(f"run {run!r} is at {step!r}; {wanted!r} cannot happen from there")


class EvidenceRejected(LabError):
    """A provider response broke the evidence contract; no checkpoint advanced.

    ``field`` is a dotted path into the response (``queue.consumers``) or ``(response)``
    when the response as a whole was unusable. Taught in 04_rollback and 07_evidence_contract.
    """

    def __init__(self, incident: str, field: str, problem: str):
        self.incident, self.field, self.problem = incident, field, problem
        super().__init__(f"evidence for {incident!r} rejected: field {field!r}: {problem}")


class ProviderUnavailable(LabError):
    """The read adapter could not produce a response (a timeout, a refused connection)."""

    exit_code = EXIT_FAILURE

    def __init__(self, incident: str, reason: str):
        self.incident, self.reason = incident, reason
        super().__init__(f"provider could not read {incident!r}: {reason}")


class InjectedFailure(LabError):
    """Raised at a crash point armed in ``raise`` mode: an ordinary exception, not a kill.

    04_rollback uses it to show that the transaction around the point rolls back.
    """

    exit_code = EXIT_FAILURE

    def __init__(self, point: str):
        self.point = point
        super().__init__(f"injected failure at crash point {point!r}")


class DataFolderMissing(LabError):
    def __init__(self, folder: str):
        self.folder = folder
        super().__init__(f"no incidents folder at {folder!r}: run from a clone that has data/, or set LABKIT_DATA_DIR")


class ReceiptConflict(LabError):
    """A receipt exists for the run but was built from other evidence: not the same operation."""

    exit_code = EXIT_FAILURE

    def __init__(self, incident: str, stored_digest: str, offered_digest: str):
        self.incident, self.stored_digest, self.offered_digest = incident, stored_digest, offered_digest
        super().__init__(
            f"run {incident!r} already has a receipt for evidence {stored_digest[:12]}, "
            f"not for evidence {offered_digest[:12]}"
        )


class InconsistentRun(LabError):
    """The rows of a run contradict each other, e.g. ``report_completed`` without a receipt.

    The coordinator never writes such rows; something else edited the database.
    """

    exit_code = EXIT_FAILURE

    def __init__(self, run: str, problem: str):
        self.run, self.problem = run, problem
        super().__init__(f"run {run!r} is inconsistent: {problem}; restore the database or inspect it by hand")


class DatabaseUnavailable(LabError):
    """SQLite could not open or write the file: permissions, a read-only disk, a locked file."""

    exit_code = EXIT_FAILURE

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"cannot use database {path!r}: {reason}")


class CorruptCallLog(LabError):
    """A line of the provider's call log is not what the provider writes."""

    exit_code = EXIT_FAILURE

    def __init__(self, path: str, line: int):
        self.path, self.line = path, line
        super().__init__(f"provider call log {path!r} is damaged at line {line}; reads cannot be counted")


class BadClock(LabError):
    def __init__(self, value: str):
        self.value = value
        super().__init__(f"LABKIT_CLOCK={shown(value)} is not an instant like 2026-03-02T09:00:00Z")

