"""labkit: a teaching kit for durable, restart-safe incident workflows on SQLite.

The modules mirror the architecture in the lab's design:

- :mod:`labkit.coordinator`: the versioned state machine (``Coordinator``)
- :mod:`labkit.provider`: the read adapter and the provider's own call log
- :mod:`labkit.contract`: the evidence contract (JSON Schema) checked before any checkpoint
- :mod:`labkit.store`: the SQLite checkpoint store: its schema, ``connect``, ``connect_readonly``
- :mod:`labkit.database`: the one way to open a SQLite file and run a transaction
- :mod:`labkit.receipts`: the receipt table, at most one receipt per run
- :mod:`labkit.recovery`: the recovery worker (``recover``)
- :mod:`labkit.crashpoints`: named places where a run can be killed
- :mod:`labkit.invariants`: the seven invariants checked after crash and recovery
- :mod:`labkit.status`: what ``status --json`` reports, reads counted from the provider's log
- :mod:`labkit.leases`: leases with fencing tokens, and the fenced commit (``FENCE``)
- :mod:`labkit.worker`: the leased flow (``LeasedWorker``), the ``work`` pool, the lock measurements
- :mod:`labkit.redaction`: sensitive values replaced before anything is stored, and the record of it
- :mod:`labkit.retention`: bounded evidence, raw diagnostics kept apart by reference, ``retain``
- :mod:`labkit.capacity`: the capacity model, a simulated year, writers contending (loaded on first use)

- :mod:`labkit.assessments`: what was concluded from evidence, with its decision inputs; re-evaluation
- :mod:`labkit.versioning`: workflow versions and the explicit, logged migration between them
- :mod:`labkit.evaluation`: the task scorecard and the recovery scorecard, kept from reading each other's data
- :mod:`labkit.jsontext`: canonical JSON out, strict JSON in
- :mod:`labkit.errors`: every error, as bad input (exit 2) or a run-time failure (exit 1)

and, for lessons: :mod:`labkit.naive` (deliberately broken variants that 04 and 06 take apart),
:mod:`labkit.processes` (child processes), :mod:`labkit.workspace`
(a lesson's own temporary database), :mod:`labkit.display` (pandas tables).
"""

from .assessments import Assessment
from .clock import ManualClock, SystemClock, TickingClock
from .contract import CONTRACT, MAX_RESPONSE_BYTES, check_evidence
from .coordinator import WORKFLOW_VERSION, Coordinator, DriveResult
from .crashpoints import BETWEEN_READ_AND_COMMIT, CRASH_POINTS, EFFECT_POINTS, LEASE_POINTS, RUN_POINTS, CrashPlan, CrashPoint
from .database import read_transaction, transaction, write_lock
from .errors import (
    BadClock,
    BadDatabasePath,
    BadInput,
    BadSetting,
    CorruptCallLog,
    DatabaseDamaged,
    DatabaseFolderMissing,
    DatabaseMissing,
    DatabaseUnavailable,
    DataFolderMissing,
    EvidenceRejected,
    InconsistentRun,
    InjectedFailure,
    LabError,
    NotADatabase,
    NotALabDatabase,
    NotARegularFile,
    NotInTransaction,
    ProviderUnavailable,
    ReceiptConflict,
    RuleViolation,
    RunFailure,
    SchemaVersionMismatch,
    StaleTransition,
    StepOrderError,
    UnknownBug,
    UnknownCrashPoint,
    UnknownIncident,
    UnknownRun,
    WorkflowVersionMismatch,
)
from .invariants import check_invariants
from .leases import (
    FENCE,
    BadLeaseSeconds,
    Lease,
    LeaseEnded,
    LeaseExpired,
    LeaseHeld,
    NotLeaseHolder,
    RunCompleted,
    StaleLease,
    claim,
    lease_log,
    release,
    renew,
)
from .processes import PausedRun, labkit_cli, race, run_in_child
from .provider import (
    CallLog,
    ReadAdapter,
    Reading,
    ReferenceProvider,
    RulesInputMissing,
    UnknownRulesRevision,
    assess,
    call_log_for,
    diagnose,
    list_incidents,
    read_with_diagnostic,
)
from .receipts import Receipt
from .recovery import Resumed, recover
from .redaction import Redacted, Redaction, redact
from .retention import Diagnostic, RetentionReport, diagnostic_of, retain
from .status import status_of
from .steps import Step
from .store import SCHEMA_VERSION, Evidence, Run, connect, connect_readonly
from .versioning import SUPPORTED_VERSIONS, Migration, MigrationRefused, UnsupportedVersion, migrate, migration_log, reevaluate
from .worker import LeasedWorker
from .workspace import Workspace

__version__ = "0.1.0"

#: Names exported from modules loaded on first use (12_crash_explorer, 13_evaluation).
_LAZY = {
    "Evaluation": "evaluation", "RecoveryScore": "evaluation", "TaskScore": "evaluation", "evaluate": "evaluation",
    "recovery_from_scenarios": "evaluation", "Exploration": "explorer", "explore": "explorer", "random_kills": "explorer",
}


def __getattr__(name: str):
    # `labkit.display` needs pandas, which takes a while to import; load it on first use so
    # `python -m labkit` child processes start fast, while `labkit.display.runs_frame` still works.
    # The lesson helpers load the same way.
    if name in ("display", "lesson", "exercises", "capacity", "explorer", "evaluation"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY:  # the explorer and the scorecards: a command-line child needs neither
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'labkit' has no attribute {name!r}")

__all__ = [
    "BETWEEN_READ_AND_COMMIT", "CONTRACT", "CRASH_POINTS", "EFFECT_POINTS", "RUN_POINTS", "MAX_RESPONSE_BYTES",
    "SCHEMA_VERSION", "WORKFLOW_VERSION",
    # the workflow
    "CallLog", "Coordinator", "CrashPlan", "CrashPoint", "DriveResult", "Evidence", "ReadAdapter", "Receipt",
    "ReferenceProvider", "Resumed", "Run", "Step", "SystemClock", "TickingClock",
    "assess", "call_log_for", "check_evidence", "check_invariants", "connect", "connect_readonly", "diagnose", "list_incidents",
    "read_transaction", "recover", "status_of", "transaction", "write_lock",
    # versions: of the workflow (migrate) and of the decision inputs (reevaluate)
    "Assessment", "Migration", "SUPPORTED_VERSIONS", "migrate", "migration_log", "reevaluate",
    # for lessons
    "PausedRun", "Workspace", "labkit_cli", "race", "run_in_child",
    # leases and fencing (10): the leased flow beside the reference one
    "FENCE", "LEASE_POINTS", "Lease", "LeasedWorker", "ManualClock", "claim", "lease_log", "release", "renew",
    "BadLeaseSeconds", "LeaseEnded", "LeaseExpired", "LeaseHeld", "NotLeaseHolder", "RunCompleted", "StaleLease",
    # bounded evidence, redaction and retention (11)
    "Diagnostic", "Reading", "Redacted", "Redaction", "RetentionReport", "diagnostic_of", "read_with_diagnostic", "redact", "retain",
    # errors: two families under LabError, and the one programming error
    "LabError", "BadInput", "RunFailure", "NotInTransaction", "BadSetting",
    "BadClock", "BadDatabasePath", "CorruptCallLog", "DataFolderMissing", "DatabaseDamaged", "DatabaseFolderMissing",
    "DatabaseMissing", "EvidenceRejected", "InconsistentRun", "NotADatabase", "NotALabDatabase", "NotARegularFile",
    "ReceiptConflict", "RuleViolation", "SchemaVersionMismatch", "StepOrderError", "UnknownBug", "UnknownCrashPoint",
    "UnknownIncident", "UnknownRun", "WorkflowVersionMismatch", "MigrationRefused", "UnsupportedVersion",
    "RulesInputMissing", "UnknownRulesRevision",
    "DatabaseUnavailable", "InjectedFailure", "ProviderUnavailable", "StaleTransition",
    # the evaluation layer (13): two scorecards, scored apart
    "Evaluation", "RecoveryScore", "TaskScore", "evaluate", "recovery_from_scenarios",
    "Exploration", "explore", "random_kills",
]
