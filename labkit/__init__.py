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
- :mod:`labkit.invariants`: the invariants checked after crash and recovery (seven, and the effect
  and lease ones where those flows ran)
- :mod:`labkit.status`: what ``status --json`` reports, reads counted from the provider's log
- :mod:`labkit.leases`: leases with fencing tokens, and the fenced commit (``FENCE``)
- :mod:`labkit.worker`: the leased flow (``LeasedWorker``)
- :mod:`labkit.pool`: the ``work`` pool of worker processes
- :mod:`labkit.redaction`: sensitive values replaced before anything is stored, and the record of it
- :mod:`labkit.evidence`: the evidence record: bounded, redacted, the raw diagnostic kept apart by reference
- :mod:`labkit.retention`: the retention policy for raw diagnostics, ``retain``
- :mod:`labkit.lab.capacity`: the capacity model, a simulated year, writers contending (loaded on first use)

- :mod:`labkit.assessments`: what was concluded from evidence, with its decision inputs
- :mod:`labkit.versioning`: the explicit, logged migration between workflow versions; re-evaluation
- :mod:`labkit.effects`: the effect ledger, and ``Tickets(url)``, the effect a completion owes (09)
- :mod:`labkit.evaluation`: the task scorecard and the recovery scorecard, kept from reading each other's data
- :mod:`labkit.jsontext`: canonical JSON out, strict JSON in
- :mod:`labkit.errors`: every error, as bad input (exit 2) or a run-time failure (exit 1)

and, for lessons: :mod:`labkit.lab.naive` (deliberately broken variants that 04 and 06 take apart),
:mod:`labkit.lab.processes` (child processes), :mod:`labkit.lab.workspace`
(a lesson's own temporary database), :mod:`labkit.lab.display` (pandas tables).
"""

import importlib

__version__ = "0.1.0"

# Every public name, by the module that defines it. Nothing is imported until a name is first
# used (PEP 562): ``python -m labkit`` then imports only what its command needs, and a Ctrl-C
# during those imports lands inside the entry point's handler (labkit/__main__.py), not in a
# traceback from this file.
_PUBLIC: dict[str, tuple[str, ...]] = {
    "assessments": ("Assessment",),
    "clock": ("ManualClock", "SystemClock", "TickingClock"),
    "contract": ("CONTRACT", "MAX_RESPONSE_BYTES", "check_evidence"),
    "coordinator": ("SUPPORTED_VERSIONS", "WORKFLOW_VERSION", "Coordinator", "DriveResult"),
    "crashpoints": (
        "BETWEEN_READ_AND_COMMIT", "CRASH_POINTS", "EFFECT_POINTS", "LEASE_POINTS", "RUN_POINTS", "CrashPlan", "CrashPoint",
    ),
    "database": ("read_transaction", "transaction", "write_lock"),
    "errors": (
        "BadClock", "BadDatabasePath", "BadInput", "BadSetting", "CorruptCallLog", "DatabaseDamaged",
        "DatabaseFolderMissing", "DatabaseMissing", "DatabaseUnavailable", "DataFolderMissing", "EvidenceRejected",
        "InconsistentRun", "InjectedFailure", "LabError", "NotADatabase", "NotALabDatabase", "NotARegularFile",
        "NotInTransaction", "ProviderUnavailable", "ReceiptConflict", "RuleViolation", "RunFailure",
        "SchemaVersionMismatch", "StaleTransition", "StepOrderError", "UnknownBug", "UnknownCrashPoint",
        "UnknownIncident", "UnknownRun", "UnsupportedVersion", "WorkflowVersionMismatch",
    ),
    "evaluation": ("Evaluation", "RecoveryScore", "TaskScore", "evaluate", "recovery_from_scenarios"),
    "lab.explorer": ("Exploration", "explore", "random_kills"),
    "invariants": ("check_invariants",),
    "leases": (
        "FENCE", "BadLeaseSeconds", "Lease", "LeaseEnded", "LeaseExpired", "LeaseHeld", "NotLeaseHolder",
        "RunCompleted", "StaleLease", "claim", "lease_log", "release", "renew",
    ),
    "lab.processes": ("PausedRun", "labkit_cli", "race", "run_in_child"),
    "provider": (
        "CallLog", "ReadAdapter", "Reading", "ReferenceProvider", "RulesInputMissing", "UnknownRulesRevision",
        "assess", "call_log_for", "diagnose", "list_incidents", "read_with_diagnostic",
    ),
    "receipts": ("Receipt",),
    "recovery": ("Resumed", "recover"),
    "redaction": ("Redacted", "Redaction", "redact"),
    "retention": ("Diagnostic", "RetentionReport", "diagnostic_of", "retain"),
    "status": ("status_of",),
    "steps": ("Step",),
    "store": ("SCHEMA_VERSION", "Evidence", "Run", "connect", "connect_readonly"),
    "versioning": (
        "Migration", "MigrationRefused", "migrate", "migration_log", "reevaluate",
    ),
    "worker": ("LeasedWorker",),
    "lab.workspace": ("Workspace",),
}
_MODULE_OF = {name: module for module, names in _PUBLIC.items() for name in names}


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value  # found once; later look-ups never reach this function
        return value
    # A submodule not imported yet (``labkit.lab.display.runs_frame``, ``labkit.leases.FENCE``).
    if not name.startswith("_"):
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":  # the submodule exists; something it needs does not
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_OF))


__all__ = sorted(_MODULE_OF)
