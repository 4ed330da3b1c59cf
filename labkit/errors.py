"""Every error the core and the later lessons' mechanisms raise on purpose, each defined once.

The core's come first, by family; each mechanism's follow under a comment naming its lesson and
its module, which imports them from here (so ``labkit.leases.StaleLease`` is this module's
class). The lab's (``labkit/lab/``) and the engines' own refusals stay beside their code: they
exist only to teach or measure, or for one engine. This module imports nothing from labkit, so
every module can import it: a message that names a module's limit (``MAX_WORKER_NAME``) is
given its value by the code that raises it.

Two families under one base, :class:`LabError`, so the command line can turn any of them
into a one-line message and an exit status decided by the family, not by each class:

- :class:`BadInput` (exit 2): the caller must change something before trying again: an
  unknown id, a file that is not a labkit database, a damaged file, a provider answer
  that breaks the contract, rows that contradict each other.
- :class:`RunFailure` (exit 1): something at run time went wrong that the same command
  may survive later: the provider is down, the disk is full, another worker held the
  lock or moved the run first.

Each subclass is named for what went wrong and carries its fields, so a notebook or a
test inspects them instead of parsing text. A run is always named by its key, the
``incident`` id.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

EXIT_BAD_INPUT = 2
EXIT_FAILURE = 1


def shown(value: object, limit: int = 60) -> str:
    """``repr`` of a user-supplied value, cut short: a 100 KB id must not become a 100 KB message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def one_line(message: object) -> str:
    """``message`` with its line breaks turned into spaces: a name or SQLite's text may hold some."""
    return " ".join(str(message).splitlines())


def error_line(error: LabError, about: str = "") -> str:
    """The one line every command prints for ``error``: ``labkit: error: ...`` for bad input,
    ``labkit: failed: ...`` otherwise, the word decided by the error's family, as the exit code
    is. ``about`` names who failed (``"worker 2"``) when several processes share one stderr."""
    word = "error" if error.exit_code == EXIT_BAD_INPUT else "failed"
    return f"labkit: {word}: {about + ': ' if about else ''}{one_line(error)}"


def report(error: LabError, stream: TextIO | None = None, about: str = "") -> int:
    """Print :func:`error_line` on ``stream`` (stderr) and return the exit code of the error's family."""
    print(error_line(error, about), file=stream or sys.stderr, flush=True)
    return error.exit_code


class LabError(Exception):
    """Base class: a problem labkit detected and refused to act on.

    The transaction in which it was raised has been rolled back; what earlier
    transactions committed stays committed.
    """

    exit_code: int

    def __reduce__(self):
        # Pickled whatever its __init__ takes: DBOS stores a failed step's error and rebuilds it in
        # the process that waits for the workflow (14_choosing_an_engine); the default pickling would
        # call __init__ with the message alone and fail with a TypeError that hides the real error.
        return _rebuild, (type(self), self.args), self.__dict__


def _rebuild(cls: type[LabError], args: tuple) -> LabError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    return error


class BadInput(LabError):
    """Exit 2: retrying the same command cannot succeed; something must be changed first."""

    exit_code = EXIT_BAD_INPUT


class RunFailure(LabError):
    """Exit 1: a failure at run time; the same command may succeed later."""

    exit_code = EXIT_FAILURE


class NotInTransaction(RuntimeError):
    """A ``_txn`` helper that writes was called with no write transaction open.

    A programming error, not a user's: each statement would commit on its own, which is
    the two-commit bug 04_rollback takes apart. Wrap the call in ``labkit.transaction``.
    """

    def __init__(self, helper: str):
        self.helper = helper
        super().__init__(f"{helper} writes, so it must run inside labkit.transaction(conn); no write transaction is open")


# --------------------------------------------------------------------------- bad input (exit 2)


class UnknownIncident(BadInput):
    def __init__(self, incident: str, known: int):
        self.incident = incident
        super().__init__(
            f"unknown incident {shown(incident)}: not one of the {known} incidents in data/ "
            "(list them with: python -m labkit incidents)"
        )


class UnknownRun(BadInput):
    def __init__(self, incident: str):
        self.incident = incident
        super().__init__(f"no run for incident {shown(incident)} in this database")


class UnknownCrashPoint(BadInput):
    def __init__(self, point: str, known: tuple[str, ...]):
        self.point = point
        super().__init__(f"unknown crash point {shown(point)}: expected one of {', '.join(known)}")


class UnreachableCrashPoint(BadInput):
    """A known crash point that the flow asked for never reaches: the kill would never happen."""

    def __init__(self, point: str, flow: str, reached_by: str):
        self.point, self.flow = point, flow
        super().__init__(f"crash point {shown(point)} is never reached by {flow}: only {reached_by} reaches it")


class CrashPointPassed(BadInput):
    """``run --crash-at POINT`` on a run whose recorded step is already past POINT: refused
    before anything is done, since the kill asked for could never happen."""

    def __init__(self, point: str, incident: str, step: str):
        self.point, self.incident, self.step = point, incident, step
        super().__init__(f"crash point {shown(point)} is never reached: the run of {shown(incident)} is already at {step}")


class CrashPointNotReached(RunFailure):
    """``run --crash-at POINT`` finished alive: the point was not on the path this time (no
    ticket was sent, or another process moved the run past it first). What the run did stands."""

    def __init__(self, point: str, reason: str):
        self.point = point
        super().__init__(f"crash point {shown(point)} was not reached, so nothing was killed: {reason}")


class UnknownBug(BadInput):
    def __init__(self, name: str, known: tuple[str, ...]):
        self.name = name
        super().__init__(f"unknown bug {shown(name)}: expected one of {', '.join(known)}")


class BadDatabasePath(BadInput):
    """A path SQLite would treat specially, or that cannot hold a database and its sidecars."""

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"cannot use {shown(path)} as a database: {reason}")


class DatabaseFolderMissing(BadInput):
    def __init__(self, folder: str):
        self.folder = folder
        super().__init__(f"folder {shown(folder, 200)} does not exist: create it first, labkit only creates the database file")


class DatabaseMissing(BadInput):
    """A command that only reads or resumes was given a path where no database exists."""

    def __init__(self, path: str):
        self.path = path
        super().__init__(f"database {shown(path, 200)} does not exist; check the path (only `run` creates a database)")


class NotADatabase(BadInput):
    def __init__(self, path: str, reason: str = "it does not start with the SQLite header"):
        self.path, self.reason = path, reason
        super().__init__(f"{shown(path, 200)} is not a SQLite database ({reason}); refusing to touch it")


class NotALabDatabase(BadInput):
    """A SQLite database that some other program made: labkit will not add its tables to it."""

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"{shown(path, 200)} is a SQLite database, but not a labkit one ({reason}); refusing to touch it")


class DatabaseDamaged(BadInput):
    """SQLite found the file's pages damaged: a retry cannot mend it, a backup can."""

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"database {shown(path, 200)} is damaged ({reason}); restore it from a copy, labkit will not write to it")


class SchemaVersionMismatch(BadInput):
    """The database's schema is one this labkit cannot use as it stands."""

    def __init__(self, path: str, found: int, expected: int):
        self.path, self.found, self.expected = path, found, expected
        if found > expected:
            detail = f"newer than this labkit understands ({expected})"
        else:
            detail = f"older than this labkit's ({expected}); run `python -m labkit recover --db PATH` once to upgrade it"
        super().__init__(f"database {shown(path, 200)} has schema version {found}, {detail}")


class WorkflowVersionMismatch(BadInput):
    """A run was written under another workflow version; reading its step would be a guess.

    Taught in 02_three_states and, with migrations, in 08_versioning.
    """

    def __init__(self, incident: str, found: int, expected: int):
        self.incident, self.found, self.expected = incident, found, expected
        super().__init__(
            f"run {incident!r} was written by workflow version {found}, this coordinator runs version {expected}; "
            + (f"it needs an explicit migration (python -m labkit migrate --to {expected} --reason ...), not a guess"
               if found < expected else "a newer release wrote it; this one cannot know what its step means")
        )


class UnsupportedVersion(BadInput):
    """A workflow version this labkit does not run (``--workflow-version 7``, a migration to 1)."""

    def __init__(self, version: int, why: str, known: tuple[int, ...]):
        self.version, self.known = version, known
        super().__init__(f"workflow version {version}: {why} (this labkit knows versions {', '.join(map(str, known))})")


class StepOrderError(BadInput):
    """A transition that is not exactly one step forward from where the run is."""

    def __init__(self, incident: str, step: str, wanted: str):
        self.incident, self.step, self.wanted = incident, step, wanted
        super().__init__(f"run {incident!r} is at {step!r}; {wanted!r} cannot happen from there")


class EvidenceRejected(BadInput):
    """A provider response broke the evidence contract; no checkpoint advanced.

    ``rule`` names the rule it broke (``size-limit``, ``no-nan-or-infinity``,
    ``schema:type``, ``same-incident``, ...); ``field`` is a dotted path into the response
    (``queue.consumers``) or ``(response)`` when the response as a whole was unusable.
    Taught in 04_rollback and 07_evidence_contract.
    """

    def __init__(self, incident: str, field: str, problem: str, rule: str = "contract"):
        self.incident, self.field, self.problem, self.rule = incident, field, problem, rule
        super().__init__(f"evidence for {incident!r} rejected by rule {rule}: field {field!r}: {problem}")


class DataFolderMissing(BadInput):
    def __init__(self, folder: str):
        self.folder = folder
        super().__init__(f"no incidents folder at {shown(folder, 200)}: run from a clone that has data/, or set LABKIT_DATA_DIR")


class NotARegularFile(BadInput):
    """A file labkit reads or appends to is a symlink, a FIFO or a device: using it could
    write somewhere else or block for ever."""

    def __init__(self, what: str, path: str, reason: str):
        self.what, self.path, self.reason = what, path, reason
        super().__init__(f"{what} {shown(path, 200)}: {reason}; refusing to use it")


class ReceiptConflict(BadInput):
    """A receipt exists for the run but was built from other evidence: not the same operation."""

    def __init__(self, incident: str, stored_digest: str, offered_digest: str):
        self.incident, self.stored_digest, self.offered_digest = incident, stored_digest, offered_digest
        super().__init__(
            f"run {incident!r} already has a receipt for evidence {stored_digest[:12]}, "
            f"not for evidence {offered_digest[:12]}"
        )


class InconsistentRun(BadInput):
    """The rows of a run contradict each other, e.g. ``report_completed`` without a receipt.

    The coordinator never writes such rows; something else edited the database.
    """

    def __init__(self, incident: str, problem: str):
        self.incident, self.problem = incident, problem
        super().__init__(f"run {incident!r} is inconsistent: {problem}; restore the database or inspect it by hand")


class RuleViolation(BadInput):
    """The database refused a write that breaks one of its own rules (a key, a trigger)."""

    def __init__(self, path: str, rule: str):
        self.path, self.rule = path, rule
        super().__init__(f"database {shown(path, 200)} refused a write that breaks its rules: {rule}")


class CorruptCallLog(BadInput):
    """A line of the provider's call log is not what the provider writes."""

    def __init__(self, path: str, line: int, problem: str):
        self.path, self.line, self.problem = path, line, problem
        super().__init__(f"provider call log {shown(path, 200)} is damaged at line {line} ({problem}); reads cannot be counted")


class BadSetting(BadInput):
    """An environment variable that labkit reads holds a value it cannot use."""

    def __init__(self, name: str, value: str, expected: str):
        self.name, self.value, self.expected = name, value, expected
        super().__init__(f"{name}={shown(value)} is not {expected}")


class BadClock(BadInput):
    def __init__(self, value: str, reason: str = "is not an instant like 2026-03-02T09:00:00Z"):
        self.value, self.reason = value, reason
        super().__init__(f"LABKIT_CLOCK={shown(value)} {reason}")


class BadTicketServiceUrl(BadInput):
    """``--tickets URL`` (or a lesson's URL) that cannot be the base URL of a ticket service."""

    def __init__(self, url: str, reason: str):
        self.url, self.reason = url, reason
        super().__init__(f"ticket service URL {shown(url)}: {reason}")


class NotATicketStore(BadInput):
    """A SQLite file that is not the ticket service's own: it will not add its table to it."""

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"{shown(path, 200)} is a SQLite database, but not a ticket service store ({reason}); refusing to touch it")


class BadServiceOption(BadInput):
    """An option of ``ticket-service`` that the service refuses before touching any file."""

    def __init__(self, option: str, value: object, reason: str):
        self.option, self.value, self.reason = option, value, reason
        super().__init__(f"{option} {shown(value)}: {reason}")


class BadWorkOption(BadInput):
    """An option of ``work`` (or of the lock measurements) out of its range, refused before anything is created."""

    def __init__(self, option: str, value: object, expected: str):
        self.option, self.value, self.expected = option, value, expected
        super().__init__(f"{option} {shown(value)}: expected {expected}")


# --------------------------------------------------------------------------- run-time failures (exit 1)


class StaleTransition(RunFailure):
    """A compare-and-set transition found the run somewhere other than where it expected."""

    def __init__(self, incident: str, expected_step: str, expected_version: int):
        self.incident, self.expected_step, self.expected_version = incident, expected_step, expected_version
        super().__init__(
            f"run {incident!r} is no longer at step {expected_step!r} version {expected_version}; "
            "another worker moved it first"
        )


class ProviderUnavailable(RunFailure):
    """The read adapter could not produce a response (a timeout, a refused connection, a full disk)."""

    def __init__(self, incident: str, reason: str):
        self.incident, self.reason = incident, reason
        super().__init__(f"provider could not read {incident!r}: {reason}")


class BrokerObjectMissing(ProviderUnavailable):
    """A broker's management API answered 404 for one named queue or node (the real adapter, labkit/rabbitmq.py).

    To a caller, one more reason the provider could not read; the adapter itself catches it for a queue,
    since RabbitMQ 3.10.8 answers 404 for a queue whose node is stopped and lists it in its vhost.
    """


class InjectedFailure(RunFailure):
    """Raised at a crash point armed in ``raise`` mode: an ordinary exception, not a kill.

    04_rollback uses it to show that the transaction around the point rolls back.
    """

    def __init__(self, point: str):
        self.point = point
        super().__init__(f"injected failure at crash point {point!r}")


class DatabaseUnavailable(RunFailure):
    """SQLite could not open or write the file: a lock held too long, a full disk, permissions."""

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"cannot use database {shown(path, 200)}: {reason}")


class CannotListen(RunFailure):
    """The ticket service could not bind its port (in use, or not allowed)."""

    def __init__(self, port: int, reason: str, host: str = "127.0.0.1"):  # the service's only address
        self.port, self.reason, self.host = port, reason, host
        super().__init__(f"the ticket service cannot listen on {host}:{port}: {reason}")


# --------------------------------------------------------------------------- 08_versioning: provider.py, versioning.py


class RulesInputMissing(EvidenceRejected):
    """An observation lacks a field (or has one of the wrong type) that a rules revision reads.

    Raised by :func:`labkit.rules.assess` before any decision: stored evidence from contract
    revision 1 cannot be re-evaluated with rules revision 2, which reads fields that revision did
    not carry. A kind of :class:`EvidenceRejected` (rule ``rules-input``), so bad input, exit 2.
    """

    def __init__(self, incident: str, field: str, problem: str, revision: int):
        self.revision = revision
        super().__init__(incident, field, f"{problem}; rules revision {revision} reads it", "rules-input")


class UnknownRulesRevision(BadInput):
    """A rules revision this release does not have."""

    def __init__(self, revision: object, known: tuple[int, ...]):  # labkit.rules.RULES_REVISIONS
        self.revision, self.known = revision, known
        super().__init__(f"unknown rules revision {shown(revision)}: expected one of {', '.join(map(str, known))}")


class MigrationRefused(BadInput):
    """A run that the migration cannot map; nothing was migrated."""

    def __init__(self, incident: str, step: str, from_version: int, to_version: int, why: str):
        self.incident, self.step, self.from_version, self.to_version = incident, step, from_version, to_version
        super().__init__(
            f"cannot migrate run {incident!r} at {step} from workflow version {from_version} to {to_version}: {why}; nothing was migrated"
        )


class NothingToReevaluate(BadInput):
    def __init__(self, incident: str, why: str):
        self.incident = incident
        super().__init__(f"run {incident!r} cannot be re-evaluated: {why}")


# --------------------------------------------------------------------------- 09_external_effects: effects.py


class EffectNotUncertain(BadInput):
    def __init__(self, incident: str, state: str):
        self.incident, self.state = incident, state
        super().__init__(f"the effect of run {incident!r} is {state}, not uncertain: only an uncertain effect is resolved by hand")


class NoEffect(BadInput):
    def __init__(self, incident: str):
        self.incident = incident
        super().__init__(f"run {incident!r} has no effect to resolve (it was run without --tickets)")


class EffectOutcomeUnknown(RunFailure):
    """The ticket request's outcome is unknown; the effect is recorded as uncertain."""

    def __init__(self, incident: str, detail: str):
        self.incident, self.detail = incident, detail
        super().__init__(
            f"the ticket for run {incident!r} may or may not exist ({detail}); recorded as uncertain: "
            "recover reconciles it with the ticket service"
        )


class EffectNotDone(RunFailure):
    """The destination did nothing (it failed before committing, or could not be reached)."""

    def __init__(self, incident: str, detail: str):
        self.incident, self.detail = incident, detail
        super().__init__(f"the ticket for run {incident!r} was not opened ({detail}); a retry sends the same request again")


class TicketServiceUnanswered(RunFailure):
    """``GET /tickets`` gave no listing labkit accepts: no answer in time, an error status, a refused answer."""

    def __init__(self, url: str, reason: str):
        self.url, self.reason = url, reason
        super().__init__(f"the ticket service at {shown(url, 100)} did not list its tickets: {reason}")


class EffectConflict(RunFailure):
    def __init__(self, incident: str, detail: str):
        self.incident, self.detail = incident, detail
        super().__init__(f"the ticket service refused the request of run {incident!r} ({detail}); recorded as uncertain for a person")


# --------------------------------------------------------------------------- 10_leases_and_fencing: leases.py


class BadLeaseSeconds(BadInput):
    def __init__(self, value: object, least: float, most: float):  # labkit.leases.MIN_/MAX_LEASE_SECONDS
        self.value, self.least, self.most = value, least, most
        super().__init__(f"a lease of {shown(value)} seconds: expected a number of seconds from {least:g} to {most:g}")


class BadWorkerName(BadInput):
    def __init__(self, name: object, longest: int):  # labkit.leases.MAX_WORKER_NAME
        self.name, self.longest = name, longest
        super().__init__(f"worker name {shown(name)}: expected 1 to {longest} printable characters")


class RunCompleted(BadInput):
    """A claim of a run that is already ``report_completed``: there is nothing left to lease."""

    def __init__(self, incident: str):
        self.incident = incident
        super().__init__(f"run {incident!r} is already report_completed: there is nothing to lease")


class LeaseHeld(RunFailure):
    """A claim of a run whose lease is live: it may be taken over once that lease expires."""

    def __init__(self, incident: str, token: int, worker: str, expires_at: str):
        self.incident, self.token, self.worker, self.expires_at = incident, token, worker, expires_at
        super().__init__(
            f"run {incident!r} is leased to {worker!r} (token {token}) until {expires_at}; it can be taken over after that"
        )


class LeaseExpired(RunFailure):
    """A renewal after the lease expired: a lapsed lease is claimed again, with a new token."""

    def __init__(self, incident: str, token: int, expires_at: str, now: str):
        self.incident, self.token, self.expires_at, self.now = incident, token, expires_at, now
        super().__init__(
            f"lease token {token} on run {incident!r} expired at {expires_at} (it is now {now}): "
            "it cannot be renewed; claim the run again"
        )


class LeaseEnded(BadInput):
    """A renewal of a lease that ended (its run completed, or it was released)."""

    def __init__(self, incident: str, token: int, ended: str):
        self.incident, self.token, self.ended = incident, token, ended
        super().__init__(f"lease token {token} on run {incident!r} has ended ({ended}); there is nothing to renew")


class NotLeaseHolder(BadInput):
    """A worker presented a token it was never given: a programming error, not a race."""

    def __init__(self, incident: str, token: int, holder: str, worker: str):
        self.incident, self.token, self.holder, self.worker = incident, token, holder, worker
        super().__init__(f"lease token {token} on run {incident!r} belongs to {holder!r}, not to {worker!r}")


class StaleLease(RunFailure):
    """A renewal or a commit under a lease that is no longer the run's, or from a state that is gone.

    ``token`` is the worker's, ``current_token`` the run's latest lease (None if it never had
    one); ``expected_version`` is the state version the worker read, ``current_version`` the
    run's now. A refused commit writes nothing but its refusal (a ``refused`` lease event):
    its result is discarded, and the provider's own log still shows the read it came from.
    """

    def __init__(self, incident: str, action: str, token: int, current_token: int | None,
                 expected_version: int | None = None, current_version: int | None = None):
        self.incident, self.action, self.token, self.current_token = incident, action, token, current_token
        self.expected_version, self.current_version = expected_version, current_version
        current = "none" if current_token is None else str(current_token)
        if token != current_token:
            why = f"the run's current lease token is {current}: this lease was taken over"
        else:
            why = f"the lease is still token {current}, but the run moved on without it"
        if expected_version is not None and current_version is not None:
            why += f" (state version {current_version}, this worker read {expected_version})"
        if action == "renewal":
            tail = "; it cannot be renewed"
        else:
            tail = "; its result is discarded"
        super().__init__(f"run {incident!r} refused the {action} under lease token {token}: {why}{tail}")


# --------------------------------------------------------------------------- 11_capacity_and_retention: retention.py


class BadRetentionDays(BadInput):
    """``--older-than`` that is not a number of days from 0 to ``most``."""

    def __init__(self, value: object, most: int):  # labkit.retention.MAX_RETENTION_DAYS
        self.value, self.most = value, most
        super().__init__(f"--older-than {shown(value)} is not a number of days from 0 to {most}")


class VacuumFailed(RunFailure):
    """The removal committed, but VACUUM could not run; running retain again reclaims the space."""

    def __init__(self, path: str, removed: int, reason: str):
        self.path, self.removed, self.reason = path, removed, reason
        super().__init__(
            f"removed {removed} raw diagnostic{'s' if removed != 1 else ''} (committed), but VACUUM of {shown(path, 200)} "
            f"could not run ({reason}); run retain again to reclaim the space"
        )


# --------------------------------------------------------------------------- 13_evaluation: evaluation.py


class BadGroundTruth(BadInput):
    """``ground_truth.csv`` is missing or is not a usable answer key (exit 2)."""

    def __init__(self, path: str | Path, reason: str):
        self.path, self.reason = str(path), reason
        super().__init__(f"ground truth {shown(str(path), 200)}: {reason}")


class TicketStoreMissing(BadInput):
    def __init__(self, path: str | Path):
        self.path = str(path)
        super().__init__(f"ticket store {shown(str(path), 200)} does not exist; give the file of the ticket service's --store")


class BadScenarioRow(BadInput):
    """A row given to :func:`labkit.evaluation.recovery_from_scenarios` lacks a count, or holds
    something that is not one."""

    def __init__(self, index: int, reason: str):
        self.index, self.reason = index, reason
        super().__init__(f"scenario row {index}: {reason}")


class ScorerReadRefused(RuntimeError):
    """A scorer's query read a table outside its list: a programming error, not a user's.

    The two scores must never be computed from each other's data; the authorizer of
    :func:`labkit.evaluation.scoped_connection` denied the read, and this names what was asked for.
    """

    def __init__(self, scorer: str, table: str, allowed: tuple[str, ...]):
        self.scorer, self.table, self.allowed = scorer, table, allowed
        super().__init__(f"the {scorer} scorer may read only {', '.join(allowed)}; it tried to read {table!r}")
