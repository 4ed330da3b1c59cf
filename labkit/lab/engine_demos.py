"""What 14_choosing_an_engine shows each engine doing, run for real: a late result, a transaction, both scorecards.

Each demonstration here runs the engine's own machinery, not a picture of it: a Temporal dev
server on 127.0.0.1 (:mod:`labkit.lab.temporal_server`), DBOS on SQLite files in the folder
given, processes forked and SIGKILLed. Every client, worker and DBOS instance lives in a forked
child (:func:`labkit.children.in_child`): their threads must never start in a notebook's kernel.
What each returns is a frozen record whose ``lines()`` are the same on every run (no ids,
times or paths), so a lesson can print them under strict nbval.

- :func:`late_result_refused`: Temporal fences a timed-out activity attempt, as 10_leases
  fences a worker whose lease ran out; the service itself refuses the stale attempt's result.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from ..children import in_child
from ..engines.temporal import _sandbox, scope_of
from ..errors import LabError
from .temporal_server import TemporalServer

# --------------------------------------------------------------------------- Temporal: a late result

#: Each attempt's start-to-close timeout in the late-result demonstration: what the first attempt
#: outlives, so the demonstration waits about this long. Attempt 2 is completed within
#: milliseconds of starting, far inside it even on a loaded machine.
LATE_TIMEOUT_SECONDS = 1.0
#: How long the demonstration waits for an attempt to start before it calls the run failed.
ATTEMPT_WAIT_SECONDS = 30.0


class DemoFailed(LabError):
    """A demonstration's child process ended without its result; the message is its error's first line."""


@dataclass(frozen=True)
class LateResult:
    """What the late-result demonstration saw: whose completion the service refused, and what the workflow returned.

    ``late`` and ``fresh`` are the service's answers to completing attempt 1 (after its timeout,
    unless ``in_time``) and then the newest attempt: ``accepted`` or the gRPC status the service
    refused with (``NOT_FOUND``). ``started`` lists the attempt of each ``ActivityTaskStarted``
    event of the history, ``timed_out`` counts its ``ActivityTaskTimedOut`` events.
    """

    late_attempt: int
    late: str
    fresh_attempt: int
    fresh: str
    result: str
    started: tuple[int, ...]
    timed_out: int
    in_time: bool = False

    @property
    def result_attempt(self) -> int:
        """Which attempt the workflow's result came from (the answer says: ``answer of attempt N``)."""
        return int(self.result.rsplit(" ", 1)[-1])

    def lines(self) -> list[str]:
        when = "within its timeout" if self.in_time else "after the server timed it out"
        out = [f"attempt {self.late_attempt} completed {when}: {self.late}"]
        if self.fresh_attempt != self.late_attempt:
            out.append(f"attempt {self.fresh_attempt} completed while current: {self.fresh}")
        out += [f"workflow result: {self.result!r} (from attempt {self.result_attempt})",
                f"history: {len(self.started)} ActivityTaskStarted (attempt {', '.join(map(str, self.started))}), "
                f"{self.timed_out} ActivityTaskTimedOut"]
        return out


def late_result_refused(folder: str | Path, address: str | None = None, *, in_time: bool = False) -> LateResult:
    """Run one activity whose first attempt outlives its timeout, then complete that attempt late.

    The activity saves its task token (which names the attempt) to ``folder`` and leaves its
    completion to someone else (``activity.raise_complete_async()``), as a worker that stalls
    would. The server times attempt 1 out after :data:`LATE_TIMEOUT_SECONDS` and schedules
    attempt 2; the demonstration then completes attempt 1 with its answer, which the service
    refuses, and attempt 2, which it accepts. ``in_time`` completes attempt 1 before its timeout
    instead: accepted, the counter-case that shows the refusal is about lateness.

    On the server at ``address``, or on one started here on ``folder``'s own SQLite file and
    stopped before returning. The workflow's id carries a random suffix (never printed), so the
    demonstration can run again on the same server.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if address is not None:
        return _late_result(folder, address, in_time)
    db_file = folder / "late-result.sqlite"
    for stale in (db_file, db_file.with_name(db_file.name + "-wal"), db_file.with_name(db_file.name + "-shm")):
        stale.unlink(missing_ok=True)  # this demonstration's own server file, from a run before: a fresh history
    with TemporalServer(db_file) as server:
        return _late_result(folder, server.address, in_time)


def _late_result(folder: Path, address: str, in_time: bool) -> LateResult:
    tokens = folder / "late-result-tokens"
    tokens.mkdir(exist_ok=True)
    for old in tokens.glob("attempt-*.token"):
        old.unlink()
    out, err = folder / "late-result.json", folder / "late-result.err"
    out.unlink(missing_ok=True)
    end = in_child(lambda: asyncio.run(_late_result_child(folder, tokens, address, in_time, out)), output=(folder / "late-result.log", err))
    if end.code != 0 or not out.exists():
        raise DemoFailed(f"the late-result demonstration ended {end}")
    seen = json.loads(out.read_text())
    return LateResult(seen["late_attempt"], seen["late"], seen["fresh_attempt"], seen["fresh"], seen["result"],
                      tuple(seen["started"]), seen["timed_out"], in_time)


async def _late_result_child(folder: Path, tokens: Path, address: str, in_time: bool, out: Path) -> None:
    """In a forked child: a worker, the workflow, the completions by token, and the history read back."""
    from temporalio import activity
    from temporalio.client import Client
    from temporalio.service import RPCError
    from temporalio.worker import Worker

    from ..engines.temporal_workflow import LATE_RESULT_ACTIVITY, LateResultWorkflow

    @activity.defn(name=LATE_RESULT_ACTIVITY)
    async def answer_later() -> str:
        info = activity.info()
        (tokens / f"attempt-{info.attempt}.token").write_bytes(info.task_token)
        activity.raise_complete_async()  # the answer comes from outside, by this attempt's token

    async def token_of(attempt: int) -> bytes:
        path = tokens / f"attempt-{attempt}.token"
        deadline = time.monotonic() + ATTEMPT_WAIT_SECONDS
        while not path.exists():
            if time.monotonic() > deadline:
                raise DemoFailed(f"attempt {attempt} did not start within {ATTEMPT_WAIT_SECONDS:.0f} s")
            await asyncio.sleep(0.01)
        return path.read_bytes()

    async def complete(attempt: int, token: bytes) -> str:
        try:
            await client.get_async_activity_handle(task_token=token).complete(f"answer of attempt {attempt}")
        except RPCError as refused:
            return refused.status.name  # the status only: the message names the workflow's random id
        return "accepted"

    client = await Client.connect(address)
    queue = f"late-result-{scope_of(folder)}"
    async with Worker(client, task_queue=queue, workflows=[LateResultWorkflow], activities=[answer_later],
                      max_cached_workflows=0, workflow_runner=_sandbox()):
        handle = await client.start_workflow(LateResultWorkflow.run, LATE_TIMEOUT_SECONDS,
                                             id=f"late-result-{uuid.uuid4().hex[:12]}", task_queue=queue)
        first = await token_of(1)
        fresh_attempt = 1
        if not in_time:
            fresh_attempt = 2
            second = await token_of(2)  # exists once the server has timed attempt 1 out and handed out attempt 2
        late = await complete(1, first)
        fresh = late if in_time else await complete(2, second)
        result = await handle.result()
        history = await handle.fetch_history()
    started, timed_out = [], 0
    for event in history.events:
        kind = event.WhichOneof("attributes") or ""
        if kind == "activity_task_started_event_attributes":
            started.append(event.activity_task_started_event_attributes.attempt)
        timed_out += kind == "activity_task_timed_out_event_attributes"
    out.write_text(json.dumps({"late_attempt": 1, "late": late, "fresh_attempt": fresh_attempt, "fresh": fresh,
                               "result": result, "started": started, "timed_out": timed_out}))

