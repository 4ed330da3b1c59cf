"""Build notebooks/14_choosing_an_engine.ipynb from the cell sources below (outputs empty).

    python scripts/make_nb14.py
    python scripts/run_notebooks.py notebooks/14_choosing_an_engine.ipynb   # execute it in place
    python scripts/lesson_times.py --write notebooks/14_choosing_an_engine.ipynb

The lesson is kept here as text, so that a review reads its prose and code as a diff, and the
exercise's solution and shortcuts sit beside the cells that carry them in their metadata
(tests/lab/test_exercises.py applies both). Cell ids are derived from the cells' positions, so the
same sources give the same file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "14_choosing_an_engine.ipynb"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}

SOLUTION = '''# ✏️ EDIT HERE: write the record_evidence step, then delete the last line to have it checked.
def my_write_evidence(coordinator, incident, reading):
    # DBOS runs a step at least once: this call may be a second one, after a kill.
    # Return the step the run is at when you are done, as a string ("evidence_recorded").
    with transaction(coordinator.conn):
        run = coordinator.load_txn(incident)
        if run.step is Step.NOT_INSPECTED:
            run = coordinator.record_reading_txn(run, reading)
        return run.step.value'''

PLACEHOLDER = '''# ✏️ EDIT HERE: write the record_evidence step, then delete the last line to have it checked.
def my_write_evidence(coordinator, incident, reading):
    # DBOS runs a step at least once: this call may be a second one, after a kill.
    # Return the step the run is at when you are done, as a string ("evidence_recorded").
    ...


my_write_evidence = None  # ✏️ delete this line to have the function above checked'''

HEAD = "def my_write_evidence(coordinator, incident, reading):"
SHORTCUTS = [
    {"source": f'{HEAD}\n    return "evidence_recorded"', "feedback": "left no evidence row"},
    {"source": f"{HEAD}\n    ...", "feedback": "left no evidence row"},
    # section 4's naive step: writes every time it runs
    {"source": f"{HEAD}  # writes every time it runs\n"
               "    with transaction(coordinator.conn):\n"
               "        run = coordinator.record_reading_txn(coordinator.load_txn(incident), reading)\n"
               "    return run.step.value",
     "feedback": "the recovery ran your step a second time"},
    {"source": f"{HEAD}  # looks, never writes\n"
               "    with transaction(coordinator.conn):\n"
               "        return coordinator.load_txn(incident).step.value",
     "feedback": "left no evidence row"},
    {"source": f"{HEAD}  # looks and writes outside a transaction\n"
               "    run = coordinator.load_txn(incident)\n"
               "    if run.step is Step.NOT_INSPECTED:\n"
               "        coordinator.record_reading_txn(run, reading)\n"
               '    return "evidence_recorded"',
     "feedback": "raised NotInTransaction"},
    # the check-then-act race of 06: the look outside the write transaction, the write inside
    {"source": f"{HEAD}  # looks first, outside the transaction\n"
               "    run = coordinator.load_txn(incident)\n"
               "    if run.step is Step.NOT_INSPECTED:\n"
               "        with transaction(coordinator.conn):\n"
               "            run = coordinator.record_reading_txn(run, reading)\n"
               "    return run.step.value",
     "feedback": "Both looked before either wrote"},
    # writes every time and swallows whatever goes wrong, a real error too
    {"source": f"{HEAD}  # a catch-all\n"
               "    try:\n"
               "        with transaction(coordinator.conn):\n"
               "            run = coordinator.load_txn(incident)\n"
               "            coordinator.record_reading_txn(run, reading)\n"
               "    except Exception:\n"
               "        pass\n"
               '    return "evidence_recorded"',
     "feedback": "a real error must leave the step"},
    {"source": f"{HEAD}  # labkit's own\n"
               "    return labkit.engines.dbos.write_evidence_once(coordinator, incident, reading)",
     "feedback": "write it yourself"},
    {"source": "my_write_evidence = labkit.engines.dbos.write_evidence_once", "feedback": "write it yourself"},
    {"source": "from labkit.engines.dbos import write_evidence_once as step_of_mine\n\n\n"
               f"{HEAD}\n    return step_of_mine(coordinator, incident, reading)",
     "feedback": "write it yourself"},
    {"source": f"{HEAD}  # labkit's own, by a name built at run time\n"
               '    found = getattr(labkit.engines.dbos, "write_evidence" + "_once")\n'
               "    return found(coordinator, incident, reading)",
     "feedback": "your answer called labkit's own"},
]

#: Section 7's table, one tuple a row (Markdown needs a row on one line; the source keeps it readable).
COMPARISON_HEADER = ('', 'labkit', 'DBOS Transact', 'Temporal', 'LangGraph checkpointer')
COMPARISON = [
    (
        '**the durable unit**',
        'a run row and its step; evidence, receipt and effect rows (§2)',
        "a workflow: its status row and each step's recorded output (§2)",
        "a Workflow Execution's event history, replayed to rebuild its state; workflow code must be "
        'deterministic [T1]',
        'a thread (`thread_id`) of checkpoints, one saved per super-step [L1]',
    ),
    (
        '**a step and a business write in one commit**',
        'yes: evidence and step, receipt and step (§3: no re-read past the evidence commit)',
        'a plain step: no, its output is recorded after it returns (§4); a transaction on a datasource: '
        'yes, output and business write commit together [D1]',
        "no: an Activity's result is recorded by the service after it returns; Activities should be "
        'idempotent [T2]',
        'no shared commit with your database; the docs ask for deterministic, idempotent nodes with side '
        'effects wrapped in tasks [L2]',
    ),
    (
        '**idempotent starts and effects**',
        'one run per incident; one receipt per run; a ticket under its operation key (§2)',
        'the workflow id is the idempotency key (§2: id = incident) [D2]; effects need your own key (§2: '
        '`dbos-…`)',
        'at most one open execution per Workflow Id, with reuse and conflict policies [T3]; effects: '
        'idempotent Activities [T2]',
        'the thread id names the state; effects need your own keys and receipts',
    ),
    (
        '**after a timeout**',
        'a ticket send that timed out is `uncertain`, reconciled by key (09)',
        'cancelling a workflow (by hand or by a timeout) takes effect at the start of its next step; a '
        'running step is not interrupted [D3, D4]',
        'an attempt past its Start-To-Close or Heartbeat Timeout fails and is retried by the Retry '
        'Policy [T4]',
        'no timeout in the checkpointer; a failed run resumes from its last checkpoint when invoked '
        'again [L2]',
    ),
    (
        '**versioning of in-flight runs**',
        'refused: `WorkflowVersionMismatch`, explicit `migrate` (§5, 08)',
        'recovery takes only workflows of its application version (§5); or patching with `DBOS.patch()` '
        '[D5]',
        'patching, or Worker Versioning that pins executions to a deployment [T5]',
        'the persistence docs [L1] describe no version on a thread: plan it yourself',
    ),
    (
        '**fencing of stale workers**',
        'lease tokens checked inside each commit (10)',
        'workflows are tagged with their executor; another executor recovers them only when told, and '
        'each must be recovered once [D6]',
        'the service dispatches tasks and records results; a timed-out attempt is retried, its side '
        'effects are not undone [T4]',
        'none described [L1]: keep one writer per thread yourself',
    ),
    (
        '**retention**',
        '`retain`: raw diagnostics dropped, unfinished runs kept (11)',
        "Conductor's retention policies delete completed workflows by age or count [D7]",
        "each Namespace's Retention Period for closed executions [T6]; archival beyond it [T7]",
        'not covered by [L1]: delete old checkpoints yourself',
    ),
]

#: Section 8's table.
DECISION_HEADER = ('if the team says ...', 'look at', 'and still write yourself')
DECISIONS = [
    (
        'one machine, a bounded local worker, runs of minutes, a few hundred a day',
        'a labkit-style embedded state machine',
        'everything: it is yours, and this lab is its test suite',
    ),
    (
        'Python, PostgreSQL already run, "a library, not another server"',
        'DBOS Transact',
        'idempotent steps (14.1), the evidence contract, receipts, keys for external effects',
    ),
    (
        'several languages, timers of days or weeks, many hosts, an operations team',
        'Temporal',
        'idempotent Activities and their keys, receipts, business rows for the scorecards',
    ),
    (
        'an agent graph, human-in-the-loop, state per conversation thread',
        'LangGraph with a checkpointer',
        'idempotent effects with your own receipts, and one writer per thread',
    ),
]


def markdown_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])

CELLS: list[tuple[str, str, dict]] = []


def md(source: str) -> None:
    CELLS.append(("markdown", source.strip("\n"), {}))


def code(source: str, **metadata) -> None:
    CELLS.append(("code", source.strip("\n"), metadata))


md('''
# 14 · Choosing an engine: the same workflow on DBOS Transact
Reading 0 min · Exercises 0 min · Prerequisites: 08_versioning, 09_external_effects, 12_crash_explorer, 13_evaluation

**Questions:** When should a team stop growing its own state machine and move to a workflow engine? On an
engine, which of labkit's guarantees come for free, which change shape, and which must the team still write?

**Objectives:** after this lesson you can

1. run the incident workflow on labkit and on DBOS Transact and show the same business rows, and DBOS's own
   record beside them (section 2);
2. crash both at every point and say, from each engine's read window, where a read is repeated; show a
   DBOS step running twice and staying harmless, and what DBOS records for a refused answer (3, 4);
3. write the idempotent record_evidence step that DBOS's at-least-once steps need (Exercise 14.1);
4. show how DBOS treats a run of another application version, score both engines with one evaluation layer,
   and choose an engine for a team from its questions (sections 5 to 8).
''')

code('''
from contextlib import closing

import pandas as pd

import labkit
from labkit import engines
from labkit.lab import display, explorer
from labkit.lab.progress import with_progress
from labkit.crashpoints import NO_CRASH, CrashPlan, CrashPoint
from labkit.database import transaction  # for Exercise 14.1
from labkit.engines.dbos import IncidentApp, workflows_of
from labkit.provider import CallLog, ReferenceProvider
from labkit.steps import Step  # for Exercise 14.1

ws = labkit.lab.lesson.start("14")  # cell-order messages; each demonstration has its own folder
labkit.lab.lesson.defined_by({
    "sides": "section 2's first cell",
    "found": "section 3's first cell",
    "runs": "section 3's first cell",
    "kill": "section 4's first cell",
    "my_write_evidence": "Exercise 14.1's answer cell",
})
pd.set_option("display.width", 120)
pd.set_option("display.max_colwidth", None)
INCIDENT = engines.INCIDENT  # INC-1003: a poison message, and a ticket for the on-call team


def in_dbos(folder, work, **options):
    """work(app) in a forked child that launches DBOS (never this kernel): its end, its value."""
    said = folder / ".said.txt"
    said.unlink(missing_ok=True)

    def child():
        app = IncidentApp(folder, **options)
        try:
            said.write_text(repr(work(app)))
        finally:
            app.close()

    end = explorer.in_child(child, output=(folder / ".child.out", folder / ".child.err"))
    return end, said.read_text() if said.exists() else "-"


def business_rows(folder):
    """What either engine left in FOLDER/lab.db and the provider's log beside it, without times."""
    db = folder / "lab.db"
    effects = display.effects_frame(db)
    tickets = [f"{ticket} ({state})" for ticket, state in zip(effects["ticket"], effects["state"])]
    return {
        "step": display.runs_frame(db)["step"].iloc[0],
        "evidence rows": len(display.evidence_frame(db)),
        "moves": "→".join(display.transitions_frame(db)["to_step"]),
        "receipt": ", ".join(display.receipts_frame(db)["receipt_id"]) or "-",
        "ticket": ", ".join(tickets) or "-",
        "provider reads": CallLog(labkit.call_log_for(db)).reads_of(INCIDENT),
    }


def dbos_record(folder):
    """DBOS's own rows about the workflow, as an operator would read them (one line each)."""
    lines = [f"{w['workflow_id']}: {w['status']}, app version {w['app_version']}, "
             f"attempts {w['attempts']}, recorded steps: {', '.join(w['steps']) or '-'}"
             for w in workflows_of(folder)]
    return lines or ["(no workflow recorded)"]
''')

md('''
## 1. Why an engine, and when

labkit is an embedded state machine. It keeps one SQLite file with one row per run, and a coordinator
reads the row and does the next step. That suits a bounded local worker, and it let the lab show every
guarantee in a row you can query. It does not stretch to timers that wait a week, or thousands of runs
in flight on several hosts. Nor to workers that come and go, or upgrades rolled out while runs are half
way. Those justify a dedicated workflow platform, with its own scheduler, recovery and operations. A
team that outgrows one machine should move to one, not grow labkit into a toy copy of it.

Moving is safe only if the same business outcomes can still be judged. That means the same rows, the
same invariants (12) and the same two scorecards (13). So this lesson runs the *same* incident workflow
on DBOS Transact. DBOS is a Python library that keeps workflow state in a database (SQLite here,
PostgreSQL in production). The workflow writes the business rows into the same labkit tables, and the
same code judges both engines.
''')

md('''
## 2. The same workflow, two engines

What each engine runs for INC-1003 (abridged; `labkit/coordinator.py` and `labkit/engines/dbos.py`):

```python
# labkit: the coordinator reads its own run row and decides the next step
def finish(self, incident):
    from_step = self.start(incident).step    # the run row, not_inspected
    _, read = self._inspect(incident)        # read; evidence + step in ONE commit (a no-op past not_inspected)
    receipt, completed = self._complete(incident)   # receipt + step in one commit
    ...                                      # drive() then opens the ticket under its operation key (09)
```

```python
# DBOS: a workflow of steps; DBOS records each step's output when it returns, and replays from them
@DBOS.workflow(name="incident_workflow")
def incident_workflow(incident, tickets):
    start_run(incident)                      # @DBOS.step: labkit's start
    reading = read_diagnostic(incident)      # @DBOS.step: read + contract check; the OUTPUT is the checkpoint
    record_evidence(incident, reading)       # @DBOS.step: write the evidence rows (write_evidence_once)
    receipt = complete_report(incident)      # @DBOS.step: labkit's completion, receipt + step in one commit
    if tickets:
        sent = open_ticket(incident, tickets)    # @DBOS.step: key derived from the workflow id
        record_ticket(incident, sent)
```

The workflow's id is the incident's id, so starting it twice joins the first. Each engine runs INC-1003 with
a ticket service in a forked child, each in a folder of its own:
''')

code('''
sides = {}
for name in ("labkit", "dbos"):
    folder = labkit.lab.Workspace.create(f"14-{name}").folder  # this cell can run again
    with explorer.ticket_service(folder / "tickets.db") as url:
        engine = engines.engine(name)
        end = explorer.in_child(lambda: engine.drive(folder, NO_CRASH, url))
    print(f"{name}: INC-1003 in a child process, {end}")
    sides[name] = folder
pd.DataFrame({name: business_rows(folder) for name, folder in sides.items()})
''')

md('''
DBOS keeps a record of its own, in its system database beside `lab.db` (`dbos-system.sqlite`); labkit has
none besides the run row:
''')

code('''
print("\\n".join(dbos_record(sides["dbos"])))
''')

md('''
**What to notice:** the same rows, the same receipt id (it is derived from the evidence), one ticket
each. The ticket keys differ on purpose. labkit's comes from its effect row, DBOS's from the workflow id.
DBOS's record says SUCCESS and names six recorded steps. DBOS resumes from that record, not from the
run row.
''')

md('''
## 3. Crash and recovery on both engines

The crash explorer (12) kills INC-1003 at each of the nine points of the ticketed run, recovers with the
engine's own recovery (`python -m labkit recover`, or a fresh process calling `DBOS.launch()`), and checks
invariants 1 to 9 with the same code. Invariant 5 predicts the provider's reads from each engine's *read
window*: the points where a kill loses a read the provider already answered. The cell takes some
seconds; a bar shows its progress:
''')

code('''
found = {}
for name in with_progress(["labkit", "dbos"]):
    scenarios = labkit.lab.Workspace.create(f"14-explore-{name}").folder / "scenarios"
    found[name] = labkit.lab.explore(scenarios, pairs=False, engine=name)
runs = {name: [r for r in found[name].results if r.scenario.flow == "run"] for name in found}
tables = {}
for name, results in runs.items():
    window = engines.engine(name).read_window
    tables[name] = pd.DataFrame({
        "read window": [CrashPoint(r.name) in window for r in results],
        "reads": [r.provider_reads for r in results],
        "all invariants held": [r.held for r in results],
    }, index=[r.name for r in results])
pd.concat(tables, axis=1)
''')

code('''
for name, results in runs.items():
    twice = [r.name for r in results if r.provider_reads == 2]
    held = all(r.held for r in results)
    print(f"{name}: every invariant held at all {len(results)} points: {held}")
    print(f"  read twice after a kill at {twice}")
''')

md('''
**What to notice:** every invariant holds on both engines. The reads differ, and each engine's read
window says where. labkit reads twice after a kill at `after_read` or `before_evidence_commit`; DBOS
only at `after_read`. DBOS records the read step's output when the step returns, *before* labkit's
evidence commit. So a kill inside the evidence transaction costs no read: the recorded output plays the
part of labkit's evidence checkpoint. It is a checkpoint in another database, though. The next section
shows the price.
''')

md('''
## 4. A step runs at least once

DBOS records a step after it returns. If the process is killed after the step's work but before that
record, recovery runs the step *again*. Kill the DBOS run at `after_evidence_commit` (inside
`record_evidence`, after its commit), and recover it in a fresh process:
''')

code('''
kill = CrashPlan(CrashPoint("after_evidence_commit"))
again = labkit.lab.Workspace.create("14-at-least-once").folder  # this cell can run again
end, _ = in_dbos(again, lambda app: app.run(INCIDENT), crash=kill)
print(f"run, killed at after_evidence_commit: {end}", *dbos_record(again), sep="\\n  ")
end, resumed = in_dbos(again, lambda app: app.recover())
print(f"recovery in a fresh process: {end}, resumed {resumed}", *dbos_record(again), sep="\\n  ")
pd.DataFrame({"after recovery": business_rows(again)})
''')

md('''
**What to notice:** after the kill, DBOS had recorded only `start_run` and `read_diagnostic`. The
recovery (attempt 2) ran `record_evidence` a second time, from the recorded reading. Yet there is one
evidence row and one move to `evidence_recorded`. labkit's `write_evidence_once` looks first, under the
write lock, and leaves a run already past `not_inspected` as it is. Here is a step that does not look:
''')

code('''
def write_evidence_always(coordinator, incident, reading):  # the naive step: writes every time
    with transaction(coordinator.conn):
        run = coordinator.record_reading_txn(coordinator.load_txn(incident), reading)
    return run.step.value


naive = labkit.lab.Workspace.create("14-naive-step").folder  # this cell can run again
naive_step = write_evidence_always
end, _ = in_dbos(naive, lambda app: app.run(INCIDENT), crash=kill, write_evidence=naive_step)
print(f"run, killed at after_evidence_commit: {end}")
end, _ = in_dbos(naive, lambda app: app.recover(), write_evidence=naive_step)
print(f"recovery: {end}", *dbos_record(naive), sep="\\n  ")
pd.DataFrame({"after recovery": business_rows(naive)})
''')

md('''
**What to notice:** the second run of the naive step hit the evidence table's primary key. The workflow
ended ERROR, and no receipt was ever written. DBOS did what it promises; the step was not fit for it.

DBOS has no evidence contract of its own. Here `check_evidence` runs inside the read step, so a refused
answer becomes the step's recorded *error*, never its recorded output. A provider that answers about
another incident shows it (DBOS's record, one line per step; `output` or `error`):
''')

code('''
class AnswersAnotherIncident(ReferenceProvider):  # the answer is about INC-1001, whatever is asked
    def read_with_diagnostic(self, incident):
        return super().read_with_diagnostic("INC-1001")


refused = labkit.lab.Workspace.create("14-refused").folder  # this cell can run again
wrong = AnswersAnotherIncident(labkit.call_log_for(refused / "lab.db"))
end, _ = in_dbos(refused, lambda app: app.run(INCIDENT), provider=wrong)
print(f"run: {end}")
for workflow in workflows_of(refused):
    print(f"{workflow['workflow_id']}: {workflow['status']}", *workflow["outcomes"], sep="\\n  ")
rows = business_rows(refused)
pd.DataFrame({"after the refusal": {key: rows[key] for key in ("step", "evidence rows", "moves")}})
''')

md('''
**What to notice:** `read_diagnostic` ended with an error, and DBOS recorded no output for it. So no
replay can hand the refused answer to `record_evidence`, which never ran. Had the read step skipped
the check, DBOS would record the answer as the read's output, and only the next step would refuse it.

What else labkit gave for free and DBOS does not:

- **the receipt table and its one-per-run key**: nothing either. The receipt is the application's own table,
  written by a step whose code must be idempotent (labkit's completion is);
- **evidence and step in one commit**: only for a DBOS *transaction* on a datasource, which records its
  output in the same database transaction as the business write (section 7). A plain step, as here, does not.
''')

md('''
### Exercise 14.1 (10 min): an evidence step that runs at least once

Write `my_write_evidence(coordinator, incident, reading)`, the record_evidence step as DBOS calls it.
`coordinator` is a labkit coordinator on the run's database. It offers `coordinator.conn`,
`coordinator.load_txn(incident)` and `coordinator.record_reading_txn(run, reading)`; the last needs an
open `transaction(coordinator.conn)`. `reading` is the read step's recorded output. Keep the reading as
evidence and move the run to `evidence_recorded`, once: the same call may come again after a kill, or
from a second process at the same moment. Return the step the run is at, as a string. Write it
yourself: the check refuses labkit's `write_evidence_once`, under any name.

The check plugs your function into `IncidentApp(..., write_evidence=my_write_evidence)` in forked
children. It tries a clean run, and a run killed at `after_evidence_commit` and recovered. It tries a
recovery whose database fails for real: that error must leave your step. Last, two processes call
your step at once. Correct: four `✓` lines; the second says your step ran 2 times.
''')

code(PLACEHOLDER, builds=True, exercise="14.1", shortcuts=SHORTCUTS, solution=SOLUTION)

code('''
labkit.lab.exercises.waiting_for("14.1", my_write_evidence=my_write_evidence)
labkit.lab.exercises.check_evidence_step(my_write_evidence)
''', exercise_check="14.1", tags=["raises-exception"])

md(f'''
<details><summary>Solution</summary>

```python
{SOLUTION}
```

The look and the write share one write transaction. Between reading the step and writing the evidence,
no other process can write first (06). The first run finds `not_inspected` and records. A replay after
the kill finds `evidence_recorded` and writes nothing, so its output is what the first would have been.
Looking outside the transaction lets two processes both see `not_inspected`; the second write then
fails. Catching every exception hides that, and hides a real error too: DBOS would record a step that
did nothing as a success.

</details>
''')

md('''
## 5. Versioning of in-flight runs

A run killed under one release may be recovered by the next. labkit refuses a run written by another
workflow version, and asks for an explicit migration (08). DBOS tags each workflow with its *application
version*. A process recovers only the pending workflows of its own version. Kill a run under
`incidents-1`, then start a process of `incidents-2`, then one of `incidents-1` again:
''')

code('''
versions = labkit.lab.Workspace.create("14-versions").folder  # this cell can run again
early = CrashPlan(CrashPoint("after_read"))
end, _ = in_dbos(versions, lambda app: app.run(INCIDENT), crash=early)
print(f"incidents-1, killed at after_read: {end}", *dbos_record(versions), sep="\\n  ")
for version in ("incidents-2", "incidents-1"):
    end, resumed = in_dbos(versions, lambda app: app.recover(), app_version=version)
    print(f"a process of {version} recovers {resumed}", *dbos_record(versions), sep="\\n  ")
''')

md('''
labkit, for comparison: a run started by workflow version 1, driven by version 2:
''')

code('''
old = labkit.lab.Workspace.create("14-labkit-version")  # this cell can run again
with closing(old.connect()) as conn:
    old.coordinator(conn, workflow_version=1).start(INCIDENT)
    try:
        old.coordinator(conn).drive(INCIDENT)
    except labkit.errors.WorkflowVersionMismatch as refusal:
        print(f"{type(refusal).__name__}: {refusal}")
''')

md('''
**What to notice:** the `incidents-2` process recovered nothing and left the workflow PENDING. Only a
process of `incidents-1` picked it up (attempt 2). Neither engine lets new code silently reinterpret an
old run. labkit refuses loudly; DBOS waits quietly. Plan for the cost of waiting. Keep some old-version
processes running until their workflows drain, or use DBOS's patching (section 7). A run that no process
of its version comes back for stays PENDING forever. Only an operator reading DBOS's record would know.
''')

md('''
## 6. One evaluation layer for both

The business rows are labkit's tables in both folders, so 13's scorers read them unchanged. They score
each clean run of section 2 with its ticket store, and each engine's nine crash scenarios of section 3
(`recovery_from_scenarios` takes the explorer's rows as they are):
''')

code('''
rows = []
for name, folder in sides.items():
    card = labkit.evaluation.evaluate(folder / "lab.db", ticket_store=folder / "tickets.db")
    task = f"{card.task.correct} of {card.task.scored} right"
    rows.append({"scored": f"{name}, clean run", "task": task, **card.recovery.as_json()})
for name, exploration in found.items():
    scenarios = [row for row in exploration.as_json()["scenarios"] if row["flow"] == "run"]
    card = labkit.evaluation.recovery_from_scenarios(scenarios)
    rows.append({"scored": f"{name}, 9 crash scenarios", "task": "-", **card.as_json()})
# "-": not measured (the explorer's rows carry no effect state, and the card does not guess)
shown = [{key: "-" if value is None else value for key, value in row.items()} for row in rows]
pd.DataFrame(shown).set_index("scored").drop(columns="unfinished")
''')

md('''
**What to notice:** the same columns from the same code, and the same verdicts. Every run completed,
with no duplicate receipt and no duplicate ticket. The one number that differs, `rereads` (2 against 1),
is section 3's read windows. The scorecard measured it without knowing which engine it scored. That is
what makes a migration judgeable: the yardstick stays when the engine changes.
''')

md(f'''
## 7. labkit, DBOS, Temporal, LangGraph: what each gives

A cell marked with a section was shown above; the others say what the engine's documentation says, with the
page (read them before relying on a cell: engines change).

{markdown_table(COMPARISON_HEADER, COMPARISON)}

[D1] https://docs.dbos.dev/python/reference/datasources ·
[D2] https://docs.dbos.dev/python/tutorials/idempotency-tutorial ·
[D3] https://docs.dbos.dev/conductor/reference/dbos-cloud/workflow-management ·
[D4] https://docs.dbos.dev/production/retention (global timeout) ·
[D5] https://docs.dbos.dev/python/tutorials/upgrading-workflows ·
[D6] https://docs.dbos.dev/production/self-hosting/workflow-recovery ·
[D7] https://docs.dbos.dev/production/retention ·
[T1] https://docs.temporal.io/workflows ·
[T2] https://docs.temporal.io/activity-definition ·
[T3] https://docs.temporal.io/workflow-execution/workflowid-runid ·
[T4] https://docs.temporal.io/encyclopedia/detecting-activity-failures ·
[T5] https://docs.temporal.io/develop/python/workflows/versioning ·
[T6] https://docs.temporal.io/self-hosted-guide/namespaces ·
[T7] https://docs.temporal.io/temporal-service/archival ·
[L1] https://langchain-ai.github.io/langgraph/concepts/persistence ·
[L2] https://docs.langchain.com/oss/python/langgraph/durable-execution
''')

md(f'''
## 8. A decision guide

Start from the team's questions, not from the engine's feature list:

{markdown_table(DECISION_HEADER, DECISIONS)}

Whichever it is, keep the business rows in tables you own, and keep the two scorecards of 13. Section 6
showed that they let you compare the old engine with the new one, crash by crash.
''')

md('''
## What you learned

1. The same workflow on two engines leaves the same business rows. DBOS adds a record of its own, with
   each step's output or error; a refused answer is the read step's error, never its output.
2. Every invariant held on both. The read is repeated exactly where each engine's read window says. A
   DBOS step killed after its commit runs again.
3. You wrote the evidence step that makes running again harmless: after a kill, and with two at once.
4. DBOS waits for a process of the same version. One evaluation layer scores both engines. The team's
   questions choose the engine.
''')

md('''
**Next:** the lab ends here. Back to 00_setup_check's map, or to `make soak` for the long hostile checks.
''')

md('''
## Further reading (optional)

- DBOS, [Workflow recovery](https://docs.dbos.dev/production/self-hosting/workflow-recovery) and
  [Workflows](https://docs.dbos.dev/python/tutorials/workflow-tutorial): what this lesson's `IncidentApp` relies on.
- Temporal, [Workflows](https://docs.temporal.io/workflows) and
  [Detecting Activity failures](https://docs.temporal.io/encyclopedia/detecting-activity-failures): replay, and the
  timeouts that decide when an attempt is given up.
- LangGraph, [Persistence](https://langchain-ai.github.io/langgraph/concepts/persistence) and
  [Durable execution](https://docs.langchain.com/oss/python/langgraph/durable-execution): checkpoints per
  super-step, threads, durability modes.
''')


def build() -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = dict(KERNELSPEC)
    notebook.metadata["language_info"] = {"name": "python"}
    for index, (kind, source, metadata) in enumerate(CELLS):
        cell = nbformat.v4.new_markdown_cell(source) if kind == "markdown" else nbformat.v4.new_code_cell(source)
        cell.metadata.update(metadata)
        cell.id = f"nb14-{index:02d}"
        notebook.cells.append(cell)
    nbformat.validate(notebook)
    return notebook


def _lesson_times():
    """scripts/lesson_times.py, loaded as the tests load it (it is a script, not a module of labkit)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("lesson_times", ROOT / "scripts" / "lesson_times.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["lesson_times"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def main() -> int:
    nbformat.write(build(), NOTEBOOK)
    _lesson_times().write_header(NOTEBOOK)  # the measured minutes, not the placeholder's zeros
    print(f"wrote {NOTEBOOK.relative_to(ROOT)} ({len(CELLS)} cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
