"""Exercise 14.2: the LangGraph ticket node's send, killed right after it and resumed, leaves one ticket.

The check (``labkit.lab.exercises.check_ticket_node``) runs the learner's function in the
LangGraph version of the workflow, in forked children SIGKILLed right after the send, against
a real ticket service on 127.0.0.1, with incidents and thread ids drawn afresh each time. Here:
the reference answer passes (it lives in this file, not in labkit), and every shortcut fails
with feedback that names its problem in one line: labkit's own key or node under another name,
a memorised key, a key per attempt, a catch-all, a send with no key, no send at all.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import random
import re
import sys
import urllib.parse
import uuid
from pathlib import Path

import pytest

import labkit
from labkit.effects import TICKET_TIMEOUT
from labkit.lab.exercises import check_ticket_node, ticket_node_trial
from labkit.ticket_client import post_ticket

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the check runs the graph in forked children")


def reference_open_ticket(thread_id, tickets, request):
    key = f"{thread_id}:open_ticket"  # the thread and the node: the same on every attempt, another for each thread
    answer = post_ticket(tickets, key, request, TICKET_TIMEOUT)
    if answer.outcome not in ("created", "replayed") or answer.ticket is None:
        raise RuntimeError(f"the ticket service answered {answer.outcome}: {answer.detail}")
    return answer.ticket


def _fails(answer, *said: str) -> str:
    with pytest.raises(AssertionError) as failure:
        check_ticket_node(answer)
    message = str(failure.value)
    assert "\n" not in message, message  # one line
    for part in said:
        assert part in message, message
    assert not re.search(r"thread-[0-9a-f]{12}:open_ticket", message)  # the hint never gives the reference's key away
    return message


def test_the_reference_answer_passes_with_one_ticket_per_thread_after_the_kill(capsys):
    check_ticket_node(reference_open_ticket)
    printed = capsys.readouterr().out.splitlines()
    assert [line[:60] for line in printed] == [
        "✓ two threads, each killed right after your send and resumed",
        "✓ the service failed the first request: your function raised",
        "✓ labkit's invariants 1-9 held after both, and each thread's",
    ]
    assert "your function ran 2 times for each" in printed[0]  # the kill came after the send: the node ran again on resume


def test_each_check_draws_its_own_incidents_and_thread_ids():
    first = ticket_node_trial(reference_open_ticket, rng=random.Random(1))
    second = ticket_node_trial(reference_open_ticket, rng=random.Random(2))
    assert {t.thread for t in first.threads}.isdisjoint(t.thread for t in second.threads)
    assert [t.incident for t in first.threads] != [t.incident for t in second.threads]
    for trial in (first, second):
        assert trial.broken == ()
        assert [len(t.tickets) for t in trial.threads] == [1, 1]
        for t in trial.threads:  # killed the moment the service answered, then resumed: the same key, a replay
            assert t.calls == ("started", "started", f"returned {t.tickets[0][0]!r}")
            assert [outcome for _, outcome, _ in t.posts] == ["created", "replayed"]


# --------------------------------------------------------------------------- the non-idempotent answer


def key_per_attempt(thread_id, tickets, request):
    answer = post_ticket(tickets, f"{thread_id}:{uuid.uuid4()}", request, TICKET_TIMEOUT)
    if answer.ticket is None:
        raise RuntimeError(answer.outcome)
    return answer.ticket


def test_a_key_per_attempt_leaves_two_tickets_and_the_feedback_hints_without_answering():
    message = _fails(key_per_attempt, "2 tickets at the service for one thread", "your function ran 2 times",
                     "what stays the same every time the node runs for this thread?")
    assert message.count("thread-") == 1


# --------------------------------------------------------------------------- memorised keys

DEMO_KEY = "INC-1003:open_ticket"  # the demo incident's key, hard-coded


def constant_key(thread_id, tickets, request):
    answer = post_ticket(tickets, "my-one-ticket", request, TICKET_TIMEOUT)
    if answer.ticket is None:
        raise RuntimeError(f"{answer.outcome} {answer.status}")
    return answer.ticket


def demo_key(thread_id, tickets, request):
    answer = post_ticket(tickets, DEMO_KEY, request, TICKET_TIMEOUT)
    if answer.ticket is None:
        raise RuntimeError(f"{answer.outcome} {answer.status}")
    return answer.ticket


@pytest.mark.parametrize("answer", [constant_key, demo_key], ids=["a constant", "the demo incident's key"])
def test_a_memorised_key_fails_on_the_second_thread(answer):
    _fails(answer, "the service refused key", "(422: already used with another request)", "one thread, one key")


# --------------------------------------------------------------------------- catch-alls and no send


def never_sends(thread_id, tickets, request):
    return "T-0001"


def swallows_everything(thread_id, tickets, request):
    try:
        answer = post_ticket(tickets, f"{thread_id}:mine", request, TICKET_TIMEOUT)
        if answer.ticket is None:
            raise RuntimeError(answer.outcome)
        return answer.ticket
    except Exception:
        return "T-0001"


def trusts_every_answer(thread_id, tickets, request):
    return post_ticket(tickets, f"{thread_id}:mine", request, TICKET_TIMEOUT).ticket


def sends_without_a_key(thread_id, tickets, request):
    answer = post_ticket(tickets, None, request, TICKET_TIMEOUT)
    if answer.ticket is None:
        raise RuntimeError(answer.outcome)
    return answer.ticket


def blank(thread_id, tickets, request): ...


@pytest.mark.parametrize(("answer", "said"), [
    (never_sends, ["the service holds no ticket for this incident, yet your function returned 'T-0001', and sent nothing"]),
    (blank, ["yet your function returned None, and sent nothing"]),
    (swallows_everything, ["the service failed your first request (503, nothing stored) and your function returned 'T-0001'",
                           "Raise when the service gives no ticket"]),
    (trusts_every_answer, ["the service failed your first request", "your function returned None"]),
    (sends_without_a_key, ["your function sent no Idempotency-Key", "(400)"]),
], ids=["never sends", "blank", "swallows every error", "trusts every answer", "no key"])
def test_a_catch_all_or_a_missing_send_fails_with_its_own_feedback(answer, said):
    _fails(answer, *said)


# --------------------------------------------------------------------------- labkit's own code


def via_labkits_key(thread_id, tickets, request):
    answer = post_ticket(tickets, labkit.engines.langgraph.ticket_key(thread_id), request, TICKET_TIMEOUT)
    return answer.ticket


def via_a_name_built_at_run_time(thread_id, tickets, request):
    keyed = getattr(labkit.engines.langgraph, "ticket" + "_key")
    answer = post_ticket(tickets, keyed(thread_id), request, TICKET_TIMEOUT)
    if answer.ticket is None:
        raise RuntimeError(answer.outcome)
    return answer.ticket


KEPT = {"key": labkit.engines.temporal.ticket_key}


def via_a_dict(thread_id, tickets, request):
    answer = post_ticket(tickets, KEPT["key"](thread_id, "open_ticket"), request, TICKET_TIMEOUT)
    if answer.ticket is None:
        raise RuntimeError(answer.outcome)
    return answer.ticket


@pytest.mark.parametrize(("answer", "said"), [
    (labkit.engines.langgraph.ticket_key, "write it yourself"),
    (labkit.engines.langgraph.IncidentGraph._open_ticket, "write it yourself"),
    (functools.partial(labkit.effects.open_ticket), "write it yourself"),
    (via_labkits_key, "write it yourself"),
    (via_a_name_built_at_run_time, "found while it ran"),
    (via_a_dict, "write it yourself"),
], ids=["langgraph's ticket_key", "the engine's node", "labkit's open_ticket, wrapped", "labkit's key, called",
        "a name built at run time", "temporal's key, kept in a dict"])
def test_labkits_own_key_or_node_is_refused_under_any_name(answer, said):
    _fails(answer, said)


def test_an_answer_that_is_not_a_function_is_refused():
    _fails("open_ticket:thread", "the answer should be a function (def my_open_ticket(thread_id, tickets, request): ...)")


# --------------------------------------------------------------------------- a note kept after the send

NOTES = Path("unset")  # each test points it at its own folder


def notes_its_ticket_after_the_send(thread_id, tickets, request):
    note = NOTES / f"{thread_id}.ticket"
    if note.exists():  # a resumed node would find the note... if the worker lived to write it
        return note.read_text()
    answer = post_ticket(tickets, str(uuid.uuid4()), request, TICKET_TIMEOUT)
    if answer.ticket is None:
        raise RuntimeError(answer.outcome)
    note.write_text(answer.ticket)
    return answer.ticket


def test_a_note_written_after_the_send_is_never_written_the_worker_dies_first(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "NOTES", tmp_path)
    _fails(notes_its_ticket_after_the_send, "2 tickets at the service for one thread", "under 2 different keys")


def sends_by_hand(thread_id, tickets, request):
    address = urllib.parse.urlsplit(tickets)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=TICKET_TIMEOUT)
    connection.request("POST", "/tickets", json.dumps(request),
                       {"Content-Type": "application/json", "Idempotency-Key": f'"{thread_id}"'})
    return json.loads(connection.getresponse().read())["ticket"]


def test_a_send_that_bypasses_post_ticket_is_asked_to_use_it():
    _fails(sends_by_hand, "did not send it with post_ticket")
