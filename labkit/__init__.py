"""labkit: a teaching kit for durable, restart-safe incident workflows on SQLite.

The modules mirror the architecture in the lab's design:

- :mod:`labkit.coordinator`: the versioned state machine (``Coordinator``)
- :mod:`labkit.provider`: the read adapter and the provider's own call log
- :mod:`labkit.contract`: the evidence contract (JSON Schema) checked before any checkpoint
- :mod:`labkit.store`: the SQLite checkpoint store (``connect``, ``transaction``)
- :mod:`labkit.receipts`: the receipt table, at most one receipt per run
- :mod:`labkit.recovery`: the recovery worker (``recover``)
- :mod:`labkit.crashpoints`: named places where a run can be killed
- :mod:`labkit.invariants`: the seven invariants checked after crash and recovery
- :mod:`labkit.status`: what ``status --json`` reports, reads counted from the provider's log

and, for lessons: :mod:`labkit.naive` (the two-commit first draft that 04 takes apart),
:mod:`labkit.processes` (child processes), :mod:`labkit.workspace`
(a lesson's own temporary database), :mod:`labkit.display` (pandas tables).
"""

from .clock import SystemClock, TickingClock
from .contract import CONTRACT, MAX_RESPONSE_BYTES, check_evidence
from .coordinator import WORKFLOW_VERSION, Coordinator, DriveResult
from .crashpoints import BETWEEN_READ_AND_COMMIT, CRASH_POINTS, CrashPlan
from .errors import (
    BadClock,
    CorruptCallLog,
    DataFolderMissing,
    DatabaseFolderMissing,
    DatabaseUnavailable,
    EvidenceRejected,
    InconsistentRun,
    InjectedFailure,
    LabError,
    NotADatabase,
    NotALabDatabase,
    ProviderUnavailable,
    ReceiptConflict,
    SchemaVersionMismatch,
    StaleTransition,
    StepOrderError,
    UnknownCrashPoint,
    UnknownIncident,
    UnknownRun,
    WorkflowVersionMismatch,
)
from .invariants import check_invariants
from .processes import labkit_cli, race, run_in_child
from .provider import CallLog, ReadAdapter, ReferenceProvider, call_log_for, diagnose, list_incidents
from .receipts import Receipt
from .recovery import Resumed, recover
from .status import status_of
from .steps import Step
from .store import SCHEMA_VERSION, Evidence, Run, connect, read_transaction, transaction
from .workspace import Workspace

__version__ = "0.1.0"


def __getattr__(name: str):
    # `labkit.display` needs pandas, which takes a while to import; load it on first use so
    # `python -m labkit` child processes start fast, while `labkit.display.runs_frame` still works.
    if name == "display":
        import importlib

        return importlib.import_module(".display", __name__)
    raise AttributeError(f"module 'labkit' has no attribute {name!r}")

__all__ = [
    "BETWEEN_READ_AND_COMMIT", "CONTRACT", "CRASH_POINTS", "CallLog", "Coordinator", "CrashPlan",
    "BadClock", "CorruptCallLog", "DataFolderMissing", "DatabaseFolderMissing", "DatabaseUnavailable",
    "InconsistentRun", "DriveResult", "Evidence", "EvidenceRejected",
    "InjectedFailure", "LabError", "MAX_RESPONSE_BYTES", "NotADatabase", "NotALabDatabase", "ProviderUnavailable",
    "ReadAdapter", "Receipt", "ReceiptConflict", "ReferenceProvider", "Run", "SCHEMA_VERSION",
    "SchemaVersionMismatch", "StaleTransition", "Step", "StepOrderError", "SystemClock", "TickingClock",
    "UnknownCrashPoint", "UnknownIncident", "UnknownRun", "WORKFLOW_VERSION", "Workspace",
    "WorkflowVersionMismatch", "call_log_for", "check_evidence", "check_invariants", "connect",
    "diagnose", "labkit_cli", "list_incidents", "race", "read_transaction", "recover", "Resumed", "run_in_child",
    "status_of", "transaction",
]
