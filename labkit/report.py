"""The local report: the incident summary a completed run leaves behind.

Built only from committed evidence, never by reading the provider again, so completing
after a crash cannot change what the summary says. Deterministic: the same evidence always
gives the same report, byte for byte.
"""

from __future__ import annotations

from .assessments import Assessment
from .errors import InconsistentRun
from .store import Evidence

HEADLINES = {
    "consumer_outage": "No consumer is draining the queue",
    "consumer_lag": "Consumers are falling behind publishers",
    "poison_message": "Messages are failing and being redelivered",
    "stuck_consumer": "Consumers hold messages without acknowledging them",
    "memory_alarm": "Memory pressure on the broker is holding back publishers",
    "disk_alarm": "Low free disk space on the broker is blocking publishers",
    "false_alarm": "The queue is healthy; the alert needs no action",
    "unknown": "The evidence does not show what is wrong; a person has to look",
}


def build_report(evidence: Evidence, assessment: Assessment | None = None) -> dict:
    """The report for ``evidence``: what it shows, and what was concluded from it.

    The conclusion is the ``assessment`` when one is given (workflow version 2 passes the
    run's latest), else the diagnosis the evidence arrived with. Evidence that is not what
    the contract accepted is refused: only someone editing the database by hand can store it.
    """
    try:
        return _report(evidence, assessment.diagnosis if assessment is not None else evidence.body["diagnosis"])
    except (KeyError, TypeError) as missing:
        raise InconsistentRun(evidence.incident, f"its stored evidence lacks what a report needs ({missing})") from None


def _report(evidence: Evidence, diagnosis: dict) -> dict:
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
