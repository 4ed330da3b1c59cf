"""The read adapter: the one uncertain observation in the workflow.

A read adapter answers "what is wrong with this incident's queue?". The reference
provider here reads a RabbitMQ queue snapshot from ``data/incidents/`` and applies a few
rules; a real one could query the broker's management API or ask a model. Either way the
coordinator treats the answer as untrusted bytes and hands them to the evidence contract.

The rules run on the *observation* (the response without its diagnosis), so a re-evaluation
can apply a newer rules revision to stored evidence without asking the provider again:
:func:`assess`. Revision 1 is the lab's original, deliberately simple rule set; revision 2
follows RabbitMQ 3.13's documented mechanisms (08_versioning compares them).

The provider keeps its **own** call log, a JSON-lines file outside the checkpoint
database, the way a remote service keeps its access log. A read made inside a transaction
that later rolled back, or was killed, stays in that log: that is how 05_crash_and_reread
shows the second read that the checkpoint database cannot show.
"""

from __future__ import annotations

import errno
import fcntl
import fnmatch
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .contract import CONTRACT, MAX_DIAGNOSTIC_BYTES, check_diagnostic_size
from .database import open_regular_file
from .errors import (
    BadDatabasePath,
    BadSetting,
    CorruptCallLog,
    DataFolderMissing,
    EvidenceRejected,
    NotADatabase,
    NotARegularFile,
    ProviderUnavailable,
    RulesInputMissing,
    UnknownIncident,
)
from .jsontext import JsonProblem, strict_loads
from .rules import REFERENCE_PROVIDER, assess, check_rules_revision
from .typed import parse_decimal

#: Overrides where the reference provider finds its incidents (tests point it at bad data).
DATA_ENV = "LABKIT_DATA_DIR"
#: Makes the reference provider slow, in seconds per read: a remote service under load
#: (02_three_states shows what a slow read costs while the write lock is held).
DELAY_ENV = "LABKIT_PROVIDER_DELAY"
DEFAULT_DATA_DIR = Path(__file__).resolve().parent.parent / "data"


class ReadAdapter(Protocol):
    """What the coordinator needs from a provider: the incidents it knows, and one read.

    An adapter should also tell who decides, as a property ``decision_inputs``: a dict with
    ``provider`` (its identity, e.g. ``"reference-rules"``), ``rules_revision`` (its rule set,
    or a model version) and ``prompt_revision`` (a prompt id, or None). The coordinator stores
    them with the evidence, apart from the workflow version; they come from the adapter, never
    from its answer. An adapter without it is recorded under its class name.

    An adapter may also offer ``knows(incident) -> bool``, the same answer as ``incident in
    incidents()`` without listing them all: starting a run asks it (a listing grows with the data).

    An adapter may also offer ``read_with_diagnostic(incident)``, returning a :class:`Reading`:
    the response and the raw diagnostic it was made from, which labkit keeps apart from the
    evidence (:func:`read_with_diagnostic`).
    """

    def incidents(self) -> list[str]: ...

    def read(self, incident: str) -> bytes:
        """The raw response for ``incident``. May raise ProviderUnavailable."""
        ...


@dataclass(frozen=True)
class Reading:
    """One read: the response the evidence contract checks, and the raw diagnostic it was made from.

    The diagnostic is the whole snapshot the adapter looked at, most of which the response
    leaves out; the coordinator keeps it apart from the evidence, redacted, under a retention
    policy (:mod:`labkit.retention`, 11_capacity_and_retention).
    """

    response: bytes
    diagnostic: bytes


def knows(provider: ReadAdapter, incident: str) -> bool:
    """Whether ``provider`` knows ``incident``: its ``knows`` when it has one, else ``incident in provider.incidents()``."""
    asker = getattr(provider, "knows", None)
    if callable(asker):
        return bool(asker(incident))
    return incident in provider.incidents()


def read_with_diagnostic(provider: ReadAdapter, incident: str) -> Reading:
    """Read ``incident`` once, with the raw diagnostic if the adapter can hand it over.

    An adapter may offer ``read_with_diagnostic(incident) -> Reading`` beside ``read``; one
    that does not has only its response to show, and that is its raw diagnostic. Either way
    the provider is called once: the call log counts reads, and a second call would be one.
    """
    reader = getattr(provider, "read_with_diagnostic", None)
    if callable(reader):
        reading = reader(incident)
        if isinstance(reading, Reading):
            return reading
        raise TypeError(f"{type(provider).__name__}.read_with_diagnostic must return a Reading, not {type(reading).__name__}")
    response = provider.read(incident)
    return Reading(response, response)


def provider_delay() -> float:
    """Seconds the reference provider takes per read: 0, or ``LABKIT_PROVIDER_DELAY`` when set."""
    text = os.environ.get(DELAY_ENV)
    if not text:
        return 0.0
    try:
        value = parse_decimal(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 60:  # also refuses NaN
        raise BadSetting(DELAY_ENV, text, "a number of seconds from 0 to 60")
    return value


def data_dir() -> Path:
    return Path(os.environ.get(DATA_ENV) or DEFAULT_DATA_DIR)


INCIDENT_FILES = "INC-*.json"


def list_incidents(data: str | Path | None = None) -> list[str]:
    """The incident ids in ``data/incidents/``, sorted."""
    folder = Path(data if data is not None else data_dir()) / "incidents"
    if not folder.is_dir():
        raise DataFolderMissing(str(folder))
    return sorted(path.stem for path in folder.glob(INCIDENT_FILES))


def incident_file(data: Path, incident: str) -> Path:
    """Where the reference provider keeps ``incident``'s snapshot: ``data/incidents/<ID>.json``."""
    return data / "incidents" / f"{incident}.json"


def is_listed(data: Path, incident: str) -> bool:
    """Whether :func:`list_incidents` lists ``incident``, asked of one folder entry, not all of them.

    The same answer (a name the pattern matches, no folder part, an entry of any kind, even a
    dangling link), at the cost of one ``lstat`` instead of a listing that grows with the folder.
    """
    if not isinstance(incident, str) or "\0" in incident or os.sep in incident or (os.altsep and os.altsep in incident):
        return False
    path = incident_file(data, incident)
    return fnmatch.fnmatchcase(path.name, INCIDENT_FILES) and os.path.lexists(path)


def call_log_for(db_path: str | Path) -> Path:
    """Where the provider logs the calls made by workflows on ``db_path``: a file beside it.

    The path is resolved first, so a database reached through a symlink and through its
    real path shares one log; otherwise reads would be split and undercounted.
    """
    try:
        resolved = Path(db_path).resolve()
    except (RuntimeError, OSError):  # Python 3.11 raises RuntimeError for a symlink loop
        raise BadDatabasePath(str(db_path), "it is a symbolic link loop") from None
    if not str(db_path) or resolved.is_dir():
        raise NotADatabase(str(db_path), "it is a folder")
    return resolved.with_name(resolved.name + ".provider-calls.jsonl")


@dataclass(frozen=True)
class ProviderCall:
    """One line of the provider's own log."""

    call: int
    incident: str
    outcome: str
    response_bytes: int


class CallLog:
    """An append-only JSON-lines file, written before the response is returned.

    Each line is written under an exclusive ``flock`` on a file opened with O_APPEND, so
    concurrent workers never interleave or tear each other's lines; once ``write``
    returns, the line belongs to the operating system and survives the caller being
    killed. The fsync adds survival of an OS crash or a power cut, as a real service's
    log would have. A write that fails half way (a full disk) is cut back off, so the
    log never keeps a torn line; the call then fails, like a service that cannot log.
    The file must be a regular file: a symlink or a FIFO in its place is refused, not
    followed or waited on.
    """

    WHAT = "provider call log"

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def check(self) -> None:
        """Refuse, before any work, a log path that is a symlink, a FIFO, a folder or a device."""
        try:
            fd = open_regular_file(self.path, os.O_RDONLY, self.WHAT)
        except FileNotFoundError:
            return
        except IsADirectoryError:
            raise NotARegularFile(self.WHAT, str(self.path), "it is a folder") from None
        os.close(fd)

    def append(self, incident: str, outcome: str, response_bytes: int) -> None:
        entry = {"incident": incident, "outcome": outcome, "response_bytes": response_bytes}
        line = (json.dumps(entry, allow_nan=False) + "\n").encode("utf-8")
        try:
            fd = open_regular_file(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, self.WHAT)
        except IsADirectoryError:
            raise NotARegularFile(self.WHAT, str(self.path), "it is a folder") from None
        except OSError as error:
            raise ProviderUnavailable(incident, f"its call log cannot be opened: {error.strerror or error}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            start = _drop_torn_tail(fd)
            try:
                _write_all(fd, line)
                os.fsync(fd)
            except OSError as error:
                os.ftruncate(fd, start)  # leave no torn line for the next reader
                reason = "the disk is full" if error.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT) else error.strerror
                raise ProviderUnavailable(incident, f"its call log could not be written: {reason}") from None
        finally:
            os.close(fd)  # closing releases the flock

    def calls(self) -> list[ProviderCall]:
        try:
            fd = open_regular_file(self.path, os.O_RDONLY, self.WHAT)
        except FileNotFoundError:
            return []
        except IsADirectoryError:
            raise NotARegularFile(self.WHAT, str(self.path), "it is a folder") from None
        with os.fdopen(fd, "rb") as handle:
            content = handle.read()
        lines = content.split(b"\n")
        # The last piece is empty when the file ends in a newline; otherwise it is a line
        # whose write never finished (the writer was killed), which is not a call.
        calls = []
        for number, raw in enumerate(lines[:-1], start=1):
            try:
                calls.append(_parse_call(number, raw))
            except JsonProblem as problem:
                raise CorruptCallLog(str(self.path), number, problem.reason) from None
        return calls

    def reads_of(self, incident: str) -> int:
        return sum(1 for call in self.calls() if call.incident == incident)


def _parse_call(number: int, raw: bytes) -> ProviderCall:
    entry = strict_loads(raw, max_depth=1)
    if not isinstance(entry, dict) or set(entry) != {"incident", "outcome", "response_bytes"}:
        raise JsonProblem("call-shape", "not an object with incident, outcome and response_bytes")
    incident, outcome, size = entry["incident"], entry["outcome"], entry["response_bytes"]
    if not isinstance(incident, str) or not isinstance(outcome, str) or type(size) is not int or size < 0:
        raise JsonProblem("call-shape", "a field has the wrong type")
    return ProviderCall(number, incident, outcome, size)


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` may write only part of the buffer (a nearly full disk): go on until done."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:  # pragma: no cover - write raises rather than return 0 on a regular file
            raise OSError(errno.ENOSPC, "no progress writing")
        view = view[written:]


def _drop_torn_tail(fd: int) -> int:
    """Cut off an unfinished last line left by a writer killed mid-write; return the new size.

    Called under the exclusive lock, so no other writer is half way through a line.
    """
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    end = size
    while end > 0:  # walk back, a block at a time, to the last complete line
        start = max(0, end - (1 << 16))
        block = os.pread(fd, end - start, start)
        newline = block.rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    os.ftruncate(fd, end)
    return end


class ReferenceProvider:
    """Reads ``data/incidents/<ID>.json`` and answers with a contract-shaped diagnosis.

    It does not judge what it returns: a snapshot it cannot make sense of is passed through
    as it is, the way a remote service can send back an error page. Judging is the
    evidence contract's job. ``rules_revision`` picks the rule set that writes the diagnosis
    (1, the lab's original, by default; 2 follows RabbitMQ's documented mechanisms).
    """

    def __init__(self, call_log: str | Path, data: str | Path | None = None, delay: float | None = None,
                 rules_revision: int = 1):
        self.data = Path(data) if data is not None else data_dir()
        self.log = CallLog(call_log)
        self.delay = provider_delay() if delay is None else delay
        self.rules_revision = check_rules_revision(rules_revision)

    @property
    def decision_inputs(self) -> dict[str, object]:
        """Who decides: this adapter, its rules revision, and no prompt (see ReadAdapter)."""
        return {"provider": REFERENCE_PROVIDER, "rules_revision": self.rules_revision, "prompt_revision": None}

    def incidents(self) -> list[str]:
        return list_incidents(self.data)

    def knows(self, incident: str) -> bool:
        """Whether ``incident`` is one of :meth:`incidents`, asked of its one file (:func:`is_listed`), not a listing."""
        return is_listed(self.data, incident)

    def read(self, incident: str) -> bytes:
        return self.read_with_diagnostic(incident).response

    def read_with_diagnostic(self, incident: str) -> Reading:
        """One read, logged once: the contract response, and the snapshot file it came from."""
        if not is_listed(self.data, incident):
            raise UnknownIncident(incident, len(self.incidents()))
        try:
            raw = _read_regular(incident_file(self.data, incident), incident)
        except EvidenceRejected:  # a snapshot too big to serve: the call was made, and answered no
            self.log.append(incident, "too-large", 0)
            raise
        except NotARegularFile:
            self.log.append(incident, "unavailable", 0)
            raise
        except OSError as error:
            self.log.append(incident, "unavailable", 0)
            raise ProviderUnavailable(incident, error.strerror or str(error)) from None
        response = answer(raw, self.rules_revision)
        if self.delay > 0:  # a slow service: the answer is on its way, not yet returned
            time.sleep(self.delay)  # (sleep(0) still yields the processor: about a millisecond a read under load)
        self.log.append(incident, "ok", len(response))
        return Reading(response, raw)


def _read_regular(path: Path, incident: str) -> bytes:
    """The file's bytes; a FIFO or a device in the data folder is refused, not waited on.

    A file over the raw diagnostic's limit is refused by its size before anything is read
    (a 300 MB file once cost twice that in memory before the limit refused it), and at most
    one byte past the limit is ever read, in case the file grows after its size was taken.
    """
    fd = open_regular_file(path, os.O_RDONLY, "incident file", follow_symlinks=True)
    with os.fdopen(fd, "rb") as handle:
        check_diagnostic_size(incident, os.fstat(handle.fileno()).st_size)
        raw = handle.read(MAX_DIAGNOSTIC_BYTES + 1)
    check_diagnostic_size(incident, len(raw))
    return raw


# --------------------------------------------------------------------------- the response


_NODE_FIELDS = ("name", "running", "mem_alarm", "disk_free_alarm")
_CLUSTER_NODE_FIELDS = ("name", "running", "mem_used", "mem_limit", "mem_alarm", "disk_free_alarm")
_QUEUE_FIELDS = ("name", "vhost", "type", "state", "idle_since", "arguments", "consumers", "consumer_capacity",
                 "messages", "messages_details", "messages_ready", "messages_unacknowledged", "message_stats")
#: The declaration arguments the rules read (quorum poison-message handling, dead-lettering,
#: the delivery acknowledgement timeout); any other argument is left out of the response.
_ARGUMENTS = ("x-queue-type", "x-delivery-limit", "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-consumer-timeout")
_RATES = ("publish_details", "deliver_get_details", "ack_details", "redeliver_details")


def answer(raw: bytes, rules_revision: int = 1) -> bytes:
    """Shape a snapshot into a contract response, copying what is there and inventing nothing.

    A field missing from the snapshot is missing from the response, so the contract names it;
    a snapshot that is not a JSON object goes back as it came, like an upstream error page.
    The diagnosis is the rules (revision ``rules_revision``) applied to the observation, the
    response without its diagnosis: the same function a re-evaluation applies to stored evidence.
    """
    try:
        snapshot = strict_loads(raw, max_depth=64)
    except JsonProblem:
        return raw
    if not isinstance(snapshot, dict):
        return raw
    body = observation_of(snapshot)
    try:
        body["diagnosis"] = assess(body, rules_revision)
    except RulesInputMissing:
        pass  # the rules could not run on this snapshot; the contract will say which field is wrong
    return json.dumps(body, indent=1).encode("utf-8")


def observation_of(snapshot: dict) -> dict:
    """The observation a snapshot gives: the contract response without its diagnosis.

    Only the contract's fields are copied, so nothing else a snapshot says (an instruction, a
    step name) reaches the evidence; values are copied as they are, right or wrong.
    """
    body: dict = {"contract": CONTRACT}
    if "incident" in snapshot:
        body["incident"] = snapshot["incident"]
    if "opened_at" in snapshot:
        body["observed_at"] = snapshot["opened_at"]
    node, nodes, queue = snapshot.get("node"), snapshot.get("nodes"), snapshot.get("queue")
    if node is not None:
        body["node"] = subset(node, _NODE_FIELDS) if isinstance(node, dict) else node
    if isinstance(nodes, list):
        body["nodes"] = [subset(n, _CLUSTER_NODE_FIELDS) if isinstance(n, dict) else n for n in nodes]
    elif nodes is not None:
        body["nodes"] = nodes
    if queue is not None and not isinstance(queue, dict):
        body["queue"] = queue
    elif isinstance(queue, dict):
        body["queue"] = subset(queue, _QUEUE_FIELDS)
        arguments, change, stats = queue.get("arguments"), queue.get("messages_details"), queue.get("message_stats")
        if isinstance(arguments, dict):
            body["queue"]["arguments"] = subset(arguments, _ARGUMENTS)
        if isinstance(change, dict):
            body["queue"]["messages_details"] = subset(change, ("rate",))
        if isinstance(stats, dict):
            body["queue"]["message_stats"] = {
                key: subset(stats[key], ("rate",)) if isinstance(stats[key], dict) else stats[key]
                for key in _RATES if key in stats
            }
    return body


def subset(source: dict, keys: tuple[str, ...]) -> dict:
    """The entries of ``source`` under ``keys``, values as they came; a key it lacks stays absent.

    How this module and labkit.rabbitmq cut a broker's answer to the snapshot's fields.
    """
    return {key: source[key] for key in keys if key in source}


def diagnose(snapshot: dict) -> dict:
    """Rules revision 1 on a raw snapshot (kept for older callers): ``assess(observation_of(snapshot), 1)``."""
    return assess(observation_of(snapshot), 1)
