"""The local report: the incident summary a completed run leaves behind.

Built only from committed evidence, never by reading the provider again, so completing
after a crash cannot change what the summary says. Deterministic: the same evidence always
gives the same report, byte for byte.
"""

from __future__ import annotations

from .errors import InconsistentRun
from .store import Evidence

HEADLINES = {
    "consumer_outage": "No consumer is draining the queue",
    "consumer_lag": "Consumers are falling behind publishers",
    "poison_message": "Messages are failing and being redelivered",
    "stuck_consumer": "Consumers hold messages without acknowledging them",
    "memory_alarm": "Memory pressure on the broker is holding back publishers",
    "false_alarm": "The queue is healthy; the alert needs no action",
}


def build_report(evidence: Evidence) -> dict:
    """The report for ``evidence``; evidence that is not what the contract accepted is refused.

    Only someone editing the database by hand can store such evidence: the contract
    checked it before it was committed.
    """
    try:
        return _report(evidence)
    except (KeyError, TypeError) as missing:
        raise InconsistentRun(evidence.incident, f"its stored evidence lacks what a report needs ({missing})") from None


def _report(evidence: Evidence) -> dict:
    diagnosis = evidence.body["diagnosis"]
    queue = evidence.body["queue"]
    return {
        "incident": evidence.incident,
        "queue": queue["name"],
        "vhost": queue["vhost"],
        "kind": diagnosis["kind"],
        "headline": HEADLINES[diagnosis["kind"]],
        "summary": diagnosis["summary"],
        "signals": list(diagnosis["signals"]),
        "evidence_digest": evidence.digest,
    }
