"""The benchmark, ``python -m labkit bench``: its shape, the fairness of its floor, honest peers.

Speed is never asserted here (the machine may be busy): these tests check what the
benchmark claims about itself. Its JSON has the contract's shape; the floor makes as many
commits as labkit, counted two independent ways; a peer that is not installed, or whose
environment is broken, is reported as such rather than left out; and bad settings are
refused before any work. Tiny sizes keep the file fast.
"""

from __future__ import annotations

import json
import math
import os
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from itertools import pairwise
from pathlib import Path

import pytest

import labkit
from labkit.lab import bench
from labkit.store import snapshot

REPO = Path(labkit.__file__).resolve().parent.parent
CONTRACT_FIELDS = {"ms_per_incident", "ratio_to_floor", "bytes_per_incident"}
PARTS = {"provider", "provider_call_log", "evidence_contract", "redaction", "state"}


def bench_json(cli, *args: str, env: dict[str, str] | None = None) -> dict:
    """``bench --json`` through the real command line, one round of two incidents unless ``args`` say otherwise."""
    if "--incidents" not in args:
        args = ("--incidents", "2", *args)
    done = cli("bench", "--json", "--rounds", "1", *args, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1, f"bench --json printed more than one line: {done.stdout!r}"
    result = json.loads(done.stdout)
    assert isinstance(result, dict)
    return result


@pytest.fixture
def python_without_peers(tmp_path: Path) -> Path:
    """A real interpreter with nothing installed: a fresh venv without even pip."""
    folder = tmp_path / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    return folder / "bin" / "python"


def test_bench_json_has_the_contract_shape(cli):
    result = bench_json(cli, "--incidents", str(len(labkit.list_incidents())))
    assert result["cores"] == os.cpu_count()
    assert result["incidents"] == len(labkit.list_incidents())
    assert result["rounds"] == 1
    assert set(result["systems"]) == {*bench.FLOORS, "labkit"}, "without --peers only the floors and labkit run"
    for name, entry in result["systems"].items():
        assert CONTRACT_FIELDS <= set(entry), name
        assert entry["ms_per_incident"] > 0 and entry["bytes_per_incident"] > 0, (name, entry)
        assert entry["incidents_per_second"] == pytest.approx(1000 / entry["ms_per_incident"], rel=0.01)
    assert result["systems"]["floor"]["ratio_to_floor"] == 1.0
    assert result["systems"]["labkit"]["ratio_to_floor"] > 0
    assert set(result["labkit_parts"]) == PARTS
    assert set(result["labkit_steps"]) == {"evidence_contract_full", "redaction_fresh", "provider_sleep_zero"}
    # each step as it was, timed in the same rounds (a sleep(0) on an idle machine may round to 0.000 ms)
    assert result["labkit_steps"]["evidence_contract_full"]["ms_per_incident"] > 0
    assert result["labkit_steps"]["redaction_fresh"]["ms_per_incident"] > 0
    assert all(part["ms_per_incident"] > 0 for name, part in result["labkit_parts"].items() if name != "state")


def test_the_table_names_every_system_and_the_core_count(cli):
    done = cli("bench", "--rounds", "1", "--incidents", "2")
    assert done.returncode == 0, done.stderr
    assert f"{os.cpu_count()} cores" in done.stdout and "2 incidents a round" in done.stdout
    labels = ("floor: bare sqlite3", "floor + call log", "labkit's SQL replayed", "labkit: coordinator", "provider:",
              "fsync'd call log", "evidence contract", "redaction", "state machine", "was: jsonschema's walk on every read",
              "was: nothing remembered", "no longer in it: sleep(0) a read")
    for label in labels:
        assert label in done.stdout, label
    assert "dbos, langgraph: not run (add --peers" in done.stdout
    assert "each system's file is made, its schema created and its log checkpointed before the clock starts" in done.stdout


def _row_numbers(table: str, label: str) -> list[str]:
    [line] = [line for line in table.splitlines() if line.startswith(label)]
    return line[len(label):].split()


def test_the_table_shows_four_floors_as_lines_with_ratios_computed_from_the_rows(cli):
    """Every row's "x floor + log" is its ms per incident over the "floor + call log" row's, as printed."""
    done = cli("bench", "--rounds", "1", "--incidents", "3")
    assert done.returncode == 0, done.stderr
    labels = bench.SYSTEM_LABELS
    base = float(_row_numbers(done.stdout, labels["floor_call_log"])[0])
    assert _row_numbers(done.stdout, labels["floor_call_log"])[2] == "1.00x"
    for name in ("floor", "labkit_sql_replayed", "labkit"):
        ms, _floor_ratio, log_ratio = _row_numbers(done.stdout, labels[name])[:3]
        # The printed ms are rounded to 3 places: the ratio must agree with them to that precision.
        assert float(log_ratio.rstrip("x")) == pytest.approx(float(ms) / base, abs=0.01 + 0.001 / base), name


def test_the_call_log_ratio_is_each_rows_ms_over_the_floor_with_the_log():
    systems = {"floor": {"ms_per_incident": 1.0}, "floor_call_log": {"ms_per_incident": 2.0},
               "labkit": {"ms_per_incident": 2.9}, "dbos": {"error": "not installed"}}
    bench.add_call_log_ratios(systems)
    assert [systems[name].get("ratio_to_floor_call_log") for name in systems] == [0.5, 1.0, 1.45, None]


def test_the_replay_runs_labkits_statements_and_stores_what_labkit_stored(tmp_path: Path):
    """The replayed SQL is labkit's: run on a fresh database it leaves the rows labkit left, no Python of labkit's needed."""
    plans = bench.calibrate(tmp_path, ["INC-1001", "INC-1002"])
    assert all(plan.statements.count("BEGIN IMMEDIATE") == len(plan.commits) for plan in plans)
    sample = bench.replay_round(tmp_path / "replayed.db", plans)
    assert sample.logged is not None and sample.logged[0] == sum(len(plan.commits) for plan in plans)
    with closing(labkit.connect(tmp_path / "calibration.db")) as made, closing(labkit.connect(tmp_path / "replayed.db")) as replayed:
        assert snapshot(made) == snapshot(replayed)
    calls = (tmp_path / "replayed.db.calls.jsonl").read_text().splitlines()
    assert [json.loads(line)["incident"] for line in calls] == ["INC-1001", "INC-1002"], "one fsync'd call log line a read"


def test_the_floor_makes_labkits_commits_counted_two_ways(tmp_path: Path):
    """The floor's commits come from the write-ahead log of a labkit run; check them against its statements."""
    plan = bench.calibrate(tmp_path, ["INC-1001"])[0]
    db = tmp_path / "traced.db"
    statements: list[str] = []
    with closing(labkit.connect(db)) as conn:
        conn.set_trace_callback(statements.append)
        labkit.Coordinator(conn, labkit.ReferenceProvider(labkit.call_log_for(db))).drive("INC-1001")
        conn.set_trace_callback(None)
    control = [s for s in statements if s in ("BEGIN IMMEDIATE", "BEGIN DEFERRED", "COMMIT", "ROLLBACK")]
    committed_writes = sum(1 for first, then in pairwise(control) if (first, then) == ("BEGIN IMMEDIATE", "COMMIT"))
    assert committed_writes > 0
    assert len(plan.commits) == committed_writes, (
        f"calibration counted {len(plan.commits)} commits in the log; labkit committed {committed_writes} write transactions"
    )
    # The bytes: at least the evidence body and the report that labkit stored for it.
    with closing(sqlite3.connect(tmp_path / "calibration.db")) as raw:
        body, report = raw.execute(
            "SELECT length(CAST(e.body AS BLOB)), length(CAST(r.report AS BLOB)) FROM evidence e JOIN receipts r USING (incident)"
        ).fetchone()
    assert sum(plan.commits) >= body + report
    assert plan.report["incident"] == "INC-1001" and json.loads(plan.response)["incident"] == "INC-1001"


def test_labkit_through_the_timed_provider_writes_what_it_writes_without_it(tmp_path: Path):
    """The bench measures labkit as it is: timing the provider changes none of the rows labkit stores."""
    stored = []
    for timed in (False, True):
        db = tmp_path / f"timed-{timed}.db"
        provider = labkit.ReferenceProvider(labkit.call_log_for(db))
        with closing(labkit.connect(db)) as conn:
            coordinator = labkit.Coordinator(conn, bench.TimedProvider(provider) if timed else provider, clock=labkit.TickingClock())
            coordinator.drive("INC-1001")
            stored.append(snapshot(conn))
    assert stored[0] == stored[1]
    assert stored[0]["evidence"], "nothing was stored"


def test_in_one_run_the_floor_and_labkit_make_the_same_commits():
    result = bench.run_benchmark(rounds=1, incidents=2)
    floor, lab = result["systems"]["floor"], result["systems"]["labkit"]
    assert result["incidents"] == 2
    assert floor["commits_per_incident"] == lab["commits_per_incident"] > 0
    # The floor really stored the payload: its pages hold at least those bytes.
    assert floor["bytes_per_incident"] >= floor["payload_bytes_per_incident"] == lab["payload_bytes_per_incident"] > 1000


def test_wal_counts_counts_commits_and_notices_a_restarted_log(tmp_path: Path):
    db = tmp_path / "plain.db"
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE t (x TEXT)")
        bench.settle(db)
        assert bench.wal_counts(db) == (0, 0)
        for _ in range(5):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t VALUES (?)", ("y" * 5000,))  # two pages: one is an overflow page
            conn.execute("COMMIT")
        counted = bench.wal_counts(db)
        assert counted is not None and counted[0] == 5 and counted[1] >= 10
        # Once every frame is checkpointed the next writer starts the log again from its beginning:
        # the commits before are gone, and the count must say so rather than undercount.
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        conn.execute("INSERT INTO t VALUES ('z')")
        assert bench.wal_counts(db) is None


def test_a_peer_that_is_not_installed_is_reported_not_left_out(cli, python_without_peers: Path):
    env = {bench.PEER_PYTHON_ENV: str(python_without_peers)}
    result = bench_json(cli, "--peers", env=env)
    assert result["systems"]["dbos"] == {"error": "not installed"}
    assert result["systems"]["langgraph"] == {"error": "not installed"}
    assert result["systems"]["labkit"]["ms_per_incident"] > 0, "the others still run"
    table = cli("bench", "--peers", "--rounds", "1", "--incidents", "1", env=env)
    assert table.returncode == 0, table.stderr
    assert re.search(r"^dbos\s+not installed$", table.stdout, re.M) and re.search(r"^langgraph\s+not installed$", table.stdout, re.M)


@pytest.mark.parametrize("content, reason", [
    ("#!/bin/sh\necho 'this is not a Python' >&2\nexit 3\n", "the peers' process stopped: this is not a Python"),
    ("\x7fELF but not really", "the peers' interpreter did not start: Exec format error"),
])
def test_a_broken_peer_environment_is_reported_and_the_rest_still_runs(cli, tmp_path: Path, content: str, reason: str):
    broken = tmp_path / "python"
    broken.write_text(content)
    broken.chmod(0o755)
    result = bench_json(cli, "--peers", env={bench.PEER_PYTHON_ENV: str(broken)})
    for name in ("dbos", "langgraph"):
        assert result["systems"][name] == {"error": reason}
    assert result["systems"]["floor"]["ms_per_incident"] > 0 and result["systems"]["labkit"]["ms_per_incident"] > 0


def test_a_scratch_folder_in_memory_is_pointed_out(cli):
    shm = Path("/dev/shm")
    if bench.filesystem_of(shm) != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm on this machine")
    done = cli("bench", "--rounds", "1", "--incidents", "1", env={"TMPDIR": str(shm)})
    assert done.returncode == 0, done.stderr
    assert "warning: the scratch folder is in memory (tmpfs)" in done.stdout
    on_disk = REPO / "build" / "bench-scratch"  # build/ is ignored by git and removed by `make clean`
    on_disk.mkdir(parents=True, exist_ok=True)
    if bench.filesystem_of(on_disk) not in ("tmpfs", "ramfs"):
        assert "warning" not in cli("bench", "--rounds", "1", "--incidents", "1", env={"TMPDIR": str(on_disk)}).stdout


@pytest.mark.skipif(not bench.DEFAULT_PEER_PYTHON.is_file(), reason="the peers are installed by `make bench` (into .venv/bench)")
def test_installed_peers_run_the_same_workflow(tmp_path: Path):
    result = bench.run_benchmark(rounds=1, incidents=2, peers=True)
    pins = dict(line.split("==") for line in (REPO / "requirements-bench.txt").read_text().splitlines() if "==" in line)
    response = sum(len(plan.response) for plan in bench.calibrate(tmp_path, labkit.list_incidents()[:2])) / 2
    for name in ("dbos", "langgraph"):
        entry = result["systems"][name]
        assert "error" not in entry, entry
        assert entry["version"] == pins[name]
        assert entry["ms_per_incident"] > 0 and entry["commits_per_incident"] >= 2, entry  # at least the two steps
        assert entry["bytes_per_incident"] >= response, f"{name} stored less than the evidence it read: {entry}"
        assert entry["durability"].startswith("WAL") and "synchronous=FULL" in entry["durability"]


@pytest.mark.parametrize("args, words", [
    (("--rounds", "0"), ("--rounds",)),
    (("--rounds", "many"), ("--rounds",)),
    (("--rounds", "1", "--bogus"), ("--bogus",)),
    (("--incidents", "0"), ("--incidents",)),
    (("--incidents", "100000"), ("--incidents",)),
    (("--incidents", "1", "--incidents", "2"), ("--incidents", "more than once")),
])
def test_bad_options_are_refused_in_one_line(cli_main, refused, args, words):
    refused(cli_main("bench", *args), *words)


@pytest.mark.parametrize("where", ["missing", "folder"])
def test_a_peer_interpreter_that_does_not_exist_is_bad_input(cli_main, refused, tmp_path: Path, where: str):
    path = tmp_path / "no-such-python" if where == "missing" else tmp_path
    refused(cli_main("bench", "--peers", env={bench.PEER_PYTHON_ENV: str(path)}), bench.PEER_PYTHON_ENV)


def test_the_scale_table_times_every_command_and_prints_the_exponent_of_its_rows(tmp_path: Path):
    """Real commands on seeded runs at two tiny sizes: each checked for its work (scale.py raises if not), each exponent
    the printed times' (rounded to 10 ms: the exponent of the times they stand for lies between the extremes below,
    which at a few hundredths of a second, the suite's warm children, are far apart)."""
    from labkit.lab import scale

    told: list[scale.Timing] = []
    timings, startup = scale.measure((4, 8), tmp_path, progress=told.append)
    assert told == timings and {(t.command, t.runs) for t in timings} == {(c, n) for c in scale.COMMANDS for n in (4, 8)}
    table = scale.scale_table(timings, startup)
    for command in scale.COMMANDS:
        [line] = [line for line in table.splitlines() if line.startswith(command + " ")]
        first, _s, last, _s2, exponent = line[len(command):].split()[:5]
        low, high = (math.log((float(last) + d) / (float(first) - d)) / math.log(2) for d in (-0.005, 0.005))
        assert low - 0.005 <= float(exponent) <= high + 0.005, line  # and the exponent is itself rounded to 0.01


def test_the_less_start_up_exponent_is_left_out_where_either_time_is_mostly_start_up():
    """A busy machine once timed the larger size at under one start-up (0.99 s, then 0.16 s, start-up 0.19 s): the
    column says '-' rather than taking the log of a negative time; where both are mostly work it is their exponent."""
    from labkit.lab import scale

    def row(command: str, first: float, last: float) -> list[str]:
        timings = [scale.Timing(c, n, first if n == 4 else last) for c in scale.COMMANDS for n in (4, 8)]
        [line] = [line for line in scale.scale_table(timings, 0.19).splitlines() if line.startswith(command + " ")]
        return line.split()

    assert row("evaluate", 0.99, 0.16)[-1] == "-"  # 0.16 - 0.19 < 0
    assert row("evaluate", 0.99, 0.35)[-1] == "-"  # the larger under twice the start-up
    assert row("evaluate", 0.30, 2.00)[-1] == "-"  # the smaller under twice the start-up
    assert float(row("evaluate", 0.59, 0.99)[-1]) == pytest.approx(math.log(0.80 / 0.40) / math.log(2), abs=0.01)


def test_seeded_runs_are_labkits_own_rows(tmp_path: Path):
    """The scale's seed is labkit's create_run_txn: the runs it leaves are what `labkit run` leaves before its first read."""
    from labkit.lab import scale

    scale.seed_runs(tmp_path / "seeded.db", 3)
    with closing(labkit.connect(tmp_path / "seeded.db")) as conn:
        rows = snapshot(conn)
    assert [(row[0], row[2], row[3]) for row in rows["runs"]] == [(scale.scale_id(n), "not_inspected", 0) for n in range(3)]
    assert len(rows["transitions"]) == 3 and not rows["evidence"]
