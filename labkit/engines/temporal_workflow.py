"""The incident workflow's Temporal definition: the workflow code the server replays, and nothing else.

Kept apart from :mod:`labkit.engines.temporal` because the SDK wants a workflow class defined at
a module's top level, and importing temporalio costs 0.3 s that nothing but a Temporal worker
should pay: this module is imported by the worker, when one starts, and imports no labkit.

The code is deterministic, as Temporal requires of a workflow: it only calls activities in a
fixed order and decides from their recorded results, so replaying the history against it
takes the same path every time. Each activity has a short ``start_to_close_timeout``
(:data:`ACTIVITY_TIMEOUT`): what a worker killed inside one costs
before the server schedules the next attempt.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

WORKFLOW_NAME = "incident_workflow"
#: How long an attempt may run before the server gives it up and schedules another: what a killed
#: worker costs. Each activity takes milliseconds and the ticket's POST gives up after
#: labkit.effects.TICKET_TIMEOUT (1 s), so a live attempt never comes near it, even on a loaded machine.
ACTIVITY_TIMEOUT = timedelta(seconds=3)
#: Attempts of one activity: every kill of a scenario costs one, and a labkit error none (not retried).
MAX_ATTEMPTS = 5
#: A retry follows a kill at once (the timeout has already been waited out), and gives up after MAX_ATTEMPTS.
RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=100), backoff_coefficient=1.0, maximum_attempts=MAX_ATTEMPTS)


@workflow.defn(name=WORKFLOW_NAME)
class IncidentWorkflow:
    @workflow.run
    async def run(self, incident: str, tickets: str | None) -> dict[str, Any]:
        await _step("start_run", incident)
        return await _rest(incident, tickets)


async def _step(name: str, *args: Any) -> Any:
    """One activity, by name, with the engine's timeout and retries: its result comes from the history on a replay."""
    return await workflow.execute_activity(name, args=list(args), start_to_close_timeout=ACTIVITY_TIMEOUT, retry_policy=RETRY)


# --------------------------------------------------------------------------- a change, replayed
#
# Two later releases of the same workflow, for replaying a recorded history against (the
# counterpart of 08_versioning): each pages the on-call engineer before the read. Unguarded, a
# replay of a run recorded before the change meets read_diagnostic where the code now schedules
# page_oncall, and the SDK refuses it (a non-determinism error); under ``workflow.patched`` the
# old history takes the old path and a new run the new one.


@workflow.defn(name=WORKFLOW_NAME)
class PagingWorkflow:
    """The change made carelessly: a new activity before the read, for every run, recorded or not."""

    @workflow.run
    async def run(self, incident: str, tickets: str | None) -> dict[str, Any]:
        await _step("start_run", incident)
        await _step("page_oncall", incident)
        return await _rest(incident, tickets)


@workflow.defn(name=WORKFLOW_NAME)
class PatchedPagingWorkflow:
    """The same change under ``workflow.patched``: runs recorded before it keep the old path on replay."""

    @workflow.run
    async def run(self, incident: str, tickets: str | None) -> dict[str, Any]:
        await _step("start_run", incident)
        if workflow.patched(PAGING_PATCH):
            await _step("page_oncall", incident)
        return await _rest(incident, tickets)


#: The patch's id, recorded in the history of every run that took the new path.
PAGING_PATCH = "page-oncall-before-read"
#: The releases a recorded history can be replayed against, by name.
RELEASES: dict[str, type] = {"current": IncidentWorkflow, "paging": PagingWorkflow, "paging-patched": PatchedPagingWorkflow}


async def _rest(incident: str, tickets: str | None) -> dict[str, Any]:
    """The workflow after its start, unchanged by either release."""
    reading = await _step("read_diagnostic", incident)
    await _step("record_evidence", incident, reading)
    receipt = await _step("complete_report", incident)
    ticket = None
    if tickets:
        sent = await _step("open_ticket", incident, tickets)
        await _step("record_ticket", incident, sent)
        ticket = sent["ticket"]
    return {"incident": incident, "receipt": receipt, "ticket": ticket}



# --------------------------------------------------------------------------- a late result, refused
#
# The counterpart of 10_leases' fenced commit (labkit.lab.engine_demos.late_result_refused): one
# activity whose attempts are completed from outside the worker, by task token. Each attempt's
# token names its attempt; once the server has timed an attempt out and scheduled the next, a
# completion under the old token is refused by the service, as a commit under an expired lease is.

#: The demonstration's workflow and activity, by name.
LATE_RESULT_WORKFLOW = "late_result_workflow"
LATE_RESULT_ACTIVITY = "answer_later"


@workflow.defn(name=LATE_RESULT_WORKFLOW)
class LateResultWorkflow:
    """One activity, each attempt given ``timeout_seconds``; the workflow returns whichever attempt's answer the server accepted."""

    @workflow.run
    async def run(self, timeout_seconds: float) -> str:
        return str(await workflow.execute_activity(
            LATE_RESULT_ACTIVITY, start_to_close_timeout=timedelta(seconds=timeout_seconds),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100), backoff_coefficient=1.0, maximum_attempts=3)))
