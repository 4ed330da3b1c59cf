"""The contract suite, once per engine: labkit's coordinator and the same workflow on DBOS Transact, on Temporal and on LangGraph.

Each scenario is a real forked process SIGKILLed at a crash point, then the engine's own
recovery (``labkit recover``, ``DBOS.launch()``, or a Temporal worker started again), then one invariant code for all
(:func:`labkit.invariants.check_invariants`): the provider's call log, the receipts, the
ticket service's table, and a further recovery that must change nothing. The PostgreSQL
variant lives in tests/engines/test_postgres.py (it needs a server).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from labkit import evaluation
from labkit.crashpoints import NO_CRASH, CrashPlan, CrashPoint, points
from labkit.effects import Tickets
from labkit.engines import INCIDENT, UnknownEngine, engine
from labkit.engines.dbos import BadDbosUrl, IncidentApp, Paths, workflows_of
from labkit.errors import BadInput
from labkit.invariants import check_invariants
from labkit.lab.explorer import BadExploreOption, explore, in_child
from labkit.lab.ticket_service import ticket_service
from labkit.provider import CallLog, ReferenceProvider, call_log_for

RUN_POINTS = points(tickets=True)
ENGINES = ("labkit", "dbos", "langgraph")

#: Written by hand from each engine's design, not read from labkit.engines: where a kill costs a
#: second read. labkit commits the read with its evidence; DBOS records it when the step returns,
#: which is before the evidence transaction; Temporal when the read activity's result reaches the server;
#: LangGraph checkpoints it when the read node returns.
SECOND_READ = {"labkit": {"after_read", "before_evidence_commit"}, "dbos": {"after_read"}, "temporal": {"after_read"},
               "langgraph": {"after_read"}}


def _run_dbos(folder: Path, incident: str, url: str | None, crash: CrashPlan = NO_CRASH, **options) -> object:
    """One DBOS run in a forked child (DBOS is one instance per process); how the child ended."""

    def work() -> None:
        app = IncidentApp(folder, crash=crash, **options)
        try:
            app.run(incident, url)
        finally:
            app.close()

    return in_child(work, output=(folder / "run.out", folder / "run.err"))


def _recover_dbos(folder: Path, **options) -> list[str]:
    out = folder / "recovered.json"

    def work() -> None:
        app = IncidentApp(folder, **options)
        try:
            out.write_text(json.dumps(app.recover()))
        finally:
            app.close()

    end = in_child(work, output=(folder / "recover.out", folder / "recover.err"))
    assert end.code == 0, f"{end}: {(folder / 'recover.err').read_text()[-400:]}"
    return json.loads(out.read_text())


def test_a_kill_at_every_point_is_recovered_by_either_engine_with_every_invariant_held(tmp_path):
    """Every ticketed-run crash point alone, on each engine (one exploration each, scenarios side by side),
    then the recovery scorecard of both tables: the same counts but for the reads."""
    singles = {name: explore(tmp_path / name, pairs=False, engine=name) for name in ENGINES}
    for name in ENGINES:
        _every_point_held(name, singles[name].results)
    labkit_score = evaluation.recovery_from_scenarios([r.row() for r in singles["labkit"].results if r.scenario.flow == "run"])
    dbos_score = evaluation.recovery_from_scenarios([r.row() for r in singles["dbos"].results])
    assert (dbos_score.runs, dbos_score.completed, dbos_score.duplicate_receipts, dbos_score.duplicate_effects) == (9, 9, 0, 0)
    langgraph_score = evaluation.recovery_from_scenarios([r.row() for r in singles["langgraph"].results])
    assert (langgraph_score.runs, langgraph_score.completed, langgraph_score.duplicate_receipts,
            langgraph_score.duplicate_effects, langgraph_score.rereads) == (9, 9, 0, 0, 1)
    assert (labkit_score.runs, labkit_score.completed, labkit_score.duplicate_receipts, labkit_score.duplicate_effects) == (9, 9, 0, 0)
    assert (labkit_score.rereads, dbos_score.rereads) == (2, 1)  # one point fewer in DBOS's read window


def _every_point_held(name: str, explored: list) -> None:
    """Each run-flow point killed once and recovered: every invariant held, reads as the engine's design says."""
    results = [r for r in explored if r.scenario.flow == "run"]
    assert [r.scenario.crash_points[0] for r in results] == list(RUN_POINTS)
    for result in results:
        point = result.scenario.crash_points[0]
        assert result.reached == (True,), f"{name}: the run never reached {point}"
        assert result.broken == {}, f"{name} at {point}: {result.broken}"
        assert all(result.invariants[n] for n in range(1, 10)), f"{name} at {point}"
        assert (result.provider_reads, result.receipts, result.tickets, result.completed) == (
            2 if point in SECOND_READ[name] else 1, 1, 1, True), f"{name} at {point}"


def test_a_kill_at_every_point_is_recovered_by_temporal_with_every_invariant_held(tmp_path):
    """The same nine kills on a Temporal server the explorer starts (each kill waits out a 3 s activity timeout)."""
    exploration = explore(tmp_path / "temporal", pairs=False, engine="temporal")
    _every_point_held("temporal", exploration.results)
    score = evaluation.recovery_from_scenarios([r.row() for r in exploration.results])
    assert (score.runs, score.completed, score.duplicate_receipts, score.duplicate_effects, score.rereads) == (9, 9, 0, 0, 1)
    assert {str(point) for point in engine("temporal").read_window} == SECOND_READ["temporal"]


@pytest.mark.skipif(not os.environ.get("LABKIT_SOAK"), reason="every pair on Temporal takes minutes (a timeout per kill): make soak")
def test_every_pair_of_kills_on_temporal_holds_every_invariant(tmp_path):
    # Eight at once: a Temporal kill mostly waits for its activity timeout, not for a core.
    exploration = explore(tmp_path / "pairs", engine="temporal", workers=8)
    assert len(exploration.results) == len(RUN_POINTS) * (1 + len(RUN_POINTS))
    assert [r.name for r in exploration.results if r.broken] == []
    print(f"\n{len(exploration.results)} Temporal scenarios in {exploration.seconds:.1f} s, all held")


@pytest.mark.skipif(not os.environ.get("LABKIT_SOAK"), reason="every pair on DBOS takes about a minute: make soak")
def test_every_pair_of_kills_on_dbos_holds_every_invariant(tmp_path):
    exploration = explore(tmp_path / "pairs", engine="dbos")
    assert len(exploration.results) == len(RUN_POINTS) * (1 + len(RUN_POINTS))
    assert [r.name for r in exploration.results if r.broken] == []
    print(f"\n{len(exploration.results)} DBOS scenarios in {exploration.seconds:.1f} s, all held")


def test_the_same_invariant_code_catches_a_dbos_step_that_is_not_idempotent(tmp_path):
    """A suite that cannot fail on DBOS proves nothing: a record_evidence step that writes again when replayed."""

    def write_always(coordinator, incident, reading):
        from labkit.database import transaction

        with transaction(coordinator.conn):
            run = coordinator.load_txn(incident)
            coordinator.record_reading_txn(run, reading)  # no look first: a replay finds the run past not_inspected
        return "evidence_recorded"

    folder = tmp_path / "broken"
    folder.mkdir()
    with ticket_service(folder / "tickets.db") as url:
        killed = _run_dbos(folder, INCIDENT, url, CrashPlan(CrashPoint.AFTER_EVIDENCE_COMMIT), write_evidence=write_always)
        assert killed.killed

        def recover() -> None:
            app = IncidentApp(folder, write_evidence=write_always)
            try:
                app.recover()
            except Exception:  # noqa: BLE001 - the replayed step fails; the invariants say what it cost
                pass
            finally:
                app.close()

        in_child(recover)
        dbos = engine("dbos")
        db = dbos.db(folder)
        results = check_invariants(db, call_log_for(db), {INCIDENT: 1}, ReferenceProvider(call_log_for(db)), effects=Tickets(url),
                                   recover_again=lambda: 0)
    broken = {r.number for r in results if not r.held}
    assert {1, 2} <= broken, results  # never completed, no receipt
    assert [w["status"] for w in workflows_of(folder)] == ["ERROR"]


def test_both_scorecards_read_a_dbos_run_as_they_read_a_labkit_one(tmp_path):
    incidents = ReferenceProvider(tmp_path / "probe.log").incidents()[:6]
    scores = {}
    for name in ENGINES:
        folder = tmp_path / name
        folder.mkdir()
        driver = engine(name)
        with ticket_service(folder / "tickets.db") as url:
            end = in_child(lambda: [driver.drive(folder, NO_CRASH, url, incident) for incident in incidents])  # noqa: B023
            assert end.code == 0, end
        scores[name] = evaluation.evaluate(folder / "lab.db", ticket_store=folder / "tickets.db").as_json()
    assert scores["dbos"] == scores["labkit"]
    assert scores["langgraph"] == scores["labkit"]
    assert scores["dbos"]["recovery"]["completed"] == len(incidents)
    assert scores["dbos"]["recovery"]["duplicate_effects"] == 0
    assert scores["dbos"]["task"]["scored"] == len(incidents)  # every run's diagnosis scored against the ground truth


def test_dbos_recovers_a_workflow_only_under_the_application_version_that_started_it(tmp_path):
    folder = tmp_path / "versions"
    folder.mkdir()
    # Started under a version that is not the default, so a process that ignored its version shows.
    assert _run_dbos(folder, INCIDENT, None, CrashPlan(CrashPoint.AFTER_READ), app_version="incidents-2").killed
    assert _recover_dbos(folder, app_version="incidents-1") == []
    [waiting] = workflows_of(folder)
    assert (waiting["status"], waiting["app_version"]) == ("PENDING", "incidents-2")
    assert _recover_dbos(folder, app_version="incidents-2") == [INCIDENT]
    [done] = workflows_of(folder)
    assert done["status"] == "SUCCESS"
    assert CallLog(Paths.of(folder).call_log).reads_of(INCIDENT) == 2  # killed after the provider answered


def test_an_unknown_incident_is_refused_before_dbos_records_anything(tmp_path):
    folder = tmp_path / "unknown"
    folder.mkdir()
    end = _run_dbos(folder, "INC-9999", None)
    assert end.code == 1 and "INC-9999" in end.error and "UnknownIncident" in end.error
    assert workflows_of(folder) == []
    with closing(sqlite3.connect(folder / "lab.db")) as conn:
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0


def test_dbos_refuses_a_business_database_that_is_not_labkits_and_leaves_it_as_it_was(tmp_path):
    folder = tmp_path / "foreign"
    folder.mkdir()
    with closing(sqlite3.connect(folder / "lab.db")) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
        conn.execute("INSERT INTO orders VALUES (1, 9.5)")
        conn.commit()
    before = (folder / "lab.db").read_bytes()
    end = _run_dbos(folder, INCIDENT, None)
    assert end.code == 1 and "NotALabDatabase" in end.error and "orders" in end.error
    assert (folder / "lab.db").read_bytes() == before
    assert not (folder / "dbos-system.sqlite").exists()


def test_bad_engine_options_are_refused_in_one_line(tmp_path):
    with pytest.raises(UnknownEngine, match="unknown engine 'cadence'; choose one of labkit, dbos, temporal, langgraph"):
        engine("cadence")
    with pytest.raises(BadInput, match="the dbos engine has none to break"):
        engine("dbos", bug="no_receipt_key")
    with pytest.raises(BadDbosUrl, match="give sqlite:///PATH or postgresql://"):
        Paths.of(tmp_path, "mysql://db")
    with pytest.raises(BadExploreOption, match="--random: random kills judge"):
        explore(tmp_path / "random", engine="dbos", random_trials=2)
    assert not (tmp_path / "random").exists()
    cli = subprocess.run([sys.executable, "-m", "labkit", "explore", "--db-dir", str(tmp_path / "cli"), "--engine", "cadence"],
                         capture_output=True, text=True, timeout=60)
    assert (cli.returncode, cli.stdout) == (2, "")
    assert cli.stderr.strip().splitlines() == ["labkit: error: unknown engine 'cadence'; choose one of labkit, dbos, temporal, langgraph"]
    assert not (tmp_path / "cli").exists()


def test_a_labkit_error_inside_a_dbos_step_reaches_the_caller_under_its_own_name(tmp_path):
    """DBOS stores a failed step's error and rebuilds it for the caller: labkit's errors survive the trip."""
    folder = tmp_path / "never"
    folder.mkdir()
    end = _run_dbos(folder, INCIDENT, None, write_evidence=lambda coordinator, incident, reading: "evidence_recorded")
    assert end.code == 1
    assert end.error.startswith("StepOrderError: run 'INC-1003' is at 'not_inspected'"), end.error
    assert [w["status"] for w in workflows_of(folder)] == ["ERROR"]


def test_a_new_dbos_system_database_is_what_dbos_migrate_makes_and_an_existing_one_is_left_alone(tmp_path):
    # New system databases start as a copy of a template DBOS migrated once (labkit.engines.dbos._fresh_system_db):
    # the copy must hold the tables, indexes and migration version a system database of DBOS's own making has.
    from dbos import DBOS

    from labkit.engines.dbos import _fresh_system_db

    folder = tmp_path / "run"
    folder.mkdir()
    assert _run_dbos(folder, INCIDENT, None, CrashPlan(CrashPoint.AFTER_READ)).killed
    assert _recover_dbos(folder) == [INCIDENT]
    own = tmp_path / "migrated.sqlite"
    assert in_child(lambda: DBOS.migrate(f"sqlite:///{own}")).code == 0

    def layout(path: Path) -> tuple:
        with closing(sqlite3.connect(path)) as conn:
            return (conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall(),
                    conn.execute("SELECT version FROM dbos_migrations").fetchall())

    assert layout(folder / "dbos-system.sqlite") == layout(own)
    kept = tmp_path / "kept" / "dbos-system.sqlite"
    kept.parent.mkdir()
    kept.write_bytes(b"another process made this first")
    _fresh_system_db(kept, DBOS)
    assert kept.read_bytes() == b"another process made this first"
    assert sorted(p.name for p in kept.parent.iterdir()) == ["dbos-system.sqlite"], "no copy left behind"


_WARM_PROBE = """
import json, logging, os, sys, threading
from labkit.engines import engine

def handlers():
    loggers = [logging.getLogger(), *logging.root.manager.loggerDict.values()]
    return {getattr(log, "name", "?"): len(log.handlers) for log in loggers if getattr(log, "handlers", None)}

chosen = engine(sys.argv[1])
chosen.load()  # what the imports alone leave: the warm run must add nothing to it
before = handlers()
made = []
original = type(chosen).scratch_run

def counted(self, folder):
    made.append(folder)
    original(self, folder)

type(chosen).scratch_run = counted
chosen.warm()
chosen.warm()
print(json.dumps({"scratch_runs": len(made), "threads": [t.name for t in threading.enumerate()],
                  "handlers_added": {name: n for name, n in handlers().items() if before.get(name) != n},
                  "left": sorted(os.listdir(os.environ["TMPDIR"]))}))
"""


@pytest.mark.parametrize("name", ENGINES)
def test_warming_an_engine_runs_it_once_a_process_and_leaves_no_thread_handler_or_folder_behind(name, tmp_path):
    # Engine.warm makes one unarmed run in a scratch folder so that every fork inherits what a first run
    # builds; a thread it left running would be forked in a broken state, and the scratch folder is its own.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run([sys.executable, "-c", _WARM_PROBE, name], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(scratch)})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["scratch_runs"] == 1
    assert seen["threads"] == ["MainThread"]
    # A log handler made here would hold this process's standard error, and a fork would write there:
    # in a notebook, into the cell's output (DBOS adds one when first made; the warm run takes it off).
    assert seen["handlers_added"] == {}
    # DBOS's migrated template system database is kept there on purpose (labkit.engines.dbos._fresh_system_db).
    assert [left for left in seen["left"] if not left.startswith("labkit-dbos-")] == []
