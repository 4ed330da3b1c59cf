"""The real read adapter: a live RabbitMQ broker's management HTTP API, read into a snapshot.

:class:`RabbitMQProvider` answers the coordinator's one question ("what is wrong with this
incident's queue?") the way :class:`labkit.provider.ReferenceProvider` does, but from a broker
instead of ``data/incidents/``: four ``GET`` requests (``/api/overview``, ``/api/queues/{vhost}/{name}``,
``/api/nodes/{queue's node}``, ``/api/nodes``) make one snapshot in the shape of the incident files,
the same rules write the diagnosis, and the evidence contract judges the answer. Each read is one
line in the provider's own call log (:class:`labkit.provider.CallLog`), failed reads included, so
invariant 5 (every read counted) holds for a live broker as for the files.

The snapshot keeps the fields ``data/README.md`` lists ("Where the fields come from"), each exactly
as the broker sent it: a counter the broker has not started yet is absent, not 0, and a value of
the wrong type stays wrong. Judging it is the contract's job, never this module's: it checks only
that each answer is JSON of the kind it must take apart (an object, or a list of nodes).

A user points the lab at a broker with ``LABKIT_RABBITMQ_URL=http://user:password@host:15672``.
The password is sent as HTTP basic auth and shown nowhere: every message names the broker by
:func:`shown_url`, which leaves the password out.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .clock import Clock, SystemClock
from .contract import MAX_DIAGNOSTIC_BYTES
from .errors import BadSetting, BrokerObjectMissing, ProviderUnavailable
from .jsontext import JsonProblem, strict_loads
from .provider import CallLog, Reading, answer, subset
from .redaction import redact_line
from .rules import check_rules_revision

#: Where the lab finds a live broker's management API, with the user and password to read it as.
URL_ENV = "LABKIT_RABBITMQ_URL"
#: Who decides, stored with the evidence: the same rules as the reference provider, on live reads.
LIVE_PROVIDER = "rabbitmq-management-rules"
#: Seconds to wait for each HTTP answer before the broker counts as unreachable.
DEFAULT_TIMEOUT = 5.0

# The subset of each answer that a snapshot keeps (data/README.md, "Fields"); the rest is left out.
_NODE_FIELDS = ("name", "running", "mem_used", "mem_limit", "mem_alarm", "disk_free", "disk_free_limit", "disk_free_alarm")
_QUEUE_FIELDS = ("name", "vhost", "type", "durable", "auto_delete", "node", "state", "idle_since", "arguments",
                 "consumers", "consumer_details", "consumer_capacity", "messages", "messages_details", "messages_ready",
                 "messages_unacknowledged", "memory", "message_bytes", "message_stats")
_COUNTERS = ("publish", "deliver_get", "ack", "redeliver")
_CONSUMER_FIELDS = ("arguments", "ack_required", "active", "activity_status", "channel_details", "consumer_tag",
                    "exclusive", "prefetch_count", "queue")
_CHANNEL_FIELDS = ("connection_name", "name", "node", "number", "peer_host", "peer_port", "user")


@dataclass(frozen=True)
class Broker:
    """A management API's address, and the credentials to read it with (kept out of :attr:`shown`)."""

    base: str   # scheme://host:port, no user-info, no trailing slash
    user: str
    password: str

    @property
    def shown(self) -> str:
        return shown_url(self.base, self.user)


def shown_url(base: str, user: str) -> str:
    """The broker as messages name it: ``http://user@host:port``, the password left out."""
    scheme, rest = base.split("://", 1)
    return f"{scheme}://{user}@{rest}" if user else base


def parse_broker_url(url: str) -> Broker:
    """``http(s)://user:password@host:port`` taken apart; anything else is a one-line BadSetting.

    The refusal quotes the URL redacted (its user-info replaced), never the password.
    """
    def refuse(expected: str) -> BadSetting:
        return BadSetting(URL_ENV, redact_line(url, 200), expected)

    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        raise refuse("a URL like http://user:password@host:15672 (its port is not a number)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise refuse("a URL like http://user:password@host:15672 (http or https, with a host)")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise refuse("a URL like http://user:password@host:15672 (no path: the adapter adds /api/...)")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    base = f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
    user = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    return Broker(base, user, password)


def broker_from_environment() -> Broker | None:
    """The broker ``LABKIT_RABBITMQ_URL`` names, or None when it is unset or empty."""
    url = os.environ.get(URL_ENV)
    return parse_broker_url(url) if url else None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not a new address: following it would send the credentials elsewhere."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


class RabbitMQProvider:
    """Reads one queue per incident from a live broker; answers like the reference provider.

    ``queues`` maps each incident id to the queue it is about, as ``(vhost, name)``: what the
    alerting system knows. ``url`` is the management API with its credentials (default:
    ``LABKIT_RABBITMQ_URL``). The snapshot's ``opened_at`` is the instant of the read (``clock``):
    a live read has no alert, and the contract's ``observed_at`` is when the queue was seen.
    """

    def __init__(self, call_log: str | Path, queues: Mapping[str, tuple[str, str]], url: str | None = None,
                 rules_revision: int = 1, timeout: float = DEFAULT_TIMEOUT, clock: Clock | None = None):
        if url is not None:
            self.broker = parse_broker_url(url)
        else:
            found = broker_from_environment()
            if found is None:
                raise BadSetting(URL_ENV, "", "set: the management API of a broker, like http://user:password@host:15672")
            self.broker = found
        self.queues = dict(queues)
        self.log = CallLog(call_log)
        self.rules_revision = check_rules_revision(rules_revision)
        self.timeout = timeout
        self.clock = clock or SystemClock()

    @property
    def decision_inputs(self) -> dict[str, object]:
        """Who decides: the live adapter, its rules revision, and no prompt (see ReadAdapter)."""
        return {"provider": LIVE_PROVIDER, "rules_revision": self.rules_revision, "prompt_revision": None}

    def incidents(self) -> list[str]:
        return sorted(self.queues)

    def read(self, incident: str) -> bytes:
        return self.read_with_diagnostic(incident).response

    def read_with_diagnostic(self, incident: str) -> Reading:
        """One read, logged once whatever happens: the contract response, and the snapshot it came from."""
        if incident not in self.queues:
            raise ProviderUnavailable(incident, f"no queue is named for this incident (known: {', '.join(self.incidents()) or 'none'})")
        vhost, name = self.queues[incident]
        try:
            queue_snapshot = self.snapshot(vhost, name)
        except ProviderUnavailable as problem:
            self.log.append(incident, "unavailable", 0)
            raise ProviderUnavailable(incident, problem.reason) from None
        snapshot = {"incident": incident, "opened_at": self.clock.now(), **queue_snapshot}
        raw = json.dumps(snapshot, indent=1).encode("utf-8")
        response = answer(raw, self.rules_revision)
        self.log.append(incident, "ok", len(response))
        return Reading(response, raw)

    # ------------------------------------------------------------------ the four requests

    def snapshot(self, vhost: str, name: str) -> dict:
        """``broker``, ``node``, ``nodes`` and ``queue`` of one queue, as the broker sends them now.

        Not logged: :meth:`read_with_diagnostic` is the read the call log counts. A failure names the
        queue (and its vhost) where a read names its incident.
        """
        try:
            return self._snapshot(vhost, name)
        except ProviderUnavailable as problem:
            raise ProviderUnavailable(f"{name} (vhost {vhost})", problem.reason) from None

    def _snapshot(self, vhost: str, name: str) -> dict:
        where = f"queue {name!r} in vhost {vhost!r}"
        overview = self._object("/api/overview")
        queue = self._queue(vhost, name, where)
        nodes = self._list("/api/nodes")
        snapshot: dict = {"broker": _broker_fields(overview)}
        host = queue.get("node")
        if isinstance(host, str):
            node = self._object(f"/api/nodes/{_segment(host)}", missing=f"the node {host!r} hosting {where} is not known")
            snapshot["node"] = subset(node, _NODE_FIELDS)
        # Without a node name the snapshot has no `node`: the contract names what is missing.
        snapshot["nodes"] = [subset(entry, _NODE_FIELDS) if isinstance(entry, dict) else entry for entry in nodes]
        snapshot["queue"] = queue_subset(queue)
        return snapshot

    def _queue(self, vhost: str, name: str, where: str) -> dict:
        """The queue's own answer or, for a queue whose node is stopped, its entry in the vhost's list.

        RabbitMQ 3.10.8 answers 404 to ``GET /api/queues/{vhost}/{name}`` for a durable queue whose node is
        stopped, while ``GET /api/queues/{vhost}`` still lists it, state ``down`` with only its identity: that
        entry is the broker's answer about it. The list is asked for by name (a substring filter of the
        management API, one page), and only an exact match counts; no entry, and the queue does not exist.
        """
        try:
            return self._object(f"/api/queues/{_segment(vhost)}/{_segment(name)}", missing=f"{where} does not exist")
        except BrokerObjectMissing:
            query = urllib.parse.urlencode({"page": 1, "page_size": 500, "name": name})
            page = self._object(f"/api/queues/{_segment(vhost)}?{query}")
            listed = page.get("items")
            if not isinstance(listed, list):
                raise
            entries = [entry for entry in listed if isinstance(entry, dict) and entry.get("name") == name]
            if not entries:
                raise
            return entries[0]

    def _object(self, path: str, missing: str | None = None) -> dict:
        value, body = self._get(path, missing)
        if not isinstance(value, dict):
            raise _unavailable(f"GET {self.broker.shown}{path} answered JSON that is not an object: {_start(body)}")
        return value

    def _list(self, path: str) -> list:
        value, body = self._get(path)
        if not isinstance(value, list):
            raise _unavailable(f"GET {self.broker.shown}{path} answered JSON that is not a list: {_start(body)}")
        return value

    def _get(self, path: str, missing: str | None = None) -> tuple[object, bytes]:
        """One GET answered 200 with JSON: the value and the bytes; anything else a one-line ProviderUnavailable.

        ``missing`` says what a 404 means for this path (a queue or node that does not exist).
        """
        url = self.broker.base + path
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        if self.broker.user or self.broker.password:
            token = base64.b64encode(f"{self.broker.user}:{self.broker.password}".encode()).decode("ascii")
            request.add_header("Authorization", f"Basic {token}")
        at = f"{self.broker.shown}{path}"
        try:
            with _OPENER.open(request, timeout=self.timeout) as reply:
                body = reply.read(MAX_DIAGNOSTIC_BYTES + 1)
        except urllib.error.HTTPError as error:
            error.close()
            if error.code == 401:
                raise _unavailable(f"the broker at {self.broker.shown} refused the user {self.broker.user!r} (HTTP 401): "
                                   "wrong user or password") from None
            if error.code == 404 and missing:
                raise BrokerObjectMissing("", f"{missing} on the broker at {self.broker.shown} (HTTP 404 from {path})") from None
            raise _unavailable(f"GET {at} answered HTTP {error.code} {error.reason}") from None
        except TimeoutError:
            raise _unavailable(f"the broker at {self.broker.shown} sent no answer to GET {path} within {self.timeout:g} s") from None
        except urllib.error.URLError as error:
            reason = error.reason
            if isinstance(reason, TimeoutError):
                raise _unavailable(f"the broker at {self.broker.shown} sent no answer to GET {path} within {self.timeout:g} s") from None
            text = reason.strerror if isinstance(reason, OSError) and reason.strerror else str(reason)
            raise _unavailable(f"the broker at {self.broker.shown} cannot be reached: {text}") from None
        except (OSError, ValueError) as error:  # a connection cut mid-answer, a malformed status line
            raise _unavailable(f"GET {at} broke off: {type(error).__name__}: {error}") from None
        if len(body) > MAX_DIAGNOSTIC_BYTES:
            raise _unavailable(f"GET {at} answered more than {MAX_DIAGNOSTIC_BYTES} bytes")
        try:
            value = strict_loads(body, max_depth=64)
        except JsonProblem as problem:
            raise _unavailable(f"GET {at} answered something that is not JSON ({problem.reason}): {_start(body)}") from None
        return value, body


def _unavailable(reason: str) -> ProviderUnavailable:
    # Who could not be read is filled in by snapshot() (the queue) and read_with_diagnostic (the incident).
    return ProviderUnavailable("", reason)


def _segment(text: str) -> str:
    """A vhost, queue or node name as one path segment: ``/`` is ``%2F``, as the API wants."""
    return urllib.parse.quote(text, safe="")


def _start(body: bytes) -> str:
    """The first characters of a bad answer, on one line and redacted: enough to recognise it."""
    return repr(redact_line(body[:120].decode("utf-8", "replace"), 80))


def _broker_fields(overview: dict) -> dict:
    """``/api/overview``'s product, version and cluster name under the snapshot's names."""
    names = (("product_name", "product"), ("rabbitmq_version", "version"), ("cluster_name", "cluster_name"))
    return {ours: overview[theirs] for theirs, ours in names if theirs in overview}


def queue_subset(queue: dict) -> dict:
    """A ``/api/queues/{vhost}/{name}`` answer cut to the snapshot's fields, values as sent.

    Inside ``messages_details`` and each counter's ``*_details`` only ``rate`` is kept (the
    samples and averages a broker may add are left out); a counter the broker has not sent is
    not there, and a part of the wrong type is kept as it came.
    """
    kept = subset(queue, _QUEUE_FIELDS)
    change, stats, consumers = kept.get("messages_details"), kept.get("message_stats"), kept.get("consumer_details")
    if isinstance(change, dict):
        kept["messages_details"] = subset(change, ("rate",))
    if isinstance(stats, dict):
        counters: dict = {}
        for counter in _COUNTERS:
            if counter in stats:
                counters[counter] = stats[counter]
            details = f"{counter}_details"
            if details in stats:
                counters[details] = subset(stats[details], ("rate",)) if isinstance(stats[details], dict) else stats[details]
        kept["message_stats"] = counters
    if isinstance(consumers, list):
        kept["consumer_details"] = [_consumer_subset(entry) if isinstance(entry, dict) else entry for entry in consumers]
    return kept


def _consumer_subset(consumer: dict) -> dict:
    kept = subset(consumer, _CONSUMER_FIELDS)
    channel, queue = kept.get("channel_details"), kept.get("queue")
    if isinstance(channel, dict):
        kept["channel_details"] = subset(channel, _CHANNEL_FIELDS)
    if isinstance(queue, dict):
        kept["queue"] = subset(queue, ("name", "vhost"))
    return kept
